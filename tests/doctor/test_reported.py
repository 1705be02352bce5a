"""The doctor against training bugs people reported in public trackers (tests/doctor/reported/).

Each case runs twice on the shipped digits experiment with its own module or datamodule swapped
in: the reporter's bug must be flagged by the named check with the named status, and the
reporter's fix (the healthy twin) must draw no `fail` from any check and pass the named one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from tests.helpers.config import compose_config
from tests.helpers.doctor import QUICK_PROBES, run_cfg
from trainwell.doctor.report.verdict import Check

REPORTED = "tests.doctor.reported"
DATA = f"{REPORTED}._common.Digits"

# (case module, which part is swapped: "model" | "data", check id, status the bug draws)
CASES = [
    ("softmax_before_cross_entropy", "model", "loss.logits", "fail"),
    ("layers_in_python_list", "model", "params.registered", "fail"),
    ("numpy_rng_in_workers", "data", "data.worker_seeding", "warn"),
    ("accumulation_without_division", "model", "accumulation.equivalence", "fail"),
    ("running_loss_tensor", "model", "memory.graph_leak", "fail"),
    ("eval_mode_from_init", "model", "train.mode", "fail"),
    ("onecycle_stepped_per_epoch", "model", "schedule.interval", "warn"),
    ("sigmoid_before_bce_with_logits", "model", "loss.logits", "fail"),
    ("eval_hook_without_train", "model", "train.mode", "fail"),
    ("module_requires_grad_attribute", "model", "optimizer.coverage", "fail"),
    ("mse_target_broadcast", "model", "targets.contract", "fail"),
    ("optimizer_before_head_replaced", "model", "optimizer.coverage", "fail"),
    ("tensor_attribute_not_checkpointed", "model", "checkpoint.roundtrip", "fail"),
    ("epoch_end_mean_per_rank", "model", "metrics.reduction", "warn"),
    ("strict_false_prefix", "model", "checkpoint.partial_load", "fail"),
    ("sampler_without_set_epoch", "data", "data.epoch_order", "warn"),
    ("fp16_params_adam", "model", "precision.master_weights", "fail"),
    ("scheduler_sized_by_dataset_length", "model", "schedule.interval", "warn"),
    ("batchnorm_without_running_stats", "model", "eval.batch_independence", "warn"),
    ("manual_step_without_zero_grad", "model", "grad.zeroing", "fail"),
    ("scheduler_before_optimizer", "model", "schedule.interval", "warn"),
]


def _run(tmp_path: Path, case: str, part: str, variant: str, ids: list[str] | None) -> list[Check]:
    cfg = compose_config(QUICK_PROBES, tmp_path / variant / "run", config_name="doctor")
    target = f"{REPORTED}.{case}.{variant}"
    with open_dict(cfg):
        cfg.model = OmegaConf.create(
            {"_target_": target if part == "model" else f"{REPORTED}._common.Classifier"}
        )
        cfg.data = OmegaConf.create({"_target_": target if part == "data" else DATA})
    return list(run_cfg(cfg, tmp_path / variant / "probes", ids).values())


@pytest.mark.slow
@pytest.mark.parametrize(("case", "part", "check_id", "status"), CASES, ids=[c[0] for c in CASES])
def test_reported_bug_is_flagged_and_its_fix_is_clean(
    tmp_path: Path, case: str, part: str, check_id: str, status: str
) -> None:
    bug = {c.id: c for c in _run(tmp_path, case, part, "Buggy", [check_id])}[check_id]
    assert bug.status == status, bug.message
    assert "\n" not in bug.message and len(bug.message) > 20

    twin = {c.id: c for c in _run(tmp_path, case, part, "Healthy", None)}
    assert [f"{c.id}: {c.message}" for c in twin.values() if c.status == "fail"] == []
    assert twin[check_id].status == "pass", twin[check_id].message
