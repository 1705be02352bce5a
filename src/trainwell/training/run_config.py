"""`eval.py ckpt_path=<run>/checkpoints/best.ckpt`: the training run's own overrides come first.

A checkpoint is evaluated with the model and data it was trained with: without this, evaluating
the best checkpoint of `experiment=resnet_accum model.net.width=32` would need every training
override repeated by hand, and a forgotten one fails on load (or, worse, loads into other data).
Hydra saved the run's command-line overrides in `<run dir>/.hydra/overrides.yaml`; they are put
before the eval command's own overrides, which win.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from trainwell.io.moved_targets import current_override

# Overrides that describe how a run was launched, not what it trained: never carried to eval.
_RUN_ONLY = (
    "hydra.run",
    "hydra.sweep",
    "hydra.job",
    "hydra.launcher",
    "hydra.sweeper",
    "run_id",
    "resume",
    "ckpt_path",
    "doctor",
    "doctor_allow_fail",
    "test",
    "print_config",
    "callbacks",
    "logger",
    "launcher",
    "hparams_search",
    "task_name",
)


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _run_only(override: str) -> bool:
    key = _key(override)
    return any(key == k or key.startswith(f"{k}.") or key.startswith(f"{k}/") for k in _RUN_ONLY)


def training_overrides(ckpt_path: str | Path) -> list[str]:
    """The overrides of the run that wrote `ckpt_path` (<run dir>/checkpoints/<name>.ckpt)."""
    hydra_dir = Path(ckpt_path).resolve().parent.parent / ".hydra"
    saved = hydra_dir / "overrides.yaml"
    if not saved.is_file():
        return []
    # A class the run named by path may have moved since (io/moved_targets.py).
    overrides = [current_override(str(o)) for o in yaml.safe_load(saved.read_text()) or []]
    # Hydra keeps its own overrides apart; a config search path (the user's own config dir)
    # decides which `model=` / `data=` options exist, so it comes along.
    hydra_cfg = hydra_dir / "hydra.yaml"
    if hydra_cfg.is_file():
        own = (yaml.safe_load(hydra_cfg.read_text()) or {}).get("hydra", {})
        searched = own.get("overrides", {}).get("hydra", []) or []
        overrides = [str(o) for o in searched if _key(str(o)) == "hydra.searchpath"] + overrides
    return [o for o in overrides if not _run_only(o)]


def with_training_overrides(argv: Sequence[str]) -> list[str]:
    """argv with the training run's overrides in front; an eval override of the same key wins."""
    ckpt = next((a.split("=", 1)[1] for a in argv if _key(a) == "ckpt_path" and "=" in a), None)
    if not ckpt or any(a.startswith("-") for a in argv):
        return list(argv)
    mine = {_key(a) for a in argv}
    inherited = [o for o in training_overrides(ckpt) if _key(o) not in mine]
    return [*inherited, *argv]
