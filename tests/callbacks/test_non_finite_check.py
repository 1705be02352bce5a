"""The non-finite guard's eager CPU check of the gradients: every NaN/Inf is caught, and no
finite gradient is called non-finite because a sum of it overflowed its own dtype."""

from __future__ import annotations

import pytest
import torch

from trainwell.callbacks.non_finite import _all_finite

pytestmark = pytest.mark.engine  # needs nothing of the examples


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_any_non_finite_gradient_is_caught(dtype: torch.dtype, bad: float) -> None:
    grads = [torch.ones(3, dtype=dtype), torch.ones(2, 2, dtype=dtype)]
    assert _all_finite(grads)
    grads[1][1, 0] = bad
    assert not _all_finite(grads)


def test_opposite_infinities_do_not_cancel() -> None:
    assert not _all_finite([torch.tensor([float("inf")]), torch.tensor([float("-inf")])])


def test_finite_gradients_whose_sum_would_overflow_their_dtype_pass() -> None:
    half = torch.full((4096,), 60000.0, dtype=torch.float16)  # sums to ~2.5e8 > fp16 max
    wide = torch.full((4,), 1e300, dtype=torch.float64)  # beyond float32
    assert _all_finite([half, wide])


def test_complex_gradients_are_checked() -> None:
    grads = [torch.ones(3, dtype=torch.complex64)]
    assert _all_finite(grads)
    grads[0][1] = complex(0, float("nan"))
    assert not _all_finite(grads)
