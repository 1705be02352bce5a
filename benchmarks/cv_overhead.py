"""Cross-validation's fixed cost per fold: `cv.folds=K` vs the same K fold runs started by hand.

    .venv/bin/python benchmarks/cv_overhead.py                 # digits, 5 folds, 1 epoch, 3 reps
    .venv/bin/python benchmarks/cv_overhead.py --folds 3 --reps 1 --epochs 1

Both sides train the same K folds (the same indices, config and seed) through
`training.run.train`; the CV side adds what cross-validation does beyond K runs: the fold
assignment and folds.json, the leak probe (three datamodule setups), each fold's out-of-fold
predictions and the assembly of oof_predictions.csv and results.json. Fixed cost per fold =
(CV wall time - K fold runs' wall time) / K. Sides alternate (interleaved) so the machine's
load hits both alike.

Last line: `folds=K cv_s=.. runs_s=.. ratio=.. overhead_per_fold_s=.. probe_s=.. oof_per_fold_s=..`
(the last two: the fixed cost's parts timed alone).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from operator import methodcaller
from pathlib import Path

from harness import compose, final_line, interleaved, parse_args, summary

QUIET = [
    "print_config=false",
    "logger=[]",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
    "trainer.num_sanity_val_steps=0",
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3)
    args = parse_args(parser, argv, lambda a: f"cv overhead: digits, {a.folds} folds")

    from trainwell.cli import run_training
    from trainwell.training.cv.data_hook import refuse_leaks
    from trainwell.training.cv.oof import write_fold_predictions
    from trainwell.training.cv.run import fold_config, plan_folds
    from trainwell.training.run import train

    overrides = [f"cv.folds={args.folds}", f"trainer.max_epochs={args.epochs}", *QUIET]
    root = Path(tempfile.mkdtemp(prefix="cv_overhead-"))

    def fresh(name: str) -> Path:
        path = root / name
        shutil.rmtree(path, ignore_errors=True)
        return path

    def cv() -> float:
        run_dir = fresh("cv")
        start = time.perf_counter()
        run_training(compose(overrides, run_dir))
        return time.perf_counter() - start

    def runs() -> float:
        run_dir = fresh("runs")
        cfg = compose(overrides, run_dir)
        folds = plan_folds(cfg)  # outside the timing: the CV side pays for it
        start = time.perf_counter()
        for k in range(args.folds):
            on_fold = methodcaller("set_cv_fold", folds.train_of(k), folds.val_of(k))
            train(fold_config(cfg, run_dir, k), prepare_data=on_fold)
        return time.perf_counter() - start

    def parts() -> tuple[float, float]:
        """(fold assignment + leak probe, one fold's out-of-fold predictions) in seconds, timed
        alone on the finished CV run: the named parts of the fixed cost."""
        run_dir = root / "cv"
        cfg = compose(overrides, run_dir)
        start = time.perf_counter()
        folds = plan_folds(cfg)
        refuse_leaks(cfg.data, folds.train_of(0), folds.val_of(0))
        planned = time.perf_counter() - start
        fold_cfg = fold_config(cfg, run_dir, 0)
        best = str(run_dir / "fold_0" / "checkpoints" / "best.ckpt")
        start = time.perf_counter()
        write_fold_predictions(fold_cfg, folds, 0, best)
        return planned, time.perf_counter() - start

    try:
        cv(), runs()  # warm-up: imports, first-call costs
        times = interleaved({"cv": cv, "runs": runs}, args.reps)
        named = [parts() for _ in range(args.reps)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    c, r = summary(times["cv"]), summary(times["runs"])
    per_fold = [(a - b) / args.folds for a, b in zip(times["cv"], times["runs"], strict=True)]
    o = summary(per_fold)
    print(f"cv.folds={args.folds}:      {c['median']:.2f} s (spread {c['spread']:.1%})")
    print(f"{args.folds} fold runs:      {r['median']:.2f} s (spread {r['spread']:.1%})")
    print(f"fixed cost per fold: {o['median']:.3f} s (min {o['min']:.3f}, max {o['max']:.3f})")
    plan_s = summary([p for p, _ in named])["median"]
    predict_s = summary([q for _, q in named])["median"]
    print(f"  of which, once per run: folds + leak probe {plan_s:.3f} s")
    print(f"  of which, per fold: out-of-fold predictions {predict_s:.3f} s")
    final_line(
        folds=args.folds,
        cv_s=c["median"],
        runs_s=r["median"],
        ratio=c["median"] / r["median"],
        overhead_per_fold_s=o["median"],
        probe_s=plan_s,
        oof_per_fold_s=predict_s,
    )


if __name__ == "__main__":
    main()
