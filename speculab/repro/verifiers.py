r"""Is my verifier lossless? Certificates for every registered method and for the rules engines ship, Hugging Face
transformers' speculative sampling as installed, and lossy verifiers on one quality/speed plane.

Four parts, each computed here:

* **Certificates** (exact, :func:`speculab.certify.certify` on 3 tokens, two drafts a round): every registered
  method, typical acceptance with each correction, and the rules of :mod:`speculab.methods.engine_rules` (exact-match
  acceptance, an argmax comparison at temperature 1, EAGLE #183's draft probability 1, SD with a top-2 warp on one
  side only). A lossless verifier's worst TV is 0 to float precision; a biased one's first-token TV at its worst
  pair is checked against its closed form where one is known (Decoding-OPT: [Yin] Thm 4's ``Σ (b p − q)_+``;
  SPRINTER: ``η_FP · TV(p, q)``; typical acceptance: :func:`~speculab.methods.typical.typical_law`; the argmax
  comparison: ``1 − max q``; the raw target: ``TV(q, top2(q))``).
* **Transformers' acceptance step** (statistical, :func:`speculab.certify.check_sampler`): its
  ``_speculative_sampling`` as installed, on a pair of 6-token logits at temperature 1, temperature 0.7 with top-3,
  and top-p 0.8, warped by transformers' own warpers; its static-ensemble option (``assistant_ensemble_weight =
  0.5``) tested against the target (it must be refused) and against the law it outputs by design,
  ``v = w q + (1 − w) p``. Each test's least detectable TV at power 0.99 is stated.
* **Assisted generation end to end** on the tiny pair: greedy (temperature 0) against the target's own greedy
  decoding, token for token; sampled (temperature 1, and 0.7 with top-k 50 and top-p 0.9) law tests of the first
  tokens against the target's exact law (:func:`speculab.certify.check_decoder`), with the ensemble option as a
  control whose first-token law is known exactly.
* **Quality and speed** of lossy verifiers: typical acceptance across ``ε`` (``δ = 0.3``) beside Decoding-OPT and
  -UNO across ``ε`` and FSD across ``θ`` (JS), ``K = 4``, on a Markov instance (exact: tokens per target call from
  the exact counts; per-token rejection probability and ``TV(P_A, q)`` averaged over the target's marginals) and on
  the tiny pair (measured along the runs, each step's law exact from the logits). [Yin] Thm 5 bounds every rule:
  ``P(reject) + TV(P_A, q) >= TV(p, q)`` position by position, with equality for Decoding-OPT; the gap is how far
  a rule is from the Pareto front, checked at every position of the instance and every step of the runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speculab import kernels
from speculab._validate import as_generator, as_positive_int, spawn_seeds
from speculab.certify import certify, check_decoder, check_sampler
from speculab.counts import BONUS
from speculab.methods import (
    RRS,
    SD,
    Autoregressive,
    BatchSD,
    Biased,
    BlockVerification,
    Fuzzy,
    OptimalMultiDraft,
    RejectionDecoding,
    SpecDecPP,
    Sprinter,
    Traversal,
    Typical,
)
from speculab.methods.chain import one_step_law
from speculab.methods.engine_rules import EagleP1, exact_match, greedy_match, top_k_warp, warped_sd
from speculab.methods.typical import typical_law
from speculab.repro._io import claim, describe_key, new_figure, save_figure, write_json
from speculab.theory import MarkovInstance, sd_acceptance
from speculab.theory.biased import biased_acceptance

#: Tolerance of "lossless" and of a closed form's match (float round-off of sums over every drafted block).
EXACT = 1e-12
#: The Markov instance of the quality/speed plane, and the lookahead of every lossy method on it.
T, V, CONCENTRATION, K = 32, 8, 0.5, 4
#: Sweeps: typical acceptance's ε (δ = DELTA) and δ (ε = 1: the cap inactive), Decoding-OPT/UNO's ε, FSD's θ (JS).
TYPICAL_EPS, DELTA = (0.005, 0.01, 0.02, 0.03, 0.09), 0.3
TYPICAL_DELTA = (0.05, 0.1, 0.2, 0.3, 0.6)
BIASED_EPS = (0.02, 0.05, 0.1, 0.2, 0.4)
THETAS = (0.02, 0.05, 0.1, 0.2, 0.4)
#: transformers' acceptance step: the settings tested, and the ensemble weight of its biased option.
HF_SETTINGS = {
    "temperature 1": dict(temperature=1.0),
    "temperature 0.7, top-k 3": dict(temperature=0.7, top_k=3),
    "temperature 1, top-p 0.8": dict(temperature=1.0, top_p=0.8),
}
ENSEMBLE = 0.5


def _half_sd(p, q):
    return 0.5 * sd_acceptance(p, q)


def _tv(a, b) -> float:
    return float(np.max(kernels.tv(np.asarray(a, dtype=float), np.asarray(b, dtype=float))))


def _verifiers() -> list[tuple[str, object, dict, object]]:
    """``(label, verifier, certify's options, closed form of the first-token TV at a pair or None)``."""
    warp = top_k_warp(2)
    opt = lambda p, q: float(np.maximum(biased_acceptance(p, q, 0.1) * p - q, 0).sum())  # noqa: E731  [Yin] Thm 4
    return [
        ("ar", Autoregressive(), {}, None),
        ("sd K=2", SD(K=2), {}, None),
        ("batch M=2 K=1", BatchSD(2, K=1), {}, None),
        ("rejection b = ½ min(1, q/p) K=2", RejectionDecoding(b=_half_sd, K=2), {}, None),
        ("block K=2", BlockVerification(2), {}, None),
        ("specdecpp h=0.5", SpecDecPP(0.5), {}, None),
        ("optimal-batch M=2 K=1", OptimalMultiDraft(2, K=1), {}, None),
        ("rrs tree 2,1 (i.i.d.)", RRS((2, 1)), {"remaining": 3}, None),
        ("rrs tree 2,1 (distinct)", RRS((2, 1), draws="distinct"), {"remaining": 3}, None),
        ("traversal tree 2,1 (i.i.d.)", Traversal((2, 1)), {"remaining": 3}, None),
        ("sprinter η_TP=0.9 η_FP=0", Sprinter(0.9, 0.0), {}, None),
        ("sprinter η_TP=0.9 η_FP=0.2", Sprinter(0.9, 0.2), {}, lambda p, q: 0.2 * _tv(p, q)),
        ("biased opt ε=0.1 K=1", Biased(0.1, "opt", K=1), {}, opt),
        ("biased uno ε=0.1 K=1", Biased(0.1, "uno", K=1), {}, None),
        ("fuzzy θ=0.3 (JS) K=2", Fuzzy(0.3, K=2), {}, None),
        *[
            (
                f"typical ε=0.09 δ=0.3 correction {c} K=2",
                Typical(0.09, 0.3, c, K=2),
                {},
                lambda p, q, c=c: _tv(typical_law(p, q, 0.09, 0.3, c), q),
            )
            for c in ("q", "argmax", "typical")
        ],
        ("engine: exact-match acceptance (mlx-lm #1709)", exact_match, {}, None),
        ("engine: argmax comparison at temperature 1 (mlxcel #902)", greedy_match, {}, lambda p, q: 1 - float(q.max())),
        ("engine: draft probability 1 in a tree (EAGLE #183)", EagleP1((2, 1)), {"remaining": 3}, None),
        ("engine: SD, top-2 on both sides", warped_sd(warp), {"warp": warp}, None),
        (
            "engine: SD, top-2 on the draft only (vLLM #9834)",
            warped_sd(warp, target=False),
            {"warp": warp},
            lambda p, q: _tv(q, warp(q)),
        ),
        ("engine: SD, top-2 on the target only", warped_sd(warp, draft=False), {"warp": warp}, None),
    ]


def _certificates(key, progress: bool) -> list[dict]:
    rows = []
    for label, verifier, options, closed in _verifiers():
        cert = certify(verifier, key=key, **options)
        row = {
            "verifier": label,
            "lossless": cert.lossless,
            "tv": cert.tv,
            "first_token_tv": cert.first_token_tv,
            "kl": cert.kl,
            "case": cert.case,
            "pairs": cert.pairs,
            "p": cert.p.tolist(),
            "q": cert.q.tolist(),
        }
        if closed is not None:  # of one pair of laws; with transition matrices, the worst start token
            rows_p, rows_q = np.atleast_2d(cert.p), np.atleast_2d(cert.q)
            row["closed_form"] = max(float(closed(a, b)) for a, b in zip(rows_p, rows_q))
        rows.append(row)
        if progress:
            print(f"  {label}: {'lossless' if cert.lossless else 'BIASED'}, worst TV {cert.tv:.3g}", flush=True)
    return rows


def _sampler_row(check) -> dict:
    return {
        "refused": check.refused,
        "p_value": check.p_value,
        "statistic": check.statistic,
        "df": check.df,
        "n": check.n,
        "tv_observed": check.tv_observed,
        "detectable_tv": check.detectable_tv,
        "alpha": check.alpha,
    }


def _transformers(key, n_runs: int) -> dict:
    """transformers' acceptance step on a 6-token pair (module docstring)."""
    from speculab.backends.hf_reference import ensemble_law, hf_laws, hf_sampler, transformers_version

    seeds = spawn_seeds(key, len(HF_SETTINGS) + 3)
    rng = as_generator(seeds[-3])
    draft_logits, target_logits = rng.normal(0, 1.5, 6), rng.normal(0, 1.5, 6)
    out = {
        "version": transformers_version(),
        "draft_logits": draft_logits.tolist(),
        "target_logits": target_logits.tolist(),
    }
    rows = {}
    for (label, warp), seed in zip(HF_SETTINGS.items(), seeds):
        p, q = hf_laws(draft_logits, target_logits, **warp)
        rows[label] = {
            "p": p.tolist(),
            "q": q.tolist(),
            **_sampler_row(check_sampler(hf_sampler(2), p, q, n=n_runs, key=seed)),
        }
    p, q = hf_laws(draft_logits, target_logits)
    v = ensemble_law(p, q, ENSEMBLE)
    biased = hf_sampler(2, ENSEMBLE)
    rows[f"ensemble w={ENSEMBLE} vs the target"] = _sampler_row(check_sampler(biased, p, q, n=n_runs, key=seeds[-2]))
    rows[f"ensemble w={ENSEMBLE} vs v = w q + (1 − w) p"] = _sampler_row(
        check_sampler(biased, p, q, n=n_runs, key=seeds[-1], law=v)
    )
    out["tests"] = rows
    out["ensemble_tv"] = _tv(v, q)
    out["ensemble_tv_closed_form"] = (1 - ENSEMBLE) * _tv(p, q)
    return out


def _law_entry(row) -> dict:
    return {
        "runs": row.runs,
        "refused": row.refused,
        "first": list(row.first),
        "joint": list(row.joint),
        "detectable": list(row.detectable),
        "power": row.power,
    }


def _assisted(pair, key, runs: int, prompts: list[str]) -> dict:
    """Assisted generation on the pair: greedy against the target's greedy decoding, and the law tests."""
    from speculab.backends import Sampling, decode
    from speculab.backends.hf_reference import assisted_runs, ensemble_law
    from speculab.backends.exact_law import next_law

    seeds = spawn_seeds(key, 6)
    tokens = 16
    greedy = Sampling(temperature=0.0)
    ours = decode(pair, prompts, Autoregressive(), max_new_tokens=tokens, sampling=greedy, key=seeds[0]).tokens
    same = 0
    for prompt, mine in zip(prompts, ours):
        theirs = assisted_runs(pair, pair.tokenizer.encode(prompt), 1, sampling=greedy, key=0, max_new_tokens=tokens)
        same += theirs[0] == list(mine)
    out = {"greedy": {"prompts": len(prompts), "tokens": tokens, "identical": same}}
    prompt = prompts[0]
    ids = pair.tokenizer.encode(prompt)
    laws = {}
    settings = {"temperature 1": Sampling(), "temperature 0.7, top-k 50, top-p 0.9": Sampling(0.7, 50, 0.9)}
    for (label, sampling), seed in zip(settings.items(), seeds[1:]):
        q1 = next_law(pair.target.model, ids, sampling, pair.device, pair.vocab_size)
        p1 = next_law(pair.draft.model, ids, sampling, pair.device, pair.vocab_size)
        control = ensemble_law(p1, q1, ENSEMBLE)

        def run(ids, n, key, sampling=sampling, w=None):
            return assisted_runs(pair, ids, n, sampling=sampling, key=key, ensemble_weight=w)

        row = check_decoder(run, pair, prompt, runs=runs, key=seed, sampling=sampling, control=control)
        laws[label] = _law_entry(row)
        if label == "temperature 1":
            biased = check_decoder(
                lambda ids, n, key: run(ids, n, key, w=ENSEMBLE),
                pair,
                prompt,
                runs=runs,
                key=seeds[-1],
                sampling=sampling,
                control=control,
            )
            laws[f"control: ensemble w={ENSEMBLE}, temperature 1"] = _law_entry(biased)
    out["laws"] = laws
    out["prompt"] = prompt
    return out


def _plane_point(inst, method) -> dict:
    """Exact per-token rejection probability, TV(P_A, q) and TV(p, q) averaged over the target's marginals, the
    largest violation of Thm 5 over positions and contexts, and tokens per target call."""
    rule = method.instance_rule(inst)
    P, Q = np.asarray(inst.P), np.asarray(inst.Q)
    reject = np.sum((1.0 - rule.acceptance) * P, axis=-1)  # (T, V)
    loss, tv = kernels.tv(one_step_law(rule, P), Q), kernels.tv(P, Q)
    mu = inst.marginals()[:-1]  # the context of position t is x_t's law
    mean = lambda a: float(np.sum(mu * a) / inst.T)  # noqa: E731
    return {
        "reject": mean(reject),
        "loss_tv": mean(loss),
        "tv": mean(tv),
        "thm5_gap_min": float(np.min(reject + loss - tv)),
        "front_gap": mean(reject + loss - tv),
        "tokens_per_call": inst.T / method.expected(inst).oracle_calls,
    }


def _lossy(K: int) -> dict[str, list[tuple[str, object]]]:
    return {
        f"typical δ={DELTA}": [(f"ε={e}", Typical(e, DELTA, K=K)) for e in TYPICAL_EPS],
        "typical ε=1": [(f"δ={d}", Typical(1.0, d, K=K)) for d in TYPICAL_DELTA],
        "OPT": [(f"ε={e}", Biased(e, "opt", K=K)) for e in BIASED_EPS],
        "UNO": [(f"ε={e}", Biased(e, "uno", K=K)) for e in BIASED_EPS],
        "FSD (JS)": [(f"θ={t}", Fuzzy(t, K=K)) for t in THETAS],
    }


def _measured_point(pair, prompts, method, key, max_new_tokens: int) -> dict:
    from speculab.backends import decode

    res = decode(pair, prompts, method, max_new_tokens=max_new_tokens, key=key)
    verified = np.concatenate([r.kind != BONUS for r in res.records])
    cat = lambda f: np.concatenate([getattr(r, f) for r in res.records])[verified]  # noqa: E731
    reject, loss, tv = cat("reject_prob"), cat("loss_tv"), cat("tv")
    return {
        "tokens_per_call": float(res.counts.tokens.sum() / res.counts.oracle_calls.sum()),
        "reject": float(reject.mean()),
        "loss_tv": float(loss.mean()),
        "tv": float(tv.mean()),
        "thm5_gap_min": float(np.min(reject + loss - tv)),
        "front_gap": float(np.mean(reject + loss - tv)),
        "steps": int(verified.sum()),
    }


def run(
    key=0,
    n_runs: int = 30_000,
    out_dir: str | Path = "results",
    progress: bool = False,
    runs: int = 1_500,
    draft: str | None = None,
    target: str | None = None,
    max_new_tokens: int = 32,
    prompts: list[str] | None = None,
) -> dict:
    """Every part of the module docstring: ``n_runs`` calls of transformers' acceptance step per test, ``runs``
    assisted generations per law test, the lossy methods decoding each prompt once; writes
    ``verifiers.{png,json}`` and the instance."""
    from speculab.backends import load_pair
    from speculab.backends.pair import default_prompts

    n_runs = as_positive_int(n_runs, "n_runs")
    runs = as_positive_int(runs, "runs")
    max_new_tokens = as_positive_int(max_new_tokens, "max_new_tokens")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = spawn_seeds(key, 5)
    certificates = _certificates(seeds[0], progress)
    hf = _transformers(seeds[1], n_runs)
    pair = load_pair("tiny") if draft is None else load_pair(draft, target)
    prompts = list(prompts or default_prompts())
    assisted = _assisted(pair, seeds[2], runs, prompts[:8])
    inst = MarkovInstance.random(T, V, as_generator(seeds[3]), concentration=CONCENTRATION)
    plane = {"SD": {"K=4": _plane_point(inst, SD(K=K))}}
    measured = {"SD": {"K=4": _measured_point(pair, prompts, SD(K=K), seeds[4], max_new_tokens)}}
    for family, points in _lossy(K).items():
        plane[family] = {label: _plane_point(inst, m) for label, m in points}
        mid = points[len(points) // 2]
        measured[family] = {mid[0]: _measured_point(pair, prompts, mid[1], seeds[4], max_new_tokens)}
    opt = sorted((v["tokens_per_call"], v["loss_tv"]) for v in plane["OPT"].values())
    for family in plane:
        if family.startswith("typical"):
            for v in plane[family].values():  # OPT's bias at the same speed, where OPT's sweep reaches it
                inside = opt[0][0] <= v["tokens_per_call"] <= opt[-1][0]
                v["opt_at_same_speed"] = float(np.interp(v["tokens_per_call"], *zip(*opt))) if inside else None
    inst.save(out / "verifiers_instance.npz")
    result = {
        "figure": "Is my verifier lossless? Certificates, transformers' speculative sampling, lossy verifiers",
        "key": describe_key(key),
        "certificates": certificates,
        "transformers": hf,
        "pair": pair.name,
        "assisted": assisted,
        "instance": {"T": T, "V": V, "concentration": CONCENTRATION, "K": K, "file": "verifiers_instance.npz"},
        "plane": plane,
        "measured": measured,
        "real_runs": len(prompts),
        "max_new_tokens": max_new_tokens,
    }
    _figure(result, out)
    write_json(result, out / "verifiers.json")
    return result


def _figure(result: dict, out: Path) -> None:
    fig, axes = new_figure(ncols=2, width=5.0, height=3.8)
    for family, points in result["plane"].items():
        xs = [v["reject"] for v in points.values()]
        ys = [v["loss_tv"] for v in points.values()]
        axes[0].plot(xs, ys, "o-" if len(xs) > 1 else "k*", label=family, ms=4)
        axes[1].plot([v["tokens_per_call"] for v in points.values()], ys, "o-" if len(xs) > 1 else "k*", ms=4)
    tv = result["plane"]["SD"]["K=4"]["tv"]
    axes[0].plot([0, tv], [tv, 0], "k:", lw=0.8, label="Thm 5 front")
    axes[0].set_xlabel("per-token P(reject)")
    axes[0].set_ylabel("per-token TV(P_A, q)")
    axes[1].set_xlabel(f"tokens per target call (K = {result['instance']['K']})")
    axes[0].legend(fontsize=7)
    axes[0].set_title(f"Markov T={result['instance']['T']}, V={result['instance']['V']} (exact)", fontsize=9)
    axes[1].set_title("bias against speed (exact)", fontsize=9)
    save_figure(fig, out / "verifiers.png", dpi=130)


def summary(result: dict) -> str:
    lines = ["Certificates (3 tokens, exact): worst TV over the first tokens; first token at the worst pair"]
    for row in result["certificates"]:
        verdict = "lossless" if row["lossless"] else "BIASED  "
        closed = f" (closed form {row['closed_form']:.6g})" if "closed_form" in row else ""
        lines.append(f"  {verdict} {row['tv']:9.3g} {row['first_token_tv']:9.3g}{closed}  {row['verifier']}")
    hf = result["transformers"]
    lines.append(f"transformers {hf['version']} _speculative_sampling (K = 2), statistical:")
    for label, t in hf["tests"].items():
        verdict = "REFUSED   " if t["refused"] else "consistent"
        lines.append(f"  {verdict} p = {t['p_value']:.3g}, detectable TV {t['detectable_tv']:.3g}  {label}")
    a = result["assisted"]
    lines.append(
        f"assisted generation on the {result['pair']} pair: greedy identical to the target's on "
        f"{a['greedy']['identical']} of {a['greedy']['prompts']} prompts ({a['greedy']['tokens']} tokens)"
    )
    for label, t in a["laws"].items():
        verdict = "REFUSED   " if t["refused"] else "consistent"
        lines.append(
            f"  {verdict} first token p = {t['first'][2]:.3g}, first tokens p = {t['joint'][2]:.3g}, detectable TV "
            f"{t['detectable'][0]:.3g} / {t['detectable'][1]:.3g}  {label} ({t['runs']} runs)"
        )
    lines.append(
        "Lossy verifiers (Markov, exact): P(reject), TV(P_A, q), tokens per call, gap to Thm 5's front (mean, min);"
        " OPT's TV at the same speed"
    )
    for family, points in result["plane"].items():
        for label, v in points.items():
            same = v.get("opt_at_same_speed")
            lines.append(
                f"  {family:13s} {label:7s} {v['reject']:.4f} {v['loss_tv']:.4f} {v['tokens_per_call']:.3f} "
                f"{v['front_gap']:.4f} {v['thm5_gap_min']:+.1e}" + (f"  OPT {same:.4f}" if same is not None else "")
            )
    lines.append(f"  the {result['pair']} pair, measured ({result['real_runs']} prompts):")
    for family, points in result["measured"].items():
        for label, v in points.items():
            lines.append(
                f"  {family:13s} {label:7s} {v['reject']:.4f} {v['loss_tv']:.4f} {v['tokens_per_call']:.3f} "
                f"{v['front_gap']:.4f} {v['thm5_gap_min']:+.1e}"
            )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """The claims table of ``speculab report``: each certificate, transformers' tests, the lossy plane."""
    rows = []
    for row in result["certificates"]:
        verdict = "lossless" if row["lossless"] else "biased"
        theory = f"{verdict}: worst TV {row['tv']:.3g}, first token {row['first_token_tv']:.3g}"
        if "closed_form" in row:
            theory += f" (closed form {row['closed_form']:.6g})"
        rows.append(claim(f"certificate: {row['verifier']}", theory=theory))
    hf = result["transformers"]
    for label, t in hf["tests"].items():
        rows.append(
            claim(
                f"transformers {hf['version']} _speculative_sampling, {label}: G-test (level {t['alpha']:g})",
                simulation=f"{'refused' if t['refused'] else 'consistent'}, p = {t['p_value']:.3g} over {t['n']:,} "
                f"calls; power 0.99 from TV {t['detectable_tv']:.3g}",
            )
        )
    a = result["assisted"]
    rows.append(
        claim(
            f"assisted generation, greedy: identical to the target's greedy decoding ({a['greedy']['tokens']} tokens)",
            measured=f"{a['greedy']['identical']} of {a['greedy']['prompts']} prompts",
        )
    )
    for label, t in a["laws"].items():
        rows.append(
            claim(
                f"assisted generation, {label}: law of the first token / first tokens",
                measured=f"{'refused' if t['refused'] else 'consistent'} "
                f"(p = {t['first'][2]:.3g} / {t['joint'][2]:.3g}, "
                f"{t['runs']:,} runs; power 0.99 from TV {t['detectable'][0]:.3g} / {t['detectable'][1]:.3g})",
            )
        )
    for family, points in result["plane"].items():
        for label, v in points.items():
            m = result["measured"].get(family, {}).get(label)
            same = v.get("opt_at_same_speed")
            rows.append(
                claim(
                    f"{family} {label}: per-token P(reject), TV(P_A, q), tokens per call; gap to Thm 5's front "
                    "(mean, min)" + ("; OPT's TV at the same speed" if same is not None else ""),
                    paper="Thm 5: P(reject) + TV(P_A, q) >= TV(p, q), = for OPT" if family == "OPT" else None,
                    theory=f"{v['reject']:.4f}, {v['loss_tv']:.4f}, {v['tokens_per_call']:.3f}; "
                    f"{v['front_gap']:.4f}, {v['thm5_gap_min']:+.1e}" + (f"; {same:.4f}" if same is not None else ""),
                    measured=None
                    if m is None
                    else f"{m['reject']:.4f}, {m['loss_tv']:.4f}, {m['tokens_per_call']:.3f}; {m['front_gap']:.4f}, "
                    f"{m['thm5_gap_min']:+.1e} "
                    f"({m['steps']:,} steps)",
                )
            )
    return rows
