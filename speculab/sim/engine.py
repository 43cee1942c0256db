"""The one simulation loop: every method's :class:`~speculab.methods.Step` runs inside it.

Runs are simulated **position by position, vectorised across runs**: at each
position the method's step produces the token of every run and says how it was
made (accepted draft, correction, bonus, target sample) and what it cost (target
calls, drafted tokens); this loop owns everything else — the prompt token,
chunking, the progress bar, the sequences and the :class:`~speculab.counts.Counts`.
"""

from __future__ import annotations

import numpy as np

from speculab import kernels
from speculab.counts import BONUS, DRAFT, Counts, rejected
from speculab.methods.base import Step

__all__ = ["run_steps", "CHUNK", "CHUNK_BYTES", "chunk_size"]

#: Most runs per vectorised chunk.
CHUNK = 1 << 15

#: Memory budget of one ``(runs, V)`` float64 array of a chunk (a step gathers each run's cumulative row to sample
#: from it): 256 MiB, which :data:`CHUNK` runs reach at ``V = 1024``.
CHUNK_BYTES = 1 << 28


def chunk_size(V: int) -> int:
    """Runs per chunk on a vocabulary of ``V`` tokens: :data:`CHUNK`, fewer where a ``(runs, V)`` float64 array
    would exceed :data:`CHUNK_BYTES` (a function of ``V`` only, so a seed gives the same runs with or without a
    progress bar; up to ``V = 1024`` the chunks are as they always were)."""
    return max(1, min(CHUNK, CHUNK_BYTES // (8 * V)))


def _chunk(step: Step, inst, n: int, rng: np.random.Generator, keep: bool) -> Counts:
    T, V = inst.T, inst.V
    prev = kernels.sample_cumulative(np.broadcast_to(np.cumsum(inst.rho), (n, V)), rng.random(n))
    state = step.start(n)
    kinds = np.empty((T, n), dtype=np.int8)  # how each position was produced; counted once at the end
    oracle, drafts = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    extra = {name: np.zeros(n, dtype=np.int64) for name in step.extra}
    seq = np.empty((n, T + 1), dtype=np.int64) if keep else None
    if keep:
        seq[:, 0] = prev
    for t in range(T):
        e = step(t, prev, state, rng)
        kinds[t] = e.kinds
        oracle += e.oracle_calls
        drafts += e.draft_calls
        for name, value in e.extra.items():
            extra[name] += value
        prev = e.tokens
        if keep:
            seq[:, t + 1] = prev
    rej = rejected(kinds)  # (T, n)
    return Counts.of_runs(rejections=np.count_nonzero(rej, axis=0), oracle_calls=oracle, draft_calls=drafts,
                          accepted=np.count_nonzero(kinds == DRAFT, axis=0),
                          bonus=np.count_nonzero(kinds == BONUS, axis=0), T=T,
                          rejected_per_position=np.count_nonzero(rej, axis=1), sequences=seq, extra=extra)


def run_steps(step: Step, inst, n_runs: int, rng: np.random.Generator, *, return_sequences: bool = False,
              progress: bool = False, journal=None) -> Counts:
    """Run ``n_runs`` independent runs of ``step`` on ``inst`` in chunks (:func:`chunk_size`) and join them.

    The chunk size depends only on the vocabulary, so the generator gives the same runs
    with or without a progress bar. With a :class:`~speculab.sim.checkpoint.Journal`, the
    chunks it holds are taken from it (the generator set to its state after them) and each
    new chunk is recorded in it as it finishes.
    """
    chunk = chunk_size(inst.V)
    sizes = [min(chunk, n_runs - i) for i in range(0, n_runs, chunk)]
    parts = []
    if journal is not None and journal.parts:
        parts = list(journal.parts)
        if [p.n_runs for p in parts] != sizes[: len(parts)]:
            raise ValueError(f"checkpoint {journal.path} holds chunks of other sizes than this simulation's")
        rng.bit_generator.state = journal.state
        sizes = sizes[len(parts):]
    if progress and len(sizes) > 1:
        from tqdm.auto import tqdm

        sizes = tqdm(sizes, desc="simulating", unit="chunk", leave=False, disable=None)
    for s in sizes:
        parts.append(_chunk(step, inst, s, rng, return_sequences))
        if journal is not None:
            journal.add(parts[-1], rng)
    return parts[0] if len(parts) == 1 else Counts.concatenate(parts)
