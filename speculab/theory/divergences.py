"""Distances between next-token distributions (SPEC §0).

Convention everywhere: ``p`` is the draft model, ``q`` the target model.
All functions act on the last axis and broadcast over leading axes. They
validate their input and then call the array-API formulas of
:mod:`speculab.kernels`, which every engine shares.
"""

from __future__ import annotations

import numpy as np

from speculab import kernels
from speculab._validate import as_pair

__all__ = ["tv", "residual", "residual_mass", "sd_acceptance", "kl", "js"]


def tv(p, q) -> np.ndarray:
    r"""Total variation distance.

    .. math:: \mathrm{TV}(p, q) = \tfrac12 \sum_x |p(x) - q(x)|
              = \sum_x (p(x) - q(x))_+ = 1 - \sum_x \min(p(x), q(x)).

    Args:
      p: draft distribution(s), shape ``(..., V)``.
      q: target distribution(s), same shape.

    Returns:
      Array of shape ``(...)`` (a 0-d array for single vectors).

    Example:
      >>> float(tv([0.5, 0.5], [0.8, 0.2]))
      0.3
    """
    p, q = as_pair(p, q)
    return kernels.tv(p, q)


def residual_mass(q, p) -> np.ndarray:
    r"""Mass of the unnormalised residual, :math:`\sum_x (q(x) - p(x))_+ = \mathrm{TV}(p, q)`."""
    p, q = as_pair(p, q)
    return kernels.tv(q, p)


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
    p, q = as_pair(p, q)
    return kernels.residual(q, p)


def sd_acceptance(p, q) -> np.ndarray:
    r"""Speculative decoding's acceptance probability :math:`b(x) = \min(1, q(x)/p(x))`.

    Entries with ``p(x) = 0`` are never drafted; they are set to 1.
    """
    p, q = as_pair(p, q)
    return kernels.sd_acceptance(p, q)


def kl(p, q) -> np.ndarray:
    r"""Kullback–Leibler divergence :math:`\mathrm{KL}(p \| q) = \sum_x p(x) \log(p(x)/q(x))`.

    Natural log; ``inf`` when ``p`` puts mass where ``q`` has none.
    Note the argument order: ``kl(q, p)`` is the target-to-draft direction.
    """
    p, q = as_pair(p, q)
    return kernels.kl(p, q)


def js(p, q) -> np.ndarray:
    r"""Jensen–Shannon divergence, natural log (so :math:`0 \le \mathrm{JS} \le \ln 2`).

    .. math:: \mathrm{JS}(p, q) = \tfrac12 \mathrm{KL}(p \| m) + \tfrac12 \mathrm{KL}(q \| m),
              \quad m = (p + q)/2.
    """
    p, q = as_pair(p, q)
    return kernels.js(p, q)
