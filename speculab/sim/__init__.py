"""Monte-Carlo simulators of speculative decoding on Markov instances.

``simulate(inst, method, n_runs, key)`` returns :class:`Counts` with per-run
counts, means and standard errors. Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

from speculab._validate import as_generator, as_positive_int
from speculab.methods import SD, Autoregressive, BatchSD, Biased, Fuzzy, Method, RejectionDecoding, SpecDecPP, Sprinter
from speculab.sim.counts import Counts, Estimate
from speculab.theory.instance import MarkovInstance

from speculab.sim.specdecpp import TableHead, miscalibrated_head, noisy_head, oracle_head  # noqa: E402

__all__ = [
    "simulate",
    "TableHead",
    "oracle_head",
    "noisy_head",
    "miscalibrated_head",
    "Counts",
    "Estimate",
    "Autoregressive",
    "SD",
    "BatchSD",
    "RejectionDecoding",
    "Biased",
    "Fuzzy",
    "Sprinter",
    "SpecDecPP",
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
) -> Counts:
    """Simulate independent runs of a decoding method on a Markov instance.

    Args:
      inst: the draft/target pair (:class:`~speculab.theory.MarkovInstance`).
      method: ``Autoregressive()``, ``SD(K=None | int)``, ``BatchSD(M, K=None)``,
        ``RejectionDecoding(b, P=None, K=None)`` ([Yin] Alg. 3, 1, 4, 2),
        ``Biased(eps, "opt" | "uno")``, ``Fuzzy(theta, div)``, ``Sprinter(...)``, ``SpecDecPP(h, ...)``.
      n_runs: number of independent runs (>= 1).
      key: an int seed or a ``np.random.Generator`` (consumed, never reset).
      engine: ``"numpy"`` (the reference engine).
      return_sequences: also return the ``(n_runs, T + 1)`` sampled tokens.
      progress: show a progress bar on long simulations.

    Returns:
      :class:`Counts` — per-run rejections, oracle calls, draft calls, accepted
      and discarded drafts, bonus tokens and per-position rejection rates.

    Example:
      >>> inst = MarkovInstance.random(T=50, V=7, key=0)
      >>> c = simulate(inst, SD(), n_runs=10_000, key=1)
      >>> e = c.estimate("rejections")   # compare with sd_expected_rejections(inst).total
    """
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"inst must be a MarkovInstance; got {type(inst).__name__}")
    n_runs = as_positive_int(n_runs, "n_runs")
    if engine != "numpy":
        raise ValueError(f"engine must be 'numpy' (the only engine built so far); got {engine!r}")
    rng = as_generator(key)
    if isinstance(method, Sprinter):
        from speculab.sim.sprinter import simulate_sprinter as run
    elif isinstance(method, SpecDecPP):
        from speculab.sim.specdecpp import simulate_specdecpp as run
    else:
        from speculab.sim.numpy_engine import simulate_numpy as run
    return run(inst, method, n_runs, rng, return_sequences=return_sequences, progress=progress)
