"""Reproductions of the papers' figures and tables.

Each module exposes ``run(..., out_dir) -> dict`` (with ``key`` — an int seed or a generator —, ``n_runs`` and
``progress`` where it samples) which computes everything, writes a PNG and a
JSON into ``out_dir`` and returns the JSON's content, and ``summary(result)``. ``papers_repro/*.py`` and ``speculab
repro NAME`` call these.
"""

from __future__ import annotations

import importlib

#: figure name -> (module, one-line description)
FIGURES = {
    "yin-fig2a": ("speculab.repro.yin_fig2a", "[Yin] Fig. 2(a): simulated SD rejections converge to Thm 1 (T=50, V=7)"),
    "yin-fig2b": ("speculab.repro.yin_fig2b", "[Yin] Fig. 2(b): batch SD (M=4, 5) simulations converge to Thm 3"),
    "yin-fig2c": ("speculab.repro.yin_fig2c", "[Yin] Fig. 2(c): E[N_rej] vs M with the exact M→∞ limit (both regimes)"),
    "yin-fig3": ("speculab.repro.yin_fig3", "[Yin] Fig. 3: batch improvement vs M, Bernoulli and uniform closed forms"),
    "yin-fig4": (
        "speculab.repro.yin_fig4",
        "[Yin] Fig. 4: Pareto front (Thm 5), Decoding-OPT vs -UNO per token (Thm 4) and at the sequence level",
    ),
    "yin-fig5": ("speculab.repro.yin_fig5", "[Yin] Fig. 5: T=100 — SD, batch M=2, E[N_rej] vs M"),
    "sprinter-fig5": (
        "speculab.repro.sprinter_fig5",
        "[SPR] Fig. 5: E[N] vs η_TP (r=5), Thm 3.3 vs simulation; Thm 3.1/A.4 checks",
    ),
    "sprinter-fig6": (
        "speculab.repro.sprinter_fig6",
        "[SPR] Fig. 6: E[T_stop] vs η_TP (r=5, t_d=0.1), Thm 3.4 vs simulation",
    ),
    "sprinter-roc": (
        "speculab.repro.sprinter_roc",
        "[SPR] App. A.10: the SPRINTER verifier trained on a real pair (λ = 1, 1.2, 1.5): ROC, AUC, η_TP/η_FP",
    ),
    "sprinter-tradeoff": (
        "speculab.repro.sprinter_tradeoff",
        "[SPR] Fig. 1 / Table 2 on real models: a trained verifier across τ vs a random one and SD; S1/S4",
    ),
    "fsd-bound": (
        "speculab.repro.fsd_bound",
        "[FSD] §4.2: exact check of Div(P_q, P_FSD) <= N·%draft·θ, all divergences",
    ),
    "fsd-tradeoff": (
        "speculab.repro.fsd_tradeoff",
        "[FSD] Table 2 / App. E on real models: FSD across θ (4 divergences) vs SD and random acceptance",
    ),
    "yin-table1": (
        "speculab.repro.yin_table1",
        "[Yin] Table 1 analogue on real models: Decoding-OPT vs -UNO (tiny pair by default)",
    ),
    "specdecpp-fig3": (
        "speculab.repro.specdecpp_fig3",
        "[SDpp] Fig. 3: verification vs discard rate, fixed K (exact) vs thresholds h (simulated)",
    ),
    "specdecpp-pareto": (
        "speculab.repro.specdecpp_pareto",
        "[SDpp] Fig. 3 on real models: a trained acceptance head's thresholds vs every fixed K",
    ),
    "block-gain": (
        "speculab.repro.block_gain",
        "Block verification vs SD at K = 2, 4, 8: exact and simulated (Markov), measured (tiny pair)",
    ),
    "tree-gain": (
        "speculab.repro.tree_gain",
        "Token trees vs chains: RRS and traversal over 1–64 nodes (Markov, tiny pair), Sequoia vs the best, the bound",
    ),
    "verifiers": (
        "speculab.repro.verifiers",
        "Is my verifier lossless? Certificates of every method and engine rule, transformers as installed, lossy plane",
    ),
    "batch-optimality": (
        "speculab.repro.batch_optimality",
        "Algorithm 4 vs the best root verifier over M: exact E[N_rej] (DP) and the α* gap (SPEC O)",
    ),
    "optimal-stopping": (
        "speculab.repro.optimal_stopping",
        "[SDpp] Fig. 3 with the exact optimal stopping rule: Δ to the best threshold, fixed K, block",
    ),
    "draft-design": (
        "speculab.repro.draft_design",
        "Fit a low-rank draft by KL, by rejections or by latency (differentiable theory, JAX); compare",
    ),
}


def get(name: str):
    """The reproduction module for a figure name (see :data:`FIGURES`)."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; choose one of {sorted(FIGURES)}")
    return importlib.import_module(FIGURES[name][0])
