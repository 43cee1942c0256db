"""The numpy simulation engine: every method run from its laws, position by position, vectorised across runs.

Like the JAX engine (:mod:`speculab.sim.jax_engine`) it reads the method protocol only; no method hands it code.
At each position every run gets its token, how it was made (accepted draft, correction, bonus, target sample) and
what it cost (target calls, drafted tokens), from one of four readings of the method:

* a :class:`~speculab.methods.capabilities.Slotwise` method (the chain family of [Yin] Algorithm 2) from its rule
  ``(b, P)`` on the instance: a draft is drawn when it is verified (lazy drafting: a round's drafts past its
  first rejection are never seen, so the joint law of outputs and counts is that of drafting the whole chain
  first), accepted with ``b``, else refused to ``P``; after the round's ``draft_length`` accepted drafts a bonus
  comes from ``q``. With several draft rows, the root is drawn from
  its :class:`~speculab.methods.capabilities.RootTable`, or from the round law of a one-slot round over the
  rows where the method has no such table;
* a method without rounds (SPRINTER) from its :class:`~speculab.methods.capabilities.PositionLaw`;
* a method that decides each round's length while drafting (SpecDec++) from its
  :class:`~speculab.methods.capabilities.AdaptiveLength`: its verifier's rule, its scores and its stopping rule; a
  round rejected before its rule stopped drafts on from the rejected draft (counted, never verified), drawn at once;
* every other method with a round law (block verification, autoregressive decoding) round by round, as
  :func:`speculab.backends.decode` does on real models: a round starting at ``t`` drafts ``draft_length(T − t)``
  tokens per row, draws its decision from :meth:`~speculab.methods.Method.round_law` and emits its tokens one
  position at a time (a round without drafts is one token from ``q``, drawn directly).

The loop around them (:func:`run`) owns the prompt token, chunking, the progress bar, the sequences and the
:class:`~speculab.counts.Counts`. Randomness comes only from the generator passed in; the chunk size depends only
on the method and the instance, so a seed gives the same runs with or without a progress bar or a checkpoint.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from speculab import kernels
from speculab.counts import BONUS, CORRECTION, DRAFT, TARGET, Counts, rejected
from speculab.methods.base import Method, sample_round
from speculab.methods.capabilities import RootTable, adaptive_verifier, has, reading, root_table
from speculab.methods.tree import draft_children as tree_drafts, sample_tree_round
from speculab.theory.instance import compact, cumulative, rowwise

__all__ = ["run", "walker", "chunk_runs", "Walk", "Position", "CHUNK", "CHUNK_BYTES"]

#: Most runs per vectorised chunk.
CHUNK = 1 << 15

#: Memory budget of a chunk's per-run arrays (a slot gathers each run's cumulative row of ``V`` floats; a round
#: its block's laws): 256 MiB, which :data:`CHUNK` runs reach at ``V = 1024`` one row at a time.
CHUNK_BYTES = 1 << 28


class Position(NamedTuple):
    """One position of every run of a chunk: each ``(n,)``, or a scalar the same for every run."""

    tokens: Any  # the token output
    kinds: Any  # how it was made: DRAFT, CORRECTION, BONUS or TARGET
    target_calls: Any  # target calls started here
    drafted: Any  # tokens drafted here


class Walk:
    """A method read one way (module docstring): per-run state, and one position of every run at a time."""

    #: Names of the method's own counts that grow by one at every position (SPRINTER's ``verifier_calls``).
    extra: tuple[str, ...] = ()
    #: Floats a run holds at once while a position is decided (sizes the chunks, :data:`CHUNK_BYTES`).
    floats_per_run: int = 1

    def start(self, n: int) -> Any:
        """Fresh state of ``n`` runs at position index 0."""
        return None

    def __call__(self, t: int, prev: np.ndarray, state, rng: np.random.Generator) -> Position:
        """Position index ``t`` of every run, whose previous tokens are ``prev`` ``(n,)``."""
        raise NotImplementedError


def _full(table: np.ndarray, inst) -> np.ndarray:
    """A table computed on the instance's compact kernels, as a read-only view indexed ``[t, a]`` at every position."""
    return np.broadcast_to(table, (inst.T, inst.V, table.shape[-1]))


def _compact_pair(inst) -> tuple[np.ndarray, np.ndarray]:
    """The instance's compact draft and target kernels, broadcast to one compact shape."""
    P, Q = compact(inst.P), compact(inst.Q)
    shape = np.broadcast_shapes(P.shape, Q.shape)
    return np.broadcast_to(P, shape), np.broadcast_to(Q, shape)


class _Verify:
    """A slotwise method's verdict on one drafted token: accepted with ``b``, else a correction from ``P``."""

    def __init__(self, method: Method, inst):
        b, R = method.instance_rule(inst)  # the rule on the instance's kernels (ChainMethod.instance_rule)
        name = type(method).__name__
        for what, a in (("acceptance b", b), ("rejection law P", R)):
            if np.shape(a) != inst.P.shape:
                raise ValueError(
                    f"{name}'s rule gave its {what} of shape {np.shape(a)}; the instance's laws are {inst.P.shape}"
                )
        if not np.all((compact(b) >= 0) & (compact(b) <= 1)):
            raise ValueError(f"{name}'s rule gave an acceptance b outside [0, 1] (or NaN)")
        if not np.all((compact(R) >= 0) & (compact(R) < np.inf)):
            raise ValueError(f"{name}'s rule gave a rejection law P with negative, infinite or NaN weights")
        self.b, self.cR = b, rowwise(cumulative, R)

    def __call__(self, t: int, a: np.ndarray, draft: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
        """Runs with previous tokens ``a`` verify ``draft``: ``(accepted, output tokens)``."""
        ok = rng.random(a.size) < self.b[t, a, draft]
        out = draft.copy()
        refused = np.flatnonzero(~ok)
        if refused.size:
            out[refused] = kernels.sample_cumulative(self.cR[t, a[refused]], rng.random(refused.size))
        return ok, out


class _Root:
    """A slotwise method's first slot over its ``M`` draft rows: ``(accepted, token)`` per run."""

    def __init__(self, method: Method, inst):
        self.method, self.inst, self.M = method, inst, method.rows
        self.cP = rowwise(cumulative, inst.P)
        self.cJ = None
        if has(method, RootTable):
            table = np.asarray(root_table(method, *_compact_pair(inst)), dtype=np.float64)
            self.cJ = _full(np.cumsum(table, axis=-1), inst)

    def __call__(self, t: int, a: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
        V = self.inst.V
        if self.cJ is not None:  # entry x < V: a draft equal to x accepted; V + y: every row refused, y output
            j = kernels.sample_cumulative(self.cJ[t, a], rng.random(a.size))
            return j < V, np.where(j < V, j, j - V)
        n, M = a.size, self.M
        p, q = self.inst.P[t, a], self.inst.Q[t, a]  # (n, V)
        drafts = kernels.sample_cumulative(np.broadcast_to(self.cP[t, a][:, None], (n, M, V)), rng.random((n, M)))
        law = self.method.round_law(
            np.broadcast_to(p[:, None, None], (n, M, 1, V)),
            np.broadcast_to(q[:, None, None], (n, M, 2, V)),
            drafts[..., None],
            bonus=False,
        )
        row, accepted, token = sample_round(law, rng.random(n), rng.random(n))
        ok = accepted == 1
        return ok, np.where(ok, drafts[np.arange(n), row], token)


class _Slots(Walk):
    """A slotwise method: the state is where each run's current round began."""

    def __init__(self, method: Method, inst):
        T = inst.T
        self.verify = _Verify(method, inst)
        self.cP, self.cQ = rowwise(cumulative, inst.P), rowwise(cumulative, inst.Q)
        self.root = _Root(method, inst) if method.rows > 1 else None
        self.length = np.array([method.draft_length(T - t) for t in range(T)])  # drafts per row of a round at t
        self.drafts_at = method.rows * self.length
        # a root by its round law holds M rows of laws, and about as much again inside the law
        self.floats_per_run = inst.V * (4 * method.rows if self.root is not None and self.root.cJ is None else 1)

    def start(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.int64)

    def __call__(self, t, prev, start, rng):
        x = np.empty(prev.size, dtype=np.int64)
        kinds = np.empty(prev.size, dtype=np.int8)
        new_round = start == t
        is_bonus = (t - start) == self.length[start]  # every draft of the round accepted
        b = np.flatnonzero(is_bonus)
        if b.size:
            x[b] = kernels.sample_cumulative(self.cQ[t, prev[b]], rng.random(b.size))
            kinds[b] = BONUS
        r = np.flatnonzero(~is_bonus)  # runs that verify a draft at t
        if self.root is not None:
            at_root = new_round[r]
            root, r = r[at_root], r[~at_root]
            ok, x[root] = self.root(t, prev[root], rng)
            kinds[root] = np.where(ok, DRAFT, CORRECTION)
        a = prev[r]
        ok, x[r] = self.verify(t, a, kernels.sample_cumulative(self.cP[t, a], rng.random(a.size)), rng)
        kinds[r] = np.where(ok, DRAFT, CORRECTION)
        start[is_bonus | (kinds == CORRECTION)] = t + 1  # a round ends at a rejection or a bonus token
        return Position(x, kinds, new_round, np.where(new_round, self.drafts_at[t], 0))


class _Positions(Walk):
    """A method without rounds: each draft is kept without a target call, kept after one, or corrected."""

    def __init__(self, method: Method, inst, law):
        free, called, correction, self.extra = law
        self.free, self.called = free, called
        self.cP, self.cC = rowwise(cumulative, inst.P), rowwise(cumulative, correction)
        self.floats_per_run = inst.V

    def __call__(self, t, prev, state, rng):
        n = prev.size
        x = kernels.sample_cumulative(self.cP[t, prev], rng.random(n))
        free, called = self.free[t, prev, x], self.called[t, prev, x]
        u = rng.random(n)
        call, corrected = u >= free, u >= free + called
        c = np.flatnonzero(corrected)
        if c.size:
            x[c] = kernels.sample_cumulative(self.cC[t, prev[c]], rng.random(c.size))
        return Position(x, np.where(corrected, CORRECTION, DRAFT).astype(np.int8), call, 1)


class _AdaptiveState:
    """Per-run state of an adaptively drafting method's runs."""

    def __init__(self, n: int):
        self.is_bonus = np.zeros(n, dtype=bool)  # position t is the bonus token of a fully accepted round
        self.new_round = np.ones(n, dtype=bool)  # position t starts a round (one target call)
        self.count = np.zeros(n, dtype=np.int64)  # drafts so far in the current round
        self.prod = np.ones(n)  # the product of the current round's scores


class _Adaptive(Walk):
    """A method that decides each round's length while drafting (:class:`~speculab.theory.AdaptiveDrafting`)."""

    def __init__(self, method: Method, inst):
        self.rule, self.T = method.adaptive_drafting(inst), inst.T
        self.verify = _Verify(adaptive_verifier(method, self.rule), inst)
        self.cP, self.cQ = rowwise(cumulative, inst.P), rowwise(cumulative, inst.Q)
        self.score = np.broadcast_to(self.rule.score, inst.P.shape)
        self.floats_per_run = inst.V

    def start(self, n: int) -> _AdaptiveState:
        return _AdaptiveState(n)

    def _stops(self, t: int, prod: np.ndarray, count: np.ndarray) -> np.ndarray:
        return self.rule.stops(prod, count, t, self.T, *self.rule.params)

    def _drafts_on(self, t: int, y: np.ndarray, prod: np.ndarray, count: np.ndarray, rng) -> np.ndarray:
        """Chains rejected at ``t`` before their rule stopped draft on from ``y`` until it stops: drafts each."""
        extra = np.zeros(y.size, dtype=np.int64)
        alive = np.arange(y.size)
        y, prod = y.copy(), prod.copy()
        for s in range(t + 1, self.T):
            z = kernels.sample_cumulative(self.cP[s, y[alive]], rng.random(alive.size))
            extra[alive] += 1
            prod[alive] *= self.score[s, y[alive], z]
            y[alive] = z
            alive = alive[~self._stops(s, prod[alive], count[alive] + extra[alive])]
            if alive.size == 0:
                break
        return extra

    def __call__(self, t, prev, st: _AdaptiveState, rng):
        n = prev.size
        x = np.empty(n, dtype=np.int64)
        kinds = np.empty(n, dtype=np.int8)
        drafts = np.zeros(n, dtype=np.int64)
        oracle = st.new_round.copy()
        b = np.flatnonzero(st.is_bonus)
        if b.size:
            x[b] = kernels.sample_cumulative(self.cQ[t, prev[b]], rng.random(b.size))
            kinds[b] = BONUS
        r = np.flatnonzero(~st.is_bonus)  # runs that draft and verify at t
        a = prev[r]
        y = kernels.sample_cumulative(self.cP[t, a], rng.random(a.size))
        drafts[r] += 1
        st.count[r] += 1
        st.prod[r] *= self.score[t, a, y]
        stop = self._stops(t, st.prod[r], st.count[r])
        ok, x[r] = self.verify(t, a, y, rng)
        kinds[r] = np.where(ok, DRAFT, CORRECTION)
        on = ~ok & ~stop  # rejected before the round stopped drafting: its later drafts are discarded
        if on.any():
            drafts[r[on]] += self._drafts_on(t, y[on], st.prod[r[on]], st.count[r[on]], rng)
        # A round ends at a rejection or a bonus token; one that stopped with all drafts accepted gets a bonus next.
        ended = st.is_bonus.copy()
        ended[r[~ok]] = True
        st.new_round = ended
        st.count[ended] = 0
        st.prod[ended] = 1.0
        st.is_bonus = np.zeros(n, dtype=bool)
        st.is_bonus[r[ok & stop]] = True
        return Position(x, kinds, oracle, drafts)


class _RoundState:
    """The round in progress of each run: its tokens and kinds, emitted in order."""

    def __init__(self, n: int, longest: int):
        self.tokens = np.zeros((n, longest + 1), dtype=np.int64)
        self.kinds = np.zeros((n, longest + 1), dtype=np.int8)
        self.pos = np.zeros(n, dtype=np.int64)  # next token to emit
        self.length = np.zeros(n, dtype=np.int64)  # tokens the round outputs


def _checked(method: Method, law, shape: tuple, V: int):
    """``method``'s round law of a batch of rounds, refused unless its outcome is a law of ``shape`` and its
    correction weights ``shape + (V,)`` finite and non-negative (a user's round law, read round by round)."""
    name = type(method).__name__
    if np.shape(law.outcome) != shape or np.shape(law.correction) != (*shape, V):
        raise ValueError(
            f"{name}.round_law gave an outcome of shape {np.shape(law.outcome)} and corrections of "
            f"{np.shape(law.correction)}; for these blocks they are {shape} and {(*shape, V)}"
        )
    sums = law.outcome.reshape(shape[0], -1).sum(axis=1)
    if not (law.outcome.min() >= 0 and np.abs(sums - 1.0).max() <= 1e-9):  # NaN fails both
        raise ValueError(
            f"{name}.round_law gave outcome probabilities that are not a law (negative, NaN, or not "
            f"summing to 1 over rows and accepted drafts)"
        )
    if not (law.correction.min() >= 0 and np.isfinite(law.correction.sum())):  # two passes, no temporaries
        raise ValueError(f"{name}.round_law gave correction weights that are negative, infinite or NaN")
    return law


class _Rounds(Walk):
    """Any other method with a round law: each round drafted whole, decided by its law, emitted position by position."""

    def __init__(self, method: Method, inst):
        self.method, self.inst, self.M = method, inst, method.rows
        self.cP, self.cQ = rowwise(cumulative, inst.P), rowwise(cumulative, inst.Q)
        self.length = [method.draft_length(inst.T - t) for t in range(inst.T)]
        self.longest = max(self.length)
        # a block's draft and target laws, and about as much again inside the round law
        self.floats_per_run = inst.V * (4 * self.M * (self.longest + 1) if self.longest else 1)

    def start(self, n: int) -> _RoundState:
        return _RoundState(n, self.longest)

    def _decide(self, t: int, L: int, a: np.ndarray, rng):
        """A round of ``L`` drafts per row from previous tokens ``a``: its tokens ``(n, L + 1)``, kinds, length."""
        inst, M, n = self.inst, self.M, a.size
        tokens = np.zeros((n, L + 1), dtype=np.int64)
        kinds = np.full((n, L + 1), DRAFT, dtype=np.int8)
        if L == 0:  # nothing to accept: one token from q (Method.round_law)
            tokens[:, 0] = kernels.sample_cumulative(self.cQ[t, a], rng.random(n))
            kinds[:, 0] = TARGET
            return tokens, kinds, np.ones(n, dtype=np.int64)
        last = np.broadcast_to(a[:, None], (n, M))
        x = np.empty((n, M, L), dtype=np.int64)
        p = np.empty((n, M, L, inst.V))
        q = np.empty((n, M, L + 1, inst.V))
        for i in range(L):  # M independent rows of the draft chain
            p[:, :, i], q[:, :, i] = inst.P[t + i, last], inst.Q[t + i, last]
            last = x[:, :, i] = kernels.sample_cumulative(self.cP[t + i, last], rng.random((n, M)))
        bonus = t + L < inst.T
        q[:, :, L] = inst.Q[t + L, last] if bonus else 1.0 / inst.V  # the next position's law; without a bonus unused
        law = _checked(self.method, self.method.round_law(p, q, x, bonus=bonus), (n, M, L + 1), inst.V)
        row, tau, token = sample_round(law, rng.random(n), rng.random(n))
        if np.any((token < 0) & ((tau < L) | bonus)):
            raise ValueError(
                f"{type(self.method).__name__}.round_law gave an outcome without a token to output: no "
                f"correction weights after a refusal, or no bonus law with a bonus"
            )
        tokens[:, :L] = x[np.arange(n), row]
        here = np.arange(n)
        tokens[here, tau] = np.maximum(token, 0)  # the correction or bonus after τ drafts
        kinds[here, tau] = np.where(tau < L, CORRECTION, BONUS)
        return tokens, kinds, tau + (token >= 0)

    def __call__(self, t, prev, st: _RoundState, rng):
        if self.longest == 0:  # a method that never drafts: every position is a round of one token from q
            x = kernels.sample_cumulative(self.cQ[t, prev], rng.random(prev.size))
            return Position(x, np.full(prev.size, TARGET, dtype=np.int8), 1, 0)
        new = st.pos == st.length  # the previous round is fully emitted: a round starts here
        runs = np.flatnonzero(new)
        L = self.length[t]
        if runs.size:
            tokens, kinds, length = self._decide(t, L, prev[runs], rng)
            st.tokens[runs, : L + 1], st.kinds[runs, : L + 1] = tokens, kinds
            st.length[runs], st.pos[runs] = length, 0
        here = np.arange(prev.size)
        x, kind = st.tokens[here, st.pos], st.kinds[here, st.pos]
        st.pos += 1
        return Position(x, kind, new, np.where(new, self.M * L, 0))


class _Trees(Walk):
    """A tree method (:class:`~speculab.methods.capabilities.TreeDrafting`): each round drafts its tree node by node
    (children of a node from its prefix's draft law, i.i.d. or distinct), is decided by the round law of the node
    layout, and is emitted position by position."""

    def __init__(self, method: Method, inst):
        self.method, self.inst = method, inst
        self.trees = [method.round_tree(inst.T - t) for t in range(inst.T)]
        self.longest = max(t.height for t in self.trees)
        # the tree's draft and target laws, and about as much again inside the round law
        self.floats_per_run = inst.V * 4 * (max(t.size for t in self.trees) + 1)

    def start(self, n: int) -> _RoundState:
        return _RoundState(n, self.longest)

    def _decide(self, t: int, a: np.ndarray, rng):
        """A round at ``t`` from previous tokens ``a``: its tokens ``(n, H + 1)``, kinds, length and drafted tokens."""
        inst, tree, n, V = self.inst, self.trees[t], a.size, self.inst.V
        N1, H = tree.size + 1, tree.height
        x = np.full((n, N1), -1, dtype=np.int64)
        x[:, 0] = a
        p, q = np.empty((n, N1, V)), np.empty((n, N1, V))
        for u in range(N1):  # parents come before their children: x[:, u] is drafted by now
            s, tok = t + tree.depth[u], np.maximum(x[:, u], 0)
            p[:, u] = inst.P[min(s, inst.T - 1), tok]  # past the horizon: unused (a leaf drafts nothing)
            q[:, u] = inst.Q[s, tok] if s < inst.T else 1.0 / V  # past the horizon: unused (no bonus)
            children = list(tree.children[u])
            if children:
                law = np.where((x[:, u] >= 0)[:, None], p[:, u], 0.0)
                x[:, children] = tree_drafts(law, rng.random((n, len(children))), self.method.draws)
        law = self.method.round_law(p, q, x, bonus=t + H < inst.T)
        end, token = sample_tree_round(_checked_tree(self.method, law, (n, N1), V), rng.random(n), rng.random(n))
        depth = np.asarray(tree.depth)[end]
        inner = np.asarray([bool(c) for c in tree.children])[end]
        if np.any((token < 0) & (inner | (depth < H) | (t + H < inst.T))):
            raise ValueError(
                f"{type(self.method).__name__}.round_law gave an end without a token to output: no correction "
                f"weights after a refusal, or no bonus law at a leaf with a next position"
            )
        tokens = np.zeros((n, H + 1), dtype=np.int64)
        kinds = np.full((n, H + 1), DRAFT, dtype=np.int8)
        node, parents = end.copy(), np.asarray((0, *tree.parents))
        for d in range(H, 0, -1):  # the accepted path, from its end up to the root
            on = np.flatnonzero(depth >= d)
            tokens[on, d - 1] = x[on, node[on]]
            node[on] = parents[node[on]]
        here = np.arange(n)
        tokens[here, depth] = np.maximum(token, 0)
        kinds[here, depth] = np.where(inner, CORRECTION, BONUS)
        return tokens, kinds, depth + (token >= 0), np.count_nonzero(x[:, 1:] >= 0, axis=1)

    def __call__(self, t, prev, st: _RoundState, rng):
        new = st.pos == st.length  # the previous round is fully emitted: a round starts here
        runs = np.flatnonzero(new)
        drafted = np.zeros(prev.size, dtype=np.int64)
        if runs.size:
            tokens, kinds, length, drafted[runs] = self._decide(t, prev[runs], rng)
            H = tokens.shape[1]
            st.tokens[runs, :H], st.kinds[runs, :H] = tokens, kinds
            st.length[runs], st.pos[runs] = length, 0
        here = np.arange(prev.size)
        x, kind = st.tokens[here, st.pos], st.kinds[here, st.pos]
        st.pos += 1
        return Position(x, kind, new, drafted)


def _checked_tree(method: Method, law, shape: tuple, V: int):
    """``method``'s tree law of a batch of rounds, refused unless ``end`` is a law of ``shape`` and the correction
    weights ``shape + (V,)`` finite and non-negative."""
    name = type(method).__name__
    if np.shape(law.end) != shape or np.shape(law.correction) != (*shape, V):
        raise ValueError(
            f"{name}.round_law gave ends of shape {np.shape(law.end)} and corrections of "
            f"{np.shape(law.correction)}; for these trees they are {shape} and {(*shape, V)}"
        )
    if not (law.end.min() >= 0 and np.abs(law.end.sum(axis=-1) - 1.0).max() <= 1e-9):  # NaN fails both
        raise ValueError(
            f"{name}.round_law gave end probabilities that are not a law (negative, NaN, or not summing to 1)"
        )
    if not (law.correction.min() >= 0 and np.isfinite(law.correction.sum())):
        raise ValueError(f"{name}.round_law gave correction weights that are negative, infinite or NaN")
    return law


def walker(method: Method, inst) -> Walk:
    """How the engine runs ``method`` on ``inst`` (module docstring; :func:`~speculab.methods.capabilities.reading`
    says which, for both engines)."""
    how = reading(method)
    if how == "trees":
        return _Trees(method, inst)
    if how == "adaptive":
        return _Adaptive(method, inst)
    if how == "slots":
        return _Slots(method, inst)
    if how == "positions":
        return _Positions(method, inst, method.position_law(inst))
    return _Rounds(method, inst)


def chunk_runs(walk: Walk) -> int:
    """Runs per chunk: :data:`CHUNK`, fewer where a chunk's per-run arrays would exceed :data:`CHUNK_BYTES`."""
    return max(1, min(CHUNK, CHUNK_BYTES // (8 * walk.floats_per_run)))


def _chunk(walk: Walk, inst, n: int, rng: np.random.Generator, keep: bool) -> Counts:
    T, V = inst.T, inst.V
    prev = kernels.sample_cumulative(np.broadcast_to(np.cumsum(inst.rho), (n, V)), rng.random(n))
    state = walk.start(n)
    kinds = np.empty((T, n), dtype=np.int8)  # how each position was produced; counted once at the end
    oracle, drafts = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    seq = np.empty((n, T + 1), dtype=np.int64) if keep else None
    if keep:
        seq[:, 0] = prev
    for t in range(T):
        prev, kinds[t], calls, drafted = walk(t, prev, state, rng)
        oracle += calls
        drafts += drafted
        if keep:
            seq[:, t + 1] = prev
    rej = rejected(kinds)  # (T, n)
    return Counts.of_runs(
        rejections=np.count_nonzero(rej, axis=0),
        oracle_calls=oracle,
        draft_calls=drafts,
        accepted=np.count_nonzero(kinds == DRAFT, axis=0),
        bonus=np.count_nonzero(kinds == BONUS, axis=0),
        T=T,
        rejected_per_position=np.count_nonzero(rej, axis=1),
        sequences=seq,
        extra={name: np.full(n, T, dtype=np.int64) for name in walk.extra},
    )


def run(
    walk: Walk,
    inst,
    n_runs: int,
    rng: np.random.Generator,
    *,
    return_sequences: bool = False,
    progress: bool = False,
    journal=None,
) -> Counts:
    """Run ``n_runs`` independent runs of ``walk`` (:func:`walker`) on ``inst`` in chunks (:func:`chunk_runs`)
    and join them.

    With a :class:`~speculab.sim.checkpoint.Journal`, the chunks it holds are taken from it (the generator set to
    its state after them) and each new chunk is recorded in it as it finishes.
    """
    chunk = chunk_runs(walk)
    sizes = [min(chunk, n_runs - i) for i in range(0, n_runs, chunk)]
    parts = []
    if journal is not None and journal.parts:
        parts = list(journal.parts)
        if [p.n_runs for p in parts] != sizes[: len(parts)]:
            raise ValueError(f"checkpoint {journal.path} holds chunks of other sizes than this simulation's")
        rng.bit_generator.state = journal.state
        sizes = sizes[len(parts) :]
    if progress and len(sizes) > 1:
        from tqdm.auto import tqdm

        sizes = tqdm(sizes, desc="simulating", unit="chunk", leave=False, disable=None)
    for s in sizes:
        parts.append(_chunk(walk, inst, s, rng, return_sequences))
        if journal is not None:
            journal.add(parts[-1], rng)
    return parts[0] if len(parts) == 1 else Counts.concatenate(parts)
