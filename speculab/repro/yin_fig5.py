"""[Yin] Fig. 5 (App. F): horizon T = 100 — SD vs Thm 1, batch SD (M = 2) vs Thm 3, E[N_rej] vs M."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab._validate import as_generator
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.repro._plots import YIN_V as V
from speculab.repro._plots import plot_running, yin_instance
from speculab.sim import SD, BatchSD, simulate
from speculab.theory import batch_expected_rejections

T = 100


def run(key=10, n_runs: int = 100_000, out_dir: str | Path = "results", progress: bool = False) -> dict:
    """Three panels as in the paper; writes ``yin_fig5.{png,json}``."""
    out = Path(out_dir)
    rng = as_generator(key)
    inst = yin_instance(T, rng)
    fig, (left, mid, right) = new_figure(ncols=3, width=4.4)
    result = {
        "figure": "[Yin] Fig. 5",
        "key": describe_key(key),
        "instance": {"T": T, "V": V, "rows": "uniform"},
        "n_runs": n_runs,
    }
    for ax, name, method, theory, label in (
        (left, "sd", SD(), SD().expected(inst).rejections, "Theorem 1"),
        (mid, "batch_M2", BatchSD(2), BatchSD(2).expected(inst).rejections, "Theorem 3"),
    ):
        counts = simulate(inst, method, n_runs, rng, progress=progress)
        running = plot_running(
            ax,
            counts.rejections,
            theory,
            color="tab:green",
            theory_color="tab:orange",
            label="simulation ± 2 s.e.",
            theory_label=label,
        )
        ax.set_ylim(theory - 2.5, theory + 2.5)
        ax.set_title(f"{method}, T={T}")
        ax.legend(fontsize=7, loc="upper right")
        est = counts.estimate("rejections")
        result[name] = {"theory": theory, "mean": est.mean, "se": est.se, "z": est.z(theory), "running_mean": running}
    Ms = np.arange(1, 41)
    curve = np.array([batch_expected_rejections(inst, M).rejections for M in Ms])
    limit = batch_expected_rejections(inst, np.inf).rejections
    right.plot(Ms, curve, "o-", ms=3, color="tab:blue", label="Theorem 3")
    right.axhline(limit, color="tab:red", ls="--", lw=1.2, label=f"M → ∞ limit: {limit:.2f}")
    right.set_xlabel("number of drafts M")
    right.set_ylabel("E[N_rej]")
    right.set_title("expected rejections vs M")
    right.legend(fontsize=7)
    result["vs_M"] = {"M": Ms, "expected_rejections": curve, "limit": limit}
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "yin_fig5.png", dpi=130)
    write_json(result, out / "yin_fig5.json")
    return result


def summary(result: dict) -> str:
    sd, b2, vm = result["sd"], result["batch_M2"], result["vs_M"]
    return "\n".join(
        [
            f"[Yin] Fig. 5 — T={result['instance']['T']}, key {result['key']}, {result['n_runs']:,} runs",
            f"  SD:           Theorem 1 {sd['theory']:.4f}; simulation {sd['mean']:.4f} ± {sd['se']:.4f} (z = "
            f"{sd['z']:+.2f})",
            f"  batch M=2:    Theorem 3 {b2['theory']:.4f}; simulation {b2['mean']:.4f} ± {b2['se']:.4f} (z = "
            f"{b2['z']:+.2f})",
            f"  E[N_rej]: M=1 {vm['expected_rejections'][0]:.3f}, M=40 {vm['expected_rejections'][-1]:.3f}, limit "
            f"{vm['limit']:.3f}",
        ]
    )


def claims(result: dict) -> list[dict]:
    """The paper's Fig. 5 claims beside our numbers (rows of :func:`speculab.repro._io.claim`)."""
    T, vm = result["instance"]["T"], result["vs_M"]

    def simulated(r):
        z = signed(r["z"])
        return f"{pm(r['mean'], r['se'])} (z = {z}; {result['n_runs']:,} runs)"

    return [
        claim(
            f"E[N_rej], SD, T = {T} (Thm 1)",
            paper="simulation converges to Thm 1 (no value printed)",
            theory=f"{result['sd']['theory']:.3f}",
            simulation=simulated(result["sd"]),
        ),
        claim(
            f"E[N_rej], batch SD M = 2, T = {T} (Thm 3)",
            paper="simulation converges to Thm 3 (no value printed)",
            theory=f"{result['batch_M2']['theory']:.3f}",
            simulation=simulated(result["batch_M2"]),
        ),
        claim(
            f"E[N_rej] at M = {vm['M'][-1]} (Thm 3)",
            paper="decreases in M (curve; no value printed)",
            theory=f"{vm['expected_rejections'][-1]:.3f}",
        ),
        claim(
            "E[N_rej], limit M → ∞ (Prop. 1)",
            paper="E[N_rej] ↛ 0 (Prop. 1; no value printed)",
            theory=f"{vm['limit']:.3f}",
        ),
    ]
