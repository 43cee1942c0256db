"""Draft design by differentiable theory: fit a low-capacity draft to a target by three objectives, compare on all
three.

A stationary Markov target (``V = 16`` tokens, Dirichlet(0.3) rows: full rank) and a
draft with less capacity — its logits have rank ``r = 2`` plus a bias,
``logits = U Wᵀ + 1 bᵀ`` — fitted with Adam on the exact, differentiable expectations
of :mod:`speculab.theory.autodiff`:

1. **distillation**: KL(q‖p) along the target's own text, ``Σ_n E_q[KL(q_n ‖ p_n)]``;
2. **rejections**: [Yin] Thm 1, ``Σ_n E_q[TV(p_n, q_n)]`` (SD with ``K = ∞``);
3. **latency**: [SDpp] eq. (5.1) per token of SD with ``K = 4`` and ``t_draft / t_target = 0.1``,
   from the exact lookahead counts.

Each fitted draft is then evaluated on every objective (the 3 × 3 table), and its
expected rejections are checked against a simulation of SD on the fitted pair.
The question is the one [SDpp] and DistillSpec raise: does the usual distillation
objective give the draft that decodes fastest?
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab import kernels
from speculab._validate import spawn_seeds
from speculab.methods import SD
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.sim import simulate

#: What this reproduction imports beyond speculab's requirements (``speculab repro all`` skips it without them).
NEEDS = ("jax",)

T, V, RANK, K, COST, CONCENTRATION = 64, 16, 2, 4, 0.1, 0.3
OBJECTIVES = ("distillation KL(q‖p)", "rejections (Thm 1)", f"latency per token (K={K}, c={COST})")
#: What the papers say of each objective (the claims table); which one gives the fastest draft they leave open.
PAPER = dict(
    zip(
        OBJECTIVES,
        (
            "align the draft by distillation ([SDpp] App. B: DistillSpec)",
            "E[N_rej] = Σ_n E_q[TV(p_n, q_n)] ([Yin] Thm 1)",
            "latency per token: [SDpp] eq. (5.1)",
        ),
    )
)


def _setup(key):
    import jax
    import jax.numpy as jnp

    from speculab._validate import as_generator

    rng = as_generator(spawn_seeds(key, 2)[0])  # the instance and the initial draft; the simulations use the other
    Q = jnp.asarray(rng.dirichlet(np.full(V, CONCENTRATION), size=V))[None]  # (1, V, V): stationary target
    rho = jnp.full(V, 1.0 / V)
    init = {
        "U": jnp.asarray(0.1 * rng.standard_normal((V, RANK))),
        "W": jnp.asarray(0.1 * rng.standard_normal((V, RANK))),
        "b": jnp.zeros(V),
    }
    return jax, jnp, Q, rho, init


def _objectives(Q, rho):
    from speculab.theory import autodiff as ad

    def draft(params):
        return ad.draft_from_logits(params["U"] @ params["W"].T + params["b"])[None]

    def kl(params):
        return ad.along_target(lambda p, q: kernels.kl(q, p), draft(params), Q, rho, T).sum() / T

    def rejections(params):
        return ad.sd_expected_rejections(draft(params), Q, rho, T).rejections / T

    def latency(params):
        return ad.latency(draft(params), Q, rho, K, COST, 1.0, T=T)

    return draft, (kl, rejections, latency)


def _adam(jax, jnp, loss, init, steps: int, lr: float):
    """Adam on ``loss`` from ``init``, compiled as one scan; returns the final parameters and the loss trace."""
    grad = jax.value_and_grad(loss)

    def step(state, i):
        params, m, v = state
        value, g = grad(params)
        m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
        v = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
        t = i + 1.0
        params = jax.tree_util.tree_map(
            lambda p, a, b: p - lr * (a / (1 - 0.9**t)) / (jnp.sqrt(b / (1 - 0.999**t)) + 1e-8), params, m, v
        )
        return (params, m, v), value

    zeros = jax.tree_util.tree_map(jnp.zeros_like, init)
    (params, _, _), trace = jax.jit(lambda s: jax.lax.scan(step, s, jnp.arange(steps, dtype=jnp.float64)))(
        (init, zeros, zeros)
    )
    return params, np.asarray(trace)


def run(key=0, out_dir: str | Path = "results", steps: int = 600, n_runs: int = 20_000, progress: bool = False) -> dict:
    """Fit the draft by each objective, evaluate every fit on every objective; writes ``draft_design.{png,json}``."""
    import jax

    with jax.enable_x64(True):  # the exact theory in float64, as the numpy theory
        return _run(key, out_dir, steps, n_runs, progress)


def _run(key, out_dir, steps: int, n_runs: int, progress: bool) -> dict:
    from speculab.theory import MarkovInstance

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jax, jnp, Q, rho, init = _setup(key)
    draft, objectives = _objectives(Q, rho)
    fits, traces = {}, {}
    for name, loss in zip(OBJECTIVES, objectives):
        params, trace = _adam(jax, jnp, loss, init, steps, lr=0.05)
        fits[name], traces[name] = params, trace
    table, checks = {}, {}
    uniform = {"U": jnp.zeros((V, RANK)), "W": jnp.zeros((V, RANK)), "b": jnp.zeros(V)}
    for name, params in [("initial draft", init), ("uniform draft", uniform), *fits.items()]:
        table[name] = {obj: float(f(params)) for obj, f in zip(OBJECTIVES, objectives)}
    sim_keys = spawn_seeds(spawn_seeds(key, 2)[1], len(fits))
    for (name, params), sim_key in zip(fits.items(), sim_keys):  # each fit's theory held against a simulation
        inst = MarkovInstance.stationary(np.asarray(draft(params)[0]), np.asarray(Q[0]), T=T, rho=np.asarray(rho))
        est = simulate(inst, SD(), n_runs, key=sim_key, progress=progress).estimate("rejections")
        exact = SD().expected(inst).rejections
        checks[name] = {"exact": exact, "simulated": est.mean, "se": est.se, "z": est.z(exact)}
    target_tv = float(kernels.tv(np.full((V, V), 1.0 / V), np.asarray(Q[0])).mean())

    fig, (ax, ax2) = new_figure(ncols=2, width=5.5)
    for name, trace in traces.items():
        ax.plot(trace / trace[0], label=name)
    ax.set_xlabel("Adam step")
    ax.set_ylabel("objective / its initial value")
    ax.set_title(f"fitting a rank-{RANK} draft (V={V}, T={T}, key {describe_key(key)})")
    ax.legend(fontsize=7)
    names = list(fits)
    best = {obj: min(table[n][obj] for n in names) for obj in OBJECTIVES}
    width = 0.25
    for j, obj in enumerate(OBJECTIVES):
        ax2.bar(np.arange(len(names)) + (j - 1) * width, [table[n][obj] / best[obj] for n in names], width, label=obj)
    ax2.axhline(1.0, color="k", lw=0.6)
    ax2.set_xticks(np.arange(len(names)), [f"fit: {n.split(' (')[0]}" for n in names], fontsize=7)
    ax2.set_ylabel("value / best over the three fits")
    ax2.set_title("each fit evaluated on every objective")
    ax2.set_ylim(0, 1.45 * max(table[n][o] / best[o] for n in names for o in OBJECTIVES))
    ax2.legend(fontsize=7, loc="upper left")
    save_figure(fig, out / "draft_design.png", dpi=130)
    result = {
        "figure": "Draft design: distillation vs rejections vs latency objectives",
        "key": describe_key(key),
        "instance": {"T": T, "V": V, "target_rows": f"Dirichlet({CONCENTRATION})", "draft_rank": RANK},
        "K": K,
        "cost_ratio": COST,
        "steps": steps,
        "objectives": list(OBJECTIVES),
        "table": table,
        "relative_to_best": {n: {o: table[n][o] / best[o] for o in OBJECTIVES} for n in names},
        "simulation_check": checks,
        "n_runs": n_runs,
        "uniform_draft_mean_tv": target_tv,
    }
    write_json(result, out / "draft_design.json")
    return result


def summary(result: dict) -> str:
    objs = result["objectives"]
    lines = [
        f"Draft design — rank-{result['instance']['draft_rank']} draft vs a V={result['instance']['V']} "
        f"stationary target, T={result['instance']['T']}; per token: " + " | ".join(objs),
        f"  {'draft':34s}" + "".join(f"{o.split(' (')[0]:>22s}" for o in objs),
    ]
    for name, row in result["table"].items():
        lines.append(f"  {name:34s}" + "".join(f"{row[o]:22.4f}" for o in objs))
    for name, c in result["simulation_check"].items():
        lines.append(
            f"  fit {name.split(' (')[0]}: E[N_rej] exact {c['exact']:.3f}, simulated {c['simulated']:.3f} "
            f"± {c['se']:.3f} (z {c['z']:+.2f})"
        )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """The claims table of ``speculab report``: each fit's value on every objective (exact) and its rejections per
    token simulated, then what distillation leaves on the table."""
    objs, T = result["objectives"], result["instance"]["T"]
    rows = []
    for name, check in result["simulation_check"].items():
        rows.append(
            claim(
                f"draft fitted by {name}: KL / rejections / latency per token",
                paper=PAPER.get(name),
                theory=" / ".join(f"{result['table'][name][o]:.3f}" for o in objs),
                simulation=f"rejections {pm(check['simulated'] / T, check['se'] / T, 4)} "
                f"(z = {signed(check['z'])}, {result['n_runs']:,} runs)",
            )
        )
    kl = result["relative_to_best"][objs[0]]
    rows.append(
        claim(
            "distilled draft: rejections / latency above the best fit's",
            paper="open: which objective gives the fastest draft",
            theory=" / ".join(f"{kl[o] - 1:+.0%}" for o in objs[1:]),
        )
    )
    return rows
