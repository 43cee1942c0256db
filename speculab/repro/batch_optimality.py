"""How far [Yin] Algorithm 4 is from the best use of ``M`` drafts (SPEC O; [Yin] §5 leaves it open).

Left: [Yin] Fig. 2(c) extended — on the Fig. 2(a) instance (T = 50, 7 tokens), expected
rejections against ``M`` for Algorithm 4 (Thm 3) and for batch SD whose roots are
verified by the best coupling (:func:`~speculab.theory.optimal.optimal_batch_rejections`,
the rest of each round as Algorithm 4), with single-draft SD (Thm 1) and the ``M → ∞``
limit. Middle: at one position, the largest root acceptance ``α*(p, q, M)`` against
Algorithm 4's ``1 − Π r_m`` on random Dirichlet pairs with ``V = 7`` (mean and worst gap), and
what distinct drafts (without replacement) add to ``α*`` (:func:`~speculab.theory.optimal.set_acceptance`).
Right: the same on a real pair (the offline tiny pair by default) — the exact ``p_n``,
``q_n`` at every position of SD runs (``K = 4``, temperature 1, held-out prompts), i.e.
how much a real pair would gain at a root from an optimal multi-draft verifier.
The left panel also has the registered method that attains ``α*`` at every root
(:class:`~speculab.methods.OptimalMultiDraft`: a linear program's coupling, exact counts)
and one simulation of it against its exact count. Exact but for the simulation and the
real runs themselves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab._validate import as_generator, spawn_seeds
from speculab.methods import SD, OptimalMultiDraft, RoundProbe
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.sim import simulate
from speculab.repro._plots import YIN_V as V
from speculab.repro._plots import yin_instance
from speculab.theory import batch_expected_rejections, batch_rejection_probability, sd_expected_rejections
from speculab.theory.optimal import draft_set_law, optimal_acceptance, optimal_batch_rejections, set_acceptance

T = 50
M_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
PAIRS = 2000
M_REAL = (2, 4, 8)
M_DISTINCT, DISTINCT_PAIRS = (2, 3, 4, 6), 200  # distinct drafts: 2^V subsets per pair
M_COUPLING = (2, 3, 4, 6, 8, 12, 16)  # the α*-coupling method: one LP per position and context
M_SIMULATED, RUNS = 4, 20_000
M_CLAIMS = (2, 4, 8)  # the batch sizes of the claims table
OPEN = "open: batch optimality ([Yin] §5)"


def _summary(best: np.ndarray, alg4: np.ndarray, Ms) -> dict:
    """``best``, ``alg4``: ``(positions, len(Ms))`` — ``α*`` and Algorithm 4's root acceptance at each position."""
    gap = best - alg4
    return {
        "positions": int(best.shape[0]),
        "M": list(Ms),
        "optimal": best.mean(axis=0).tolist(),
        "algorithm4": alg4.mean(axis=0).tolist(),
        "gap_mean": gap.mean(axis=0).tolist(),
        "gap_max": gap.max(axis=0).tolist(),
    }


class _Roots(RoundProbe):
    """Per round of SD runs, at every slot on the run (the accepted ones and the one refused, if any): ``α*`` and
    Algorithm 4's root acceptance for each ``M`` of :data:`M_REAL`, as ``[[α*, alg4] per M] per slot``."""

    def observe(self, info) -> list:
        on_run = min(info.accepted, info.p.shape[1] - 1)  # RoundInfo: float64 tensors (M, L, V), (M, L + 1, V)
        p, q = info.p[0, : on_run + 1].cpu().numpy(), info.q[0, : on_run + 1].cpu().numpy()
        # the models' float32 softmax sums to 1 only to ~1e-7: renormalised in float64 before the exact formulas
        p, q = p / p.sum(axis=-1, keepdims=True), q / q.sum(axis=-1, keepdims=True)
        both = [(optimal_acceptance(p, q, M), 1.0 - batch_rejection_probability(q, p, M)) for M in M_REAL]
        return [[[float(best[i]), float(alg4[i])] for best, alg4 in both] for i in range(p.shape[0])]


def _measured(pair, prompts: list[str], key, max_new_tokens: int) -> dict:
    """``α*`` and Algorithm 4's root acceptance at every position of SD runs on a real pair that a draft was
    verified at (slots past a round's first rejection are off the run and skipped): mean and worst per ``M``."""
    from speculab.backends import decode

    roots = _Roots()
    decode(pair, prompts, SD(K=4), max_new_tokens=max_new_tokens, key=key, on_round=roots)
    table = np.array([slot for obs in roots.values() for slot in obs])  # (positions, len(M_REAL), 2)
    return _summary(table[:, :, 0], table[:, :, 1], M_REAL)


def run(
    key=10,
    out_dir: str | Path = "results",
    draft: str | None = None,
    target: str | None = None,
    max_new_tokens: int = 32,
    prompts: list[str] | None = None,
) -> dict:
    """All three panels; writes ``batch_optimality.{png,json}``."""
    from speculab.backends import load_pair
    from speculab.backends.pair import default_prompts

    out = Path(out_dir)
    rng = as_generator(key)
    inst = yin_instance(T, rng)
    Ms = np.array(M_GRID)
    alg4 = np.array([batch_expected_rejections(inst, M).rejections for M in Ms])
    best = [optimal_batch_rejections(inst, M) for M in Ms]
    optimal = np.array([b.rejections for b in best])
    limit = batch_expected_rejections(inst, np.inf).rejections
    coupling = np.array([OptimalMultiDraft(M).expected(inst).rejections for M in M_COUPLING])
    sim = simulate(inst, OptimalMultiDraft(M_SIMULATED), RUNS, key=spawn_seeds(key, 2)[1]).rejections
    p, q = rng.dirichlet(np.ones(V), size=PAIRS), rng.dirichlet(np.ones(V), size=PAIRS)
    gaps = np.array([optimal_acceptance(p, q, M) - (1.0 - batch_rejection_probability(q, p, M)) for M in Ms])
    distinct = np.array(
        [
            [set_acceptance(draft_set_law(p[i], M, replacement=False), q[i]) for i in range(DISTINCT_PAIRS)]
            - optimal_acceptance(p[:DISTINCT_PAIRS], q[:DISTINCT_PAIRS], M)
            for M in M_DISTINCT
        ]
    )
    pair = load_pair("tiny") if draft is None else load_pair(draft, target)
    measured = _measured(pair, list(prompts or default_prompts()), spawn_seeds(key, 1)[0], max_new_tokens)
    result = {
        "figure": "batch optimality: [Yin] Fig. 2(c) with the best root verifier (SPEC O)",
        "key": describe_key(key),
        "T": T,
        "V": V,
        "M": Ms,
        "sd_rejections": sd_expected_rejections(inst).rejections,
        "algorithm4_rejections": alg4,
        "optimal_rejections": optimal,
        "limit": limit,
        "root_shortfall": [b.root_shortfall for b in best],
        "coupling": {
            "M": M_COUPLING,
            "rejections": coupling,
            "simulated_M": M_SIMULATED,
            "runs": RUNS,
            "simulated": float(sim.mean()),
            "simulated_se": float(sim.std(ddof=1) / np.sqrt(sim.size)),
            "exact": float(coupling[M_COUPLING.index(M_SIMULATED)]),
        },
        "acceptance_gap": {"pairs": PAIRS, "mean": gaps.mean(axis=1), "max": gaps.max(axis=1)},
        "distinct_drafts_gain": {
            "pairs": DISTINCT_PAIRS,
            "M": M_DISTINCT,
            "mean": distinct.mean(axis=1),
            "max": distinct.max(axis=1),
        },
        "pair": pair.name,
        "max_new_tokens": max_new_tokens,
        "real": measured,
    }
    fig, (left, right, real) = new_figure(ncols=3, width=4.4)
    left.plot(Ms, alg4, "o-", ms=3, color="tab:blue", label="Algorithm 4 (Thm 3)")
    left.plot(Ms, optimal, "s-", ms=3, color="tab:orange", label="best root verifier (exact DP)")
    left.plot(M_COUPLING, coupling, "x", ms=6, color="tab:green", label="α*-coupling method (exact)")
    left.plot([1], [result["sd_rejections"]], "ko", ms=6, label=f"SD (Thm 1): {result['sd_rejections']:.2f}")
    left.axhline(limit, color="tab:red", ls="--", lw=1.2, label=f"M → ∞: {limit:.3f}")
    left.set_xscale("log")
    left.set_xlabel("number of drafts M")
    left.set_ylabel("E[N_rej]")
    left.set_title(f"T={T}, {V} tokens (key {describe_key(key)})")
    left.legend(fontsize=7)
    right.plot(Ms, gaps.mean(axis=1), "o-", ms=3, label="mean")
    right.plot(Ms, gaps.max(axis=1), "^--", ms=3, label="worst")
    right.plot(
        M_DISTINCT,
        distinct.mean(axis=1),
        "s:",
        ms=3,
        color="tab:green",
        label="distinct drafts: α*_distinct − α* (mean)",
    )
    right.set_xscale("log")
    right.set_xlabel("number of drafts M")
    right.set_ylabel("α* − (1 − Π r_m)")
    right.set_title(f"root acceptance gap, {PAIRS} Dirichlet pairs, V={V}")
    right.legend(fontsize=7)
    real.plot(M_REAL, measured["optimal"], "s-", ms=4, color="tab:orange", label="α* (optimal root)")
    real.plot(M_REAL, measured["algorithm4"], "o-", ms=4, color="tab:blue", label="Algorithm 4's root")
    real.set_xscale("log", base=2)
    real.set_xlabel("number of drafts M")
    real.set_ylabel("mean root acceptance")
    real.set_title(f"{pair.name} pair: {measured['positions']} positions of SD runs")
    real.legend(fontsize=7)
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "batch_optimality.png", dpi=130)
    write_json(result, out / "batch_optimality.json")
    return result


def summary(result: dict) -> str:
    lines = [
        f"Batch optimality (key {result['key']}): E[N_rej], T={result['T']}, V={result['V']}; "
        f"SD (Thm 1) {result['sd_rejections']:.4f}, limit M→∞ {result['limit']:.4f}",
        "     M  Algorithm 4   best roots   gain   root α* gap: mean   worst",
    ]
    gap = result["acceptance_gap"]
    for i, M in enumerate(result["M"]):
        a, o = result["algorithm4_rejections"][i], result["optimal_rejections"][i]
        lines.append(f"  {int(M):4d}  {a:11.4f}  {o:11.4f}  {a - o:5.3f}  {gap['mean'][i]:17.4f}  {gap['max'][i]:6.4f}")
    c = result["coupling"]
    lines.append(
        "  OptimalMultiDraft (a root accepting α* by the LP's coupling), exact E[N_rej]: "
        + ", ".join(f"M={M}: {r:.4f}" for M, r in zip(c["M"], c["rejections"]))
        + f"; simulated at M={c['simulated_M']} ({c['runs']} runs): {c['simulated']:.4f} ± "
        f"{c['simulated_se']:.4f} vs exact {c['exact']:.4f} (z = "
        f"{(c['simulated'] - c['exact']) / c['simulated_se']:+.2f})"
    )
    d = result["distinct_drafts_gain"]
    lines.append(
        "  distinct drafts (without replacement), optimal acceptance gain over i.i.d. drafts: "
        + ", ".join(f"M={M}: mean {m:.4f}, worst {w:.4f}" for M, m, w in zip(d["M"], d["mean"], d["max"]))
    )
    real = result["real"]
    lines.append(
        f"  {result['pair']} pair, {real['positions']} positions of SD runs (exact p_n, q_n): "
        + ", ".join(
            f"M={M}: α* {o:.4f} vs Algorithm 4 {a:.4f} (gap mean {g:.4f}, worst {w:.4f})"
            for M, o, a, g, w in zip(real["M"], real["optimal"], real["algorithm4"], real["gap_mean"], real["gap_max"])
        )
    )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """The claims table of ``speculab report``: Algorithm 4 against the best root verifier (exact, and the α*-coupling
    method simulated), the limits of [Yin] Fig. 2(c), the root acceptance gaps and the real pair's."""
    Ms = [int(M) for M in result["M"]]
    c = result["coupling"]
    coupling = dict(zip(c["M"], c["rejections"]))
    rows = []
    for M in M_CLAIMS:
        i = Ms.index(M)
        exact = f"{result['algorithm4_rejections'][i]:.3f} / {result['optimal_rejections'][i]:.4f}"
        rows.append(
            claim(
                f"E[N_rej] at M = {M}: Algorithm 4 (Thm 3) / best root verifier (DP)"
                + (" / α*-coupling method" if M in coupling else ""),
                paper=OPEN,
                theory=exact + (f" / {coupling[M]:.4f}" if M in coupling else ""),
                simulation=f"α*-coupling method: {pm(c['simulated'], c['simulated_se'], 4)} "
                f"(z = {signed((c['simulated'] - c['exact']) / c['simulated_se'])}, "
                f"{c['runs']:,} runs)"
                if M == c["simulated_M"]
                else None,
            )
        )
    rows.append(
        claim(
            f"E[N_rej]: SD (M = 1); M = {Ms[-1]}, Algorithm 4 / best roots; M → ∞, Algorithm 4",
            paper="16.41 at M = 1 on its own instance; E[N_rej] ↛ 0 as M → ∞ (Fig. 2(c), Prop. 1)",
            theory=f"{result['sd_rejections']:.3f}; {result['algorithm4_rejections'][-1]:.3f} / "
            f"{result['optimal_rejections'][-1]:.3f}; {result['limit']:.3f}",
        )
    )
    gap = result["acceptance_gap"]
    rows.append(
        claim(
            f"root acceptance α* − Algorithm 4's, mean (worst), {gap['pairs']:,} Dirichlet pairs (V = {result['V']})",
            paper=OPEN,
            theory="; ".join(
                f"M = {M}: {gap['mean'][Ms.index(M)]:.3f} ({gap['max'][Ms.index(M)]:.3f})" for M in M_CLAIMS
            ),
        )
    )
    d = result["distinct_drafts_gain"]
    rows.append(
        claim(
            f"α* gain of distinct drafts over i.i.d. ones, mean ({d['pairs']} pairs)",
            paper=OPEN,
            theory=", ".join(f"M = {M}: {signed(m, 3)}" for M, m in zip(d["M"], d["mean"])),
        )
    )
    real = result["real"]
    rows.append(
        claim(
            f"{result['pair']} pair, SD runs: mean root acceptance α* / Algorithm 4's "
            f"({real['positions']:,} positions)",
            paper=OPEN,
            measured="; ".join(
                f"M = {M}: {o:.3f} / {a:.3f}" for M, o, a in zip(real["M"], real["optimal"], real["algorithm4"])
            ),
        )
    )
    return rows
