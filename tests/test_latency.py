"""The latency model: its regression on synthetic clocks, and what timed real runs record (no timing asserted)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import model_device  # noqa: E402

from speculab.backends import load_pair  # noqa: E402
from speculab.backends.latency import (  # noqa: E402
    LOOP_TERMS,
    ForwardFit,
    LatencyModel,
    TimedRuns,
    _fit_forward,
    fit_latency,
    timed_decode,
)
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.counts import Counts  # noqa: E402
from speculab.methods import SD, Autoregressive  # noqa: E402


def _synthetic(draft_calls, oracle_calls, tokens, truth: dict, target=None, bonus=None, draft=None):
    """Runs whose clock is exactly the model with ``truth``: per run a target prefill (the first round's call) and,
    when drafting, a draft prefill, then rounds of ``L`` one-token draft calls and one target call of ``L + 1``.
    ``target(k)`` prices a target call (default: the line ``t0 + t1 k``)."""
    target = target or (lambda k: truth["t0"] + truth["t1"] * k)
    draft = draft or (lambda k: truth["d0"] + truth["d1"] * k)
    bonus = bonus or [0] * len(tokens)
    calls, seconds = [], []
    for d, r, n, b in zip(draft_calls, oracle_calls, tokens, bonus):
        L = d // r
        run = [(1, 8 + L, truth["prefill"], 1)] + ([(0, 8, truth["draft_prefill"], 1)] if d else [])
        for i in range(r):
            catch_up = 2 if 0 < i <= b else 1  # after a round with a bonus, the draft is fed two tokens
            run += [(0, catch_up, draft(catch_up), 0)] + [(0, 1, draft(1), 0)] * (L - 1) if L else []
            run += [(1, L + 1, target(L + 1), 0)] if i else []
        calls += run
        seconds.append(
            sum(s for *_, s, _ in run)
            + truth["round"] * r
            + truth["draft"] * d
            + truth["token"] * n
            + truth["run"]
            + (truth["drafting_round"] * r if d else 0.0)
        )
    z = np.zeros(len(tokens), dtype=np.int64)
    counts = Counts(
        rejections=z,
        oracle_calls=np.asarray(oracle_calls),
        draft_calls=np.asarray(draft_calls),
        accepted=z,
        discarded=z,
        bonus=np.asarray(bonus),
        tokens=np.asarray(tokens),
    )
    return TimedRuns(
        type("R", (), {"counts": counts, "rounds": None})(), np.asarray(seconds), np.asarray(calls, dtype=float)
    )


TRUTH = {
    "d0": 1e-4,
    "d1": 2e-5,
    "t0": 2e-3,
    "t1": 3e-4,
    "round": 5e-4,
    "draft": 7e-5,
    "token": 1e-4,
    "run": 3e-3,
    "prefill": 4e-3,
    "draft_prefill": 1e-3,
    "drafting_round": 2e-4,  # a round that verifies drafts costs more loop time than an autoregressive one
}


def _runs(truth, target=None):
    return [
        _synthetic([0, 0, 0], [30, 16, 32], [30, 16, 32], truth, target),  # autoregressive
        _synthetic([20, 24, 30], [20, 24, 15], [30, 40, 22], truth, target),
        _synthetic([40, 48, 56], [10, 12, 14], [30, 31, 35], truth, target),
    ]


def test_the_fit_recovers_a_clock_that_follows_the_model():
    truth = TRUTH
    runs = _runs(truth)
    model = fit_latency(runs)
    assert model.target.base == pytest.approx(truth["t0"], rel=1e-9)
    assert model.target.per_token == pytest.approx(truth["t1"], rel=1e-9)
    assert model.target.sizes == (1, 2, 5)  # three calls of 3 tokens per run are too few (MIN_CALLS) for a mean
    assert model.target(3) == pytest.approx(truth["t0"] + 3 * truth["t1"], rel=1e-9)  # read off its neighbours
    assert model.draft(1) == pytest.approx(truth["d0"] + truth["d1"], rel=1e-9)
    assert model.per_round == pytest.approx(truth["round"], rel=1e-6)
    assert model.per_draft == pytest.approx(truth["draft"], rel=1e-6)
    assert model.per_run == pytest.approx(truth["run"] + truth["prefill"], rel=1e-6)  # the prefills are run costs
    assert model.per_drafting_run == pytest.approx(truth["draft_prefill"], rel=1e-6)
    assert model.per_drafting_round == pytest.approx(truth["drafting_round"], rel=1e-6)
    assert model.per_token == pytest.approx(truth["token"], rel=1e-6)
    for r in runs:
        np.testing.assert_allclose(model.seconds(r.result.counts), r.seconds, rtol=1e-9)


def test_a_forward_time_that_is_not_affine_in_the_tokens_fed_is_priced_per_size():
    """One token costs less than the line through the rest (no causal mask): a line through every call would misprice
    autoregressive decoding against SD; the table of means does not."""
    truth = {**TRUTH, "t0": 0.0, "t1": 0.0}
    target = {1: 1.0e-3, 2: 1.6e-3, 3: 1.7e-3, 5: 1.9e-3}.__getitem__
    runs = _runs(truth, target)
    model = fit_latency(runs)
    for k in (1, 2, 5):
        assert model.target(k) == pytest.approx(target(k), rel=1e-12)
    for r in runs:
        np.testing.assert_allclose(model.seconds(r.result.counts), r.seconds, rtol=1e-6)
    line = LatencyModel(
        ForwardFit(model.draft.base, model.draft.per_token, 0, 0),
        ForwardFit(model.target.base, model.target.per_token, 0, 0),
        *(getattr(model, k) for k in LOOP_TERMS),
    )
    ar = runs[0].result.counts
    assert abs(line.latency(ar) / model.latency(ar) - 1) > 0.05  # the line alone is off by more than 5 % here


def test_a_rare_call_size_does_not_enter_the_table_and_beyond_the_table_the_line_continues():
    k = np.array([1.0] * 30 + [2.0] * 30 + [3.0] * 2)
    t = np.where(k == 1, 1.0, 2.0)
    t[-1] = 50.0  # one slow call among the two of 3 tokens
    fit = _fit_forward(k, t)
    assert fit.sizes == (1, 2) and fit(1) == 1.0 and fit(2) == 2.0
    assert fit(4) == pytest.approx(2.0 + 2 * fit.per_token)  # the line's slope from the last size seen
    assert fit(0.5) == pytest.approx(1.0 - 0.5 * fit.per_token)
    np.testing.assert_allclose(fit(np.array([1.5, 2.0])), [1.5, 2.0])


def test_predictions_from_counts_alone_take_the_mean_block_and_refuse_misaligned_rounds():
    model = fit_latency(_runs(TRUTH))
    runs = _runs(TRUTH)[2]
    counts = runs.result.counts

    def rounds_of(drafted):  # no block fully accepted: these synthetic runs have no bonus
        return type("Rounds", (), {"drafted": np.asarray(drafted), "accepted": np.zeros(len(drafted), int)})()

    rounds = [rounds_of(np.full(int(r), d // r)) for d, r in zip(counts.draft_calls, counts.oracle_calls)]
    np.testing.assert_allclose(model.seconds(counts, rounds), model.seconds(counts), rtol=1e-12)
    uneven = [rounds_of([4] * (int(r) - 2) + [1, 7]) for r in counts.oracle_calls]
    t = fit_latency(
        _runs({**TRUTH, "t0": 0.0, "t1": 0.0}, {1: 1.0e-3, 2: 1.6e-3, 3: 1.7e-3, 5: 1.9e-3}.__getitem__)
    ).target
    model = LatencyModel(model.draft, t, 0.0, 0.0, 0.0)
    gap = t(2) + t(8) - 2 * t(5)  # two rounds of 4 drafts become one of 1 and one of 7: a target call each
    assert abs(gap) > 1e-4
    np.testing.assert_allclose(model.seconds(counts, uneven) - model.seconds(counts), gap, rtol=1e-9)
    with pytest.raises(ValueError, match="one RoundRecord per run"):
        model.seconds(counts, rounds[:1])


def test_fit_latency_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="TimedRuns"):
        fit_latency([])
    truth = {**TRUTH, "d0": 0, "d1": 0, "t1": 0}
    with pytest.raises(ValueError, match="no draft forward call"):
        fit_latency([_synthetic([0], [5], [5], truth)])


def test_timed_runs_record_every_forward_call_of_both_models():
    pair = load_pair("tiny", device=model_device())
    prompts = default_prompts()[:2]
    ar = timed_decode(pair, prompts, Autoregressive(), max_new_tokens=6, key=0)
    sd = timed_decode(pair, prompts, SD(K=3), max_new_tokens=6, key=0)
    for runs in (ar, sd):
        target = runs.calls[runs.calls[:, 0] == 1]
        assert len(target) == runs.result.counts.oracle_calls.sum()  # one target call per round
        assert runs.seconds.shape == (2,) and np.all(runs.seconds > 0)
    assert np.all(ar.calls[:, 0] == 1)  # autoregressive decoding never runs the draft
    drafted = sd.calls[sd.calls[:, 0] == 0]
    assert len(drafted) == sd.result.counts.draft_calls.sum()  # a round of L drafts makes L draft calls
    assert "extend" not in vars(pair.target) and "extend" not in vars(pair.draft)  # the clock is taken off again
    lengths = [len(pair.tokenizer(p)["input_ids"]) for p in prompts]
    for runs, models in ((ar, (1,)), (sd, (0, 1))):
        prefills = runs.calls[runs.calls[:, 3] == 1]
        assert sorted(prefills[:, 0]) == sorted(list(models) * 2)  # one per model per run
    first_target = sd.calls[(sd.calls[:, 0] == 1) & (sd.calls[:, 3] == 1), 1]
    np.testing.assert_array_equal(first_target, [n + 3 for n in lengths])  # the prompt and the first block
    model = fit_latency([ar, sd])
    assert isinstance(model, LatencyModel) and model.latency(sd.result.counts) > 0


def test_compare_holds_the_predicted_speed_up_against_the_clock():
    """compare(..., speed=True) adds the latency model's rows (their values are timings: only their form is checked)."""
    from speculab.backends.latency import speed_check
    from speculab.compare import compare

    pair = load_pair("tiny", device=model_device())
    comp = compare(pair, SD(K=2), default_prompts()[:4], runs_per_prompt=1, max_new_tokens=6, key=0, speed=True)
    rows = {r.quantity: r for r in comp.rows}
    speed = rows["speed-up over AR (latency model)"]
    ar, sd = rows["ms per token, AR"], rows["ms per token, SD"]
    assert speed.predicted == pytest.approx(ar.predicted / sd.predicted)
    assert speed.measured == pytest.approx(ar.measured / sd.measured)
    assert np.isnan(speed.z) and "fit on 2 prompts, measured on 2" in speed.note
    with pytest.raises(ValueError, match="at least 4"):
        speed_check(pair, ["one", "two"], SD(K=2), max_new_tokens=4, key=0)
    with pytest.raises(ValueError, match="at least 4 prompts"):  # before the comparison runs
        compare(pair, SD(K=2), ["one"], key=0, speed=True)


def test_each_timed_run_starts_with_the_drafts_memo_empty(monkeypatch):
    from speculab.backends import NGramModel

    tiny = load_pair("tiny", device=model_device())
    ngram = NGramModel(np.arange(400) % 50, 2, tiny.vocab_size)
    pair = load_pair(ngram, "tiny-target", device=model_device())
    sizes = []  # the memo's size before and after each clearing
    clear = ngram.clear_cache

    def spy():
        before = len(ngram._memo) + len(ngram._log_memo)
        clear()
        sizes.append((before, len(ngram._memo) + len(ngram._log_memo)))

    monkeypatch.setattr(ngram, "clear_cache", spy)
    timed_decode(pair, default_prompts()[:3], SD(K=2), max_new_tokens=4, key=0)
    assert len(sizes) == 3 and all(after == 0 for _, after in sizes)  # every run starts empty
    assert sizes[1][0] > 0 and sizes[2][0] > 0  # although the run before had memoised laws


def test_runs_of_one_length_cannot_separate_the_cost_per_token_from_the_cost_per_run():
    """Every run 32 tokens long: the token column is 32 × the run column, so per_token is not identified — it is
    named, set to 0 and its cost carried by per_run; nor is a drafting run's own cost told from its rounds' extra
    cost (an autoregressive run's rounds are all 32); runs of that length are still predicted exactly."""
    runs = [
        _synthetic([0, 0, 0], [32, 32, 32], [32, 32, 32], TRUTH),
        _synthetic([20, 24, 30], [20, 24, 15], [32, 32, 32], TRUTH),
        _synthetic([40, 48, 56], [10, 12, 14], [32, 32, 32], TRUTH),
    ]
    model = fit_latency(runs)
    assert model.unidentified == ("per_token", "per_drafting_round") and model.per_token == 0
    assert model.per_run == pytest.approx(
        TRUTH["run"] + TRUTH["prefill"] + 32 * (TRUTH["token"] - TRUTH["drafting_round"]), rel=1e-6
    )  # its AR rounds' cost at a drafting round's price: the rest is the AR run's
    for r in runs:
        np.testing.assert_allclose(model.seconds(r.result.counts), r.seconds, rtol=1e-9)
    assert fit_latency(_runs(TRUTH)).unidentified == ()  # runs of several lengths identify every term


def test_runs_of_one_length_whose_drafting_rounds_cost_more_keep_every_cost_non_negative():
    """Rounds that verify drafts cost 1 ms more than autoregressive ones, more than a run's own cost over 32 rounds:
    priced alike (no drafting-round term), or with the drafting run's own cost kept, the fit would need a negative
    cost per run; the fit keeps the drafting round's term instead and predicts every run exactly (on the tiny
    pair with its trigram draft the plan's autoregressive speed was 9 % off for want of it)."""
    truth = {**TRUTH, "drafting_round": 1e-3}
    runs = [
        _synthetic([0, 0, 0], [32, 32, 32], [32, 32, 32], truth),
        _synthetic([20, 24, 30], [20, 24, 15], [32, 32, 32], truth),
        _synthetic([40, 48, 56], [10, 12, 14], [32, 32, 32], truth),
    ]
    model = fit_latency(runs)
    assert model.unidentified == ("per_token", "per_drafting_run")
    for r in runs:
        np.testing.assert_allclose(model.seconds(r.result.counts), r.seconds, rtol=1e-9)


def test_a_catch_up_after_a_bonus_is_priced_as_a_two_token_draft_call():
    """After a bonus the next round's first draft call feeds two tokens; with a draft whose second token costs more
    than the line through one token predicts, the table prices those calls (one per bonus) exactly."""
    draft = {1: 1e-4, 2: 3e-4}.__getitem__
    runs = [
        _synthetic([0, 0, 0], [30, 16, 32], [30, 16, 32], TRUTH),
        _synthetic([20, 24, 30], [20, 24, 15], [30, 40, 22], TRUTH, bonus=[0, 0, 0], draft=draft),
        _synthetic([40, 48, 56], [10, 12, 14], [30, 31, 35], TRUTH, bonus=[9, 11, 13], draft=draft),
        _synthetic([40, 48, 56], [20, 24, 28], [36, 40, 44], TRUTH, bonus=[0, 1, 2], draft=draft),
    ]
    model = fit_latency(runs)
    assert model.draft(2) == pytest.approx(3e-4, rel=1e-12) and model.draft(1) == pytest.approx(1e-4, rel=1e-12)
    for r in runs:
        np.testing.assert_allclose(model.seconds(r.result.counts), r.seconds, rtol=1e-9)


def test_the_latency_model_is_exact_on_a_clock_that_only_forward_calls_move(monkeypatch):
    """On a virtual clock that advances only in forward calls — ``a + b·k`` for a call of ``k`` tokens, a fixed cost
    for a prefill, nothing for anything else — the fitted model must price every run exactly: predicted and measured
    seconds per token agree for AR and SD, hence the speed-up (the numbers of a real clock are checked in
    ``benchmarks/bench_latency.py``; a mispriced term, e.g. a bonus's two-token draft call, breaks this equality)."""
    import speculab.backends.latency as latency

    class Clock:
        now = 0.0

        def perf_counter(self):
            return self.now

    clock = Clock()
    monkeypatch.setattr(latency, "time", clock)
    pair = load_pair("tiny", device=model_device())
    cost = {0: (2e-3, 0.5e-3, 7e-3), 1: (30e-3, 3e-3, 40e-3)}  # per model: a, b, prefill
    assert type(pair.draft) is type(pair.target)
    original = type(pair.draft).extend

    def charged(self, state, ids, **kw):  # on the class: the timing wrapper goes on (and comes off) the instances
        a, b, prefill = cost[0 if self is pair.draft else 1]
        clock.now += prefill if state.length == 0 else a + b * ids.shape[-1]
        return original(self, state, ids, **kw)

    monkeypatch.setattr(type(pair.draft), "extend", charged)
    check = latency.speed_check(pair, default_prompts()[:8], SD(K=3), max_new_tokens=12, key=2)
    np.testing.assert_allclose(check.predicted_latency, check.latency, rtol=1e-9)
    assert check.predicted == pytest.approx(check.measured, rel=1e-9)
    assert check.measured > 1.1  # a target call costs over ten draft calls here: SD is faster, measurably
