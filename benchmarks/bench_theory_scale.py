"""Exact theory at real-vocabulary scale: T1, T3 (M = 8) and the lookahead counts (K = 4).

For each instance: wall time (median of repeats) and peak memory allocated by the
computation (``tracemalloc``, which sees numpy's buffers) of

* a stationary instance, T = 1000, V = 1000 (its (T, V, V) stacks would be 8 GB each);
* a context-free instance, T = 1000, V = 50,000 (2·10¹³ bytes each);
* a non-stationary random instance, T = 10⁴, V = 50 (stored in full: 200 MB per stack);
* the same stationary instance stored compactly and in full at T = V = 300, the
  ratio measured in one run (the full form stores every step's (V, V) kernel).

    python benchmarks/bench_theory_scale.py [--repeats 3] [--small-only] [--out benchmarks/tables]

Set ``OPENBLAS_NUM_THREADS=1`` on a shared machine: with other processes on the
cores, OpenBLAS threads contending for them make the products many times slower.
With ``--out DIR`` it writes ``DIR/bench_theory_scale.json`` (every value, time and peak, the thread settings,
and where and how they were measured) and ``DIR/bench_theory_scale.md`` (the tables docs/measurements.md includes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from speculab.theory import MarkovInstance, batch_expected_rejections, lookahead_counts, sd_expected_rejections
from speculab.theory.instance import compact as _compact

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402
from _tables import sig  # noqa: E402

#: the thread settings recorded with the results (OpenBLAS's decides the timings on a shared machine)
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SMALL = "stationary T=V=300"

COUNTS = {
    "T1": lambda inst: sd_expected_rejections(inst).rejections,
    "T3 (M=8)": lambda inst: batch_expected_rejections(inst, 8).rejections,
    "L (K=4)": lambda inst: lookahead_counts(inst, 4).oracle_calls,
}


def _instances():
    rng = np.random.default_rng(0)
    P, Q = rng.dirichlet(np.ones(1000), size=1000), rng.dirichlet(np.ones(1000), size=1000)
    yield "stationary T=1000 V=1000", MarkovInstance.stationary(P, Q, T=1000)
    yield (
        "context-free T=1000 V=50000",
        MarkovInstance.context_free(rng.dirichlet(np.ones(50_000)), rng.dirichlet(np.ones(50_000)), T=1000),
    )
    yield "random T=10000 V=50", MarkovInstance.random(10_000, 50, key=0)


def _measure(fn, inst, repeats):
    times, value = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn(inst)
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    fn(inst)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"value": float(value), "seconds": statistics.median(times), "peak_mb": peak / 2**20}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--small-only",
        action="store_true",
        help="only the T = V = 300 comparison (runs on versions without compact instances)",
    )
    ap.add_argument(
        "--out", help="write bench_theory_scale.json and bench_theory_scale.md into this folder, for the documentation"
    )
    args = ap.parse_args(argv)
    _tables.at_least_one(ap, args, "--repeats")

    env = _tables.environment()
    result = {
        "repeats": args.repeats,
        "small_only": args.small_only,
        "threads": {k: os.environ.get(k) for k in THREAD_VARIABLES},
        "instances": [],
        "comparison": {"instance": SMALL, "rows": []},
    }
    for label, inst in [] if args.small_only else _instances():
        for name, fn in COUNTS.items():
            r = _measure(fn, inst, args.repeats)
            result["instances"].append({"instance": label, "quantity": name, **r})
            print(
                f"{label:30s} {name:9s} {r['value']:12.4f}  {r['seconds']:7.3f} s  peak {r['peak_mb']:8.1f} MB",
                flush=True,
            )
    rng = np.random.default_rng(1)
    P, Q = rng.dirichlet(np.ones(300), size=300), rng.dirichlet(np.ones(300), size=300)
    compact = MarkovInstance.stationary(P, Q, T=300)
    full = MarkovInstance(np.ascontiguousarray(compact.P), np.ascontiguousarray(compact.Q), compact.rho)
    for name, fn in COUNTS.items():
        c, f = _measure(fn, compact, args.repeats), _measure(fn, full, args.repeats)
        result["comparison"]["rows"].append({"quantity": name, "compact": c, "full": f})
        print(
            f"{SMALL} {name:9s} compact {c['seconds']:.3f} s / {c['peak_mb']:.1f} MB, "
            f"full {f['seconds']:.3f} s / {f['peak_mb']:.1f} MB: {f['seconds'] / c['seconds']:.1f}× faster; "
            f"same value: {_same(c, f)}",
            flush=True,
        )
    stored = {k: sum(_compact(a).nbytes for a in (i.P, i.Q)) / 2**20 for k, i in (("compact", compact), ("full", full))}
    result["comparison"]["storage_mb"] = stored
    print(
        f"{SMALL} storage of P and Q: compact {stored['compact']:.1f} MB, full {stored['full']:.1f} MB "
        "(the peaks above exclude it)",
        flush=True,
    )
    if args.out:
        argv = _tables.argv(argv)
        _tables.write(args.out, "bench_theory_scale", result, markdown, env, argv)


def _same(compact: dict, full: dict) -> bool:
    """Whether the compact and the full instance gave the same value (to 1e-9)."""
    return abs(compact["value"] - full["value"]) < 1e-9


def markdown(result: dict) -> str:
    """The documentation's tables of a run: each instance's counts, then the compact-vs-full comparison."""
    parts = []
    if result["instances"]:
        lines = ["| instance | quantity | value | median s | peak MB |", "| --- | --- | --- | --- | --- |"]
        for r in result["instances"]:
            lines.append(
                f"| {r['instance']} | {r['quantity']} | {r['value']:.4f} | {sig(r['seconds'])} | {sig(r['peak_mb'])} |"
            )
        parts.append("\n".join(lines))
    cmp = result["comparison"]
    lines = [
        f"| quantity, {cmp['instance']} | compact s | compact MB | full s | full MB | speed-up | same value |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in cmp["rows"]:
        c, f = r["compact"], r["full"]
        lines.append(
            f"| {r['quantity']} | {sig(c['seconds'])} | {sig(c['peak_mb'])} | {sig(f['seconds'])} | "
            f"{sig(f['peak_mb'])} | {f['seconds'] / c['seconds']:.2f}× | {'yes' if _same(c, f) else 'no'} |"
        )
    parts.append("\n".join(lines))
    stored = cmp["storage_mb"]
    parts.append(
        f"Storage of P and Q ({cmp['instance']}, not in the peaks above): compact {sig(stored['compact'])} MB, "
        f"full {sig(stored['full'])} MB."
    )
    threads = ", ".join(f"{k}={v}" for k, v in result["threads"].items() if v is not None) or "no thread variable set"
    n = result["repeats"]
    timing = f"Median of {n} repeats" if n > 1 else "One repeat"
    parts.append(
        f"{timing}; peak memory allocated by the computation (`tracemalloc`), the instance's own storage excluded; "
        f"{threads}."
    )
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    main()
