"""LightningDataModules: data only, no knowledge of the model.

One module per datamodule, named by its module in configs (`project.data.digits.DigitsDataModule`):
this face imports none of them, so deleting one leaves the others importable.
"""
