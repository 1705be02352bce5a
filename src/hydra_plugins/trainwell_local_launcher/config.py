"""The structured config of `hydra/launcher=trainwell_local` (registered when Hydra scans plugins).

No `from __future__ import annotations`: Hydra executes plugin modules without registering them in
sys.modules, where dataclasses would have to look the string annotations up.
"""

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class TrainwellLocalLauncherConf:
    _target_: str = "hydra_plugins.trainwell_local_launcher.launcher.TrainwellLocalLauncher"
    gpus_per_trial: int = 1
    # GPU ids to share out; None: the machine's (CUDA_VISIBLE_DEVICES when set).
    gpus: Any = None
    # Trials at once; None: one per gpus_per_trial GPUs, else 1. More slots than GPU groups
    # put several trials on one group (round robin).
    slots: Any = None
    # Where submitit keeps each trial's pickled call, result and output.
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    # submitit's local controller ends a trial that runs longer than this.
    timeout_min: int = 10080


ConfigStore.instance().store(
    group="hydra/launcher",
    name="trainwell_local",
    node=TrainwellLocalLauncherConf,
    provider="trainwell",
)
