"""Class paths a release moved, so runs written before the move still load.

A run's saved config (`<run dir>/.hydra/config.yaml`) and its saved overrides name classes by
their `_target_` at the time of the run. When a release moves a class, those names stop
importing, and predict, export, eval or `load_from_checkpoint` on an older run would fail. Each
move is one prefix here (and one line of the release note in docs/upgrading.md); a name is read
through the table before it is instantiated. A class a package face used to re-export
(`<package>.<Class>`, before the faces of the cloner's room stopped importing their modules) is
found in the one module of the package that defines it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from trainwell.targets import relocated

# old prefix -> new prefix, most specific first (the first match wins)
MOVED: tuple[tuple[str, str], ...] = (
    # The template's examples left the engine for the cloner's room (src/project); the learning
    # rate schedules the plan needs stayed in the engine.
    ("trainwell.tasks.schedules.", "trainwell.blocks.schedules."),
    ("trainwell.data.", "project.data."),
    ("trainwell.models.", "project.models."),
    ("trainwell.tasks.", "project.tasks."),
)


def current_name(name: str) -> str:
    """`name` as this release spells it: moved by the table, then, when a package face no longer
    re-exports the class (`project.data.Wine` of a clone whose faces import nothing), read from
    the one module of that package that defines it."""
    for old, new in MOVED:
        if name.startswith(old):
            name = new + name[len(old) :]
            break
    return relocated(name) or name


def current_override(override: str) -> str:
    """A saved `key=value` override with a moved class path in its value renamed."""
    key, sep, value = override.partition("=")
    return f"{key}{sep}{current_name(value)}" if sep else override


def current_targets(cfg: Any) -> Any:
    """Every `_target_` in `cfg` (a DictConfig, in place) as this release spells it."""
    if isinstance(cfg, DictConfig):
        target = cfg.get("_target_") if "_target_" in cfg else None
        if isinstance(target, str) and current_name(target) != target:
            with open_dict(cfg):
                cfg._target_ = current_name(target)
        for key in cfg:
            if OmegaConf.is_interpolation(cfg, key) or OmegaConf.is_missing(cfg, key):
                continue  # resolved later, from nodes this walk rewrites
            current_targets(cfg[key])
    elif isinstance(cfg, ListConfig):
        for index in range(len(cfg)):
            if not OmegaConf.is_interpolation(cfg, index) and not OmegaConf.is_missing(cfg, index):
                current_targets(cfg[index])
    return cfg


def load_saved_config(path: Path) -> DictConfig:
    """A run's saved `.hydra/config.yaml`, ready to instantiate outside the scripts too: its
    `${tw.*}` interpolations resolve (a plain `python -c` has not registered them) and its class
    paths are this release's."""
    from trainwell.resolvers import register

    register()
    return current_targets(OmegaConf.load(path))
