"""First-time CIFAR-10: `data.download=true` downloads through torchvision's real code path before
anything reads the data, then trains. The archive is a tiny CIFAR-10 in the real format, served by
a local HTTP server; torchvision's URL and checksums are pointed at it (and nothing else changes)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.scripts import call_script
from tests.helpers.torchvision_batches import run_script_on_fixture, write_cifar10

pytestmark = pytest.mark.example("project.data.cifar10", "project.models.resnet")


@pytest.fixture
def served_archive(tmp_path: Path) -> Iterator[dict]:
    source = tmp_path / "source"
    md5 = write_cifar10(source, per_batch=20)
    www = tmp_path / "www"
    www.mkdir()
    archive = www / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {
            "url": f"http://127.0.0.1:{server.server_address[1]}/{archive.name}",
            "tgz_md5": hashlib.md5(archive.read_bytes()).hexdigest(),
            "md5": md5,
        }
    finally:
        server.shutdown()


TINY = (
    "experiment=resnet_accum",
    "data.val_size=10",
    "data.batch_size=8",
    "data.num_workers=0",
    "model.net.width=4",
    "trainer.max_epochs=1",
    "trainer.accelerator=cpu",
    "print_config=false",
)


@pytest.mark.slow  # a download and a training run
def test_download_true_downloads_then_trains(tmp_path: Path, served_archive: dict) -> None:
    data_dir = tmp_path / "empty"
    data_dir.mkdir()
    proc = run_script_on_fixture(
        "train.py",
        served_archive["md5"],
        *TINY,
        "data.download=true",
        f"data.data_dir={data_dir}",
        f"hydra.run.dir={tmp_path / 'run'}",
        served={k: served_archive[k] for k in ("url", "tgz_md5")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (data_dir / "cifar-10-python.tar.gz").is_file()  # fetched from the server
    assert (data_dir / "cifar-10-batches-py" / "data_batch_1").is_file()
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["plan"]["dataset_size"] == 90  # 100 train images, 10 held out for val
    assert "test/acc" in results["metrics"]


def test_without_download_the_missing_dataset_is_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "empty"
    data_dir.mkdir()
    proc = call_script(
        "train.py", *TINY, f"data.data_dir={data_dir}", f"hydra.run.dir={tmp_path / 'run'}"
    )
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: CIFAR-10 not found or corrupt at ")
    assert "data.download=true" in line
    assert not (tmp_path / "run" / "checkpoints").exists()
