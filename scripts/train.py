"""Train the configured experiment: `python scripts/train.py experiment=resnet_accum`."""

from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.cli import hydra_entry, train_job
from trainwell.io.named_paths import train_checkpoint

main = hydra_entry(
    Path(__file__).resolve().parents[1] / "conf",
    "train",
    train_job,
    lock_run_dir=True,
    check_paths=train_checkpoint,
)

if __name__ == "__main__":
    main()
