"""The corpus's checks, shared by the test files that split its cases between them (each file
runs on one pytest worker: the slow resume runs are spread over tests/ecosystem/test_corpus*.py).

Through the real scripts:
* `scripts/train.py` trains it to the end and writes results.json (testing the best checkpoint,
  or saying in one line why it skips testing when the module has no test_step);
* `scripts/eval.py` on that run's checkpoint gives the same test metrics as the run (or stops
  with a one-line error naming test_step);
* the doctor (in-process, every check) says no `fail`;
* a run SIGKILLed mid-epoch and relaunched with resume=auto ends with bitwise the same weights,
  optimizer and scheduler state, and the same results.json metrics, as the uninterrupted run.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra.utils import instantiate

from tests.ecosystem.cases import BY_NAME, CONF, Case
from tests.helpers.config import compose_config
from tests.helpers.doctor import QUICK_PROBES, run_ids
from tests.helpers.scripts import TESTS_IMPORTABLE, run_script
from tests.helpers.state import assert_bitwise_equal, final_state
from trainwell.doctor.checks import CHECKS


def train_case(case: Case, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_script(
        "train.py", *case.train_overrides(), *extra, f"hydra.run.dir={run_dir}",
        env=TESTS_IMPORTABLE,
    )  # fmt: skip


def assert_ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def read_results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def check_trained(case: Case, proc: subprocess.CompletedProcess, run_dir: Path) -> dict:
    """train.py finished the planned run and wrote what the contract lists."""
    assert_ok(proc)
    results = read_results(run_dir)
    assert results["last_ckpt"] and Path(results["last_ckpt"]).is_file()
    assert results["plan"]["max_epochs"] == 2
    assert final_state(run_dir)["epoch"] == 1  # the second (last) epoch, 0-based
    if case.has_test_step:
        # Unmonitored, the checkpoint callback has no best: the final weights are tested.
        assert results["test"] == ("best_ckpt" if case.monitor else "final weights (no best_ckpt)")
    else:
        assert results["test"].startswith("skipped:") and "test_step" in results["test"]
        skipped = [line for line in proc.stdout.splitlines() if "testing skipped" in line]
        assert len(skipped) == 1 and "test_step" in skipped[0], proc.stdout[-2000:]
    if case.train_stderr:
        assert case.train_stderr in proc.stderr, proc.stderr[-3000:]
    return results


def evaluate(case: Case, train_dir: Path, eval_dir: Path) -> None:
    """eval.py on the run's checkpoint, with no overrides but the search path: it reads the model
    and data from the run's own config."""
    results = read_results(train_dir)
    ckpt = results["best_ckpt"] or results["last_ckpt"]
    proc = run_script(
        "eval.py", f"hydra.searchpath=[file://{CONF}]", f"ckpt_path={ckpt}",
        f"hydra.run.dir={eval_dir}", env=TESTS_IMPORTABLE,
    )  # fmt: skip
    if not case.has_test_step:
        assert proc.returncode != 0, proc.stdout[-2000:]
        line = _last_line(proc.stderr)
        assert line.startswith("error:") and "test_step" in line, proc.stderr[-2000:]
        assert not (eval_dir / "results.json").exists()
        return
    assert_ok(proc)
    evaluated = read_results(eval_dir)["metrics"]
    tested = {k: v for k, v in results["metrics"].items() if k.startswith("test/")}
    assert evaluated == tested


def kill_and_resume(case: Case, run_dir: Path) -> tuple[dict, dict, str]:
    """(final state, results metrics, the line naming the checkpoint it resumed from)."""
    # flush: the kill waits until the checkpoints already saved are on disk. Saves are written in
    # the background, so on a loaded machine a kill a few batches after the epoch's save can beat
    # the write, and resume=auto then rightly starts fresh: not the resume this test is about.
    killer = (
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        f"+callbacks.killer.batch={case.kill_after}",
        "+callbacks.killer.flush=true",
    )
    killed = train_case(case, run_dir, *killer)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (run_dir / "results.json").exists()
    resumed = assert_ok(train_case(case, run_dir, "resume=auto"))
    line = next(x for x in resumed.stdout.splitlines() if x.startswith("resume=auto: "))
    assert line.startswith("resume=auto: resuming from "), line  # not a fresh start
    return final_state(run_dir), read_results(run_dir)["metrics"], line


def doctor_verdicts(case: Case, tmp_path: Path) -> dict[str, tuple[str, str]]:
    checks = run_ids(tmp_path, [*case.train_overrides(), *QUICK_PROBES], list(CHECKS))
    return {check_id: (c.status, c.message) for check_id, c in checks.items()}


def check_doctor(case: Case, tmp_path: Path) -> None:
    verdicts = doctor_verdicts(case, tmp_path)
    assert set(verdicts) == set(CHECKS)
    failed = {k: msg for k, (status, msg) in verdicts.items() if status == "fail"}
    assert not failed, failed
    for check_id in case.doctor_warns:
        assert verdicts[check_id][0] == "warn", verdicts[check_id]


def check_predictions(case: Case, train_dir: Path) -> None:
    """predict_step over the predict loader (the test split) from the tested checkpoint: its
    accuracy is the run's test/acc (two equal batches: the mean of batch means is exact)."""
    cfg = compose_config(list(case.train_overrides()), train_dir / "predict")
    L.seed_everything(cfg.seed, verbose=False)
    module, datamodule = instantiate(cfg.model), instantiate(cfg.data)
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    results = read_results(train_dir)
    batches = trainer.predict(
        module, datamodule=datamodule, ckpt_path=results["best_ckpt"], weights_only=True
    )
    probs = torch.cat([b["probs"] for b in batches])
    labels = torch.cat([b["label"] for b in batches])
    assert probs.shape == (32, 3) and torch.allclose(probs.sum(1), torch.ones(32))
    accuracy = (probs.argmax(1) == labels).float().mean().item()
    assert accuracy == pytest.approx(results["metrics"]["test/acc"], abs=1e-6)


EXTRA_CHECKS: dict[str, Callable[[Case, Path], None]] = {"predict_step": check_predictions}


# The slow resume cases, split between test files so that pytest-xdist's one-file-per-worker
# spreads them over the workers; every case is in exactly one share (test_corpus.py checks it).
SHARES: dict[str, tuple[str, ...]] = {
    "demos": ("boring", "boring_manual", "demo_model", "hydra_template", "gan", "plateau"),
    "schedules": (
        "steplr_epoch", "onecycle_step", "train_only", "step_and_epoch_logs",
        "metric_collection", "two_val_loaders",
    ),
    "batches": ("predict_step", "skipped_batch", "batchnorm_accumulate", "containers", "dict_batch"),
}  # fmt: skip


def share(name: str) -> list[Case]:
    return [BY_NAME[case] for case in SHARES[name]]


def check_trains_evaluates_passes_the_doctor_and_resumes_exactly(
    case: Case, tmp_path: Path
) -> None:
    reference, interrupted = tmp_path / "uninterrupted", tmp_path / "killed"

    def uninterrupted() -> dict:
        results = check_trained(case, train_case(case, reference), reference)
        evaluate(case, reference, tmp_path / "eval")
        return results

    with ThreadPoolExecutor(max_workers=2) as pool:  # 2 cores: two runs at a time
        want_future = pool.submit(uninterrupted)
        got_future = pool.submit(kill_and_resume, case, interrupted)
        want_metrics = want_future.result()["metrics"]
        got, got_metrics, resumed_from = got_future.result()
    want = final_state(reference)
    try:
        # Named first: a scheduler whose state diverged (a ReduceLROnPlateau step lost) shows.
        assert got["lr_schedulers"] == want["lr_schedulers"], (
            got["lr_schedulers"],
            want["lr_schedulers"],
        )
        assert_bitwise_equal(got, want)
        assert got_metrics == want_metrics
    except AssertionError as err:
        raise AssertionError(f"{resumed_from}: the resumed run diverged: {err}") from err
    check_doctor(case, tmp_path / "doctor")
    if case.name in EXTRA_CHECKS:
        EXTRA_CHECKS[case.name](case, reference)
