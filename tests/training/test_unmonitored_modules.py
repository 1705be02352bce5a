"""A module that does not log the monitored metric (`monitor.metric`, val/acc by default), run with
the default callbacks (best-checkpoint ModelCheckpoint and EarlyStopping on that metric).

* Logs no validation metric at all (Lightning's BoringModel as it ships): the run trains, with
  one info line, no best.ckpt, no early stopping; testing uses the final weights.
* Logs validation metrics, not that one (a typo): one `error:` line naming the metric, what the
  module logs and the fix, exit 2, before any training step (the sanity check decides).
* Logs it only after the sanity check: legitimate, trains and keeps its best checkpoint.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel
from omegaconf import OmegaConf, open_dict

from tests.helpers.foreign_modules import BORING, WIDTHS
from tests.helpers.scripted import scripted_cfg
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_script
from trainwell.errors import TrainwellError
from trainwell.training.monitored_metric import MonitoredMetricCheck
from trainwell.training.run import train

QUICK = (
    "trainer.max_epochs=1",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
    "print_config=false",
)
NOTHING_TO_MONITOR = (
    "nothing to monitor: BoringModel logs no validation metric (val/acc is monitor.metric):"
    " no checkpoints/best.ckpt and no early stopping"
)


def test_boring_model_with_the_default_callbacks_trains_without_best_ckpt(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # Lightning's demo pair as it ships, nothing about monitoring overridden.
    proc = call_script(
        "train.py",
        "~model",
        f"+model._target_={BORING}.BoringModel",
        "~data",
        f"+data._target_={BORING}.BoringDataModule",
        *QUICK,
        f"hydra.run.dir={run_dir}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if line.startswith("nothing to monitor")]
    assert said == [NOTHING_TO_MONITOR]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["best_ckpt"] == "" and results["test"] == "final weights (no best_ckpt)"
    assert results["finished_at"] == {"global_step": 64, "epoch": 1}  # the whole epoch trained
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last.ckpt"]


@pytest.mark.slow  # a second script run: ~10 s
def test_a_metric_the_module_does_not_log_stops_before_training(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_script("train.py", *WIDTHS, "monitor.metric=val/accuracy", *QUICK,
                      f"hydra.run.dir={run_dir}", env=TESTS_IMPORTABLE)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: WidthsModule logs no val/accuracy in validation, the metric best.ckpt and early"
        " stopping monitor (monitor.metric); it logs val/acc, val/loss: set"
        " monitor.metric=<one of those> and monitor.mode=min|max, or train without both:"
        " monitor.metric=null callbacks.early_stopping=null"
    ], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    # Refused in the sanity check: no step trained, so nothing was logged or checkpointed.
    assert not (run_dir / "csv" / "metrics.csv").exists()
    assert list((run_dir / "checkpoints").glob("*")) == []


class LogsAfterSanityCheck(BoringModel):
    """Logs val/loss and val/acc, but only outside the sanity check (a common pattern)."""

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        out = super().validation_step(batch, batch_idx)
        if not self.trainer.sanity_checking:
            self.log("val/loss", out["x"])
            self.log("val/acc", -out["x"])
        return out


def _fit(
    module: L.LightningModule, tmp_path: Path, monitor: str = "val/acc", **trainer: Any
) -> ModelCheckpoint:
    L.seed_everything(0)
    best = ModelCheckpoint(dirpath=tmp_path, filename="best", monitor=monitor, mode="max")
    stop = EarlyStopping(monitor=monitor, mode="max", check_on_train_epoch_end=False)
    settings = {"max_epochs": 1, "limit_train_batches": 4, "limit_val_batches": 2}
    L.Trainer(
        callbacks=[MonitoredMetricCheck(), stop, best],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **{**settings, **trainer},
    ).fit(module, datamodule=BoringDataModule())
    return best


def test_a_module_logging_only_after_the_sanity_check_keeps_its_best_ckpt(tmp_path: Path) -> None:
    best = _fit(LogsAfterSanityCheck(), tmp_path)
    assert best.best_model_path == str(tmp_path / "best.ckpt")


def test_without_a_sanity_check_a_wrong_metric_stops_at_the_first_validation(
    tmp_path: Path,
) -> None:
    class LogsLoss(BoringModel):
        def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            out = super().validation_step(batch, batch_idx)
            self.log("val_loss", out["x"])
            return out

    with pytest.raises(TrainwellError, match=r"^LogsLoss logs no val/acc in validation.*val_loss"):
        _fit(LogsLoss(), tmp_path, num_sanity_val_steps=0)


def test_a_monitored_training_metric_is_not_refused_before_training(tmp_path: Path) -> None:
    """The sanity check sees only validation's metrics: train/loss, logged by the training steps
    still to come, is legitimate to monitor (an hparams search may maximize it)."""

    class LogsTrainLoss(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            out = super().training_step(batch, batch_idx)
            self.log("train/loss", out["loss"])
            return out

        def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            out = super().validation_step(batch, batch_idx)
            self.log("val/loss", out["x"])
            return out

    best = _fit(LogsTrainLoss(), tmp_path, monitor="train/loss")
    assert best.best_model_path == str(tmp_path / "best.ckpt")


@pytest.mark.parametrize(
    ("case", "module"),
    [("no_validation_step", "TrainOnly"), ("no_val_data", "ScriptedValAcc"),
     ("no_val_batches", "ScriptedValAcc")],
)  # fmt: skip
def test_a_run_without_validation_says_so_once_and_keeps_no_best(
    tmp_path: Path, capsys: pytest.CaptureFixture, case: str, module: str
) -> None:
    """No validation at all: the monitored val/acc never comes. One line says so at the start,
    instead of Lightning's warning at every epoch's end, and the run has no best.ckpt."""
    extra = ["trainer.limit_val_batches=0"] if case == "no_val_batches" else []
    cfg = scripted_cfg(tmp_path / "run", "trainer.max_epochs=2", *extra)
    with open_dict(cfg):
        cfg.model = OmegaConf.create({"_target_": f"tests.helpers.scripted.{module}"})
        if case == "no_val_data":
            cfg.data = OmegaConf.create({"_target_": "tests.helpers.scripted.FourTrainPoints"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = train(cfg)
    said = [line for line in capsys.readouterr().out.splitlines() if "nothing to monitor" in line]
    assert said == [
        f"nothing to monitor: {module} runs no validation (val/acc is monitor.metric): no"
        " checkpoints/best.ckpt and no early stopping"
    ]
    assert not [w for w in caught if "could not find the monitored key" in str(w.message)]
    assert results["best_ckpt"] == "" and results["finished_at"]["global_step"] == 8


class PlateauOn(BoringModel):
    """Logs train/loss (each step) and val/mae (validation, per epoch); its ReduceLROnPlateau
    monitors `monitor`, as a module's own configure_optimizers says."""

    def __init__(
        self, monitor: str = "val/MAE", strict: bool = True, after_sanity: bool = False
    ) -> None:
        super().__init__()
        self.monitor, self.strict, self.after_sanity = monitor, strict, after_sanity
        self.steps = 0

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        out = super().training_step(batch, batch_idx)
        self.steps += 1
        self.log("train/loss", out["loss"])
        return out

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        out = super().validation_step(batch, batch_idx)
        if not (self.after_sanity and self.trainer.sanity_checking):
            self.log("val/mae", out["x"])
        return out

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        interval = "step" if self.monitor.startswith("train") else "epoch"
        config = {"scheduler": plateau, "monitor": self.monitor, "strict": self.strict,
                  "interval": interval}  # fmt: skip
        return {"optimizer": optimizer, "lr_scheduler": config}


SCHEDULER_LINE = (
    "PlateauOn logs no val/MAE in validation, the metric its ReduceLROnPlateau monitors (the"
    " lr_scheduler config's 'monitor'); it logs val/mae: monitor one of those, or log that name"
    " in validation_step"
)


def test_a_scheduler_monitoring_an_unlogged_metric_stops_after_the_sanity_check(
    tmp_path: Path,
) -> None:
    module = PlateauOn()
    with pytest.raises(TrainwellError) as caught:
        _fit(module, tmp_path, monitor="val/mae")
    assert str(caught.value) == SCHEDULER_LINE
    assert module.steps == 0  # before any training step


def test_without_a_sanity_check_a_scheduler_metric_stops_at_the_first_validation(
    tmp_path: Path,
) -> None:
    """No sanity pass: settled when validation first runs, before the epoch's end where
    Lightning would read the metric (and stop with its own exception)."""
    module = PlateauOn(after_sanity=True)
    with pytest.raises(TrainwellError) as caught:
        _fit(module, tmp_path, monitor="val/mae")
    assert str(caught.value).startswith("PlateauOn logs no val/MAE in validation")
    assert "train/loss" in str(caught.value) and "val/mae" in str(caught.value)
    module = PlateauOn()
    with pytest.raises(TrainwellError, match=r"^PlateauOn logs no val/MAE in validation"):
        _fit(module, tmp_path, monitor="val/mae", num_sanity_val_steps=0)


@pytest.mark.parametrize(
    ("monitor", "strict", "trainer"),
    [("val/mae", True, {}), ("train/loss", True, {}), ("val/MAE", False, {}),
     ("train/loss", True, {"limit_val_batches": 0}), ("val/mae", True, {"num_sanity_val_steps": 0})],
)  # fmt: skip
def test_legitimate_scheduler_monitors_train(
    tmp_path: Path, monitor: str, strict: bool, trainer: dict[str, Any]
) -> None:
    """Logged in validation (per epoch), a training metric stepped per step, a scheduler that
    allows a missing metric (`strict: False`), no validation at all: none is refused."""
    module = PlateauOn(monitor=monitor, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # strict=False: Lightning warns and skips the step
        _fit(module, tmp_path, monitor="val/mae", **trainer)
    assert module.steps == 4


def test_the_script_stops_a_scheduler_on_an_unlogged_metric_in_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = call_script(
        "train.py", "~model", f"+model._target_={__name__}.PlateauOn", "~data",
        f"+data._target_={BORING}.BoringDataModule", "monitor.metric=val/mae", "monitor.mode=min",
        *QUICK, f"hydra.run.dir={run_dir}",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == f"error: {SCHEDULER_LINE}", proc.stderr
    assert not list((run_dir / "checkpoints").glob("*"))  # before the first epoch's end
