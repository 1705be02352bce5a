"""TrainingStateCallback: what Lightning leaves out of a checkpoint and a resume needs.

Lightning writes model, optimizer, scheduler, loop progress, precision-scaler state, callback
states and (through a stateful loader, data/resumable.py) the train loader's position. Missing, and
added here:

* RNG states (python, numpy, torch, CUDA) of *every rank*: without them dropout and augmentation
  after a resume draw different numbers than the uninterrupted run would have. Ranks' streams
  differ as soon as their batches do (an uneven last batch draws fewer dropout masks), so the
  state of rank 0 alone would give the other ranks the wrong stream.
* Every torchmetrics metric's accumulated state: a run resumed mid-epoch would otherwise report an
  epoch mean over the resumed half only, and a best-so-far metric (MaxMetric) would restart.
* The metrics the run has logged so far (`trainer.callback_metrics`): a run resumed after its last
  training step logs nothing new, and its results must still hold the fit metrics.
"""

from __future__ import annotations

import io
import random
from typing import Any

import lightning as L
import numpy as np
import torch
from torchmetrics import Metric

from trainwell import compat


def capture_rng() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": _numpy_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
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
    return [torch.load(io.BytesIO(b), weights_only=True) for b in gathered]


def _metrics(module: L.LightningModule) -> dict[str, Metric]:
    return {name: m for name, m in module.named_modules() if isinstance(m, Metric)}


class TrainingStateCallback(L.Callback):
    """Always installed by the template (see the module docstring).

    RNG states are applied at the first training batch after a resume, not at load time: between
    load and that batch Lightning may run a sanity check the uninterrupted run never had at this
    point; nothing between a save and the next training step draws from the global RNGs (every
    loader has its own generator), so the first resumed step sees exactly the saved stream.
    """

    def __init__(self) -> None:
        self._pending_rng: dict[str, Any] | None = None
        self.restored_callback_metrics: dict[str, float] = {}
        self._module: L.LightningModule | None = None
        self._trainer: L.Trainer | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer, self._module = trainer, pl_module

    def state_dict(self) -> dict[str, Any]:
        # Lightning builds the checkpoint on every rank and writes rank 0's: gather each rank's
        # RNG into it (a collective, like the save itself).
        mine = capture_rng()
        state: dict[str, Any] = {"rng": mine, "rng_per_rank": _gather(mine)}
        trainer, module = self._trainer, self._module
        if trainer is None or module is None:
            return state
        logged = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        ending: dict[str, Metric] = {}
        if compat.epoch_end_pending(trainer):
            # A resume from here skips this epoch's end (compat.epoch_end_pending): keep the
            # values it would log, and leave out the states it would reset.
            ending = compat.epoch_logged_metrics(trainer)
            for key, metric in ending.items():
                value = metric.compute()
                if isinstance(value, torch.Tensor) and value.numel() == 1:
                    logged[key] = float(value)
        state["metrics"] = {
            name: compat.metric_states(m)
            for name, m in _metrics(module).items()
            if all(m is not e for e in ending.values())
        }
        state["callback_metrics"] = logged
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending_rng = state_dict.get("rng")
        per_rank = state_dict.get("rng_per_rank") or []
        rank, world = _rank_and_world()
        if len(per_rank) == world:  # the same world as when saved: each rank its own stream
            self._pending_rng = per_rank[rank]
        self.restored_callback_metrics = dict(state_dict.get("callback_metrics", {}))
        metrics = state_dict.get("metrics")
        if metrics and self._module is not None:
            present = _metrics(self._module)
            for name, saved in metrics.items():
                if name in present:
                    compat.restore_metric_states(present[name], saved)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        compat.restore_train_loader_position(trainer)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._pending_rng is not None:
            restore_rng(self._pending_rng)
            self._pending_rng = None
