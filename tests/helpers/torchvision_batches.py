"""Image batches in the on-disk format torchvision's CIFAR10 dataset reads (cifar-10-batches-py
pickles), tiny and random, for tests of any loader built on it."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from torchvision.datasets import CIFAR10

BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


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


def run_script_on_fixture(
    script: str, md5: dict[str, str], *overrides: str, served: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """scripts/<script> in its own process, as a user runs it, with torchvision trusting the
    fixture's md5 sums (`python -m tests.helpers.torchvision_batches` patches them, then runs the
    script; a fork of the tests' warm interpreter, as every script run of the tests).
    `served` ({"url", "tgz_md5"}): where torchvision downloads the archive from, and its sum."""
    from tests.helpers.scripts import TESTS_IMPORTABLE, run_python

    argv = [json.dumps({"md5": md5, **(served or {})}), str(SCRIPTS / script), *overrides]
    full = {**os.environ, "PYTHONUNBUFFERED": "1", **TESTS_IMPORTABLE}
    return run_python({"module": "tests.helpers.torchvision_batches"}, argv, SCRIPTS.parent, full)


if __name__ == "__main__":
    fixture, script_path = json.loads(sys.argv[1]), sys.argv[2]
    md5_sums = fixture["md5"]
    CIFAR10.train_list = [[n, md5_sums[n]] for n in BATCHES]
    CIFAR10.test_list = [["test_batch", md5_sums["test_batch"]]]
    CIFAR10.meta = {**CIFAR10.meta, "md5": md5_sums["batches.meta"]}
    if "url" in fixture:  # the same download code, aimed at a local server
        CIFAR10.url, CIFAR10.tgz_md5 = fixture["url"], fixture["tgz_md5"]
    sys.argv = [script_path, *sys.argv[3:]]
    sys.path.insert(0, str(Path(script_path).parent))  # as `python scripts/x.py` puts it first
    runpy.run_path(script_path, run_name="__main__")
