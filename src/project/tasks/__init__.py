"""LightningModules: loss, metrics, optimizer and scheduler wiring around an injected net.

One module per task, named by its module in configs
(`project.tasks.classification.ClassificationTask`): this face imports none of them, so deleting
one leaves the others importable.
"""
