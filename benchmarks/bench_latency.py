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
    python benchmarks/bench_latency.py --out benchmarks/tables  # also bench_latency.json and bench_latency.md

With ``--out DIR`` it writes ``DIR/bench_latency.json`` (the settings, each fitted model's terms, every K's
timings and speed-ups, the summary, and where and when it was measured) and ``DIR/bench_latency.md`` (the
documentation's tables, :func:`markdown` of that JSON).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from speculab.backends import PromptLookupModel, Sampling, load_pair
from speculab.backends.latency import fit_latency, timed_decode
from speculab.backends.pair import default_prompts, training_ngram_draft
from speculab.methods import SD, Autoregressive

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402

#: The lookaheads timed against the model, the runs it is fitted on, and the call sizes whose fitted time is printed.
KS = tuple(range(1, 9))
CALIBRATION_KS = (1, 2, 4, 8)
TARGET_SIZES = (1, 2, 3, 5, 9)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    _tables.add_threads(ap, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="timed AR/SD pairs per K (the median ratio is reported)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.0], help="0: greedy")
    ap.add_argument(
        "--out", help="write bench_latency.json and bench_latency.md into this folder, for the documentation"
    )
    args = ap.parse_args(argv)
    _tables.at_least_one(ap, args, "--tokens", "--repeats")

    env = _tables.environment()
    _tables.use_threads(args.threads)
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
    result = {
        "settings": {
            "tokens": args.tokens,
            "threads": args.threads,
            "repeats": args.repeats,
            "temperatures": list(args.temperatures),
            "fit_prompts": len(fit_prompts),
            "test_prompts": len(test_prompts),
            "Ks": list(KS),
            "calibration_Ks": list(CALIBRATION_KS),
            "target_sizes": list(TARGET_SIZES),
        },
        "ngram": {
            "n": 3,
            "training_tokens": ngram.provenance["tokens"],
            "same_as_shipped_pair": ngram.provenance["same_as_shipped_pair"],
        },
        "by_temperature": [],
        "summary": [],
    }
    for temperature in args.temperatures:
        sampling = Sampling(temperature=temperature)
        print(f"\n== temperature {temperature:g}" + (" (greedy)" if sampling.greedy else ""))
        runs = {
            name: _against_the_clock(name, pair, sampling, fit_prompts, test_prompts, args)
            for name, pair in drafts.items()
        }
        result["by_temperature"].append({"temperature": temperature, "greedy": sampling.greedy, "drafts": runs})
        for name, run in runs.items():
            result["summary"].append(
                {
                    "draft": name,
                    "temperature": temperature,
                    "best_speedup": run["best_speedup"],
                    "best_K": run["best_K"],
                    "worst_abs_error": run["worst_abs_error"],
                    "ar_clock_spread": run["ar_clock_spread"],
                }
            )
    print("\nsummary: draft, temperature: best measured SD speed-up over AR (K), worst |error| of the predicted one")
    for s in result["summary"]:
        print(
            f"   {s['draft']:24s} T = {s['temperature']:g}: {s['best_speedup']:.2f}× (K = {s['best_K']}), "
            f"worst |error| {s['worst_abs_error']:.1%}"
        )
    if args.out:
        path = _tables.write(args.out, "bench_latency", result, markdown, env, _tables.argv(argv))
        print(f"\nwrote {path} and {path.with_suffix('.md')}")


def _against_the_clock(name, pair, sampling, fit_prompts, test_prompts, args) -> dict:
    """Fit the latency model on ``fit_prompts``, then time AR/SD pairs on ``test_prompts`` for K = 1..8 and print
    measured vs predicted speed-ups; returns the fitted model's terms, every K's row, the best K's speed-up, the
    worst |error| and the AR clock's spread (times in ms)."""
    run = dict(max_new_tokens=args.tokens, sampling=sampling)
    methods = [Autoregressive(), *(SD(K=K) for K in CALIBRATION_KS)]
    model = fit_latency([timed_decode(pair, fit_prompts, m, key=1, **run) for m in methods])
    t = model.target
    terms = {
        "t_draft_1_ms": model.draft(1) * 1e3,
        "t_target_ms": {str(k): t(k) * 1e3 for k in TARGET_SIZES},
        "line_base_ms": t.base * 1e3,
        "line_per_token_ms": t.per_token * 1e3,
        "line_r2": t.r2,
        "per_round_ms": model.per_round * 1e3,
        "per_draft_ms": model.per_draft * 1e3,
        "per_token_ms": model.per_token * 1e3,
        "per_run_ms": model.per_run * 1e3,
        "per_drafting_run_ms": model.per_drafting_run * 1e3,
        "per_drafting_round_ms": model.per_drafting_round * 1e3,
        "unidentified": list(model.unidentified),
        "target_table": {"sizes": [int(k) for k in t.sizes], "means_ms": [m * 1e3 for m in t.means]},
        "draft_table": {"sizes": [int(k) for k in model.draft.sizes], "means_ms": [m * 1e3 for m in model.draft.means]},
    }
    print(
        f"\n{name}: t_draft(1) = {terms['t_draft_1_ms']:.3f} ms, t_target(k) = "
        + ", ".join(f"{k}: {ms:.3f}" for k, ms in terms["t_target_ms"].items())
        + f" ms (line {terms['line_base_ms']:.3f} + "
        f"{terms['line_per_token_ms']:.3f} k, R² {t.r2:.2f}); loop {terms['per_round_ms']:.3f} ms per round + "
        f"{terms['per_draft_ms']:.3f} per draft + {terms['per_token_ms']:.3f} per token + "
        f"{terms['per_run_ms']:.1f} per run + {terms['per_drafting_run_ms']:.1f} per drafting run + "
        f"{terms['per_drafting_round_ms']:.3f} per drafting round"
        + (f" (not identified, in the others: {', '.join(model.unidentified)})" if model.unidentified else "")
    )
    print(
        f"   {'K':>2}  {'AR ms/tok':>9}  {'ms/token':>8}  {'predicted':>9}  {'speed-up':>8}  {'predicted':>9}  "
        f"{'error':>6}  accepted/round"
    )
    worst, best, ar_latencies, rows = 0.0, (0.0, 0), [], []
    for K in KS:  # AR timed just before each SD run: each measured ratio is of two adjacent runs
        ratios = []
        for _ in range(args.repeats):
            ar = timed_decode(pair, test_prompts, Autoregressive(), key=2, **run)
            sd = timed_decode(pair, test_prompts, SD(K=K), key=2, **run)
            ratios.append((ar.latency / sd.latency, ar.latency, sd.latency))
            ar_latencies.append(ar.latency)
        measured, ar_latency, sd_latency = sorted(ratios)[(len(ratios) - 1) // 2]  # the median (lower middle) ratio
        c = sd.result.counts  # the same key: the same counts in every repeat
        predicted_sd = model.latency(c, sd.result.rounds)
        predicted = model.latency(ar.result.counts, ar.result.rounds) / predicted_sd
        err = predicted / measured - 1
        worst = max(worst, abs(err))
        best = max(best, (measured, K))
        row = {
            "K": K,
            "ar_ms_per_token": ar_latency * 1e3,
            "sd_ms_per_token": sd_latency * 1e3,
            "predicted_sd_ms_per_token": predicted_sd * 1e3,
            "measured_speedup": measured,
            "predicted_speedup": predicted,
            "error": err,
            "accepted_per_round": float(c.accepted.sum() / c.oracle_calls.sum()),
            "repeats": [{"speedup": r, "ar_ms_per_token": a * 1e3, "sd_ms_per_token": s * 1e3} for r, a, s in ratios],
        }
        rows.append(row)
        print(
            f"   {K:>2}  {row['ar_ms_per_token']:9.3f}  {row['sd_ms_per_token']:8.3f}  "
            f"{row['predicted_sd_ms_per_token']:9.3f}  {measured:7.2f}×  {predicted:8.2f}×  {err:+6.1%}  "
            f"{row['accepted_per_round']:.2f}"
        )
    spread = max(ar_latencies) / min(ar_latencies) - 1
    print(f"   the same AR runs' clock varied by {spread:.1%} over their {len(ar_latencies)} repeats")
    print(f"   worst |error| over K = {KS[0]}..{KS[-1]}: {worst:.1%}")
    return {
        "model": terms,
        "Ks": rows,
        "ar_clock_spread": spread,
        "ar_runs": len(ar_latencies),
        "worst_abs_error": worst,
        "best_speedup": best[0],
        "best_K": best[1],
    }


def _line(m: dict) -> str:
    """The least-squares line through the target's calls, with its R²."""
    slope = m["line_per_token_ms"]
    sign = "+" if slope >= 0 else "−"
    return f"{m['line_base_ms']:.3f} {sign} {abs(slope):.3f} k ({m['line_r2']:.2f})"


def _temperature(t: float) -> str:
    return "0 (greedy)" if t == 0 else f"{t:g}"


def markdown(result: dict) -> str:
    """The documentation's tables of a run: the summary, each temperature's speed-ups per draft and K, and each
    draft's fitted model — from ``result`` alone."""
    s = result["settings"]
    lines = [
        "Best measured SD speed-up over autoregressive decoding (its K), worst |error| of the predicted speed-up "
        f"over K = {s['Ks'][0]}..{s['Ks'][-1]}, and how much the AR runs' clock varied over their repeats:",
        "",
    ]
    lines += _tables.markdown_table(
        ["draft", "temperature", "best speed-up (K)", "worst absolute error", "AR clock spread"],
        [
            [
                r["draft"],
                _temperature(r["temperature"]),
                (f"**{r['best_speedup']:.2f}×**" if r["best_speedup"] > 1 else f"{r['best_speedup']:.2f}×")
                + f" (K = {r['best_K']})",
                f"{r['worst_abs_error']:.1%}",
                f"{r['ar_clock_spread']:.1%}",
            ]
            for r in result["summary"]
        ],
    )
    for block in result["by_temperature"]:
        lines += ["", f"Temperature {_temperature(block['temperature'])}, per draft and K (times in ms per token):", ""]
        lines += _tables.markdown_table(
            ["draft", "K", "AR", "SD", "SD predicted", "speed-up", "predicted", "error", "accepted per round"],
            [
                [
                    name,
                    str(row["K"]),
                    f"{row['ar_ms_per_token']:.3f}",
                    f"{row['sd_ms_per_token']:.3f}",
                    f"{row['predicted_sd_ms_per_token']:.3f}",
                    f"{row['measured_speedup']:.2f}×",
                    f"{row['predicted_speedup']:.2f}×",
                    f"{row['error']:+.1%}",
                    f"{row['accepted_per_round']:.2f}",
                ]
                for name, run in block["drafts"].items()
                for row in run["Ks"]
            ],
        )
    sizes = s["target_sizes"]
    models = [run["model"] for block in result["by_temperature"] for run in block["drafts"].values()]
    by_drafting_round = all("per_drafting_round_ms" in m for m in models)  # tables written since the term exists
    lines += [
        "",
        "Each draft's fitted model (ms): its call of one token, the target's call of k tokens, the line "
        "through all target calls, and the loop's own time per round, drafted token, output token, run and "
        "drafting run:",
        "",
    ]
    lines += _tables.markdown_table(
        [
            "draft",
            "temperature",
            "t_draft(1)",
            *(f"t_target({k})" for k in sizes),
            "line (R²)",
            "per round",
            "per draft",
            "per token",
            "per run",
            "per drafting run",
            *(["per drafting round"] if by_drafting_round else []),
            "not identified",
        ],
        [
            [
                name,
                _temperature(block["temperature"]),
                f"{m['t_draft_1_ms']:.3f}",
                *(f"{m['t_target_ms'][str(k)]:.3f}" for k in sizes),
                _line(m),
                f"{m['per_round_ms']:.3f}",
                f"{m['per_draft_ms']:.3f}",
                f"{m['per_token_ms']:.3f}",
                f"{m['per_run_ms']:.1f}",
                f"{m['per_drafting_run_ms']:.1f}",
                *([f"{m['per_drafting_round_ms']:.3f}"] if by_drafting_round else []),
                ", ".join(m["unidentified"]) or "—",
            ]
            for block in result["by_temperature"]
            for name, run in block["drafts"].items()
            for m in [run["model"]]
        ],
    )
    temps = " and ".join(_temperature(t) for t in s["temperatures"])
    lines += [
        "",
        f"One prompt at a time: each model fitted on {s['fit_prompts']} prompts, timed on {s['test_prompts']} others, "
        f"{s['tokens']} new tokens, temperature{'s' if len(s['temperatures']) > 1 else ''} {temps}, "
        f"{s['threads']} thread"
        + ("s" if s["threads"] != 1 else "")
        + "; each speed-up "
        + (f"the median of {s['repeats']} ratios" if s["repeats"] > 1 else "one ratio")
        + " of adjacent AR and SD runs.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
