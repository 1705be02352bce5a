"""Print the composed config as a tree, so the run's real settings are on screen, not assumed."""

from __future__ import annotations

import sys

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.syntax import Syntax
from rich.tree import Tree

FIRST = ("data", "model", "trainer", "callbacks", "logger", "paths")
# Room for the tree's guides in front of a value's lines (two levels deep: 8 columns), with margin.
_GUIDES = 16


def print_config_tree(cfg: DictConfig) -> None:
    tree = Tree("config", guide_style="dim")
    keys = [k for k in FIRST if k in cfg] + [k for k in cfg if k not in FIRST]
    longest = 0
    for key in keys:
        branch = tree.add(str(key), guide_style="dim")
        value = cfg[key]
        text = (
            OmegaConf.to_yaml(value, resolve=True) if isinstance(value, DictConfig) else str(value)
        )
        longest = max([longest, *(len(line) for line in text.splitlines())])
        # A value wider than a terminal wraps onto the next line instead of being cropped.
        branch.add(
            Syntax(text, "yaml", theme="ansi_dark", background_color="default", word_wrap=True)
        )
    # Off a terminal (a pipe, a SLURM .out file) rich would assume 80 columns and cut every
    # longer line, paths included: the log gets as many columns as the longest line needs.
    width = None if sys.stdout.isatty() else max(80, longest + _GUIDES)
    Console(width=width).print(tree)
