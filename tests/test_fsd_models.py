"""Fuzzy SD and [FSD] App. E's random baseline on real models: exact per-position identities, θ = 0 is the target."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from scipy.stats import power_divergence  # noqa: E402

from speculab.backends import decode, load_pair  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.counts import BONUS, CORRECTION, DRAFT  # noqa: E402
from speculab.methods import Fuzzy  # noqa: E402
from speculab.repro.fsd_tradeoff import random_acceptance  # noqa: E402
from speculab.theory.fuzzy import DIVERGENCES  # noqa: E402
from conftest import claims_of, model_device  # noqa: E402

PROMPTS = default_prompts()[:6]


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny", device=model_device())


def _binned_test(counts: np.ndarray, law: np.ndarray, bins: int = 20):
    """Chi-square of token counts against ``law`` over its ``bins`` likeliest tokens and the rest (one bin)."""
    top = np.argsort(law)[::-1][:bins]
    rest = np.ones(law.size, dtype=bool)
    rest[top] = False
    observed = np.append(counts[top], counts[rest].sum())
    expected = np.append(law[top], law[rest].sum()) * counts.sum()
    return power_divergence(observed, expected, lambda_="log-likelihood").pvalue


@pytest.mark.slow
def test_theta_zero_outputs_the_targets_law_and_every_token_from_it(pair):
    """θ = 0: every position refuses its draft and outputs a token from q (law checked at the first position against
    the target's exact law; the same test rejects the draft's law, so it has the power to tell them apart)."""
    prompt = PROMPTS[0]
    ids = torch.tensor([pair.tokenizer.encode(prompt)], device=pair.device)
    with torch.no_grad():
        q = torch.softmax(pair.target.model(ids).logits[0, -1, : pair.vocab_size].double(), -1).cpu().numpy()
        p = torch.softmax(pair.draft.model(ids).logits[0, -1, : pair.vocab_size].double(), -1).cpu().numpy()
    n = 2_000
    res = decode(pair, [prompt] * n, Fuzzy(0.0, "js", K=3), max_new_tokens=2, key=11)
    for r in res.records:
        assert np.all(r.kind == CORRECTION) and np.all(r.loss_tv == 0)
        np.testing.assert_allclose(r.reject_prob, 1, rtol=1e-12)  # Σ p, the laws being float64
    first = np.bincount([t[0] for t in res.tokens], minlength=pair.vocab_size)
    assert _binned_test(first, q) > 1e-6
    assert _binned_test(first, p) < 1e-12  # power: the draft's law (what θ = ∞ would give) is refused


def _divergence(div: str, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """[FSD]'s ``Div(q, p)`` per row, written with scipy (independent of speculab's table): JS with the natural
    log, KL(q‖p), KL(p‖q) (``kl_reverse``), TV."""
    from scipy.spatial.distance import jensenshannon
    from scipy.stats import entropy

    rows = zip(p, q)
    return np.array(
        [
            {
                "js": lambda a, b: jensenshannon(b, a) ** 2,
                "kl": lambda a, b: entropy(b, a),
                "kl_reverse": lambda a, b: entropy(a, b),
                "tv": lambda a, b: 0.5 * np.abs(a - b).sum(),
            }[div](a, b)
            for a, b in rows
        ]
    )


@pytest.mark.parametrize("div", sorted(DIVERGENCES))
def test_fsd_records_the_exact_per_position_bias(pair, div):
    """The one-step output law is p where Div(q, p) < θ (the draft then kept with probability 1) and q elsewhere, so
    the recorded TV(P_A, q) is the position's TV(p, q) or 0 — and a kept draft is never a correction."""
    theta = {"js": 0.1, "kl": 0.4, "kl_reverse": 0.4, "tv": 0.35}[div]
    slots = []

    def check_rule(info):  # the decision at each slot is 1{Div(q, p) < θ}, from the very laws of the round
        L = info.p.shape[1]
        div_here = _divergence(div, info.p[0].cpu().numpy(), info.q[0, :L].cpu().numpy())
        refused = info.law.reject_prob[0, 0, :L]
        slots.append((div_here, refused.cpu().numpy()))

    res = decode(pair, PROMPTS, Fuzzy(theta, div, K=4), max_new_tokens=24, key=3, on_round=check_rule)
    d, refused = (np.concatenate(x) for x in zip(*slots))
    np.testing.assert_allclose(refused, (d >= theta).astype(float), atol=1e-12)
    assert 0 < (d < theta).sum() < d.size
    accepted = rejected = 0
    for r in res.records:
        drafted = r.kind != BONUS
        tv, loss = r.tv[drafted], r.loss_tv[drafted]
        kept = loss > 1e-9  # refused: the law is (Σ p) q, Σ p = 1 up to round-off
        np.testing.assert_allclose(loss[kept], tv[kept], rtol=1e-12)  # kept: the law is p itself
        assert np.all(loss[~kept] < 1e-14)
        assert np.all(r.kind[drafted][kept] == DRAFT)
        np.testing.assert_allclose(r.reject_prob[drafted], (~kept).astype(float), atol=1e-12)  # b ∈ {0, 1}
        accepted, rejected = accepted + kept.sum(), rejected + (~kept).sum()
    assert accepted > 10 and rejected > 10  # both branches exercised


def test_random_acceptance_is_the_mixture_law_at_every_position(pair):
    """[FSD] App. E's baseline: law ρ p + (1 − ρ) q, so TV(P_A, q) = ρ TV(p, q) exactly at every drafted position,
    and the predicted rejection probability is 1 − ρ."""
    rate = 0.35
    res = decode(pair, PROMPTS, random_acceptance(rate, 3), max_new_tokens=24, key=4)
    for r in res.records:
        drafted = r.kind != BONUS
        np.testing.assert_allclose(r.loss_tv[drafted], rate * r.tv[drafted], rtol=1e-9, atol=1e-14)
        np.testing.assert_allclose(r.reject_prob[drafted], 1 - rate, rtol=1e-12)
    c = res.counts
    assert 0 < c.accepted.sum() < c.tokens.sum()


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan"), True])
def test_random_acceptance_refuses_a_rate_outside_the_unit_interval(rate):
    with pytest.raises(ValueError, match="rate must be a number in"):
        random_acceptance(rate, 3)


@pytest.mark.slow
def test_repro_fsd_tradeoff(tmp_path, monkeypatch):
    import json

    from speculab.repro import fsd_tradeoff

    monkeypatch.setattr("speculab.backends.pair.default_prompts", lambda: PROMPTS)
    result = fsd_tradeoff.run(key=0, n_runs=1, out_dir=tmp_path, max_new_tokens=12, K=3)
    saved = json.loads((tmp_path / "fsd_tradeoff.json").read_text())
    assert (tmp_path / "fsd_tradeoff.png").stat().st_size > 0
    assert saved["prompts"] == len(PROMPTS) and set(saved["fsd"]) == set(fsd_tradeoff.DIVS)
    for div, points in result["fsd"].items():
        thetas = [r["theta"] for r in points]
        assert thetas == sorted(thetas) and len(thetas) >= 3
    assert result["target_only"]["draft_share"] == 0 and result["target_only"]["per_token_tv"] == 0
    assert result["sd"]["per_token_tv"] == 0  # SD is unbiased: its one-step law is q exactly
    assert [r["rate"] for r in result["random"]] == list(fsd_tradeoff.RATES)
    shares = [r["draft_share"] for r in result["random"]]
    assert shares == sorted(shares)  # more acceptance, more drafts in the output
    assert set(result["fsd_tv_at_sd_speed"]) == set(fsd_tradeoff.DIVS)
    assert "comparisons" in fsd_tradeoff.summary(result) and "SD's" in fsd_tradeoff.summary(result)
    rows = {row["quantity"]: row for row in claims_of(fsd_tradeoff, result)}
    sd, beats = result["sd"], result["fsd_beats_random"]
    assert rows["per-token TV, FSD vs random acceptance at the same draft share"]["measured"].startswith(
        f"FSD lower in {beats['fsd_lower_tv']} of {beats['compared']} comparisons"
    )
    assert rows["accepted drafts per round (ALen), FSD (JS) across θ"]["measured"].startswith(
        f"SD {sd['acceptance_length']:.3f}; FSD "
    )
    row = rows["SD's rejections per token, predicted along the runs vs counted"]
    assert (row["theory"], row["measured"]) == (
        f"{sd['predicted_rejections_per_token']:.3f}",
        f"{sd['rejections_per_token']:.3f}",
    )
