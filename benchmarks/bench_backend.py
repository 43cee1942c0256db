"""Real-model decoding speed on the tiny pair: AR, our SD (best K), Hugging Face assisted generation and prompt lookup.

For greedy and sampled decoding, one run of each comparison on the same prompts, one
prompt at a time as assisted generation decodes (``batch_size=1``), and at the end our
default, the prompts decoded as the rows of one batch (more in ``bench_batched.py``):
tokens/s (median over repeats), target calls per token, and for our SD the share
of wall time spent in model forward passes vs our own overhead. Ratios are
measured in one run (timings on shared CPUs are noisy).

    python benchmarks/bench_backend.py [--prompts 8] [--tokens 64] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from speculab.backends import HFModel, PromptLookupModel, Sampling, decode, load_pair
from speculab.backends.pair import default_prompts
from speculab.methods import SD, Autoregressive

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
    i = times.index(statistics.median(times))
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
    i = times.index(statistics.median(times))
    return {
        "tokens_per_s": n / times[i],
        "seconds": times[i],
        "tokens": n,
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair("tiny", device="cpu")
    lookup = load_pair(PromptLookupModel(pair.vocab_size, max_ngram=2), "tiny-target", device="cpu")
    prompts = default_prompts()[: args.prompts]
    print(
        f"tiny pair, {len(prompts)} prompts × {args.tokens} tokens, {args.threads} thread(s), median of {args.repeats}"
    )
    for label, sampling in (("greedy", Sampling(0)), ("sampled T=1", Sampling(1.0))):
        ar = _ours(pair, prompts, Autoregressive(), sampling, args.tokens, args.repeats)
        sds = {K: _ours(pair, prompts, SD(K=K), sampling, args.tokens, args.repeats) for K in KS}
        best = max(sds, key=lambda K: sds[K]["tokens_per_s"])
        ours = sds[best]
        hf_ar = _hf(pair, prompts, None, sampling, args.tokens, args.repeats)
        hf = _hf(pair, prompts, best, sampling, args.tokens, args.repeats)
        print(f"\n{label}")
        print(f"  {'':28s} {'tokens/s':>9s} {'target calls/token':>19s}")
        print(f"  {'AR (ours)':28s} {ar['tokens_per_s']:9.1f} {ar['target_calls_per_token']:19.3f}")
        print(f"  {'AR (HF generate)':28s} {hf_ar['tokens_per_s']:9.1f}")
        for K in KS:
            s = sds[K]
            print(f"  {f'SD K={K} (ours)':28s} {s['tokens_per_s']:9.1f} {s['target_calls_per_token']:19.3f}")
        print(f"  {f'HF assisted, K={best}':28s} {hf['tokens_per_s']:9.1f}")
        print(
            f"  ours / HF assisted at K={best}: {ours['tokens_per_s'] / hf['tokens_per_s']:.2f}x;  "
            f"ours SD / ours AR: {ours['tokens_per_s'] / ar['tokens_per_s']:.2f}x"
        )
        print(
            f"  our SD time in model forwards: {100 * ours['forward_share']:.0f}%  (overhead "
            f"{100 * (1 - ours['forward_share']):.0f}%)"
        )
        # prompt lookup: ours (PromptLookupModel, max n-gram 2, nothing proposed without a match) vs
        # prompt_lookup_num_tokens
        look = {K: _ours(lookup, prompts, SD(K=K), sampling, args.tokens, args.repeats) for K in LOOKUP_KS}
        hf_look = {K: _hf(pair, prompts, K, sampling, args.tokens, args.repeats, lookup=True) for K in LOOKUP_KS}
        for K in LOOKUP_KS:
            print(
                f"  prompt lookup K={K}: ours {look[K]['tokens_per_s']:7.1f}, HF {hf_look[K]['tokens_per_s']:7.1f} "
                f"tokens/s ({look[K]['tokens_per_s'] / hf_look[K]['tokens_per_s']:.2f}x)"
            )
        bo, bh = (max(d.values(), key=lambda v: v["tokens_per_s"])["tokens_per_s"] for d in (look, hf_look))
        print(f"  prompt lookup, best K each: ours / HF = {bo / bh:.2f}x")
        kh = max(hf_look, key=lambda K: hf_look[K]["tokens_per_s"])
        print(
            f"  time per target call beyond the forward pass, prompt lookup at K={kh}: ours "
            f"{look[kh]['overhead_per_call'] * 1e3:.3f} ms, HF {hf_look[kh]['overhead_per_call'] * 1e3:.3f} ms"
        )
        # our default decoding: the prompts as the rows of one batch (assisted generation takes one prompt at a time)
        kb = max(look, key=lambda K: look[K]["tokens_per_s"])
        batched = _ours(pair, prompts, SD(K=best), sampling, args.tokens, args.repeats, batch_size=None)
        batched_look = _ours(lookup, prompts, SD(K=kb), sampling, args.tokens, args.repeats, batch_size=None)
        print(
            f"  prompts batched (our default): SD K={best} {batched['tokens_per_s']:7.1f} tokens/s "
            f"({batched['tokens_per_s'] / hf['tokens_per_s']:.2f}x HF assisted), prompt lookup K={kb} "
            f"{batched_look['tokens_per_s']:7.1f} ({batched_look['tokens_per_s'] / bh:.2f}x HF prompt lookup)"
        )


if __name__ == "__main__":
    main()
