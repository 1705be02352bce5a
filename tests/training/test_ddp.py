"""DDP on 2 CPU processes (gloo) equals one process with the doubled batch, accumulation included.

DDP runs go through scripts/train.py in a subprocess: Lightning's DDP launcher re-executes
sys.argv, which inside pytest would re-run pytest.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.conftest import SMOOTH_SGD_MLP, run_ok

# 80 samples = windows of 32, 32 and a 16-sample tail.
COMMON = (
    *SMOOTH_SGD_MLP,
    "data.num_samples=80",
    "data.num_val=16",
    "data.num_test=16",
    "trainer.max_epochs=1",
    "logger=csv",
    "test=false",
    "print_config=false",
)


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    return ckpt["state_dict"]


def run_and_load(run_dir: Path, *overrides: str) -> dict[str, torch.Tensor]:
    """Train COMMON + overrides into run_dir; the final weights from its last.ckpt."""
    run_ok("train.py", run_dir, *COMMON, *overrides)
    return _final_weights(run_dir)


def test_two_ranks_with_accumulation_equal_one_process_with_4x_batch(tmp_path: Path) -> None:
    ddp = run_and_load(
        tmp_path / "ddp",
        "trainer=ddp_sim",
        "data.batch_size=8",
        "trainer.accumulate_grad_batches=2",
    )
    single = run_and_load(tmp_path / "single", "trainer=cpu", "data.batch_size=32")
    assert set(ddp) == set(single)
    diff = max((ddp[k] - single[k]).abs().max().item() for k in ddp)
    assert diff <= 1e-6, diff


def test_ddp_presets_compose(cfg_factory) -> None:
    from hydra.utils import instantiate

    gpu = cfg_factory(["trainer=ddp"])
    assert gpu.trainer.strategy == "ddp" and gpu.trainer.sync_batchnorm is True
    sim = cfg_factory(["trainer=ddp_sim", "model=mlp", "data=synthetic"])
    assert instantiate(sim.trainer.strategy).process_group_backend == "gloo"
    task = instantiate(sim.model)
    assert task.net(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
