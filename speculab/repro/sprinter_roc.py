"""[SPR] §3.2 / App. A.10 (Figs. 12–13) on real models: train the SPRINTER verifier and draw its ROC curves.

Training data as [SPR] §3.2 builds it (:func:`speculab.backends.head_data.sprinter_examples`):
spans of the tiny pair's training text as prefixes, completions from the text, the draft,
the target or both in equal shares, each completion token labelled acceptable iff
``p(x)/q(x) ≤ λ`` for ``λ ∈ {1, 1.2, 1.5}``. The verifier is a linear layer and a sigmoid
([SPR]'s architecture) trained with BCE and Adam, early stopping on a held-out share of the
training prefixes (whole prefixes: :func:`speculab.backends.heads.train_head` with ``groups``), on three inputs: the
draft's
last hidden state at the previous token ([SPR]'s), at the drafted token, and at the drafted
token with the draft's ``log p(x)`` appended. Reported on test prefixes never trained on:
the ROC curve and its AUC, and ``η_TP``, ``η_FP`` at the inference threshold ``τ = 0.5``
(the rates SPRINTER's theory, S1–S4, is written in). The trained verifiers are saved as
safetensors files with their configuration and metrics.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from speculab._validate import as_positive_int, spawn_seeds
from speculab.repro._io import claim, describe_key, new_figure, save_figure, write_json

LAMBDAS = (1.0, 1.2, 1.5)
THRESHOLD = 0.5
#: [SPR] Table 5: the λ (and τ = 0.5) behind every latency and quality result of the paper.
PAPER_LAMBDA = 1.2
#: What [SPR] App. A.10 (Figs. 12–13) says of the AUC at each λ; it prints no value.
PAPER_AUC = {
    1.0: "AUC rises with λ (App. A.10; no value printed)",
    1.2: "the best AUC, at λ = 1.2 (Figs. 12–13)",
    1.5: "below λ = 1.2's (Figs. 12–13)",
}
#: Share of the prefixes kept for the test set (the rest train; a share of those decides early stopping).
TEST_SHARE = 0.2


def held_out_split(ex, n_prefixes: int, key):
    """``(train, test)`` of [SPR] §3.2's examples: ``TEST_SHARE`` of the prefixes held out whole (a prefix's
    completions never straddle the split)."""
    test_prefixes = np.zeros(n_prefixes, dtype=bool)
    test_prefixes[np.random.default_rng(key).permutation(n_prefixes)[: math.ceil(TEST_SHARE * n_prefixes)]] = True
    is_test = test_prefixes[ex.prefix]
    return ex.subset(~is_test), ex.subset(is_test)


def verifier_config(d_in: int, key: int):
    """[SPR]'s verifier: a linear layer and the sigmoid, trained with Adam and early stopping."""
    from speculab.backends.heads import HeadConfig

    return HeadConfig(kind="linear", d_in=d_in, lr=1e-2, epochs=200, patience=10, seed=key % 2**31)


def run(
    key=0,
    n_runs: int = 4096,
    out_dir: str | Path = "results",
    progress: bool = False,
    draft: str | None = None,
    target: str | None = None,
) -> dict:
    """``n_runs`` prefixes of 16 tokens with completions of 16 (``16 · n_runs`` examples). Writes
    ``sprinter_roc.{png,json}`` and one verifier per (λ, input) as ``sprinter_verifier_*.safetensors``."""

    from speculab.backends import load_pair
    from speculab.backends.heads import auc, roc_curve, save_head, train_head
    from speculab.backends.head_data import FEATURES, SOURCES, sprinter_examples
    from speculab.backends.tiny.build import BuildConfig, corpus

    n_prefixes = as_positive_int(n_runs, "n_runs", minimum=20)
    pair = load_pair("tiny") if draft is None else load_pair(draft, target)
    texts, _, _ = corpus(BuildConfig().seed)  # the tiny pair's training text: never the held-out prompts
    data_key, split_key, *train_keys = spawn_seeds(key, 2 + len(LAMBDAS) * len(FEATURES))
    ex = sprinter_examples(pair, texts, n_prefixes=n_prefixes, key=data_key)
    train, test = held_out_split(ex, n_prefixes, split_key)
    out = Path(out_dir)
    rows, curves = {}, {}
    seeds = iter(train_keys)
    for lam in LAMBDAS:
        y_train, y_test = train.labels(lam), test.labels(lam)
        for which in FEATURES:
            X = train.features(which)
            config = verifier_config(X.shape[1], next(seeds))
            if progress:
                print(f"sprinter-roc: λ = {lam}, input {which}", flush=True)
            head = train_head(X, y_train, config=config, groups=train.prefix)
            scores = head(test.features(which)).numpy()
            passed = scores >= THRESHOLD
            fpr, tpr, _ = roc_curve(scores, y_test)
            name = f"lam{lam}_{which.replace('+', '_')}"
            save_head(head, out / f"sprinter_verifier_{name}.safetensors")
            curves[name] = (fpr, tpr)
            rows[name] = {
                "lambda": lam,
                "input": which,
                "auc": auc(scores, y_test),
                "eta_tp": float(passed[y_test == 1].mean()),
                "eta_fp": float(passed[y_test == 0].mean()),
                "acceptable_share": float(y_test.mean()),
                "epochs": head.metrics["epochs"],
                "best_epoch": head.metrics["best_epoch"],
            }
    share = {s: float(np.mean(ex.source == i)) for i, s in enumerate(SOURCES)}
    result = {
        "figure": "[SPR] App. A.10, Figs. 12-13 (analogue)",
        "pair": pair.name,
        "key": describe_key(key),
        "prefixes": n_prefixes,
        "examples": int(ex.p.size),
        "test_examples": int(test.p.size),
        "threshold": THRESHOLD,
        "source_shares": share,
        "verifiers": rows,
    }
    fig, axes = new_figure(ncols=len(LAMBDAS), width=4.2)
    for ax, lam in zip(axes, LAMBDAS):
        for which, color in zip(FEATURES, ("tab:grey", "tab:blue", "tab:red")):
            name = f"lam{lam}_{which.replace('+', '_')}"
            fpr, tpr = curves[name]
            ax.plot(fpr, tpr, color=color, label=f"{which} (AUC {rows[name]['auc']:.3f})")
        ax.plot([0, 1], [0, 1], "k:", linewidth=0.8)
        ax.set_title(f"λ = {lam}")
        ax.set_xlabel("false-positive rate η_FP")
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("true-positive rate η_TP")
    out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out / "sprinter_roc.png", dpi=130)
    write_json(result, out / "sprinter_roc.json")
    return result


def summary(result: dict) -> str:
    lines = [
        f"[SPR] verifier ROC — {result['pair']} pair, {result['examples']} examples from {result['prefixes']} "
        f"prefixes ({result['test_examples']} on test prefixes), key {result['key']}",
        "  sources: " + ", ".join(f"{k} {v:.0%}" for k, v in result["source_shares"].items()),
        f"  λ     input        AUC     η_TP    η_FP  (τ = {result['threshold']})  acceptable",
    ]
    for r in result["verifiers"].values():
        lines.append(
            f"  {r['lambda']:<5} {r['input']:<11} {r['auc']:.3f}   {r['eta_tp']:.3f}   {r['eta_fp']:.3f}"
            f"              {r['acceptable_share']:.3f}"
        )
    return "\n".join(lines)


def claims(result: dict) -> list[dict]:
    """The AUC per λ and input, the rates at ``τ`` ([SPR]'s λ and input, then all), the acceptable share: the claims
    table of ``speculab report``."""
    by_lambda: dict[float, list[dict]] = {}
    for r in result["verifiers"].values():
        by_lambda.setdefault(r["lambda"], []).append(r)
    threshold = result["threshold"]
    rows = [
        claim(
            f"verifier AUC on held-out prefixes, λ = {lam:g}",
            paper=PAPER_AUC.get(lam),
            measured=", ".join(f"{r['input']} {r['auc']:.3f}" for r in rs),
        )
        for lam, rs in by_lambda.items()
    ]
    for r in by_lambda.get(PAPER_LAMBDA, []):
        if r["input"] == "previous":
            rows.append(
                claim(
                    f"η_TP, η_FP at τ = {threshold:g}, λ = {PAPER_LAMBDA:g}, [SPR]'s input (previous token)",
                    paper="(λ, τ) = (1.2, 0.5) throughout (Table 5); rates not printed",
                    measured=f"η_TP {r['eta_tp']:.3f}, η_FP {r['eta_fp']:.3f}",
                )
            )
    every = [r for rs in by_lambda.values() for r in rs]
    rows.append(
        claim(
            f"η_TP, η_FP at τ = {threshold:g}, all {len(every)} verifiers",
            measured=f"η_TP {min(r['eta_tp'] for r in every):.2f}–{max(r['eta_tp'] for r in every):.2f}, "
            f"η_FP {min(r['eta_fp'] for r in every):.2f}–{max(r['eta_fp'] for r in every):.2f}",
        )
    )
    rows.append(
        claim(
            "acceptable test tokens, p(x)/q(x) ≤ λ",
            measured=", ".join(
                f"{100 * rs[0]['acceptable_share']:.0f} % (λ = {lam:g})" for lam, rs in by_lambda.items()
            ),
        )
    )
    return rows
