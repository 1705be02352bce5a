"""Plain training vs the two compensations on imbalanced digits (classes 5-9 cut to 10% of their
training samples; validation and test untouched): accuracy, balanced accuracy, worst-class recall
and wall time of one train.py run each, side by side.

    .venv/bin/python benchmarks/imbalance.py [--epochs N] [extra train.py overrides]

Last line: `<side>_acc=... <side>_balanced_acc=... <side>_worst_recall=... <side>_wall_s=...`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import final_line

REPO = Path(__file__).resolve().parents[1]
SIDES = {
    "plain": [],
    "weighted_sampler": ["data.sampler=weighted"],
    "class_weights": ["model.loss.class_weights=balanced"],
}
QUIET = [
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
]


def run(side: str, overrides: list[str], out: Path) -> dict[str, float]:
    run_dir = out / side
    command = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "experiment=digits_imbalanced",
        *QUIET,
        *SIDES[side],
        *overrides,
        f"hydra.run.dir={run_dir}",
    ]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{side} run failed: {proc.stderr.strip().splitlines()[-1:]}")
    metrics = json.loads((run_dir / "results.json").read_text())["metrics"]
    recalls = [v for k, v in metrics.items() if k.startswith("test/recall/")]
    return {
        "acc": metrics["test/acc"],
        "balanced_acc": metrics["test/balanced_acc"],
        "worst_recall": min(recalls),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="trainer.max_epochs")
    args, extra = parser.parse_known_args()
    overrides = [*extra, *([f"trainer.max_epochs={args.epochs}"] if args.epochs else [])]
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="imbalance-") as tmp:
        print(f"{'side':<18} {'test acc':>9} {'balanced':>9} {'worst rec':>9} {'wall s':>7}")
        for side in SIDES:
            got = run(side, overrides, Path(tmp))
            print(
                f"{side:<18} {got['acc']:>9.4f} {got['balanced_acc']:>9.4f} "
                f"{got['worst_recall']:>9.4f} {got['wall_s']:>7.1f}",
                flush=True,
            )
            figures.update({f"{side}_{k}": v for k, v in got.items()})
    final_line(**figures)


if __name__ == "__main__":
    main()
