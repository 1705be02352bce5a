"""EMA on several ranks: 2 DDP ranks (gloo) and 2 FSDP2 ranks (fully_shard over gloo, each rank
averaging its own shard) keep the average of one process at the same effective batch, to 1e-6;
under FSDP2 the checkpoint gathers the shards into one ordinary .ckpt, a resume from a mid-epoch
step checkpoint scatters them again and continues bitwise, and the export ships the average."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.config import QUIET_RUN
from tests.helpers.ranks import COMMON, OWNED_COMMON
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_ok, run_script
from tests.helpers.state import final_state
from trainwell.deploy.artifact import verify_export

EMA = "ema.decay=0.9"


def _train(run_dir: Path, *overrides: str, common: tuple[str, ...]) -> dict:
    run_ok("train.py", run_dir, *common, EMA, *overrides, env=TESTS_IMPORTABLE)
    return final_state(run_dir)


def _assert_close(got: dict, want: dict) -> None:
    assert int(got["averaging_state"]["n_averaged"]) == int(want["averaging_state"]["n_averaged"])
    assert int(got["averaging_state"]["n_averaged"]) == want["global_step"] > 0
    for key in ("state_dict", "current_model_state"):
        assert got[key].keys() == want[key].keys()
        diff = max((got[key][k] - want[key][k]).abs().max().item() for k in want[key])
        assert diff <= 1e-6, (key, diff)
    apart = max(
        (want["state_dict"][k] - want["current_model_state"][k]).abs().max().item()
        for k in want["state_dict"]
    )
    assert apart > 1e-3  # the average is not the weights


@pytest.mark.slow
def test_two_ddp_ranks_average_as_one_process(tmp_path: Path) -> None:
    ddp = _train(
        tmp_path / "ddp",
        "trainer=ddp_sim",
        "data.batch_size=8",
        "trainer.accumulate_grad_batches=2",
        common=OWNED_COMMON,
    )
    single = _train(tmp_path / "single", "trainer=cpu", "data.batch_size=32", common=OWNED_COMMON)
    _assert_close(ddp, single)


# 160 synthetic samples, micro-batches of 8 on 2 ranks x accumulate 2: 5 optimizer steps an epoch.
FSDP = (
    "trainer=fsdp_sim",
    "data.batch_size=8",
    "trainer.accumulate_grad_batches=2",
    "data.num_samples=160",
    "trainer.max_epochs=2",
    "callbacks.step_checkpoint.every_n_train_steps=2",
    "callbacks.step_checkpoint.save_top_k=-1",
    *QUIET_RUN,
)


@pytest.mark.example("project.data.synthetic")
@pytest.mark.slow
def test_fsdp2_averages_as_one_process_saves_resumes_and_exports_the_average(
    tmp_path: Path,
) -> None:
    sharded = _train(tmp_path / "fsdp", *FSDP, common=COMMON)
    single = _train(
        tmp_path / "single",
        "trainer=cpu",
        "data.batch_size=32",
        "data.num_samples=160",
        "trainer.max_epochs=2",
        *QUIET_RUN,
        common=COMMON,
    )
    _assert_close(sharded, single)

    # Resume from a mid-epoch step checkpoint of the sharded run: bitwise the same end.
    step = tmp_path / "fsdp" / "checkpoints" / "step-0000002.ckpt"
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(step, resumed / "checkpoints")
    got = _train(resumed, *FSDP, "resume=auto", common=COMMON)
    for key in ("state_dict", "current_model_state"):
        for name, value in sharded[key].items():
            assert torch.equal(got[key][name], value), (key, name)
    assert torch.equal(
        got["averaging_state"]["n_averaged"], sharded["averaging_state"]["n_averaged"]
    )

    # The export of the sharded run's best checkpoint ships its average.
    best = tmp_path / "fsdp" / "checkpoints" / "best.ckpt"
    proc = run_script(
        "export.py",
        f"ckpt_path={best}",
        f"hydra.run.dir={tmp_path / 'export'}",
        env=TESTS_IMPORTABLE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = verify_export(tmp_path / "fsdp" / "export")
    assert manifest["parity"]["paths"]["onnxruntime"]["agreement"] == 1.0
    shipped = load_file(tmp_path / "fsdp" / "export" / "weights.safetensors")
    averaged = torch.load(best, weights_only=True)["state_dict"]
    for key, value in averaged.items():
        assert torch.equal(shipped[key], value), key


@pytest.mark.example("project.data.synthetic")
def test_a_sharded_checkpoint_directory_with_ema_is_refused_before_training(tmp_path: Path) -> None:
    proc = call_script(
        "train.py",
        *COMMON,
        EMA,
        "trainer=fsdp_sim",
        "trainer.strategy.save_distributed_checkpoint=true",
        f"hydra.run.dir={tmp_path}",
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    fix = "trainer.strategy.save_distributed_checkpoint=false"
    assert proc.stderr.rstrip().endswith(fix), proc.stderr[-2000:]
    assert not (tmp_path / "checkpoints").exists()  # refused before training


@pytest.mark.slow  # two FSDP ranks train: about 20 s
@pytest.mark.example("project.data.synthetic")
def test_fsdp_with_ema_trains_once_checkpoints_are_one_file_as_the_refusal_says(
    tmp_path: Path,
) -> None:
    fix = "trainer.strategy.save_distributed_checkpoint=false"
    proc = call_script(
        "train.py", *COMMON, EMA, "trainer=fsdp_sim", fix, f"hydra.run.dir={tmp_path}"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
