r"""The JAX engine for methods that decide each round's length while drafting (SpecDec++):
:mod:`speculab.sim.jax_engine`'s
scan with a pool of the chains still drafting after a rejection.

A method gives its :class:`~speculab.methods.capabilities.AdaptiveLength` — its verifier's one-slot tables, its
head's scores and its stopping rule — and runs position by position. A round rejected before its rule stopped
goes on drafting from the rejected draft (drafts that are counted, never verified); those chains, of every run
of a chunk, draft one token per position in a pool of slots the runs share, which grows when it overflows
(:func:`_adaptive_chunk_fn`, :func:`_pooled`); the numpy engine draws the same chain at once.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from speculab import kernels
from speculab.counts import BONUS, CORRECTION, DRAFT, Counts
from speculab.methods.capabilities import adaptive_verifier
from speculab.sim import jax_common as common
from speculab.theory.instance import compact

_jax = common._jax


def _adaptive_tables(methods: list, insts: list, P_Q: list):
    """The points' :class:`~speculab.methods.base.AdaptiveDrafting` as device tables stacked over the points: each
    verifier's one-slot law (:func:`_slot_tables`), the compact scores and the rule's parameters ``(S,)``; and
    ``(stops, G)``, the shared stopping rule and the most chains a run drafts past rejections at once."""
    jax, jnp = _jax()
    rules = [m.adaptive_drafting(i) for m, i in zip(methods, insts)]
    for m, r in zip(methods, rules):
        common._check_table_size(
            compact(np.asarray(r.score)).size, "its scores (a head given as a function is tabulated over (T, V, V))", m
        )
        adaptive_verifier(m, r)
    if len({r.stops for r in rules}) > 1:
        raise ValueError("the points of a sweep must share one stopping rule (AdaptiveDrafting.stops)")
    points = []
    for r, (P, Q) in zip(rules, P_Q):
        tables = common._slot_tables(r.verifier, P, Q)
        tables["score"] = jnp.asarray(compact(r.score), dtype=P.dtype)
        tables["params"] = tuple(jnp.asarray(v, dtype=P.dtype) for v in r.params)
        points.append(tables)
    score_shape = jnp.broadcast_shapes(*(p["score"].shape for p in points))  # compact and full heads together
    for p in points:
        p["score"] = jnp.broadcast_to(p["score"], score_shape)
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *points)
    return stacked, rules[0].stops, max(_ghost_slots(r.max_K, insts[0].T) for r in rules)


def _ghost_slots(max_K: int, T: int) -> int:
    """Drafting that goes on after a rejection lasts at most ``min(max_K, T) − 1`` positions, so a run has at most
    that many such chains at once (one starts per position at most)."""
    return max(min(max_K, T) - 1, 0)


def _at(A, point, t, a):
    """``A[point, t, a]`` of a stack of compact ``(S, T', A', V)`` tables: an axis of size 1 (``T' = 1`` or ``A' = 1``,
    broadcast) is read at 0 whatever the index (``mode="clip"``)."""
    return A.at[point, t, a].get(mode="clip")


class _Pool(NamedTuple):
    """The chains still drafting after a rejection, of every run of a chunk, in ``C`` slots: ``(C,)`` each."""

    token: object  # the chain's last draft
    prod: object  # the product of its round's scores
    count: object  # its round's drafts so far
    run: object  # the run it belongs to (its drafts are counted there)
    alive: object


def _adaptive_position(stops, T: int, tables, point, t, state, u):
    """One position of one run (of sweep point ``point``) of an adaptively drafting method; ``u`` holds 3 uniforms.

    ``state = (prev, count, prod, bonus)``: the last token, the current round's drafts so far
    and their product of scores, and whether this position is the bonus of a fully accepted
    round. Also returns the chain to go on drafting after a rejection before the rule
    stopped, as ``(spawn, token, prod, count)`` (:class:`_Pool`).
    """
    _, jnp = _jax()
    prev, count, prod, bonus = state
    params = [p[point] for p in tables["params"]]
    y = kernels.sample_cumulative(_at(tables["cP"], point, t, prev), u[0])
    ok = u[1] < _at(tables["accept"], point, t, prev)[y]
    correction = kernels.sample_cumulative(_at(tables["cC"], point, t, prev), u[2])
    count, prod = count + 1, prod * _at(tables["score"], point, t, prev)[y]
    stop = stops(prod, count, t, T, *params)
    x = jnp.where(
        bonus, kernels.sample_cumulative(_at(tables["cQ"], point, t, prev), u[0]), jnp.where(ok, y, correction)
    )
    kind = jnp.where(bonus, BONUS, jnp.where(ok, DRAFT, CORRECTION))
    new_round = (count == 1) & ~bonus
    ended = bonus | ~ok | stop
    x = x.astype(jnp.int32)
    state = (x, jnp.where(ended, 0, count), jnp.where(ended, 1.0, prod).astype(prod.dtype), ~bonus & ok & stop)
    spawn = (~bonus & ~ok & ~stop, y.astype(jnp.int32), prod, count)
    return state, spawn, (x, kind, new_round, jnp.where(bonus, 0, 1))


def _advance_pool(stops, T: int, tables, points, t, pool: _Pool, u):
    """Every live chain of the pool drafts its next token at position ``t``; returns the pool and drafts per run."""
    _, jnp = _jax()
    at = points[pool.run]
    z = kernels.sample_cumulative(_at(tables["cP"], at, t, pool.token), u)
    prod = jnp.where(pool.alive, pool.prod * kernels.gather(_at(tables["score"], at, t, pool.token), z), pool.prod)
    count = pool.count + pool.alive
    drafts = jnp.zeros(points.shape[0], jnp.int32).at[pool.run].add(pool.alive.astype(jnp.int32))
    alive = pool.alive & ~stops(prod, count, t, T, *(p[at] for p in tables["params"]))
    return _Pool(jnp.where(pool.alive, z, pool.token).astype(jnp.int32), prod, count, pool.run, alive), drafts


def _join_pool(pool: _Pool, spawn):
    """The pool's live chains and the runs' new ones, packed in order into the pool's ``C`` slots; and how many
    there were (more than ``C``: the pool overflowed)."""
    _, jnp = _jax()
    flag, token, prod, count = spawn
    C, n = pool.alive.shape[0], flag.shape[0]
    every = _Pool(
        jnp.concatenate([pool.token, token]),
        jnp.concatenate([pool.prod, prod]),
        jnp.concatenate([pool.count, count]),
        jnp.concatenate([pool.run, jnp.arange(n, dtype=jnp.int32)]),
        jnp.concatenate([pool.alive, flag]),
    )
    live = jnp.sum(every.alive)
    (idx,) = jnp.nonzero(every.alive, size=C, fill_value=0)
    return _Pool(*(a[idx] for a in every[:4]), jnp.arange(C) < live), live


@lru_cache(maxsize=32)
def _adaptive_chunk_fn(stops, T: int, S: int, n: int, C: int, keep: bool):
    """A jitted ``(key, rho (S, V), stacked tables) -> (counts (5, S, n), rejected per position (T, S), tokens or
    None, peak)`` for ``n`` runs of each of ``S`` points of an adaptively drafting method.

    The ``S n`` runs are advanced together (vmapped); the chains drafting after a rejection,
    of every run of every point, share one pool of ``C`` slots, so a sweep's pool is sized by
    the sum of its points' needs, not ``S`` times the largest. ``peak`` is the most chains the
    pool had to hold (more than ``C``: the chunk must be run again with a larger pool). A
    slot's uniform is element ``i`` of one draw of ``C`` per position, drawn with partitionable
    Threefry (:func:`~speculab.sim.jax_common.size_free_uniforms`), which makes that element
    independent of ``C``, and chains are packed in the same order whatever ``C``, so every
    pool that does not overflow gives the same counts.
    """
    jax, jnp = _jax()
    N = S * n
    step = jax.vmap(
        lambda s, u, p, t, tables: _adaptive_position(stops, T, tables, p, t, s, u), in_axes=(0, 0, 0, None, None)
    )

    def run(key, rho, tables):
        dtype = rho.dtype
        first, key = jax.random.split(key)
        points = jnp.repeat(jnp.arange(S, dtype=jnp.int32), n)
        cum = jnp.cumsum(rho, axis=-1)
        prev = jax.vmap(lambda p, u: kernels.sample_cumulative(cum[p], u))(
            points, jax.random.uniform(first, (N,), dtype=dtype)
        ).astype(jnp.int32)
        state = (prev, jnp.zeros(N, jnp.int32), jnp.ones(N, dtype), jnp.zeros(N, bool))
        pool = _Pool(
            jnp.zeros(C, jnp.int32),
            jnp.ones(C, dtype),
            jnp.zeros(C, jnp.int32),
            jnp.zeros(C, jnp.int32),
            jnp.zeros(C, bool),
        )

        def body(carry, t):
            state, pool, peak, counts = carry
            k_runs, k_pool = jax.random.split(jax.random.fold_in(key, t))
            state, spawn, (x, kind, new_round, d) = step(
                state, jax.random.uniform(k_runs, (N, 3), dtype=dtype), points, t, tables
            )
            if C:
                pool, ghost = _advance_pool(
                    stops, T, tables, points, t, pool, common.size_free_uniforms(k_pool, C, dtype)
                )
                pool, live = _join_pool(pool, spawn)
                d, peak = d + ghost, jnp.maximum(peak, live)
            counts, rej = common._tally(counts, x, kind, new_round, d)
            return (state, pool, peak, counts), (jnp.sum(rej.reshape(S, n), axis=1), x if keep else None)

        carry = (state, pool, jnp.zeros((), jnp.int32), jnp.zeros((5, N), jnp.int32))
        (_, _, peak, counts), (per_position, xs) = jax.lax.scan(body, carry, jnp.arange(T))
        return counts.reshape(5, S, n), per_position, (jnp.concatenate([prev[None], xs]) if keep else None), peak

    return jax.jit(run)


def _simulate_adaptive(methods: list, insts: list, tables: list, n_runs: int, key, keep: bool) -> list[Counts]:
    """Simulate an adaptively drafting method at ``S`` points together (:func:`_adaptive_chunk_fn`), ``n_runs`` each."""
    jax, jnp = _jax()
    if not tables[0].small(insts[0].V):
        raise ValueError(
            f"engine='jax' runs {type(methods[0]).__name__} from per-token tables, which would exceed "
            f"TABLE_BUDGET = {common.TABLE_BUDGET} entries for this instance: use engine='numpy'"
        )
    stacked, stops, G = _adaptive_tables(methods, insts, [t.arrays[:2] for t in tables])
    rho = jnp.stack([t.arrays[2] for t in tables])
    S, T = len(methods), insts[0].T
    runs = [[] for _ in range(S)]
    for start in range(0, n_runs, common.CHUNK):
        n = min(common.CHUNK, n_runs - start)
        key, sub = jax.random.split(key)

        def chunk(C, n=n, sub=sub):
            return _adaptive_chunk_fn(stops, T, S, n, C, keep)(sub, rho, stacked)

        counts, per_position, seq = _pooled(chunk, (stops, T, S, n), S * n, G)
        for s in range(S):
            tokens = None if seq is None else np.asarray(seq)[:, s * n : (s + 1) * n]
            runs[s].append(
                common._counts(np.asarray(counts[:, s], dtype=np.int64), np.asarray(per_position[:, s]), tokens, T)
            )
    return [r[0] if len(r) == 1 else Counts.concatenate(r) for r in runs]


#: Pool slots that sufficed last time, by (stopping rule, T, points, chunk size): where the next call starts.
_POOL_HINT: dict = {}


def _pool_size(n: int, G: int, peak: int) -> int:
    """Pool slots for a chunk of ``n`` runs that must hold ``peak`` chains: ``n/8 · 2^k >= 1.25 peak``, at most ``n
    G``."""
    size = max(n // 8, 1)
    while size < 1.25 * peak and size < n * G:
        size *= 2
    return min(size, n * G)


def _pooled(chunk, hint_key, n: int, G: int):
    """``chunk(C)`` for a pool of ``C`` slots that does not overflow: ``(counts, per position, tokens)``.

    A method that never drafts past a rejection (``G = 0``) needs no pool. Otherwise the pool
    starts where the last call of the same kind ended (``n`` at first) and is enlarged to the
    peak it reports until it suffices (``n G`` always does). The counts do not depend on the
    pool's size (:func:`_adaptive_chunk_fn`).
    """
    C = 0 if G == 0 else min(_POOL_HINT.get(hint_key, n), n * G)
    while True:
        counts, per_position, seq, peak = chunk(C)
        peak = int(peak)
        if peak <= C:
            break
        if C >= n * G:  # a run never has more than G chains at once
            raise RuntimeError(f"the pool of {C} slots overflowed ({peak} chains) although runs hold at most {G} each")
        C = _pool_size(n, G, peak)
    if G:
        _POOL_HINT[hint_key] = _pool_size(n, G, peak)
    return counts, per_position, seq
