"""logger=mlflow and logger=many: what each logger wrote, read back with the logger's own reader
(MlflowClient on the run dir's store, tensorboard's EventAccumulator, the wandb run file)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

from tests.helpers.config import REPO, compose_config
from tests.helpers.scripts import run_ok
from tests.helpers.wandb_records import last_logged, offline_runs, read_offline_run
from trainwell.training.builders import build_loggers

TINY = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "model.net.width=8",
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
]


@pytest.mark.slow  # three loggers, offline wandb's service process among them
def test_many_is_csv_tensorboard_and_offline_wandb_in_the_run_dir(tmp_path: Path) -> None:
    cfg = compose_config(["logger=many"], tmp_path)
    loggers = build_loggers(cfg)
    kinds = (CSVLogger, TensorBoardLogger, WandbLogger)
    assert len(loggers) == len(kinds)
    assert all(isinstance(lg, kind) for lg, kind in zip(loggers, kinds, strict=True))
    # Inherited from the single-logger configs, not copied: the same settings.
    for name in ("csv", "tensorboard", "wandb"):
        assert cfg.logger[name] == compose_config([f"logger={name}"], tmp_path).logger[name]
    assert all(str(logger.save_dir).startswith(str(tmp_path)) for logger in loggers)
    assert cfg.logger.wandb.offline is True


def test_mlflow_config_points_at_a_local_store_in_the_run_dir(tmp_path: Path) -> None:
    node = compose_config(["logger=mlflow"], tmp_path).logger.mlflow
    assert node._target_ == "lightning.pytorch.loggers.MLFlowLogger"
    assert node.tracking_uri == f"sqlite:///{tmp_path}/mlflow.db"
    assert node.artifact_location == f"{tmp_path}/mlartifacts"
    assert node.run_name == "train"


def _csv_column(path: Path, key: str) -> list[float]:
    with path.open() as handle:
        return [float(row[key]) for row in csv.DictReader(handle) if row.get(key)]


@pytest.mark.slow
def test_mlflow_run_is_in_the_run_dirs_store(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    run_ok("train.py", run_dir, "logger=mlflow", *TINY)
    written = json.loads((run_dir / "results.json").read_text())
    results, last = written["metrics"], written["metrics_last"]  # best epoch's val/*, last's
    client = MlflowClient(f"sqlite:///{run_dir}/mlflow.db")
    experiment = client.get_experiment_by_name("trainwell")
    assert Path(experiment.artifact_location.removeprefix("file://")) == run_dir / "mlartifacts"
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "train" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "val/loss")
    assert len(history) == 2  # one value per validation epoch
    assert history[-1].value == pytest.approx(last["val/loss"], abs=1e-6)
    assert run.data.metrics["test/acc"] == pytest.approx(results["test/acc"], abs=1e-6)
    assert run.data.params["seed"] == "42" and run.data.params["trainer/max_epochs"] == "2"
    assert not (REPO / "mlruns").exists() and not (tmp_path / "mlruns").exists()


@pytest.mark.slow
def test_many_loggers_each_hold_the_runs_metrics(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    run_ok("train.py", run_dir, "logger=many", *TINY)
    final = json.loads((run_dir / "results.json").read_text())["metrics_last"]["val/loss"]

    from_csv = _csv_column(run_dir / "csv" / "metrics.csv", "val/loss")
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    from_tensorboard = [event.value for event in events.Scalars("val/loss")]
    (run_file,) = offline_runs(run_dir)
    wandb_run = read_offline_run(run_file)

    assert len(from_csv) == len(from_tensorboard) == 2
    assert from_tensorboard == pytest.approx(from_csv, abs=1e-6)
    assert from_csv[-1] == pytest.approx(final, abs=1e-6)
    assert last_logged(wandb_run, "val/loss") == pytest.approx(final, abs=1e-6)
    assert (wandb_run.run_id, wandb_run.group, wandb_run.exit_code) == ("train-run", "", 0)
