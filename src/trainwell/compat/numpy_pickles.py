"""numpy arrays and scalars under torch's weights-only load.

torch 2.6+ loads weights-only by default and allows no numpy global: a numpy array or scalar in
a checkpoint (a datamodule's fitted statistics) is refused unless the functions numpy's pickles
call are allowlisted, as torch's own refusal message suggests ("Please use
`torch.serialization.add_safe_globals([numpy._core.multiarray._reconstruct])`"; torch 2.14,
numpy 2.4). They are numpy's private functions, in numpy._core (numpy 2) or numpy.core (numpy 1):
found here, and named as a pickle of either numpy names them.
"""

from __future__ import annotations

from typing import Any

try:  # numpy >= 2 keeps the functions a pickle calls in numpy._core, numpy 1 in numpy.core
    from numpy._core import multiarray as _multiarray
except ImportError:  # numpy 1
    from numpy.core import multiarray as _multiarray

# (function, the name a pickle gives it) for numpy 2's and numpy 1's module path, whichever
# numpy wrote the file and whichever reads it.
NUMPY_REBUILDS: list[tuple[Any, str]] = [
    (function, f"{module}.{function.__name__}")
    for function in (_multiarray._reconstruct, _multiarray.scalar)
    for module in ("numpy._core.multiarray", "numpy.core.multiarray")
]
