"""Checkpoint files, read safely: every load uses weights_only=True (no pickled code from a
checkpoint ever runs) and every way a file can be bad becomes one line naming the file and the
way on.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import IO, Any

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
    """torch.load with weights_only=True (numpy's arrays and scalars allowed), turning every way
    a file can be bad into one line, and what was saved as data (io/checkpoint_state.py) back
    into its values.

    weights_only=True refuses pickles that would import and call arbitrary code on load; a
    checkpoint is something a user (or an attacker) can point us at. Every reader (resume, eval,
    test, predict, export, cross-validation, the doctor) loads through here.
    """
    path = Path(path)
    if is_sharded_checkpoint(path):
        return _load_sharded(path, map_location)
    require_checkpoint(path)
    return read_checkpoint(path, path, map_location=map_location, mmap=mmap)


def read_checkpoint(
    source: Path | IO[bytes], path: Path, map_location: Any = "cpu", mmap: bool = False
) -> dict[str, Any]:
    """`load_checkpoint_file` of `source`, a file or the bytes of one (`path` names it in
    messages): the step-0 check (callbacks/checkpoint_rehearsal.py) reads its checkpoint from
    memory with the loader every reader uses."""
    import torch  # here, not at the top: a command checks its ckpt_path before importing torch

    from trainwell.io.checkpoint_state import decode_state, numpy_allowed

    try:
        with numpy_allowed():  # numpy arrays and scalars, as a datamodule saved them
            checkpoint = torch.load(source, map_location=map_location, weights_only=True, mmap=mmap)
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
    if not isinstance(checkpoint, dict) or (
        "state_dict" not in checkpoint and path.name != SHARDED_META
    ):
        raise CheckpointError(
            f"{path} is not a Lightning checkpoint (no state_dict); pass a .ckpt written by "
            "scripts/train.py"
        )
    return decode_state(checkpoint)


# Stateful template callbacks that were renamed (their state's form is unchanged): Lightning keys a
# callback's state by its class name and, for a name it does not find, only warns ("Be aware that
# when using `ckpt_path`, callbacks used to create the checkpoint need to be provided") and moves
# on. A checkpoint of the older template would then resume without its RNG streams, metric states
# and batch arithmetic: a silent difference from the uninterrupted run.
RENAMED_CALLBACKS = {
    "TrainingStateCallback": "ExactResume",
    "TrainingPlanCallback": "TrainingPlanner",
}


def with_current_callback_names(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """`checkpoint` with the states of renamed template callbacks under their current names."""
    states = checkpoint.get("callbacks")
    if not isinstance(states, dict) or not any(old in states for old in RENAMED_CALLBACKS):
        return checkpoint
    renamed = dict(states)
    for old, new in RENAMED_CALLBACKS.items():
        if old in renamed and new not in renamed:
            renamed[new] = renamed.pop(old)
    return {**checkpoint, "callbacks": renamed}


# trainer.strategy.save_distributed_checkpoint=true (FSDP): a checkpoint is a directory of
# per-rank shards (torch.distributed.checkpoint) beside `meta.pt`, which holds everything else
# (loops, callbacks, hparams, schedulers).
SHARDED_META = "meta.pt"


def is_sharded_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / SHARDED_META).is_file()


def require_checkpoint(path: Path) -> None:
    """Refuse a path that is neither a checkpoint file nor a sharded checkpoint directory."""
    if not (path.is_file() or is_sharded_checkpoint(path)):
        raise CheckpointError(f"checkpoint not found: {path}; pass ckpt_path=<an existing .ckpt>")


def _load_sharded(path: Path, map_location: Any) -> dict[str, Any]:
    """A sharded checkpoint as one dict: `meta.pt` (weights-only) and, for the weights, empty
    tensors of the saved shapes (the shards are read by the strategy when training resumes;
    what a reader here needs is progress, state and shapes)."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader

    checkpoint = load_checkpoint_file(path / SHARDED_META, map_location=map_location)
    try:
        saved = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as err:
        raise _corrupt(path, err) from err
    prefix = "state_dict."
    checkpoint["state_dict"] = {
        key[len(prefix) :]: torch.empty(entry.size, device="meta")
        for key, entry in saved.items()
        if key.startswith(prefix) and hasattr(entry, "size")
    }
    return checkpoint


_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
RESAVE = "python -m trainwell.io.hparams {path} <new.ckpt>"


class PickledCheckpointError(CheckpointError):
    """A checkpoint holding pickled objects, refused by the weights-only load."""


def _pickled(path: Path, err: BaseException) -> CheckpointError:
    """A checkpoint holding a pickled object (trainwell writes none: its hparams are plain data and
    numpy state is saved as data), written elsewhere or by an earlier release."""
    found = _GLOBAL.search(str(err))
    what = found.group(1) if found else "classes or functions"
    reason = f"it holds pickled code ({what}) that a weights_only=True load never runs"
    return PickledCheckpointError(
        f"refusing to load {path}: {reason}; if you trust the file, re-save it as plain data: "
        f"{RESAVE.format(path=path)} (or torch.save({{'state_dict': ...}}))",
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
        f"checkpoint {path} is {reason}; pass an earlier checkpoint with ckpt_path=<file>",
        reason=reason,
    )
