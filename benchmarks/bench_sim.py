"""Simulator throughput: the vectorised numpy engine vs a plain per-run Python loop.

Both simulate speculative decoding (K = ∞) on the [Yin] Fig. 2(a) instance
(T = 50, V = 7). Reports the median over repeats of each and their ratio,
measured in one run (timings on shared CPUs are noisy; the ratio is what to read).

    python benchmarks/bench_sim.py [--runs 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from speculab.sim import SD, simulate
from speculab.methods.sd import sd_rule
from speculab.theory import MarkovInstance, sd_expected_rejections


def loop_baseline(inst: MarkovInstance, n_runs: int, rng: np.random.Generator) -> np.ndarray:
    """The straightforward simulator: one Python loop per run and per position."""
    B, R = sd_rule(inst.P, inst.Q)
    out = np.empty(n_runs)
    for i in range(n_runs):
        prev = rng.choice(inst.V, p=inst.rho)
        rej = 0
        for t in range(inst.T):
            x = rng.choice(inst.V, p=inst.P[t, prev])
            if rng.random() >= B[t, prev, x]:
                x = rng.choice(inst.V, p=R[t, prev])
                rej += 1
            prev = x
        out[i] = rej
    return out


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--baseline-runs", type=int, default=1_000, help="runs for the slow loop (scaled per run)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    inst = MarkovInstance.random(50, 7, np.random.default_rng(10), row_law="uniform")
    rng = np.random.default_rng(0)
    fast = _median_seconds(lambda: simulate(inst, SD(), args.runs, rng), args.repeats)
    slow = _median_seconds(lambda: loop_baseline(inst, args.baseline_runs, rng), max(1, args.repeats // 2))
    fast_rate, slow_rate = args.runs / fast, args.baseline_runs / slow
    check = loop_baseline(inst, 2000, np.random.default_rng(1)).mean()
    print(
        f"instance: T=50, V=7 (Fig. 2(a)); T1 = {sd_expected_rejections(inst).rejections:.3f}, loop baseline mean = "
        f"{check:.3f} (2000 runs)"
    )
    print(f"numpy engine : {args.runs:>7,} runs in {fast:.3f} s (median of {args.repeats}) -> {fast_rate:,.0f} runs/s")
    print(f"python loop  : {args.baseline_runs:>7,} runs in {slow:.3f} s -> {slow_rate:,.0f} runs/s")
    print(f"speed-up     : {fast_rate / slow_rate:,.0f}x")


if __name__ == "__main__":
    main()
