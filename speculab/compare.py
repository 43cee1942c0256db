"""Theory vs measurement on real draft/target models, side by side (value, s.e., z).

What is compared (``p`` = draft, ``q`` = target; every test is a fixed-seed run):

* **T1 on real models** ([Yin] Thm 1): ``E[N_rej] = Σ_n E_q[TV(p_n, q_n)]``. The
  right side is estimated from *independent* target samples (autoregressive
  decoding from ``q`` with the draft run alongside), the left side is counted in
  SD runs with ``K = ∞``; a two-sample z-score compares them.
* **Paired prediction** (any method): along every run the conditional probability
  ``r_n`` that position ``n`` is a rejection, given everything before it, is known
  (SD: ``TV``; batch root: ``Π r_m``; biased: ``Σ(1 − b)p``; bonus: 0). The count
  minus ``Σ r_n`` is a martingale, so ``z = Σ(1{rej} − r) / sqrt(Σ r(1 − r))``.
* **Finite K**: counted target calls vs Leviathan's i.i.d. prediction
  ``N · (1 − α)/(1 − α^{K+1})`` with ``α = 1 − mean TV`` measured on the same runs.
* **Batch SD**: measured rejections for ``M`` drafts vs plain SD (the batch improvement).
* **Biased decoding** ([Yin] Thm 5): per position, ``P(reject) + Loss*_TV = TV(p, q)``
  holds exactly for Decoding-OPT; Decoding-UNO lies above the line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from speculab.methods import SD, Autoregressive, BatchSD, Biased
from speculab.sim.counts import _estimate

__all__ = ["Row", "Comparison", "compare"]


@dataclass(frozen=True)
class Row:
    """One line of a comparison: a predicted and a measured value with standard errors and z."""

    quantity: str
    predicted: float
    measured: float
    predicted_se: float = 0.0
    measured_se: float = 0.0
    note: str = ""
    tolerance: float | None = None  # an exact identity: checked to this tolerance, no z

    @property
    def holds(self) -> bool | None:
        """For exact identities (``tolerance`` set): whether ``|measured − predicted| <= tolerance``."""
        if self.tolerance is None:
            return None
        return abs(self.measured - self.predicted) <= self.tolerance

    @property
    def z(self) -> float:
        if self.tolerance is not None or not (math.isfinite(self.predicted) and math.isfinite(self.measured)):
            return float("nan")
        se = math.hypot(self.predicted_se, self.measured_se)
        if math.isnan(se):
            return float("nan")
        diff = self.measured - self.predicted
        if se > 0:
            return diff / se
        return 0.0 if abs(diff) < 1e-12 else math.copysign(math.inf, diff)


@dataclass
class Comparison:
    """The rows of a comparison plus its settings; ``str()`` gives the table."""

    title: str
    rows: list[Row] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "title": self.title,
            "settings": self.settings,
            "rows": [dict(quantity=r.quantity, predicted=r.predicted, predicted_se=r.predicted_se, measured=r.measured,
                          measured_se=r.measured_se, z=r.z, holds=r.holds, note=r.note) for r in self.rows],
        }

    def __str__(self) -> str:
        head = ["quantity", "theory / prediction", "measured", "z", "note"]
        body = [[r.quantity, _pm(r.predicted, r.predicted_se), _pm(r.measured, r.measured_se), _zcell(r), r.note]
                for r in self.rows]
        widths = [max(len(str(x[i])) for x in body + [head]) for i in range(len(head))]
        line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        settings = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        return "\n".join([self.title, settings, line(head), line(["-" * w for w in widths])] + [line(r) for r in body])


def _zcell(r: Row) -> str:
    if r.holds is not None:
        return "exact ✓" if r.holds else "exact ✗"
    return f"{r.z:+.2f}" if math.isfinite(r.z) else ("" if math.isnan(r.z) else str(r.z))


def _pm(value: float, se: float) -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value:.4f}" if se == 0 or not math.isfinite(se) else f"{value:.4f} ± {se:.4f}"


def _mean_se(x) -> tuple[float, float]:
    est = _estimate(np.asarray(x, dtype=float))  # the same mean ± s.e. as the simulators' Counts
    return est.mean, est.se


def _paired(result, per: str = "run") -> Row:
    """Counted rejections vs the sum of conditional rejection probabilities along the same runs.

    ``per="run"`` divides by the number of runs, ``"token"`` by the number of generated tokens.
    """
    r = np.concatenate([rec.reject_prob[rec.kind != 3] for rec in result.records])
    counted = float(result.counts.rejections.sum())
    predicted = float(r.sum())
    sd = math.sqrt(float((r * (1 - r)).sum()))
    n = result.counts.n_runs if per == "run" else float(result.counts.tokens.sum())
    return Row(f"rejections per {per} (paired: Σ r_n)", predicted / n, counted / n, predicted_se=sd / n,
               note="martingale z; r_n = P(rejection at n | past)")


def _root_improvement(records) -> list[float]:
    """Per run, Σ over round-start positions of ``TV(p_n, q_n) − Π_m r_m`` (the T3 improvement on that path)."""
    out = []
    for rec in records:
        root = np.ones(rec.kind.size, dtype=bool)
        root[1:] = (rec.kind[:-1] == 1) | (rec.kind[:-1] == 2)  # a round starts after a correction or a bonus
        out.append(float((rec.tv[root] - rec.reject_prob[root]).sum()))
    return out


def compare(
    pair,
    method=SD(),
    prompts: list[str] | None = None,
    *,
    runs_per_prompt: int = 4,
    max_new_tokens: int = 32,
    sampling=None,
    seed: int = 0,
) -> Comparison:
    """Run ``method`` on a real pair and compare its counts with the theory (see module docstring).

    Args:
      pair: from :func:`speculab.backends.load_pair`.
      method: ``SD(K=None | int)``, ``BatchSD(M, K=None)`` or ``Biased(eps, "opt" | "uno")``.
      prompts: prompt strings (default: the tiny pair's held-out prompts).
      runs_per_prompt: independent runs of each prompt.
      max_new_tokens: tokens generated per run.
      sampling: :class:`~speculab.backends.Sampling` (default temperature 1).
      seed: one seed; the reference and method runs use independent generators derived from it.
    """
    import torch

    from speculab.backends import Sampling, decode
    from speculab.backends.pair import default_prompts

    if isinstance(method, Autoregressive):
        raise ValueError("method must be SD, BatchSD or Biased; autoregressive decoding is the reference")
    sampling = sampling or Sampling()
    prompts = list(prompts or default_prompts())
    runs = [p for p in prompts for _ in range(runs_per_prompt)]
    gen = lambda k: torch.Generator(device=pair.device).manual_seed(seed * 1000 + k)  # noqa: E731
    settings = dict(pair=pair.name, method=repr(method), prompts=len(prompts), runs=len(runs),
                    max_new_tokens=max_new_tokens, temperature=sampling.temperature, seed=seed)
    comp = Comparison(f"theory vs measured: {method!r} on the {pair.name} pair", settings=settings)

    reference = decode(pair, runs, Autoregressive(), max_new_tokens=max_new_tokens, sampling=sampling,
                       generator=gen(1), track_draft=True)
    t1_runs = [float(np.nansum(rec.tv)) for rec in reference.records]
    t1, t1_se = _mean_se(t1_runs)
    result = decode(pair, runs, method, max_new_tokens=max_new_tokens, sampling=sampling, generator=gen(2))
    rej, rej_se = _mean_se(result.counts.rejections)

    if isinstance(method, SD) and method.K is None:
        comp.rows.append(Row("E[N_rej]  (Thm 1: Σ_n E_q[TV(p_n,q_n)])", t1, rej, t1_se, rej_se,
                             note="two-sample: target samples vs SD runs"))
    comp.rows.append(_paired(result))
    if isinstance(method, SD) and method.K is not None:
        tv_all = np.concatenate([rec.tv[~np.isnan(rec.tv)] for rec in result.records])
        alpha = 1.0 - float(tv_all.mean())
        K = method.K
        per_round = (1 - alpha ** (K + 1)) / (1 - alpha) if alpha < 1 else K + 1
        tokens = float(result.counts.tokens.mean())
        calls, calls_se = _mean_se(result.counts.oracle_calls)
        comp.rows.append(Row(f"target calls per run (Leviathan i.i.d., α={alpha:.3f})", tokens / per_round, calls,
                             0.0, calls_se, note="model check: assumes i.i.d. acceptance, no horizon"))
        comp.rows.append(Row("E[N_rej] ≤ T1 (finite K has bonus positions)", t1, rej, t1_se, rej_se,
                             note="expect measured ≤ theory"))
    if isinstance(method, BatchSD):
        sd = decode(pair, runs, SD(K=method.K), max_new_tokens=max_new_tokens, sampling=sampling, generator=gen(3))
        sd_rej, sd_se = _mean_se(sd.counts.rejections)
        improvement = np.asarray(_root_improvement(result.records))
        bi = float(improvement.mean())
        # SD runs vs batch runs + their own path improvement: both estimate T1 (K = ∞), so
        # z = (SD − batch − BI) / sqrt(se(SD)² + se(batch + BI)²), BI paired with its batch run.
        _, paired_se = _mean_se(result.counts.rejections + improvement)
        if method.K is None:
            comp.rows.append(Row(f"batch improvement, M={method.M} (Thm 3: E_f[Σ TV − Π r_m])", bi, sd_rej - rej, 0.0,
                                 math.hypot(sd_se, paired_se), note="measured: SD runs − batch runs"))
            comp.rows.append(Row("E[N_rej] of SD (Thm 1)", t1, sd_rej, t1_se, sd_se))
        else:
            comp.rows.append(Row(f"batch improvement, M={method.M}, K={method.K}", float("nan"), sd_rej - rej, 0.0,
                                 math.hypot(sd_se, rej_se),
                                 note="finite K: Thm 3 is for K = ∞ (bonus positions shift); measured only"))
    if isinstance(method, Biased):
        rec = [r for r in result.records]
        verified = np.concatenate([r.kind != 2 for r in rec])
        tv = np.concatenate([r.tv for r in rec])[verified]
        rp = np.concatenate([r.reject_prob for r in rec])[verified]
        loss = np.concatenate([r.loss_tv for r in rec])[verified]
        gap = rp + loss - tv
        if method.rejection == "opt":
            comp.rows.append(Row("max per-step |P(reject) + Loss*_TV − TV(p,q)|  (Thm 5)", 0.0, float(np.abs(gap).max()),
                                 note="OPT lies on the Pareto line", tolerance=1e-5))
        else:
            comp.rows.append(Row("mean per-step P(reject) + Loss_TV − TV(p,q)  (Thm 5)", float("nan"), float(gap.mean()),
                                 note="UNO lies above the line (≥ 0; 0 for OPT)"))
        comp.rows.append(Row("mean per-token TV(P_A, q)  (loss)", float("nan"), float(loss.mean()), note="exact per step"))
        kl = np.concatenate([r.loss_kl for r in rec])[verified]
        comp.rows.append(Row("mean per-token KL(P_A ‖ q)", float("nan"), float(kl.mean()), note="exact per step"))
        comp.rows.append(_paired(result, per="token"))
    comp.rows.append(Row("target calls per token", float("nan"),
                         float(result.counts.oracle_calls.sum() / result.counts.tokens.sum()), note="measured"))
    return comp
