"""Batched decoding (every prompt a row of one batch) against one prompt at a time, on the tiny pair.

256 prompts (the 32 held-out prompts, 8 times) × 64 new tokens, SD with K = 4 and
autoregressive decoding, sampled at temperature 1: tokens per second of the batched
path (median over repeats) and of the one-prompt path (on the first ``--one`` prompts:
its rate does not depend on how many prompts follow), their ratio measured in one run,
and the mean rejections of both (the same method: they estimate one expectation).

    python benchmarks/bench_batched.py [--prompts 256] [--tokens 64] [--one 32] [--repeats 3] [--one-repeats 1]
                                       [--threads 2]
                                       [--device cuda] [--dtype bfloat16] [--json FILE]

On a GPU the timings synchronise the device before reading the clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from speculab.backends import decode, load_pair
from speculab.backends.pair import default_prompts
from speculab.methods import SD, Autoregressive


def _rate(pair, prompts, method, tokens, batch_size, repeats):
    times, res = [], None
    for r in range(repeats):
        pair.synchronize()
        t0 = time.perf_counter()
        res = decode(pair, prompts, method, max_new_tokens=tokens, key=r, batch_size=batch_size)
        pair.synchronize()
        times.append(time.perf_counter() - t0)
    n = int(res.counts.tokens.sum())
    return n / statistics.median(times), res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--one", type=int, default=32, help="prompts the one-prompt path decodes")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one-repeats", type=int, default=1, help="repeats of the one-prompt path (median)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, …")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the rates as JSON")
    args = ap.parse_args(argv)
    if min(args.prompts, args.one) < 2 or min(args.tokens, args.repeats, args.one_repeats, args.threads) < 1:
        ap.error(
            "--prompts and --one need >= 2 (a standard error), --tokens, --repeats, --one-repeats and --threads >= 1"
        )
    torch.set_num_threads(args.threads)
    pair = load_pair("tiny", device=args.device, dtype=getattr(torch, args.dtype))
    decode(pair, default_prompts()[:2], SD(K=4), max_new_tokens=4, key=0)  # warm-up: kernels, allocator
    base = default_prompts()
    prompts = (base * (args.prompts // len(base) + 1))[: args.prompts]
    print(
        f"tiny pair on {pair.device}, {args.threads} threads: {args.prompts} prompts × {args.tokens} tokens "
        f"(one-prompt path on {args.one} prompts, median of {args.one_repeats}; batched median of {args.repeats})"
    )
    print(
        f"{'method':>10}  {'batched tok/s':>13}  {'one-prompt tok/s':>16}  {'ratio':>6}  mean rejections batched / one"
    )
    rows = []
    for method in (SD(K=4), Autoregressive()):
        fast, a = _rate(pair, prompts, method, args.tokens, None, args.repeats)
        slow, b = _rate(pair, prompts[: args.one], method, args.tokens, 1, args.one_repeats)
        rows.append({"method": repr(method), "batched_tokens_per_second": fast, "one_prompt_tokens_per_second": slow})
        ra, rb = a.counts.rejections, b.counts.rejections
        print(
            f"{type(method).__name__ + ('' if method.draft_length(2) == 0 else f' K={method.K}'):>10}  "
            f"{fast:13.1f}  {slow:16.1f}  {fast / slow:5.1f}×  {ra.mean():.2f} ± "
            f"{ra.std(ddof=1) / np.sqrt(ra.size):.2f}"
            f" / {rb.mean():.2f} ± {rb.std(ddof=1) / np.sqrt(rb.size):.2f}"
        )
    if args.json:
        settings = {
            k: getattr(args, k) for k in ("prompts", "tokens", "one", "repeats", "one_repeats", "threads", "dtype")
        }
        with open(args.json, "w") as f:
            json.dump({"device": str(pair.device), "torch": torch.__version__, **settings, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
