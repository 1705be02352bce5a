"""Taking a message at its word: the one line a command printed, the overrides and commands it
suggests, and the command line with the suggestion applied, as a user would apply it.

A test of a suggested fix reads the fix out of the message the command really printed (never
out of the test's own copy of it), so a message that names a key wrong, or a command that does
not run, fails the test that applies it.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence

# `key=value` as a message writes an override: a dotted key (a leading + or ~ allowed), then a
# value up to the next space, comma or closing bracket of the sentence around it; a
# `<placeholder>` in the value (`ckpt_path=<run dir>/checkpoints/best.ckpt`) may hold spaces.
_OVERRIDE = re.compile(r"(?<![\w.])([+~]{0,2}[A-Za-z_][\w.]*=(?:<[^>]*>|[^\s,;)<`])+)")
_PLACEHOLDER = re.compile(r"<[^>]*>")


def one_line(proc: subprocess.CompletedProcess, prefix: str = "error: ") -> str:
    """The command's single line starting with `prefix` (a second one would bury the first;
    the ranks of a multi-process run may each say the same one)."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith(prefix)]
    assert len(set(lines)) == 1, (proc.returncode, proc.stderr[-3000:])
    return lines[0]


def after(line: str, words: str) -> str:
    """What `line` says right after `words` (a regex), up to the end of that clause."""
    found = re.search(words + r"\s*(.+?)(?:;|$)", line)
    assert found, f"{words!r} not in: {line}"
    return found.group(1).strip()


def overrides_in(text: str) -> list[str]:
    """Every `key=value` override in `text`, in order. A closing bracket the value does not open
    is the sentence's (a usage line's `[summary.metric=<name>]`)."""
    found = []
    for override in _OVERRIDE.findall(text):
        while override.endswith("]") and override.count("]") > override.count("["):
            override = override[:-1]
        found.append(override)
    return found


def key_of(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def fill(text: str, value: object) -> str:
    """`text` with its one `<placeholder>` replaced by `value`, as a user fills it in:
    fill("ckpt_path=<run dir>/checkpoints/best.ckpt", run_dir)."""
    found = _PLACEHOLDER.findall(text)
    assert len(found) == 1, f"not one placeholder in: {text}"
    return text.replace(found[0], str(value))


def applied(argv: Sequence[str], *overrides: str, dropping: Sequence[str] = ()) -> list[str]:
    """`argv` with `overrides` applied as a user edits a command line: an override of a key
    already there takes its place, a new one goes at the end; `dropping` names keys removed."""
    out = [a for a in argv if key_of(a) not in dropping]
    for override in overrides:
        same = [i for i, a in enumerate(out) if "=" in a and key_of(a) == key_of(override)]
        if same:
            out[same[0]] = override
        else:
            out.append(override)
    return out


def command_in(line: str, program: str) -> list[str]:
    """The command `line` prints: `program` (`python scripts/export.py`) and the options,
    overrides, paths and `<placeholders>` right after it, split as a shell would split them (the
    prose that follows, "first", "rebuilds it", is not part of it)."""
    word = r"(?:<[^>]*>|[+~/-]|[\w.-]+/|[\w.]+=)(?:<[^>]*>|[^\s,;)<`])*"
    found = re.search(re.escape(program) + rf"(?:\s+{word})*", line)
    assert found, f"{program!r} not in: {line}"
    # A `<placeholder>` is one word, spaces and all: the user replaces it whole.
    kept = _PLACEHOLDER.sub(lambda m: m.group(0).replace(" ", "\0"), found.group(0))
    return [word.replace("\0", " ") for word in shlex.split(kept)]
