"""`make doctor` wall time on the default experiment: this checkout against a baseline commit.

    .venv/bin/python benchmarks/doctor_time.py                     # baseline: merge-base with main
    .venv/bin/python benchmarks/doctor_time.py --baseline HEAD~3 --reps 3
    .venv/bin/python benchmarks/doctor_time.py experiment=lm_accum   # overrides for both sides

Runs the real `scripts/doctor.py` (what `make doctor` runs) in a subprocess, once per side per
repetition, the order rotating: `before` imports trainwell from the baseline commit's `src/`
(exported to a temporary directory with `git archive`), `after` from this checkout's `src/`.
Everything else (scripts, configs, interpreter, threads) is the same, so the difference is the
doctor's own code. The budget: under 60 s on this machine's CPU.

Last line: `before_s=.. after_s=.. ratio=..`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO, child_env, figure, final_line, interleaved, parse_args


def title(args: argparse.Namespace) -> str:
    on = " ".join(args.overrides) or "the default experiment"
    return f"doctor time: scripts/doctor.py on {on}, baseline vs this checkout"


def export_src(ref: str, into: Path) -> Path:
    """The baseline's `src/` tree, unpacked from git (no checkout of the working tree)."""
    archive = subprocess.run(
        ["git", "archive", ref, "src"], cwd=REPO, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def run_doctor(src: Path, threads: int, run_dir: Path, overrides: list[str]) -> float:
    env = child_env(threads)
    env["PYTHONPATH"] = f"{src}:{env['PYTHONPATH']}"
    script = str(REPO / "scripts" / "doctor.py")
    cmd = [sys.executable, script, f"hydra.run.dir={run_dir}", *overrides]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1: a check failed, still a full doctor run
        raise RuntimeError(f"doctor.py exited {proc.returncode}:\n{proc.stdout[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default=None, help="git ref (default: merge-base with main)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, the same for both sides")
    args = parse_args(parser, argv, title, threads=0)
    ref = (
        args.baseline
        or subprocess.run(
            ["git", "merge-base", "HEAD", "main"],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    print(f"baseline: {ref}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "base").mkdir()
        before_src = export_src(ref, root / "base")
        runs = iter(range(10**6))
        sides = {
            "before": lambda: run_doctor(
                before_src, args.threads, root / f"r{next(runs)}", args.overrides
            ),
            "after": lambda: run_doctor(
                REPO / "src", args.threads, root / f"r{next(runs)}", args.overrides
            ),
        }
        times = interleaved(sides, args.reps)
    figures: dict[str, float | int | str] = {}
    before = figure(figures, "before_s", times["before"], "doctor, baseline", " s")
    after = figure(figures, "after_s", times["after"], "doctor, this checkout", " s")
    final_line(before_s=before, after_s=after, ratio=after / before)


if __name__ == "__main__":
    main()
