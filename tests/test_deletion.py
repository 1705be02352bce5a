"""A cloner deletes the template's examples; what is left keeps working.

Two deletions are proved here, each in a clone of HEAD (uncommitted changes are not part of it),
with the clone's code and this interpreter:

* One example at a time (tests/helpers/example_uses.py says what goes with it: its module, the
  configs that name it and those built on them, its own test files). The default run trains,
  every experiment and search left passes the scripts' start-up check (imports included), and
  the default suite collects;
  the tests that use the example carry `pytest.mark.example(<module>)` and are skipped
  (tests/helpers/example_marks.py), which a fast test here checks from the source.
* The whole room. An engine test is marked `engine` (pyproject.toml; a module's `pytestmark` or a
  test's decorator) and needs nothing of the examples: it runs on the tests' own modules
  (tests/owned, configs in tests/conf via OWNED in tests/helpers/config.py) or on plain Lightning
  classes, and the file that holds it imports nothing of the examples, since the whole file is
  collected. The slow test deletes the room as a cloner would, lints the engine's code and
  collects every test file that names the marker; the default suite then runs in a clone that
  replaced the default run and deleted every other example.
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
from tests.helpers.example_marks import module_marks
from tests.helpers.example_uses import (
    ROOM,
    config_path,
    default_run_modules,
    deletable_examples,
    deleted_configs,
    room_modules,
    run_modules,
    suite_files,
    unmarked_uses,
)
from trainwell.targets import module_names

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
SUITE_TIMEOUT_S = 2400  # the default suite: 4 minutes on 2 idle cores


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


def _blocker(root: Path, clone: Path | None = None) -> Path:
    """A path entry that hides any other checkout's `project` (an editable install puts one
    checkout's src/ on every interpreter's path): in a clone without the room it must not
    import from anywhere; in a clone that keeps it (`clone`), the clone's own is found first
    and this entry is empty."""
    root.mkdir(parents=True)
    if clone is not None:
        return root
    package = root / EXAMPLES
    package.mkdir()
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


@pytest.mark.slow  # a clone, the engine's lint and its suite collected
def test_the_engine_suite_lints_and_collects_in_a_clone_without_the_examples(
    tmp_path: Path, head: Path
) -> None:
    """Without any example, the engine's code lints clean and every engine test file is collected
    (each imports, and nothing it imports names the room). That those tests then pass without
    the examples is the default suite's run below, in a clone that keeps only the regression
    example as its default: an engine test runs there on the tests' own modules, and the fast
    test above proves from the source that no engine test reads an example."""
    clone = _clone(tmp_path, head)
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
    # What CI lints (`make lint LINT_PATHS=engine`) stays clean: which imports are first-party
    # is said in pyproject.toml, not found from which packages exist.
    engine = ["src/trainwell", "src/hydra_plugins", "scripts", "tests", "benchmarks"]
    for check in (["check"], ["format", "--check"]):
        lint = subprocess.run(
            [sys.executable, "-m", "ruff", *check, *engine], cwd=clone, capture_output=True,
            text=True,
        )  # fmt: skip
        assert lint.returncode == 0, lint.stdout[-3000:]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "engine", "--collect-only", "-q",
         "-p", "no:cacheprovider", *files],
        cwd=clone, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    collected = re.search(r"(\d+)(?:/\d+)? tests? collected", proc.stdout)
    assert collected and int(collected.group(1)) > 0, proc.stdout[-2000:]


# --- one example at a time -----------------------------------------------------------------------


def test_the_rooms_package_faces_import_nothing() -> None:
    """`project.data` and the others name no module: deleting one leaves the face importable."""
    faces = sorted(ROOM.rglob("__init__.py"))
    assert len(faces) >= 4
    for face in faces:
        tree = ast.parse(face.read_text())
        imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        assert not imports, f"{face.relative_to(REPO)} imports at module level"


def test_no_example_imports_another_and_the_default_run_imports_none() -> None:
    """Each example stands alone (it may use the default run's shared pieces: base, ...)."""
    examples = set(deletable_examples())  # none in a clone that deleted them all
    for module in room_modules():
        names = module_names(module)
        assert names is not None, module
        imported = {source for source, _, _ in names.imports} | {
            f"{source}.{item}" for source, items, _ in names.imports for item in items
        }
        others = (imported & examples) - {module}
        assert not others, f"{module} imports {sorted(others)}"
    assert default_run_modules() and not default_run_modules() & examples


def test_every_test_that_uses_an_example_carries_its_mark() -> None:
    """Read from the source: a test naming an example's module or one of its configs (directly,
    or through a constant, helper or fixture it uses) is marked with it; a file importing one
    at module level is marked as a whole (it is not imported in a clone without it)."""
    problems = unmarked_uses()
    assert not problems, "add pytest.mark.example(...):\n" + "\n".join(problems)


def test_a_test_using_a_deleted_example_is_skipped_and_its_file_not_imported(
    tmp_path: Path,
) -> None:
    """What a clone without the example sees: a marked test skipped with the reason, a file
    marked as a whole not imported (its import of the example would fail), one summary line."""
    (tmp_path / "test_mixed.py").write_text(
        "import pytest\n\n\n"
        '@pytest.mark.example("project.data.gone54")\n'
        "def test_uses_it():\n    from project.data.gone54 import Gone\n\n\n"
        "def test_uses_nothing():\n    pass\n"
    )
    (tmp_path / "test_named_after_it.py").write_text(
        "import pytest\n\nfrom project.data.gone54 import Gone\n\n"
        'pytestmark = pytest.mark.example("project.data.gone54")\n\n\n'
        "def test_it():\n    pass\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "-p", "tests.helpers.example_marks", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed, 1 skipped" in proc.stdout, proc.stdout[-2000:]
    assert "uses project.data.gone54, deleted" in proc.stdout
    assert "1 test files not collected: they use deleted examples (project.data.gone54)" in (
        proc.stdout
    )


def test_the_docs_say_what_goes_with_each_example() -> None:
    """docs/your-project.md's table, row by row, for the examples this clone has. The table
    stays as the template wrote it: a deleted example's row is skipped, and so is a config of a
    kept example's row that went with a deleted one (a cloner who deletes the CIFAR-10 data also
    deletes the ResNet experiment built on it); a cloner's own module needs no row."""
    text = (REPO / "docs" / "your-project.md").read_text()
    rows = re.findall(r"^\| `(src/project/[\w/]+\.py)` \| (.*) \|$", text, re.M)
    assert rows
    listed = {module: set(re.findall(r"`(conf/[\w/]+\.yaml)`", cell)) for module, cell in rows}
    deleted = {path for path in listed if not (REPO / path).is_file()}
    went_with_deleted = set().union(*(listed[path] for path in deleted))
    for path, configs in listed.items():
        module = ".".join(Path(path).relative_to("src").with_suffix("").parts)
        if path in deleted:
            continue
        gone = {c for c in configs if not (REPO / c).is_file()}
        assert gone <= went_with_deleted, f"{path}: {sorted(gone)} named but not in the clone"
        expected = {str(config_path(c).relative_to(REPO)) for c in deleted_configs(module)}
        assert configs - gone == expected, path


def delete_one_example(clone: Path, module: str) -> list[str]:
    """Delete `module` from the clone with what goes with it: the configs that name it and those
    built on them, and its own test files. Returns the deleted paths, relative to the clone."""
    source = Path("src", *module.split(".")).with_suffix(".py")
    gone = [source] + [config_path(c).relative_to(REPO) for c in sorted(deleted_configs(module))]
    for path in suite_files():
        if path.name.startswith("test_") and module in module_marks(ast.parse(path.read_text())):
            gone.append(path.relative_to(REPO))
    for path in gone:
        (clone / path).unlink(missing_ok=True)  # a config built on two examples goes once
    return [str(p) for p in gone]


def _git_clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    head = _git("rev-parse", "HEAD", cwd=REPO)
    _git("clone", "--quiet", "--no-checkout", str(REPO), str(clone), cwd=tmp_path)
    _git("checkout", "--quiet", head, cwd=clone)
    return clone


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clone of HEAD with its bytecode written: what every run in a fresh clone does first
    (compile the sources, and the test files as pytest rewrites them) is done here once. Each
    test copies it (`_clone`) and deletes in its copy; a deleted source's cached bytecode is
    never imported (Python reads __pycache__/ only next to its source)."""
    root = tmp_path_factory.mktemp("head")
    clone = _git_clone(root)
    env = {k: v for k, v in _in_clone(clone, root).items() if k != "PYTHONDONTWRITEBYTECODE"}
    for warm in (["-m", "compileall", "-q", "src", "scripts"],
                 ["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]):  # fmt: skip
        proc = subprocess.run(
            [sys.executable, *warm], cwd=clone, env=env, capture_output=True, text=True,
            timeout=TIMEOUT_S,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return clone


def _clone(tmp_path: Path, head: Path) -> Path:
    """A copy of the `head` clone, file times kept (so its cached bytecode stays valid)."""
    return Path(shutil.copytree(head, tmp_path / "clone", symlinks=True))


def _in_clone(clone: Path, tmp_path: Path) -> dict[str, str]:
    path = [clone / "src", clone, _blocker(tmp_path / "shadow", clone)]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(map(str, path)),
        "OMP_NUM_THREADS": "1",
        "WANDB_SILENT": "true",
    }


def _run(clone: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=clone, env=env, capture_output=True, text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip


# Every experiment and search left is checked as the scripts check a command line before they
# start: composed, each `_target_` located (the imports its module runs inside the room walked,
# where a deleted example would be missing) and imported with its classes, each keyword taken.
# That each experiment then trains does not depend on which other example is gone: each has its
# own run in the suite (the default run's, test_train_script, test_imbalanced, test_lm_experiment,
# the regression example's shared run).
CHECK_EVERY_CONFIG = (
    "import sys; from pathlib import Path; sys.path[:0] = ['src', '.'];"
    "from trainwell.command_line import check_command_line;"
    "names = [f'experiment={p.stem}' for p in sorted(Path('conf/experiment').glob('*.yaml'))]"
    " + [f'hparams_search={p.stem}' for p in sorted(Path('conf/hparams_search').glob('*.yaml'))];"
    "problems = [(n, check_command_line(Path('conf').resolve(), 'train', [n])) for n in names];"
    "print(len(names), [p for p in problems if p[1]], flush=True);"
)
# ... and then, in the same interpreter (one start-up of torch and Lightning, not two), the default
# run as `python scripts/train.py ARGS` runs it: the script as __main__, its folder first on the
# import path, ARGS from sys.argv[1:].
THEN_TRAIN = (
    "import runpy; sys.path.insert(0, 'scripts'); sys.argv[0] = 'scripts/train.py';"
    "runpy.run_path('scripts/train.py', run_name='__main__')"
)


# The default run fits, validates and tests on a few batches: what a deleted example would break is
# an import or a config, which the first batch of each stage meets.
FEW_BATCHES = (
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
)


@pytest.mark.slow  # a clone, the default run, every config checked, the suite collected
@pytest.mark.parametrize("module", deletable_examples())
def test_a_clone_without_one_example_trains_checks_every_other_config_and_collects(
    module: str, tmp_path: Path, head: Path
) -> None:
    clone = _clone(tmp_path, head)
    gone = delete_one_example(clone, module)
    env = _in_clone(clone, tmp_path)
    run_dir = tmp_path / "runs" / "default"
    default = _run(
        clone, env, "-c", CHECK_EVERY_CONFIG + THEN_TRAIN, "trainer.max_epochs=1",
        "print_config=false", *FEW_BATCHES, f"hydra.run.dir={run_dir}",
    )  # fmt: skip
    assert default.returncode == 0, (gone, default.stdout[-2000:], default.stderr[-3000:])
    count, problems = default.stdout.split("\n", 1)[0].split(" ", 1)
    assert int(count) > 0 and problems == "[]", (gone, default.stdout[-3000:])
    assert (run_dir / "results.json").is_file(), (gone, default.stderr[-3000:])  # it trained
    collected = _run(clone, env, "-m", "pytest", "--collect-only", "-q", "-m", "not slow",
                     "-p", "no:cacheprovider")  # fmt: skip
    assert collected.returncode == 0, collected.stdout[-4000:] + collected.stderr[-2000:]
    assert "error" not in collected.stdout.lower().split("\n")[-3:][0], collected.stdout[-2000:]


# What docs/your-project.md tells a cloner to do before deleting the default run's pieces: point
# conf/train.yaml's defaults at their own data, model and monitored metric. The regression example
# stands in for theirs.
NEW_DEFAULT = {
    "  - data: digits\n": "  - data: diabetes\n",
    "  - model: digits_cnn\n": "  - model: diabetes_mlp\n",
    "monitor:\n  metric: val/acc\n  mode: max\n": "monitor:\n  metric: val/mae\n  mode: min\n",
}
NEW_DEFAULT_RUN = ("data=diabetes", "model=diabetes_mlp", "monitor.metric=val/mae",
                   "monitor.mode=min")  # fmt: skip


def replace_the_default(clone: Path) -> None:
    train_yaml = clone / "conf" / "train.yaml"
    text = train_yaml.read_text()
    for old, new in NEW_DEFAULT.items():
        assert old in text, old
        text = text.replace(old, new)
    train_yaml.write_text(text)


@pytest.mark.slow  # the whole default suite, in a clone
@pytest.mark.example("project.data.diabetes", "project.tasks.regression")  # the new default
def test_the_default_suite_passes_in_a_clone_that_replaced_the_default_and_deleted_the_rest(
    tmp_path: Path, head: Path
) -> None:
    """`make test` where a cloner pointed the default run at their own project (as the docs say)
    and then deleted every example it does not use, each as above, the digits example included:
    what uses one is skipped (the tests' baseline run is the digits example), everything else
    passes. (With one deleted at a time, a test marked with only one of two examples it uses
    would run: the fast test above reads those from the source.)"""
    clone = _clone(tmp_path, head)
    replace_the_default(clone)
    kept = run_modules(NEW_DEFAULT_RUN)
    assert "project.data.digits" not in kept and "project.data.diabetes" in kept
    for module in sorted(set(room_modules()) - kept):
        delete_one_example(clone, module)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider",
         "-n", "2", "--dist", "loadfile"],
        cwd=clone, env=_in_clone(clone, tmp_path), capture_output=True, text=True,
        timeout=SUITE_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert ", deleted" in proc.stdout  # -ra: "SKIPPED ... uses project.<...>, deleted"
    assert "deleted (the tests' baseline run)" in proc.stdout
