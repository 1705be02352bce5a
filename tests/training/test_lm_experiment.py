"""experiment=lm_accum end to end through scripts/train.py and eval.py, synthetic and text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from project.data.sequences import SequenceDataModule
from project.models.transformer import CausalTransformer
from project.tasks.language_model import LanguageModelTask
from tests.helpers.config import compose_config
from tests.helpers.scripts import call_script, run_ok

pytestmark = pytest.mark.example(
    "project.data.sequences", "project.models.transformer", "project.tasks.language_model"
)


def test_lm_configs_compose_and_instantiate(tmp_path: Path) -> None:
    cfg = compose_config(["experiment=lm_accum"], tmp_path)
    assert cfg.trainer.accumulate_grad_batches == 4
    assert cfg.callbacks.model_checkpoint.monitor == "val/loss"
    assert cfg.callbacks.early_stopping.mode == "min"
    from hydra.utils import instantiate

    data, task = instantiate(cfg.data), instantiate(cfg.model)
    assert isinstance(data, SequenceDataModule) and isinstance(task, LanguageModelTask)
    assert isinstance(task.net, CausalTransformer)
    assert task.net.head.out_features == data.vocab_size == 32
    assert task.net.max_len == data.max_len


@pytest.mark.slow
def test_lm_experiment_learns_the_synthetic_language(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_ok("train.py", run_dir, "experiment=lm_accum", "print_config=false")
    results = json.loads((run_dir / "results.json").read_text())
    metrics = results["metrics"]
    # Seeded: a fixed number on this machine. A model that learned nothing scores ~32 (the
    # vocabulary); the language's own entropy allows ~1.7.
    assert metrics["test/ppl"] < 3.0, metrics
    assert abs(metrics["test/ppl"] - torch.tensor(metrics["test/loss"]).exp().item()) < 1e-4
    assert results["plan"]["accumulate"] == 4 and results["plan"]["effective_batch"] == 64
    assert Path(results["best_ckpt"]) == run_dir / "checkpoints" / "best.ckpt"
    evaluated = tmp_path / "eval"
    run_ok("eval.py", evaluated, f"ckpt_path={results['best_ckpt']}", "experiment=lm_accum")
    again = json.loads((evaluated / "results.json").read_text())["metrics"]
    assert again["test/loss"] == metrics["test/loss"]


def test_lm_experiment_trains_on_a_text_file(tmp_path: Path) -> None:
    text = tmp_path / "poem.txt"
    lines = [f"the {w} sat on the {v} mat" for w in ("cat", "dog", "bird") for v in "abcdefgh"]
    text.write_text("\n".join(lines * 4) + "\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    proc = call_script(
        "train.py",
        f"hydra.run.dir={run_dir}",
        "experiment=lm_accum",
        f"data.path={text}",
        "data.vocab_size=40",
        "data.batch_size=8",
        "trainer.max_epochs=1",
        "print_config=false",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["plan"]["dataset_size"] == 76  # 96 lines, 10% val, 10% test
    assert results["metrics"]["test/loss"] > 0
