"""Two rooms, and imports that point one way.

The engine (src/trainwell) imports nothing of the cloner's room (src/project, the examples) and
names none of its classes or modules: deleting or replacing an example cannot break the engine.
Inside the engine: blocks, loading -> io -> callbacks -> training -> doctor -> cli; deploy
(predict, export, serve) sits beside the doctor, over training, and neither imports the other;
summary (sweep summaries) reads run dirs through io, and training's cross-validation writes one.

Read from the source (every import statement, module-level or inside a function), so a cycle
or a shortcut (training reaching into the doctor, a callback into training) fails here.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "trainwell"
ROOM = SRC.parent / "project"
BASE = {"errors", "compat", "resolvers", "targets"}
ALLOWED = {
    "blocks": BASE | {"blocks", "io"},
    "loading": BASE | {"loading"},
    "io": BASE | {"io"},
    "callbacks": BASE | {"callbacks", "io", "blocks", "loading"},
    "summary": BASE | {"summary", "io"},
    "training": BASE | {"training", "callbacks", "io", "blocks", "loading", "summary"},
    "doctor": BASE | {"doctor", "training", "callbacks", "io", "blocks", "loading"},
    "deploy": BASE | {"deploy", "training", "callbacks", "io", "blocks", "loading"},
}


def trainwell_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "trainwell" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_point_one_way(package: str) -> None:
    for path in sorted((SRC / package).rglob("*.py")):
        wrong = trainwell_imports(path) - ALLOWED[package]
        assert not wrong, f"{path.relative_to(SRC)} imports trainwell.{', trainwell.'.join(wrong)}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports() -> dict[str, set[str]]:
    """Each engine module -> the engine modules it imports (anywhere in its source). `from
    package import module` is an import of the module; the package's __init__, which Python
    runs first for any of its modules, is no edge."""
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                inner = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
                found |= inner if len(inner) == len(node.names) else inner | {node.module}
        graph[name] = (found & modules.keys()) - {name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Modules that import each other, directly or around a longer loop: each circle once."""
    circles, seen = [], set()
    for start in sorted(graph):
        reach, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module not in reach:
                reach.add(module)
                todo.extend(graph[module])
        if start in reach and start not in seen:
            # The circle through `start`: the modules it reaches that reach it back.
            circle = sorted(m for m in reach if m == start or _reaches(graph, m, start))
            seen |= set(circle)
            circles.append(circle)
    return circles


def _reaches(graph: dict[str, set[str]], source: str, target: str) -> bool:
    reach, todo = set(), [source]
    while todo:
        module = todo.pop()
        for nxt in graph[module] - reach:
            reach.add(nxt)
            todo.append(nxt)
    return target in reach


def test_no_engine_modules_import_each_other() -> None:
    """Imports between modules point one way too: a circle (two run functions calling each other
    through their modules) ties both to every change of either."""
    assert import_circles(module_imports()) == []


def test_the_circle_check_finds_a_planted_circle() -> None:
    graph = module_imports()
    graph["trainwell.io.results"] = graph["trainwell.io.results"] | {"trainwell.training.run"}
    circles = import_circles(graph)
    assert len(circles) == 1 and {"trainwell.io.results", "trainwell.training.run"} <= set(
        circles[0]
    )


def _top_level_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


# The template's examples in the room (their `base.py` aside: `.base` is ordinary code). A
# cloner's own additions (a `model.py`, a class `Trainer`) may share a name with engine prose, so
# the check names what the template ships.
# (Words to search the engine for, not configs a test runs: one string, so that
# tests/helpers/example_uses.py does not read them as a use of those examples.)
EXAMPLE_WORDS = (
    "digits cifar10 synthetic sequences digits_cnn resnet transformer classification language_model"
)
EXAMPLE_MODULES = set(EXAMPLE_WORDS.split())
EXAMPLE_CLASSES = {
    "SplitDataModule", "ClassificationDataModule", "DigitsDataModule", "CIFAR10DataModule",
    "SyntheticDataModule", "SequenceDataModule", "DigitsCNN", "ResNet18", "CausalTransformer",
    "ClassificationTask", "LanguageModelTask",
}  # fmt: skip


def test_the_engine_imports_nothing_of_the_room() -> None:
    assert (ROOM / "__init__.py").is_file()
    wrong = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if ROOM.name in _top_level_imports(path)
    ]
    assert not wrong, f"the engine imports the cloner's room ({ROOM.name}): {wrong}"


def test_the_engine_names_no_example_class_or_module() -> None:
    """Not in code, strings or comments: an example a cloner deletes leaves no dangling name.
    A module name counts where it reads as one (`digits.py`, `.digits`, `data=digits`)."""
    modules = sorted(EXAMPLE_MODULES)
    classes = sorted(EXAMPLE_CLASSES)
    pattern = re.compile(
        rf"\b({'|'.join(classes)})\b"
        rf"|(\.|/|=)({'|'.join(modules)})\b(?!\()"
        rf"|\b({'|'.join(modules)})\.py\b"
    )
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "the engine names examples:\n" + "\n".join(found)


def test_the_compat_package_depends_on_nothing_but_the_error_type() -> None:
    paths = sorted((SRC / "compat").glob("*.py"))
    assert len(paths) > 1
    for path in paths:
        assert trainwell_imports(path) <= {"errors", "compat"}, path.name


def test_every_package_has_an_import_rule() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(ALLOWED) | {"compat"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined(tree: ast.AST, stores: bool) -> set[str]:
    """Private names a module defines: functions, classes, methods, globals; with `stores` also
    the attributes it assigns (`self._x = ...`)."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif stores and isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
    return {name for name in own if _private(name)}


def test_private_attributes_of_other_libraries_appear_only_in_compat() -> None:
    """Outside compat/, `x._name` is trainwell's own: a private name defined somewhere in the
    package, or an attribute the same module assigns. Anything else (a Lightning or torch
    private attribute, a private name imported from them) belongs in compat/."""
    trees = {path: ast.parse(path.read_text()) for path in sorted(SRC.rglob("*.py"))}
    package_wide = set().union(*(_defined(tree, stores=False) for tree in trees.values()))
    found = []
    for path, tree in trees.items():
        if path.parent.name == "compat":
            continue
        own = package_wide | _defined(tree, stores=True)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
                found.append(f"{path.relative_to(SRC)}:{node.lineno} .{node.attr}")
            elif isinstance(node, ast.ImportFrom) and not (node.module or "").startswith(
                "trainwell"
            ):
                found += [
                    f"{path.relative_to(SRC)}:{node.lineno} import {a.name}"
                    for a in node.names
                    if _private(a.name)
                ]
    assert not found, "private attributes outside compat/: " + ", ".join(found)


README = SRC.parents[1] / "README.md"
# The config-group table sits with the overrides it documents.
CONFIG_TABLE_PAGE = Path("docs") / "running.md"
# The engine's config groups: the table must list what the template ships in them. The cloner's
# groups (data/, model/ with its optimizer/ and scheduler/, experiment/, hparams_search/) are theirs:
# a config added, committed or deleted there needs no edit to the table (a template file, which a
# later release may change too).
ENGINE_GROUPS = ("callbacks", "debug", "hydra", "launcher", "logger", "paths", "trainer")


def _readme_section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _group_table(repo: Path) -> dict[str, set[str]]:
    """docs/running.md's config-group table: {group: the options named in its row}."""
    text = (repo / CONFIG_TABLE_PAGE).read_text()
    start = text.index("| group | options |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("| `"):
            break
        group_cell, options_cell = line.strip("|").split(" | ", 1)
        # options are the backticked names; a parenthesis holds prose (and may name other configs)
        options = re.sub(r"\([^)]*\)", "", options_cell)
        rows[group_cell.strip("` ")] = set(re.findall(r"`([\w.-]+)`", options))
    return rows


def _shipped_options(repo: Path) -> dict[str, set[str]]:
    """{group: options} of the engine's groups: the files git tracks there (those on disk outside
    a git checkout). An option a user keeps untracked is theirs to document."""
    listed = subprocess.run(
        ["git", "ls-files", "--", "conf"], cwd=repo, capture_output=True, text=True
    )
    names = (
        listed.stdout.splitlines()
        if listed.returncode == 0
        else [str(p.relative_to(repo)) for p in (repo / "conf").rglob("*.yaml")]
    )
    shipped: dict[str, set[str]] = {group: set() for group in ENGINE_GROUPS}
    for name in names:
        path = Path(name).relative_to("conf")
        in_engine = len(path.parts) == 2 and path.parts[0] in ENGINE_GROUPS
        if in_engine and path.suffix == ".yaml" and not path.stem.startswith("_"):
            shipped[path.parts[0]].add(path.stem)
    return shipped


def config_table_problems(repo: Path) -> list[str]:
    """What docs/running.md's table gets wrong about the engine's configs in `repo`."""
    table = {g: o for g, o in _group_table(repo).items() if g in ENGINE_GROUPS}
    shipped = _shipped_options(repo)
    problems = [
        f"the docs/running.md config table names a config that does not exist: {g}/{o}"
        for g, opts in sorted(table.items())
        for o in sorted(opts)
        if not (repo / "conf" / g / f"{o}.yaml").is_file()
    ]
    problems += [
        f"docs/running.md config table (| group | options |): add `{o}` to the `{g}` row"
        for g, opts in sorted(shipped.items())
        for o in sorted(opts - table.get(g, set()))
    ]
    problems += [
        f"docs/running.md config table: add a row for the `{g}` group"
        for g in ENGINE_GROUPS
        if g not in table
    ]
    return problems


def test_the_config_table_lists_every_engine_group_and_option() -> None:
    assert not config_table_problems(SRC.parents[1])


def _commit_all(repo: Path) -> None:
    for args in (["add", "-A"], ["commit", "--quiet", "-m", "mine"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True
        )


def test_a_cloners_configs_added_committed_or_deleted_need_no_row_but_the_engines_do(
    tmp_path: Path,
) -> None:
    """A clone's own configs (committed, in all four of its groups) and a deleted example's
    config leave the check green; a config committed to an engine group is named."""
    repo = tmp_path / "clone"
    shutil.copytree(SRC.parents[1] / "conf", repo / "conf")
    (repo / "docs").mkdir()
    shutil.copy(SRC.parents[1] / CONFIG_TABLE_PAGE, repo / CONFIG_TABLE_PAGE)
    subprocess.run(["git", "init", "--quiet"], cwd=repo, check=True)
    _commit_all(repo)
    assert config_table_problems(repo) == []
    for name in ("data/moons", "model/moons_mlp", "experiment/moons", "hparams_search/moons"):
        (repo / "conf" / f"{name}.yaml").write_text("# mine\n")
    (repo / "conf" / "model" / "optimizer" / "lion.yaml").write_text("# mine\n")
    spare = sorted(p for p in (repo / "conf" / "data").glob("[!_]*.yaml") if p.stem != "digits")
    for example in spare[:1]:  # a deleted example's config (a clone may have none left)
        example.unlink()
    _commit_all(repo)
    assert config_table_problems(repo) == []
    (repo / "conf" / "trainer" / "a100.yaml").write_text("# mine\n")
    _commit_all(repo)
    assert config_table_problems(repo) == [
        "docs/running.md config table (| group | options |): add `a100` to the `trainer` row"
    ]


def test_the_readme_layout_names_every_package_and_top_level_module() -> None:
    layout = _readme_section("The map") + _readme_section("The engine, package by package")
    names = [p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    names += [p.name for p in SRC.glob("*.py") if p.name != "__init__.py"]
    names += [p.name for p in (SRC.parent / "hydra_plugins").iterdir() if p.is_dir()]
    repo = SRC.parents[1]
    names += ["conf", "scripts", "tests", "notebooks", "benchmarks", "docs"]
    assert all((repo / n).exists() for n in names[-6:])
    missing = [n for n in names if not re.search(rf"(^|\s){re.escape(n)}/?\s", layout, re.M)]
    assert not missing, f"README layout misses {missing}"
