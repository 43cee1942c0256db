"""Hypothesis strategies: probability vectors (with exact zeros), pairs — including the corners where formulas
break —, Markov instances and acceptance rules of [Yin] Algorithm 2."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from speculab import kernels
from speculab.theory.instance import MarkovInstance

__all__ = [
    "distributions",
    "distribution_pairs",
    "nasty_distribution_pairs",
    "markov_instances",
    "nasty_markov_instances",
    "acceptance_rules",
    "ScaledAcceptance",
    "PoweredAcceptance",
    "OverAcceptance",
]


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


@st.composite
def nasty_distribution_pairs(draw, *, min_V: int = 2, max_V: int = 8):
    """``(p, q)`` from the corners where formulas break, one kind per draw:

    * ``"disjoint"``: supports that do not meet (TV = 1, every draft refused);
    * ``"nested"``: ``supp(p) ⊂ supp(q)`` strictly, or the reverse ([Yin] Prop. 1's two regimes);
    * ``"near"``: ``q = p`` moved by at most ``1e-12`` (rounding decides which side wins);
    * ``"tiny"``: masses down to ``1e-300`` beside ordinary ones (ratios near overflow);
    * ``"point"``: a point mass against a spread law.
    """
    V = draw(st.integers(max(min_V, 2), max_V))
    kind = draw(st.sampled_from(["disjoint", "nested", "near", "tiny", "point"]))
    if kind == "disjoint":
        split = draw(st.integers(1, V - 1))
        p = np.zeros(V)
        q = np.zeros(V)
        p[:split] = draw(distributions(split, allow_zeros=False))
        q[split:] = draw(distributions(V - split, allow_zeros=False))
        order = np.array(draw(st.permutations(range(V))))
        return p[order], q[order]
    if kind == "nested":
        big = (draw(distributions(V, allow_zeros=False)) + 1.0 / V) / 2  # no zeros: the inclusion is strict
        keep = draw(st.integers(1, V - 1))
        small = np.where(np.arange(V) < keep, big, 0.0)
        small = small / small.sum()
        return (small, big) if draw(st.booleans()) else (big, small)
    if kind == "near":
        p = draw(distributions(V))
        q = draw(distributions(V))
        lam = draw(st.floats(0.0, 1e-12))
        return p, (1 - lam) * p + lam * q
    if kind == "tiny":
        p = draw(distributions(V, allow_zeros=False))
        q = draw(distributions(V, allow_zeros=False))
        exponent = draw(st.integers(12, 300))
        i = draw(st.integers(0, V - 1))
        which = draw(st.sampled_from(["p", "q", "both"]))
        if which in ("p", "both"):
            p[i] = 10.0**-exponent
            p = p / p.sum()
        if which in ("q", "both"):
            q[i] = 10.0 ** -draw(st.integers(12, 300))
            q = q / q.sum()
        return p, q
    point = np.zeros(V)
    point[draw(st.integers(0, V - 1))] = 1.0
    spread = draw(distributions(V, allow_zeros=False))
    return (point, spread) if draw(st.booleans()) else (spread, point)


@st.composite
def nasty_markov_instances(draw, *, max_T: int = 3, max_V: int = 3):
    """Small :class:`MarkovInstance` s whose every (position, context) row pair is drawn by
    :func:`nasty_distribution_pairs`: disjoint or nested supports, near-equal rows, tiny masses, point masses."""
    T = draw(st.integers(1, max_T))
    V = draw(st.integers(2, max_V))
    pairs = [[draw(nasty_distribution_pairs(min_V=V, max_V=V)) for _ in range(V)] for _ in range(T)]
    P = np.array([[p for p, _ in row] for row in pairs])
    Q = np.array([[q for _, q in row] for row in pairs])
    return MarkovInstance(P, Q, draw(distributions(V)))


@dataclass(frozen=True)
class ScaledAcceptance:
    """``b = s · min(1, q/p)``: unbiased with [Yin] Thm 2's rejection law for every ``s ∈ [0, 1]``, never fewer
    rejections than SD."""

    s: float

    def __call__(self, p, q):
        return self.s * kernels.sd_acceptance(p, q)


@dataclass(frozen=True)
class PoweredAcceptance:
    """``b = min(1, q/p)^k`` with ``k ≥ 1``: unbiased, below SD's acceptance wherever ``q < p``."""

    k: float

    def __call__(self, p, q):
        return kernels.sd_acceptance(p, q) ** self.k


@dataclass(frozen=True)
class OverAcceptance:
    """``b = min(1, c · q/p)`` with ``c > 1``: accepts more than SD allows, so no rejection law makes it unbiased
    ([Yin] Thm 2); paired with ``P = q`` it is biased towards the draft."""

    c: float

    def __call__(self, p, q):
        return kernels.sd_acceptance(p, q * self.c)


def _target_law(p, q, b):
    return q


@st.composite
def acceptance_rules(draw, *, unbiased: bool | None = None, lookaheads=(None, 1, 2)):
    """A :class:`speculab.methods.RejectionDecoding` ([Yin] Algorithm 2) with a drawn rule.

    ``unbiased=True`` draws :class:`ScaledAcceptance` or :class:`PoweredAcceptance` with [Yin] Thm 2's
    rejection law (``rejection=None``); ``False`` draws :class:`OverAcceptance` with ``rejection = q``; ``None``
    either.
    The lookahead ``K`` is drawn from ``lookaheads``.
    """
    from speculab.methods import RejectionDecoding

    if unbiased is None:
        unbiased = draw(st.booleans())
    K = draw(st.sampled_from(list(lookaheads)))
    if unbiased:
        rule = draw(
            st.one_of(
                st.builds(ScaledAcceptance, st.floats(0.0, 1.0)), st.builds(PoweredAcceptance, st.floats(1.0, 4.0))
            )
        )
        return RejectionDecoding(b=rule, rejection=None, K=K)
    return RejectionDecoding(b=OverAcceptance(draw(st.floats(1.5, 4.0))), rejection=_target_law, K=K)
