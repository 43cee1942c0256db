"""Block verification's gain over token verification (Sun et al., ICLR 2025) at block sizes K ∈ {2, 4, 8}.

Three views of the same comparison, side by side:

* **exact** on a Markov instance (``T = 40``, 4 tokens, Dirichlet(0.5) rows): target
  calls, accepted drafts and tokens per target call of block verification
  (:func:`speculab.methods.block.block_counts`) and of SD with ``K = K``
  (:func:`speculab.theory.lookahead_counts`);
* **simulated** on that instance (both methods, ``n_runs`` runs each, z against exact);
* **measured** on the offline tiny pair (held-out prompts, temperature 1): target calls per
  token of both methods in separate runs, and the exact gain ``E[τ_BV − τ_SD | block]``
  on the very blocks block verification drafted (its round law and SD's, per round).

The vocabulary is small because the exact counts enumerate block prefixes (``V^{K+2}``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from speculab._validate import as_generator, spawn_seeds
from speculab.counts import Estimate
from speculab.methods import SD, BlockVerification
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.sim import simulate
from speculab.theory import MarkovInstance

T, V, CONCENTRATION = 40, 4, 0.5
KS = (2, 4, 8)
#: Sun et al.'s claim (ICLR 2025): block verification keeps the target's law and accepts at least as many drafts
#: as token verification in expectation (over the blocks drafted from a context, not block by block).
PAPER = "BV accepts ≥ SD's drafts in expectation (Sun et al. 2025)"


def _exact(inst, K: int) -> dict:
    out = {}
    for name, e in (("block", BlockVerification(K).expected(inst)), ("sd", SD(K=K).expected(inst))):
        out[name] = {"oracle_calls": e.oracle_calls, "accepted": e.accepted, "tokens_per_call": T / e.oracle_calls}
    return out


def _simulated(inst, K: int, n_runs: int, rng, progress: bool, exact: dict) -> dict:
    out = {}
    for name, method in (("block", BlockVerification(K)), ("sd", SD(K=K))):
        c = simulate(inst, method, n_runs, rng, progress=progress)
        row = {}
        for field in ("oracle_calls", "accepted"):
            est = c.estimate(field)
            row[field] = {"mean": est.mean, "se": est.se, "z": est.z(exact[name][field])}
        out[name] = row
    return out


def _measured(pair, prompts: list[str], K: int, seeds: list[int], max_new_tokens: int) -> dict:
    from speculab.backends import decode

    method = BlockVerification(K)
    probe = method.round_probe()
    runs = {
        "block": decode(pair, prompts, method, max_new_tokens=max_new_tokens, key=seeds[0], on_round=probe),
        "sd": decode(pair, prompts, SD(K=K), max_new_tokens=max_new_tokens, key=seeds[1]),
    }
    out = {}
    for name, res in runs.items():
        rate = Estimate.of(res.counts.oracle_calls / np.maximum(res.counts.tokens, 1))
        acc = np.concatenate([r.accepted for r in res.rounds])
        out[name] = {
            "calls_per_token": {"mean": rate.mean, "se": rate.se},
            "accepted_per_round": {"mean": float(acc.mean()), "se": float(acc.std(ddof=1) / math.sqrt(acc.size))},
            "tokens_per_call": float(res.counts.tokens.sum() / res.counts.oracle_calls.sum()),
        }
    gain = Estimate.of(np.asarray(probe.block) - np.asarray(probe.token))
    out["same_block_gain"] = {
        "mean": gain.mean,
        "se": gain.se,
        "rounds": gain.n,
        "negative_blocks": int(np.sum(np.asarray(probe.block) < np.asarray(probe.token) - 1e-12)),
    }
    return out


def run(
    key=0,
    n_runs: int = 20_000,
    out_dir: str | Path = "results",
    progress: bool = False,
    draft: str | None = None,
    target: str | None = None,
    runs_per_prompt: int = 2,
    max_new_tokens: int = 32,
    prompts: list[str] | None = None,
) -> dict:
    """Exact, simulated and measured gain for each K; writes ``block_gain.{png,json}`` and the instance."""
    from speculab.backends import load_pair
    from speculab.backends.pair import default_prompts

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = as_generator(key)
    inst = MarkovInstance.random(T, V, rng, concentration=CONCENTRATION)
    pair = load_pair("tiny") if draft is None else load_pair(draft, target)
    runs = [p for p in (prompts or default_prompts()) for _ in range(runs_per_prompt)]
    seeds = spawn_seeds(key, 2 * len(KS))
    rows = {}
    for i, K in enumerate(KS):
        exact = _exact(inst, K)
        rows[str(K)] = {
            "exact": exact,
            "simulated": _simulated(inst, K, n_runs, rng, progress, exact),
            "measured": _measured(pair, runs, K, seeds[2 * i : 2 * i + 2], max_new_tokens),
        }

    fig, (ax, ax2) = new_figure(ncols=2)
    g = np.array(KS)
    for name, color in (("block", "tab:blue"), ("sd", "tab:red")):
        label = "block verification" if name == "block" else "SD (token verification), K = K"
        ax.plot(
            g, [rows[str(x)]["exact"][name]["tokens_per_call"] for x in KS], "o-", color=color, label=f"{label}: exact"
        )
        sim = [T / rows[str(x)]["simulated"][name]["oracle_calls"]["mean"] for x in KS]
        ax.plot(g, sim, "x", color=color, ms=9, label=f"{label}: simulated")
        ax2.plot(
            g,
            [rows[str(x)]["measured"][name]["tokens_per_call"] for x in KS],
            "s--",
            color=color,
            label=f"{label}: measured",
        )
    ax.set_xlabel("block size K")
    ax.set_ylabel("tokens per target call")
    ax.set_title(f"Markov instance T={T}, {V} tokens (key {describe_key(key)})")
    ax2.set_xlabel("block size K")
    ax2.set_ylabel("tokens per target call")
    ax2.set_title(f"{pair.name} pair, {len(runs)} runs × {max_new_tokens} tokens")
    for a in (ax, ax2):
        a.set_xticks(g)
        a.legend(fontsize=7)
    save_figure(fig, out / "block_gain.png", dpi=130)
    inst.save(out / "block_gain_instance.npz")
    result = {
        "figure": "Block verification vs token verification (Sun et al., ICLR 2025)",
        "key": describe_key(key),
        "instance": {"T": T, "V": V, "concentration": CONCENTRATION, "file": "block_gain_instance.npz"},
        "n_runs": n_runs,
        "pair": pair.name,
        "real_runs": len(runs),
        "max_new_tokens": max_new_tokens,
        "K": rows,
    }
    write_json(result, out / "block_gain.json")
    return result


def summary(result: dict) -> str:
    lines = [
        f"Block vs token verification — Markov T={result['instance']['T']}, V={result['instance']['V']} "
        f"(exact | simulated, {result['n_runs']:,} runs) and the {result['pair']} pair ({result['real_runs']} runs)",
        "  K  target calls BV / SD (exact)   simulated BV / SD (z)              tiny pair calls/token BV / SD"
        "      same-block gain E[τ_BV − τ_SD]",
    ]
    for K, row in result["K"].items():
        ex, sim, me = row["exact"], row["simulated"], row["measured"]
        s = lambda n: f"{sim[n]['oracle_calls']['mean']:.3f} ({sim[n]['oracle_calls']['z']:+.1f})"  # noqa: E731
        m = lambda n: f"{me[n]['calls_per_token']['mean']:.3f}±{me[n]['calls_per_token']['se']:.3f}"  # noqa: E731
        gain = me["same_block_gain"]
        lines.append(
            f"  {K:<2} {ex['block']['oracle_calls']:7.3f} / {ex['sd']['oracle_calls']:7.3f}"
            f"          {s('block')} / {s('sd')}   {m('block')} / {m('sd')}"
            f"   {gain['mean']:+.4f} ± {gain['se']:.4f} ({gain['rounds']} blocks)"
        )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """The claims table of ``speculab report``: per K, target calls of block vs token verification on the Markov
    instance (exact, simulated with z) and on the real pair (measured, with the gain on the same blocks)."""
    rows = []
    for K, row in result["K"].items():
        ex, sim = row["exact"], [row["simulated"][n]["oracle_calls"] for n in ("block", "sd")]
        rows.append(
            claim(
                f"K = {K}: target calls per run, BV / SD (Markov, T = {result['instance']['T']})",
                paper=PAPER,
                theory=f"{ex['block']['oracle_calls']:.2f} / {ex['sd']['oracle_calls']:.2f}",
                simulation=" / ".join(f"{_estimate(s, 2)} (z = {signed(s['z'])})" for s in sim),
            )
        )
    for K, row in result["K"].items():
        me = row["measured"]
        gain = me["same_block_gain"]
        rows.append(
            claim(
                f"K = {K}, {result['pair']} pair: target calls per token BV / SD; E[τ_BV − τ_SD] on the same blocks",
                paper="E[τ_BV − τ_SD] ≥ 0, averaged over blocks (Sun et al. 2025)",
                measured=" / ".join(_estimate(me[n]["calls_per_token"]) for n in ("block", "sd"))
                + f"; {signed(gain['mean'], 3)} ± {float(gain['se']):.3f} ({gain['rounds']:,} blocks)",
            )
        )
    return rows


def _estimate(e: dict, digits: int = 3) -> str:
    """``mean ± se`` of a ``{"mean", "se"}`` entry (a standard error of one run reads back from JSON as "nan")."""
    return pm(float(e["mean"]), float(e["se"]), digits)
