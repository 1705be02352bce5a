"""JSON Schemas of the config groups, for an editor's completion and red underlines
(`make schema`: `.schemas/<group>.schema.json`, mapped to `conf/<group>/*.yaml` by
.vscode/settings.json).

Each schema is made from the `_target_`s the group's configs name: a target's keywords, their
literal defaults and its docstring come from keywords.signature (the same reading of the source
that refuses a misspelt keyword at step 0), the simple types from its annotations as
config_values.simple_types reads them. Unknown keys are flagged only where that signature is
fully visible, the rule the step-0 check refuses by; a node whose `_target_` no config names yet
is left open, so that a new class is never underlined before `make schema` has seen it. Any value
may be an interpolation (`${...}`): composition resolves it, not the editor.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from trainwell.config_values import simple_types
from trainwell.keywords import Signature, signature
from trainwell.targets import target_nodes

_NODE = {"$ref": "#/definitions/node"}
_INTERPOLATION = {"type": "string", "pattern": r"\$\{"}
# A dict that names a `_target_` is instantiated wherever it sits: check it as a node.
_IF_NODE = {"if": {"type": "object", "required": ["_target_"]}, "then": _NODE}
_DEFAULTS = {"type": "array", "description": "Hydra's defaults list: the configs this one extends"}
# Hydra's own keys of a node (hydra.utils.instantiate); keywords.py passes none of them as keywords.
_HYDRA_KEYS: dict[str, Any] = {
    "_target_": {"type": "string", "description": "The class or function this node builds"},
    "_partial_": {"anyOf": [{"type": "boolean"}, _INTERPOLATION]},
    "_args_": {"type": "array", "items": _IF_NODE},
    "_recursive_": {"anyOf": [{"type": "boolean"}, _INTERPOLATION]},
    "_convert_": {"anyOf": [{"enum": ["none", "partial", "object", "all"]}, _INTERPOLATION]},
    "defaults": _DEFAULTS,
}
# Keys spelt `_name_` are Hydra's, never keywords (keywords._keys skips them the same way).
_HYDRA_NAMES = {"^_.+_$": {}}
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
_JSON_TYPES.update({type(None): "null", list: "array", tuple: "array", dict: "object"})
_PACKAGE = re.compile(r"^#\s*@package\s+(\S+)", re.M)


def groups(conf: Path) -> dict[str, list[Path]]:
    """The config groups under `conf` (each folder holding yaml files; `model/optimizer` named
    `model.optimizer`) and their files."""
    found: dict[str, list[Path]] = {}
    for path in sorted(conf.rglob("*.yaml")):
        if path.parent != conf:
            found.setdefault(".".join(path.parent.relative_to(conf).parts), []).append(path)
    return found


def _package(path: Path) -> str | None:
    """The `# @package` a file declares in its header comment, or None (its group's)."""
    header = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        header.append(line)
    found = _PACKAGE.search("\n".join(header))
    return found.group(1) if found and found.group(1) != "_group_" else None


def _hints(target: str) -> dict[str, Any]:
    """The annotations of the target's keywords, a subclass's over its bases' (the keywords it
    forwards to a base are annotated there); empty when it does not import here."""
    from hydra.utils import get_object

    try:
        obj = get_object(target)
    except Exception:  # not importable here (an optional dependency): the schema has no types
        return {}
    hints: dict[str, Any] = {}
    for owner in reversed(inspect.getmro(obj) if inspect.isclass(obj) else (obj,)):
        try:
            hints.update(typing.get_type_hints(owner.__init__ if inspect.isclass(obj) else owner))
        except Exception:  # a hint that does not evaluate: that keyword is left untyped
            continue
    return hints


def _value(annotation: Any) -> dict[str, Any]:
    """What a keyword's value may be: the annotation's simple types, a node where it names a
    class, an interpolation anywhere; anything where the annotation is not that simple."""
    allowed = simple_types(annotation) if annotation is not None else None
    if allowed is None:
        return dict(_IF_NODE)
    # null passes as config_values lets it: it means "off" or "the default" (`x: int = None`)
    kinds = {"null", *(_JSON_TYPES[k] for k in allowed if k in _JSON_TYPES)}
    if any(issubclass(k, str | Path) or k.__name__ == "PathLike" for k in allowed):
        kinds.add("string")
    arms: list[dict[str, Any]] = [{"type": sorted(kinds)}]
    if any(k not in _JSON_TYPES for k in allowed):
        arms.append(_NODE)  # a class: its config is a node of its own (net: nn.Module)
    return {"anyOf": [*arms, _INTERPOLATION]}


def _branch(target: str, sig: Signature | None) -> dict[str, Any]:
    """The schema of a node that builds `target`."""
    hints = _hints(target)
    defaults = dict(sig.defaults) if sig is not None else {}
    properties: dict[str, Any] = {**_HYDRA_KEYS, "_target_": {"const": target}}
    for name in sorted(sig.names if sig is not None else ()):
        properties[name] = _value(hints.get(name))
        if name in defaults and _is_json(defaults[name]):
            properties[name]["default"] = defaults[name]
    branch: dict[str, Any] = {"type": "object", "title": target, "properties": properties}
    if sig is not None and sig.doc:
        branch["description"] = sig.doc
    branch["patternProperties"] = _HYDRA_NAMES
    # Closed only where the source shows every keyword: an open **kwargs may take any key.
    branch["additionalProperties"] = sig is None or sig.open
    return branch


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)  # inf and nan have no JSON spelling
    except (TypeError, ValueError):
        return False
    return True


def _definitions(known: set[str]) -> dict[str, Any]:
    """A definition per known target, and `node`: any value a `_target_` node may take."""
    definitions = {f"target:{t}": _branch(t, _signature(t)) for t in sorted(known)}
    unknown = {
        "type": "object",
        "required": ["_target_"],
        "properties": {"_target_": {"not": {"enum": sorted(known)}}},
    }
    container = {  # callbacks, logger: named nodes, no target of its own
        "type": "object",
        "not": {"required": ["_target_"]},
        "properties": {"defaults": _DEFAULTS},
        "additionalProperties": {"anyOf": [_NODE, {"type": "null"}, _INTERPOLATION]},
    }
    definitions["unknown_target"] = unknown
    definitions["container"] = container
    targets = [{"$ref": f"#/definitions/target:{t}"} for t in sorted(known)]
    definitions["node"] = {
        "anyOf": [
            *targets,
            {"$ref": "#/definitions/unknown_target"},
            {"$ref": "#/definitions/container"},
            {"type": "null"},
            _INTERPOLATION,
        ]
    }
    return definitions


def _signature(target: str) -> Signature | None:
    try:
        return signature(target)
    except Exception:  # a source this reading does not understand: the node stays open
        return None


def _load(path: Path) -> Any:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def build(confs: list[Path]) -> dict[str, dict[str, Any]]:
    """One schema per config group of the config dirs `confs` (conf/ and any search dir), by
    group name: the group's own targets first; a `# @package _global_` file's keys are checked
    by the groups they name."""
    members: dict[str, list[Path]] = {}
    for conf in confs:
        for group, paths in groups(conf).items():
            members.setdefault(group, []).extend(paths)
    known: set[str] = set()
    tops: dict[str, set[str]] = {}
    packages: dict[str, set[str | None]] = {}
    for group, paths in members.items():
        for path in paths:
            nodes = target_nodes(_load(path))
            known |= {target for _, target, _ in nodes}
            tops.setdefault(group, set()).update(t for where, t, _ in nodes if where == "")
            packages.setdefault(group, set()).add(_package(path))
    definitions = _definitions(known)
    for group, top in tops.items():
        definitions[f"group:{group}"] = {
            "anyOf": [{"$ref": f"#/definitions/target:{t}"} for t in sorted(top)]
            + [{"$ref": f"#/definitions/{d}"} for d in ("unknown_target", "container")]
        }
    # Top-level groups whose files sit at their own package: a global file's `model:` is one.
    placed = {g for g in tops if "." not in g and packages[g] == {None}}
    root = {  # a `# @package _global_` file: the root config's keys
        "type": "object",
        "properties": {
            "defaults": _DEFAULTS,
            **{g: {"$ref": f"#/definitions/group:{g}"} for g in sorted(placed)},
        },
        # a root knob (ema, seed) holds no node of its own: a `_target_` there is misplaced
        "additionalProperties": {"not": {"type": "object", "required": ["_target_"]}},
    }
    definitions["global"] = root
    schemas = {}
    for group in sorted(members):
        arms: list[dict[str, Any]] = [{"$ref": f"#/definitions/group:{group}"}]
        if "_global_" in packages[group]:
            arms.append({"$ref": "#/definitions/global"})
        if packages[group] - {None, "_global_"}:
            arms.append({"type": "object"})  # placed elsewhere: not checked here
        schemas[group] = {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": f"{group} config",
            "anyOf": arms,
            "definitions": definitions,
        }
    return schemas


def write(confs: list[Path], out: Path) -> list[Path]:
    """Write build(confs) to `out/<group>.schema.json`, replacing the schemas there; the paths."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.schema.json"):
        stale.unlink()  # a deleted group's schema goes with it
    written = []
    for group, schema in build(confs).items():
        path = out / f"{group}.schema.json"
        path.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written


def file_globs(confs: list[Path], root: Path) -> dict[str, list[str]]:
    """The files of each group, as globs an editor setting matches (relative to the project root
    where the config dir is inside it). One folder per group, its own files only: a subgroup's
    files (model/optimizer) are matched by their own schema, not by their parent's too."""
    globs: dict[str, list[str]] = {}
    root = root.resolve()
    for conf in confs:
        where = conf.resolve()
        base = where.relative_to(root).as_posix() if where.is_relative_to(root) else where
        for group in groups(conf):
            globs.setdefault(group, []).append(f"{base}/{group.replace('.', '/')}/*.yaml")
    return globs


def editor_settings(settings: Path, globs: dict[str, list[str]]) -> bool:
    """Point the YAML extension's `yaml.schemas` (VS Code settings) at each group's schema,
    keeping every other setting; False (nothing written) when the file is not plain JSON (a
    settings file with comments is the user's to edit)."""
    try:
        current = json.loads(settings.read_text(encoding="utf-8")) if settings.exists() else {}
    except (OSError, ValueError):
        return False
    if not isinstance(current, dict):
        return False
    current["yaml.schemas"] = {f"./.schemas/{g}.schema.json": globs[g] for g in sorted(globs)}
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    return True
