"""`make mutants`: plant each curated bug of tests/mutation/mutants.py, one at a time, in a copy of
the repository, and run the tests that exist to catch it.

A guarantee is protected only if breaking it makes a test fail. Each mutant is applied to a
private copy (src/, tests/, conf/, scripts/, ...), never to the checkout, and pytest runs there
with the copy's src/ first on PYTHONPATH: the editable install in .venv would otherwise import the
unmutated checkout and every mutant would "escape". Each run is a fork of a warm interpreter
per copy (tests/helpers/forkserver.py: torch and Lightning imported once, the copy's own code
in the fork).
The smoke mutants, run first, prove the copy is what gets imported (in the pytest process and in
a script it starts). A test that already fails would "catch" every mutant, so each test that
caught one (pytest's first failure under -x) runs once more, afterwards, on the unmutated copy:
a mutant counts as caught only by a test that passes without it. (Re-running only the catching
tests, not every listed one up front, keeps that guarantee at a fraction of the time; a test that
passed in the checkout's own pytest runs on this exact tree, `make test` before `make mutants`,
is not run again: tests/helpers/passed_runs.py.) Outcomes:

caught   a listed test failed, and passes on the unmutated copy
escaped  every listed test passed: the guarantee is unprotected (exit 1)
stale    the mutant's original text is not (exactly once) in the file, even reformatted: the code
         moved on and the mutant must be updated, never silently skipped (exit 1)
error    the tests could not run, or the one that failed fails without the mutant too (exit 1)

Usage: python tests/mutation/run.py [-j 2] [-k substring] [--path src/x] [--list] [--stale]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))
from mutants import MUTANTS, SMOKES, Mutant

from tests.helpers.forkserver import WarmInterpreter
from tests.helpers.passed_runs import NO_RECORD_ENV, TREE_DIRS, TREE_FILES, passed_here

REPO = Path(__file__).resolve().parents[2]
# What the tests read: code, tests, configs, scripts, notebooks, docs and project metadata (the
# files whose digest names the tree a test run passed on).
COPIED, COPIED_FILES = TREE_DIRS, TREE_FILES
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "logs", "*.egg-info")
PER_MUTANT_TIMEOUT_S = 300
BASELINE_TIMEOUT_S = 1200  # every catching test, unmutated, in two halves


def make_copy(root: Path) -> Path:
    for name in COPIED:
        if (REPO / name).exists():
            shutil.copytree(REPO / name, root / name, ignore=SKIP)
    for name in COPIED_FILES:
        if (REPO / name).exists():
            shutil.copy2(REPO / name, root / name)
    return root


def pattern(old: str) -> re.Pattern[str]:
    """`old` as a formatter may have rewritten it: any run of whitespace (a line break and its
    indent included) may be any other, and a closing bracket may follow a magic trailing comma.
    A mutant names code by its tokens, so reformatting the file never makes it stale."""
    tokens = re.findall(r"\w+|[^\w\s]", old)
    closing = (")", "]", "}")
    after = [*tokens[1:], ""]
    tokens = [t for t, n in zip(tokens, after, strict=True) if not (t == "," and n in closing)]
    parts = [(r",?\s*" if t in closing else "") + re.escape(t) for t in tokens]
    return re.compile(r"\s*".join(parts))


def spans(text: str, old: str) -> list[tuple[int, int]]:
    """Where `old` occurs in `text`: exactly, else as its tokens (`pattern`)."""
    exact = [(m.start(), m.end()) for m in re.finditer(re.escape(old), text)]
    return exact or [m.span() for m in pattern(old).finditer(text)]


def stale_reason(mutant: Mutant) -> str | None:
    path = REPO / mutant.path
    if not path.is_file():
        return f"{mutant.path} does not exist"
    count = len(spans(path.read_text(), mutant.old))
    if count != 1:
        return f"original text found {count} times in {mutant.path} (must be exactly once)"
    return None


def planted(text: str, mutant: Mutant) -> str:
    """`text` with the mutant's one occurrence of `old` replaced by `new`."""
    [(start, end)] = spans(text, mutant.old)
    return text[:start] + mutant.new + text[end:]


def environment(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The copy first: its src/ (not the editable install's checkout) and its tests package.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(copy / "src"), str(copy), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a restored file must never meet the mutant's .pyc
    env[NO_RECORD_ENV] = "1"  # a copy's runs say nothing of the checkout's tests
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def pytest(
    copy: Path, tests: tuple[str, ...], *options: str, timeout: float = PER_MUTANT_TIMEOUT_S
) -> tuple[int, str]:
    """(exit code, output) of the default suite's `tests` run in `copy`; -1 on a timeout. Each
    run is a fork of a warm interpreter started in the copy's environment (torch and Lightning
    imported once; the copy's own code imported by the run, after the mutant was written)."""
    env = environment(copy)
    out = copy.with_suffix(".out")
    code = WarmInterpreter.for_env(env).run(
        {"module": "pytest"},
        ["-q", "-p", "no:cacheprovider", "-m", "not slow", *options, *tests],
        cwd=copy, env=env, out=out, err=out, timeout=timeout, group=True,
    )  # fmt: skip
    text = out.read_text(errors="replace") if out.exists() else ""
    if code is None:
        return -1, f"timed out after {timeout:.0f} s\n{text}"
    return code, text


SUMMARY_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+?\.py(?:::.*?)?)(?: - .*)?$")


def failed_ids(out: str) -> list[str]:
    """The node ids pytest's short summary (-rfE) names as failed or errored: only after its
    header, where a captured log line ("ERROR    hydra.utils:...") cannot be taken for one."""
    summary = out.partition("short test summary info")[2]
    return [m.group(1) for line in summary.splitlines() if (m := SUMMARY_LINE.match(line))]


def baseline_failures(chunks: list[tuple[str, ...]], copies: list[Path]) -> list[str]:
    """Node ids that fail on the unmutated copies (each chunk of tests in its own copy)."""
    with ThreadPoolExecutor(max_workers=len(copies)) as pool:
        runs = list(
            pool.map(
                lambda a: pytest(a[1], a[0], "-rfE", timeout=BASELINE_TIMEOUT_S),
                zip(chunks, copies, strict=True),
            )
        )
    failing = []
    for code, out in runs:
        if code not in (0, 1):  # not even collected: every mutant would look caught
            raise SystemExit(f"the unmutated tests do not run (pytest exit {code}):\n{tail(out)}")
        failing += failed_ids(out)
    return failing


def run_one(mutant: Mutant, copy: Path) -> tuple[str, float, str]:
    target = copy / mutant.path
    original = target.read_text()
    target.write_text(planted(original, mutant))
    start = time.monotonic()
    try:
        code, out = pytest(copy, mutant.tests, "-x", "-rfE")
    finally:
        target.write_text(original)
    elapsed = time.monotonic() - start
    if code == 1:  # tests ran and at least one failed
        return "caught", elapsed, out
    if code == 0:
        return "escaped", elapsed, out
    # 2-5: interrupted, internal error, usage error, nothing collected; -1: timeout
    return "error", elapsed, out


def tail(text: str, n: int = 15) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-n:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("-k", default="", help="only mutants whose name contains this")
    parser.add_argument("--path", default="", help="only mutants of files under this path")
    parser.add_argument("--list", action="store_true", help="print the mutants and exit")
    parser.add_argument(
        "--stale", action="store_true", help="only check that every mutant still applies"
    )
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.k in m.name and m.path.startswith(args.path)]
    if args.list:
        for m in [*SMOKES, *chosen]:
            print(f"{m.name}: {m.path} -> {' '.join(m.tests)}")
        return 0
    names = [m.name for m in MUTANTS]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        print(f"duplicate mutant names: {sorted(duplicates)}")
        return 1

    counts = {"caught": 0, "escaped": 0, "stale": 0, "error": 0}
    runnable = []
    for mutant in chosen:
        reason = stale_reason(mutant)
        if reason:
            counts["stale"] += 1
            print(f"stale    {mutant.name}: {reason}", flush=True)
        else:
            runnable.append(mutant)

    if args.stale:
        stale_smokes = sum(bool(stale_reason(m)) for m in SMOKES)
        print(f"mutants: {len(runnable)} apply, {counts['stale'] + stale_smokes} stale")
        return 1 if counts["stale"] or stale_smokes else 0

    with tempfile.TemporaryDirectory(prefix="trainwell-mutants-") as tmp:
        copies = [make_copy(Path(tmp) / f"copy{i}") for i in range(max(1, args.jobs))]
        return run_all(runnable, copies, counts, len(chosen))


def run_all(runnable: list[Mutant], copies: list[Path], counts: dict[str, int], chosen: int) -> int:
    """The smoke mutants, the unmutated baseline, then every runnable mutant; the exit code."""
    # The smoke mutants change what a test checks, once in the pytest process and once in a
    # script it runs: if either is not caught, the tests did not run the copy's code and no
    # other result means anything.
    stale_smokes = [f"{m.name}: {stale_reason(m)}" for m in SMOKES if stale_reason(m)]
    if stale_smokes:
        print("stale    " + "; ".join(stale_smokes))
        return 1
    with ThreadPoolExecutor(max_workers=len(copies)) as pool:
        smoked = list(
            pool.map(lambda i: run_one(SMOKES[i], copies[i % len(copies)]), range(len(SMOKES)))
        )
    for smoke, (outcome, elapsed, out) in zip(SMOKES, smoked, strict=True):
        print(f"{outcome:8} {smoke.name} ({elapsed:.0f} s)", flush=True)
        if outcome != "caught":
            print("the tests do not run the mutated copy; results would be meaningless")
            print(tail(out))
            return 1

    free = list(copies)

    def job(mutant: Mutant) -> tuple[Mutant, str, float, str]:
        copy = free.pop()
        try:
            return (mutant, *run_one(mutant, copy))
        finally:
            free.append(copy)

    caught_by: dict[str, list[Mutant]] = {}
    with ThreadPoolExecutor(max_workers=len(copies)) as pool:
        for mutant, outcome, elapsed, out in pool.map(job, runnable):
            if outcome == "caught":
                catchers = failed_ids(out)
                if not catchers:  # exit 1 without a named failure: nothing to check it against
                    outcome = "error"
                for node in catchers:
                    caught_by.setdefault(node, []).append(mutant)
            counts[outcome] += 1
            print(f"{outcome:8} {mutant.name} ({elapsed:.0f} s)", flush=True)
            if outcome != "caught":
                print(f"    {mutant.path}: {mutant.why}")
                print(tail(out))

    # Every test that caught a mutant, on the unmutated copies: one that fails there too caught
    # nothing, and each mutant it "caught" is an error. A test the checkout's last pytest runs
    # passed on this very tree (tests/helpers/passed_runs.py: `make test` before `make mutants`,
    # as in CI) has its baseline already.
    union = sorted(caught_by)
    known = passed_here(REPO)
    unknown = [node for node in union if node not in known]
    chunks = [tuple(unknown[i :: len(copies)]) for i in range(len(copies))]
    chunks, copies_used = [c for c in chunks if c], copies[: len([c for c in chunks if c])]
    start = time.monotonic()
    failing = baseline_failures(chunks, copies_used) if unknown else []
    print(f"baseline: the {len(union)} catching tests, {len(union) - len(unknown)} passed in this "
          f"tree's last test runs, {len(unknown)} run now: {len(failing)} failing without a "
          f"mutant ({time.monotonic() - start:.0f} s)", flush=True)  # fmt: skip
    broken = {id(m): m for node in failing for m in caught_by.get(node, [])}
    for node in failing:
        print(f"    fails without a mutant: {node}")
    for mutant in broken.values():
        counts["caught"] -= 1
        counts["error"] += 1
        print(
            f"error    {mutant.name}: the test that caught it fails without the mutant", flush=True
        )
    print(
        f"mutants: {counts['caught']} caught, {counts['escaped']} escaped, "
        f"{counts['stale']} stale" + (f", {counts['error']} error" if counts["error"] else "")
    )
    return 0 if counts["caught"] == chosen else 1


if __name__ == "__main__":
    sys.exit(main())
