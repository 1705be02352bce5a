"""data.class_balance: warns on uncompensated imbalance, fails when a short fit's predictions on
a class-balanced batch collapse onto the majority class, and stays quiet on balanced data and
on imbalance that is compensated."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doctor.test_zoo import ENTRIES, SLOW, TOKENS_ENTRY, zoo_config
from tests.helpers.doctor import FAST, LM, MUSEUM, QUICK_PROBES, run_cfg, run_ids

ID = "data.class_balance"
IMBALANCED = [*FAST, "experiment=digits_imbalanced", "model.net.width=8"]


def check(tmp_path: Path, overrides: list[str]):
    return run_ids(tmp_path, overrides, [ID])[ID]


def test_collapsed_predictions_fail(tmp_path: Path) -> None:
    # the doctor's default probe length (FAST shortens it to 12 steps)
    overrides = [*FAST, f"data._target_={MUSEUM}.MajorityDigits", "probe.overfit_steps=60"]
    got = check(tmp_path, overrides)
    assert got.status == "fail", got.message
    assert "predicts class 0 for every sample" in got.message and "\n" not in got.message
    predicted = got.evidence["probe"]["predicted_counts"]
    assert predicted[0] == sum(predicted) > 0


@pytest.mark.example(
    "project.data.digits", "project.models.digits_cnn", "project.tasks.classification"
)
def test_uncompensated_imbalance_warns(tmp_path: Path) -> None:
    got = check(tmp_path, IMBALANCED)
    assert got.status == "warn", got.message
    assert got.evidence["largest_to_smallest"] >= 5
    assert "data.sampler=weighted" in got.message


@pytest.mark.example(
    "project.data.digits", "project.models.digits_cnn", "project.tasks.classification"
)
@pytest.mark.parametrize(
    "compensation",
    ["data.sampler=weighted", "model.loss.class_weights=balanced", "monitor.metric=val/macro_f1"],
)
def test_compensated_imbalance_passes(tmp_path: Path, compensation: str) -> None:
    got = check(tmp_path, [*IMBALANCED, compensation])
    assert got.status == "pass", got.message
    assert got.evidence["compensated_by"], got.evidence


@pytest.mark.example(
    "project.data.digits", "project.models.digits_cnn", "project.tasks.classification"
)
def test_the_loaders_own_weighted_sampler_compensates(tmp_path: Path) -> None:
    """Read from what the loader draws, not from the config: a user's own sampler rebalances
    as data.sampler=weighted does, and one that does not draw what it declares is no remedy."""
    own = f"data._target_={MUSEUM}.SelfBalancedDigits"
    got = check(tmp_path / "own", [*IMBALANCED, own])
    assert got.status == "pass", got.message
    assert got.evidence["largest_to_smallest"] >= 5 > got.evidence["drawn_largest_to_smallest"]
    assert "the train loader's sampler, WeightedRandomSampler" in got.message
    broken = check(
        tmp_path / "broken", [*IMBALANCED, f"data._target_={MUSEUM}.PerClassWeightsDigits"]
    )
    assert broken.status in ("warn", "fail"), broken.message
    assert broken.evidence["drawn_largest_to_smallest"] >= 5


def test_balanced_digits_pass_without_a_probe_fit(tmp_path: Path) -> None:
    got = check(tmp_path, FAST)
    assert got.status == "pass", got.message
    assert "probe" not in got.evidence


# The zoo entries the default suite runs through the full doctor (tests/doctor/test_zoo.py): there
# this check must answer pass or skip too, with the same message rules, and on their balanced
# data it runs no probe fit, so the probe's length does not matter. Alone, they run with the slow
# tests; the entries whose full run is slow are checked here in the default suite.
IN_THE_ZOO = {name for name, *_ in ENTRIES if name not in SLOW}


@pytest.mark.parametrize(
    ("module", "data", "overrides"),
    [
        pytest.param(m, d, o, id=name, marks=pytest.mark.slow if name in IN_THE_ZOO else ())
        for name, m, d, o, _ in ENTRIES
    ]
    + [pytest.param(*TOKENS_ENTRY[1:4], id=TOKENS_ENTRY[0], marks=LM)],
)
def test_healthy_zoo_and_lightning_demos_raise_no_alarm(
    tmp_path: Path, module: str | None, data: str | None, overrides: list[str]
) -> None:
    cfg = zoo_config(tmp_path, module, data, [*QUICK_PROBES, *overrides])
    got = run_cfg(cfg, tmp_path / "probes", [ID])[ID]
    assert got.status in ("pass", "skip"), got.message
    assert "\n" not in got.message and len(got.message) > 20


def test_an_untrained_net_collapsed_onto_another_class_is_no_fail(tmp_path: Path) -> None:
    """A net at its initialisation often answers one class for everything: that is not the
    class frequencies learnt, and legitimate code is never failed for it."""
    overrides = [*FAST, f"data._target_={MUSEUM}.MajorityDigits", "model.optimizer.lr=0"]
    got = check(tmp_path, overrides)
    predicted = got.evidence["probe"]["predicted_counts"]
    assert sum(p > 0 for p in predicted) == 1 and predicted[0] == 0  # the premise: collapsed
    assert got.status == "warn", got.message


def test_labels_a_training_step_reorders_are_still_counted(tmp_path: Path) -> None:
    """A sequence classifier that sorts its batch by length hands the loss its labels in another
    order: the batch's label tensor is still found, and the classes counted from it."""
    from tests.doctor.test_invariants import run_case

    got = run_case(tmp_path, "sorted_by_length_labels_left", "tokens", "Healthy", [ID])[ID]
    assert got.status == "pass", got.message
    assert sum(got.evidence["class_counts"]) == got.evidence["samples_counted"] > 0
