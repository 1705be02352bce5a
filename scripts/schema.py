"""Write a JSON Schema per config group for your editor: `python scripts/schema.py` (`make schema`).

Reads conf/ and any further config dirs given (a `hydra.searchpath` dir of your own), writes
.schemas/<group>.schema.json and points .vscode/settings.json's `yaml.schemas` at them (the Red Hat
YAML extension: completion, defaults and docstrings on hover, unknown keys underlined). Run it again
after adding a class or a config group.
"""

import sys
from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.schemas import editor_settings, file_globs, write

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    confs = [ROOT / "conf", *(Path(a) for a in argv)]
    missing = [str(c) for c in confs if not c.is_dir()]
    if missing:
        print(f"error: not a config dir: {', '.join(missing)}", file=sys.stderr)
        return 2
    written = write(confs, ROOT / ".schemas")
    settings = ROOT / ".vscode" / "settings.json"
    print(f"{len(written)} schemas in {ROOT / '.schemas'}")
    if not editor_settings(settings, file_globs(confs, ROOT)):
        print(f"{settings} is not plain JSON: map each group's files in `yaml.schemas` yourself")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
