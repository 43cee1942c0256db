"""[SDpp] Fig. 3 with the optimum on it: the best stopping rule vs SpecDec++'s threshold, fixed K and block
verification.

[SDpp] Thm 4.3 proves the threshold rule optimal only up to an unknown ``Δ``. On a
small instance of the kind :mod:`speculab.repro.specdecpp_fig3` uses (draft quality
varying with the context, ``T = 16``, 3 tokens) every number here is exact
(:mod:`speculab.theory.stopping`, :func:`~speculab.theory.lookahead_counts`,
:func:`~speculab.methods.block.block_counts`): for each cost ratio
``c = t_draft/t_target`` the optimal rule (Bellman's recursion over the draft tree,
at most ``max_K`` drafts), SpecDec++ with the oracle head at its best ``h`` (a grid of
101), the best fixed ``K`` and the best block size ``K`` (both ``≤ max_K``), and
autoregressive decoding; latency is ``E[t_draft N_draft + t_target N_target] / T``.
The optimum is over *stopping rules* with SD's token-by-token verification: block
verification changes the verifier, not the stopping rule, and can beat it where
drafting is cheap (it does at ``c = 0.02`` with the default key).
Left: verification rate vs discard rate ([SDpp] Fig. 3's axes) with the optimum's
points; right: latency per token against ``c``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab._validate import as_generator
from speculab.methods import SpecDecPP
from speculab.methods.block import block_counts
from speculab.repro._io import claim, describe_key, new_figure, save_figure, write_json
from speculab.repro.specdecpp_fig3 import context_varying_instance
from speculab.theory.lookahead import lookahead_counts
from speculab.theory.stopping import optimal_stopping, stopping_counts

T, V, MAX_K = 16, 3, 8
COST_RATIOS = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5)
THRESHOLDS = np.linspace(0.0, 1.0, 101)


def _time(counts, c: float) -> float:
    """Latency per token of exact counts at ``t_draft = c``, ``t_target = 1``."""
    return (c * counts.draft_calls + counts.oracle_calls) / counts.T


def _point(counts) -> dict:
    return {"discard_rate": counts.discarded / T, "verification_rate": counts.oracle_calls / T}


def run(key=0, out_dir: str | Path = "results") -> dict:
    """Every policy family at every cost ratio; writes ``optimal_stopping.{png,json}``."""
    out = Path(out_dir)
    inst = context_varying_instance(as_generator(key), T=T, V=V)
    fixed = {K: lookahead_counts(inst, K) for K in range(1, MAX_K + 1)}
    block = {g: block_counts(inst, g) for g in range(1, MAX_K + 1)}
    # the counts of a rule that does not read the costs do not depend on them: one evaluation per h
    thresholds = {
        float(h): stopping_counts(inst, SpecDecPP(float(h), max_K=MAX_K).adaptive_drafting(inst)) for h in THRESHOLDS
    }
    rows = []
    for c in COST_RATIOS:
        best = optimal_stopping(inst, c, 1.0, MAX_K)
        h_best, K_best, g_best = (
            min(family, key=lambda k: _time(family[k], c)) for family in (thresholds, fixed, block)
        )
        rows.append(
            {
                "c": c,
                "optimal": best.latency_per_token,
                "optimal_point": _point(best),
                "optimal_drafts_per_round": best.draft_calls / best.oracle_calls,
                "threshold": _time(thresholds[h_best], c),
                "h": h_best,
                "fixed": _time(fixed[K_best], c),
                "K": K_best,
                "block": _time(block[g_best], c),
                "block_K": g_best,
                "autoregressive": 1.0,
                "delta": _time(thresholds[h_best], c) - best.latency_per_token,
            }
        )
    result = {
        "figure": "[SDpp] Fig. 3 with the optimal stopping rule (exact)",
        "key": describe_key(key),
        "T": T,
        "V": V,
        "max_K": MAX_K,
        "rows": rows,
        "fixed_points": {K: _point(v) for K, v in fixed.items()},
        "threshold_points": {h: _point(v) for h, v in thresholds.items()},
    }
    fig, (left, right) = new_figure(ncols=2)
    fp = np.array([[p["discard_rate"], p["verification_rate"]] for p in result["fixed_points"].values()])
    tp = np.array([[p["discard_rate"], p["verification_rate"]] for p in result["threshold_points"].values()])
    left.plot(fp[:, 0], fp[:, 1], "o-", ms=3, label=f"fixed K = 1..{MAX_K}")
    left.plot(tp[:, 0], tp[:, 1], "-", lw=1.2, label="SpecDec++ threshold h (oracle head)")
    for r in rows:
        left.plot(
            r["optimal_point"]["discard_rate"],
            r["optimal_point"]["verification_rate"],
            "*",
            ms=9,
            label=f"optimum at c = {r['c']}",
        )
    left.set_xlabel("discard rate N_discarded / N")
    left.set_ylabel("verification rate N_target / N")
    left.set_title(f"T={T}, {V} tokens, max_K = {MAX_K} (key {describe_key(key)})")
    left.legend(fontsize=6)
    cs = [r["c"] for r in rows]
    for name, style in (
        ("optimal", "k*-"),
        ("threshold", "s-"),
        ("fixed", "o-"),
        ("block", "^-"),
        ("autoregressive", "--"),
    ):
        right.plot(cs, [r[name] for r in rows], style, ms=4, label=name)
    right.set_xlabel("t_draft / t_target")
    right.set_ylabel("latency per token (t_target = 1)")
    right.set_title("best of each family, exact")
    right.legend(fontsize=7)
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "optimal_stopping.png", dpi=130)
    write_json(result, out / "optimal_stopping.json")
    return result


def summary(result: dict) -> str:
    lines = [
        f"Optimal stopping vs SpecDec++'s threshold (key {result['key']}, T={result['T']}, V={result['V']}, "
        f"max_K = {result['max_K']}): latency per token, t_target = 1",
        "      c   optimum   threshold (h)      fixed (K)   block (K)    Δ = threshold − optimum",
    ]
    for r in result["rows"]:
        lines.append(
            f"  {r['c']:5.2f}   {r['optimal']:.4f}   {r['threshold']:.4f} ({r['h']:.2f})   "
            f"{r['fixed']:.4f} ({r['K']})   {r['block']:.4f} ({r['block_K']})   "
            f"{r['delta']:.4f} ({r['delta'] / r['optimal']:+.1%})"
        )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """The claims table of ``speculab report``: Δ of [SDpp] Thm 4.3 (best threshold − optimum) over the cost ratios,
    then each cost ratio's best latency per family, all exact."""
    rows = result["rows"]
    relative = [r["delta"] / r["optimal"] for r in rows]
    low, high = rows[int(np.argmin(relative))], rows[int(np.argmax(relative))]
    out = [
        claim(
            "Δ = best threshold − optimum, relative to the optimum",
            paper="Δ unknown (Thm 4.3)",
            theory=f"{low['delta'] / low['optimal']:+.1%} (c = {low['c']:g}) to "
            f"{high['delta'] / high['optimal']:+.1%} (c = {high['c']:g})",
        )
    ]
    for r in rows:
        out.append(
            claim(
                f"latency per token at c = t_draft/t_target = {r['c']:g}: optimum; best threshold (oracle "
                "head), fixed K, block K",
                paper="thresholds beat fixed K (Fig. 3); optimum unknown",
                theory=f"{r['optimal']:.3f}; h = {r['h']:.2f}: {r['threshold']:.3f}, K = {r['K']}: "
                f"{r['fixed']:.3f}, K = {r['block_K']}: {r['block']:.3f}",
            )
        )
    return out
