"""The config `scripts/train.py` would see, composed outside `hydra.main` (tests, benchmarks).

Code that builds a run from the config tree without the command line (the test suite, the
benchmarks) calls this one function, so each composes exactly what a user's run composes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

import trainwell.resolvers  # noqa: F401  (the config tree uses trainwell's resolvers)


def compose_run_config(
    config_dir: Path,
    overrides: Sequence[str],
    output_dir: Path,
    root_dir: Path,
    config_name: str = "train",
) -> DictConfig:
    """`config_name` from `config_dir` with `overrides`, its paths pinned to `root_dir` and
    `output_dir`.

    `paths.output_dir` is `${hydra:runtime.output_dir}`, which only resolves inside hydra.main:
    the compose API has no runtime, so without the pin every run-dir path in the config fails
    to resolve.
    """
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=list(overrides))
    with open_dict(cfg):
        cfg.paths.root_dir = str(root_dir)
        cfg.paths.output_dir = str(output_dir)
    return cfg
