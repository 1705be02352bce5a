"""Training guards in real Lightning fits: non-finite stop, grad-norm logging, train-mode check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from hydra.utils import instantiate
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.config import compose_config
from tests.helpers.doctor import MUSEUM
from tests.helpers.loggers import MemoryLogger
from tests.helpers.trainers import quiet_trainer
from trainwell.callbacks import (
    GradNormLogger,
    NonFiniteGuard,
    NonFiniteLossError,
    TrainModeGuard,
)
from trainwell.training.builders import build_callbacks


def _task(tmp_path: Path, overrides: list[str] | None = None) -> L.LightningModule:
    cfg = compose_config(["model.net.width=8", *(overrides or [])], tmp_path / "run")
    torch.manual_seed(0)
    return instantiate(cfg.model)


def _loader(nan_batch: int | None = None, batches: int = 6) -> DataLoader:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batches * 8, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (batches * 8,), generator=gen)
    if nan_batch is not None:
        x[nan_batch * 8 + 2, 0, 1, 1] = float("nan")
    return DataLoader(TensorDataset(x, y), batch_size=8)


def _trainer(callbacks: list[L.Callback], **kwargs: Any) -> L.Trainer:
    return quiet_trainer(
        max_epochs=1,
        callbacks=callbacks,
        logger=kwargs.pop("logger", False),
        **kwargs,
    )


def test_nan_batch_stops_the_run_naming_the_batch(tmp_path: Path) -> None:
    guard_steps: list[int] = []

    class Steps(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            guard_steps.append(batch_idx)

    # The NaN input makes batch 3's loss and gradients NaN; the gradient check (before the
    # optimizer step) comes first, and still names the loss, the cause.
    with pytest.raises(NonFiniteLossError, match=r"training loss at epoch 0 batch 3\b.*doctor"):
        _trainer([NonFiniteGuard(), Steps()]).fit(_task(tmp_path), _loader(nan_batch=3))
    assert guard_steps == [0, 1, 2]  # the guard stopped at batch 3 itself


def test_nan_loss_is_named_as_such_when_gradients_are_not_checked(tmp_path: Path) -> None:
    # Without the gradient check, the loss check at the end of batch 3 stops the run.
    steps = _Steps()
    with pytest.raises(NonFiniteLossError, match=r"training loss at epoch 0 batch 3\b.*doctor"):
        _trainer([NonFiniteGuard(check_grads=False), steps]).fit(
            _task(tmp_path), _loader(nan_batch=3)
        )
    assert steps.batches == [0, 1, 2]


class _Steps(L.Callback):
    """Records the micro-batches that finished, and whether a checkpoint was ever written."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.batches.append(batch_idx)


def test_device_flags_name_the_first_bad_batch_and_stop_at_the_next_check(tmp_path: Path) -> None:
    """The GPU path, run on the CPU: flags on the device, read every 4 optimizer steps (after
    steps 0, 4, 8, ...): the NaN in batch 1 is read after batch 4, and named as batch 1."""
    steps = _Steps()
    guard = NonFiniteGuard(check_every_n_steps=4, eager_on_cpu=False)
    with pytest.raises(NonFiniteLossError, match=r"epoch 0 batch 1\b"):
        _trainer([guard, steps]).fit(_task(tmp_path), _loader(nan_batch=1, batches=12))
    assert steps.batches == [0, 1, 2, 3]  # the guard's batch-end hook for batch 4 raised


def test_device_flags_default_to_the_logging_cadence_and_accumulation_windows(
    tmp_path: Path,
) -> None:
    """K=2, log_every_n_steps=3: checks after optimizer steps 0, 3, 6 = batches 1, 7, 13."""
    steps = _Steps()
    guard = NonFiniteGuard(eager_on_cpu=False)
    with pytest.raises(NonFiniteLossError, match=r"batch 2\b"):
        _trainer([guard, steps], accumulate_grad_batches=2, log_every_n_steps=3).fit(
            _task(tmp_path), _loader(nan_batch=2, batches=16)
        )
    assert steps.batches == list(range(7))  # read at batch 7 (end of step 3)


class _OneElementLoss(L.LightningModule):
    """Its loss has shape (1,), not (): backward takes it, so the guard must too."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(64, 10)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x.flatten(1)), y).reshape(1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("eager", [True, False])
def test_a_one_element_loss_of_shape_1_is_checked_on_both_paths(eager: bool) -> None:
    guard = NonFiniteGuard(check_every_n_steps=100, eager_on_cpu=eager, check_grads=False)
    with pytest.raises(NonFiniteLossError, match=r"epoch 0 batch 1\b"):
        _trainer([guard]).fit(_OneElementLoss(), _loader(nan_batch=1))


def test_device_flags_are_read_before_a_checkpoint_is_written(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import ModelCheckpoint

    ckpt_dir = tmp_path / "ckpt"
    every_step = ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=1, save_top_k=-1)
    guard = NonFiniteGuard(check_every_n_steps=100, eager_on_cpu=False)
    with pytest.raises(NonFiniteLossError, match=r"batch 2\b"):
        _trainer([guard, every_step], enable_checkpointing=True).fit(
            _task(tmp_path), _loader(nan_batch=2)
        )
    saved = sorted(p.name for p in ckpt_dir.glob("*.ckpt"))
    assert saved == ["epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt"]  # none after the NaN batch


class _InfGradTask(L.LightningModule):
    """Finite loss (0), infinite gradient: d sqrt(w)/dw at w=0."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.b = nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return torch.sqrt(self.w).sum() + 0 * self.b.sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_non_finite_gradient_stops_the_run_naming_the_tensor() -> None:
    loader = DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)
    with pytest.raises(NonFiniteLossError, match=r"gradient at optimizer step 0 .*`w`"):
        _trainer([NonFiniteGuard()]).fit(_InfGradTask(), loader)


def test_grad_norm_monitor_logs_total_and_per_layer_on_its_cadence(tmp_path: Path) -> None:
    expected: dict[int, float] = {}

    class Reference(L.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
            grads = [p.grad.double() for p in pl_module.parameters() if p.grad is not None]
            expected[trainer.global_step] = float(torch.sqrt(sum((g**2).sum() for g in grads)))

    logger = MemoryLogger()
    _trainer([GradNormLogger(every_n_steps=2), Reference()], logger=logger).fit(
        _task(tmp_path), _loader()
    )
    logged = {step: m for step, m in logger.rows if "grad_norm/total" in m}
    assert sorted(logged) == [0, 2, 4]
    for step, metrics in logged.items():
        assert metrics["grad_norm/total"] == pytest.approx(expected[step], rel=1e-5)
        layers = [k for k in metrics if k != "grad_norm/total"]
        assert "grad_norm/net.head.1" in layers
        per_layer_total = sum(metrics[k] ** 2 for k in layers) ** 0.5
        assert per_layer_total == pytest.approx(expected[step], rel=1e-5)


def test_train_mode_guard_stops_a_model_left_in_eval(tmp_path: Path) -> None:
    task = _task(tmp_path, [f"model.net._target_={MUSEUM}.EvalBatchNormNet"])
    with pytest.raises(RuntimeError, match=r"eval mode at the start of training epoch 0"):
        _trainer([TrainModeGuard()]).fit(task, _loader())


def test_train_mode_guard_allows_listed_modules(tmp_path: Path) -> None:
    task = _task(tmp_path)
    task.net.features.eval()  # a deliberately frozen backbone
    trainer = _trainer([TrainModeGuard(allow_eval=["net.features"])])
    trainer.fit(task, _loader(batches=2))
    assert trainer.global_step == 2  # the guard let every batch train
    assert not any(
        m.training for m in task.net.features.modules()
    )  # and the backbone stayed frozen
    assert task.net.training
    # the same model, the backbone not listed: refused, naming it
    with pytest.raises(RuntimeError, match=r"eval mode .* \(first: `net\.features`\)"):
        _trainer([TrainModeGuard()]).fit(task, _loader(batches=2))
    # listed, the backbone does not let another module off: the head left in eval is refused
    task.net.head.eval()
    with pytest.raises(RuntimeError, match=r"eval mode .* \(first: `net\.head`\)"):
        _trainer([TrainModeGuard(allow_eval=["net.features"])]).fit(task, _loader(batches=2))


def test_guards_are_on_by_default(tmp_path: Path) -> None:
    cfg = compose_config([], tmp_path / "run")
    kinds = {type(c) for c in build_callbacks(cfg)}
    assert {NonFiniteGuard, GradNormLogger, TrainModeGuard} <= kinds


@pytest.mark.slow  # two spawned processes, each importing torch and Lightning
def test_fsdp2_grad_norms_reduce_local_shards_to_the_full_norms(tmp_path: Path) -> None:
    """2 gloo ranks, FSDP2 with uneven shards: summed local squares equal the full tensors'
    squared norms and the unsharded model's, on every rank (no full gradient is gathered)."""
    import socket

    from tests.helpers import fsdp_norms
    from trainwell.callbacks.grad_norm import squared_norms

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(fsdp_norms.worker, args=(2, port, str(tmp_path)), nprocs=2)
    model = fsdp_norms.net()
    model(fsdp_norms.batch()).pow(2).sum().backward()
    reference = squared_norms([p.grad for p in model.parameters()])
    for rank in (0, 1):
        out = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert torch.allclose(out["got"], out["full"], rtol=1e-6, atol=0), rank
        assert torch.allclose(out["got"], reference, rtol=1e-5, atol=0), rank


def test_learning_rate_logger_writes_floats_at_the_logging_steps(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    from trainwell.callbacks import LearningRateLogger

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.25)

    logger = CSVLogger(tmp_path, name="csv", version="")
    trainer = quiet_trainer(
        max_steps=6, log_every_n_steps=2, logger=logger, callbacks=[LearningRateLogger()]
    )
    trainer.fit(Tiny(), DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=4))
    logger.save()
    rows = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()
    assert rows[0].split(",") == ["lr-SGD", "step"]
    assert [r.split(",") for r in rows[1:]] == [["0.25", str(s)] for s in (1, 3, 5)]
