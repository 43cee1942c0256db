"""The latency model against the clock on the tiny target with three drafts: the tiny draft, an n-gram, prompt lookup.

For each draft: fit the model (:func:`speculab.backends.latency.fit_latency`) on timed
runs of the first half of the held-out prompts (autoregressive decoding and SD with
K = 1, 2, 4, 8), then decode the other half with autoregressive decoding and SD with
K = 1..8 — autoregressive decoding timed again just before each K, so each measured
speed-up is a ratio of two adjacent runs — and compare it, per K, with the speed-up the
model predicts from those runs' counts (the spread of the repeated AR runs is printed:
the measurement's own noise). One prompt at a time (the setting
the model describes), temperature 1, 32 new tokens; one run (timings on shared CPUs are
noisy: read the ratios of one run).

    python benchmarks/bench_latency.py [--tokens 32] [--threads 2]
"""

from __future__ import annotations

import argparse

import torch

from speculab.backends import PromptLookupModel, load_pair
from speculab.backends.latency import fit_latency, timed_decode
from speculab.backends.pair import default_prompts, training_ngram_draft
from speculab.methods import SD, Autoregressive


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tiny = load_pair("tiny")
    ngram = training_ngram_draft(tiny.tokenizer, 3)
    print(f"n-gram (n = 3) on the tiny pair's training text: {ngram.provenance['tokens']} tokens, "
          f"same text as the shipped pair: {ngram.provenance['same_as_shipped_pair']}")
    drafts = {"tiny draft": tiny, "n-gram": load_pair(ngram, "tiny-target"),
              "prompt lookup + n-gram": load_pair(PromptLookupModel(tiny.vocab_size, 3, fallback=ngram), "tiny-target")}
    prompts = default_prompts()
    fit_prompts, test_prompts = prompts[: len(prompts) // 2], prompts[len(prompts) // 2:]
    for name, pair in drafts.items():
        calib = [timed_decode(pair, fit_prompts, m, max_new_tokens=args.tokens, key=1)
                 for m in (Autoregressive(), SD(K=1), SD(K=2), SD(K=4), SD(K=8))]
        model = fit_latency(calib)
        print(f"\n{name}: t_draft(k) = {model.draft.base * 1e3:.3f} + {model.draft.per_token * 1e3:.3f} k ms "
              f"(R² {model.draft.r2:.2f}), t_target(k) = {model.target.base * 1e3:.3f} + "
              f"{model.target.per_token * 1e3:.3f} k ms (R² {model.target.r2:.2f}), loop {model.per_round * 1e3:.3f} ms "
              f"per round + {model.per_draft * 1e3:.3f} per draft + {model.per_token * 1e3:.3f} per token + "
              f"{model.per_run * 1e3:.1f} per run")
        print(f"   {'K':>2}  {'AR ms/tok':>9}  {'ms/token':>8}  {'predicted':>9}  {'speed-up':>8}  {'predicted':>9}  "
              f"{'error':>6}  accepted/round")
        worst, ar_latencies = 0.0, []
        for K in range(1, 9):  # AR timed just before each K: the measured ratio is of two adjacent runs
            ar = timed_decode(pair, test_prompts, Autoregressive(), max_new_tokens=args.tokens, key=2)
            sd = timed_decode(pair, test_prompts, SD(K=K), max_new_tokens=args.tokens, key=2)
            c = sd.result.counts
            measured = ar.latency / sd.latency
            predicted = model.latency(ar.result.counts) / model.latency(c)
            err = predicted / measured - 1
            worst = max(worst, abs(err))
            ar_latencies.append(ar.latency)
            print(f"   {K:>2}  {ar.latency * 1e3:9.3f}  {sd.latency * 1e3:8.3f}  {model.latency(c) * 1e3:9.3f}  "
                  f"{measured:7.2f}×  {predicted:8.2f}×  {err:+6.1%}  {c.accepted.sum() / c.oracle_calls.sum():.2f}")
        print(f"   the same AR runs' clock varied by {max(ar_latencies) / min(ar_latencies) - 1:.1%} over the 8 repeats")
        print(f"   worst |error| over K = 1..8: {worst:.1%}")


if __name__ == "__main__":
    main()
