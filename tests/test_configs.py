"""Every config name the README, docs/ and the public contract mention composes, and instantiates where it can here."""

from pathlib import Path

import lightning as L
import pytest
import torch
from hydra.utils import instantiate

from project.data.base import ClassificationDataModule
from tests.helpers.config import compose_config
from trainwell.training.builders import build_callbacks, build_loggers, build_trainer

DATA = [
    "digits",
    pytest.param("cifar10", marks=pytest.mark.example("project.data.cifar10")),
    pytest.param("synthetic", marks=pytest.mark.example("project.data.synthetic")),
]
MODELS = [
    "digits_cnn",
    pytest.param("resnet18", marks=pytest.mark.example("project.models.resnet")),
    "mlp",
]
TRAINERS = ["cpu", "gpu", "ddp", "ddp_sim", "fsdp", "fsdp_sim"]
LOGGERS = ["csv", "wandb", "tensorboard"]
DEBUG = ["fdr", "overfit", "profiler"]


@pytest.mark.parametrize("data", DATA)
def test_data_configs_instantiate(data: str, tmp_path: Path) -> None:
    cfg = compose_config([f"data={data}"], tmp_path)
    dm = instantiate(cfg.data)
    assert isinstance(dm, ClassificationDataModule)
    assert dm.batch_size == cfg.data.batch_size and dm.seed == cfg.seed


@pytest.mark.parametrize("model", MODELS)
def test_model_configs_instantiate(model: str, tmp_path: Path) -> None:
    cfg = compose_config([f"model={model}"], tmp_path)
    task = instantiate(cfg.model)
    assert isinstance(task, L.LightningModule)
    assert set(cfg.model) >= {"net", "optimizer", "scheduler"}
    optimizer = task.optimizer_factory(params=task.parameters())
    assert isinstance(optimizer, torch.optim.Optimizer)


@pytest.mark.example("project.models.resnet")
def test_optimizer_presets(tmp_path: Path) -> None:
    sgd = compose_config(["model/optimizer=sgd"], tmp_path).model.optimizer
    assert sgd._target_ == "torch.optim.SGD" and sgd.nesterov and sgd.momentum == 0.9
    adamw = compose_config(["model=resnet18", "model/optimizer=adamw"], tmp_path).model.optimizer
    assert adamw._target_ == "torch.optim.AdamW"
    constant = compose_config(["model.scheduler=null"], tmp_path)
    assert instantiate(constant.model).scheduler_factory is None


@pytest.mark.parametrize("trainer", TRAINERS)
def test_trainer_configs_compose(trainer: str, tmp_path: Path) -> None:
    cfg = compose_config([f"trainer={trainer}"], tmp_path)
    assert cfg.trainer._target_ == "lightning.pytorch.Trainer"
    if trainer in ("cpu", "ddp_sim", "fsdp_sim"):  # the presets that run on this machine
        built = build_trainer(cfg, logger=False)
        assert built.world_size == (1 if trainer == "cpu" else 2)
    else:
        assert cfg.trainer.accelerator == "gpu"


@pytest.mark.parametrize("logger", LOGGERS)
def test_logger_configs_instantiate(logger: str, tmp_path: Path) -> None:
    cfg = compose_config([f"logger={logger}"], tmp_path)
    loggers = build_loggers(cfg)
    assert len(loggers) == 1
    assert str(loggers[0].save_dir).startswith(str(tmp_path))
    if logger == "wandb":
        # Offline by default; the run it starts (seconds of wandb's service) is written and read
        # back by tests/training/test_train_script.py::test_wandb_logger_writes_an_offline_run.
        assert cfg.logger.wandb.offline is True


@pytest.mark.parametrize("debug", DEBUG)
def test_debug_configs_compose(debug: str, tmp_path: Path) -> None:
    cfg = compose_config([f"debug={debug}"], tmp_path)
    assert cfg.task_name == "debug"
    build_trainer(cfg, callbacks=build_callbacks(cfg), logger=False)


def test_default_callbacks(tmp_path: Path) -> None:
    cfg = compose_config([], tmp_path)
    names = {type(c).__name__ for c in build_callbacks(cfg)}
    assert {
        "ModelCheckpoint",
        "EarlyStopping",
        "LearningRateLogger",
        "ThrottledProgressBar",
        "RichModelSummary",
    } <= names


@pytest.mark.example("project.data.cifar10", "project.data.synthetic", "project.models.resnet")
def test_resnet_accum_experiment(tmp_path: Path) -> None:
    cfg = compose_config(["experiment=resnet_accum"], tmp_path)
    assert cfg.data._target_.endswith("CIFAR10DataModule")
    assert cfg.model.net._target_.endswith("ResNet18")
    assert cfg.model.optimizer._target_ == "torch.optim.SGD" and cfg.model.optimizer.nesterov
    assert cfg.data.batch_size == 128 and cfg.trainer.accumulate_grad_batches == 4
    assert cfg.trainer.max_epochs == 30
    assert cfg.callbacks.model_checkpoint.monitor == "val/acc"
    assert cfg.callbacks.early_stopping.monitor == "val/acc"
    # On this CPU-only machine precision=auto resolves to 32-true (bf16-mixed on a bf16 GPU).
    if not torch.cuda.is_available():
        assert build_trainer(cfg, logger=False).precision == "32-true"
    # The command line still picks the data: experiment=resnet_accum data=synthetic.
    synthetic = compose_config(["experiment=resnet_accum", "data=synthetic"], tmp_path)
    assert synthetic.data._target_.endswith("SyntheticDataModule")
    assert synthetic.data.batch_size == 128
