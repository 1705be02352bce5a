"""Shipping a trained model: predictions from a checkpoint, exported files, and a server.

Beside the run, never inside it: deploy/ reads what training wrote (checkpoints, the run's config)
and nothing in training imports it.
"""

from typing import Any

__all__ = ["load_run", "load_trained"]


def __getattr__(name: str) -> Any:
    # Imported on first use: serve.py checks its export directory through deploy.artifact
    # without importing Lightning, which deploy.loading needs.
    if name in __all__:
        from trainwell.deploy import loading

        return getattr(loading, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
