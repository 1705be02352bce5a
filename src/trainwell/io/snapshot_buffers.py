"""Host buffers that checkpoint snapshots reuse, so a save copies the state instead of allocating it.

A background save copies every tensor of the checkpoint before the next step changes them in
place. On the CPU, when that copy needs fresh memory (best.ckpt and last.ckpt at the same epoch
end: the second snapshot is taken while the first still waits for its write), a ResNet-18 state
(~90 MB with its momentum buffers) costs the training thread ~40 ms of page faults on top of the
~10 ms copy: memory freed in blocks that large goes back to the operating system. Copying into
the buffers of snapshots whose writes have finished costs the copy alone
(`benchmarks/pace.py epoch`). GPU tensors are not pooled: the caching allocator already reuses
device memory, and a kept device copy would hold memory the activations could use.
"""

from __future__ import annotations

import threading

import torch


def _poolable(tensor: torch.Tensor) -> bool:
    # A plain dense CPU tensor, copied value for value by copy_; anything else (subclasses such
    # as DTensor, sparse or quantized layouts, lazily conjugated views) is cloned as before.
    return (
        type(tensor) is torch.Tensor
        and tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.is_quantized
        and not tensor.is_conj()
        and not tensor.is_neg()
    )


def _fits(buffer: torch.Tensor, tensor: torch.Tensor) -> bool:
    return (
        buffer.dtype == tensor.dtype
        and buffer.shape == tensor.shape
        and buffer.stride() == tensor.stride()
    )


class SnapshotBuffers:
    """The buffers of snapshots whose writes have finished, at most `keep` sets of them.

    `lease()` hands the training thread one free set (or none); `Lease.copy` copies each tensor
    into the next buffer of that set when it has the same dtype, shape and strides, else clones
    it; the writer thread returns the lease once the file is written, and only then can its
    buffers be written into again.
    """

    def __init__(self, keep: int = 2) -> None:
        self.keep = max(0, int(keep))
        self._free: list[list[torch.Tensor]] = []
        self._lock = threading.Lock()

    def lease(self) -> Lease:
        with self._lock:
            reused = self._free.pop() if self._free else []
        return Lease(self, reused)

    def give_back(self, buffers: list[torch.Tensor]) -> None:
        if not buffers:
            return
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(buffers)

    def clear(self) -> None:
        with self._lock:
            self._free.clear()


class Lease:
    """The buffers one snapshot copies into, in the order its tensors are visited."""

    def __init__(self, pool: SnapshotBuffers, reused: list[torch.Tensor]) -> None:
        self._pool = pool
        self._reused = reused
        self._used: list[torch.Tensor] = []

    def copy(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy of `tensor` that later in-place changes of it do not reach."""
        source = tensor.detach()
        if not _poolable(source):
            return source.clone()
        index = len(self._used)
        if index < len(self._reused) and _fits(self._reused[index], source):
            buffer = self._reused[index].copy_(source)
        else:
            buffer = source.clone()
        self._used.append(buffer)
        return buffer

    def give_back(self) -> None:
        """From the writer thread, after the snapshot is written (or its write failed)."""
        used, self._used, self._reused = self._used, [], []
        self._pool.give_back(used)
