"""memory.graph_leak: autograd graphs that survive a training step and grow step after step."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import (
    crashed_message,
    observation,
)
from trainwell.doctor.report.verdict import Check


def _grows(values: list[int], least: float) -> bool:
    """Up at every watched step after the first (which may build lazy state), by `least` on
    average: a graph kept from each step, not one kept from the latest step only."""
    tail = values[1:]
    if len(tail) < 2:
        return False
    rate = (tail[-1] - tail[0]) / (len(tail) - 1)
    return rate >= least and all(b > a for a, b in pairwise(tail))


def memory_graph_leak(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    rec, spy = obs.recorder, obs.spy
    counts, saved = rec.live_graph_tensors, rec.retained_saved_bytes
    if len(counts) < 3:
        return Check(
            "memory.graph_leak", "skip", crashed_message(obs) if obs.fit.error else "too few steps"
        )
    growth = (counts[-1] - counts[1]) / (len(counts) - 2)
    evidence = {
        "steps_watched": len(counts),
        "live_graph_tensors_after_each_step": counts,
        "growth_per_step": growth,
        "saved_bytes_alive_after_each_step": saved,
        "graph_nodes_alive_after_each_step": rec.live_graph_nodes,
        "backward_calls": spy.backward_calls,
        "retain_graph_calls": spy.retain_graph_calls,
    }
    return _leak_verdict(counts, saved, spy, growth, evidence, rec.live_graph_nodes)


def _leak_verdict(
    counts: list[int],
    saved: list[int],
    spy: Any,
    growth: float,
    evidence: dict[str, Any],
    nodes: list[int],
) -> Check:
    """Only growth is a leak: one step's graph kept until the next replaces it is not."""
    tensors_grow = _grows(counts, 1)
    bytes_grow = _grows(saved, 1)
    unreused = spy.steps_retaining_only()
    evidence["steps_retaining_a_graph_no_backward_reuses"] = unreused
    if unreused:
        return Check(
            "memory.graph_leak",
            "fail",
            f"backward(retain_graph=True) is the only backward in {len(unreused)} of "
            f"{len(counts)} watched steps: no second backward reuses the graph, so it only "
            "keeps the step's activations alive for as long as anything refers to the loss "
            "(they pile up once a loss tensor is kept); call backward without retain_graph",
            evidence,
        )
    if tensors_grow or bytes_grow:
        return Check(
            "memory.graph_leak",
            "fail",
            f"{growth:.1f} graph-attached tensor(s) more survive every step "
            f"({counts[1]} -> {counts[-1]}; saved activations alive {saved[1]} -> {saved[-1]} "
            "bytes): losses or outputs stored without .item()/.detach(), so memory grows until "
            "OOM; log loss.item() or store tensor.detach()",
            evidence,
        )
    if _grows(nodes, 1):
        return Check(
            "memory.graph_leak",
            "fail",
            f"the autograd graph kept alive grows every step ({nodes[1]} -> {nodes[-1]} nodes "
            f"over {len(nodes) - 1} steps) while the tensors holding it do not: a tensor carried "
            "across steps chains each step's graph onto the last (a running total "
            "`total = total + loss`, a hidden state never detached), so memory grows until "
            "OOM; accumulate loss.item() or loss.detach(), and detach carried state",
            evidence,
        )
    if saved and saved[-1] > 0:
        return Check(
            "memory.graph_leak",
            "pass",
            f"{saved[-1]} bytes of one step's graph stay alive after it (a reference to the "
            "latest loss or output), but nothing grows over "
            f"{len(counts)} steps: no leak; store .detach() if that memory matters",
            evidence,
        )
    return Check(
        "memory.graph_leak",
        "pass",
        f"no graph survives a training step ({len(counts)} steps watched, growth {growth:g}/step)",
        evidence,
    )
