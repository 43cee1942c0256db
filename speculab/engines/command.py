"""``speculab engine vllm``: vLLM's speculative decoding measured on a pair, printed as per-configuration verdicts.

The command's parser and its table; :mod:`speculab.engines.vllm` does the work. A configuration refused by the law
test, or whose kept drafts are off its rule's prediction, is a finding printed plainly, not an error: the command
exits 0 when everything was measured, 1 when the biased control was not refused (the law test then has no power to
speak of), 2 on bad input.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["add_parser", "cmd_engine_vllm", "table"]


def _list(kind):
    def parse(text: str):
        try:
            return [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"expected a comma-separated list; got {text!r}") from None

    return parse


def add_parser(sub, common, add_pair_args, count) -> None:
    """The ``engine`` command and its ``vllm`` subcommand, on the CLI's subparsers ``sub``."""
    engines = sub.add_parser("engine", help="a serving engine's speculative decoding vs theory and the target's law")
    which = engines.add_subparsers(dest="engine", required=True)
    p = which.add_parser("vllm", help="vLLM (its own environment: ./dev vllm) on a draft/target pair")
    common(p)
    add_pair_args(p)
    p.add_argument(
        "--kinds",
        type=_list(str),
        default=["greedy", "probabilistic", "ngram", "synthetic"],
        help="configurations, comma-separated: greedy, probabilistic, ngram, synthetic (default all; plain always)",
    )
    p.add_argument("--k", type=_list(int), default=[4], help="drafts per round, comma-separated (default 4; 1..8)")
    p.add_argument("--prompts", type=count(1), default=16, help="prompts of the per-slot rows (default 16)")
    p.add_argument("--runs-per-prompt", type=count(1), default=8, help="requests per prompt (default 8)")
    p.add_argument("--law-runs", type=count(1), default=4000, help="requests of each law test (default 4,000)")
    p.add_argument(
        "--sampler-draws",
        type=count(0),
        default=200_000,
        help="rounds of each direct call of vLLM's rejection sampler (0: none; default 200,000)",
    )
    p.add_argument(
        "--server", action="store_true", help="measure `vllm serve` on 127.0.0.1 (OpenAI API, /metrics) instead"
    )
    p.add_argument("--vllm-python", default=None, help="the Python of a vLLM environment (default: .venv-vllm)")
    p.add_argument("--log", default=None, help="write vLLM's own output to this file")
    p.add_argument("--out", default=None, help="also write the report's JSON to this file")
    p.set_defaults(func=cmd_engine_vllm)


def cmd_engine_vllm(args) -> int:
    from speculab.backends import Sampling, load_pair
    from speculab.backends.pair import TINY_DIR, default_prompts
    from speculab.engines import vllm

    if (args.draft is None) != (args.target is None):
        raise ValueError("give both --draft and --target (local Hugging Face folders), or neither (then --pair)")
    if args.draft is None:
        if args.pair != "tiny":
            raise ValueError(f"--pair must be 'tiny' (or use --draft/--target); got {args.pair!r}")
        folders = (TINY_DIR / "draft", TINY_DIR / "target")
    else:
        folders = (Path(args.draft), Path(args.target))
        for flag, folder in zip(("--draft", "--target"), folders):
            if not (folder / "config.json").is_file():
                raise ValueError(f"{flag} {folder}: not a local Hugging Face model folder (no config.json)")
    if any(not 1 <= k <= 8 for k in args.k):
        raise ValueError(f"--k: each K must be in 1..8; got {args.k}")
    if args.temperature <= 0:
        raise ValueError("--temperature: the law test and the per-slot rows need sampling (temperature > 0)")
    python = vllm.find_python(args.vllm_python)  # before loading anything
    configs = vllm.configurations(str(folders[0]), args.kinds, args.k)
    pair = load_pair(str(folders[0]), str(folders[1]), device=args.device)
    base = Sampling(args.temperature, args.top_k, args.top_p)
    samplings = [base] if (args.top_k or args.top_p) else [base, Sampling(args.temperature, 20, 0.9)]
    texts = default_prompts()
    prompts = [pair.tokenizer.encode(t) for t in texts[: args.prompts]]
    report = vllm.measure(
        pair,
        (str(folders[0]), str(folders[1])),
        configs,
        python=python,
        prompts=prompts,
        runs_per_prompt=args.runs_per_prompt,
        max_tokens=args.max_new_tokens,
        law_prompt=texts[0],
        law_runs=args.law_runs,
        samplings=samplings,
        key=args.seed,
        log=args.log,
        sampler_draws=args.sampler_draws,
        server=args.server,
    )
    payload = report.to_json()
    if args.out is not None:
        Path(args.out).write_text(json.dumps(payload, indent=1, default=_plain))
    if args.json:
        print(json.dumps(payload, indent=1, default=_plain))
    else:
        print(table(report))
    controls = [report.control] if report.control is not None else []
    controls += [s for s in report.samplers if "misstated" in s.sampler]
    return 0 if all(c.refused for c in controls) else 1


def _plain(x):
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


def _p(row) -> str:
    return f"{min(row.first[2], row.joint[2]):.2g}"


def table(report) -> str:
    """The report as text: one block per configuration, then the control."""
    s = report.settings
    lines = [
        f"{s['engine']} {s['vllm']} on {s['pair']}: {s['requests']} requests × {s['max_tokens']} tokens for the slots, "
        f"{s['law_runs']} requests per law test; seed {s['key']}",
        "",
    ]
    for c in report.configurations:
        lines.append(f"{c.name}  [{c.rule}, {'lossless' if c.lossless else 'biased'} by its rule]: {c.verdict}")
        if not c.ran:
            lines.append(f"    vLLM: {c.error}")
            lines.append("")
            continue
        for failure in c.failures:
            lines.append(f"    vLLM failed on the {failure}")
        for row, worst in zip(c.laws, c.worst or [[]] * len(c.laws)):
            lines.append(
                f"    law {row.method.split(' at ')[-1]:<26} p = {_p(row):<8} "
                f"{'REFUSED' if row.refused else 'kept'}  (detectable TV {row.detectable[1]:.3g} at power 0.99)"
            )
            for w in worst[:3]:
                lines.append(
                    f"        first tokens {w['tokens']} {w['text']!r}: "
                    f"target {w['target']:.4f}, vLLM {w['observed']:.4f}"
                )
        if c.slots:
            lines.append("    slot  reached  kept   predicted ± sd       z      power(10 %)")
            for r in c.slots:
                label = "all" if r.slot == 0 else str(r.slot)
                lines.append(
                    f"    {label:>4}  {r.reached:>7}  {r.measured:>5}  {r.predicted:>9.1f} ± {r.se:<7.2f} "
                    f"{r.z:>6.2f}  {r.power:.3f}"
                )
        elif c.K:
            lines.append("    (no per-slot prediction: the drafts of refused slots are not reported)")
        if not c.tokens:
            lines.append("")
            continue
        k = c.counters
        per_call = c.tokens / c.target_calls if c.target_calls else float("nan")
        lines.append(
            f"    {c.tokens} tokens in {c.seconds:.2f} s ({c.tokens / c.seconds:.0f} tokens/s), "
            f"{per_call:.3f} tokens per target call; counters: {k.get('drafts', 0)} rounds, "
            f"{k.get('draft_tokens', 0)} drafts, {k.get('accepted_tokens', 0)} kept, per slot "
            f"{k.get('accepted_per_position', [])}"
        )
        lines.append("")
    if report.samplers:
        lines.append(
            "vLLM's rejection sampler called directly on 8 tokens (its lossless rules; misstated: the control):"
        )
        lines.extend(f"    {s}" for s in report.samplers)
    if report.expand:
        broken = [e for e in report.expand if not e.ok]
        lines.append(
            "vLLM's expand_batch_to_tokens (each draft slot's temperature, top-k, top-p): "
            + ("right on " + ", ".join(e.dtype for e in report.expand) if not broken else "")
        )
        for e in broken:
            lines.append(f"    WRONG on {e.dtype}: returned {e.got}, must return {e.want}")
        lines.append("")
    if report.control is not None:
        r = report.control
        lines.append(
            f"{r.method}: {'refused, as it must be' if r.refused else 'NOT refused: the law test lacks power'} "
            f"(p = {_p(r)})"
        )
    return "\n".join(lines)
