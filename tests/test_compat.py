"""One test per workaround in the trainwell.compat package, each asserting the *upstream*
behaviour the workaround corrects. When upstream fixes it, the test fails: delete the workaround and the test."""

from __future__ import annotations

import os
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import BatchSampler, DataLoader, TensorDataset
from torchmetrics import MaxMetric, MeanMetric, Metric

from tests.helpers.torchrun import run_torchrun
from tests.helpers.trainers import quiet_trainer
from trainwell import compat
from trainwell.callbacks import LastCheckpoint
from trainwell.compat import noise
from trainwell.errors import TrainwellError
from trainwell.loading.resumable import ResumableDataLoader
from trainwell.loading.samplers import EpochShuffle, ShardedBatchSampler


class Linear(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(3, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def points(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(n, 3, generator=g), torch.randint(0, 2, (n,), generator=g))


def plain_trainer(**kwargs: Any) -> L.Trainer:
    defaults = dict(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    return L.Trainer(**{**defaults, **kwargs})


class GradAtStep(L.Callback):
    def __init__(self) -> None:
        self.grads: list[torch.Tensor] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.grads.append(pl_module.layer.weight.grad.clone())


def test_lightning_divides_a_short_tail_window_by_k() -> None:
    """Lightning-AI/pytorch-lightning#19987: 5 micro-batches with K=4 end in a 1-batch window
    whose gradient Lightning still divides by 4."""
    data = points(10)
    seen = GradAtStep()
    trainer = plain_trainer(
        max_epochs=1, accumulate_grad_batches=4, callbacks=[seen], enable_checkpointing=False
    )
    trainer.fit(Linear(), DataLoader(data, batch_size=2))
    assert compat.lightning_loss_divisor(trainer) == 4
    module = Linear()
    x, y = data.tensors
    F.cross_entropy(module.layer(x[8:]), y[8:]).backward()  # the tail micro-batch alone
    tail_mean = module.layer.weight.grad
    assert torch.allclose(seen.grads[-1] * 4, tail_mean, atol=1e-7)


class ScriptedVal(Linear):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/acc", [0.5, 0.9, 0.7, 0.6][self.current_epoch])


def test_save_last_writes_last_only_with_a_top_k_checkpoint(tmp_path: Path) -> None:
    """Lightning 2.6: ModelCheckpoint(save_last=True) writes last.ckpt only when a top-k checkpoint
    is written at the same step (downstream report: openclimatefix/pvnet#542). With save_top_k=1
    and a metric that falls after its best epoch, last.ckpt stays at the best epoch."""
    loader = DataLoader(points(4), batch_size=2)
    best = ModelCheckpoint(
        dirpath=tmp_path, filename="best", monitor="val/acc", mode="max", save_last=True
    )
    last = LastCheckpoint(dirpath=str(tmp_path / "ours"))
    trainer = plain_trainer(max_epochs=4, callbacks=[best, last], num_sanity_val_steps=0)
    trainer.fit(ScriptedVal(), loader, loader)

    def step(path: Path) -> int:
        return torch.load(path, weights_only=True)["global_step"]

    assert step(tmp_path / "best.ckpt") == 4  # epoch 1, 2 steps per epoch
    assert step(tmp_path / "last.ckpt") == 4  # upstream: a copy of the best, not the newest
    assert step(tmp_path / "ours" / "last.ckpt") == 8  # the workaround: the newest


class SeenBatches(Linear):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(batch[0].tolist())
        return self.layer(batch[0].float().unsqueeze(1).expand(-1, 3)).sum()


def shuffled_loader() -> ResumableDataLoader:
    data = TensorDataset(torch.arange(8))
    batches = ShardedBatchSampler(BatchSampler(EpochShuffle(8, seed=3), 2, False), 1, 0, pad=True)
    return ResumableDataLoader(data, batch_sampler=batches, generator=torch.Generator(), seed=3)


class SaveAtStep(L.Callback):
    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step and not self.path.exists():
            trainer.save_checkpoint(self.path)


class RestorePosition(L.Callback):
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        compat.restore_train_loader_position(trainer)


@pytest.mark.parametrize("workaround", [False, True])
def test_a_resumed_epoch_iterator_is_built_before_its_epoch_is_set(
    tmp_path: Path, workaround: bool
) -> None:
    """Lightning-AI/pytorch-lightning#21938: on a restart the train iterator is built before the
    sampler's epoch is set (the restored epoch)."""
    mid = tmp_path / "mid.ckpt"  # epoch 1, after its second batch (4 batches per epoch)
    full = SeenBatches()
    trainer = plain_trainer(max_steps=8, enable_checkpointing=False, callbacks=[SaveAtStep(6, mid)])
    trainer.fit(full, shuffled_loader())
    resumed = SeenBatches()
    callbacks = [RestorePosition()] if workaround else []
    trainer = plain_trainer(max_steps=8, enable_checkpointing=False, callbacks=callbacks)
    trainer.fit(resumed, shuffled_loader(), ckpt_path=mid)
    if workaround:
        assert resumed.seen == full.seen[6:]
    else:
        # upstream: the resumed epoch's iterator is built while the sampler still says epoch 0,
        # so the position saved for epoch 1 never applies and the epoch starts over.
        assert resumed.seen == full.seen[4:6] != full.seen[6:]


class EpochTagged(torch.utils.data.Dataset):
    """Sample i of epoch e is 100 * e + i: what a per-sample augmentation keyed by the epoch
    (loading/per_sample.py) would draw differently each epoch."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[torch.Tensor]:
        return (torch.tensor(100 * self.epoch + index),)


class SaveAtEpochEnd(L.Callback):
    """What the template's last.ckpt holds: the state at the end of a training epoch."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == 0:
            trainer.save_checkpoint(self.path)


@pytest.mark.parametrize("workaround", [False, True])
def test_an_epoch_end_resume_builds_the_next_epochs_iterator_before_its_epoch_is_set(
    tmp_path: Path, workaround: bool
) -> None:
    """Lightning-AI/pytorch-lightning#21938, from a checkpoint written at an epoch's end (which
    Lightning does not count as a restart): the next epoch's iterator is built, and the dataset
    told its epoch, while the sampler still says epoch 0."""
    end = tmp_path / "end.ckpt"
    data = EpochTagged()
    batches = ShardedBatchSampler(BatchSampler(EpochShuffle(8, seed=3), 2, False), 1, 0, pad=True)
    full = SeenBatches()
    loader = ResumableDataLoader(data, batch_sampler=batches, seed=3)
    trainer = plain_trainer(
        max_epochs=2, enable_checkpointing=False, callbacks=[SaveAtEpochEnd(end)]
    )
    trainer.fit(full, loader)
    resumed = SeenBatches()
    data = EpochTagged()
    batches = ShardedBatchSampler(BatchSampler(EpochShuffle(8, seed=3), 2, False), 1, 0, pad=True)
    loader = ResumableDataLoader(data, batch_sampler=batches, seed=3)
    callbacks = [RestorePosition()] if workaround else []
    trainer = plain_trainer(max_epochs=2, enable_checkpointing=False, callbacks=callbacks)
    trainer.fit(resumed, loader, ckpt_path=end)
    if workaround:
        assert resumed.seen == full.seen[4:]
    else:
        # upstream: epoch 1's samples, augmented as in epoch 0
        assert resumed.seen == [[i - 100 for i in batch] for batch in full.seen[4:]]


def test_aggregation_metric_states_are_not_in_the_state_dict() -> None:
    """torchmetrics 1.x registers aggregation states (MaxMetric...) as non-persistent, keeps the
    update count private, and caches compute(): the template saves and restores them itself."""
    best = MaxMetric()
    best.update(torch.tensor(0.7))
    assert best.state_dict() == {}
    saved = compat.metric_states(best)
    fresh = MaxMetric()
    compat.restore_metric_states(fresh, saved)
    assert fresh.update_count == 1 and fresh.compute().item() == pytest.approx(0.7)


def test_mul_tensors_scales_every_tensor_in_place() -> None:
    tensors = [torch.ones(3), torch.full((2, 2), 2.0)]
    compat.mul_tensors_(tensors, 0.5)
    assert torch.equal(tensors[0], torch.full((3,), 0.5)) and torch.equal(
        tensors[1], torch.ones(2, 2)
    )
    compat.mul_tensors_(tensors, torch.tensor(4.0))
    assert torch.equal(tensors[1], torch.full((2, 2), 4.0))


def test_hydra_ddp_child_command_reruns_the_whole_sweep(tmp_path: Path, monkeypatch) -> None:
    """Lightning 2.6 `_hydra_subprocess_cmd`: a DDP child of a multirun job gets the parent's argv
    (`-m` and the sweep) and hydra.run.dir instead of the job's own dir."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from lightning.fabric.strategies.launchers.subprocess_script import _hydra_subprocess_cmd
    from omegaconf import open_dict

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("train", overrides=["seed=1"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.mode = RunMode.MULTIRUN
        cfg.hydra.run.dir = str(tmp_path / "run")
        cfg.hydra.runtime.output_dir = str(tmp_path / "sweep" / "0")
        cfg.hydra.job.num = 0
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # restored after the test
    HydraConfig.instance().set_config(cfg)
    monkeypatch.setattr("sys.argv", ["scripts/train.py", "-m", "seed=1,2"])
    command, _ = _hydra_subprocess_cmd(local_rank=1)
    assert "seed=1,2" in command  # upstream: the whole sweep again
    assert f'hydra.run.dir="{tmp_path / "run"}"' in command  # not the job's dir
    compat.pin_multirun_job_for_ddp_children()
    command, _ = _hydra_subprocess_cmd(local_rank=1)
    assert "seed=1,2" not in command and f'hydra.run.dir="{tmp_path / "sweep" / "0"}"' in command


def test_model_parallel_rekeying_fails_on_an_optimizer_without_state() -> None:
    """Lightning 2.6.6 ModelParallelStrategy re-keys a full checkpoint's optimizer state by its
    first entry: plain SGD keeps none, and loading (testing after an FSDP fit) raises."""
    from lightning.fabric.strategies.model_parallel import _rekey_optimizer_state_if_needed

    module = torch.nn.Linear(2, 2)
    state = torch.optim.SGD(module.parameters(), lr=0.1).state_dict()
    with pytest.raises(IndexError):
        _rekey_optimizer_state_if_needed(state, module)


class EpochEnds(Linear):
    """Counts the training-epoch ends and validations Lightning runs."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch_ends: list[int] = []
        self.validated: list[int] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            self.validated.append(self.current_epoch)

    def on_train_epoch_end(self) -> None:
        self.epoch_ends.append(self.current_epoch)


class SaveAtLastBatch(L.Callback):
    """Writes a checkpoint where a step checkpoint would: the end of epoch 0's last batch."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.current_epoch == 0 and compat.at_epoch_last_batch(trainer):
            trainer.save_checkpoint(self.path)


def test_a_resume_from_the_last_batch_skips_that_epochs_validation(tmp_path: Path) -> None:
    loader = DataLoader(points(4), batch_size=2)
    ckpt = tmp_path / "last-batch.ckpt"
    plain_trainer(max_epochs=1, enable_checkpointing=False, callbacks=[SaveAtLastBatch(ckpt)]).fit(
        EpochEnds(), loader, loader
    )
    resumed = EpochEnds()
    trainer = plain_trainer(max_epochs=2, enable_checkpointing=False, num_sanity_val_steps=0)
    trainer.fit(resumed, loader, loader, ckpt_path=ckpt)
    assert resumed.validated == [1]  # upstream: epoch 0 is never validated after the resume
    assert resumed.epoch_ends == [1]


def test_a_resume_from_the_end_of_validation_skips_that_epochs_end(tmp_path: Path) -> None:
    loader = DataLoader(points(4), batch_size=2)
    saver = ModelCheckpoint(
        dirpath=tmp_path, filename="epoch{epoch}", save_top_k=-1, auto_insert_metric_name=False
    )
    plain_trainer(max_epochs=1, callbacks=[saver], num_sanity_val_steps=0).fit(
        EpochEnds(), loader, loader
    )  # written at the end of epoch 0's validation, before its on_train_epoch_end
    resumed = EpochEnds()
    plain_trainer(max_epochs=2, enable_checkpointing=False, num_sanity_val_steps=0).fit(
        resumed, loader, loader, ckpt_path=tmp_path / "epoch0.ckpt"
    )
    assert resumed.validated == [1]
    assert resumed.epoch_ends == [1]  # upstream: epoch 0's end (its metric reset) never runs


class _Logs(L.LightningModule):
    """Logs a plain per-batch mean with an explicit batch size, a torchmetrics object, and a
    plain tensor from an epoch-end hook."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.metric = MeanMetric()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        loss = self.layer(x).pow(2).mean()
        self.log("plain", torch.tensor(batch_idx + 1.0), on_step=False, on_epoch=True, batch_size=3)
        self.metric.update(loss.detach())
        self.log("metric", self.metric, on_epoch=True)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("epoch_end", torch.tensor(0.5), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Read(L.Callback):
    def __init__(self) -> None:
        self.after_batches: list[dict[str, compat.LoggedValue]] = []
        self.at_end: dict[str, compat.LoggedValue] = {}

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.after_batches.append({v.name: v for v in compat.logged_values(trainer)})

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.at_end = {v.name: v for v in compat.logged_values(trainer)}


def test_logged_values_reads_lightnings_result_collection() -> None:
    read = _Read()
    loader = DataLoader(TensorDataset(torch.randn(12, 2)), batch_size=4)
    quiet_trainer(max_epochs=1, callbacks=[read]).fit(_Logs(), loader)
    second = read.after_batches[1]["plain"]
    assert (second.hook, second.on_step, second.on_epoch, second.reduce) == (
        "training_step",
        False,
        True,
        "mean",
    )
    # a mean is kept as sum(value x batch_size) and sum(batch_size): values 1 and 2, weight 3
    assert (second.total, second.batch_sizes, second.is_metric) == (9.0, 6.0, False)
    assert read.after_batches[0]["metric"].is_metric
    assert read.after_batches[0]["metric"].batch_sizes is None
    epoch_end = read.at_end["epoch_end"]
    assert epoch_end.hook == "on_train_epoch_end" and not epoch_end.is_metric
    # One process: Lightning records sync_dist only when the run is distributed.
    assert epoch_end.sync_dist is False


def test_logged_values_is_empty_outside_a_running_loop() -> None:
    assert compat.logged_values(quiet_trainer()) == []


class _LogsMeans(Linear):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss, on_step=True, on_epoch=True)
        self.log("loss_max", loss, on_step=False, on_epoch=True, reduce_fx="max")
        self.log("loss_top", loss, on_step=False, on_epoch=True, reduce_fx=max)  # the builtin
        return loss


class _SaveAndRebuild(L.Callback):
    """Mid-epoch: writes Lightning's checkpoint, then replaces the training loop's logged
    entries with ones rebuilt from compat.epoch_sums (as a resume does)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sums: list[dict[str, Any]] = []

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == 2:
            trainer.save_checkpoint(self.path)
            self.sums = compat.epoch_sums(trainer)
            compat.restore_epoch_sums(trainer, self.sums)


def _tensors(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in _tensors(v)]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in _tensors(v)]
    return []


def test_lightning_checkpoints_lack_the_running_sums_of_logged_tensors(tmp_path: Path) -> None:
    """Lightning 2.6.x: `_Loop.state_dict` saves progress only, not the training loop's
    `_ResultCollection`; a mid-epoch resume would average the resumed batches alone."""
    loader = DataLoader(points(10), batch_size=2)
    full = plain_trainer(max_epochs=1, enable_checkpointing=False)
    full.fit(_LogsMeans(), loader)
    ckpt = tmp_path / "mid.ckpt"
    rebuild = _SaveAndRebuild(ckpt)
    rebuilt = plain_trainer(max_epochs=1, enable_checkpointing=False, callbacks=[rebuild])
    rebuilt.fit(_LogsMeans(), loader)

    sums = {s["key"]: s for s in rebuild.sums}
    mean = sums["training_step.loss"]["states"]
    assert int(mean["cumulated_batch_size"]) == 4  # two batches of 2
    running = [mean["value"], sums["training_step.loss_max"]["states"]["value"]]
    saved = _tensors(torch.load(ckpt, map_location="cpu", weights_only=True))
    for value in running:  # upstream: nowhere in Lightning's own checkpoint
        assert not any(t.shape == value.shape and torch.equal(t, value) for t in saved)
    # The rebuilt entries carry Lightning's exact metadata (its next self.log of the key
    # compares and raises on a difference) and continue the running values bitwise.
    for key in ("loss_epoch", "loss_max", "loss_top"):
        assert torch.equal(rebuilt.callback_metrics[key], full.callback_metrics[key]), key


def test_a_mean_synced_over_ranks_floors_an_integer_tensor(monkeypatch) -> None:
    """Lightning-AI/pytorch-lightning#21859: `_sync_ddp` mean-syncs the int64 batch-size total
    of a logged mean by copying the division back into the integer tensor (gloo). Run for real
    in a 1-process gloo group whose world size reads 3: 40 samples on 3 ranks become 13."""
    import torch.distributed as dist
    from lightning.fabric.utilities.distributed import _sync_ddp

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    try:
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: 3)
        assert _sync_ddp(torch.tensor(40), reduce_op="mean").item() == 13  # upstream: floored
        assert _sync_ddp(torch.tensor(40.0), reduce_op="mean").item() == pytest.approx(40 / 3)
    finally:
        dist.destroy_process_group()


def test_lightning_broadcasts_its_sigterm_flag_before_every_ddp_batch() -> None:
    """Lightning-AI/pytorch-lightning#21487: under DDP the training loop broadcasts and reads a
    SIGTERM flag before each batch (a collective and a host sync per micro-batch)."""
    import inspect

    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    advance = inspect.getsource(_TrainingEpochLoop.advance)
    assert "self._broadcast_sigterm_tensor()" in advance
    assert ".item()" in inspect.getsource(_TrainingEpochLoop._broadcast_sigterm_tensor)
    trainer = plain_trainer(max_steps=1, enable_checkpointing=False)
    compat.skip_per_batch_sigterm_broadcast(trainer)
    assert trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor() is None


# A worker that leaves a key in the store its process group would use (env:// rendezvous: the
# agent's store when TORCHELASTIC_USE_AGENT_STORE=True, else one rank 0 hosts at MASTER_PORT) and
# exits 3; torchrun restarts it, and the restarted worker reports whether that key is still there.
# Gloo and NCCL publish each rank's address under fixed keys in that store: a key that survives
# the round is a dead rank's address a restarted rank may connect to.
WORKER = """
import datetime, os, sys
import torch.distributed as dist

def say(line):  # one write per line: the two workers share torchrun's output
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()

env = {k: os.environ[k] for k in ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE")}
say(f"worker env {env}")
host = os.environ["RANK"] == "0" and env["TORCHELASTIC_USE_AGENT_STORE"] != "True"
store = dist.TCPStore(
    os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size=2, is_master=host,
    timeout=datetime.timedelta(seconds=60),
)
if env["TORCHELASTIC_RESTART_COUNT"] == "0":
    if os.environ["RANK"] == "0":
        store.set("rank_0_address", "from the first round")
    store.wait(["rank_0_address"])
    store.add("done", 1)
    while store.add("done", 0) < 2:  # the host rank keeps serving until both have read
        pass
    raise SystemExit(3)  # what a pre-empted trainwell run exits with
say(f"previous round's key visible: {store.check(['rank_0_address'])}")
"""


def _torchrun_with_one_restart(tmp_path: Path, **env: str) -> tuple[int | None, str]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    args = ["--standalone", "--nproc-per-node=2", "--max-restarts=1", str(script)]
    return run_torchrun(args, {**os.environ, **env}, timeout=300)


@pytest.mark.slow
def test_torchrun_restart_on_the_shared_store_sees_the_previous_rounds_keys(
    tmp_path: Path,
) -> None:
    code, out = _torchrun_with_one_restart(tmp_path)
    assert code == 0, out[-3000:]
    # The restarted workers see exactly what the refusal checks for ...
    restarted = "{'TORCHELASTIC_RESTART_COUNT': '1', 'TORCHELASTIC_USE_AGENT_STORE': 'True'}"
    assert out.count(f"worker env {restarted}") == 2
    # ... and the first round's keys.
    assert out.count("previous round's key visible: True") == 2, out[-3000:]
    code, out = _torchrun_with_one_restart(tmp_path, **{compat.TORCHRUN_FRESH_STORE: "1"})
    assert code == 0, out[-3000:]
    assert out.count("previous round's key visible: False") == 2, out[-3000:]


def test_a_restarted_torchrun_worker_on_the_shared_store_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    compat.refuse_torchrun_restart_on_shared_store()  # the first round is fine
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    with pytest.raises(TrainwellError, match="TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
        compat.refuse_torchrun_restart_on_shared_store()
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")  # torchrun given the fix
    compat.refuse_torchrun_restart_on_shared_store()


@pytest.mark.slow  # offline wandb runs, each a service process
def test_wandb_logger_reuses_a_run_in_progress_until_it_is_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_SILENT", "true")

    def experiment_id(name: str) -> str:
        logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="compat", id=name)
        return logger.experiment.id

    try:
        assert experiment_id("first") == "first"
        assert experiment_id("second") == "first"  # Lightning's reuse: the behaviour worked around
        compat.finish_wandb_run()
        assert wandb.run is None
        assert experiment_id("third") == "third"
    finally:
        compat.finish_wandb_run()


def test_lightning_dispatches_every_hook_to_every_callback() -> None:
    """compat.skip_empty_callback_hooks: Lightning's own dispatch calls the hooks a callback
    inherits empty from Callback and reads its state_key for each (2.6.6). When it stops, the
    workaround goes."""
    from lightning.pytorch.trainer import call

    compat.skip_empty_callback_hooks()
    lightning_dispatch = call._call_callback_hooks._trainwell_original  # type: ignore[attr-defined]

    class Idle(L.Callback):
        reads = 0

        @property
        def state_key(self) -> str:
            Idle.reads += 1
            return "Idle"

    trainer = quiet_trainer(callbacks=[Idle()])
    Idle.reads = 0
    lightning_dispatch(trainer, "on_before_zero_grad", None)
    assert Idle.reads == 1


class _Plateau(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(3, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.cross_entropy(self.layer(x), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": plateau, "monitor": "val/loss"},
        }


def test_a_resume_from_the_end_of_validation_skips_that_epochs_plateau_step(
    tmp_path: Path,
) -> None:
    loader = DataLoader(points(4), batch_size=2)
    saver = ModelCheckpoint(
        dirpath=tmp_path, filename="epoch{epoch}", save_top_k=-1, auto_insert_metric_name=False
    )
    full = plain_trainer(max_epochs=2, callbacks=[saver], num_sanity_val_steps=0)
    full.fit(_Plateau(), loader, loader)  # epoch0.ckpt: end of epoch 0's validation
    assert full.lr_scheduler_configs[0].scheduler.last_epoch == 2
    ckpt = torch.load(tmp_path / "epoch0.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["lr_schedulers"][0]["last_epoch"] == 0  # written before epoch 0's plateau step
    resumed = plain_trainer(max_epochs=2, enable_checkpointing=False, num_sanity_val_steps=0)
    resumed.fit(_Plateau(), loader, loader, ckpt_path=tmp_path / "epoch0.ckpt")
    # upstream: only epoch 1's step is taken, epoch 0's is lost
    assert resumed.lr_scheduler_configs[0].scheduler.last_epoch == 1


class _StepPlateau(_Plateau):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train/loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        config = super().configure_optimizers()
        config["lr_scheduler"].update(monitor="train/loss", interval="step")
        return config


def _plateau_steps_after_a_mid_epoch_resume(
    tmp_path: Path, module: type[L.LightningModule]
) -> tuple[int, int, int]:
    """The plateau's step count: at the end of a one-epoch run (4 batches), in its checkpoint
    written at step 2's on_train_batch_end, and at the end of a plain run resumed from it."""
    loader = ResumableDataLoader(points(8), batch_size=2)
    saver = ModelCheckpoint(
        dirpath=tmp_path,
        filename="step{step}",
        every_n_train_steps=1,
        save_top_k=-1,
        auto_insert_metric_name=False,
    )
    full = plain_trainer(max_epochs=1, callbacks=[saver], num_sanity_val_steps=0)
    full.fit(module(), loader, loader)
    ckpt = torch.load(tmp_path / "step2.ckpt", map_location="cpu", weights_only=True)
    resumed = plain_trainer(max_epochs=1, enable_checkpointing=False, num_sanity_val_steps=0)
    resumed.fit(module(), loader, loader, ckpt_path=tmp_path / "step2.ckpt")
    return (
        full.lr_scheduler_configs[0].scheduler.last_epoch,
        ckpt["lr_schedulers"][0]["last_epoch"],
        resumed.lr_scheduler_configs[0].scheduler.last_epoch,
    )


def test_a_mid_epoch_resume_skips_the_epochs_plateau_step(tmp_path: Path) -> None:
    # compat.end_fit_restart: the fit loop stays `restarting` for the whole resumed epoch, and
    # upstream steps no plateau scheduler at the end of it.
    assert _plateau_steps_after_a_mid_epoch_resume(tmp_path, _Plateau) == (1, 0, 0)


def test_a_resume_from_a_batch_end_checkpoint_skips_that_batchs_plateau_step(
    tmp_path: Path,
) -> None:
    # compat.plateau_steps_due: the checkpoint holds batch 0's step, not batch 1's, and the
    # resume steps only for batches 2 and 3.
    assert _plateau_steps_after_a_mid_epoch_resume(tmp_path, _StepPlateau) == (4, 1, 3)


def test_lightnings_csv_logger_deletes_the_metrics_of_an_earlier_attempt(tmp_path: Path) -> None:
    """Lightning's CSV ExperimentWriter removes an existing metrics.csv when it starts; the
    template's AppendingCSVLogger keeps it (and reads it through compat.csv_filesystem)."""
    from lightning.pytorch.loggers import CSVLogger

    from trainwell.io.csv_append import AppendingCSVLogger

    for logger_type, survives in ((CSVLogger, False), (AppendingCSVLogger, True)):
        run = tmp_path / logger_type.__name__
        first = logger_type(save_dir=str(run), name="csv", version="")
        first.log_metrics({"loss": 1.0}, step=0)
        first.save()
        second = logger_type(save_dir=str(run), name="csv", version="")
        second.log_metrics({"loss": 0.5}, step=1)
        second.save()
        rows = (run / "csv" / "metrics.csv").read_text().splitlines()
        assert (len(rows) == 3) is survives, rows  # header + one row per attempt kept


def test_lightning_module_and_strategy_hooks_enter_the_profiler_without_one() -> None:
    """compat.lean_module_hooks: with no profiler set, Lightning's module and strategy hook
    dispatch still builds an action name and enters PassThroughProfiler.profile for every hook
    (2.6.6). When it stops, the workaround goes."""
    from lightning.pytorch.trainer import call

    compat.lean_module_hooks()
    module_hook = call._call_lightning_module_hook._trainwell_original  # type: ignore[attr-defined]
    strategy_hook = call._call_strategy_hook._trainwell_original  # type: ignore[attr-defined]
    trainer = quiet_trainer()
    entered: list[str] = []
    trainer.profiler.profile = lambda action: (entered.append(action), nullcontext())[1]
    module = _Plateau()
    trainer.strategy.connect(module)
    module_hook(trainer, "on_train_start", pl_module=module)
    strategy_hook(trainer, "on_train_start")
    assert entered == [
        "[LightningModule]_Plateau.on_train_start",
        "[Strategy]SingleDeviceStrategy.on_train_start",
    ]


class _Batches(L.LightningDataModule):
    """Six samples in batches of two; `transfer_batch_to_device` overridden or not."""

    def train_dataloader(self) -> DataLoader:
        data = TensorDataset(torch.randn(6, 3), torch.zeros(6, dtype=torch.long))
        return DataLoader(data, batch_size=2)


class _Transferring(_Batches):
    def transfer_batch_to_device(self, batch: Any, device: torch.device, idx: int) -> Any:
        return super().transfer_batch_to_device(batch, device, idx)


def test_lightning_asks_which_object_runs_each_batch_hook_at_every_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """compat.cache_data_hook_instances: with a datamodule, Lightning asks `is_overridden` for
    each batch-transfer hook of every batch (2.6.6). When it stops, the workaround goes."""
    from lightning.pytorch.trainer.connectors import data_connector

    compat.cache_data_hook_instances()
    original = data_connector._DataHookSelector.get_instance._trainwell_original  # type: ignore[attr-defined]
    monkeypatch.setattr(data_connector._DataHookSelector, "get_instance", original)
    asked: list[str] = []
    lightning_check = data_connector.is_overridden

    def counting(method_name: str, *args: Any, **kwargs: Any) -> bool:
        asked.append(method_name)
        return lightning_check(method_name, *args, **kwargs)

    monkeypatch.setattr(data_connector, "is_overridden", counting)

    class Linear(_Plateau):
        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    quiet_trainer(max_epochs=1).fit(Linear(), datamodule=_Batches())
    assert asked.count("transfer_batch_to_device") >= 3  # once per batch, or more


@pytest.mark.parametrize("datamodule", [_Batches, _Transferring])
def test_each_batch_hook_runs_on_the_object_lightning_would_pick(
    datamodule: type[L.LightningDataModule],
) -> None:
    """The kept answer is Lightning's, for a datamodule that overrides a hook and one that does
    not, and a new fit (a new selector) asks afresh."""
    from lightning.pytorch.trainer.connectors import data_connector

    compat.cache_data_hook_instances()
    selector_type = data_connector._DataHookSelector
    original = selector_type.get_instance._trainwell_original  # type: ignore[attr-defined]
    module, data = _Plateau(), datamodule()
    for _ in range(2):  # two fits: two selectors
        selector = selector_type(module, data)
        for hook in ("on_before_batch_transfer", "transfer_batch_to_device"):
            for _ in range(2):  # asked again: the kept answer
                assert selector.get_instance(hook) is original(selector, hook)
    picked = selector_type(module, data).get_instance("transfer_batch_to_device")
    assert (picked is data) is (datamodule is _Transferring)
    with pytest.raises(ValueError, match="not a shared hook"):
        selector_type(module, data).get_instance("training_step")


def test_lightning_inspects_the_training_step_signature_at_every_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """compat.cache_training_step_signature: the training loop inspects training_step's signature
    once per batch (2.6.6). When it stops, the workaround goes."""
    from lightning.pytorch.loops import training_epoch_loop
    from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

    inspected: list[str] = []

    def counting(hook_fx: Any, param: str, *args: Any, **kwargs: Any) -> bool:
        inspected.append(param)
        return is_param_in_hook_signature(hook_fx, param, *args, **kwargs)

    class Linear(_Plateau):
        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    monkeypatch.setattr(training_epoch_loop, "is_param_in_hook_signature", counting)
    data = TensorDataset(torch.randn(6, 3), torch.zeros(6, dtype=torch.long))
    quiet_trainer(max_epochs=1).fit(Linear(), DataLoader(data, batch_size=2))
    assert inspected == ["batch_idx"] * 3


def test_a_checkpoint_without_step_triggers_does_nothing_after_a_batch(tmp_path: Path) -> None:
    """compat.batch_check_never_saves: Lightning's ModelCheckpoint.on_train_batch_end, with no
    every_n_train_steps and no train_time_interval, leaves the callback's state and the disk as
    they were, at every batch (2.6.6), so the template's dispatch may skip it. When the hook
    starts doing something for such a checkpoint, this fails and the skip must go."""
    from trainwell.compat.callback_hooks import batch_check_never_saves

    checkpoint = ModelCheckpoint(tmp_path, monitor="val/loss", filename="best")
    assert batch_check_never_saves(checkpoint)
    lightning_hook = checkpoint.on_train_batch_end
    changed: list[int] = []

    def watched(trainer: L.Trainer, module: Any, outputs: Any, batch: Any, i: int) -> None:
        before = {k: v for k, v in vars(checkpoint).items() if k != "on_train_batch_end"}
        files = sorted(tmp_path.iterdir())
        lightning_hook(trainer, module, outputs, batch, i)
        after = {k: v for k, v in vars(checkpoint).items() if k != "on_train_batch_end"}
        same = after.keys() == before.keys() and all(after[k] is before[k] for k in before)
        if not same or sorted(tmp_path.iterdir()) != files:
            changed.append(i)

    checkpoint.on_train_batch_end = watched  # type: ignore[method-assign]
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=4)
    trainer = quiet_trainer(
        max_epochs=2, limit_val_batches=1, callbacks=[checkpoint], enable_checkpointing=True
    )
    trainer.fit(_PlainSGD(), data, data)
    assert changed == [] and (tmp_path / "best.ckpt").exists()


class _PlainSGD(_Plateau):
    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_checkpoint_before_a_mid_epoch_validation_resumes_past_it(tmp_path: Path) -> None:
    """Lightning 2.6.6 resumes a checkpoint written at the end of the batch after which it
    validates (val_check_interval=0.5: batch 2 of 4) without that validation
    (compat.validation_follows, the step checkpoints' rule). When this fails, Lightning runs the
    owed validation itself: the rule can go."""
    from tests.helpers.plateau import PlateauModule, loader

    class Seen(L.Callback):
        steps: list[int]

        def __init__(self) -> None:
            self.steps = []

        def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            self.steps.append(trainer.global_step)

    def fit(ckpt: Path | None) -> list[int]:
        seen = Seen()
        saver = ModelCheckpoint(
            dirpath=tmp_path, filename="s{step}", every_n_train_steps=1, save_top_k=-1,
            auto_insert_metric_name=False,
        )  # fmt: skip
        trainer = quiet_trainer(
            max_epochs=1, limit_val_batches=1.0, val_check_interval=0.5,
            enable_checkpointing=True, callbacks=[seen, saver],
        )  # fmt: skip
        trainer.fit(PlateauModule(1, "step_lr"), loader(), loader(), ckpt_path=ckpt)
        return seen.steps

    assert fit(None) == [2, 4]
    assert fit(tmp_path / "s2.ckpt") == [4]  # the validation after step 2 never runs


def test_lightning_still_advertises_its_logger_and_warns_of_missing_callbacks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """compat.noise: the two messages it silences are still what Lightning emits, through the
    logger and with the text the filters match (delete the entry once they are gone)."""
    import logging

    caplog.set_level(logging.INFO, logger=noise.RANK_ZERO_LOGGER)
    logger = logging.getLogger(noise.RANK_ZERO_LOGGER)
    saved = logger.filters[:]
    logger.filters.clear()  # the template's filter may already be installed in this process
    try:
        L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    finally:
        logger.filters[:] = saved
    assert any(noise.ADVERTS[0] in r.getMessage() for r in caplog.records)

    class Counting(L.Callback):
        def state_dict(self) -> dict[str, Any]:
            return {"n": 1}

    from lightning.pytorch.demos.boring_classes import BoringModel

    model = BoringModel()
    fit = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=1,
        callbacks=[Counting()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    saved = logger.filters[:]
    logger.filters.clear()
    try:
        fit.fit(model)
    finally:
        logger.filters[:] = saved
    assert any(noise.ADVERTS[1] in r.getMessage() for r in caplog.records)
    fit.save_checkpoint(tmp_path / "c.ckpt")
    test = L.Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    with pytest.warns(UserWarning, match=noise.MISSING_CALLBACKS.replace("`", ".")):
        test.test(model, ckpt_path=tmp_path / "c.ckpt", weights_only=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        with compat.callbacks_left_out_on_purpose():
            test.test(model, ckpt_path=tmp_path / "c.ckpt", weights_only=False)


def test_lightning_still_raises_torchs_leafspec_deprecation_and_only_its_own_is_silenced(
    tmp_path: Path,
) -> None:
    """compat.noise.silence_lightning_leafspec_warning: a plain fit still warns from Lightning's
    module (delete the entry once it does not); with the filter the fit says nothing of it, and
    the same warning raised by other code still shows."""
    from lightning.pytorch.demos.boring_classes import BoringModel

    def leafspec_warnings(silenced: bool) -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if silenced:
                compat.silence_lightning_leafspec_warning()
            quiet_trainer(default_root_dir=tmp_path, max_steps=1).fit(BoringModel())
            warnings.warn_explicit(
                "`isinstance(treespec, LeafSpec)` is deprecated, use ...",
                FutureWarning,
                "mine.py",
                1,
                module="mine",
            )
        return [w.filename for w in seen if "LeafSpec" in str(w.message)]

    raised = leafspec_warnings(silenced=False)
    assert any(name.endswith("lightning/pytorch/utilities/_pytree.py") for name in raised)
    assert leafspec_warnings(silenced=True) == ["mine.py"]


def test_litserve_drains_for_uvicorn_graceful_timeout_seconds() -> None:
    """compat.set_litserve_drain_timeout: LitServer keeps the drain timeout in a public-looking
    attribute it hands to each uvicorn server; once this fails, pass upstream's argument instead."""
    import inspect

    import litserve as ls

    class Echo(ls.LitAPI):
        def setup(self, device: str) -> None:
            self.ready = True

        def predict(self, x: object) -> object:
            return x

    server = ls.LitServer(Echo(), accelerator="cpu")
    assert server.uvicorn_graceful_timeout == 30
    source = inspect.getsource(ls.LitServer._start_server)
    assert "timeout_graceful_shutdown=self.uvicorn_graceful_timeout" in source
    compat.set_litserve_drain_timeout(server, 8.0)
    assert server.uvicorn_graceful_timeout == 8.0


# -- compat/averaging.py: Lightning's WeightAveraging / EMAWeightAveraging, torch's AveragedModel --
# What they do that ExactEMA (callbacks/ema.py) does otherwise; once one of these fails, that
# part of ExactEMA (or its PlacedAverage) may follow upstream again.


def _averaging_fit(tmp_path: Path, **kwargs: Any) -> tuple[Any, dict, L.Trainer]:
    from lightning.pytorch.callbacks import EMAWeightAveraging

    from tests.helpers.averaging import NormNet, fit, saved

    module = NormNet()
    trainer = fit(module, EMAWeightAveraging(decay=0.5), **kwargs)
    return module, saved(trainer, tmp_path / "after_fit.ckpt"), trainer


def test_weight_averaging_builds_its_average_before_the_module_is_placed(tmp_path: Path) -> None:
    """compat/averaging.py (1.): the average keeps the dtype (on a GPU: the device)
    the module had before the strategy placed it."""
    module, checkpoint, _ = _averaging_fit(tmp_path, precision="64-true")
    assert module.net[0].weight.dtype == torch.float64
    assert checkpoint["state_dict"]["net.0.weight"].dtype == torch.float32


def test_weight_averaging_leaves_sharded_modules_unsharded() -> None:
    """compat/averaging.py (1.): a module with configure_model is built again outside
    the strategy (Lightning-AI/pytorch-lightning#21414 still open)."""
    from lightning.pytorch.callbacks import EMAWeightAveraging

    from tests.helpers.averaging import ConfiguredNormNet, fit

    with pytest.warns(UserWarning, match="doesn't support sharding model layers"):
        fit(ConfiguredNormNet(), EMAWeightAveraging(decay=0.5), steps=1)


def test_averaged_model_reads_its_count_on_the_device_at_every_update() -> None:
    """compat.PlacedAverage (2.): the count lives where the weights do and is read at every
    update (a host sync per optimizer step on a GPU; a meta tensor cannot be read at all)."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    # WeightAveraging builds it on the module's device: there, a GPU; here, one nothing can read.
    model = torch.nn.Linear(3, 2, device="meta")
    average = AveragedModel(model, "meta", multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)
    with pytest.raises((RuntimeError, NotImplementedError), match="meta"):
        average.update_parameters(model)


def test_ema_weight_averaging_updates_tensor_by_tensor() -> None:
    """compat.PlacedAverage (2.): EMAWeightAveraging hands AveragedModel a per-tensor avg_fn
    (three kernels per tensor), not the fused multi_avg_fn."""
    import inspect

    from lightning.pytorch.callbacks import EMAWeightAveraging

    source = inspect.getsource(EMAWeightAveraging.__init__)
    assert "avg_fn=get_ema_avg_fn(decay=decay)" in source and "multi_avg_fn" not in source


def test_weight_averaging_saves_the_average_as_the_trained_weights_after_fit(
    tmp_path: Path,
) -> None:
    """compat/averaging.py (3.): after on_train_end the module holds the average, and
    a checkpoint saved then has no trained weights left to resume from."""
    _, checkpoint, _ = _averaging_fit(tmp_path)
    for name, value in checkpoint["state_dict"].items():
        assert torch.equal(checkpoint["current_model_state"][name], value), name


def test_weight_averaging_tests_the_trained_weights_of_a_checkpoint_after_fit(
    tmp_path: Path,
) -> None:
    """compat/averaging.py (4.): trainer.test(ckpt_path=...) after fit restores the
    callback too, which loads current_model_state over the averaged state_dict."""
    from lightning.pytorch.callbacks import EMAWeightAveraging

    from tests.helpers.averaging import NormNet, fit, points

    module = NormNet()
    trainer = fit(module, EMAWeightAveraging(decay=0.5))
    trainer.save_checkpoint(tmp_path / "after_fit.ckpt")
    written = torch.load(tmp_path / "after_fit.ckpt", weights_only=True)
    # Its average made distinct from its trained weights (after fit they are equal, see above):
    written["state_dict"] = {k: v + 1.0 for k, v in written["current_model_state"].items()}
    torch.save(written, tmp_path / "distinct.ckpt")
    trainer.test(module, dataloaders=points(), ckpt_path=tmp_path / "distinct.ckpt")
    tested = module.net[0].weight.detach()
    assert torch.equal(tested, written["current_model_state"]["net.0.weight"])
    assert not torch.equal(tested, written["state_dict"]["net.0.weight"])


def test_model_checkpoint_forgets_its_best_in_another_dirpath(tmp_path: Path) -> None:
    """compat.carry_records_to_dirpath: ModelCheckpoint.load_state_dict keeps its best score only
    when the saved dirpath is its own (Lightning-AI/pytorch-lightning#12045): a run dir moved
    whole, or resumed into a new one, forgets its best. Carried over upstream: this fails."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    saved = ModelCheckpoint(dirpath=tmp_path / "old", monitor="val/acc", mode="max")
    saved.best_model_score = torch.tensor(0.9)
    saved.best_model_path = str(tmp_path / "old" / "best.ckpt")
    saved.best_k_models = {saved.best_model_path: saved.best_model_score}
    moved = ModelCheckpoint(dirpath=tmp_path / "new", monitor="val/acc", mode="max")
    with pytest.warns(UserWarning, match="dirpath has changed"):
        moved.load_state_dict(saved.state_dict())
    assert moved.best_model_score is None and moved.best_k_models == {}


def test_weight_averaging_validates_its_fit_start_copy_before_the_first_update() -> None:
    """compat/averaging.py (5.): with the first update past the run
    (Lightning-AI/pytorch-lightning#21724), validation swaps in the average built at setup, which
    no update has touched: the untrained weights are scored. Fixed upstream: this fails."""
    from lightning.pytorch.callbacks import EMAWeightAveraging

    from tests.helpers.averaging import NormNet, fit

    class Seen(NormNet):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            super().validation_step(batch, batch_idx)
            self.seen = self.net[0].weight.detach().clone()

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.trained = self.net[0].weight.detach().clone()

    module = Seen()
    initial = module.net[0].weight.detach().clone()
    fit(module, EMAWeightAveraging(decay=0.5, update_starting_at_step=1000), limit_val_batches=1)
    assert not torch.equal(module.trained, initial)  # 4 steps of SGD at lr 0.5 moved them
    assert torch.equal(module.seen, initial)


def test_torch_refuses_numpy_arrays_and_scalars_in_a_weights_only_load(tmp_path: Path) -> None:
    """compat.NUMPY_REBUILDS: torch allows no numpy global by default. When a weights-only load
    reads numpy values as they are, this fails: the allowlist entry can go."""
    import io

    import numpy as np

    for value in (np.arange(3.0), np.float64(0.5)):
        buffer = io.BytesIO()
        torch.save(value, buffer)
        buffer.seek(0)
        with pytest.raises(Exception, match=r"numpy\._core\.multiarray"):
            torch.load(buffer, weights_only=True)


def test_lightnings_per_batch_module_hooks_are_empty() -> None:
    """compat.lean_module_hooks does not call a per-batch module hook the module inherits from
    Lightning: each one is a docstring and nothing else (2.6.6). When one gains a body, this fails
    and the skip must go."""
    import dis

    from lightning.pytorch.core.hooks import ModelHooks

    from trainwell.compat.module_hooks import _EMPTY_PER_BATCH

    for name in sorted(_EMPTY_PER_BATCH):
        hook = getattr(ModelHooks, name)
        assert getattr(L.LightningModule, name) is hook, name
        ops = [
            (i.opname, i.argval)
            for i in dis.get_instructions(hook)
            if i.opname not in ("RESUME", "NOP")
        ]
        assert ops in ([("LOAD_CONST", None), ("RETURN_VALUE", None)], [("RETURN_CONST", None)])


class _Total(Metric):
    """A sum of what each update reads (detached), recording whether gradients were on."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")
        self.grad_on: list[bool] = []

    def update(self, x: torch.Tensor) -> None:
        self.grad_on.append(torch.is_grad_enabled())
        self.total.add_(x.detach().sum())

    def compute(self) -> torch.Tensor:
        return self.total


def test_torchmetrics_update_bookkeeping_is_what_lean_update_keeps() -> None:
    """compat.LeanUpdate: torchmetrics' update wrapper (1.9) clears the cached compute(), counts
    the update and runs it with gradients off, through nn.Module.__setattr__. The lean wrapper
    must leave a metric exactly as torchmetrics' leaves it: when torchmetrics' wrapper keeps
    anything more, this fails and LeanUpdate must follow (or go)."""
    import copy

    Stock = _Total

    class Lean(compat.LeanUpdate, Stock):
        pass

    x = torch.ones(3, requires_grad=True)
    stock, lean = Stock(), Lean()
    for metric in (stock, lean):
        metric.update(x)
        assert metric.compute().item() == 3.0
        metric.update(x)  # after compute(): the cached value must be dropped
        assert metric.compute().item() == 6.0
        metric.update(x)
    skip = {"update", "compute"}
    assert set(vars(stock)) == set(vars(lean))
    for name, value in vars(stock).items():
        if name in skip:
            continue
        other = vars(lean)[name]
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, other), name
        elif not isinstance(value, dict | torch.nn.Module):
            assert value == other, name
    assert stock.grad_on == lean.grad_on == [False, False, False]
    assert lean._update_count == stock._update_count == 3 and lean._computed is None
    # A copy (torchmetrics re-wraps update in __setstate__) keeps the lean wrapper.
    copied = copy.deepcopy(lean)
    copied.update(x)
    assert copied.update.__code__ is lean.update.__code__ is not stock.update.__code__
    assert copied.compute().item() == 12.0


def test_a_lean_update_that_detaches_keeps_the_callers_grad_mode_except_in_forward() -> None:
    """compat.LeanUpdate with `update_detaches`: no grad-mode switch around update (the point:
    one context manager fewer per training step), and forward() still gets torchmetrics' switch
    to gradients on."""

    class Detaching(compat.LeanUpdate, _Total):
        update_detaches = True

    metric = Detaching()
    metric.update(torch.ones(2))
    with torch.no_grad():
        metric.update(torch.ones(2))
    metric(torch.ones(2))  # forward: a batch value with gradients on, as torchmetrics computes it
    assert metric.grad_on[:2] == [True, False]
    assert metric.grad_on[2:] and all(metric.grad_on[2:])
    assert metric.compute().item() == 6.0 and metric._update_count == 3
