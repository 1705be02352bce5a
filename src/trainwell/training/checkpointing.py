"""Checkpoints that are complete (exact resume) and atomic (a kill never destroys the last good one).

Lightning already writes model, optimizer, scheduler, loop progress, precision-scaler state and
(through data/resumable.py) the train loader position. Two things are missing:

* RNG states. Lightning does not save them, so dropout and augmentation after a resume draw
  different numbers than the uninterrupted run would have. `TrainingStateCallback` adds python,
  numpy, torch and CUDA RNG states, plus the batch arithmetic the run was started with.
* Atomic writes. Lightning writes through fsspec's transaction into a temp file under /tmp and
  then *moves* it; across filesystems that is a copy, so a kill mid-copy leaves a truncated
  `last.ckpt`. `AtomicCheckpointIO` writes a temp file next to the target, fsyncs it and renames.
"""

from __future__ import annotations

import errno
import io
import os
import pickle
import random
import zipfile
from pathlib import Path
from typing import IO, Any

import lightning as L
import numpy as np
import torch
from lightning.fabric.utilities.data import _set_sampler_epoch
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


def capture_rng() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": _numpy_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _numpy_state() -> tuple[Any, ...]:
    # The key array as a tensor: weights_only=True refuses pickled numpy arrays.
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return (name, torch.from_numpy(keys.copy()), int(pos), int(has_gauss), float(gauss))


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(_as_python_state(state["python"]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy(), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_python_state(state: Any) -> tuple[Any, ...]:
    # random.setstate needs tuples; a checkpoint round trip may hand back lists.
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


class TrainingStateCallback(L.Callback):
    """Adds RNG states and the run's batch arithmetic to every checkpoint (always installed).

    RNG states are applied at the first training batch after a resume, not at load time: between
    load and that batch Lightning runs a sanity check the uninterrupted run never had at this
    point; nothing between a save and the next training step draws from the global RNGs (every
    loader has its own generator), so the first resumed step sees exactly the saved stream.
    """

    def __init__(self) -> None:
        self._pending_rng: dict[str, Any] | None = None
        self.loaded_batch: dict[str, int] | None = None
        self._batch: dict[str, int] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        micro = int(getattr(datamodule, "batch_size", 0) or 0)
        self._batch = {
            "micro_batch": micro,
            "accumulate": int(trainer.accumulate_grad_batches),
            "world_size": int(trainer.world_size),
            "effective_batch": micro * int(trainer.accumulate_grad_batches) * trainer.world_size,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"rng": capture_rng(), "batch": dict(self._batch)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending_rng = state_dict.get("rng")
        self.loaded_batch = state_dict.get("batch")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _hand_loader_its_position(trainer)
        if trainer.fit_loop.restarted_mid_epoch:
            # Lightning skips on_train_epoch_start when it restarts inside an epoch. Per-epoch
            # state a task builds there (the task's accumulation-window arithmetic) would be
            # missing, and the epoch's short tail window scaled wrongly.
            pl_module.on_train_epoch_start()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._pending_rng is not None:
            restore_rng(self._pending_rng)
            self._pending_rng = None


def _hand_loader_its_position(trainer: L.Trainer) -> None:
    """Give the train loader the position saved in the checkpoint, then rebuild its iterator.

    Corrects Lightning 2.6: `trainer.estimated_stepping_batches` (which configure_optimizers calls
    to size the LR schedule) builds the train loader and its iterator *before* the checkpoint is
    restored, so the saved loader state waits in `fit_loop._combined_loader_states_to_load` and is
    never applied: a mid-epoch resume would restart the epoch's shuffle from its first batch. When
    Lightning did apply it, the iterator is still rebuilt here for the epoch setting below.
    """
    fit_loop = trainer.fit_loop
    if fit_loop._combined_loader is None or not fit_loop.restarting:
        return
    if fit_loop._combined_loader_states_to_load:
        fit_loop._load_combined_loader_states()
    epoch = fit_loop.epoch_progress.current.processed
    for loader in fit_loop._combined_loader.flattened:
        # Before iter(): with workers the sampler is consumed when the iterator is built, and
        # Lightning would only set the epoch afterwards (order of epoch 0 instead of this one).
        _set_sampler_epoch(loader, epoch)
    iter(fit_loop._data_fetcher)
