"""[Yin] Fig. 4: the quality/speed trade-off of biased decoding — Thm 4, the Pareto front of Thm 5, and beyond.

Convention: ``p`` = draft, ``q`` = target. Axes of the trade-off plane: x = TV bias,
y = rejection probability (the paper places SD at ``(0, TV(p, q))`` and
"always accept the draft" at ``(TV(p, q), 0)``, which fixes this orientation).

Panels (the instance is ``yin_instance(50, as_generator(key))``, V = 7, as in Fig. 2(a)):

(a) **One token** — ``p = P[0, 0]``, ``q = Q[0, 0]`` (position 1 after prompt token 0).
    Blue: ``(TV(P_A, q), P(reject))`` of random Algorithm 2 rules ``(b, P)``, the
    achievable region; red: the unreachable triangle below the Pareto line
    ``Loss + P(reject) = TV(p, q)`` (Thm 5). Curves: ``b = min(1, (q + ε)/p)``,
    ``ε ∈ [0, ∞)``, with ``P = P*`` (Decoding-OPT: on the line, Thm 4) and ``P = q`` (UNO: above it).
(b) **The Markov instance, per token** — x = per-token loss
    ``(1/T) Σ_n E_ν[TV(P_A,n, q_n)]``, y = rejection rate ``E[N_rej]/T``; both
    average over positions with the prefix ``x_{n-1} ~ ν_{n-1}``, the algorithm's own
    output chain. Lines: exact, over an ε grid. Markers: simulation (``Biased(ε, "opt" | "uno")``,
    ``n_runs`` runs each) at ε ∈ {0.1, 0.2, 0.4, 0.8}, ±2 s.e.; the simulated loss is the
    unbiased witness-set estimate ``(1/T) Σ_n [1{x_n ∈ S_n} − q_n(S_n)]``, ``S_n = {P_A,n > q_n}``
    (a plug-in TV of empirical per-position laws, biased upward, is in the JSON too).
    Dashed: ``x + y = E_μ[TV(p_n, q_n)]`` (μ: the target's marginals, i.e. SD's point);
    OPT satisfies ``x + y = E_ν[TV(p_n, q_n)]`` exactly for its own ν (Thm 5 per context).
(c) **Per-token bias vs ε** — orange: OPT exact, ``(1/T) Σ_n E_ν[Loss*_TV(b_n)]`` (Thm 4);
    blue: UNO exact; markers: simulation. Rejection rate on the right axis (dotted).
(d) **Beyond the paper: the sequence level** — exact ``KL(P_A ‖ q)`` and ``KL(q ‖ P_A)``
    over ``x_{1:T}`` (chain rule; the output is a Markov chain) vs ε, OPT and UNO.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from speculab._validate import as_generator, as_positive_int
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.repro._plots import YIN_V as V
from speculab.repro._plots import yin_instance
from speculab.sim import Biased, simulate
from speculab.theory import MarkovInstance, tv
from speculab.methods import Biased as BiasedMethod
from speculab.theory.biased import biased_acceptance
from speculab.theory.tradeoff import (
    log_likelihood_ratio,
    optimal_rejection,
    rejection_loss,
    rejection_probability,
    sequence_bias,
    tradeoff_profile,
)

__all__ = ["run", "summary", "claims", "tradeoff_table", "TradeoffRow"]

T = 50
EPS_TABLE = (0.1, 0.2, 0.4, 0.8)
EPS_GRID = np.unique(np.concatenate([np.linspace(0.0, 0.3, 61), np.linspace(0.3, 0.8, 11)]))
N_RANDOM = 4000  # random Algorithm 2 rules in panel (a)
COLORS = {"opt": "tab:orange", "uno": "tab:blue"}


@dataclass(frozen=True)
class TradeoffRow:
    """Exact and simulated trade-off numbers of ``Biased(eps, rejection)`` on one instance.

    ``*_sim`` are ``(mean, standard error)`` over ``n_runs`` runs; ``token_loss_plugin`` is
    the TV of empirical per-position laws (biased upward, no standard error).
    """

    eps: float
    rejection: str
    rejection_rate: float
    rejection_rate_sim: tuple[float, float]
    token_loss: float
    token_loss_sim: tuple[float, float]
    token_loss_plugin: float
    optimal_token_loss: float
    pareto_gap: float
    kl: float
    kl_reverse: float
    kl_sim: tuple[float, float]
    sequence_tv_sim: tuple[float, float]
    sequence_tv_lower: float
    sequence_tv_upper: float
    n_runs: int

    def z(self, name: str) -> float:
        """``(simulated − exact) / s.e.`` for ``"rejection_rate"``, ``"token_loss"`` or ``"kl"``."""
        mean, se = getattr(self, f"{name}_sim")
        exact = getattr(self, name)
        return (mean - exact) / se if se > 0 else (0.0 if mean == exact else float(np.inf))


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


def _simulated(inst: MarkovInstance, K: np.ndarray, seq: np.ndarray) -> dict:
    """Per-token loss (witness set and plug-in) and sequence KL / TV from sampled sequences ``(N, T + 1)``."""
    N = seq.shape[0]
    n = np.arange(inst.T)
    prev, nxt = seq[:, :-1], seq[:, 1:]  # (N, T)
    witness = K > inst.Q  # (T, V, V): S_n(a) = {x : P_A,n(x|a) > q_n(x|a)}
    q_S = np.where(witness, inst.Q, 0.0).sum(axis=-1)  # (T, V)
    per_run = (witness[n, prev, nxt] - q_S[n, prev]).mean(axis=1)  # (N,), E = token loss exactly
    counts = np.zeros((inst.T, inst.V, inst.V))
    np.add.at(counts, (np.broadcast_to(n, prev.shape), prev, nxt), 1.0)
    rows = counts.sum(axis=-1)  # (T, V) visits of each context
    emp = np.divide(counts, rows[..., None], out=np.zeros_like(counts), where=rows[..., None] > 0)
    plugin = float((rows / N * np.maximum(emp - inst.Q, 0.0).sum(axis=-1)).sum(axis=1).mean())
    llr = log_likelihood_ratio(K, inst.Q, seq)
    tv_terms = -np.expm1(-np.maximum(llr, 0.0))  # (1 − q/P_A)_+ per sequence
    return {
        "token_loss_sim": _mean_se(per_run),
        "token_loss_plugin": plugin,
        "kl_sim": _mean_se(llr),
        "sequence_tv_sim": _mean_se(tv_terms),
    }


def tradeoff_table(inst: MarkovInstance, eps_values, n_runs: int, key, progress: bool = False) -> list[TradeoffRow]:
    """Exact and simulated trade-off of ``Biased(ε, "opt")`` and ``Biased(ε, "uno")`` for each ``ε``.

    Exact: :func:`~speculab.theory.tradeoff.tradeoff_profile` and
    :func:`~speculab.theory.tradeoff.sequence_bias`. Simulated: ``n_runs`` runs of the
    numpy engine per method (``key``: int seed or ``Generator``, consumed in order).
    """
    n_runs = as_positive_int(n_runs, "n_runs", minimum=2)
    rng = as_generator(key)
    rows = []
    for eps in eps_values:
        for rej in ("opt", "uno"):
            b, R = BiasedMethod(float(eps), rej).rule(inst.P, inst.Q)
            prof = tradeoff_profile(inst, b, R)
            seqd = sequence_bias(inst, b, R)
            counts = simulate(inst, Biased(float(eps), rej), n_runs, rng, return_sequences=True, progress=progress)
            rej_sim = counts.estimate("rejections")
            rows.append(
                TradeoffRow(
                    eps=float(eps),
                    rejection=rej,
                    rejection_rate=prof.rejection_rate,
                    rejection_rate_sim=(rej_sim.mean / inst.T, rej_sim.se / inst.T),
                    token_loss=prof.token_loss,
                    optimal_token_loss=float(prof.optimal_loss_per_position.mean()),
                    pareto_gap=prof.pareto_gap,
                    kl=seqd.kl,
                    kl_reverse=seqd.kl_reverse,
                    sequence_tv_lower=seqd.tv_lower,
                    sequence_tv_upper=seqd.tv_upper,
                    n_runs=n_runs,
                    **_simulated(inst, prof.output, counts.sequences),
                )
            )
    return rows


def _single_token_panel(ax, p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> dict:
    Vp, d = p.size, float(tv(p, q))
    s = np.minimum(1.0, np.divide(q, p, out=np.ones_like(q), where=p > q))  # min(1, q/p)
    u = rng.random((N_RANDOM, Vp)) ** rng.choice([0.2, 1.0, 5.0], size=(N_RANDOM, 1))
    on_front = rng.random((N_RANDOM, 1)) < 0.5
    b = np.where(on_front, np.minimum(s + u * (1 - s), 1.0), u)  # half in the Pareto range [min(1, q/p), 1]
    P = rng.dirichlet(np.full(Vp, 0.5), size=N_RANDOM)
    kind = rng.integers(0, 3, size=(N_RANDOM, 1))  # random P, P*, or q
    P = np.where(kind == 1, optimal_rejection(np.broadcast_to(p, b.shape), np.broadcast_to(q, b.shape), b).rejection, P)
    P = np.where(kind == 2, q, P)
    pp, qq = np.broadcast_to(p, b.shape), np.broadcast_to(q, b.shape)
    loss, rej = rejection_loss(pp, qq, b, P), rejection_probability(pp, b)
    ax.fill([0, d, 0], [0, 0, d], color="tab:red", alpha=0.25, lw=0, label="unreachable (Thm 5)")
    ax.scatter(loss, rej, s=2, color="tab:blue", alpha=0.25, lw=0, label="random (b, P): achievable")
    grid = np.concatenate([np.linspace(0, 1, 201), [np.inf]])
    curves = {}
    for rej_name, label in (("opt", "Decoding-OPT"), ("uno", "Decoding-UNO")):
        pts = []
        for eps in grid:
            be = np.ones_like(p) if eps == np.inf else biased_acceptance(p, q, eps)
            Pe = optimal_rejection(p, q, be).rejection if rej_name == "opt" else q
            pts.append((float(rejection_loss(p, q, be, Pe)), float(rejection_probability(p, be))))
        pts = np.array(pts)
        ax.plot(pts[:, 0], pts[:, 1], color=COLORS[rej_name], lw=2, label=f"{label}, b = min(1, (q+ε)/p)")
        curves[rej_name] = {"loss": pts[:, 0], "rejection": pts[:, 1]}
    ax.plot([0, d], [d, 0], "k--", lw=1.0, zorder=5, label="Pareto front: Loss + P(reject) = TV")
    ax.plot([0], [d], "ks", ms=5)
    ax.annotate("SD", (0, d), textcoords="offset points", xytext=(4, 2), fontsize=8)
    ax.set_xlabel("TV(P_A, q)  (bias)")
    ax.set_ylabel("P(reject)")
    ax.set_xlim(0, min(1.0, float(loss.max()) + 0.02))
    ax.set_ylim(0, 1.0)
    ax.legend(fontsize=6, loc="upper right")
    ax.set_title(f"(a) one token: TV(p, q) = {d:.3f}")
    return {
        "p": p,
        "q": q,
        "tv": d,
        "n_random": N_RANDOM,
        "min_gap_random": float((loss + rej - d).min()),
        "eps_grid": grid,
        "curves": curves,
    }


def run(key=10, n_runs: int = 200_000, out_dir: str | Path = "results", progress: bool = False) -> dict:
    """Compute the four panels and the ε table (``n_runs`` simulated runs per method and ε).

    Writes ``yin_fig4.png``, ``yin_fig4.json`` and the instance ``yin_fig4_instance.npz``.
    """
    out = Path(out_dir)
    rng = as_generator(key)
    inst = yin_instance(T, rng)
    fig, (ax_a, ax_b, ax_c, ax_d) = new_figure(ncols=4, width=4.3, height=3.9)
    single_rng = np.random.default_rng([key, 4]) if isinstance(key, int) else rng  # an int key: the panel's own stream
    single = _single_token_panel(ax_a, inst.P[0, 0], inst.Q[0, 0], single_rng)

    curves = {}
    for rej in ("opt", "uno"):
        c = {k: [] for k in ("rejection_rate", "token_loss", "optimal_token_loss", "mean_tv", "kl", "kl_reverse")}
        for eps in EPS_GRID:
            b, R = BiasedMethod(float(eps), rej).rule(inst.P, inst.Q)
            prof, seqd = tradeoff_profile(inst, b, R), sequence_bias(inst, b, R)
            for k, v in (
                ("rejection_rate", prof.rejection_rate),
                ("token_loss", prof.token_loss),
                ("optimal_token_loss", float(prof.optimal_loss_per_position.mean())),
                ("mean_tv", float(prof.tv_per_position.mean())),
                ("kl", seqd.kl),
                ("kl_reverse", seqd.kl_reverse),
            ):
                c[k].append(v)
        curves[rej] = {k: np.array(v) for k, v in c.items()}
    table = tradeoff_table(inst, EPS_TABLE, n_runs, rng, progress=progress)
    mu_tv = float((inst.marginals()[:-1] * inst.tv()).sum(axis=1).mean())

    ax_b.plot([0, mu_tv], [mu_tv, 0], "k--", lw=1, label="x + y = E_q[TV(p_n, q_n)]")
    ax_c2 = ax_c.twinx()
    for rej, label in (("opt", "Decoding-OPT"), ("uno", "Decoding-UNO")):
        c, col = curves[rej], COLORS[rej]
        rows = [r for r in table if r.rejection == rej]
        ax_b.plot(c["token_loss"], c["rejection_rate"], color=col, lw=1.8, label=f"{label} exact")
        ax_b.errorbar(
            [r.token_loss_sim[0] for r in rows],
            [r.rejection_rate_sim[0] for r in rows],
            xerr=[2 * r.token_loss_sim[1] for r in rows],
            yerr=[2 * r.rejection_rate_sim[1] for r in rows],
            fmt="o",
            ms=3.5,
            color=col,
            mec="k",
            mew=0.5,
            label=f"{label} simulated",
        )
        ax_c.plot(
            EPS_GRID, c["token_loss"], color=col, lw=1.8, label="OPT: Loss* (Thm 4)" if rej == "opt" else "UNO exact"
        )
        ax_c.errorbar(
            [r.eps for r in rows],
            [r.token_loss_sim[0] for r in rows],
            yerr=[2 * r.token_loss_sim[1] for r in rows],
            fmt="o",
            ms=3.5,
            color=col,
            mec="k",
            mew=0.5,
        )
        ax_c2.plot(EPS_GRID, c["rejection_rate"], ":", color=col, lw=1.2)
        for k, ls in (("kl", "-"), ("kl_reverse", "--")):
            ax_d.plot(
                EPS_GRID[1:],
                c[k][1:],
                ls,
                color=col,
                lw=1.5,
                label=f"{rej.upper()}: KL({'P_A‖q' if k == 'kl' else 'q‖P_A'})",
            )
    ax_b.set_xlabel("per-token loss (1/T) Σ E_ν TV(P_A,n, q_n)")
    ax_b.set_ylabel("rejection rate E[N_rej]/T")
    ax_b.set_title(f"(b) T={T}, {V} tokens (key {describe_key(key)}), ε ∈ [0, 0.8]")
    ax_b.legend(fontsize=6)
    ax_c.set_xlabel("over-acceptance ε")
    ax_c.set_ylabel("per-token loss")
    ax_c2.set_ylabel("rejection rate (dotted)")
    ax_c.set_title("(c) per-token bias vs ε")
    ax_c.legend(fontsize=6, loc="center right")
    ax_d.set_yscale("log")
    ax_d.set_xlabel("over-acceptance ε")
    ax_d.set_ylabel("sequence-level KL (nats)")
    ax_d.set_title("(d) sequence level (exact, chain rule)")
    ax_d.legend(fontsize=6)
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "yin_fig4.png", dpi=130)
    inst.save(out / "yin_fig4_instance.npz")
    result = {
        "figure": "[Yin] Fig. 4",
        "key": describe_key(key),
        "n_runs": n_runs,
        "instance": {"T": T, "V": V, "rows": "uniform", "rho": "uniform", "file": "yin_fig4_instance.npz"},
        "single_token": single,
        "sd_mean_tv": mu_tv,
        "eps_grid": EPS_GRID,
        "curves": curves,
        "table": [{**asdict(r), "z": {k: r.z(k) for k in ("rejection_rate", "token_loss", "kl")}} for r in table],
    }
    write_json(result, out / "yin_fig4.json")
    return result


def summary(result: dict) -> str:
    """The ε table as text."""
    st = result["single_token"]
    lines = [
        f"[Yin] Fig. 4 — biased decoding b = min(1, (q+ε)/p), T={result['instance']['T']}, "
        f"V={result['instance']['V']}, key {result['key']}, {result['n_runs']:,} runs per method",
        f"  (a) one token: TV(p,q) = {st['tv']:.4f}; {st['n_random']} random (b, P): "
        f"min(Loss + P(reject) − TV) = {st['min_gap_random']:+.2e} (Thm 5: ≥ 0)",
        f"  SD (ε = 0): rejection rate = E_q[TV] = {result['sd_mean_tv']:.4f}",
        "    ε  P   rej/T exact  rej/T sim (z)        loss exact  loss sim (z)          plug-in   "
        "KL(P_A‖q)  KL(q‖P_A)  seq TV (sim)",
    ]
    for r in result["table"]:
        lines.append(
            f"  {r['eps']:4.2f} {r['rejection']:3s} {r['rejection_rate']:.6f}  "
            f"{r['rejection_rate_sim'][0]:.6f} ({r['z']['rejection_rate']:+5.2f})  {r['token_loss']:.6f}  "
            f"{r['token_loss_sim'][0]:.6f} ({r['z']['token_loss']:+5.2f})  {r['token_loss_plugin']:.6f}  "
            f"{r['kl']:9.4f}  {r['kl_reverse']:9.4f}  {r['sequence_tv_sim'][0]:.5f}"
        )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """The paper's Fig. 4 claims (Thms 4, 5) beside our numbers (rows of :func:`speculab.repro._io.claim`)."""
    st = result["single_token"]
    pairs = {}  # ε -> {"opt": row, "uno": row}
    for r in result["table"]:
        pairs.setdefault(r["eps"], {})[r["rejection"]] = r
    first = min(pairs)

    def both(eps, name, digits=4):
        return " / ".join(f"{pairs[eps][k][name]:.{digits}f}" for k in ("opt", "uno"))

    def simulated(eps, name, digits=4):
        cells = []
        for r in (pairs[eps]["opt"], pairs[eps]["uno"]):
            z = signed(r["z"][name])
            cells.append(f"{pm(*r[f'{name}_sim'], digits)} (z = {z})")
        return " / ".join(cells)

    opt_gap = max(abs(p["opt"]["pareto_gap"]) for p in pairs.values())
    uno_gaps = ", ".join(f"{p['uno']['pareto_gap']:.2g} (ε = {eps})" for eps, p in pairs.items())
    kl_lower = sum(p["opt"]["kl"] <= p["uno"]["kl"] for p in pairs.values())
    return [
        claim(
            f"one token: min of Loss + P(reject) − TV(p, q) over {st['n_random']:,} random rules (b, P) (Thm 5)",
            paper="≥ 0: the region below the line is unreachable",
            theory=f"{st['min_gap_random']:+.1e}",
        ),
        claim(
            "Markov instance: Pareto gap Loss + rejection rate − E_ν[TV(p_n, q_n)] (Thm 5 per context)",
            paper="0 for Decoding-OPT (on the front); UNO is not optimal",
            theory=f"OPT: max |gap| {opt_gap:.1e}; UNO: {uno_gaps}",
        ),
        claim(
            f"rejection rate E[N_rej]/T at ε = {first}, OPT / UNO",
            theory=both(first, "rejection_rate"),
            simulation=simulated(first, "rejection_rate"),
        ),
        *[
            claim(
                f"per-token loss (1/T) Σ_n E_ν[TV(P_A,n, q_n)] at ε = {eps}, OPT / UNO (Thm 4)",
                paper="OPT's is Loss*_TV(b), the least possible (no value printed)",
                theory=both(eps, "token_loss"),
                simulation=simulated(eps, "token_loss"),
            )
            for eps in pairs
        ],
        claim(
            f"sequence-level KL(P_A ‖ q) at ε = {first}, OPT / UNO",
            paper="not in the paper",
            theory=f"{both(first, 'kl', 2)}; OPT ≤ UNO at {kl_lower} of {len(pairs)} ε",
            simulation=simulated(first, "kl", 2),
        ),
    ]
