"""Every planted bug is caught by the right check with the right status (never just 'something')."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.doctor import FAST, LM, LM_FAST, MUSEUM, run_ids
from trainwell.doctor.checks import CHECKS

NET = f"model.net._target_={MUSEUM}"
TASK = f"model._target_={MUSEUM}"
DATA = f"data._target_={MUSEUM}"
CALLBACK = f"+callbacks.averaging._target_={MUSEUM}"

EXHIBITS = [
    # (exhibit, overrides, check id, expected status)
    ("softmax before CrossEntropy", [f"{NET}.SoftmaxNet"], "loss.logits", "fail"),
    ("log_softmax before CrossEntropy", [f"{NET}.LogSoftmaxNet"], "loss.logits", "fail"),
    ("layers in a plain list", [f"{NET}.PlainListNet"], "params.registered", "fail"),
    (
        "optimizer before freezing",
        [f"{TASK}.FreezeAfterOptimizerTask"],
        "optimizer.coverage",
        "fail",
    ),
    ("parameter after the optimizer", [f"{TASK}.LateHeadTask"], "optimizer.coverage", "fail"),
    ("one-hot float targets to CE", [f"{TASK}.OneHotTargetsTask"], "targets.contract", "fail"),
    ("labels >= num_classes", ["model.num_classes=9"], "targets.contract", "fail"),
    (
        "MSE on class ids",
        [f"{TASK}.MSEOnClassIdsTask", f"{NET}.ClassIdRegressor"],
        "targets.contract",
        "fail",
    ),
    ("NaN in one batch", [f"{DATA}.NaNDigits"], "data.finite", "fail"),
    ("train/val overlap", [f"{DATA}.OverlappingDigits"], "data.leakage", "fail"),
    (
        "99% of the training split one class",
        [f"{DATA}.MajorityDigits", "probe.overfit_steps=60"],
        "data.class_balance",
        "fail",
    ),
    ("no_grad inside forward", [f"{NET}.NoGradFeaturesNet"], "grad.flow", "fail"),
    ("whole forward under no_grad", [f"{NET}.NoGradForwardNet"], "grad.flow", "fail"),
    (".detach() mid-network", [f"{NET}.DetachNet"], "grad.flow", "fail"),
    ("optimizer_zero_grad does nothing", [f"{TASK}.NoZeroGradTask"], "grad.zeroing", "fail"),
    ("self.train() in validation", [f"{TASK}.TrainInValidationTask"], "eval.determinism", "fail"),
    (
        "BatchNorm put in train mode in validation",
        [f"{TASK}.BatchNormTrainInValidationTask"],
        "eval.determinism",
        "fail",
    ),
    ("BN model left in eval mode", [f"{NET}.EvalBatchNormNet"], "train.mode", "fail"),
    ("losses kept without .item()", [f"{TASK}.LossHistoryTask"], "memory.graph_leak", "fail"),
    ("retain_graph=True", [f"{TASK}.RetainGraphTask"], "memory.graph_leak", "fail"),
    (
        "per-micro-batch scheduler under accumulation",
        [f"{TASK}.MicroBatchSchedulerTask", "trainer.accumulate_grad_batches=2"],
        "schedule.interval",
        "fail",
    ),
    (
        "loss not normalised under accumulation",
        [f"{TASK}.UnnormalisedAccumulationTask", "trainer.accumulate_grad_batches=2"],
        "accumulation.equivalence",
        "fail",
    ),
    (
        "loss divided by K by hand",
        [f"{TASK}.HandNormalisedAccumulationTask", "trainer.accumulate_grad_batches=3"],
        "accumulation.equivalence",
        "fail",
    ),
    (
        "workers repeat one augmentation",
        [f"{DATA}.SameAugmentationDigits", "data.num_workers=2"],
        "data.worker_seeding",
        "fail",
    ),
    ("state outside the checkpoint", [f"{TASK}.UnsavedStateTask"], "checkpoint.roundtrip", "fail"),
    (
        "scheduler state emptied from the checkpoint",
        [f"{TASK}.SchedulerStateDroppedTask"],
        "checkpoint.roundtrip",
        "fail",
    ),
    (
        "eval-only state outside the checkpoint",
        [f"{TASK}.EvalCalibrationTask"],
        "checkpoint.roundtrip",
        "fail",
    ),
    (
        "optimizer that does not update",
        ["model.optimizer.lr=0", "probe.overfit_steps=60"],
        "overfit.one_batch",
        "fail",
    ),
    ("data loading bottleneck", [f"{DATA}.SlowDigits"], "data.throughput", "fail"),
    (
        "manual accumulation without dividing by the window",
        [f"{TASK}.ManualSummedAccumulationTask"],
        "accumulation.equivalence",
        "fail",
    ),
    (
        "loss summed over samples under accumulation",
        [f"{TASK}.SummedLossTask", "trainer.accumulate_grad_batches=2"],
        "accumulation.equivalence",
        "fail",
    ),
    (
        "OneCycleLR sized for 10 steps",
        [f"{TASK}.HardCodedOneCycleTask"],
        "schedule.interval",
        "fail",
    ),
    ("GAN generator never zeroes", [f"{TASK}.GANWithoutZeroGrad"], "grad.zeroing", "fail"),
    (
        "schedule sized in steps, stepped per epoch",
        [f"{TASK}.EpochIntervalPlannedTask"],
        "schedule.interval",
        "warn",
    ),
    (
        "running loss total kept as a tensor",
        [f"{TASK}.RunningTotalTask"],
        "memory.graph_leak",
        "fail",
    ),
    (
        "step-sized OneCycleLR returned bare (per epoch)",
        [f"{TASK}.BareStepSizedOneCycleTask", "model.scheduler=null"],
        "schedule.interval",
        "warn",
    ),
    (
        "module.requires_grad attribute instead of requires_grad_()",
        [f"{TASK}.AttributeFreezeTask"],
        "optimizer.coverage",
        "fail",
    ),
    (
        "per-rank mean logged from an epoch-end hook",
        [f"{TASK}.EpochEndMeanTask"],
        "metrics.reduction",
        "warn",
    ),
    (
        "BatchNorm without running statistics",
        [f"{NET}.NoRunningStatsNet"],
        "eval.batch_independence",
        "warn",
    ),
    (
        "sampler without set_epoch",
        [f"{DATA}.RepeatedOrderDigits"],
        "data.epoch_order",
        "warn",
    ),
    ("weights cast to float16", [f"{TASK}.HalfWeightsTask"], "precision.master_weights", "fail"),
    (
        "strict=False load that matches nothing",
        [f"{TASK}.PrefixedWeightsTask"],
        "checkpoint.partial_load",
        "fail",
    ),
    (
        "MSE on (N, 1) against (N,)",
        [f"{TASK}.BroadcastRegressionTask"],
        "targets.contract",
        "fail",
    ),
    (
        "scheduler stepped before the optimizer",
        [f"{TASK}.SchedulerFirstTask"],
        "schedule.interval",
        "warn",
    ),
    (
        "OneCycleLR sized far past the run",
        [f"{TASK}.OverlongOneCycleTask", "model.scheduler=null"],
        "schedule.interval",
        "warn",
    ),
    (
        "EMA updated at every micro-batch",
        [f"{CALLBACK}.MicroBatchEMA", "trainer.accumulate_grad_batches=2"],
        "weights.averaging",
        "fail",
    ),
    ("EMA left out of the checkpoint", [f"{CALLBACK}.UnsavedEMA"], "weights.averaging", "fail"),
]

# Exhibits in the language-model experiment (LM_FAST instead of FAST).
TOKENS_TASK = f"model._target_={MUSEUM}_tokens"
LM_EXHIBITS = [
    (
        "token-level loss averaged per micro-batch, undeclared",
        [f"{TOKENS_TASK}.UndeclaredTokensTask"],
        "accumulation.equivalence",
        "fail",
    ),
    (
        "token-mean loss logged with the batch's sequence count as weight",
        [f"{TOKENS_TASK}.SequenceWeightedLossTask"],
        "metrics.reduction",
        "warn",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "check_id", "status"),
    [pytest.param(FAST + o, c, s, id=name) for name, o, c, s in EXHIBITS]
    + [pytest.param(LM_FAST + o, c, s, id=name, marks=LM) for name, o, c, s in LM_EXHIBITS],
)
def test_planted_bug_is_caught(
    tmp_path: Path, overrides: list[str], check_id: str, status: str
) -> None:
    check = run_ids(tmp_path, overrides, [check_id])[check_id]
    assert (check.id, check.status) == (check_id, status), check.message
    assert "\n" not in check.message and len(check.message) > 20
    # The check caught the bug, not a probe that crashed on the exhibit's own code.
    assert not check.message.startswith("the probe itself raised"), check.message


@LM
def test_undeclared_token_loss_is_named_with_its_fix(tmp_path: Path) -> None:
    overrides = [*LM_FAST, f"{TOKENS_TASK}.UndeclaredTokensTask"]
    check = run_ids(tmp_path, overrides, ["accumulation.equivalence"])["accumulation.equivalence"]
    assert (
        "def loss_items(self, batch)" in check.message and "UndeclaredTokensTask" in check.message
    )
    assert check.evidence["matches_when_counted_by_the_loss"] is True
    counted = check.evidence["items_counted"]
    assert len(set(check.evidence["items_the_loss_averages"])) > 1 and len(set(counted)) == 1


def test_manual_accumulation_bug_is_named(tmp_path: Path) -> None:
    overrides = [*FAST, f"{TASK}.ManualSummedAccumulationTask"]
    check = run_ids(tmp_path, overrides, ["accumulation.equivalence"])["accumulation.equivalence"]
    assert "summed, not averaged" in check.message
    assert abs(check.evidence["first_window"]["norm_ratio"] - 2.0) < 0.05
    assert check.evidence["micro_batches_in_first_window"] == 2


def test_summed_loss_is_named_as_a_sum(tmp_path: Path) -> None:
    overrides = [*FAST, f"{TASK}.SummedLossTask", "trainer.accumulate_grad_batches=2"]
    check = run_ids(tmp_path, overrides, ["accumulation.equivalence"])["accumulation.equivalence"]
    assert "summed over samples instead of averaged" in check.message, check.message
    assert "reduction='sum'" in check.message
    assert check.evidence["loss_reductions_seen"] == ["sum"]
    assert abs(check.evidence["the first window of 2 micro-batches"]["norm_ratio"] - 0.5) < 0.05


def test_batch_statistics_in_eval_show_in_the_outputs(tmp_path: Path) -> None:
    # The training loss moves too; the eval outputs must be seen moving on their own.
    overrides = [*FAST, f"{NET}.NoRunningStatsNet"]
    check = run_ids(tmp_path, overrides, ["eval.batch_independence"])["eval.batch_independence"]
    assert check.evidence["outputs"]["max_relative_shift"] > 1e-4, check.evidence
    assert "outputs change by" in check.message, check.message


def test_copied_split_fails_with_its_share(tmp_path: Path) -> None:
    check = run_ids(tmp_path, [*FAST, f"{DATA}.OverlappingDigits"], ["data.leakage"])
    leak = check["data.leakage"]
    assert leak.status == "fail" and "50 of 50 val samples (100%)" in leak.message


@pytest.mark.parametrize(
    ("overrides", "check_id"),
    [
        pytest.param(
            [*FAST, f"{TASK}.ManualAccumulationTask"], "accumulation.equivalence", id="manual"
        ),
        pytest.param(LM_FAST, "accumulation.equivalence", id="lm-declared-tokens", marks=LM),
        pytest.param(LM_FAST, "metrics.reduction", id="lm-token-weighted-metrics", marks=LM),
        pytest.param(FAST, "metrics.reduction", id="torchmetrics-and-metric-compute"),
    ],
)
def test_healthy_counterparts_pass(tmp_path: Path, overrides: list[str], check_id: str) -> None:
    check = run_ids(tmp_path, overrides, [check_id])[check_id]
    assert check.status == "pass", check.message


@pytest.mark.example(
    "project.data.digits", "project.models.digits_cnn", "project.tasks.classification"
)
def test_a_busy_moment_of_the_machine_is_no_data_bottleneck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine holds up every fetch of data.throughput's first measurement and then frees
    up: a fast loader is not failed for it (the slow loader, which waits in every measurement,
    still is: "data loading bottleneck" above)."""
    from tests.doctor import museum
    from trainwell.doctor.checks import loading

    measure = loading._measure

    def busy_for_the_first(*args: Any) -> Any:
        try:
            return measure(*args)
        finally:
            museum._BusyMachine.busy = False

    monkeypatch.setattr(museum._BusyMachine, "busy", True)
    monkeypatch.setattr(loading, "_measure", busy_for_the_first)
    overrides = [*FAST, f"{DATA}.BusyMachineDigits"]
    check = run_ids(tmp_path, overrides, ["data.throughput"])["data.throughput"]
    assert check.status != "fail", check.message
    assert check.evidence["first_data_wait_fraction"] > 0.5  # the busy moment was measured


@pytest.mark.example(
    "project.data.digits", "project.models.digits_cnn", "project.tasks.classification"
)
def test_a_machine_busy_through_every_measurement_is_no_data_bottleneck(tmp_path: Path) -> None:
    """Two fetches of every three held up, in both measurements: the typical batch waits, but a
    loader that hands over a batch at once in some round is not the bottleneck (the slow loader,
    which waits in every round, still fails: "data loading bottleneck" above)."""
    overrides = [*FAST, f"{DATA}.MostlyBusyMachineDigits"]
    check = run_ids(tmp_path, overrides, ["data.throughput"])["data.throughput"]
    assert check.status == "pass", check.message
    assert check.evidence["median_wait_s"] > 0.05  # the typical fetch was held up (32 x 2 ms)


# What the healthy baseline needs for the check to have something to look at.
BASELINE = {
    "overfit.one_batch": ["probe.overfit_steps=60", "model.net.width=32"],
    "data.worker_seeding": [f"{DATA}.TorchAugmentationDigits", "data.num_workers=2"],
    "schedule.interval": ["trainer.accumulate_grad_batches=2"],
    # K=3: the last window of the 20-batch digits epoch is short, so the tail probe runs too
    "accumulation.equivalence": ["trainer.accumulate_grad_batches=3", "model.net.dropout=0.5"],
    "weights.averaging": ["ema.decay=0.9"],  # the template's EMA: an average to look at
}


@pytest.mark.parametrize("check_id", sorted({c for _, _, c, _ in EXHIBITS}))
def test_each_exhibit_check_passes_on_the_healthy_baseline(tmp_path: Path, check_id: str) -> None:
    """The same check on the unbroken experiment passes: the exhibit, not the probe, trips it."""
    check = run_ids(tmp_path, FAST + BASELINE.get(check_id, []), [check_id])[check_id]
    # By design, BatchNorm seeing micro-batches under accumulation is a warning, with exact grads.
    expected = "warn" if check_id == "accumulation.equivalence" else "pass"
    assert check.status == expected, check.message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine can run the real probe")
def test_device_placement_skips_with_a_reason_on_cpu_only_machines(tmp_path: Path) -> None:
    check = run_ids(tmp_path, FAST, ["device.placement"])["device.placement"]
    assert check.status == "skip"
    assert "no CUDA device" in check.message


TIMED = "data.throughput"  # it times the loader: it moves with the machine's load, not the order


def _alone_differs(
    tmp_path: Path, overrides: list[str], full: dict[str, Any], ids: list[str]
) -> dict[str, str]:
    """{check: how its full-run verdict differs from its verdict run alone}, over `ids`."""
    moved = {}
    for check_id in ids:
        alone = run_ids(tmp_path / check_id, overrides, [check_id])[check_id]
        if alone.status != full[check_id].status:
            moved[check_id] = f"{full[check_id].status} in the full run: {full[check_id].message}"
    return moved


@pytest.fixture(scope="module")
def healthy_full(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The full run's verdicts on a healthy baseline (FAST or LM_FAST), each computed once."""
    cache: dict[tuple[str, ...], dict[str, Any]] = {}

    def verdicts(base: list[str]) -> dict[str, Any]:
        if tuple(base) not in cache:
            cache[tuple(base)] = run_ids(tmp_path_factory.mktemp("healthy"), base, None)
        return cache[tuple(base)]

    return verdicts


@pytest.mark.slow
@pytest.mark.parametrize("base", [pytest.param(FAST, id="digits"),
                                  pytest.param(LM_FAST, id="tokens", marks=LM)])  # fmt: skip
def test_on_a_healthy_run_every_verdict_is_the_verdict_of_the_check_alone(
    tmp_path: Path, base: list[str], healthy_full: Any
) -> None:
    """A check's verdict does not depend on what the checks before it did to the shared probe
    run (a mode, a hook, an RNG left behind): each check run alone gives its full-run verdict."""
    full = healthy_full(base)
    assert _alone_differs(tmp_path, base, full, [c for c in CHECKS if c != TIMED]) == {}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("base", "overrides", "check_id", "status"),
    [pytest.param(FAST, o, c, s, id=name) for name, o, c, s in EXHIBITS]
    + [pytest.param(LM_FAST, o, c, s, id=name, marks=LM) for name, o, c, s in LM_EXHIBITS],
)
def test_a_planted_bug_gets_in_a_full_run_the_verdicts_its_checks_give_alone(
    tmp_path: Path, base: list[str], overrides: list[str], check_id: str, status: str,
    healthy_full: Any,
) -> None:  # fmt: skip
    """In the full run the exhibit's check gives the verdict it gives alone
    (test_planted_bug_is_caught), and every other verdict the exhibit moves away from the
    healthy run's is the one its check gives alone: no check masks the bug or raises an alarm
    that belongs to another check's leftovers. A verdict the exhibit leaves as the healthy run's
    is not run alone again: the test above runs every check alone on the healthy run."""
    full = run_ids(tmp_path / "full", base + overrides, None)
    assert full[check_id].status == status, full[check_id].message
    healthy = healthy_full(base)
    moved_by_the_bug = [
        c for c in CHECKS
        if c not in (check_id, TIMED) and full[c].status != healthy[c].status
    ]  # fmt: skip
    assert _alone_differs(tmp_path, base + overrides, full, moved_by_the_bug) == {}
