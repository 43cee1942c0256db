"""Fuzzy speculative decoding ([FSD] §4, App. B; SPEC §1, F) and exact sequence-level divergences.

Convention: ``p`` = draft, ``q`` = target. FSD accepts the drafted token at a
position iff ``Div(q, p) < θ`` there, otherwise outputs a token from ``q``: an
instance of [Yin] Algorithm 2 with ``b = 1{Div < θ}`` (constant in the token)
and rejection distribution ``q``. On a Markov instance, with lookahead ``K = ∞``
its output is the Markov chain with rows ``P[n, a]`` where ``Div(Q[n, a], P[n, a]) < θ``
and ``Q[n, a]`` elsewhere. With finite ``K`` it is not: after ``K`` accepted drafts
the bonus token is drawn from ``q`` even where the draft would be accepted, so the
law depends on the round phase (exact here too, by tracking the phase).

**The paper's bound** ([FSD] §4.2, App. B): ``Div(P_q(x_{1:N}), P_FSD(x_{1:N})) <= N · %draft · θ``
with ``%draft`` the fraction of output tokens that come from the draft. By the
chain rule, exactly,

* ``KL(P_q || P_FSD) = Σ_n E_{x ~ q}[1{accept at n} KL(q_n || p_n)]``: with the
  ``"kl"`` threshold (``KL(q||p) < θ``) this is ``<= N θ %draft`` **with %draft
  measured under the target's chain**, not FSD's own output; with FSD's own
  ``%draft`` it can fail (:func:`fuzzy_bound_check` reports both);
* ``KL(P_FSD || P_q) = Σ_n E_{x ~ FSD}[1{accept at n} KL(p_n || q_n)]``: bounded by
  ``N θ %draft`` (FSD's own) with the ``"kl_reverse"`` threshold, unbounded (even
  ``inf``) with the ``"kl"`` one;
* sequence TV ``<= Σ_n E[TV_n]`` under either chain (hybrid argument), so the
  ``"tv"`` bound holds with either ``%draft``;
* for ``"js"`` the App. B argument does not apply (the JS midpoint of the
  sequence laws is not the product of per-step midpoints); it is checked here
  numerically by enumeration.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from speculab import kernels
from speculab._validate import as_distribution, as_positive_int
from speculab.theory.divergences import js
from speculab.theory.instance import MarkovInstance, rowwise
from speculab._budget import limit, power, refuse
from speculab.theory._checks import takes_instance

__all__ = [
    "DIVERGENCES",
    "fuzzy_divergence",
    "fuzzy_output_law",
    "FuzzyProfile",
    "fuzzy_profile",
    "FuzzyBoundCheck",
    "fuzzy_bound_check",
    "chain_kl",
    "sequence_law",
    "sequence_divergence",
    "fuzzy_sequence_law",
    "MAX_ENUMERATION",
    "check_div",
    "check_theta",
    "holds_within",
]

#: Largest number of sequences ``V^(T+1)`` that :func:`sequence_law` will enumerate.
MAX_ENUMERATION = 1 << 22

#: FSD's divergences ``Div(q, p)`` per row, as array-API functions of ``(p, q)`` (``p`` = draft,
#: ``q`` = target): ``"js"`` (natural log, the paper's default), ``"kl"`` = KL(q‖p),
#: ``"kl_reverse"`` = KL(p‖q), ``"tv"``. Shared by the theory and by :class:`speculab.methods.Fuzzy`.
DIVERGENCES = {
    "js": lambda p, q: kernels.js(q, p),
    "kl": lambda p, q: kernels.kl(q, p),
    "kl_reverse": lambda p, q: kernels.kl(p, q),
    "tv": kernels.tv,
}


def check_div(div: str) -> str:
    """``div`` if it names one of :data:`DIVERGENCES`, else a ``ValueError``."""
    if div not in DIVERGENCES:
        raise ValueError(f"div must be 'js', 'kl', 'kl_reverse' or 'tv'; got {div!r}")
    return div


def check_theta(theta) -> float:
    """``θ`` as a float, refused unless a number ``>= 0`` (``inf`` allowed: accept every draft)."""
    ok = isinstance(theta, numbers.Real) and not isinstance(theta, bool) and not math.isnan(theta) and theta >= 0
    if not ok:
        raise ValueError(f"theta must be a number >= 0; got {theta!r}")
    return float(theta)


@takes_instance
def fuzzy_divergence(inst: MarkovInstance, div: str) -> np.ndarray:
    """``Div(q_n, p_n)(a)`` for every position and context, shape ``(T, V)``.

    ``div``: ``"js"``, ``"kl"`` = KL(q‖p), ``"kl_reverse"`` = KL(p‖q), ``"tv"``.
    """
    return rowwise(DIVERGENCES[check_div(div)], inst.P, inst.Q)


@takes_instance
def fuzzy_output_law(inst: MarkovInstance, theta: float, div: str = "js") -> np.ndarray:
    r"""Transitions of FSD's output chain, shape ``(T, V, V)`` ([FSD] §4; SPEC F).

    .. math:: P_{FSD,n}(\cdot \mid a) = p_n(\cdot \mid a) \text{ if } \mathrm{Div}(q_n, p_n)(a) < \theta
              \text{ else } q_n(\cdot \mid a)

    ``θ = 0`` gives ``Q`` (autoregressive decoding from the target); ``θ`` above
    every divergence gives ``P`` (pure draft decoding). This is FSD with lookahead
    ``K = ∞`` (equal to :func:`speculab.theory.output_law` with the rule of :class:`speculab.methods.Fuzzy`).
    With finite ``K`` the output is *not* this chain: after ``K`` accepted drafts the
    bonus token comes from ``q`` even where FSD would accept the draft, so the law
    depends on the round phase — see :func:`fuzzy_profile` and :func:`fuzzy_sequence_law`.
    """
    div, theta = DIVERGENCES[check_div(div)], check_theta(theta)
    return rowwise(lambda p, q: np.where((div(p, q) < theta)[..., None], p, q), inst.P, inst.Q)


# -- sequence level ------------------------------------------------------------------
def chain_kl(rho, A, B) -> np.ndarray:
    r"""Per-position terms of the sequence KL between two Markov chains with the same start law.

    .. math:: \mathrm{KL}(P_A(x_{0:T}) \,\|\, P_B(x_{0:T}))
              = \sum_{n=1}^{T} \sum_a \mu^A_{n-1}(a)\, \mathrm{KL}(A_n(\cdot|a) \,\|\, B_n(\cdot|a))

    (chain rule), with :math:`\mu^A` the marginals of chain ``A``. Contexts that
    chain ``A`` never reaches contribute 0, even where the row KL is infinite;
    reachability is decided on supports (see :func:`speculab.theory.markov_kl`,
    which this calls).

    Args:
      rho: law of ``x_0``, shape ``(V,)``.
      A, B: ``(T, V, V)`` row-stochastic transitions.

    Returns:
      ``(T,)`` terms; their sum is the sequence KL (``inf`` if ``P_A`` is not
      absolutely continuous with respect to ``P_B``).
    """
    from speculab.theory.tradeoff import markov_kl  # one implementation of the chain rule

    return markov_kl(rho, A, B)


def sequence_law(rho, A) -> np.ndarray:
    """Exact joint law of ``(x_0, ..., x_T)`` for the chain ``x_0 ~ rho``, ``x_n ~ A[n-1, x_{n-1}]``.

    Returns an array of shape ``(V,) * (T + 1)``. Refuses more than
    :data:`MAX_ENUMERATION` sequences.
    """
    rho = as_distribution(rho, "rho", ndim=1)
    A = as_distribution(A, "A", ndim=3)
    T, V = A.shape[0], A.shape[-1]
    if power(V, T + 1) > limit(MAX_ENUMERATION):
        raise refuse(
            f"the sequence law ({V}^{T + 1} sequences)",
            power(V, T + 1),
            MAX_ENUMERATION,
            "sequences",
            "MAX_ENUMERATION",
            "use a shorter horizon or a smaller vocabulary",
        )
    joint = rho
    for n in range(T):
        joint = joint[..., :, None] * A[n]  # (V,)*(n+1) -> (V,)*(n+2)
    return joint


def sequence_divergence(rho, A, B, div: str) -> float:
    """``Div(P_A(x_{0:T}), P_B(x_{0:T}))`` for two Markov chains with start law ``rho``.

    ``div`` in the argument order of :func:`fuzzy_divergence`: ``"kl"`` =
    ``KL(P_A || P_B)`` and ``"kl_reverse"`` = ``KL(P_B || P_A)`` (chain rule, any
    size); ``"js"`` (natural log) and ``"tv"`` by enumerating all ``V^(T+1)``
    sequences (:func:`sequence_law`).
    """
    check_div(div)
    if div == "kl":
        return float(chain_kl(rho, A, B).sum())
    if div == "kl_reverse":
        return float(chain_kl(rho, B, A).sum())
    a, b = sequence_law(rho, A).ravel(), sequence_law(rho, B).ravel()
    if div == "tv":
        return float(0.5 * np.abs(a - b).sum())
    return float(js(a, b))


# -- FSD profile and the bound ----------------------------------------------------------
@dataclass(frozen=True)
class FuzzyProfile:
    """Exact acceptance and sequence KL of FSD on a Markov instance (``T`` positions).

    Attributes:
      theta, div, K: the method's threshold, divergence and lookahead (``None`` = ∞).
      accepted_per_position: ``(T,)`` P(position ``n`` is an accepted draft) along FSD's
        own output — the acceptance rate; its mean is the paper's ``%draft``.
      accepted_per_position_target: ``(T,)`` the same event's probability along the
        target's chain (the rounds replayed on a ``q``-sampled history).
      rejections_per_position: ``(T,)`` P(position ``n``'s draft is refused and the token drawn from ``q``).
      bonus_per_position: ``(T,)`` P(position ``n`` is a bonus token from ``q``; finite ``K`` only).
      kl_forward_per_position: ``(T,)`` chain-rule terms of ``KL(P_q || P_FSD)``.
      kl_reverse_per_position: ``(T,)`` chain-rule terms of ``KL(P_FSD || P_q)``.
    """

    theta: float
    div: str
    K: int | None
    accepted_per_position: np.ndarray
    accepted_per_position_target: np.ndarray
    rejections_per_position: np.ndarray
    bonus_per_position: np.ndarray
    kl_forward_per_position: np.ndarray
    kl_reverse_per_position: np.ndarray

    @property
    def T(self) -> int:
        return int(self.accepted_per_position.shape[0])

    @property
    def draft_fraction(self) -> float:
        """``%draft``: expected fraction of output tokens that are accepted drafts."""
        return float(self.accepted_per_position.mean())

    @property
    def draft_fraction_target(self) -> float:
        """``%draft`` evaluated along the target's chain (the chain rule's weights for ``KL(P_q || ·)``)."""
        return float(self.accepted_per_position_target.mean())

    @property
    def rejections(self) -> float:
        """Expected tokens drawn from ``q`` after a refused draft (``= T (1 − %draft) − E[bonus]``)."""
        return float(self.rejections_per_position.sum())

    @property
    def bonus(self) -> float:
        return float(self.bonus_per_position.sum())

    @property
    def kl_forward(self) -> float:
        """``KL(P_q(x_{1:T}) || P_FSD(x_{1:T}))``."""
        return float(self.kl_forward_per_position.sum())

    @property
    def kl_reverse(self) -> float:
        """``KL(P_FSD(x_{1:T}) || P_q(x_{1:T}))``."""
        return float(self.kl_reverse_per_position.sum())

    @property
    def bound(self) -> float:
        """The paper's ``N · %draft · θ`` (0 when no draft is ever accepted)."""
        return _bound(self.T, self.draft_fraction, self.theta)

    @property
    def bound_target(self) -> float:
        """``N · %draft_q · θ`` with ``%draft`` measured along the target's chain."""
        return _bound(self.T, self.draft_fraction_target, self.theta)


def _bound(T: int, frac: float, theta: float) -> float:
    return 0.0 if frac == 0 else T * frac * theta


def _lookahead(K, T: int) -> int:
    return T if K is None else min(as_positive_int(K, "K"), T)


def _weighted(w: np.ndarray, rows: np.ndarray) -> float:
    """``Σ w · rows`` with ``0 · inf = 0``."""
    return float(np.multiply(w, rows, out=np.zeros_like(w), where=w > 0).sum())


@takes_instance
def fuzzy_profile(inst: MarkovInstance, theta: float, div: str = "js", K: int | None = None) -> FuzzyProfile:
    r"""Exact per-position acceptance and both sequence KLs of ``Fuzzy(theta, div, K)``.

    FSD's acceptance at position ``n`` is a function of the context only, so the
    whole accept/refuse pattern — and the round phase ``j`` (drafts accepted so far
    in the current round) — is a function of the token history. Carrying the
    marginal of ``(x_{n-1}, j)`` along FSD's chain and along the target's chain
    gives, with :math:`a_n(x, j) = 1\{\mathrm{Div}(q_n, p_n)(x) < \theta,\ j < K\}`,

    .. math:: \%\text{draft}_n = E_{FSD}[a_n], \quad
              \mathrm{KL}(P_q \| P_{FSD}) = \sum_n E_q[a_n\, \mathrm{KL}(q_n \| p_n)], \quad
              \mathrm{KL}(P_{FSD} \| P_q) = \sum_n E_{FSD}[a_n\, \mathrm{KL}(p_n \| q_n)]

    (chain rule); ``j = K`` is a bonus token from ``q``. ``O(T K V^2)``; ``K = None``
    (``∞``, the theory's setting) is the Markov chain of :func:`fuzzy_output_law`.
    """
    check_div(div)
    theta = check_theta(theta)
    T, V = inst.T, inst.V
    Kc = _lookahead(K, T)
    accept = fuzzy_divergence(inst, div) < theta  # (T, V)
    kl_f = rowwise(lambda p, q: kernels.kl(q, p), inst.P, inst.Q)  # (T, V): KL(q_n || p_n)(a), may be inf
    kl_r = rowwise(kernels.kl, inst.P, inst.Q)
    bonus_possible = Kc < T  # else the phase never matters: one column suffices
    ncol = Kc + 1 if bonus_possible else 1
    in_round = np.arange(ncol) < Kc  # phase j = K means the next token is a bonus
    m = np.zeros((V, ncol))  # FSD chain: mass of (x_{n-1}, j)
    m[:, 0] = inst.rho
    mq = m.copy()  # target chain, rounds replayed on its history
    out = {k: np.zeros(T) for k in ("draft", "draft_q", "rej", "bonus", "klf", "klr")}
    for n in range(T):
        acc = accept[n][:, None] & in_round[None, :]  # (V, K+1)
        wa, wq = m * acc, mq * acc
        out["draft"][n], out["draft_q"][n] = wa.sum(), wq.sum()
        out["rej"][n] = (m * (~accept[n][:, None] & in_round[None, :])).sum()
        out["bonus"][n] = m[:, Kc].sum() if bonus_possible else 0.0
        out["klf"][n] = _weighted(wq, kl_f[n][:, None])
        out["klr"][n] = _weighted(wa, kl_r[n][:, None])
        new, new_q = np.zeros_like(m), np.zeros_like(mq)
        if bonus_possible:
            new[:, 1:] = inst.P[n].T @ wa[:, :-1]  # accepted draft: x ~ p, j -> j + 1
            new_q[:, 1:] = inst.Q[n].T @ wq[:, :-1]
        else:
            new[:, 0] = inst.P[n].T @ wa[:, 0]
            new_q[:, 0] = inst.Q[n].T @ wq[:, 0]
        new[:, 0] += inst.Q[n].T @ (m - wa).sum(axis=1)  # refused or bonus: x ~ q, new round
        new_q[:, 0] += inst.Q[n].T @ (mq - wq).sum(axis=1)
        m, mq = new, new_q
    return FuzzyProfile(
        theta=theta,
        div=div,
        K=K,
        accepted_per_position=out["draft"],
        accepted_per_position_target=out["draft_q"],
        rejections_per_position=out["rej"],
        bonus_per_position=out["bonus"],
        kl_forward_per_position=out["klf"],
        kl_reverse_per_position=out["klr"],
    )


@takes_instance
def fuzzy_sequence_law(inst: MarkovInstance, theta: float, div: str = "js", K: int | None = None) -> np.ndarray:
    """Exact joint law of FSD's output ``(x_0, ..., x_T)``, shape ``(V,) * (T + 1)`` (small instances).

    Tracks the round phase of every sequence, so finite ``K`` (bonus tokens from
    ``q``) is exact; ``K = None`` equals ``sequence_law(rho, fuzzy_output_law(...))``.
    """
    check_div(div)
    T, V = inst.T, inst.V
    Kc = _lookahead(K, T)
    if power(V, T + 1) > limit(MAX_ENUMERATION):
        raise refuse(
            f"the sequence law ({V}^{T + 1} sequences)",
            power(V, T + 1),
            MAX_ENUMERATION,
            "sequences",
            "MAX_ENUMERATION",
            "use a shorter horizon or a smaller vocabulary",
        )
    accept = fuzzy_divergence(inst, div) < check_theta(theta)  # (T, V)
    joint = np.array(inst.rho)
    phase = np.zeros(V, dtype=np.int64)  # drafts accepted in the current round, per prefix
    for n in range(T):
        acc = accept[n] & (phase < Kc)  # (V,)*(n+1): the last axis is x_{n-1}
        rows = np.where(acc[..., None], inst.P[n], inst.Q[n])  # (V,)*(n+2)
        joint = joint[..., None] * rows
        phase = np.broadcast_to(np.where(acc, phase + 1, 0)[..., None], joint.shape)
    return joint


class FuzzyBoundCheck(NamedTuple):
    """The paper's bound ``Div(P_q, P_FSD) <= N · %draft · θ`` evaluated exactly.

    Attributes:
      theta, div: threshold and divergence (the same ``Div`` at sequence level).
      divergence: exact sequence-level ``Div(P_q(x_{1:N}), P_FSD(x_{1:N}))``.
      bound: ``N · %draft · θ`` with FSD's own ``%draft`` (the paper's statement).
      bound_target: ``N · %draft_q · θ`` with ``%draft`` along the target's chain.
      holds, holds_target: ``divergence <= bound`` (resp. ``bound_target``).
      draft_fraction, draft_fraction_target: the two ``%draft``.
    """

    theta: float
    div: str
    divergence: float
    bound: float
    bound_target: float
    holds: bool
    holds_target: bool
    draft_fraction: float
    draft_fraction_target: float


def holds_within(x: float, bound: float) -> bool:
    """``x <= bound`` up to a relative round-off of ``1e-12``."""
    return bool(x <= bound + 1e-12 * max(1.0, bound))


@takes_instance
def fuzzy_bound_check(inst: MarkovInstance, theta: float, div: str = "js", K: int | None = None) -> FuzzyBoundCheck:
    """Check [FSD]'s sequence-level bound (§4.2, App. B) exactly on a Markov instance.

    ``"kl"`` / ``"kl_reverse"`` use the chain rule (any size); ``"js"`` / ``"tv"``
    enumerate all sequences (small instances only, see :data:`MAX_ENUMERATION`).
    """
    prof = fuzzy_profile(inst, theta, div, K)
    if div == "kl":
        d = prof.kl_forward
    elif div == "kl_reverse":
        d = prof.kl_reverse
    else:
        a = sequence_law(inst.rho, inst.Q).ravel()
        b = fuzzy_sequence_law(inst, theta, div, K).ravel()
        d = float(0.5 * np.abs(a - b).sum()) if div == "tv" else float(js(a, b))
    return FuzzyBoundCheck(
        theta=prof.theta,
        div=div,
        divergence=d,
        bound=prof.bound,
        bound_target=prof.bound_target,
        holds=holds_within(d, prof.bound),
        holds_target=holds_within(d, prof.bound_target),
        draft_fraction=prof.draft_fraction,
        draft_fraction_target=prof.draft_fraction_target,
    )
