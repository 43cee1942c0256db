"""Hypothesis strategies: probability vectors (with exact zeros), pairs, Markov instances."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from speculab.theory.instance import MarkovInstance

__all__ = ["distributions", "distribution_pairs", "markov_instances"]


@st.composite
def distributions(draw, V: int | None = None, *, min_V: int = 2, max_V: int = 8, allow_zeros: bool = True):
    """A probability vector of length ``V`` (drawn in ``[min_V, max_V]`` if not given).

    Entries are drawn as non-negative weights, some forced to exactly 0 when
    ``allow_zeros`` (at least one stays positive), then normalised. Weights
    below ``1e-60`` become exactly 0: products of a few probabilities (sequence
    laws of brute-force references) then never underflow, while ratios as
    extreme as ``1e60`` are still generated.
    """
    if V is None:
        V = draw(st.integers(min_V, max_V))
    w = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=V, max_size=V)))
    w = np.where(w < 1e-60, 0.0, w)
    if allow_zeros:
        zero = np.array(draw(st.lists(st.booleans(), min_size=V, max_size=V)))
        w = np.where(zero, 0.0, w)
    if w.sum() < 1e-3:  # degenerate draw: fall back to a point mass
        w = np.zeros(V)
        w[draw(st.integers(0, V - 1))] = 1.0
    return w / w.sum()


@st.composite
def distribution_pairs(draw, *, min_V: int = 2, max_V: int = 8, allow_zeros: bool = True):
    """``(p, q)`` of equal length; sometimes identical or nearly equal."""
    V = draw(st.integers(min_V, max_V))
    p = draw(distributions(V, allow_zeros=allow_zeros))
    kind = draw(st.sampled_from(["independent", "equal", "near"]))
    if kind == "equal":
        return p, p.copy()
    q = draw(distributions(V, allow_zeros=allow_zeros))
    if kind == "near":
        lam = draw(st.floats(0.0, 1e-3))
        q = (1 - lam) * p + lam * q
    return p, q


@st.composite
def markov_instances(draw, *, max_T: int = 4, max_V: int = 3, allow_zeros: bool = True):
    """Small :class:`MarkovInstance` s (sizes suited to exact enumeration)."""
    T = draw(st.integers(1, max_T))
    V = draw(st.integers(2, max_V))
    rows = lambda: np.array(  # noqa: E731
        [[draw(distributions(V, allow_zeros=allow_zeros)) for _ in range(V)] for _ in range(T)]
    )
    P, Q = rows(), rows()
    rho = draw(distributions(V, allow_zeros=allow_zeros))
    return MarkovInstance(P, Q, rho)
