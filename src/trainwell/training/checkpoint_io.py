"""Checkpoint files: written atomically (a kill never destroys the last good one), read safely.

Lightning writes through fsspec's transaction into a temp file under /tmp and then *moves* it;
across filesystems that is a copy, so a kill mid-copy leaves a truncated `last.ckpt`.
`AtomicCheckpointIO` writes a temp file next to the target, fsyncs it and renames. Every read
uses weights_only=True: no pickled code from a checkpoint ever runs.
"""

from __future__ import annotations

import errno
import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import IO, Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from trainwell.errors import TrainwellError

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class CheckpointError(TrainwellError):
    """A checkpoint could not be written or read; existing checkpoints are untouched."""


def load_checkpoint_file(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """torch.load with weights_only=True, turning every way a file can be bad into one line.

    weights_only=True refuses pickles that would import and call arbitrary code on load; a
    checkpoint is something a user (or an attacker) can point us at.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}; pass ckpt_path=<an existing .ckpt>")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights only" in str(err).lower() or "weights_only" in str(err):
            raise CheckpointError(
                f"refusing to load {path}: it contains pickled code (classes or functions) that "
                "weights_only=True will not execute; use a checkpoint written by trainwell, or "
                "re-save the weights as a plain state_dict"
            ) from err
        raise _corrupt(path, err) from err
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        raise _corrupt(path, err) from err
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path} is not a Lightning checkpoint (no state_dict); pass a .ckpt written by "
            "scripts/train.py"
        )
    return checkpoint


def _corrupt(path: Path, err: BaseException) -> CheckpointError:
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return CheckpointError(
        f"checkpoint {path} is corrupt or truncated ({reason}); pass an earlier checkpoint "
        "with ckpt_path=<file> or resume=auto (which skips unreadable files)"
    )


class AtomicCheckpointIO(TorchCheckpointIO):
    """Temp file in the target's directory + fsync + os.replace: the old file or the new one,
    never half of one. Loads always use weights_only=True, whatever the caller asked for."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                self._write(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            if err.errno in _DISK_FULL:
                raise CheckpointError(
                    f"no space left on device while writing {target} ({os.strerror(err.errno)}); "
                    "the previous checkpoints are intact: free space or point "
                    "hydra.run.dir at a larger disk, then resume=auto"
                ) from err
            raise
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _write(self, checkpoint: dict[str, Any], file: IO[bytes]) -> None:
        """Serialise, then write (a seam for tests that kill the process mid-write).

        Through memory, as Lightning's own save does: streamed into the file, torch.save turns
        ENOSPC into a RuntimeError ("unexpected pos ...") that no longer says the disk is full.
        """
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        file.write(buffer.getbuffer())

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        return load_checkpoint_file(path, map_location=map_location or "cpu")


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (a power cut after os.replace could otherwise undo it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
