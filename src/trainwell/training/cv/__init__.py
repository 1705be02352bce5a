"""Cross-validation (`cv.folds=K`): K full runs over the train+val samples, one per fold.

folds.py assigns the folds, data_hook.py is the datamodule's side (the hook and the leak probe),
oof.py the out-of-fold predictions and the `cv` summary, run.py the loop.
"""
