"""Run chosen doctor checks in-process on a composed config (fast: no subprocess, no plots)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import DictConfig

from tests.helpers.config import compose_config
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.settings import ProbeSettings
from trainwell.doctor.report.verdict import Check
from trainwell.doctor.run import run_checks

# Small and quick, but the shipped digits experiment otherwise: the healthy baseline.
QUICK_PROBES = ["probe.overfit_steps=12", "probe.memory_steps=4"]
FAST = ["model.net.width=8", *QUICK_PROBES]
# The shipped language-model experiment, smaller; a test running it is marked LM (the modules of
# that example: a clone that deleted one skips it).
LM_FAST = ["experiment=lm_accum", "model.net.dim=32", "data.num_sequences=400", *QUICK_PROBES]
LM = pytest.mark.example(
    "project.data.sequences", "project.models.transformer", "project.tasks.language_model"
)
MUSEUM = "tests.doctor.museum"


def run_ids(tmp_path: Path, overrides: list[str], ids: list[str] | None) -> dict[str, Check]:
    cfg = compose_config(overrides, tmp_path / "run", config_name="doctor")
    return run_cfg(cfg, tmp_path / "probes", ids)


def run_cfg(cfg: DictConfig, workdir: Path, ids: list[str] | None) -> dict[str, Check]:
    """The chosen checks (every one: None) on a composed doctor config, seeded as the doctor
    seeds, on one thread (xdist workers share the machine's cores)."""
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    ctx = DoctorContext(cfg, ProbeSettings.from_cfg(cfg.probe), workdir=workdir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {c.id: c for c in run_checks(ctx, only=ids)}
    finally:
        torch.set_num_threads(threads)
