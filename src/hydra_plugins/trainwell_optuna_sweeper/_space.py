"""Hydra sweep syntax -> Optuna distributions.

  choice(a, b, c)              categorical
  range(start, stop[, step])   int (or float) steps, `stop` excluded as in Hydra's own sweeps
  interval(low, high)          uniform float (int when both ends are ints)
  tag(log, interval(lo, hi))   log-uniform
A plain value is not searched: every trial gets it as is.
"""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import (
    ChoiceSweep,
    IntervalSweep,
    Override,
    RangeSweep,
    Transformer,
)
from hydra.errors import HydraException
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)


def distribution(override: Override) -> BaseDistribution:
    value = override.value()
    key = override.get_key_element()
    if isinstance(value, ChoiceSweep) or (isinstance(value, RangeSweep) and value.shuffle):
        return CategoricalDistribution(
            list(override.sweep_iterator(transformer=Transformer.encode))
        )
    if isinstance(value, RangeSweep):
        values = list(override.sweep_iterator(transformer=Transformer.encode))
        if not values:
            raise HydraException(f"search space: {override.input_line} is an empty range")
        step = value.step if value.step is not None else 1
        if all(isinstance(v, int) for v in values):
            return IntDistribution(int(values[0]), int(values[-1]), step=int(step))
        return FloatDistribution(float(values[0]), float(values[-1]), step=float(step))
    if isinstance(value, IntervalSweep):
        log = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log)
        return FloatDistribution(float(value.start), float(value.end), log=log)  # type: ignore[arg-type]
    raise HydraException(
        f"search space: {key} uses a sweep Optuna cannot sample ({override.input_line}); "
        "use choice(...), range(...), interval(...) or tag(log, interval(...))"
    )


def parse(arguments: list[str]) -> tuple[dict[str, BaseDistribution], dict[str, str]]:
    """(searched key -> distribution, fixed key -> value); a later argument for the same key
    replaces an earlier one (the command line after `hydra.sweeper.params`)."""
    space: dict[str, BaseDistribution] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(arguments):
        key = override.get_key_element()
        space.pop(key, None)
        fixed.pop(key, None)
        if override.is_sweep_override():
            space[key] = distribution(override)
        else:
            fixed[key] = override.get_value_element_as_str()
    return space, fixed


def as_override(key: str, value: object) -> str:
    """`key=value` in override syntax (strings quoted / escaped where Hydra needs it)."""
    return f"{key}={Transformer.str(value)}"  # type: ignore[arg-type]
