"""A module without `test_step` (a demo, a GAN) or a datamodule without `test_dataloader` trains
through scripts/train.py: testing is skipped with one info line and results.json says so.
eval.py on such a module is a one-line error naming `test_step`."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel, DemoModel

from tests.helpers.foreign_modules import BORING, DEMO, NO_TEST_STEP, NoTestDataModule
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_script
from trainwell.training.evaluate import cannot_test

QUICK = (
    "trainer.max_epochs=1",
    "trainer.num_sanity_val_steps=0",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
    "print_config=false",
)


def test_the_reason_names_the_missing_hook() -> None:
    assert cannot_test(BoringModel(), BoringDataModule()) is None
    assert cannot_test(DemoModel(), BoringDataModule()) == "DemoModel defines no test_step"
    assert (
        cannot_test(BoringModel(), NoTestDataModule())
        == "NoTestDataModule defines no test_dataloader"
    )
    # A module that brings its own loaders (no datamodule) is testable through them.
    assert cannot_test(BoringModel(), None) is None
    assert isinstance(NoTestDataModule(), L.LightningDataModule)


def _train(run_dir: Path, *overrides: str) -> tuple[dict, list[str]]:
    proc = call_script("train.py", *overrides, *QUICK, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if line.startswith("testing skipped")]
    return json.loads((run_dir / "results.json").read_text()), said


@pytest.mark.slow
def test_a_module_without_test_step_trains_and_results_say_testing_was_skipped(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    results, said = _train(run_dir, *NO_TEST_STEP)
    assert results["test"] == "skipped: NoTestStepModule defines no test_step"
    assert said == ["testing skipped: NoTestStepModule defines no test_step"]
    assert "val/acc" in results["metrics"] and not any(
        k.startswith("test/") for k in results["metrics"]
    )
    assert results["best_ckpt"].endswith("best.ckpt")
    # eval.py on it: one line naming test_step, exit 2, nothing written.
    eval_dir = tmp_path / "eval"
    proc = run_script("eval.py", f"ckpt_path={results['best_ckpt']}", f"hydra.run.dir={eval_dir}",
                      env=TESTS_IMPORTABLE)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "test_step" in errors[0], proc.stderr[-3000:]
    # The refused run dir is removed again, so it is never announced.
    assert not eval_dir.exists() and "run dir:" not in proc.stdout, proc.stdout[-2000:]


def test_lightning_demo_model_without_test_step_trains(tmp_path: Path) -> None:
    results, said = _train(tmp_path / "run", "~model", f"+model._target_={BORING}.DemoModel",
                           *DEMO)  # fmt: skip
    assert results["test"] == "skipped: DemoModel defines no test_step" and len(said) == 1


def test_boring_model_trains_and_tests_its_final_weights(tmp_path: Path) -> None:
    results, said = _train(tmp_path / "run", "~model", f"+model._target_={BORING}.BoringModel",
                           *DEMO)  # fmt: skip
    # Nothing monitored: no best checkpoint, so testing uses the final weights and says so.
    assert results["test"] == "final weights (no best_ckpt)" and not said
    assert results["finished_at"]["global_step"] == 64


def test_a_datamodule_without_test_dataloader_skips_testing(tmp_path: Path) -> None:
    results, said = _train(
        tmp_path / "run",
        "~model",
        f"+model._target_={BORING}.BoringModel",
        *(o for o in DEMO if not o.startswith("+data")),
        "+data._target_=tests.helpers.foreign_modules.NoTestDataModule",
    )
    assert results["test"] == "skipped: NoTestDataModule defines no test_dataloader"
    assert said == ["testing skipped: NoTestDataModule defines no test_dataloader"]
