"""ThroughputLogger in real Lightning fits on the CPU: cadence, FLOPs that match FlopCounterMode's
count for the net, items/s from `loss_items`, no MFU without a known peak, no recount on resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from hydra.utils import instantiate
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.flop_counter import FlopCounterMode

from tests.helpers.config import compose_config
from tests.helpers.loggers import MemoryLogger
from tests.helpers.trainers import quiet_trainer
from trainwell.callbacks import ThroughputLogger
from trainwell.callbacks.throughput import compute_dtype
from trainwell.training.builders import build_callbacks


def _task(tmp_path: Path) -> L.LightningModule:
    cfg = compose_config(["model.net.width=8"], tmp_path / "run")
    torch.manual_seed(0)
    return instantiate(cfg.model)


def _loader(batches: int = 12, batch: int = 8) -> DataLoader:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batches * batch, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (batches * batch,), generator=gen)
    return DataLoader(TensorDataset(x, y), batch_size=batch)


def _rows(logger: MemoryLogger) -> dict[int, dict[str, float]]:
    return {step: m for step, m in logger.rows if any(k.startswith("throughput/") for k in m)}


def _fit(task: L.LightningModule, callback: ThroughputLogger, **kwargs: Any) -> MemoryLogger:
    logger = MemoryLogger()
    quiet_trainer(max_epochs=1, callbacks=[callback], logger=logger, **kwargs).fit(task, _loader())
    return logger


def test_logs_on_the_logging_cadence_with_flops_counted_for_the_net(tmp_path: Path) -> None:
    task = _task(tmp_path)
    with FlopCounterMode(display=False) as counter:  # forward + backward of one sample batch
        task(torch.randn(8, 1, 8, 8)).sum().backward()
    per_sample = counter.get_total_flops() / 8
    task.zero_grad()
    rows = _rows(_fit(task, ThroughputLogger(every_n_steps=3)))
    # Marks after optimizer steps 0, 3, 6, 9 (global_step 1, 4, 7, 10); the first is the origin.
    assert sorted(rows) == [4, 7, 10]
    for metrics in rows.values():
        assert metrics["throughput/samples_per_sec"] > 0
        # FLOP/s / samples/s over the same interval is the FLOPs of one sample's step.
        ratio = metrics["throughput/flops_per_sec"] / metrics["throughput/samples_per_sec"]
        assert ratio == pytest.approx(per_sample, rel=1e-9)
        assert "throughput/mfu" not in metrics  # no peak FLOP/s is known for a CPU


def test_a_declared_flops_per_batch_and_loss_items_are_used(tmp_path: Path) -> None:
    task = _task(tmp_path)
    task.flops_per_batch = 1000.0
    task.loss_items = lambda batch: 3 * batch[1].numel()  # e.g. 3 tokens per sample
    callback = ThroughputLogger(every_n_steps=2, window=2)
    rows = _rows(_fit(task, callback))
    assert callback.flops_per_sample is None  # nothing was counted
    assert sorted(rows) == [5, 7, 9, 11]  # a 2-interval window needs 3 marks
    for metrics in rows.values():
        samples = metrics["throughput/samples_per_sec"]
        assert metrics["throughput/flops_per_sec"] == pytest.approx(1000.0 / 8 * samples)
        assert metrics["throughput/items_per_sec"] == pytest.approx(3 * samples)


def test_flops_neither_counted_nor_declared_are_not_logged_as_zero(tmp_path: Path) -> None:
    """Sharded parameters turn the counter off until the module declares flops_per_batch, as the
    info line says: until then no FLOP/s figure, rather than a 0 that reads as a measurement."""
    rows = _rows(_fit(_task(tmp_path), ThroughputLogger(every_n_steps=3, count_flops=False)))
    assert sorted(rows) == [4, 7, 10]
    for metrics in rows.values():
        assert metrics["throughput/samples_per_sec"] > 0
        assert "throughput/flops_per_sec" not in metrics and "throughput/mfu" not in metrics


def test_the_count_is_kept_in_checkpoints_and_not_repeated(tmp_path: Path) -> None:
    first = ThroughputLogger(every_n_steps=3)
    _fit(_task(tmp_path), first)
    assert first.flops_per_sample and first.flops_per_sample > 0
    resumed = ThroughputLogger(every_n_steps=3)
    resumed.load_state_dict(first.state_dict())
    assert not resumed._should_count(quiet_trainer(), _task(tmp_path))
    assert resumed.flops_per_sample == first.flops_per_sample


def test_accumulation_windows_and_the_default_cadence(tmp_path: Path) -> None:
    """K=2: a mark after the last micro-batch of optimizer steps 0, 2, 4 (log_every_n_steps=2)."""
    rows = _rows(_fit(_task(tmp_path), ThroughputLogger(), accumulate_grad_batches=2,
                      log_every_n_steps=2))  # fmt: skip
    assert sorted(rows) == [3, 5]  # marks at global_step 1 (origin), 3, 5


def test_compute_dtype_follows_the_precision() -> None:
    assert compute_dtype("bf16-mixed") is torch.bfloat16
    assert compute_dtype("16-mixed") is torch.float16
    assert compute_dtype("32-true") is torch.float32


def test_installed_by_default(tmp_path: Path) -> None:
    cfg = compose_config([], tmp_path / "run")
    assert any(isinstance(c, ThroughputLogger) for c in build_callbacks(cfg))
