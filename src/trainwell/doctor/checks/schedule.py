"""schedule.interval: the learning rate at each optimizer step follows the curve the plan implies.

The task runs through the real Lightning loop on a run shaped like the planned one, so
`trainer.estimated_stepping_batches` and the hooks see what the real run sees."""

from __future__ import annotations

import copy
import math
from typing import Any

import lightning as L

from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.harness.outputs import evaluation_outputs
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns
from trainwell.training.monitored_metric import scheduler_monitor_line, unlogged_scheduler_monitors

LONG = 2  # a step-sized schedule this many times longer than the run is cut off early
BUDGET = 64  # micro-batches the probe runs: one epoch boundary where the epoch fits
SIMULATE = 20_000  # scheduler steps replayed at most to find where a curve ends
FLOOR = 1e-3  # a learning rate below this fraction of the curve's peak is spent


class _Trace(L.Callback):
    """The LR each micro-batch starts with; per optimizer step, the epoch and each scheduler's
    LR, counter and whether it drives the stepping optimizer; each one's first state."""

    def __init__(self) -> None:
        self.lrs: list[float] = []
        self.step_ends: list[int] = []  # micro-batches started when each optimizer step came
        self.step_lrs: list[list[float]] = []
        self.step_epochs: list[int] = []
        self.scheduler_counts: list[list[int]] = []  # scheduler.last_epoch at each step
        self.scheduler_owners: list[list[bool]] = []
        self.scheduler_configs: list[dict[str, Any]] = []  # as Lightning registered them
        self.first_states: list[tuple[Any, dict[str, Any], list[float]]] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for c in trainer.lr_scheduler_configs:
            s, lrs = c.scheduler, [g["lr"] for g in c.scheduler.optimizer.param_groups]
            names = {"class": type(s).__name__, "interval": c.interval, "frequency": c.frequency}
            self.scheduler_configs.append(names | {"monitor": c.monitor, "length": _length(s)})
            self.first_states.append((s, copy.deepcopy(s.state_dict()), lrs))

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.optimizers:
            self.lrs.append(float(trainer.optimizers[0].param_groups[0]["lr"]))

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        configs = trainer.lr_scheduler_configs
        stepping = getattr(optimizer, "optimizer", optimizer)  # a LightningOptimizer's own
        self.step_ends.append(len(self.lrs))
        self.step_lrs.append(
            [float(c.scheduler.optimizer.param_groups[0]["lr"]) for c in configs]
            or [float(stepping.param_groups[0]["lr"])]
        )
        self.step_epochs.append(trainer.current_epoch)
        self.scheduler_counts.append([int(getattr(c.scheduler, "last_epoch", -1)) for c in configs])
        self.scheduler_owners.append(
            [getattr(c.scheduler, "optimizer", None) in (optimizer, stepping) for c in configs]
        )


def _length(scheduler: Any) -> int | None:
    """The steps a scheduler was sized for, where it says (OneCycleLR's total_steps, a LambdaLR
    whose function keeps a `total_steps`, a cosine's T_max); None for open-ended schedules."""
    owners = (scheduler, *getattr(scheduler, "lr_lambdas", ()))
    sizes = [getattr(owner, name, None) for owner in owners for name in ("total_steps", "T_max")]
    return next((size for size in sizes if isinstance(size, int)), None)


def schedule_interval(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    k, plan = max(1, ctx.accumulate), ctx.plan
    per_epoch = plan.iterations_per_epoch or 3 * k
    epochs = max(1, plan.max_epochs) if plan.iterations_per_epoch else 1
    trace = _Trace()
    fit = ctx.fit(
        ctx.make_task(),
        ctx.fixed_loader(per_epoch),
        [trace],
        max_steps=int(ctx.cfg.trainer.get("max_steps") or -1),
        accumulate=k,
        max_batches=min(BUDGET, per_epoch + (2 * k if epochs > 1 else 0)),
        max_epochs=epochs,
    )
    if fit.error is not None and len(trace.step_ends) < 2:
        return skips(f"the short fit failed: {fit.error_line}")
    total, estimate = plan.total_optimizer_steps, int(fit.trainer.estimated_stepping_batches)
    evidence |= {
        "accumulate": k,
        "micro_batches_per_epoch": per_epoch,
        "epochs_seen": sorted(set(trace.step_epochs)),
        "lr_per_optimizer_step": trace.step_lrs,
        "schedulers": trace.scheduler_configs,
        "scheduler_last_epoch_at_steps": trace.scheduler_counts,
        "plan_total_optimizer_steps": total,
        "probe_estimated_stepping_batches": estimate,
    }
    ends = trace.step_ends  # the loop's own windows
    mid_window = sum(len(set(trace.lrs[a:b])) > 1 for a, b in zip([0, *ends], ends, strict=False))
    if mid_window and k > 1:
        return fails(
            f"the learning rate changes inside {mid_window} accumulation "
            f"window(s) of {k} micro-batches: the scheduler steps per micro-batch, so the "
            f"schedule ends {k}x too early; step it once per optimizer step (interval='step', "
            "no manual scheduler.step() in training_step)",
        )
    if not trace.scheduler_configs:
        return _hand_set(trace)
    if any(c["monitor"] for c in trace.scheduler_configs):  # what the run checks after sanity
        watch, _ = evaluation_outputs(ctx, ctx.make_task())
        logged = set(watch.metrics) if watch else set()
        unlogged = unlogged_scheduler_monitors(fit.trainer.lr_scheduler_configs, logged)
        if watch and unlogged:
            module = type(fit.trainer.lightning_module).__name__
            return fails(scheduler_monitor_line(module, unlogged, logged))
    for index in range(len(trace.scheduler_configs)):
        if verdict := _follows_curve(ctx, trace, index, estimate, evidence):
            return verdict
    names = ", ".join(f"{c['class']} ({c['pace']})" for c in trace.scheduler_configs)
    return passes(
        f"the learning rate follows {names} at the planned pace over {len(trace.step_lrs)} "
        f"optimizer steps (accumulate {k}), and the schedule lasts the {total} planned steps",
    )


def _replay(trace: _Trace, index: int, steps: int) -> list[float]:
    """The scheduler's own curve from its first state: LR after 0, 1, ... scheduler steps (it
    ends early where the scheduler refuses to step on, as OneCycleLR does past its end)."""
    scheduler, state, lrs = trace.first_states[index]
    scheduler.load_state_dict(copy.deepcopy(state))
    for group, lr in zip(scheduler.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    curve = [float(scheduler.optimizer.param_groups[0]["lr"])]
    with quiet():
        for _ in range(steps):
            try:
                scheduler.step()
            except ValueError:  # past the end of a fixed-length schedule
                break
            curve.append(float(scheduler.optimizer.param_groups[0]["lr"]))
    return curve


def _follows_curve(
    ctx: DoctorContext, trace: _Trace, index: int, estimate: int, evidence: dict[str, Any]
) -> Verdict | None:
    """None when the scheduler's LR follows its curve at the planned pace and lasts the run."""
    config = trace.scheduler_configs[index]
    name, total = config["class"], ctx.plan.total_optimizer_steps
    if config["monitor"] is not None or config["frequency"] != 1:
        config["pace"] = "as registered, by its metric or frequency"
        return None  # its pace depends on a metric or on Lightning's frequency counter
    owned = [s for s, owners in enumerate(trace.scheduler_owners) if owners[index]]
    counts = [trace.scheduler_counts[s][index] for s in owned]
    lrs = [trace.step_lrs[s][index] for s in owned]
    epochs = [trace.step_epochs[s] for s in owned]
    curve = _replay(trace, index, min(SIMULATE, max(LONG * (total or 0), len(owned)) + 1))
    # Unsized: its length is the first step from which the LR stays below FLOOR of its peak.
    peak = max(curve, default=0.0)
    spent = peak > 0 and curve[-1] <= FLOOR * peak
    length = config["length"] or (
        max(i + 1 for i, lr in enumerate(curve) if lr > FLOOR * peak) if spent else None
    )
    # The plan's pace: per optimizer step when sized in the run's steps, per epoch when sized in
    # its epochs, else as registered; `probe.scheduler_interval` may make it the epoch.
    if length in {total, estimate} - {None} and length != ctx.plan.max_epochs:
        pace = "optimizer step"
    elif length == ctx.plan.max_epochs or ctx.settings.scheduler_interval == "epoch":
        pace = "epoch"
    else:
        pace = "optimizer step" if config["interval"] == "step" else "epoch"
    config["pace"] = f"once per {pace}"
    interval = "step" if pace == "optimizer step" else "epoch"
    first = int(trace.first_states[index][1].get("last_epoch", 0))
    planned = [
        first + (j if pace == "optimizer step" else e - epochs[0]) for j, e in enumerate(epochs)
    ]
    evidence[f"scheduler_{index}_planned_last_epoch"] = planned
    evidence[f"scheduler_{index}_length"] = length
    # Registered at its planned pace, yet its counter gains on the plan: something else steps
    # it too, though a flat stretch of the curve (a StepLR between drops) hides it from the LR.
    ahead = [count - want for count, want in zip(counts, planned, strict=True)]
    if config["interval"] == interval and len(ahead) > 1 and ahead[-1] > max(0, ahead[0]):
        return fails(
            f"{name} has stepped {counts[-1] - first} times by its optimizer step "
            f"{len(ahead) - 1} where once per {pace} gives {planned[-1] - first}: something steps "
            f"it besides Lightning (a scheduler.step() in training_step or a hook), so the schedule runs "
            f"{(counts[-1] - first) / max(1, planned[-1] - first):.1f}x too fast; step it once "
            f"per {pace} (interval='{interval}') and nowhere else"
        )
    for j, (lr, count, want) in enumerate(zip(lrs, counts, planned, strict=True)):
        if want - first >= len(curve) or math.isclose(lr, curve[want - first], rel_tol=1e-5):
            continue
        where = f"at its optimizer step {j} (epoch {epochs[j]})"
        if j == 0 and count > want:
            return warns(
                f"{name} had already stepped {count - want} time(s) when its optimizer took "
                "its first step (scheduler.step() before optimizer.step()): the schedule's "
                "first learning rate is skipped and every step uses the next one; call "
                "optimizer.step() first, then scheduler.step()",
            )
        if j and count < counts[j - 1]:
            return fails(
                f"{name}'s counter goes back from {counts[j - 1]} to {count} "
                f"{where}: the schedule restarts (a warm-up run again); step it once per "
                "optimizer step with no argument, or count with trainer.global_step",
            )
        if count > want:
            return fails(
                f"{name} runs ahead of its plan: {count - first} steps taken {where} where once "
                f"per {pace} gives {want - first}, so the schedule ends early; step it once per "
                f"{pace} (interval='{interval}') and nowhere else",
            )
        if count < want:
            return warns(
                f"{name} is sized in {pace}s (length {length}) but has stepped {count - first} "
                f"times {where} where once per {pace} gives {want - first}: the run covers only "
                f"the start of its schedule; return {{'scheduler': ..., 'interval': '{interval}'}}",
            )
        return warns(
            f"the learning rate {where} is {lr:.3g} but {name}'s own "
            f"curve gives {curve[want - first]:.3g} at that step: something else sets the "
            "learning rate as well; let the scheduler own it",
        )
    # A step-paced schedule must last the planned optimizer steps, and not far more.
    if pace != "optimizer step" or length is None or total is None or length == estimate:
        return None
    if length < total:
        return fails(
            f"{name} is spent after {length} optimizer steps (its learning "
            f"rate is at its end from then on) but the run takes {total}: the schedule ends "
            "early; size it from trainer.estimated_stepping_batches (optimizer steps, "
            "accumulation included) or the plan's `total_steps`",
        )
    if length >= LONG * total:
        return warns(
            f"{name} is sized for {length} optimizer steps but the run takes {total}: the run "
            f"stops at {100 * total / length:.0f}% of its schedule (a warm-up or decay barely "
            "started); size it in optimizer steps (len(train_loader) per epoch, not len(dataset), "
            "or trainer.estimated_stepping_batches)",
        )
    return None


def _hand_set(trace: _Trace) -> Verdict:
    lrs = [lr[0] for lr in trace.step_lrs]
    starts = [s for s in range(1, len(lrs)) if trace.step_epochs[s] != trace.step_epochs[s - 1]]
    for s in starts:  # a warm-up that rose, then starts again where it began
        if lrs[0] < min(lrs[1], lrs[s - 1]) and math.isclose(lrs[s], lrs[0], rel_tol=1e-6):
            return warns(
                f"the learning rate rises from {lrs[0]:.3g} to "
                f"{lrs[s - 1]:.3g} over the first epoch, then starts again at {lrs[s]:.3g} "
                f"with the next (optimizer step {s}): a warm-up counted with batch_idx "
                "restarts every epoch; count with trainer.global_step",
            )
    return passes(
        "no LR scheduler is registered and the learning rate stays "
        "constant within accumulation windows and does not restart with the epoch",
    )
