"""device.placement: does one training step keep every tensor on the model's device?"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips


class _DeviceWatch(TorchFunctionMode):
    """Counts torch calls that mix CPU tensors with CUDA tensors (created on the wrong device)."""

    def __init__(self) -> None:
        super().__init__()
        self.mixed: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        devices = {t.device.type for t in tensors if t.dim() > 0}
        if len(devices) > 1:
            name = getattr(func, "__name__", str(func))
            self.mixed[name] = self.mixed.get(name, 0) + 1
        return func(*args, **kwargs)


def device_placement(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    if not torch.cuda.is_available():
        return skips(
            "no CUDA device on this machine: CPU-only runs cannot mix devices (rerun the doctor "
            "on a GPU machine)"
        )
    watch = _DeviceWatch()
    trainer_cfg = ctx.probe_cfg.trainer
    previous = trainer_cfg.accelerator
    trainer_cfg.accelerator = "gpu"
    try:
        with watch:
            fit = ctx.fit(ctx.make_task(), ctx.fixed_loader(repeats=2), [], max_steps=2)
    finally:
        trainer_cfg.accelerator = previous
    evidence |= {"mixed_device_calls": watch.mixed, "device": torch.cuda.get_device_name()}
    if fit.error is not None or watch.mixed:
        where = fit.error_line or ", ".join(f"{k} x{v}" for k, v in watch.mixed.items())
        return fails(
            f"a training step mixes CPU and CUDA tensors ({where}): something is created on the "
            "CPU in forward/loss; create tensors with device=x.device or register them as buffers"
        )
    return passes("two GPU training steps keep every tensor on CUDA")
