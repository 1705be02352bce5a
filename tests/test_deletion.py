"""A cloner deletes the template's examples; the engine's own tests still pass.

The rule: an engine test is marked `engine` (pyproject.toml; a module's `pytestmark` or a test's
decorator) and needs nothing of the examples: it runs on the tests' own modules (tests/owned,
configs in tests/conf via OWNED in tests/helpers/config.py) or on plain Lightning classes, and
the file that holds it imports nothing of the examples, since the whole file is collected. The
slow test clones HEAD (uncommitted changes are not part of it), deletes the cloner's room as a
cloner would, and runs `pytest -m engine` over every test file that names the marker, in the
clone, with the clone's code and this interpreter.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.config import REPO

# What a cloner deletes to start their own project: the example package, the experiments and
# searches over it, the example datamodule configs (conf/data/_*.yaml are the shared loader knobs
# every datamodule config inherits: kept) and every top-level model config (each names an example
# task or net, directly or through _classification / _language_model); the optimizer and scheduler
# groups under conf/model/ name torch and the engine only: kept.
DELETED_DIRS = ("src/project", "conf/experiment", "conf/hparams_search")
DELETED_GLOBS = (("conf/data", "[!_]*.yaml"), ("conf/model", "*.yaml"))
EXAMPLES = "project"  # the examples' package: nothing left in the clone may name it
ENGINE_MARK = re.compile(r"pytest\.mark\.engine\b")
TIMEOUT_S = 400  # about 70 s on 2 shared cores


def _git(*args: str, cwd: Path) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def delete_the_examples(clone: Path) -> None:
    for folder in DELETED_DIRS:
        assert (clone / folder).is_dir(), folder  # the layout moved: update this list
        shutil.rmtree(clone / folder)
    for folder, pattern in DELETED_GLOBS:
        for path in (clone / folder).glob(pattern):
            path.unlink()
    named = [p for p in (clone / "conf").rglob("*.yaml") if f"{EXAMPLES}." in p.read_text()]
    assert not named, f"configs left that name the examples: {named}"


def engine_test_files(clone: Path) -> list[str]:
    here = Path(__file__).name
    return sorted(
        str(p.relative_to(clone))
        for p in (clone / "tests").rglob("test_*.py")
        if p.name != here and ENGINE_MARK.search(p.read_text())
    )


def _blocker(root: Path) -> Path:
    """A path entry that hides any other checkout's `project` (an editable install puts one
    checkout's src/ on every interpreter's path): in the clone it is deleted, so it must not
    import from anywhere."""
    package = root / EXAMPLES
    package.mkdir(parents=True)
    message = f"No module named {EXAMPLES!r} (the examples were deleted)"
    (package / "__init__.py").write_text(
        f"raise ModuleNotFoundError({message!r}, name={EXAMPLES!r})\n"
    )
    return root


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from a.b import c`: c may be a module of its own (tests.helpers.cv)
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def _module_file(name: str) -> Path | None:
    base = REPO / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_engine_tests_and_what_they_import_name_nothing_of_the_examples() -> None:
    """The fast half of the deletion test: no engine test file, nor any tests.* module it
    imports (owned modules, helpers, transitively), imports the examples' package; the slow test
    below catches the rest (an engine module that imports them)."""
    todo = [REPO / f for f in engine_test_files(REPO)] + [REPO / "tests" / "conftest.py"]
    seen: dict[Path, set[str]] = {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen[path] = _imported(path)
        for name in seen[path]:
            found = _module_file(name) if name.split(".")[0] == "tests" else None
            if found:
                todo.append(found)
    assert REPO / "tests" / "owned" / "task.py" in seen  # the walk reaches the owned modules
    bad = {
        str(path.relative_to(REPO)): sorted(n for n in names if n.split(".")[0] == EXAMPLES)
        for path, names in seen.items()
    }
    assert not {path: names for path, names in bad.items() if names}


@pytest.mark.slow  # a clone and the engine's suite in it
def test_the_engine_suite_passes_in_a_clone_without_the_examples(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    head = _git("rev-parse", "HEAD", cwd=REPO)
    _git("clone", "--quiet", "--no-checkout", str(REPO), str(clone), cwd=tmp_path)
    _git("checkout", "--quiet", head, cwd=clone)
    delete_the_examples(clone)
    files = engine_test_files(clone)
    assert files, "no test is marked engine"
    path = [clone / "src", clone, _blocker(tmp_path / "deleted")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(map(str, path)),
        "OMP_NUM_THREADS": "1",
        "WANDB_SILENT": "true",
    }
    gone = subprocess.run(
        [sys.executable, "-c", f"import {EXAMPLES}"], env=env, cwd=clone, capture_output=True
    )
    assert b"the examples were deleted" in gone.stderr, gone.stderr[-2000:]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "engine", "-q", "-p", "no:cacheprovider", *files],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) > 0, summary
