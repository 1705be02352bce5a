"""data.split_distribution and data.batch_composition beyond their cases' statuses: what the
verdicts name, the thresholds on hand-made statistics, and the cases' twins under bare
Lightning (the fix is a fix when Lightning, not the doctor, runs the loaders)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.doctor.invariants import (
    batches_drawn_per_class,
    feature_logged_in_train_only,
    sorted_by_class_no_shuffle,
    stream_read_class_by_class,
    val_left_unscaled,
    val_text_not_lowercased,
)
from tests.doctor.test_invariants import run_case
from tests.helpers.trainers import quiet_trainer
from trainwell.doctor.checks.data import _features
from trainwell.doctor.harness.scan import Scan

SPLIT, BATCH = "data.split_distribution", "data.batch_composition"


def _moments(mean: float, std: float, n: int) -> torch.Tensor:
    """(count, sums of the first four powers) of one normal feature with this mean and spread
    over n values."""
    m, v = mean, std**2
    raw = [m, v + m**2, m**3 + 3 * m * v, m**4 + 6 * m**2 * v + 3 * v**2]
    return torch.tensor([[n], *([e * n] for e in raw)], dtype=torch.float64)


def _values(values: torch.Tensor) -> torch.Tensor:
    """The scan's moments of these values (one feature)."""
    v = values.double()
    return torch.stack(
        [torch.tensor(float(len(v)), dtype=torch.float64), *((v**k).sum() for k in (1, 2, 3, 4))]
    ).reshape(5, 1)


@pytest.mark.parametrize(
    ("val", "samples", "level"),
    [
        pytest.param((0.0, 1.0), 1000, 0, id="same"),
        pytest.param((0.7, 1.0), 60, 0, id="small split, within its sampling error"),
        pytest.param((1.0, 1.0), 1000, 1, id="moved one spread"),
        pytest.param((3.0, 1.0), 1000, 2, id="moved three spreads"),
        pytest.param((0.0, 2.5), 1000, 1, id="spread 2.5x"),
        pytest.param((0.0, 0.2), 1000, 2, id="spread a fifth"),
    ],
)
def test_a_feature_is_judged_by_location_and_spread_in_units_of_trains_spread(
    val: tuple[float, float], samples: int, level: int
) -> None:
    scan = Scan(samples={"train": 5000, "val": samples})
    scan.moments = {"train": {"x": _moments(0.0, 1.0, 5000)}, "val": {"x": _moments(*val, samples)}}
    (found,) = _features(scan, "val")
    assert found["level"] == level, found


def test_a_feature_set_in_few_samples_may_be_blank_in_a_small_split() -> None:
    """A border pixel set in 1 image of 200 is blank in a split of 300 as often as not (the
    digits' pixel 8): not evidence of a transform. A feature train spreads out normally that a
    split holds constant is."""
    rare = torch.zeros(2000)
    rare[::200] = 0.3  # set in 10 of 2000 train samples
    scan = Scan(samples={"train": 2000, "val": 300})
    scan.moments = {"train": {"x": _values(rare)}, "val": {"x": _values(torch.zeros(300))}}
    (found,) = _features(scan, "val")
    assert found["level"] == 0, found
    few = torch.zeros(300)
    few[:7] = 0.3  # 7 where 1.5 are expected: twice the spread, within its sampling error
    scan.moments["val"] = {"x": _values(few)}
    (found,) = _features(scan, "val")
    assert found["level"] == 0 and found["spread_factor"] >= 2, found
    normal = torch.randn(2000, generator=torch.Generator().manual_seed(0))
    scan.moments = {"train": {"x": _values(normal)}, "val": {"x": _values(torch.zeros(300))}}
    (found,) = _features(scan, "val")
    assert found["level"] == 2 and found["spread_factor"] > 1e6, found


def test_the_verdicts_name_the_split_the_feature_and_the_loader_setting(tmp_path: Path) -> None:
    column = run_case(tmp_path, "feature_logged_in_train_only", "records", "Buggy", [SPLIT])
    assert "val is not drawn like train: batch[0][:, 3]" in column[SPLIT].message
    sorted_ = run_case(tmp_path, "sorted_by_class_no_shuffle", "data", "Buggy", [BATCH])[BATCH]
    assert "shuffle=False" in sorted_.message and "same order every epoch" in sorted_.message
    stream = run_case(tmp_path, "stream_read_class_by_class", "data", "Buggy", [BATCH])[BATCH]
    assert "the iterable Shards" in stream.message
    sampler = run_case(tmp_path, "batches_drawn_per_class", "data", "Buggy", [BATCH])[BATCH]
    assert "batch_sampler ClassBatches" in sampler.message
    assert "same order every epoch" not in sampler.message  # it draws at random


class Watch(L.LightningModule):
    """Records what bare Lightning feeds training_step and validation_step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.LazyLinear(2)
        self.largest_share: list[float] = []
        self.seen: dict[str, list[torch.Tensor]] = {"train": [], "val": []}

    @staticmethod
    def split(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(batch, dict):
            return batch["input_ids"].float(), batch["label"]
        return batch[0].flatten(1).float(), batch[1]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = self.split(batch)
        self.largest_share.append(float(torch.bincount(y).max()) / len(y))
        self.seen["train"].append(x.detach())
        return F.cross_entropy(self.net(x[:, :1]), y.clamp(max=1))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.seen["val"].append(self.split(batch)[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _bare(datamodule: L.LightningDataModule) -> Watch:
    watch = Watch()
    trainer = quiet_trainer(max_epochs=2, limit_val_batches=1.0)
    trainer.fit(watch, datamodule=datamodule)
    return watch


@pytest.mark.parametrize(
    "case", [sorted_by_class_no_shuffle, stream_read_class_by_class, batches_drawn_per_class]
)
def test_under_bare_lightning_the_buggy_batches_hold_one_class_and_the_twins_mix(case: Any) -> None:
    buggy, healthy = (_bare(variant()).largest_share for variant in (case.Buggy, case.Healthy))
    assert sum(buggy) / len(buggy) >= 0.8
    assert sum(healthy) / len(healthy) < 0.4


@pytest.mark.parametrize(
    "case", [val_left_unscaled, feature_logged_in_train_only, val_text_not_lowercased]
)
def test_under_bare_lightning_the_twins_validate_on_trains_distribution(case: Any) -> None:
    def apart(watch: Watch) -> float:
        train, val = (torch.cat([t.flatten() for t in watch.seen[s]]) for s in ("train", "val"))
        if case is val_text_not_lowercased:  # the share of unknown ids
            return abs(float((val == 1).float().mean()) - float((train == 1).float().mean()))
        return abs(float(val.mean()) - float(train.mean())) / float(train.std())

    assert apart(_bare(case.Buggy())) > 0.15
    assert apart(_bare(case.Healthy())) < 0.1
