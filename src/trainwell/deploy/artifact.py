"""The export directory's contract: which files it holds, and the manifest that vouches for them.

    <run dir>/export/
      model.onnx            ONNX graph over raw samples (opset >= 18, dynamic batch)
      model.pt2             the same program through torch.export
      weights.safetensors   the trained weights, tensors only
      manifest.json         written last: input spec, classes, config, versions, parity, and the
                            sha256 of every file above

A reader trusts a file only after `verify_export`: an export cut short by a crash has no manifest
(it is written last, atomically), and a file changed after export no longer matches its sha256.
Both are refused with one line naming the file, so a server never starts on something export did
not vouch for.

manifest.json (version 1):
    {"format": "trainwell-export", "version": 1,
     "files": {"model.onnx": {"sha256": "...", "bytes": 123}, ...},
     "source_checkpoint": {"path": "...", "sha256": "..."},
     "input": {"name": "inputs", "dtype": "float32", "shape": [null, 8, 8],
               "dynamic_axes": {"0": "batch"}, "range": [0.0, 16.0], "description": "..."},
     "output": {"name": "logits", "meaning": "...", "classes": ["0", ..., "9"] | null},
     "config": {"model": {...}, "data": {...}, "seed": 42},
     "versions": {"torch": "...", "onnx": "...", "onnxruntime": "...", "trainwell": "..."},
     "parity": {...figures measured at export...}}
`shape` uses null for a dynamic axis; `dynamic_axes` names each one by its position ("batch", and
"sequence" for a token model, whose input also has "max_sequence" and "pad", the id that
right-pads its rows); `range` is null where values are unbounded. The server checks requests
with the spec this entry describes (deploy/input_spec.py), as predict checks its `input=` files.
`parity.unit` says what `parity.samples` counts: samples, or a token model's real (unpadded)
tokens.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from trainwell.errors import TrainwellError

FORMAT = "trainwell-export"
VERSION = 1
MANIFEST = "manifest.json"
ONNX, PROGRAM, WEIGHTS = "model.onnx", "model.pt2", "weights.safetensors"
FILES = (ONNX, PROGRAM, WEIGHTS)


class ExportInvalid(TrainwellError):
    """An export directory that is missing, incomplete or changed since export."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_entries(directory: Path, names: tuple[str, ...] = FILES) -> dict[str, dict[str, Any]]:
    """The manifest's `files` section for `names` in `directory`."""
    return {
        name: {"sha256": sha256_file(directory / name), "bytes": (directory / name).stat().st_size}
        for name in names
    }


def read_manifest(directory: Path) -> dict[str, Any]:
    """manifest.json of `directory`, checked for form (not yet against the files)."""
    path = Path(directory) / MANIFEST
    if not Path(directory).is_dir():
        raise ExportInvalid(
            f"export directory not found: {directory}; run python scripts/export.py "
            "ckpt_path=<ckpt>"
        )
    if not path.is_file():
        raise ExportInvalid(
            f"{path} is missing: {directory} is not a complete export (files removed, or a copy "
            "cut short); export it again: python scripts/export.py ckpt_path=<ckpt> overwrite=true"
        )
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ExportInvalid(f"{path} is not readable JSON ({err}); export again") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ExportInvalid(f"{path} is not a trainwell export manifest (format != {FORMAT!r})")
    if manifest.get("version") != VERSION:
        raise ExportInvalid(
            f"{path} has manifest version {manifest.get('version')!r}; this trainwell reads "
            f"version {VERSION}: export again with this version"
        )
    if not isinstance(manifest.get("files"), dict) or not manifest["files"]:
        raise ExportInvalid(f"{path} lists no files; export again")
    return manifest


def verify_export(directory: str | Path) -> dict[str, Any]:
    """The manifest, after every file it lists was found with the sha256 it records.

    Raises ExportInvalid naming the first missing or changed file.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    for name, entry in manifest["files"].items():
        path = directory / name
        if Path(name).name != name:
            raise ExportInvalid(f"{directory / MANIFEST} names a file outside the export: {name}")
        if not path.is_file():
            raise ExportInvalid(f"{path} is missing from the export; export again")
        actual = sha256_file(path)
        if actual != entry.get("sha256"):
            raise ExportInvalid(
                f"{path} does not match its sha256 in {MANIFEST} (changed or damaged after "
                "export); refusing to load it"
            )
    return manifest


def newest_export(log_dir: str | Path) -> Path:
    """The export under `log_dir` whose manifest.json was written last.

    manifest.json is the last file export writes (atomically), so its mtime is when that export
    became complete; an interrupted export has none and is never chosen.
    """
    manifests = sorted(
        Path(log_dir).glob("**/export/manifest.json"), key=lambda p: p.stat().st_mtime
    )
    if not manifests:
        raise TrainwellError(
            f"no export under {log_dir}: run python scripts/export.py ckpt_path=<ckpt> first, or "
            "pass artifact=<export dir>"
        )
    return manifests[-1].parent


def served_export(cfg: Any) -> tuple[Path, dict[str, Any]]:
    """serve.py's `artifact=` (an export dir, or `latest`), verified with its ONNX graph listed.

    Torch-free: the script runs it before Hydra starts the job, so a wrong artifact is one line
    and exit 2 with no run dir left behind, and the job runs it again on the files it serves."""
    source = cfg.get("artifact")
    if not source:
        raise TrainwellError(
            "serve.py needs an export: pass artifact=<run dir>/export (or artifact=latest)"
        )
    export_dir = newest_export(cfg.paths.log_dir) if source == "latest" else Path(str(source))
    manifest = verify_export(export_dir)
    if ONNX not in manifest["files"]:
        raise TrainwellError(f"{export_dir / MANIFEST} lists no {ONNX}")
    return export_dir, manifest
