"""The verdicts of ``speculab engine vllm`` on the tiny pair, as the docs' table (docs/engines.md).

    python benchmarks/engine_vllm.py --out benchmarks/tables      # ./dev vllm setup first; about 20 minutes

Runs :func:`speculab.engines.vllm.measure` with the command's defaults (every configuration kind at each ``K`` of
``--K``, 16 prompts × 8 requests for the per-slot rows, 4,000 requests per law test at temperature 1 and at top-k 20 /
top-p 0.9, vLLM's rejection sampler called directly 200,000 times per rule) and writes one row per configuration,
then the sweep over ``K`` of each kind.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402

NAME = "engine_vllm"


def measure(ks: list[int], key: int, law_runs: int) -> dict:
    from speculab.backends import Sampling, load_pair
    from speculab.backends.pair import TINY_DIR, default_prompts
    from speculab.engines import vllm
    from speculab.engines.command import _plain

    pair = load_pair("tiny", device="cpu")
    texts = default_prompts()
    report = vllm.measure(
        pair,
        (str(TINY_DIR / "draft"), str(TINY_DIR / "target")),
        vllm.configurations(str(TINY_DIR / "draft"), ks=tuple(ks)),
        python=vllm.find_python(),
        prompts=[pair.tokenizer.encode(t) for t in texts[:16]],
        runs_per_prompt=8,
        max_tokens=32,
        law_prompt=texts[0],
        law_runs=law_runs,
        samplings=[Sampling(1.0), Sampling(1.0, 20, 0.9)],
        key=key,
    )
    return json.loads(json.dumps(report.to_json(), default=_plain))


def _short(error: str) -> str:
    """A failure's root cause, cut to a table cell."""
    cause = error.split(" (vLLM's engine died")[0]
    return cause if len(cause) <= 70 else cause[:69] + "…"


def _law(c: dict, i: int) -> str:
    from speculab.stats import ALPHA, least_power

    if i < len(c["laws"]):
        row = c["laws"][i]
        p = min(row["first"][2], row["joint"][2])
        power = least_power(row["first"][1], row["runs"], ALPHA / 2, 0.05)
        verdict = "**refused**" if row["refused"] else "not refused"
        return f"{verdict} (p = {p:.2g}; power {power:.3f} at TV 0.05; TV {row['detectable'][1]:.3g} at 0.99)"
    failed = [f for f in c.get("failures", []) if f.startswith(f"law {i}")]
    return "vLLM failed" if failed else "—"


def markdown(result: dict) -> str:
    s = result["settings"]
    table = [
        "| configuration | rule (speculab) | law, T = 1 | law, top-k 20, top-p 0.9 | kept drafts: measured / "
        "predicted | tokens per target call | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes = []
    for c in result["configurations"]:
        if not c["ran"]:
            table.append(f"| {c['name']} | `{c['rule']}` | — | — | — | — | does not run here: {_short(c['error'])} |")
            continue
        total = next((r for r in c["slots"] if r["slot"] == 0), None)
        slots = (
            f"{total['measured']} / {total['predicted']:.1f} (z {total['z']:.1f}, power {total['power']:.3f})"
            if total and total["reached"]
            else "— (no prediction)"
        )
        if c.get("repeats"):
            same, seen = c["repeats"]["same"], c["repeats"]["seen"]
            notes.append(
                f"{c['name']}: {same} of {seen} refused slots output the greedy draft itself — impossible for the "
                "rule, whose residual has no mass at the draft."
            )
        calls = f"{c['tokens'] / c['target_calls']:.3f}" if c.get("target_calls") else "—"
        verdict = c["verdict"].split(" (below)")[0]
        if c.get("failures"):
            verdict = (
                f"vLLM failed on {len(c['failures'])} request group(s): {_short(c['failures'][0].split(': ', 1)[1])}"
            )
            if c["laws"]:
                verdict += "; " + c["verdict"].split("(below); ")[-1]
        table.append(f"| {c['name']} | `{c['rule']}` | {_law(c, 0)} | {_law(c, 1)} | {slots} | {calls} | {verdict} |")
        for row, worst in zip(c["laws"], c.get("worst", [])):
            if worst:
                notes.append(
                    f"{row['method']}: the outcomes of the first tokens whose frequency in vLLM's output is farthest, "
                    "in standard errors, from the target's probability — "
                    + "; ".join(
                        f"`{w['tokens']}` target {w['target']:.4f}, vLLM {w['observed']:.4f} (z {w['z']:+.1f})"
                        for w in worst[:3]
                    )
                    + "."
                )
    if result["control"]:
        r = result["control"]
        p = min(r["first"][2], r["joint"][2])
        verdict = "refused" if r["refused"] else "**not refused**"
        notes.append(f"{r['method'][0].upper()}{r['method'][1:]}: {verdict} (p = {p:.2g}).")
    for sp in result["samplers"]:
        verdict = "refused" if sp["refused"] else "kept"
        notes.append(
            f"{sp['sampler']}: {verdict} at level {sp['alpha']:g} (G = {sp['statistic']:.4g}, p = {sp['p_value']:.2g}, "
            f"{sp['n']:,} rounds, power {sp['power']:.4f} at TV {sp['tv']:g})."
        )
    for e in result["expand"]:
        notes.append(
            f"vLLM's `expand_batch_to_tokens` on {e['dtype']}: "
            + ("right." if e["ok"] else f"**wrong**: returned {e['got']}, must return {e['want']}.")
        )
    head = (
        f"{s['engine']} {s['vllm']} on the tiny pair: {s['requests']} requests × {s['max_tokens']} tokens for the "
        f"per-slot rows, {s['law_runs']:,} requests per law test (first 3 tokens), seed {s['key']}. Each law test is "
        "two G-tests (the first token; the first three), each at level 5·10⁻⁵, refused if either refuses. Power: of "
        "the first-token G-test against any law at TV 0.05 from the target's, and of |z| ≥ 5 against kept drafts 10 % "
        'off the prediction; "TV … at 0.99": the TV the three-token test refuses with probability 0.99.'
    )
    return "\n\n".join([head, "\n".join(table), *_sweep(result), *notes]) + "\n"


def _sweep(result: dict) -> list[str]:
    """Each kind's kept drafts against the prediction and its law verdict at temperature 1, by ``K``: the sweep."""
    by: dict = {}
    for c in result["configurations"]:
        if c["K"]:
            by.setdefault(c["name"].split(" K=")[0], {})[c["K"]] = c
    ks = sorted({k for kind in by.values() for k in kind})
    if len(ks) < 2:
        return []

    def cell(c) -> str:
        if c is None:
            return "—"
        if not c["ran"] or not c["laws"]:
            return "does not run"
        law = "refused" if c["laws"][0]["refused"] else "kept"
        total = next((r for r in c["slots"] if r["slot"] == 0 and r["reached"]), None)
        kept = f"{total['measured']} / {total['predicted']:.0f} (z {total['z']:.1f})" if total else "no prediction"
        per_call = f"{c['tokens'] / c['target_calls']:.2f}" if c.get("target_calls") else "—"
        return f"{law}; {kept}; {per_call}"

    lines = [
        "By K — each cell: the law at T = 1 (kept or refused); kept drafts measured / predicted (z); tokens per "
        "target call:",
        "",
        "| K | " + " | ".join(by) + " |",
        "| --- | " + " | ".join("---" for _ in by) + " |",
    ]
    lines += [f"| {k} | " + " | ".join(cell(kind.get(k)) for kind in by.values()) + " |" for k in ks]
    return ["\n".join(lines)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--K", default="1,2,4,8", help="drafts per round, comma-separated (default 1,2,4,8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--law-runs", type=int, default=4000)
    _tables.add_threads(ap)
    ap.add_argument("--out", default=None, help="write NAME.json and NAME.md here")
    args = ap.parse_args(argv)
    _tables.at_least_one(ap, args, "--law-runs")
    try:
        ks = [int(k) for k in args.K.split(",")]
    except ValueError:
        ap.error(f"argument --K: expected comma-separated integers; got {args.K!r}")
    _tables.use_threads(args.threads)
    env = _tables.environment()
    result = measure(ks, args.seed, args.law_runs)
    if args.out:
        _tables.write(args.out, NAME, result, markdown, env, _tables.argv(argv))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
