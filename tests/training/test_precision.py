"""Precision: `auto` resolution, no silent fp16 -> bf16 swap on CPU, clipping after unscale."""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins import MixedPrecision
from torch import nn

from tests.helpers.trainers import quiet_trainer
from trainwell.errors import TrainwellError
from trainwell.training.precision import configure_matmul, resolve_precision

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU resolution")


@cpu_only
def test_auto_is_32_true_on_cpu() -> None:
    assert resolve_precision("auto", "cpu") == "32-true"
    assert resolve_precision(None, "auto") == "32-true"  # accelerator auto without a GPU


@cpu_only
@pytest.mark.parametrize("requested", ["16-mixed", "16"])
def test_fp16_mixed_on_cpu_is_refused_not_swapped(requested: str) -> None:
    # Lightning would quietly run bf16-mixed instead: a different experiment than asked for.
    with pytest.raises(TrainwellError, match="needs a CUDA GPU"):
        resolve_precision(requested, "cpu")


@cpu_only
def test_explicit_cpu_precisions_pass_through() -> None:
    assert resolve_precision("bf16-mixed", "cpu") == "bf16-mixed"
    assert resolve_precision("32-true", "cpu") == "32-true"


@cpu_only
def test_matmul_precision_untouched_on_cpu() -> None:
    before = torch.get_float32_matmul_precision()
    configure_matmul("32-true")
    assert torch.get_float32_matmul_precision() == before


class GradNorm(L.Callback):
    """The gradient norm the optimizer sees before clipping (after the scaler's unscale)."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())


@pytest.mark.example("project.data.synthetic")
def test_fp16_scaler_clips_the_true_gradient_norm() -> None:
    # The fp16 GradScaler path (Lightning's MixedPrecision plugin) run on CPU: the scaler
    # multiplies the loss by 2**16; clipping before unscale would clip the scaled gradient and
    # shrink the real step 65536x. SGD(lr=1, no momentum): the weight change IS the clipped grad.
    from project.data.synthetic import SyntheticDataModule
    from project.tasks.classification import ClassificationTask

    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
    start = [p.detach().clone() for p in net.parameters()]
    task = ClassificationTask(net, partial(torch.optim.SGD, lr=1.0))
    data = SyntheticDataModule(num_samples=32, num_val=8, num_test=8, batch_size=32, seed=0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    monitor = GradNorm()
    clip = 0.05
    trainer = quiet_trainer(
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
        gradient_clip_val=clip,
        max_steps=1,
        callbacks=[monitor],
    )
    trainer.fit(task, datamodule=data)
    assert scaler.get_scale() == 2.0**16  # the step was not skipped for an overflow
    true_norm = monitor.norms[0]
    assert 1.0 < true_norm < 1e3  # unscaled: the scaled norm would be ~65536x larger
    step = torch.linalg.vector_norm(
        torch.stack([(p.detach() - s).norm() for p, s in zip(net.parameters(), start, strict=True)])
    ).item()
    assert step == pytest.approx(clip, rel=1e-3)
