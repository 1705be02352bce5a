"""No host-device sync in a steady training step from the template's callbacks and engine.

On a CPU the sync probe (benchmarks/sync_probe.py) records the calls that would make a GPU's
host wait (`.item()`, `bool()`, `.tolist()`, `.cpu()`, printing a tensor, ...) and who made
them, and sends the run down the GPU's code path; on a GPU the `gpu` tests count what
`torch.cuda.set_sync_debug_mode` reports, and `--strict` turns the mode to "error".
"""

from __future__ import annotations

import sys

import pytest
import torch

from tests.helpers.config import OWNED, REPO

sys.path.insert(0, str(REPO / "benchmarks"))  # benchmarks/ is a folder of scripts, not a package

import host_syncs
import sync_probe

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# The engine tests' own classifier under every default callback: ~1,260 digits in micro-batches
# of 32 (40 in the epoch), logging every 4 optimizer steps.
ENGINE_RUN = [
    *OWNED,
    "monitor.metric=val/acc",  # what the tests' own classifier logs
    "monitor.mode=max",
    "trainer=cpu",
    "trainer.max_epochs=1",
    "trainer.log_every_n_steps=4",
    "data.batch_size=32",
    "test=false",
    "print_config=false",
]


def test_the_probe_records_each_syncing_call_and_names_who_made_it() -> None:
    x = torch.arange(4.0)
    create = torch.tensor
    with sync_probe.SyncProbe() as probe:
        x.sum().item()
        bool(x.any())
        x.tolist()
        float(x[0])
        x.cpu()
        str(x)  # printing: one record, however many reads it makes inside
        torch.nonzero(x)
        torch.tensor([1.0, 2.0], device=torch.device("cpu"))  # host data copied to the device
        torch.tensor([1.0, 2.0], device="cpu")  # the host, named: no copy in a GPU run either
        x + 1  # device arithmetic: nothing to wait for
    calls = [s.call for s in probe.records]
    assert calls == [
        "Tensor.item",
        "Tensor.__bool__",
        "Tensor.tolist",
        "Tensor.__float__",
        "Tensor.cpu",
        "Tensor.__str__",
        "torch.nonzero",
        "torch.tensor(device=)",
    ]
    assert {s.owner for s in probe.records} == {"other"}  # this test file is neither
    assert all(s.where.startswith("tests/callbacks/test_host_syncs.py:") for s in probe.records)
    # Closed: the methods are torch's own again, and GPU code paths are back to CPU ones.
    assert "item" not in vars(torch.Tensor) and torch.tensor is create
    from trainwell.callbacks import cadence

    assert cadence.host_reads_are_free(torch.device("cpu"))


def test_a_sync_inside_a_library_is_charged_to_the_code_that_called_it() -> None:
    from torchmetrics import MeanMetric

    mean = MeanMetric()  # its update asks `isnan(x).any()` of the value: a read per call
    with sync_probe.SyncProbe() as probe:
        mean.update(torch.tensor(1.0))
    assert [s.call for s in probe.records][:1] == ["Tensor.__bool__"]
    assert probe.records[0].where.startswith("tests/callbacks/test_host_syncs.py:")


def test_a_read_of_a_host_side_optimizer_step_count_is_not_a_sync() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([w])  # keeps each step count on the host unless capturable
    for _ in range(2):  # the first step creates the state; the second is a steady one
        w.sum().backward()
        with sync_probe.SyncProbe() as probe:
            optimizer.step()
    assert probe.records == []


@pytest.mark.parametrize("accumulate", [1, 4])
def test_the_template_callbacks_add_no_sync_to_a_steady_step(accumulate: int) -> None:
    """Every default callback (exact accumulation, guards, monitors, checkpoints, progress
    bar) on the GPU's code path: 0 syncs of trainwell's in steady steps; the planted `.item()`
    is seen; the reads at the logging steps are the guards' and monitors'."""
    result = host_syncs.count_run(
        [*ENGINE_RUN, f"trainer.accumulate_grad_batches={accumulate}"], start=2
    )
    assert result["planted_seen"], "the planted .item() was not seen: the instrument is blind"
    assert result["steady_batches"] >= 20
    assert result["steady_ours"] == 0, result["steady_ours_where"]
    assert result["steady_lightning"] == 0, result["steady_lightning_where"]
    reading = [b for b in result["batches"] if b["kind"] == "reading"]
    # The last micro-batch of optimizer steps 4, 8, 12, ...: where the guards read their flags.
    assert reading and all(b["step"] % 4 == 0 for b in reading)
    assert all((b["batch"] + 1) % accumulate == 0 for b in reading)
    where = " ".join(result["reading_where"])
    assert "non_finite.py" in where and "grad_norm.py" in where


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("case", sorted(host_syncs.CASES))
def test_no_host_sync_between_logging_steps(case: str) -> None:
    result = host_syncs.count_syncs(case, "bf16")
    assert result["planted_seen"], "the planted .item() was not seen: the instrument is blind"
    assert result["steady_ours"] == 0, result["steady_ours_where"]


@pytest.mark.gpu
@needs_cuda
def test_cuda_error_mode_refuses_no_steady_step() -> None:
    result = host_syncs.strict_run("k1", "bf16_cl", width=16, samples=3840)
    assert result["passed"], result
