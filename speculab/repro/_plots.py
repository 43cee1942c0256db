"""Plot pieces and curve helpers shared by the reproductions."""

from __future__ import annotations

import numpy as np

from speculab.theory import MarkovInstance

#: [Yin] App. F instances: 7 tokens, uniform prompt law, rows of normalised uniforms.
YIN_V = 7


def yin_instance(T: int, rng: np.random.Generator) -> MarkovInstance:
    """A seeded instance of the kind used in [Yin] App. F (generator: see ``MarkovInstance.random``)."""
    return MarkovInstance.random(T, YIN_V, rng, row_law="uniform")


def running_mean(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(k, mean of the first k runs, standard error of that mean)`` for ``k = 1..len(x)``."""
    x = np.asarray(x, dtype=np.float64)
    k = np.arange(1, x.size + 1)
    mean = np.cumsum(x) / k
    var = np.maximum(np.cumsum(x * x) / k - mean**2, 0.0)
    return k, mean, np.sqrt(var / k)


def checkpoints(mean: np.ndarray) -> dict[str, float]:
    """The running mean at 10, 100, 1000, … runs and at the last run (for the JSON)."""
    n = mean.size
    at = [10**i for i in range(1, 9) if 10**i <= n]
    if n not in at:
        at.append(n)
    return {str(i): float(mean[i - 1]) for i in at}


#: How many points a running-mean curve is drawn with, at most.
PLOT_POINTS = 2000


def log_grid(n: int, points: int = PLOT_POINTS) -> np.ndarray:
    """Indices ``0..n-1`` evenly spaced in ``log(index + 1)``: every index when ``n <= points``, else about
    ``points`` of them (fewer: the low ones coincide), always the first and the last."""
    if n <= points:
        return np.arange(n)
    return np.unique(np.geomspace(1, n, points).round().astype(np.int64)) - 1


def plot_running(
    ax, x: np.ndarray, theory: float, *, color: str, theory_color: str, label: str, theory_label: str
) -> dict:
    """Running mean of per-run counts with a ±2 s.e. band and the theory line; returns checkpoints.

    The curve is drawn at :data:`PLOT_POINTS` run counts spaced evenly on the log axis (the exact running mean
    there, the last run included), not at every run: 500,000 runs drawn as vectors made a 6.6 MB PDF."""
    k, mean, se = running_mean(x)
    at = log_grid(k.size)
    ax.plot(k[at], mean[at], color=color, lw=1.2, label=label)
    ax.fill_between(k[at], mean[at] - 2 * se[at], mean[at] + 2 * se[at], color=color, alpha=0.25, lw=0)
    ax.axhline(theory, color=theory_color, lw=1.5, label=f"{theory_label}: {theory:.3f}")
    ax.set_xscale("log")
    ax.set_xlim(10, k[-1])
    ax.set_xlabel("number of runs N")
    ax.set_ylabel("average rejections")
    return checkpoints(mean)


def interpolate_points(points: list[dict], x_key: str, y_key: str, x: float) -> float:
    """``y_key`` of a curve's points interpolated (linearly) in ``x_key`` at ``x`` inside the range they cover, else
    NaN (a method's sweep read off at another method's operating point)."""
    pts = sorted((p[x_key], p[y_key]) for p in points)
    xs, ys = [a for a, _ in pts], [b for _, b in pts]
    return float(np.interp(x, xs, ys)) if xs[0] <= x <= xs[-1] else float("nan")
