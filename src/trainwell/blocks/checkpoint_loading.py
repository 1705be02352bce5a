"""`Task.load_from_checkpoint(path)`, the Lightning reflex, answered as load_trained answers it.

The example tasks take objects (`net`, the optimizer partial) that a checkpoint stores as their
config nodes, so Lightning's own rebuild from `hyper_parameters` cannot construct them (it stops
saying `net` and `optimizer` are missing). trainwell.deploy.load_trained rebuilds the module from
the run's saved config and loads the checkpoint weights-only, the same way prediction and export
do; load_from_checkpoint returns exactly that module, in eval mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainwell.errors import TrainwellError


class LoadsLikeLoadTrained:
    """Mixin for a task whose constructor takes objects: load_from_checkpoint rebuilds it from the
    run's saved config (trainwell.deploy.load_trained)."""

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: str | Path, map_location: Any = None, **kwargs: Any
    ) -> Any:
        if kwargs:  # Lightning's hparams overrides: the run's saved config decides here
            raise TrainwellError(
                f"{cls.__name__}.load_from_checkpoint rebuilds the module from its run's saved "
                f"config and takes no {', '.join(sorted(kwargs))}: change the config and retrain"
            )
        module = _rebuild(Path(checkpoint_path))
        if not isinstance(module, cls):
            raise TrainwellError(
                f"{checkpoint_path} holds a {type(module).__name__}, not a {cls.__name__}: use "
                f'trainwell.deploy.load_trained("{checkpoint_path}")'
            )
        return module if map_location is None else module.to(map_location)


def _rebuild(path: Path) -> Any:
    """The module of <run dir>/checkpoints/<name>.ckpt from <run dir>/.hydra/config.yaml's model
    node, its weights loaded weights-only, in eval mode: what trainwell.deploy.load_trained
    returns (tasks sit below deploy and cannot import it; a test holds the two equal)."""
    from hydra.utils import instantiate

    from trainwell.io.checkpoint_read import load_checkpoint_file
    from trainwell.io.moved_targets import load_saved_config

    config = path.resolve().parent.parent / ".hydra" / "config.yaml"
    if not path.is_file() or not config.is_file():
        raise TrainwellError(
            f"{path} is not a checkpoint inside a run dir written by scripts/train.py "
            "(<run dir>/checkpoints/<name>.ckpt beside <run dir>/.hydra/config.yaml)"
        )
    module = instantiate(load_saved_config(config).model)
    module.load_state_dict(load_checkpoint_file(path)["state_dict"])
    return module.eval()
