"""Runs vLLM's own speculative decoding for speculab, inside vLLM's virtual environment (it imports vLLM and the
standard library only, never speculab, whose pins differ).

    python _vllm_worker.py JOB.json OUT.json

``JOB.json`` names the target and draft folders, the configurations (each a ``speculative_config`` or ``null`` for
plain decoding), the requests (token ids, one seed each), the sampling parameters and the KV-cache size. For each
configuration the worker builds one ``vllm.LLM``, generates every request, reads the engine's spec-decode metrics
(``LLM.get_metrics()``) before and after each group and writes, configuration by configuration, the tokens and
rounds of each request, those readings and the wall-clock seconds of loading and of generating. A configuration
vLLM refuses is recorded with its error, and the others still run. Each configuration runs in a fresh process
(``--one``), so one engine's failure or memory never reaches the next.
"""

import json
import os
import subprocess
import sys
import time
import traceback


def spec_metrics(metrics) -> list:
    """``LLM.get_metrics()``'s spec-decode metrics as rows ``[name, position, value]`` (``position``: the index of a
    per-position vector, else ``None``), one per engine; speculab names and sums them
    (:func:`speculab.engines.vllm_env.spec_counters`)."""
    rows = []
    for m in metrics:
        if m.name.startswith("vllm:spec_decode"):
            values = getattr(m, "values", None)
            rows += [[m.name, i, v] for i, v in enumerate(values)] if values is not None else [[m.name, None, m.value]]
    return rows


def run_one(job: dict, config: dict) -> dict:
    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    kwargs = dict(
        model=job["target"],
        dtype=job.get("dtype", "float32"),
        enforce_eager=True,
        seed=job["seed"],
        disable_log_stats=False,
        max_model_len=job.get("max_model_len"),
    )
    spec = config.get("speculative_config")
    if spec is not None:
        kwargs["speculative_config"] = spec
        kwargs["per_request_spec_decode_metrics"] = "detailed"  # each request's accepted drafts, round by round
    llm = LLM(**{k: v for k, v in kwargs.items() if v is not None})
    loaded = time.perf_counter() - t0
    groups = []
    for group in job["groups"]:
        s = group["sampling"]
        params = [
            SamplingParams(
                temperature=s["temperature"],
                top_k=s.get("top_k") or 0,
                top_p=s.get("top_p") or 1.0,
                max_tokens=group["max_tokens"],
                ignore_eos=group.get("ignore_eos", False),
                seed=seed,
            )
            for seed in group["seeds"]
        ]
        prompts = [{"prompt_token_ids": ids} for ids in group["prompts"]]
        try:
            before = spec_metrics(llm.get_metrics())
            t1 = time.perf_counter()
            outs = llm.generate(prompts, params, use_tqdm=False)
            seconds = time.perf_counter() - t1
        except Exception as e:  # a group vLLM fails on (e.g. top-k with drafts on the CPU): recorded, and the engine
            groups.append({"name": group["name"], "error": first_line(e)})  # is dead: the later groups fail too
            continue
        after = spec_metrics(llm.get_metrics())
        rounds = []
        for o in outs:
            m = getattr(o.outputs[0], "spec_decode_metrics", None)
            rounds.append(None if m is None else [list(m.per_step_drafted), list(m.per_step_accepted)])
        groups.append(
            {
                "name": group["name"],
                "error": None,
                "seconds": seconds,
                "tokens": [list(o.outputs[0].token_ids) for o in outs],
                "rounds": rounds,
                "metrics": [before, after],
            }
        )
    return {
        "name": config["name"],
        "ok": True,
        "error": None,
        "load_seconds": loaded,
        "groups": groups,
        "vllm": __import__("vllm").__version__,
    }


def first_line(e: Exception) -> str:
    return traceback.format_exception_only(type(e), e)[-1].strip()[:2000]


def run_sampler(job: dict) -> list[int]:
    """vLLM's rejection sampler called directly, as a black box: ``n`` rounds of one draft each on the laws ``p``
    (draft) and ``q`` (target), each round's first output token. ``draft``: ``"probabilistic"`` (drafts from ``p``,
    its probabilities handed over), ``"greedy"`` (``argmax p``, none handed over) or ``"misstated"`` (drafts from
    ``p`` with ``q`` handed over as their law: a wiring error, the control)."""
    from types import SimpleNamespace

    import torch
    from vllm.platforms import current_platform

    if hasattr(current_platform, "register_triton_kernel_overrides"):  # the CPU build's kernels, as its engine does
        current_platform.register_triton_kernel_overrides()
    from vllm.v1.sample.rejection_sampler import rejection_sample

    torch.manual_seed(job["seed"])
    p = torch.tensor(job["p"], dtype=torch.float32)
    q = torch.tensor(job["q"], dtype=torch.float32)
    n, V, mode = job["n"], p.numel(), job["draft"]
    out = []
    for start in range(0, n, 65536):
        B = min(65536, n - start)
        if mode == "greedy":
            drafts = torch.full((B,), int(p.argmax()), dtype=torch.int32)
            probs = None
        else:
            drafts = torch.multinomial(p, B, replacement=True).to(torch.int32)
            probs = (p if mode == "probabilistic" else q).expand(B, V).contiguous()
        bonus = torch.multinomial(q, B, replacement=True).to(torch.int32)[:, None]
        meta = SimpleNamespace(
            all_greedy=False, all_random=True, temperature=torch.ones(B), generators={}, top_k=None, top_p=None
        )
        tokens = rejection_sample(
            drafts,
            [1] * B,
            1,
            torch.arange(1, B + 1, dtype=torch.int32),
            probs,
            torch.log(q).expand(B, V).contiguous(),
            bonus.contiguous(),
            meta,
        )
        out.extend(tokens[:, 0].tolist())
    return out


def run_expand(job: dict) -> list:
    """vLLM's ``expand_batch_to_tokens`` (the rejection sampler spreads each request's temperature, top-k and top-p
    over its draft slots with it) on the inputs of the job, each as its dtype: what it returned."""
    import torch
    from vllm.platforms import current_platform

    if hasattr(current_platform, "register_triton_kernel_overrides"):
        current_platform.register_triton_kernel_overrides()
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    cu = torch.tensor(job["cu_num_tokens"], dtype=torch.int32)
    out = []
    for case in job["cases"]:
        x = torch.tensor(case["values"], dtype=getattr(torch, case["dtype"]))
        got = expand_batch_to_tokens(x, cu, int(job["cu_num_tokens"][-1]), replace_from=0, replace_to=1)
        out.append([float(v) for v in got.tolist()])
    return out


MODES = {"--sampler": run_sampler, "--expand": run_expand}


def main(argv) -> int:
    if len(argv) == 4 and argv[1] in MODES:
        job = json.load(open(argv[2]))
        try:
            result = {"ok": True, "result": MODES[argv[1]](job), "error": None}
        except Exception as e:
            result = {"ok": False, "result": None, "error": first_line(e)}
        with open(argv[3], "w") as f:
            json.dump(result, f)
        return 0
    if len(argv) == 4 and argv[1] == "--one":
        job = json.load(open(argv[2]))
        try:
            result = run_one(job, job["configs"][0])
        except Exception as e:  # vLLM refused the configuration: recorded, not raised
            result = {"name": job["configs"][0]["name"], "ok": False, "error": first_line(e)}
        with open(argv[3], "w") as f:
            json.dump(result, f)
        return 0
    job_path, out_path = argv[1], argv[2]
    job = json.load(open(job_path))
    results = []
    for i, config in enumerate(job["configs"]):
        one = dict(job, configs=[config])
        one_job, one_out = f"{out_path}.{i}.job.json", f"{out_path}.{i}.json"
        with open(one_job, "w") as f:
            json.dump(one, f)
        print(f"vllm worker: {config['name']}", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, __file__, "--one", one_job, one_out], env=os.environ)
        if os.path.exists(one_out):
            with open(one_out) as f:
                results.append(json.load(f))
            os.remove(one_out)
        else:
            results.append({"name": config["name"], "ok": False, "error": f"the worker exited with {proc.returncode}"})
        os.remove(one_job)
        with open(out_path, "w") as f:  # written after each configuration: a crash keeps what ran
            json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
