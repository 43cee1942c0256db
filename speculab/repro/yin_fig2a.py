"""[Yin] Fig. 2(a): the running average of simulated SD rejections converges to Thm 1.

Setting ([Yin] §3, App. F): non-stationary Markov draft/target chains, ``T = 50``,
7 tokens, uniform prompt law, speculative decoding with ``K = ∞``. The paper's
generator is unpublished; rows of i.i.d. uniform entries, normalised, reproduce
its scale (the paper's instance: ``E[N_rej] = 16.41``, acceleration 3.05). We
report our own seeded instance and save it next to the figure.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from speculab._validate import as_generator
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.repro._plots import YIN_V as V
from speculab.repro._plots import plot_running, yin_instance
from speculab.sim import SD, simulate

T = 50
PAPER = {"rejections": 16.41, "acceleration": 3.05}


def run(key=10, n_runs: int = 500_000, out_dir: str | Path = "results", progress: bool = False) -> dict:
    """Simulate ``n_runs`` runs of SD on the seeded instance and compare with Thm 1.

    Writes ``yin_fig2a.png``, ``yin_fig2a.json`` and the instance ``yin_fig2a_instance.npz``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = as_generator(key)
    inst = yin_instance(T, rng)
    theory = SD().expected(inst)  # [Yin] Thm 1

    t0 = time.perf_counter()
    counts = simulate(inst, SD(), n_runs, rng, progress=progress)
    seconds = time.perf_counter() - t0

    fig, (ax, ax2) = new_figure(ncols=2)
    running = plot_running(
        ax,
        counts.rejections,
        theory.rejections,
        color="tab:green",
        theory_color="tab:orange",
        label="simulation: running mean ± 2 s.e.",
        theory_label="Theorem 1",
    )
    ax.set_ylim(theory.rejections - 1.5, theory.rejections + 1.5)
    ax.set_title(f"SD, T={T}, {V} tokens (key {describe_key(key)})")
    ax.legend(loc="upper right", fontsize=8)

    pos = np.arange(1, T + 1)
    ax2.plot(pos, theory.rejections_per_position, color="tab:orange", lw=1.5, label="Theorem 1 per position")
    ax2.plot(pos, counts.rejections_per_position, ".", color="tab:green", ms=4, label="simulated rate")
    ax2.set_xlabel("position n")
    ax2.set_ylabel("P(rejection at n)")
    ax2.set_title("per position: E_q[TV(p_n, q_n)]")
    ax2.legend(fontsize=8)
    save_figure(fig, out / "yin_fig2a.png", dpi=130)

    est = counts.estimate("rejections")
    result = {
        "figure": "[Yin] Fig. 2(a)",
        "key": describe_key(key),
        "instance": {"T": T, "V": V, "rows": "uniform", "rho": "uniform", "file": "yin_fig2a_instance.npz"},
        "theory": {
            "rejections": theory.rejections,
            "oracle_calls": theory.oracle_calls,
            "acceleration": T / theory.rejections,
            "rejections_per_position": theory.rejections_per_position,
        },
        "simulation": {
            "n_runs": n_runs,
            "rejections": {"mean": est.mean, "se": est.se},
            "z": est.z(theory.rejections),
            "oracle_calls": dict(zip(("mean", "se"), counts.estimate("oracle_calls")[:2])),
            "running_mean": running,
            "seconds": seconds,
            "runs_per_second": n_runs / seconds,
        },
        "paper": PAPER,
    }
    inst.save(out / "yin_fig2a_instance.npz")
    write_json(result, out / "yin_fig2a.json")
    return result


def summary(result: dict) -> str:
    """Human-readable lines for the CLI."""
    th, sim = result["theory"], result["simulation"]
    return "\n".join(
        [
            f"[Yin] Fig. 2(a) — speculative decoding, T={result['instance']['T']}, V={result['instance']['V']}, key "
            f"{result['key']}",
            f"  Theorem 1   E[N_rej] = {th['rejections']:.4f}   acceleration T/E[N_rej] = {th['acceleration']:.3f}",
            f"  simulation  {sim['rejections']['mean']:.4f} ± {sim['rejections']['se']:.4f} over {sim['n_runs']:,} "
            f"runs   z = {sim['z']:+.2f}",
            f"  paper's own instance: {result['paper']['rejections']} (acceleration {result['paper']['acceleration']})",
            f"  {sim['runs_per_second']:,.0f} runs/s",
        ]
    )


def claims(result: dict) -> list[dict]:
    """The paper's Fig. 2(a) numbers beside ours (rows of :func:`speculab.repro._io.claim`)."""
    th, sim, paper = result["theory"], result["simulation"], result["paper"]
    est, z = sim["rejections"], signed(sim["z"])
    running = ", ".join(f"{float(m):.3f} ({int(n):,})" for n, m in sim["running_mean"].items())
    return [
        claim(
            f"E[N_rej], SD, T = {result['instance']['T']}, V = {result['instance']['V']} (Thm 1)",
            paper=f"{paper['rejections']} (their unpublished instance)",
            theory=f"{th['rejections']:.3f}",
            simulation=f"{pm(est['mean'], est['se'])} (z = {z})",
        ),
        claim("acceleration T / E[N_rej]", paper=f"{paper['acceleration']}", theory=f"{th['acceleration']:.2f}"),
        claim(
            "running mean of simulated N_rej (after N runs)",
            paper="converges to Thm 1 within 5,000 runs",
            simulation=running,
        ),
    ]
