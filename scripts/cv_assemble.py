"""Join cross-validation folds trained as separate jobs:
`python scripts/cv_assemble.py <sweep dir of -m cv.fold=0,1,... cv.folds=K>`.

Writes <sweep dir>/folds.json, oof_predictions.csv and results.json (`cv`), the same files one
run of every fold writes.
"""

import sys
from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.errors import TrainwellError, first_line

USAGE = "usage: python scripts/cv_assemble.py <dir holding the fold jobs' run dirs>"


def main(argv: list[str]) -> int:
    from trainwell.training.cv.collect import collect

    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(f"error: {USAGE}", file=sys.stderr)
        return 2
    root = Path(argv[0])
    try:
        results = collect(root)
    except TrainwellError as err:
        print(f"error: {first_line(err)}", file=sys.stderr)
        return 2
    cv = results["cv"]
    print(
        f"cv: {cv['folds']} folds, acc mean {cv['mean']['acc']:.4f} +- {cv['std']['acc']:.4f}, "
        f"out-of-fold {cv['oof']['acc']:.4f} over {cv['oof']['samples']} samples"
    )
    print(f"run dir: {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
