"""Acceptance and rejection rules of biased decoding ([Yin] §4.2, App. G; SPEC §1).

Convention: ``p`` = draft, ``q`` = target. Over-acceptance ``b = min(1, (q + ε)/p)``
trades output quality for fewer rejections; after a rejection Decoding-OPT
samples ``P* = [A]_+`` ([Yin] Thm 4) and Decoding-UNO samples ``q``.
"""

from __future__ import annotations

import numpy as np

from speculab.theory.divergences import _pair
from speculab.theory.instance import MarkovInstance

__all__ = ["biased_acceptance", "canonical_optimal_rejection", "biased_arrays"]


def _biased_acceptance(p: np.ndarray, q: np.ndarray, eps: float) -> np.ndarray:
    # divide only where q + ε < p: the ratio is < 1 there (no overflow for tiny p)
    return np.divide(q + eps, p, out=np.ones_like(q), where=p > q + eps)


def _canonical_optimal_rejection(p: np.ndarray, q: np.ndarray, b: np.ndarray) -> np.ndarray:
    excess = np.maximum(q - b * p, 0.0)  # [A]_+ up to the factor 1/Σ(1 − b)p
    mass = excess.sum(axis=-1, keepdims=True)
    # Σ(q − bp)_+ ≥ Σ(1 − b)p, so mass = 0 means nothing is ever rejected — up to
    # round-off (e.g. p = (1, 3e-94), q = (1, 0)); fall back to q there, never to zeros.
    return np.divide(excess, mass, out=np.broadcast_to(q, excess.shape).copy(), where=mass > 0)


def biased_acceptance(p, q, eps: float) -> np.ndarray:
    r"""Over-acceptance :math:`b(x) = \min(1, (q(x) + \varepsilon)/p(x))`, [Yin] §4.2 (1 where ``p = 0``)."""
    p, q = _pair(p, q)
    if not (np.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0; got {eps!r}")
    return _biased_acceptance(p, q, float(eps))


def canonical_optimal_rejection(p, q, b) -> np.ndarray:
    r"""The canonical optimal rejection distribution :math:`P^* = [A]_+ / \sum_x [A]_+`, [Yin] Thm 4.

    With ``A = (q − b p) / Σ (1 − b) p`` the normalisation cancels, so
    :math:`P^* \propto (q - b p)_+`. For ``b = min(1, (q+ε)/p)`` this is the SD
    residual ``[q − p]_+``. Rows where ``(q − b p)_+ = 0`` (never rejected) are ``q``.
    """
    p, q = _pair(p, q)
    b = np.asarray(b, dtype=np.float64)
    if b.shape != p.shape:
        raise ValueError(f"b must have the shape of p {p.shape}; got {b.shape}")
    return _canonical_optimal_rejection(p, q, b)


def biased_arrays(inst: MarkovInstance, eps: float, rejection: str) -> tuple[np.ndarray, np.ndarray]:
    """``(b, P)`` as ``(T, V, V)`` arrays for ``Biased(eps, rejection)`` on a Markov instance."""
    b = _biased_acceptance(inst.P, inst.Q, float(eps))
    if rejection == "opt":
        return b, _canonical_optimal_rejection(inst.P, inst.Q, b)
    if rejection == "uno":
        return b, np.array(inst.Q)
    raise ValueError(f"rejection must be 'opt' or 'uno'; got {rejection!r}")
