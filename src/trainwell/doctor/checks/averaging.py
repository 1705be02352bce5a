"""weights.averaging: a moving average of the weights (EMA, SWA) updated once per optimizer step,
never per micro-batch, and saved in the checkpoint. Found in a short fit under accumulation by what
it does: a tensor held outside the optimizer whose every change moves it straight towards a weight
(`avg += a * (w - avg)`), unlike statistics such as BatchNorm's.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import WeightAveraging
from omegaconf import DictConfig
from torch import nn
from torch.optim.swa_utils import AveragedModel

from trainwell.callbacks.ema import ema_callbacks
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns
from trainwell.errors import error_line
from trainwell.io.checkpoint_read import load_checkpoint_file

STEPS = 4  # optimizer steps in the probe; the last window's end is not observed (fit stops)
PARALLEL = 0.99  # cosine between an update and (weight - average) for an averaging update
_DEPTH = 3  # attribute levels searched inside a callback
# Packages whose callbacks keep no average of their own (checkpoints, logging, progress): left out.
_BUILT_IN = ("lightning", "pytorch_lightning", "trainwell")
# Per average: updates right after a micro-batch that ended an optimizer step, and mid-window.
AT_END, MID = "updates_after_an_optimizer_step", "updates_mid_window"


def _user_callbacks(cfg: DictConfig) -> tuple[list[L.Callback], list[str]]:
    """The run's averaging callbacks, built as the run builds them, and those that fail to build."""
    callbacks: list[L.Callback] = list(ema_callbacks(cfg))
    unbuilt: list[str] = []
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is None:
            continue
        try:
            callback = instantiate(node)
        except Exception as err:  # reported in the evidence; the run itself would say more
            unbuilt.append(f"{name}: {error_line(err)}")
            continue
        home = type(callback).__module__.split(".")[0]
        if isinstance(callback, WeightAveraging) or home not in _BUILT_IN:
            callbacks.append(callback)
    return callbacks, unbuilt


def _tensors_in(value: Any, path: str, depth: int, seen: set[int]) -> dict[str, torch.Tensor]:
    """Every floating tensor reachable from `value` (modules, containers, plain objects)."""
    if id(value) in seen or depth < 0:
        return {}
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return {path: value} if value.is_floating_point() else {}
    if isinstance(value, nn.Module):
        named = {**dict(value.named_parameters()), **dict(value.named_buffers())}
        return {f"{path}.{n}": t for n, t in named.items() if t.is_floating_point()}
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        items = vars(value).items()
    else:
        return {}
    found: dict[str, torch.Tensor] = {}
    for key, item in items:
        if not (isinstance(key, str) and key in ("_trainer", "trainer")):
            found.update(_tensors_in(item, f"{path}.{key}", depth - 1, seen))
    return found


class _Watch(L.Callback):
    """Last of the probe's callbacks, so each batch start sees all the previous micro-batch did.
    Not a dataclass: Hydra would take it for a config when the Trainer is instantiated with it."""

    def __init__(self, owners: list[L.Callback], checkpoint_path: str) -> None:
        self.owners = owners
        self.checkpoint_path = checkpoint_path
        self.averages: dict[str, dict[str, Any]] = {}  # by tensor: the weight it averages, counts
        self.saved: dict[str, torch.Tensor] | None = None  # at the checkpoint
        self.transitions: list[bool] = []  # did an optimizer step end each watched micro-batch?
        self._before: dict[str, torch.Tensor] = {}
        self._step = -1

    def _candidates(
        self, trainer: L.Trainer, module: L.LightningModule
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """What may hold an average (the callbacks' tensors but live weights, an AveragedModel,
        parameters no optimizer holds), and the weights the optimizers train, less those."""
        optimized = {id(p) for o in trainer.optimizers for g in o.param_groups for p in g["params"]}
        trained = {
            n: p for n, p in module.named_parameters() if id(p) in optimized and p.requires_grad
        }
        live = {id(p) for p in trained.values()}
        found: dict[str, torch.Tensor] = {}
        seen: set[int] = {id(self), id(module), id(trainer)}
        for callback in self.owners:
            held = _tensors_in(vars(callback), type(callback).__name__, _DEPTH, seen)
            found.update({k: v for k, v in held.items() if id(v) not in live})
        for name, sub in module.named_modules():
            if isinstance(sub, AveragedModel):  # even if the optimizer holds it by mistake
                found.update(_tensors_in(sub, f"module.{name}", 1, set()))
        found |= {f"module.{n}": p for n, p in module.named_parameters() if id(p) not in optimized}
        held_ids = {id(v) for v in found.values()}
        return found, {n: p.detach() for n, p in trained.items() if id(p) not in held_ids}

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        candidates, weights = self._candidates(trainer, pl_module)
        now = {k: v.detach().clone() for k, v in candidates.items()}
        if self._step >= 0:
            stepped = trainer.global_step != self._step
            self.transitions.append(stepped)
            for name, value in now.items():
                before = self._before.get(name)
                if before is None or before.shape != value.shape or torch.equal(before, value):
                    continue
                if (weight := _averaged_weight(before, value, weights)) is None:
                    continue
                average = self.averages.setdefault(name, {"averages": weight, AT_END: 0, MID: 0})
                if stepped:
                    average[AT_END] += 1
                elif trainer.global_step > 0:  # an average built lazily before step 1 is no update
                    average[MID] += 1
        self._before, self._step = now, trainer.global_step
        if trainer.global_step >= 2 and self.saved is None and self.transitions[-1:] == [True]:
            trainer.save_checkpoint(self.checkpoint_path, weights_only=False)
            self.saved = {k: v.clone() for k, v in now.items()}


def _averaged_weight(
    before: torch.Tensor, after: torch.Tensor, weights: dict[str, torch.Tensor]
) -> str | None:
    """The trained weight `after - before` points straight at (None: no such weight)."""
    step = (after - before).double().flatten()
    best, name = PARALLEL, None
    for key, weight in weights.items():
        if weight.shape != before.shape:
            continue
        towards = (weight.double() - before.double()).flatten()
        norm = float(step.norm() * towards.norm())
        if norm > 0.0 and math.isfinite(norm) and (cosine := float(step @ towards) / norm) > best:
            best, name = cosine, key
    return name


def _where(value: torch.Tensor, checkpoint: dict[str, Any]) -> str | None:
    """'state_dict' or another top-level key of `checkpoint` holding a tensor equal to `value`."""
    value = value.cpu()
    for key in sorted(checkpoint, key=lambda k: k != "state_dict"):  # the state_dict first
        held = _tensors_in(checkpoint[key], key, 8, set()).values()
        if any(t.shape == value.shape and torch.equal(t, value) for t in held):
            return key
    return None


def weights_averaging(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    callbacks, unbuilt = _user_callbacks(ctx.cfg)
    accumulate = max(2, ctx.accumulate)
    # The probe batch (probe.batch_size samples) as every micro-batch: what matters is when the
    # average moves, and the weights move at every optimizer step on any batch.
    train = ctx.fixed_loader(repeats=accumulate * (STEPS + 1))
    path = ctx.workdir / "averaging.ckpt"
    watch = _Watch(callbacks, str(path))
    task = ctx.make_task()
    fit = ctx.fit(task, train, [*callbacks, watch], max_steps=STEPS, accumulate=accumulate)
    evidence |= {
        "callbacks_watched": [type(c).__name__ for c in callbacks],
        "accumulate": accumulate,
        "micro_batches_watched": len(watch.transitions),
        "optimizer_steps_watched": sum(watch.transitions),
    }
    if unbuilt:
        evidence["callbacks_not_built"] = unbuilt
    if fit.error is not None:
        return skips(
            f"the probe fit with the run's averaging callbacks raised {fit.error_line}; "
            "fix that first, then rerun the doctor"
        )
    if not watch.averages:
        return skips(
            "no moving average of the weights found (no averaging callback, ema.decay is null, "
            "and nothing the module keeps outside the optimizer moves towards its weights)"
        )
    evidence["averages"] = watch.averages
    owners: dict[str, list[dict[str, Any]]] = {}
    for name, average in watch.averages.items():
        owners.setdefault(name.split(".")[0], []).append(average)
    for owner, averages in owners.items():
        if mid := max(a[MID] for a in averages):
            steps = max(a[AT_END] for a in averages)
            return fails(
                f"{owner} updates its weight average after micro-batches that end no optimizer "
                f"step ({mid + steps} updates in {steps} watched optimizer steps of {accumulate} "
                f"micro-batches): under accumulation it decays {accumulate} times too fast; "
                "update it once per optimizer step (when trainer.global_step changes), or use "
                "ema.decay=<decay>"
            )
    if not watch.saved or not path.is_file():
        return skips("the probe wrote no checkpoint to look in")
    checkpoint = load_checkpoint_file(path)
    places: dict[str, set[str | None]] = {}
    for name in [n for n in watch.averages if n in watch.saved]:
        places.setdefault(name.split(".")[0], set()).add(_where(watch.saved[name], checkpoint))
    evidence["kept_in"] = {owner: sorted(map(str, found)) for owner, found in places.items()}
    for owner, found in places.items():
        if None in found:
            return fails(
                f"{owner}'s weight average is not in the checkpoint: a resume restarts it from the "
                "weights and eval, predict and export never see it; save it in the checkpoint's "
                "state_dict (Lightning's EMAWeightAveraging does, or use ema.decay=<decay>)"
            )
        if "state_dict" not in found:
            return warns(
                f"{owner} saves its weight average outside the checkpoint's state_dict "
                f"({', '.join(sorted(map(str, found)))}): eval, predict and export load the "
                "state_dict, the trained weights; put the average there (ema.decay=<decay> does)"
            )
    return passes(
        f"the weight average of {', '.join(sorted(owners))} is updated once per optimizer "
        f"step (none of {len(watch.transitions) - sum(watch.transitions)} mid-window "
        "micro-batches updated it) and kept in the checkpoint's state_dict"
    )
