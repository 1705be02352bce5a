"""Which checkpoint a run continues from, and refusing the ones it must not continue from.

`ckpt_path=<file>` resumes from that file. `resume=auto` picks the newest *complete* checkpoint
in `<run dir>/checkpoints` and starts fresh when there is none, so a requeued SLURM job (whose run
dir is keyed by its job id) and a first attempt run the same command line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainwell.io.checkpoint_read import (
    RESAVE,
    CheckpointError,
    PickledCheckpointError,
    load_checkpoint_file,
)
from trainwell.io.named_paths import train_checkpoint
from trainwell.io.run_dir import new_run_override

_MAX_LISTED_KEYS = 6


def _progress(checkpoint: dict[str, Any]) -> tuple[int, int, int]:
    """(optimizer steps, epochs finished, batches finished in the epoch): later is larger."""
    loops = checkpoint.get("loops", {}).get("fit_loop", {})
    epochs = loops.get("epoch_progress", {}).get("current", {}).get("completed", 0)
    batches = loops.get("epoch_loop.batch_progress", {}).get("current", {}).get("completed", 0)
    return int(checkpoint.get("global_step", 0)), int(epochs), int(batches)


def _scan(directory: Path) -> tuple[list[tuple[tuple[int, ...], Path]], list[tuple[Path, Any]]]:
    """(loadable checkpoints ranked by progress, refused ones with their error); the refused
    are said on stderr as they are skipped."""
    ranked: list[tuple[tuple[int, ...], Path]] = []
    refused: list[tuple[Path, CheckpointError]] = []
    if not directory.is_dir():
        return ranked, refused
    for path in sorted(directory.glob("*.ckpt")):
        if path.name.startswith("."):
            continue  # an atomic save's temp file: a save that never finished
        try:
            checkpoint = load_checkpoint_file(path, mmap=True)
        except CheckpointError as err:
            print(f"resume=auto: skipping {path.name} ({err.reason})", file=sys.stderr)
            refused.append((path, err))
            continue
        ranked.append(((*_progress(checkpoint), path.stat().st_mtime_ns), path))
    return ranked, refused


def find_newest_checkpoint(directory: Path) -> Path | None:
    """The checkpoint furthest into training that loads; unreadable files are skipped loudly.

    Ordered by training progress, not mtime: `best.ckpt` may be rewritten after a later step
    checkpoint, and a copied run dir has meaningless mtimes.
    """
    ranked, _ = _scan(directory)
    return max(ranked)[1] if ranked else None


def _none_loads(directory: Path, refused: list[tuple[Path, Any]]) -> CheckpointError:
    """Checkpoints exist and none loads: an error, never a fresh start (which would train next
    to the run's checkpoints, and be refused for it)."""
    path, err = refused[0]
    pickled = [p for p, e in refused if isinstance(e, PickledCheckpointError)]
    fix = "remove them"
    if pickled:
        # last.ckpt, where there is one: the newest end-of-epoch state. The copy goes beside the
        # refused files, where resume=auto finds it (and skips them, saying so).
        source = max(pickled, key=lambda p: p.name == "last.ckpt")
        target = source.with_name(f"{source.stem}-plain.ckpt")
        command = RESAVE.format(path=source).replace("<new.ckpt>", str(target))
        fix = (
            f"if you trust them, re-save them as plain data beside them ({command}, likewise "
            "for the others) and resume=auto continues from them"
        )
    return CheckpointError(
        f"resume=auto: none of the {len(refused)} checkpoint(s) in {directory} loads "
        f"({path.name}: {err.reason}); {fix}, or start a new run with {new_run_override()}"
    )


def resolve_ckpt_path(cfg: Any, run_dir: Path) -> str | None:
    """The checkpoint `trainer.fit` resumes from (None: start fresh)."""
    explicit = train_checkpoint(cfg)  # the mode and a named checkpoint, checked at start-up too
    if explicit:
        return explicit
    if cfg.get("resume") != "auto":
        return None
    ranked, refused = _scan(run_dir / "checkpoints")
    if not ranked and refused:
        raise _none_loads(run_dir / "checkpoints", refused)
    if not ranked:
        print(f"resume=auto: no checkpoint in {run_dir / 'checkpoints'}, starting fresh")
        return None
    newest = max(ranked)[1]
    print(f"resume=auto: resuming from {newest}")
    return str(newest)


def read_resumed_checkpoint(ckpt_path: str, cfg: Any) -> dict[str, Any]:
    """The checkpoint the run continues from, read before anything is built on it. One that
    `ckpt_path=` names and that cannot be read gets resume=auto named as the other way on: it
    skips unreadable files and continues from the run dir's newest checkpoint."""
    try:
        return load_checkpoint_file(ckpt_path)
    except PickledCheckpointError:
        raise  # its line names the command that re-saves it
    except CheckpointError as err:
        if cfg.get("ckpt_path") != ckpt_path:
            raise
        raise CheckpointError(
            f"{err}, or resume=auto in place of ckpt_path= (it skips unreadable files)",
            reason=err.reason,
        ) from err


def check_architecture(state_dict: dict[str, torch.Tensor], model: nn.Module, path: str) -> None:
    """Refuse a checkpoint of another architecture with the mismatched keys on one line
    (Lightning's own error is a multi-line dump raised after the run dir is set up)."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state_dict.items() if isinstance(v, torch.Tensor)}
    missing = sorted(expected.keys() - found.keys())
    unexpected = sorted(found.keys() - expected.keys())
    resized = sorted(k for k in expected.keys() & found.keys() if expected[k] != found[k])
    if not (missing or unexpected or resized):
        return
    parts = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape", resized)):
        if keys:
            shown = keys[:_MAX_LISTED_KEYS]
            if label == "shape":
                shown = [f"{k} {found[k]}->{expected[k]}" for k in shown]
            more = (
                f" (+{len(keys) - _MAX_LISTED_KEYS} more)" if len(keys) > _MAX_LISTED_KEYS else ""
            )
            parts.append(f"{label}: {', '.join(shown)}{more}")
    raise CheckpointError(
        f"checkpoint {path} is from a different architecture ({'; '.join(parts)}); "
        "resume with the model config it was trained with, or pass a matching ckpt_path"
    )
