"""What a finished run left: its last checkpoint and results, and exact comparisons of them."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())["metrics"]


def load_checkpoint(path: Path) -> dict:
    """A checkpoint file as any trainwell checkpoint must load: weights only, on the CPU."""
    return torch.load(path, map_location="cpu", weights_only=True)


def final_state(run_dir: Path) -> dict:
    return load_checkpoint(run_dir / "checkpoints" / "last.ckpt")


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return final_state(run_dir)["state_dict"]


def assert_bitwise_equal(got: dict, want: dict) -> None:
    assert got["global_step"] == want["global_step"]
    assert got["state_dict"].keys() == want["state_dict"].keys()
    for key, value in want["state_dict"].items():
        assert torch.equal(got["state_dict"][key], value), key
    for g, w in zip(got["optimizer_states"], want["optimizer_states"], strict=True):
        for pid, state in w["state"].items():
            for name, tensor in state.items():
                assert torch.equal(torch.as_tensor(g["state"][pid][name]), torch.as_tensor(tensor))
    assert got["lr_schedulers"] == want["lr_schedulers"]


def assert_same_results_elsewhere(got: dict, want: dict) -> None:
    """A resume into another dir gives the uninterrupted run's results: its best (score, epoch,
    the best checkpoint's test metrics), its last validation, its end."""
    assert got["metrics"] == want["metrics"]
    assert got["metrics_last"] == want["metrics_last"]
    assert got["best_epoch"] == want["best_epoch"]
    assert got["finished_at"] == want["finished_at"]
