"""The numpy reference simulator of [Yin] Algorithm 2 on Markov instances.

Runs are simulated **position by position, vectorised across runs**: at every
position each run either verifies a fresh draft token, draws a bonus token, or
(after a rejection) starts a new round. This *lazy drafting* is exact in law:
a round's drafts beyond the first rejection are discarded unseen, so drawing
each draft only when it is verified gives the same joint law of outputs and
counts as drafting the whole chain up front (checked against a literal,
enumerate-every-branch implementation in ``tests/``). The number of drafts a
round samples, ``min(K, T − start)``, is known when the round starts.

Batch SD ([Yin] Alg. 4) differs only at a round's first position (the root),
where up to ``M`` draft tokens are tried against the recursive residuals; the
followed draft's later tokens are drawn lazily like SD's. A round samples
``M · min(K, T − start)`` draft tokens.
"""

from __future__ import annotations

import numpy as np

from speculab.methods import SD, Autoregressive, BatchSD, Biased, Fuzzy, RejectionDecoding
from speculab.sim.counts import Counts
from speculab.theory.instance import MarkovInstance
from speculab.theory.biased import biased_arrays
from speculab.theory.fuzzy import fuzzy_arrays
from speculab.theory.rejections import acceptance_array, rejection_array, sd_arrays

__all__ = ["simulate_numpy", "run_chunks", "sample_rows", "CHUNK"]

#: Runs per vectorised chunk (fixed, so a seed gives the same result with or without progress bars).
CHUNK = 1 << 15


def sample_rows(cum: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF sampling of one token per row.

    ``cum`` is ``(n, V)`` cumulative (unnormalised) weights and ``u ~ U[0, 1)``.
    Returns the smallest ``i`` with ``cum[i] > u * cum[-1]``: zero-weight tokens
    are never returned and the index never exceeds ``V − 1``.
    """
    return (cum <= (u * cum[:, -1])[:, None]).sum(axis=1)


def _chunk_autoregressive(inst: MarkovInstance, n: int, rng: np.random.Generator, keep: bool) -> Counts:
    T = inst.T
    cQ = np.cumsum(inst.Q, axis=-1)
    x = sample_rows(np.broadcast_to(np.cumsum(inst.rho), (n, inst.V)), rng.random(n))
    seq = np.empty((n, T + 1), dtype=np.int64) if keep else None
    if keep:
        seq[:, 0] = x
    for t in range(T):
        x = sample_rows(cQ[t, x], rng.random(n))
        if keep:
            seq[:, t + 1] = x
    full = np.full(n, T, dtype=np.int64)
    zero = np.zeros(n, dtype=np.int64)
    return Counts(
        rejections=full, oracle_calls=full.copy(), draft_calls=zero, accepted=zero.copy(),
        discarded=zero.copy(), bonus=zero.copy(), tokens=full.copy(),
        rejection_rate=np.ones(T), sequences=seq,
    )


def _batch_root(P_t: np.ndarray, cP_t: np.ndarray, Q_t: np.ndarray, a: np.ndarray, M: int, rng: np.random.Generator):
    """The root step of Algorithm 4 for runs whose previous token is ``a``.

    Draft ``m`` is accepted with probability ``min(1, q^m(x)/p(x))``, written
    without division as ``U · R_{m−1} p(x) < u_{m−1}(x)`` with the unnormalised
    residuals ``u_{m−1} = R_{m−1} q^m`` of :func:`speculab.theory.root_residual_chain`.

    Returns:
      ``(x, rejected)``: the output tokens and which runs rejected all ``M`` drafts.
    """
    x = np.empty(a.size, dtype=np.int64)
    pending = np.arange(a.size)
    u = Q_t[a].copy()  # (n, V): u_0 = q
    R = np.ones(a.size)
    for _ in range(M):
        pa = P_t[a[pending]]
        draft = sample_rows(cP_t[a[pending]], rng.random(pending.size))
        rows = np.arange(pending.size)
        ok = rng.random(pending.size) * R[pending] * pa[rows, draft] < u[pending, draft]
        x[pending[ok]] = draft[ok]
        pending, pa = pending[~ok], pa[~ok]
        if pending.size == 0:
            break
        u[pending] = np.maximum(u[pending] - R[pending, None] * pa, 0.0)
        R[pending] = u[pending].sum(axis=1)
        if np.any(R[pending] == 0):  # r_m = 0 means acceptance w.p. 1: only round-off gets here
            raise FloatingPointError("batch root: a draft was rejected against a residual equal to p (round-off)")
    rejected = np.zeros(a.size, dtype=bool)
    rejected[pending] = True
    if pending.size:
        x[pending] = sample_rows(np.cumsum(u[pending], axis=1), rng.random(pending.size))  # x ~ q^{M+1}
    return x, rejected


def _chunk_alg2(
    inst: MarkovInstance, B: np.ndarray, cR: np.ndarray, K: int, M: int, n: int, rng: np.random.Generator, keep: bool
) -> Counts:
    """``n`` runs of Algorithm 2 with acceptance ``B``, cumulative rejection rows ``cR``,
    lookahead ``K <= T`` and ``M`` drafts at each root (``M = 1``: no batch)."""
    T, V = inst.T, inst.V
    cP = np.cumsum(inst.P, axis=-1)
    cQ = np.cumsum(inst.Q, axis=-1)
    runs = np.arange(n)

    prev = sample_rows(np.broadcast_to(np.cumsum(inst.rho), (n, V)), rng.random(n))
    start = np.zeros(n, dtype=np.int64)  # position index where the current round began
    oracle = np.ones(n, dtype=np.int64)
    drafts = np.full(n, M * min(K, T), dtype=np.int64)
    accepted = np.zeros(n, dtype=np.int64)
    rejections = np.zeros(n, dtype=np.int64)
    bonus = np.zeros(n, dtype=np.int64)
    rate = np.zeros(T)
    seq = np.empty((n, T + 1), dtype=np.int64) if keep else None
    if keep:
        seq[:, 0] = prev

    for t in range(T):
        x = np.empty(n, dtype=np.int64)
        is_bonus = (t - start) == K  # all K drafts of this round accepted
        verify = ~is_bonus

        if is_bonus.any():
            x[is_bonus] = sample_rows(cQ[t, prev[is_bonus]], rng.random(int(is_bonus.sum())))
            bonus += is_bonus

        r = runs[verify]
        root_rej = np.empty(0, dtype=np.int64)
        if M > 1:
            at_root = start[r] == t
            root, r = r[at_root], r[~at_root]
            x[root], rejected = _batch_root(inst.P[t], cP[t], inst.Q[t], prev[root], M, rng)
            accepted[root[~rejected]] += 1
            root_rej = root[rejected]
        a = prev[r]
        draft = sample_rows(cP[t, a], rng.random(r.size))
        ok = rng.random(r.size) < B[t, a, draft]
        x[r[ok]] = draft[ok]
        accepted[r[ok]] += 1
        rej = r[~ok]
        if rej.size:
            x[rej] = sample_rows(cR[t, prev[rej]], rng.random(rej.size))
        rej = np.concatenate([rej, root_rej])
        rejections[rej] += 1
        rate[t] = rej.size / n

        # A round ends at a rejection or a bonus token; the next one starts at t + 1.
        ended = is_bonus.copy()
        ended[rej] = True
        if t + 1 < T and ended.any():
            start[ended] = t + 1
            oracle[ended] += 1
            drafts[ended] += M * min(K, T - t - 1)
        prev = x
        if keep:
            seq[:, t + 1] = x

    return Counts(
        rejections=rejections, oracle_calls=oracle, draft_calls=drafts, accepted=accepted,
        discarded=drafts - accepted, bonus=bonus, tokens=np.full(n, T, dtype=np.int64),
        rejection_rate=rate, sequences=seq,
    )


def simulate_numpy(inst, method, n_runs: int, rng: np.random.Generator, *, return_sequences=False, progress=False) -> Counts:
    """Simulate ``n_runs`` independent runs of ``method`` on ``inst``; see :func:`speculab.sim.simulate`."""
    if isinstance(method, Autoregressive):
        chunk = lambda n: _chunk_autoregressive(inst, n, rng, return_sequences)  # noqa: E731
    elif isinstance(method, (SD, BatchSD, RejectionDecoding, Biased, Fuzzy)):
        if isinstance(method, (SD, BatchSD)):
            B, R = sd_arrays(inst)
        elif isinstance(method, Biased):
            B, R = biased_arrays(inst, method.eps, method.rejection)
        elif isinstance(method, Fuzzy):
            B, R = fuzzy_arrays(inst, method.theta, method.div)
        else:
            B = acceptance_array(inst, method.b)
            R = rejection_array(inst, B, method.P)
        cR = np.cumsum(R, axis=-1)
        K = inst.T if method.K is None else min(method.K, inst.T)
        M = method.M if isinstance(method, BatchSD) else 1
        chunk = lambda n: _chunk_alg2(inst, B, cR, K, M, n, rng, return_sequences)  # noqa: E731
    else:
        raise ValueError(f"method {method!r} is not simulated by the Algorithm 2 engine")
    return run_chunks(chunk, n_runs, progress)


def run_chunks(chunk, n_runs: int, progress: bool = False) -> Counts:
    """Call ``chunk(n) -> Counts`` on fixed-size chunks of ``n_runs`` and join the results.

    The chunk size is fixed (:data:`CHUNK`), so a generator consumed inside
    ``chunk`` gives the same runs with or without a progress bar.
    """
    sizes = [min(CHUNK, n_runs - i) for i in range(0, n_runs, CHUNK)]
    if progress and len(sizes) > 1:
        from tqdm.auto import tqdm

        parts = [chunk(s) for s in tqdm(sizes, desc="simulating", unit="chunk", leave=False, disable=None)]
    else:
        parts = [chunk(s) for s in sizes]
    return parts[0] if len(parts) == 1 else type(parts[0]).concatenate(parts)
