"""Checkpoint files, written atomically (a kill never destroys the last good one) and off the
training thread.

Lightning writes through fsspec's transaction into a temp file under /tmp and then *moves* it;
across filesystems that is a copy, so a kill mid-copy leaves a truncated `last.ckpt`.
`AtomicCheckpointIO` writes a temp file next to the target, fsyncs it and renames. Its reads go
through io/checkpoint_read.py (weights_only=True); every write keeps the hparams plain data
(io/hparams.py), so trainwell never refuses a checkpoint it wrote.

Writing a ResNet-18 checkpoint (~90 MB) with fsync takes ~250 ms, twice per epoch (best + last):
on a GPU that trains an epoch in ~1.5 s, a fifth of the time. So a save only *snapshots* the
state (a copy of every tensor on its own device, taken in the training thread before the next
step can change the weights in place) and one writer thread writes the snapshots, in order.
"""

from __future__ import annotations

import errno
import io
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning_utilities.core.apply_func import apply_to_collection

from trainwell.errors import TrainwellError
from trainwell.io.announce import announce
from trainwell.io.checkpoint_read import (
    CheckpointError,
    load_checkpoint_file,
    read_checkpoint,
    with_current_callback_names,
)
from trainwell.io.checkpoint_state import PLAIN_LEAVES, first_difference, is_numpy_scalar
from trainwell.io.hparams import plain_checkpoint
from trainwell.io.snapshot_buffers import Lease, SnapshotBuffers

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    # On a GPU the copy is queued on the training stream: it sees the weights exactly as the step
    # that just ended left them, and the next step's in-place updates come after it.
    return tensor.detach().clone()


_IMMUTABLE = PLAIN_LEAVES - {bytearray}


def snapshot(checkpoint: Any, copy: Callable[[torch.Tensor], torch.Tensor] = _copy) -> Any:
    """A copy of the checkpoint that later training cannot change: new containers, new tensors
    (each made by `copy`: a clone, or a copy into a reused buffer, io/snapshot_buffers.py).

    Plain dicts, lists and tuples (nearly all of a checkpoint) are walked directly; any other
    collection goes through Lightning's apply_to_collection, which keeps its type. The direct
    walk matters on small models, where apply_to_collection's generic checks cost more than
    copying the tensors.
    """
    kind = type(checkpoint)
    if kind is dict or kind is OrderedDict:
        return kind((k, snapshot(v, copy)) for k, v in checkpoint.items())
    if kind is list:
        return [snapshot(v, copy) for v in checkpoint]
    if kind is tuple:
        if all(type(v) in _IMMUTABLE for v in checkpoint):
            return checkpoint  # nothing in it can change (the 625 ints of a Python RNG state)
        return tuple(snapshot(v, copy) for v in checkpoint)
    if isinstance(checkpoint, torch.Tensor):
        return copy(checkpoint)
    if kind in _IMMUTABLE or isinstance(checkpoint, np.generic):
        return checkpoint
    if kind is np.ndarray or kind is bytearray:  # a datamodule may change it in place
        return checkpoint.copy()
    return apply_to_collection(checkpoint, torch.Tensor, copy)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Temp file in the target's directory + fsync + os.replace: the old file or the new one,
    never half of one. Loads always use weights_only=True, whatever the caller asked for.

    With `background=True` (the template turns it on for the training loop only, see
    `BackgroundCheckpointWrites`: a save outside it, e.g. `trainer.save_checkpoint()` after fit
    followed by a read of the file, is written before the call returns) saves return after the
    snapshot:
    * one writer thread, first in first out: never two writes of one file at once, and a removal
      (ModelCheckpoint deleting the previous top-k file) runs only after the newer file is on
      disk, so at every moment one complete checkpoint of that kind exists;
    * at most `max_pending` snapshots wait in memory (a save beyond that waits for the oldest);
    * after a failed write nothing queued behind it runs (a removal of the previous good file
      least of all), and the error is raised in the training thread at the next save, at
      `flush()` or at teardown (the end of fit, or of a crash), which waits for every write.
    Pre-emption calls `flush()` before it exits: the checkpoint is on disk when the process ends.
    """

    def __init__(self, background: bool = False, max_pending: int = 2) -> None:
        super().__init__()
        self.background = background
        self.max_pending = max(1, int(max_pending))
        # The run's resolved config ({"model": ..., "data": ...}): an object among the hparams is
        # recorded as its config node; without it (the doctor, a bare Trainer) as a description.
        self.hparams_config: Mapping[str, Any] | None = None
        self._said_hparams = False
        self.rehearsal: Rehearsal | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pending: deque[Future[None]] = deque()
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        # Buffers of written snapshots, copied into by the next ones (CPU tensors only).
        self._buffers = SnapshotBuffers(keep=self.max_pending)

    # -- the training thread's side ------------------------------------------------------------
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if self.rehearsal is not None:  # the step-0 check: nothing is written
            self.rehearsal.run(self, checkpoint)
            return
        self._raise_failure()
        checkpoint = self.prepare(checkpoint)
        if not self.background:
            self._write_atomic(checkpoint, Path(path))
            return
        while len(self._pending) >= self.max_pending:
            self._pending.popleft().result()
        lease = self._buffers.lease()
        self._submit(self._write_snapshot, snapshot(checkpoint, lease.copy), Path(path), lease)

    def prepare(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        """`checkpoint` as plain data, as every save writes it.

        Every checkpoint passes here (ModelCheckpoint, last/step, pre-emption, the doctor's round
        trip, the step-0 check), so none can hold pickled hparams or numpy values that a
        weights-only load refuses (io/hparams.py, io/checkpoint_state.py)."""
        checkpoint, converted = plain_checkpoint(checkpoint, self.hparams_config)
        if converted and not self._said_hparams:
            self._said_hparams = True
            announce(
                "checkpoints keep these hparams as plain data (a run rebuilds its module from the "
                f"config, never from them): {', '.join(converted)}"
            )
        return checkpoint

    @contextmanager
    def rehearsing(
        self, extra: Mapping[str, Any] | None = None, payloads: bool = True
    ) -> Iterator[Rehearsal]:
        """Inside: a save writes nothing and reads itself back instead (callbacks/
        checkpoint_rehearsal.py), with `extra` entries added to the checkpoint. The outcome is
        kept, not raised, so that every rank reaches the save's barrier. `payloads=False`: tensors
        (and numpy arrays' data) travel as stand-ins of their dtype and shape (see Rehearsal)."""
        self.rehearsal = Rehearsal(extra, payloads)
        try:
            yield self.rehearsal
        finally:
            self.rehearsal = None

    def remove_checkpoint(self, path: Any) -> None:
        if not self.background:
            super().remove_checkpoint(path)
            return
        self._raise_failure()
        self._submit(super().remove_checkpoint, path)

    def flush(self) -> None:
        """Wait until every queued write and removal is done; raise the first failure."""
        while self._pending:
            self._pending.popleft().result()
        self._raise_failure()

    def teardown(self) -> None:
        try:
            self.flush()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            self._buffers.clear()

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-writer")
        self._pending.append(self._executor.submit(self._run, fn, *args))

    def _raise_failure(self) -> None:
        if self._error is None:
            return
        while self._pending:  # what was queued behind the failure is skipped; let it finish
            self._pending.popleft().result()
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error

    # -- the writer thread's side --------------------------------------------------------------
    def _run(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            if self._error is not None:
                return  # a failure earlier in the queue: write and remove nothing after it
        try:
            fn(*args)
        except BaseException as err:  # handed to the training thread by _raise_failure
            with self._lock:
                self._error = err

    def _write_snapshot(self, checkpoint: dict[str, Any], target: Path, lease: Lease) -> None:
        try:
            self._write_atomic(checkpoint, target)
        finally:
            lease.give_back()  # written (or failed): its buffers may take the next snapshot

    def _write_atomic(self, checkpoint: dict[str, Any], target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                self._write(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            if err.errno in _DISK_FULL:
                raise CheckpointError(
                    f"no space left on device while writing {target} ({os.strerror(err.errno)}); "
                    "the previous checkpoints are intact: free space, or move the run dir to a "
                    "larger disk and point hydra.run.dir at it; then resume=auto"
                ) from err
            raise
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _write(self, checkpoint: dict[str, Any], file: IO[bytes]) -> None:
        """Serialise into the file (a seam for tests that kill the process mid-write).

        Streamed, not built in memory first: from the writer thread, a 90 MB in-memory copy is
        made holding Python's GIL, which stalls the training thread's kernel launches for as
        long; the file's own writes release it. torch.save reports a failed write as a
        RuntimeError ("unexpected pos ...") that no longer says the disk is full, so the
        OSError behind it is kept and raised instead.
        """
        recording = _ErrorKeepingFile(file)
        try:
            torch.save(checkpoint, recording)
        except Exception:
            if recording.error is not None:
                raise recording.error from None
            raise

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        # Every resume passes here: the states of renamed callbacks find their callbacks.
        return with_current_callback_names(
            load_checkpoint_file(path, map_location=map_location or "cpu")
        )


REHEARSAL = Path("<the checkpoint written before step 1, in memory>")


class Rehearsal:
    """One save made into memory and read back by the loader every reader uses
    (io/checkpoint_read.py): what would stop a later resume, eval, predict or export stops here.

    `error`: None, or the one-line error (a value only pickled code could save, named by key
    path and type; or a value that comes back as another type, dtype, shape or other bits).
    `loaded`: the checkpoint as a reader gets it.

    With `payloads=False` (the run's step-0 check) every tensor goes through the save and the
    load as a stand-in of its dtype and shape over one element (a zero-stride view), and every
    numpy array as one element of its dtype: tensors always save, what can fail is the rest (the
    structure, the types, the non-tensor values, a numpy array's dtype), and that is all the round
    trip then carries. Its memory is that of the non-tensor state, not of the checkpoint; `loaded`
    holds the stand-ins.
    """

    def __init__(self, extra: Mapping[str, Any] | None = None, payloads: bool = True) -> None:
        self.extra = dict(extra or {})
        self.payloads = payloads
        self.error: TrainwellError | None = None
        self.loaded: dict[str, Any] | None = None
        self.bytes = 0

    def run(self, writer: AtomicCheckpointIO, checkpoint: dict[str, Any]) -> None:
        checkpoint = {**checkpoint, **self.extra}
        try:
            prepared = writer.prepare(checkpoint)
            if not self.payloads:
                prepared = _without_payloads(prepared)
            buffer = io.BytesIO()
            writer._write(prepared, buffer)
            self.bytes = buffer.tell()
            buffer.seek(0)
            self.loaded = read_checkpoint(buffer, REHEARSAL)
            del buffer, prepared
            expected, _ = plain_checkpoint(checkpoint, writer.hparams_config, encode=False)
            if not self.payloads:
                expected = _without_payloads(expected)
            differs = first_difference(expected, self.loaded, array_bits=self.payloads)
            if differs:
                raise CheckpointError(
                    f"a checkpoint does not read back as it was saved ({differs}); "
                    "save it as a tensor, a numpy array or a plain list"
                )
        except TrainwellError as err:  # the user's state: reported by the caller, on every rank
            self.error = err


def _without_payloads(value: Any) -> Any:
    """An encoded checkpoint (plain containers only) with every tensor as a `_stand_in` and every
    numpy array stored as it is as one element of its dtype (numpy pickles an array's whole data,
    and its dtype is what the weights-only allowlist judges); a numpy scalar keeps its few bytes
    (its value is compared to the bit). The checkpoint it is compared with gets the same."""
    kind = type(value)
    if kind is np.ndarray and value.dtype.isnative and value.size > 1:
        return np.zeros((1,) * value.ndim, dtype=value.dtype)
    if kind is dict or kind is OrderedDict:
        if is_numpy_scalar(value):
            return value
        return kind((k, _without_payloads(v)) for k, v in value.items())
    if kind is list or kind is tuple:
        return kind(_without_payloads(v) for v in value)
    return _stand_in(value) if isinstance(value, torch.Tensor) else value


def _stand_in(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor of `tensor`'s dtype and shape over a one-element storage (zero strides): what
    torch.save writes of it is its metadata and one element. A tensor of another kind (sparse,
    quantized, a subclass) goes as it is."""
    if tensor.layout != torch.strided or tensor.is_quantized or not _plain(tensor):
        return tensor
    return torch.zeros((), dtype=tensor.dtype).expand(tensor.shape)


def _plain(tensor: torch.Tensor) -> bool:
    return type(tensor) in (torch.Tensor, torch.nn.Parameter)


class _ErrorKeepingFile:
    """The file-like object torch.save writes to, remembering the OSError of a failed write."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._file.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self._file.flush()


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (a power cut after os.replace could otherwise undo it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
