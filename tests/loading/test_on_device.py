"""The on-device image pipeline: torchvision's geometry and arithmetic, randomness that is a pure
function of (seed, epoch, sample), and the template's loader policy (sharding, resume) over it.

Everything runs on the CPU with the same code the GPU runs; tests marked `gpu` compare the two.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision.transforms.functional as TF

from tests.helpers.config import compose_config
from tests.helpers.torchvision_batches import trust_fixture, write_cifar10
from trainwell.loading.on_device import DeviceImages, crop_and_flip, mix32, placement
from trainwell.loading.resumable import ResumableDataLoader
from trainwell.loading.sharding import install_loader_policy, shard_loader


def synthetic(**kwargs):
    from project.data.synthetic import SyntheticDataModule

    options = {"num_samples": 200, "num_val": 40, "num_test": 40, "batch_size": 16, "seed": 3}
    dm = SyntheticDataModule(**{**options, "on_device": True, "augment": True, **kwargs})
    install_loader_policy(dm, seed=dm.seed)
    dm.setup("fit")
    return dm


def epoch_batches(loader, epoch: int) -> list[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """(sample indices, images, labels) of every batch of one epoch, as Lightning iterates it."""
    loader.batch_sampler.sampler.set_epoch(epoch)  # Lightning's per-epoch call
    batches = [(x, y) for x, y in loader]
    indices = [list(b) for b in loader.batch_sampler]
    return [(i, x, y) for i, (x, y) in zip(indices, batches, strict=True)]


def by_sample(batches) -> dict[int, torch.Tensor]:
    return {i: x[k] for idx, x, _ in batches for k, i in enumerate(idx)}


def test_hash_is_the_same_on_ints_and_tensors_and_spreads_uniformly() -> None:
    for value in (0, 1, 7, 2**31, 2**32 - 1, 123_456_789):
        assert mix32(value) == int(mix32(torch.tensor(value)))
    dy, dx, flip = crop_and_flip(torch.arange(90_000), seed=42, epoch=0, pad=4)
    for offsets in (dy, dx):
        counts = torch.bincount(offsets, minlength=9)
        assert counts.numel() == 9 and (counts - 10_000).abs().max() < 400, counts  # ~4 sigma
    assert abs(flip.float().mean().item() - 0.5) < 0.01
    # Another epoch draws independently: a sample repeats its (dy, dx, flip) with p = 1/162.
    dy1, dx1, flip1 = crop_and_flip(torch.arange(90_000), seed=42, epoch=1, pad=4)
    same = ((dy == dy1) & (dx == dx1) & (flip == flip1)).float().mean().item()
    assert abs(same - 1 / 162) < 0.002, same


def test_crop_and_flip_are_torchvision_geometry() -> None:
    """Each augmented image is TF.hflip?(TF.crop(TF.pad(image, 4), dy, dx, 32, 32)) with the
    sample's own offsets: what RandomCrop(32, padding=4) + RandomHorizontalFlip produce."""
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (24, 32, 32, 3), dtype=torch.uint8, generator=gen)
    data = DeviceImages(images, torch.zeros(24), [0.0] * 3, [1.0] * 3, augment=True, seed=5)
    data.set_epoch(3)
    indices = [4, 17, 0, 23, 9, 9]
    x, _ = data.__getitems__(indices)
    dy, dx, flip = crop_and_flip(torch.tensor(indices), seed=5, epoch=3, pad=4)
    assert flip.any() and not flip.all()  # both cases exercised
    for k, i in enumerate(indices):
        ref = TF.crop(TF.pad(images[i].permute(2, 0, 1), [4]), int(dy[k]), int(dx[k]), 32, 32)
        if flip[k]:
            ref = TF.hflip(ref)
        assert torch.equal(x[k], ref.float().div(255)), i  # mean 0, std 1: the [0, 1] pixels


@pytest.mark.example("project.data.cifar10")
def test_eval_batches_equal_the_torchvision_pipeline_bit_for_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from project.data.cifar10 import CIFAR10DataModule

    trust_fixture(monkeypatch, write_cifar10(tmp_path / "cifar", per_batch=20))
    common = {"data_dir": str(tmp_path / "cifar"), "val_size": 10, "batch_size": 8, "seed": 0}
    cpu = CIFAR10DataModule(**common, num_workers=0)
    dev = CIFAR10DataModule(**common, on_device=True)
    for dm in (cpu, dev):
        dm.setup("fit")
    assert len(dev.train_set) == len(cpu.train_set) == 90
    for split in ("val", "test"):
        (xc, yc), (xd, yd) = (next(iter(getattr(d, f"{split}_dataloader")())) for d in (cpu, dev))
        assert torch.equal(xc, xd) and torch.equal(yc, yd), split
        assert xd.is_contiguous(memory_format=torch.channels_last)
    # The train split holds the same images (augmentation aside) in the same order.
    plain = DeviceImages(dev.train_set.images, dev.train_set.labels, (0.0,) * 3, (1.0,) * 3)
    subset = cpu.train_set.dataset  # PerSampleRandom over a Subset of the raw CIFAR10 files
    raw = torch.from_numpy(subset.dataset.data[subset.indices[:5]])
    assert torch.equal(plain.__getitems__(range(5))[0], raw.permute(0, 3, 1, 2).float() / 255)


def test_augmentations_differ_per_sample_and_epoch_and_repeat_across_runs() -> None:
    # One image repeated: any difference between samples is the augmentation's.
    image = torch.randint(0, 256, (1, 32, 32, 3), dtype=torch.uint8).expand(64, 32, 32, 3)
    data = DeviceImages(image.contiguous(), torch.zeros(64), [0.5] * 3, [0.25] * 3, augment=True)
    x0 = data.__getitems__(list(range(64)))[0]
    distinct = {x0[i].numpy().tobytes() for i in range(64)}
    assert len(distinct) > 40  # 162 possible views; 64 samples mostly get different ones
    data.set_epoch(1)
    x1 = data.__getitems__(list(range(64)))[0]
    changed = [not torch.equal(x0[i], x1[i]) for i in range(64)]
    assert sum(changed) > 55
    again = DeviceImages(image.contiguous(), torch.zeros(64), [0.5] * 3, [0.25] * 3, augment=True)
    again.set_epoch(1)
    assert torch.equal(again.__getitems__(list(range(64)))[0], x1)  # a new run, same views


@pytest.mark.example("project.data.synthetic")
def test_a_sample_gets_the_same_view_in_any_batch_and_on_any_rank() -> None:
    """1 process = W ranks: the epoch's view of a sample depends on nothing but (seed, epoch,
    sample); W ranks, which see different batches, see each sample exactly as 1 process does."""
    from project.data.synthetic import SyntheticDataModule

    dm = synthetic()
    single = by_sample(epoch_batches(dm.train_dataloader(), epoch=2))
    assert len(single) == 200
    ranks = {}
    for rank in (0, 1):
        raw = SyntheticDataModule.train_dataloader(dm)  # the datamodule's own, unsharded loader
        ranks[rank] = by_sample(epoch_batches(shard_loader(raw, 2, rank, True, dm.seed), 2))
    assert set(ranks[0]) | set(ranks[1]) == set(single)
    for view in (ranks[0], ranks[1]):
        for i, x in view.items():
            assert torch.equal(x, single[i]), i
    # Another epoch, other views; the same epoch of a fresh run, the same views.
    other = by_sample(epoch_batches(dm.train_dataloader(), epoch=3))
    assert sum(not torch.equal(other[i], single[i]) for i in single) > 180
    fresh = by_sample(epoch_batches(synthetic().train_dataloader(), epoch=2))
    assert all(torch.equal(fresh[i], single[i]) for i in single)


@pytest.mark.example("project.data.synthetic")
def test_mid_epoch_resume_continues_with_the_same_augmented_batches() -> None:
    dm = synthetic()
    loader = dm.train_dataloader()
    loader.batch_sampler.sampler.set_epoch(1)
    full = list(loader)
    iterator = iter(loader)
    for _ in range(5):
        next(iterator)
    state = loader.state_dict()
    resumed = synthetic().train_dataloader()
    assert isinstance(resumed, ResumableDataLoader)
    resumed.load_state_dict(state)
    resumed.batch_sampler.sampler.set_epoch(1)
    rest = list(resumed)
    assert len(rest) == len(full) - 5
    for (x, y), (xr, yr) in zip(full[5:], rest, strict=True):
        assert torch.equal(x, xr) and torch.equal(y, yr)


@pytest.mark.example("project.data.synthetic")
def test_layout_option_and_synthetic_quantisation() -> None:
    from project.data.synthetic import SyntheticDataModule

    dm = synthetic(channels_last=False, augment=False)
    x, y = next(iter(dm.val_dataloader()))
    assert x.shape == (16, 3, 32, 32) and x.is_contiguous() and y.dtype == torch.int64
    # uint8 storage maps back to the float images within half a quantisation step.
    float_dm = SyntheticDataModule(num_samples=200, num_val=40, num_test=40, seed=3)
    float_dm.setup("fit")
    reference = float_dm.val_set.tensors[0][:16]
    inside = reference.abs() < 3.9  # away from the clamp at +-4
    assert (x - reference)[inside].abs().max() < 0.5 / 32 + 1e-5


@pytest.mark.example("project.data.synthetic")
def test_placement_follows_the_attached_trainer_and_an_explicit_device() -> None:
    import lightning as L

    dm = synthetic()
    assert placement(dm) == torch.device("cpu")
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False)
    dm.trainer = trainer
    assert placement(dm) == trainer.strategy.root_device
    dm.device = torch.device("meta")  # an explicit placement wins, and setup moves the splits
    dm.setup("fit")
    assert dm.train_set.images.device.type == "meta" and dm.test_set.labels.device.type == "meta"


@pytest.mark.example("project.data.synthetic")
def test_synthetic_augment_on_the_host_crops_and_flips_per_sample_and_epoch() -> None:
    from project.data.synthetic import SyntheticDataModule

    dm = SyntheticDataModule(num_samples=16, num_val=4, num_test=4, augment=True, seed=1)
    dm.setup("fit")
    plain = SyntheticDataModule(num_samples=16, num_val=4, num_test=4, seed=1)
    plain.setup("fit")
    views = []
    for epoch in range(4):
        dm.train_set.set_epoch(epoch)
        views.append(dm.train_set[0][0])
    assert len({v.numpy().tobytes() for v in views}) > 1
    assert views[0].shape == plain.train_set[0][0].shape == (3, 32, 32)
    assert torch.equal(dm.val_set[0][0], plain.val_set[0][0])  # evaluation is never augmented


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("synthetic", marks=pytest.mark.example("project.data.synthetic")),
        pytest.param("cifar10", marks=pytest.mark.example("project.data.cifar10")),
    ],
)
def test_configs_select_the_on_device_path(name: str, tmp_path: Path) -> None:
    from hydra.utils import instantiate

    cfg = compose_config([f"data={name}", "data.on_device=true"], tmp_path / name)
    dm = instantiate(cfg.data)
    assert dm.on_device and dm.num_workers == 0 and dm.channels_last


@pytest.mark.example("project.data.synthetic")
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_batches_equal_cpu_batches() -> None:
    """The same code on the GPU: the same crops and flips (an integer hash) and the same labels;
    the normalised values agree to rounding (the GPU fuses the multiply-add, H100: 1 ulp)."""
    cpu, gpu = synthetic(), synthetic()
    gpu.device = torch.device("cuda")
    gpu.setup("fit")
    for (xc, yc), (xg, yg) in zip(cpu.train_dataloader(), gpu.train_dataloader(), strict=True):
        assert xg.device.type == "cuda"
        assert torch.equal(yc, yg.cpu())
        assert torch.allclose(xc, xg.cpu(), rtol=0, atol=1e-6)  # a wrong crop or flip is O(1)
