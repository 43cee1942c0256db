"""Reproductions of the papers' figures and tables.

Each module exposes ``run(seed, n_runs, out_dir, progress) -> dict`` which
computes everything, writes a PNG and a JSON into ``out_dir`` and returns the
JSON's content. ``papers_repro/*.py`` and ``speculab repro NAME`` call these.
"""

from __future__ import annotations

import importlib

#: figure name -> (module, one-line description)
FIGURES = {
    "yin-fig2a": ("speculab.repro.yin_fig2a", "[Yin] Fig. 2(a): simulated SD rejections converge to Thm 1 (T=50, V=7)"),
}


def get(name: str):
    """The reproduction module for a figure name (see :data:`FIGURES`)."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; choose one of {sorted(FIGURES)}")
    return importlib.import_module(FIGURES[name][0])
