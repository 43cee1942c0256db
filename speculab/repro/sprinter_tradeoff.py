"""[SPR] Fig. 1 / Table 2 on real models: SPRINTER's speed and quality with a trained verifier, theory beside
measurement.

The verifier is [SPR]'s: a linear layer and a sigmoid on the draft's last hidden state at the
previous token, trained with BCE and Adam on [SPR] §3.2's data (text / draft / target / mixed
completions, labels ``p(x)/q(x) ≤ λ`` for ``λ ∈ {1, 1.2, 1.5}``; early stopping on held-out
prefixes), as ``speculab repro sprinter-roc`` trains it. For each λ the inference threshold τ
is set at quantiles of the verifier's scores on held-out prefixes so that it passes about
25 %, 50 % and 75 % of the slots. Every (λ, τ) decodes the held-out prompts with
``Sprinter(verifier=head, threshold=τ)``; beside it:

* the **random verifier** at the same measured pass share (a constant score ``ρ`` with
  ``threshold=None``: each slot passed with probability ``ρ`` whatever the context) — the speed is
  the same, so the gap in quality is what the trained verifier knows;
* SD with ``K = 1`` and ``K = 4`` (exact: TV 0).

Reported per setting, from the logits at every drafted slot: target calls per token, drafts
per target call, tokens per second (wall clock, one prompt at a time), the exact mean
per-token ``TV(P_SPR,n, q_n)`` and ``KL`` (the verdict reads the previous token, so a passed
slot's law is ``p_n`` and a refused slot's is ``q_n``: ``TV = v_n · TV(p_n, q_n)`` exactly), the
target's log-likelihood per token, the verifier's measured ``η_TP`` and ``η_FP`` on the drafted
tokens (acceptable: ``p(x) ≤ q(x)``, SPEC §1), and **theory at the measured rates**: S1's
per-token TV ``η_FP · TV(p, q)`` and S4's acceptance rate ``1 − (1 − η_FP) TV(p, q)`` (``TV``
averaged over the drafted slots) against the measured ones. The difference is what the
i.i.d.-verifier assumption of [SPR] §3.1 misses: a verifier that reads the context passes some
positions more than others, so what enters the law is its pass rate weighted by each
position's ``TV(p_n, q_n)``, not its false-positive rate on drafted tokens (both reported).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from speculab._validate import as_positive_int, spawn_seeds
from speculab.counts import Estimate
from speculab.methods.capabilities import head_of
from speculab.methods.probe import RoundProbe
from speculab.repro._io import claim, describe_key, new_figure, pm, save_figure, signed, write_json
from speculab.repro._plots import interpolate_points
from speculab.repro.sprinter_roc import held_out_split, verifier_config

LAMBDAS = (1.0, 1.2, 1.5)
#: Shares of held-out slots the threshold τ lets pass (τ at the matching quantile of the verifier's scores).
PASS_SHARES = (0.25, 0.5, 0.75)
#: Training prefixes (16 tokens each, completions of 16: 16 examples per prefix).
PREFIXES = 1024
#: Share of the training prefixes held out (scores for τ, AUC).
SD_KS = (1, 4)


def _train(pair, key, say) -> dict:
    """One verifier per λ on the previous token's hidden state; its held-out AUC and the thresholds τ."""
    from speculab.backends.head_data import sprinter_examples
    from speculab.backends.heads import auc, train_head
    from speculab.backends.tiny.build import BuildConfig, corpus

    texts, _, _ = corpus(BuildConfig().seed)  # the tiny pair's training text: never the held-out prompts
    data_key, split_key, *train_keys = spawn_seeds(key, 2 + len(LAMBDAS))
    ex = sprinter_examples(pair, texts, n_prefixes=PREFIXES, key=data_key)
    train, test = held_out_split(ex, PREFIXES, split_key)  # as sprinter-roc splits and trains
    out = {}
    for lam, seed in zip(LAMBDAS, train_keys):
        X = train.features("previous")
        head = train_head(X, train.labels(lam), config=verifier_config(X.shape[1], seed), groups=train.prefix)
        scores = head(test.features("previous")).numpy()
        thresholds = [float(np.quantile(scores, 1.0 - s)) for s in PASS_SHARES]
        out[lam] = {"head": head, "auc": auc(scores, test.labels(lam)), "thresholds": thresholds}
        say(
            f"sprinter-tradeoff: verifier λ = {lam}: held-out AUC {out[lam]['auc']:.3f}, τ = "
            + ", ".join(f"{t:.3f}" for t in thresholds)
        )
    return out


class _Slots(RoundProbe):
    """Per drafted slot of every round: ``TV(p, q)``, whether the draft is acceptable (``p(x) ≤ q(x)``), the verdict."""

    def observe(self, info) -> list[list]:
        from speculab import kernels

        L = info.drafts.shape[1]
        if L == 0:
            return [[], [], []]
        p, q, x = info.p[0], info.q[0, :L], info.drafts[0]
        acceptable = (p.gather(1, x[:, None])[:, 0] <= q.gather(1, x[:, None])[:, 0]).tolist()
        passed = [float(v) for v in info.predictions] if info.predictions is not None else [0.0] * L
        return [kernels.tv(p, q).tolist(), acceptable, passed]

    def arrays(self):
        items = self.items()
        column = lambda k: [v for _, obs in items for v in obs[k]]  # noqa: E731
        return (
            np.asarray([run for run, obs in items for _ in obs[0]]),
            np.asarray(column(0)),
            np.asarray(column(1), dtype=bool),
            np.asarray(column(2)),
        )


def _measure(pair, prompts, method, max_new_tokens: int, key) -> dict:
    from speculab.backends import decode

    slots = _Slots()
    res = decode(pair, prompts, method, max_new_tokens=max_new_tokens, key=key, batch_size=1, on_round=slots)
    seconds = res.seconds  # the decode's own wall time (when resumed, the time it took when it ran)
    c = res.counts
    tokens = float(c.tokens.sum())
    run, tv, acceptable, passed = slots.arrays()
    tv_runs = np.array([r.loss_tv.mean() for r in res.records])
    ll = np.array([r.target_logprob.mean() for r in res.records])
    out = {
        "target_calls_per_token": float(c.oracle_calls.sum() / tokens),
        "drafts_per_target_call": float(c.draft_calls.sum() / c.oracle_calls.sum())
        if c.oracle_calls.sum()
        else float("inf"),
        "tokens_per_second": tokens / seconds,
        "per_token_tv": float(np.concatenate([r.loss_tv for r in res.records]).mean()),
        "per_token_tv_se": Estimate.of(tv_runs).se,
        "per_token_kl": float(np.concatenate([r.loss_kl for r in res.records]).mean()),
        "target_loglik_per_token": float(ll.mean()),
        "target_loglik_se": Estimate.of(ll).se,
        "draft_tv_per_slot": float(tv.mean()),
        "slots": int(tv.size),
    }
    if head_of(method) is None:  # SD: every draft is checked by the target
        out["acceptance_rate"] = float(c.accepted.sum() / c.draft_calls.sum())
        return out
    # SPRINTER: measured rates on the drafted tokens, and S1 / S4 at them
    eta_tp = float(passed[acceptable].mean()) if acceptable.any() else float("nan")
    eta_fp = float(passed[~acceptable].mean()) if (~acceptable).any() else float("nan")
    accepted_runs = c.accepted / np.maximum(c.draft_calls, 1)
    out.update(
        {
            "pass_share": float(passed.mean()),
            "eta_tp": eta_tp,
            "eta_fp": eta_fp,
            # what S1 needs (SPRINTER's module docstring): the pass rate weighted by each slot's TV(p, q)
            "eta_tv_weighted": float((passed * tv).sum() / tv.sum()),
            "acceptance_rate": float(c.accepted.sum() / c.draft_calls.sum()),
            "acceptance_rate_se": Estimate.of(accepted_runs).se,
            "acceptance_rate_s4": 1.0 - (1.0 - eta_fp) * float(tv.mean()),
            "acceptance_rate_exact": 1.0 - float(((1.0 - passed) * tv).mean()),  # given the verdicts drawn
            "per_token_tv_s1": eta_fp * float(tv.mean()),
        }
    )
    out.update(_iid_gaps(out, runs=len(res.records)))
    return out


def _iid_gaps(point: dict, runs: int) -> dict:
    """How far the measured per-token TV is from S1, and the acceptance rate from S4, in standard errors over the
    runs. Every run may accept the same share of its drafts (all of them, on CUDA's numerics at a pass share of
    0.8): a standard error of 0, where the gap is 0 if the two agree and ±inf if not (``Estimate.z``)."""
    return {
        "s1_gap_in_se": Estimate(point["per_token_tv"], point["per_token_tv_se"], runs).z(point["per_token_tv_s1"]),
        "s4_gap_in_se": Estimate(point["acceptance_rate"], point["acceptance_rate_se"], runs).z(
            point["acceptance_rate_s4"]
        ),
    }


def _random_verifier(pair, rate: float):
    """SPRINTER whose verifier passes each slot with probability ``rate`` whatever the context."""
    from speculab.backends.heads import constant_head
    from speculab.methods import Sprinter

    d = pair.draft.model.config.hidden_size
    if 0 < rate < 1:
        return Sprinter(verifier=constant_head(d, rate), threshold=None)
    return Sprinter(verifier=constant_head(d, 0.5), threshold=1.0 if rate == 0 else 0.0)  # a sure verdict


def run(
    key=0,
    n_runs: int = 2,
    out_dir: str | Path = "results",
    progress: bool = False,
    draft: str | None = None,
    target: str | None = None,
    max_new_tokens: int = 32,
) -> dict:
    """Train the verifiers, then decode the held-out prompts ``n_runs`` times each with every setting.
    Writes ``sprinter_tradeoff.{png,json}``."""
    from speculab.backends import load_pair
    from speculab.backends.pair import default_prompts
    from speculab.methods import SD, Sprinter

    n_runs = as_positive_int(n_runs, "n_runs")
    max_new_tokens = as_positive_int(max_new_tokens, "max_new_tokens")
    say = print if progress else (lambda *a, **k: None)
    pair = load_pair("tiny") if draft is None else load_pair(draft, target)
    prompts = [p for p in default_prompts() for _ in range(n_runs)]
    train_key, sd_key, *keys = spawn_seeds(key, 2 + len(LAMBDAS))
    verifiers = _train(pair, train_key, say)
    sd = {
        str(K): _measure(pair, prompts, SD(K=K), max_new_tokens, k)
        for K, k in zip(SD_KS, spawn_seeds(sd_key, len(SD_KS)))
    }
    trained, random = {}, {}
    for lam, k in zip(LAMBDAS, keys):
        v = verifiers[lam]
        trained[str(lam)], random[str(lam)] = [], []
        for share, threshold, (k1, k2) in zip(
            PASS_SHARES, v["thresholds"], np.reshape(spawn_seeds(k, 2 * len(PASS_SHARES)), (-1, 2))
        ):
            point = {
                "target_pass_share": share,
                "threshold": threshold,
                **_measure(pair, prompts, Sprinter(verifier=v["head"], threshold=threshold), max_new_tokens, int(k1)),
            }
            rate = point["pass_share"]
            baseline = {"rate": rate, **_measure(pair, prompts, _random_verifier(pair, rate), max_new_tokens, int(k2))}
            trained[str(lam)].append(point)
            random[str(lam)].append(baseline)
            say(
                f"  λ = {lam}, τ = {threshold:.3f}: pass share {rate:.2f}, TV {point['per_token_tv']:.4f} "
                f"(random at that share {baseline['per_token_tv']:.4f})"
            )
    pairs = [(t, r) for lam in trained for t, r in zip(trained[lam], random[lam])]
    gaps = [
        (r["per_token_tv"] - t["per_token_tv"]) / math.hypot(r["per_token_tv_se"], t["per_token_tv_se"])
        for t, r in pairs
    ]
    at_sd = {
        K: {
            lam: interpolate_points(pts, "target_calls_per_token", "per_token_tv", sd[K]["target_calls_per_token"])
            for lam, pts in trained.items()
        }
        for K in sd
    }
    result = {
        "figure": "[SPR] Fig. 1 / Table 2 (analogue)",
        "pair": pair.name,
        "key": describe_key(key),
        "prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "prefixes": PREFIXES,
        "verifier_input": "the draft's last hidden state at the previous token ([SPR] §4)",
        "auc": {str(lam): verifiers[lam]["auc"] for lam in LAMBDAS},
        "sd": sd,
        "sprinter": trained,
        "random_verifier": random,
        # what SPRINTER gives up to run at SD's speed (SD's TV is 0 there); NaN outside a verifier's range
        "sprinter_tv_at_sd_speed": at_sd,
        "trained_vs_random": {"compared": len(pairs), "trained_lower_tv": sum(g > 0 for g in gaps), "gaps_in_se": gaps},
        "iid_assumption": {
            "largest_s1_gap_in_se": max(abs(t["s1_gap_in_se"]) for t, _ in pairs),
            "largest_s4_gap_in_se": max(abs(t["s4_gap_in_se"]) for t, _ in pairs),
            "random_largest_s1_gap_in_se": max(abs(r["s1_gap_in_se"]) for _, r in pairs),
        },
    }
    out = Path(out_dir)
    _plot(result, out)
    write_json(result, out / "sprinter_tradeoff.json")
    return result


def _plot(result: dict, out: Path) -> None:
    fig, (ax, ax2) = new_figure(ncols=2)
    colors = dict(zip(result["sprinter"], ("tab:blue", "tab:orange", "tab:green")))
    for lam, pts in result["sprinter"].items():
        ax.plot(
            [r["target_calls_per_token"] for r in pts],
            [r["per_token_tv"] for r in pts],
            "o-",
            color=colors[lam],
            label=f"SPRINTER, verifier λ = {lam}",
        )
        ax2.errorbar(
            [r["acceptance_rate_s4"] for r in pts],
            [r["acceptance_rate"] for r in pts],
            yerr=[2 * r["acceptance_rate_se"] for r in pts],
            fmt="o",
            color=colors[lam],
            label=f"λ = {lam}",
        )
    rand = sorted((r for pts in result["random_verifier"].values() for r in pts), key=lambda r: r["rate"])
    ax.plot(
        [r["target_calls_per_token"] for r in rand],
        [r["per_token_tv"] for r in rand],
        "s--",
        color="grey",
        label="random verifier, same pass share",
    )
    ax2.errorbar(
        [r["acceptance_rate_s4"] for r in rand],
        [r["acceptance_rate"] for r in rand],
        yerr=[2 * r["acceptance_rate_se"] for r in rand],
        fmt="s",
        color="grey",
        label="random verifier",
    )
    for K, r in result["sd"].items():
        ax.plot([r["target_calls_per_token"]], [0.0], "k*", markersize=10)
        ax.annotate(
            f"SD K={K}", (r["target_calls_per_token"], 0.0), textcoords="offset points", xytext=(4, 6), fontsize=7
        )
    lo = min(r["acceptance_rate"] for r in rand + [t for pts in result["sprinter"].values() for t in pts])
    ax2.plot([lo, 1], [lo, 1], "k:", linewidth=0.8)
    ax.set_xlabel("target calls per token")
    ax.set_ylabel("mean per-token TV(P_SPR, q) (exact)")
    ax.set_title(f"SPRINTER on the {result['pair']} pair")
    ax.legend(fontsize=7)
    ax2.set_xlabel("acceptance rate, S4 at the measured η_FP")
    ax2.set_ylabel("acceptance rate measured (± 2 s.e.)")
    ax2.set_title("[SPR] Thm A.4 vs measured")
    ax2.legend(fontsize=7)
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "sprinter_tradeoff.png", dpi=130)


def summary(result: dict) -> str:
    head = "  {:<24} {:>9} {:>10} {:>6} {:>6} {:>6} {:>7} {:>16} {:>17} {:>15}".format(
        "setting",
        "calls/tok",
        "draft/call",
        "tok/s",
        "η_TP",
        "η_FP",
        "η_TV",
        "TV meas / S1",
        "accept meas / S4",
        "loglik ± se",
    )

    def line(name, r):
        if "eta_tp" not in r:
            return (
                f"  {name:<24} {r['target_calls_per_token']:9.3f} {r['drafts_per_target_call']:10.3f} "
                f"{r['tokens_per_second']:6.0f} {'':>6} {'':>6} {'':>7} {0.0:8.4f}          "
                f"{r['acceptance_rate']:8.3f}          {r['target_loglik_per_token']:7.3f} ± "
                f"{r['target_loglik_se']:.3f}"
            )
        return (
            f"  {name:<24} {r['target_calls_per_token']:9.3f} {r['drafts_per_target_call']:10.3f} "
            f"{r['tokens_per_second']:6.0f} {r['eta_tp']:6.3f} {r['eta_fp']:6.3f} {r['eta_tv_weighted']:7.3f} "
            f"{r['per_token_tv']:.4f} / {r['per_token_tv_s1']:.4f} {r['acceptance_rate']:.3f} / "
            f"{r['acceptance_rate_s4']:.3f}  {r['target_loglik_per_token']:7.3f} ± {r['target_loglik_se']:.3f}"
        )

    lines = [
        f"[SPR] trade-off — {result['pair']} pair, {result['prompts']} completions of {result['max_new_tokens']} "
        f"tokens per setting, key {result['key']}",
        f"  verifier: linear + sigmoid on {result['verifier_input']}; held-out AUC "
        + ", ".join(f"λ={lam} {a:.3f}" for lam, a in result["auc"].items()),
        head,
    ]
    for K, r in result["sd"].items():
        lines.append(line(f"SD K={K}", r))
    for lam, pts in result["sprinter"].items():
        for t, r in zip(pts, result["random_verifier"][lam]):
            lines.append(line(f"λ={lam} τ={t['threshold']:.3f}", t))
            lines.append(line(f"  random ρ={r['rate']:.3f}", r))
    c, i = result["trained_vs_random"], result["iid_assumption"]
    lines.append(
        f"  at the same pass share the trained verifier's per-token TV is below the random verifier's in "
        f"{c['trained_lower_tv']} of {c['compared']} settings (gaps in s.e.: "
        + ", ".join(f"{g:+.1f}" for g in c["gaps_in_se"])
        + ")"
    )
    for K, tvs in result["sprinter_tv_at_sd_speed"].items():
        lines.append(
            f"  at SD (K = {K})'s {result['sd'][K]['target_calls_per_token']:.3f} target calls per token (its TV is "
            f"0) SPRINTER's per-token TV is " + ", ".join(f"λ={lam} {v:.3f}" for lam, v in tvs.items())
        )
    lines.append(
        f"  i.i.d. verifier assumption: the trained verifiers' TV differs from S1 at the measured η_FP by up to "
        f"{float(i['largest_s1_gap_in_se']):.1f} s.e. and their acceptance rate from S4 by up to "
        f"{float(i['largest_s4_gap_in_se']):.1f} s.e. (the random verifier, i.i.d. by construction: "
        f"{float(i['random_largest_s1_gap_in_se']):.1f} s.e. from S1)"
    )
    return "\n".join(lines)


def _setting(lam: str, point: dict) -> str:
    return f"λ = {lam}, {100 * point['pass_share']:.0f} % passed"


def claims(result: dict) -> list[dict]:
    """The verifiers' AUC, trained vs random at the same pass share, S1 / S4 at the measured rates (the setting
    furthest from each), the TV-weighted pass rate vs η_FP, and the TV left at SD's speed: the claims table of
    ``speculab report``."""
    pairs = [
        (lam, t, r) for lam, pts in result["sprinter"].items() for t, r in zip(pts, result["random_verifier"][lam])
    ]  # the order of trained_vs_random's gaps
    c, iid = result["trained_vs_random"], result["iid_assumption"]
    gaps = [float(g) for g in c["gaps_in_se"]]
    lam, t, r = pairs[int(np.argmax(gaps))]
    rows = [
        claim(
            "verifier AUC, held-out prefixes ([SPR]'s input: the previous token's hidden state)",
            paper="not printed (ROC curves only, App. A.10)",
            measured=", ".join(f"{float(a):.3f} (λ = {lam_})" for lam_, a in result["auc"].items()),
        ),
        claim(
            "per-token TV, trained vs random verifier at the same pass share",
            paper="no random baseline in [SPR]",
            measured=f"trained lower in {c['trained_lower_tv']} of {c['compared']} settings (gaps "
            f"{signed(min(gaps), 1)} to {signed(max(gaps), 1)} s.e.); largest: "
            f"{pm(t['per_token_tv'], t['per_token_tv_se'])} vs {pm(r['per_token_tv'], r['per_token_tv_se'])}"
            f" ({_setting(lam, t)})",
        ),
    ]
    lam, t, _ = max(pairs, key=lambda ltr: abs(float(ltr[1]["s1_gap_in_se"])))
    rows.append(
        claim(
            "per-token TV vs S1 at the measured η_FP (the furthest of the trained settings)",
            paper="TV = η_FP · TV(p, q) (Thm 3.1)",
            theory=f"S1: {t['per_token_tv_s1']:.4f} ({_setting(lam, t)})",
            measured=f"{pm(t['per_token_tv'], t['per_token_tv_se'], 4)} ({signed(t['s1_gap_in_se'], 1)} s.e.);"
            f" random verifier within {float(iid['random_largest_s1_gap_in_se']):.1f} s.e. of S1",
        )
    )
    lam, t, _ = max(pairs, key=lambda ltr: abs(float(ltr[1]["s4_gap_in_se"])))
    rows.append(
        claim(
            "acceptance rate vs S4 at the measured η_FP (the furthest of the trained settings)",
            paper="β = 1 − (1 − η_FP) · TV(p, q) (Thm A.4)",
            theory=f"S4: {t['acceptance_rate_s4']:.3f} ({_setting(lam, t)})",
            measured=f"{pm(t['acceptance_rate'], t['acceptance_rate_se'])} ({signed(t['s4_gap_in_se'], 1)} s.e.)",
        )
    )
    diffs = [float(t["eta_tv_weighted"]) - float(t["eta_fp"]) for _, t, _ in pairs]
    diffs = [d for d in diffs if math.isfinite(d)]
    if diffs:
        rows.append(
            claim(
                "TV-weighted pass rate − η_FP (what S1 needs vs what it is written in)",
                paper="the verifier decides i.i.d., one η_FP everywhere (§3.1)",
                measured=f"{signed(min(diffs), 3)} to {signed(max(diffs), 3)} over {len(diffs)} settings",
            )
        )
    for K, tvs in result["sprinter_tv_at_sd_speed"].items():
        at = ", ".join(
            f"{float(v):.3f} (λ = {lam_})" if math.isfinite(float(v)) else f"out of range (λ = {lam_})"
            for lam_, v in tvs.items()
        )
        rows.append(
            claim(
                f"per-token TV at SD (K = {K})'s {result['sd'][K]['target_calls_per_token']:.3f} "
                "target calls per token",
                paper="1.64x–1.83x SD's speed at comparable quality (Table 2; Fig. 1)",
                measured=f"{at}; SD: 0",
            )
        )
    return rows
