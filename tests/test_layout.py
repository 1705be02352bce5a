"""Imports point one way: data, models -> tasks -> callbacks -> training -> doctor -> cli.

Read from the source (every import statement, module-level or inside a function), so a cycle
or a shortcut (training reaching into the doctor, a callback into training) fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "trainwell"
BASE = {"errors", "compat", "resolvers"}
ALLOWED = {
    "models": BASE | {"models"},
    "data": BASE | {"data"},
    "tasks": BASE | {"tasks", "models", "data"},
    "callbacks": BASE | {"callbacks", "tasks", "models", "data"},
    "training": BASE | {"training", "callbacks", "tasks", "models", "data"},
    "doctor": BASE | {"doctor", "training", "callbacks", "tasks", "models", "data"},
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


def test_the_compat_package_depends_on_nothing_but_the_error_type() -> None:
    paths = sorted((SRC / "compat").glob("*.py"))
    assert len(paths) > 1
    for path in paths:
        assert trainwell_imports(path) <= {"errors", "compat"}, path.name
