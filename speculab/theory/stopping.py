r"""When to stop drafting: exact counts of any drafting rule, and the optimal rule, by recursion over the draft tree.

Convention: ``p`` = draft, ``q`` = target. A round starting at position index ``n``
after token ``a`` drafts ``y_1, y_2, …`` from ``p`` one at a time (``y_i`` at position
``n + i − 1``, context ``y_{i−1}``, ``y_0 = a``); after each draft a *stopping rule*
decides — seeing the drafts, not the target's verdicts — to draft one more or to
call the target. The target verifies as SD does (``min(1, q/p)``, correction from
``[q − p]_+``, a bonus token after a fully accepted block when a position follows).
[SDpp] Thm 4.3 shows a threshold rule on ``P(some draft rejected)`` optimal only up to
an unknown ``Δ``; on a small Markov instance the optimum itself is computable.

**Costs.** A round of ``k`` drafts costs ``k t_draft + t_target`` ([SDpp] §3's model;
SPEC D), so a run's time is ``t_draft N_draft + t_target N_target`` and the latency per
token is its expectation over ``T``. (This is exact on a finite horizon; [SDpp] eq.
(5.1), :func:`~speculab.theory.latency_per_token`, is below it by
``t_draft P(the last round ends fully accepted at the horizon) / T``.) A round may also
stop before drafting (``k = 0``): one target call outputs one token from ``q``, as
autoregressive decoding does.

**Recursion.** Let ``F_n(a)`` be the expected future (time and every count) of a round
starting at ``n`` after ``a`` (``F_T = 0``). A node of that round's draft tree — the
drafts ``y_{1:k}`` — has ``reach_k = Π_{i≤k} b(y_i)``, the probability that all are
accepted, and stopping there is worth

.. math:: k\,t_{draft} + t_{target}
          + \sum_{i \le k} reach_{i-1}\,(1 - b(y_i))\; E_{c \sim [q-p]_+(\cdot \mid y_{i-1})} F_{n+i}(c)
          + reach_k\; E_{c \sim q(\cdot \mid y_k)} F_{n+k+1}(c)

(the last term only if ``n + k < T``); drafting one more is worth the expectation
over ``y_{k+1} ~ p(· | y_k)`` of the child's value. A rule picks one of the two at
every node; the **optimal** rule picks the smaller expected time, which is
Bellman's recursion over the tree — exact, and never worse than any rule that sees
no more than the drafts (SpecDec++'s threshold with any head, every fixed ``K``).
Positions run backwards, so every ``F_{n+i}`` is known when round ``n`` is solved.

The tree has ``V^K`` leaves per start, ``K = min(max_K, T − n)``: small instances only
(:data:`NODE_BUDGET`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, NamedTuple

import numpy as np

from speculab import kernels
from speculab._budget import limit, power, progress_bar, refuse
from speculab._validate import as_positive_int
from speculab.theory.instance import MarkovInstance, at_position, compact, scalar
from speculab.theory.lookahead import DraftRates, _check_times
from speculab.theory._checks import takes_instance

__all__ = [
    "AdaptiveDrafting",
    "StoppingCounts",
    "stopping_counts",
    "optimal_stopping",
    "fixed_lookahead",
    "tree_fits",
    "NODE_BUDGET",
    "SD_VERIFIER",
]

#: Largest number of draft-tree leaves (``contexts × V^K``) of one round start (scaled by
#: :func:`speculab.work_budget`).
NODE_BUDGET = 1 << 20

#: The quantities the recursion carries, in this order.
_FIELDS = ("time", "oracle_calls", "draft_calls", "accepted", "rejections", "bonus")


class AdaptiveDrafting(NamedTuple):
    """How a method that decides each round's length while drafting (SpecDec++) drafts and verifies, as tables.

    A round drafts one token at a time. The ``count``-th draft ``x`` of a round, drafted at
    position index ``t`` after the token ``a``, multiplies the round's running product
    (1 at the round's start) by ``score[t, a, x]``, and drafting stops after it when
    ``stops(prod, count, t, T, *params)``. Each draft is verified as the one-row, one-slot
    round of ``verifier`` (a slotwise method) decides; the round ends at a rejection or,
    when drafting stopped with every draft accepted, with a bonus token from ``q``. A
    round rejected before its rule stopped drafting goes on drafting from the rejected
    draft (the drafts are counted, never verified) until the rule stops — which is why
    no per-position law exists.

    Attributes:
      verifier: the slotwise method whose one-slot law verifies each draft.
      score: ``(T, V, V)`` the factor of each draft (broadcast views when compact).
      stops: ``stops(prod, count, t, T, *params) -> bool`` (array API; ``t`` may be traced).
      params: the numbers ``stops`` reads (traced by engines, so a sweep may vary them).
      max_K: the most drafts a round makes (an upper bound engines size buffers by).
    """

    verifier: Any
    score: Any
    stops: Callable
    params: tuple
    max_K: int


@dataclass(frozen=True)
class StoppingCounts(DraftRates):
    """Exact expected counts of a drafting rule on a Markov instance (names as :class:`~speculab.sim.Counts`).

    Attributes:
      time: ``E[t_draft N_draft + t_target N_target]``.
      oracle_calls, draft_calls, accepted, rejections, bonus: expected counts (a round that
        stops before drafting outputs a target sample, counted as a rejection as in
        autoregressive decoding).
      T: the horizon (tokens per run).
      t_draft, t_target: the costs the time was computed with.
      rejections_per_position: ``(T,)`` the probability of a rejection at each position, or ``None``
        (not asked for).
    """

    time: float
    oracle_calls: float
    draft_calls: float
    accepted: float
    rejections: float
    bonus: float
    T: int
    t_draft: float
    t_target: float
    rejections_per_position: np.ndarray | None = None

    @property
    def latency_per_token(self) -> float:
        return self.time / self.T


class _SDVerifier:
    """Speculative decoding's rule ([Yin] Alg. 1) as the verifier of a drafting rule: what ``SD()`` verifies with,
    from the kernels (the theory does not import the methods, which build on it)."""

    @staticmethod
    def rule(p, q):
        return kernels.sd_acceptance(p, q), kernels.sd_rejection(p, q)

    def __repr__(self) -> str:
        return "SD_VERIFIER"


#: SD's rule as a verifier: the default of :func:`stopping_counts` and the verifier of :func:`fixed_lookahead`.
SD_VERIFIER = _SDVerifier()


def fixed_lookahead(K: int) -> AdaptiveDrafting:
    """The rule "draft ``K`` tokens (fewer at the horizon), then verify" — SD with lookahead ``K`` — as a drafting
    rule."""
    K = as_positive_int(K, "K")
    return AdaptiveDrafting(SD_VERIFIER, None, lambda prod, count, t, T, K: (count >= K) | (t + 1 >= T), (K,), K)


def _round_values(tables, future, n: int, T: int, K: int, t_draft: float, t_target: float, decide) -> np.ndarray:
    """Expected values ``(V, F)`` of a round starting at ``n``, per start context: :data:`_FIELDS`, then (when
    ``F = 6 + T``) the probability of a rejection at each position.

    ``tables(m)`` gives ``(p, q, b, residual, score)`` rows ``(V, V)`` at position ``m``;
    ``future`` ``(T + 1, V, F)`` the values of later round starts; ``decide(k, t, prod, stop, go)``
    returns where to stop among the nodes of depth ``k`` (``stop``, ``go``: their values ``(…, F)``
    when stopping and when drafting on; ``t`` the position of the last draft).
    """
    V, F = future.shape[1:]
    per_position = F > len(_FIELDS)
    base = np.zeros(F)
    y = np.arange(V)[:, None]  # (V contexts, 1 path): the last token
    reach, prod, acc = np.ones((V, 1)), np.ones((V, 1)), np.zeros((V, 1))
    carried = np.zeros((V, 1, F))  # Σ_{i≤k} reach_{i−1} (1 − b(y_i)) E F_{n+i} so far
    levels = []
    for k in range(K + 1):
        m = n + k  # where the next draft (or the bonus) would be
        p, q, b, res, score = tables(min(m, T - 1))
        base[:] = 0.0
        base[: len(_FIELDS)] = (t_target + k * t_draft, 1.0, k, 0.0, 0.0, 0.0)
        if per_position and k == 0:
            base[len(_FIELDS) + n] = 1.0  # the target's own sample at n
        stop = carried + base
        stop[..., 3] += acc
        stop[..., 4] += (1.0 - reach) + (k == 0)  # a correction, or the target's own sample at k = 0
        if m < T:
            stop += reach[..., None] * (q @ future[m + 1])[y]  # the bonus (or the k = 0 sample) and after
            if k:
                stop[..., 5] += reach
        if k == K:
            levels.append((stop, None, prod))
            break
        pz, bz = p[y], b[y]  # (V, V^k, V): the next draft z and its acceptance
        levels.append((stop, pz, prod))
        rejected = (res @ future[m + 1])[y]  # (V, V^k, F): a correction at m, then a round at m + 1
        if per_position:
            rejected[..., len(_FIELDS) + m] += 1.0  # (the total's share is (1 − reach) at the stop)
        carried = carried[:, :, None, :] + (reach[..., None] * (1.0 - bz))[..., None] * rejected[:, :, None, :]
        carried = carried.reshape(V, -1, F)
        prod = (prod[..., None] * score[y]).reshape(V, -1)
        reach = (reach[..., None] * bz).reshape(V, -1)
        acc = acc.repeat(V, axis=1) + reach
        y = np.broadcast_to(np.arange(V), (*y.shape, V)).reshape(V, -1)
    value = levels[-1][0]
    for k in range(K - 1, -1, -1):
        stop, pz, prod = levels[k]
        go = np.einsum("apz,apzf->apf", pz, value.reshape(V, pz.shape[1], V, F))
        value = np.where(decide(k, n + k - 1, prod, stop, go)[..., None], stop, go)
    return value[:, 0, :]


def tree_fits(V: int, T: int, max_K: int, per_position: bool = False) -> bool:
    """Whether the draft trees of an instance (``V`` tokens, horizon ``T``, at most ``max_K`` drafts per round)
    fit :data:`NODE_BUDGET`: ``V · V^min(max_K, T)`` leaves of 6 values (``6 + T`` with ``per_position``)."""
    return _tree_values(V, T, max_K, per_position) <= limit(NODE_BUDGET * len(_FIELDS))


def _tree_values(V: int, T: int, max_K: int, per_position: bool) -> float:
    """The values the recursion holds: ``V · V^min(max_K, T)`` leaves of 6 values (``6 + T`` with ``per_position``)."""
    V = int(V)  # an exact integer: no overflow, in floats or numpy's fixed widths
    return V * power(V, min(max_K, T)) * (len(_FIELDS) + (T if per_position else 0))


def _solve(
    inst: MarkovInstance, rule: AdaptiveDrafting | None, t_draft, t_target, max_K: int, per_position: bool = False
) -> StoppingCounts:
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"inst must be a MarkovInstance; got {type(inst).__name__}")
    t_draft, t_target = _check_times(t_draft, t_target)
    max_K = as_positive_int(max_K, "max_K")
    T, V = inst.T, inst.V
    if not tree_fits(V, T, max_K, per_position):
        raise refuse(
            f"the exact recursion over the draft tree ({V} × {V}^{min(max_K, T)} leaves per round start)",
            _tree_values(V, T, max_K, per_position),
            NODE_BUDGET * len(_FIELDS),
            "values",
            "NODE_BUDGET leaves of 6 values",
            "use a smaller vocabulary, max_K or horizon",
        )
    P, Q = compact(inst.P), compact(inst.Q)
    verifier = SD_VERIFIER if rule is None else rule.verifier
    score = None if rule is None or rule.score is None else compact(np.asarray(rule.score))

    @lru_cache(maxsize=None)  # a position is read by the rounds of up to `max_K` start positions
    def tables(m):
        p, q = (np.broadcast_to(at_position(A, m), (V, V)) for A in (P, Q))  # one row per context
        b, res = verifier.rule(p, q)
        s = np.ones((V, V)) if score is None else np.broadcast_to(at_position(score, m), (V, V))
        return p, q, b, res, s

    if rule is None:

        def decide(k, t, prod, stop, go):  # Bellman: the cheaper in expected time (ties: verify)
            return stop[..., 0] <= go[..., 0]
    else:

        def decide(k, t, prod, stop, go):  # the rule stops after a draft, never before the first
            return np.broadcast_to(k > 0, prod.shape) & np.asarray(rule.stops(prod, k, t, T, *rule.params), dtype=bool)

    future = np.zeros((T + 1, V, len(_FIELDS) + (T if per_position else 0)))
    for n in progress_bar(range(T - 1, -1, -1), "draft-tree recursion", "position"):
        future[n] = _round_values(tables, future, n, T, min(max_K, T - n), t_draft, t_target, decide)
    total = inst.rho @ future[0]
    return StoppingCounts(
        *(scalar(x) for x in total[: len(_FIELDS)]),
        T=T,
        t_draft=t_draft,
        t_target=t_target,
        rejections_per_position=total[len(_FIELDS) :] if per_position else None,
    )


@takes_instance
def stopping_counts(
    inst: MarkovInstance,
    rule: AdaptiveDrafting,
    t_draft: float = 0.0,
    t_target: float = 1.0,
    *,
    per_position: bool = False,
) -> StoppingCounts:
    """Exact expected counts and time of a drafting rule on a small Markov instance (module docstring).

    Args:
      inst: the Markov instance (``V · V^min(max_K, T)`` within :data:`NODE_BUDGET`).
      rule: an :class:`~speculab.methods.base.AdaptiveDrafting` — e.g.
        ``SpecDecPP(h).adaptive_drafting(inst)`` (any head) or :func:`fixed_lookahead` — whose
        verifier is a method of [Yin] Algorithm 2 (its ``rule(p, q)`` verifies each draft).
      t_draft: time of one draft forward pass (``>= 0``).
      t_target: time of one target forward pass (``> 0``).
      per_position: also the probability of a rejection at each position
        (``rejections_per_position``; ``T`` more values per node of the tree).

    Example:
      >>> from speculab.theory import MarkovInstance, lookahead_counts
      >>> inst = MarkovInstance.random(6, 3, 0)
      >>> exact = stopping_counts(inst, fixed_lookahead(2))
      >>> bool(np.isclose(exact.oracle_calls, lookahead_counts(inst, 2).oracle_calls))
      True
    """
    if not isinstance(rule, AdaptiveDrafting):
        raise ValueError(
            f"rule must be an AdaptiveDrafting (e.g. SpecDecPP(h).adaptive_drafting(inst) or "
            f"fixed_lookahead(K)); got {type(rule).__name__}"
        )
    if not hasattr(rule.verifier, "rule"):
        raise ValueError(
            f"the rule's verifier must be a method of [Yin] Algorithm 2 (with rule(p, q)); got {rule.verifier!r}"
        )
    shape = None if rule.score is None else np.shape(rule.score)
    if shape not in (None, (inst.T, inst.V, inst.V)):  # another T would be answered silently, cut or padded
        raise ValueError(
            f"rule was built for another instance: its score has shape {shape}, this instance's is "
            f"(T, V, V) = {(inst.T, inst.V, inst.V)} (build it with adaptive_drafting(inst) on this one)"
        )
    return _solve(inst, rule, t_draft, t_target, rule.max_K, per_position)


@takes_instance
def optimal_stopping(inst: MarkovInstance, t_draft: float, t_target: float, max_K: int) -> StoppingCounts:
    r"""The fewest expected time any stopping rule of at most ``max_K`` drafts per round reaches, and its counts.

    Bellman's recursion over each round's draft tree (module docstring), SD verification:
    at every node the rule verifies if that is at least as cheap in expected time as
    drafting one more. No rule that decides from the drafts (SpecDec++'s threshold with
    any head, a fixed ``K ≤ max_K``) has a smaller expected time on ``inst``; the measured
    ``Δ`` of [SDpp] Thm 4.3 is the gap to the best threshold.

    Args:
      inst: a small Markov instance (``V · V^min(max_K, T)`` within :data:`NODE_BUDGET`).
      t_draft: time of one draft forward pass (``>= 0``).
      t_target: time of one target forward pass (``> 0``).
      max_K: the most drafts a round may make.
    """
    return _solve(inst, None, t_draft, t_target, max_K)
