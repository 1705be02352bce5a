"""The one-line forms of an exception that every error report uses."""

from __future__ import annotations

import pytest

from trainwell.errors import error_line, first_line


@pytest.mark.parametrize(
    ("err", "first", "line"),
    [
        (ValueError("bad lr\nTraceback follows"), "bad lr", "ValueError: bad lr"),
        (KeyError("model"), "'model'", "KeyError: 'model'"),
        (
            RuntimeError("\n  padded cause  \nmore"),
            "padded cause  ",
            "RuntimeError: padded cause  ",
        ),
        (ValueError(""), "ValueError", "ValueError"),
        (OSError(), "OSError", "OSError"),
    ],
)
def test_first_line_and_error_line(err: BaseException, first: str, line: str) -> None:
    assert first_line(err) == first
    assert error_line(err) == line
