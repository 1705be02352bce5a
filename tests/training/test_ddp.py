"""DDP on 2 CPU processes (gloo) equals one process with the doubled batch, accumulation included,
on the engine tests' own modules (tests/owned).

DDP runs go through scripts/train.py in a subprocess: Lightning's DDP launcher re-executes
sys.argv, which inside pytest would re-run pytest.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.ranks import OWNED_COMMON, run_and_load


@pytest.mark.example("project.data.synthetic")
@pytest.mark.engine
@pytest.mark.slow  # default suite: test_ddp_padding.py, 2 real ranks with uneven windows
def test_two_ranks_with_accumulation_equal_one_process_with_4x_batch(tmp_path: Path) -> None:
    ddp = run_and_load(
        tmp_path / "ddp",
        "trainer=ddp_sim",
        "data.batch_size=8",
        "trainer.accumulate_grad_batches=2",
        common=OWNED_COMMON,
    )
    single = run_and_load(
        tmp_path / "single", "trainer=cpu", "data.batch_size=32", common=OWNED_COMMON
    )
    assert set(ddp) == set(single)
    diff = max((ddp[k] - single[k]).abs().max().item() for k in ddp)
    assert diff <= 1e-6, diff


@pytest.mark.example("project.data.synthetic")
def test_ddp_presets_compose(cfg_factory) -> None:
    from hydra.utils import instantiate

    gpu = cfg_factory(["trainer=ddp"])
    assert gpu.trainer.strategy == "ddp" and gpu.trainer.sync_batchnorm is True
    sim = cfg_factory(["trainer=ddp_sim", "model=mlp", "data=synthetic"])
    assert instantiate(sim.trainer.strategy).process_group_backend == "gloo"
    task = instantiate(sim.model)
    assert task.net(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
