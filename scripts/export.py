"""Export a checkpoint: `python scripts/export.py ckpt_path=<run dir>/checkpoints/best.ckpt`."""

from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.cli import hydra_entry
from trainwell.io.named_paths import deployed_checkpoint
from trainwell.training.run_config import with_training_overrides


def export_job(cfg):
    from trainwell.deploy.export import export_checkpoint
    from trainwell.deploy.outputs import no_empty_run_dir

    with no_empty_run_dir():
        export_checkpoint(cfg)
    return 0


main = hydra_entry(
    Path(__file__).resolve().parents[1] / "conf",
    "export",
    export_job,
    with_training_overrides,
    check_paths=lambda cfg: deployed_checkpoint(cfg, "export.py"),
)

if __name__ == "__main__":
    main()
