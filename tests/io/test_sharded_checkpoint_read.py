"""A sharded checkpoint directory (FSDP, save_distributed_checkpoint=true) reads like a file:
meta.pt weights-only, the weights' keys and shapes from the shards' metadata."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from trainwell.io.checkpoint_read import CheckpointError, load_checkpoint_file
from trainwell.training.resume import find_newest_checkpoint


def _sharded(path: Path, step: int) -> Path:
    weights = {"net.weight": torch.randn(3, 4), "net.bias": torch.randn(3)}
    dcp.save({"state_dict": weights}, checkpoint_id=str(path))  # one process: no group needed
    torch.save(
        {"global_step": step, "loops": {}, "hyper_parameters": {"lr": 0.1}}, path / "meta.pt"
    )
    return path


def test_a_sharded_directory_reads_as_meta_and_weight_shapes(tmp_path: Path) -> None:
    state = load_checkpoint_file(_sharded(tmp_path / "last.ckpt", step=7))
    assert state["global_step"] == 7 and state["hyper_parameters"] == {"lr": 0.1}
    shapes = {k: tuple(v.shape) for k, v in state["state_dict"].items()}
    assert shapes == {"net.weight": (3, 4), "net.bias": (3,)}


def test_resume_auto_ranks_sharded_directories_by_progress(tmp_path: Path) -> None:
    _sharded(tmp_path / "step-0000003.ckpt", step=3)
    _sharded(tmp_path / "last.ckpt", step=9)
    assert find_newest_checkpoint(tmp_path) == tmp_path / "last.ckpt"


def test_a_sharded_directory_with_damaged_shard_metadata_is_one_line(tmp_path: Path) -> None:
    path = _sharded(tmp_path / "last.ckpt", step=1)
    (path / ".metadata").write_bytes(b"not a metadata file")
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint_file(path)
