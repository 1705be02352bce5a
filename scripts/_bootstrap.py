"""Run by every script before it imports trainwell (`import _bootstrap  # noqa: F401`).

A script's own folder is on the import path, so this module is found; it then puts

- the project root on the path, so that a `_target_` naming your own package at the root of the
  clone (`myproject.lit.MyModule`) imports without setting PYTHONPATH, and
- `src/` of this checkout, so that a script runs the code next to it (a second clone, or a renamed
  copy, never imports another checkout's trainwell through an editable install).

Started by an interpreter without the project's dependencies (a system python instead of the
virtual environment), it prints one line saying how to fix that and exits 2, instead of a traceback
ending in ModuleNotFoundError.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

for entry in (ROOT / "src", ROOT):
    if str(entry) not in sys.path:
        sys.path.insert(1, str(entry))  # after the script's own folder, before site-packages

try:
    import trainwell.cli  # noqa: F401  (the scripts' shared entry and its dependencies)
except ModuleNotFoundError as missing:
    sys.stderr.write(
        f"error: this python ({sys.executable}) cannot import {missing.name!r}: run `make train` "
        f"once to set up .venv, then use .venv/bin/python (or `source .venv/bin/activate`)\n"
    )
    raise SystemExit(2) from None
