"""Join cross-validation folds trained as separate jobs:
`python scripts/cv_assemble.py <sweep dir of -m cv.fold=0,1,... cv.folds=K>`.

Writes <sweep dir>/folds.json, oof_predictions.csv, results.json (`cv`) and the folds' summary
(summary.json, summary.md, summary.png), the same files one run of every fold writes.
"""

import sys
from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.errors import TrainwellError, first_line

USAGE = "usage: python scripts/cv_assemble.py <dir holding the fold jobs' run dirs>"


def main(argv: list[str]) -> int:
    from trainwell.training.cv.collect import collect
    from trainwell.training.cv.oof import cv_line

    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(f"error: {USAGE}", file=sys.stderr)
        return 2
    root = Path(argv[0])
    try:
        results = collect(root)
    except TrainwellError as err:
        print(f"error: {first_line(err)}", file=sys.stderr)
        return 2
    print(cv_line(results["cv"]))
    print(f"run dir: {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
