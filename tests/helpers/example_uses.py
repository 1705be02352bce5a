"""What deleting one example of the cloner's room takes with it, and which tests use it.

An example is a module of src/project/{data,models,tasks}/ that the default run does not need
(`python scripts/train.py` with no overrides). Deleting it, a cloner deletes with it:

* its configs: the files under conf/ that name the module (`_target_: project.models.resnet...`),
  and, in turn, the configs built on those (`- override /model: resnet18` in an experiment,
  `- override /experiment: resnet_accum` in a search);
* its own tests, if they like: the test files whose module-level `pytest.mark.example` names it
  (they are not collected once it is gone).

A test uses an example when its source names the module (`project.models.resnet`) or one of those
configs (`model=resnet18`, `/experiment: resnet_accum`), directly or through a helper, constant
or fixture it uses; it must then carry `pytest.mark.example(<module>)` (tests/helpers/
example_marks.py skips it in a clone without the example). Read from the source: nothing here
imports a test file.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.helpers.config import REPO
from tests.helpers.example_marks import _marked, mark_constants, module_marks

ROOM = REPO / "src" / "project"
KINDS = ("data", "models", "tasks")
CONF = REPO / "conf"
CLONER_GROUPS = ("data", "model", "experiment", "hparams_search")
TEST_ROOTS = (REPO / "tests", ROOM / "tests")


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(REPO / "src").with_suffix("").parts)


def room_modules() -> list[str]:
    return sorted(
        module_of(p) for kind in KINDS for p in (ROOM / kind).glob("*.py") if p.stem != "__init__"
    )


def _room_imports(module: str) -> set[str]:
    """The room's modules `module` imports (at any depth of its source)."""
    path = REPO / "src" / Path(*module.split("."))
    tree = ast.parse(path.with_suffix(".py").read_text())
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found |= {n for n in names if n in room_modules()}
    return found


@functools.lru_cache(maxsize=1)
def default_run_modules() -> frozenset[str]:
    """The room's modules the default run imports: its targets and what they import."""
    return run_modules(())


@functools.lru_cache(maxsize=4)
def run_modules(overrides: tuple[str, ...]) -> frozenset[str]:
    """The room's modules the run of conf/train.yaml with `overrides` imports (its targets and
    what they import): composed as scripts/train.py composes it, conf/train.yaml's defaults
    included (not the tests' baseline run)."""
    from trainwell.targets import config_targets
    from trainwell.training.compose import compose_run_config

    cfg = compose_run_config(CONF, overrides, REPO / "logs" / "unused", REPO, "train")
    todo = [t.rsplit(".", 1)[0] for _, t in config_targets(cfg) if t.startswith("project.")]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module not in seen and module in room_modules():
            seen.add(module)
            todo += sorted(_room_imports(module))
    return frozenset(seen)


def deletable_examples() -> list[str]:
    return [m for m in room_modules() if m not in default_run_modules()]


def _config_files() -> list[Path]:
    return sorted(p for g in CLONER_GROUPS for p in (CONF / g).rglob("*.yaml"))


def _config_name(path: Path) -> tuple[str, str]:
    relative = path.relative_to(CONF).with_suffix("")
    return str(relative.parent), relative.name


@functools.cache
def _selected(path: Path) -> frozenset[tuple[str, str]]:
    """The (group, name) configs a config's defaults list selects or inherits."""
    data = yaml.safe_load(path.read_text()) or {}
    group, _ = _config_name(path)
    out = set()
    for entry in data.get("defaults", []) if isinstance(data, dict) else []:
        if isinstance(entry, str):
            if entry != "_self_":
                out.add((group, entry.lstrip("/")))
        elif isinstance(entry, dict):
            for key, value in entry.items():
                key = str(key).removeprefix("override ").strip()
                if value is None:
                    continue
                target_group = key.lstrip("/") if key.startswith("/") else f"{group}/{key}"
                out.add((target_group, str(value)))
    return frozenset(out)


@functools.cache
def deleted_configs(module: str) -> frozenset[tuple[str, str]]:
    """The configs that go with `module`: those naming it, and those built on them."""
    names = re.compile(rf"\b{re.escape(module)}\b")
    gone = {_config_name(p) for p in _config_files() if names.search(p.read_text())}
    changed = True
    while changed:
        changed = False
        for path in _config_files():
            name = _config_name(path)
            if name not in gone and _selected(path) & gone:
                gone.add(name)
                changed = True
    return frozenset(gone)


def config_path(config: tuple[str, str]) -> Path:
    return CONF / config[0] / f"{config[1]}.yaml"


@functools.cache
def reference(module: str) -> re.Pattern[str]:
    """How a test's source names `module` or one of its configs."""
    forms = [re.escape(module)]
    for group, name in deleted_configs(module):
        top = group.split("/")[0]
        forms += [
            rf"{re.escape(top)}={re.escape(name)}",
            rf"/{re.escape(top)}: {re.escape(name)}",
            rf"{re.escape(group)}/{re.escape(name)}\.yaml",
            rf"[\"']{re.escape(name)}[\"']",  # a config's name alone: a list of options
        ]
    return re.compile(rf"(?<![\w.])(?:{'|'.join(forms)})(?![\w])")


# --- which tests use which example --------------------------------------------------------------


@dataclass
class Binding:
    """A top-level statement of a test or helper file."""

    file: Path
    node: ast.stmt
    refs: set[str] = field(default_factory=set)  # examples its own source names
    uses: set[str] = field(default_factory=set)  # names it reads
    needs: set[str] = field(default_factory=set)  # examples, through what it uses too


def _is_example_param(node: ast.AST, constants: dict[str, list[str]]) -> list[str]:
    """The examples a `pytest.param(..., marks=pytest.mark.example(...))` is marked with."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "param"):
        return []
    return [
        name
        for keyword in node.keywords
        if keyword.arg == "marks"
        for name in _marked(keyword.value, constants)
    ]


def _segment(lines: list[str], node: ast.AST) -> str:
    """`node`'s source lines, its decorators included (a parametrize's cases are there)."""
    first = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])  # type: ignore[attr-defined]
    return "\n".join(lines[first - 1 : node.end_lineno])  # type: ignore[attr-defined]


def _refs(
    lines: list[str], node: ast.AST, examples: list[str], constants: dict[str, list[str]]
) -> set[str]:
    """The examples `node`'s source names, outside the pytest.params marked with them."""
    if not examples:
        return set()
    text = _segment(lines, node)
    found = {m for m in examples if reference(m).search(text)}
    if not found:
        return found
    for param in ast.walk(node):
        covered = set(_is_example_param(param, constants)) & found
        if covered:
            text = text.replace(_segment(lines, param), "")
    return {m for m in found if reference(m).search(text)}


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    return []


def _used(node: ast.AST, constants: dict[str, list[str]]) -> set[str]:
    """The names `node` reads, outside the pytest.params marked with examples (what those use
    is theirs: `_marked_params_problems`)."""
    names = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n is not node and _is_example_param(n, constants):
            continue
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):  # fixtures are arguments
            names |= {a.arg for a in n.args.args}
        todo.extend(ast.iter_child_nodes(n))
    return names


def _module_file(module: str) -> Path | None:
    for root in (REPO, REPO / "src"):
        base = root / Path(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


@dataclass
class TestFile:
    path: Path
    tree: ast.Module
    bindings: dict[str, Binding]
    imported: dict[str, tuple[Path, str]]  # local name -> (helper file, its name)
    import_refs: set[str]  # examples its module-level imports name
    helpers: list[Path]  # the test modules it imports at module level


@functools.cache
def _source(path: Path) -> tuple[str, ast.Module]:
    """A file's text and syntax tree, read once: a helper is imported by dozens of test files,
    and every marked case of a file reads its lines (nothing here edits a tree)."""
    source = path.read_text()
    return source, ast.parse(source)


@functools.cache
def _helper_constants(helper: Path) -> dict[str, list[str]]:
    return mark_constants(_source(helper)[1])


def _imported_constants(tree: ast.Module) -> dict[str, list[str]]:
    """Example marks a file imports from a helper (`from tests.helpers.x import LM`)."""
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            helper = _module_file(node.module)
            if helper is None or node.module.split(".")[0] not in ("tests", "project"):
                continue
            theirs = _helper_constants(helper)
            found |= {a.asname or a.name: theirs[a.name] for a in node.names if a.name in theirs}
    return found


def _read(path: Path, examples: list[str]) -> TestFile:
    source, tree = _source(path)
    lines = source.splitlines()
    examples = [m for m in examples if reference(m).search(source)]  # most files name none
    constants = _imported_constants(tree) | mark_constants(tree)
    bindings: dict[str, Binding] = {}
    imported: dict[str, tuple[Path, str]] = {}
    import_refs: set[str] = set()
    helpers: list[Path] = []
    for node in tree.body:
        refs = _refs(lines, node, examples, constants)
        if isinstance(node, ast.Import | ast.ImportFrom):
            import_refs |= refs
            module = node.module if isinstance(node, ast.ImportFrom) else None
            for alias in node.names:
                full = f"{module}.{alias.name}" if module else alias.name
                for candidate in (full, module):
                    found = _module_file(candidate) if candidate else None
                    if found and candidate.split(".")[0] in ("tests", "project"):
                        helpers.append(found)
                        if candidate == module:
                            imported[alias.asname or alias.name] = (found, alias.name)
                        break
            continue
        if isinstance(node, ast.Assign) and _marked(node.value):
            refs = set()  # a mark naming examples (LM = pytest.mark.example(...)) uses none
        binding = Binding(path, node, refs, _used(node, constants))
        for name in _defined(node):
            bindings[name] = binding
    return TestFile(path, tree, bindings, imported, import_refs, helpers)


def suite_files() -> list[Path]:
    return sorted(p for root in TEST_ROOTS for p in root.rglob("*.py") if p.name != "__init__.py")


@functools.lru_cache(maxsize=1)
def _read_all() -> dict[Path, TestFile]:
    examples = deletable_examples()
    files = {p: _read(p, examples) for p in suite_files()}
    conftest = files.get(REPO / "tests" / "conftest.py")
    # what each binding needs: its own refs, and those of the bindings it uses (fixed point)
    for f in files.values():
        for b in f.bindings.values():
            b.needs = set(b.refs)
    changed = True
    while changed:
        changed = False
        for f in files.values():
            for b in f.bindings.values():
                for name in b.uses:
                    other = f.bindings.get(name)
                    if other is None and name in f.imported:
                        helper, helper_name = f.imported[name]
                        other = files[helper].bindings.get(helper_name) if helper in files else None
                    if other is None and conftest is not None:
                        other = conftest.bindings.get(name)
                    if other is not None and other is not b and not other.needs <= b.needs:
                        b.needs |= other.needs
                        changed = True
    return files


def import_needs(path: Path, seen: frozenset[Path] = frozenset()) -> set[str]:
    """The examples importing `path` needs: its module-level imports, and its helpers'."""
    files = _read_all()
    f = files.get(path)
    if f is None or path in seen:
        return set()
    needs = set(f.import_refs)
    for helper in f.helpers:
        needs |= import_needs(helper, seen | {path})
    return needs


def _decorator_marks(node: ast.AST, constants: dict[str, list[str]]) -> set[str]:
    """The examples a test's (or class's) own decorators mark it with (a parametrize's marks
    are its cases', not the test's)."""
    decorators = getattr(node, "decorator_list", [])
    return {
        name
        for d in decorators
        if "parametrize" not in ast.dump(d)
        for name in _marked(d, constants)
    }


def unmarked_uses() -> list[str]:
    """Each test (and test file) that uses an example without its mark, as `path::name: modules`."""
    problems = []
    for path, f in _read_all().items():
        if not path.name.startswith("test_"):
            continue
        own = set(module_marks(f.tree))
        constants = _imported_constants(f.tree) | mark_constants(f.tree)
        shown = path.relative_to(REPO)
        missing = import_needs(path) - own
        if missing:
            problems.append(f"{shown} (imports at module level): {sorted(missing)}")
        for node in f.tree.body:
            tests = []
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                tests = [(node, set())]
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                tests = [
                    (m, _decorator_marks(node, constants))
                    for m in node.body
                    if isinstance(m, ast.FunctionDef) and m.name.startswith("test")
                ]
            binding = f.bindings.get(getattr(node, "name", ""))
            problems += _marked_param_problems(f, node, constants, own, shown)
            for test, outer in tests:
                needs = binding.needs if binding is not None else set()
                missing = needs - own - outer - _decorator_marks(test, constants)
                if missing:
                    problems.append(f"{shown}::{test.name}: {sorted(missing)}")
    return problems


def _marked_param_problems(
    f: TestFile, node: ast.AST, constants: dict[str, list[str]], own: set[str], shown: Path
) -> list[str]:
    """A case marked with examples (`pytest.param(..., marks=LM)`) uses no other one."""
    files = _read_all()
    conftest = files.get(REPO / "tests" / "conftest.py")
    lines = _source(f.path)[0].splitlines()
    problems = []
    for param in ast.walk(node):
        marked = set(_is_example_param(param, constants))
        if not marked:
            continue
        needs = {m for m in deletable_examples() if reference(m).search(_segment(lines, param))}
        for name in {n.id for n in ast.walk(param) if isinstance(n, ast.Name)}:
            other = f.bindings.get(name)
            if other is None and name in f.imported:
                helper, helper_name = f.imported[name]
                other = files[helper].bindings.get(helper_name) if helper in files else None
            if other is None and conftest is not None:
                other = conftest.bindings.get(name)
            if other is not None:
                needs |= other.needs
        missing = needs - marked - own
        if missing:
            problems.append(f"{shown}:{param.lineno} (a marked case): {sorted(missing)}")
    return problems
