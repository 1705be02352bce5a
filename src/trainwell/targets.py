"""Where a config's `_target_`s point, read from the source files without importing anything.

A mistyped `_target_` (`data._target_=project.wine.WineDataModul`, on the command line or in a
yaml) is answered like a mistyped key: one line with a did-you-mean, before torch is imported.
Importing the target to find out would import the user's module, and with it torch and
Lightning (seconds), then fail inside Hydra's instantiate after the config was printed.

So modules are found by their import specs (a package's submodules through its search path,
never by executing the package), and what a module defines is read from its syntax tree: its
classes, functions, assignments and imports. A name that may be defined in a way the tree does
not show (a `from x import *` that cannot be followed, a module-level `__getattr__`, a compiled
module) is never refused here: instantiate answers it.

The same reading walks the imports a target's module runs on import, inside the target's own
package (the cloner's room: a deleted example one file imports): a module that is missing there
is named with the file and line that import it.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.machinery
import importlib.util
import pkgutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_MAX_STAR_DEPTH = 3  # `from .x import *` chains followed this deep (torch.nn: 2)


@dataclass(frozen=True)
class ModuleNames:
    """What a module's source binds at module level; `complete` when nothing else can be bound."""

    names: frozenset[str]
    complete: bool
    # (module, the names imported from it, line) of each import the module cannot run without
    imports: tuple[tuple[str, tuple[str, ...], int], ...] = field(default=())
    defined: frozenset[str] = frozenset()  # classes and functions written here, not imported


def _nearest(word: str, choices: list[str]) -> str | None:
    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return found[0] if found else None


@functools.lru_cache(maxsize=4096)
def find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of module `name`, found without executing it or its parent packages."""
    if name in sys.modules:
        return getattr(sys.modules[name], "__spec__", None)
    parent, _, _ = name.rpartition(".")
    if not parent:
        try:
            return importlib.util.find_spec(name)  # a top-level name imports nothing
        except (ImportError, ValueError):
            return None
    above = find_spec(parent)
    if above is None or above.submodule_search_locations is None:
        return None
    try:
        return importlib.machinery.PathFinder.find_spec(
            name, list(above.submodule_search_locations)
        )
    except (ImportError, ValueError):
        return None


def _source(spec: importlib.machinery.ModuleSpec) -> Path | None:
    origin = spec.origin
    if origin and origin.endswith(".py") and Path(origin).is_file():
        return Path(origin)
    return None


def _absolute(module: str | None, level: int, here: str, is_package: bool) -> str | None:
    """The absolute name of `from <level dots><module> import ...` written in module `here`."""
    if level == 0:
        return module
    base = here.split(".") if is_package else here.split(".")[:-1]
    if level - 1 > len(base):
        return None
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base) or None


class _Reader:
    """Module-level bindings and imports of one syntax tree: statements at the top, and inside
    `if` / `try` / `with` / loops there, never inside a function or class body."""

    def __init__(self, name: str, is_package: bool, depth: int) -> None:
        self.name, self.is_package, self.depth = name, is_package, depth
        self.names: set[str] = set()
        self.defined: set[str] = set()
        self.complete = True
        self.imports: list[tuple[str, tuple[str, ...], int]] = []

    def read(self, body: list[ast.stmt], guarded: bool = False) -> None:
        for node in body:
            self._statement(node, guarded)

    def _bind(self, target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.names.add(node.id)

    def _statement(self, node: ast.stmt, guarded: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self.names.add(node.name)
            self.defined.add(node.name)
            if node.name == "__getattr__":
                self.complete = False  # names made on demand (a lazy package face)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind(target)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            self._bind(node.target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                self.names.add(alias.asname or alias.name.split(".")[0])
                if not guarded:
                    self.imports.append((alias.name, (), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            self._import_from(node, guarded)
        elif isinstance(node, ast.If):
            # a TYPE_CHECKING, version or platform branch: the module runs without it
            self.read(node.body, True)
            self.read(node.orelse, True)
        elif isinstance(node, ast.Try):
            caught = bool(node.handlers)  # an import the module survives without
            self.read(node.body, guarded or caught)
            for handler in node.handlers:
                self.read(handler.body, True)
            self.read(node.orelse, guarded)
            self.read(node.finalbody, guarded)
        elif isinstance(node, ast.With):
            for item in node.items:
                if item.optional_vars is not None:
                    self._bind(item.optional_vars)
            self.read(node.body, guarded)
        elif isinstance(node, ast.For | ast.While):
            if isinstance(node, ast.For):
                self._bind(node.target)
            self.read(node.body, guarded)
            self.read(node.orelse, guarded)

    def _import_from(self, node: ast.ImportFrom, guarded: bool) -> None:
        source = _absolute(node.module, node.level, self.name, self.is_package)
        named = [alias for alias in node.names if alias.name != "*"]
        self.names.update(alias.asname or alias.name for alias in named)
        if len(named) < len(node.names):  # from x import *
            followed = (
                module_names(source, self.depth + 1)
                if source and self.depth < _MAX_STAR_DEPTH
                else None
            )
            if followed is None or not followed.complete:
                self.complete = False
            else:
                self.names.update(n for n in followed.names if not n.startswith("_"))
        if source and not guarded:
            self.imports.append((source, tuple(a.name for a in named), node.lineno))


@functools.lru_cache(maxsize=512)
def module_names(name: str, depth: int = 0) -> ModuleNames | None:
    """What module `name` binds at its top level, read from its source; None when not found."""
    spec = find_spec(name)
    if spec is None:
        return None
    path = _source(spec)
    if path is None:
        return ModuleNames(frozenset(), complete=False)  # compiled, frozen or namespace
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ModuleNames(frozenset(), complete=False)
    reader = _Reader(name, spec.submodule_search_locations is not None, depth)
    reader.read(tree.body)
    if "globals()" in text or "setattr(sys.modules" in text:
        reader.complete = False  # names bound by code the tree does not show
    return ModuleNames(
        frozenset(reader.names),
        reader.complete,
        tuple(reader.imports),
        frozenset(reader.defined),
    )


def _submodules(name: str) -> list[str]:
    spec = find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        return []
    return sorted(m.name for m in pkgutil.iter_modules(list(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def _top_level_modules() -> tuple[str, ...]:
    return tuple(sorted({m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names)))


def _guess(module: str, missing: str, rest: list[str]) -> str | None:
    """`module.<a name near missing>.<rest>`: a name or submodule `module` has, or a class one
    level down (a package face that imports nothing: mine.data.WineData ->
    mine.data.wine.WineData)."""
    found = module_names(module)
    own = sorted(n for n in (found.names if found else ()) if not n.startswith("_"))
    subs = _submodules(module)
    near = _nearest(missing, own + subs)
    if near is not None:
        return ".".join([module, near, *rest])
    if not rest and subs:
        below = {
            f"{sub}.{n}": n
            for sub in subs[:50]
            for n in (getattr(module_names(f"{module}.{sub}"), "names", None) or ())
            if not n.startswith("_")
        }
        exact = sorted(path for path, n in below.items() if n == missing)
        if exact:
            return f"{module}.{exact[0]}"
        near = _nearest(missing, sorted(set(below.values())))
        if near is not None:
            path = sorted(p for p, n in below.items() if n == near)[0]
            return f"{module}.{path}"
    return None


def _forget() -> None:
    """Files come and go between two checks of one process (a test suite, a notebook)."""
    for cached in (find_spec, module_names, _outside_installed_packages, _top_level_modules):
        cached.cache_clear()


def target_problem(target: str) -> str | None:
    """Why `target` cannot be located (one clause, with a did-you-mean), or None when it can or
    when its source does not tell. Imports nothing."""
    _forget()
    return _target_problem(target)


def import_chain_problem(target: str) -> str | None:
    """A module missing from what importing `target`'s module runs, inside `target`'s own
    top-level package: "<file>:<line> imports <module>, which does not exist". Imports nothing."""
    _forget()
    return _import_chain_problem(target)


def relocated(target: str) -> str | None:
    """Where `target` lives when its package no longer re-exports it: `pkg.sub.Name` for
    `pkg.Name`, when exactly one module of `pkg` defines `Name` (a package face that stopped
    importing its classes). None when `target` is located as written or has no single home."""
    _forget()
    parts = target.split(".")
    if len(parts) < 2 or _target_problem(target) is None:
        return None
    package, name = ".".join(parts[:-1]), parts[-1]
    homes = [
        f"{package}.{sub}.{name}"
        for sub in _submodules(package)
        if name in getattr(module_names(f"{package}.{sub}"), "defined", ())
    ]
    return homes[0] if len(homes) == 1 else None


def _target_problem(target: str) -> str | None:
    parts = target.split(".")
    if not all(p.isidentifier() for p in parts):
        return f"{target!r} is not a dotted path to a class or function"
    known = 0
    while known < len(parts) and find_spec(".".join(parts[: known + 1])) is not None:
        known += 1
    if known == 0:
        near = _nearest(parts[0], list(_top_level_modules()))
        hint = f"; did you mean {'.'.join([near, *parts[1:]])}?" if near else ""
        return f"no module named {parts[0]!r}{hint}"
    if known == len(parts):
        return None  # a module: instantiate says it is not callable
    module, missing = ".".join(parts[:known]), parts[known]
    found = module_names(module)
    if found is None or not found.complete or missing in found.names:
        return None
    guess = _guess(module, missing, parts[known + 1 :])
    hint = f"; did you mean {guess}?" if guess else ""
    return f"{module} has no {missing!r}{hint}"


def _import_chain_problem(target: str) -> str | None:
    parts = target.split(".")
    package = parts[0]
    if package == __name__.split(".")[0] or not _outside_installed_packages(package):
        return None  # the engine's and installed libraries' imports are theirs (and work)
    chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    todo = [m for m in chain if find_spec(m) is not None]
    seen: set[str] = set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        found = module_names(name)
        spec = find_spec(name)
        if found is None or spec is None:
            continue
        where = _source(spec)
        for imported, from_names, line in found.imports:
            top = imported.split(".")[0]
            if find_spec(top) is None:
                return f"{_shown(where)}:{line} imports {imported}, which is not installed"
            if top != package:
                continue  # another package's own imports are its business
            if find_spec(imported) is None:
                return f"{_shown(where)}:{line} imports {imported}, which does not exist"
            todo.append(imported)
            source = module_names(imported)
            for item in from_names:
                if find_spec(f"{imported}.{item}") is not None:
                    todo.append(f"{imported}.{item}")
                elif source is not None and source.complete and item not in source.names:
                    return f"{_shown(where)}:{line} imports {item} from {imported}, which has none"
    return None


@functools.lru_cache(maxsize=64)
def _outside_installed_packages(package: str) -> bool:
    """True for code of the project (its src/, the clone's root), not an installed library:
    only there is a missing module a deleted file, and only there is the walk short."""
    spec = find_spec(package)
    path = _source(spec) if spec is not None else None
    if path is None:
        return False
    installed = {sysconfig.get_path(key) for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    return not any(
        root and path.resolve().is_relative_to(Path(root).resolve()) for root in installed
    )


def _shown(path: Path | None) -> str:
    if path is None:
        return "<unknown>"
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def config_targets(node: Any, path: str = "") -> list[tuple[str, str]]:
    """(key path, target) of every `_target_` in a config tree, its values unresolved (the
    `hydra` node left out: Hydra checks its own; a target written as an interpolation resolves
    only in the job, where instantiate checks it)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(node):
        node = OmegaConf.to_container(node, resolve=False)
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key, child in node.items():
            where = f"{path}.{key}" if path else str(key)
            if where == "hydra":
                continue
            if key == "_target_":
                if isinstance(child, str) and "${" not in child:
                    found.append((where, child))
            else:
                found += config_targets(child, where)
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += config_targets(child, f"{path}[{index}]")
    return found


def targets_problem(cfg: Any) -> str | None:
    """One line naming the first `_target_` of `cfg` that cannot be located, or None."""
    _forget()
    for where, target in config_targets(cfg):
        problem = _target_problem(target) or _import_chain_problem(target)
        if problem is not None:
            return f"{where}={target}: {problem}"
    return None
