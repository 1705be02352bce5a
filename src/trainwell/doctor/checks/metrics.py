"""metrics.reduction: logged means that batches or ranks will weigh wrongly.

Lightning weighs each batch's `self.log` value by the batch size it extracts (or `batch_size=`)
and, with `sync_dist=True`, averages the ranks' values unweighted: fine on the probe's one process,
wrong at scale. torchmetrics metrics (logged as objects, or their compute() logged) keep sums and
counts and reduce across ranks themselves: they are the fix, and never flagged.
"""

from __future__ import annotations

from functools import partial
from math import isclose
from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.logged import STEP_HOOKS, LogWatch, logging_fit
from trainwell.doctor.report.verdict import Verdict, passes, skips, warns

RTOL = 1e-6
_close = partial(isclose, rel_tol=RTOL, abs_tol=RTOL)  # relative, and absolute below 1


def _item_weighting(watch: LogWatch) -> tuple[list[dict[str, Any]], list[str]]:
    """Per-batch logged means equal to a loss averaged over items whose ratio to the batch size
    Lightning weighs them by varies from batch to batch; and what is wrong with each."""
    found: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for stage, calls, logged in watch.batches:
        for name, (mean, weight) in logged.items():
            match = [c for c in calls if c.value is not None and _close(c.value, mean)]
            if match and match[0].items:
                found.setdefault((stage, name), []).append((weight, match[0].items))
    weighted, findings = [], []
    for (stage, name), pairs in found.items():
        if len({round(items / weight, 9) for weight, items in pairs}) < 2:
            continue
        weights, items = [int(w) for w, _ in pairs], [int(i) for _, i in pairs]
        weighted.append({"name": name, "stage": stage, "weights": weights, "items": items})
        findings.append(
            f"`{name}` ({stage}) is a mean over {items} items (tokens, unmasked targets) per "
            f"batch but Lightning weighs it by batch_size {weights}, so its epoch value is not "
            "the mean over items; pass batch_size=<items> to self.log, or log a torchmetrics "
            "MeanMetric updated with weight=<items>"
        )
    return weighted, findings


def metrics_reduction(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    fit, watch = logging_fit(ctx)
    if fit.error is not None and not watch.batches:
        return skips(f"the short fit failed: {fit.error_line}")
    evidence |= {
        "train_batches": sum(stage == "train" for stage, *_ in watch.batches),
        "val_batches": sum(stage == "val" for stage, *_ in watch.batches),
        "configured_world_size": ctx.world_size,
        "logged": sorted(f"{hook}:{name}" for hook, name in watch.keys),
    }
    if not watch.keys:
        return skips("the task logs nothing with self.log in training or validation")
    evidence["per_rank_values"], per_rank = _per_rank_values(watch, ctx.world_size)
    evidence["weighted_by_batch_size"], weighted = _item_weighting(watch)
    if findings := per_rank + weighted:
        more = f" (and {len(findings) - 1} more, see evidence)" if len(findings) > 1 else ""
        return warns(findings[0] + more)
    return passes(
        f"{len(watch.keys)} logged key(s): means are weighted by what they average over and "
        "reduce across ranks"
    )


def _per_rank_values(watch: LogWatch, world: int | None) -> tuple[list[dict[str, Any]], list[str]]:
    per_rank, findings = [], []
    for (hook, name), value in watch.keys.items():
        if value.is_metric or value.reduce != "mean" or not value.on_epoch:
            continue
        sync = watch.sync_requested.get(name, value.sync_dist)
        if hook.endswith("_epoch_end"):
            logged = watch.epoch_values.get((hook, name))
            if logged is not None and any(_close(logged, m) for m in watch.metric_values):
                continue  # a metric's compute(), logged
            how = (
                "averages the ranks' values unweighted (sync_dist=True)"
                if sync
                else "reports rank 0's value only (no sync_dist)"
            )
            findings.append(
                f"`{name}` is logged from {hook} as a plain tensor, a per-rank value: on several "
                f"ranks Lightning {how}, although ranks hold different numbers of samples; log a "
                "torchmetrics metric (e.g. MeanMetric updated with weight=batch size) or "
                "all-reduce a sum and a count yourself"
            )
        elif hook in STEP_HOOKS and not sync and world is not None and world > 1:
            findings.append(
                f"`{name}` is logged from {hook} without sync_dist on a {world}-rank run: the "
                "epoch value is rank 0's mean only; log a torchmetrics metric or pass sync_dist=True"
            )
        else:
            continue
        per_rank.append({"name": name, "hook": hook, "sync_dist": sync})
    return per_rank, findings
