"""What the two JAX engines share (:mod:`speculab.sim.jax_engine`, :mod:`speculab.sim.jax_adaptive`): an instance's
kernels on the device, a slotwise method's one-slot tables, the per-run tallies and the budgets.

Both engines read the budgets from here (``jax_common.CHUNK``, …), so a test that changes one changes it for both.
"""

from __future__ import annotations

import numpy as np

from speculab._validate import import_jax
from speculab.counts import BONUS, DRAFT, Counts, rejected
from speculab.methods.base import Method
from speculab.methods.capabilities import RootTable, has, root_table
from speculab.theory.instance import MarkovInstance, compact

__all__ = ["CHUNK", "SCAN_BUDGET", "TABLE_BUDGET", "sequential_stream"]

#: Runs per compiled call (fixed for an instance and method, so a key gives the same result however many runs are
#: asked for in total); fewer when every run carries rows of the vocabulary inside the scan (:func:`_chunk_runs`).
CHUNK = 1 << 16
#: Most vocabulary-sized entries the runs of one chunk may carry inside the scan together.
SCAN_BUDGET = 1 << 24


def _jax():
    return import_jax("engine='jax'")


def sequential_stream():
    """The context both engines draw their random numbers in: JAX's Threefry with its sequential counters
    (``jax.threefry_partitionable(False)``), whatever the caller's global setting, so that the same key gives the
    same counts under either. On a CPU the sequential layout draws uniforms several times faster than the
    partitionable one, JAX's default (``benchmarks/bench_jax.py`` measures both); random numbers are most of the
    engines' work. A draw whose elements must not depend on its size (the adaptive engine's pool) is made
    partitionable inside it (:func:`size_free_uniforms`)."""
    return _jax()[0].threefry_partitionable(False)


def size_free_uniforms(key, size: int, dtype):
    """``size`` uniforms whose element ``i`` is the same for every ``size > i`` (partitionable Threefry)."""
    jax, _ = _jax()
    with jax.threefry_partitionable(True):
        return jax.random.uniform(key, (size,), dtype=dtype)


class _Tables:
    """The instance's compact kernels on the device and how to read a row ``(position, context)``."""

    def __init__(self, inst: MarkovInstance, jnp):
        P, Q = compact(inst.P), compact(inst.Q)
        dtype = jnp.zeros(0).dtype  # JAX's default float
        self.arrays = (jnp.asarray(P, dtype=dtype), jnp.asarray(Q, dtype=dtype), jnp.asarray(inst.rho, dtype=dtype))
        self.shapes = (P.shape, Q.shape)

    def small(self, V: int) -> bool:
        """Whether per-token tables of this instance (``T' A' V²`` entries) fit :data:`TABLE_BUDGET`."""
        return int(np.prod(np.broadcast_shapes(*self.shapes)[:-1])) * V**2 <= TABLE_BUDGET

    @staticmethod
    def row(A, t, a):
        """``A[t, a]`` of a compact ``(T', A', V)`` stack: an axis of size 1 (``T' = 1`` or ``A' = 1``, broadcast) is
        read at 0 whatever the index (``mode="clip"``)."""
        return A.at[t, a].get(mode="clip")


#: Largest ``T' A' V²`` for which a slotwise method's one-slot law is tabulated before the scan
#: (per context and drafted token); above it the law is evaluated inside the scan.
TABLE_BUDGET = 1 << 24


def _slot_tables(method: Method, P, Q, root: bool | None = None) -> dict:
    """The one-slot law of a slotwise method for every ``(position, context, drafted token)``, computed once.

    Returns the cumulative rows of the draft (``cP``) and of the target (``cQ``, for
    bonus tokens), the probability that drafting ``x`` is accepted (``accept``,
    ``(T', A', V)``) and the cumulative correction weights after a refusal
    (``cC``, ``(T', A', V)``: a slotwise method's do not depend on the refused draft) — read off
    :meth:`~speculab.methods.Method.round_law` of a one-slot, one-row round, so the
    tables are the method's own rule, evaluated once instead of at every position.

    With ``root`` (default: for more than one draft row) and the method's
    :class:`~speculab.methods.capabilities.RootTable`, also the root's outcome as one
    cumulative table ``root_cJ`` ``(T', A', 2V)``: entry ``x < V`` that the root accepts a
    draft equal to ``x``, entry ``V + y`` that every row is refused and ``y`` is output.
    That is all a round's later slots and its counts depend on (they follow the accepted
    row whatever its index, and a round drafts ``M min(K, remaining)`` tokens), so the
    root costs one uniform instead of ``M + 2``.
    """
    jax, jnp = _jax()
    shape = jnp.broadcast_shapes(P.shape, Q.shape)
    P, Q = jnp.broadcast_to(P, shape), jnp.broadcast_to(Q, shape)
    V = shape[-1]
    x = jnp.broadcast_to(jnp.arange(V, dtype=jnp.int32)[:, None, None], (*shape[:-1], V, 1, 1))
    p = jnp.broadcast_to(P[..., None, None, None, :], (*shape[:-1], V, 1, 1, V))
    q = jnp.broadcast_to(Q[..., None, None, None, :], (*shape[:-1], V, 1, 2, V))
    law = method.round_law(p, q, x, bonus=False)
    cC = jnp.cumsum(law.correction[..., 0, 0, :], axis=-1)  # (T', A', V, V): one row per refused draft
    if not bool(jnp.all(cC == cC[..., :1, :])):  # decided on the values, outside jit
        raise ValueError(
            f"{type(method).__name__} is slotwise but its correction after a refused draft depends on "
            "the draft; a slotwise method's must not (capabilities.Slotwise: Algorithm 2's rule)"
        )
    cC = cC[..., 0, :]
    tables = {"cP": jnp.cumsum(P, axis=-1), "cQ": jnp.cumsum(Q, axis=-1), "accept": law.outcome[..., 0, 1], "cC": cC}
    wanted = method.rows > 1 if root is None else root
    if wanted and has(method, RootTable):
        tables["root_cJ"] = jnp.cumsum(jnp.asarray(root_table(method, P, Q), dtype=P.dtype), axis=-1)
    return tables


def _tally(counts, x, kind, new_round, d):
    """Add one position's outcome to the per-run counts ``(5, n)``; also return the rejections ``(n,)``."""
    _, jnp = _jax()
    rej = rejected(kind)
    return counts + jnp.stack([rej, new_round, d, kind == DRAFT, kind == BONUS]).astype(jnp.int32), rej


def _check_table_size(entries: int, what: str, method: Method) -> None:
    if entries > TABLE_BUDGET:
        raise ValueError(
            f"engine='jax' runs {type(method).__name__} from {what} of {entries} entries, over "
            f"TABLE_BUDGET = {TABLE_BUDGET}: use engine='numpy'"
        )


def _counts(counts: np.ndarray, rejected_per_position: np.ndarray, seq, T: int, extra: tuple = ()) -> Counts:
    rejections, oracle, drafts, accepted, bonus = counts
    return Counts.of_runs(
        rejections=rejections,
        oracle_calls=oracle,
        draft_calls=drafts,
        accepted=accepted,
        bonus=bonus,
        T=T,
        rejected_per_position=rejected_per_position,
        sequences=None if seq is None else np.ascontiguousarray(np.asarray(seq).T, dtype=np.int64),
        extra={name: np.full(rejections.size, T, dtype=np.int64) for name in extra},
    )
