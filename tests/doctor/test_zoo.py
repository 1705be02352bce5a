"""False alarms: the doctor on healthy user code reports no `fail`, and every check answers.

Each zoo entry (tests/doctor/zoo.py) is a plain LightningModule / LightningDataModule pair put
in place of the configured model and data, as a user's own `_target_`s would be, and the full
doctor runs on it. A `warn` is allowed where it is the truth (a two-unit net cannot memorise a
batch; BatchNorm under accumulation); a `skip` must say why.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf, open_dict

from tests.doctor.zoo import write_wikitext
from tests.helpers.config import compose_config
from tests.helpers.doctor import LM, run_cfg
from trainwell.doctor.checks import CHECKS
from trainwell.doctor.report.verdict import Check
from trainwell.doctor.run import diagnose

ACC = "accumulation.equivalence"

ZOO = "tests.doctor.zoo"
DEMO = "lightning.pytorch.demos.boring_classes.DemoModel"
BORING_DATA = "lightning.pytorch.demos.boring_classes.BoringDataModule"

# (entry, module, datamodule, overrides, checks that must warn)
ENTRIES = [
    ("slow linear model, plain SGD", "LogisticRegression", "DigitsTuples", [], set()),
    ("one-unit bottleneck", "Bottleneck", "DigitsTuples", [], {"overfit.one_batch"}),
    (
        "BatchNorm + dropout, accumulate 2",
        "BatchNormCNN",
        "DigitsTuples",
        ["trainer.accumulate_grad_batches=2"],
        {"accumulation.equivalence"},
    ),
    (
        "GroupNorm, accumulate 3",
        "GroupNormCNN",
        "DigitsTuples",
        ["trainer.accumulate_grad_batches=3"],
        set(),
    ),
    ("dropout 0.5, dict from training_step", "HeavyDropoutMLP", "DigitsTuples", [], set()),
    (
        "dict batches with a mask",
        "MaskedDictModel",
        "DigitsDicts",
        ["trainer.accumulate_grad_batches=2"],
        set(),
    ),
    ("(x, y, index) batches, no logging", "TripleBatchModel", "DigitsTriples", [], set()),
    ("no validation split", "TrainOnlyModel", "DigitsTrainOnly", [], set()),
    ("manual optimization, own accumulation", "ManualAccumulation", "DigitsTuples", [], set()),
    ("own warmup scheduler", "WarmupScheduled", "DigitsTuples", [], set()),
    ("iterable dataset", "StreamModel", "DigitsStream", [], set()),
    (
        "user's token-level GRU",
        "TokenGRU",
        "Sentences",
        ["trainer.accumulate_grad_batches=2"],
        {"overfit.one_batch"},  # sequences sharing a prefix: the batch has an entropy floor
    ),
    ("autoencoder on bare tensor batches", "AutoEncoder", "DigitsImagesOnly", [], set()),
    ("StepLR per epoch (Lightning's default interval)", "EpochStepLR", "DigitsTuples", [], set()),
    (
        "StepLR per epoch, accumulate 2",
        "EpochStepLR",
        "DigitsTuples",
        ["trainer.accumulate_grad_batches=2"],
        set(),
    ),
    (
        "ReduceLROnPlateau from the config's _partial_",
        "PlateauScheduled",
        "DigitsTuples",
        [],
        set(),
    ),
    # a GAN's players compete: its one-batch loss is reported, not judged
    ("GAN: two optimizers, manual", "GAN", "DigitsImagesForGAN", [], {"overfit.one_batch"}),
    ("keeps the latest loss with its graph", "KeepsLastLoss", "DigitsTuples", [], set()),
    ("training_step returns None for a batch", "SkipsABatch", "DigitsTriples", [], set()),
    (
        "1 natural duplicate in a val split of 47",
        "EpochStepLR",
        "DigitsOneNaturalDuplicate",
        [],
        {"data.leakage"},
    ),
    ("two backwards through one graph", "TwoBackwardsOneGraph", "DigitsTuples", [], set()),
    ("conv, ReLU and max pooling, zero biases", "PooledCNN", "DigitsTuples", [], set()),
    (
        "Lightning's BoringModel and BoringDataModule, as shipped",
        "lightning.pytorch.demos.boring_classes.BoringModel",
        "lightning.pytorch.demos.boring_classes.BoringDataModule",
        [],
        set(),
    ),
    # its training_step returns a sum over samples: harmless while nothing is accumulated
    (
        "Lightning's DemoModel (summed loss), K=1, as shipped",
        DEMO,
        BORING_DATA,
        [],
        {"accumulation.equivalence"},
    ),
]

# Constructor arguments of entries that take the config's optimizer / scheduler `_partial_`s.
MODEL_ARGS = {
    "PlateauScheduled": {
        "optimizer": {"_target_": "torch.optim.Adam", "_partial_": True, "lr": 0.01},
        "scheduler": {
            "_target_": "torch.optim.lr_scheduler.ReduceLROnPlateau",
            "_partial_": True,
            "patience": 2,
        },
    }
}


def _target(name: str) -> str:
    return name if "." in name else f"{ZOO}.{name}"


def zoo_config(
    tmp_path: Path, module: str | None, data: str | None, overrides: list[str]
) -> DictConfig:
    cfg = compose_config(overrides, tmp_path / "run", config_name="doctor")
    with open_dict(cfg):
        if module is not None:
            cfg.model = OmegaConf.create(
                {"_target_": _target(module), **MODEL_ARGS.get(module, {})}
            )
            # The entries log their own names (val_loss, val/recon...): no monitored metric, as
            # train.py's refusal of an unlogged val/acc tells their authors (so does the doctor).
            cfg.monitor.metric, cfg.callbacks.early_stopping = None, None
        if data is not None:
            cfg.data = OmegaConf.create({"_target_": _target(data)})
    return cfg


# The language-model example's own task and data, as the zoo's entries are written.
TOKENS_ENTRY = ("the sequence task", None, None, ["experiment=lm_accum"], set())

# `slow`: the entries whose overfit probe runs to its step / time budget (a few seconds each).
SLOW = {"one-unit bottleneck", "user's token-level GRU"}
# (entry, module, datamodule, overrides, checks that must warn), as ENTRIES hold them
Entry = tuple[str, str | None, str | None, list[str], set[str]]
BY_NAME = {entry[0]: entry for entry in ENTRIES}
ZooRun = Callable[[Entry], dict[str, Check]]


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory: pytest.TempPathFactory) -> ZooRun:
    """The full doctor's verdicts on a zoo entry, {check id: verdict} in the order reported, run
    once per entry: the entry's own test and the tests below that read one of its verdicts in
    detail judge the same run (the doctor seeds itself: a second run gives the same verdicts)."""
    runs: dict[str, dict[str, Check]] = {}

    def run(entry: Entry) -> dict[str, Check]:
        name, module, data, overrides, _ = entry
        if name not in runs:
            cfg = zoo_config(tmp_path_factory.mktemp("zoo"), module, data, overrides)
            runs[name] = {c.id: c for c in diagnose(cfg)[0]}
        return runs[name]

    return run


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(entry, id=entry[0], marks=pytest.mark.slow if entry[0] in SLOW else ())
        for entry in ENTRIES
    ]
    + [pytest.param(TOKENS_ENTRY, id=TOKENS_ENTRY[0], marks=[pytest.mark.slow, LM])],
)
def test_healthy_user_code_has_no_false_alarm(entry: Entry, zoo_run: ZooRun) -> None:
    warns = entry[4]
    checks = list(zoo_run(entry).values())
    statuses = {c.id: c.status for c in checks}
    print({c.id: (c.status, c.message) for c in checks if c.status != "pass"})
    assert list(statuses) == list(CHECKS)  # every check answered
    assert [c.message for c in checks if c.status == "fail"] == []
    # data.throughput times the loader against the step: its warn moves with the machine's load
    # (a loaded 2-core machine slows the loader's workers), not with the code; a fail still counts.
    warned = {i for i, s in statuses.items() if s == "warn"} - {"data.throughput"}
    assert warned == warns - {"data.throughput"}
    assert all(len(c.message) > 20 and "\n" not in c.message for c in checks)


def test_skipped_batch_leaves_the_overfit_probe_judging(zoo_run: ZooRun) -> None:
    """training_step returning None for one batch: the other steps still make the verdict."""
    # SkipsABatch on DigitsTriples
    checks = zoo_run(BY_NAME["training_step returns None for a batch"])
    overfit = checks["overfit.one_batch"]
    assert overfit.status == "pass", overfit.message
    assert overfit.evidence["steps_skipped_by_training_step"] == 1


def test_gan_overfit_verdict_says_what_is_true(zoo_run: ZooRun) -> None:
    checks = zoo_run(BY_NAME["GAN: two optimizers, manual"])  # GAN on DigitsImagesForGAN
    overfit = checks["overfit.one_batch"]
    assert "warmup" not in overfit.message and "2 optimizers" in overfit.message
    assert checks["grad.zeroing"].status == "pass"
    assert checks["grad.zeroing"].evidence["optimizer_steps_checked"] >= 10


def test_natural_duplicate_warns_with_its_count(zoo_run: ZooRun) -> None:
    # EpochStepLR on DigitsOneNaturalDuplicate
    leak = zoo_run(BY_NAME["1 natural duplicate in a val split of 47"])["data.leakage"]
    assert leak.status == "warn" and "1 of 47 val samples" in leak.message


def test_graph_kept_from_the_latest_step_only_is_no_leak(zoo_run: ZooRun) -> None:
    # KeepsLastLoss on DigitsTuples
    memory = zoo_run(BY_NAME["keeps the latest loss with its graph"])["memory.graph_leak"]
    nodes = memory.evidence["graph_nodes_alive_after_each_step"]
    assert memory.status == "pass" and nodes[-1] > 0 and len(set(nodes[1:])) == 1, memory.evidence


def test_a_relu_at_its_kink_is_left_out_of_the_finite_differences(tmp_path: Path) -> None:
    """Zero biases over the digits' blank background put ReLUs exactly at 0: the central
    difference there averages two slopes, autograd takes one; grad.flow compares elsewhere."""
    cfg = zoo_config(tmp_path, "PooledCNN", "DigitsTuples", [])
    check = run_cfg(cfg, tmp_path / "probes", ["grad.flow"])["grad.flow"]
    assert check.status == "pass", check.message
    assert check.evidence["finite_difference_coordinates_at_a_kink"] > 0
    assert "at a kink of the loss" in check.message


def test_a_loss_computed_in_float32_is_not_compared_by_finite_differences(tmp_path: Path) -> None:
    """`F.one_hot(y).float()` as a target keeps the loss in float32 from float64 weights: a
    finite difference of 1e-6 is below its resolution (0 where autograd says 0.02)."""
    model = "tests.doctor.reported.sigmoid_before_bce_with_logits.Healthy"
    cfg = zoo_config(tmp_path, model, "tests.doctor.reported._common.Digits", [])
    check = run_cfg(cfg, tmp_path / "probes", ["grad.flow"])["grad.flow"]
    assert check.status == "pass", check.message
    assert "torch.float32" in check.evidence["finite_difference_skipped"]


def test_batchnorm_under_accumulation_warns_with_the_fix(zoo_run: ZooRun) -> None:
    # BatchNormCNN on DigitsTuples, accumulate_grad_batches=2
    checks = zoo_run(BY_NAME["BatchNorm + dropout, accumulate 2"])
    accumulation = checks["accumulation.equivalence"]
    assert accumulation.status == "warn"
    assert "BatchNorm" in accumulation.message and "GroupNorm" in accumulation.message
    assert "larger micro-batch" in accumulation.message
    assert accumulation.evidence["batchnorm_layers"] == ["features.1"]
    assert accumulation.evidence["effective_batch"] == 2 * accumulation.evidence["micro_batch"]


def _accumulation(tmp_path: Path, overrides: list[str]) -> Check:
    cfg = zoo_config(tmp_path, DEMO, BORING_DATA, overrides)
    return run_cfg(cfg, tmp_path / "probes", [ACC])[ACC]


def test_summed_loss_without_accumulation_warns_with_what_would_break(tmp_path: Path) -> None:
    """K=1, one process: each step is one micro-batch, so the sum only rescales the LR."""
    check = _accumulation(tmp_path, [])
    assert check.status == "warn", check.message
    assert "summed over samples instead of averaged" in check.message
    assert "accumulate_grad_batches > 1 or DDP" in check.message
    window = check.evidence["the first window of 2 micro-batches"]
    assert abs(window["norm_ratio"] - 0.5) < 0.05
    assert (check.evidence["accumulate_configured"], check.evidence["configured_world_size"]) == (
        1,
        1,
    )


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(["trainer.accumulate_grad_batches=2"], id="accumulates"),
        pytest.param(["trainer.devices=2"], id="two-ranks"),
    ],
)
def test_summed_loss_fails_once_gradients_are_combined(
    tmp_path: Path, overrides: list[str]
) -> None:
    check = _accumulation(tmp_path, overrides)
    assert check.status == "fail", check.message
    assert "summed over samples instead of averaged" in check.message


@pytest.mark.slow  # ~40 s: a 2-layer Transformer through every probe on CPU
def test_lightning_demo_transformer_as_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning's demo LightningTransformer, unchanged; its prepare_data reads ./data and
    downloads only when the file is missing, so the test writes one there first."""
    monkeypatch.chdir(tmp_path)
    vocab = write_wikitext(tmp_path / "data")
    cfg = zoo_config(
        tmp_path, "lightning.pytorch.demos.transformer.LightningTransformer", "LocalWikiText2", []
    )
    with open_dict(cfg):
        cfg.model.vocab_size = vocab
        # The probes draw their own fixed batch (probe.batch_size); the loader's batch sizes only
        # the short fits that read whole splits: 4 sequences a batch cut those to a quarter.
        cfg.data.batch_size = 4
    checks, _ = diagnose(cfg)
    assert [c.message for c in checks if c.status == "fail"] == []
    assert {c.id for c in checks if c.status == "warn"} == set()
