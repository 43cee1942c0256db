r"""The JAX simulation engine: each method's own array-API round law, jitted, vmapped over runs, scanned over positions.

Nothing here is specific to a method. The engine reads the protocol only:

* :class:`~speculab.methods.capabilities.Slotwise` methods (the chain family of [Yin]
  Algorithm 2: SD, batch SD, any rule ``(b, P)``, biased, Fuzzy) verify a round
  one slot at a time, so a run advances **position by position**: at a round's
  first slot (the root) the :meth:`~speculab.methods.Method.round_law` of a one-slot
  round over the method's ``M`` draft rows decides, at the other slots that of a
  one-slot round on the followed row, and after ``K`` accepted drafts a bonus
  token comes from ``q``. Lazy drafting, as in the numpy engine: a draft is
  drawn when it is verified, which gives the same joint law of outputs and counts.
* every other method with a round law (block verification, autoregressive
  decoding) runs **round by round**, as :func:`speculab.backends.decode` does on
  real models: at a round start it drafts ``L = draft_length(T − t)`` tokens per row,
  draws ``(row, τ, token)`` from the round law and then emits that round's tokens
  one position at a time. Positions are grouped into segments of equal ``L`` and
  bonus availability so every shape is static.

Each position draws a fixed number of uniforms for every run (``3`` for a slotwise
method read from its tables — the root's too, with a :class:`~speculab.methods.capabilities.RootTable` —,
``M + 2`` when its law is evaluated in the scan, ``max(M L, 1) + 2`` round by round, ``L``
the longest round, ``3`` for SPRINTER and for SpecDec++, plus one per pool slot) from a key folded from the chunk's key
and the position, so keys are split and never reused (Threefry with sequential counters,
:func:`~speculab.sim.jax_common.sequential_stream`, whatever JAX's global setting); a chunk of
:data:`~speculab.sim.jax_common.CHUNK` runs is one compiled call (``jax.jit`` of a ``lax.scan`` over
positions of a ``jax.vmap`` over runs; fewer runs per call when each run evaluates rows of a
large vocabulary inside the scan, :data:`~speculab.sim.jax_common.SCAN_BUDGET`). The same key gives the same
:class:`~speculab.counts.Counts`. Probabilities are kept in JAX's default float
(float32 unless ``jax_enable_x64`` is set), which for sampling is far below
Monte-Carlo error. Instances stay compact: a stationary instance's kernel is
passed once and indexed by position and context inside the scan.

SPRINTER has no rounds: it decides each drafted token where it is drafted, so it runs
from its :class:`~speculab.methods.capabilities.PositionLaw` (kept without a target call, kept
after one, or corrected), tabulated once. SpecDec++ decides each round's length while it
drafts, and a round rejected before its rule stopped goes on drafting (drafts that are
counted, never verified), so it has neither law: it runs from its
:class:`~speculab.methods.capabilities.AdaptiveLength` — its verifier's one-slot tables, its
head's scores and stopping rule — position by position. The rounds still drafting after a
rejection draft one token per position in a pool the chunk's runs share, which grows
when it overflows (:mod:`speculab.sim.jax_adaptive`); the numpy engine draws the same chain at once.
"""

from __future__ import annotations

from functools import lru_cache, partial, wraps

import numpy as np

from speculab import kernels
from speculab.counts import BONUS, CORRECTION, DRAFT, TARGET, Counts
from speculab.methods.base import Method, sample_round
from speculab.methods.capabilities import drafting_instance, reading
from speculab.sim import jax_common as common
from speculab.sim.jax_adaptive import _simulate_adaptive
from speculab.sim.jax_trees import tree_position, tree_segments, tree_width
from speculab.sim.jax_common import _check_table_size, _counts, _jax, _slot_tables, _tally, _Tables
from speculab.theory.instance import MarkovInstance, compact

__all__ = ["simulate_jax", "simulate_sweep", "positions_per_second_bound", "uniforms_per_position"]


def _in_sequential_stream(fn):
    """``fn`` run in :func:`~speculab.sim.jax_common.sequential_stream`: its keys split and its uniforms drawn the
    same way whatever the caller's global Threefry setting."""

    @wraps(fn)
    def run(*args, **kwargs):
        with common.sequential_stream():
            return fn(*args, **kwargs)

    return run


def _positionwise(method: Method) -> bool:
    return reading(method) == "positions"


def _adaptive(method: Method) -> bool:
    return reading(method) == "adaptive"


def _slotwise(method: Method) -> bool:
    return reading(method) == "slots"


def _trees(method: Method) -> bool:
    return reading(method) == "trees"


def check_method(method: Method) -> None:
    """Refuse what is not a method (every method has a round law, which the engine runs if nothing else)."""
    if not isinstance(method, Method):
        raise ValueError(f"method must be a speculab method (e.g. SD(), BatchSD(4)); got {method!r}")


# -- slotwise methods: position by position --------------------------------------------------------------
def _slot_width(rows: int, tables) -> int:
    """Uniforms per position of a slotwise method: 3 from its tables (the root's too), ``rows + 2`` otherwise."""
    return 3 if tables is not None and (rows == 1 or "root_cJ" in tables) else rows + 2


def _slot_position(method: Method, k, M, rows: int, bonus_possible: bool, T: int, P, Q, tables, t, state, u):
    """One position of one run of a slotwise method; ``u`` holds :func:`_slot_width` uniforms.

    ``state = (prev, slot)``: the last token and the number of drafts accepted in
    the current round (0: the next position is a round's root). With ``tables``
    (:func:`_slot_tables`) a slot reads its law from them; without, it evaluates the
    round law of the drafted token here. ``k`` (lookahead) and ``M`` (draft rows) may be
    traced (a sweep); ``rows >= M`` is the static number of rows (padded rows are never
    accepted) and ``bonus_possible`` whether any ``k < T``.
    """
    jax, jnp = _jax()
    prev, slot = state
    row = _Tables.row
    if tables is not None:
        x0 = kernels.sample_cumulative(row(tables["cP"], t, prev), u[0])
        ok = u[-2] < row(tables["accept"], t, prev)[x0]
        token = kernels.sample_cumulative(row(tables["cC"], t, prev), u[-1])
        x = jnp.where(ok, x0, token)
    else:
        p, q = row(P, t, prev), row(Q, t, prev)
        x, ok = _decide(method, p, q, kernels.sample_index(p, u[:1]), u[-2], u[-1])
    if rows > 1:  # the root
        if tables is not None and "root_cJ" in tables:  # its outcome, tabulated (its own uniform)
            j = kernels.sample_cumulative(row(tables["root_cJ"], t, prev), u[-2])
            V = P.shape[-1]
            ok_root, x_root = j < V, jnp.where(j < V, j, j - V)
        else:  # a one-slot round over the M rows
            p, q = row(P, t, prev), row(Q, t, prev)
            drafts = kernels.sample_index(jnp.broadcast_to(p, (rows, p.shape[-1])), u[:rows])
            x_root, ok_root = _decide(method, p, q, drafts, u[-2], u[-1])
        at_root = slot == 0
        x, ok = jnp.where(at_root, x_root, x), jnp.where(at_root, ok_root, ok)
    kind = jnp.where(ok, DRAFT, CORRECTION)
    if bonus_possible:  # after k accepted drafts: a bonus token from q (its uniform is the first draft's, unused then)
        is_bonus = (slot == k) & (k < T)
        cq = row(tables["cQ"], t, prev) if tables is not None else jnp.cumsum(row(Q, t, prev))
        x = jnp.where(is_bonus, kernels.sample_cumulative(cq, u[0]), x)
        kind = jnp.where(is_bonus, BONUS, kind)
    else:
        is_bonus = jnp.zeros((), dtype=bool)
    new_round = (slot == 0) & ~is_bonus
    slot = jnp.where(is_bonus | ~ok, 0, slot + 1)
    drafts = jnp.where(new_round, kernels.drafts_per_round(M, k, T - t), 0)
    x = x.astype(jnp.int32)
    return (x, slot), (x, kind, new_round, drafts)


def _decide(method: Method, p, q, drafts, u_outcome, u_token):
    """A one-slot round over ``len(drafts)`` rows drafted from ``p``: ``(token, accepted)``."""
    jax, jnp = _jax()
    drafts = jnp.reshape(drafts, (-1,))
    rows, V = drafts.shape[0], p.shape[-1]
    law = method.round_law(
        jnp.broadcast_to(p, (rows, 1, V)), jnp.broadcast_to(q, (rows, 2, V)), drafts[:, None], bonus=False
    )
    row, accepted, token = sample_round(law, u_outcome, u_token)
    ok = accepted == 1
    return jnp.where(ok, drafts[row], token), ok


# -- methods without rounds: one draft decided per position (SPRINTER) ----------------------------------------------
def _position_tables(method: Method, inst: MarkovInstance) -> dict:
    """The method's :class:`~speculab.methods.capabilities.PositionLaw` as compact JAX tables (cumulative where
    sampled)."""
    _, jnp = _jax()
    free, called, correction, extra = method.position_law(inst)
    _check_table_size(
        3 * max(compact(np.asarray(a)).size for a in (free, called, correction)),
        "its position law (a verifier given as a function is tabulated over (T, V, V))",
        method,
    )
    dtype = jnp.zeros(0).dtype
    arrays = {
        "cP": np.cumsum(compact(inst.P), axis=-1),
        "free": compact(free),
        "called": compact(called),
        "cC": np.cumsum(compact(correction), axis=-1),
    }
    return {k: jnp.asarray(v, dtype=dtype) for k, v in arrays.items()}, tuple(extra)


def _decided_position(P, Q, tables, t, state, u):
    """One position of one run: draft ``x``; kept without a call, kept after a call, or corrected after one."""
    _, jnp = _jax()
    prev = state
    row = _Tables.row
    x = kernels.sample_cumulative(row(tables["cP"], t, prev), u[0])
    free, called = row(tables["free"], t, prev)[x], row(tables["called"], t, prev)[x]
    corrected = u[1] >= free + called
    call = u[1] >= free
    token = kernels.sample_cumulative(row(tables["cC"], t, prev), u[2])
    x = jnp.where(corrected, token, x).astype(jnp.int32)
    return x, (x, jnp.where(corrected, CORRECTION, DRAFT), call, jnp.ones((), dtype=jnp.int32))


# -- other methods: round by round ----------------------------------------------------------------------------
def _round_position(method: Method, M: int, L: int, bonus: bool, T: int, L_max: int, P, Q, t, state, u):
    """One position of one run of a method simulated round by round; ``u`` holds at least ``M L + 2`` uniforms.

    ``state = (prev, tokens, kinds, at, size)``: the round in progress emits ``tokens[at]``
    (buffers of the longest round's size ``L_max + 1``, shared by every segment); a new
    round (``L`` drafts per row, a bonus possible iff ``bonus``) starts when ``at == size``.
    """
    jax, jnp = _jax()
    prev, buf_tokens, buf_kinds, at, size = state
    V = P.shape[-1]
    a = jnp.broadcast_to(prev, (M,))
    ps, qs, xs = [], [], []
    for i in range(L):  # draft the block: M independent rows of the draft chain
        p = jax.vmap(lambda c, i=i: _Tables.row(P, t + i, c))(a)  # (M, V)
        qs.append(jax.vmap(lambda c, i=i: _Tables.row(Q, t + i, c))(a))
        ps.append(p)
        a = kernels.sample_index(p, u[i * M : (i + 1) * M]).astype(jnp.int32)
        xs.append(a)
    qs.append(jax.vmap(lambda c: _Tables.row(Q, jnp.minimum(t + L, T - 1), c))(a))  # the next position's law
    x = jnp.stack(xs, axis=-1) if L else jnp.zeros((M, 0), dtype=jnp.int32)  # (M, L)
    p_blk = jnp.stack(ps, axis=-2) if L else jnp.zeros((M, 0, V), dtype=P.dtype)
    law = method.round_law(p_blk, jnp.stack(qs, axis=-2), x, bonus=bonus)
    row, tau, token = sample_round(law, u[M * L], u[M * L + 1])
    has = token >= 0
    slots = jnp.arange(L_max + 1)
    out = jnp.where(slots == tau, jnp.maximum(token, 0), jnp.concatenate([x[row], jnp.zeros(L_max + 1 - L, jnp.int32)]))
    last = TARGET if L == 0 else jnp.where(tau < L, CORRECTION, BONUS)
    kinds = jnp.where(slots < tau, DRAFT, last)
    fresh = at >= size
    buf_tokens = jnp.where(fresh, out.astype(jnp.int32), buf_tokens)
    buf_kinds = jnp.where(fresh, kinds.astype(jnp.int8), buf_kinds)
    size = jnp.where(fresh, tau + has, size)
    at = jnp.where(fresh, 0, at)
    x_t, kind_t = buf_tokens[at], buf_kinds[at]
    return (x_t, buf_tokens, buf_kinds, at + 1, size), (x_t, kind_t, fresh, jnp.where(fresh, M * L, 0))


def _segments(method: Method, T: int) -> list[tuple[int, int, int, bool]]:
    """Positions grouped by the round shape a round starting there has: ``(start, stop, L, bonus)``."""
    out = []
    for t in range(T):
        L = method.draft_length(T - t)
        shape = (L, t + L < T)
        if out and out[-1][2:] == shape:
            out[-1] = (out[-1][0], t + 1, *shape)
        else:
            out.append((t, t + 1, *shape))
    return out


# -- the compiled chunk ---------------------------------------------------------------------------------------
def _chunk_fn(method: Method, T: int, n: int, keep: bool, sweep: tuple[int, bool] | None = None):
    """A jitted ``(key, P, Q, rho, slot tables, (k, M)) -> (counts (5, n), rejected per position (T,), tokens or
    None)``.

    ``counts`` rows: rejections, oracle calls, draft calls, accepted drafts, bonus tokens. For
    a sweep, ``sweep = (rows, bonus possible)`` fixes the shapes and ``(k, M)`` — lookahead and
    draft rows of the point — are traced values; otherwise they come from ``method``.
    """
    jax, jnp = _jax()
    M = method.rows

    def scan_positions(step, width, P, Q, carry, key, ts):
        def body(carry, t):
            state, counts = carry
            u = jax.random.uniform(jax.random.fold_in(key, t), (n, width), dtype=P.dtype)
            state, (x, kind, new_round, d) = jax.vmap(lambda s, uu: step(P, Q, t, s, uu))(state, u)
            counts, rej = _tally(counts, x, kind, new_round, d)
            return (state, counts), (jnp.sum(rej), x if keep else None)

        return jax.lax.scan(body, carry, ts)

    def run(key, P, Q, rho, slot_tables, shape=None):
        first, key = jax.random.split(key)
        prev = kernels.sample_index(
            jnp.broadcast_to(rho, (n, rho.shape[-1])), jax.random.uniform(first, (n,), dtype=P.dtype)
        ).astype(jnp.int32)
        zeros = jnp.zeros(n, dtype=jnp.int32)
        counts = jnp.zeros((5, n), dtype=jnp.int32)
        if _positionwise(method):

            def step(P, Q, t, s, u):
                return _decided_position(P, Q, slot_tables, t, s, u)

            (_, counts), (per_position, xs) = scan_positions(step, 3, P, Q, (prev, counts), key, jnp.arange(T))
        elif _slotwise(method):
            k, m = (method.draft_length(T), M) if shape is None else shape
            rows, bonus_possible = (M, k < T) if sweep is None else sweep

            def step(P, Q, t, s, u):
                return _slot_position(method, k, m, rows, bonus_possible, T, P, Q, slot_tables, t, s, u)

            (_, counts), (per_position, xs) = scan_positions(
                step, _slot_width(rows, slot_tables), P, Q, ((prev, zeros), counts), key, jnp.arange(T)
            )
        else:  # round by round: a block of rows, or a tree (the longest round outputs L_max + 1 tokens)
            L_max = method.draft_length(T)
            if _trees(method):
                width = tree_width(method, T)
                segments = [
                    (a, b, partial(tree_position, method, tree, bonus, T, L_max))
                    for a, b, tree, bonus in tree_segments(method, T)
                ]
            else:
                width = max(M * L_max, 1) + 2
                segments = [
                    (a, b, partial(_round_position, method, M, L, bonus, T, L_max))
                    for a, b, L, bonus in _segments(method, T)
                ]
            state = (
                prev,
                jnp.zeros((n, L_max + 1), dtype=jnp.int32),
                jnp.zeros((n, L_max + 1), dtype=jnp.int8),
                zeros,
                zeros,
            )
            carry, rates, seqs = (state, counts), [], []
            for start, stop, step in segments:
                carry, (r, x) = scan_positions(step, width, P, Q, carry, key, jnp.arange(start, stop))
                rates.append(r)
                seqs.append(x)
            counts, per_position = carry[1], jnp.concatenate(rates)
            xs = jnp.concatenate(seqs) if keep else None
        return counts, per_position, (jnp.concatenate([prev[None], xs]) if keep else None)

    return jax.jit(run)


@lru_cache(maxsize=64)
def _compiled(method: Method, T: int, n: int, keep: bool):
    """:func:`_chunk_fn`, kept across calls (jit retraces by itself for new shapes or table layouts)."""
    return _chunk_fn(method, T, n, keep)


@_in_sequential_stream
def simulate_jax(inst: MarkovInstance, method: Method, n_runs: int, key, *, return_sequences: bool = False) -> Counts:
    """Simulate ``n_runs`` runs of ``method`` on ``inst`` with JAX (see the module docstring).

    Args:
      inst: the Markov instance (kept compact on the device).
      method: a registered method (one with a round law, a position law or adaptive drafting).
      n_runs: number of runs (>= 1); chunks of :data:`~speculab.sim.jax_common.CHUNK` runs, each one compiled call.
      key: a JAX PRNG key, or anything :func:`speculab._validate.as_jax_key` accepts.
      return_sequences: also return the ``(n_runs, T + 1)`` sampled tokens.
    """
    from speculab._validate import as_jax_key, as_positive_int

    jax, jnp = _jax()
    check_method(method)
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"inst must be a MarkovInstance; got {type(inst).__name__}")
    n_runs = as_positive_int(n_runs, "n_runs")
    key = as_jax_key(key)
    inst = drafting_instance(method, inst)  # the law the drafts come from (DraftLaw: greedy drafts)
    tables = _Tables(inst, jnp)
    if _adaptive(method):
        return _simulate_adaptive([method], [inst], [tables], n_runs, key, return_sequences)[0]
    extra = ()
    if _slotwise(method):
        slot_tables = _slot_tables(method, *tables.arrays[:2]) if tables.small(inst.V) else None
    elif _positionwise(method):
        slot_tables, extra = _position_tables(method, inst)
    else:
        slot_tables = None
    fns, parts = {}, []
    chunk = _chunk_runs(method, inst, slot_tables)
    for start in range(0, n_runs, chunk):
        n = min(chunk, n_runs - start)
        key, sub = jax.random.split(key)
        if n not in fns:
            try:
                fns[n] = _compiled(method, inst.T, n, return_sequences)
            except TypeError:  # a method holding arrays is not hashable: compile for this call only
                fns[n] = _chunk_fn(method, inst.T, n, return_sequences)
        counts, per_position, seq = fns[n](sub, *tables.arrays, slot_tables)
        parts.append(_counts(np.asarray(counts, dtype=np.int64), np.asarray(per_position), seq, inst.T, extra))
    return parts[0] if len(parts) == 1 else Counts.concatenate(parts)


def _chunk_runs(method: Method, inst: MarkovInstance, slot_tables) -> int:
    """Runs per compiled call: :data:`~speculab.sim.jax_common.CHUNK`, or fewer so that the rows of ``V`` a run
    evaluates inside the scan (a slotwise method whose tables exceed :data:`~speculab.sim.jax_common.TABLE_BUDGET`:
    its ``rows``; a method run round by round: ``rows × (L + 1)``) stay within
    :data:`~speculab.sim.jax_common.SCAN_BUDGET` for the whole chunk."""
    if slot_tables is not None:
        return common.CHUNK
    if _slotwise(method):
        per_run = method.rows * inst.V
    elif _trees(method):  # a tree's draft and target laws at every node
        per_run = 2 * (tree_width(method, inst.T) - 1) * inst.V
    else:
        per_run = method.rows * (method.draft_length(inst.T) + 1) * inst.V
    return max(1, min(common.CHUNK, common.SCAN_BUDGET // per_run))


@_in_sequential_stream
def simulate_sweep(inst, methods, n_runs: int, key) -> list[Counts]:
    """Simulate a grid of one method's rule parameter and/or a stack of instances in one compiled call per chunk.

    The points of the sweep differ in their tables (the one-slot law of
    :func:`_slot_tables`, the root's outcome from its :class:`~speculab.methods.capabilities.RootTable`
    when some point has several draft rows, and the instance's kernels) and in traced numbers,
    the lookahead ``K`` and the draft rows ``M`` (an adaptively drafting method: its
    rule's parameters, e.g. SpecDec++'s ``h`` and ``max_K``, and its scores); they are stacked
    and ``jax.vmap``-ed over, and with several devices the stack is sharded over them
    (``jax.sharding``). An adaptively drafting method's points instead run as one batch of
    runs sharing one pool of the chains drafting past rejections (:mod:`speculab.sim.jax_adaptive`;
    not sharded). So the methods are one slotwise or adaptively drafting class, e.g.
    ``[Biased(e) for e in eps]``, ``[SD(K=k) for k in Ks]``, ``[BatchSD(m) for m in Ms]``,
    ``[Fuzzy(t) for t in theta]``, ``[SpecDecPP(h) for h in hs]``, and the instances share
    ``T``, ``V`` and storage. The stack is sharded only when the number of points is a
    multiple of the number of devices (otherwise it runs on the default device).

    Args:
      inst: a :class:`MarkovInstance` or a list of them (one per point, or one for all).
      methods: a method or a list of them (one per point, or one for all).
      n_runs: runs per point.
      key: as for :func:`simulate_jax`; the points get independent keys.

    Returns:
      one :class:`~speculab.counts.Counts` per point.
    """
    from speculab._validate import as_jax_key, as_positive_int

    jax, jnp = _jax()
    insts = list(inst) if isinstance(inst, (list, tuple)) else [inst]
    methods = list(methods) if isinstance(methods, (list, tuple)) else [methods]
    S = max(len(insts), len(methods))
    if {len(insts), len(methods)} - {1, S} or S == 0:
        raise ValueError(
            f"give one instance or one method, or lists of the same length; got {len(insts)} instances "
            f"and {len(methods)} methods"
        )
    insts, methods = insts * (S // len(insts)), methods * (S // len(methods))
    for i in insts:
        if not isinstance(i, MarkovInstance):
            raise ValueError(f"inst must be a MarkovInstance or a list of them; got {type(i).__name__}")
    n_runs = as_positive_int(n_runs, "n_runs")
    first, T = methods[0], insts[0].T
    for m in methods:
        check_method(m)
        if not (_slotwise(m) or _adaptive(m)):
            raise ValueError(
                f"a sweep varies the parameters of one slotwise or adaptively drafting method; "
                f"{type(m).__name__} is neither: run its points with simulate(..., engine='jax')"
            )
        if type(m) is not type(first):
            raise ValueError(f"a sweep varies the parameters of one method; got {first!r} and {m!r}")
    insts = [drafting_instance(m, i) for i, m in zip(insts, methods)]
    tables = [_Tables(i, jnp) for i in insts]
    if len({(i.T, t.shapes) for i, t in zip(insts, tables)}) > 1:
        raise ValueError("the instances of a sweep must have the same T, V and storage (all stationary, or all not)")
    if not tables[0].small(insts[0].V):
        raise ValueError(
            f"the sweep's tables would exceed TABLE_BUDGET = {common.TABLE_BUDGET} entries per point; "
            "run the points one by one with simulate(..., engine='jax')"
        )
    key = as_jax_key(key)
    if _adaptive(first):
        return _simulate_adaptive(methods, insts, tables, n_runs, key, False)
    rows = max(m.rows for m in methods)
    slot = [_slot_tables(m, *t.arrays[:2], root=rows > 1) for m, t in zip(methods, tables)]
    for m, s in zip(methods, slot):
        if rows > 1 and "root_cJ" not in s:
            raise ValueError(
                f"a sweep over draft rows needs the root as tables (capabilities.RootTable); "
                f"{type(m).__name__} has none"
            )
    stacked = [jnp.stack([t.arrays[i] for t in tables]) for i in range(3)]
    stacked.append(jax.tree_util.tree_map(lambda *a: jnp.stack(a), *slot))
    ks = jnp.asarray([m.draft_length(T) for m in methods])  # the lookahead and draft rows of each point, traced
    stacked.append((ks, jnp.asarray([m.rows for m in methods])))
    sweep = (rows, bool((ks < T).any()))
    devices = jax.devices()
    if len(devices) > 1 and S % len(devices) == 0:  # one slice of the sweep per device
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        sharding = NamedSharding(Mesh(np.array(devices), ("sweep",)), PartitionSpec("sweep"))
        stacked = jax.device_put(stacked, sharding)
    runs = [[] for _ in range(S)]
    for start in range(0, n_runs, common.CHUNK):
        n = min(common.CHUNK, n_runs - start)
        key, sub = jax.random.split(key)
        counts, per_position, _ = _compiled_sweep(first, T, n, sweep)(jax.random.split(sub, S), *stacked)
        for s in range(S):
            runs[s].append(
                _counts(np.asarray(counts[s], dtype=np.int64), np.asarray(per_position[s]), None, insts[0].T)
            )
    return [r[0] if len(r) == 1 else Counts.concatenate(r) for r in runs]


@lru_cache(maxsize=16)
def _compiled_sweep(method: Method, T: int, n: int, sweep: tuple[int, bool]):
    jax, _ = _jax()
    return jax.jit(jax.vmap(_chunk_fn(method, T, n, False, sweep)))


def uniforms_per_position(method: Method, inst: MarkovInstance) -> int:
    """The uniforms the engine draws per position and run for ``method`` on ``inst`` (the module docstring;
    SpecDec++ also draws one per slot of its pool, which holds about as many chains as are drafting past rejections)."""
    check_method(method)
    if _slotwise(method):
        tables = _Tables(inst, _jax()[1])
        return _slot_width(method.rows, _slot_tables(method, *tables.arrays[:2]) if tables.small(inst.V) else None)
    if _adaptive(method):  # 3 per run, and one per slot of the pool of chains drafting past rejections
        return 3
    if _positionwise(method):
        return 3
    if _trees(method):
        return tree_width(method, inst.T)
    return max(method.rows * method.draft_length(inst.T), 1) + 2


def positions_per_second_bound(width: int, n: int = 1 << 20, repeats: int = 3, *, partitionable: bool = False) -> float:
    """The random-number bound: uniforms per second of JAX's Threefry on this machine divided by ``width``.

    ``width`` is the uniforms a method draws per position and run (:func:`uniforms_per_position`). The engines draw
    with sequential counters (:func:`~speculab.sim.jax_common.sequential_stream`); ``partitionable=True`` measures
    JAX's default layout instead, for comparison.
    """
    import time

    jax, jnp = _jax()
    with jax.threefry_partitionable(bool(partitionable)):
        f = jax.jit(lambda k: jax.random.uniform(k, (n,)).sum())
        key = jax.random.key(0)
        f(key).block_until_ready()
        best = float("inf")
        for i in range(repeats):
            t0 = time.perf_counter()
            f(jax.random.fold_in(key, i)).block_until_ready()
            best = min(best, time.perf_counter() - t0)
    return n / best / width
