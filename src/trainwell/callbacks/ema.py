"""ExactEMA: an exponential moving average of the weights, once per optimizer step (`ema.decay=0.999`).

Lightning's EMAWeightAveraging, corrected where it would break the template's guarantees
(compat/averaging.py): the average is built from the module as the strategy placed it (its
device, dtype and FSDP2 shards), updated by one fused step without a host sync, and a checkpoint
written after training still holds the trained weights. What stays Lightning's: when it updates
(once per optimizer step, never per micro-batch: it compares `trainer.global_step`, so the same
on 1 process and on W ranks, where every rank averages the same weights), `update_every_n_steps`
and `update_starting_at_step`, and the checkpoint layout: `state_dict` holds the average (so
eval, `load_from_checkpoint`, predict, export and serve use it), `current_model_state` the
trained weights and `averaging_state` the update count. Validation runs on the average.

BatchNorm: with `use_buffers=True` (the default) the running mean and variance are averaged with
the same decay (the batch counter is copied); `use_buffers=False` copies every buffer from the
trained model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from omegaconf import DictConfig, OmegaConf

from trainwell import compat
from trainwell.errors import TrainwellError
from trainwell.io.announce import announce
from trainwell.io.checkpoint_read import load_checkpoint_file

_SHARDED = (
    "ema.decay with trainer.strategy.save_distributed_checkpoint=true is not supported: the "
    "average travels in one ordinary checkpoint; set "
    "trainer.strategy.save_distributed_checkpoint=false"
)


def saved_decay(checkpoint: dict[str, Any]) -> float | None:
    """The decay of the EMA that wrote `checkpoint` (None: none recorded)."""
    for key, state in (checkpoint.get("callbacks") or {}).items():
        if str(key).startswith(ExactEMA.__qualname__) and isinstance(state, dict):
            decay = state.get("decay")
            return None if decay is None else float(decay)
    return None


class ExactEMA(compat.PlacedEMAWeightAveraging):
    """Keep an EMA of the weights; validate, checkpoint and ship it (see the module docstring).

    Args:
        decay: each update moves the average (1 - decay) of the way to the weights.
        update_every_n_steps: update after every N-th optimizer step.
        update_starting_at_step: first optimizer step (0-based) that updates the average; the
            first update copies the weights.
        use_buffers: average BatchNorm's running statistics (True) or copy them (False).
    """

    def __init__(
        self,
        decay: float,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        use_buffers: bool = True,
    ) -> None:
        if not 0.0 <= float(decay) <= 1.0:
            raise TrainwellError(f"ema.decay={decay} is not in [0, 1] (0.999 is usual)")
        if int(update_every_n_steps) < 1:
            raise TrainwellError(f"ema.update_every_n_steps={update_every_n_steps} must be >= 1")
        super().__init__(
            decay=float(decay),
            use_buffers=bool(use_buffers),
            update_every_n_steps=int(update_every_n_steps),
            update_starting_at_step=update_starting_at_step,
            # Lightning's epoch trigger updates once more at every epoch end, after that epoch's
            # last step already did: one optimizer step counted twice. Not offered.
            update_starting_at_epoch=None,
        )
        self.decay = float(decay)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and getattr(trainer.strategy, "save_distributed", False):
            raise TrainwellError(_SHARDED)
        super().setup(trainer, pl_module, stage)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "decay": self.decay}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        line = horizon_line(
            self.decay, trainer.estimated_stepping_batches, self.update_starting_at_step,
            self.update_every_n_steps,
        )  # fmt: skip
        if line is not None:
            announce(line)

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            pass  # testing or validating a checkpoint: its state_dict, the average, is used
        elif not compat.holds_average(checkpoint):
            announce(
                "ema: the checkpoint holds no average (written without ema.decay); the average "
                "starts from its weights at the next update"
            )
        elif saved_decay(checkpoint) not in (None, self.decay):
            announce(
                f"ema: the checkpoint's average used decay {saved_decay(checkpoint)}; it "
                f"continues with {self.decay}"
            )
        super().on_load_checkpoint(trainer, pl_module, checkpoint)

    @property
    def updates(self) -> int:
        """How many times the average was updated (0 before the first)."""
        return 0 if self.average is None else self.average.count


def planned_updates(total_steps: float, start: int | None, every: int) -> int | None:
    """How many optimizer steps of a run of `total_steps` update the average (Lightning's rule:
    step s, 0-based, updates when s >= start and s % every == 0); None for an open-ended run."""
    if total_steps == float("inf"):
        return None
    first = max(0, start or 0)
    first += (-first) % every  # the first step at or after `start` that `every` divides
    return max(0, (int(total_steps) - 1 - first) // every + 1) if first < total_steps else 0


def horizon_line(decay: float, total_steps: float, start: int | None, every: int) -> str | None:
    """Said at launch when the average will not be what `ema.decay` suggests: never updated (the
    run validates, tests and ships its trained weights), or so few updates that the first one
    still weighs over a tenth of the final average."""
    updates = planned_updates(total_steps, start, every)
    if updates is None:
        return None
    if updates == 0:
        return (
            f"ema: the average is never updated in this run ({int(total_steps)} optimizer steps "
            f"planned, ema.update_starting_at_step={start}): validation, test and the shipped "
            "weights are the trained weights"
        )
    first_weight = decay ** (updates - 1)
    if first_weight <= 0.1:
        return None
    suggested = 0.01 ** (1.0 / updates)  # the first update weighs 1% at the end
    return (
        f"ema: ema.decay={decay} averages over about {1.0 / max(1.0 - decay, 1e-12):.0f} updates "
        f"and this run makes {updates}: its first update's weights still weigh "
        f"{first_weight:.0%} of the final average; ema.decay={suggested:.4f} or lower averages "
        "this run's later weights"
    )


def ema_callbacks(cfg: DictConfig) -> list[L.Callback]:
    """The run's EMA as `ema.*` configures it (conf/callbacks/_ema.yaml): none when `ema.decay` is
    null or the config has no `ema` node."""
    node = cfg.get("ema")
    if node is None or node.get("decay") is None:
        return []
    if OmegaConf.select(cfg, "trainer.strategy.save_distributed_checkpoint", default=False):
        raise TrainwellError(_SHARDED)
    return [ExactEMA(**dict(node))]


def weights_used(callbacks: list[L.Callback], best_ckpt: str = "") -> dict[str, Any]:
    """What results.json says about the weights behind its metrics: the trained ones for the
    training metrics; with EMA, the average for validation and test, which both come from the
    best checkpoint: the trained weights where that checkpoint was written before the average's
    first update (compat/averaging.py, 5.)."""
    ema = next((c for c in callbacks if isinstance(c, ExactEMA)), None)
    if ema is None:
        return {"train": "trained", "val": "trained", "test": "trained"}
    averaged = ema.updates > 0
    if averaged and best_ckpt and Path(best_ckpt).is_file():
        averaged = compat.holds_updated_average(load_checkpoint_file(best_ckpt, mmap=True))
    used = "ema" if averaged else "trained"
    return {
        "train": "trained",
        "val": used,
        "test": used,
        "ema": {"decay": ema.decay, "updates": ema.updates},
    }


def refuse_resume_without_ema(checkpoint: dict[str, Any], path: str, cfg: DictConfig) -> None:
    """A checkpoint whose state_dict is an average, resumed with EMA off, would go on training
    from the average: refused in one line."""
    if compat.holds_average(checkpoint) and not ema_callbacks(cfg):
        decay = saved_decay(checkpoint)
        again = f"ema.decay={decay}" if decay is not None else "ema.decay=<its decay>"
        raise TrainwellError(
            f"{path} was trained with EMA (its state_dict is the average, the trained weights "
            f"are beside it): resume it with {again}"
        )
