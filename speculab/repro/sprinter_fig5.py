"""[SPR] Fig. 5: expected number of verifier-passed tokens vs ``η_TP`` (``r = 5``, ``η_FP ∈ {0.1, 0.5}``),
plus simulation checks of [SPR] Thm 3.1 (law, TV) and Thm A.4 (acceptance rate).

Left: the closed form of Thm 3.3 (lines) and a literal simulation of the stopping
process (markers, ±2 s.e.): the first ``r`` drafts acceptable, later ones not, the
verifier passing each independently. Right: SPRINTER on a seeded Markov instance
([Yin] App. F kind: ``T = 50``, 7 tokens): simulated per-position acceptance rate vs
Thm A.4 averaged along the output chain. The JSON also holds the Thm 3.1 checks —
per-position output marginals against the exact chain ``(1 − η_FP) Q + η_FP P`` and a
signed TV statistic against ``η_FP Σ_n E[TV(p_n, q_n)]`` — and the same on a
context-free pair. Convention: ``p`` = draft, ``q`` = target ([SPR] swaps the letters).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from speculab._validate import as_generator
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.repro._plots import YIN_V, yin_instance
from speculab.sim import Sprinter, simulate
from speculab.methods.sprinter import signed_tv_statistic, simulate_stopping
from speculab.theory import MarkovInstance, chain_marginals
from speculab.theory.sprinter import (
    sprinter_distribution,
    sprinter_expected_tokens,
    sprinter_output_law,
    sprinter_profile,
)

R = 5
ETA_FP = (0.1, 0.5)
ETA_TP_POINTS = np.round(np.linspace(0.0, 1.0, 21), 10)
ETA_TP_CURVE = np.linspace(0.0, 1.0, 401)
T_MARKOV = 50
ETA_TP_MARKOV = 0.8
T_CONTEXT_FREE = 20


def _z(mean: float, se: float, expected: float) -> float:
    if se > 0:
        return (mean - expected) / se
    return 0.0 if mean == expected else float(np.copysign(np.inf, mean - expected))


def _estimate(x: np.ndarray, expected: float) -> dict:
    x = np.asarray(x, dtype=np.float64)
    mean, se = float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))
    return {"theory": float(expected), "mean": mean, "se": se, "z": _z(mean, se, expected)}


def _marginal_frequencies(seq: np.ndarray, V: int) -> np.ndarray:
    """``(T + 1, V)``: the share of runs with each token at each position (position 0 the prompt token)."""
    return np.stack([np.bincount(seq[:, k], minlength=V) for k in range(seq.shape[1])]) / seq.shape[0]


def _max_marginal_z(freq: np.ndarray, mu: np.ndarray, n: int) -> float:
    """The largest binomial ``|z|`` of the marginal frequencies against their law (cells with a standard error)."""
    se = np.sqrt(mu * (1 - mu) / n)
    ok = se > 0
    return float(np.max(np.abs(freq[ok] - mu[ok]) / se[ok]))


def stopping_points(eta_fp: float, n_runs: int, rng: np.random.Generator) -> dict:
    """Simulated ``N`` of the stopping process at :data:`ETA_TP_POINTS` vs Thm 3.3."""
    rows = {"eta_tp": [], "closed_form": [], "mean": [], "se": [], "z": []}
    for eta_tp in ETA_TP_POINTS:
        est = _estimate(
            simulate_stopping(float(eta_tp), eta_fp, R, n_runs, rng), sprinter_expected_tokens(eta_tp, eta_fp, R)
        )
        rows["eta_tp"].append(float(eta_tp))
        rows["closed_form"].append(est["theory"])
        for k in ("mean", "se", "z"):
            rows[k].append(est[k])
    return rows


def markov_check(inst: MarkovInstance, eta_fp: float, n_runs: int, rng: np.random.Generator, progress: bool) -> dict:
    """Thm 3.1 (law, TV) and Thm A.4 (acceptance) for ``Sprinter(η_TP, η_FP)`` on a Markov instance."""
    m = Sprinter(ETA_TP_MARKOV, eta_fp)
    law = sprinter_output_law(inst, m.pass_probabilities(inst))
    prof = sprinter_profile(inst, m.pass_probabilities(inst))
    mu = chain_marginals(inst.rho, law)
    t0 = time.perf_counter()
    c = simulate(inst, m, n_runs, rng, return_sequences=True, progress=progress)
    seconds = time.perf_counter() - t0
    freq = _marginal_frequencies(c.sequences, inst.V)
    tv_sd = np.einsum("na,na->n", mu[:-1], inst.tv())  # E[TV(p_n, q_n)] along SPRINTER's chain
    beta = 1 - (1 - eta_fp) * tv_sd  # Thm A.4 per position
    return {
        "eta_tp": ETA_TP_MARKOV,
        "eta_fp": eta_fp,
        "n_runs": n_runs,
        "seconds": seconds,
        "law_max_abs_z": _max_marginal_z(freq, mu, n_runs),
        "law_cells": int(mu.size),
        "law_marginals": {"theory": mu, "frequency": freq, "target": chain_marginals(inst.rho, inst.Q)},
        "law_matches_mixture": bool(np.allclose(law, (1 - eta_fp) * inst.Q + eta_fp * inst.P, atol=1e-12)),
        "tv_sum": _estimate(signed_tv_statistic(inst, c.sequences), eta_fp * tv_sd.sum()),
        "tv_sum_exact_from_law": float(prof.tv_per_position.sum()),
        "acceptance_rate": _estimate(c.accepted / inst.T, beta.mean()),
        "acceptance_rate_sd": float(1 - tv_sd.mean()),
        "acceptance_per_position": {"theory": beta, "simulated": 1 - c.rejections_per_position},
        "target_calls": _estimate(c.oracle_calls, prof.oracle_calls),
        "rejections": _estimate(c.rejections, prof.rejections),
        "kl_forward": prof.kl_forward,
        "kl_reverse": prof.kl_reverse,
    }


def context_free_check(p: np.ndarray, q: np.ndarray, eta_fp: float, n_runs: int, rng: np.random.Generator) -> dict:
    """Thm 3.1 / A.4 on a single pair ``(p, q)``: pooled token frequencies vs ``(1 − η_FP) q + η_FP p``."""
    inst = MarkovInstance.context_free(p, q, T_CONTEXT_FREE)
    s = sprinter_distribution(p, q, eta_fp)
    c = simulate(inst, Sprinter(ETA_TP_MARKOV, eta_fp), n_runs, rng, return_sequences=True)
    toks = c.sequences[:, 1:]  # (n, T), i.i.d. draws from p_SPR
    freq = np.bincount(toks.ravel(), minlength=p.size) / toks.size
    # tokens are independent across positions and runs here, so binomial errors apply
    se = np.sqrt(s.law * (1 - s.law) / toks.size)
    return {
        "eta_fp": eta_fp,
        "p": p,
        "q": q,
        "law": s.law,
        "frequency": freq,
        "law_max_abs_z": float(np.max(np.abs(freq - s.law) / se)),
        "tv": _estimate(signed_tv_statistic(inst, c.sequences) / inst.T, float(s.tv)),
        "acceptance_rate": _estimate(c.accepted / inst.T, float(s.acceptance)),
    }


def run(key=0, n_runs: int = 200_000, out_dir: str | Path = "results", progress: bool = False) -> dict:
    """Closed form and simulations; writes ``sprinter_fig5.png``, ``.json`` and the instance ``.npz``.

    ``n_runs`` runs per simulated point of the stopping process and per Markov check.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = as_generator(key)
    inst = yin_instance(T_MARKOV, rng)
    cf_p, cf_q = rng.dirichlet(np.ones(YIN_V)), rng.dirichlet(np.ones(YIN_V))

    result = {
        "figure": "[SPR] Fig. 5 + Thm 3.1 / A.4 checks",
        "key": describe_key(key),
        "r": R,
        "n_runs": n_runs,
        "curve": {"eta_tp": ETA_TP_CURVE},
        "points": {},
        "limit_eta_tp_1": {},
        "markov_instance": {
            "T": T_MARKOV,
            "V": YIN_V,
            "rows": "uniform",
            "rho": "uniform",
            "file": "sprinter_fig5_instance.npz",
        },
        "markov": {},
        "context_free": {},
    }
    fig, (ax, ax2) = new_figure(ncols=2)
    for eta_fp, color in zip(ETA_FP, ("tab:blue", "tab:red")):
        label = str(eta_fp)
        curve = sprinter_expected_tokens(ETA_TP_CURVE, eta_fp, R)
        pts = stopping_points(eta_fp, n_runs, rng)
        result["curve"][label] = curve
        result["points"][label] = pts
        limit = float(sprinter_expected_tokens(1.0, eta_fp, R))
        result["limit_eta_tp_1"][label] = {"expected_tokens": limit, "gap_over_r": limit - R}
        ax.plot(ETA_TP_CURVE, curve, color=color, lw=1.5, label=f"Thm 3.3, η_FP={eta_fp}")
        ax.errorbar(
            pts["eta_tp"],
            pts["mean"],
            yerr=2 * np.array(pts["se"]),
            fmt="o",
            ms=3,
            color=color,
            label=f"simulated, η_FP={eta_fp}",
        )
        chk = markov_check(inst, eta_fp, n_runs, rng, progress)
        result["markov"][label] = chk
        pos = np.arange(1, T_MARKOV + 1)
        ax2.plot(pos, chk["acceptance_per_position"]["theory"], color=color, lw=1.4, label=f"Thm A.4, η_FP={eta_fp}")
        ax2.plot(
            pos, chk["acceptance_per_position"]["simulated"], ".", color=color, ms=4, label=f"simulated, η_FP={eta_fp}"
        )
        result["context_free"][label] = context_free_check(cf_p, cf_q, eta_fp, n_runs, rng)
    ax.axhline(R, color="gray", lw=1, ls="--", label=f"r = {R}")
    ax.set_xlabel("true-positive rate η_TP")
    ax.set_ylabel("E[N]  (tokens passed before the first stop)")
    ax.set_title(f"[SPR] Fig. 5: r = {R}")
    ax.legend(fontsize=7)
    ax2.set_xlabel("position n")
    ax2.set_ylabel("P(drafted token kept)")
    ax2.set_title(f"SPRINTER on a Markov instance (η_TP={ETA_TP_MARKOV}, key {describe_key(key)})")
    ax2.legend(fontsize=7)
    save_figure(fig, out / "sprinter_fig5.png", dpi=130)
    inst.save(out / "sprinter_fig5_instance.npz")
    write_json(result, out / "sprinter_fig5.json")
    return result


def summary(result: dict) -> str:
    lines = [
        f"[SPR] Fig. 5 — E[N] vs η_TP, r = {result['r']}, key {result['key']}, {result['n_runs']:,} runs per point"
    ]
    for key, pts in result["points"].items():
        worst = max(abs(z) for z in pts["z"])
        shown = ", ".join(
            f"{e:g}: {c:.3f}" for e, c in zip(pts["eta_tp"], pts["closed_form"]) if round(e * 20) % 4 == 0 or e == 1.0
        )
        lim = result["limit_eta_tp_1"][key]
        lines.append(
            f"  η_FP={key}: Thm 3.3 at η_TP = {shown}   (gap over r at η_TP=1: {lim['gap_over_r']:.3f}); "
            f"simulation max |z| = {worst:.2f}"
        )
    for key, chk in result["markov"].items():
        tv, acc, calls = chk["tv_sum"], chk["acceptance_rate"], chk["target_calls"]
        lines.append(
            f"  Markov T={result['markov_instance']['T']}, η_FP={key}: law max|z| {chk['law_max_abs_z']:.2f} over "
            f"{chk['law_cells']} cells; "
            f"Σ TV {tv['mean']:.4f}±{tv['se']:.4f} vs Thm 3.1 {tv['theory']:.4f} (z {tv['z']:+.2f}); "
            f"β {acc['mean']:.4f}±{acc['se']:.4f} vs Thm A.4 {acc['theory']:.4f} (z {acc['z']:+.2f}; SD "
            f"{chk['acceptance_rate_sd']:.4f}); "
            f"target calls {calls['mean']:.3f} vs {calls['theory']:.3f} (z {calls['z']:+.2f})"
        )
    for key, cf in result["context_free"].items():
        lines.append(
            f"  context-free η_FP={key}: law max|z| {cf['law_max_abs_z']:.2f}; TV {cf['tv']['mean']:.4f} vs "
            f"{cf['tv']['theory']:.4f} "
            f"(z {cf['tv']['z']:+.2f}); β {cf['acceptance_rate']['mean']:.4f} vs {cf['acceptance_rate']['theory']:.4f} "
            f"(z {cf['acceptance_rate']['z']:+.2f})"
        )
    return "\n".join(lines)


def _estimate_cell(est: dict, digits: int = 3) -> str:
    return f"{pm(est['mean'], est['se'], digits)} (z = {signed(est['z'])})"


def claims(result: dict) -> list[dict]:
    """Fig. 5's gap at ``η_TP = 1`` and the simulated curve (Thm 3.3), then Thm 3.1 (law, TV) and Thm A.4
    (acceptance) on the Markov instance: the claims table of ``speculab report``."""
    rows = []
    for key, pts in result["points"].items():
        i = pts["eta_tp"].index(1.0)
        lim = result["limit_eta_tp_1"][key]
        rows.append(
            claim(
                f"E[N] at η_TP = 1, η_FP = {key} (r = {result['r']})",
                paper="gap over r ≤ 1 while η_FP ≤ 0.5 (Fig. 5)",
                theory=f"{lim['expected_tokens']:.3f} (gap {lim['gap_over_r']:.3f})",
                simulation=_estimate_cell({k: pts[k][i] for k in ("mean", "se", "z")}),
            )
        )
    zs = [abs(float(z)) for pts in result["points"].values() for z in pts["z"]]
    at = ", ".join(
        f"{dict(zip(pts['eta_tp'], pts['closed_form']))[0.8]:.3f} (η_FP = {key})"
        for key, pts in result["points"].items()
    )
    rows.append(
        claim(
            "E[N] over η_TP ∈ [0, 1], both η_FP",
            paper="E[N] grows with η_TP (Thm 3.3, eq. 3)",
            theory=f"eq. (3); at η_TP = 0.8: {at}",
            simulation=f"max |z| = {max(zs):.1f} over {len(zs)} points",
        )
    )
    T, markov = result["markov_instance"]["T"], result["markov"]
    first = next(iter(markov.values()))
    exact = all(c["law_matches_mixture"] for c in markov.values())
    worst = ", ".join(f"{c['law_max_abs_z']:.1f} (η_FP = {key})" for key, c in markov.items())
    rows.append(
        claim(
            f"output law, Markov T = {T}, η_TP = {first['eta_tp']:g}",
            paper="(1 − η_FP) q + η_FP p (Thm 3.1; [SPR] swaps p and q)",
            theory=f"chain law {'=' if exact else '≠'} (1 − η_FP) Q + η_FP P",
            simulation=f"marginals max |z| {worst} over {first['law_cells']} cells",
        )
    )
    for key, c in markov.items():
        rows.append(
            claim(
                f"Σ_n TV(P_SPR,n, q_n), Markov T = {T}, η_FP = {key}",
                paper="TV = η_FP · TV(p, q) (Thm 3.1)",
                theory=f"{c['tv_sum']['theory']:.3f}",
                simulation=_estimate_cell(c["tv_sum"]),
            )
        )
    for key, c in markov.items():
        rows.append(
            claim(
                f"acceptance rate β, Markov T = {T}, η_FP = {key}",
                paper="β = 1 − (1 − η_FP) · TV(p, q) (Thm A.4)",
                theory=f"{c['acceptance_rate']['theory']:.4f} (SD {c['acceptance_rate_sd']:.4f})",
                simulation=_estimate_cell(c["acceptance_rate"], 4),
            )
        )
    return rows
