"""The windows accumulation.equivalence compares (K real consecutive micro-batches paired with
one batch of the same items) and the gradient one optimizer step takes; under manual
optimization `StepWatch` sees where the user's code clears and applies gradients."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch

from trainwell.doctor.harness.batches import ConcatError, concat, replay_loader
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.recorder import Recorder, grad_copies, param_ids
from trainwell.doctor.harness.spy import Spy

RTOL = 1e-4
RANDOM = (  # why two runs of the same batch cannot be compared exactly
    "the same batch gives different gradients under two seeds even with dropout modules at p=0 "
    "and BatchNorm in eval (functional dropout, randomness in training_step, or layers setup() "
    "builds afresh?), so windows cannot be compared exactly; draw randomness in the datamodule "
    "and build layers in __init__ to compare them"
)


def compare(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, float]:
    names = sorted(set(a) & set(b))
    diff = max((float((a[n] - b[n]).abs().max()) for n in names), default=0.0)
    scale = max((float(b[n].abs().max()) for n in names), default=0.0)
    norm_a = float(torch.sqrt(sum((a[n].double() ** 2).sum() for n in names)))
    norm_b = float(torch.sqrt(sum((b[n].double() ** 2).sum() for n in names)))
    return {
        "max_abs_difference": diff,
        "relative_difference": diff / scale if scale else 0.0,
        "norm_ratio": norm_a / norm_b if norm_b else 0.0,
        "tensors_compared": len(names),
    }


@dataclass
class Window:
    label: str
    batches: list[Any]  # the micro-batches, as training_step gets them
    whole: Any  # one batch of the same items


@dataclass
class Grads:
    tensors: dict[str, torch.Tensor] | None
    error: str
    spy: Spy | None = None
    skipped: list[int] | None = None  # micro-batches whose training_step returned None


def counts_in_order(counts: list[int]) -> Callable[[Any], int]:
    """A `loss_items` stand-in returning given counts in order (one per micro-batch)."""
    order = iter(counts)
    return lambda batch: next(order)


def step_grads(
    ctx: DoctorContext,
    state: dict[str, torch.Tensor],
    batches: list[Any],
    k: int,
    seed: int = 0,
    watch: bool = False,
    loss_items: Any = None,
    reference: bool = False,
) -> Grads:
    """The gradient the optimizer would apply after one step over `batches` in windows of `k`;
    `reference`: that of the recognised loss's own output at its first call, unscaled, instead."""
    task = ctx.make_task(state=state)
    if loss_items is not None:
        task.loss_items = loss_items
    params = {n: p for n, p in task.named_parameters() if p.requires_grad}
    held = list(params.values()) if reference else None
    spy = Spy(max_calls=8 * len(batches), reference_params=held) if watch or reference else None
    rec = Recorder(
        spy=spy, freeze_stochastic=True, keep_grad_tensors=not reference, spy_batches=len(batches)
    )
    torch.manual_seed(seed)  # a second seed shows hidden randomness in the step
    fit = ctx.fit(task, replay_loader(batches), [rec], max_steps=1, accumulate=k)
    skipped = [i for i, v in enumerate(rec.losses) if v is None]
    if reference and spy is not None and spy.reference_grads:
        grads = zip(params.items(), spy.reference_grads[0], strict=True)
        return Grads({n: torch.zeros_like(p) if g is None else g for (n, p), g in grads}, "")
    if reference or not rec.step_grad_tensors:
        why = "no recognised loss call" if reference else "no optimizer step ran"
        return Grads(None, fit.error_line or why, spy, skipped)
    return Grads(rec.step_grad_tensors[0], "", spy, skipped)


def moves_with_seed(
    ctx: DoctorContext, state: dict[str, torch.Tensor], whole: Any, grads: Grads, reference: bool
) -> bool:
    """Whether one batch's gradient moves with the seed (a mismatch may be that noise)."""
    again = step_grads(ctx, state, [whole], 1, seed=1, reference=reference)
    if again.tensors is None or grads.tensors is None:
        return False
    return compare(again.tensors, grads.tensors)["relative_difference"] > RTOL


def one_batch(ctx: DoctorContext, groups: list[list[int]] | None, batches: list[Any]) -> Any:
    """One batch of the micro-batches' items: `groups` re-collated by the loader's collate_fn,
    else (a random collate_fn draws anew) the micro-batches concatenated (or ConcatError)."""
    flat = [i for g in groups or [] for i in g]
    if groups is not None and ctx.samples.collate_is_deterministic(flat):
        return ctx.samples.collate(flat)
    return concat(batches)


def _regroup(ctx: DoctorContext, groups: list[list[int]], label: str) -> Window:
    batches = [ctx.samples.collate(g) for g in groups]
    return Window(label, batches, one_batch(ctx, groups, batches))


def windows(ctx: DoctorContext, k: int, configured: int) -> tuple[list[Window], str]:
    """The first window of K real micro-batches and, when the run has one, its short tail."""
    samples, first = ctx.samples, "the first window of {} micro-batches"
    try:
        # index lists where samples can be regrouped, else the batches as the loader yields them
        groups = samples.index_batches() if samples.indexable else samples.real_batches(k)
        if len(groups) < 2:
            return [], f"{len(groups)} batch per epoch in the train loader: nothing to accumulate"
        if not samples.indexable:
            return [Window(first.format(len(groups)), groups, concat(groups))], ""
        found = [_regroup(ctx, groups[:k], first.format(min(k, len(groups))))]
        tail = len(groups) % configured or configured
        last = groups[len(groups) - tail :]
        uneven = len({len(g) for g in last}) > 1 or len(last[-1]) != len(groups[0])
        if configured > 1 and (tail != configured or uneven) and len(groups) > configured:
            sizes = "+".join(str(len(g)) for g in last)
            found.append(_regroup(ctx, last, f"the epoch's last window ({sizes} samples, K={k})"))
        return found, ""
    except ConcatError as err:
        why_not = samples.why_not_indexable or "its collate_fn is random"
        return [], (
            f"the micro-batches cannot be joined into one batch ({err}) nor re-collated "
            f"({why_not}); pad every batch to one length, or give the train dataset "
            "__getitem__ and __len__"
        )


@dataclass(frozen=True)
class Event:
    kind: str  # zero | step
    batch: int  # micro-batch index in the probe fit
    backwards: int  # backward calls seen before it
    optimizer: int = 0  # its index in trainer.optimizers


class StepWatch(L.Callback):
    def __init__(self, spy: Spy) -> None:
        self.spy, self.optimizers = spy, 0
        self.events: list[Event] = []
        self.grads: dict[int, dict[str, torch.Tensor]] = {}  # per optimizer, at its first step
        self.states: dict[int, dict[str, torch.Tensor]] = {}  # micro-batch -> weights at its start
        self._stepped, self._batch = False, -1  # _stepped: a step since the micro-batch began
        self._torch: list[Any] = []  # trainer.optimizers
        self._module: L.LightningModule | None = None
        self._undo: list[Callable[[], Any]] = []  # what teardown puts back

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._module, self._torch = pl_module, list(trainer.optimizers)
        self.optimizers = len(self._torch)
        wrapped = pl_module.optimizers(use_pl_optimizer=True)
        wrapped = wrapped if isinstance(wrapped, list) else [wrapped]
        for optimizer in [*trainer.optimizers, *wrapped]:
            self._wrap_zero_grad(optimizer)
        for optimizer in trainer.optimizers:
            self._undo.append(optimizer.register_step_pre_hook(self._before_step).remove)

    def _wrap_zero_grad(self, optimizer: Any) -> None:
        original, index = optimizer.zero_grad, self._index(optimizer)

        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self.events.append(Event("zero", self._batch, self.spy.backward_calls, index))
            return original(*args, **kwargs)

        optimizer.zero_grad = zero_grad  # an instance attribute shadows the class method
        self._undo.append(lambda: optimizer.__dict__.pop("zero_grad", None))

    def _index(self, optimizer: Any) -> int:
        inner = getattr(optimizer, "optimizer", optimizer)  # a LightningOptimizer's own
        return next((i for i, o in enumerate(self._torch) if o is inner), 0)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        index = self._index(optimizer)
        self.events.append(Event("step", self._batch, self.spy.backward_calls, index))
        self._stepped = True
        if index not in self.grads and self._module is not None:
            self.grads[index] = grad_copies(self._module, param_ids(optimizer))

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch = batch_idx
        if self._stepped and len(self.grads) < self.optimizers:
            self.states[batch_idx] = {k: t.clone() for k, t in pl_module.state_dict().items()}
        self._stepped = False

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.optimizers and len(self.grads) == self.optimizers:
            trainer.should_stop = True

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        while self._undo:
            self._undo.pop()()

    def first_step(self, optimizer: int = 0) -> Event | None:
        return next((e for e in self.events if e.kind == "step" and e.optimizer == optimizer), None)

    def weights_at(self, batch: int, initial: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The weights at the start of micro-batch `batch` (`initial`: those of the fit's start)."""
        kept = [b for b in self.states if b <= batch]
        return self.states[max(kept)] if kept else initial

    def window_start(self, zero: Event) -> int:
        """The first micro-batch whose gradient a step after `zero` applies: the zero's own,
        unless that micro-batch's backward came before the zero."""
        before = sum(1 for b in self.spy.backward_batches if b < zero.batch)
        return zero.batch if zero.backwards == before else zero.batch + 1

    def zeros_before(self, step: Event) -> list[Event]:
        before = self.events[: self.events.index(step)]
        return [e for e in before if e.kind == "zero" and e.optimizer == step.optimizer]
