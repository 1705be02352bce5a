"""Every doctor check, registered by its stable id, in report order: the one list there is.

A check is a function (DoctorContext, evidence) -> Verdict, stamped with its id in the report; it
may skip with a reason but is never absent. It imports the harness and the report, no other check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainwell.doctor.checks.accumulation import accumulation_equivalence
from trainwell.doctor.checks.averaging import weights_averaging
from trainwell.doctor.checks.batch_edits import eval_batch_independence, loss_padding
from trainwell.doctor.checks.checkpoint import checkpoint_partial_load, checkpoint_roundtrip
from trainwell.doctor.checks.coverage import eval_coverage
from trainwell.doctor.checks.data import data_finite, data_leakage, data_split_distribution
from trainwell.doctor.checks.gradients import grad_flow, grad_zeroing, memory_graph_leak
from trainwell.doctor.checks.loading import data_throughput, data_worker_seeding
from trainwell.doctor.checks.loss import loss_logits, model_head_width, targets_contract
from trainwell.doctor.checks.manual_accumulation import manual_equivalence
from trainwell.doctor.checks.metrics import metrics_reduction
from trainwell.doctor.checks.modes import eval_determinism, train_mode
from trainwell.doctor.checks.order import data_batch_composition, data_epoch_order
from trainwell.doctor.checks.overfit import overfit_one_batch
from trainwell.doctor.checks.predictions import data_class_balance, data_split_agreement
from trainwell.doctor.checks.recomputation import metrics_recomputation
from trainwell.doctor.checks.schedule import schedule_interval
from trainwell.doctor.checks.structure import (
    device_placement,
    optimizer_coverage,
    params_registered,
    precision_master_weights,
)
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.report.verdict import Verdict


def _accumulation(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    """Automatic and manual optimization window their micro-batches differently."""
    automatic = ctx.reference_task.automatic_optimization
    return (accumulation_equivalence if automatic else manual_equivalence)(ctx, evidence)


CHECKS: dict[str, Callable[[DoctorContext, dict[str, Any]], Verdict]] = {
    "params.registered": params_registered,
    "optimizer.coverage": optimizer_coverage,
    "loss.logits": loss_logits,
    "targets.contract": targets_contract,
    "loss.padding": loss_padding,
    "model.head_width": model_head_width,
    "data.finite": data_finite,
    "data.leakage": data_leakage,
    "data.split_agreement": data_split_agreement,
    "data.split_distribution": data_split_distribution,
    "data.class_balance": data_class_balance,
    "data.batch_composition": data_batch_composition,
    "grad.flow": grad_flow,
    "grad.zeroing": grad_zeroing,
    "overfit.one_batch": overfit_one_batch,
    "eval.coverage": eval_coverage,
    "eval.determinism": eval_determinism,
    "eval.batch_independence": eval_batch_independence,
    "metrics.recomputation": metrics_recomputation,
    "metrics.reduction": metrics_reduction,
    "train.mode": train_mode,
    "checkpoint.roundtrip": checkpoint_roundtrip,
    "checkpoint.partial_load": checkpoint_partial_load,
    "precision.master_weights": precision_master_weights,
    "accumulation.equivalence": _accumulation,
    "weights.averaging": weights_averaging,
    "memory.graph_leak": memory_graph_leak,
    "schedule.interval": schedule_interval,
    "device.placement": device_placement,
    "data.throughput": data_throughput,
    "data.worker_seeding": data_worker_seeding,
    "data.epoch_order": data_epoch_order,
}
