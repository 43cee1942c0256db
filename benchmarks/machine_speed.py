"""The machine's own speed from one stretch of a minute to the next: the same work timed again and again.

    python benchmarks/machine_speed.py --threads 1 --out benchmarks/tables

Two pieces of fixed work, each repeated for ``--seconds``: torch's product of two 256 × 256 matrices (200 at a
time), and the tiny pair's autoregressive decoding of 16 prompts × 32 tokens, one prompt at a time as a plan times it
(:func:`~speculab.backends.latency.timed_decode`, the same seed each time: the same tokens, the same calls). For
each: the rate of every repetition, the median per window of ``--window`` seconds, and the spread — the fastest
window's median over the slowest's. Nothing in the work changes from one repetition to the next; what changes is the
machine (the 1-minute load average per window, the run's own work included, says whether other work came and went).
``speculab plan`` fits its times in one stretch and confirms them in another minutes later, so its absolute tokens per
second move with the machine between the two; its speed-ups over autoregressive decoding, timed alongside, move much
less (docs/plan.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402

NAME = "machine_speed"


def repeat(work, seconds: float, clock=time.perf_counter, load=lambda: os.getloadavg()[0]) -> list[tuple]:
    """``(start, rate, load)`` of each call of ``work()`` (which returns the units it did) for ``seconds``: the start
    from the first call's, the 1-minute load average as it started."""
    out, t0 = [], clock()
    while clock() - t0 < seconds:
        start, before = clock(), load()
        units = work()
        out.append((start - t0, units / (clock() - start), before))
    return out


def windows(runs: list[tuple], width: float, column: int = 1) -> list[float]:
    """The median of ``column`` (1: the rate, 2: the load) over the repetitions that started in each window of
    ``width`` seconds (empty windows left out)."""
    by: dict[int, list[float]] = {}
    for run in runs:
        by.setdefault(int(run[0] // width), []).append(run[column])
    return [statistics.median(values) for _, values in sorted(by.items())]


def summary(name: str, unit: str, runs: list[tuple], width: float) -> dict:
    rates = [r for _, r, _ in runs]
    medians = windows(runs, width)
    return {
        "work": name,
        "unit": unit,
        "repetitions": len(runs),
        "rates": rates,
        "starts": [s for s, _, _ in runs],
        "loads": [load for *_, load in runs],
        "window_medians": medians,
        "window_loads": windows(runs, width, column=2),
        "spread": max(medians) / min(medians),
        "min": min(rates),
        "median": statistics.median(rates),
        "max": max(rates),
    }


def measure(seconds: float, width: float) -> dict:
    import torch

    from speculab.backends import load_pair
    from speculab.backends.latency import timed_decode
    from speculab.backends.pair import default_prompts
    from speculab.methods import Autoregressive

    a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))

    def products() -> int:
        for _ in range(200):
            a @ a
        return 200

    pair = load_pair("tiny")
    prompts = [pair.tokenizer.encode(t) for t in default_prompts()[:16]]

    def decoding() -> int:
        return int(timed_decode(pair, prompts, Autoregressive(), max_new_tokens=32, key=0).result.counts.tokens.sum())

    decoding()  # warm-up: the first calls cost more
    return {
        "seconds": seconds,
        "window": width,
        "works": [
            summary("256 × 256 matrix products (torch)", "product", repeat(products, seconds), width),
            summary("tiny pair, autoregressive, 16 prompts × 32 tokens", "token", repeat(decoding, seconds), width),
        ],
    }


def markdown(result: dict) -> str:
    lines = _tables.markdown_table(
        [
            "work",
            "repetitions",
            "rate: min / median / max",
            f"median per {result['window']:g} s window",
            "load average per window",
            "spread",
        ],
        [
            [
                w["work"],
                w["repetitions"],
                f"{w['min']:,.0f} / {w['median']:,.0f} / {w['max']:,.0f} {w['unit']}s/s",
                ", ".join(f"{m:,.0f}" for m in w["window_medians"]),
                ", ".join(f"{load:.1f}" for load in w["window_loads"]),
                f"{w['spread']:.2f}×",
            ]
            for w in result["works"]
        ],
    )
    return (
        "\n".join(lines)
        + "\n\nSpread: the fastest window's median rate over the slowest's, the same work each time, "
        + f"{result['seconds']:g} s of it.\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=90.0, help="how long each work is repeated (default 90)")
    ap.add_argument("--window", type=float, default=10.0, help="the windows' width in seconds (default 10)")
    _tables.add_threads(ap)
    ap.add_argument("--out", default=None, help="write NAME.json and NAME.md here")
    args = ap.parse_args(argv)
    if not 0 < args.seconds < float("inf"):
        ap.error(f"argument --seconds: must be above 0 and finite; got {args.seconds:g}")
    if not 0 < args.window <= args.seconds:
        ap.error(f"argument --window: must be above 0 and at most --seconds ({args.seconds:g}); got {args.window:g}")
    _tables.use_threads(args.threads)
    env = _tables.environment()
    result = measure(args.seconds, args.window)
    if args.out:
        _tables.write(args.out, NAME, result, markdown, env, _tables.argv(argv))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
