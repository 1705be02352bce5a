"""The checkpoint a command line names (`ckpt_path=`), checked before torch is imported.

Every script runs these checks on the composed config before Hydra starts the job, so a mistyped
path is one line and exit 2 within a second, before anything is written (importing torch and
Lightning alone takes five seconds on two cores). The commands call the same functions again
inside the job (a sweep's jobs, `evaluate(cfg)` called from Python), so each message is written
once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_read import CheckpointError, is_sharded_checkpoint, require_checkpoint

RESUME_MODES = (None, "auto", "never")


def train_checkpoint(cfg: Any) -> str | None:
    """train.py: the checkpoint `ckpt_path=` resumes from, which must exist (a file or a sharded
    checkpoint directory); None when none is named. An unknown `resume=` mode is refused."""
    mode = cfg.get("resume")
    if mode not in RESUME_MODES:
        raise TrainwellError(f"resume={mode} is not a mode; use resume=auto (or leave it unset)")
    explicit = cfg.get("ckpt_path")
    if not explicit:
        return None
    if not (Path(explicit).is_file() or is_sharded_checkpoint(Path(explicit))):
        raise CheckpointError(
            f"checkpoint not found: {explicit}; pass ckpt_path=<an existing .ckpt>, or resume=auto "
            "in its place to continue from the run dir's newest checkpoint"
        )
    return str(explicit)


def required_checkpoint(cfg: Any, command: str) -> str:
    """`ckpt_path=` of a command that reads a trained model (eval.py, predict.py, export.py)."""
    ckpt = cfg.get("ckpt_path")
    if not ckpt:
        raise TrainwellError(
            f"{command} needs a checkpoint: pass ckpt_path=<run dir>/checkpoints/best.ckpt"
        )
    return str(ckpt)


def refuse_fold_checkpoint(ckpt: str, command: str) -> None:
    """A cross-validation fold trained on part of train+val, with statistics fitted on that part:
    tested or shipped as if it were a plain run, its inputs would be normalised with the wrong
    statistics, silently."""
    fold_dir = Path(ckpt).resolve().parent.parent
    if fold_dir.name.startswith("fold_") and (fold_dir.parent / "folds.json").is_file():
        raise TrainwellError(
            f"{ckpt} is a cross-validation fold's checkpoint; {command} reads plain runs: train "
            "the chosen config without cv.folds and use that run's best.ckpt"
        )


def eval_checkpoint(cfg: Any) -> str:
    """eval.py: `ckpt_path=`, an existing checkpoint file of a plain run."""
    ckpt = required_checkpoint(cfg, "eval.py")
    if not Path(ckpt).is_file():
        raise TrainwellError(
            f"checkpoint not found: {ckpt}; pass ckpt_path=<path to an existing .ckpt>"
        )
    refuse_fold_checkpoint(ckpt, "eval.py")
    return ckpt


def deployed_checkpoint(cfg: Any, command: str) -> str:
    """predict.py, export.py: `ckpt_path=`, an existing checkpoint (file or sharded directory)."""
    ckpt = required_checkpoint(cfg, command)
    require_checkpoint(Path(ckpt))
    refuse_fold_checkpoint(ckpt, command)
    return ckpt
