r"""How far batch SD is from optimal: the best possible use of ``M`` drafts at a round's root (SPEC O).

Convention: ``p`` = draft, ``q`` = target. At a root, ``M`` i.i.d. draft tokens
``X_1..X_M ~ p`` are coupled with the target's token ``Y ~ q``; the draft is
*accepted* when ``Y ∈ {X_1..X_M}`` (the round goes on down a row that drafted
``Y``). Which laws of the accepted token are achievable? With ``a(x) = P(Y = x,
accepted)``, a coupling exists iff

.. math:: 0 \le a \le q \quad\text{and}\quad a(S) \le c(S) = 1 - (1 - p(S))^M
          \ \text{for every } S \subseteq V

(``c(S)`` = probability that some draft lands in ``S``; sufficiency is Hall's
theorem on the bipartite graph of draft tuples and tokens). ``c`` is a coverage
function, hence submodular, so the feasible ``a`` form a polymatroid with rank

.. math:: g(S) = \min_{T \subseteq S}\, \big[c(T) + q(S \setminus T)\big],

and the largest acceptance is ``g(V)``:

.. math:: \alpha^*(p, q, M) = 1 - \max_{H \subseteq V}\, \big[p(H)^M - q(H)\big]

([Yin] §5 leaves this open). Both optimisations run over *prefixes* of the tokens
sorted by ``q/p`` (ascending for ``H``, descending for ``T``; ``p = 0`` counts as
``+∞``): exchanging a token across the boundary of an optimal set that is not a
prefix never helps, because ``s ↦ s^M`` is convex (tokens with equal ratios enter
or leave together). So ``α*`` costs ``O(V log V)`` and ``g`` of a chain of sets
``O(V² log V)``.

[Yin] Algorithm 4 (recursive rejection, with replacement) accepts at the root
with probability ``1 − Π_m r_m ≤ α*``, with accepted law ``q − u_M``
(:func:`~speculab.theory.batch.root_residual_chain`).

On a Markov instance the root verifier may choose any feasible ``a`` per position
and context; the rest of the round is Algorithm 4's (the accepted row is
followed and checked with ``min(1, q/p)``, ``K = ∞``). The choice that minimises
the expected rejections is found by dynamic programming backwards over positions
(:func:`optimal_batch_rejections`): at each root it maximises ``Σ_x a(x) w(x)``,
a linear function on a polymatroid, which the greedy algorithm solves exactly.
Its weights ``w(x)`` are the rejections saved by accepting ``x`` rather than
outputting it by a rejection. Were one of them not positive, the fewest rejections
would not come from the largest root acceptance; we have no proof that this cannot
happen, so the profile reports the shortfall ``α* − Σ a``. On every instance tried
(``tests/test_optimal.py``) the weights stay positive and the shortfall is 0: the
best root verifier is one that accepts with probability ``α*``.

**A verifier that attains it.** A verifier that sees only the *set* ``D`` of drafted
tokens can accept at most ``1 − max_H [P(D ⊆ H) − q(H)]`` (:func:`set_acceptance`, for
any law of ``D``: :func:`draft_set_law`, i.i.d. or *distinct* drafts drawn without
replacement). :func:`optimal_coupling` attains it by a transport linear program over
(draft set, token) solved by scipy's HiGHS, turned into a sampler
(:meth:`SetCoupling.sample`): accept a drafted ``y`` with probability ``κ(D, y)/P(D)``,
else output from ``(q − a)/(1 − α)`` — unbiased by construction. Distinct drafts cover
more of the vocabulary (``P(D ⊆ H)`` is smaller), so their optimum is never lower.
Tables of ``2^V`` subsets: small vocabularies (:data:`MAX_SET_V`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speculab import kernels
from speculab._validate import as_pair
from speculab.theory.batch import BatchProfile, _check_M, batch_advance, root_residual_chain
from speculab.theory.instance import MarkovInstance, at_position, compact, scalar
from speculab.theory._checks import takes_instance

__all__ = [
    "optimal_acceptance",
    "coverage",
    "accepted_law_rank",
    "best_accepted_law",
    "algorithm4_accepted_law",
    "OptimalBatchProfile",
    "optimal_batch_rejections",
    "batch_rejections_backward",
    "MAX_SET_V",
    "MAX_SET_DRAFTS",
    "draft_set_law",
    "set_acceptance",
    "SetCoupling",
    "optimal_coupling",
]


def coverage(s, M) -> np.ndarray:
    r"""Probability that at least one of ``M`` i.i.d. draws lands in a set of mass ``s``: :math:`1 - (1 - s)^M`.

    ``M = np.inf`` gives ``1{s > 0}``. ``1 − s`` is floored at 0 (a cumulative sum may exceed 1 by round-off).
    """
    s = np.asarray(s, dtype=float)
    if M == np.inf:
        return (s > 0).astype(float)
    return 1.0 - np.maximum(1.0 - s, 0.0) ** M


def _ratio_key(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``q/p`` with ``p = 0`` as ``+inf`` (such a token is never drafted)."""
    drafted = p > 0
    return np.where(drafted, q / np.where(drafted, p, 1.0), np.inf)


def optimal_acceptance(p, q, M) -> np.ndarray:
    r"""The largest root acceptance with ``M`` i.i.d. drafts (SPEC O): :math:`\alpha^* = 1 - \max_H [p(H)^M - q(H)]`.

    The maximum runs over the ``V + 1`` prefixes of the tokens sorted by ``q/p``
    ascending (module docstring), so the cost is ``O(V log V)`` per pair. ``M = 1``
    gives ``1 − TV(p, q)``; ``M = np.inf`` gives ``q(supp p)``; always
    ``α* ≥ 1 − Π_m TV(q^m, p)``, [Yin] Algorithm 4's root acceptance.

    Args:
      p: draft distribution(s), shape ``(..., V)``.
      q: target distribution(s), same shape.
      M: number of i.i.d. drafts, an int >= 1 or ``np.inf``.

    Returns:
      ``(...)`` array of ``α*``.

    Example:
      >>> float(optimal_acceptance([0.5, 0.5, 0.0], [0.2, 0.3, 0.5], 2))
      0.5
    """
    p, q = as_pair(p, q)
    M = _check_M(M)
    if M == np.inf:
        return np.sum(np.where(p > 0, q, 0.0), axis=-1)
    order = np.argsort(_ratio_key(p, q), axis=-1, kind="stable")
    cp = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)  # p(H) of each non-empty prefix H
    cq = np.cumsum(np.take_along_axis(q, order, axis=-1), axis=-1)
    gain = np.max(np.minimum(cp, 1.0) ** M - cq, axis=-1)
    return 1.0 - np.maximum(gain, 0.0)  # H = ∅ gives 0


def accepted_law_rank(p, q, M, members) -> np.ndarray:
    r"""The polymatroid rank :math:`g(S) = \min_{T \subseteq S} [c(T) + q(S \setminus T)]` of the feasible accepted
    laws.

    ``g(S)`` is the largest probability that the accepted token lies in ``S``.
    The minimising ``T`` is a prefix of ``S`` sorted by ``q/p`` descending (module docstring).

    Args:
      p, q: distributions, shape ``(..., V)``.
      M: number of drafts (int or ``np.inf``).
      members: boolean ``(..., K, V)``, ``K`` sets ``S`` per pair.

    Returns:
      ``(..., K)`` ranks.
    """
    p, q = as_pair(p, q)
    M = _check_M(M)
    members = np.asarray(members, dtype=bool)
    order = np.argsort(-_ratio_key(p, q), axis=-1, kind="stable")[..., None, :]  # (..., 1, V)
    inside = np.take_along_axis(members, order, axis=-1)  # (..., K, V) in the order of q/p descending
    pT = np.cumsum(np.where(inside, np.take_along_axis(p[..., None, :], order, axis=-1), 0.0), axis=-1)
    qT = np.cumsum(np.where(inside, np.take_along_axis(q[..., None, :], order, axis=-1), 0.0), axis=-1)
    qS = np.sum(np.where(members, q[..., None, :], 0.0), axis=-1)
    return qS + np.minimum(np.min(coverage(pT, M) - qT, axis=-1), 0.0)  # T = ∅ gives 0


def best_accepted_law(p, q, M, w) -> np.ndarray:
    r"""The feasible accepted law ``a`` that maximises :math:`\sum_x a(x)\, w(x)` (greedy on the polymatroid).

    Tokens are taken in order of decreasing weight, each given its marginal rank
    ``a(π_k) = g(S_k) − g(S_{k−1})`` (:func:`accepted_law_rank`), until the weights
    are no longer positive — Edmonds' greedy algorithm, exact for a linear objective
    on a polymatroid. With every ``w > 0`` the total is ``α*``.

    Args:
      p, q: distributions, shape ``(..., V)``.
      M: number of drafts (int or ``np.inf``).
      w: ``(..., V)`` weights.

    Returns:
      ``(..., V)`` the accepted law (sub-probability, ``≤ q``).
    """
    p, q = as_pair(p, q)
    w = np.asarray(w, dtype=float)
    if w.shape != p.shape or not np.all(np.isfinite(w)):
        raise ValueError(f"w must be finite weights of the shape of p, {p.shape}; got shape {w.shape}")
    V = p.shape[-1]
    order = np.argsort(-w, axis=-1, kind="stable")  # π
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(V), axis=-1)  # position of each token in π
    members = rank[..., None, :] < np.arange(1, V + 1)[:, None]  # (..., V, V): S_k = first k + 1 tokens of π
    g = accepted_law_rank(p, q, M, members)  # (..., V)
    step = np.diff(g, axis=-1, prepend=0.0)  # marginal rank of π_k
    step = np.where(np.take_along_axis(w, order, axis=-1) > 0, np.maximum(step, 0.0), 0.0)
    a = np.empty_like(step)
    np.put_along_axis(a, order, step, axis=-1)
    return np.minimum(a, q)


def algorithm4_accepted_law(p, q, M) -> np.ndarray:
    """[Yin] Algorithm 4's accepted law at the root: ``q − u_M = q − R_M q^{M+1}`` (:mod:`speculab.theory.batch`)."""
    p, q = as_pair(p, q)
    return q - root_residual_chain(q, p, _check_M(M))[0]


@dataclass(frozen=True)
class OptimalBatchProfile(BatchProfile):
    """Expected rejections of batch SD whose roots are verified by the best coupling (the rest as Algorithm 4).

    Attributes (besides :class:`~speculab.theory.batch.BatchProfile`'s):
      root_shortfall: the largest ``α* − Σ_x a(x)`` over positions and contexts:
        how far below the largest acceptance the fewest-rejection policy accepts
        at some root (0 when it always accepts ``α*``).
    """

    root_shortfall: float = 0.0


def _rows(P: np.ndarray, Q: np.ndarray, n: int):
    """The draft's and the target's ``(A', V)`` rows at position ``n`` of compact stacks, broadcast to one shape."""
    p, q = at_position(P, n), at_position(Q, n)
    shape = np.broadcast_shapes(p.shape, q.shape)
    return np.broadcast_to(p, shape), np.broadcast_to(q, shape)


@takes_instance
def batch_rejections_backward(inst: MarkovInstance, M, root_law=None) -> tuple[float, np.ndarray, np.ndarray]:
    r"""Expected rejections of batch SD (``K = ∞``) by dynamic programming backwards over positions.

    With ``W_n(a)`` the expected rejections from position ``n`` on when it is a root
    with context ``a``, and ``N_n(a)`` when it continues an accepted row,

    .. math:: N_n = \min(P_n, Q_n)\, N_{n+1} + (Q_n - P_n)_+ (1 + W_{n+1}),\qquad
              W_n = Q_n (1 + W_{n+1}) - \langle a_n, w_{n+1} \rangle,\quad w = 1 + W - N,

    ``W_{T+1} = N_{T+1} = 0`` and ``E[N_rej] = ρ · W_1``: a root outputs ``x`` by a
    rejection with probability ``q(x) − a(x)`` (one rejection, the next position is a
    root) and accepts it with ``a(x)`` (the next position continues that row).
    ``root_law(p, q, M, w)`` gives the accepted law ``a_n`` per context; ``None`` is
    the best one (:func:`best_accepted_law`, which makes this the minimum over root
    verifiers), :func:`algorithm4_accepted_law` (ignoring ``w``) gives [Yin] Thm 3.

    Returns:
      ``(E[N_rej], W, N)``, ``W`` and ``N`` of shape ``(T + 1, V)`` (row ``T`` is 0).
    """
    root_law = best_accepted_law if root_law is None else root_law
    M = _check_M(M)
    P, Q = compact(inst.P), compact(inst.Q)
    W, N = np.zeros((inst.T + 1, inst.V)), np.zeros((inst.T + 1, inst.V))
    for n in range(inst.T - 1, -1, -1):
        p, q = _rows(P, Q, n)  # (A', V), A' = V or 1
        w = np.broadcast_to(1.0 + W[n + 1] - N[n + 1], p.shape)
        a = root_law(p, q, M, w)
        W[n] = q @ (1.0 + W[n + 1]) - np.sum(a * w, axis=-1)  # (A',) broadcast over contexts
        N[n] = np.minimum(p, q) @ N[n + 1] + kernels.excess(q, p) @ (1.0 + W[n + 1])
    return scalar(inst.rho @ W[0]), W, N


@takes_instance
def optimal_batch_rejections(inst: MarkovInstance, M) -> OptimalBatchProfile:
    r"""The fewest expected rejections batch SD with ``M`` drafts can reach by verifying its roots differently.

    Every root (a round's first position) may couple its ``M`` drafts with the
    target by any coupling (module docstring); the rest of the round is [Yin]
    Algorithm 4's, ``K = ∞``. The best choice per position and context comes from
    :func:`batch_rejections_backward`; the profile is then propagated forward with
    [Yin] Thm 3's recursion (root mass ``g``, rejection-output law ``q − a``), so it
    has the same fields as :func:`~speculab.theory.batch.batch_expected_rejections`
    — never more rejections, equal at ``M = 1`` (every unbiased rule does at least
    T1's, [Yin] Thm 2).

    ``O(T A V² log V)`` time (a greedy per position and context, ``A = V`` contexts,
    1 on a context-free instance), ``O(T V)`` memory beyond the instance.

    Args:
      inst: a Markov instance.
      M: number of drafts, an int >= 1 or ``np.inf``.
    """
    M = _check_M(M)
    _, W, N = batch_rejections_backward(inst, M)
    P, Q = compact(inst.P), compact(inst.Q)
    state = (inst.rho, inst.rho)
    rejections, sd, root = (np.empty(inst.T) for _ in range(3))
    shortfall = 0.0
    for n in range(inst.T):
        p, q = _rows(P, Q, n)
        # the backward pass's choice again, from its values: keeping every a_n would cost O(T V²) memory
        a = best_accepted_law(p, q, M, np.broadcast_to(1.0 + W[n + 1] - N[n + 1], p.shape))
        shortfall = max(shortfall, float(np.max(optimal_acceptance(p, q, M) - a.sum(axis=-1))))
        u = q - a  # output by a rejection at the root
        ker = (kernels.tv(p, q), kernels.excess(q, p), u, u.sum(axis=-1), q)
        state, (rejections[n], sd[n], root[n]) = batch_advance(state, ker)
    return OptimalBatchProfile(
        rejections_per_position=rejections,
        sd_rejections_per_position=sd,
        oracle_calls_per_position=root,
        M=M,
        root_shortfall=max(shortfall, 0.0),
    )


# -- drafts as a set, and a verifier that attains the optimum -------------------------------------------------------
def _check_small(V: int) -> None:
    if V > MAX_SET_V:
        raise ValueError(
            f"the coupling works on the 2^V subsets of the vocabulary: V = {V} exceeds MAX_SET_V = {MAX_SET_V}"
        )


#: Largest vocabulary for the set-based functions (their tables have ``2^V`` entries).
MAX_SET_V = 14
#: Most drafts for the set-based functions (:func:`draft_set_law` is built one draft at a time).
MAX_SET_DRAFTS = 1024


def draft_set_law(p, M: int, *, replacement: bool = True) -> np.ndarray:
    r"""The law of the set ``D`` of distinct tokens among ``M`` drafts from ``p``: ``P(D = S)`` for every ``S ⊆ V``.

    Subsets are bitmasks (token ``x`` is bit ``x``), so the result has ``2^V`` entries.
    With ``replacement`` the drafts are i.i.d. (``P(D ⊆ H) = p(H)^M``, as in [Yin]
    Algorithm 4); without, they are drawn one after another from ``p`` restricted to the
    tokens not yet drafted (*distinct drafts*; fewer than ``M`` when ``supp p`` is smaller).
    Built draw by draw over subsets (no inclusion–exclusion, so no cancellation):
    ``O(M V 2^V)``.

    Args:
      p: draft distribution, shape ``(V,)``, ``V ≤`` :data:`MAX_SET_V`.
      M: number of drafts (int >= 1).
      replacement: i.i.d. drafts (``True``) or distinct drafts (``False``).
    """
    from speculab._validate import as_distribution, as_positive_int

    p = as_distribution(p, "p", ndim=1)
    M = as_positive_int(M, "M")
    if M > MAX_SET_DRAFTS:
        raise ValueError(
            f"M must be at most MAX_SET_DRAFTS = {MAX_SET_DRAFTS} for the set-based functions (the law "
            f"of the draft set is built draft by draft); got {M}"
        )
    V = p.shape[0]
    _check_small(V)
    masks = np.arange(1 << V)
    inside = (masks[:, None] >> np.arange(V)) & 1  # (2^V, V)
    mass, rest = inside @ p, (1 - inside) @ p  # p(S) and p(V \ S), each summed directly (no 1 − p(S) cancellation)
    law = np.zeros(1 << V)
    law[0] = 1.0
    for _ in range(M):
        nxt = np.zeros_like(law)
        if replacement:
            nxt += law * mass  # the draft repeats a token already in S
            room = np.ones_like(mass)
        else:
            stuck = rest == 0  # S already holds all of supp(p): no further distinct draft
            nxt += np.where(stuck, law, 0.0)
            room = np.where(stuck, 1.0, rest)  # the draft comes from outside S, renormalised
        for x in range(V):
            fresh = inside[:, x] == 0
            np.add.at(nxt, masks[fresh] | (1 << x), law[fresh] * p[x] / room[fresh])
        law = nxt
    return law


def set_acceptance(set_law, q) -> float:
    r"""The largest acceptance of any verifier that sees the set ``D`` of drafts: :math:`1 - \max_H [P(D \subseteq H)
    - q(H)]`.

    The general form of SPEC O for any law of the draft set (Hall's theorem on sets and
    tokens; :func:`optimal_acceptance` is the i.i.d. case in ``O(V log V)``).

    Args:
      set_law: ``(2^V,)`` ``P(D = S)`` by bitmask (:func:`draft_set_law`).
      q: target distribution ``(V,)``.
    """
    from speculab._validate import as_distribution

    q = as_distribution(q, "q", ndim=1)
    V = q.shape[0]
    _check_small(V)
    within = as_distribution(set_law, "set_law", ndim=1)
    if within.shape != (1 << V,):
        raise ValueError(
            f"set_law must have 2^V = {1 << V} entries (one per subset of the {V} tokens of q); "
            f"got shape {within.shape}"
        )
    within = within.copy()  # zeta transform: P(D ⊆ H) for every H
    for x in range(V):
        bit = (np.arange(1 << V) >> x) & 1 == 1
        within[bit] += within[~bit]
    qH = ((np.arange(1 << V)[:, None] >> np.arange(V)) & 1) @ q
    return float(1.0 - max(np.max(within - qH), 0.0))


@dataclass(frozen=True)
class SetCoupling:
    """A verifier of a set of drafts that attains the largest acceptance (:func:`optimal_coupling`).

    Attributes:
      sets: ``(n,)`` bitmasks of the draft sets with positive probability.
      set_prob: ``(n,)`` their probabilities ``P(D = S)``.
      accept: ``(n, V)`` probability of accepting token ``y ∈ S`` when the draft set is ``S``
        (0 off ``S``); the rest of the row's mass is a rejection.
      residual: ``(V,)`` law of the token output by a rejection, ``(q − a)/(1 − α)``.
      accepted_law: ``(V,)`` ``a(y) = P(Y = y, accepted)``.
      acceptance: ``α = Σ_y a(y)``.
    """

    sets: np.ndarray
    set_prob: np.ndarray
    accept: np.ndarray
    residual: np.ndarray
    accepted_law: np.ndarray
    acceptance: float

    def output_law(self) -> np.ndarray:
        """The law of the output token, ``Σ_S P(S) accept(S, ·) + (1 − α) residual`` (the target's)."""
        return self.set_prob @ self.accept + (1.0 - self.acceptance) * self.residual

    def accept_given(self, drafts: np.ndarray) -> np.ndarray:
        """``(n, V)``: the probability of accepting each token given ``n`` draft tuples ``(n, M)`` (0 off their set)."""
        row = np.full(1 << self.residual.shape[0], -1)
        row[self.sets] = np.arange(self.sets.size)
        index = row[np.bitwise_or.reduce(1 << np.asarray(drafts, dtype=np.int64), axis=-1)]
        if np.any(index < 0):
            raise ValueError("drafts hold a set of tokens the coupling gives probability 0")
        return self.accept[index]

    def sample(self, drafts: np.ndarray, u_accept: np.ndarray, u_token: np.ndarray):
        """Verify ``n`` draft tuples ``(n, M)`` with two uniforms each: ``(accepted (n,), token (n,))``."""
        from speculab import kernels

        accept = self.accept_given(drafts)
        weights = np.concatenate([accept, 1.0 - accept.sum(axis=-1, keepdims=True)], -1)
        pick = kernels.sample_index(np.maximum(weights, 0.0), u_accept)  # V = a rejection
        accepted = pick < self.residual.shape[0]
        token = np.where(accepted, pick, kernels.sample_index(np.broadcast_to(self.residual, accept.shape), u_token))
        return accepted, token


def optimal_coupling(p, q, M: int, *, replacement: bool = True) -> SetCoupling:
    r"""A verifier of ``M`` drafts that attains the largest acceptance, as a linear program (scipy's HiGHS).

    Variables ``κ(S, y) = P(D = S, Y = y, accepted)`` for ``y ∈ S``; maximise ``Σ κ``
    subject to ``Σ_y κ(S, y) ≤ P(D = S)`` and ``Σ_S κ(S, y) ≤ q(y)`` — a transport problem
    whose optimum is :func:`set_acceptance` (``α*`` with ``replacement``, SPEC O). The
    verifier accepts ``y`` with probability ``κ(S, y)/P(S)`` given the draft set ``S`` and
    otherwise outputs a token from ``(q − a)/(1 − α)``, so the output law is ``q``
    whatever ``κ``: unbiased. It sees only which tokens were drafted, and follows any
    row that drafted the accepted token.

    Args:
      p, q: draft and target distributions ``(V,)``, ``V ≤`` :data:`MAX_SET_V`.
      M: number of drafts.
      replacement: i.i.d. drafts or distinct drafts (:func:`draft_set_law`).
    """
    from scipy import sparse
    from scipy.optimize import linprog

    p, q = as_pair(p, q)
    law = draft_set_law(p, M, replacement=replacement)
    V = p.shape[0]
    sets = np.flatnonzero(law > 0)
    members = (sets[:, None] >> np.arange(V)) & 1 == 1  # (n, V)
    S, Y = np.nonzero(members)  # one variable per (set, member)
    n, k = sets.size, S.size
    cols = np.arange(k)  # sparse: two ones per variable (a dense matrix is 2^V · V 2^V floats, 30 GB at V = 14)
    A = sparse.csr_array((np.ones(2 * k), (np.concatenate([S, n + Y]), np.concatenate([cols, cols]))), shape=(n + V, k))
    res = linprog(-np.ones(k), A_ub=A, b_ub=np.concatenate([law[sets], q]), bounds=(0, None), method="highs-ipm")
    if res.status != 0:
        raise RuntimeError(f"the coupling's linear program failed: {res.message}")
    kappa = np.zeros((n, V))
    # HiGHS meets its constraints to ~1e-9: no negative flow, rows scaled within P(S) and columns within q(y),
    # so the sampler's probabilities are proper (a row never above 1, the accepted mass never above q)
    kappa[S, Y] = np.maximum(res.x, 0.0)
    kappa *= np.minimum(1.0, law[sets] / np.maximum(kappa.sum(axis=1), 1e-300))[:, None]
    a = np.minimum(kappa.sum(axis=0), q)
    kappa *= np.where(kappa.sum(axis=0) > 0, a / np.maximum(kappa.sum(axis=0), 1e-300), 0.0)[None, :]
    alpha = float(a.sum())
    rest = q - a
    residual = rest / rest.sum() if rest.sum() > 0 else q.copy()
    return SetCoupling(
        sets=sets,
        set_prob=law[sets],
        accept=kappa / law[sets][:, None],
        residual=residual,
        accepted_law=a,
        acceptance=alpha,
    )
