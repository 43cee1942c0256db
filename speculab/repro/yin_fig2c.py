"""[Yin] Fig. 2(c): expected rejections of batch SD vs the number of drafts M, with the M → ∞ limit.

Left: the Fig. 2(a) instance — Thm 3 for ``M = 1..M_max``, simulated points with
error bars, the exact limit (Prop. 1). Right: the regime the paper's proof of
Prop. 1 misses — ``supp(q) ⊄ supp(p)`` (``p = (.5, .5, 0)``, ``q = (.2, .3, .5)``
at every position): batching removes no rejection at all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab._validate import as_generator
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.repro._plots import YIN_V as V
from speculab.repro._plots import yin_instance
from speculab.sim import BatchSD, simulate
from speculab.theory import MarkovInstance, batch_expected_rejections

T = 50
M_MAX = 256
SIMULATED_M = (1, 2, 4, 8, 16, 64)
GAP_P, GAP_Q = [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]


def _curve(inst, Ms):
    return np.array([batch_expected_rejections(inst, M).rejections for M in Ms])


def run(key=10, n_runs: int = 20_000, out_dir: str | Path = "results", progress: bool = False) -> dict:
    """Theory curve, simulated points and limits for both regimes; writes ``yin_fig2c.{png,json}``."""
    out = Path(out_dir)
    rng = as_generator(key)
    inst = yin_instance(T, rng)
    gap = MarkovInstance.context_free(GAP_P, GAP_Q, T)
    Ms = np.unique(np.round(np.geomspace(1, M_MAX, 40)).astype(int))
    fig, axes = new_figure(ncols=2)
    result = {"figure": "[Yin] Fig. 2(c)", "key": describe_key(key), "n_runs": n_runs, "M": Ms, "regimes": {}}
    for ax, name, case in ((axes[0], "paper", inst), (axes[1], "support_gap", gap)):
        curve = _curve(case, Ms)
        limit = batch_expected_rejections(case, np.inf).rejections
        sims = {}
        for M in SIMULATED_M:
            est = simulate(case, BatchSD(M), n_runs, rng, progress=progress).estimate("rejections")
            sims[str(M)] = {"mean": est.mean, "se": est.se, "z": est.z(batch_expected_rejections(case, M).rejections)}
        ax.plot(Ms, curve, "-", color="tab:blue", lw=1.5, label="Theorem 3")
        ax.errorbar(
            [int(m) for m in sims],
            [s["mean"] for s in sims.values()],
            yerr=[2 * s["se"] for s in sims.values()],
            fmt="o",
            ms=4,
            color="tab:green",
            label="simulation ± 2 s.e.",
        )
        ax.plot([1], [curve[0]], "ko", ms=6, label=f"SD (M=1): {curve[0]:.2f}")
        ax.axhline(limit, color="tab:red", ls="--", lw=1.2, label=f"M → ∞ limit: {limit:.3f}")
        ax.set_xscale("log")
        ax.set_xlabel("number of drafts M")
        ax.set_ylabel("E[N_rej]")
        ax.legend(fontsize=7)
        result["regimes"][name] = {"theory": curve, "limit": limit, "simulation": sims}
    axes[0].set_title(f"T={T}, {V} tokens (key {describe_key(key)})")
    axes[1].set_title("supp(q) ⊄ supp(p): p=(.5,.5,0), q=(.2,.3,.5)")
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "yin_fig2c.png", dpi=130)
    write_json(result, out / "yin_fig2c.json")
    return result


def summary(result: dict) -> str:
    lines = [f"[Yin] Fig. 2(c) — E[N_rej] vs M (key {result['key']})"]
    for name, r in result["regimes"].items():
        th = r["theory"]
        lines.append(f"  {name}: M=1 {th[0]:.4f}, M={result['M'][-1]} {th[-1]:.4f}, limit M→∞ {r['limit']:.4f}")
        lines.append(
            "    simulated: "
            + ", ".join(f"M={m}: {s['mean']:.3f}±{s['se']:.3f} (z={s['z']:+.1f})" for m, s in r["simulation"].items())
        )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """The paper's Fig. 2(c) claims beside our numbers (rows of :func:`speculab.repro._io.claim`)."""
    ours, gap = result["regimes"]["paper"], result["regimes"]["support_gap"]
    M_last, sd = result["M"][-1], ours["simulation"]["1"]
    sd_z = signed(sd["z"])

    def worst_z(r):
        return (
            f"|z| ≤ {max(abs(float(s['z'])) for s in r['simulation'].values()):.1f} at M = "
            f"{', '.join(r['simulation'])} ({result['n_runs']:,} runs each)"
        )

    return [
        claim(
            "E[N_rej] at M = 1 (SD, Thm 1)",
            paper="16.41 (the black dot at M = 1; their instance)",
            theory=f"{ours['theory'][0]:.3f}",
            simulation=f"{pm(sd['mean'], sd['se'])} (z = {sd_z})",
        ),
        claim(
            f"E[N_rej] at M = {M_last} (Thm 3)",
            paper="decreases in M (curve; no value printed)",
            theory=f"{ours['theory'][-1]:.3f}",
        ),
        claim(
            "E[N_rej], limit M → ∞ (Prop. 1)",
            paper="a positive limit: E[N_rej] ↛ 0 (no value printed)",
            theory=f"{ours['limit']:.3f}",
        ),
        claim("simulated batch SD vs Thm 3", paper="none (the panel is Thm 3 alone)", simulation=worst_z(ours)),
        claim(
            "supp(q) ⊄ supp(p): p = (.5, .5, 0), q = (.2, .3, .5), E[N_rej] for every M",
            paper="not covered: Prop. 1's proof takes Π_m TV(q_m, p) → 0, false here",
            theory=f"{gap['theory'][0]:.3f} at M = 1, {gap['theory'][-1]:.3f} at M = {M_last}, "
            f"{gap['limit']:.3f} as M → ∞",
            simulation=worst_z(gap),
        ),
    ]
