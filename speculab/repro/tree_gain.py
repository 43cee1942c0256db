"""Token trees against chains on a Markov instance (SPEC TR): tokens per target call over tree sizes 1–64 nodes,
Sequoia's shapes against the exact best, and the most any lossless verifier can accept.

On one Markov instance (``T = 24``, 3 tokens, Dirichlet(0.5) rows):

* **tokens per target call** over the horizon for chains of ``n`` drafts (SD, block verification) and trees of
  ``n`` nodes (RRS and traversal verification, children i.i.d. and distinct), each tree the shape Sequoia's dynamic
  program picks for its draws from the instance's rank acceptances (:mod:`speculab.methods.tree_shapes`) — exact
  where the counts can be computed (RRS by its recursion at every size; block verification and traversal
  verification by enumeration while it fits its budget), simulated with the numpy engine beyond; the chains are
  also simulated beside their exact values at the sizes up to 16 (z), the tree engines being held to exact counts
  by the tests;
* **Sequoia vs the exact best shape** for ``n = 1..6`` (``search``): every ordered shape searched, exactly;
* **the bound**: the most drafts any lossless verifier of the tree accepts in a round from the prompt's law
  (:func:`speculab.methods.tree_bound.accepted_bound`), beside RRS and traversal on the same trees, for
  ``n ≤ 4``.

* **measured on the offline tiny pair** (held-out prompts, temperature 1, tree attention): tokens per target call
  of the same chains and trees, and each method's accepted drafts per round against their exact expectation given
  each drafted block or tree (the round law's ``E[τ | tree]``, paired round by round: z).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab._validate import TooLarge, as_generator, spawn_seeds
from speculab.counts import Estimate
from speculab.methods import RRS, SD, BlockVerification, Traversal
from speculab.methods.tree_bound import accepted_bound
from speculab.methods.tree_shapes import best_tree, rank_acceptance, round_accepted, sequoia_tree
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.sim import simulate
from speculab.theory import MarkovInstance

T, V, CONCENTRATION = 24, 3, 0.5
SIZES = (1, 2, 4, 8, 16, 32, 64)
BOUND = (1, 2, 3, 4)  # sizes whose bound's linear program is solved
RANKS = 8  # Sequoia's rank acceptances a_1..a_8
CHECKED = 16  # the largest size also simulated beside its exact value
TREES = {  # label -> (verifier, draws)
    "RRS iid": (RRS, "iid"),
    "RRS distinct": (RRS, "distinct"),
    "traversal iid": (Traversal, "iid"),
    "traversal distinct": (Traversal, "distinct"),
}
PAPER = {
    "gain": "a tree accepts more per target call than a chain of as many drafts (SpecInfer, Sequoia)",
    "traversal": "traversal verification accepts at least as much as RRS (Weng et al. 2025; proven on chains)",
    "sequoia": "Sequoia's dynamic program picks the best shape under its positional acceptance model",
}


def _point(inst, method, n_runs: int, rng, progress: bool, check: bool) -> dict:
    """Tokens per target call of ``method``: exact where its counts fit their work budget (and simulated beside
    it if ``check``), else simulated (the delta method's standard error of ``T / mean``)."""
    out = {}
    try:  # every method refuses exact counts past its work budget
        out["exact"] = T / method.expected(inst).oracle_calls
    except TooLarge:
        pass
    if check or "exact" not in out:
        calls = simulate(inst, method, n_runs, rng, progress=progress).estimate("oracle_calls")
        sim = {"mean": T / calls.mean, "se": T * calls.se / calls.mean**2, "runs": n_runs}
        if "exact" in out:
            sim["z"] = (sim["mean"] - out["exact"]) / sim["se"] if sim["se"] > 0 else 0.0
        out["simulated"] = sim
    return out


def _value(point: dict) -> float:
    return point["exact"] if "exact" in point else point["simulated"]["mean"]


def _measured(pair, prompts: list[str], methods: dict, key, max_new_tokens: int) -> dict:
    """Tokens per target call on the real pair (the ratio of sums; target calls per token run by run, with their
    standard error), and accepted drafts per round against ``E[τ | block or tree]`` (paired differences over rounds:
    their mean and standard error, and z)."""
    from speculab.backends import decode

    out = {}
    for (label, method), seed in zip(methods.items(), spawn_seeds(key, len(methods))):
        res = decode(pair, prompts, method, max_new_tokens=max_new_tokens, key=seed)
        accepted = np.concatenate([r.accepted for r in res.rounds]).astype(float)
        expected = np.concatenate([r.expected_accepted for r in res.rounds])
        diff = Estimate.of(accepted - expected)
        per_run = Estimate.of(res.counts.oracle_calls / np.maximum(res.counts.tokens, 1))
        out[label] = {
            "tokens_per_call": float(res.counts.tokens.sum() / res.counts.oracle_calls.sum()),
            "calls_per_token": {"mean": per_run.mean, "se": per_run.se},
            "accepted_per_round": float(accepted.mean()),
            "expected_per_round": float(expected.mean()),
            "gap": {"mean": diff.mean, "se": diff.se, "rounds": diff.n, "z": diff.mean / diff.se if diff.se else 0.0},
        }
    return out


def run(
    key=0,
    n_runs: int = 4_000,
    out_dir: str | Path = "results",
    progress: bool = False,
    search: int = 6,
    draft: str | None = None,
    target: str | None = None,
    max_new_tokens: int = 32,
    prompts: list[str] | None = None,
) -> dict:
    """Every comparison of the module docstring, Sequoia's shapes held to the best for ``n = 1..search``
    (Catalan(6) = 132 shapes at 6); the real pair (``"tiny"`` unless ``draft``/``target`` name one) decodes each
    prompt once per method; writes ``tree_gain.{png,json}`` and the instance."""
    from speculab._validate import as_positive_int
    from speculab.backends import load_pair
    from speculab.backends.pair import default_prompts

    search = as_positive_int(search, "search", maximum=8)
    max_new_tokens = as_positive_int(max_new_tokens, "max_new_tokens")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = as_generator(key)
    inst = MarkovInstance.random(T, V, rng, concentration=CONCENTRATION)
    shapes = {d: {n: sequoia_tree(rank_acceptance(inst, RANKS, d), n).tree for n in SIZES} for d in ("iid", "distinct")}
    points = {}
    for n in SIZES:
        row = {
            "SD chain": _point(inst, SD(K=n), n_runs, rng, progress, n <= CHECKED),
            "block chain": _point(inst, BlockVerification(n), n_runs, rng, progress, n <= CHECKED),
        }
        for label, (verifier, draws) in TREES.items():
            tree = shapes[draws][n]
            row[label] = {"tree": str(tree), **_point(inst, verifier(tree, draws=draws), n_runs, rng, progress, False)}
        points[str(n)] = row
    pair = load_pair("tiny") if draft is None else load_pair(draft, target)
    runs = list(prompts or default_prompts())
    measured = {}
    for i, n in enumerate(SIZES):
        methods = {"SD chain": SD(K=n), "block chain": BlockVerification(n)}
        for label, (verifier, draws) in TREES.items():
            methods[label] = verifier(shapes[draws][n], draws=draws)
        measured[str(n)] = _measured(pair, runs, methods, spawn_seeds(key, len(SIZES))[i], max_new_tokens)
    sequoia = {}
    for n in range(1, search + 1):
        row = {}
        for label, (verifier, draws) in TREES.items():
            dp = shapes[draws].get(n) or sequoia_tree(rank_acceptance(inst, RANKS, draws), n).tree
            best = best_tree(inst, n, verifier, draws)
            row[label] = {
                "sequoia_tree": str(dp),
                "sequoia": T / verifier(dp, draws=draws).expected(inst).oracle_calls,
                "best_tree": str(best.tree),
                "best": best.value,
            }
        sequoia[str(n)] = row
    bound = {}
    for n in BOUND:
        tree = shapes["iid"].get(n) or sequoia_tree(rank_acceptance(inst, RANKS, "iid"), n).tree
        row = {"tree": str(tree)}
        for draws in ("iid", "distinct"):
            try:
                b = float(np.asarray(inst.rho) @ accepted_bound(inst, tree, draws))
            except TooLarge:
                continue
            row[draws] = {
                "bound": b,
                "RRS": round_accepted(inst, RRS(tree, draws=draws)),
                "traversal": round_accepted(inst, Traversal(tree, draws=draws)),
            }
        bound[str(n)] = row
    _figure(points, measured, sequoia, out, key, pair.name)
    inst.save(out / "tree_gain_instance.npz")
    result = {
        "figure": "Token trees vs chains: RRS and traversal verification (SPEC TR)",
        "key": describe_key(key),
        "instance": {"T": T, "V": V, "concentration": CONCENTRATION, "file": "tree_gain_instance.npz"},
        "n_runs": n_runs,
        "sizes": list(SIZES),
        "points": points,
        "pair": pair.name,
        "real_runs": len(runs),
        "max_new_tokens": max_new_tokens,
        "measured": measured,
        "sequoia": sequoia,
        "bound": bound,
    }
    write_json(result, out / "tree_gain.json")
    return result


def _figure(points: dict, measured: dict, sequoia: dict, out: Path, key, pair: str) -> None:
    fig, (ax, ax3, ax2) = new_figure(ncols=3)
    sizes = np.array([int(n) for n in points])
    styles = {
        "SD chain": ("tab:red", "o--"),
        "block chain": ("tab:orange", "o--"),
        "RRS iid": ("tab:blue", "s-"),
        "RRS distinct": ("tab:cyan", "s-"),
        "traversal iid": ("tab:green", "^-"),
        "traversal distinct": ("tab:olive", "^-"),
    }
    for label, (color, style) in styles.items():
        ax.plot(sizes, [_value(points[str(n)][label]) for n in sizes], style, color=color, label=label, ms=4)
        ax3.plot(sizes, [measured[str(n)][label]["tokens_per_call"] for n in sizes], style, color=color, ms=4)
    for a, title in ((ax, f"Markov T={T}, {V} tokens (key {describe_key(key)})"), (ax3, f"{pair} pair, measured")):
        a.set_xscale("log", base=2)
        a.set_xlabel("drafted tokens per round (chain length or tree nodes)")
        a.set_ylabel("tokens per target call")
        a.set_title(title)
    ax.legend(fontsize=7)
    ns = np.array([int(n) for n in sequoia])
    for label in TREES:
        color, _ = styles[label]
        ax2.plot(ns, [sequoia[str(n)][label]["best"] for n in ns], "o-", color=color, label=f"{label}: best shape")
        ax2.plot(ns, [sequoia[str(n)][label]["sequoia"] for n in ns], "x--", color=color, ms=8, label="Sequoia's")
    ax2.set_xlabel("tree nodes n")
    ax2.set_ylabel("tokens per target call (exact, Markov)")
    ax2.set_title("Sequoia's shape vs the exact best of every shape")
    ax2.legend(fontsize=6, ncol=2)
    save_figure(fig, out / "tree_gain.png", dpi=130)


def summary(result: dict) -> str:
    lines = [
        f"Token trees vs chains — Markov T={result['instance']['T']}, V={result['instance']['V']}: tokens per "
        "target call (exact, or simulated ± s.e.)",
        "  n    " + "  ".join(f"{label:>18}" for label in result["points"]["1"]),
    ]
    for n, row in result["points"].items():
        cells = []
        for point in row.values():
            cells.append(f"{point['exact']:18.4f}" if "exact" in point else f"{pm(**_ms(point), digits=3):>18}")
        lines.append(f"  {n:<4} " + "  ".join(cells))
    lines.append(f"  the {result['pair']} pair, measured tokens per target call ({result['real_runs']} runs):")
    for n, row in result["measured"].items():
        lines.append(f"  {n:<4} " + "  ".join(f"{v['tokens_per_call']:18.4f}" for v in row.values()))
    lines.append("  Sequoia's shape / the exact best (tokens per target call):")
    for n, row in result["sequoia"].items():
        lines.append(f"  n = {n}: " + "; ".join(f"{k} {v['sequoia']:.4f} / {v['best']:.4f}" for k, v in row.items()))
    return "\n".join(lines)


def _ms(point: dict) -> dict:
    return {"mean": point["simulated"]["mean"], "se": point["simulated"]["se"]}


def _cell(point: dict) -> tuple[str | None, str | None]:
    """The theory and simulation cells of a point."""
    theory = f"{point['exact']:.3f}" if "exact" in point else None
    sim = point.get("simulated")
    simulation = None
    if sim is not None:
        simulation = pm(sim["mean"], sim["se"]) + (f" (z = {signed(sim['z'])})" if "z" in sim else "")
    return theory, simulation


def claims(result: dict) -> list[dict]:
    """The claims table of ``speculab report``: tokens per target call of chains and trees at each size, Sequoia's
    shapes against the exact best, and the bound."""
    rows = []
    for n, row in result["points"].items():
        for label, point in row.items():
            theory, simulation = _cell(point)
            shape = f" (tree {point['tree']})" if "tree" in point else ""
            rows.append(
                claim(
                    f"n = {n}: tokens per target call, {label}{shape}",
                    paper=PAPER["gain"] if label.startswith(("RRS", "traversal")) else None,
                    theory=theory,
                    simulation=simulation,
                )
            )
    for n, row in result["measured"].items():
        for label, v in row.items():
            gap = v["gap"]
            rows.append(
                claim(
                    f"n = {n}, {result['pair']} pair, {label}: tokens per target call; accepted − E[τ | tree]",
                    paper=PAPER["gain"] if label.startswith(("RRS", "traversal")) else None,
                    measured=f"{v['tokens_per_call']:.3f} (calls per token "
                    f"{pm(v['calls_per_token']['mean'], v['calls_per_token']['se'])}); "
                    f"{pm(gap['mean'], gap['se'])} (z = {signed(gap['z'])}, "
                    f"{gap['rounds']:,} rounds)",
                )
            )
    for n, row in result["sequoia"].items():
        for label, v in row.items():
            rows.append(
                claim(
                    f"n = {n}, {label}: Sequoia's shape {v['sequoia_tree']} / the best {v['best_tree']}",
                    paper=PAPER["sequoia"],
                    theory=f"{v['sequoia']:.4f} / {v['best']:.4f}",
                )
            )
    for n, row in result["bound"].items():
        for draws in ("iid", "distinct"):
            if draws in row:
                v = row[draws]
                rows.append(
                    claim(
                        f"n = {n}, tree {row['tree']} ({draws}): accepted per round, RRS / traversal / any verifier",
                        paper=PAPER["traversal"],
                        theory=f"{v['RRS']:.4f} / {v['traversal']:.4f} / {v['bound']:.4f}",
                    )
                )
    return rows
