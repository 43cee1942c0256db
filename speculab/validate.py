r"""``speculab validate``: the real-model backend checked on a device, in one command.

Convention: ``p`` = draft, ``q`` = target. Three parts, each a table of the :class:`Validation` it returns (and
JSON, and a section of ``speculab report``):

* **Laws.** Each lossless method decodes ``runs`` copies of one prompt for :data:`~speculab.stats.LAW_TOKENS`
  tokens with blocks of :data:`LAW_K` drafts, so the first round meets corrections at every slot and, when it
  accepts its whole block, a bonus token. The law of the first token must be the target's own ``q(· | prompt)``
  and that of the first three ``q(x_1) q(x_2 | x_1) q(x_3 | x_1, x_2)``, computed from the target model's logits
  (:mod:`speculab.backends.exact_law`). Each is held to its samples by a G-test at level ``α / 2`` each, whose
  power is stated against any law at a given TV from the target (:mod:`speculab.stats`): the table gives the
  smallest ``δ`` refused with probability 0.99. A **biased control** — Decoding-UNO ([Yin] §4.2:
  ``b = min(1, (q + ε)/p)``, rejections drawn from ``q``), whose first-token law
  :math:`P_A = b\,p + q \sum_x (1 - b(x))\,p(x)` is known exactly — goes through the same test, which must refuse
  it; the table states the first-token test's power against it.
* **Theory vs measured**: the rows of :func:`speculab.compare.compare` for each drafting method, whose ``|z|``
  must stay below 5.
* **Speed** (wall clock, one run each; ratios are what to read): tokens per second of autoregressive decoding and
  of SD, batched (``batch_prompts`` prompts at once) and one prompt at a time, beside Hugging Face's assisted
  generation at the same ``K`` on the same device; and the latency model's predicted speed-up of SD over
  autoregressive decoding against the clock (:func:`speculab.backends.latency.speed_check`). Beside them the
  settings record torch's threads, the CPUs and the load average at the start and the end of the timings, and a
  warning when that load makes them meaningless (:func:`load_warning`).

It runs wherever the models run: ``speculab validate --device cuda`` on a GPU, and on the CPU with fewer runs
(``tests/test_validate.py`` runs it in CI).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from speculab._lines import line_digest
from speculab._validate import as_positive_int, check_text, spawn_seeds
from speculab.stats import ALPHA, LAW_TOKENS, POWER, LawRow, law_row

__all__ = ["validate", "Validation", "SpeedRow", "verdict", "load_warning", "METHODS", "CONTROL"]

#: The block length of the law tests' drafting methods: the first round drafts ``LAW_K`` tokens with a position
#: after them, so its bonus token is among the :data:`~speculab.stats.LAW_TOKENS` tested.
LAW_K = 2
#: The biased control's over-acceptance ε (Decoding-UNO).
CONTROL = 0.1
#: Block length of the drafting methods in the compare rows and the timings (and of assisted generation).
K = 4
#: The lossless methods whose law is tested (registry names); SpecDec++ runs with a constant head (its law does not
#: depend on the head).
METHODS = ("ar", "sd", "batch", "block", "specdecpp")
#: How far past the machine's CPUs the load average may go before the timings are called meaningless: about what
#: the one-minute average moves by with nothing else changed.
LOAD_SLACK = 0.5


@dataclass(frozen=True)
class SpeedRow:
    """A timed configuration: tokens generated, seconds on the clock, and what they give (``target_calls``: the
    target's forward calls, where counted; 0 where not)."""

    what: str
    tokens: int
    seconds: float
    note: str = ""
    target_calls: int = 0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else math.nan


@dataclass
class Validation:
    """What :func:`validate` found (its ``settings``, law rows, compare rows and speed rows)."""

    settings: dict
    laws: list[LawRow] = field(default_factory=list)
    compare: list[dict] = field(default_factory=list)
    speed: list[SpeedRow] = field(default_factory=list)
    latency: dict | None = None

    @property
    def passed(self) -> bool:
        """Every law test decided as it should, every gating compare row with a z is within 5 standard errors and
        every gating one-sided or exact row holds."""
        return verdict([r.ok for r in self.laws], self.compare)

    def to_dict(self) -> dict:
        return {
            "settings": self.settings,
            "passed": self.passed,
            "laws": [asdict(r) | {"ok": r.ok} for r in self.laws],
            "compare": self.compare,
            "speed": [asdict(r) | {"tokens_per_second": r.tokens_per_second} for r in self.speed],
            "latency": self.latency,
        }

    def to_json(self) -> str:
        """``validation.json``: :meth:`to_dict` as JSON with its ``digest`` (:func:`file_digest`)."""
        data = json.loads(json.dumps(self.to_dict(), default=float))  # as the file holds it
        return json.dumps({**data, "digest": file_digest(data)}, indent=2)

    def __str__(self) -> str:
        s = self.settings
        lines = [
            f"validation of the {s['pair']} pair on {s['device']} ({s['dtype']}, torch {s['torch']}): "
            f"{'PASSED' if self.passed else 'FAILED'}",
            "",
            f"laws of the first token and of the first {s['law_tokens']} ({s['runs']:,} runs each, blocks of "
            f"{s['law_K']}; G-tests at α = {ALPHA:g}; power: against the control, Decoding-UNO ε = {CONTROL}, "
            f"and the smallest TV refused with probability {POWER}):",
            f"  {'method':<40}{'G₁ (df)':>14}{'p₁':>9}{'G₁₂₃ (df)':>16}{'p₁₂₃':>9}  {'refused':<8}"
            f"{'power':>6}{'TV₁':>8}{'TV₁₂₃':>8}  ok",
        ]
        for r in self.laws:
            lines.append(
                f"  {r.method:<40}{r.first[0]:>8.1f} ({r.first[1]:>3}){r.first[2]:>9.2g}"
                f"{r.joint[0]:>10.1f} ({r.joint[1]:>3}){r.joint[2]:>9.2g}  {'yes' if r.refused else 'no':<8}"
                f"{r.power:>6.3f}{r.detectable[0]:>8.3f}{r.detectable[1]:>8.3f}  {'✓' if r.ok else '✗'}"
            )
        if self.compare:
            lines += ["", "theory vs measured (speculab compare; a model check is shown, not gated):"]
            for r in self.compare:
                check = f"z = {r['z']:+6.2f}" if math.isfinite(r["z"]) else ("holds" if r["holds"] else "FAILS")
                lines.append(f"  {r['method']:<16}{r['quantity']:<58}{check:>12}{'' if r['gates'] else '  (model)'}")
        if self.speed:
            lines += ["", f"speed (wall clock, one run each{timing_note(s)}):"]
            for r in self.speed:
                lines.append(
                    f"  {r.what:<66}{r.tokens_per_second:>10,.0f} tokens/s  ({r.tokens:,} tokens in "
                    f"{r.seconds:.2f} s){'  ' + r.note if r.note else ''}"
                )
        if self.latency:
            lat = self.latency
            lines.append(
                f"  latency model: SD speed-up over AR predicted {lat['predicted']:.3f}, measured "
                f"{lat['measured']:.3f} (error {lat['error']:+.1%})"
            )
        if s.get("load_warning"):
            lines.append(s["load_warning"])
        return "\n".join(lines)


def timing_note(settings: dict) -> str:
    """``; torch on 2 threads, 2 CPUs, load average 0.4 → 1.9``: where the timings ran, from the settings (nothing in
    a file written before they were recorded)."""
    if settings.get("load_at_start") is None:
        return ""
    return (
        f"; torch on {settings['threads']} thread{'s' if settings['threads'] != 1 else ''}, {settings['cpus']} CPUs, "
        f"load average {settings['load_at_start']:.1f} → {settings['load_at_end']:.1f}"
    )


def load_warning(load: float, cpus: int | None, threads: int) -> str | None:
    """The warning of timings taken at the one-minute load average ``load`` on ``cpus`` CPUs with torch on
    ``threads`` threads, or ``None`` where they measure the decoding.

    The load average counts the runnable threads, the timed ones among them (the minute before the timings is
    spent decoding too): other work holds about ``load − threads`` CPUs, and the timed threads have cores to
    themselves while it stays within the ``cpus − threads`` they leave. Past that by more than :data:`LOAD_SLACK`
    (``load − threads > cpus − threads + 0.5``, that is ``load > cpus + 0.5``) the timed threads spin waiting
    for each other against other processes and the speed rows measure that contention (on two busy cores, batched
    decoding ran about 27 times slower). More threads than CPUs contend with themselves alike. Without a CPU
    count (``os.cpu_count()`` gave ``None``) nothing can be said.
    """
    if cpus is None:
        return None
    if threads > cpus:
        return (
            f"warning: torch ran on {threads} threads on {cpus} CPUs: the threads contend for the cores, so the "
            "speed rows measure that, not the decoding; rerun with --threads at most the CPUs"
        )
    if load > cpus + LOAD_SLACK:
        return (
            f"warning: the machine was busy during the timings (load average {load:.1f} on {cpus} CPUs, torch on "
            f"{threads} thread{'s' if threads != 1 else ''}): other work held about {load - threads:.1f} CPUs where "
            f"{cpus - threads} were free of the timed threads, so the speed rows measure the contention, not the "
            "decoding; rerun on an idle machine or with fewer --threads"
        )
    return None


#: What the digest of a ``validation.json`` is taken with, beside its content.
FILE_HEADER = {"format": "speculab-validation/1"}


def file_digest(data: dict) -> str:
    """SHA-256 of a ``validation.json``'s content but its own ``digest`` (:func:`speculab._lines.line_digest`
    under :data:`FILE_HEADER`): ``speculab report`` refuses a file edited since ``validate`` wrote it. The digest is
    unkeyed: it proves the content was signed by this function, not measured — a file edited and signed again with
    values a validation could give (another device name, other G statistics with their p-values) is shown as is."""
    return line_digest(FILE_HEADER, data)


def verdict(oks: list[bool], compare: list[dict]) -> bool:
    """The validation's verdict from its law tests' ``ok`` and its compare rows (as ``to_dict`` writes them): every
    law test decided as it should, every gating row with a finite z is within 5 standard errors, and every gating
    row without one (a one-sided or exact check) holds."""
    passes = lambda r: abs(r["z"]) < 5 if math.isfinite(r["z"]) else bool(r["holds"])  # noqa: E731
    return all(oks) and all(passes(r) for r in compare if r["gates"])


def _uno_law(p: np.ndarray, q: np.ndarray, eps: float) -> np.ndarray:
    """Decoding-UNO's one-step output law ([Yin] §4.2): ``b p + q Σ (1 − b) p`` with ``b = min(1, (q + ε)/p)``."""
    b = np.where(p > q + eps, (q + eps) / np.where(p > 0, p, 1.0), 1.0)
    return b * p + q * float(np.sum((1.0 - b) * p))


def _law_batch(pair, rows: int) -> int:
    """Prompts decoded together in a law test: as many as keep a round's float64 laws (``rows`` draft rows, ``LAW_K
    + 1`` slots, about eight arrays of them) within 1 GiB, between 16 and 4,096."""
    per_prompt = rows * (LAW_K + 1) * pair.vocab_size * 8 * 8
    return int(min(4096, max(16, (1 << 30) // per_prompt)))


def _lossless_methods(pair, names, k: int) -> dict:
    """The methods whose law is tested, by label, with blocks of ``k`` drafts."""
    from speculab.backends.heads import constant_head
    from speculab.backends.models import HFModel
    from speculab.methods import SD, Autoregressive, BatchSD, BlockVerification, SpecDecPP

    out = {}
    for name in names:
        if name == "ar":
            out["ar"] = Autoregressive()
        elif name == "sd":
            out[f"sd K={k}"] = SD(K=k)
        elif name == "batch":
            out[f"batch M=4 K={k}"] = BatchSD(4, K=k)
        elif name == "block":
            out[f"block K={k}"] = BlockVerification(k)
        elif name == "specdecpp":
            if not isinstance(pair.draft, HFModel):
                continue  # its head reads a Hugging Face draft's hidden states
            width = pair.draft.model.config.hidden_size
            out[f"specdecpp h=0.5 max_K={k} (head ≡ 0.8)"] = SpecDecPP(0.5, head=constant_head(width, 0.8), max_K=k)
        else:
            raise ValueError(f"methods: {name!r} has no law test here; choose among {', '.join(METHODS)}")
    return out


# -- the command ---------------------------------------------------------------------------------------------------
def validate(
    pair,
    *,
    key: Any,
    runs: int = 20_000,
    methods=METHODS,
    prompt: str | None = None,
    sampling=None,
    compare_runs: int = 4,
    max_new_tokens: int = 32,
    speed: bool = True,
    batch_prompts: int = 256,
    speed_tokens: int = 64,
    speed_prompts: int = 16,
    batch_size: int | None = None,
) -> Validation:
    """Validate the real-model backend on ``pair``'s device (module docstring).

    Args:
      pair: from :func:`speculab.backends.load_pair` (its device and dtype are what is validated).
      key: an int seed or a generator (required).
      runs: runs of each law test (the first :data:`~speculab.stats.LAW_TOKENS` tokens of ``prompt``).
      methods: the lossless methods to test, registry names among :data:`METHODS` (the control always runs).
      prompt: the law tests' prompt (default: the tiny pair's first held-out prompt).
      sampling: :class:`~speculab.backends.Sampling` with temperature > 0 (default temperature 1).
      compare_runs: runs per prompt of each ``compare`` (``0``: no compare rows); ``max_new_tokens`` their length.
      speed: time the decoding paths and the latency model (``batch_prompts`` × ``speed_tokens`` batched;
        ``speed_prompts`` prompts one at a time).
      batch_size: prompts decoded together in a law test (default: what keeps a round's laws within 1 GiB).
    """
    import torch

    from speculab.backends import Sampling, decode
    from speculab.backends.exact_law import next_law, target_cells
    from speculab.backends.pair import check_pair, default_prompts
    from speculab.methods import Biased

    check_pair(pair)
    runs = as_positive_int(runs, "runs")
    compare_runs = as_positive_int(compare_runs, "compare_runs", minimum=0)
    as_positive_int(batch_prompts, "batch_prompts")
    as_positive_int(speed_tokens, "speed_tokens")
    speed_prompts = as_positive_int(speed_prompts, "speed_prompts", minimum=2)
    if batch_size is not None:
        batch_size = as_positive_int(batch_size, "batch_size")
    methods = [methods] if isinstance(methods, str) else methods
    if methods is None or not hasattr(methods, "__iter__") or not list(methods):
        raise ValueError(f"methods must name at least one of {', '.join(METHODS)}; got {methods!r}")
    methods = list(methods)
    sampling = Sampling() if sampling is None else sampling
    if not isinstance(sampling, Sampling):
        raise ValueError(f"sampling must be a speculab.backends.Sampling; got {sampling!r}")
    if sampling.greedy:
        raise ValueError("sampling: the law test needs sampling (temperature > 0); greedy decoding has no law to test")
    if prompt is not None and (not isinstance(prompt, str) or not prompt):
        raise ValueError(f"prompt must be a non-empty string (or None for the default); got {prompt!r}")
    if not hasattr(pair.target, "model"):
        raise ValueError("pair: validate needs a Hugging Face target (its logits give the exact law)")
    lossless = _lossless_methods(pair, methods, LAW_K)
    prompt = check_text(prompt or default_prompts()[0], "prompt")
    seeds = spawn_seeds(key, 4 + len(lossless))
    dev = pair.device
    dtype = next(pair.target.model.parameters()).dtype
    report = Validation(
        {
            "pair": pair.name,
            "device": str(dev),
            "dtype": str(dtype).replace("torch.", ""),
            "torch": torch.__version__,
            "runs": runs,
            "prompt": prompt,
            "K": K,
            "law_K": LAW_K,
            "law_tokens": LAW_TOKENS,
            "temperature": sampling.temperature,
            "top_k": sampling.top_k,
            "top_p": sampling.top_p,
            "key": key if isinstance(key, int) else type(key).__name__,
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "load_at_start": None,  # the one-minute load average at the start and the end of the timings
            "load_at_end": None,
            "load_warning": None,
        }
    )
    # the exact laws: q(x1), the draft's p(x1) (for the control), and the target's cells of the first tokens
    ids = pair.tokenizer.encode(prompt)
    q1 = next_law(pair.target.model, ids, sampling, dev, pair.vocab_size)
    if hasattr(pair.draft, "model"):
        p1 = next_law(pair.draft.model, ids, sampling, dev, pair.vocab_size)
    else:  # a history draft: its logits are log p
        p1 = sampling.probs(pair.draft.logits(tuple(ids)).double()[None])[0].numpy()
    cells = target_cells(pair, ids, sampling, runs, LAW_TOKENS)
    control = _uno_law(p1, q1, CONTROL)
    tests = [(label, m, True) for label, m in lossless.items()]
    tests.append((f"control: biased uno ε={CONTROL} K={LAW_K}", Biased(CONTROL, "uno", K=LAW_K), False))
    for (label, method, unbiased), seed in zip(tests, seeds):
        size = batch_size or _law_batch(pair, method.rows)
        res = decode(
            pair, [ids] * runs, method, max_new_tokens=LAW_TOKENS, sampling=sampling, key=seed, batch_size=size
        )
        report.laws.append(law_row(label, res.tokens, q1, cells, pair.eos_token_id, control, unbiased))
    if compare_runs:
        from speculab.compare import compare
        from speculab.methods.capabilities import head_of

        for label, method in _lossless_methods(pair, methods, K).items():
            if not method.drafting or head_of(method) is not None:  # autoregressive decoding is the reference
                continue
            comp = compare(
                pair,
                method,
                runs_per_prompt=compare_runs,
                max_new_tokens=max_new_tokens,
                sampling=sampling,
                key=seeds[-1],
            )
            report.compare += [_compare_entry(label, r) for r in comp.rows if math.isfinite(r.z) or r.holds is not None]
    if speed:
        _speed(report, pair, sampling, seeds[-2], batch_prompts, speed_tokens, speed_prompts)
    return report


def _compare_entry(label: str, row) -> dict:
    """A compare row as validate reports it. It *gates* the verdict unless it is a model check (a prediction
    under an assumption the pair need not meet, e.g. Leviathan's i.i.d. acceptance): then it is shown only."""
    return {
        "method": label,
        "quantity": row.quantity,
        "predicted": row.predicted,
        "measured": row.measured,
        "z": row.z,
        "holds": row.holds,
        "gates": not row.note.startswith("model check"),
    }


def _timed(pair, fn) -> tuple[Any, float]:
    """``fn()`` and its wall time, the device's queued work included."""
    pair.synchronize()
    t0 = time.perf_counter()
    out = fn()
    pair.synchronize()
    return out, time.perf_counter() - t0


def _speed(report: Validation, pair, sampling, key: int, batch_prompts: int, tokens: int, one_prompts: int) -> None:
    from speculab.backends import decode
    from speculab.backends.journal import unrecorded
    from speculab.backends.latency import speed_check
    from speculab.backends.pair import default_prompts
    from speculab.methods import SD, Autoregressive

    settings = report.settings
    settings["load_at_start"] = os.getloadavg()[0]
    prompts = default_prompts()
    many = [prompts[i % len(prompts)] for i in range(batch_prompts)]
    few = [prompts[i % len(prompts)] for i in range(one_prompts)]
    with unrecorded():
        decode(pair, few[:2], SD(K=K), max_new_tokens=4, sampling=sampling, key=key)  # warm-up (kernels, caches)
        for method in (Autoregressive(), SD(K=K)):
            res, s = _timed(pair, lambda: decode(pair, many, method, max_new_tokens=tokens, sampling=sampling, key=key))
            tokens_out = int(res.counts.tokens.sum())
            report.speed.append(SpeedRow(f"{method}, {batch_prompts} prompts batched", tokens_out, s))
        for method in (Autoregressive(), SD(K=K)):
            res, s = _timed(
                pair, lambda: decode(pair, few, method, max_new_tokens=tokens, sampling=sampling, key=key, batch_size=1)
            )
            report.speed.append(SpeedRow(f"{method}, one prompt at a time", int(res.counts.tokens.sum()), s))
    assisted = _assisted(pair, few, tokens, sampling, key)
    if assisted is not None:
        report.speed.append(assisted)
    check = speed_check(
        pair, prompts[: max(one_prompts, 8)], SD(K=K), max_new_tokens=tokens, key=key, sampling=sampling
    )
    report.latency = {
        "predicted": check.predicted,
        "measured": check.measured,
        "error": check.error,
        "fit_prompts": check.fit_prompts,
        "test_prompts": check.test_prompts,
    }
    settings["load_at_end"] = os.getloadavg()[0]
    busiest = max(settings["load_at_start"], settings["load_at_end"])
    settings["load_warning"] = load_warning(busiest, settings["cpus"], settings["threads"])


def _assisted(pair, prompts: list[str], tokens: int, sampling, key: int) -> SpeedRow | None:
    """Hugging Face's assisted generation (its own speculative sampling) at the same ``K``, one prompt at a time
    (``None`` where the draft is not a Hugging Face model)."""
    import torch

    if not hasattr(pair.draft, "model") or not hasattr(pair.target, "model"):
        return None
    from transformers.utils import logging as hf_logging

    from speculab.backends.hf_reference import assisted_config

    target, draft = pair.target.model, pair.draft.model
    config = assisted_config(pair, sampling, K=K, max_new_tokens=tokens)
    total = calls = 0

    def count(module, args):
        nonlocal calls
        calls += 1

    def run():
        nonlocal total
        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # its assistant's own generate call warns of transformers' own arguments
        try:
            with (
                torch.inference_mode(),
                torch.random.fork_rng(devices=[pair.device] if pair.device.type == "cuda" else []),
            ):
                torch.manual_seed(key)  # generate draws from torch's global generator (forked: restored after)
                for p in prompts:
                    ids = torch.tensor([pair.tokenizer.encode(p)], dtype=torch.long, device=pair.device)
                    out = target.generate(
                        ids, attention_mask=torch.ones_like(ids), generation_config=config, assistant_model=draft
                    )
                    total += out.shape[1] - ids.shape[1]
        finally:
            hf_logging.set_verbosity(level)

    hook = target.register_forward_pre_hook(count)  # each of the target's forward calls: a prefill or a round
    try:
        _, s = _timed(pair, run)
    finally:
        hook.remove()
    return SpeedRow(
        f"Hugging Face assisted generation (K = {K}), one prompt at a time",
        total,
        s,
        note="transformers' own speculative sampling, same models",
        target_calls=calls,
    )
