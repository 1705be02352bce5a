"""`input=` files for predict, read in the raw form a datamodule declares (deploy/raw.py): a .npy
array of that form, or for uint8 image data a PNG file or a folder of PNGs (sorted by name; a
sample's index is its place in that order). A file of the wrong shape, dtype or range is refused
in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from trainwell.errors import TrainwellError


def _png_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".png")
        if not files:
            raise TrainwellError(f"input={path}: the folder holds no .png files")
        return files
    return [path]


def _read_pngs(path: Path, spec: dict[str, Any]) -> np.ndarray:
    from PIL import Image

    height, width, channels = spec["shape"][1:]
    images = []
    for file in _png_files(path):
        with Image.open(file) as image:
            # No silent conversion: a grey or RGBA image is not what the model was trained on.
            if image.mode != "RGB" or image.size != (width, height) or channels != 3:
                raise TrainwellError(
                    f"input={file}: expected a {width}x{height} RGB PNG, got {image.size[0]}x"
                    f"{image.size[1]} {image.mode}"
                )
            images.append(np.asarray(image, dtype=np.uint8))
    return np.stack(images)


def load_raw_input(source: str | Path, spec: dict[str, Any]) -> np.ndarray:
    """Samples in `source` (.npy, or PNG file/folder for uint8 images) checked against `spec`."""
    path = Path(str(source))
    if not path.exists():
        raise TrainwellError(f"input={source}: no such file or folder")
    image_data = spec["dtype"] == "uint8" and len(spec["shape"]) == 4
    if path.is_dir() or path.suffix.lower() == ".png":
        if not image_data:
            raise TrainwellError(
                f"input={source}: PNG input is for uint8 image data; this model takes "
                f"{spec['dtype']} {spec['shape']}: pass a .npy file"
            )
        return _read_pngs(path, spec)
    if path.suffix != ".npy":
        raise TrainwellError(f"input={source}: pass a .npy file" + (" or PNGs" * image_data))
    samples = np.load(path, allow_pickle=False)
    fixed = [(axis, size) for axis, size in enumerate(spec["shape"]) if size is not None]
    if samples.ndim != len(spec["shape"]) or any(samples.shape[a] != s for a, s in fixed):
        want = ["N" if s is None else s for s in spec["shape"]]
        raise TrainwellError(
            f"input={source}: samples have shape {list(samples.shape)}, expected {want} "
            f"({spec['description']})"
        )
    dtype = np.dtype(spec["dtype"])
    if np.issubdtype(dtype, np.integer) and not np.issubdtype(samples.dtype, np.integer):
        raise TrainwellError(
            f"input={source}: samples are {samples.dtype}, expected integers ({spec['dtype']})"
        )
    if np.issubdtype(samples.dtype, np.floating) and not np.isfinite(samples).all():
        raise TrainwellError(f"input={source}: samples contain NaN or infinity")
    longest = spec.get("max_sequence")
    if longest is not None and not 1 <= samples.shape[1] <= longest:
        raise TrainwellError(
            f"input={source}: rows of {samples.shape[1]} tokens; the model takes 1 to {longest}"
        )
    low, high = spec["range"] or (-np.inf, np.inf)
    if samples.size and (samples.min() < low or samples.max() > high):
        raise TrainwellError(
            f"input={source}: values lie in [{samples.min()}, {samples.max()}], expected "
            f"[{low}, {high}] ({spec['description']})"
        )
    return samples.astype(dtype)
