"""The JAX simulation engine against the numpy engine, measured in one run.

On a [Yin] App. F instance (T = 50, V = 7, uniform rows) for SD (K = ∞), batch SD
(M = 8), biased (ε = 0.1) and SpecDec++ (h = 0.8, max_K = 20, oracle head): token positions
per second of each engine (median of repeats, after one call that compiles — compile
time reported apart), their ratio, and the random-number bound of the JAX engine
(JAX's uniforms per second divided by the uniforms the method draws per position,
:func:`~speculab.sim.jax_engine.uniforms_per_position`), measured in the same run; and JAX's
uniforms per second with the Threefry counters the engines use (sequential) and with JAX's
default (partitionable), where most of the engines' time goes. Then
sweeps in one compiled call (:func:`speculab.sim.jax_engine.simulate_sweep`) vs one numpy
call per point: 100 values of the biased method's ε and 20 of SpecDec++'s h.

    python benchmarks/bench_jax.py [--runs 200000] [--repeats 3] [--sweep-runs 20000] [--out benchmarks/tables]

With ``--out DIR`` it writes ``DIR/bench_jax.json`` (every time and bound, the settings, and where and how they were
measured) and ``DIR/bench_jax.md`` (the tables docs/measurements.md includes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from speculab.methods import SD, BatchSD, Biased, SpecDecPP
from speculab.sim import simulate
from speculab.sim.jax_engine import positions_per_second_bound, simulate_sweep, uniforms_per_position
from speculab.theory import MarkovInstance

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402
from _tables import sig  # noqa: E402

#: the thread settings recorded with the results (the numpy engine's timings depend on them)
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _median_seconds(fn, repeats):
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sweep-runs", type=int, default=20_000)
    ap.add_argument("--out", help="write bench_jax.json and bench_jax.md into this folder, for the documentation")
    args = ap.parse_args(argv)
    _tables.at_least_one(ap, args, "--runs", "--repeats", "--sweep-runs")

    env = _tables.environment()
    import jax

    inst = MarkovInstance.random(T=50, V=7, key=0, row_law="uniform")
    positions = args.runs * inst.T
    result = {
        "runs": args.runs,
        "repeats": args.repeats,
        "sweep_runs": args.sweep_runs,
        "instance": {"T": inst.T, "V": inst.V, "row_law": "uniform", "key": 0},
        "positions": positions,
        "jax_device": str(jax.devices()[0]),
        "jax_device_kind": jax.devices()[0].device_kind,
        "threads": {k: os.environ.get(k) for k in THREAD_VARIABLES},
        "methods": [],
        "sweeps": [],
        "uniforms_per_s": {  # JAX's uniforms per second with either Threefry counter layout (width 1: uniforms)
            layout: positions_per_second_bound(1, partitionable=layout == "partitionable")
            for layout in ("sequential", "partitionable")
        },
    }
    rates = result["uniforms_per_s"]
    print(
        f"JAX uniforms: {rates['sequential'] / 1e6:.0f} M/s with sequential Threefry counters (the engines'), "
        f"{rates['partitionable'] / 1e6:.0f} M/s with partitionable ones (JAX's default)",
        flush=True,
    )
    for method in (SD(), BatchSD(M=8), Biased(0.1), SpecDecPP(0.8)):
        t0 = time.perf_counter()
        simulate(inst, method, args.runs, key=0, engine="jax")
        first = time.perf_counter() - t0
        jx = _median_seconds(lambda r: simulate(inst, method, args.runs, key=r + 1, engine="jax"), args.repeats)
        npy = _median_seconds(lambda r: simulate(inst, method, args.runs, key=r + 1), args.repeats)
        width = uniforms_per_position(method, inst)
        bound = positions_per_second_bound(width)
        result["methods"].append(
            {
                "method": repr(method),
                "first_call_s": first,
                "jax_s": jx,
                "numpy_s": npy,
                "uniforms_per_position": width,
                "rng_bound_positions_per_s": bound,
            }
        )
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
        result["sweeps"].append(
            {
                "parameter": name,
                "method": type(methods[0]).__name__,
                "points": len(methods),
                "runs": args.sweep_runs,
                "jax_s": sweep,
                "numpy_s": loop,
            }
        )
        print(
            f"{len(methods)}-point {name} sweep × {args.sweep_runs} runs: one jax call {sweep:.2f} s, "
            f"{len(methods)} numpy calls {loop:.2f} s: {loop / sweep:.2f}×",
            flush=True,
        )
    if args.out:
        _tables.write(args.out, "bench_jax", result, markdown, env, _tables.argv(argv))


def markdown(result: dict) -> str:
    """The documentation's tables of a run: each method's rates in both engines, then the sweeps."""
    positions = result["positions"]
    lines = [
        "| method | JAX M positions/s | numpy M positions/s | ratio | compile s | RNG bound M positions/s | "
        "JAX's share of the bound |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["methods"]:
        jax_rate, bound = positions / r["jax_s"], r["rng_bound_positions_per_s"]
        lines.append(
            f"| `{r['method']}` | {sig(jax_rate / 1e6)} | {sig(positions / r['numpy_s'] / 1e6)} | "
            f"{r['numpy_s'] / r['jax_s']:.2f}× | {sig(r['first_call_s'] - r['jax_s'])} | {sig(bound / 1e6)} | "
            f"{jax_rate / bound:.0%} |"
        )
    sweeps = [
        "| sweep | points | runs | one JAX call s | numpy calls s | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["sweeps"]:
        sweeps.append(
            f"| {r['method']} {r['parameter']} | {r['points']} | {r['runs']:,} | {sig(r['jax_s'])} | "
            f"{sig(r['numpy_s'])} | {r['numpy_s'] / r['jax_s']:.2f}× |"
        )
    inst, n = result["instance"], result["repeats"]
    timing = f"median of {n} repeats" if n > 1 else "one repeat"
    threads = ", ".join(f"{k}={v}" for k, v in result["threads"].items() if v is not None) or "no thread variable set"
    device, kind = result["jax_device"], result["jax_device_kind"]
    device += "" if kind.lower() in device.lower() else f" ({kind})"
    note = (
        f"T = {inst['T']}, V = {inst['V']} ({inst['row_law']} rows), {result['runs']:,} runs per method and "
        f"{result['sweep_runs']:,} per sweep point, {timing} after a call that compiles (compile s: the first call's "
        f"time less the median); JAX on {device}; {threads}."
    )
    rates = result.get("uniforms_per_s")
    if rates:
        note += (
            f" JAX's uniforms per second: {sig(rates['sequential'] / 1e6)} M with the sequential Threefry counters the "
            f"engines draw with, {sig(rates['partitionable'] / 1e6)} M with the partitionable ones, JAX's default "
            f"({rates['sequential'] / rates['partitionable']:.1f}×)."
        )
    return "\n".join(lines) + "\n\n" + "\n".join(sweeps) + "\n\n" + note + "\n"


if __name__ == "__main__":
    main()
