"""memory.graph_leak: autograd graphs that survive a training step and grow step after step."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import (
    crashed_message,
    observation,
)
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips


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
    evidence |= {
        "steps_watched": len(counts),
        "live_graph_tensors_after_each_step": counts,
        "growth_per_step": growth,
        "graph_nodes_alive_after_each_step": nodes,
        "backward_calls": spy.backward_calls,
        "retain_graph_calls": spy.retain_graph_calls,
    }
    return _leak_verdict(counts, nodes, spy, growth, evidence)


def _leak_verdict(
    counts: list[int], nodes: list[int], spy: Any, growth: float, evidence: dict[str, Any]
) -> Verdict:
    """Only growth is a leak: one step's graph kept until the next replaces it is not. The
    autograd nodes still reachable measure any graph kept (its saved activations hang off
    them); the graph-attached tensors alive say whether tensors or a carried chain hold it."""
    unreused = spy.steps_retaining_only()
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
            f"{nodes[-1]} autograd nodes of one step's graph stay alive after it (a reference to the "
            "latest loss or output), but nothing grows over "
            f"{len(counts)} steps: no leak; store .detach() if that memory matters"
        )
    return passes(
        f"no graph survives a training step ({len(counts)} steps watched, growth {growth:g}/step)"
    )
