"""Shipping a trained model: predictions from a checkpoint, exported files, and a server.

Beside the run, never inside it: deploy/ reads what training wrote (checkpoints, the run's config)
and nothing in training imports it.
"""
