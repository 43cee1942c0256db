"""A stand-in for vLLM's worker (``speculab/engines/_vllm_worker.py``), for testing the client without vLLM.

    python _fake_vllm.py WORKER.py JOB.json OUT.json

It speaks the worker's protocol and decodes with speculab's own decoder, as vLLM schedules a request: the first
token from the target alone (the prefill), then rounds of the configuration's rule — ``draft_model`` with greedy
drafts: ``GreedyDraft(K)``; with probabilistic drafts: ``SD(K)``; with ``"synthetic"``: ``Synthetic(rates)``
(biased). Each request's rounds are reported as vLLM's detailed per-request metrics are. A job whose
configuration has ``"fake_break": "temperature"`` decodes SD with the target's law at temperature 4 but reports the
requested temperature: a broken engine, which the law test and the per-slot rows must both catch.
"""

import json
import sys

from speculab.backends import Sampling, decode, load_pair
from speculab.methods import SD, Autoregressive, GreedyDraft, Synthetic


def method_of(spec):
    if spec is None:
        return None
    K = spec["num_speculative_tokens"]
    if spec.get("rejection_sample_method") == "synthetic":
        return Synthetic(tuple(spec["synthetic_acceptance_rates"]))
    if spec.get("draft_sample_method") == "probabilistic":
        return SD(K=K)
    return GreedyDraft(K=K)


def run_group(pair, method, group, key, temperature_factor):
    s = group["sampling"]
    sampling = Sampling(s["temperature"] * temperature_factor, s.get("top_k"), s.get("top_p"))
    prompts, T = group["prompts"], group["max_tokens"]
    first = decode(pair, prompts, Autoregressive(), max_new_tokens=1, sampling=sampling, key=key)
    tokens = [list(t) for t in first.tokens]
    rounds = [None if method is None else [[], []] for _ in prompts]
    if T > 1:
        rest = [p + t for p, t in zip(prompts, tokens)]
        out = decode(pair, rest, method or Autoregressive(), max_new_tokens=T - 1, sampling=sampling, key=key + 1)
        for i, (t, r) in enumerate(zip(out.tokens, out.rounds)):
            tokens[i] += list(t)
            if method is not None:
                rounds[i] = [[int(d) for d in r.drafted], [int(a) for a in r.accepted]]
    return {"name": group["name"], "error": None, "seconds": 1.0, "tokens": tokens, "rounds": rounds}


def main(argv):
    job_path, out_path = argv[-2], argv[-1]
    job = json.load(open(job_path))
    pair = load_pair("tiny", device="cpu")
    results = []
    for c in job["configs"]:
        method = method_of(c["speculative_config"])
        factor = 4.0 if c.get("fake_break") == "temperature" else 1.0
        groups = [run_group(pair, method, g, job["seed"] + 7 * i, factor) for i, g in enumerate(job["groups"])]
        for g in groups:
            kept = [a for r in g["rounds"] if r for a in r[1]]
            drafted = [d for r in g["rounds"] if r for d in r[0]]
            after = [
                ["vllm:spec_decode_num_drafts", None, len(kept)],
                ["vllm:spec_decode_num_draft_tokens", None, sum(drafted)],
                ["vllm:spec_decode_num_accepted_tokens", None, sum(kept)],
            ]
            g["metrics"] = [[], after]
        results.append({"name": c["name"], "ok": True, "error": None, "load_seconds": 0.0, "groups": groups})
    json.dump(results, open(out_path, "w"))


if __name__ == "__main__":
    main(sys.argv)
