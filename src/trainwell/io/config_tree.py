"""Print the composed config as a tree, so the run's real settings are on screen, not assumed."""

from __future__ import annotations

import rich
from omegaconf import DictConfig, OmegaConf
from rich.syntax import Syntax
from rich.tree import Tree

FIRST = ("data", "model", "trainer", "callbacks", "logger", "paths")


def print_config_tree(cfg: DictConfig) -> None:
    tree = Tree("config", guide_style="dim")
    keys = [k for k in FIRST if k in cfg] + [k for k in cfg if k not in FIRST]
    for key in keys:
        branch = tree.add(str(key), guide_style="dim")
        value = cfg[key]
        text = (
            OmegaConf.to_yaml(value, resolve=True) if isinstance(value, DictConfig) else str(value)
        )
        branch.add(Syntax(text, "yaml", theme="ansi_dark", background_color="default"))
    rich.print(tree)
