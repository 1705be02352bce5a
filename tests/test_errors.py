"""The one-line forms of an exception that every error report uses."""

from __future__ import annotations

import pytest

from trainwell.errors import error_line, first_line

pytestmark = pytest.mark.engine  # needs nothing of the examples


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


def test_a_wrapper_that_announces_its_cause_is_followed_by_it() -> None:
    """Hydra's instantiate wraps a constructor's error as "Error in call to target 'X':" and puts
    the cause on the next lines: the one-line report must name the cause."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    with pytest.raises(InstantiationException) as caught:
        instantiate({"_target_": "torch.nn.Linear", "in_features": 3})
    line = error_line(caught.value)
    assert line.startswith(
        "InstantiationException: Error in call to target 'torch.nn.modules.linear.Linear': "
    )
    assert line.endswith(
        "TypeError: Linear.__init__() missing 1 required positional argument: 'out_features'"
    )
    assert "\n" not in line
    wrapped = RuntimeError("loading failed:")
    assert error_line(wrapped) == "RuntimeError: loading failed:"  # no cause: nothing to add


def test_a_first_line_that_announces_its_cause_is_followed_by_it() -> None:
    """torch's load_state_dict puts the keys on the lines after "Error(s) in loading state_dict
    for X:": a one-line report that stops at the colon names no key."""
    import torch

    module = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError) as caught:
        module.load_state_dict({**module.state_dict(), "scale": torch.ones(1)})
    expected = (
        'Error(s) in loading state_dict for Linear: Unexpected key(s) in state_dict: "scale".'
    )
    assert first_line(caught.value) == expected
    assert error_line(caught.value) == f"RuntimeError: {expected}"
