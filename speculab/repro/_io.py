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
