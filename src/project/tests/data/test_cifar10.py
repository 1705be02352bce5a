from pathlib import Path

import pytest
import torch

from project.data.cifar10 import CIFAR10_MEAN, CIFAR10DataModule
from tests.helpers.scripts import call_script
from tests.helpers.torchvision_batches import trust_fixture, write_cifar10
from trainwell.errors import TrainwellError

pytestmark = pytest.mark.example("project.data.cifar10", "project.models.resnet")


@pytest.fixture
def cifar_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    trust_fixture(monkeypatch, write_cifar10(tmp_path / "cifar", per_batch=20))
    return tmp_path / "cifar"


def make(data_dir: Path, **kwargs) -> CIFAR10DataModule:
    dm = CIFAR10DataModule(data_dir=str(data_dir), val_size=10, batch_size=8, seed=0, **kwargs)
    dm.setup("fit")
    return dm


def test_splits_from_real_format_files(cifar_dir: Path) -> None:
    dm = make(cifar_dir)
    assert [len(dm.train_set), len(dm.val_set), len(dm.test_set)] == [90, 10, 20]
    assert not set(dm.train_set.dataset.indices) & set(dm.val_set.indices)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    again = make(cifar_dir)
    assert dm.val_set.indices == again.val_set.indices


def test_augmentation_on_train_only(cifar_dir: Path) -> None:
    dm = make(cifar_dir)
    train_views = []
    for epoch in range(8):
        dm.train_set.set_epoch(epoch)
        train_views.append(dm.train_set[0][0])
    val_views = torch.stack([dm.val_set[0][0] for _ in range(8)])
    assert not all(torch.equal(train_views[0], v) for v in train_views[1:])
    assert all(torch.equal(val_views[0], v) for v in val_views[1:])
    # The val image is the plain normalised image: check one pixel against the raw file.
    raw = dm.val_set.dataset.data[dm.val_set.indices[0]]  # HWC uint8
    expected = (raw[0, 0, 0] / 255.0 - CIFAR10_MEAN[0]) / 0.2470
    assert abs(val_views[0][0, 0, 0].item() - expected) < 1e-5


def test_a_train_sample_is_a_function_of_seed_epoch_and_index(cifar_dir: Path) -> None:
    """Not of the global RNG, nor of how often or in which order samples were drawn."""
    dm = make(cifar_dir)
    dm.train_set.set_epoch(3)
    first = [dm.train_set[i][0] for i in range(6)]
    torch.manual_seed(12345)
    again = [dm.train_set[i][0] for i in reversed(range(6))][::-1]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    other = make(cifar_dir)  # a fresh module (another worker, another process)
    other.train_set.set_epoch(3)
    assert torch.equal(other.train_set[4][0], first[4])
    state = torch.get_rng_state()
    dm.train_set[0]
    assert torch.equal(torch.get_rng_state(), state)  # the caller's stream does not move


def test_missing_dir_names_path_and_fix(tmp_path: Path) -> None:
    with pytest.raises(TrainwellError, match=r"data\.download=true") as err:
        make(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(err.value)


def test_missing_dir_via_train_script_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-cifar"
    proc = call_script(
        "train.py",
        "experiment=resnet_accum",
        f"data.data_dir={missing}",
        f"hydra.run.dir={tmp_path / 'run'}",
        "print_config=false",
    )
    assert proc.returncode == 2
    # Lightning's info logs may precede it; the cause itself is one line, the last one.
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == [lines[-1]], proc.stderr
    assert str(missing) in errors[0] and "data.download=true" in errors[0]
