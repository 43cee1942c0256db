"""``speculab engine vllm``: vLLM's speculative decoding measured on a pair, printed as per-configuration verdicts.

The command's parser and its table; :mod:`speculab.engines.vllm` does the work. A configuration refused by the law
test, or whose kept drafts are off its rule's prediction, is a finding printed plainly, not an error: the command
exits 0 when everything was measured, 1 when the biased control was not refused (the law test then has no power to
speak of), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from speculab._files import out_file, write_text

__all__ = ["add_parser", "cmd_engine_vllm", "table"]


def _list(kind):
    """A comma-separated list of distinct values of ``kind``, at least one."""

    def parse(text: str):
        try:
            values = [kind(v.strip()) for v in text.split(",")]
        except ValueError:
            message = f"expected a comma-separated list of {kind.__name__}; got {text!r}"
            raise argparse.ArgumentTypeError(message) from None
        if any(v == "" for v in values) or not values:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list with no empty item; got {text!r}")
        if len(set(values)) < len(values):
            raise argparse.ArgumentTypeError(f"each value once; got {text!r}")
        return values

    return parse


def add_parser(sub, common, add_pair_args, count, sampling_of) -> None:
    """The ``engine`` command and its ``vllm`` subcommand, on the CLI's subparsers ``sub``; ``sampling_of(args)``
    reads the sampling from the options ``add_pair_args`` adds."""
    engines = sub.add_parser("engine", help="a serving engine's speculative decoding vs theory and the target's law")
    which = engines.add_subparsers(dest="engine", required=True)
    p = which.add_parser("vllm", help="vLLM (its own environment: ./dev vllm) on a draft/target pair")
    common(p)
    add_pair_args(p)
    p.add_argument(
        "--kinds",
        type=_list(str),
        default=["greedy", "probabilistic", "ngram", "synthetic"],
        help="configurations, comma-separated: greedy, probabilistic, ngram, synthetic (default all; plain always; "
        "synthetic keeps slot i's draft at the conditional rate 0.8, 0.6, 0.4, 0.2, the last for slots past 4)",
    )
    p.add_argument("--k", type=_list(int), default=[4], help="drafts per round, comma-separated (default 4; 1..8)")
    p.add_argument(
        "--prompts", type=count(1), default=16, help="prompts of the per-slot rows, of the 32 shipped (default 16)"
    )
    p.add_argument("--runs-per-prompt", type=count(1), default=8, help="requests per prompt (default 8)")
    p.add_argument(
        "--law-runs",
        type=count(1),
        default=4000,
        help="requests of each law test (default 4,000; at least enough for the biased control to be refused "
        "with probability 0.99)",
    )
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
    p.set_defaults(func=cmd_engine_vllm, sampling_of=sampling_of)


def cmd_engine_vllm(args) -> int:
    import torch

    from speculab.backends import Sampling, load_pair
    from speculab.backends.pair import TINY_DIR, default_prompts
    from speculab.engines import vllm
    from speculab.stats import POWER

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
    if any(not 1 <= k <= vllm.MAX_K for k in args.k):
        raise ValueError(f"--k: each K must be in 1..{vllm.MAX_K}; got {args.k}")
    if args.temperature <= 0:
        raise ValueError("--temperature: the law test and the per-slot rows need sampling (temperature > 0)")
    base = args.sampling_of(args)
    texts = default_prompts()
    if args.prompts > len(texts):
        raise ValueError(f"--prompts {args.prompts}: speculab ships {len(texts)} prompts")
    out = out_file(args.out)
    out_file(args.log, "--log")  # vLLM's output: a file in a folder that exists
    python = vllm.find_python(args.vllm_python)  # before loading anything
    configs = vllm.configurations(str(folders[0]), args.kinds, args.k)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        pair = load_pair(str(folders[0]), str(folders[1]), device=args.device, dtype=getattr(torch, args.dtype))
    except ValueError as err:
        flags = f"--draft {folders[0]} --target {folders[1]}" if args.draft is not None else f"--pair {args.pair}"
        raise ValueError(f"{flags}: {err}") from None
    samplings = [base] if (args.top_k or args.top_p) else [base, Sampling(args.temperature, 20, 0.9)]
    prompts = [pair.tokenizer.encode(t) for t in texts[: args.prompts]]
    limit = min(m for m in (pair.draft.max_length, pair.target.max_length) if m) if pair.target.max_length else None
    longest = max(len(ids) for ids in prompts)
    if limit is not None and longest + args.max_new_tokens > limit:
        raise ValueError(
            f"--max-new-tokens {args.max_new_tokens}: the longest prompt ({longest} tokens) and the output exceed the "
            f"models' {limit} positions; at most {limit - longest}"
        )
    power = vllm.control_power(pair, texts[0], samplings[0], args.law_runs)
    if power < POWER:
        least = vllm.least_law_runs(pair, texts[0], samplings[0])
        raise ValueError(
            f"--law-runs {args.law_runs}: the biased control would be refused with probability {power:.3f} only, "
            f"so a refusal-free law test would say little; at least {least:,} for {POWER}"
        )
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
        dtype=args.dtype,
        max_model_len=limit,
    )
    payload = report.to_json()
    if args.json:
        print(json.dumps(payload, indent=1, default=_plain))
    else:
        print(table(report, logged=args.log is not None))
    if out is not None:
        write_text(out, json.dumps(payload, indent=1, default=_plain))
    controls = [report.control] if report.control is not None else []
    controls += [s for s in report.samplers if "misstated" in s.sampler]
    return 0 if all(c.refused for c in controls) else 1


def _unpredicted(c) -> str:
    """Why a speculative configuration has no per-slot rows."""
    if c.rule == "n-gram":
        return "vLLM looks up the n-gram drafts and does not report those of refused slots"
    if any(f.startswith("theory") for f in c.failures):
        return "vLLM failed on the requests the slots are read from (above)"
    return "vLLM reported no per-request rounds"


def _followable(error: str, logged: bool) -> str:
    """An error from vLLM; where it points at vLLM's own output, how to keep it."""
    if error and "stack trace" in error and not logged:
        return f"{error} [vLLM's output is not kept: rerun with --log FILE]"
    return error


def _plain(x):
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


def _p(row) -> str:
    return f"{min(row.first[2], row.joint[2]):.2g}"


def _power(row, tv: float = 0.05) -> float:
    """The first-token G-test's least power against any law at TV ``tv`` from the target's."""
    from speculab.stats import ALPHA, least_power

    return least_power(row.first[1], row.runs, ALPHA / 2, tv)


def table(report, *, logged: bool = False) -> str:
    """The report as text: one block per configuration, then the checks and the control. ``logged``: vLLM's own
    output was kept (``--log``), so an error pointing at its stack trace can be followed."""
    from speculab.engines.paired import Z_BOUND
    from speculab.stats import ALPHA

    s = report.settings
    lines = [
        f"{s['engine']} {s['vllm']} on {s['pair']}: {s['requests']} requests × {s['max_tokens']} tokens for the slots, "
        f"{s['law_runs']} requests per law test; seed {s['key']}",
        "",
    ]
    for c in report.configurations:
        lines.append(f"{c.name}  [{c.rule}, {'lossless' if c.lossless else 'biased'} by its rule]: {c.verdict}")
        if not c.ran:
            lines.append(f"    vLLM: {_followable(c.error, logged)}")
            lines.append("")
            continue
        for failure in c.failures:
            lines.append(f"    failed: {_followable(failure, logged)}")
        for row, worst in zip(c.laws, c.worst or [[]] * len(c.laws)):
            lines.append(
                f"    law {row.method.split(' at ')[-1]:<26} p = {_p(row):<8} "
                f"{'REFUSED' if row.refused else 'not refused'} at level {ALPHA / 2:g}  (power "
                f"{_power(row):.3f} against TV 0.05; TV {row.detectable[1]:.3g} refused at power 0.99)"
            )
            for w in worst[:3]:
                lines.append(
                    f"        first tokens {w['tokens']} {w['text']!r}: "
                    f"target {w['target']:.4f}, vLLM {w['observed']:.4f} (z {w['z']:+.1f})"
                )
        if c.slots:
            lines.append(
                f"    slot  reached  kept   predicted ± sd       z      power(10 %): of |z| ≥ {Z_BOUND:g} if the "
                "kept drafts were 10 % off"
            )
            for r in c.slots:
                label = "all" if r.slot == 0 else str(r.slot)
                lines.append(
                    f"    {label:>4}  {r.reached:>7}  {r.measured:>5}  {r.predicted:>9.1f} ± {r.se:<7.2f} "
                    f"{r.z:>6.2f}  {r.power:.3f}"
                )
        elif c.K:
            lines.append(f"    (no per-slot prediction: {_unpredicted(c)})")
        if c.repeats is not None:
            lines.append(
                f"    refused slots whose output is the greedy draft: {c.repeats.same} of {c.repeats.seen} "
                "(the rule outputs a token of q without the draft: 0)"
            )
        if not c.tokens:
            lines.append("")
            continue
        k = c.counters
        per_call = c.tokens / c.target_calls if c.target_calls else float("nan")
        lines.append(
            f"    {c.tokens} tokens in {c.seconds:.2f} s ({c.tokens / c.seconds:.0f} tokens/s), "
            f"{per_call:.3f} tokens per target call (prefill, rounds and drafting-free steps); "
            f"counters: {k.get('drafts', 0)} rounds, "
            f"{k.get('draft_tokens', 0)} drafts, {k.get('accepted_tokens', 0)} kept, per slot "
            f"{k.get('accepted_per_position', [])}"
        )
        if c.round_sums and c.K:
            off = {n: (k.get(n), v) for n, v in c.round_sums.items() if k.get(n) != v}
            lines.append(
                "    the counters equal the per-request rounds summed"
                if not off
                else "    the counters DISAGREE with the per-request rounds summed: "
                + ", ".join(f"{n} {a} vs {b}" for n, (a, b) in off.items())
            )
        lines.append("")
    if report.samplers:
        lines.append(
            "vLLM's rejection sampler called directly on 8 tokens (its lossless rules; misstated: the control):"
        )
        lines.extend(f"    {s}" for s in report.samplers)
    if report.expand:
        lines.append("vLLM's expand_batch_to_tokens (each draft slot's temperature, top-k, top-p):")
        for e in report.expand:
            lines.append(
                f"    right on {e.dtype}" if e.ok else f"    WRONG on {e.dtype}: returned {e.got}, must return {e.want}"
            )
        lines.append("")
    for error in report.errors:
        lines.append(f"not checked: {_followable(error, logged)}")
    if report.control is not None:
        r = report.control
        lines.append(
            f"{r.method}: {'refused, as it must be' if r.refused else 'NOT refused: the law test lacks power'} "
            f"(p = {_p(r)})"
        )
    return "\n".join(lines)
