"""Evaluate a checkpoint: `python scripts/eval.py ckpt_path=<run dir>/checkpoints/best.ckpt`."""

from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.cli import eval_job, hydra_entry
from trainwell.io.named_paths import eval_checkpoint
from trainwell.training.run_config import with_training_overrides

main = hydra_entry(
    Path(__file__).resolve().parents[1] / "conf",
    "eval",
    eval_job,
    with_training_overrides,
    check_paths=eval_checkpoint,
)

if __name__ == "__main__":
    main()
