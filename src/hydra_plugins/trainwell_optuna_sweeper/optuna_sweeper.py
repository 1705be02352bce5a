"""The Sweeper Hydra instantiates for `hydra/sweeper=trainwell_optuna`.

Hydra imports every module of every plugin each time it starts (train.py included): this one
stays light, and Optuna is imported only when a sweep is set up.
"""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class TrainwellOptunaSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        from ._search import OptunaSearch

        self.search = OptunaSearch(**settings)

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.search.setup(hydra_context, task_function, config)
        self.launcher = self.search.launcher

    def sweep(self, arguments: list[str]) -> Any:
        return self.search.sweep(arguments)
