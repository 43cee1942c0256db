"""``speculab plan`` on the tiny pair and on the cheap-draft pair, as the docs' worked example (docs/plan.md).

    python benchmarks/plan.py --threads 1 --out benchmarks/tables

For each pair (``tiny``; ``tiny-ngram``: the tiny target with a trigram draft) the command's defaults with a bias
budget (K = 1..8, 16 prompts × 16 contexts, 8 held-out prompts, runs of 32 tokens, the best 3 confirmed with
autoregressive decoding and SD K = 4): the best candidates, every confirmation predicted against measured, and the
plan's wall time. The figures go to ``docs/figures/plan_PAIR.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402

NAME = "plan"
PAIRS = ("tiny", "tiny-ngram")
FIGURES = _tables.ROOT / "docs" / "figures"


def measure(budget: float, key: int) -> dict:
    from speculab.cli import build_parser
    from speculab.planning.command import plan_of, to_json
    from speculab.planning.figure import save

    plans = []
    for pair in PAIRS:
        args = build_parser().parse_args(["plan", "--pair", pair, "--bias-budget", str(budget), "--seed", str(key)])
        t0 = time.perf_counter()
        payload = to_json(plan_of(args)[0])
        payload["seconds"] = time.perf_counter() - t0
        FIGURES.mkdir(parents=True, exist_ok=True)
        save(payload, FIGURES / f"plan_{pair}.png")
        (FIGURES / f"plan_{pair}.pdf").unlink(missing_ok=True)  # the docs show the PNG
        plans.append(payload)
    return {"budget": budget, "key": key, "plans": plans}


#: The issue's targets: each confirmed candidate's tokens/s within this share of the measured, the whole plan within
#: this many seconds.
WITHIN, PLAN_SECONDS = 0.10, 300


def against_targets(plan: dict) -> str:
    """One line holding a pair's plan to the targets, from its own numbers: which confirmed candidates' tokens per
    second and speed-ups over autoregressive decoding were predicted within :data:`WITHIN` (those outside named with
    their errors), the largest |z| of tokens per target call, and the plan's time against :data:`PLAN_SECONDS`."""
    from speculab.planning.command import label

    def held(key: str, rows: list) -> str:
        out = [r for r in rows if abs(r[key]) > WITHIN]
        return f"{len(rows) - len(out)} of {len(rows)}" + (
            " (outside: " + ", ".join(f"{label(r['method'])} {r[key]:+.1%}" for r in out) + ")" if out else ""
        )

    rows = plan["confirmed"]
    drafting = [r for r in rows if r["method"] != "Autoregressive()"]
    zs = [abs(r["per_call_z"]) for r in rows if r["per_call_z"] is not None]
    return (
        f"Tokens/s predicted within {WITHIN:.0%} for {held('error', rows)}; speed-ups over autoregressive decoding "
        f"within {WITHIN:.0%} for {held('speedup_error', drafting)}; tokens per target call within "
        f"|z| ≤ {max(zs, default=0.0):.1f}; the plan took {plan['seconds']:.0f} s "
        f"({'within' if plan['seconds'] <= PLAN_SECONDS else 'past'} {PLAN_SECONDS // 60} minutes)."
    )


def markdown(result: dict) -> str:
    from speculab.planning.command import label

    out = []
    for plan in result["plans"]:
        s = plan["settings"]
        out += [
            f"**The {s['pair']} pair** (seed {s['key']}, bias budget {s['bias_budget']:g}; the whole plan took "
            f"{plan['seconds']:.0f} s, torch on {s['threads']} thread(s), load average {s['load_at_start']:.1f} at "
            f"its start and {s.get('load_at_end', s['load_at_start']):.1f} at its end):",
            "",
            "| rank | method | tokens / round | tokens / call | bias | tokens / s (predicted) |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        allowed = [r for r in plan["ranked"] if r["allowed"]]
        for i, r in enumerate(allowed[:6], 1):
            out.append(
                f"| {i} | `{label(r['method'])}` | {r['tokens_per_round']:.3f} ± {r['tokens_per_round_se']:.3f} | "
                f"{r['tokens_per_call']:.3f} | {r['bias']:.4f} | {r['tokens_per_second']:.0f} ± "
                f"{r['tokens_per_second_se']:.0f} |"
            )
        out += [
            "",
            "| confirmed | tokens / s: predicted | measured | error | × autoregressive: predicted | measured | error "
            "| tokens / call: predicted | measured | z |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in plan["confirmed"]:
            z = "—" if r["per_call_z"] is None else f"{r['per_call_z']:+.1f}"
            out.append(
                f"| `{label(r['method'])}` | {r['predicted']:.0f} | {r['measured']:.0f} ± {r['measured_se']:.0f} | "
                f"{r['error']:+.1%} | {r['predicted_speedup']:.3f} | {r['measured_speedup']:.3f} | "
                f"{r['speedup_error']:+.1%} | {r['predicted_per_call']:.3f} | {r['measured_per_call']:.3f} | {z} |"
            )
        shapes = [r for r in plan.get("shapes", []) if r["exact"]]
        if shapes:
            out += [
                "",
                "| nodes | Sequoia's tree | tokens / round (fresh trees) | exact best | tokens / round (fresh trees) |",
                "| --- | --- | --- | --- | --- |",
            ]
            out += [
                f"| {r['nodes']} | `{r['sequoia']}` | {r['sequoia_tokens']:.3f} ± {r['sequoia_se']:.3f} | "
                f"`{r['exact']}` | {r['exact_tokens']:.3f} ± {r['exact_se']:.3f} |"
                for r in shapes
            ]
        out += ["", f"Verdict: {plan['verdict']}. {against_targets(plan)}", ""]
        out += [f"![plan, {s['pair']} pair](figures/plan_{s['pair']}.png)", ""]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=0.05, help="the plans' --bias-budget (default 0.05)")
    ap.add_argument("--seed", type=int, default=0)
    _tables.add_threads(ap)
    ap.add_argument("--out", default=None, help="write NAME.json and NAME.md here")
    args = ap.parse_args(argv)
    _tables.use_threads(args.threads)  # fewer threads than cores: less spinning against other work
    env = _tables.environment()
    result = measure(args.budget, args.seed)
    if args.out:
        _tables.write(args.out, NAME, result, markdown, env, _tables.argv(argv))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
