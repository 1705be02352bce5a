"""Train the configured experiment: `python scripts/train.py experiment=resnet_accum`."""

from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.cli import hydra_entry, train_job

main = hydra_entry(
    Path(__file__).resolve().parents[1] / "conf", "train", train_job, lock_run_dir=True
)

if __name__ == "__main__":
    main()
