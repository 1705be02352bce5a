"""A tiny CIFAR-10 in the real on-disk format (cifar-10-batches-py pickles), for torchvision's loader."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest
from torchvision.datasets import CIFAR10

BATCHES = [f"data_batch_{i}" for i in range(1, 6)]


def _write(path: Path, obj: dict) -> str:
    path.write_bytes(pickle.dumps(obj))
    return hashlib.md5(path.read_bytes()).hexdigest()


def write_cifar10(root: Path, per_batch: int = 20, seed: int = 0) -> dict[str, str]:
    """Write 5 train batches + 1 test batch of `per_batch` random images; return file -> md5."""
    rng = np.random.default_rng(seed)
    folder = root / CIFAR10.base_folder
    folder.mkdir(parents=True, exist_ok=True)
    md5 = {}
    for name in [*BATCHES, "test_batch"]:
        data = rng.integers(0, 256, size=(per_batch, 3 * 32 * 32), dtype=np.uint8)
        labels = (np.arange(per_batch) % 10).tolist()
        md5[name] = _write(folder / name, {"batch_label": name, "labels": labels, "data": data})
    names = [
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    ]
    md5["batches.meta"] = _write(folder / "batches.meta", {"label_names": names})
    return md5


def trust_fixture(monkeypatch: pytest.MonkeyPatch, md5: dict[str, str]) -> None:
    """torchvision verifies the real files' md5 sums; point it at the fixture's sums instead, so the
    real integrity check and loader run unchanged on the fixture."""
    monkeypatch.setattr(CIFAR10, "train_list", [[n, md5[n]] for n in BATCHES])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5["test_batch"]]])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5["batches.meta"]})
