"""User-facing errors: a mistake the user can fix, reported as one line naming the cause and the fix."""

from __future__ import annotations

import re
import sysconfig
import traceback
from pathlib import Path


class TrainwellError(Exception):
    """Raised for bad input (config, data, checkpoint); the CLI prints it as one line and exits 2."""

    # The word before the line the CLI prints ("error: <cause>").
    label = "error"
    # True on the ranks of a run whose rank 0 prints the same line: they exit 2 without it.
    silent = False


def first_line(err: BaseException) -> str:
    """The first line of `err`'s message, for a one-line report (a multi-line message would
    bury the cause); an exception without a message gives its type's name. A first line that
    ends in ':' announces its cause on the next line (torch's "Error(s) in loading state_dict for
    X:"), which follows it, or the report would name the wrapper and not what went wrong."""
    text = str(err).strip()
    if not text:
        return type(err).__name__
    first, *rest = text.splitlines()
    cause = next((line.strip() for line in rest if line.strip()), "")
    return f"{first} {cause}" if first.endswith(":") and cause else first


def error_line(err: BaseException) -> str:
    """`ValueError: <first line of its message>`, as a traceback's last line reads; just
    `ValueError` when it has no message. A first line that ends in ':' is followed by its cause:
    the chained exception's own line where there is one (Hydra's "Error in call to target
    'X':"), else the message's next line (first_line)."""
    text = str(err).strip()
    if not text:
        return type(err).__name__
    line = f"{type(err).__name__}: {text.splitlines()[0]}"
    if line.endswith(":") and err.__cause__ is not None:
        return f"{line} {error_line(err.__cause__)}"
    return f"{type(err).__name__}: {first_line(err)}"


def missing_module_line(err: BaseException) -> str | None:
    """A module missing from what a `_target_`'s import runs (a deleted example a kept file still
    imports, a library not installed), found in `err`'s cause chain: "cannot import <target>:
    <file>:<line> imports <module>, which cannot be found (...)". None without one."""
    seen: BaseException | None = err
    target = None
    while seen is not None:
        if target is None:  # Hydra's wrappers name the target
            found = re.search(r"(?:locating target|Error loading) '([^']+)'", str(seen))
            target = found.group(1) if found else None
        if isinstance(seen, ModuleNotFoundError) and seen.name:
            frames = [
                frame
                for frame in traceback.extract_tb(seen.__traceback__)
                if frame.filename.endswith(".py") and not _installed(frame.filename)
            ]
            where = f"{frames[-1].filename}:{frames[-1].lineno} imports " if frames else ""
            what = f"cannot import {target}: " if target else ""
            return (
                f"{what}{where}{seen.name}, which cannot be found (No module named {seen.name!r})"
            )
        seen = seen.__cause__ or seen.__context__
    return None


def _installed(filename: str) -> bool:
    """A file of Python itself or of an installed library, not of the project."""
    path = Path(filename).resolve()
    roots = {sysconfig.get_path(key) for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    return any(root and path.is_relative_to(Path(root).resolve()) for root in roots)
