"""checkpoint.partial_load: a `load_state_dict(strict=False)` while the task is built that
loads nothing.

`strict=False` turns missing and unexpected keys into a returned list nobody reads: weights
saved through a wrapper (`model.` from a LightningModule attribute, `module.` from
DataParallel/DDP, `_orig_mod.` from torch.compile) then match no key, and training silently
starts from random weights. The check builds the task once more with the loads watched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch import nn

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.report.verdict import Verdict, fails, passes


@dataclass
class Load:
    module: str  # the class of the module loaded into
    strict: bool
    given: list[str]  # the keys of the state_dict passed in
    expected: int  # the keys the module has
    loaded: int  # keys that matched


@contextmanager
def watched_loads() -> Iterator[list[Load]]:
    """Record every nn.Module.load_state_dict call made inside the block (nested calls that a
    module's own load_state_dict makes on its children are recorded once, at the outer call)."""
    original = nn.Module.load_state_dict
    loads: list[Load] = []
    depth = [0]

    def load_state_dict(self: nn.Module, state_dict: Any, strict: bool = True, **kw: Any) -> Any:
        depth[0] += 1
        try:
            result = original(self, state_dict, strict=strict, **kw)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            # Matched keys are counted from what was given: BatchNorm fills a missing
            # num_batches_tracked itself, so missing_keys under-reports what was skipped.
            expected = set(self.state_dict().keys())
            given = [str(k) for k in state_dict]
            matched = len(expected & set(given))
            loads.append(Load(type(self).__name__, bool(strict), given, len(expected), matched))
        return result

    nn.Module.load_state_dict = load_state_dict  # type: ignore[method-assign]
    try:
        yield loads
    finally:
        nn.Module.load_state_dict = original  # type: ignore[method-assign]


def _prefix(keys: list[str]) -> str:
    """The first dotted component every given key shares ('' when they share none)."""
    heads = {k.split(".", 1)[0] for k in keys if "." in k}
    return f"{heads.pop()}." if len(heads) == 1 and all("." in k for k in keys) else ""


def checkpoint_partial_load(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    with watched_loads() as loads:
        ctx.make_task()
    evidence |= {
        "loads_while_building": len(loads),
        "loads": [
            {"into": x.module, "strict": x.strict, "given": len(x.given), "matched": x.loaded}
            for x in loads[:10]
        ],
    }
    if not loads:
        return passes("building the task loads no state_dict, so no weights can be skipped")
    empty = [x for x in loads if not x.strict and x.given and x.expected and x.loaded == 0]
    if empty:
        x = empty[0]
        prefix = _prefix(x.given)
        why = (
            f"every given key starts with `{prefix}` (saved through a wrapper)"
            if prefix
            else f"the given keys (first: `{x.given[0]}`) name none of its tensors"
        )
        return fails(
            f"load_state_dict(strict=False) into {x.module} while the task is built matched 0 of "
            f"its {x.expected} keys: {why}, so training starts from random weights; strip the "
            "prefix (str.removeprefix) and load with strict=True, or read the returned "
            "missing_keys"
        )
    return passes(
        f"{len(loads)} load_state_dict call(s) while building the task each matched the "
        "module's keys"
    )
