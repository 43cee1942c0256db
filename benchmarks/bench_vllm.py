"""vLLM beside speculab's decoders and Hugging Face's assisted generation, on the same pair and prompts.

    python benchmarks/bench_vllm.py --out benchmarks/tables      # ./dev vllm setup first

For each path — vLLM offline (plain, draft model with greedy and probabilistic drafts, n-gram lookup), speculab's
batched decoder (all prompts together) and one-prompt decoder, and transformers' assisted generation — the same
prompts decoded for the same number of new tokens at temperature 1: tokens per second (wall clock, the models'
work only: vLLM's engine is loaded before its clock starts) and tokens per target call (vLLM: each request's
prefill and rounds, from its per-request rounds; speculab counts its target calls; Hugging Face's, a hook on the
target's forward). Timings on this shared machine are one run each; the ratios within a path are the figures to read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402

NAME = "bench_vllm"


def measure(prompts: int, tokens: int, K: int, key: int) -> dict:
    from speculab.backends import Sampling, decode, load_pair
    from speculab.backends.pair import TINY_DIR, default_prompts
    from speculab.engines import vllm
    from speculab.engines.paired import Request, target_calls
    from speculab.methods import SD, Autoregressive, GreedyDraft
    from speculab.validate import _assisted, _timed

    pair = load_pair("tiny", device="cpu")
    texts = [default_prompts()[i % len(default_prompts())] for i in range(prompts)]
    ids = [pair.tokenizer.encode(t) for t in texts]
    sampling = Sampling(1.0)
    rows = []
    python = vllm.find_python()
    configs = [c for c in vllm.configurations(str(TINY_DIR / "draft"), ("greedy", "probabilistic", "ngram"), (K,))]
    group = {
        "name": "speed",
        "prompts": ids,
        "seeds": [key + i for i in range(len(ids))],
        "sampling": {"temperature": 1.0},
        "max_tokens": tokens,
        "ignore_eos": True,
    }
    job = vllm.worker_job(
        TINY_DIR / "target", configs, [group], key=key, dtype="float32", max_model_len=pair.target.max_length
    )
    for r in vllm.run_worker(python, job):
        if not r.get("ok") or r["groups"][0].get("error"):
            rows.append({"path": "vLLM offline", "what": r["name"], "error": r.get("error") or r["groups"][0]["error"]})
            continue
        g = r["groups"][0]
        out = sum(len(t) for t in g["tokens"])
        rounds = [x if x is not None else ([], []) for x in g["rounds"]]  # plain decoding reports no rounds
        calls = sum(target_calls(Request(p, t, *x)) for p, t, x in zip(ids, g["tokens"], rounds))
        rows.append({"path": "vLLM offline", "what": r["name"], "tokens": out, "seconds": g["seconds"], "calls": calls})
    decode(pair, ids[:2], SD(K=K), max_new_tokens=4, sampling=sampling, key=key)  # warm-up
    for label, batch in (("speculab batched", None), ("speculab one prompt", 1)):
        for method in (Autoregressive(), SD(K=K), GreedyDraft(K=K)):
            res, s = _timed(
                pair,
                lambda: decode(pair, ids, method, max_new_tokens=tokens, sampling=sampling, key=key, batch_size=batch),
            )
            rows.append(
                {
                    "path": label,
                    "what": repr(method),
                    "tokens": int(res.counts.tokens.sum()),
                    "seconds": s,
                    "calls": int(res.counts.oracle_calls.sum()),
                }
            )
    assisted = _assisted(pair, texts, tokens, sampling, key)
    if assisted is not None:
        rows.append(
            {
                "path": "Hugging Face",
                "what": assisted.what,
                "tokens": assisted.tokens,
                "seconds": assisted.seconds,
                "calls": assisted.target_calls,
            }
        )
    return {"prompts": prompts, "tokens": tokens, "K": K, "key": key, "pair": "tiny", "rows": rows}


def markdown(result: dict) -> str:
    lines = [
        f"{result['prompts']} prompts × {result['tokens']} new tokens, temperature 1, the tiny pair, "
        f"K = {result['K']}:",
        "",
        "| path | configuration | tokens | seconds | tokens/s | × the path's plain | tokens per target call |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    plain = {}
    for r in result["rows"]:
        if "error" not in r and r["what"] in ("plain", "Autoregressive()"):
            plain[r["path"]] = r["tokens"] / r["seconds"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['path']} | {r['what']} | — | — | — | — | does not run: {r['error'][:80]} |")
            continue
        rate = r["tokens"] / r["seconds"]
        ratio = _tables.sig(rate / plain[r["path"]]) if r["path"] in plain else "—"
        per_call = _tables.sig(r["tokens"] / r["calls"]) if r.get("calls") else "—"
        lines.append(
            f"| {r['path']} | `{r['what']}` | {r['tokens']:,} | {_tables.sig(r['seconds'])} | {_tables.sig(rate)} "
            f"| {ratio} | {per_call} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--K", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    _tables.add_threads(ap)
    ap.add_argument("--out", default=None, help="write NAME.json and NAME.md here")
    args = ap.parse_args(argv)
    _tables.at_least_one(ap, args, "--prompts", "--tokens", "--K")
    _tables.use_threads(args.threads)
    env = _tables.environment()
    result = measure(args.prompts, args.tokens, args.K, args.seed)
    if args.out:
        _tables.write(args.out, NAME, result, markdown, env, _tables.argv(argv))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
