"""Mode checks: training really runs in train mode, evaluation really runs in eval mode."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.data.dataloader import default_collate

from trainwell.doctor.harness.batches import leaves, replay_loader
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import crashed_message, observation
from trainwell.doctor.harness.outputs import evaluation_outputs, output_differences
from trainwell.doctor.harness.recorder import frozen_modules
from trainwell.doctor.harness.samples import batch_source, split_loaders, why_not_indexable
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips


def train_mode(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    obs = observation(ctx)
    rec = obs.recorder
    if not rec.losses and obs.fit.error is not None:
        return skips(crashed_message(obs))
    evidence |= {
        "batches_checked": len(rec.losses),
        "validation_after_batch": obs.val_every,
        "batches_with_eval_modules": len(rec.eval_modules),
    }
    # A frozen block kept in eval mode (its BatchNorm statistics fixed) is deliberate.
    frozen = tuple(frozen_modules(obs.task))
    in_eval = [
        (b, kept)
        for b, names in rec.eval_modules
        if (kept := [n for n in names if not any(n == f or n.startswith(f"{f}.") for f in frozen)])
    ]
    if in_eval:
        batch, names = in_eval[0]
        after_val = batch >= obs.val_every and not any(b < obs.val_every for b, _ in in_eval)
        evidence |= {"first_batch": batch, "modules": names[:20], "module_count": len(names)}
        when = "after validation" if after_val else f"from training batch {batch}"
        return fails(
            f"{len(names)} module(s) (first: `{names[0]}`) run in eval mode {when}, so BatchNorm "
            "uses stale running statistics and dropout is off while training; do not call "
            ".eval() on the model outside validation (Lightning restores the mode it found)"
        )
    return passes(
        f"every module is in train mode at all {len(rec.losses)} training batches, before and "
        "after validation"
    )


def _metric_drift(
    first: dict[str, float], other: dict[str, float], again: dict[str, float]
) -> dict[str, tuple[float, float]]:
    """Logged values that differ between two passes over the same batch. A value that equals
    the best of the two batches' values is a running best (MaxMetric, `val/acc_best`): kept."""
    drift = {}
    for key, a in first.items():
        b, between = again.get(key, a), other.get(key, a)
        same = abs(a - b) <= 1e-6 * (1 + abs(a)) or (math.isnan(a) and math.isnan(b))
        if not same and b not in (max(a, between), min(a, between)):
            drift[key] = (a, b)
    return drift


def _stage_passes(ctx: DoctorContext, task: Any, stage: str) -> tuple[list[Any], str]:
    """The probe batch evaluated, then another batch, then the probe batch again: state a pass
    leaves behind (an unreset metric, a list of losses) shows in the third pass."""
    other = ctx.samples.micro_batches(1, 1)
    runs = []
    for loader in (None, replay_loader(other), None) if other else (None, None):
        watch, error = evaluation_outputs(ctx, task, loader=loader, stage=stage)
        if watch is None:
            return [], error
        runs.append(watch)
    return (runs if other else [runs[0], *runs]), ""  # no other batch: the first pass stands in


REREAD = 8  # items of each evaluation loader's first batch read twice


def _reread(loader: Any) -> tuple[int, float] | None:
    """An item of the loader's first batch that reads differently the second time (a random
    transform in __getitem__), with the largest difference; None when every item repeats."""
    if why_not_indexable(loader):
        return None  # the replayed passes compare what such a loader yields
    first = next(iter(batch_source(loader)), [])
    with torch.random.fork_rng(devices=[]):  # the reads leave the run's RNG as they found it
        for i in list(first)[:REREAD]:
            try:
                a, b = (default_collate([loader.dataset[i]]) for _ in range(2))
            except (TypeError, RuntimeError):  # items no collate turns into tensors
                return None
            diffs = output_differences([t for _, t in leaves(a)], [t for _, t in leaves(b)])
            if diffs and max(diffs) > 0:
                return int(i), max(diffs)
    return None


def eval_determinism(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    named = {"validate": "validation", "test": "test"}
    stages = {stage: name for stage, name in named.items() if ctx.has_hook(f"{name}_step")}
    if not stages:
        return skips(
            "the task defines no validation_step or test_step, so there is no evaluation to check"
        )
    task = observation(ctx).task
    for stage, name in stages.items():
        runs, error = _stage_passes(ctx, task, stage)
        if not runs:  # the user's evaluation code failed: that is the finding
            return fails(f"{error}; fix {name}_step")
        for loader in split_loaders(ctx.datamodule, "val" if stage == "validate" else stage)[0]:
            if (found := _reread(loader)) is not None:  # _reread skips non-DataLoaders
                evidence[stage] = {"item": found[0], "max_abs_difference": found[1]}
                return fails(
                    f"{name} item {found[0]} reads differently each time (by up to "
                    f"{found[1]:.3g}): a random transform reaches the {name} split (a random_split "
                    "of an augmented dataset, or the train transform copied); give it a dataset "
                    "without random transforms"
                )
        a, other, b = runs
        diffs = output_differences(a.outputs, b.outputs)
        max_diff = max(diffs) if diffs else 0.0
        in_train = sorted(a.training_modules | b.training_modules)
        drift = _metric_drift(a.metrics, other.metrics, b.metrics)
        evidence[stage] = {
            "outputs_compared": len(diffs),
            "max_abs_difference": max_diff,
            "modules_in_train_mode": in_train[:20],
            "metrics_compared": len(a.metrics),
            "metrics_that_moved": drift,
        }
        if max_diff > 1e-6 or in_train:
            cause = (
                f"{len(in_train)} module(s) (first: `{in_train[0]}`) run in train mode during {name}"
                if in_train
                else "hidden randomness in the forward"
            )
            return fails(
                f"two {name} passes over the same batch differ by {max_diff:.3g}: {cause} (dropout "
                f"active, BatchNorm on batch statistics); do not call self.train() in {name} code "
                "and keep randomness out of eval forward"
            )
        if drift:
            key, (v1, v2) = next(iter(drift.items()))
            return fails(
                f"two {name} passes over the same batch with the same weights log `{key}` as "
                f"{v1:.6g} and then {v2:.6g} ({len(drift)} value(s) moved): state kept from an "
                "earlier pass (a metric never reset, a list never cleared) or randomness feeds "
                "the logged value; reset metrics after compute() or log the torchmetrics object"
            )
    if not any(e["outputs_compared"] or e["metrics_compared"] for e in evidence.values()):
        return skips(
            "evaluation logs nothing and calls no module that holds parameters, so nothing was "
            "compared; log a value or call the model in validation_step"
        )
    return passes(
        f"two {' and '.join(stages.values())} passes over the same batch give identical "
        "outputs and logged values, with every module in eval mode"
    )
