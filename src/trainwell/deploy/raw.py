"""Raw samples, the form a user holds, and the eval-time preprocessing as a module in the graph.

digits: float32 (N, 8, 8), values 0-16, as `sklearn.datasets.load_digits().images`; the graph
normalises with the checkpoint's train-split mean and std and adds the channel axis.
CIFAR-10: uint8 (N, 32, 32, 3) HWC, as torchvision's `CIFAR10(...).data`; the graph scales to
[0, 1], normalises per channel with the checkpoint's mean and std and permutes to NCHW: the
datamodule's eval transform (ToTensor + Normalize) as tensor ops.
synthetic: float32 (N, 3, 32, 32) as `make_synthetic` generates them (the model's input as is);
with `data.on_device=true` the uint8 (N, 32, 32, 3) HWC the device stores, normalised back in
the graph.
sequences (token models): int64 token ids (N, T), T up to data.max_len, each row starting with
<bos> and right-padded with <pad> (id 0) where rows differ in length; the graph maps them to
next-token logits (N, T, vocab) with batch and sequence length dynamic (no preprocessing: the
ids are the model's input; the vocabulary that made them travels in the checkpoint).

A datamodule of the user's own declares its raw form with a `raw_form()` method (`from_hook`
says what it returns). Without one, predict and export take the **batch form**: the model input
its loaders yield (`batch_form`), the preprocessing staying outside the graph (`input.form:
batch` in the manifest) and `index` being the position in the split.

Reading `input=` files in that form is deploy/raw_input.py's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from trainwell.data.cifar10 import CIFAR10DataModule
from trainwell.data.digits import DigitsDataModule
from trainwell.data.sequences import PAD, SequenceDataModule, pad_batch
from trainwell.data.synthetic import (
    QUANT_MEAN,
    QUANT_STD,
    SyntheticDataModule,
    make_synthetic,
    quantize,
)
from trainwell.errors import TrainwellError, first_line


class Normalize(nn.Module):
    """(x - mean) / std, then `shape` per sample: digits' eval-time preprocessing."""

    def __init__(self, mean: float, std: float, sample_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(float(mean), dtype=torch.float32))
        self.register_buffer("std", torch.tensor(float(std), dtype=torch.float32))
        self.sample_shape = tuple(sample_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.to(torch.float32) - self.mean) / self.std
        return x.reshape(x.shape[0], *self.sample_shape)


class ImageNormalize(nn.Module):
    """uint8 NHWC -> float NCHW in [0, 1] -> per-channel (x - mean) / std.

    The same operations, in the same order, as torchvision's ToTensor (float, then / 255) and
    Normalize (subtract, then divide), so the graph sees what evaluation saw.
    """

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        shape = (1, len(mean), 1, 1)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(shape))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2).to(torch.float32).div(255)
        return (x - self.mean) / self.std


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
    input_spec: dict[str, Any]
    classes: list[str] | None
    # split name -> (raw samples, dataset indices, targets); token models: targets (N, T) per
    # position, IGNORE_INDEX at the padding
    splits: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = field(
        default_factory=dict
    )
    tokens: bool = False  # a token model: outputs (N, T, vocab), one prediction per position
    output_meaning: str = CLASS_SCORES
    batch_form: bool = False  # samples are what the loaders yield: preprocessing stays outside


def _digits(datamodule: DigitsDataModule) -> RawData:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float32)
    labels = digits.target.astype(np.int64)
    splits = {
        name: (images[idx], np.asarray(idx, dtype=np.int64), labels[idx])
        for name, idx in datamodule.split_indices.items()
    }
    return RawData(
        preprocess=Normalize(datamodule.mean, datamodule.std, (1, 8, 8)),
        input_spec={
            "name": "inputs",
            "dtype": "float32",
            "shape": [None, 8, 8],
            "dynamic_axes": {"0": "batch"},
            "range": [0.0, 16.0],
            "description": "8x8 grey digits as sklearn.datasets.load_digits().images",
        },
        classes=[str(i) for i in range(10)],
        splits=splits,
    )


def _cifar10(datamodule: CIFAR10DataModule) -> RawData:
    train, test = datamodule.raw_dataset(train=True), datamodule.raw_dataset(train=False)
    splits = {}
    for name, idx in datamodule.split_indices.items():
        files = test if name == "test" else train
        labels = np.asarray(files.targets, dtype=np.int64)
        splits[name] = (files.data[idx], idx, labels[idx])
    return RawData(
        preprocess=ImageNormalize(datamodule.mean, datamodule.std),
        input_spec={
            "name": "inputs",
            "dtype": "uint8",
            "shape": [None, 32, 32, 3],
            "dynamic_axes": {"0": "batch"},
            "range": [0, 255],
            "description": "32x32 RGB images, uint8 HWC, as torchvision's CIFAR10(...).data",
        },
        classes=list(train.classes),
        splits=splits,
    )


def _synthetic(datamodule: SyntheticDataModule) -> RawData:
    dm = datamodule
    total = dm.num_samples + dm.num_val + dm.num_test
    # The data is a function of the run's config (seed, sizes, noise): generated again, exactly.
    images, labels = make_synthetic(total, dm.num_classes, dm.seed, dm.noise).tensors
    cuts = {"train": (0, dm.num_samples), "val": (dm.num_samples, dm.num_samples + dm.num_val)}
    cuts["test"] = (dm.num_samples + dm.num_val, total)
    if dm.on_device:
        samples = quantize(images).numpy()
        preprocess: nn.Module = ImageNormalize((QUANT_MEAN,) * 3, (QUANT_STD,) * 3)
        spec = {
            "dtype": "uint8",
            "shape": [None, 32, 32, 3],
            "range": [0, 255],
            "description": "synthetic images stored on the device: uint8 HWC, "
            "round(x * 32 + 128) of the float images (data.on_device=true)",
        }
    else:
        samples, preprocess = images.numpy(), nn.Identity()
        spec = {
            "dtype": "float32",
            "shape": [None, 3, 32, 32],
            "range": None,
            "description": "synthetic float images (N, 3, 32, 32) as "
            "trainwell.data.synthetic.make_synthetic generates them; no preprocessing",
        }
    splits = {}
    for name, (start, stop) in cuts.items():
        idx = np.arange(start, stop, dtype=np.int64)
        splits[name] = (samples[idx], idx, labels.numpy()[idx].astype(np.int64))
    return RawData(
        preprocess=preprocess,
        input_spec={"name": "inputs", "dynamic_axes": {"0": "batch"}, **spec},
        classes=[str(i) for i in range(dm.num_classes)],
        splits=splits,
    )


def _sequences(datamodule: SequenceDataModule) -> RawData:
    splits = {}
    for name in ("train", "val", "test"):
        sequences = getattr(datamodule, f"{name}_set").sequences
        # The datamodule's own padding: inputs are a sequence without its last token.
        batch = pad_batch(sequences)
        index = np.arange(len(sequences), dtype=np.int64)
        splits[name] = (batch["tokens"].numpy(), index, batch["targets"].numpy())
    return RawData(
        preprocess=nn.Identity(),
        input_spec={
            "name": "inputs",
            "dtype": "int64",
            "shape": [None, None],
            "dynamic_axes": {"0": "batch", "1": "sequence"},
            "range": [0, datamodule.vocab_size - 1],
            "max_sequence": datamodule.max_len,
            "description": "token ids (N, T) as data=sequences encodes them (0 <pad>, 1 <bos>, "
            f"2 <eos>, 3 <unk>), T <= {datamodule.max_len}, each row starting with <bos>, "
            "right-padded with <pad> where rows differ in length",
        },
        classes=datamodule.token_names(),
        splits=splits,
        tokens=True,
        output_meaning="next-token scores (N, T, vocab) at every position (softmax over the "
        "last axis gives probabilities); a row's next token is read at its last non-<pad> "
        "position",
    )


def sequence_lengths(samples: np.ndarray) -> np.ndarray:
    """Real tokens per row of right-padded token ids: up to the first <pad>."""
    padded = samples == PAD
    return np.where(padded.any(axis=1), padded.argmax(axis=1), samples.shape[1])


HOOK = "raw_form"


def from_hook(datamodule: Any) -> RawData:
    """RawData from `datamodule.raw_form()`, a plain dict (no trainwell import needed):

        {"input": {"dtype": "float32", "shape": [None, 8], "range": None | [low, high],
                   "description": "what a raw sample is"},
         "splits": {"test": (samples, indices, targets or None), ...},   # numpy arrays
         "preprocess": None | nn.Module,   # raw batch -> model input, as evaluation does it
         "classes": None | ["name", ...]}

    The split's samples must be, row for row, the samples its dataloader yields in order.
    """
    name = type(datamodule).__name__
    form = getattr(datamodule, HOOK)()
    if not isinstance(form, dict) or "input" not in form or "splits" not in form:
        raise TrainwellError(
            f"{name}.{HOOK}() must return a dict with 'input' and 'splits' (README: Bring your "
            "own module)"
        )
    spec = dict(form["input"])
    missing = [key for key in ("dtype", "shape", "description") if key not in spec]
    if missing:
        raise TrainwellError(f"{name}.{HOOK}()['input'] lacks {', '.join(missing)}")
    spec.setdefault("range", None)
    spec.setdefault("name", "inputs")
    spec.setdefault("dynamic_axes", {"0": "batch"})
    splits = {
        split: (np.asarray(x), np.asarray(i, dtype=np.int64), None if y is None else np.asarray(y))
        for split, (x, i, y) in form["splits"].items()
    }
    return RawData(
        preprocess=form.get("preprocess") or nn.Identity(),
        input_spec=spec,
        classes=None if form.get("classes") is None else [str(c) for c in form["classes"]],
        splits=splits,
    )


def check_class_scores(outputs: np.ndarray, module: nn.Module) -> None:
    """Predict and export read a classifier's output as class scores, one row per sample."""
    if outputs.ndim != 2:
        raise TrainwellError(
            f"{type(module).__name__}.forward returns shape {list(outputs.shape)}: predict and "
            "export take class scores (N, classes) from forward"
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
        "(README: Bring your own module)"
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
        input_spec={
            "name": "inputs",
            "dtype": samples.dtype.name,
            "shape": [None, *samples.shape[1:]],
            "dynamic_axes": {"0": "batch"},
            "range": None,
            "form": "batch",
            "description": f"the model input as {name}'s loaders yield it (preprocessing "
            "outside the graph)",
        },
        classes=None,
        splits={split: (samples, index, targets)},
        batch_form=True,
    )


def raw_data(datamodule: Any, split: str = "test") -> RawData:
    """The raw form of `datamodule`'s samples and the preprocessing that maps it to model inputs;
    without a raw form, `split`'s batch form."""
    if callable(getattr(datamodule, HOOK, None)):
        return from_hook(datamodule)
    if isinstance(datamodule, DigitsDataModule):
        return _digits(datamodule)
    if isinstance(datamodule, CIFAR10DataModule):
        return _cifar10(datamodule)
    if isinstance(datamodule, SyntheticDataModule):
        return _synthetic(datamodule)
    if isinstance(datamodule, SequenceDataModule):
        return _sequences(datamodule)
    return batch_form(datamodule, split)


NO_RAW_FORM = (
    "{name} has no {hook}(): the graph takes the batch form its loaders yield (input.form: "
    "batch); a {hook}() would put the eval preprocessing inside the graph and let input= and "
    "the server take raw samples"
)
