"""The ecosystem corpus: modules written elsewhere train, evaluate, pass the doctor and resume.

For every case in tests/ecosystem/cases.py (Lightning's demo classes unchanged, and modules in
the shapes public Lightning code takes), through the real scripts:
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

from tests.ecosystem.cases import (
    BLOBS,
    BY_NAME,
    CASES,
    CONF,
    DATA,
    MODULES,
    Case,
    foreign_data,
    foreign_model,
)
from tests.helpers.config import compose_config
from tests.helpers.doctor import QUICK_PROBES, run_ids
from tests.helpers.scripts import TESTS_IMPORTABLE, run_script
from tests.helpers.state import assert_bitwise_equal, final_state
from trainwell.doctor.checks import CHECKS


def _train(case: Case, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_script(
        "train.py", *case.train_overrides(), *extra, f"hydra.run.dir={run_dir}",
        env=TESTS_IMPORTABLE,
    )  # fmt: skip


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def check_trained(case: Case, proc: subprocess.CompletedProcess, run_dir: Path) -> dict:
    """train.py finished the planned run and wrote what the contract lists."""
    _ok(proc)
    results = _results(run_dir)
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
    results = _results(train_dir)
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
    _ok(proc)
    evaluated = _results(eval_dir)["metrics"]
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
    killed = _train(case, run_dir, *killer)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (run_dir / "results.json").exists()
    resumed = _ok(_train(case, run_dir, "resume=auto"))
    line = next(x for x in resumed.stdout.splitlines() if x.startswith("resume=auto: "))
    assert line.startswith("resume=auto: resuming from "), line  # not a fresh start
    return final_state(run_dir), _results(run_dir)["metrics"], line


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
    results = _results(train_dir)
    batches = trainer.predict(
        module, datamodule=datamodule, ckpt_path=results["best_ckpt"], weights_only=True
    )
    probs = torch.cat([b["probs"] for b in batches])
    labels = torch.cat([b["label"] for b in batches])
    assert probs.shape == (32, 3) and torch.allclose(probs.sum(1), torch.ones(32))
    accuracy = (probs.argmax(1) == labels).float().mean().item()
    assert accuracy == pytest.approx(results["metrics"]["test/acc"], abs=1e-6)


EXTRA_CHECKS: dict[str, Callable[[Case, Path], None]] = {"predict_step": check_predictions}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_foreign_module_trains_evaluates_passes_the_doctor_and_resumes_exactly(
    case: Case, tmp_path: Path
) -> None:
    reference, interrupted = tmp_path / "uninterrupted", tmp_path / "killed"

    def uninterrupted() -> dict:
        results = check_trained(case, _train(case, reference), reference)
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


# The default suite's share: one demo class as it ships, the Hydra-template pattern and manual
# optimization, trained through train.py and examined by the doctor.
FAST = ["boring", "hydra_template", "gan"]


@pytest.mark.parametrize("name", FAST)
def test_foreign_module_trains_passes_the_doctor_and_predicts_and_exports(
    name: str, tmp_path: Path
) -> None:
    case = BY_NAME[name]
    check_trained(case, _train(case, tmp_path / "run"), tmp_path / "run")
    check_doctor(case, tmp_path / "doctor")
    check_shipping(case, tmp_path / "run")


# The one line that refuses a module at predict and at export (None: that command succeeds);
# modules not named here predict and export.
GAN = "TinyGAN.forward cannot take the input"  # its forward is the generator: latent vectors
SHIPPING_REFUSALS: dict[str, tuple[str | None, str | None]] = {
    "gan": (GAN, GAN),
    "tokens": ("returns shape \\[16, 6, 12\\]",) * 2,  # (N, T, vocab), not class scores
    "branching": (None, "torch.export cannot export BranchingClassifier"),
}


def check_shipping(case: Case, run_dir: Path) -> None:
    """predict (test split) and export in-process on the run's best checkpoint, through the
    datamodule's own loaders (none of these has raw_form()): the file's accuracy equals test/acc,
    the export passes parity over the batch form and says so in its manifest; or one line refuses
    it and nothing that looks valid is left."""
    from omegaconf import OmegaConf, open_dict

    from trainwell.deploy.artifact import verify_export
    from trainwell.deploy.export import export_checkpoint
    from trainwell.deploy.loading import saved_config
    from trainwell.deploy.predict import predict_checkpoint
    from trainwell.errors import TrainwellError

    results = _results(run_dir)
    ckpt = results["best_ckpt"] or results["last_ckpt"]
    cfg = saved_config(ckpt)
    with open_dict(cfg):
        cfg.merge_with(OmegaConf.create({"ckpt_path": ckpt, "split": "test", "input": None}))
    refusals = SHIPPING_REFUSALS.get(case.name, (None, None))
    for command, refusal in zip((predict_checkpoint, export_checkpoint), refusals, strict=True):
        if refusal is not None:
            with pytest.raises(TrainwellError, match=refusal) as err:
                command(cfg)
            assert "\n" not in str(err.value)
    if refusals[1] is not None:
        assert not (run_dir / "export").exists() and not list(run_dir.glob(".export*"))
    if refusals[0] is not None:
        assert not (run_dir / "predictions").exists()
        return
    lines = predict_checkpoint(cfg).read_text().splitlines()
    rows = [line.split(",") for line in lines[1:]]
    assert [int(r[0]) for r in rows] == list(range(len(rows)))  # the position in the split
    if lines[0].endswith(",target"):
        accuracy = sum(r[1] == r[-1] for r in rows) / len(rows)
        assert accuracy == pytest.approx(results["metrics"]["test/acc"], abs=1e-6)
    if refusals[1] is not None:
        return
    export_checkpoint(cfg)
    manifest = verify_export(run_dir / "export")
    assert manifest["input"]["form"] == "batch" and manifest["input"]["range"] is None
    for path in ("onnxruntime", "torch_export"):
        assert manifest["parity"]["paths"][path]["agreement"] == 1.0
        assert manifest["parity"]["paths"][path]["max_abs_diff"] <= 1e-4
    assert manifest["parity"]["samples"] == len(rows)


# Shipped only (their training is the corpus's own patterns): Lightning's DemoModel, a token
# model and a module whose forward branches on the data (dict batches: test_raw_form.py).
SHIPPING_ONLY = {
    "demo_model": BY_NAME["demo_model"],
    "tokens": Case(
        "tokens",
        (*foreign_model(f"{MODULES}.TinyTokenModel"), *foreign_data(f"{DATA}.TokenData")),
        monitor=("val/loss", "min"),
    ),
    "branching": Case("branching", (*foreign_model(f"{MODULES}.BranchingClassifier"), *BLOBS)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SHIPPING_ONLY))
def test_foreign_module_predicts_and_exports_or_is_refused_in_one_line(
    name: str, tmp_path: Path
) -> None:
    case = SHIPPING_ONLY[name]
    check_trained(case, _train(case, tmp_path / "run"), tmp_path / "run")
    check_shipping(case, tmp_path / "run")
    if name == "demo_model":  # served as exported: the batch form over HTTP equals the file
        check_served(tmp_path / "run", tmp_path / "serve")


def check_served(run_dir: Path, serve_dir: Path) -> None:
    """The export served over HTTP answers the test split as the checkpoint's eval does. (The
    demo's data is unseeded random: inputs and eval come from one load, not from the file.)"""
    import httpx
    import numpy as np
    import torch

    from tests.helpers.serving import running_server
    from trainwell.deploy.loading import load_run
    from trainwell.deploy.raw import raw_data

    trained = load_run(run_dir / "checkpoints" / "last.ckpt")
    inputs = raw_data(trained.datamodule, "test").splits["test"][0]
    with torch.inference_mode():
        probs = torch.softmax(trained.module(torch.from_numpy(inputs)).double(), -1).numpy()
    with running_server(run_dir / "export", serve_dir) as url:
        answer = httpx.post(f"{url}/predict", json={"inputs": inputs.tolist()}, timeout=60)
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["predictions"] == probs.argmax(-1).tolist()
    assert abs(np.array(got["probabilities"]) - probs).max() <= 1e-5


def test_the_corpus_covers_the_promised_patterns() -> None:
    assert len(CASES) >= 12 and len(BY_NAME) == len(CASES)
    assert {c.name for c in CASES if not c.has_test_step} >= {"gan", "train_only"}
