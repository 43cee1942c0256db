"""Real-model decoding speed on the tiny pair: AR, our SD (best K), Hugging Face assisted generation and prompt lookup.

For greedy and sampled decoding, one run of each comparison on the same prompts, one
prompt at a time as assisted generation decodes (``batch_size=1``), and at the end our
default, the prompts decoded as the rows of one batch (more in ``bench_batched.py``):
tokens/s (median over repeats), target calls per token, and for our SD the share
of wall time spent in model forward passes vs our own overhead. Ratios are
measured in one run (timings on shared CPUs are noisy).

    python benchmarks/bench_backend.py [--prompts 8] [--tokens 64] [--repeats 3] [--threads 1]
    python benchmarks/bench_backend.py --repeats 5 --out benchmarks/tables  # also bench_backend.json and .md

With ``--out DIR`` it writes ``DIR/bench_backend.json`` (the settings, every row's tokens/s, target calls per
token, share of time in forward passes and time per target call beyond them, and the ratios, per sampling mode,
and where and when it was measured) and ``DIR/bench_backend.md`` (the documentation's tables, :func:`markdown` of
that JSON).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from speculab.backends import HFModel, PromptLookupModel, Sampling, decode, load_pair
from speculab.backends.pair import default_prompts
from speculab.methods import SD, Autoregressive

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402

KS = (1, 2, 3, 4, 6, 8)
LOOKUP_KS = (1, 2, 4)


class _ForwardTimer:
    """Accumulates the wall time spent inside HFModel.extend (model forward passes)."""

    def __init__(self):
        self.seconds = 0.0
        self._orig = HFModel.extend

    def __enter__(self):
        timer = self

        def timed(model, state, ids, **kw):
            t0 = time.perf_counter()
            try:
                return timer._orig(model, state, ids, **kw)
            finally:
                timer.seconds += time.perf_counter() - t0

        HFModel.extend = timed
        return self

    def __exit__(self, *exc):
        HFModel.extend = self._orig


def _ours(pair, prompts, method, sampling, tokens, repeats, batch_size=1):
    times, fwd, res = [], [], None
    for r in range(repeats):
        getattr(pair.draft, "clear_cache", lambda: None)()  # a history draft starts each repeat with its memo empty
        with _ForwardTimer() as timer:
            t0 = time.perf_counter()
            res = decode(pair, prompts, method, max_new_tokens=tokens, sampling=sampling, key=r, batch_size=batch_size)
            times.append(time.perf_counter() - t0)
        fwd.append(timer.seconds)
    n = int(res.counts.tokens.sum())
    i = times.index(statistics.median_low(times))  # a repeat's own time (the lower middle one of an even count)
    calls = int(res.counts.oracle_calls.sum())
    return {
        "tokens_per_s": n / times[i],
        "target_calls_per_token": calls / n,
        "forward_share": fwd[i] / times[i],
        "seconds": times[i],
        "tokens": n,
        "overhead_per_call": (times[i] - fwd[i]) / calls,
    }  # all but the forward passes, per target call


def _hf(pair, prompts, K, sampling, tokens, repeats, lookup: bool = False):
    tok, target, draft = pair.tokenizer, pair.target.model, pair.draft.model
    times, n, fwd, calls = [], 0, [], []
    forward, clock = target.forward, {"seconds": 0.0, "calls": 0}

    def timed_forward(*a, **kw):  # the target's forward passes inside generate (as _ForwardTimer times ours)
        t = time.perf_counter()
        try:
            return forward(*a, **kw)
        finally:
            clock["seconds"] += time.perf_counter() - t
            clock["calls"] += 1

    target.forward = timed_forward
    try:
        for r in range(repeats):
            clock.update(seconds=0.0, calls=0)
            n = _hf_repeat(tok, target, draft, prompts, K, sampling, tokens, lookup, r, times, pair.device)
            fwd.append(clock["seconds"])
            calls.append(clock["calls"])
    finally:
        del target.forward
    i = times.index(statistics.median_low(times))  # a repeat's own time (the lower middle one of an even count)
    return {
        "tokens_per_s": n / times[i],
        "seconds": times[i],
        "tokens": n,
        "forward_share": fwd[i] / times[i],  # the target's forward passes only
        "overhead_per_call": (times[i] - fwd[i]) / calls[i],
    }


def _hf_repeat(tok, target, draft, prompts, K, sampling, tokens, lookup, r, times, device) -> int:
    """One timed pass of ``generate`` over the prompts (appended to ``times``); returns the tokens generated."""
    torch.manual_seed(r)
    n, t0 = 0, time.perf_counter()
    for prompt in prompts:
        ids = torch.tensor([tok.encode(prompt)], device=device)
        kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=tokens, pad_token_id=tok.eos_token_id)
        if sampling.greedy:
            kwargs["do_sample"] = False
        else:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_k=0)
        if K is not None and lookup:
            kwargs.update(prompt_lookup_num_tokens=K)
        elif K is not None:
            kwargs.update(assistant_model=draft, num_assistant_tokens=K, num_assistant_tokens_schedule="constant")
        out = target.generate(ids, **kwargs)
        n += out.size(1) - ids.size(1)
    times.append(time.perf_counter() - t0)
    return n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    _tables.add_threads(ap, default=1)
    ap.add_argument(
        "--out", help="write bench_backend.json and bench_backend.md into this folder, for the documentation"
    )
    args = ap.parse_args(argv)
    _tables.at_least_one(ap, args, "--prompts", "--tokens", "--repeats")

    env = _tables.environment()
    _tables.use_threads(args.threads)
    pair = load_pair("tiny", device="cpu")
    lookup = load_pair(PromptLookupModel(pair.vocab_size, max_ngram=2), "tiny-target", device="cpu")
    prompts = default_prompts()[: args.prompts]
    print(
        f"tiny pair, {len(prompts)} prompts × {args.tokens} tokens, {args.threads} thread(s), median of {args.repeats}"
    )
    result = {
        "settings": {
            "prompts": len(prompts),
            "tokens": args.tokens,
            "repeats": args.repeats,
            "threads": args.threads,
            "Ks": list(KS),
            "lookup_Ks": list(LOOKUP_KS),
            "lookup_max_ngram": 2,
        },
        "modes": {},
    }
    for label, sampling in (("greedy", Sampling(0)), ("sampled T=1", Sampling(1.0))):
        result["modes"][label] = mode = _mode(pair, lookup, prompts, sampling, args)
        _print_mode(label, mode)
    if args.out:
        path = _tables.write(args.out, "bench_backend", result, markdown, env, _tables.argv(argv))
        print(f"\nwrote {path} and {path.with_suffix('.md')}")


def _mode(pair, lookup, prompts, sampling, args) -> dict:
    """Every timing and ratio of one sampling mode (keys of a JSON object: K as a string)."""
    run = (sampling, args.tokens, args.repeats)
    ar = _ours(pair, prompts, Autoregressive(), *run)
    sds = {K: _ours(pair, prompts, SD(K=K), *run) for K in KS}
    best = max(sds, key=lambda K: sds[K]["tokens_per_s"])
    ours = sds[best]
    hf_ar = _hf(pair, prompts, None, *run)
    hf = _hf(pair, prompts, best, *run)
    # prompt lookup: ours (PromptLookupModel, max n-gram 2, nothing proposed without a match) vs
    # prompt_lookup_num_tokens
    look = {K: _ours(lookup, prompts, SD(K=K), *run) for K in LOOKUP_KS}
    hf_look = {K: _hf(pair, prompts, K, *run, lookup=True) for K in LOOKUP_KS}
    ko = max(look, key=lambda K: look[K]["tokens_per_s"])
    kh = max(hf_look, key=lambda K: hf_look[K]["tokens_per_s"])
    bo, bh = look[ko]["tokens_per_s"], hf_look[kh]["tokens_per_s"]
    # our default decoding: the prompts as the rows of one batch (assisted generation takes one prompt at a time)
    batched = _ours(pair, prompts, SD(K=best), *run, batch_size=None)
    batched_look = _ours(lookup, prompts, SD(K=ko), *run, batch_size=None)
    for v in (batched, batched_look):  # batched forward passes bypass HFModel.extend: the timer saw none of them
        del v["forward_share"], v["overhead_per_call"]
    return {
        "ar_ours": ar,
        "ar_hf": hf_ar,
        "sd_ours": {str(K): s for K, s in sds.items()},
        "best_K": best,
        "hf_assisted": hf,
        "lookup_ours": {str(K): v for K, v in look.items()},
        "lookup_hf": {str(K): v for K, v in hf_look.items()},
        "lookup_best_K_ours": ko,
        "lookup_best_K_hf": kh,
        "batched_sd": batched,
        "batched_lookup": batched_look,
        "ratios": {
            "ours_over_hf_assisted": ours["tokens_per_s"] / hf["tokens_per_s"],
            "ours_sd_over_ours_ar": ours["tokens_per_s"] / ar["tokens_per_s"],
            "lookup_ours_over_hf": {str(K): look[K]["tokens_per_s"] / hf_look[K]["tokens_per_s"] for K in LOOKUP_KS},
            "lookup_best_ours_over_best_hf": bo / bh,
            "batched_sd_over_hf_assisted": batched["tokens_per_s"] / hf["tokens_per_s"],
            "batched_lookup_over_best_hf_lookup": batched_look["tokens_per_s"] / bh,
        },
    }


def _print_mode(label: str, m: dict) -> None:
    best, kh, kb, r = m["best_K"], m["lookup_best_K_hf"], m["lookup_best_K_ours"], m["ratios"]
    ar, hf_ar, hf, ours = m["ar_ours"], m["ar_hf"], m["hf_assisted"], m["sd_ours"][str(best)]
    print(f"\n{label}")
    print(f"  {'':28s} {'tokens/s':>9s} {'target calls/token':>19s}")
    print(f"  {'AR (ours)':28s} {ar['tokens_per_s']:9.1f} {ar['target_calls_per_token']:19.3f}")
    print(f"  {'AR (HF generate)':28s} {hf_ar['tokens_per_s']:9.1f}")
    for K, s in m["sd_ours"].items():
        print(f"  {f'SD K={K} (ours)':28s} {s['tokens_per_s']:9.1f} {s['target_calls_per_token']:19.3f}")
    print(f"  {f'HF assisted, K={best}':28s} {hf['tokens_per_s']:9.1f}")
    print(
        f"  ours / HF assisted at K={best}: {r['ours_over_hf_assisted']:.2f}x;  "
        f"ours SD / ours AR: {r['ours_sd_over_ours_ar']:.2f}x"
    )
    print(
        f"  our SD time in model forwards: {100 * ours['forward_share']:.0f}%  (overhead "
        f"{100 * (1 - ours['forward_share']):.0f}%)"
    )
    look, hf_look = m["lookup_ours"], m["lookup_hf"]
    for K in look:
        print(
            f"  prompt lookup K={K}: ours {look[K]['tokens_per_s']:7.1f}, HF {hf_look[K]['tokens_per_s']:7.1f} "
            f"tokens/s ({r['lookup_ours_over_hf'][K]:.2f}x)"
        )
    print(f"  prompt lookup, best K each: ours / HF = {r['lookup_best_ours_over_best_hf']:.2f}x")
    print(
        f"  time per target call beyond the forward pass, prompt lookup at K={kh}: ours "
        f"{look[str(kh)]['overhead_per_call'] * 1e3:.3f} ms, HF {hf_look[str(kh)]['overhead_per_call'] * 1e3:.3f} ms"
    )
    print(
        f"  prompts batched (our default): SD K={best} {m['batched_sd']['tokens_per_s']:7.1f} tokens/s "
        f"({r['batched_sd_over_hf_assisted']:.2f}x HF assisted), prompt lookup K={kb} "
        f"{m['batched_lookup']['tokens_per_s']:7.1f} ({r['batched_lookup_over_best_hf_lookup']:.2f}x HF prompt lookup)"
    )


def _row(name: str, v: dict, ratio: str = "") -> list[str]:
    """A table row: tokens/s, target calls/token, share of time in forward passes, and time per target call
    beyond them (the last three where measured)."""
    calls, share, overhead = (v.get(k) for k in ("target_calls_per_token", "forward_share", "overhead_per_call"))
    return [
        name,
        f"{v['tokens_per_s']:.1f}",
        "—" if calls is None else f"{calls:.3f}",
        "—" if share is None else f"{share:.0%}",
        "—" if overhead is None else f"{overhead * 1e3:.3f}",
        ratio or "—",
    ]


def markdown(result: dict) -> str:
    """The documentation's tables, one per sampling mode, from ``result`` alone."""
    s = result["settings"]
    lines = []
    for label, m in result["modes"].items():
        best, ko, kh, r = m["best_K"], m["lookup_best_K_ours"], m["lookup_best_K_hf"], m["ratios"]
        rows = [
            _row("AR (ours)", m["ar_ours"]),
            _row("AR (HF `generate`)", m["ar_hf"]),
            *(
                _row(
                    f"SD K = {K} (ours)" + (", best" if int(K) == best else ""),
                    v,
                    f"{r['ours_sd_over_ours_ar']:.2f}× AR (ours); {r['ours_over_hf_assisted']:.2f}× HF assisted"
                    if int(K) == best
                    else "",
                )
                for K, v in m["sd_ours"].items()
            ),
            _row(f"HF assisted (`assistant_model=`), K = {best}", m["hf_assisted"]),
        ]
        for K, v in m["lookup_ours"].items():
            note = f"{r['lookup_ours_over_hf'][K]:.2f}× HF prompt lookup at K = {K}"
            if int(K) == ko:
                note += f"; best K each: {r['lookup_best_ours_over_best_hf']:.2f}× HF's best (K = {kh})"
            rows.append(_row(f"prompt lookup K = {K} (ours)" + (", best" if int(K) == ko else ""), v, note))
        for K, v in m["lookup_hf"].items():
            rows.append(_row(f"prompt lookup K = {K} (HF)" + (", best" if int(K) == kh else ""), v))
        rows += [
            _row(
                f"SD K = {best}, prompts batched (ours)",
                m["batched_sd"],
                f"{r['batched_sd_over_hf_assisted']:.2f}× HF assisted",
            ),
            _row(
                f"prompt lookup K = {ko}, prompts batched (ours)",
                m["batched_lookup"],
                f"{r['batched_lookup_over_best_hf_lookup']:.2f}× HF prompt lookup at its best K",
            ),
        ]
        head = [
            "decoding",
            "tokens/s",
            "target calls/token",
            "time in forward passes",
            "ms per target call beyond the forward pass",
            "ratio",
        ]
        lines += [
            f"{label[:1].upper()}{label[1:]}:",
            "",
            "| " + " | ".join(head) + " |",
            "| " + " | ".join("---" for _ in head) + " |",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    lines.append(
        f"The tiny pair, {s['prompts']} prompts × {s['tokens']} tokens, {s['threads']} thread"
        + ("s" if s["threads"] != 1 else "")
        + (f", the median of {s['repeats']} repeats per row" if s["repeats"] > 1 else ", one repeat per row")
        + f"; one prompt at a time except the batched rows; our prompt lookup with "
        f"n-grams of at most {s['lookup_max_ngram']} tokens. Hugging Face's time in forward passes counts the "
        "target's only (with a draft model, its time beyond the target's forward passes includes the draft's); "
        "the batched rows' forward passes are not timed."
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
