"""A checkpoint's hyper-parameters as plain data, so every checkpoint loads with weights_only=True.

`save_hyperparameters()` records a module's init arguments as they are: an `nn.Module` net, the
optimizer / scheduler partials Hydra builds, omegaconf `ListConfig` / `DictConfig` values. Lightning
pickles them into the checkpoint, and a weights-only load (the only kind trainwell does) refuses
the file: the run would train for hours and then fail to test, resume or evaluate its own
checkpoints. trainwell rebuilds the module from the run's config and never from these objects, so
a checkpoint keeps a readable record instead: the object's config node when the run's config has
one (`model.net`, `model.optimizer`), else a short description (`"<nn.Module MyNet>"`);
omegaconf containers become plain dicts and lists. Weights and every other state are untouched.

`python -m trainwell.io.hparams IN.ckpt OUT.ckpt` converts a checkpoint written elsewhere, whose
hparams hold objects (it unpickles IN, so only for a file you trust).
"""

from __future__ import annotations

import argparse
import enum
import functools
import inspect
import sys
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule, LightningModule
from omegaconf import Container, OmegaConf
from torch import nn

from trainwell.errors import first_line
from trainwell.io.checkpoint_read import found_in
from trainwell.io.checkpoint_state import (
    PLAIN_LEAVES,
    UnsavableStateError,
    decode_state,
    encode_state,
    numpy_allowed,
    plain_member,
)

# (checkpoint key holding the hparams, key holding their type, config section they came from)
SECTIONS = (
    (
        LightningModule.CHECKPOINT_HYPER_PARAMS_KEY,
        LightningModule.CHECKPOINT_HYPER_PARAMS_TYPE,
        "model",
    ),
    (
        LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY,
        LightningDataModule.CHECKPOINT_HYPER_PARAMS_TYPE,
        "data",
    ),
)
_MAX_DESCRIPTION = 160


def plain_checkpoint(
    checkpoint: dict[str, Any], config: Mapping[str, Any] | None = None, encode: bool = True
) -> tuple[dict[str, Any], list[str]]:
    """(the checkpoint as plain data, one "name -> what it became" entry per hparams conversion).

    Every checkpoint trainwell writes passes here. Objects among the hparams become their config
    nodes or descriptions; then, with `encode`, numpy values anywhere in the checkpoint become
    weights-only data (io/checkpoint_state.py; every read decodes them), and a value that only
    pickled code could save raises UnsavableStateError naming its key.

    `config`: the run's resolved config as plain containers (`{"model": {...}, "data": {...}}`);
    an object whose key has a node there is replaced by that node. The checkpoint is copied at
    the top level, never changed in place: for an omegaconf `hparams` Lightning puts the module's
    own container in it.
    """
    out = dict(checkpoint)
    converted: list[str] = []
    for key, type_key, section in SECTIONS:
        # Lightning stores `type(hparams)` (DictConfig: a class) next to omegaconf hparams;
        # without it load_from_checkpoint hands the module a plain dict.
        out.pop(type_key, None)
        if key not in out:
            continue
        node = (config or {}).get(section)
        if isinstance(out[key], Container):
            converted.append(f"{key} ({type(out[key]).__name__} -> dict)")
        prefix = "" if section == "model" else "datamodule."
        out[key] = _plain(out[key], node, prefix, converted, top=True)
    return (encode_state(out) if encode else out), converted


def _plain(value: Any, node: Any, path: str, converted: list[str], top: bool = False) -> Any:
    kind = type(value)
    if kind in PLAIN_LEAVES or isinstance(value, (torch.Tensor, np.ndarray, np.generic)):
        return value  # numpy values are state: encode_state keeps or refuses them
    if isinstance(value, Container):
        if not top:
            converted.append(f"{path} ({kind.__name__} -> {_container_kind(value)})")
        return _plain(_to_container(value), node, path, converted, top=True)
    if isinstance(value, Mapping):
        children = {
            k: _plain(v, _child(node, k), f"{path}{_join(path)}{k}", converted)
            for k, v in value.items()
        }
        return OrderedDict(children) if kind is OrderedDict else dict(children)
    if kind in (list, tuple):
        items = [_plain(v, _child(node, i), f"{path}[{i}]", converted) for i, v in enumerate(value)]
        return items if kind is list else tuple(items)
    if kind in (set, frozenset) and all(plain_member(v) for v in value):
        return value  # encode_state saves it, read back as the same set
    if isinstance(value, (set, frozenset)):
        converted.append(f"{path} (set -> list)")
        return sorted((_plain(v, None, path, []) for v in value), key=repr)
    if isinstance(value, PurePath):
        converted.append(f"{path} (path -> str)")
        return str(value)
    if isinstance(value, enum.Enum):
        converted.append(f"{path} (enum -> str)")
        return f"{kind.__qualname__}.{value.name}"
    if isinstance(node, (Mapping, list)):
        converted.append(f"{path} (-> its config)")
        return node
    text = describe(value)
    converted.append(f"{path} (-> {text!r})")
    return text


def describe(value: Any) -> str:
    """A short string naming an object: `<nn.Module MyNet>`, `<partial torch.optim.adam.Adam(lr=0.001)>`."""
    if callable(value):
        # A wrapper that names what it wraps (`__wrapped__`: the training plan's factories,
        # functools.wraps) is described as the wrapped object.
        value = inspect.unwrap(value)
    if isinstance(value, nn.Module):
        text = f"<nn.Module {type(value).__name__}>"
    elif isinstance(value, functools.partial):
        args = [_short(a) for a in value.args]
        args += [f"{k}={_short(v)}" for k, v in value.keywords.items()]
        text = f"<partial {_qualname(value.func)}({', '.join(args)})>"
    elif inspect.isclass(value):
        text = f"<class {_qualname(value)}>"
    elif callable(value) and hasattr(value, "__qualname__"):
        text = f"<function {_qualname(value)}>"
    else:
        text = f"<{_qualname(type(value))} object>"
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 4] + "...>"


def _short(value: Any) -> str:
    return repr(value) if type(value) in PLAIN_LEAVES else describe(value)


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{name}" if module and module != "builtins" else name


def _container_kind(value: Container) -> str:
    return "list" if OmegaConf.is_list(value) else "dict"


def _to_container(value: Container) -> Any:
    try:
        return OmegaConf.to_container(value, resolve=True)
    except Exception:  # an interpolation that cannot resolve outside its run: keep it as text
        return OmegaConf.to_container(value, resolve=False)


def _child(node: Any, key: Any) -> Any:
    if isinstance(node, Mapping):
        return node.get(key)
    if isinstance(node, list) and isinstance(key, int) and key < len(node):
        return node[key]
    return None


def _join(path: str) -> str:
    return "." if path and not path.endswith(".") else ""


HELP = """Re-save a checkpoint that a weights_only=True load refuses: objects in its hparams (a net,
an optimizer partial, an omegaconf container) become plain data as trainwell writes them; numpy
arrays and scalars anywhere in it (a datamodule's statistics) stay as they are (trainwell reads
them with numpy's arrays and scalars allowed).

This converter UNPICKLES its input (torch.load with weights_only=False): a pickle can run any code,
so run it only on files you trust."""


def _fail(line: str) -> int:
    print(f"error: {line}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainwell.io.hparams",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", metavar="IN.ckpt", help="the checkpoint to convert (trusted)")
    parser.add_argument("target", metavar="OUT.ckpt", help="where to write the plain copy")
    args = parser.parse_args(argv)
    source, target = Path(args.source), Path(args.target)
    if not source.is_file():
        return _fail(f"checkpoint not found: {source}")
    # The one weights_only=False load in trainwell: the user asked to convert a file they trust.
    try:
        checkpoint = torch.load(source, map_location="cpu", weights_only=False)
    except Exception as err:  # garbage, a cut-short file, a pickle naming code that is gone
        return _fail(
            f"{source} is not a readable checkpoint ({found_in(source)}; {first_line(err)[:160]})"
        )
    if not isinstance(checkpoint, dict):
        return _fail(
            f"{source} is not a readable checkpoint (it holds a {type(checkpoint).__name__}, not a dict)"
        )
    # A checkpoint trainwell wrote may hold values saved as data (io/checkpoint_state.py): read
    # them as values first, so that they are encoded once.
    checkpoint = decode_state(checkpoint)
    try:
        plain, converted = plain_checkpoint(checkpoint, encode=False)
        encoded = encode_state(plain)
    except UnsavableStateError as err:
        return _fail(f"{source} cannot be re-saved as plain data: {err}")
    torch.save(encoded, target)
    try:
        with numpy_allowed():
            torch.load(target, map_location="cpu", weights_only=True)
    except Exception as err:
        print(
            f"error: {target} still holds pickled objects ({err!s:.200}); "
            "save only what you need, e.g. torch.save({'state_dict': ckpt['state_dict']}, path)",
            file=sys.stderr,
        )
        return 1
    done = [f"hparams made plain ({', '.join(converted) or 'nothing to convert'})"]
    print(f"wrote {target}: {'; '.join(done)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
