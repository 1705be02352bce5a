"""The one place a script turns an exception into a one-line message and an exit code."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException, HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

import trainwell.resolvers  # noqa: F401  (registers resolvers before Hydra composes)
from trainwell import compat
from trainwell.command_line import check_command_line, composed, without_null_groups
from trainwell.config_values import template_value_problem
from trainwell.errors import TrainwellError, error_line, first_line, missing_module_line
from trainwell.keywords import unexpected_keyword_line

if TYPE_CHECKING:
    from trainwell.io.refused_run import RunDirBefore

EXIT_USAGE = 2
EXIT_FAILURE = 1


def _user_error(err: BaseException) -> TrainwellError | None:
    """Hydra's instantiate wraps constructor errors; find ours in the cause chain."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, TrainwellError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _save_traceback(err: BaseException) -> Path | None:
    try:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # HydraConfig not set: running outside hydra.main
        return None
    path = run_dir / "error.log"
    path.write_text("".join(traceback.format_exception(err)))
    return path


class JobFailed(CompactHydraException):
    """A failed job of a multirun, as its one-line cause. Raised instead of SystemExit so that the
    sweep goes on: Hydra's launchers record a job's exception (a SystemExit would end the whole
    sweep, and submitit would keep waiting for a result that never comes); Hydra prints a compact
    exception as one line and exits 1."""


def _in_multirun() -> bool:
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _script_as_typed() -> str:
    """The script, as a command line started in this directory names it (`scripts/train.py`):
    a command a message prints must run where it is read."""
    path = Path(sys.argv[0]).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _refuse_search_without_multirun() -> None:
    """hparams_search=<name> without -m would train one plain run and never search."""
    if _in_multirun() or "LOCAL_RANK" in os.environ:  # the DDP ranks of a trial run in RUN mode
        return
    hydra_cfg = HydraConfig.get()
    target = str(OmegaConf.select(hydra_cfg, "sweeper._target_", default="") or "")
    if target.endswith(".TrainwellOptunaSweeper"):
        name = hydra_cfg.runtime.choices.get("hparams_search") or "<name>"
        raise TrainwellError(
            f"hparams_search={name} is an Optuna search: start it with -m "
            f"(python {_script_as_typed()} -m hparams_search={name} ...)"
        )


def _refuse_template_value(cfg: DictConfig) -> None:
    """The template's own values again, inside the job: a multirun's jobs (and a command line
    the entry did not check) get the same line as a single run, and no later code re-checks
    them (config_values.py is their one home)."""
    problem = template_value_problem(cfg)
    if problem is not None:
        raise TrainwellError(problem)


def _report(err: Exception) -> tuple[str, int]:
    """Print the one-line cause; (that line, exit code). The traceback of a crash goes to
    <run dir>/error.log."""
    user = _user_error(err)
    label = "error" if user is None else user.label
    missing = missing_module_line(err) if user is None else None
    keyword = unexpected_keyword_line(err) if user is None else None
    if user is not None:
        line, code = first_line(user), EXIT_USAGE
    elif keyword is not None:  # a keyword the signature's source did not show: bad input
        line, code = keyword, EXIT_USAGE
    elif missing is not None:  # bad input: a target whose import chain names a missing module
        line, code = missing, EXIT_USAGE
    elif isinstance(err, InterpolationKeyError):  # a config names a key it lacks: bad input
        parts = [p.strip() for p in str(err).splitlines() if not p.strip().startswith("object_")]
        line, code = "; ".join(p for p in parts if p), EXIT_USAGE
    else:
        where = _save_traceback(err)
        detail = f" (traceback: {where})" if where else ""
        line, code = f"{error_line(err)}{detail}", EXIT_FAILURE
    if user is None or not user.silent:
        print(f"{label}: {line}", file=sys.stderr)
    return line, code


def hydra_entry(
    config_dir: Path,
    config_name: str,
    job: Callable[[DictConfig], Any],
    prepare_argv: Callable[[list[str]], list[str]] | None = None,
    lock_run_dir: bool = False,
    check_paths: Callable[[DictConfig], object] | None = None,
) -> Callable[[], Any]:
    """Wrap `job` in hydra.main: exit 0 / the job's int, 2 on bad input, 1 on a crash.

    Before Hydra starts the job the command line is checked: keys, the template's values and
    what `check_paths` checks on the composed config (the checkpoint the command reads) come
    before torch is imported, so such a mistake is one line, exit 2, within a second, and
    nothing is written.

    Users see one line naming the cause; the full traceback goes to <run dir>/error.log
    (HYDRA_FULL_ERROR=1 re-raises it instead). Under multirun a failed job raises JobFailed (the
    sweep goes on), and the job's return value (train.py: the optimized metric) goes to the
    sweeper.
    """

    @hydra.main(version_base="1.3", config_path=str(config_dir), config_name=config_name)
    def main(cfg: DictConfig) -> Any:
        compat.pin_multirun_job_for_ddp_children()
        env_before = compat.launcher_env()
        try:
            compat.refuse_torchrun_restart_on_shared_store()
            _refuse_search_without_multirun()
            _refuse_template_value(cfg)
            result = job(cfg)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as err:
            if os.environ.get("HYDRA_FULL_ERROR") == "1" and _user_error(err) is None:
                raise
            line, code = _report(err)
            if _in_multirun():
                raise JobFailed(f"{HydraConfig.get().runtime.output_dir}: {line}") from None
            raise SystemExit(code) from None
        finally:
            compat.end_job(env_before)
        if isinstance(result, int) and not isinstance(result, bool) and result != 0:
            if _in_multirun():
                raise JobFailed(f"{HydraConfig.get().runtime.output_dir}: exit code {result}")
            raise SystemExit(result)
        return result

    def entry() -> Any:
        argv = without_null_groups(config_dir, sys.argv[1:])
        sys.argv = [sys.argv[0], *(prepare_argv(argv) if prepare_argv is not None else argv)]
        if os.environ.get("HYDRA_FULL_ERROR") != "1":
            problem = check_command_line(config_dir, config_name, sys.argv[1:], check_paths)
            if problem is not None:
                print(f"error: {problem}", file=sys.stderr)
                raise SystemExit(EXIT_USAGE)
        before = _run_dir_before(config_dir, config_name, sys.argv[1:])
        if lock_run_dir:
            _lock_before_hydra_writes(config_dir, config_name, sys.argv[1:])
        try:
            return main()
        except SystemExit as exit_:
            if exit_.code == EXIT_USAGE and before is not None:
                _undo_launch(before)
            raise

    return entry


def _launch_run_dir(config_dir: Path, config_name: str, argv: list[str]) -> Path | None:
    """The run dir a single run (not a multirun, not a DDP rank) of this command line will use,
    when it is known before Hydra starts."""
    from trainwell.io.writer import writes_shared_files

    if any(arg.startswith("-") for arg in argv) or not writes_shared_files():
        return None
    try:
        run_dir = OmegaConf.select(composed(config_dir, config_name, tuple(argv)), "hydra.run.dir")
    except (HydraException, OmegaConfBaseException, ValueError):
        return None  # resolvable only inside Hydra's job (it names ${hydra:...})
    return Path(str(run_dir)) if run_dir is not None else None


def _run_dir_before(config_dir: Path, config_name: str, argv: list[str]) -> RunDirBefore | None:
    from trainwell.io.refused_run import RunDirBefore

    run_dir = _launch_run_dir(config_dir, config_name, argv)
    return RunDirBefore.record(run_dir) if run_dir is not None else None


def _undo_launch(before: RunDirBefore) -> None:
    """A refused run (exit 2) leaves nothing new: Hydra's .hydra/, the job log and the lock it
    wrote go (io/refused_run.py)."""
    from trainwell.io.run_lock import release_run_dir

    release_run_dir(before.run_dir)
    before.undo_bookkeeping()


def _lock_before_hydra_writes(config_dir: Path, config_name: str, argv: list[str]) -> None:
    """Take the run dir's lock before Hydra creates .hydra/ and train.log in it: a second launch
    into a dir in use exits 2 naming the holder and changes nothing there. A multirun (its job
    dirs are known only inside the sweep) locks each job's dir when the job starts (train_job)."""
    from trainwell.io.run_lock import RunDirInUse, lock_run_dir

    run_dir = _launch_run_dir(config_dir, config_name, argv)
    if run_dir is None:
        return  # a multirun, a rank, or a dir known only inside Hydra's job: train_job locks it
    try:
        lock_run_dir(run_dir)
    except RunDirInUse as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def train_job(cfg: DictConfig) -> dict[str, Any] | float:
    """scripts/train.py: the doctor's preflight when asked (doctor=true), then the run.

    The preflight runs here, not inside training: the doctor drives training's builders, never
    the reverse. Only the launching process runs it (DDP re-executes the script per rank).
    Returns the results, or with `optimized_metric=<name>` that metric's value (what a sweeper
    such as hparams_search=<name>_optuna optimizes).
    """
    from trainwell.io.run_lock import run_dir_lock

    with run_dir_lock(Path(cfg.paths.output_dir)):
        return _train_job(cfg)


def _train_job(cfg: DictConfig) -> dict[str, Any] | float:
    report = None
    from trainwell.io.writer import writes_shared_files

    if cfg.get("doctor", False) and writes_shared_files():
        from trainwell.doctor.run import preflight

        report = str(preflight(cfg))
    results = run_training(cfg, doctor_report=report)
    name = cfg.get("optimized_metric")
    return results if name is None else optimized_value(results, str(name))


def run_training(cfg: DictConfig, doctor_report: str | None = None) -> dict[str, Any]:
    """What the config asks for: cross-validation (`cv.folds=K`: K runs, one per fold) or one run."""
    if OmegaConf.select(cfg, "cv.folds") is not None:
        from trainwell.training.cv.run import cross_validate

        return cross_validate(cfg, doctor_report=doctor_report)
    from trainwell.training.run import train

    return train(cfg, doctor_report=doctor_report)


def optimized_value(results: dict[str, Any], name: str) -> float:
    """results["metrics"][name] as a float; a name the run did not log is bad input."""
    metrics = results.get("metrics") or {}
    if name not in metrics:
        available = ", ".join(sorted(metrics)) or "none"
        raise TrainwellError(
            f"optimized_metric={name} is not a metric of this run (available: {available})"
        )
    return float(metrics[name])


def eval_job(cfg: DictConfig) -> dict[str, Any]:
    from trainwell.training.evaluate import evaluate

    return evaluate(cfg)


def doctor_job(cfg: DictConfig) -> int:
    from trainwell.doctor.run import run_doctor

    return run_doctor(cfg)
