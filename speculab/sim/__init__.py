"""Monte-Carlo simulators of speculative decoding on Markov instances.

``simulate(inst, method, n_runs, key)`` runs any registered method from its laws (the numpy engine,
:mod:`speculab.sim.engine`, or the JAX one, :mod:`speculab.sim.jax_engine`) and returns :class:`Counts` with
per-run counts, means and standard errors.
Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

from speculab._validate import as_generator, as_positive_int
from speculab.counts import Counts, Estimate
from speculab.methods import (
    SD,
    Autoregressive,
    BatchSD,
    Biased,
    BlockVerification,
    Fuzzy,
    Method,
    RejectionDecoding,
    SpecDecPP,
    Sprinter,
)
from speculab.methods.specdecpp import TableHead, miscalibrated_head, noisy_head, oracle_head
from speculab.methods.capabilities import drafting_instance
from speculab.sim import engine as _engine
from speculab.sim._laws import check_laws
from speculab.theory.instance import MarkovInstance
from speculab.theory._checks import MESSAGE

__all__ = [
    "simulate",
    "simulate_sweep",
    "Counts",
    "Estimate",
    "Autoregressive",
    "SD",
    "BatchSD",
    "RejectionDecoding",
    "Biased",
    "Fuzzy",
    "BlockVerification",
    "Sprinter",
    "SpecDecPP",
    "TableHead",
    "oracle_head",
    "noisy_head",
    "miscalibrated_head",
]


def simulate(
    inst: MarkovInstance,
    method: Method,
    n_runs: int,
    key,
    *,
    engine: str = "numpy",
    return_sequences: bool = False,
    progress: bool = False,
    checkpoint=None,
    resume: bool = False,
) -> Counts:
    """Simulate independent runs of a decoding method on a Markov instance.

    Args:
      inst: the draft/target pair (:class:`~speculab.theory.MarkovInstance`).
      method: any registered method, e.g. ``Autoregressive()``, ``SD(K=None | int)``,
        ``BatchSD(M, K=None)``, ``RejectionDecoding(b, rejection=None, K=None)`` ([Yin] Alg. 3, 1, 4, 2),
        ``Biased(eps, "opt" | "uno")``, ``Fuzzy(theta, div)``, ``Sprinter(...)``, ``SpecDecPP(h, ...)``,
        ``BlockVerification(K)`` (``speculab methods`` lists them all).
      n_runs: number of independent runs (>= 1).
      key: an int seed, a ``numpy.random.Generator`` or a ``torch.Generator`` (consumed, never reset).
      engine: ``"numpy"`` (the reference engine) or ``"jax"`` (:mod:`speculab.sim.jax_engine`:
        jitted, for every registered method: from its round law, position law or adaptive drafting; ``key``
        may then also be a JAX key).
      return_sequences: also return the ``(n_runs, T + 1)`` sampled tokens.
      progress: show a progress bar on long simulations (numpy engine; a JAX chunk is one compiled call).
      checkpoint: a file to record each finished chunk in (JSON lines, :mod:`speculab.sim.checkpoint`; numpy
        engine, without sequences), so an interrupted simulation can be resumed.
      resume: continue the simulation recorded in ``checkpoint`` (the same instance, method, ``n_runs`` and
        key): its finished chunks are read back, the rest is run, and the result equals an uninterrupted run's.
        Inside :func:`speculab.sim.checkpoint.resumable` every simulation without ``checkpoint`` is checkpointed
        in that block's folder (how ``speculab repro NAME --resume`` resumes a reproduction).

    Returns:
      :class:`Counts` — per-run rejections, oracle calls, draft calls, accepted
      and discarded drafts, bonus tokens and per-position rejection rates.

    Example:
      >>> inst = MarkovInstance.random(T=50, V=7, key=0)
      >>> c = simulate(inst, SD(), n_runs=10_000, key=1)
      >>> abs(c.estimate("rejections").z(SD().expected(inst).rejections)) < 5   # [Yin] Thm 1
      True
    """
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"{MESSAGE}; got {type(inst).__name__}")
    if not isinstance(method, Method):
        raise ValueError(f"method must be a speculab method (e.g. SD(), BatchSD(4)); got {method!r}")
    n_runs = as_positive_int(n_runs, "n_runs")
    check_laws(method, inst)
    if engine == "jax":
        from speculab.sim.jax_engine import simulate_jax

        if checkpoint is not None or resume:
            raise ValueError("checkpoint and resume are for the numpy engine (a JAX chunk is one compiled call)")
        if return_sequences:
            return simulate_jax(inst, method, n_runs, key, return_sequences=True)
        run = lambda k: [simulate_jax(inst, method, n_runs, k)]  # noqa: E731
        return _recorded_jax("simulate", [inst], [method], n_runs, key, run)[0]
    if engine != "numpy":
        raise ValueError(f"engine must be 'numpy' or 'jax'; got {engine!r}")
    rng = as_generator(key)
    drafted = drafting_instance(method, inst)  # the law the drafts come from (DraftLaw: greedy drafts)
    walk = _engine.walker(method, drafted)
    journal = None
    if checkpoint is None and not resume and not return_sequences:  # inside checkpoint.resumable, if any
        from speculab.sim.checkpoint import active_checkpoint

        checkpoint, resume = active_checkpoint(inst, method, n_runs, rng) or (None, False)
    if checkpoint is not None:
        from speculab.sim.checkpoint import Journal, instance_digest
        from speculab.sim.sense import limits

        if return_sequences:
            raise ValueError("checkpoint records counts only; it cannot be combined with return_sequences=True")
        header = {
            "instance": instance_digest(inst),
            "method": repr(method),
            "n_runs": n_runs,
            "chunk": _engine.chunk_runs(walk),
            "rng_state": rng.bit_generator.state,
        }
        journal = Journal(checkpoint, header, resume=bool(resume), limits=limits(method, inst.T))
    elif resume:
        raise ValueError("resume=True needs the checkpoint file to resume")
    return _engine.run(
        walk, drafted, n_runs, rng, return_sequences=return_sequences, progress=progress, journal=journal
    )


def simulate_sweep(inst, methods, n_runs: int, key) -> list[Counts]:
    """A grid of one method's parameters or a stack of instances in one compiled JAX call per chunk.

    See :func:`speculab.sim.jax_engine.simulate_sweep` (needs JAX). Inside
    :func:`speculab.sim.checkpoint.resumable` a finished sweep is recorded and read back on resumption.
    """
    from speculab.sim.jax_engine import simulate_sweep as sweep

    insts = list(inst) if isinstance(inst, (list, tuple)) else [inst]
    return _recorded_jax("sweep", insts, methods, n_runs, key, lambda k: sweep(inst, methods, n_runs, k))


def _recorded_jax(kind: str, insts, methods, n_runs, key, run) -> list[Counts]:
    """``run(jax_key)``, recorded whole inside :func:`speculab.sim.checkpoint.resumable` (a JAX key is a value, so
    the call — instances, methods, runs, key — names its record; a generator key is turned into one first)."""
    import jax
    import numpy as np

    from speculab._validate import as_jax_key
    from speculab.sim.checkpoint import instance_digest, recorded
    from speculab.sim.sense import limits

    key = as_jax_key(key)
    listed = list(methods) if isinstance(methods, (list, tuple)) else [methods]
    points = max(len(insts), len(listed))
    if (
        points == 0
        or {len(insts), len(listed)} - {1, points}
        or not all(isinstance(i, MarkovInstance) for i in insts)
        or not all(isinstance(m, Method) for m in listed)
        or not (isinstance(n_runs, int) and not isinstance(n_runs, bool) and n_runs >= 1)
    ):
        return run(key)  # not a call it can run: its own checks say why
    digests = [instance_digest(i) for i in insts]
    what = [kind, digests, methods, n_runs, np.asarray(jax.random.key_data(key)).tolist()]
    pairs = zip(insts * (points // len(insts)), listed * (points // len(listed)))
    expect = [(limits(m, i.T), n_runs) for i, m in pairs]  # one Counts of n_runs runs a point
    return recorded(what, lambda: run(key), expect)
