"""[Yin] Fig. 3 (right): single-token batch improvement vs M for two closed-form families.

Top: ``q = Ber(0.5)``, ``p = Ber(u)``: ``BI = |u − v|(1 − u^{M−1})`` (``u ≥ v``).
Bottom: ``p = Unif(V)``, ``q = Unif(V')``, ``r = |V|/|V'|``: ``BI = (1 − 1/r) − (1 − 1/r)^M``.
Lines are the closed forms; markers are the general recursion
(:func:`speculab.theory.batch_improvement`) on the actual distributions. Exact; no sampling.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab.repro._io import claim, new_figure, save_figure, write_json
from speculab.theory import batch_improvement, bernoulli_batch_improvement, uniform_batch_improvement

M_RANGE = np.arange(1, 21)
V_BER = 0.5
U_VALUES = (0.6, 0.7, 0.8, 0.9, 0.95)
UNIFORM = ((12, 8), (12, 6), (12, 3), (20, 2), (40, 1))  # (|V|, |V'|): r = 1.5, 2, 4, 10, 40


def run(out_dir: str | Path = "results") -> dict:
    """Closed forms and the general recursion for both families; writes ``yin_fig3.{png,json}``."""
    out = Path(out_dir)
    fig, (top, bottom) = new_figure(ncols=2)
    result = {"figure": "[Yin] Fig. 3", "M": M_RANGE, "bernoulli": {}, "uniform": {}, "max_abs_gap": 0.0}
    gap = 0.0
    for u in U_VALUES:
        closed = bernoulli_batch_improvement(u, V_BER, M_RANGE)
        general = np.array([batch_improvement([1 - V_BER, V_BER], [1 - u, u], M) for M in M_RANGE])
        gap = max(gap, float(np.abs(closed - general).max()))
        (line,) = top.plot(M_RANGE, closed, lw=1.4, label=f"p=Ber({u})")
        top.plot(M_RANGE, general, "o", ms=3, color=line.get_color())
        result["bernoulli"][str(u)] = {"closed_form": closed, "recursion": general, "limit": abs(u - V_BER)}
    for V, Vs in UNIFORM:
        r = V / Vs
        p = np.full(V, 1 / V)
        q = np.where(np.arange(V) < Vs, 1 / Vs, 0.0)
        closed = uniform_batch_improvement(r, M_RANGE)
        general = np.array([batch_improvement(q, p, M) for M in M_RANGE])
        gap = max(gap, float(np.abs(closed - general).max()))
        (line,) = bottom.plot(M_RANGE, closed, lw=1.4, label=f"r={r:g}")
        bottom.plot(M_RANGE, general, "o", ms=3, color=line.get_color())
        result["uniform"][f"{r:g}"] = {
            "V": V,
            "V_sub": Vs,
            "closed_form": closed,
            "recursion": general,
            "limit": 1 - 1 / r,
        }
    result["max_abs_gap"] = gap
    top.set_title(f"q = Ber({V_BER}), p = Ber(u)")
    bottom.set_title("p = Unif(V), q = Unif(V'), r = |V|/|V'|")
    for ax in (top, bottom):
        ax.set_xlabel("batch size M")
        ax.set_ylabel("batch improvement BI")
        ax.legend(fontsize=7)
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "yin_fig3.png", dpi=130)
    write_json(result, out / "yin_fig3.json")
    return result


def summary(result: dict) -> str:
    ber = ", ".join(
        f"u={u}: BI(20)={r['closed_form'][-1]:.4f}→{r['limit']:.2f}" for u, r in result["bernoulli"].items()
    )
    uni = ", ".join(f"r={k}: BI(20)={r['closed_form'][-1]:.4f}→{r['limit']:.3f}" for k, r in result["uniform"].items())
    return (
        f"[Yin] Fig. 3 — batch improvement vs M (closed forms vs general recursion, max gap "
        f"{result['max_abs_gap']:.1e})\n"
        f"  Bernoulli q=Ber(0.5): {ber}\n  uniform: {uni}"
    )


def claims(result: dict) -> list[dict]:
    """The paper's Fig. 3 (right) closed forms beside our numbers (rows of :func:`speculab.repro._io.claim`)."""
    M_last = result["M"][-1]
    cases = [*result["bernoulli"].values(), *result["uniform"].values()]
    after_one = min(min(bi for M, bi in zip(result["M"], r["closed_form"]) if M >= 2) for r in cases)
    ber = "; ".join(f"u = {u}: {r['closed_form'][-1]:.3f} → {r['limit']:.3f}" for u, r in result["bernoulli"].items())
    uni = "; ".join(f"r = {k}: {r['closed_form'][-1]:.3f} → {r['limit']:.3f}" for k, r in result["uniform"].items())
    return [
        claim(
            f"closed forms vs Thm 3's general recursion, max |difference| (M = 1..{M_last})",
            paper="BI = |u − v|(1 − u^(M−1)) (Bernoulli); (1 − 1/r) − (1 − 1/r)^M (uniform)",
            theory=f"{result['max_abs_gap']:.1e}",
        ),
        claim(f"q = Ber(0.5), p = Ber(u): BI at M = {M_last} → limit", paper="→ |u − v| = TV(p, q)", theory=ber),
        claim(f"p = Unif(V), q = Unif(V'), r = |V|/|V'|: BI at M = {M_last} → limit", paper="→ 1 − 1/r", theory=uni),
        claim(
            f"smallest BI over M = 2..{M_last}, all {len(cases)} pairs",
            paper="positive once M ≥ 2",
            theory=f"{after_one:.3f}",
        ),
    ]
