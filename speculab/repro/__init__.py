"""Reproductions of the papers' figures and tables.

Each module exposes ``run(..., out_dir) -> dict`` (with ``seed``, ``n_runs`` and
``progress`` where it samples) which computes everything, writes a PNG and a
JSON into ``out_dir`` and returns the JSON's content, and ``summary(result)``. ``papers_repro/*.py`` and ``speculab repro NAME`` call these.
"""

from __future__ import annotations

import importlib

#: figure name -> (module, one-line description)
FIGURES = {
    "yin-fig2a": ("speculab.repro.yin_fig2a", "[Yin] Fig. 2(a): simulated SD rejections converge to Thm 1 (T=50, V=7)"),
    "yin-fig2b": ("speculab.repro.yin_fig2b", "[Yin] Fig. 2(b): batch SD (M=4, 5) simulations converge to Thm 3"),
    "yin-fig2c": ("speculab.repro.yin_fig2c", "[Yin] Fig. 2(c): E[N_rej] vs M with the exact M→∞ limit (both regimes)"),
    "yin-fig3": ("speculab.repro.yin_fig3", "[Yin] Fig. 3: batch improvement vs M, Bernoulli and uniform closed forms"),
    "yin-fig5": ("speculab.repro.yin_fig5", "[Yin] Fig. 5: T=100 — SD, batch M=2, E[N_rej] vs M"),
}


def get(name: str):
    """The reproduction module for a figure name (see :data:`FIGURES`)."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; choose one of {sorted(FIGURES)}")
    return importlib.import_module(FIGURES[name][0])
