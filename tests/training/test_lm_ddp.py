"""The language model on 2 DDP ranks (gloo, CPU) x K=2 equals one process, by tokens.

Through scripts/train.py in a subprocess (Lightning's DDP launcher re-executes sys.argv). Every
micro-batch holds a different number of real tokens and padding, ranks hold different token
counts, and the epoch ends in a short tail window: the step must still be the mean over every
real token of the window on both ranks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.scripts import run_ok

# Dropout-free GELU Transformer, SGD without momentum, fp32, no schedule: equal gradients give
# equal weights. 130 sequences -> 104 train = 6 steps of 16 sequences and a tail step of 8.
COMMON = (
    "experiment=lm_accum",
    "model/optimizer=sgd",
    "model.optimizer.lr=0.2",
    "model.optimizer.momentum=0.0",
    "model.optimizer.nesterov=false",
    "model.optimizer.weight_decay=0.0",
    "model.scheduler=null",
    "model.net.dropout=0.0",
    "data.num_sequences=130",
    "trainer.max_epochs=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.deterministic=true",
    "logger=csv",
    "test=false",
    "print_config=false",
)


def _weights(run_dir: Path, *overrides: str) -> dict[str, torch.Tensor]:
    run_ok("train.py", run_dir, *COMMON, *overrides)
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    return ckpt["state_dict"]


# Slow: the default suite keeps 2 real ranks with uneven item counts (test_ddp_padding.py) and
# exactness by declared tokens on 1 process (tests/callbacks/test_accumulation.py).
@pytest.mark.example(
    "project.data.sequences", "project.models.transformer", "project.tasks.language_model"
)
@pytest.mark.slow
def test_two_ranks_with_accumulation_equal_one_process_by_tokens(tmp_path: Path) -> None:
    ddp = _weights(
        tmp_path / "ddp",
        "trainer=ddp_sim",
        "data.batch_size=4",
        "trainer.accumulate_grad_batches=2",
    )
    single = _weights(
        tmp_path / "single",
        "trainer=cpu",
        "data.batch_size=16",
        "trainer.accumulate_grad_batches=1",
    )
    assert set(ddp) == set(single)
    diff = max((ddp[k] - single[k]).abs().max().item() for k in ddp)
    print(f"max |w_ddp - w_single| = {diff:.3g}")
    assert diff <= 1e-6, diff
