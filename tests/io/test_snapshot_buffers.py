"""Background saves copy CPU tensors into the buffers of snapshots already written, never into
those of a snapshot still waiting for its write, and the files hold the state at save time."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.state import load_checkpoint
from tests.io.test_checkpoint_io import GatedIO
from trainwell.io.snapshot_buffers import SnapshotBuffers

pytestmark = pytest.mark.engine


def model_state(value: float) -> dict:
    return {
        "state_dict": {"w": torch.full((3, 4), value), "b": torch.full((4,), value)},
        "optimizer_states": [{"state": {0: {"momentum_buffer": torch.full((3, 4), -value)}}}],
        "global_step": int(value),
    }


def test_a_written_snapshot_lends_its_buffers_to_the_next(tmp_path: Path) -> None:
    io = GatedIO(max_pending=2)
    io.gate.set()
    io.save_checkpoint(model_state(1.0), tmp_path / "a.ckpt")
    io.flush()
    (first,) = io._buffers._free
    pointers = [t.data_ptr() for t in first]
    io.save_checkpoint(model_state(2.0), tmp_path / "b.ckpt")
    io.flush()
    (second,) = io._buffers._free
    assert [t.data_ptr() for t in second] == pointers  # copied into, not allocated again
    a, b = load_checkpoint(tmp_path / "a.ckpt"), load_checkpoint(tmp_path / "b.ckpt")
    assert torch.equal(a["state_dict"]["w"], torch.full((3, 4), 1.0))
    assert torch.equal(b["state_dict"]["w"], torch.full((3, 4), 2.0))
    momentum = b["optimizer_states"][0]["state"][0]["momentum_buffer"]
    assert torch.equal(momentum, torch.full((3, 4), -2.0))
    io.teardown()
    assert io._buffers._free == []


def test_a_snapshot_waiting_for_its_write_keeps_its_buffers(tmp_path: Path) -> None:
    io = GatedIO(max_pending=4)
    io.gate.set()
    io.save_checkpoint(model_state(1.0), tmp_path / "warm.ckpt")
    io.flush()
    io.gate.clear()
    io.started.clear()
    state = model_state(2.0)
    io.save_checkpoint(state, tmp_path / "a.ckpt")  # takes the free buffers, held at the gate
    assert io.started.wait(timeout=30)  # its write has begun: it is at the gate
    state["state_dict"]["w"].add_(100.0)  # the next optimizer step, in place
    io.save_checkpoint(model_state(3.0), tmp_path / "b.ckpt")  # must not write into a's buffers
    io.gate.set()
    io.flush()
    assert torch.equal(
        load_checkpoint(tmp_path / "a.ckpt")["state_dict"]["w"], torch.full((3, 4), 2.0)
    )
    assert torch.equal(
        load_checkpoint(tmp_path / "b.ckpt")["state_dict"]["w"], torch.full((3, 4), 3.0)
    )
    io.teardown()


def test_a_tensor_of_another_layout_is_cloned_and_kept_apart() -> None:
    pool = SnapshotBuffers(keep=1)
    lease = pool.lease()
    square = torch.arange(16.0).reshape(4, 4)
    lease.copy(square)
    lease.give_back()
    lease = pool.lease()
    transposed = torch.arange(16.0).reshape(4, 4).t()  # same shape, other strides
    copy = lease.copy(transposed)
    assert torch.equal(copy, transposed) and copy.stride() == transposed.stride()
    half = lease.copy(torch.ones(4, 4, dtype=torch.float16))
    assert half.dtype == torch.float16
    lease.give_back()
    assert [t.stride() for t in pool._free[0]] == [transposed.stride(), (4, 1)]
