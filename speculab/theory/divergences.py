"""Distances between next-token distributions (SPEC §0).

Convention everywhere: ``p`` is the draft model, ``q`` the target model.
All functions act on the last axis and broadcast over leading axes.
"""

from __future__ import annotations

import numpy as np
from scipy.special import rel_entr

from speculab._validate import as_distribution, check_same_shape

__all__ = ["tv", "residual", "residual_mass", "sd_acceptance", "kl", "js"]


def _pair(p, q, name_p: str = "p", name_q: str = "q") -> tuple[np.ndarray, np.ndarray]:
    p = as_distribution(p, name_p)
    q = as_distribution(q, name_q)
    check_same_shape(p, q, name_p, name_q)
    return p, q


def _tv(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    # Σ (p − q)_+ : exact for sub-normalised float input and never negative.
    return np.maximum(p - q, 0.0).sum(axis=-1)


def _residual(q: np.ndarray, p: np.ndarray) -> np.ndarray:
    excess = np.maximum(q - p, 0.0)
    mass = excess.sum(axis=-1, keepdims=True)
    return np.divide(excess, mass, out=np.zeros_like(excess), where=mass > 0)


def _sd_acceptance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    # Divide only where q < p: the ratio is then < 1, so subnormal p cannot overflow it.
    return np.divide(q, p, out=np.ones_like(q), where=p > q)


def tv(p, q) -> np.ndarray:
    r"""Total variation distance.

    .. math:: \mathrm{TV}(p, q) = \tfrac12 \sum_x |p(x) - q(x)|
              = \sum_x (p(x) - q(x))_+ = 1 - \sum_x \min(p(x), q(x)).

    Args:
      p: draft distribution(s), shape ``(..., V)``.
      q: target distribution(s), same shape.

    Returns:
      Array of shape ``(...)`` (a 0-d array for single vectors).
    """
    p, q = _pair(p, q)
    return _tv(p, q)


def residual_mass(q, p) -> np.ndarray:
    r"""Mass of the unnormalised residual, :math:`\sum_x (q(x) - p(x))_+ = \mathrm{TV}(p, q)`."""
    p, q = _pair(p, q)
    return np.maximum(q - p, 0.0).sum(axis=-1)


def residual(q, p) -> np.ndarray:
    r"""The residual distribution :math:`[q - p]_+ = (q - p)_+ / \sum_x (q(x) - p(x))_+`.

    This is what speculative decoding samples from after a rejection
    ([Yin] Alg. 1, line 7). Where ``p == q`` the residual is undefined and
    never sampled (the rejection probability is 0); those rows are returned
    as all zeros, so callers can test ``residual(q, p).sum(-1) == 0``.

    Args:
      q: target distribution(s), shape ``(..., V)``.
      p: draft distribution(s), same shape.
    """
    p, q = _pair(p, q)
    return _residual(q, p)


def sd_acceptance(p, q) -> np.ndarray:
    r"""Speculative decoding's acceptance probability :math:`b(x) = \min(1, q(x)/p(x))`.

    Entries with ``p(x) = 0`` are never drafted; they are set to 1.
    """
    p, q = _pair(p, q)
    return _sd_acceptance(p, q)


def kl(p, q) -> np.ndarray:
    r"""Kullback–Leibler divergence :math:`\mathrm{KL}(p \| q) = \sum_x p(x) \log(p(x)/q(x))`.

    Natural log; ``inf`` when ``p`` puts mass where ``q`` has none.
    Note the argument order: ``kl(q, p)`` is the target-to-draft direction.
    """
    p, q = _pair(p, q)
    return rel_entr(p, q).sum(axis=-1)


def js(p, q) -> np.ndarray:
    r"""Jensen–Shannon divergence, natural log (so :math:`0 \le \mathrm{JS} \le \ln 2`).

    .. math:: \mathrm{JS}(p, q) = \tfrac12 \mathrm{KL}(p \| m) + \tfrac12 \mathrm{KL}(q \| m),
              \quad m = (p + q)/2.
    """
    p, q = _pair(p, q)
    s = p + q
    # x log(x / m) written as x log(2x / (p + q)): m = s / 2 underflows to 0 for
    # subnormal x, which would turn a negligible term into inf.
    def half_kl_to_mid(x):
        ratio = np.divide(2.0 * x, s, out=np.ones_like(x), where=x > 0)
        return 0.5 * (x * np.log(ratio)).sum(axis=-1)

    return half_kl_to_mid(p) + half_kl_to_mid(q)
