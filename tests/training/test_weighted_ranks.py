"""data.sampler=weighted on 2 and 3 DDP ranks (CPU, gloo) trains the weights one process trains,
to 1e-6: the epoch's weighted draw is one global draw of (seed, epoch), dealt out like a shuffle,
with splits that do not divide (83 samples, batches of 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training.test_ranks import max_diff, train_run, weights

pytestmark = pytest.mark.slow

WEIGHTED = ("data.sampler=weighted",)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("weighted_ranks")
    plans = {
        "single8": ("trainer=cpu", "data.batch_size=8"),
        "single12": ("trainer=cpu", "data.batch_size=12"),
        "ddp2": ("trainer=ddp_sim", "data.batch_size=4"),
        "ddp3": ("trainer=ddp_sim", "trainer.devices=3", "data.batch_size=4"),
    }
    for name, overrides in plans.items():
        train_run(root / name, *WEIGHTED, *overrides)
    return {name: root / name for name in plans}


@pytest.mark.example("project.data.synthetic")
@pytest.mark.parametrize(("ranks", "reference"), [("ddp2", "single8"), ("ddp3", "single12")])
def test_weighted_sampling_on_w_ranks_equals_one_process(
    runs: dict[str, Path], ranks: str, reference: str
) -> None:
    assert max_diff(weights(runs[ranks]), weights(runs[reference])) <= 1e-6


@pytest.mark.example("project.data.synthetic")
def test_the_weighted_draw_is_not_the_shuffle(runs: dict[str, Path], tmp_path: Path) -> None:
    shuffled = tmp_path / "shuffled"
    train_run(shuffled, "trainer=cpu", "data.batch_size=8")
    assert max_diff(weights(shuffled), weights(runs["single8"])) > 1e-3
