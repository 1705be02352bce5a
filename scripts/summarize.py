"""Rebuild a multirun's summary from its jobs' files:
`python scripts/summarize.py <multirun dir> [summary.pool=[seed,data.seed]] [summary.metric=<name>]
[summary.mode=min|max]`.

Writes <dir>/summary.json, summary.md and summary.png, as the sweep writes them when its jobs
end: for SLURM array jobs, several launches into one dir, a copied dir, or other grouping. Prints
the table, then every job without results and every job the sweep's overrides give that is not
there, each with its cause. A cross-validation run dir gets its folds' summary.
"""

import json
import sys
from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.errors import TrainwellError, first_line

USAGE = (
    "usage: python scripts/summarize.py <multirun dir> [summary.pool=[...]] [summary.metric=<name>]"
)


def main(argv: list[str]) -> int:
    from trainwell.summary.render import rows
    from trainwell.summary.write import JSON_NAME, rebuild

    if not argv or not Path(argv[0]).is_dir():
        print(f"error: {USAGE}", file=sys.stderr)
        return 2
    root = Path(argv[0])
    try:
        path = rebuild(root, argv[1:])
    except TrainwellError as err:
        print(f"error: {first_line(err)}", file=sys.stderr)
        return 2
    summary = json.loads((root / JSON_NAME).read_text())
    header, body = rows(summary)
    for cells in [header, *body]:
        print(" | ".join(cells))
    for title, listed in (("without results", summary["failed"]), ("missing", summary["missing"])):
        for job in listed:
            print(f"{title}: job {job['job']} ({' '.join(job['overrides'])}): {job['cause']}")
    print(f"summary: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
