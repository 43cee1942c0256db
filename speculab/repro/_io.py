"""Writing a reproduction's outputs (JSON with numpy values, figures without pyplot state), each atomically
(:func:`speculab._files.atomic_path`: an interrupted run leaves the previous run's files whole)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from speculab._files import atomic_path


def jsonable(x):
    """``x`` with numpy values and non-finite floats turned into JSON-ready Python values."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return x


def describe_key(key):
    """How a reproduction's ``key`` is recorded in its JSON: the int seed, or the generator's type."""
    return key if isinstance(key, (int, np.integer)) and not isinstance(key, bool) else type(key).__name__


def write_json(obj: dict, path: Path) -> None:
    text = json.dumps(jsonable(obj), indent=2) + "\n"  # serialised first: a value JSON refuses writes nothing
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def save_figure(fig, path: Path, **kwargs) -> None:
    """``fig.savefig(path, **kwargs)``, atomically (the format is read off ``path``'s suffix); a PNG gets a vector
    PDF beside it (same name, ``.pdf``), for papers."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or None, **kwargs)
    if path.suffix == ".png":
        with atomic_path(path.with_suffix(".pdf")) as tmp:
            fig.savefig(tmp, format="pdf", **{k: v for k, v in kwargs.items() if k != "dpi"})


def new_figure(ncols: int = 1, width: float = 5.0, height: float = 3.8):
    """A matplotlib ``Figure`` with ``ncols`` axes, built without the pyplot state machine."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, axes


#: The columns of a reproduction's claims table (``claims(result)``, read by ``speculab report``).
CLAIM_COLUMNS = ("quantity", "paper", "theory", "simulation", "measured")


def claim(quantity: str, *, paper=None, theory=None, simulation=None, measured=None) -> dict:
    """One row of a reproduction's claims table: what is compared, the paper's claim about it (a number where
    the paper prints one, else what its figure or text states), and our exact theory, Monte-Carlo simulation and
    real-model measurement of it. Each cell is text; ``None`` where it does not apply (shown as "—")."""
    row = {"quantity": quantity, "paper": paper, "theory": theory, "simulation": simulation, "measured": measured}
    for column, cell in row.items():
        if cell is not None and not isinstance(cell, str):
            raise ValueError(f"claim cell {column!r} must be text or None; got {type(cell).__name__} {cell!r}")
    if not quantity:
        raise ValueError("a claim needs a quantity")
    return row


def pm(mean: float, se: float, digits: int = 3) -> str:
    """``mean ± se`` at ``digits`` decimals (an estimate with its standard error), with a true minus sign."""
    return f"{float(mean):.{digits}f} ± {float(se):.{digits}f}".replace("-", "−")


def signed(x: float, digits: int = 2) -> str:
    """``x`` with its sign always shown, a true minus sign, ``digits`` decimals (z-scores, gaps in s.e.)."""
    return format(float(x), f"+.{digits}f").replace("-", "−")


def check_claims(rows) -> list[dict]:
    """``rows`` if it is a claims table (a list of :func:`claim` rows), else ``ValueError`` saying what is wrong."""
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"claims must be a non-empty list of rows; got {type(rows).__name__}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or tuple(row) != CLAIM_COLUMNS:
            raise ValueError(f"claims row {i} must be a dict with the keys {CLAIM_COLUMNS}; got {row!r}")
        claim(**row)
    return rows
