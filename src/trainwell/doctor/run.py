"""`python scripts/doctor.py`: run every check, write report.json / report.md / plots, exit 0|1."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from trainwell.doctor.checks import CHECKS
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.logged import logging_fit
from trainwell.doctor.harness.observe import observation
from trainwell.doctor.harness.scan import scan
from trainwell.doctor.harness.settings import ProbeSettings
from trainwell.doctor.report import plots
from trainwell.doctor.report.verdict import Check, fails, render, write_json
from trainwell.errors import TrainwellError, error_line
from trainwell.training.monitored_metric import refuse_unlogged_monitor
from trainwell.training.precision import resolve_precision


def shared_probes(ctx: DoctorContext) -> dict[str, float | str]:
    """Run the probes several checks read up front, so each check's `seconds` is its own work. A
    probe that raises is left for its checks to report (they call it again and say why)."""
    timings: dict[str, float | str] = {}
    probes = {"logging_fit": logging_fit, "observe_run": observation, "data_scan": scan}
    for name, probe in probes.items():
        start = time.perf_counter()
        try:
            probe(ctx)
            timings[name] = round(time.perf_counter() - start, 3)
        except TrainwellError:
            raise
        except Exception as err:  # reported by the checks that need this probe
            timings[name] = f"raised {type(err).__name__}"
    return timings


def run_checks(ctx: DoctorContext, only: list[str] | None = None) -> list[Check]:
    checks = []
    for check_id, probe in CHECKS.items():
        if only and check_id not in only:
            continue
        start = time.perf_counter()
        evidence: dict[str, Any] = {}
        try:
            verdict = probe(ctx, evidence)
        except TrainwellError:
            raise
        except Exception as err:  # a probe hit something unforeseen: report it, keep going
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise  # what the verdict asks for: the traceback, through Hydra, to report
            evidence = {}  # what the check wrote before it raised is not a finding
            verdict = fails(
                f"the probe itself raised {error_line(err)}; run with "
                "HYDRA_FULL_ERROR=1 and report it if your code is not the cause"
            )
        # A check reporting a shared probe (overfit reports the probe fit) adds that probe's time.
        seconds = round(verdict.seconds + time.perf_counter() - start, 3)
        checks.append(Check(check_id, verdict.status, verdict.message, evidence, seconds))
    return checks


def experiment_name(cfg: DictConfig) -> str:
    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}  # {} in tests
    if choice := choices.get("experiment"):
        return str(choice)
    data = str(cfg.data.get("_target_", "?")).rsplit(".", 1)[-1]
    net = cfg.model.get("net")
    model = net.get("_target_", "?") if OmegaConf.is_dict(net) else cfg.model.get("_target_", "?")
    return f"default ({str(model).rsplit('.', 1)[-1]} on {data})"


def _summary(ctx: DoctorContext, seconds: float, shared: dict[str, float | str]) -> dict[str, Any]:
    cfg, obs = ctx.cfg, observation(ctx)
    params = sum(p.numel() for p in obs.task.parameters() if p.requires_grad)
    net = type(getattr(obs.task, "net", obs.task)).__name__
    trainer = logging_fit(ctx)[0].trainer  # what the task's configure_optimizers really built
    accelerator = str(cfg.trainer.get("accelerator", "cpu"))
    try:
        precision = resolve_precision(cfg.trainer.get("precision"), accelerator)
    except TrainwellError as err:
        precision = f"invalid ({err})"
    data = "train size unknown: the loader has no length"
    if (size := ctx.plan.dataset_size) is not None:
        data = f"{size} train samples"
    opts = [f"{type(o).__name__} (lr {o.param_groups[0]['lr']:g})" for o in trainer.optimizers]
    return {
        "data": f"{cfg.data.get('_target_', '?')} ({data})",
        "model": f"{type(obs.task).__name__} over {net}, {params:,} trainable parameters",
        "loss": obs.spy.losses[0].name if obs.spy.losses else "not observed",
        "optimizer": ", ".join(opts) or "not observed",
        "scheduler": ", ".join(type(c.scheduler).__name__ for c in trainer.lr_scheduler_configs)
        or "none (a constant LR, unless the task sets it)",
        "device / precision": f"training on {accelerator} ({cfg.trainer.get('devices', 1)} device(s)), "
        f"precision {precision}; probes ran on {ctx.settings.accelerator}",
        "probe batch": f"{ctx.batch_size} samples, overfit probe of {len(obs.recorder.losses)} "
        "steps at a constant LR",
        "probe time": f"{seconds} s in all; shared probes "
        + ", ".join(f"{k} {v} s" for k, v in shared.items())
        + " (overfit.one_batch's seconds below include observe_run, the fit it reports; the "
        "other checks' seconds exclude the shared probes)",
    }


def _lr_curve(ctx: DoctorContext) -> list[float] | None:
    """The configured schedule over the planned steps, built the way train.py builds it (None:
    the task builds its own, or the schedule follows a metric and has no curve before training)."""
    factories, total = ctx.factories(), ctx.plan.total_optimizer_steps
    if "optimizer" not in factories or total is None:
        return None
    opt = factories["optimizer"](params=[torch.nn.Parameter(torch.zeros(1))])
    if "scheduler" not in factories:
        return [opt.param_groups[0]["lr"]] * max(total, 1)
    try:
        sched = factories["scheduler"](optimizer=opt)
    except TypeError:  # a required argument the task passes (OneCycleLR's max_lr): no curve
        return None
    if isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau):
        return None
    lrs = []
    for _ in range(min(total, 50_000)):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def _plots(ctx: DoctorContext, out: Path) -> dict[str, str]:
    made: dict[str, str] = {}
    rec = observation(ctx).recorder
    losses = [v for v in rec.losses if v is not None]
    if losses and all(v > 0 for v in losses):
        made["overfit-one-batch loss"] = plots.overfit_curve(losses, out)
    if rec.step_grads:
        made["per-layer gradient norms"] = plots.grad_norms(rec.step_grads[0], out)
    if lrs := _lr_curve(ctx):
        made["learning-rate schedule"] = plots.lr_schedule(lrs, ctx.plan.warmup_steps, out)
    return made


def diagnose(cfg: DictConfig) -> tuple[list[Check], Path]:
    """Run every check on the configured experiment; write <run dir>/doctor/*, print the table."""
    out = Path(cfg.paths.output_dir) / "doctor"
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    settings = ProbeSettings.from_cfg(cfg.get("probe"))
    ctx = DoctorContext(cfg, settings, workdir=out / ".probes")
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    start, threads = time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        shared = shared_probes(ctx)
        if isinstance(shared["logging_fit"], float):  # as train.py refuses at its first validation
            fit, watch = logging_fit(ctx)
            logged = {name for hook, name in watch.keys if "validation" in hook}
            refuse_unlogged_monitor(cfg, fit.trainer, logged)
        checks = run_checks(ctx)
        made = _plots(ctx, out)
    finally:
        torch.set_num_threads(threads)  # preflight: training keeps its own thread count
        # The probes' scratch files go whatever happened: the run dir holds only the report.
        shutil.rmtree(ctx.workdir, ignore_errors=True)
    name, seconds = experiment_name(cfg), round(time.perf_counter() - start, 2)
    extra = {"seconds": seconds, "shared_probe_seconds": shared, "plan": ctx.plan.as_dict()}
    write_json(out / "report.json", name, checks, extra | {"plots": sorted(made.values())})
    summary = _summary(ctx, seconds, shared)
    (out / "report.md").write_text(render(name, summary, ctx.plan.lines(), checks, made))
    width = max(len(c.id) for c in checks)
    for c in checks:
        print(f"  {c.id:<{width}}  {c.status:<4}  {c.seconds:6.2f}s  {c.message}")
    return checks, out


def run_doctor(cfg: DictConfig) -> int:
    print(f"run dir: {cfg.paths.output_dir}", flush=True)
    checks, out = diagnose(cfg)
    print(f"report: {out / 'report.md'}", flush=True)
    return int(any(c.status == "fail" for c in checks))


def preflight(cfg: DictConfig) -> Path:
    """train.py doctor=true: refuse to start on a `fail` unless doctor_allow_fail=true."""
    print("doctor: running the preflight checks", flush=True)
    checks, out = diagnose(cfg)
    failed = [c for c in checks if c.status == "fail"]
    if failed and not cfg.get("doctor_allow_fail", False):
        raise TrainwellError(
            f"doctor preflight failed {len(failed)} check(s) (first: {failed[0].id}: "
            f"{failed[0].message}); see {out / 'report.md'}, or set doctor_allow_fail=true"
        )
    return out / "report.json"
