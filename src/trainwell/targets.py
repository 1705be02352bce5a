"""Where a config's `_target_`s point: found from the source files first, confirmed by Python.

A mistyped `_target_` (`data._target_=project.wine.WineDataModul`, on the command line or in a
yaml) is answered like a mistyped key: one line with a did-you-mean, before Hydra's instantiate
fails after the config was printed.

The fast path imports nothing: modules are found by their import specs (a package's submodules
through its search path, never by executing the package), and what a module binds is read from
its syntax tree. That reading may say "found"; it can never say "not found" on its own, since
Python binds names in ways a tree does not show (a lazy `__getattr__`, `exec`, a module that
replaces itself, a namespace package over two folders). So a target the reading does not find is
imported, as instantiate would import it, and only a failing import is a refusal: a valid start
pays nothing, and a refusal costs the import the run would have done anyway.

The same reading walks the imports a target's module runs on import, inside the target's own
package (the cloner's room: a deleted example one file imports): a module that is missing there
is named with the file and line that import it.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.machinery
import importlib.util
import pkgutil
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwell.did_you_mean import nearest

_MAX_STAR_DEPTH = 3  # `from .x import *` chains followed this deep (torch.nn: 2)


@dataclass(frozen=True)
class ModuleNames:
    """What a module's source visibly binds at module level (Python may bind more)."""

    names: frozenset[str]
    # (module, the names imported from it, line) of each import the module cannot run without
    imports: tuple[tuple[str, tuple[str, ...], int], ...] = field(default=())
    defined: frozenset[str] = frozenset()  # classes and functions written here, not imported


@functools.lru_cache(maxsize=4096)
def find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of module `name`, found without executing it or its parent packages; None when
    not found this way (Python may still find it: `python_finds` says)."""
    if name in sys.modules:
        return getattr(sys.modules[name], "__spec__", None)
    parent, _, child = name.rpartition(".")
    if not parent:
        try:
            return importlib.util.find_spec(name)  # a top-level name imports nothing
        except (ImportError, ValueError):
            return None
    above = find_spec(parent)
    if above is None or above.submodule_search_locations is None:
        return None
    locations = [str(p) for p in above.submodule_search_locations]
    try:
        return importlib.machinery.PathFinder.find_spec(name, locations)
    except KeyError:
        # A folder without __init__.py: the finder's namespace path looks its parent up in
        # sys.modules, which holds nothing here (nothing was imported). Its folders are these.
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [
            str(Path(p) / child) for p in locations if (Path(p) / child).is_dir()
        ]
        return spec
    except (ImportError, ValueError):
        return None


def python_finds(target: str) -> bool:
    """Python's own answer to "does `target` import?", as instantiate will ask it: import the
    longest module prefix, then read the rest as attributes. Only an ImportError or an
    AttributeError is a no; a module that fails otherwise exists, and instantiate reports how."""
    parts = target.split(".")
    try:
        found: Any = importlib.import_module(parts[0])
        for end in range(2, len(parts) + 1):
            try:
                found = getattr(found, parts[end - 1])
            except AttributeError:
                found = importlib.import_module(".".join(parts[:end]))
    except (ImportError, AttributeError):
        return False
    except Exception:  # the module exists and fails in its own way: instantiate reports it
        return True
    return True


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
        if len(named) < len(node.names) and source and self.depth < _MAX_STAR_DEPTH:
            followed = module_names(source, self.depth + 1)  # from x import *
            if followed is not None:
                self.names.update(n for n in followed.names if not n.startswith("_"))
        if source and not guarded:
            self.imports.append((source, tuple(a.name for a in named), node.lineno))


@functools.lru_cache(maxsize=512)
def module_names(name: str, depth: int = 0) -> ModuleNames | None:
    """What module `name` visibly binds at its top level, read from its source; None when not
    found."""
    spec = find_spec(name)
    if spec is None:
        return None
    tree = module_tree(name)
    if tree is None:
        return ModuleNames(frozenset())  # compiled, frozen, namespace or unreadable
    reader = _Reader(name, spec.submodule_search_locations is not None, depth)
    reader.read(tree.body)
    return ModuleNames(frozenset(reader.names), tuple(reader.imports), frozenset(reader.defined))


@functools.lru_cache(maxsize=512)
def module_tree(name: str) -> ast.Module | None:
    """The syntax tree of module `name`'s source file, or None (no source, or unreadable)."""
    spec = find_spec(name)
    path = _source(spec) if spec is not None else None
    if path is None:
        return None
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


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
    near = nearest(missing, own + subs)
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
        near = nearest(missing, sorted(set(below.values())))
        if near is not None:
            path = sorted(p for p, n in below.items() if n == near)[0]
            return f"{module}.{path}"
    return None


def forget() -> None:
    """Files come and go between two checks of one process (a test suite, a notebook)."""
    for cached in (
        find_spec,
        module_names,
        module_tree,
        _outside_installed_packages,
        _top_level_modules,
    ):
        cached.cache_clear()


def _confirmed(read: Callable[[str], str | None], target: str) -> str | None:
    """What the source reading `read` finds wrong with `target`, kept only when Python's own
    import fails too. A failure of the reading itself is the reading's: the run goes on as if
    unchecked, and instantiate answers."""
    try:
        problem = read(target)
    except Exception:  # a source this reading does not understand: instantiate checks it
        return None
    if problem is None or python_finds(target):
        return None
    return problem


def target_problem(target: str) -> str | None:
    """Why `target` cannot be located (one clause, with a did-you-mean), or None when it can.
    Imports nothing when the source shows it; imports it to confirm a refusal."""
    forget()
    return _confirmed(_target_problem, target)


def import_chain_problem(target: str) -> str | None:
    """A module missing from what importing `target`'s module runs, inside `target`'s own
    top-level package: "<file>:<line> imports <module>, which does not exist". Imports nothing
    when the source shows no such module; imports `target` to confirm one."""
    forget()
    return _confirmed(_import_chain_problem, target)


def relocated(target: str) -> str | None:
    """Where `target` lives when its package no longer re-exports it: `pkg.sub.Name` for
    `pkg.Name`, when exactly one module of `pkg` defines `Name` (a package face that stopped
    importing its classes). None when `target` is located as written or has no single home."""
    parts = target.split(".")
    if len(parts) < 2 or target_problem(target) is None:
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
        near = nearest(parts[0], _top_level_modules())
        hint = f"; did you mean {'.'.join([near, *parts[1:]])}?" if near else ""
        return f"no module named {parts[0]!r}{hint}"
    if known == len(parts):
        return None  # a module: instantiate says it is not callable
    module, missing = ".".join(parts[:known]), parts[known]
    found = module_names(module)
    if found is None or missing in found.names:
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
                elif source is not None and item not in source.names:
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


def target_nodes(node: Any, path: str = "") -> list[tuple[str, str, dict[str, Any]]]:
    """(key path, target, node) of every node with a `_target_` in a config tree, its values
    unresolved (the `hydra` node left out: Hydra checks its own; a target written as an
    interpolation resolves only in the job, where instantiate checks it)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(node):
        node = OmegaConf.to_container(node, resolve=False)
    found: list[tuple[str, str, dict[str, Any]]] = []
    if isinstance(node, dict):
        target = node.get("_target_")
        if isinstance(target, str) and "${" not in target and path != "hydra":
            found.append((path, target, node))
        for key, child in node.items():
            where = f"{path}.{key}" if path else str(key)
            if where != "hydra":
                found += target_nodes(child, where)
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += target_nodes(child, f"{path}[{index}]")
    return found


def config_targets(node: Any) -> list[tuple[str, str]]:
    """(`<key path>._target_`, target) of every `_target_` in a config tree (target_nodes)."""
    return [(f"{path}._target_" if path else "_target_", t) for path, t, _ in target_nodes(node)]


def targets_problem(cfg: Any) -> str | None:
    """One line naming the first `_target_` of `cfg` that cannot be located, or None. What it
    read stays cached for the checks that follow it (keywords.py) until the next forget()."""
    forget()
    read = lambda target: _target_problem(target) or _import_chain_problem(target)  # noqa: E731
    for where, target in config_targets(cfg):
        problem = _confirmed(read, target)
        if problem is not None:
            return f"{where}={target}: {problem}"
    return None
