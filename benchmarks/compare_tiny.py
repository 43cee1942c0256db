"""Theory vs measured on the tiny pair: ``speculab compare`` for seven methods, in one run.

For each method of :func:`methods` (labelled by the ``speculab compare --method`` flags that build it; ``--only``
picks some): :func:`speculab.compare.compare` on the tiny pair — the held-out prompts, ``--runs-per-prompt`` runs
each, ``--tokens`` new tokens, temperature 1, key ``--seed`` — and the command's wall time. Every row it prints
(theory or prediction, measured, z or the exact / one-sided verdict, power against a theory 10 % off) goes into the
table. The runs are decoded as one batch on ``--threads`` threads (default: torch's own): another thread count, or
another CPU's float32 kernels, round the models' sums differently, so the runs (not their law) differ between machines.

    python benchmarks/compare_tiny.py [--only sd batch …] [--runs-per-prompt 8] [--tokens 32] [--seed 0]
                                      [--threads N] [--out benchmarks/tables]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402


def methods() -> dict:
    """label -> the method ``compare`` runs (what ``speculab compare --method …`` builds from those flags)."""
    from speculab.methods import SD, BatchSD, Biased, BlockVerification, Fuzzy, Typical

    return {
        "sd": SD(),
        "sd --K 4": SD(K=4),
        "batch --M 4": BatchSD(M=4),
        "biased --eps 0.1": Biased(0.1),
        "block --K 4": BlockVerification(K=4),
        "fuzzy --theta 0.3 --K 4": Fuzzy(0.3, K=4),
        "typical --eps 0.09 --delta 0.3 --K 4": Typical(0.09, 0.3, K=4),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", default=None, help="the methods whose label starts with one of these")
    ap.add_argument("--runs-per-prompt", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    _tables.add_threads(ap)
    ap.add_argument("--out", help="write compare_tiny.json and compare_tiny.md into this folder, for the documentation")
    args = ap.parse_args(argv)
    available = methods()
    chosen = [label for label in available if not args.only or any(label.startswith(o) for o in args.only)]
    if not chosen:
        ap.error(f"--only {' '.join(args.only)}: no method's label starts with these; the labels: {list(available)}")
    if min(args.runs_per_prompt, args.tokens) < 1:
        ap.error("--runs-per-prompt and --tokens must be >= 1")
    env = _tables.environment()
    from speculab.backends import load_pair
    from speculab.compare import compare

    pair = load_pair("tiny", device="cpu")
    result = {
        "runs_per_prompt": args.runs_per_prompt,
        "tokens": args.tokens,
        "seed": args.seed,
        "threads": _tables.use_threads(args.threads),
        "methods": [],
    }
    for label in chosen:
        method = available[label]
        t0 = time.perf_counter()
        comp = compare(pair, method, runs_per_prompt=args.runs_per_prompt, max_new_tokens=args.tokens, key=args.seed)
        seconds = time.perf_counter() - t0
        print(comp, f"\n({seconds:.1f} s)\n", flush=True)
        result["methods"].append({"label": label, "seconds": seconds, **comp.to_dict()})
    if args.out:
        _tables.write(args.out, "compare_tiny", result, markdown, env, _tables.argv(argv))


def _pm(value: float, se: float) -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value:.4g}" if se == 0 or not math.isfinite(se) else f"{value:.4g} ± {se:.2g}"


def _verdict(row: dict) -> str:
    if row["holds"] is not None:
        return "holds" if row["holds"] else "fails"
    return f"{row['z']:+.2f}" if math.isfinite(row["z"]) else "—"


def markdown(result: dict) -> str:
    """A row per compare row of each method, the method and its wall time on its first row."""
    lines = [
        "| method | quantity | theory / prediction | measured | z | power | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m in result["methods"]:
        for i, row in enumerate(m["rows"]):
            method = f"`{m['label']}` ({m['seconds']:.0f} s)" if i == 0 else ""
            power = "" if not math.isfinite(row["power"]) else f"{row['power']:.3f}"
            cells = [
                method,
                row["quantity"],
                _pm(row["predicted"], row["predicted_se"]),
                _pm(row["measured"], row["measured_se"]),
                _verdict(row),
                power,
                row["note"],
            ]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    first = result["methods"][0]["settings"] if result["methods"] else {}
    return "\n".join(lines) + (
        f"\n\nEach method on the tiny pair (`speculab compare --pair tiny --method` with the flags "
        f"of its label): {first.get('prompts', '—')} held-out prompts × "
        f"{result['runs_per_prompt']} runs × {result['tokens']} tokens, temperature {first.get('temperature', '—')}, "
        f"key {result['seed']}, "
        f"{result['threads']} torch threads, decoded as one batch; z = (measured − theory) / s.e.; power: the chance "
        'that the row refuses a theory 10 % off; "holds": an exact identity or one-sided bound, checked.\n'
    )


if __name__ == "__main__":
    main()
