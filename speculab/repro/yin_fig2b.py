"""[Yin] Fig. 2(b): batch SD simulations with M = 4, 5 converge to Thm 3.

Same seeded ``T = 50``, 7-token instance as Fig. 2(a) (``--seed`` picks it).
"""

from __future__ import annotations

import time
from pathlib import Path


from speculab._validate import as_generator
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.repro._plots import YIN_V as V
from speculab.repro._plots import plot_running, yin_instance
from speculab.sim import BatchSD, simulate
from speculab.theory import batch_expected_rejections

T = 50
BATCHES = ((4, "tab:green", "tab:orange"), (5, "tab:purple", "tab:pink"))


def run(key=10, n_runs: int = 200_000, out_dir: str | Path = "results", progress: bool = False) -> dict:
    """Simulate batch SD with ``M = 4, 5`` and compare with Thm 3; writes ``yin_fig2b.{png,json}``."""
    out = Path(out_dir)
    rng = as_generator(key)
    inst = yin_instance(T, rng)
    fig, (ax,) = new_figure()
    rows = {}
    for M, color, tcolor in BATCHES:
        theory = batch_expected_rejections(inst, M)
        t0 = time.perf_counter()
        counts = simulate(inst, BatchSD(M), n_runs, rng, progress=progress)
        seconds = time.perf_counter() - t0
        running = plot_running(
            ax,
            counts.rejections,
            theory.rejections,
            color=color,
            theory_color=tcolor,
            label=f"Batch SD M={M}: running mean ± 2 s.e.",
            theory_label=f"Theorem 3, M={M}",
        )
        est = counts.estimate("rejections")
        rows[str(M)] = {
            "theory": {
                "rejections": theory.rejections,
                "sd_term": float(theory.sd_rejections_per_position.sum()),
                "batch_improvement": theory.improvement,
                "expected_oracle_calls": theory.oracle_calls,
            },
            "simulation": {
                "mean": est.mean,
                "se": est.se,
                "z": est.z(theory.rejections),
                "n_runs": n_runs,
                "running_mean": running,
                "runs_per_second": n_runs / seconds,
            },
        }
    lo = min(r["theory"]["rejections"] for r in rows.values())
    ax.set_ylim(lo - 1.0, lo + 1.5)
    ax.set_title(f"Batch SD, T={T}, {V} tokens (key {describe_key(key)})")
    ax.legend(fontsize=7, loc="upper right")
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "yin_fig2b.png", dpi=130)
    result = {
        "figure": "[Yin] Fig. 2(b)",
        "key": describe_key(key),
        "instance": {"T": T, "V": V, "rows": "uniform"},
        "M": rows,
    }
    write_json(result, out / "yin_fig2b.json")
    return result


def summary(result: dict) -> str:
    lines = [f"[Yin] Fig. 2(b) — batch SD, T={result['instance']['T']}, key {result['key']}"]
    for M, r in result["M"].items():
        th, sim = r["theory"], r["simulation"]
        lines.append(
            f"  M={M}: Theorem 3 {th['rejections']:.4f} (SD term {th['sd_term']:.4f} − improvement "
            f"{th['batch_improvement']:.4f});  simulation {sim['mean']:.4f} ± {sim['se']:.4f}, z = {sim['z']:+.2f}"
        )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """The paper's Fig. 2(b) claims beside our numbers (rows of :func:`speculab.repro._io.claim`)."""
    batches = result["M"]
    sd_term = next(iter(batches.values()))["theory"]["sd_term"]  # Thm 1's E[N_rej]: the same for every M
    rows = [
        claim(
            "E[N_rej] of SD, Thm 3's first term (Thm 1)",
            paper="16.41 (their instance, Fig. 2(a))",
            theory=f"{sd_term:.3f}",
        )
    ]
    for M, r in batches.items():
        th, sim = r["theory"], r["simulation"]
        z = signed(sim["z"])
        rows.append(
            claim(
                f"E[N_rej], batch SD M = {M} (Thm 3)",
                paper="simulation converges to Thm 3 (no value printed)",
                theory=f"{th['rejections']:.3f}",
                simulation=f"{pm(sim['mean'], sim['se'])} (z = {z}; {sim['n_runs']:,} runs)",
            )
        )
    rows.append(
        claim(
            f"batch improvement over SD (Thm 3), M = {' / '.join(batches)}",
            paper="Thm 3's second term, ≥ 0 (no value printed)",
            theory=" / ".join(f"{r['theory']['batch_improvement']:.3f}" for r in batches.values()),
        )
    )
    return rows
