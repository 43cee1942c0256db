"""The latency model against the clock on the tiny target with three drafts: the tiny draft, an n-gram, prompt lookup.

For each draft: fit the model (:func:`speculab.backends.latency.fit_latency`) on timed
runs of the first half of the held-out prompts (autoregressive decoding and SD with
K = 1, 2, 4, 8), then decode the other half with autoregressive decoding and SD with
K = 1..8 — each SD run timed right after an autoregressive run, so each measured
speed-up is a ratio of two adjacent runs, and the median of ``--repeats`` such ratios
is reported per K — and compare it with the speed-up the model predicts from those
runs' counts and block lengths (the spread of the repeated AR runs is printed: the
measurement's own noise). One prompt at a time (the setting the model describes),
32 new tokens, at temperature 1 and greedy (temperature 0: the drafts' argmax agrees
with the target's more often than their laws overlap); one run (timings on shared CPUs
are noisy: read the ratios of one run). A summary at the end gives, per draft and
temperature, the best K's measured speed-up and the worst error over K. Each K's ratio
is the median of ``--repeats`` adjacent pairs: with one repeat, a single stalled run
(another process on the cores) decides a ratio and the summary's best — the printed
spread of the AR clock says when that happened.

    python benchmarks/bench_latency.py [--tokens 32] [--threads 2] [--repeats 3] [--temperatures 1 0]
"""

from __future__ import annotations

import argparse

import torch

from speculab.backends import PromptLookupModel, Sampling, load_pair
from speculab.backends.latency import fit_latency, timed_decode
from speculab.backends.pair import default_prompts, training_ngram_draft
from speculab.methods import SD, Autoregressive


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="timed AR/SD pairs per K (the median ratio is reported)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.0], help="0: greedy")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tiny = load_pair("tiny")
    ngram = training_ngram_draft(tiny.tokenizer, 3)
    print(
        f"n-gram (n = 3) on the tiny pair's training text: {ngram.provenance['tokens']} tokens, "
        f"same text as the shipped pair: {ngram.provenance['same_as_shipped_pair']}"
    )
    drafts = {
        "tiny draft": tiny,
        "n-gram": load_pair(ngram, "tiny-target"),
        "prompt lookup + n-gram": load_pair(PromptLookupModel(tiny.vocab_size, 3, fallback=ngram), "tiny-target"),
    }
    prompts = default_prompts()
    fit_prompts, test_prompts = prompts[: len(prompts) // 2], prompts[len(prompts) // 2 :]
    summary = []
    for temperature in args.temperatures:
        sampling = Sampling(temperature=temperature)
        print(f"\n== temperature {temperature:g}" + (" (greedy)" if sampling.greedy else ""))
        for name, pair in drafts.items():
            result = _against_the_clock(name, pair, sampling, fit_prompts, test_prompts, args)
            summary.append((temperature, name, *result))
    print("\nsummary: draft, temperature: best measured SD speed-up over AR (K), worst |error| of the predicted one")
    for temperature, name, (best, best_K), worst in summary:
        print(f"   {name:24s} T = {temperature:g}: {best:.2f}× (K = {best_K}), worst |error| {worst:.1%}")


def _against_the_clock(name, pair, sampling, fit_prompts, test_prompts, args):
    """Fit the latency model on ``fit_prompts``, then time AR/SD pairs on ``test_prompts`` for K = 1..8 and print
    measured vs predicted speed-ups; returns ``((best speed-up, its K), worst |error|)``."""
    run = dict(max_new_tokens=args.tokens, sampling=sampling)
    calib = [
        timed_decode(pair, fit_prompts, m, key=1, **run) for m in (Autoregressive(), SD(K=1), SD(K=2), SD(K=4), SD(K=8))
    ]
    model = fit_latency(calib)
    t = model.target
    print(
        f"\n{name}: t_draft(1) = {model.draft(1) * 1e3:.3f} ms, t_target(k) = "
        + ", ".join(f"{k}: {t(k) * 1e3:.3f}" for k in (1, 2, 3, 5, 9))
        + f" ms (line {t.base * 1e3:.3f} + "
        f"{t.per_token * 1e3:.3f} k, R² {t.r2:.2f}); loop {model.per_round * 1e3:.3f} ms per round + "
        f"{model.per_draft * 1e3:.3f} per draft + {model.per_token * 1e3:.3f} per token + "
        f"{model.per_run * 1e3:.1f} per run + {model.per_drafting_run * 1e3:.1f} per drafting run"
        + (f" (not identified, in the others: {', '.join(model.unidentified)})" if model.unidentified else "")
    )
    print(
        f"   {'K':>2}  {'AR ms/tok':>9}  {'ms/token':>8}  {'predicted':>9}  {'speed-up':>8}  {'predicted':>9}  "
        f"{'error':>6}  accepted/round"
    )
    worst, best, ar_latencies = 0.0, (0.0, 0), []
    for K in range(1, 9):  # AR timed just before each SD run: each measured ratio is of two adjacent runs
        ratios = []
        for _ in range(args.repeats):
            ar = timed_decode(pair, test_prompts, Autoregressive(), key=2, **run)
            sd = timed_decode(pair, test_prompts, SD(K=K), key=2, **run)
            ratios.append((ar.latency / sd.latency, ar.latency, sd.latency))
            ar_latencies.append(ar.latency)
        measured, ar_latency, sd_latency = sorted(ratios)[len(ratios) // 2]  # the median ratio's pair
        c = sd.result.counts  # the same key: the same counts in every repeat
        predicted_sd = model.latency(c, sd.result.rounds)
        predicted = model.latency(ar.result.counts, ar.result.rounds) / predicted_sd
        err = predicted / measured - 1
        worst = max(worst, abs(err))
        best = max(best, (measured, K))
        print(
            f"   {K:>2}  {ar_latency * 1e3:9.3f}  {sd_latency * 1e3:8.3f}  {predicted_sd * 1e3:9.3f}  "
            f"{measured:7.2f}×  {predicted:8.2f}×  {err:+6.1%}  {c.accepted.sum() / c.oracle_calls.sum():.2f}"
        )
    print(
        f"   the same AR runs' clock varied by {max(ar_latencies) / min(ar_latencies) - 1:.1%} over their "
        f"{len(ar_latencies)} repeats"
    )
    print(f"   worst |error| over K = 1..8: {worst:.1%}")
    return best, worst


if __name__ == "__main__":
    main()
