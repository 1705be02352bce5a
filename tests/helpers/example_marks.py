"""The `example` mark: a test that uses an example of the cloner's room says which.

`@pytest.mark.example("project.models.resnet")` on a test (or `pytestmark = pytest.mark.example(
...)` for a whole file, or `pytest.param(..., marks=...)` for one case) names the example modules
it uses, directly or through their configs (`model=resnet18`, `experiment=resnet_accum`). In a
clone that deleted one of them the test is skipped, saying which; a file whose module-level mark
names a deleted example is not imported at all (its imports of the example would fail at
collection), and the session's summary counts those files. tests/test_deletion.py checks that
every test naming an example carries its mark, and deletes each example in a clone to prove it.

Loaded for every pytest session by `-p tests.helpers.example_marks` (pyproject.toml).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trainwell.targets import find_spec

MARK = "example"
_not_collected: dict[str, list[str]] = {}  # test file -> the deleted examples it names


def deleted(modules: tuple[str, ...] | list[str]) -> list[str]:
    """The modules of `modules` that cannot be found (imports nothing)."""
    find_spec.cache_clear()
    return [name for name in modules if find_spec(name) is None]


def _marked(node: ast.AST, constants: dict[str, list[str]] | None = None) -> list[str]:
    """The modules named by `pytest.mark.example(...)` calls inside `node`, and by the module's
    names bound to such a mark (`LM = pytest.mark.example(...)`, then `marks=LM`)."""
    found = []
    for child in ast.walk(node):
        if (
            isinstance(child, ast.Call)
            and isinstance(child.func, ast.Attribute)
            and child.func.attr == MARK
        ):
            found += [
                a.value
                for a in child.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
        elif isinstance(child, ast.Name) and constants and child.id in constants:
            found += constants[child.id]
    return found


def mark_constants(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level names bound to an example mark: {name: its modules}."""
    return {
        target.id: _marked(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and _marked(node.value)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id != "pytestmark"
    }


def module_marks(tree: ast.Module) -> list[str]:
    """The examples a test file's `pytestmark = ...` names."""
    constants = mark_constants(tree)
    return [
        name
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(t, ast.Name) and t.id == "pytestmark"
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
        for name in _marked(node, constants)
    ]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    try:
        tree = ast.parse(collection_path.read_text())
    except (OSError, SyntaxError):
        return None  # pytest reports it
    gone = deleted(module_marks(tree))
    if gone:
        _not_collected[str(collection_path)] = gone
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        named = [name for mark in item.iter_markers(MARK) for name in mark.args]
        gone = deleted(named)
        if gone:
            item.add_marker(pytest.mark.skip(reason=f"uses {', '.join(gone)}, deleted"))


def _scan(config: pytest.Config) -> dict[str, list[str]]:
    """What the workers of a pytest-xdist run left out (they collect; this process does not)."""
    found = {}
    for arg in config.args or [str(config.rootpath)]:
        root = Path(arg.split("::")[0])
        for path in [root] if root.is_file() else sorted(root.rglob("test_*.py")):
            if pytest_ignore_collect(path, config):
                found[str(path)] = _not_collected.pop(str(path))
    return found


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    skipped = dict(_not_collected)
    if not skipped and config.pluginmanager.hasplugin("dsession"):  # xdist's controller
        skipped = _scan(config)
    if skipped:
        examples = sorted({name for names in skipped.values() for name in names})
        terminalreporter.write_line(
            f"{len(skipped)} test files not collected: they use deleted examples "
            f"({', '.join(examples)})"
        )
