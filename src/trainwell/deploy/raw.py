"""Raw samples, the form a user holds, and the eval-time preprocessing as a module in the graph.

A datamodule declares its raw form with a `raw_form()` method (`from_hook` says what it returns):
what a raw sample is, each split's raw samples in loader order, and the module that maps a raw
batch to the model's input as evaluation does (trainwell.blocks.preprocess has the common ones).
A token model's raw form also names its padding (`"tokens"`), so predict and export read one
prediction per real position. The raw form's `input` becomes the `InputSpec`
(deploy/input_spec.py) that checks every sample handed to the model: predict's `input=` files,
export's parity samples and, through the manifest, the server's requests. Without a raw form,
predict and export take the **batch form**: the model input its loaders yield (`batch_form`), the
preprocessing staying outside the graph (`input.form: batch` in the manifest) and `index` being
the position in the split.

Reading `input=` files in that form is deploy/raw_input.py's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from trainwell.deploy.input_spec import InputSpec
from trainwell.errors import TrainwellError, first_line


class RawModel(nn.Module):
    """preprocess -> the trained module's forward: what the exported graph computes."""

    def __init__(self, preprocess: nn.Module, model: nn.Module) -> None:
        super().__init__()
        self.preprocess = preprocess
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(self.preprocess(inputs))


CLASS_SCORES = "unnormalised class scores (softmax gives probabilities)"


@dataclass
class RawData:
    preprocess: nn.Module
    spec: InputSpec
    classes: list[str] | None
    # split name -> (raw samples, dataset indices, targets); token models: targets (N, T) per
    # position, IGNORE_INDEX at the padding
    splits: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = field(
        default_factory=dict
    )
    tokens: bool = False  # a token model: outputs (N, T, vocab), one prediction per position
    output_meaning: str = CLASS_SCORES
    batch_form: bool = False  # samples are what the loaders yield: preprocessing stays outside
    ignore_index: int = -100  # token models: the target at padded positions
    # token models with dict batches: (model input key, real-position mask key)
    batch_keys: tuple[str, str] | None = None


HOOK = "raw_form"


def from_hook(datamodule: Any) -> RawData:
    """RawData from `datamodule.raw_form()`, a plain dict (no trainwell import needed):

        {"input": {"dtype": "float32", "shape": [None, 8], "range": None | [low, high],
                   "description": "what a raw sample is",
                   # optional: names of the None axes (default {"0": "batch"}), the longest
                   # "sequence" axis, the id that right-pads rows of ids (N, T)
                   "dynamic_axes": {"0": "batch", "1": "sequence"}, "max_sequence": 64,
                   "pad": 0},
         "splits": {"test": (samples, indices, targets or None), ...},   # numpy arrays
         "preprocess": None | nn.Module,   # raw batch -> model input, as evaluation does it
         "classes": None | ["name", ...],
         # token models only: forward gives (N, T, vocab), one prediction per position; rows
         # are right-padded with `pad`, whose targets are `ignore_index`; a loader yielding
         # dict batches names the model input and the mask of real positions in them
         "tokens": {"pad": 0, "ignore_index": -100, "input_key": "tokens", "mask_key": "mask"},
         "output_meaning": "what forward's output is"}

    The split's samples must be, row for row, the samples its dataloader yields in order.
    """
    name = type(datamodule).__name__
    form = getattr(datamodule, HOOK)()
    if not isinstance(form, dict) or "input" not in form or "splits" not in form:
        raise TrainwellError(
            f"{name}.{HOOK}() must return a dict with 'input' and 'splits' "
            "(docs/your-project.md: Bring your own module)"
        )
    entry = dict(form["input"])
    missing = [key for key in ("dtype", "shape", "description") if key not in entry]
    if missing:
        raise TrainwellError(f"{name}.{HOOK}()['input'] lacks {', '.join(missing)}")
    tokens = form.get("tokens")
    if tokens is not None:  # a token model's rows are right-padded: the spec checks that too
        entry.setdefault("pad", int(tokens.get("pad", 0)))
    spec = InputSpec.from_dict({**entry, "form": "raw"}, f"{name}.{HOOK}()['input']")
    splits = {
        split: (np.asarray(x), np.asarray(i, dtype=np.int64), None if y is None else np.asarray(y))
        for split, (x, i, y) in form["splits"].items()
    }
    extra: dict[str, Any] = {}
    if tokens is not None:
        extra = {"tokens": True}
        extra["ignore_index"] = int(tokens.get("ignore_index", -100))
        if "input_key" in tokens and "mask_key" in tokens:
            extra["batch_keys"] = (str(tokens["input_key"]), str(tokens["mask_key"]))
    if form.get("output_meaning"):
        extra["output_meaning"] = str(form["output_meaning"])
    return RawData(
        preprocess=form.get("preprocess") or nn.Identity(),
        spec=spec,
        classes=None if form.get("classes") is None else [str(c) for c in form["classes"]],
        splits=splits,
        **extra,
    )


def model_input(batch: Any, name: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(model input, labels or None) of one batch: a tensor, or a tuple/list whose first item is
    the input and whose second, if any, holds one integer label per sample."""
    if isinstance(batch, torch.Tensor):
        return batch, None
    if isinstance(batch, list | tuple) and batch and isinstance(batch[0], torch.Tensor):
        x = batch[0]
        y = batch[1] if len(batch) > 1 else None
        labels = (
            isinstance(y, torch.Tensor)
            and y.ndim == 1
            and len(y) == len(x)
            and not torch.is_floating_point(y)
        )
        return x, y if labels else None
    raise TrainwellError(
        f"{name} yields {type(batch).__name__} batches: predict and export take a tensor or a "
        f"(input, label) tuple, otherwise {name}.{HOOK}() says what the model's input is "
        "(docs/your-project.md: Bring your own module)"
    )


def forward_batch(module: nn.Module, batch: Any, name: str) -> torch.Tensor:
    """module(input of `batch`); a forward that cannot take what the loader yields (a GAN's
    generator fed data samples) is one line naming both, never a traceback."""
    x = model_input(batch, name)[0]
    try:
        return module(x)
    except (RuntimeError, TypeError, ValueError, IndexError) as err:
        raise TrainwellError(
            f"{type(module).__name__}.forward cannot take the input {name}'s loader yields "
            f"(shape {list(x.shape)}): {first_line(err)}; predict and export call forward on "
            "it"
        ) from err


def batch_form(datamodule: Any, split: str) -> RawData:
    """RawData of `split` as its loader yields it: the samples are the model's own input, in
    loader order (index = position in the split), no preprocessing in the graph."""
    name = type(datamodule).__name__
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    make_loader = getattr(datamodule, f"{split}_dataloader", None)
    try:  # LightningDataModule's own <split>_dataloader raises: the user did not define it
        loader = make_loader() if callable(make_loader) else None
    except MisconfigurationException:
        loader = None
    if loader is None:
        raise TrainwellError(f"split={split}: {name} has no {split}_dataloader()")
    xs, ys = [], []
    for batch in loader:
        x, y = model_input(batch, name)
        if xs and x.shape[1:] != xs[0].shape[1:]:
            raise TrainwellError(
                f"{name}.{split}_dataloader() yields inputs of shapes {list(xs[0].shape[1:])} and "
                f"{list(x.shape[1:])}: one graph needs one sample shape; {name}.{HOOK}() can say "
                "what a raw sample is"
            )
        xs.append(x.detach().cpu())
        ys.append(y)
    if not xs:
        raise TrainwellError(f"split={split}: {name}.{split}_dataloader() yields no batches")
    samples = torch.cat(xs).numpy()
    targets = None if any(y is None for y in ys) else torch.cat(ys).numpy().astype(np.int64)
    index = np.arange(len(samples), dtype=np.int64)
    return RawData(
        preprocess=nn.Identity(),
        spec=InputSpec(
            dtype=samples.dtype.name,
            shape=(None, *samples.shape[1:]),
            form="batch",
            description=f"the model input as {name}'s loaders yield it (preprocessing outside "
            "the graph)",
        ),
        classes=None,
        splits={split: (samples, index, targets)},
        batch_form=True,
    )


def raw_data(datamodule: Any, split: str = "test") -> RawData:
    """The raw form of `datamodule`'s samples and the preprocessing that maps it to model inputs;
    without a raw form, `split`'s batch form."""
    if callable(getattr(datamodule, HOOK, None)):
        return from_hook(datamodule)
    return batch_form(datamodule, split)


NO_RAW_FORM = (
    "{name} has no {hook}(): the graph takes the batch form its loaders yield (input.form: "
    "batch); a {hook}() would put the eval preprocessing inside the graph and let input= and "
    "the server take raw samples"
)
