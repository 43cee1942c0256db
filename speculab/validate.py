r"""``speculab validate``: the real-model backend checked on a device, in one command.

Convention: ``p`` = draft, ``q`` = target. Three parts, each a table of the :class:`Validation` it returns (and
JSON, and a section of ``speculab report``):

* **Laws.** Each lossless method decodes ``runs`` copies of one prompt for two tokens. The law of the first token
  must be the target's own ``q(· | prompt)`` and that of the first two ``q(x_1) q(x_2 | x_1)``, both computed here
  from the target model's logits (float64 from its float32 logits, after the same sampling warp). Each is held to
  its samples by a G-test (cells whose expected count is below 5 merged into one), at level ``α / 2`` each.
  A **biased control** — Decoding-UNO ([Yin] §4.2: ``b = min(1, (q + ε)/p)``, rejections drawn from ``q``), whose
  first-token law :math:`P_A = b\,p + q \sum_x (1 - b(x))\,p(x)` is known exactly — goes through the same test,
  which must refuse it; the table states the test's power against it (noncentral :math:`\chi^2` on the merged
  cells, Pearson's noncentrality :math:`n \sum (P_A - q)^2 / q`).
* **Theory vs measured**: the rows of :func:`speculab.compare.compare` for each drafting method, whose ``|z|``
  must stay below 5.
* **Speed** (wall clock, one run each; ratios are what to read): tokens per second of autoregressive decoding and
  of SD, batched (``batch_prompts`` prompts at once) and one prompt at a time, beside Hugging Face's assisted
  generation at the same ``K`` on the same device; and the latency model's predicted speed-up of SD over
  autoregressive decoding against the clock (:func:`speculab.backends.latency.speed_check`).

It runs wherever the models run: ``speculab validate --device cuda`` on a GPU, and on the CPU with fewer runs
(``tests/test_validate.py`` runs it in CI).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from speculab._validate import as_positive_int, spawn_seeds

__all__ = ["validate", "Validation", "LawRow", "SpeedRow", "g_test", "g_test_power", "METHODS", "CONTROL"]

#: The level of the law test (split over its two G-tests).
ALPHA = 1e-4
#: The biased control's over-acceptance ε (Decoding-UNO).
CONTROL = 0.1
#: Block length of the drafting methods (SD, batch SD, block verification, the control) and of assisted generation.
K = 4
#: The lossless methods whose law is tested (registry names); SpecDec++ runs with a constant head (its law does not
#: depend on the head).
METHODS = ("ar", "sd", "batch", "block", "specdecpp")


@dataclass(frozen=True)
class LawRow:
    """One method's law test: the G statistics, degrees of freedom and p-values of the first token and of the
    first two, whether the test refused the method, whether it should have (``lossless``: it should not), and the
    test's power against the biased control at these runs."""

    method: str
    runs: int
    lossless: bool
    first: tuple[float, int, float]
    pair: tuple[float, int, float]
    refused: bool
    power: float

    @property
    def ok(self) -> bool:
        return self.refused != self.lossless


@dataclass(frozen=True)
class SpeedRow:
    """A timed configuration: tokens generated, seconds on the clock, and what they give."""

    what: str
    tokens: int
    seconds: float
    note: str = ""

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
        return all(r.ok for r in self.laws) and all(_row_passes(r) for r in self.compare if r["gates"])

    def to_dict(self) -> dict:
        return {"settings": self.settings, "passed": self.passed,
                "laws": [asdict(r) | {"ok": r.ok} for r in self.laws], "compare": self.compare,
                "speed": [asdict(r) | {"tokens_per_second": r.tokens_per_second} for r in self.speed],
                "latency": self.latency}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=float)

    def __str__(self) -> str:
        s = self.settings
        lines = [f"validation of the {s['pair']} pair on {s['device']} ({s['dtype']}, torch {s['torch']}): "
                 f"{'PASSED' if self.passed else 'FAILED'}", "",
                 f"laws of the first two tokens ({s['runs']:,} runs each, G-tests at α = {ALPHA:g}; "
                 f"power against the control, Decoding-UNO ε = {CONTROL}):",
                 f"  {'method':<40}{'G₁ (df)':>16}{'p₁':>10}{'G₁₂ (df)':>18}{'p₁₂':>10}  {'refused':<8}{'power':>7}  ok"]
        for r in self.laws:
            lines.append(f"  {r.method:<40}{r.first[0]:>10.1f} ({r.first[1]:>3}){r.first[2]:>10.2g}"
                         f"{r.pair[0]:>12.1f} ({r.pair[1]:>3}){r.pair[2]:>10.2g}  {'yes' if r.refused else 'no':<8}"
                         f"{r.power:>7.3f}  {'✓' if r.ok else '✗'}")
        if self.compare:
            lines += ["", "theory vs measured (speculab compare; a model check is shown, not gated):"]
            for r in self.compare:
                check = f"z = {r['z']:+6.2f}" if math.isfinite(r["z"]) else ("holds" if r["holds"] else "FAILS")
                lines.append(f"  {r['method']:<16}{r['quantity']:<58}{check:>12}{'' if r['gates'] else '  (model)'}")
        if self.speed:
            lines += ["", "speed (wall clock, one run each):"]
            for r in self.speed:
                lines.append(f"  {r.what:<52}{r.tokens_per_second:>12,.0f} tokens/s  ({r.tokens:,} tokens in "
                             f"{r.seconds:.2f} s){'  ' + r.note if r.note else ''}")
        if self.latency:
            lat = self.latency
            lines.append(f"  latency model: SD speed-up over AR predicted {lat['predicted']:.3f}, measured "
                         f"{lat['measured']:.3f} (error {lat['error']:+.1%})")
        return "\n".join(lines)


def _row_passes(row: dict) -> bool:
    return abs(row["z"]) < 5 if math.isfinite(row["z"]) else bool(row["holds"])


# -- the test ---------------------------------------------------------------------------------------------------
def _cells(law: np.ndarray, n: int) -> np.ndarray:
    """Cell of each entry of ``law``: its own where ``n · law ≥ 5``, else one shared last cell."""
    big = law * n >= 5
    cell = np.full(law.size, int(big.sum()), dtype=np.int64)
    cell[big] = np.arange(int(big.sum()))
    return cell


def g_test(observed: np.ndarray, law: np.ndarray) -> tuple[float, int, float]:
    """G-test of counts ``observed`` against probabilities ``law`` (same shape, flattened): ``(G, df, p)``.

    Cells whose expected count is below 5 are merged into one; ``G = 2 Σ o log(o / e)`` over the cells with
    ``e > 0``, ``df`` = their number − 1. A count where ``law`` is 0 makes ``G`` infinite (``p = 0``): the target
    cannot draw that token, so one such draw refutes it, merged cell or not.
    """
    from scipy.stats import chi2

    observed, law = np.asarray(observed, float).ravel(), np.asarray(law, float).ravel()
    n = int(observed.sum())
    if np.any((law <= 0) & (observed > 0)):  # a draw the law cannot make: refused whatever the rest
        return math.inf, max(int((law * n >= 5).sum()), 1), 0.0
    cell = _cells(law, n)
    o = np.bincount(cell, weights=observed, minlength=cell.max() + 1)
    e = np.bincount(cell, weights=law, minlength=cell.max() + 1) * n
    if np.any((e <= 0) & (o > 0)):
        return math.inf, int((e > 0).sum()) - 1, 0.0
    keep = e > 0
    o, e = o[keep], e[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        g = 2.0 * float(np.sum(np.where(o > 0, o * np.log(o / e), 0.0)))
    df = max(int(keep.sum()) - 1, 1)
    return g, df, float(chi2.sf(g, df))


def g_test_power(wrong: np.ndarray, law: np.ndarray, n: int, alpha: float) -> float:
    """The chance that :func:`g_test` at level ``alpha`` refuses ``n`` samples drawn from ``wrong`` as samples of
    ``law``: noncentral χ² on the same merged cells, noncentrality ``n Σ (w − q)² / q``, or the chance of a draw
    where ``law`` is 0 (a certain refusal) if that is larger."""
    from scipy.stats import chi2, ncx2

    wrong, law = np.asarray(wrong, float).ravel(), np.asarray(law, float).ravel()
    impossible = -math.expm1(n * math.log1p(-min(float(wrong[law <= 0].sum()), 1.0)))  # P(a draw where law = 0)
    cell = _cells(law, n)
    q = np.bincount(cell, weights=law, minlength=cell.max() + 1)
    w = np.bincount(cell, weights=wrong, minlength=cell.max() + 1)
    keep = q > 0
    df = max(int(keep.sum()) - 1, 1)
    lam = n * float(np.sum((w[keep] - q[keep]) ** 2 / q[keep]))
    return max(float(ncx2.sf(chi2.isf(alpha, df), df, lam)), impossible)


# -- exact laws from the models ----------------------------------------------------------------------------------
def _next_laws(model, ids: list[list[int]], sampling, device, vocab: int):
    """The warped next-token law after each token list (all of one length), float64 ``(n, V)`` on the host."""
    import torch

    with torch.inference_mode():
        x = torch.tensor(ids, dtype=torch.long, device=device).reshape(len(ids), -1)
        out = []
        for chunk in torch.split(x, 256):
            logits = model(input_ids=chunk).logits[:, -1, :vocab].float()
            out.append(sampling.probs(logits.double()).cpu())
        return torch.cat(out).numpy()


def _uno_law(p: np.ndarray, q: np.ndarray, eps: float) -> np.ndarray:
    """Decoding-UNO's one-step output law ([Yin] §4.2): ``b p + q Σ (1 − b) p`` with ``b = min(1, (q + ε)/p)``."""
    b = np.where(p > q + eps, (q + eps) / np.where(p > 0, p, 1.0), 1.0)
    return b * p + q * float(np.sum((1.0 - b) * p))


def _law_row(name: str, tokens: list[list[int]], q1: np.ndarray, q2: dict, eos, control: np.ndarray,
             lossless: bool) -> LawRow:
    n = len(tokens)
    V = q1.size
    first = np.array([t[0] for t in tokens])
    g1 = g_test(np.bincount(first, minlength=V), q1)
    # the first two tokens: x1 = EOS ends a run (a cell of its own), the likely x1 each a row of q(x2 | x1),
    # every other x1 one cell ("rest", with whatever the runs drew after it)
    rows = sorted(q2)
    index = {x: i for i, x in enumerate(rows)}
    joint = np.concatenate([(q1[rows, None] * np.stack([q2[x] for x in rows])).ravel() if rows else np.zeros(0),
                            [q1[eos] if eos is not None and eos not in index else 0.0]])
    rest = max(1.0 - float(joint.sum()), 0.0)
    observed = np.zeros(joint.size + 1)
    for t in tokens:
        if t[0] in index and len(t) > 1:
            observed[index[t[0]] * V + t[1]] += 1
        elif eos is not None and t[0] == eos and eos not in index:
            observed[joint.size - 1] += 1
        else:
            observed[-1] += 1
    g12 = g_test(observed, np.append(joint, rest))
    refused = min(g1[2], g12[2]) < ALPHA / 2
    return LawRow(name, n, lossless, g1, g12, refused, g_test_power(control, q1, n, ALPHA / 2))


def _lossless_methods(pair, names) -> dict:
    """The methods whose law is tested, by label."""
    from speculab.backends.heads import constant_head
    from speculab.backends.models import HFModel
    from speculab.methods import SD, Autoregressive, BatchSD, BlockVerification, SpecDecPP

    out = {}
    for name in names:
        if name == "ar":
            out["ar"] = Autoregressive()
        elif name == "sd":
            out[f"sd K={K}"] = SD(K=K)
        elif name == "batch":
            out[f"batch M=4 K={K}"] = BatchSD(4, K=K)
        elif name == "block":
            out[f"block γ={K}"] = BlockVerification(K)
        elif name == "specdecpp":
            if not isinstance(pair.draft, HFModel):
                continue  # its head reads a Hugging Face draft's hidden states
            width = pair.draft.model.config.hidden_size
            out[f"specdecpp h=0.5 cap={K} (head ≡ 0.8)"] = SpecDecPP(0.5, head=constant_head(width, 0.8), cap=K)
        else:
            raise ValueError(f"methods: {name!r} has no law test here; choose among {', '.join(METHODS)}")
    return out


# -- the command ---------------------------------------------------------------------------------------------------
def validate(pair, *, key: Any, runs: int = 20_000, methods=METHODS, prompt: str | None = None, sampling=None,
             compare_runs: int = 4, max_new_tokens: int = 32, speed: bool = True, batch_prompts: int = 256,
             speed_tokens: int = 64, speed_prompts: int = 16, batch_size: int | None = 4096) -> Validation:
    """Validate the real-model backend on ``pair``'s device (module docstring).

    Args:
      pair: from :func:`speculab.backends.load_pair` (its device and dtype are what is validated).
      key: an int seed or a generator (required).
      runs: runs of each law test (the first two tokens of ``prompt``, decoded as one batch per ``batch_size``).
      methods: the lossless methods to test (:data:`METHODS`; the control always runs).
      prompt: the law tests' prompt (default: the tiny pair's first held-out prompt).
      sampling: :class:`~speculab.backends.Sampling` (default temperature 1).
      compare_runs: runs per prompt of each ``compare`` (``0``: no compare rows); ``max_new_tokens`` their length.
      speed: time the decoding paths and the latency model (``batch_prompts`` × ``speed_tokens`` batched;
        ``speed_prompts`` prompts one at a time).
    """
    import torch

    from speculab.backends import Sampling, decode
    from speculab.backends.pair import default_prompts
    from speculab.methods import Biased

    runs = as_positive_int(runs, "runs")
    compare_runs = as_positive_int(compare_runs, "compare_runs", minimum=0)
    as_positive_int(batch_prompts, "batch_prompts")
    as_positive_int(speed_tokens, "speed_tokens")
    speed_prompts = as_positive_int(speed_prompts, "speed_prompts", minimum=2)
    if isinstance(methods, str):
        methods = [methods]
    lossless = _lossless_methods(pair, list(methods))
    sampling = sampling or Sampling()
    if sampling.greedy:
        raise ValueError("sampling: the law test needs sampling (temperature > 0); greedy decoding has no law to test")
    prompt = prompt or default_prompts()[0]
    seeds = spawn_seeds(key, 4 + len(lossless))
    dev = pair.device
    dtype = next(pair.target.model.parameters()).dtype if hasattr(pair.target, "model") else None
    report = Validation({"pair": pair.name, "device": str(dev), "dtype": str(dtype).replace("torch.", ""),
                         "torch": torch.__version__, "runs": runs, "prompt": prompt, "K": K,
                         "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
                         "key": key if isinstance(key, int) else type(key).__name__,
                         "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"})
    # the exact laws: q(x1), the draft's p(x1) (for the control), and q(x2 | x1) for every likely x1
    ids = pair.tokenizer.encode(prompt)
    q1 = _next_laws(pair.target.model, [ids], sampling, dev, pair.vocab_size)[0]
    if hasattr(pair.draft, "model"):
        p1 = _next_laws(pair.draft.model, [ids], sampling, dev, pair.vocab_size)[0]
    else:  # a history draft: its logits are log p
        p1 = sampling.probs(pair.draft.logits(tuple(ids)).double()[None])[0].numpy()
    likely = [int(x) for x in np.flatnonzero(q1 * runs >= 5) if x != pair.eos_token_id]
    q2 = dict(zip(likely, _next_laws(pair.target.model, [ids + [x] for x in likely], sampling, dev, pair.vocab_size)))
    control = _uno_law(p1, q1, CONTROL)
    tests = [(label, m, True) for label, m in lossless.items()]
    tests.append((f"control: biased uno ε={CONTROL} K={K}", Biased(CONTROL, "uno", K=K), False))
    for (label, method, unbiased), seed in zip(tests, seeds):
        res = decode(pair, [ids] * runs, method, max_new_tokens=2, sampling=sampling, key=seed, batch_size=batch_size)
        report.laws.append(_law_row(label, res.tokens, q1, q2, pair.eos_token_id, control, unbiased))
    if compare_runs:
        from speculab.compare import compare

        for label, method in lossless.items():
            if not method.drafting or method.draft_head is not None:  # autoregressive decoding is the reference
                continue
            comp = compare(pair, method, runs_per_prompt=compare_runs, max_new_tokens=max_new_tokens,
                           sampling=sampling, key=seeds[-1])
            report.compare += [_compare_entry(label, r) for r in comp.rows if math.isfinite(r.z) or r.holds is not None]
    if speed:
        _speed(report, pair, sampling, seeds[-2], batch_prompts, speed_tokens, speed_prompts)
    return report


def _compare_entry(label: str, row) -> dict:
    """A compare row as validate reports it. It *gates* the verdict unless it is a model check (a prediction
    under an assumption the pair need not meet, e.g. Leviathan's i.i.d. acceptance): then it is shown only."""
    return {"method": label, "quantity": row.quantity, "predicted": row.predicted, "measured": row.measured,
            "z": row.z, "holds": row.holds, "gates": not row.note.startswith("model check")}


def _timed(pair, fn) -> tuple[Any, float]:
    import torch

    if pair.device.type == "cuda":
        torch.cuda.synchronize(pair.device)
    t0 = time.perf_counter()
    out = fn()
    if pair.device.type == "cuda":
        torch.cuda.synchronize(pair.device)
    return out, time.perf_counter() - t0


def _speed(report: Validation, pair, sampling, seed: int, batch_prompts: int, tokens: int, one_prompts: int) -> None:
    from speculab.backends import decode
    from speculab.backends.journal import unrecorded
    from speculab.backends.latency import speed_check
    from speculab.backends.pair import default_prompts
    from speculab.methods import SD, Autoregressive

    prompts = default_prompts()
    many = [prompts[i % len(prompts)] for i in range(batch_prompts)]
    few = [prompts[i % len(prompts)] for i in range(one_prompts)]
    with unrecorded():
        decode(pair, few[:2], SD(K=K), max_new_tokens=4, sampling=sampling, key=seed)  # warm-up (kernels, caches)
        for method in (Autoregressive(), SD(K=K)):
            res, s = _timed(pair, lambda: decode(pair, many, method, max_new_tokens=tokens, sampling=sampling,
                                                   key=seed))
            report.speed.append(SpeedRow(f"{method!r}, {batch_prompts} prompts batched", int(res.counts.tokens.sum()), s))
        for method in (Autoregressive(), SD(K=K)):
            res, s = _timed(pair, lambda: decode(pair, few, method, max_new_tokens=tokens, sampling=sampling, key=seed,
                                                   batch_size=1))
            report.speed.append(SpeedRow(f"{method!r}, one prompt at a time", int(res.counts.tokens.sum()), s))
    assisted = _assisted(pair, few, tokens, sampling, seed)
    if assisted is not None:
        report.speed.append(assisted)
    check = speed_check(pair, prompts[: max(one_prompts, 8)], SD(K=K), max_new_tokens=tokens, key=seed,
                        sampling=sampling)
    report.latency = {"predicted": check.predicted, "measured": check.measured, "error": check.error,
                      "fit_prompts": check.fit_prompts, "test_prompts": check.test_prompts}


def _assisted(pair, prompts: list[str], tokens: int, sampling, seed: int) -> SpeedRow | None:
    """Hugging Face's assisted generation (its own speculative sampling) at the same ``K``, one prompt at a time
    (``None`` where the draft is not a Hugging Face model)."""
    import torch

    if not hasattr(pair.draft, "model") or not hasattr(pair.target, "model"):
        return None
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    target, draft = pair.target.model, pair.draft.model
    settings = dict(max_new_tokens=tokens, num_assistant_tokens=K, num_assistant_tokens_schedule="constant",
                    assistant_confidence_threshold=0.0, do_sample=not sampling.greedy, pad_token_id=pair.eos_token_id)
    if not sampling.greedy:
        settings.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0)
    config = GenerationConfig(**settings)
    total = 0

    def run():
        nonlocal total
        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # its assistant's own generate call warns of transformers' own arguments
        try:
            generate()
        finally:
            hf_logging.set_verbosity(level)

    def generate():
        nonlocal total
        with torch.inference_mode(), torch.random.fork_rng(devices=[pair.device] if pair.device.type == "cuda" else []):
            torch.manual_seed(seed)  # generate draws from torch's global generator (forked: restored after)
            for p in prompts:
                ids = torch.tensor([pair.tokenizer.encode(p)], dtype=torch.long, device=pair.device)
                out = target.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                                      assistant_model=draft)
                total += out.shape[1] - ids.shape[1]

    _, s = _timed(pair, run)
    return SpeedRow(f"Hugging Face assisted generation (K = {K}), one prompt at a time", total, s,
                    note="transformers' own speculative sampling, same models")
