"""The JAX simulation engine against the numpy engine, measured in one run.

On a [Yin] App. F instance (T = 50, V = 7, uniform rows) for SD (K = ∞), batch SD
(M = 8), biased (ε = 0.1) and SpecDec++ (h = 0.8, max_K = 20, oracle head): token positions
per second of each engine (median of repeats, after one call that compiles — compile
time reported apart), their ratio, and the random-number bound of the JAX engine
(JAX's uniforms per second divided by the uniforms the method draws per position,
:func:`~speculab.sim.jax_engine.uniforms_per_position`), measured in the same run. Then
sweeps in one compiled call (:func:`speculab.sim.jax_engine.simulate_sweep`) vs one numpy
call per point: 100 values of the biased method's ε and 20 of SpecDec++'s h.

    python benchmarks/bench_jax.py [--runs 1000000] [--repeats 3] [--sweep-runs 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from speculab.methods import SD, BatchSD, Biased, SpecDecPP
from speculab.sim import simulate
from speculab.sim.jax_engine import positions_per_second_bound, simulate_sweep, uniforms_per_position
from speculab.theory import MarkovInstance


def _median_seconds(fn, repeats):
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sweep-runs", type=int, default=20_000)
    args = ap.parse_args(argv)
    inst = MarkovInstance.random(T=50, V=7, key=0, row_law="uniform")
    positions = args.runs * inst.T
    for method in (SD(), BatchSD(M=8), Biased(0.1), SpecDecPP(0.8)):
        t0 = time.perf_counter()
        simulate(inst, method, args.runs, key=0, engine="jax")
        first = time.perf_counter() - t0
        jx = _median_seconds(lambda r: simulate(inst, method, args.runs, key=r + 1, engine="jax"), args.repeats)
        npy = _median_seconds(lambda r: simulate(inst, method, args.runs, key=r + 1), args.repeats)
        bound = positions_per_second_bound(uniforms_per_position(method, inst))
        print(
            f"{method!r:42s} jax {positions / jx / 1e6:6.1f} M pos/s, numpy {positions / npy / 1e6:6.1f} M pos/s: "
            f"{npy / jx:.2f}×; compile ≈ {first - jx:.1f} s; RNG bound {bound / 1e6:.0f} M pos/s "
            f"(jax at {positions / jx / bound:.0%} of it)",
            flush=True,
        )
    grids = {
        "ε": [Biased(float(e)) for e in np.linspace(0.0, 0.5, 100)],
        "h": [SpecDecPP(float(h)) for h in np.linspace(0.0, 1.0, 20)],
    }
    for name, methods in grids.items():
        simulate_sweep(inst, methods, args.sweep_runs, key=0)  # compile
        sweep = _median_seconds(lambda r: simulate_sweep(inst, methods, args.sweep_runs, key=r + 1), args.repeats)
        loop = _median_seconds(lambda r: [simulate(inst, m, args.sweep_runs, key=r + 1) for m in methods], args.repeats)
        print(
            f"{len(methods)}-point {name} sweep × {args.sweep_runs} runs: one jax call {sweep:.2f} s, "
            f"{len(methods)} numpy calls {loop:.2f} s: {loop / sweep:.2f}×",
            flush=True,
        )


if __name__ == "__main__":
    main()
