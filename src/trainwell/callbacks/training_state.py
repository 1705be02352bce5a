"""ExactResume: what Lightning leaves out of a checkpoint and a resume needs.

Lightning writes model, optimizer, scheduler, loop progress, precision-scaler state, callback
states and (through a stateful loader, loading/resumable.py) the train loader's position. Missing, and
added here:

* RNG states (python, numpy, torch, CUDA) of *every rank*: without them dropout and augmentation
  after a resume draw different numbers than the uninterrupted run would have. Ranks' streams
  differ as soon as their batches do (an uneven last batch draws fewer dropout masks), so the
  state of rank 0 alone would give the other ranks the wrong stream.
* Every torchmetrics metric's accumulated state, of every rank: a run resumed mid-epoch would
  otherwise report an epoch mean over the resumed half only, and a best-so-far metric
  (MaxMetric) would restart.
* The same for plain tensors logged with on_epoch=True: Lightning's running sums behind their
  epoch values, of every rank (compat.epoch_sums).
* The metrics the run has logged so far (`trainer.callback_metrics`): a run resumed after its last
  training step logs nothing new, and its results must still hold the fit metrics.
* The plateau-scheduler steps Lightning still owes where the checkpoint was written: a batch's
  per-step ones in a step checkpoint, the epoch end's in a checkpoint written after an epoch's
  last batch (compat.plateau_steps_due): a resume takes them (with the restored monitored values)
  before its first batch, as the uninterrupted run did.
"""

from __future__ import annotations

import functools
import io
import random
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn
from torchmetrics import Metric

from trainwell import compat
from trainwell.callbacks.step_checkpoint import StepCheckpoint
from trainwell.io.announce import announce
from trainwell.io.checkpoint_read import load_checkpoint_file


def capture_rng() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": _numpy_state(),
        "torch": torch.get_rng_state(),
    }
    # is_initialized alone (a CUDA RNG in use implies CUDA is there): is_available asks the
    # driver at every call, ~1 ms of every checkpoint on a machine without a GPU.
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _numpy_state() -> tuple[Any, ...]:
    # The key array as a tensor: weights_only=True refuses pickled numpy arrays.
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return (name, torch.from_numpy(keys.copy()), int(pos), int(has_gauss), float(gauss))


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(_as_python_state(state["python"]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy(), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_python_state(state: Any) -> tuple[Any, ...]:
    # random.setstate needs tuples; a checkpoint round trip may hand back lists.
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _rank_and_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _gather(state: dict[str, Any]) -> list[dict[str, Any]]:
    _, world = _rank_and_world()
    if world == 1:
        return [state]
    # As bytes: all_gather_object cannot pickle tensors' storages across processes reliably.
    buffer = io.BytesIO()
    torch.save(state, buffer)
    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, buffer.getvalue())
    # On CPU: metric states may live on another rank's GPU (another node may have fewer).
    return [torch.load(io.BytesIO(b), map_location="cpu", weights_only=True) for b in gathered]


def _metrics(module: L.LightningModule) -> dict[str, Metric]:
    return {name: m for name, m in module.named_modules() if isinstance(m, Metric)}


def _hold_user_step_saves(trainer: L.Trainer) -> None:
    """A user's own ModelCheckpoint that saves per batch (every_n_train_steps, a clock) skips
    the batches after which a validation is due, as the template's step checkpoint does: a
    resume from such a checkpoint would skip that validation (compat/checkpoints.py)."""
    for checkpoint in trainer.checkpoint_callbacks:
        if (
            not isinstance(checkpoint, ModelCheckpoint)
            or isinstance(checkpoint, StepCheckpoint)
            or not compat.saves_per_batch(checkpoint)
            or getattr(checkpoint, "holds_validation_batches", False)
        ):
            continue
        compat.hold_saves_before_validation(checkpoint)
        checkpoint.holds_validation_batches = True  # type: ignore[attr-defined]
        announce(
            f"{type(checkpoint).__name__}({checkpoint.dirpath}) saves no checkpoint at a batch "
            "right before a validation (a resume from there would skip that validation); its "
            "next save follows the validation"
        )


def _is_recorded_best(callback: ModelCheckpoint, step: int, path: str, score: Any) -> bool:
    """Whether the checkpoint file at `path` is the one a resumed state records with `score`:
    written no later than the resumed step, holding that score as its callback's best (the
    callback saves its best before writing it). A run that went on past the resumed checkpoint
    may have replaced the file with a later best."""
    written = load_checkpoint_file(path, mmap=True)
    own = (written.get("callbacks") or {}).get(callback.state_key) or {}
    if int(written.get("global_step", -1)) > step:
        return False
    best = own.get("best_model_score")
    if score is None or best is None:
        return False
    return float(best) == float(score)


def _lost_best(callback: ModelCheckpoint, state: dict[str, Any]) -> bool:
    """Whether Lightning will forget this monitored checkpoint's best (another dirpath)."""
    old = state.get("dirpath")
    return (
        callback.monitor not in (None, "step")
        and bool(state.get("best_model_path"))
        and old is not None
        and str(old) != str(callback.dirpath)
    )


class ExactResume(L.Callback):
    """Always installed by the template (see the module docstring).

    RNG states are applied at the first training batch after a resume, not at load time: between
    load and that batch Lightning may run a sanity check the uninterrupted run never had at this
    point; nothing between a save and the next training step draws from the global RNGs (every
    loader has its own generator), so the first resumed step sees exactly the saved stream.
    """

    def __init__(self) -> None:
        self._pending_rng: dict[str, Any] | None = None
        self._pending_sums: list[dict[str, Any]] | None = None
        self._pending_plateau: list[dict[str, Any]] = []
        self.restored_callback_metrics: dict[str, float] = {}
        self._module: L.LightningModule | None = None
        self._trainer: L.Trainer | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer, self._module = trainer, pl_module
        if stage == "fit":
            _hold_user_step_saves(trainer)

    def state_dict(self) -> dict[str, Any]:
        # Lightning builds the checkpoint on every rank and writes rank 0's: gather each rank's
        # RNG, metric states and running epoch sums into it (a collective, like the save
        # itself): a metric synced at compute sums every rank's states, so each rank needs its own.
        trainer, module = self._trainer, self._module
        mine: dict[str, Any] = {"rng": capture_rng(), "metrics": {}, "epoch_sums": []}
        logged: dict[str, float] = {}
        plateau_due: list[dict[str, Any]] = []
        if trainer is not None and module is not None:
            logged = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
            ending: dict[str, Metric] = {}
            epoch_end_pending = compat.epoch_end_pending(trainer)
            plateau_due = compat.plateau_steps_due(trainer, epoch_end_pending)
            if epoch_end_pending:
                # A resume from here skips this epoch's end (compat.epoch_end_pending): keep the
                # values it would log (plain tensors' are in callback_metrics by now), and leave
                # out the states and sums it would reset.
                ending = compat.epoch_logged_metrics(trainer)
                for key, metric in ending.items():
                    value = metric.compute()
                    if isinstance(value, torch.Tensor) and value.numel() == 1:
                        logged[key] = float(value)
            else:
                mine["epoch_sums"] = compat.epoch_sums(trainer)
            mine["metrics"] = {
                name: compat.metric_states(m)
                for name, m in _metrics(module).items()
                if all(m is not e for e in ending.values())
            }
        per_rank = _gather(mine)
        return {
            "rng": mine["rng"],
            "rng_per_rank": [r["rng"] for r in per_rank],
            "metrics": mine["metrics"],
            "metrics_per_rank": [r["metrics"] for r in per_rank],
            "epoch_sums_per_rank": [r["epoch_sums"] for r in per_rank],
            "callback_metrics": logged,
            "plateau_due": plateau_due,
        }

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """A run resumed in another dir (moved, copied, or a new run dir) keeps its checkpoint
        callbacks' records, its best score first (compat.carry_records_to_dirpath). Lightning
        calls every callback's on_load_checkpoint before any callback's load_state_dict."""
        if trainer.state.fn != "fit":
            return
        states = checkpoint.get("callbacks") or {}
        for callback in trainer.checkpoint_callbacks:
            state = states.get(getattr(callback, "state_key", None))
            if not isinstance(callback, ModelCheckpoint) or not isinstance(state, dict):
                continue
            usable = functools.partial(_is_recorded_best, callback, int(checkpoint["global_step"]))
            carried = compat.carry_records_to_dirpath(
                callback, state, trainer.is_global_zero, usable
            )
            if carried is not None:
                states[callback.state_key] = carried
            elif _lost_best(callback, state):
                announce(
                    f"checkpoints: the best by {callback.monitor} ({state.get('best_model_path')})"
                    f" is not found from {callback.dirpath}: the best restarts at the next "
                    "validation"
                )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending_rng = state_dict.get("rng")
        per_rank = state_dict.get("rng_per_rank") or []
        rank, world = _rank_and_world()
        if len(per_rank) == world:  # the same world as when saved: each rank its own stream
            self._pending_rng = per_rank[rank]
        sums = state_dict.get("epoch_sums_per_rank") or []
        # Another world size is refused before training (the effective batch changes).
        self._pending_sums = sums[rank] if len(sums) == world else None
        self.restored_callback_metrics = dict(state_dict.get("callback_metrics", {}))
        self._pending_plateau = list(state_dict.get("plateau_due", []))
        metrics = state_dict.get("metrics")
        metrics_per_rank = state_dict.get("metrics_per_rank") or []
        if len(metrics_per_rank) == world:
            metrics = metrics_per_rank[rank]
        if metrics and self._module is not None:
            present = _metrics(self._module)
            for name, saved in metrics.items():
                if name not in present:
                    continue
                if set(saved["states"]) != set(present[name].metric_state):
                    # Another metric class under the same name (a checkpoint of older code):
                    # its states cannot be carried over, and the epoch value says so.
                    rank_zero_warn(
                        f"resume: {name} is a {type(present[name]).__name__} whose states "
                        f"{sorted(present[name].metric_state)} differ from the checkpoint's "
                        f"{sorted(saved['states'])}: its value for the resumed epoch covers "
                        "only the batches after the resume"
                    )
                    continue
                compat.restore_metric_states(present[name], saved)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        compat.restore_train_loader_position(trainer)
        # What the run had logged before the checkpoint stays visible until it is logged again,
        # as in the uninterrupted run: a plateau scheduler or early stopping that reads a metric
        # logged only now and then (a validation every N batches) finds it at the epoch's end
        # instead of failing ("val/loss not available") or deciding without it.
        live = trainer.callback_metrics
        for key, value in self.restored_callback_metrics.items():
            if key not in live:
                live[key] = torch.tensor(value)
        if self._pending_sums:
            # Here, not at load: Lightning resets the training results between load and now.
            compat.restore_epoch_sums(trainer, self._pending_sums)
        self._pending_sums = None
        if self._pending_plateau:
            # Before the next epoch starts: its on_train_epoch_start hooks (a learning-rate
            # monitor) and first step see the cut rate, as in the uninterrupted run.
            compat.step_plateau_schedulers(
                trainer, self._pending_plateau, self.restored_callback_metrics
            )
        self._pending_plateau = []

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._pending_rng is not None:
            restore_rng(self._pending_rng)
            self._pending_rng = None
            # The resumed run's first batch: without this, Lightning takes no plateau step at
            # the end of the epoch it resumed in (compat.end_fit_restart).
            compat.end_fit_restart(trainer)
