r"""Multi-draft speculative decoding whose root accepts as often as any verifier can (SPEC O).

Convention: ``p`` = draft, ``q`` = target. A round drafts ``M`` independent
continuations, as [Yin] Algorithm 4 does. Its root sees the set ``D`` of the ``M``
first tokens and is verified by the coupling of
:func:`~speculab.theory.optimal_coupling`: it accepts ``y ∈ D`` with probability
``κ(D, y)/P(D)`` and follows the first row that drafted ``y``; otherwise it outputs a
token from ``(q − a)/(1 − α)``. So the root accepts with probability

.. math:: \alpha^*(p, q, M) = 1 - \max_H \big[p(H)^M - q(H)\big],

the most any verifier of ``M`` i.i.d. drafts reaches (Algorithm 4: ``1 − Π_m r_m``,
never more). The rest of the round is speculative decoding along the followed row
(its later drafts are fresh draws from ``p`` whichever row drafted ``y``), with a bonus
token after ``K`` accepted drafts as in :class:`~speculab.methods.SD`. Unbiased
whatever the coupling: a root outputs ``q`` (``a + (q − a)``).

The largest acceptance is not the fewest rejections in general. The linear program
returns *some* accepted law ``a`` of total ``α*``; which tokens it favours changes the
rounds that follow, and the law minimising the expected rejections depends on the whole
instance (:func:`~speculab.theory.optimal_batch_rejections` finds it by dynamic
programming). So this method's expected rejections are at least that minimum
(``tests/test_optimal.py``); on the [Yin] Fig. 2(a) instance they are within 0.004 of it
and 0.67 to 1.11 below Algorithm 4's for ``M = 2..16`` (``speculab repro batch-optimality``),
but nothing proves an ``α*``-coupling never does worse than Algorithm 4 — [Yin] §5 and
SPEC O are silent on which ``α*``-coupling to use.

Costs and scope: one linear program over the ``2^V`` draft sets per distinct root pair
``(p, q)`` (cached), so vocabularies up to :data:`~speculab.theory.optimal.MAX_SET_V`
tokens — Markov instances, not real language models. Engines draw the root from its
marginal table (:meth:`OptimalMultiDraft.root_outcome`); the round law runs the verifier
literally (the coupling's verdict on the set ``D`` of the ``M`` drafted tokens).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from collections import OrderedDict
from typing import ClassVar

import numpy as np
from array_api_compat import array_namespace, device

from speculab._budget import budgeted
from speculab.counts import Expected
from speculab.methods.base import RoundLaw, register
from speculab.methods.batch import MultiDraft, Root, rooted_round_law
from speculab.methods.sd import SD
from speculab.theory.optimal import MAX_SET_DRAFTS, SetCoupling, optimal_coupling
from speculab.theory._checks import takes_instance

__all__ = ["OptimalMultiDraft"]


#: Bytes of couplings kept for reuse (a coupling holds ``P(D = S)`` and acceptance rows over the draft sets:
#: about 1 MB at ``V = 14``), least recently used dropped first.
CACHE_BYTES = 256 << 20

#: Linear-program variables (``Σ_S |S|`` over a pair's draft sets with ``P(D = S) > 0``) that one call may solve,
#: summed over the pairs of rows not solved before (:mod:`speculab._budget`): 42 pairs at ``V = 14, M = 8``
#: (81,368 variables each) fit, about a second each with HiGHS's interior-point method on one core.
LP_BUDGET = 4_000_000


class _Couplings:
    """The couplings computed so far, least recently used first, with the bytes they hold kept as a running sum."""

    def __init__(self):
        self.items: OrderedDict = OrderedDict()
        self.held = 0

    @staticmethod
    def size(c: SetCoupling) -> int:
        return c.accept.nbytes + c.sets.nbytes + c.set_prob.nbytes

    @staticmethod
    def key(p: np.ndarray, q: np.ndarray, M: int) -> tuple:
        as_bytes = lambda a: np.ascontiguousarray(a, dtype=np.float64).tobytes()  # noqa: E731
        return as_bytes(p), as_bytes(q), M

    def get(self, p: np.ndarray, q: np.ndarray, M: int) -> SetCoupling:
        key = self.key(p, q, M)
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        coupling = self.items[key] = optimal_coupling(p, q, M)
        self.held += self.size(coupling)
        while self.held > CACHE_BYTES and len(self.items) > 1:
            self.held -= self.size(self.items.popitem(last=False)[1])
        return coupling


_cache = _Couplings()


def _coupling(p: np.ndarray, q: np.ndarray, M: int) -> SetCoupling:
    """The optimal coupling of ``M`` drafts from ``p`` with ``q`` (one linear program per distinct pair, cached)."""
    return _cache.get(p, q, M)


def _lookup(laws: dict, M: int, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The accepted laws ``(..., V)`` of the rows of ``p, q`` from ``laws`` (:meth:`OptimalMultiDraft._solve`)."""
    p, q = np.broadcast_arrays(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64))
    out = np.empty(p.shape)
    for i in np.ndindex(p.shape[:-1]):
        out[i] = laws[_cache.key(p[i], q[i], M)]
    return out


def lp_variables(p: np.ndarray, M: int) -> int:
    """The variables of the coupling's linear program for ``M`` i.i.d. drafts from ``p``: one per token of each draft
    set of positive probability, the non-empty subsets of ``supp p`` of at most ``M`` tokens: ``Σ_j j C(s, j)``."""
    s = int(np.count_nonzero(np.asarray(p) > 0))
    return sum(j * math.comb(s, j) for j in range(1, min(M, s) + 1))


def _host(a) -> np.ndarray:
    """``a`` as a numpy array (torch on any device, concrete JAX arrays); traced arrays are refused."""
    try:
        return np.asarray(a.cpu()) if hasattr(a, "cpu") and not isinstance(a, np.ndarray) else np.asarray(a)
    except Exception as err:  # a JAX tracer: the linear program needs values
        raise ValueError(
            "OptimalMultiDraft's root is a linear program on concrete laws; inside a traced function "
            "give engines its root_outcome tables (the JAX engine does for instances within "
            "TABLE_BUDGET) or use engine='numpy'"
        ) from err


@register
@dataclass(frozen=True)
class OptimalMultiDraft(MultiDraft):
    """Batch speculative decoding whose root verifier attains the largest acceptance ``α*`` (module docstring).

    Args:
      M: number of drafts (>= 1; ``M = 1`` is speculative decoding, whose acceptance ``1 − TV`` is ``α*`` there).
      K: draft length per round (``None`` = to the end); an all-accepted round earns a bonus token.

    Example:
      >>> from speculab.theory import MarkovInstance, optimal_acceptance
      >>> inst = MarkovInstance.context_free([0.6, 0.3, 0.1], [0.2, 0.3, 0.5], T=4)
      >>> law = OptimalMultiDraft(2).root_outcome(inst.P[0, 0], inst.Q[0, 0])
      >>> bool(np.isclose(law[:3].sum(), optimal_acceptance([0.6, 0.3, 0.1], [0.2, 0.3, 0.5], 2)))
      True
    """

    name: ClassVar[str] = "optimal-batch"

    def __post_init__(self):
        super().__post_init__()
        if self.M > MAX_SET_DRAFTS:
            raise ValueError(
                f"M must be at most MAX_SET_DRAFTS = {MAX_SET_DRAFTS} (the law of the draft set is built "
                f"draft by draft); got {self.M}"
            )

    #: Not on real models: the root's linear program has ``2^V`` draft sets (``V ≤ MAX_SET_V``), far below any real
    #: vocabulary.
    real_models: ClassVar[bool] = False

    def accepted_law(self, p, q) -> np.ndarray:
        """The root's accepted law ``a(y) = P(Y = y, accepted)`` ``(..., V)``, total ``α*``, per pair of rows (numpy).

        The pairs not solved before are estimated first (:func:`lp_variables`, against :data:`LP_BUDGET` scaled by
        :func:`speculab.work_budget`: refused past it with the estimate) and solved under a progress bar."""
        p, q = np.broadcast_arrays(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64))
        return _lookup(self._solve(p, q), self.M, p, q)

    def _solve(self, p: np.ndarray, q: np.ndarray) -> dict:
        """``{pair key: accepted law}`` for the rows of ``p, q``, solving the new pairs within the budget."""
        keys = {i: _cache.key(p[i], q[i], self.M) for i in np.ndindex(p.shape[:-1])}
        new = {k: i for i, k in keys.items() if k not in _cache.items}  # a row of each pair not solved before
        laws = {k: _cache.items[k].accepted_law for k in set(keys.values()) - set(new)}
        for k, i in budgeted(
            list(new.items()),
            [lp_variables(p[i], self.M) for i in new.values()],
            base=LP_BUDGET,
            what=f"{self!r}'s root couplings ({len(new)} linear programs)",
            unit="linear-program variables",
            name="LP_BUDGET",
            advice="use fewer drafts M or a smaller vocabulary V",
            desc="optimal couplings",
        ):
            laws[k] = _coupling(p[i], q[i], self.M).accepted_law
        return laws

    def root_outcome(self, p, q):
        """``(..., 2V)``: the coupling's accepted law ``a``, then ``q − a`` (output by a refusal)."""
        xp = array_namespace(p, q)
        a = xp.asarray(self.accepted_law(_host(p), _host(q)), dtype=q.dtype, device=device(q))
        return xp.concat([a, q - a], axis=-1)

    # -- engines ---------------------------------------------------------------------------------------------------
    @takes_instance
    def expected(self, inst) -> Expected:
        """Exact counts for any ``K``: the lookahead chain with this root's accepted law (SPEC L with root kernels
        ``a`` and ``q − a``)."""
        from speculab.theory.lookahead import lookahead_counts

        root = None
        if self.M > 1:  # every pair's linear program first, within the budget; the recursion then reads them
            root = functools.partial(_lookup, self._solve(*np.broadcast_arrays(inst.P, inst.Q)), self.M)
        counts = lookahead_counts(inst, self.K, M=self.M, root=root)
        return Expected.from_counts(counts, source="exact lookahead counts with the optimal-coupling root (SPEC O, L)")

    def round_law(self, p, q, x, *, bonus: bool) -> RoundLaw:
        """The coupling's verdict on the set of the rows' first tokens, then SD along the followed row."""
        if x.shape[-2] == 1:
            return SD(K=self.K).round_law(p, q, x, bonus=bonus)
        xp = array_namespace(p, q)
        p0, q0, x0 = _host(p[..., 0, 0, :]), _host(q[..., 0, 0, :]), _host(x[..., :, 0])
        lead, M = x0.shape[:-1], x0.shape[-1]
        follow, accept = np.zeros(x0.shape), np.zeros(x0.shape)
        refused, reject, weights = np.zeros(lead), np.zeros(lead), np.zeros(p0.shape)
        for i in np.ndindex(lead):
            coupling = _coupling(p0[i], q0[i], M)
            row = coupling.accept_given(x0[i][None, :])[0]  # (V,): accept y given the draft set
            tokens = x0[i]
            first = np.array([tokens[m] not in tokens[:m] for m in range(M)])  # the first row with each token
            accept[i] = row[tokens]
            follow[i] = np.where(first, accept[i], 0.0)
            refused[i] = 1.0 - row.sum()
            reject[i] = np.sum(q0[i] - coupling.accepted_law)  # 1 − α*, as a sum of terms >= 0 (a <= q): never < 0
            weights[i] = coupling.residual
        back = lambda a: xp.asarray(a, dtype=p.dtype, device=device(p))  # noqa: E731
        root = Root(
            follow=back(follow),
            refused=back(refused),
            weights=back(weights),
            reject_prob=back(reject),
            accept_prob=back(accept),
        )
        return rooted_round_law(root, p, q, x, K=self.K, bonus=bonus)
