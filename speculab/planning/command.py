"""``speculab plan``: the candidates ranked by predicted speed on this machine, the best confirmed by decoding.

The command's parser and its table; :mod:`speculab.planning.plan` does the work.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from pathlib import Path
from speculab._files import json_finite, write_text

__all__ = ["add_parser", "cmd_plan", "plan_of", "table", "to_json"]

#: Held-out prompts of the confirmations, taken from the end of the shipped prompts.
HELD_OUT = 8
#: Runs of each held-out prompt in an engine's rows (``--engine``): an engine decodes them together, so they cost
#: little, and the tokens per call get a standard error over the requests.
ENGINE_RUNS = 8
#: The plan's file in ``--out`` (what ``speculab report`` reads).
PLAN = "plan.json"


def out_folder(path: str | None) -> Path | None:
    """``--out``, checked before the run: a folder (made if missing) whose parents are folders."""
    if path is None:
        return None
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {path}: a file; give a folder")
    blocked = next((up for up in out.parents if up.exists() and not up.is_dir()), None)
    if blocked is not None:
        raise ValueError(f"--out {path}: {blocked} is a file, not a folder")
    return out


def _ks(text: str) -> list[int]:
    try:
        ks = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers; got {text!r}") from None
    if len(set(ks)) < len(ks) or any(not 1 <= k <= 16 for k in ks):
        raise argparse.ArgumentTypeError(f"expected distinct integers in 1..16; got {text!r}")
    return ks


def _budget(text: str) -> float:
    try:
        b = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number; got {text!r}") from None
    if not 0 <= b <= 1:
        raise argparse.ArgumentTypeError(f"a per-token TV in [0, 1]; got {text!r}")
    return b


def add_parser(sub, common, add_pair_args, count, pair_of, sampling_of) -> None:
    """The ``plan`` command, on the CLI's subparsers ``sub``; ``pair_of(args)`` and ``sampling_of(args)`` read the
    pair and the sampling from the options ``add_pair_args`` adds."""
    p = sub.add_parser("plan", help="the best speculative configuration for a pair on this machine, then confirmed")
    common(p)
    add_pair_args(p)
    p.add_argument(
        "--k", type=_ks, default=list(range(1, 9)), help="lookaheads K, comma-separated (default: every K from 1 to 8)"
    )
    p.add_argument(
        "--bias-budget",
        type=_budget,
        default=0.0,
        help="largest per-token TV from the target's law a lossy rule may have (default 0: lossless only)",
    )
    p.add_argument("--prompts", type=count(1), default=16, help="prompts whose contexts and timings fit (default 16)")
    p.add_argument("--per-prompt", type=count(1), default=16, help="contexts per prompt (default 16)")
    p.add_argument("--confirm", type=count(0), default=3, help="best candidates decoded for real (default 3; 0: none)")
    p.add_argument(
        "--confirm-runs",
        type=count(1),
        default=6,
        help="runs of each held-out prompt per confirmed candidate, each with its own seed (default 6)",
    )
    p.add_argument(
        "--max-nodes",
        type=count(0),
        default=16,
        help="largest token tree ranked, in drafted nodes (default 16; 0: no trees; else 2..32)",
    )
    p.add_argument(
        "--out", default=None, help="also write OUT/plan.json and its figure OUT/plan.png (speculab report shows them)"
    )
    p.add_argument(
        "--engine",
        choices=["vllm"],
        default=None,
        help="also decode the held-out prompts with vLLM's configurations of the best greedy-draft and SD rules "
        "(./dev vllm setup; the pair as Hugging Face folders)",
    )
    p.add_argument("--vllm-python", default=None, help="with --engine vllm: its Python (default: .venv-vllm)")
    p.set_defaults(func=cmd_plan, pair_of=pair_of, sampling_of=sampling_of)


def cmd_plan(args) -> int:
    out = out_folder(args.out)
    engine = _engine_of(args)  # before the plan: a missing engine is told at once
    from speculab._progress import progress

    with progress("planning", unit="decode", enabled=not args.json):  # the plan announces its parts
        result, held_out = plan_of(args)
    if engine is not None:
        from speculab.planning.engine import vllm_rows

        result.engine = vllm_rows(
            result, engine[1], held_out, python=engine[0], runs=ENGINE_RUNS, key=args.seed, dtype=args.dtype
        )
    payload = to_json(result)
    print(json.dumps(payload, indent=1) if args.json else table(result))
    if out is not None:
        from speculab.planning.figure import save

        write_text(out / PLAN, json.dumps(payload, indent=1))
        save(payload, out / "plan.png")
    return 0


def _engine_of(args):
    """``--engine vllm``: (its Python, the pair's folders), checked; ``None`` without it."""
    if args.vllm_python is not None and args.engine is None:
        raise ValueError("--vllm-python is read only with --engine vllm")
    if args.engine is None:
        return None
    from speculab.engines.vllm import MAX_K

    if min(args.k) > MAX_K:
        raise ValueError(f"--engine vllm: vLLM runs K ≤ {MAX_K}; --k {','.join(map(str, args.k))} has none")
    if (args.draft is None) != (args.target is None):
        raise ValueError("--engine vllm: give both --draft and --target (local Hugging Face folders), or neither")
    from speculab.backends.pair import TINY_DIR
    from speculab.engines.vllm import find_python

    if args.draft is not None:
        folders = (args.draft, args.target)
        for flag, folder in zip(("--draft", "--target"), folders):
            if not (Path(folder) / "config.json").is_file():
                raise ValueError(f"--engine vllm: {flag} {folder} must be a local Hugging Face model folder")
    elif args.pair == "tiny":
        folders = (str(TINY_DIR / "draft"), str(TINY_DIR / "target"))
    else:
        raise ValueError(f"--engine vllm: vLLM loads the draft from a folder; --pair {args.pair} has none")
    return find_python(args.vllm_python), folders


def plan_of(args):
    """The :class:`~speculab.planning.Plan` the parsed options ``args`` ask for, and the held-out prompts' token
    ids it was confirmed on."""
    from speculab.backends.pair import default_prompts
    from speculab.planning import plan
    from speculab.planning.plan import MAX_NODES

    if args.max_nodes > MAX_NODES or args.max_nodes == 1:
        raise ValueError(f"--max-nodes {args.max_nodes}: 0 (no trees) or 2..{MAX_NODES} (a tree has 2 nodes or more)")

    texts = default_prompts()
    if args.prompts > len(texts) - HELD_OUT:
        raise ValueError(
            f"--prompts {args.prompts}: at most {len(texts) - HELD_OUT} (the last {HELD_OUT} are held out)"
        )
    pair = args.pair_of(args)
    encode = pair.tokenizer.encode
    held_out = [encode(t) for t in texts[-HELD_OUT:]]
    result = plan(
        pair,
        prompts=[encode(t) for t in texts[: args.prompts]],
        held_out=held_out,
        sampling=args.sampling_of(args),
        key=args.seed,
        ks=args.k,
        bias_budget=args.bias_budget,
        max_new_tokens=args.max_new_tokens,
        per_prompt=args.per_prompt,
        confirm=args.confirm,
        confirm_runs=args.confirm_runs,
        max_nodes=args.max_nodes,
        say=lambda line: print(line, file=sys.stderr),
    )
    return result, held_out


def label(method: str) -> str:
    """A method's repr shortened for a table: a tree verifier's tree as its widths (or parents) and its draws,
    ``RRS(tree=Tree.from_widths((2, 1)), draws='distinct')`` → ``RRS(2,1; distinct)``; ``M`` i.i.d. chains of ``K``
    from the root named as the batch SD they are, ``RRS(3,1; iid)`` → ``RRS(3,1; iid) = BatchSD(M=3, K=2)``."""
    out = re.sub(r"tree=Tree\.from_widths\(\(([\d, ]+?),?\)\)", lambda m: m.group(1).replace(" ", ""), method)
    out = re.sub(r"tree=Tree\(parents=\(([\d, ]+?),?\)\)", lambda m: "parents=" + m.group(1).replace(" ", ""), out)
    out = re.sub(r", draws='(\w+)'", r"; \1", out)
    chains = re.fullmatch(r"RRS\((\d+)((?:,1)*); iid\)", out)
    if chains and int(chains.group(1)) > 1:
        out += f" = BatchSD(M={chains.group(1)}, K={1 + chains.group(2).count(',')})"
    return out


#: What the digest of a ``plan.json`` is taken with, beside its content.
PLAN_HEADER = {"format": "speculab-plan/1"}


def plan_digest(data: dict) -> str:
    """SHA-256 of a ``plan.json``'s content but its own ``digest``: ``speculab report`` refuses a plan edited since
    ``plan`` wrote it. Unkeyed, as every digest here: it cannot tell a file edited and signed again with this
    function (whose values ``report`` still checks for sense)."""
    from speculab._lines import line_digest

    return line_digest(PLAN_HEADER, data)


def to_json(result) -> dict:
    """The plan as plain JSON values (non-finite numbers as ``null``), signed (:func:`plan_digest`)."""
    data = json.loads(json.dumps(_content(result)))  # as the file holds it
    return {**data, "digest": plan_digest(data)}


def _content(result) -> dict:
    lat = result.latency
    return {
        "settings": result.settings,
        "latency": {
            "draft": [float(lat.draft(k)) for k in range(1, 3)],
            "target": [float(lat.target(k)) for k in range(1, 18)],
            **{name: getattr(lat, name) for name in ("per_round", "per_draft", "per_token", "per_run")},
            "per_drafting_run": lat.per_drafting_run,
            "per_drafting_round": lat.per_drafting_round,
            "tree_per_round": result.tree_overhead.per_round,
            "tree_per_node": result.tree_overhead.per_node,
            "tree_per_level": result.tree_overhead.per_level,
            "tree_per_distinct_node": result.tree_overhead.per_distinct_node,
        },
        "ranked": [
            {
                "method": repr(c.method),
                "K": c.K,
                "nodes": c.tree.size if c.tree is not None else c.K,
                "tree": str(c.tree) if c.tree is not None else None,
                "tokens_per_round": c.round.tokens,
                "tokens_per_round_se": json_finite(c.round_se),
                "all_kept": c.round.full,
                "tokens_per_call": c.cost.tokens_per_call,
                "bias": c.round.bias,
                "tokens_per_second": c.tokens_per_second,
                "tokens_per_second_se": json_finite(c.se),
                "allowed": c.allowed,
            }
            for c in result.ranked
        ],
        "confirmed": [
            {
                "method": r.method,
                "predicted": r.predicted,
                "predicted_se": json_finite(r.predicted_se),
                "measured": r.measured,
                "measured_se": json_finite(r.measured_se),
                "error": r.error,
                "predicted_speedup": r.predicted_speedup,
                "measured_speedup": r.measured_speedup,
                "speedup_error": r.speedup_error,
                "predicted_per_call": r.predicted_per_call,
                "measured_per_call": r.measured_per_call,
                "per_call_z": json_finite(r.per_call_z),
                "runs": r.runs,
            }
            for r in result.confirmed
        ],
        "verdict": result.verdict(),
        "shapes": [json_finite(row) for row in result.shapes],
        "engine": [json_finite({**dataclasses.asdict(r), "z": r.z, "verdict": r.verdict}) for r in result.engine],
    }


def _se_text(se: float) -> str:
    """A standard error to 3 decimals, or ``—`` where there is none (one prompt)."""
    return f"{se:.3f}" if math.isfinite(se) else "—"


def table(result, top: int = 12) -> str:
    """The ranking's first ``top`` rows (and every reference), then the confirmations."""
    s = result.settings
    smp = s["sampling"]
    lines = [
        f"plan for the {s['pair']} pair on {s['device']} ({s['dtype']}): temperature {smp['temperature']:g}"
        + (f", top-k {smp['top_k']}" if smp["top_k"] else "")
        + (f", top-p {smp['top_p']:g}" if smp["top_p"] else "")
        + f", runs of {s['max_new_tokens']} tokens one at a time; rounds along {s['contexts']} contexts of "
        f"{s['prompts']} prompts; bias budget {s['bias_budget']:g}; seed {s['key']}",
        "",
        f"{'rank':>4}  {'method':<44} {'tokens/round':>15} {'tokens/call':>11} {'bias':>7} {'tokens/s':>16}",
    ]
    allowed = [c for c in result.ranked if c.allowed]
    for i, c in enumerate(allowed[:top], 1):
        lines.append(
            f"{i:>4}  {label(repr(c.method)):<44} {c.round.tokens:>7.3f} ± {c.round_se:<5.3f} "
            f"{c.cost.tokens_per_call:>11.3f} {c.round.bias:>7.4f} {c.tokens_per_second:>8.1f} ± {c.se:<5.1f}"
        )
    over = len(result.ranked) - len(allowed)
    lines.append(
        f"({len(allowed)} candidates within the budget" + (f"; {over} over it" if over else "") + "; tokens/round: "
        "E[τ + 1] of a round of K drafts, exact given each drafted block, ± one standard error over the prompts; "
        f"tokens/call and tokens/s: of a run of {s['max_new_tokens']} tokens, its last rounds cut by the horizon, "
        "times from the fitted latency, tokens/s ± over the prompts' round laws only, not the latency's fit; a "
        "tree as its children per node at each depth, 2,1 a root with two children of one child each, or as "
        "parents=… each node's parent, 0 the root)"
    )
    if s.get("no_trees"):
        lines.append(f"(no token trees ranked: {s['no_trees']})")
    searched = [r for r in result.shapes if r["exact"] is not None]
    if searched:
        lines += [
            "",
            "tree shapes, RRS without replacement: Sequoia's program under the estimated positional acceptance vs "
            "the best of every shape searched (a shape as its children per node at each depth: 1,1 is a chain of "
            "two, 2 a root with two children; tokens/round of both on freshly drafted trees, ± one standard error "
            "over the contexts)",
        ]
        for r in searched:
            both = (
                f"the same, {r['exact_tokens']:.3f} ± {_se_text(r['exact_se'])}"
                if r["sequoia"] == r["exact"]
                else f"{r['sequoia_tokens']:.3f} ± {_se_text(r['sequoia_se'])} vs {r['exact_tokens']:.3f} ± "
                f"{_se_text(r['exact_se'])}"
            )
            lines.append(f"  {r['nodes']:>2} nodes: Sequoia {r['sequoia']:<14} exact best {r['exact']:<14} ({both})")
        if all(set(r["exact"].split(",")) == {"1"} for r in searched):
            lines.append(
                "  (every best shape searched is a chain: on this pair a tree's extra branches keep less than a "
                "deeper chain, which SD and block verification rank at every K)"
            )
    if result.confirmed:
        lines += [
            "",
            f"confirmed on {s['held_out']} held-out prompts × {s['confirm_runs']} runs, the methods taking turns "
            "run by run (all runs' tokens over all their seconds, ± one standard error over the held-out prompts; "
            "× AR: the speed-up over autoregressive decoding; z: the tokens/call error in standard errors of both "
            "sides):",
            f"  {'method':<40} {'predicted':>16} {'measured':>16} {'error':>7}  {'× AR pred / meas':>17} {'error':>7}"
            f"  {'tokens/call pred / meas (z)':>27}",
        ]
        for r in result.confirmed:
            lines.append(
                f"  {label(r.method):<40} {r.predicted:>8.1f} ± {r.predicted_se:<5.1f} {r.measured:>8.1f} ± "
                f"{r.measured_se:<5.1f} {r.error:>+7.1%}  {r.predicted_speedup:>8.3f} / {r.measured_speedup:.3f} "
                f"{r.speedup_error:>+7.1%}  {r.predicted_per_call:>11.3f} / {r.measured_per_call:.3f} "
                + (f"({r.per_call_z:+.1f})" if math.isfinite(r.per_call_z) else "(exact)")
            )
        lines.append(result.verdict())
    if result.engine:
        from speculab.planning.engine import Z_BOUND

        lines += [
            "",
            f"vLLM on the held-out prompts (requests of exactly {s['max_new_tokens']} tokens; its prefill outputs "
            "the first token alone, so the prediction counts one call more than speculab's; ± one standard error "
            f"over the plan's prompts and over the held-out prompts; refused where |z| ≥ {Z_BOUND:g}; tokens/s "
            "measured only):",
            f"  {'configuration':<22} {'predicted by':<22} {'tokens/call predicted':>22} {'measured':>16} {'z':>7} "
            f"{'tokens/s':>9}  verdict",
        ]
        for r in result.engine:
            predicted = f"{r.predicted_per_call:>12.3f} ± {_se_text(r.predicted_per_call_se):<7}"
            head = f"  {r.configuration:<22} {r.rule:<22} {predicted}"
            if r.error:
                lines.append(f"{head} vLLM failed: {r.error}")
            else:
                z = f"{r.z:+.1f}" if math.isfinite(r.z) else "—"  # plain decoding, or one prompt: no z
                lines.append(
                    f"{head} {r.measured_per_call:>8.3f} ± {_se_text(r.measured_per_call_se):<5} {z:>7} "
                    f"{r.tokens_per_second:>9.0f}  {r.verdict}"
                )
            if r.note:
                lines.append(f"    ({r.note})")
    from speculab.planning.plan import _plural, busy

    load = max(s["load_at_start"], s.get("load_at_end", 0.0))
    if busy(load, s["cpus"]):
        lines.append(
            f"note: the machine was busy (load average {load:.1f} on {s['cpus']} CPUs, torch on "
            f"{_plural(s['threads'], 'thread')}): the times are noisy; the speed-ups over autoregressive "
            "decoding, timed alongside, less so"
        )
    return "\n".join(lines)
