"""Helpers for the tests (not fixtures: those are in conftest.py).

:func:`float32_tol` is the tolerance for comparing one float32 quantity computed along two paths (a stored score
and a recomputed one, a batch and a single pass, two micro-batchings): the paths sum in different orders, and
torch's CPU kernels pick their order by the CPU (AVX-512, AVX2, none), so the last bits differ by machine.
"""

from __future__ import annotations

import numpy as np

FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 2**-23, about 1.19e-7


def float32_tol(n_terms: int, scale: float = 1.0) -> float:
    """The absolute difference two float32 paths may show on a value that sums ``n_terms`` terms of magnitude
    ``scale``: each path's rounding error is at most about ``n_terms * eps/2 * scale`` (the worst-case bound of a
    recursive sum, Higham, Accuracy and Stability of Numerical Algorithms, 2002, eq. 4.4), so two differ by at
    most ``n_terms * eps * scale``.

    Example:
        >>> round(float32_tol(2000, 1.0), 6)
        0.000238
    """
    if n_terms < 1 or not scale > 0:
        raise ValueError(f"n_terms must be at least 1 and scale positive, got {n_terms}, {scale}")
    return n_terms * FLOAT32_EPS * scale
