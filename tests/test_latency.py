"""The latency model: its regression on synthetic clocks, and what timed real runs record (no timing asserted)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from speculab.backends import load_pair  # noqa: E402
from speculab.backends.latency import LatencyModel, TimedRuns, fit_latency, timed_decode  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.counts import Counts  # noqa: E402
from speculab.methods import SD, Autoregressive  # noqa: E402


def _synthetic(draft_calls, oracle_calls, tokens, truth: dict):
    """Runs whose clock is exactly the model with ``truth``: calls of 1–2 draft tokens and L+1 target tokens."""
    calls, seconds = [], []
    for d, r, n in zip(draft_calls, oracle_calls, tokens):
        run = []
        L = d // r
        for _ in range(r):
            run += [(0, 1, 0.0)] * L + [(1, L + 1, 0.0)]
        run = [(w, k, truth["d0"] + truth["d1"] * k if w == 0 else truth["t0"] + truth["t1"] * k) for w, k, _ in run]
        calls += run
        seconds.append(sum(s for *_, s in run) + truth["round"] * r + truth["draft"] * d + truth["token"] * n
                       + truth["run"])
    z = np.zeros(len(tokens), dtype=np.int64)
    counts = Counts(rejections=z, oracle_calls=np.asarray(oracle_calls), draft_calls=np.asarray(draft_calls),
                    accepted=z, discarded=z, bonus=z, tokens=np.asarray(tokens))
    return TimedRuns(type("R", (), {"counts": counts})(), np.asarray(seconds), np.asarray(calls, dtype=float))


def test_the_fit_recovers_a_clock_that_follows_the_model():
    truth = {"d0": 1e-4, "d1": 2e-5, "t0": 2e-3, "t1": 3e-4, "round": 5e-4, "draft": 7e-5, "token": 1e-4, "run": 3e-3}
    runs = [_synthetic([0, 0, 0], [30, 28, 32], [30, 28, 32], truth),  # autoregressive
            _synthetic([20, 24, 30], [20, 24, 15], [30, 33, 32], truth),
            _synthetic([40, 48, 56], [10, 12, 14], [30, 31, 35], truth)]
    model = fit_latency(runs)
    assert model.target.base == pytest.approx(truth["t0"], rel=1e-9)
    assert model.target.per_token == pytest.approx(truth["t1"], rel=1e-9)
    assert model.draft(1) == pytest.approx(truth["d0"] + truth["d1"], rel=1e-9)
    assert model.per_round == pytest.approx(truth["round"], rel=1e-6)
    assert model.per_draft == pytest.approx(truth["draft"], rel=1e-6)
    assert model.per_run == pytest.approx(truth["run"], rel=1e-6)
    assert model.per_token == pytest.approx(truth["token"], rel=1e-6)
    for r in runs:
        np.testing.assert_allclose(model.seconds(r.result.counts), r.seconds, rtol=1e-9)


def test_fit_latency_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="TimedRuns"):
        fit_latency([])
    truth = {"d0": 0, "d1": 0, "t0": 1e-3, "t1": 0, "round": 0, "draft": 0, "token": 0, "run": 0}
    with pytest.raises(ValueError, match="no draft forward call"):
        fit_latency([_synthetic([0], [5], [5], truth)])


def test_timed_runs_record_every_forward_call_of_both_models():
    pair = load_pair("tiny", device="cpu")
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
    model = fit_latency([ar, sd])
    assert isinstance(model, LatencyModel) and model.latency(sd.result.counts) > 0


def test_compare_holds_the_predicted_speed_up_against_the_clock():
    """compare(..., speed=True) adds the latency model's rows (their values are timings: only their form is checked)."""
    from speculab.backends.latency import speed_check
    from speculab.compare import compare

    pair = load_pair("tiny", device="cpu")
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
