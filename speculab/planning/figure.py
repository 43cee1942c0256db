"""The plan's pictures: predicted tokens per second against ``K`` per chain verifier and against drafted nodes per
tree verifier (confirmed ones marked with what the clock measured), and the frontier of tokens per second against
per-token bias.

Drawn from the plan's JSON (:func:`speculab.planning.command.to_json`), so the report and the docs draw the same
picture from the same numbers; written with :func:`speculab.repro._io.save_figure` (a PNG and a PDF beside it).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["draw", "save"]


def _short(method: str) -> str:
    """A method's repr without its default-valued options, for a label."""
    return method.replace(", rejection='opt'", "").replace(", correction='q'", "")


def _rule(method: str) -> str:
    """The verifier of a method's repr, its ``K`` left out: ``SD(K=4)`` → ``SD``, ``Biased(eps=0.1, …, K=2)`` →
    ``Biased(eps=0.1, …)``."""
    name = re.sub(r",?\s*K=\d+", "", _short(method))
    return name.replace("()", "")


def draw(plan: dict):
    """The figure of a plan's JSON: a matplotlib ``Figure`` with its two axes."""
    from speculab.repro._io import new_figure

    rows = plan["ranked"]
    trees = [r for r in rows if r.get("tree") and r["allowed"]]
    fig, axes = new_figure(3 if trees else 2, width=5.2, height=3.8)
    by_k, frontier = axes[0], axes[-1]
    measured = {r["method"]: r for r in plan["confirmed"]}
    ar = next(r for r in rows if r["method"] == "Autoregressive()")
    rules: dict[str, list] = {}
    for r in rows:
        if r["K"] and r["allowed"] and not r.get("tree"):
            rules.setdefault(_rule(r["method"]), []).append(r)
    for rule, rs in rules.items():
        rs = sorted(rs, key=lambda r: r["K"])
        ks = [r["K"] for r in rs]
        rate = [r["tokens_per_second"] for r in rs]
        se = [r["tokens_per_second_se"] or 0.0 for r in rs]
        (line,) = by_k.plot(ks, rate, marker=".", label=rule)
        by_k.fill_between(ks, [a - b for a, b in zip(rate, se)], [a + b for a, b in zip(rate, se)], alpha=0.15)
        for r in rs:
            if r["method"] in measured:
                by_k.plot(r["K"], measured[r["method"]]["measured"], "x", color=line.get_color(), markersize=8)
    by_k.axhline(ar["tokens_per_second"], color="gray", linestyle="--", label="autoregressive")
    if ar["method"] in measured:
        by_k.plot(0.6, measured[ar["method"]]["measured"], "x", color="gray", markersize=8)
    by_k.set_xlabel("K (drafts per round)")
    by_k.set_ylabel("tokens / s (predicted; × measured)")
    by_k.legend(fontsize=7)
    if trees:
        _trees(axes[1], trees, measured, ar)
    points = sorted(((r["bias"], r["tokens_per_second"], r["method"]) for r in rows), key=lambda x: (x[0], -x[1]))
    frontier.scatter([p[0] for p in points], [p[1] for p in points], s=10, color="lightgray", label="candidates")
    best, front = -1.0, []
    for bias, rate, name in points:
        if rate > best:
            best = rate
            front.append((bias, rate, name))
    frontier.step([f[0] for f in front], [f[1] for f in front], where="post", marker="o", label="frontier")
    for bias, rate, name in front[:6]:
        frontier.annotate(_short(name), (bias, rate), fontsize=6, xytext=(3, -9), textcoords="offset points")
    frontier.axvline(plan["settings"]["bias_budget"], color="red", linestyle=":", label="bias budget")
    frontier.set_xlabel("per-token TV from the target's law")
    frontier.set_ylabel("tokens / s (predicted)")
    frontier.legend(fontsize=7)
    s = plan["settings"]
    fig.suptitle(f"plan: the {s['pair']} pair, runs of {s['max_new_tokens']} tokens", fontsize=10)
    return fig


def _trees(ax, rows: list, measured: dict, ar: dict) -> None:
    """Predicted tokens per second of the token trees against their nodes, per verifier (× where measured)."""
    rules: dict[str, list] = {}
    for r in rows:
        rules.setdefault(re.sub(r"\(tree=.*?, draws='(\w+)'\)", r" (\1)", r["method"]), []).append(r)
    for rule, rs in rules.items():
        rs = sorted(rs, key=lambda r: r["nodes"])
        (line,) = ax.plot([r["nodes"] for r in rs], [r["tokens_per_second"] for r in rs], marker=".", label=rule)
        for r in rs:
            if r["method"] in measured:
                ax.plot(r["nodes"], measured[r["method"]]["measured"], "x", color=line.get_color(), markersize=8)
    ax.axhline(ar["tokens_per_second"], color="gray", linestyle="--", label="autoregressive")
    ax.set_xlabel("drafted nodes per round (a tree)")
    ax.set_ylabel("tokens / s (predicted; × measured)")
    ax.legend(fontsize=7)


def save(plan: dict, path: Path) -> None:
    """Draw ``plan`` to ``path`` (a PNG, with a PDF beside it)."""
    from speculab.repro._io import save_figure

    save_figure(draw(plan), Path(path), dpi=130)
