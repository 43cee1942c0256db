"""Writing a reproduction's outputs (JSON with numpy values, figures without pyplot state)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


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
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(obj), indent=2) + "\n")


def new_figure(ncols: int = 1, width: float = 5.0, height: float = 3.8):
    """A matplotlib ``Figure`` with ``ncols`` axes, built without the pyplot state machine."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, axes
