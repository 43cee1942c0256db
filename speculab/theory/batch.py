"""Batch speculative decoding with ``M`` drafts: [Yin] Thm 3, Prop. 1 and the Fig. 3 closed forms.

Convention: ``p`` = draft, ``q`` = target. At a round's first position (the
*root*) Algorithm 4 tries ``M`` independent drafts against the recursive
residuals ``q^1 = q``, ``q^{m+1} = [q^m − p]_+``; it rejects there only if all
``M`` first tokens are rejected, which happens with probability
``R = Π_{m=1}^{M} r_m``, ``r_m = TV(q^m, p)``, and then outputs ``x ~ q^{M+1}``.

Numerics: we never normalise a residual. With ``u_0 = q``, ``R_0 = 1``,

    u_m = (u_{m−1} − R_{m−1} p)_+ ,    R_m = Σ_x u_m(x),

one has ``u_m = R_m q^{m+1}`` and ``R_m = Π_{k≤m} r_k`` (because
``r_m q^{m+1} = (q^m − p)_+``). No division occurs, so ``r_m = 0`` is harmless:
every later ``u`` and ``R`` is exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from array_api_compat import array_namespace, is_numpy_array

from speculab import kernels
from speculab._validate import as_pair, as_positive_int
from speculab.theory.instance import MarkovInstance, compact, expect, per_position, push, scalar
from speculab.theory.rejections import RejectionProfile
from speculab.theory._checks import takes_instance

__all__ = [
    "BatchProfile",
    "batch_expected_rejections",
    "batch_rejection_probability",
    "batch_improvement",
    "bernoulli_batch_improvement",
    "uniform_batch_improvement",
    "root_residual_chain",
]


#: Drainable root mass ``R_m − R_∞`` below which :func:`root_residual_chain` stops early (2^-60 ≈ 8.7e-19).
CONVERGED = 2.0**-60

#: Finite ``M`` above which :func:`root_residual_chain` jumps from event to event instead of stepping (numpy).
JUMP_FROM = 64

#: The largest finite number of drafts (float64 holds every integer up to it; beyond, give ``np.inf`` for the limit).
MAX_M = 1 << 53


def _check_M(M) -> float:
    if M == np.inf:
        return np.inf
    M = as_positive_int(M, "M")
    if M > MAX_M:
        raise ValueError(f"M must be at most 2^53 (or inf for the limit M → ∞); got {M}")
    return M


def root_residual_chain(q: np.ndarray, p: np.ndarray, M: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Unnormalised ``(u_M, R_M)`` of the root residual recursion (module docstring), batched.

    ``u_M = R_M q^{M+1}`` is the sub-probability of outputting each token *by a
    rejection at the root*, and ``R_M = Π_{m≤M} TV(q^m, p)`` the root rejection
    probability. ``M = inf`` gives the exact limit (Prop. 1, corrected): the
    mass of ``q`` off ``supp(p)`` is never removed — for ``x ∉ supp(p)``,
    ``u_m(x) = q(x)`` for every ``m`` — while on ``supp(p)`` the residual is
    drained in finitely many steps whenever that off-support mass ``o`` is positive
    (each step subtracts at least ``o · p(x)``), and ``R_m → 0`` when ``o = 0``. So

    .. math:: u_\infty = q \cdot 1\{p = 0\},\qquad R_\infty = q(\{x : p(x) = 0\}).

    A finite ``M`` stops early once every row's drainable mass — what ``u_m`` keeps on
    ``supp(p)``, ``R_m − R_∞`` — is at most :data:`CONVERGED` (numpy arrays; a traced JAX
    array runs all ``M`` steps): the steps only lower it, so those left would change ``u``
    (in total) and ``R`` by at most that, far below float64's resolution of the counts
    built from them. Beyond :data:`JUMP_FROM` drafts (numpy) the chain is not stepped but
    jumped from one event to the next (:func:`_drain_in_jumps`): between two tokens leaving
    the residual's support every step is the same linear map, so ``M = 10^6`` or ``10^{12}``
    costs at most ``2V + 2`` passes over ``(..., V)``, whatever the speed of convergence.

    Args:
      q, p: arrays of shape ``(..., V)`` (already validated; any array-API library).
      M: number of drafts, a positive int or ``np.inf``.
    """
    xp = array_namespace(q, p)
    if M == np.inf:
        u = xp.where(p > 0, 0.0, q)
        return u, xp.sum(u, axis=-1)
    u, R = q, xp.ones_like(q[..., 0])
    on_support = p > 0 if is_numpy_array(R) else None
    if on_support is not None and M > JUMP_FROM:
        return _drain_in_jumps(q, p, int(M))
    for _ in range(int(M)):
        u, R = kernels.drain(u, R, p)
        if on_support is not None and np.max(np.sum(u, axis=-1, where=on_support), initial=0.0) <= CONVERGED:
            break
    return u, R


def _drain_in_jumps(q: np.ndarray, p: np.ndarray, M: int) -> tuple[np.ndarray, np.ndarray]:
    r"""``M`` steps of :func:`kernels.drain` from ``(q, 1)``, jumping from event to event (numpy).

    While the set ``A`` of tokens with ``u(x) > 0`` and ``p(x) > 0`` does not change, a step subtracts
    ``R p(x)`` on ``A`` and leaves the rest (``p = 0``: kept; ``u = 0``: stays 0), so ``R`` shrinks by the factor
    ``c = 1 − p(A)``, and ``n`` steps from ``(u, R)`` give, on ``A``,

    .. math:: u_n(x) = L(x) + κ(x)\, c^n,\qquad κ(x) = \frac{p(x)\, R}{p(A)},\quad L(x) = u(x) - κ(x)

    (the geometric sum of the subtractions). A token with ``t(x) = u(x)/κ(x) < 1`` (``L(x) < 0``) leaves ``A`` at
    the first ``n`` with ``1 − c^n ≥ t(x)``, ``n = log(1 − t) / log c`` (by ``log1p``: exact for a tiny ``t``); one
    with ``t(x) ≥ 1`` never does. Where ``p(A)`` rounds to 1 or above, one step drains ``A`` whole. Each row jumps
    by the formula to just before its next event (or through all its remaining steps), then takes the event's
    step literally (its clamp at 0); an event misplaced by round-off is caught by that step or the next jump.
    Every event removes a token for good, so a row needs at most ``V`` jumps; ``2V + 2`` passes are allowed
    (an event round-off puts a step early costs a pass that still takes a step), and a row with steps left after
    them is refused, never returned short. The formula is exact up to the round-off of the masses at the jump (absolute,
    about ``1e-16 R``): a residual far below that, e.g. ``R_M = 0.999^{60000} ≈ 1e-26``, may come out as 0.
    """
    u, R = np.asarray(q, dtype=np.float64), np.ones(q.shape[:-1])  # never written in place: every update is new
    left = np.full(R.shape, M, dtype=np.int64)
    on = p > 0
    for _ in range(2 * q.shape[-1] + 2):  # a row's events remove its V tokens at most (see above)
        active = (u > 0) & on
        pa = np.sum(p, axis=-1, where=active)
        going = (left > 0) & (pa > 0)  # pa > 0 needs some u > 0, so R > 0
        if not going.any():
            break
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # rows not going: values unused
            log_c = np.log1p(-pa)  # −inf where p(A) = 1: everything drains in one step
            kappa = p * (R / pa)[..., None]
            L = u - kappa
            t = u / kappa  # x leaves when 1 − c^n ≥ t: n = log(1 − t) / log c, by log1p for a small t
            n_x = np.where(active & (t < 1.0), np.ceil(np.log1p(-t) / log_c[..., None]), np.inf)
        first = np.min(np.where(np.isnan(n_x), 1.0, np.maximum(n_x, 1.0)), axis=-1, initial=np.inf)
        first = np.where(pa >= 1.0, 1.0, first)  # p(A) ≥ 1 (p's sum rounds above 1): one step drains A whole
        jump = np.where(going, np.minimum(first, left + 1.0) - 1.0, 0.0)  # steps by the formula, before the event
        moved = going & (jump > 0)
        if moved.any():
            with np.errstate(invalid="ignore", over="ignore"):  # rows not moved: values unused
                decay = np.exp(jump[..., None] * log_c[..., None])  # c^jump
                u = np.where(moved[..., None] & active, np.maximum(L + kappa * decay, 0.0), u)
            R = np.where(moved, np.sum(u, axis=-1), R)
            left = left - jump.astype(np.int64)
        step = going & (left > 0)  # the event's own step, clamped literally
        stepped, R_stepped = kernels.drain(u, R, p)
        u = np.where(step[..., None], stepped, u)
        R = np.where(step, R_stepped, R)
        left = left - step
    if np.any((left > 0) & (np.sum(p, axis=-1, where=(u > 0) & on) > 0)):  # never silently short of M steps
        raise RuntimeError(
            "the root chain's events could not all be located in float64 (rows with drafts left "
            "after every pass); use M = np.inf for the limit, or a smaller M"
        )
    return u, R


def batch_rejection_probability(q, p, M) -> np.ndarray:
    r"""Probability that all ``M`` first draft tokens are rejected at a root: :math:`\prod_{m=1}^{M} \mathrm{TV}(q^m,
    p)`.

    ``M = 1`` gives ``TV(p, q)``; ``M = np.inf`` gives the limit ``q(supp(p)^c)``.
    """
    p, q = as_pair(p, q)
    return root_residual_chain(q, p, _check_M(M))[1]


def batch_improvement(q, p, M) -> np.ndarray:
    r"""Single-token batch improvement, [Yin] Thm 3 / Fig. 3.

    .. math:: \mathrm{BI}(q, p) = \mathrm{TV}(q, p) - \prod_{m=1}^{M} \mathrm{TV}(q^m, p),
              \quad q^1 = q,\ q^{m+1} = [q^m - p]_+ .

    Non-negative, non-decreasing in ``M``, 0 at ``M = 1``; ``M = np.inf`` gives
    the limit ``TV(p, q) − q(supp(p)^c)`` (``= TV`` when ``supp(q) ⊆ supp(p)``).

    Args:
      q: target distribution(s), shape ``(..., V)``.
      p: draft distribution(s), same shape.
      M: number of drafts (int >= 1 or ``np.inf``).
    """
    p, q = as_pair(p, q)
    return kernels.tv(p, q) - root_residual_chain(q, p, _check_M(M))[1]


def _M_array(M) -> np.ndarray:
    """``M`` as a float array of whole numbers >= 1 or ``inf`` (the closed forms broadcast over it)."""
    arr = np.asarray(M, dtype=float)
    ok = (arr >= 1) & ((arr == np.inf) | (arr == np.floor(arr)))
    if not np.all(ok):
        raise ValueError(f"M must be whole numbers >= 1 or inf; got {M!r}")
    return arr


def bernoulli_batch_improvement(u, v, M) -> np.ndarray:
    r"""Closed form of BI for ``p = Ber(u)``, ``q = Ber(v)`` ([Yin] §3.2, Fig. 3 top).

    For ``u ≥ v``: :math:`\mathrm{BI} = (u - v)(1 - u^{M-1})`; by the symmetry
    ``0 ↔ 1``, for ``u < v``: :math:`(v - u)(1 - (1 - u)^{M-1})`. Broadcasts over
    ``u``, ``v`` and ``M`` (``M = inf`` allowed).
    """
    u, v = np.asarray(u, dtype=float), np.asarray(v, dtype=float)
    if np.any((u < 0) | (u > 1) | (v < 0) | (v > 1)) or np.any(np.isnan(u)) or np.any(np.isnan(v)):
        raise ValueError(f"u and v must be probabilities in [0, 1]; got u={u}, v={v}")
    M = _M_array(M)
    keep = np.where(u >= v, u, 1.0 - u)  # probability p puts on the token q under-weights
    # keep^∞ is 0 unless p is a point mass on that token (decided on u, not on 1 − u in floats)
    point_mass = np.where(u >= v, u == 1.0, u == 0.0)
    finite = np.where(M == np.inf, 1.0, M)
    tail = np.where(M == np.inf, point_mass.astype(float), keep ** (finite - 1))
    return np.abs(u - v) * (1.0 - tail)


def uniform_batch_improvement(r, M) -> np.ndarray:
    r"""Closed form of BI for ``p = Unif(V)``, ``q = Unif(V')``, ``V' ⊂ V``, ``r = |V|/|V'|`` ([Yin] Fig. 3 bottom).

    .. math:: \mathrm{BI} = (1 - 1/r) - (1 - 1/r)^M .

    Broadcasts over ``r`` and ``M`` (``M = inf`` gives ``1 − 1/r``).
    """
    r = np.asarray(r, dtype=float)
    if np.any(~(r >= 1)):
        raise ValueError(f"r = |V|/|V'| must be >= 1; got {r}")
    M = _M_array(M)
    a = 1.0 - 1.0 / r
    return a - np.where(M == np.inf, 0.0, a ** np.where(M == np.inf, 1.0, M))


@dataclass(frozen=True)
class BatchProfile(RejectionProfile):
    """Expected rejections of batch SD, split as in [Yin] Thm 3.

    Attributes:
      rejections_per_position: ``(T,)`` probability that position ``n`` is a rejection.
      sd_rejections_per_position: ``(T,)`` the speculative decoding term ``E_q[TV(q_n, p_n)]`` (T1).
      oracle_calls_per_position: ``(T,)`` probability that position ``n`` is a root, i.e.
        starts a round (one target call).
      M: number of drafts (``inf`` for the limit).
    """

    sd_rejections_per_position: np.ndarray = None
    oracle_calls_per_position: np.ndarray = None
    M: float = 1

    @property
    def improvement_per_position(self) -> np.ndarray:
        """``E_f[TV(q_n, p_n) − Π_m r_m]`` per position (≥ 0)."""
        return self.sd_rejections_per_position - self.rejections_per_position

    @property
    def improvement(self) -> float:
        """The batch improvement: T1 minus this algorithm's expected rejections."""
        return scalar(self.improvement_per_position.sum())


def batch_kernels(p, q, M) -> tuple:
    """What one position contributes to T3 (array API): per context TV, excess ``(q − p)_+``, the root chain
    ``(u_M, R_M)``, and the target's kernel."""
    return kernels.tv(p, q), kernels.excess(q, p), *root_residual_chain(q, p, M), q


def batch_advance(state, ker):
    """One position of T3's recursion (array API; the numpy loop and the JAX scan share it).

    ``state = (μ, g)``: the target's marginal of ``x_n`` and the root mass (``x_n = a``
    and position ``n + 1`` starts a round). Returns the next state and the position's
    (rejection probability, T1 term, probability that it starts a round).
    """
    mu, g = state
    tv, excess, u, R, q = ker
    plain = mu - g  # mass of prefixes where position n+1 is not a root
    out = (expect(plain, tv) + expect(g, R), expect(mu, tv), g.sum())
    return (push(mu, q), push(plain, excess) + push(g, u)), out


@takes_instance
def batch_expected_rejections(inst: MarkovInstance, M) -> BatchProfile:
    r"""Expected rejections of batch SD with ``M`` drafts on a Markov instance, [Yin] Thm 3.

    .. math:: E[N_{rej}] = \sum_n E_q[\mathrm{TV}(q_n, p_n)]
              - \sum_n \sum_a g_{n-1}(a)\,\big[\mathrm{TV}(q_n, p_n)(a) - R_n(a)\big]

    where ``g_n(a) = P(x_n = a, position n produced by a rejection)`` is the
    root mass (position ``n + 1`` starts a round), ``g_0 = rho``, propagated by

    .. math:: g_n(b) = \sum_a (\mu_{n-1}(a) - g_{n-1}(a))\,(q_n - p_n)_+(b \mid a)
              + g_{n-1}(a)\, R_n(a)\, q^{M+1}_n(b \mid a),

    ``μ`` the target's marginals (Alg. 4 is unbiased). ``O(T M V^2)`` time and
    ``O(V^2)`` memory (``O(M V^2)`` once on a stationary instance); ``M = 1``
    is T1 exactly; ``M = np.inf`` is the exact ``M → ∞`` limit (Prop. 1, valid
    also when ``supp(q) ⊄ supp(p)``, where the paper's proof does not apply).
    """
    M = _check_M(M)
    rows = per_position(lambda p, q: batch_kernels(p, q, M), inst.T, compact(inst.P), compact(inst.Q))
    state = (inst.rho, inst.rho)
    rejections, sd, root = (np.empty(inst.T, dtype=inst.rho.dtype) for _ in range(3))
    for n, ker in enumerate(rows):
        state, (rejections[n], sd[n], root[n]) = batch_advance(state, ker)
    return BatchProfile(
        rejections_per_position=rejections, sd_rejections_per_position=sd, oracle_calls_per_position=root, M=M
    )
