"""compat.lean_module_hooks and cache_training_step_signature: the module's hooks, its
training_step and the strategy's hooks run exactly as Lightning runs them, in the same hook
context; with a profiler set, every hook is still recorded."""

from __future__ import annotations

from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.loops import training_epoch_loop
from lightning.pytorch.profilers import SimpleProfiler
from lightning.pytorch.trainer import call
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.trainers import quiet_trainer
from trainwell import compat

pytestmark = pytest.mark.engine  # needs nothing of the examples


class Traced(L.LightningModule):
    """Records each hook it implements with the hook context Lightning set for it (the name
    `self.log` validates against) and what the hook returned to the loop."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.calls: list[str] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.calls.append(f"batch_start {batch_idx} {self._current_fx_name}")

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls.append(f"before_transfer {self._current_fx_name}")
        return [batch[0] * 2]  # the loop must train on what this returns

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.calls.append(f"step {batch_idx} {self._current_fx_name} {float(batch[0].sum()):.4f}")
        return self.layer(batch[0]).pow(2).mean()

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.calls.append(f"before_step {self.trainer.global_step} {self._current_fx_name}")

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.calls.append(f"batch_end {batch_idx} {self._current_fx_name} {outputs['loss']:.6f}")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class NoIndex(Traced):
    """A training_step without batch_idx: the loop must not pass one."""

    def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        self.calls.append(f"step {self._current_fx_name}")
        return self.layer(batch[0]).pow(2).mean()


def _loader() -> DataLoader:
    return DataLoader(
        TensorDataset(torch.randn(12, 4, generator=torch.Generator().manual_seed(0))), 4
    )


def _fit(kind: type[Traced], **kwargs: Any) -> Traced:
    torch.manual_seed(0)
    module = kind()
    quiet_trainer(max_epochs=2, **kwargs).fit(module, _loader())
    return module


def _as_shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    for owner, name in (
        (call, "_call_lightning_module_hook"),
        (call, "_call_strategy_hook"),
        (training_epoch_loop, "is_param_in_hook_signature"),
    ):
        monkeypatch.setattr(owner, name, getattr(owner, name)._trainwell_original)


def _patch() -> None:
    compat.lean_module_hooks()
    compat.cache_training_step_signature()


def test_module_and_strategy_hooks_run_as_lightning_runs_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _patch()
    lean = _fit(Traced)
    lean_no_index = _fit(NoIndex)
    _as_shipped(monkeypatch)
    shipped = _fit(Traced)
    assert lean.calls == shipped.calls  # same hooks, order, context, returned values
    assert _fit(NoIndex).calls == lean_no_index.calls
    assert "step 0 training_step" in " ".join(lean.calls)
    assert "step training_step" in lean_no_index.calls  # no batch_idx passed: it would raise
    assert torch.equal(lean.layer.weight, shipped.layer.weight)


def test_a_profiler_still_records_every_module_and_strategy_hook(tmp_path) -> None:
    _patch()
    profiler = SimpleProfiler(dirpath=tmp_path, filename="profile")
    _fit(Traced, profiler=profiler)
    assert "[LightningModule]Traced.on_before_zero_grad" in profiler.recorded_durations
    assert "[Strategy]SingleDeviceStrategy.training_step" in profiler.recorded_durations


def test_an_inherited_empty_per_batch_hook_is_skipped_and_any_other_runs() -> None:
    from trainwell.compat.module_hooks import _inherits_empty

    _patch()
    module = Traced()
    assert _inherits_empty(module, "on_after_backward")  # Lightning's empty hook: not called
    assert not _inherits_empty(module, "on_before_optimizer_step")  # overridden
    assert not _inherits_empty(module, "on_train_start")  # not a per-batch hook
    # A hook set on the instance runs, in its hook context, at every step.
    module.on_after_backward = lambda: module.calls.append(f"after {module._current_fx_name}")
    assert not _inherits_empty(module, "on_after_backward")
    torch.manual_seed(0)
    quiet_trainer(max_epochs=1).fit(module, _loader())
    assert module.calls.count("after on_after_backward") == 3
