"""Reading predict's `input=` files: a .npy array, or for uint8 image data a PNG file or a folder of
PNGs (sorted by name; a sample's index is its place in that order). Reading only: what the values
must be is the input spec's to check (deploy/input_spec.py), as for the server's requests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainwell.deploy.input_spec import InputSpec
from trainwell.errors import TrainwellError


def _png_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".png")
        if not files:
            raise TrainwellError(f"input={path}: the folder holds no .png files")
        return files
    return [path]


def _read_pngs(path: Path, spec: InputSpec) -> np.ndarray:
    from PIL import Image

    height, width, channels = spec.shape[1:]
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


def read_raw_input(source: str | Path, spec: InputSpec) -> np.ndarray:
    """The samples in `source` (.npy, or PNG file/folder for uint8 images), as stored."""
    path = Path(str(source))
    if not path.exists():
        raise TrainwellError(f"input={source}: no such file or folder")
    image_data = spec.dtype == "uint8" and spec.ndim == 4
    if path.is_dir() or path.suffix.lower() == ".png":
        if not image_data:
            raise TrainwellError(
                f"input={source}: PNG input is for uint8 image data; this model takes "
                f"{spec.dtype} {list(spec.shape)}: pass a .npy file"
            )
        return _read_pngs(path, spec)
    if path.suffix != ".npy":
        raise TrainwellError(f"input={source}: pass a .npy file" + (" or PNGs" * image_data))
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise TrainwellError(f"input={source}: not a readable .npy array ({err})") from None
