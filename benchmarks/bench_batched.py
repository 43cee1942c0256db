"""Batched decoding (every prompt a row of one batch) against one prompt at a time, on the tiny pair.

256 prompts (the 32 held-out prompts, 8 times) × 64 new tokens, SD with K = 4 and
autoregressive decoding, sampled at temperature 1: tokens per second of the batched
path (median over repeats) and of the one-prompt path (on the first ``--one`` prompts:
its rate does not depend on how many prompts follow), their ratio measured in one run,
and the mean rejections of both (the same method: they estimate one expectation).

    python benchmarks/bench_batched.py [--prompts 256] [--tokens 64] [--one 32] [--repeats 3] [--one-repeats 1]
                                       [--threads 2]
                                       [--device cuda] [--dtype bfloat16] [--out benchmarks/tables]

On a GPU the timings synchronise the device before reading the clock. With ``--out DIR`` it writes
``DIR/bench_batched.json`` (every rate, time and mean, the settings, and where and how they were measured) and
``DIR/bench_batched.md`` (the table docs/measurements.md includes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from speculab.backends import decode, load_pair
from speculab.backends.pair import default_prompts
from speculab.backends.warp import Sampling
from speculab.methods import SD, Autoregressive

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402
from _tables import sig  # noqa: E402


def _rate(pair, prompts, method, tokens, batch_size, repeats):
    times, res = [], None
    for r in range(repeats):
        pair.synchronize()
        t0 = time.perf_counter()
        res = decode(pair, prompts, method, max_new_tokens=tokens, key=r, batch_size=batch_size)
        pair.synchronize()
        times.append(time.perf_counter() - t0)
    return int(res.counts.tokens.sum()), statistics.median(times), res


def _rejections(res) -> dict:
    """Mean rejections per prompt, their standard error and the prompts."""
    r = res.counts.rejections
    return {"mean": float(r.mean()), "se": float(r.std(ddof=1) / np.sqrt(r.size)), "prompts": int(r.size)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--one", type=int, default=32, help="prompts the one-prompt path decodes")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one-repeats", type=int, default=1, help="repeats of the one-prompt path (median)")
    _tables.add_threads(ap, default=2)
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, …")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument(
        "--out", help="write bench_batched.json and bench_batched.md into this folder, for the documentation"
    )
    args = ap.parse_args(argv)
    if min(args.prompts, args.one) < 2 or min(args.tokens, args.repeats, args.one_repeats) < 1:
        ap.error("--prompts and --one need >= 2 (a standard error), --tokens, --repeats and --one-repeats >= 1")
    env = _tables.environment()
    _tables.use_threads(args.threads)
    pair = load_pair("tiny", device=args.device, dtype=getattr(torch, args.dtype))
    decode(pair, default_prompts()[:2], SD(K=4), max_new_tokens=4, key=0)  # warm-up: kernels, allocator
    base = default_prompts()
    prompts = (base * (args.prompts // len(base) + 1))[: args.prompts]
    settings = ("prompts", "tokens", "one", "repeats", "one_repeats", "threads", "dtype")
    result = {
        "pair": "tiny",
        "device": str(pair.device),
        **{k: getattr(args, k) for k in settings},
        "temperature": Sampling().temperature,
        "methods": [],
    }
    print(
        f"tiny pair on {pair.device}, {args.threads} threads: {args.prompts} prompts × {args.tokens} tokens "
        f"(one-prompt path on {args.one} prompts, median of {args.one_repeats}; batched median of {args.repeats})"
    )
    print(
        f"{'method':>10}  {'batched tok/s':>13}  {'one-prompt tok/s':>16}  {'ratio':>6}  mean rejections batched / one"
    )
    for method in (SD(K=4), Autoregressive()):
        n_fast, t_fast, a = _rate(pair, prompts, method, args.tokens, None, args.repeats)
        n_slow, t_slow, b = _rate(pair, prompts[: args.one], method, args.tokens, 1, args.one_repeats)
        fast, slow = n_fast / t_fast, n_slow / t_slow
        label = type(method).__name__ + ("" if method.draft_length(2) == 0 else f" K={method.K}")
        ra, rb = _rejections(a), _rejections(b)
        result["methods"].append(
            {
                "method": repr(method),
                "label": label,
                "batched": {"tokens": n_fast, "seconds": t_fast, "tokens_per_second": fast, "rejections": ra},
                "one_prompt": {"tokens": n_slow, "seconds": t_slow, "tokens_per_second": slow, "rejections": rb},
            }
        )
        print(
            f"{label:>10}  {fast:13.1f}  {slow:16.1f}  {fast / slow:5.1f}×  {ra['mean']:.2f} ± {ra['se']:.2f}"
            f" / {rb['mean']:.2f} ± {rb['se']:.2f}"
        )
    if args.out:
        _tables.write(args.out, "bench_batched", result, markdown, env, _tables.argv(argv))


def markdown(result: dict) -> str:
    """The documentation's table of a run: each method's rate batched and one prompt at a time, and its rejections."""
    lines = [
        "| method | batched tok/s | one-prompt tok/s | ratio | mean rejections, batched | mean rejections, one prompt "
        "at a time |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["methods"]:
        a, b = r["batched"], r["one_prompt"]
        ra, rb = a["rejections"], b["rejections"]
        lines.append(
            f"| {r['label']} | {sig(a['tokens_per_second'])} | {sig(b['tokens_per_second'])} | "
            f"{a['tokens_per_second'] / b['tokens_per_second']:.2f}× | {ra['mean']:.2f} ± {ra['se']:.2f} | "
            f"{rb['mean']:.2f} ± {rb['se']:.2f} |"
        )

    def timing(n):
        return "one run" if n == 1 else f"the median of {n} repeats"

    note = (
        f"The {result['pair']} pair on {result['device']} ({result['dtype']}, {result['threads']} threads), "
        f"{result['prompts']} prompts × {result['tokens']} new tokens at temperature {result['temperature']:g}: "
        f"batched, {timing(result['repeats'])}; one prompt at a time, on the first {result['one']} prompts, "
        f"{timing(result['one_repeats'])}. Rejections: mean per prompt ± its standard error."
    )
    return "\n".join(lines) + "\n\n" + note + "\n"


if __name__ == "__main__":
    main()
