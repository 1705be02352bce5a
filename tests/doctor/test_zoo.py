"""False alarms: the doctor on healthy user code reports no `fail`, and every check answers.

Each zoo entry (tests/doctor/zoo.py) is a plain LightningModule / LightningDataModule pair put
in place of the configured model and data, as a user's own `_target_`s would be, and the full
doctor runs on it. A `warn` is allowed where it is the truth (a two-unit net cannot memorise a
batch; BatchNorm under accumulation); a `skip` must say why.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf, open_dict

from tests.helpers.config import compose_config
from trainwell.doctor.checks import CHECK_IDS
from trainwell.doctor.run import diagnose

ZOO = "tests.doctor.zoo"

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
    ("the sequence task", None, None, ["experiment=lm_accum"], set()),
]


def zoo_config(
    tmp_path: Path, module: str | None, data: str | None, overrides: list[str]
) -> DictConfig:
    cfg = compose_config(overrides, tmp_path / "run", config_name="doctor")
    with open_dict(cfg):
        if module is not None:
            cfg.model = OmegaConf.create({"_target_": f"{ZOO}.{module}"})
        if data is not None:
            cfg.data = OmegaConf.create({"_target_": f"{ZOO}.{data}"})
    return cfg


# `slow`: the entries whose overfit probe runs to its step / time budget (a few seconds each).
SLOW = {"one-unit bottleneck", "user's token-level GRU", "the sequence task"}


@pytest.mark.parametrize(
    ("module", "data", "overrides", "warns"),
    [
        pytest.param(m, d, o, w, id=name, marks=pytest.mark.slow if name in SLOW else ())
        for name, m, d, o, w in ENTRIES
    ],
)
def test_healthy_user_code_has_no_false_alarm(
    tmp_path: Path, module: str | None, data: str | None, overrides: list[str], warns: set[str]
) -> None:
    checks, _ = diagnose(zoo_config(tmp_path, module, data, overrides))
    statuses = {c.id: c.status for c in checks}
    print({c.id: (c.status, c.message) for c in checks if c.status != "pass"})
    assert list(statuses) == list(CHECK_IDS)  # every check answered
    assert [c.message for c in checks if c.status == "fail"] == []
    assert {i for i, s in statuses.items() if s == "warn"} == warns
    assert all(len(c.message) > 20 and "\n" not in c.message for c in checks)
