"""FSDP with trainer.strategy.save_distributed_checkpoint=true: every checkpoint is a directory of
shards beside `meta.pt`. A module that keeps objects among its hyper-parameters (the
lightning-hydra-template shape) still writes a meta.pt that loads with weights_only=True, and
resume=auto continues from a sharded step checkpoint to the uninterrupted run's weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.helpers.config import QUIET_RUN, SMOOTH_SGD_MLP
from tests.helpers.scripts import TESTS_IMPORTABLE, run_script
from tests.helpers.state import assert_same_results_elsewhere
from trainwell.io.checkpoint_read import load_checkpoint_file

SHARDED = ("trainer=fsdp_sim", "trainer.strategy.save_distributed_checkpoint=true", *QUIET_RUN)
EXACT = (
    *SMOOTH_SGD_MLP,
    "data.num_samples=160",
    "data.num_val=32",
    "data.num_test=32",
    "data.batch_size=16",
    "trainer.max_epochs=2",
    "callbacks.step_checkpoint.every_n_train_steps=2",
    "callbacks.step_checkpoint.save_top_k=-1",
)
TEMPLATE_MODULE = (
    "model._target_=tests.helpers.foreign_modules.ShardedTemplateModule",
    "model.net.num_classes=10",
    "~model.num_classes",
    "~model.label_smoothing",
    "data.batch_size=256",
    "trainer.max_epochs=1",
    "test=false",
)


def _train(run_dir: Path, *overrides: str) -> dict:
    proc = run_script(
        "train.py", *SHARDED, *overrides, f"hydra.run.dir={run_dir}", env=TESTS_IMPORTABLE
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "results.json").read_text())


def _weights(sharded: Path, out: Path) -> dict[str, torch.Tensor]:
    dcp_to_torch_save(sharded, out)
    return torch.load(out, weights_only=True)["state_dict"]


@pytest.mark.slow
def test_a_modules_objects_reach_meta_pt_as_plain_config(tmp_path: Path) -> None:
    _train(tmp_path / "run", *TEMPLATE_MODULE)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    meta = torch.load(last / "meta.pt", weights_only=True)  # no pickled nn.Module or partial
    assert meta["hyper_parameters"]["net"]["_target_"] == "project.models.digits_cnn.DigitsCNN"
    assert meta["hyper_parameters"]["optimizer"]["_partial_"] is True
    state = load_checkpoint_file(last)  # what resume=auto and eval read: meta + shard shapes
    assert state["global_step"] == meta["global_step"]
    from project.models.digits_cnn import DigitsCNN

    expected = {f"net.{k}": v.shape for k, v in DigitsCNN(num_classes=10).state_dict().items()}
    assert {k: v.shape for k, v in state["state_dict"].items()} == expected


@pytest.mark.example("project.data.synthetic")
@pytest.mark.slow
def test_resume_from_a_sharded_step_checkpoint_is_exact(tmp_path: Path) -> None:
    want = _train(tmp_path / "full", *EXACT)
    step = tmp_path / "full" / "checkpoints" / "step-0000004.ckpt"  # mid epoch 0
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copytree(step, resumed / "checkpoints" / step.name)
    got = _train(resumed, *EXACT, "resume=auto")
    assert_same_results_elsewhere(got, want)
    a = _weights(tmp_path / "full" / "checkpoints" / "last.ckpt", tmp_path / "a.pt")
    b = _weights(resumed / "checkpoints" / "last.ckpt", tmp_path / "b.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
