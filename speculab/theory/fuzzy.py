"""Fuzzy speculative decoding ([FSD] §4; SPEC §1, F).

Convention: ``p`` = draft, ``q`` = target. FSD accepts the drafted token at a
position iff ``Div(q, p) < θ`` there, otherwise outputs a token from ``q``: an
instance of [Yin] Algorithm 2 with ``b = 1{Div < θ}`` (constant in the token)
and rejection distribution ``q``.
"""

from __future__ import annotations

import numpy as np

from speculab.theory.divergences import _tv, js, kl
from speculab.theory.instance import MarkovInstance

__all__ = ["fuzzy_divergence", "fuzzy_arrays"]


def fuzzy_divergence(inst: MarkovInstance, div: str) -> np.ndarray:
    """``Div(q_n, p_n)(a)`` for every position and context, shape ``(T, V)``.

    ``div``: ``"js"``, ``"kl"`` = KL(q‖p), ``"kl_reverse"`` = KL(p‖q), ``"tv"``.
    """
    if div == "js":
        return js(inst.Q, inst.P)
    if div == "kl":
        return kl(inst.Q, inst.P)
    if div == "kl_reverse":
        return kl(inst.P, inst.Q)
    if div == "tv":
        return _tv(inst.P, inst.Q)
    raise ValueError(f"div must be 'js', 'kl', 'kl_reverse' or 'tv'; got {div!r}")


def fuzzy_arrays(inst: MarkovInstance, theta: float, div: str) -> tuple[np.ndarray, np.ndarray]:
    """``(b, P)`` as ``(T, V, V)`` arrays for ``Fuzzy(theta, div)``: ``b = 1{Div(q, p) < θ}``, ``P = q``."""
    accept = (fuzzy_divergence(inst, div) < theta).astype(np.float64)  # (T, V)
    b = np.broadcast_to(accept[..., None], inst.P.shape).copy()
    return b, np.array(inst.Q)
