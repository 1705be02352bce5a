"""The one did-you-mean of the engine: the choice nearest a mistyped word."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice most like `word`, or None when none is close (difflib's ratio below `cutoff`)."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return found[0] if found else None
