"""grad.flow, grad.zeroing and memory.graph_leak: read from the loop's first optimizer steps."""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

import torch

from trainwell.doctor.harness.batches import clone, restructure
from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.harness.observe import (
    ALONE,
    crashed_message,
    observation,
    training_loss,
    unstepped_message,
)
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns

COORDINATES = 2  # per tensor, on the (up to) 4 tensors with the largest gradients
SAMPLES = 4
STEP = 1e-6
RTOL = 1e-3


def grad_flow(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    obs = observation(ctx)
    if not obs.recorder.step_grads:
        error = obs.fit.error_line
        if "does not require grad" in error or "does not have a grad_fn" in error:
            evidence["error"] = error
            return fails(
                "the loss has no graph back to any parameter (the forward ran under "
                "torch.no_grad()/inference_mode or detached its output), so backward cannot "
                "compute gradients; remove the no_grad/.detach()/.numpy() from the forward"
            )
        return skips(crashed_message(obs) if error else unstepped_message(obs))
    grads = obs.recorder.step_grads[0]
    none = [n for n, g in grads.items() if g is None]
    zero = [n for n, g in grads.items() if g == 0.0]
    nonfinite = [n for n, g in grads.items() if g is not None and not math.isfinite(g)]
    evidence |= {"grad_norm": grads, "none": none, "zero": zero, "non_finite": nonfinite}
    if nonfinite:
        return fails(
            f"{len(nonfinite)} parameter(s) (first: `{nonfinite[0]}`) get NaN/Inf gradients at the "
            "first step; find the op producing them with torch.autograd.set_detect_anomaly(True)"
        )
    if dead := none + zero:
        how = "no gradient (None)" if none else "an all-zero gradient"
        return fails(
            f"{len(dead)} of {len(grads)} trainable tensors (first: `{dead[0]}`) get {how} after "
            "backward: the graph is cut between them and the loss (torch.no_grad() in forward, "
            ".detach(), .numpy()/.item() round-trips) or they are unused; keep the forward "
            "differentiable or freeze them explicitly"
        )
    mismatched, why, kinks = finite_difference(ctx)
    evidence |= {"finite_difference_mismatches": mismatched, "finite_difference_skipped": why}
    evidence["finite_difference_coordinates_at_a_kink"] = kinks
    if mismatched:
        first = mismatched[0]
        return warns(
            f"autograd's gradient of `{first['tensor']}` ({first['autograd']:.4g}) disagrees "
            f"with the loss's finite difference ({first['finite_difference']:.4g}) at "
            f"{len(mismatched)} coordinate(s): a custom backward, a gradient hook, or part of "
            "the loss computed from .data or detached weights; unless the mismatch is by "
            "design (gradient reversal, a straight-through estimator), fix the gradient path"
        )
    checked = "" if why else "; finite differences agree with autograd"
    if kinks:
        checked += f" ({kinks} coordinate(s) at a kink of the loss, such as a ReLU at 0, left out)"
    return passes(f"all {len(grads)} trainable tensors get finite, non-zero gradients{checked}")


def grad_zeroing(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    obs = observation(ctx)
    watched = obs.recorder.stale_steps
    if not watched:
        why = "fewer than two optimizer steps ran" if obs.recorder.step_grads else ""
        return skips(crashed_message(obs) if obs.fit.error else why or unstepped_message(obs))
    leaked = [(step, names, norm) for step, names, norm in watched if names]
    evidence |= {"optimizer_steps_checked": len(watched), "steps_with_stale_grads": len(leaked)}
    evidence["stale_grad_norm_per_step"] = [round(norm, 6) for _, _, norm in watched[:10]]
    if leaked:
        step, names, norm = leaked[0]
        evidence["first_stale_parameters"] = names[:5]
        return fails(
            f"optimizer step {step} applies gradients that were never cleared since that "
            f"optimizer's previous step ({len(names)} tensor(s), first `{names[0]}`, norm "
            f"{norm:.3g}), so every update sums all past gradients; do not override "
            "optimizer_zero_grad (or make it call optimizer.zero_grad()), and with manual "
            "optimization call opt.zero_grad() once per step"
        )
    return passes(
        f"each of {len(watched)} optimizer steps after the first applies only gradients "
        "computed since that optimizer last stepped"
    )


def finite_difference(ctx: DoctorContext) -> tuple[list[dict[str, Any]], str, int]:
    """(coordinates where autograd and the finite difference disagree, why the comparison could not
    run, coordinates left out at a kink: where the central difference averages two slopes and
    autograd takes one, such as a ReLU at exactly 0)."""
    task = ctx.make_task()
    if not task.automatic_optimization:
        return [], "manual optimization: the loss is not what training_step returns", 0
    task = task.double().eval()  # eval mode: the loss is a deterministic function of the weights
    # A few samples are enough for the derivative and keep 2 forwards per coordinate cheap.
    few = ctx.probe_indices[:SAMPLES] if ctx.probe_indices else None
    batch = ctx.samples.collate(few) if few else clone(ctx.batch)
    batch = restructure(batch, lambda t: t.double() if t.is_floating_point() else t)
    try:
        with quiet():
            loss = training_loss(task, batch)
            if not loss.requires_grad:
                return [], "the loss has no graph (grad.flow reports it)", 0
            loss.backward()
            at = float(training_loss(task, batch).detach())
    except Exception as err:  # a step that needs the trainer (self.trainer, self.optimizers())
        why = f"training_step cannot run outside the trainer ({type(err).__name__}); {ALONE}"
        return [], why, 0
    if float(loss.detach()) != at:
        return [], "training_step's loss is random even in eval mode", 0
    if loss.dtype != torch.float64:  # a cast in the step (targets.float()): too coarse to compare
        return [], f"training_step computes its loss in {loss.dtype} even from float64 weights", 0
    params = [(n, p) for n, p in task.named_parameters() if p.grad is not None]
    bad, kinks = [], 0
    with torch.no_grad(), quiet():
        for name, p in sorted(params, key=lambda item: -float(item[1].grad.abs().max()))[:4]:
            for i in p.grad.abs().flatten().topk(min(COORDINATES, p.numel())).indices:
                flat, analytic = p.view(-1), float(p.grad.view(-1)[i])
                h = STEP * max(1.0, abs(float(flat[i])))
                flat[i] += h
                up = float(training_loss(task, batch))
                flat[i] -= 2 * h
                down = float(training_loss(task, batch))
                flat[i] += h
                numeric = (up - down) / (2 * h)
                off = abs(numeric - analytic)
                if off <= RTOL * max(abs(numeric), abs(analytic), 1e-6):
                    continue
                if abs((up - at) - (at - down)) / h >= off:  # not smooth here: a kink
                    kinks += 1
                    continue
                bad.append(
                    dict(tensor=name, index=int(i), autograd=analytic, finite_difference=numeric)
                )
    return bad, "", kinks


def _grows(values: list[int], least: float) -> bool:
    """Up at every watched step after the first (which may build lazy state), by `least` on
    average: a graph kept from each step, not one kept from the latest step only."""
    tail = values[1:]
    if len(tail) < 2:
        return False
    rate = (tail[-1] - tail[0]) / (len(tail) - 1)
    return rate >= least and all(b > a for a, b in pairwise(tail))


def memory_graph_leak(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    obs = observation(ctx)
    rec, spy = obs.recorder, obs.spy
    counts, nodes = rec.live_graph_tensors, rec.live_graph_nodes
    if len(counts) < 3:
        return skips(crashed_message(obs) if obs.fit.error else "too few steps")
    growth = (counts[-1] - counts[1]) / (len(counts) - 2)
    # Only growth is a leak: one step's graph kept until the next replaces it is not. The
    # autograd nodes still reachable measure any graph kept (its saved activations hang off
    # them); the graph-attached tensors alive say whether tensors or a carried chain hold it.
    unreused = spy.steps_retaining_only()
    evidence |= {"steps_watched": len(counts), "live_graph_tensors_after_each_step": counts}
    evidence |= {"growth_per_step": growth, "graph_nodes_alive_after_each_step": nodes}
    evidence |= {"backward_calls": spy.backward_calls, "retain_graph_calls": spy.retain_graph_calls}
    evidence["steps_retaining_a_graph_no_backward_reuses"] = unreused
    if unreused:
        return fails(
            f"backward(retain_graph=True) is the only backward in {len(unreused)} of "
            f"{len(counts)} watched steps: no second backward reuses the graph, so it only "
            "keeps the step's activations alive for as long as anything refers to the loss "
            "(they pile up once a loss tensor is kept); call backward without retain_graph"
        )
    if _grows(counts, 1):
        return fails(
            f"{growth:.1f} graph-attached tensor(s) more survive every step "
            f"({counts[1]} -> {counts[-1]}; autograd nodes alive {nodes[1]} -> {nodes[-1]}): "
            "losses or outputs stored without .item()/.detach(), so memory grows until "
            "OOM; log loss.item() or store tensor.detach()"
        )
    if _grows(nodes, 1):
        return fails(
            f"the autograd graph kept alive grows every step ({nodes[1]} -> {nodes[-1]} nodes "
            f"over {len(nodes) - 1} steps) while the tensors holding it do not: a tensor carried "
            "across steps chains each step's graph onto the last (a running total "
            "`total = total + loss`, a hidden state never detached), so memory grows until "
            "OOM; accumulate loss.item() or loss.detach(), and detach carried state"
        )
    if nodes and nodes[-1] > 0:
        return passes(
            f"{nodes[-1]} autograd nodes of one step's graph stay alive after it (a reference to "
            f"the latest loss or output), but nothing grows over {len(counts)} steps: no leak; "
            "store .detach() if that memory matters"
        )
    return passes(
        f"no graph survives a training step ({len(counts)} steps watched, growth {growth:g}/step)"
    )
