"""The command line, checked before Hydra sees it: a typo in a key, a group or an option is one
line naming the cause and the likely fix (Hydra's own message is several lines and exits 1,
which reads as a crash), and `<group>=null` means "none of that group"."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

import trainwell.resolvers  # noqa: F401  (registers resolvers before Hydra composes)
from trainwell.config_values import target_value_problem, template_value_problem
from trainwell.did_you_mean import nearest
from trainwell.errors import TrainwellError, first_line
from trainwell.keywords import keyword_problem
from trainwell.targets import targets_problem


def _compose(config_dir: Path, config_name: str, overrides: Sequence[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides), return_hydra_config=True)


@functools.lru_cache(maxsize=2)
def composed(config_dir: Path, config_name: str, overrides: tuple[str, ...]) -> DictConfig:
    """The command line's config, composed once for both the check and the run dir lock."""
    return _compose(config_dir, config_name, overrides)


def _nearest(word: str, choices: Sequence[str]) -> str | None:
    return nearest(word, choices, cutoff=0.5)  # a key or option: short words, a looser match


def _explain_unknown_key(key: str, config_dir: Path, config_name: str, rest: list[str]) -> str:
    """`trainer.max_epoch=3` -> did you mean trainer.max_epochs? Each path component is matched
    against the keys of the composed config at that level (groups count as top-level keys)."""
    try:
        node: Any = _compose(config_dir, config_name, rest)
    except HydraException:
        node = None
    corrected: list[str] = []
    parts = key.lstrip("+~").split(".")
    for depth, part in enumerate(parts, start=1):
        if node is None or not OmegaConf.is_dict(node):
            corrected = []
            break
        if part not in node:
            choices = [str(k) for k in node] + ([] if corrected else group_names(config_dir))
            part = _nearest(part, choices) or ""
            if not part:
                corrected = []
                break
        corrected.append(part)
        if depth < len(parts):  # the last value is never read: resolving `model.num_classes`
            node = node.get(part)  # would import the datamodule's class (and torch)
    line = f"unknown config key '{key}'"
    if corrected and ".".join(corrected) != key:
        return f"{line}; did you mean '{'.'.join(corrected)}'? (add a new key with +{key}=...)"
    return f"{line}; check the spelling, or add a new key with +{key}=..."


def group_names(config_dir: Path) -> list[str]:
    return sorted(p.name for p in config_dir.iterdir() if p.is_dir())


def _explain_missing_config(err: MissingConfigException) -> str:
    """`trainer=cpux` -> did you mean trainer=cpu? (Hydra lists the options, multi-line)."""
    text = str(err)
    missing = re.search(r"Could not (?:find|load) '([^']+)'", text)
    group = re.search(r"Available options in '([^']+)':\n((?:\t[^\n]*\n?)+)", text)
    if not (missing and group):
        return _one_line(text)
    name = missing.group(1).rsplit("/", 1)[-1]
    options = [o.strip() for o in group.group(2).splitlines() if o.strip()]
    guess = _nearest(name, options)
    hint = f"did you mean {group.group(1)}={guess}? " if guess else ""
    return f"unknown {group.group(1)} config '{name}'; {hint}(options: {', '.join(options)})"


def _one_line(text: str) -> str:
    """Hydra's message (cause, then the fixes) joined into one line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("Config search path", "provider="))]
    return "; ".join(lines)[:400] if lines else "invalid command line"


def check_command_line(
    config_dir: Path,
    config_name: str,
    argv: Sequence[str],
    check_paths: Callable[[DictConfig], object] | None = None,
) -> str | None:
    """Compose the config the way Hydra will; on a mistake return one line naming the cause and
    the fix (Hydra's own message is several lines and exits 1, which reads as a crash). A
    multirun (-m) checks every job it will launch before the first starts.

    In order: keys, the template's values, the `_target_`s (each module found and each class read
    from its source: targets.py; only a refusal imports, to confirm it), the keywords each
    target's signature takes (read from the same sources: keywords.py), the paths the command
    names (`check_paths` raises a TrainwellError), then the values a `_target_`'s annotations
    refuse. The last imports the user's classes, and with them torch and Lightning; everything
    before it imports neither on a valid start, so a mistyped key or keyword is answered within
    a second.
    """
    if any(arg.startswith("-") and arg not in _MULTIRUN for arg in argv):
        return None  # --cfg / --help / --info: Hydra's own handling
    overrides = [arg for arg in argv if arg not in _MULTIRUN]
    try:
        jobs = sweep_jobs(overrides) if len(overrides) < len(argv) else [(overrides, [])]
    except Exception:  # an override Hydra's parser refuses: composing it names the mistake
        jobs = [(overrides, [])]
    for late in (False, True):  # every job's import-free checks before any import
        for index, (job, values) in enumerate(jobs):
            problem = (
                _late_problem(composed(config_dir, config_name, tuple(job)), check_paths)
                if late
                else _job_problem(config_dir, config_name, job)
            )
            if problem is not None:  # a job failing where the first passes is named
                return f"{problem} (job {' '.join(values)})" if index else problem
    return None


_MULTIRUN = ("-m", "--multirun")
_MAX_JOBS = 64  # a bigger sweep checks each of its values once, not every combination


def sweep_jobs(overrides: Sequence[str]) -> list[tuple[list[str], list[str]]]:
    """(the overrides of one job, its sweep choices) for each job a multirun's command line
    makes, in the order a basic sweep launches them. A sweep only a search can draw from
    (`interval(...)`, a glob) is left out: its jobs are checked on the rest."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    fixed: list[str] = []
    swept: list[list[str]] = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if not override.is_sweep_override():
            fixed.append(override.input_line)
            continue
        try:
            values = list(override.sweep_string_iterator()) if override.is_discrete_sweep() else []
        except Exception:  # a glob over a group's options: Hydra expands it, the job checks it
            values = []
        if values:
            swept.append([f"{override.get_key_element()}={value}" for value in values])
    combos = list(itertools.islice(itertools.product(*swept), _MAX_JOBS + 1))
    if len(combos) > _MAX_JOBS:  # each value once: job i takes value i of every sweep
        longest = max(len(values) for values in swept)
        combos = [tuple(values[i % len(values)] for values in swept) for i in range(longest)]
    return [([*fixed, *combo], list(combo)) for combo in combos]


def _job_problem(config_dir: Path, config_name: str, argv: Sequence[str]) -> str | None:
    """The checks that import nothing on a valid config (a refused target is imported to
    confirm it)."""
    try:
        cfg = composed(config_dir, config_name, tuple(argv))
    except MissingConfigException as err:
        return _explain_missing_config(err)
    except HydraException as err:
        text = str(err)
        bad = re.search(r"Could not override '([^']+)'", text)
        if bad:
            key = bad.group(1)
            rest = [a for a in argv if a.split("=", 1)[0].lstrip("+~") != key.lstrip("+~")]
            return _explain_unknown_key(key, config_dir, config_name, rest)
        return _one_line(text)
    except ValueError as err:  # Hydra's override parser raises plain ValueErrors too
        return _one_line(str(err))
    return (
        _missing_interpolation(cfg)
        or template_value_problem(cfg)
        or targets_problem(cfg)
        or keyword_problem(cfg)
    )


def _late_problem(
    cfg: DictConfig, check_paths: Callable[[DictConfig], object] | None
) -> str | None:
    """The checks that may import the user's classes (and torch): after every cheap one."""
    return _path_problem(cfg, check_paths) or target_value_problem(cfg)


def _path_problem(
    cfg: DictConfig, check_paths: Callable[[DictConfig], object] | None
) -> str | None:
    if check_paths is None:
        return None
    try:
        check_paths(cfg)
    except TrainwellError as err:
        return first_line(err)
    except OmegaConfBaseException:
        return None  # a path that resolves only inside the job (${hydra:...}): the job checks it
    return None


def _missing_interpolation(cfg: DictConfig) -> str | None:
    """A run dir naming a key the config lacks: Hydra would resolve it before the job starts and
    stop with a traceback. Only a missing key is reported here: other interpolations (${hydra:...})
    resolve only inside Hydra's job."""
    for key in ("hydra.run.dir", "hydra.sweep.dir"):
        try:
            OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
        except InterpolationKeyError as err:
            lines = [line for line in str(err).splitlines() if "object_type" not in line]
            return f"{key}: {_one_line(chr(10).join(lines))}"
        except ValueError:
            continue
    return None


def without_null_groups(config_dir: Path, argv: Sequence[str]) -> list[str]:
    """`logger=null` / `callbacks=null` mean "none": Hydra only understands that as `~logger`
    (deleting the default) and otherwise stops with a ValueError about a NoneType override."""
    groups = set(group_names(config_dir))
    out = []
    for arg in argv:
        key, _, value = arg.partition("=")
        out.append(
            f"~{key}" if key in groups and value.strip().lower() in ("null", "none") else arg
        )
    return out
