"""`Task.load_from_checkpoint(path)`, the Lightning reflex, answered in one line.

The example tasks take objects (`net`, the optimizer partial) that a checkpoint stores as their
config nodes, so Lightning's own rebuild from `hyper_parameters` cannot construct them (it stops
saying `net` and `optimizer` are missing). trainwell.deploy.load_trained rebuilds the module from
the run's saved config and loads the checkpoint weights-only, the same way prediction and export
do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainwell.errors import TrainwellError


class PointsToLoadTrained:
    """Mixin for a task whose constructor takes objects: load_from_checkpoint names the way on."""

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | Path, *args: Any, **kwargs: Any) -> Any:
        raise TrainwellError(
            f"{cls.__name__}.load_from_checkpoint cannot rebuild the net and optimizer the "
            f"checkpoint stores as config: use trainwell.deploy.load_trained("
            f'"{checkpoint_path}") (the trained module, in eval mode)'
        )
