"""The plan's engine rows: vLLM's configurations of the plan's best rules decoded by vLLM, beside the prediction.

vLLM runs two of the plan's rules (:mod:`speculab.engines.vllm`): ``draft_sample_method="greedy"`` is
:class:`~speculab.methods.GreedyDraft` and ``"probabilistic"`` is :class:`~speculab.methods.SD` — the latter only
without top-k and top-p, since vLLM's probabilistic drafts are warped by the temperature alone. For each, at the
``K`` the plan ranked best for that rule, and for plain decoding, vLLM decodes the held-out prompts, and its tokens per
target call (from each request's rounds, :func:`~speculab.engines.paired.target_calls`) are set beside the exact
prediction for the rule.

vLLM schedules a request as a prefill that outputs the first token alone, then rounds; so a run of ``N`` tokens
makes ``1 + C(N − 1)`` target calls, ``C(n)`` the expected calls to finish ``n`` tokens of the plan's dynamic program
(:func:`~speculab.planning.cost.run_cost`) — one more than speculab's decoder, whose first round is also its prefill.
vLLM's requests ignore EOS, so every run is ``N`` tokens long, as predicted. Only the calls are predicted: the
plan's latency model is speculab's loop on this machine, not vLLM's; vLLM's tokens per second are measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speculab.counts import Estimate
from speculab.planning.cost import run_cost
from speculab.planning.plan import summed_by_prompt

__all__ = ["EngineRow", "vllm_rows", "Z_BOUND"]

#: The |z| from which an engine's tokens per target call are refused as not the rule's (the project's bound).
Z_BOUND = 5.0


@dataclass(frozen=True)
class EngineRow:
    """One engine configuration decoded on the held-out prompts: the rule predicting it (``autoregressive`` for plain
    decoding), tokens per target call predicted and measured (each ± its standard error over the prompts: the
    plan's, and the held-out ones whose requests are summed), the measured tokens per second, vLLM's error where it
    did not run, and a note (the plan's best of the rule past what vLLM runs)."""

    configuration: str
    rule: str
    predicted_per_call: float
    predicted_per_call_se: float
    measured_per_call: float = math.nan
    measured_per_call_se: float = math.nan
    tokens_per_second: float = math.nan
    requests: int = 0
    error: str | None = None
    note: str = ""

    @property
    def z(self) -> float:
        """``(measured − predicted) / √(se² + se²)`` of the tokens per target call."""
        se = math.hypot(self.predicted_per_call_se, self.measured_per_call_se)
        return (self.measured_per_call - self.predicted_per_call) / se if se > 0 else math.nan

    @property
    def verdict(self) -> str:
        """``agrees`` (``|z| < 5``), ``refused`` (the engine's tokens per call are not the rule's), ``exact`` (plain
        decoding: one token per call, and so it was), or why there is none (vLLM failed, one prompt)."""
        if self.error:
            return "vLLM failed"
        if self.predicted_per_call_se == 0 and self.measured_per_call_se == 0:
            return "exact" if self.measured_per_call == self.predicted_per_call else "refused"
        z = self.z
        if not math.isfinite(z):
            return "no standard error (one prompt)"
        return "agrees" if abs(z) < Z_BOUND else "refused"


def _engine_calls(latency, candidate, N: int, per_prompt: int) -> tuple[float, float]:
    """Tokens per target call of a run of ``N`` tokens as vLLM schedules it (module docstring), and its standard
    error over the plan's prompts."""

    def per_call(y) -> float:
        calls = 1.0 + (run_cost(latency, candidate.method, y.outcome.mean(axis=0), y.drafted.mean(axis=0), N - 1).calls)
        return N / calls

    y = candidate.round
    by_prompt = [y.subset(np.arange(i, i + per_prompt)) for i in range(0, y.contexts, per_prompt)]
    return per_call(y), Estimate.of([per_call(b) for b in by_prompt]).se


def vllm_rows(
    result,
    folders: tuple[str, str],
    held_out: list[list[int]],
    *,
    python: Path,
    runs: int,
    key: int,
    dtype: str = "float32",
    log: Path | None = None,
) -> list[EngineRow]:
    """vLLM's configurations of ``result``'s best greedy-draft and SD candidates, and plain decoding, decoded by
    vLLM (``python``: its environment) on ``held_out`` × ``runs`` requests (module docstring).

    Args:
      result: a :class:`~speculab.planning.Plan` of the pair loaded from ``folders`` (draft, target) with ``dtype``.
      held_out: token ids of the prompts; request ``i`` gets vLLM's seed ``key + i``.
    """
    from speculab.engines.paired import Request, target_calls
    from speculab.engines.vllm import MAX_K, configurations, run_worker, worker_job
    from speculab.methods import SD, GreedyDraft

    s = result.settings
    N, per_prompt = s["max_new_tokens"], s["contexts"] // s["prompts"]
    smp = s["sampling"]
    kinds = {GreedyDraft: "greedy"} if (smp["top_k"] or smp["top_p"]) else {GreedyDraft: "greedy", SD: "probabilistic"}
    best, beyond = {}, {}
    for c in result.ranked:  # best first, among the lookaheads asked for (the yardstick SD(K=4) may not be)
        kind = kinds.get(type(c.method))
        if not kind or kind in best or c.K not in s["ks"]:
            continue
        if c.K > MAX_K:  # vLLM runs this rule only up to MAX_K: the best it can run, said so
            beyond.setdefault(kind, c)
        else:
            best[kind] = c
    configs = [configurations(folders[0], [kind], [c.K])[-1] for kind, c in best.items()]
    configs.insert(0, configurations(folders[0], [], [])[0])  # plain
    requests = [ids for _ in range(runs) for ids in held_out]
    group = {
        "name": "plan",
        "prompts": requests,
        "seeds": [key + i for i in range(len(requests))],
        "sampling": smp,
        "max_tokens": N,
        "ignore_eos": True,
    }
    job = worker_job(folders[1], configs, [group], key=key, dtype=dtype)
    rows = []
    predictors = [(None, None), *best.items()]
    for config, (kind, candidate), out in zip(configs, predictors, run_worker(python, job, log=log)):
        note = ""
        if candidate is None:
            predicted, se, rule = 1.0, 0.0, "autoregressive"
        else:
            predicted, se = _engine_calls(result.latency, candidate, N, per_prompt)
            rule = repr(candidate.method)
            if kind in beyond:
                note = f"the plan's best of this rule, {beyond[kind].method!r}, is past vLLM's K ≤ {MAX_K}"
        error = out.get("error") if not out.get("ok") else out["groups"][0].get("error")
        if error:
            rows.append(EngineRow(config.name, rule, predicted, se, error=error, note=note))
            continue
        g = out["groups"][0]
        rounds = [r if r is not None else ([], []) for r in g["rounds"]]
        tokens = summed_by_prompt([len(t) for t in g["tokens"]], len(held_out))
        calls = summed_by_prompt(
            [target_calls(Request(p, t, *r)) for p, t, r in zip(requests, g["tokens"], rounds)], len(held_out)
        )
        per_call = Estimate.ratio(tokens, calls)
        rows.append(
            EngineRow(
                config.name,
                rule,
                predicted,
                se,
                per_call.mean,
                per_call.se,
                float(tokens.sum()) / g["seconds"],
                len(requests),
                note=note,
            )
        )
    return rows
