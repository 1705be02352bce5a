"""Predict with a checkpoint: `python scripts/predict.py ckpt_path=<run dir>/checkpoints/best.ckpt`."""

from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.cli import hydra_entry
from trainwell.io.named_paths import deployed_checkpoint
from trainwell.training.run_config import with_training_overrides


def predict_job(cfg):
    from trainwell.deploy.outputs import no_empty_run_dir
    from trainwell.deploy.predict import predict_checkpoint

    with no_empty_run_dir():
        predict_checkpoint(cfg)
    return 0


main = hydra_entry(
    Path(__file__).resolve().parents[1] / "conf",
    "predict",
    predict_job,
    with_training_overrides,
    check_paths=lambda cfg: deployed_checkpoint(cfg, "predict.py"),
)

if __name__ == "__main__":
    main()
