"""SPRINTER on real models: a verifier on the draft's hidden state at the previous token passes or refuses each slot.

Its verdict is fixed before the slot is drafted, so the slot's one-step law is the draft's after a pass and the
target's after a refusal; these tests hold the loop to that law, to [SPR] Alg. 1's counts and to the head itself.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from speculab.backends import decode, load_pair  # noqa: E402
from speculab.backends.heads import HeadConfig, TrainedHead, make_head  # noqa: E402
from _heads import constant, random_head, width  # noqa: E402
from conftest import assert_power, claims_of, power, model_device  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.backends.warp import Sampling  # noqa: E402
from speculab.methods import SD, Sprinter  # noqa: E402

PROMPTS = default_prompts()[:4]


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny", device=model_device())


def _draft_greedy(pair, prompt: str, n: int) -> list[int]:
    ids = pair.tokenizer.encode(prompt)
    out = []
    with torch.no_grad():
        for _ in range(n):
            x = int(
                pair.draft.model(torch.tensor([ids + out], device=pair.device))
                .logits[0, -1, : pair.vocab_size]
                .argmax()
            )
            out.append(x)
            if x == pair.eos_token_id:
                break
    return out


def test_a_verifier_that_passes_everything_outputs_the_draft_and_never_calls_the_target(pair):
    """Score 0.7 ≥ τ = 0.5 at every slot: the output is the draft's own (greedy: its argmax chain), no target
    call is counted, and every position's one-step law is the draft's (its TV to the target is TV(p, q))."""
    method = Sprinter(verifier=constant(pair, 0.7), threshold=0.5)
    greedy = decode(pair, PROMPTS, method, max_new_tokens=16, sampling=Sampling(0.0), key=0)
    for prompt, tokens in zip(PROMPTS, greedy.tokens):
        assert tokens == _draft_greedy(pair, prompt, 16)
    res = decode(pair, PROMPTS, method, max_new_tokens=16, key=1)
    np.testing.assert_array_equal(res.counts.oracle_calls, 0)
    np.testing.assert_array_equal(res.counts.draft_calls, res.counts.tokens)
    np.testing.assert_array_equal(res.counts.rejections, 0)
    for rec in res.records:
        np.testing.assert_array_equal(rec.loss_tv, rec.tv)
        np.testing.assert_array_equal(rec.reject_prob, 0.0)


def test_a_verifier_that_refuses_everything_is_sd_with_one_draft_and_no_bonus(pair):
    """Score 0.7 < τ = 0.8: every slot is refused, so every round drafts one token and calls the target on it; the
    law is the target's (greedy: SD's tokens), one target call per token, no bonus token ever."""
    method = Sprinter(verifier=constant(pair, 0.7), threshold=0.8)
    a = decode(pair, PROMPTS, method, max_new_tokens=16, sampling=Sampling(0.0), key=0)
    b = decode(pair, PROMPTS, SD(K=1), max_new_tokens=16, sampling=Sampling(0.0), key=0)
    assert a.tokens == b.tokens
    res = decode(pair, PROMPTS, method, max_new_tokens=16, key=2)
    np.testing.assert_array_equal(res.counts.oracle_calls, res.counts.tokens)
    np.testing.assert_array_equal(res.counts.draft_calls, res.counts.tokens)
    np.testing.assert_array_equal(res.counts.bonus, 0)
    for rec in res.records:
        np.testing.assert_allclose(rec.loss_tv, 0.0, rtol=0, atol=1e-12)  # the law is the target's (float round-off)
        np.testing.assert_allclose(rec.reject_prob, rec.tv, rtol=0, atol=1e-12)  # a refused slot is SD's check
    assert res.counts.rejections.sum() > 0


def test_the_verdicts_are_the_heads_on_the_previous_tokens_hidden_states(pair):
    """A verifier that depends on the hidden state: each round's verdicts equal the head recomputed offline (one
    uncached draft forward over the prompt, the output so far and the block) at the token before each slot; a round
    ends at its first refusal; a target call is counted for exactly the rounds with a refusal; each slot's TV to the
    target is its verdict times TV(p, q)."""
    head, threshold = random_head(pair, 3, kind="linear", depth=0, scale=8.0), 0.5
    infos = []
    res = decode(
        pair, PROMPTS[:2], Sprinter(verifier=head, threshold=threshold), max_new_tokens=24, key=8, on_round=infos.append
    )
    rounds = iter(infos)
    passes = refusals = 0
    for prompt, out, rec, rr, calls in zip(PROMPTS[:2], res.tokens, res.records, res.rounds, res.counts.oracle_calls):
        ids = pair.tokenizer.encode(prompt)
        done, called = 0, 0
        for drafted, accepted in zip(rr.drafted, rr.accepted):
            info = next(rounds)
            block = info.drafts[0].tolist()
            with torch.no_grad():
                hidden = pair.draft.model(
                    torch.tensor([ids + out[:done] + block], device=pair.device), output_hidden_states=True
                )
            scores = head(hidden.hidden_states[-1][0, -len(block) - 1 : -1]).tolist()  # at the token before each slot
            verdicts = [float(s >= threshold) for s in scores]
            assert info.predictions == verdicts
            assert all(verdicts[:-1])  # drafting stopped at the first refusal
            called += not verdicts[-1]
            tv = np.asarray(rec.tv[done : done + min(accepted, drafted) + (accepted < drafted)])
            np.testing.assert_allclose(rec.loss_tv[done : done + tv.size], tv * verdicts[: tv.size], atol=1e-12)
            passes += int(sum(verdicts))
            refusals += int(not verdicts[-1])
            done += accepted + (accepted < drafted)  # a refused slot the target rejects outputs its correction
        assert called == calls and done == len(out)
    assert passes > 5 and refusals > 5  # both verdicts occurred


@pytest.mark.slow
@pytest.mark.power
def test_the_first_tokens_law_is_the_random_verifiers_mixture(pair, record_property, agrees):
    """``threshold=None`` with a constant score ``c`` passes a slot with probability ``c`` whatever the context: the
    first
    token's law is ``c p + (1 − c) q`` exactly ([SPR] Thm 3.1 with ``η = c``). Tested by the share of first tokens in
    ``A = {p > q}``, whose law differs from the target's by ``c · TV(p, q)``; the same statistic refutes the
    target's law and the draft's at this sample size (power, computed from the exact laws)."""
    c, n = 0.4, 1500
    prompt = PROMPTS[0]
    res = decode(pair, [prompt] * n, Sprinter(verifier=constant(pair, c), threshold=None), max_new_tokens=1, key=11)
    ids = torch.tensor([pair.tokenizer.encode(prompt)], device=pair.device)
    with torch.no_grad():
        p = torch.softmax(pair.draft.model(ids).logits[0, -1, : pair.vocab_size].double(), -1).cpu().numpy()
        q = torch.softmax(pair.target.model(ids).logits[0, -1, : pair.vocab_size].double(), -1).cpu().numpy()
    in_a = p > q
    hits = np.mean([in_a[t[0]] for t in res.tokens])
    mix = c * p[in_a].sum() + (1 - c) * q[in_a].sum()
    se = math.sqrt(mix * (1 - mix) / n)
    assert abs(hits - mix) / se < 5
    for wrong, what in ((q[in_a].sum(), "a verifier refusing always"), (p[in_a].sum(), "a verifier passing always")):
        assert_power(
            record_property, f"SPRINTER real-model first-token mixture (N = {n:,}): {what}", power((wrong - mix) / se)
        )
    passed = res.counts.oracle_calls == 0  # one slot per run: passed iff no target call
    agrees(
        passed.mean(),
        c,
        "SPRINTER real-model pass rate",
        se=math.sqrt(c * (1 - c) / n),
        wrong=1 - c,
        alternative=f"SPRINTER real-model pass rate (N = {n:,}): the score read the wrong way round (1 − c)",
    )


def test_the_same_key_gives_the_same_run(pair):
    method = Sprinter(verifier=constant(pair, 0.6), threshold=None)
    a = decode(pair, PROMPTS, method, max_new_tokens=16, key=4)
    b = decode(pair, PROMPTS, method, max_new_tokens=16, key=4)
    assert a.tokens == b.tokens
    np.testing.assert_array_equal(a.counts.oracle_calls, b.counts.oracle_calls)


def test_a_score_equal_to_the_threshold_passes(pair):
    """[SPR]'s appendix algorithm passes at ``V ≥ τ`` (its §3 Algorithm 1 breaks at ``V ≤ τ``): a constant head
    scoring exactly 0.5 at ``τ = 0.5`` passes every slot — no target call, the draft's output."""
    head = constant(pair, 0.5)
    assert float(head(torch.zeros(width(pair)))) == 0.5
    res = decode(pair, PROMPTS, Sprinter(verifier=head, threshold=0.5), max_new_tokens=8, sampling=Sampling(0.0), key=0)
    np.testing.assert_array_equal(res.counts.oracle_calls, 0)
    for prompt, tokens in zip(PROMPTS, res.tokens):
        assert tokens == _draft_greedy(pair, prompt, 8)


def test_sprinter_on_real_models_refuses_what_it_cannot_run(pair):
    from speculab.sim import simulate
    from speculab.theory import MarkovInstance

    with pytest.raises(ValueError, match="needs a head trained on the draft's hidden states"):
        decode(pair, PROMPTS[:1], Sprinter(0.9, 0.1), max_new_tokens=4, key=0)
    narrow = TrainedHead(make_head(HeadConfig(d_in=3)), HeadConfig(d_in=3))
    with pytest.raises(ValueError, match="reads 3 features"):
        decode(pair, PROMPTS[:1], Sprinter(verifier=narrow), max_new_tokens=4, key=0)
    nan_head = constant(pair, 0.5)
    with torch.no_grad():
        nan_head.head.out.bias.fill_(float("nan"))
    with pytest.raises(ValueError, match="must be a probability"):
        decode(pair, PROMPTS[:1], Sprinter(verifier=nan_head), max_new_tokens=4, key=0)
    for threshold in ("0.5", float("nan"), True, 1.5, -1.0, float("inf")):
        with pytest.raises(ValueError, match=r"threshold must be a number in \[0, 1\]"):
            Sprinter(verifier=nan_head, threshold=threshold)
    inst = MarkovInstance.random(T=4, V=3, key=0)
    for run in (lambda m: simulate(inst, m, 10, key=0), lambda m: m.expected(inst)):
        with pytest.raises(ValueError, match="runs on real models only"):
            run(Sprinter(verifier=constant(pair, 0.5)))
    with pytest.raises(ValueError, match="needs the verifier's verdicts"):
        p = torch.full((1, 1, 2, 4), 0.25, dtype=torch.float64)
        Sprinter(0.9, 0.1).round_law(
            p, torch.full((1, 1, 3, 4), 0.25, dtype=torch.float64), torch.zeros((1, 1, 2), dtype=torch.long), bonus=True
        )


def test_the_iid_gaps_survive_runs_that_all_accept_the_same_share():
    """On CUDA every run of a pass share of 0.8 accepted all its drafts: a standard error of 0 over the runs, which
    ended the reproduction in a ZeroDivisionError (seen on an H100, not on this CPU's numerics)."""
    from speculab.repro.sprinter_tradeoff import _iid_gaps

    point = {
        "per_token_tv": 0.02,
        "per_token_tv_se": 0.005,
        "per_token_tv_s1": 0.01,
        "acceptance_rate": 1.0,
        "acceptance_rate_se": 0.0,
        "acceptance_rate_s4": 0.97,
    }
    assert _iid_gaps(point, runs=4) == {"s1_gap_in_se": pytest.approx(2.0), "s4_gap_in_se": math.inf}
    assert _iid_gaps({**point, "acceptance_rate_s4": 1.0}, runs=4)["s4_gap_in_se"] == 0.0


@pytest.mark.slow
def test_repro_sprinter_tradeoff(tmp_path, monkeypatch):
    import json

    from speculab.repro import sprinter_tradeoff as repro

    for name, value in (("LAMBDAS", (1.2,)), ("PASS_SHARES", (0.2, 0.8)), ("PREFIXES", 64), ("SD_KS", (1,))):
        monkeypatch.setattr(repro, name, value)
    monkeypatch.setattr("speculab.backends.pair.default_prompts", lambda: PROMPTS)
    result = repro.run(key=0, n_runs=1, out_dir=tmp_path, max_new_tokens=12)
    saved = json.loads((tmp_path / "sprinter_tradeoff.json").read_text())
    assert (tmp_path / "sprinter_tradeoff.png").stat().st_size > 0
    assert saved["prompts"] == len(PROMPTS) and set(saved["sprinter"]) == {"1.2"} and set(saved["sd"]) == {"1"}
    low, high = result["sprinter"]["1.2"]
    assert low["threshold"] > high["threshold"] and low["pass_share"] < high["pass_share"]
    assert low["target_calls_per_token"] > high["target_calls_per_token"]
    for t, r in zip(result["sprinter"]["1.2"], result["random_verifier"]["1.2"]):
        assert r["rate"] == t["pass_share"]
        for point in (t, r):
            assert 0 <= point["eta_fp"] <= 1 and 0 <= point["eta_tp"] <= 1
            # S1 at the TV-weighted pass rate is the measured TV exactly: each slot is one output position, its law p
            # or q
            assert point["per_token_tv"] == pytest.approx(
                point["eta_tv_weighted"] * point["draft_tv_per_slot"], rel=1e-9
            )
    assert result["sd"]["1"]["per_token_tv"] == 0.0
    assert "SPRINTER's per-token TV" in repro.summary(result)
    rows = {row["quantity"]: row for row in claims_of(repro, result)}
    assert rows["verifier AUC, held-out prefixes ([SPR]'s input: the previous token's hidden state)"]["measured"] == (
        f"{result['auc']['1.2']:.3f} (λ = 1.2)"
    )
    t = max(result["sprinter"]["1.2"], key=lambda t: abs(t["s4_gap_in_se"]))  # the setting furthest from S4
    row = rows["acceptance rate vs S4 at the measured η_FP (the furthest of the trained settings)"]
    assert row["theory"].startswith(f"S4: {t['acceptance_rate_s4']:.3f} (λ = 1.2, ")
    assert row["measured"].startswith(f"{t['acceptance_rate']:.3f} ± {t['acceptance_rate_se']:.3f} (")
