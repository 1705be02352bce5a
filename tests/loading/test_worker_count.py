"""Results do not depend on num_workers: a sample's augmentation is a function of (seed, epoch,
sample) on the host path too, so the same batches (and the same weights, bitwise) come out with
0, 1, 2 or 4 workers, a mid-epoch resume skips consumed batches without loading them and stays
exact, and W ranks equal one process with augmentation on. A dataset drawing from the global
RNG gets a doctor warning instead of a silent difference."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from tests.helpers.config import SMOOTH_SGD_MLP
from tests.helpers.doctor import FAST, run_ids
from tests.helpers.scripts import TESTS_IMPORTABLE, run_script
from tests.helpers.state import assert_bitwise_equal, final_state, metrics
from trainwell import compat
from trainwell.loading.sharding import install_loader_policy

# 60 samples in batches of 8: 8 micro-batches per epoch, windows of 2 (a short last window).
RUN = (
    *SMOOTH_SGD_MLP,
    "data.augment=true",
    "data.num_samples=60",
    "data.num_val=16",
    "data.num_test=16",
    "data.batch_size=8",
    "trainer.accumulate_grad_batches=2",
    "trainer.max_epochs=2",
    "callbacks.step_checkpoint.every_n_train_steps=1",
    "callbacks.early_stopping=null",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
    "print_config=false",
)


def train_batches(workers: int, epochs: int = 2) -> list[list[torch.Tensor]]:
    """Every train batch of `epochs` epochs, as the template's loader yields them."""
    from project.data.synthetic import SyntheticDataModule

    dm = SyntheticDataModule(
        num_samples=40, num_val=8, num_test=8, batch_size=8, num_workers=workers,
        augment=True, seed=3,
    )  # fmt: skip
    install_loader_policy(dm, seed=3)
    dm.setup("fit")
    loader = dm.train_dataloader()
    out = []
    for epoch in range(epochs):
        compat.set_sampler_epoch(loader, epoch)  # what Lightning does before every epoch
        out.extend([x, y] for x, y in loader)
    return out


def assert_same_batches(got: list[list[torch.Tensor]], want: list[list[torch.Tensor]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(g, w, strict=True))


@pytest.mark.example("project.data.synthetic")
def test_augmented_batches_are_the_same_with_any_number_of_workers() -> None:
    want = train_batches(0)
    # augmentation is really on: epoch 1 shows the samples differently from epoch 0
    assert not torch.equal(torch.sort(want[0][0].flatten())[0], torch.sort(want[5][0].flatten())[0])
    for workers in (1, 2, 4):
        assert_same_batches(train_batches(workers), want)


@pytest.mark.example("project.data.synthetic")
def test_a_resumed_epoch_skips_consumed_batches_without_loading_them() -> None:
    from project.data.synthetic import SyntheticDataModule

    dm = SyntheticDataModule(num_samples=40, num_val=8, num_test=8, batch_size=8, augment=True)
    install_loader_policy(dm, seed=0)
    dm.setup("fit")
    loader = dm.train_dataloader()
    compat.set_sampler_epoch(loader, 1)
    whole = [[x, y] for x, y in loader]
    loaded: list[int] = []
    real_getitem = type(dm.train_set).__getitem__

    def counting(self, index: int):  # type: ignore[no-untyped-def]
        loaded.append(index)
        return real_getitem(self, index)

    type(dm.train_set).__getitem__ = counting  # type: ignore[method-assign]
    try:
        loader.load_state_dict({"epoch": 1, "batches": 3, "epoch_batches": len(loader)})
        resumed = [[x, y] for x, y in loader]
    finally:
        type(dm.train_set).__getitem__ = real_getitem  # type: ignore[method-assign]
    assert_same_batches(resumed, whole[3:])
    assert len(loaded) == 40 - 3 * 8  # only the samples of the batches still to come
    assert loader.state_dict()["batches"] == len(whole)


def _train(run_dir: Path, *overrides: str, env: dict | None = None):
    proc = run_script("train.py", *RUN, *overrides, f"hydra.run.dir={run_dir}", env=env)
    return proc


@pytest.mark.example("project.data.synthetic")
@pytest.mark.slow
def test_weights_are_bitwise_equal_for_0_1_2_and_4_workers(tmp_path: Path) -> None:
    states = {}
    for workers in (0, 1, 2, 4):
        proc = _train(tmp_path / f"w{workers}", f"data.num_workers={workers}", "test=false")
        assert proc.returncode == 0, proc.stderr[-3000:]
        states[workers] = final_state(tmp_path / f"w{workers}")
    for workers in (1, 2, 4):
        assert_bitwise_equal(states[workers], states[0])


# Where the killed run resumes from: a step checkpoint mid-epoch 1 (killed 3 batches into the
# epoch, mid-window), or last.ckpt at the end of epoch 0 (killed as epoch 1 starts), which
# Lightning does not count as a restart. Saves are flushed before the kill: the resume point is
# the one named, not whichever background write beat the signal.
KILLS = {
    "mid_epoch": (("+callbacks.killer.batch=10",), "step-0000005.ckpt"),
    "epoch_end": (
        ("+callbacks.killer.batch=1", "+callbacks.killer.phase=epoch_start"),
        "last.ckpt",
    ),
}


@pytest.mark.example("project.data.synthetic")
@pytest.mark.slow
@pytest.mark.parametrize("kill", sorted(KILLS))
def test_kill_and_resume_with_augmentation_and_workers_is_exact(tmp_path: Path, kill: str) -> None:
    """Killed, then resumed with 2 workers: the same weights and results.json as the
    uninterrupted run with none."""
    alone = tmp_path / "alone"
    assert _train(alone).returncode == 0
    run_dir = tmp_path / "killed"
    workers = ("data.num_workers=2",)
    where, checkpoint = KILLS[kill]
    killer = (
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        "+callbacks.killer.flush=true",
        *where,
    )
    killed = _train(run_dir, *workers, *killer, env=TESTS_IMPORTABLE)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = _train(run_dir, *workers, "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {run_dir / 'checkpoints' / checkpoint}" in resumed.stdout
    assert_bitwise_equal(final_state(run_dir), final_state(alone))
    assert metrics(run_dir) == metrics(alone)


@pytest.mark.example("project.data.synthetic")
@pytest.mark.slow
def test_w_ranks_equal_one_process_with_augmentation(tmp_path: Path) -> None:
    one = _train(tmp_path / "one", "trainer=cpu", "data.batch_size=8", "test=false")
    two = _train(
        tmp_path / "two", "trainer=ddp_sim", "data.batch_size=4", "test=false", "logger=csv"
    )
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = final_state(tmp_path / "one")["state_dict"], final_state(tmp_path / "two")["state_dict"]
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6
    plan = json.loads((tmp_path / "two" / "results.json").read_text())["plan"]
    assert plan["items_per_epoch"] == 60


NOISY = "data._target_=tests.helpers.rng_datasets.NoisyDigits"


@pytest.mark.parametrize("source", ["torch", "python", "numpy"])
def test_doctor_warns_on_a_dataset_drawing_from_the_global_rng(tmp_path: Path, source: str) -> None:
    check = run_ids(
        tmp_path, [*FAST, NOISY, f"+data.noise_source={source}"], ["data.worker_seeding"]
    )
    found = check["data.worker_seeding"]
    assert found.status == "warn", found.message
    assert "global RNG" in found.message and "num_workers" in found.message
    assert "_Noisy" in found.message


def test_doctor_passes_a_dataset_seeded_per_sample(tmp_path: Path) -> None:
    overrides = [*FAST, NOISY, "+data.noise_source=per_sample", "data.num_workers=2"]
    found = run_ids(tmp_path, overrides, ["data.worker_seeding"])["data.worker_seeding"]
    assert found.status == "pass", found.message
