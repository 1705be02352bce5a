"""Read back what an offline wandb run wrote: the records of its `run-<id>.wandb` file.

The file is wandb's append-only log (what `wandb sync` uploads): a 7-byte header (":W&B", magic
0xBEE1, version), then 32 KiB blocks of records, each a 7-byte header (crc32, uint16 length,
uint8 type: 1 full, 2 first, 3 middle, 4 last fragment) and a protobuf `Record`.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_BLOCK = 32768
_HEADER = 7


def _payloads(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb run file"
    pos, pending = _HEADER, b""
    while pos + _HEADER <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < _HEADER:  # the writer pads a block's tail that cannot hold a header
            pos += room
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if kind == 0:
            pos += room
            continue
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == checksum, f"corrupt record in {path}"
        pos += _HEADER + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        else:
            yield pending + chunk
            pending = b""


@dataclass
class OfflineRun:
    run_id: str = ""
    group: str = ""
    name: str = ""
    project: str = ""
    history: list[dict[str, object]] = field(default_factory=list)
    exit_code: int | None = None


def read_offline_run(run_file: Path) -> OfflineRun:
    # Imported here: importing wandb takes seconds, which every pytest worker would otherwise pay
    # while collecting, run it or not.
    from wandb.proto import wandb_internal_pb2 as pb

    run = OfflineRun()
    for payload in _payloads(run_file):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.group = record.run.run_id, record.run.run_group
            run.name, run.project = record.run.display_name, record.run.project
        elif kind == "history":
            run.history.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def offline_runs(run_dir: Path) -> list[Path]:
    """The offline run files a run dir holds (one per wandb run)."""
    return sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))


def last_logged(run: OfflineRun, key: str) -> object:
    values = [row[key] for row in run.history if key in row]
    assert values, f"{key} never logged to wandb run {run.run_id}"
    return values[-1]
