"""[SPR] Fig. 6: expected stopping time of SPRINTER's drafting loop vs ``η_TP`` (``r = 5``, ``t_d = 0.1``).

Lines: [SPR] Thm 3.4, ``E[T_stop] = (1 − η_TP^r) t_d/(1 − η_TP) + η_TP^r t_d/(1 − η_FP) = t_d (E[N] + 1)``
(the ``N`` passed drafts plus the one the verifier stops at; verifier time hidden,
``t_v <= t_d``). Markers: ``t_d (N + 1)`` from a literal simulation of the stopping
process (first ``r`` drafts acceptable, later ones not), ±2 s.e.
Convention: ``p`` = draft, ``q`` = target ([SPR] swaps the letters).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab._validate import as_generator
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.methods.sprinter import simulate_stopping
from speculab.theory.sprinter import sprinter_stopping_time

R = 5
T_D = 0.1
ETA_FP = (0.1, 0.5)
ETA_TP_POINTS = np.round(np.linspace(0.0, 1.0, 21), 10)
ETA_TP_CURVE = np.linspace(0.0, 1.0, 401)


def run(key=0, n_runs: int = 200_000, out_dir: str | Path = "results", progress: bool = False) -> dict:
    """Thm 3.4 curves and ``n_runs`` simulated stopping times per point; writes ``sprinter_fig6.{png,json}``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = as_generator(key)
    result = {
        "figure": "[SPR] Fig. 6",
        "key": describe_key(key),
        "r": R,
        "t_d": T_D,
        "n_runs": n_runs,
        "curve": {"eta_tp": ETA_TP_CURVE},
        "points": {},
        "limit_eta_tp_1": {},
    }
    fig, (ax,) = new_figure()
    for eta_fp, color in zip(ETA_FP, ("tab:blue", "tab:red")):
        key = str(eta_fp)
        curve = sprinter_stopping_time(ETA_TP_CURVE, eta_fp, R, T_D)
        pts = {"eta_tp": [], "closed_form": [], "mean": [], "se": [], "z": []}
        for eta_tp in ETA_TP_POINTS:
            n = simulate_stopping(float(eta_tp), eta_fp, R, n_runs, rng)  # integers: exact when constant
            theory = float(sprinter_stopping_time(float(eta_tp), eta_fp, R, T_D))
            mean_n, se_n = float(n.mean()), float(n.std(ddof=1) / np.sqrt(n_runs))
            gap = T_D * (mean_n + 1) - theory
            if se_n > 0:
                z = gap / (T_D * se_n)
            else:  # every run gave the same N (e.g. η_TP = 0)
                z = 0.0 if abs(gap) <= 1e-12 else float(np.copysign(np.inf, gap))
            pts["eta_tp"].append(float(eta_tp))
            pts["closed_form"].append(theory)
            pts["mean"].append(T_D * (mean_n + 1.0))  # T_stop = t_d (N + 1)
            pts["se"].append(T_D * se_n)
            pts["z"].append(z)
        result["curve"][key] = curve
        result["points"][key] = pts
        limit = float(sprinter_stopping_time(1.0, eta_fp, R, T_D))
        result["limit_eta_tp_1"][key] = {
            "stopping_time": limit,
            "gap_over_r_td": limit - R * T_D,
            "gap_over_r_plus_1_td": limit - (R + 1) * T_D,
        }
        ax.plot(ETA_TP_CURVE, curve, color=color, lw=1.5, label=f"Thm 3.4, η_FP={eta_fp}")
        ax.errorbar(
            pts["eta_tp"],
            pts["mean"],
            yerr=2 * np.array(pts["se"]),
            fmt="o",
            ms=3,
            color=color,
            label=f"simulated, η_FP={eta_fp}",
        )
    ax.axhline((R + 1) * T_D, color="gray", lw=1, ls="--", label=f"(r + 1) t_d = {(R + 1) * T_D:g}")
    ax.set_xlabel("true-positive rate η_TP")
    ax.set_ylabel("E[T_stop]")
    ax.set_title(f"[SPR] Fig. 6: r = {R}, t_d = {T_D}")
    ax.legend(fontsize=7)
    save_figure(fig, out / "sprinter_fig6.png", dpi=130)
    write_json(result, out / "sprinter_fig6.json")
    return result


def summary(result: dict) -> str:
    lines = [
        f"[SPR] Fig. 6 — E[T_stop] vs η_TP, r = {result['r']}, t_d = {result['t_d']}, key {result['key']}, "
        f"{result['n_runs']:,} runs per point"
    ]
    for key, pts in result["points"].items():
        worst = max(abs(z) for z in pts["z"])
        shown = ", ".join(
            f"{e:g}: {c:.4f}" for e, c in zip(pts["eta_tp"], pts["closed_form"]) if round(e * 20) % 4 == 0 or e == 1.0
        )
        lim = result["limit_eta_tp_1"][key]
        lines.append(
            f"  η_FP={key}: Thm 3.4 at η_TP = {shown}   (η_TP=1: {lim['stopping_time']:.4f}, "
            f"gap over (r+1) t_d {lim['gap_over_r_plus_1_td']:.4f}); simulation max |z| = {worst:.2f}"
        )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """Fig. 6's gap at ``η_TP = 1`` and the simulated curves of Thm 3.4: the claims table of ``speculab report``."""
    rows = []
    setting = f"r = {result['r']}, t_d = {result['t_d']:g}"
    for key, pts in result["points"].items():
        i = pts["eta_tp"].index(1.0)
        lim = result["limit_eta_tp_1"][key]
        rows.append(
            claim(
                f"E[T_stop] at η_TP = 1, η_FP = {key} ({setting})",
                paper="gap over (r + 1)·t_d ≤ t_d while η_FP ≤ 0.5 (Fig. 6)",
                theory=f"{lim['stopping_time']:.4f} (gap {lim['gap_over_r_plus_1_td']:.4f})",
                simulation=f"{pm(pts['mean'][i], pts['se'][i], 4)} (z = {signed(pts['z'][i])})",
            )
        )
    for key, pts in result["points"].items():
        cf = dict(zip(pts["eta_tp"], pts["closed_form"]))
        rows.append(
            claim(
                f"E[T_stop] over η_TP ∈ [0, 1], η_FP = {key}",
                paper="grows with η_TP; η_FP matters little (Thm 3.4)",
                theory=f"eq. (4): {cf[0.0]:.4f} (η_TP = 0), {cf[0.8]:.4f} (0.8), {cf[1.0]:.4f} (1)",
                simulation=f"max |z| = {max(abs(float(z)) for z in pts['z']):.1f} over {len(pts['z'])} points",
            )
        )
    return rows
