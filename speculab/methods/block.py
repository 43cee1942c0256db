r"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, ICLR 2025; SPEC "BV").

The paper writes the block size ``γ``; here it is ``K``, the name of every lookahead in speculab.

Token verification (SD) decides each drafted token on its own; block verification
decides the whole block jointly and accepts at least as many tokens in expectation,
with the same output law (the target's). Not on every block: SPEC BV's "never below
SD with the same block" holds averaged over the blocks drafted from a context, and a
single block can do worse (``tests/test_block.py::test_not_per_block``: SD accepts
``1 + 1/21`` drafts of the block ``(0, 0, 1)`` in expectation, block verification 1). One round, drafts ``x_1..x_K ~
p`` with
conditionals ``p_i``, target conditionals ``q_i`` (``i ≤ K + 1``):

.. math::
    w_0 = 1,\quad w_i = \min\Big(1, w_{i-1} \frac{q_i(x_i)}{p_i(x_i)}\Big),\qquad
    r_i = \sum_x \big(w_i\, q_{i+1}(x) - p_{i+1}(x)\big)_+,\qquad
    h_i = \frac{r_i}{r_i + 1 - w_i}\ (i < K),\quad h_K = w_K,

(``h_i = 0`` where the denominator is 0). With independent ``η_i ~ U(0, 1)``, ``τ`` is
the largest ``i`` with ``η_i ≤ h_i`` (``0`` if none; SPEC BV — ``<`` or ``≤`` differ with probability 0); the round
outputs ``x_{1:τ}``, then
a correction from ``(w_τ q_{τ+1} − p_{τ+1})_+`` normalised (``τ < K``) or a bonus from
``q_{K+1}`` (``τ = K``, if a next position exists). ``K = 1`` is SD.

**The law used everywhere here** (derived below, checked against the literal
algorithm by enumeration in ``tests/test_block.py``): for every prefix of the block,

.. math:: P(\tau \ge i,\ \tilde x_{1:i} = x_{1:i}) = p(x_{1:i})\, w_i(x_{1:i}).

By induction from the end: ``P(τ ≥ K | x_{1:K}) = h_K = w_K``; if ``P(τ ≥ i+1 | x_{1:i+1}) =
w_{i+1}``, then, ``η_i`` being independent of the later drafts,
``P(τ ≥ i | x_{1:i}) = 1 − (1 − h_i)(1 − E_{x_{i+1} ~ p_{i+1}}[w_{i+1}])`` and
``E[w_{i+1}] = Σ_x min(p_{i+1}, w_i q_{i+1}) = w_i − r_i``, which gives ``w_i``. Hence

* ``P(τ = i, x_{1:i}, y) = p(x_{1:i}) (w_i q_{i+1}(y) − p_{i+1}(y))_+`` — summing the block out,
  the output is the target's law (``p(x_{1:i}) w_i`` is the largest mass the prefix can carry);
* the paired rejection probability at slot ``i`` given the accepted prefix is ``r_i / w_i``
  (``TV(p_1, q_1)`` at ``i = 0``), and a draft at slot ``i`` is accepted, given it and the
  prefix, with probability ``w_{i+1} / (1 − (1 − h_i)(1 − w_{i+1}))`` (``w_1 = min(1, q/p)`` at ``i = 0``);
* on a Markov instance, the exact counts over ``T`` tokens follow by propagating the
  distribution of round starts with these kernels (:func:`block_counts`). The weights
  ``w_i`` depend on the whole prefix, so the prefixes of a block are enumerated:
  ``O(T V^{K+2})`` time (no polynomial method is used here).

The paper's binary example (SPEC BV): ``q = (1/3, 2/3)``, ``p = (2/3, 1/3)``, ``K = 2``: SD
accepts ``10/9`` tokens per round, block verification ``11/9`` (:func:`block_accepted`).
Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from array_api_compat import array_namespace, device

from speculab import kernels
from speculab._budget import limit, power, progress_bar, refuse
from speculab._validate import as_positive_int
from speculab.counts import Estimate, Expected
from speculab.methods.base import Method, RoundLaw, param, register
from speculab.methods.probe import RoundProbe
from speculab.methods.sd import SD
from speculab.rows import Row
from speculab.theory._checks import takes_instance

__all__ = ["BlockVerification", "block_round_law", "block_kernel", "block_counts", "block_accepted", "MAX_PATHS"]

#: Largest number of block prefixes ``V^(K+1)`` (times ``V``) that :func:`block_kernel` enumerates.
MAX_PATHS = 1 << 24


# -- the rule (array API) ----------------------------------------------------------------------------
def next_weight(w, q, p):
    r"""The block weight recursion :math:`w_i = \min(1, w_{i-1}\, q_i(x_i) / p_i(x_i))` (array API, elementwise).

    Divided only where the result is below 1, so a tiny ``p`` cannot overflow it.
    """
    xp = array_namespace(w, q, p)
    wq = w * q
    full = wq >= p
    return xp.where(full, 1.0, wq / xp.where(full, 1.0, p))


def block_round_law(p, q, x, *, bonus: bool) -> RoundLaw:
    """The law of a block-verification round given its block (module docstring), any array library.

    Args:
      p: ``(..., 1, L, V)`` draft laws at the drafted slots; ``q``: ``(..., 1, L + 1, V)`` target laws;
      x: ``(..., 1, L)`` the block; bonus: whether a position follows it.
    """
    L = p.shape[-2]
    if L == 0:  # nothing drafted (a draft that proposed nothing): nothing to verify, SD's empty round (one token)
        return SD().round_law(p, q, x, bonus=bonus)
    xp = array_namespace(p, q)
    ones = xp.ones((*p.shape[:-2], 1), dtype=p.dtype, device=device(p))  # (..., 1, 1)
    px, qx = kernels.gather(p, x), kernels.gather(q[..., :L, :], x)  # (..., 1, L) each
    w, ws = ones[..., 0], []
    for i in range(L):
        w = next_weight(w, qx[..., i], px[..., i])
        ws.append(w)
    W = xp.concat([ones] + [v[..., None] for v in ws], axis=-1)  # (..., 1, L+1): w_0..w_L
    excess = kernels.excess(W[..., :L, None] * q[..., :L, :], p)  # (..., 1, L, V): (w_i q_{i+1} − p_{i+1})_+
    r = xp.sum(excess, axis=-1)  # (..., 1, L): r_0..r_{L−1}
    den = (1.0 - W[..., 1:L]) + r[..., 1:]  # 1 − w first: exact near w = 1, so h_i <= 1 in floats too
    h = xp.concat([xp.where(den > 0, r[..., 1:] / xp.where(den > 0, den, 1.0), 0.0), W[..., L:]], axis=-1)  # h_1..h_L
    # P(τ = i) = h_i Π_{j>i} (1 − h_j), with h_0 = 1: suffix products of (1 − h)
    suffix = xp.flip(xp.cumulative_prod(xp.flip(1.0 - h, axis=-1), axis=-1), axis=-1)  # Π_{j ≥ k+1} (1 − h_j)
    outcome = xp.concat([ones, h], axis=-1) * xp.concat([suffix, ones], axis=-1)  # (..., 1, L+1)
    last = q[..., L:, :] if bonus else xp.zeros_like(q[..., L:, :])
    correction = xp.concat([xp.where(r[..., None] > 0, excess, q[..., :L, :]), last], axis=-2)
    reach = W[..., :L] > 0
    reject = xp.where(reach, r / xp.where(reach, W[..., :L], 1.0), 1.0)  # r_i / w_i; 1 where unreachable
    h_prev = xp.concat([ones, h[..., : L - 1]], axis=-1)  # h_0 = 1, h_1..h_{L−1}
    acc_den = h_prev + W[..., 1:] * (1.0 - h_prev)  # = 1 − (1 − h_i)(1 − w_{i+1}), without cancellation
    accept = xp.where(acc_den > 0, W[..., 1:] / xp.where(acc_den > 0, acc_den, 1.0), 0.0)
    return RoundLaw(
        outcome=outcome,
        correction=correction,
        reject_prob=xp.concat([reject, xp.zeros_like(ones)], axis=-1),
        accept_prob=accept,
    )


# -- exact theory on Markov instances ----------------------------------------------------------------------
def block_kernel(inst, s: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact law of one round that starts at position index ``s`` (0-based), for every last token ``a``.

    Args:
      inst: the Markov instance; s: position index of the round's first draft; K: block size.

    Returns:
      ``(J, accepted)``: ``J[a, i, y] = P(τ = i, next token y | a)`` of shape ``(V, L + 1, V)``
      with ``L = min(K, T − s)`` — a correction for ``i < L``, the bonus for ``i = L`` (all
      zeros when ``s + L = T``: nothing follows); ``accepted[a] = E[τ | a]``.
    """
    T, V = inst.T, inst.V
    L = min(K, T - s)
    if power(V, L + 2) > limit(MAX_PATHS):
        raise refuse(
            f"exact block counts (V^(K+2) = {V}^{L + 2} block prefixes)",
            power(V, L + 2),
            MAX_PATHS,
            "prefixes",
            "MAX_PATHS",
            "use a smaller block size or vocabulary (the simulator has no such limit)",
        )
    J = np.zeros((V, L + 1, V))
    accepted = np.zeros(V)
    start = np.arange(V)
    mass = np.ones(V)  # p(x_{1:i}) per prefix
    w = np.ones(V)  # w_i per prefix
    last = start.copy()  # x_i (x_0 = a) per prefix
    origin = start.copy()  # the start token a of each prefix
    for i in range(L):
        p_next, q_next = inst.P[s + i, last], inst.Q[s + i, last]  # (n, V)
        np.add.at(J[:, i], origin, mass[:, None] * kernels.excess(w[:, None] * q_next, p_next))
        # extend every prefix by one token: (n, V) -> n·V prefixes
        m2 = mass[:, None] * p_next
        w2 = next_weight(w[:, None], q_next, p_next)
        keep = m2 > 0
        mass, w = m2[keep], w2[keep]
        last = np.broadcast_to(np.arange(V), m2.shape)[keep]
        origin = np.broadcast_to(origin[:, None], m2.shape)[keep]
        np.add.at(accepted, origin, mass * w)  # P(τ ≥ i+1) = Σ p(x_{1:i+1}) w_{i+1}
    if s + L < T:  # all L accepted: the bonus from q at the next position
        np.add.at(J[:, L], origin, (mass * w)[:, None] * inst.Q[s + L, last])
    return J, accepted


def block_counts(inst, K: int):
    r"""Exact expected counts of block verification with block size ``K`` over the horizon.

    Propagates the distribution of round starts ``D_s(a)`` (position index ``s``, last token
    ``a``) with the round kernels of :func:`block_kernel`: a round at ``s`` drafts
    ``L = min(K, T − s)`` tokens, accepts ``τ``, and the next round starts at ``s + τ + 1``
    with the correction (or bonus) as last token. Counting as for SD (:mod:`speculab.theory.lookahead`).

    Returns:
      :class:`~speculab.theory.LookaheadCounts` with ``K = K`` (same fields and cost model as SD's).

    Example:
      >>> from speculab.theory import MarkovInstance, lookahead_counts
      >>> inst = MarkovInstance.context_free([2 / 3, 1 / 3], [1 / 3, 2 / 3], T=40)
      >>> bv, sd = block_counts(inst, 2), lookahead_counts(inst, 2)
      >>> bv.oracle_calls < sd.oracle_calls   # fewer target calls for the same tokens
      True
    """
    from speculab.theory.lookahead import LookaheadCounts

    K = as_positive_int(K, "K")
    T, V = inst.T, inst.V
    D = np.zeros((T + 1, V))
    D[0] = inst.rho
    rej, bonus, acc, start = (np.zeros(T) for _ in range(4))
    for s in progress_bar(range(T), "exact block counts", "position"):
        if not D[s].any():
            continue
        L = min(K, T - s)
        J, _ = block_kernel(inst, s, K)
        tau = np.einsum("a,aiy->i", D[s], J)  # (L + 1,): P(round at s accepts exactly i), i < L (and bonus at L)
        start[s] = D[s].sum()
        rej[s : s + L] += tau[:L]
        stay = start[s] - np.cumsum(tau[:L])  # P(round at s accepted more than j drafts), j < L
        acc[s : s + L] += stay
        for i in range(L):
            D[s + i + 1] += D[s] @ J[:, i]
        if s + L < T:
            bonus[s + L] += tau[L]
            D[s + L + 1] += D[s] @ J[:, L]
    return LookaheadCounts(
        K=K,
        rejections_per_position=rej,
        bonus_per_position=bonus,
        accepted_per_position=acc,
        oracle_calls_per_position=start,
    )


def block_accepted(p, q, K: int) -> float:
    r"""Expected accepted drafts of one block-verification round on a context-free pair ``(p, q)``.

    .. math:: E[\tau] = \sum_{i=1}^{K} \sum_{x_{1:i}} p(x_{1:i})\, w_i(x_{1:i})

    Example (SPEC BV; SD accepts ``α + α² = 10/9`` with ``α = 1 − TV = 2/3``):
      >>> round(block_accepted([2 / 3, 1 / 3], [1 / 3, 2 / 3], 2) * 9, 12)
      11.0
    """
    from speculab.theory import MarkovInstance

    K = as_positive_int(K, "K")
    inst = MarkovInstance.context_free(p, q, T=K + 1)
    return float(block_kernel(inst, 0, K)[1][0])


# -- the method ------------------------------------------------------------------------------------------------
class _GainProbe(RoundProbe):
    """Per round of a real-model run: ``E[τ | block]`` under block verification and under SD on the same block."""

    def __init__(self, K: int):
        super().__init__()
        self.sd = SD(K=K)

    def observe(self, info) -> list[float]:
        sd = self.sd.round_law(info.p[None], info.q[None], info.drafts[None], bonus=True)  # τ's law ignores the bonus
        return [float(info.law.expected_accepted()[0][0]), float(sd.expected_accepted()[0][0])]

    @property
    def block(self) -> list[float]:
        return [v[0] for v in self.values()]

    @property
    def token(self) -> list[float]:
        return [v[1] for v in self.values()]


@register
@dataclass(frozen=True)
class BlockVerification(Method):
    """Block verification (Sun et al., ICLR 2025): draft ``K`` tokens, accept a prefix decided jointly.

    Unbiased; in expectation never fewer accepted drafts than SD with the same draft
    model and block size (on a single block it can be fewer); ``K = 1`` is SD.

    Args:
      K: block size ``K`` (drafts per round, ``>= 1``).

    Example:
      >>> from speculab.theory import MarkovInstance
      >>> inst = MarkovInstance.context_free([2 / 3, 1 / 3], [1 / 3, 2 / 3], T=40)
      >>> BlockVerification(4).expected(inst).oracle_calls < SD(K=4).expected(inst).oracle_calls
      True
    """

    name: ClassVar[str] = "block"
    K: int = param(help="block size K: drafts per round", type=int)

    def __post_init__(self):
        as_positive_int(self.K, "K")

    @takes_instance
    def expected(self, inst) -> Expected:
        return Expected.from_counts(
            block_counts(inst, self.K), source="block verification (Sun et al. 2025): exact, blocks enumerated"
        )

    def draft_length(self, remaining: int) -> int:
        return min(self.K, remaining)

    def round_law(self, p, q, x, *, bonus: bool) -> RoundLaw:
        return block_round_law(p, q, x, bonus=bonus)

    def round_probe(self) -> _GainProbe:
        return _GainProbe(self.K)

    def compare_rows(self, ctx) -> list:
        """The gain over token verification: on the very same blocks (exact given each block), and against SD runs."""

        gain = np.asarray(ctx.probe.block) - np.asarray(ctx.probe.token)
        g = Estimate.of(gain)
        sd = ctx.decode(SD(K=self.K), slot=3)
        rate = lambda r: r.counts.oracle_calls / np.maximum(r.counts.tokens, 1)  # noqa: E731
        mine, theirs = Estimate.of(rate(ctx.result)), Estimate.of(rate(sd))
        return [
            Row(
                f"E[τ | block]: block − token verification, K={self.K} (same blocks)",
                float("nan"),
                g.mean,
                0.0,
                g.se,
                note=f"{gain.size} blocks; ≥ 0 on average (Sun et al.), not block by block",
            ),
            Row(
                f"target calls per token: SD(K={self.K}) − block (separate runs)",
                float("nan"),
                theirs.mean - mine.mean,
                0.0,
                math.hypot(theirs.se, mine.se),
                note="> 0: block verification calls less",
            ),
        ]
