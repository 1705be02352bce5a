"""compat.skip_empty_callback_hooks: a callback's implemented hooks run exactly as Lightning runs
them; the hooks it inherits empty from Callback cost nothing."""

from __future__ import annotations

from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.profilers import SimpleProfiler
from lightning.pytorch.trainer import call
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.trainers import quiet_trainer
from trainwell import compat

pytestmark = pytest.mark.engine  # needs nothing of the examples


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/x", self.layer(batch[0]).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader() -> DataLoader:
    return DataLoader(
        TensorDataset(torch.randn(12, 4, generator=torch.Generator().manual_seed(0))), 4
    )


class Recorder(L.Callback):
    """Implements a few hooks and counts how often its state_key is read."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.key_reads = 0

    @property
    def state_key(self) -> str:
        self.key_reads += 1
        return "Recorder"

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, i: int) -> None:
        self.calls.append(f"batch_start {i} {pl_module._current_fx_name}")

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: Any, opt: Any) -> None:
        self.calls.append(f"before_step {trainer.global_step}")

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.calls.append(f"val_end {trainer.sanity_checking}")


def _fit(callback: Recorder, **kwargs: Any) -> Recorder:
    # Subclassed hooks of Lightning's own callbacks (EarlyStopping is a monitoring callback: its
    # hooks go through the monitoring_callbacks filter) must run too.
    stop = L.pytorch.callbacks.EarlyStopping("val/x", patience=100, check_on_train_epoch_end=False)
    trainer = quiet_trainer(
        max_epochs=2, limit_val_batches=1, num_sanity_val_steps=1, callbacks=[callback, stop],
        **kwargs,
    )  # fmt: skip
    callback.key_reads = 0  # the Trainer reads every state_key once when it checks the list
    torch.manual_seed(0)
    trainer.fit(Tiny(), _loader(), _loader())
    assert stop.wait_count >= 0 and "val/x" in trainer.callback_metrics
    return callback


def _instance_hooked() -> Recorder:
    recorder = Recorder()

    def on_train_batch_end(trainer: L.Trainer, pl_module: Any, *args: Any) -> None:
        recorder.calls.append(f"instance batch_end {args[-1]}")

    recorder.on_train_batch_end = on_train_batch_end  # type: ignore[method-assign]
    return recorder


def test_implemented_hooks_run_as_lightning_runs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    compat.skip_empty_callback_hooks()
    skipping = _fit(_instance_hooked()).calls
    original = call._call_callback_hooks._trainwell_original  # type: ignore[attr-defined]
    monkeypatch.setattr(call, "_call_callback_hooks", original)
    assert skipping == _fit(_instance_hooked()).calls  # same hooks, same order, same context
    assert "instance batch_end 2" in skipping and "batch_start 0 on_train_batch_start" in skipping


def test_inherited_empty_hooks_cost_no_call() -> None:
    compat.skip_empty_callback_hooks()
    assert _fit(Recorder()).key_reads == 0


def test_a_profiler_still_records_every_callback_hook(tmp_path) -> None:
    compat.skip_empty_callback_hooks()
    profiler = SimpleProfiler(dirpath=tmp_path, filename="profile")
    _fit(Recorder(), profiler=profiler)
    assert "[Callback]Recorder.on_before_zero_grad" in profiler.recorded_durations


def test_each_run_dispatches_to_its_own_callbacks_and_their_instance_hooks() -> None:
    """The callbacks implementing a hook are planned once per callback list: another run's list,
    and a hook set on or removed from an instance before a run, are always seen."""
    compat.skip_empty_callback_hooks()
    first = _fit(Recorder())
    before = list(first.calls)
    second = _fit(Recorder())
    assert first.calls == before and second.calls == before  # each run calls its own callback
    reused = _fit(_instance_hooked())
    assert "instance batch_end 2" in reused.calls
    del reused.on_train_batch_end  # type: ignore[attr-defined]
    reused.calls = []
    _fit(reused)
    assert reused.calls and not any(c.startswith("instance") for c in reused.calls)


def _checkpoint_fit(tmp_path: Any, counts: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> Any:
    lightning_hook = ModelCheckpoint.on_train_batch_end

    def counting(self: ModelCheckpoint, *args: Any, **kwargs: Any) -> None:
        counts[str(self.dirpath)] = counts.get(str(self.dirpath), 0) + 1
        lightning_hook(self, *args, **kwargs)

    monkeypatch.setattr(ModelCheckpoint, "on_train_batch_end", counting)
    best = ModelCheckpoint(tmp_path / "best", monitor="val/x", filename="best")
    steps = ModelCheckpoint(tmp_path / "steps", every_n_train_steps=2, save_top_k=-1)
    trainer = quiet_trainer(
        max_epochs=2, limit_val_batches=1, callbacks=[best, steps], enable_checkpointing=True
    )
    torch.manual_seed(0)
    trainer.fit(Tiny(), _loader(), _loader())
    return sorted(p.name for p in (tmp_path / "steps").iterdir()), (tmp_path / "best").iterdir()


def test_a_checkpoint_that_saves_per_step_still_sees_every_batch(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ModelCheckpoint that saves only after validation skips its per-batch check; one with
    every_n_train_steps writes exactly the files Lightning's own dispatch writes."""
    compat.skip_empty_callback_hooks()
    counts: dict[str, int] = {}
    files, best = _checkpoint_fit(tmp_path / "template", counts, monkeypatch)
    assert counts == {str(tmp_path / "template" / "steps"): 6}  # 2 epochs x 3 batches
    assert [p.name for p in best] == ["best.ckpt"]
    original = call._call_callback_hooks._trainwell_original  # type: ignore[attr-defined]
    monkeypatch.setattr(call, "_call_callback_hooks", original)
    lightning_files, _ = _checkpoint_fit(tmp_path / "lightning", {}, monkeypatch)
    assert (
        files
        == lightning_files
        == ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=1-step=6.ckpt"]
    )
