"""[FSD] §4.2 / App. B: is ``Div(P_q(x_{1:N}), P_FSD(x_{1:N})) <= N · %draft · θ``? Checked exactly.

For each threshold divergence (``kl`` = KL(q‖p), ``kl_reverse`` = KL(p‖q), ``js``, ``tv``)
we sweep ``θ`` over every distinct acceptance set of a seeded Markov instance — ``0``,
just above each per-context divergence (where the bound is tightest), and above the
maximum — and compare the exact sequence-level divergence of the same kind with the
bound, using ``%draft`` as the paper defines it (fraction of FSD's output tokens that
come from the draft) and, for contrast, ``%draft`` measured along the target's chain
(the weights the KL chain rule actually uses for ``KL(P_q || ·)``). Both sequence KL
directions are reported for every threshold. KL uses the chain rule on FSD's output
chain (lookahead ``K = ∞``); JS and TV enumerate all ``V^(N+1)`` sequences, hence the
small instance (``N = 8``, ``V = 4``). A two-state instance built to break the
paper's statement is checked as well, and the KL directions on a [Yin]-style
``T = 50``, ``V = 7`` instance. Exact; no sampling.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab._validate import as_generator
from speculab.repro._io import claim, describe_key, save_figure, write_json
from speculab.repro._plots import yin_instance
from speculab.theory import MarkovInstance
from speculab.theory.fuzzy import fuzzy_bound_check, fuzzy_divergence, fuzzy_profile, holds_within

DIVS = ("kl", "kl_reverse", "js", "tv")
T_SMALL, V_SMALL, CONCENTRATION = 8, 4, 1.0
T_LARGE = 50
LABEL = {"kl": "KL(q‖p)", "kl_reverse": "KL(p‖q)", "js": "JS", "tv": "TV"}


def theta_grid(inst: MarkovInstance, div: str) -> np.ndarray:
    """``0``, the next float above every finite per-context divergence, and 1.25 × the maximum."""
    d = fuzzy_divergence(inst, div)
    finite = np.unique(d[np.isfinite(d)])
    return np.concatenate([[0.0], np.nextafter(finite, np.inf), [1.25 * finite.max()]])


def sweep(inst: MarkovInstance, div: str, *, sequence_div: bool = True) -> dict:
    """One row per ``θ``: the bound, the same-kind sequence divergence (if enumerable) and both KLs."""
    rows = {
        k: []
        for k in (
            "theta",
            "draft_fraction",
            "draft_fraction_target",
            "bound",
            "bound_target",
            "divergence",
            "holds",
            "holds_target",
            "kl_forward",
            "kl_reverse",
        )
    }
    for theta in theta_grid(inst, div):
        theta = float(theta)
        prof = fuzzy_profile(inst, theta, div)
        if div in ("kl", "kl_reverse"):  # chain rule, already in the profile
            d = prof.kl_forward if div == "kl" else prof.kl_reverse
            holds, holds_t = holds_within(d, prof.bound), holds_within(d, prof.bound_target)
        elif sequence_div:  # enumeration
            chk = fuzzy_bound_check(inst, theta, div)
            d, holds, holds_t = chk.divergence, chk.holds, chk.holds_target
        else:
            d, holds, holds_t = None, None, None
        for k, v in (
            ("theta", theta),
            ("draft_fraction", prof.draft_fraction),
            ("draft_fraction_target", prof.draft_fraction_target),
            ("bound", prof.bound),
            ("bound_target", prof.bound_target),
            ("divergence", d),
            ("holds", holds),
            ("holds_target", holds_t),
            ("kl_forward", prof.kl_forward),
            ("kl_reverse", prof.kl_reverse),
        ):
            rows[k].append(v)
    return rows


def _tally(rows: dict) -> dict:
    bound = np.array(rows["bound"])
    out = {"n_theta": len(rows["theta"])}
    if rows["divergence"][0] is not None:
        d = np.array(rows["divergence"], dtype=np.float64)
        ratio = np.divide(d, bound, out=np.zeros_like(d), where=bound > 0)
        k = int(np.argmax(ratio))
        out.update(
            {
                "fails": int(sum(not h for h in rows["holds"])),
                "fails_with_target_draft_fraction": int(sum(not h for h in rows["holds_target"])),
                "max_ratio": float(ratio[k]),
                "theta_at_max_ratio": rows["theta"][k],
                "failing_theta": [t for t, h in zip(rows["theta"], rows["holds"]) if not h],
            }
        )
    for name in ("kl_forward", "kl_reverse"):
        x = np.array(rows[name])
        out[f"{name}_exceeds_bound"] = int(np.sum(x > bound + 1e-12 * np.maximum(1, bound)))
    return out


def adversarial_instance(T: int) -> MarkovInstance:
    """Two states. From state 0 the target stays (``q = δ_0``), the draft leaves w.p. 0.8, so
    ``KL(q‖p) = ln 5`` there and FSD accepts for ``θ > ln 5``; state 1 is never accepted and
    the target returns to 0. Under ``q`` every position is accepted (``%draft_q = 1``), under
    FSD only about 1/1.8 of them."""
    P = np.array([[0.2, 0.8], [0.0, 1.0]])
    Q = np.array([[1.0, 0.0], [1.0, 0.0]])
    return MarkovInstance.stationary(P, Q, T, rho=np.array([1.0, 0.0]))


def run(key=0, out_dir: str | Path = "results") -> dict:
    """Sweeps on the seeded instance (``MarkovInstance.random(8, 4, seed, concentration=1)``),
    the two-state counterexample and a [Yin]-style ``T = 50`` instance; writes ``fsd_bound.{png,json}``."""
    from matplotlib.figure import Figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = as_generator(key)
    inst = MarkovInstance.random(T_SMALL, V_SMALL, rng, concentration=CONCENTRATION)
    large = yin_instance(T_LARGE, rng)
    adv, adv_short = adversarial_instance(T_SMALL), adversarial_instance(2)

    result = {
        "figure": "[FSD] §4.2 bound, exact check",
        "key": describe_key(key),
        "instance": {
            "T": T_SMALL,
            "V": V_SMALL,
            "rows": "dirichlet",
            "concentration": CONCENTRATION,
            "file": "fsd_bound_instance.npz",
        },
        "seeded": {},
        "seeded_summary": {},
        "adversarial": {"T": T_SMALL, "kl": sweep(adv, "kl"), "js_T2": sweep(adv_short, "js")},
        "large": {"T": T_LARGE, "V": large.V, "rows": "uniform"},
    }
    for div in DIVS:
        rows = sweep(inst, div)
        result["seeded"][div] = rows
        result["seeded_summary"][div] = _tally(rows)
    result["adversarial_summary"] = {
        "kl": _tally(result["adversarial"]["kl"]),
        "js_T2": _tally(result["adversarial"]["js_T2"]),
    }
    result["adversarial_summary"]["kl_reverse_at_kl_threshold_1.7"] = fuzzy_profile(adv, 1.7, "kl").kl_reverse
    for div in ("kl", "kl_reverse"):
        result["large"][div] = _tally(sweep(large, div))

    fig = Figure(figsize=(15, 8), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    for ax, div in zip(axes, DIVS):
        rows = result["seeded"][div]
        th = np.array(rows["theta"])
        ax.step(th, rows["divergence"], where="post", color="black", lw=1.5, label=f"sequence {LABEL[div]}(P_q, P_FSD)")
        ax.step(th, rows["bound"], where="post", color="tab:red", ls="--", label="N·%draft·θ (FSD's %draft)")
        ax.step(th, rows["bound_target"], where="post", color="tab:blue", ls=":", label="N·%draft_q·θ (target's chain)")
        bad = [i for i, h in enumerate(rows["holds"]) if not h]
        if bad:
            ax.plot(th[bad], np.array(rows["divergence"])[bad], "rx", ms=9, mew=2, label="bound fails")
        ax.set_xlabel(f"threshold θ on {LABEL[div]}")
        ax.set_ylabel("divergence")
        ax.set_title(f"{LABEL[div]} threshold (N={T_SMALL}, V={V_SMALL}, key {describe_key(key)})")
        ax.legend(fontsize=7)
    ax = axes[4]
    rows = result["adversarial"]["kl"]
    th = np.array(rows["theta"])
    ax.step(th, rows["divergence"], where="post", color="black", lw=1.5, label="KL(P_q‖P_FSD)")
    ax.step(th, rows["bound"], where="post", color="tab:red", ls="--", label="N·%draft·θ")
    ax.step(th, rows["bound_target"], where="post", color="tab:blue", ls=":", label="N·%draft_q·θ")
    ax.set_xlabel("threshold θ on KL(q‖p)")
    ax.set_title(f"two-state counterexample (N={T_SMALL})")
    ax.legend(fontsize=7)
    ax = axes[5]
    for div in DIVS:
        rows = result["seeded"][div]
        d, b = np.array(rows["divergence"]), np.array(rows["bound"])
        ok = b > 0
        ax.plot(np.array(rows["theta"])[ok], d[ok] / b[ok], ".-", ms=4, label=LABEL[div])
    ax.axhline(1, color="gray", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("θ")
    ax.set_ylabel("Div / (N·%draft·θ)")
    ax.set_title("ratio to the paper's bound (> 1: fails)")
    ax.legend(fontsize=7)
    save_figure(fig, out / "fsd_bound.png", dpi=120)
    inst.save(out / "fsd_bound_instance.npz")
    write_json(result, out / "fsd_bound.json")
    return result


def summary(result: dict) -> str:
    lines = [
        f"[FSD] sequence-level bound Div(P_q, P_FSD) <= N·%draft·θ — exact, N={result['instance']['T']}, "
        f"V={result['instance']['V']}, key {result['key']}"
    ]
    for div, s in result["seeded_summary"].items():
        lines.append(
            f"  {LABEL[div]:8s} threshold: fails at {s['fails']}/{s['n_theta']} θ with FSD's %draft "
            f"({s['fails_with_target_draft_fraction']} with the target's), max Div/bound {s['max_ratio']:.4f} at "
            f"θ={s['theta_at_max_ratio']:.4g}; "
            f"KL(P_q‖P_FSD) > bound at {s['kl_forward_exceeds_bound']}, KL(P_FSD‖P_q) > bound at "
            f"{s['kl_reverse_exceeds_bound']}"
        )
    a = result["adversarial_summary"]
    lines.append(
        f"  two-state counterexample: KL threshold fails at {a['kl']['fails']}/{a['kl']['n_theta']} θ "
        f"(max ratio {a['kl']['max_ratio']:.3f}), JS (N=2) at {a['js_T2']['fails']}/{a['js_T2']['n_theta']} "
        f"(max ratio {a['js_T2']['max_ratio']:.3f}); KL(P_FSD‖P_q) = {a['kl_reverse_at_kl_threshold_1.7']} at θ=1.7"
    )
    for div in ("kl", "kl_reverse"):
        s = result["large"][div]
        lines.append(
            f"  T={result['large']['T']} [Yin]-style instance, {LABEL[div]} threshold: fails at "
            f"{s['fails']}/{s['n_theta']} "
            f"(max ratio {s['max_ratio']:.4f})"
        )
    return "\n".join(lines)


def _verdict(s: dict) -> str:
    """Whether the bound held over a sweep's thresholds, and how far it failed where it did."""
    if s["fails"] == 0:
        return f"holds at all {s['n_theta']} θ (max Div/bound {s['max_ratio']:.3f})"
    held = s["fails_with_target_draft_fraction"]
    return (
        f"fails at {s['fails']} of {s['n_theta']} θ (max Div/bound {s['max_ratio']:.3f} at θ = "
        f"{s['theta_at_max_ratio']:.3g}); "
        + (
            "holds at all with %draft along the target's chain"
            if held == 0
            else f"{held} with %draft along the target's chain"
        )
    )


def claims(result: dict) -> list[dict]:
    """The bound per threshold divergence on the seeded instance, on the two-state counterexample and on the
    ``T = 50`` instance (all exact): the claims table of ``speculab report``."""
    paper = "Div(P_q, P_FSD) ≤ N·%draft·θ (§4.2, App. B)"
    size = f"N = {result['instance']['T']}, V = {result['instance']['V']}"
    rows = [
        claim(f"{LABEL[div]} threshold: sequence {LABEL[div]} vs the bound ({size})", paper=paper, theory=_verdict(s))
        for div, s in result["seeded_summary"].items()
    ]
    a = result["adversarial_summary"]
    rows.append(
        claim(
            f"two-state counterexample (N = {result['adversarial']['T']}; JS at N = 2)",
            paper=paper,
            theory=f"KL(q‖p) threshold fails at {a['kl']['fails']} of {a['kl']['n_theta']} θ (ratio up to "
            f"{a['kl']['max_ratio']:.2f}); JS at {a['js_T2']['fails']} of {a['js_T2']['n_theta']} "
            f"(up to {a['js_T2']['max_ratio']:.2f})",
        )
    )
    big = result["large"]
    rows.append(
        claim(
            f"KL thresholds, [Yin]-style instance (N = {big['T']}, V = {big['V']})",
            paper=paper,
            theory="; ".join(f"{LABEL[div]}: {_verdict(big[div])}" for div in ("kl", "kl_reverse")),
        )
    )
    return rows
