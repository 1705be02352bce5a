"""The export directory's contract: a reader accepts only what the manifest vouches for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainwell.deploy.artifact import (
    FILES,
    FORMAT,
    MANIFEST,
    VERSION,
    ExportInvalid,
    file_entries,
    verify_export,
)
from trainwell.io.results import write_results

pytestmark = pytest.mark.engine  # needs nothing of the examples


def _export(directory: Path) -> Path:
    directory.mkdir()
    for i, name in enumerate(FILES):
        (directory / name).write_bytes(bytes([i]) * (100 + i))
    manifest = {"format": FORMAT, "version": VERSION, "files": file_entries(directory)}
    write_results(directory / MANIFEST, manifest)
    return directory


def test_a_complete_export_verifies(tmp_path: Path) -> None:
    manifest = verify_export(_export(tmp_path / "export"))
    assert set(manifest["files"]) == set(FILES)


def test_a_changed_byte_is_refused_naming_the_file(tmp_path: Path) -> None:
    export = _export(tmp_path / "export")
    data = bytearray((export / FILES[0]).read_bytes())
    data[10] ^= 1
    (export / FILES[0]).write_bytes(bytes(data))
    with pytest.raises(ExportInvalid, match=rf"{FILES[0]} does not match its sha256"):
        verify_export(export)


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    export = _export(tmp_path / "export")
    (export / FILES[1]).unlink()
    with pytest.raises(ExportInvalid, match=rf"{FILES[1]} is missing"):
        verify_export(export)


def test_an_export_without_its_manifest_is_incomplete(tmp_path: Path) -> None:
    export = _export(tmp_path / "export")
    (export / MANIFEST).unlink()
    with pytest.raises(ExportInvalid, match="not a complete export"):
        verify_export(export)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(format="other"), "not a trainwell export manifest"),
        (lambda m: m.update(version=99), "manifest version 99"),
        (lambda m: m["files"].update({"../outside.bin": {"sha256": "0"}}), "outside the export"),
    ],
)
def test_a_manifest_of_another_form_is_refused(tmp_path: Path, edit, message: str) -> None:
    export = _export(tmp_path / "export")
    manifest = json.loads((export / MANIFEST).read_text())
    edit(manifest)
    (export / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ExportInvalid, match=message):
        verify_export(export)
