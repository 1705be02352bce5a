"""FSDP2 (fully_shard via Lightning's ModelParallelStrategy) on 2 CPU ranks over gloo equals one
process with the doubled batch, accumulation included; its checkpoint is an ordinary .ckpt."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.ranks import run_and_load


@pytest.mark.example("project.data.synthetic")
@pytest.mark.slow
def test_fsdp2_two_ranks_equal_one_process_with_doubled_batch(tmp_path: Path) -> None:
    fsdp = run_and_load(
        tmp_path / "fsdp",
        "trainer=fsdp_sim",
        "data.batch_size=8",
        "trainer.accumulate_grad_batches=2",
    )
    single = run_and_load(tmp_path / "single", "trainer=cpu", "data.batch_size=32")
    # save_distributed_checkpoint=false: one file, not a shard directory
    assert (tmp_path / "fsdp" / "checkpoints" / "last.ckpt").is_file()
    assert set(fsdp) == set(single)  # same keys as an unsharded run
    # The grad-norm guard gathers DTensor shards: the logged total is the full model's norm.
    header = (tmp_path / "fsdp" / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert "grad_norm/total" in header
    diff = max((fsdp[k] - single[k]).abs().max().item() for k in fsdp)
    assert diff <= 1e-6, diff


@pytest.mark.example("project.models.resnet")
@pytest.mark.parametrize("preset", ["fsdp", "fsdp_sim"])
def test_fsdp_presets_compose_and_build_the_fsdp2_strategy(cfg_factory, preset: str) -> None:
    from hydra.utils import instantiate

    from trainwell.training.fsdp import FSDP2Strategy

    cfg = cfg_factory([f"trainer={preset}", "model=resnet18"])
    strategy = instantiate(cfg.trainer.strategy)
    assert isinstance(strategy, FSDP2Strategy)
    assert strategy.reshard_after_forward is True
    assert cfg.trainer.accelerator == ("gpu" if preset == "fsdp" else "cpu")


def test_fsdp_refuses_an_unknown_dtype() -> None:
    from trainwell.errors import TrainwellError
    from trainwell.training.fsdp import FSDP2Strategy

    with pytest.raises(TrainwellError, match="bf16\\|fp16"):
        FSDP2Strategy(param_dtype="int8")


@pytest.mark.example("project.models.resnet")
def test_resnet_names_its_residual_blocks_as_fsdp_units() -> None:
    from project.models.resnet import BasicBlock, ResNet18

    units = ResNet18(width=4).fsdp_units()
    assert len(units) == 8 and all(isinstance(u, BasicBlock) for u in units)
