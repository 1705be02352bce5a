"""The structured config of `hydra/sweeper=trainwell_optuna` (registered when Hydra scans plugins).

No `from __future__ import annotations`: Hydra executes plugin modules without registering them in
sys.modules, where dataclasses would have to look the string annotations up.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class TrainwellOptunaSweeperConf:
    _target_: str = "hydra_plugins.trainwell_optuna_sweeper.optuna_sweeper.TrainwellOptunaSweeper"
    # The sweeper builds the sampler itself: a continued study needs it seeded anew (see _search).
    _recursive_: bool = False
    # Any Optuna sampler; `seed` makes the sequence of suggestions repeatable.
    sampler: Any = field(
        default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": None}
    )
    direction: str = "minimize"  # or maximize
    # A study with this name in this storage is continued, not replaced (load_if_exists).
    study_name: Any = None
    storage: Any = None  # e.g. sqlite:///<sweep dir>/optuna.db; None: in memory, lost on exit
    n_trials: int = 20  # finished trials the study should hold (a relaunch runs only the rest)
    n_jobs: int = 1  # trials launched together (in parallel on launchers that can)
    # `key: <Hydra sweep>`: choice(...), range(...), interval(...), tag(log, interval(...)); a
    # plain value is passed to every trial as is.
    params: Any = None
    # An Optuna pruner (e.g. {_target_: optuna.pruners.MedianPruner}): each trial reports its
    # optimized metric after every validation (per fold under cv.folds) and stops when the pruner
    # finds it hopeless; recorded as pruned, never rerun. Needs `storage`.
    pruner: Any = None


ConfigStore.instance().store(
    group="hydra/sweeper",
    name="trainwell_optuna",
    node=TrainwellOptunaSweeperConf,
    provider="trainwell",
)
