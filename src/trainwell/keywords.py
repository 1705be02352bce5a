"""The keywords a config node gives its `_target_`, checked against the target's signature as its
source shows it, before torch is imported.

`+model.net.widht=16` or a misspelt key in a cloner's yaml would otherwise fail inside Hydra's
instantiate, after the config print and the data set-up, as a traceback. The signature is read
from the syntax tree (targets.py finds the module): the class's own `__init__`, or the one it
inherits through a single base, following `**kwargs` that `__init__` hands to
`super().__init__` (a datamodule forwarding its loader keywords to its base). A signature is
used only when the source shows all of it: a class decorator, a metaclass, `__new__` or
`__signature__`, a decorator that is not a `functools.wraps` forwarder, several bases, or a
name bound by anything but `def`/`class`/`from ... import` leave the node unchecked here, and
an instantiate error naming an unexpected keyword is then answered in the same one line
(`unexpected_keyword_line`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainwell.did_you_mean import nearest
from trainwell.targets import find_spec, module_tree, target_nodes

_HOPS = 8  # `from x import Name` re-exports followed this deep


@dataclass(frozen=True)
class Signature:
    """The keywords a callable takes, as its source shows them."""

    names: frozenset[str]
    required: frozenset[str]
    open: bool  # takes **kwargs it does not visibly forward: any keyword may be valid
    # What an editor's schema shows (schemas.py); the keyword check reads neither. Defaults are
    # those the source writes as literals; a computed default is left out, not guessed.
    defaults: tuple[tuple[str, Any], ...] = ()
    doc: str | None = None


_Where = tuple[str, Any]  # (module, its `def` or `class` statement)


def _binding(module: str, name: str, hops: int = 0) -> _Where | None:
    """The `def`/`class` statement that binds `name` in `module`, following `from x import`;
    None when anything else may bind it (a compound statement, a star import, run-time code)."""
    tree = module_tree(module)
    if tree is None or hops > _HOPS or _rebinds_at_run_time(module):
        return None
    found: _Where | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            found = (module, node)
        elif isinstance(node, ast.ImportFrom) and not any(a.name == "*" for a in node.names):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    found = _imported(module, node, alias.name, hops)
        elif _binds(node, name):
            found = None
    return found


# Code that may bind any name of its module: exec/eval, `globals()`/`vars()` without an argument,
# a `global` statement, a write to `sys.modules` or setattr on one of its modules. Read from the
# text: a match in a comment or a string only leaves the module unchecked.
_REBINDS = re.compile(
    r"\b(?:exec|eval)\s*\(|\b(?:globals|vars)\s*\(\s*\)|^\s*global\s|"
    r"sys\.modules\s*\[[^\]]*\]\s*=[^=]|setattr\(\s*sys\.modules|del\s+sys\.modules",
    re.M,
)


@functools.lru_cache(maxsize=512)
def _rebinds_at_run_time(module: str) -> bool:
    spec = find_spec(module)
    origin = spec.origin if spec is not None else None
    try:
        return bool(_REBINDS.search(Path(origin).read_text(encoding="utf-8"))) if origin else True
    except (OSError, UnicodeDecodeError):
        return True


def _imported(module: str, node: ast.ImportFrom, name: str, hops: int) -> _Where | None:
    spec = find_spec(module)
    is_package = spec is not None and spec.submodule_search_locations is not None
    source = node.module or ""
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    if not source or find_spec(f"{source}.{name}") is not None:
        return None  # a submodule, not a class
    return _binding(source, name, hops + 1)


def _binds(node: ast.stmt, name: str) -> bool:
    """Whether module-level statement `node` may bind `name` (a def or class body binds its own
    names only; `global` is _rebinds_at_run_time's)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, ast.Store):
            return True
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
            sub.name == name
        ):
            return True
        if isinstance(sub, ast.alias):
            bound = sub.asname or sub.name.split(".")[0]
            if bound in (name, "*"):
                return True
        if isinstance(sub, ast.MatchAs | ast.MatchStar) and sub.name == name:
            return True
    return False


def _resolve(module: str, expr: ast.expr) -> _Where | None:
    """The class a base-class expression (`Base`, `L.LightningDataModule`) names in `module`."""
    dotted: list[str] = []
    while isinstance(expr, ast.Attribute):
        dotted.insert(0, expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    if not dotted:
        return _binding(module, expr.id)
    tree = module_tree(module)
    for node in tree.body if tree is not None else ():  # `import x.y as L` / `import x`
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == expr.id:
                    path = [alias.name if alias.asname else expr.id, *dotted]
                    return _locate(".".join(path))
    return None


def _locate(target: str) -> _Where | None:
    """The statement that defines `target` (`module.Name`), or None."""
    parts = target.split(".")
    known = 0
    while known < len(parts) and find_spec(".".join(parts[: known + 1])) is not None:
        known += 1
    if known != len(parts) - 1:
        return None  # a module, a name not found, or an attribute of a class
    return _binding(".".join(parts[:known]), parts[-1])


def signature(target: str) -> Signature | None:
    """The keywords `target` takes, or None when its source does not show all of them."""
    where = _locate(target)
    if where is None:
        return None
    module, node = where
    if isinstance(node, ast.ClassDef):
        found = _class_signature(module, node, 0)
    else:
        found = _function_signature(module, node, None, skip_self=False)
    return None if found is None else replace(found, doc=ast.get_docstring(node))


def _class_signature(module: str, node: ast.ClassDef, depth: int) -> Signature | None:
    if node.decorator_list or node.keywords or depth > _HOPS:
        return None  # a dataclass, a metaclass: the signature is made at run time
    init = None
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if item.name in ("__new__", "__signature__", "__call__"):
                return None
            if item.name == "__init__":
                init = item
        elif _binds(item, "__init__") or _binds(item, "__new__") or _binds(item, "__signature__"):
            return None
    if init is not None:
        return _function_signature(module, init, (node, depth), skip_self=True)
    base = _single_base(module, node)
    if base is None:
        return Signature(frozenset(), frozenset(), open=False) if not node.bases else None
    return _class_signature(base[0], base[1], depth + 1)


def _single_base(module: str, node: ast.ClassDef) -> _Where | None:
    if len(node.bases) != 1:
        return None  # several bases: the MRO decides which __init__ runs
    found = _resolve(module, node.bases[0])
    return found if found is not None and isinstance(found[1], ast.ClassDef) else None


def _function_signature(
    module: str, func: Any, owner: tuple[ast.ClassDef, int] | None, skip_self: bool
) -> Signature | None:
    if not all(_forwards_unchanged(module, d) for d in func.decorator_list):
        return None
    args = func.args
    positional = [*args.posonlyargs, *args.args]  # defaults fill the last of these
    optional = {a.arg for a in positional[len(positional) - len(args.defaults) :]}
    optional |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d}
    by_name = args.args[1:] if skip_self and not args.posonlyargs else args.args
    names = {a.arg for a in [*by_name, *args.kwonlyargs]}  # positional-only: never a keyword
    required = names - optional
    written = [*zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)]
    written += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
    defaults = _literals([(a.arg, d) for a, d in written if a.arg in names])
    if args.kwarg is None:
        return Signature(frozenset(names), frozenset(required), open=False, defaults=defaults)
    base = None
    if owner is not None and _only_forwards_to_super(func, args.kwarg.arg):
        found = _single_base(module, owner[0])
        if found is not None:
            base = _class_signature(found[0], found[1], owner[1] + 1)
    if base is None:
        return Signature(frozenset(names), frozenset(required), open=True, defaults=defaults)
    mine = {name for name, _ in defaults}
    defaults += tuple((name, value) for name, value in base.defaults if name not in mine)
    return Signature(
        frozenset(names | base.names), frozenset(required), open=base.open, defaults=defaults
    )


def _literals(written: list[tuple[str, ast.expr]]) -> tuple[tuple[str, Any], ...]:
    """The defaults written as literals (`1e-3`, `None`, `(0.9, 0.999)`), by name."""
    found = []
    for name, expr in written:
        try:
            found.append((name, ast.literal_eval(expr)))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue  # computed at run time (`os.cpu_count()`): not shown rather than guessed
    return tuple(found)


def _only_forwards_to_super(func: Any, kwargs: str) -> bool:
    """`**kwargs` is used once: `super().__init__(..., **kwargs)`."""
    uses = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == kwargs]
    if len(uses) != 1:
        return False
    for call in ast.walk(func):
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
            continue
        inner = call.func.value
        if (
            call.func.attr == "__init__"
            and isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Name)
            and inner.func.id == "super"
            and any(k.arg is None and k.value is uses[0] for k in call.keywords)
        ):
            return True
    return False


def _forwards_unchanged(module: str, decorator: ast.expr) -> bool:
    """A decorator whose wrapper is `@wraps(fn)` and calls `fn(..., **kwargs)` with its own
    `**kwargs` (Lightning's Trainer.__init__): the keywords are the wrapped function's."""
    found = _resolve(module, decorator)
    if found is None or not isinstance(found[1], ast.FunctionDef) or not found[1].args.args:
        return False
    fn = found[1].args.args[0].arg
    for inner in ast.walk(found[1]):
        if not isinstance(inner, ast.FunctionDef) or inner.args.kwarg is None:
            continue
        wrapped = any(
            isinstance(d, ast.Call)
            and (getattr(d.func, "id", None) == "wraps" or getattr(d.func, "attr", None) == "wraps")
            and [getattr(a, "id", None) for a in d.args] == [fn]
            for d in inner.decorator_list
        )
        kwargs = inner.args.kwarg.arg
        calls = any(
            isinstance(c, ast.Call)
            and getattr(c.func, "id", None) == fn
            and any(k.arg is None and getattr(k.value, "id", None) == kwargs for k in c.keywords)
            for c in ast.walk(inner)
        )
        if wrapped and calls:
            return True
    return False


def _keys(node: dict[str, Any]) -> list[str]:
    """The keywords instantiate passes: every key but Hydra's own `_name_`s."""
    return [str(k) for k in node if not (str(k).startswith("_") and str(k).endswith("_"))]


def keyword_problem(cfg: Any) -> str | None:
    """One line naming the first keyword a `_target_` does not take (with a did-you-mean), or a
    required one its node leaves out; None when all fit or the source does not tell. Imports
    nothing."""
    _rebinds_at_run_time.cache_clear()  # the sources targets_problem read stay cached (forget())
    try:
        nodes = target_nodes(cfg)
    except Exception:  # a config this walk does not understand: instantiate checks it
        return None
    for path, target, node in nodes:
        try:
            sig = signature(target)
        except Exception:  # a source this reading does not understand: instantiate checks it
            continue
        if sig is None:
            continue
        keys = _keys(node)
        prefix = f"{path}." if path else ""
        name = target.rsplit(".", 1)[-1]
        for key in keys:
            if not sig.open and key not in sig.names:
                guess = nearest(key, sorted(sig.names))
                hint = f"; did you mean {prefix}{guess}?" if guess else ""
                return f"{prefix}{key}: {name} takes no keyword {key!r}{hint}"
        missing = sorted(sig.required - set(keys))
        if missing and not node.get("_partial_") and "_args_" not in node:
            return f"{path or target}: {name} needs {', '.join(missing)}, which the config lacks"
    return None


_UNEXPECTED = re.compile(
    r"Error in call to target '(?P<target>[^']+)':\n\w+\([\"']?(?P<callee>[\w.]+)\(\) got an "
    r"unexpected keyword argument '(?P<key>\w+)'.*?(?:full_key: (?P<full_key>\S+))?\s*$",
    re.S,
)


def unexpected_keyword_line(err: BaseException) -> str | None:
    """Hydra's instantiate error for a config keyword that the target's constructor (or a base it
    forwards its keywords to) refuses, as the one line `keyword_problem` gives; None for any other
    error (a bad keyword in a call the constructor itself makes is a crash, not bad input)."""
    found = _UNEXPECTED.search(str(err))
    if found is None:
        return None
    target, callee, key, full_key = found.group("target", "callee", "key", "full_key")
    try:
        from hydra.utils import get_object

        obj = get_object(target)
        owners = inspect.getmro(obj) if inspect.isclass(obj) else (obj,)
        if callee.split(".")[0] not in {owner.__name__ for owner in owners}:
            return None  # another call inside the constructor
        calls = [owner.__init__ for owner in owners] if inspect.isclass(obj) else [obj]
        choices = {
            p.name
            for call in calls
            for p in inspect.signature(call).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
        }
    except Exception:  # no signature to compare with: Hydra's own report stands
        return None
    prefix = f"{full_key}." if full_key else ""
    guess = nearest(key, sorted(choices))
    hint = f"; did you mean {prefix}{guess}?" if guess else ""
    return f"{prefix}{key}: {target.rsplit('.', 1)[-1]} takes no keyword {key!r}{hint}"
