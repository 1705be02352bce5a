"""Choosing the numeric precision, and refusing the silent substitutions."""

from __future__ import annotations

import torch

from trainwell.errors import TrainwellError

_MIXED_NEEDS_GPU = {"16-mixed", "16", 16}


def resolve_precision(requested: str | int | None, accelerator: str) -> str:
    """`auto` -> bf16-mixed on GPUs with bf16, 16-mixed on older GPUs, 32-true on CPU.

    Lightning quietly turns 16-mixed into bf16-mixed on CPU; a user who asked for fp16 + loss
    scaling would be measuring something else, so we stop and say so instead.
    """
    on_gpu = accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available()
    if requested in (None, "auto"):
        if not on_gpu:
            return "32-true"
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    if requested in _MIXED_NEEDS_GPU and not on_gpu:
        raise TrainwellError(
            f"trainer.precision={requested} needs a CUDA GPU (on CPU Lightning would silently run "
            "bf16-mixed instead); use trainer.precision=auto, 32-true or bf16-mixed"
        )
    return str(requested)


def configure_matmul(precision: str) -> None:
    """TF32 matmuls on GPU: ~free speed for fp32 layers, no effect on CPU."""
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")
