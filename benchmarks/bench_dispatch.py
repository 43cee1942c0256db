"""Torch operations dispatched per batched round, at several numbers of rows (what a GPU is asked to launch).

A round's operations must not grow with the rows (``tests/test_batched.py`` asserts it at 16 and 1,024). This
prints the counts of the first rounds — before any row can finish (EOS is turned off, 10 tokens, at most three
per round) — for a few methods, on the tiny pair on the CPU (the count does not depend on the device).

    python benchmarks/bench_dispatch.py [--rows 16 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from speculab.backends import batched, decode, load_pair
from speculab.backends.pair import ModelPair, default_prompts
from speculab.methods import SD, Autoregressive, BatchSD, BlockVerification


def counts(pair, method, rows: int, rounds: int) -> list[int]:
    """Operations dispatched in each of the first ``rounds`` rounds of ``rows`` prompts."""
    seen, original = [], batched._Batch.round

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen[-1] += 1
            return func(*args, **(kwargs or {}))

    def round(self):
        seen.append(0)
        with Count():
            original(self)

    prompts = default_prompts()
    batched._Batch.round = round
    try:
        decode(pair, [prompts[i % len(prompts)] for i in range(rows)], method, max_new_tokens=10, key=1)
    finally:
        batched._Batch.round = original
    return seen[:rounds]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[16, 1024])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if min(args.rows) < 1 or not 1 <= args.rounds <= 3:
        ap.error("--rows must be >= 1 and --rounds in 1..3 (the rounds before a row can finish)")
    ModelPair.eos_token_id = property(lambda self: None)  # no EOS: no row finishes early
    pair = load_pair("tiny", device="cpu")
    print(f"operations per round (first {args.rounds} rounds), by rows: {args.rows}")
    for method in (Autoregressive(), SD(K=2), BatchSD(2, K=2), BlockVerification(2)):
        row = "  ".join(f"{rows}: {counts(pair, method, rows, args.rounds)}" for rows in args.rows)
        print(f"  {method!r:<28} {row}")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
