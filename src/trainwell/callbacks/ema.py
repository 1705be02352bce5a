"""ExactEMA: an exponential moving average of the weights, once per optimizer step (`ema.decay=0.999`).

One callback owns the average: when it updates, where it lives, when validation and the end of
training swap it in, and what a checkpoint holds. It is not Lightning's EMAWeightAveraging: that
callback builds its average before the strategy places the module, updates it with host syncs,
copies it over the trained weights after fit, tests a checkpoint's trained weights and validates
an average no update has touched (compat/averaging.py, 1.-5., each with its upstream report), so
a subclass would replace seven of its ten hooks. What stays Lightning's is the checkpoint
layout: `state_dict` holds the average (so eval, `load_from_checkpoint`, predict, export and serve
use it), `current_model_state` the trained weights and `averaging_state` the update count. The
callback's own state is the step of its last update and the decay; the decay lives here only
(the average is given it at each update).

When: after optimizer step s (0-based) if s >= `update_starting_at_step` and
s % `update_every_n_steps` == 0; once per step, never per micro-batch (it compares
`trainer.global_step`, so 1 process and W ranks, where every rank averages the same weights,
update alike). The first update copies the weights. Validation runs on the average; before the
first update there is none, and validation, checkpoints and what ships are the trained weights.

BatchNorm: with `use_buffers=True` (the default) the running mean and variance are averaged with
the same decay (the batch counter is copied); `use_buffers=False` copies every buffer from the
trained model.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
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


class ExactEMA(L.Callback):
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
        self.decay = float(decay)
        self.update_every_n_steps = int(update_every_n_steps)
        self.update_starting_at_step = update_starting_at_step
        self.use_buffers = bool(use_buffers)
        # trainer.global_step at the last update (0: none yet), checkpointed: a micro-batch that
        # did not end an optimizer step finds it unchanged and leaves the average alone.
        self.latest_update_step = 0
        self._average: compat.PlacedAverage | None = None
        # A resumed average read before the strategy placed the module: (state, count).
        self._pending: tuple[Mapping[str, torch.Tensor], int] | None = None
        self._ended = False  # after training: the module holds the average, the average the weights

    @property
    def average(self) -> compat.PlacedAverage | None:
        """The average (None before fit starts); after fit it holds the trained weights."""
        return self._average

    @property
    def updates(self) -> int:
        """How many times the average was updated (0 before the first)."""
        return 0 if self._average is None else self._average.count

    def due(self, step: int) -> bool:
        """Whether optimizer step `step` (0-based) updates the average."""
        start = self.update_starting_at_step
        return (start is None or step >= start) and step % self.update_every_n_steps == 0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if getattr(trainer.strategy, "save_distributed", False):
            raise TrainwellError(_SHARDED)
        self._average = None  # built at on_fit_start, once the strategy placed the module (1.)
        self._ended = False

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._average = compat.PlacedAverage(pl_module, self.use_buffers)
        if self._pending is not None:  # restored before the strategy placed the module
            self._average.load_gathered_state(*self._pending)
            self._pending = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        line = horizon_line(
            self.decay, trainer.estimated_stepping_batches, self.update_starting_at_step,
            self.update_every_n_steps,
        )  # fmt: skip
        if line is not None:
            announce(line)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        step = trainer.global_step  # optimizer steps taken: step - 1 is the one just taken
        if step > self.latest_update_step and self.due(step - 1):
            assert self._average is not None
            self._average.update(pl_module, self.decay)
            self.latest_update_step = step

    def _swap_during_fit(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Fit only: after fit the module holds the average already (a trainer.validate()).
        average = self._average
        if average is not None and average.count and trainer.state.fn == TrainerFn.FITTING:
            average.swap(pl_module)  # none before the first update (5.)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._swap_during_fit(trainer, pl_module)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._swap_during_fit(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        average = self._average
        if average is not None and average.count and not self._ended:
            average.swap(pl_module)  # not a copy: the trained weights stay (3.); none unused (5.)
            self._ended = True

    def state_dict(self) -> dict[str, Any]:
        return {"latest_update_step": self.latest_update_step, "decay": self.decay}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # The decay is this run's (on_load_checkpoint says when the checkpoint's differed).
        self.latest_update_step = state_dict["latest_update_step"]

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        module_state = dict(checkpoint["state_dict"])
        average = self._average
        if average is None or not average.count:
            # Before the average exists (a checkpoint written before training) or before its
            # first update (5.): the weights.
            averaged, trained, count = module_state, module_state, 0
        else:
            held = {**module_state, **average.gathered_state()}  # every rank (FSDP2: collective)
            averaged, trained = (module_state, held) if self._ended else (held, module_state)
            count = average.count
        checkpoint["state_dict"] = averaged
        checkpoint[compat.TRAINED] = trained
        checkpoint[compat.AVERAGING] = compat.averaging_state(count)

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return  # test / validate / predict use the checkpoint's state_dict: the average (4.)
        if not compat.holds_average(checkpoint):
            announce(
                "ema: the checkpoint holds no average (written without ema.decay); the average "
                "starts from its weights at the next update"
            )
            return
        if saved_decay(checkpoint) not in (None, self.decay):
            announce(
                f"ema: the checkpoint's average used decay {saved_decay(checkpoint)}; it "
                f"continues with {self.decay}"
            )
        # Lightning has loaded the average (`state_dict`) into the module: the average takes it,
        # and training goes on from the trained weights.
        count = compat.saved_count(checkpoint)
        if self._average is None:  # DDP / one device: the strategy places the module after this
            self._pending = (checkpoint["state_dict"], count)
        else:
            # FSDP2: restored once the module is sharded and the average built; the strategy
            # loaded `state_dict` into the shards and removed it from the checkpoint.
            self._average.take(pl_module, count)
        compat.load_full_state(pl_module, checkpoint[compat.TRAINED])


def planned_updates(total_steps: float, start: int | None, every: int) -> int | None:
    """How many optimizer steps of a run of `total_steps` update the average (ExactEMA.due: step
    s, 0-based, updates when s >= start and s % every == 0); None for an open-ended run."""
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


def weights_used(
    callbacks: list[L.Callback], best_ckpt: str = "", tested: bool = True
) -> dict[str, Any]:
    """What results.json says about the weights behind its metrics: the trained ones for the
    training metrics; with EMA, the average for validation and test, which both come from the
    best checkpoint: the trained weights where that checkpoint was written before the average's
    first update (compat/averaging.py, 5.). No `test` entry where no test ran."""
    ema = next((c for c in callbacks if isinstance(c, ExactEMA)), None)
    averaged = ema is not None and ema.updates > 0
    if averaged and best_ckpt and Path(best_ckpt).is_file():
        averaged = compat.holds_updated_average(load_checkpoint_file(best_ckpt, mmap=True))
    used = "ema" if averaged else "trained"
    weights: dict[str, Any] = {"train": "trained", "val": used, "test": used}
    if ema is not None:
        weights["ema"] = {"decay": ema.decay, "updates": ema.updates}
    if not tested:
        del weights["test"]
    return weights


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
