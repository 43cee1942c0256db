"""Acceptance and rejection rules of biased decoding ([Yin] §4.2, App. G; SPEC §1).

Convention: ``p`` = draft, ``q`` = target. Over-acceptance ``b = min(1, (q + ε)/p)``
trades output quality for fewer rejections; after a rejection Decoding-OPT
samples ``P* = [A]_+`` ([Yin] Thm 4) and Decoding-UNO samples ``q``. The method
itself is :class:`speculab.methods.Biased`; the formulas are those of
:mod:`speculab.kernels`, shared with every engine.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from speculab import kernels
from speculab._validate import as_pair, as_probability_array

__all__ = ["biased_acceptance", "canonical_optimal_rejection"]


def check_eps(eps) -> float:
    """``ε`` as a float, refused unless a finite number ``>= 0``."""
    ok = isinstance(eps, numbers.Real) and not isinstance(eps, bool) and math.isfinite(eps) and eps >= 0
    if not ok:
        raise ValueError(f"eps must be a finite number >= 0; got {eps!r}")
    return float(eps)


def biased_acceptance(p, q, eps: float) -> np.ndarray:
    r"""Over-acceptance :math:`b(x) = \min(1, (q(x) + \varepsilon)/p(x))`, [Yin] §4.2 (1 where ``p = 0``).

    Example:
      >>> biased_acceptance([0.6, 0.4], [0.3, 0.7], 0.1).round(3).tolist()
      [0.667, 1.0]
    """
    p, q = as_pair(p, q)
    return kernels.over_acceptance(p, q, check_eps(eps))


def canonical_optimal_rejection(p, q, b) -> np.ndarray:
    r"""The canonical optimal rejection distribution :math:`P^* = [A]_+ / \sum_x [A]_+`, [Yin] Thm 4.

    With ``A = (q − b p) / Σ (1 − b) p`` the normalisation cancels, so
    :math:`P^* \propto (q - b p)_+`. For ``b = min(1, (q+ε)/p)`` this is the SD
    residual ``[q − p]_+``. Rows where ``(q − b p)_+ = 0`` (never rejected) are ``q``.
    """
    p, q = as_pair(p, q)
    b = as_probability_array(b, "b")
    if b.shape != p.shape:
        raise ValueError(f"b must have the shape of p {p.shape}; got {b.shape}")
    return kernels.optimal_rejection(p, q, b)
