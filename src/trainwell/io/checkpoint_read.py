"""Checkpoint files, read safely: every load uses weights_only=True (no pickled code from a
checkpoint ever runs) and every way a file can be bad becomes one line naming the file and the
way on.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from trainwell.errors import TrainwellError, first_line


class CheckpointError(TrainwellError):
    """A checkpoint could not be written or read; existing checkpoints are untouched.

    `reason`: the cause alone, without the advice (a caller with other advice, such as
    resume=auto choosing among files, words its own).
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


def load_checkpoint_file(
    path: str | Path, map_location: Any = "cpu", mmap: bool = False
) -> dict[str, Any]:
    """torch.load with weights_only=True, turning every way a file can be bad into one line.

    weights_only=True refuses pickles that would import and call arbitrary code on load; a
    checkpoint is something a user (or an attacker) can point us at.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}; pass ckpt_path=<an existing .ckpt>")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        # Only a pickle that names a class or function holds code; any other refusal of the
        # weights-only unpickler ("Unsupported operand") is a file that is no checkpoint at all,
        # and the re-save advice would end in a traceback.
        if _GLOBAL.search(str(err)):
            raise _pickled(path, err) from err
        refused = re.search(r"WeightsUnpickler error:\s*(.+)", str(err))
        raise _corrupt(path, err, refused.group(1) if refused else None) from err
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        raise _corrupt(path, err) from err
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path} is not a Lightning checkpoint (no state_dict); pass a .ckpt written by "
            "scripts/train.py"
        )
    return checkpoint


_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
RESAVE = "python -m trainwell.io.hparams {path} <new.ckpt>"


class PickledCheckpointError(CheckpointError):
    """A checkpoint holding pickled objects, refused by the weights-only load."""


def _pickled(path: Path, err: BaseException) -> CheckpointError:
    """A checkpoint holding a pickled object (trainwell writes none: its hparams are plain data)."""
    found = _GLOBAL.search(str(err))
    what = found.group(1) if found else "classes or functions"
    reason = f"it holds pickled code ({what}) that a weights_only=True load never runs"
    return PickledCheckpointError(
        f"refusing to load {path}: {reason}; if you trust the file, re-save it with plain "
        f"hparams: {RESAVE.format(path=path)} (or torch.save({{'state_dict': ...}}))",
        reason=reason,
    )


def found_in(path: Path) -> str:
    """What the file holds, for a message: its size and first bytes."""
    try:
        with path.open("rb") as f:
            head = f.read(16)
        size = path.stat().st_size
    except OSError as err:
        return f"unreadable ({err.strerror})"
    if not size:
        return "an empty file"
    return f"a {size}-byte file starting with {head!r}"


def _corrupt(path: Path, err: BaseException, detail: str | None = None) -> CheckpointError:
    reason = (
        f"not a readable checkpoint (corrupt or truncated: {found_in(path)}; "
        f"{(detail or first_line(err))[:120]})"
    )
    return CheckpointError(
        f"checkpoint {path} is {reason}; pass an earlier checkpoint with ckpt_path=<file> or "
        "resume=auto (which skips unreadable files)",
        reason=reason,
    )
