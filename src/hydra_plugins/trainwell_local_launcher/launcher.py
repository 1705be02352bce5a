"""The launcher of `launcher=local`: trials packed onto one machine's GPUs and CPUs.

Imported by Hydra's plugin scan at every start: nothing heavy at module level.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job, setup_globals
from hydra.errors import CompactHydraException
from omegaconf import open_dict

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

from ._slots import Slot, cap_workers, machine_cpus, machine_gpus, plan_slots

POLL_S = 0.2
STOP_WAIT_S = 120.0  # a stopped trial's time to write its checkpoint and exit


class TrialKilled(Exception):
    """A trial's process ended without handing back a result (killed, out of memory)."""


class SweepStopped(CompactHydraException):
    """The sweep's process got SIGTERM: its trials were stopped (Hydra prints one line)."""


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """`values` in os.environ while a trial's controller starts (it copies os.environ)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _raise_stopped(signum: int, frame: Any) -> None:
    raise SweepStopped(f"the sweep got signal {signal.Signals(signum).name}")


class TrainwellLocalLauncher(BaseSubmititLauncher):
    _EXECUTOR = "local"

    def __init__(
        self,
        gpus_per_trial: int = 1,
        gpus: Any = None,
        slots: int | None = None,
        submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j",
        timeout_min: int = 10080,
    ) -> None:
        super().__init__(submitit_folder=submitit_folder, timeout_min=timeout_min)
        self.gpus_per_trial = gpus_per_trial
        self.gpus = None if gpus is None else [str(g) for g in gpus]
        self.slots = slots

    # ---- in the trial's process ----

    def run_trial(
        self, slot: Slot, overrides: list[str], job_num: int, singleton_state: dict
    ) -> JobReturn:
        """Hydra's job on the slot's devices: submitit's controller set CUDA_VISIBLE_DEVICES
        for its own GPU list, so the slot's is set again here, before anything touches CUDA."""
        os.environ.update(slot.env())
        import torch

        torch.set_num_threads(slot.threads)
        assert self.hydra_context is not None and self.config is not None
        assert self.task_function is not None
        Singleton.set_state(singleton_state)
        setup_globals()
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.id = f"local_{os.getpid()}"
            cfg.hydra.job.num = job_num
            capped = cap_workers(cfg, slot.threads)
        if capped:
            print(capped, flush=True)
        return run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=cfg,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )

    # ---- in the sweep's process ----

    def _slots(self) -> list[Slot]:
        from trainwell.errors import TrainwellError

        gpus = self.gpus if self.gpus is not None else machine_gpus()
        try:
            return plan_slots(gpus, int(self.gpus_per_trial), self.slots, machine_cpus())
        except ValueError as err:
            raise TrainwellError(str(err)) from None

    def _job_dir(self, overrides: Sequence[str], job_num: int) -> Path:
        assert self.hydra_context is not None and self.config is not None
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.num = job_num
        return Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)

    def _submit(self, slot: Slot, overrides: Sequence[str], job_num: int) -> Any:
        import submitit

        executor = submitit.LocalExecutor(folder=self.params["submitit_folder"])
        executor.update_parameters(timeout_min=self.params["timeout_min"])
        with _environ({k: v for k, v in slot.env().items() if k != "CUDA_VISIBLE_DEVICES"}):
            return executor.submit(
                self.run_trial, slot, list(overrides), job_num, Singleton.get_state()
            )

    def _collect(self, job: Any, overrides: Sequence[str], job_num: int) -> JobReturn:
        """The trial's JobReturn; a trial that handed none back is a failed job with its cause,
        recorded where the sweep summary reads failures (its run dir's failure.txt)."""
        from submitit.core.utils import UncompletedJobError

        # A local trial's process writes its result before it ends: with none there, none is
        # coming (submitit would wait 15 s for a cluster's shared filesystem to show it, and
        # the sweep would start no trial meanwhile).
        if job.paths.result_pickle.exists():
            try:
                return job.result()
            except UncompletedJobError:
                pass
        line = (
            f"trial {job_num}'s process was killed or died before handing back a result; "
            f"its output: {job.paths.stderr}"
        )
        from trainwell.io.writer import writes_shared_files

        job_dir = self._job_dir(overrides, job_num)
        if job_dir.is_dir() and writes_shared_files():
            # The trial's own end (the summary callback) never ran: its failure is recorded here.
            from trainwell.io.results import write_text
            from trainwell.summary.callback import warn_not_updated
            from trainwell.summary.jobs import FAILURE_FILE
            from trainwell.summary.write import update_summary

            write_text(job_dir / FAILURE_FILE, line + "\n")
            sweep_dir = Path(str(self.config.hydra.sweep.dir))
            try:
                update_summary(sweep_dir)
            except Exception as err:  # the trial's outcome stands; the summary can be rebuilt
                warn_not_updated(sweep_dir, err)
        return JobReturn(
            overrides=list(overrides), status=JobStatus.FAILED, _return_value=TrialKilled(line)
        )

    def _stop(self, jobs: list[Any]) -> None:
        """SIGTERM to each trial's controller, which passes it on to the trial: trainwell's
        pre-emption finishes the accumulation window, writes preempt.ckpt and exits."""
        for job in jobs:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(int(job.job_id), signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        while any(not job.done() for job in jobs) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        left = [job.job_id for job in jobs if not job.done()]
        print(
            f"local launcher: stopped {len(jobs) - len(left)} running trials"
            + (f"; still running after {STOP_WAIT_S:.0f} s: pids {', '.join(left)}" if left else "")
            + "; launch the same sweep again (same hydra.sweep.dir) to finish it",
            file=sys.stderr,
            flush=True,
        )

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        assert self.config is not None
        slots = self._slots()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))  # resolved here: trials inherit it
        sweep_dir.mkdir(parents=True, exist_ok=True)
        where = {k: slot.env()["CUDA_VISIBLE_DEVICES"] or "CPU" for k, slot in enumerate(slots)}
        print(
            f"local launcher: {len(job_overrides)} trials, {len(slots)} at once, "
            f"{slots[0].threads} CPU threads each; devices: "
            + ", ".join(where[k] for k in range(len(slots))),
            flush=True,
        )
        pending = collections.deque(
            (initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)
        )
        free, running, returns = list(range(len(slots))), {}, {}
        # A trial is named by what it sweeps: the overrides every trial shares are left out.
        shared = set.intersection(*(set(o) for o in job_overrides))
        previous = signal.signal(signal.SIGTERM, _raise_stopped)
        try:
            while pending or running:
                while pending and free:
                    k = free.pop(0)
                    num, overrides = pending.popleft()
                    job = self._submit(slots[k], overrides, num)
                    running[k] = (num, overrides, job)
                    swept = [o for o in filter_overrides(overrides) if o not in shared]
                    print(
                        f"trial {num} ({' '.join(swept) or 'no overrides'}): started on "
                        f"{where[k]}; output: {job.paths.stdout}",
                        flush=True,
                    )
                for k, (num, overrides, job) in list(running.items()):
                    if job.done():
                        ret = returns[num] = self._collect(job, overrides, num)
                        del running[k]
                        free.append(k)
                        end = "done" if ret.status == JobStatus.COMPLETED else "failed"
                        print(f"trial {num}: {end}", flush=True)
                time.sleep(POLL_S)
        except BaseException:
            # Ctrl-C or SIGTERM of the sweep: stop its trials rather than leave them running
            # unwatched (each resumes with resume=auto when the sweep is launched again).
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal: still stop them
            self._stop([job for _, _, job in running.values()])
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
        return [returns[initial_job_idx + i] for i in range(len(job_overrides))]
