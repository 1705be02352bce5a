"""Shipping a trained model: predictions from a checkpoint, exported files, and a server.

Beside the run, never inside it: deploy/ reads what training wrote (checkpoints, the run's config)
and nothing in training imports it.
"""

from trainwell.deploy.loading import load_run, load_trained

__all__ = ["load_run", "load_trained"]
