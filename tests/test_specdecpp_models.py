"""SpecDec++ on real models: a head on the draft's hidden states decides each round's length; the verification is SD's."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from speculab.backends import decode, load_pair  # noqa: E402
from speculab.backends.heads import HeadConfig, TrainedHead, make_head  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.methods import SD, SpecDecPP  # noqa: E402

PROMPTS = default_prompts()[:4]


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny", device="cpu")


def _width(pair) -> int:
    return pair.draft.model.config.n_embd


def _constant_head(pair, a: float) -> TrainedHead:
    """A head predicting ``a`` whatever the hidden state (zero weights, bias logit(a))."""
    config = HeadConfig(d_in=_width(pair))
    head = make_head(config)
    with torch.no_grad():
        head.out.weight.zero_()
        head.out.bias.fill_(math.log(a / (1 - a)))
    return TrainedHead(head, config)


def _random_head(pair, seed: int) -> TrainedHead:
    config = HeadConfig(d_in=_width(pair), kind="resnet", depth=1, seed=seed)
    return TrainedHead(make_head(config, torch.Generator().manual_seed(seed)), config)


def test_h_one_never_stops_early_and_is_sd_with_the_cap(pair):
    """h = 1: the rule never fires before the cap, so the run is SD(K = cap) token for token and count for count."""
    a = decode(pair, PROMPTS, SpecDecPP(1.0, head=_constant_head(pair, 0.3), cap=4), max_new_tokens=20, key=5)
    b = decode(pair, PROMPTS, SD(K=4), max_new_tokens=20, key=5)
    assert a.tokens == b.tokens
    for f in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus", "tokens"):
        np.testing.assert_array_equal(getattr(a.counts, f), getattr(b.counts, f))


def test_h_zero_with_an_uncertain_head_drafts_one_token_per_round(pair):
    res = decode(pair, PROMPTS, SpecDecPP(0.0, head=_constant_head(pair, 0.9)), max_new_tokens=20, key=6)
    for r in res.rounds:
        assert np.all(r.drafted == 1)  # 1 − 0.9 > 0 after the first draft: SD(K = 1)
    np.testing.assert_array_equal(res.counts.draft_calls, res.counts.oracle_calls)


def test_a_constant_head_stops_where_its_product_crosses_the_threshold(pair):
    """a = 0.8, h = 0.5: 1 − 0.8^k > 0.5 first at k = 4 (0.8³ = 0.512), so every round drafts 4 tokens unless fewer
    remain (or the block drafted an EOS)."""
    res = decode(pair, PROMPTS, SpecDecPP(0.5, head=_constant_head(pair, 0.8)), max_new_tokens=24, key=7)
    for r, out in zip(res.rounds, res.tokens):
        done = 0
        for drafted, tau in zip(r.drafted, r.accepted):
            assert drafted == min(4, 24 - done) or pair.eos_token_id in out
            done += min(tau, drafted) + 1
        assert np.sum(r.drafted == 4) >= len(r.drafted) - 2


def test_the_stopping_decisions_are_the_heads_on_the_drafts_hidden_states(pair):
    """A head that depends on the hidden state: each round's length equals the rule applied to the head's predictions
    recomputed offline, by one uncached forward pass of the draft over the prompt, the output so far and the block."""
    head, h = _random_head(pair, 3), 0.35
    blocks = []

    def keep(info):
        blocks.append(info.drafts[0].tolist())

    res = decode(pair, PROMPTS[:2], SpecDecPP(h, head=head, cap=6), max_new_tokens=24, key=8, batch_size=1,
                 on_round=keep)
    checked = stopped_early = 0
    rounds = iter(blocks)
    for prompt, out, rec in zip(PROMPTS[:2], res.tokens, res.rounds):
        ids = pair.tokenizer.encode(prompt)
        done = 0
        for drafted, tau in zip(rec.drafted, rec.accepted):
            block = next(rounds)
            with torch.no_grad():
                hidden = pair.draft.model(torch.tensor([ids + out[:done] + block]), output_hidden_states=True)
            a = head(hidden.hidden_states[-1][0, -len(block):]).tolist()
            remaining = 24 - done
            k = next((i + 1 for i in range(len(a)) if 1 - math.prod(a[: i + 1]) > h), None)
            expected = min(k or 6, 6, remaining)
            if block[-1] != pair.eos_token_id:
                assert drafted == expected, (drafted, expected, a)
                checked += 1
                stopped_early += drafted < min(6, remaining)
            done += min(tau, drafted) + 1
    assert checked > 5 and stopped_early > 0


def test_specdecpp_on_real_models_refuses_what_it_cannot_run(pair):
    from speculab.backends import NGramModel
    from speculab.sim import simulate
    from speculab.theory import MarkovInstance

    with pytest.raises(ValueError, match="needs a head trained on the draft's hidden states"):
        decode(pair, PROMPTS[:1], SpecDecPP(0.5), max_new_tokens=4, key=0)
    ngram = load_pair(NGramModel(np.arange(100) % 7, 2, pair.vocab_size), "tiny-target", device="cpu")
    with pytest.raises(ValueError, match="must be a Hugging Face model"):
        decode(ngram, PROMPTS[:1], SpecDecPP(0.5, head=_constant_head(pair, 0.5)), max_new_tokens=4, key=0)
    narrow = TrainedHead(make_head(HeadConfig(d_in=3)), HeadConfig(d_in=3))
    with pytest.raises(ValueError, match="reads 3 features"):
        decode(pair, PROMPTS[:1], SpecDecPP(0.5, head=narrow), max_new_tokens=4, key=0)
    inst = MarkovInstance.random(T=4, V=3, key=0)
    with pytest.raises(ValueError, match="runs on real models only"):
        simulate(inst, SpecDecPP(0.5, head=_constant_head(pair, 0.5)), 10, key=0)


def test_repro_specdecpp_pareto(tmp_path, monkeypatch):
    import json

    from speculab.backends.heads import load_head
    from speculab.repro import specdecpp_pareto as repro

    for name, value in (("W_REJ", (1.0, 6.0)), ("THRESHOLDS", (0.3, 0.9)), ("KS", (1, 3)), ("PREFIXES", 64)):
        monkeypatch.setattr(repro, name, value)
    monkeypatch.setattr("speculab.backends.pair.default_prompts", lambda: PROMPTS)
    result = repro.run(key=0, n_runs=1, out_dir=tmp_path, max_new_tokens=12)
    saved = json.loads((tmp_path / "specdecpp_pareto.json").read_text())
    assert set(saved["fixed_K"]) == {"1", "3"} and set(saved["heads"]) == {"1", "6"}
    for w in ("1", "6"):
        assert load_head(tmp_path / f"specdecpp_head_wrej{w}.safetensors").config.depth == repro.DEPTH
        for r in result["heads"][w]["points"]:
            c = result["cost_ratio"]
            assert r["latency"] == pytest.approx(c * (1 + r["discard_rate"]) + (1 - c) * r["verification_rate"])
            assert 0 < r["verification_rate"] <= 1 and r["discard_rate"] >= 0
    k1 = result["fixed_K"]["1"]
    assert k1["verification_rate"] == pytest.approx(1 / k1["tokens_per_round"])
    assert 0 < result["cost_ratio"] < 5 and "best threshold" in repro.summary(result)
