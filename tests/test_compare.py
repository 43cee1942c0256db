"""What ``compare`` prints, against independent computations on synthetic records whose answers are known.

The sign convention is z = (measured − predicted) / s.e. (a measurement above its prediction has z > 0), and each
standard error scales as 1/√n with the records (doubling them divides it by √2): a flipped sign or a standard
error scaled by another power of n fails here, in compare's own tests.
"""

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

from speculab.compare import Row, paired_accepted, paired_rejections, side_by_side
from speculab.counts import BONUS, CORRECTION, DRAFT, Counts, Expected
from speculab.methods import SD


def _record(kinds, reject):
    n = len(kinds)
    return SimpleNamespace(kind=np.asarray(kinds), reject_prob=np.asarray(reject, float), tv=np.full(n, np.nan))


def _rounds(accepted, mean, var):
    return SimpleNamespace(
        drafted=np.full(len(accepted), 3),
        accepted=np.asarray(accepted),
        expected_accepted=np.asarray(mean, float),
        var_accepted=np.asarray(var, float),
    )


def _counts(rejections, tokens):
    zeros = np.zeros(len(rejections), dtype=np.int64)
    return Counts(
        rejections=np.asarray(rejections),
        oracle_calls=zeros,
        draft_calls=zeros,
        accepted=zeros,
        discarded=zeros,
        bonus=zeros,
        tokens=np.asarray(tokens),
    )


def _result(records, rounds, rejections, tokens):
    return SimpleNamespace(records=records, rounds=rounds, counts=_counts(rejections, tokens))


RUNS = [([DRAFT, CORRECTION, DRAFT, BONUS], [0.2, 0.5, 0.1, 0.0]), ([CORRECTION, DRAFT, CORRECTION], [0.9, 0.3, 0.4])]


def test_a_rows_z_is_measured_minus_predicted_over_the_combined_se():
    row = Row("x", predicted=2.0, measured=2.6, predicted_se=0.3, measured_se=0.4)
    assert row.z == pytest.approx(0.6 / 0.5)
    assert Row("x", 2.0, 1.4, 0.3, 0.4).z == pytest.approx(-0.6 / 0.5)
    assert math.isnan(Row("x", 2.0, 1.0, upper_bound=True).z) and Row("x", 2.0, 1.0, upper_bound=True).holds


def test_paired_rejections_by_hand_and_its_se_scales_as_one_over_root_n():
    """Σ r over every position against the counted rejections, per run and per token; s.e. √(Σ r(1 − r)) / n."""
    records = [_record(k, r) for k, r in RUNS]
    result = _result(records, [], [1, 2], [4, 3])
    r = np.concatenate([r for _, r in RUNS])
    for per, n in (("run", 2), ("token", 7)):
        row = paired_rejections(result, per=per)
        assert row.predicted == pytest.approx(r.sum() / n) and row.measured == pytest.approx(3 / n)
        assert row.predicted_se == pytest.approx(math.sqrt(np.sum(r * (1 - r))) / n) and row.measured_se == 0
        assert row.z == pytest.approx((3 - r.sum()) / math.sqrt(np.sum(r * (1 - r))))  # sign: measured − predicted
        assert row.z > 0  # 3 counted against Σ r = 2.4: more rejections than predicted
    doubled = paired_rejections(_result(records * 2, [], [1, 2, 1, 2], [4, 3, 4, 3]))
    single = paired_rejections(result)
    assert doubled.predicted == pytest.approx(single.predicted) and doubled.measured == pytest.approx(single.measured)
    assert doubled.predicted_se == pytest.approx(single.predicted_se / math.sqrt(2))
    assert doubled.z == pytest.approx(single.z * math.sqrt(2))


def test_paired_accepted_by_hand_and_its_se_scales_as_one_over_root_n():
    """Mean accepted drafts per round against the mean of E[τ | block]; s.e. √(Σ Var[τ | block]) / rounds."""
    rounds = [_rounds([3, 0], [2.0, 1.5], [0.5, 0.7]), _rounds([1], [1.0], [0.6])]
    result = _result([], rounds, [0], [0])
    row = paired_accepted(result)
    assert row.predicted == pytest.approx(4.5 / 3) and row.measured == pytest.approx(4 / 3)
    assert row.predicted_se == pytest.approx(math.sqrt(1.8) / 3)
    assert row.z == pytest.approx((4 / 3 - 1.5) / (math.sqrt(1.8) / 3)) and row.z < 0  # fewer accepted than predicted
    doubled = paired_accepted(_result([], rounds * 2, [0], [0]))
    assert doubled.predicted_se == pytest.approx(row.predicted_se / math.sqrt(2))
    assert doubled.z == pytest.approx(row.z * math.sqrt(2))
    assert paired_accepted(_result([], [_rounds([], [], [])], [0], [0])) is None  # no drafts: no row


def test_side_by_side_pairs_each_count_with_its_own_expectation():
    """Each simulated count beside the expectation of the same name, z = (mean − expected) / s.e. of the mean."""
    rng = np.random.default_rng(0)
    fields = {
        k: rng.integers(0, 20, size=50)
        for k in ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus", "tokens")
    }
    counts = Counts(**fields)
    expected = Expected(
        rejections=9.0,
        oracle_calls=10.0,
        draft_calls=9.5,
        accepted=11.0,
        discarded=8.0,
        bonus=7.0,
        tokens=10.5,
        source="made up",
    )
    comp = side_by_side(expected, counts)
    for row in comp.rows:
        if row.quantity not in fields:  # a count derived from the others (tokens per round): measured only
            assert math.isnan(row.predicted) and row.note == "measured only"
            continue
        x = fields[row.quantity]
        se = x.std(ddof=1) / math.sqrt(x.size)
        assert row.predicted == getattr(expected, row.quantity)
        assert row.measured == pytest.approx(x.mean()) and row.measured_se == pytest.approx(se)
        assert row.z == pytest.approx((x.mean() - row.predicted) / se)
    assert {row.quantity for row in comp.rows} >= set(fields)


def test_a_rows_power_is_the_chance_of_refusing_a_prediction_ten_percent_off():
    """``power`` against a truth 10 % off the prediction, at the |z| < 5 bound: closed form, and by simulating z."""
    from speculab.rows import Comparison

    row = Row("x", predicted=10.0, measured=10.1, predicted_se=0.09, measured_se=0.12)  # s.e. 0.15: d = 1/0.15
    d = 1.0 / 0.15
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    assert row.power() == pytest.approx(phi(d - 5) + phi(-d - 5), rel=1e-12) and 0.9 < row.power() < 0.99
    z = np.random.default_rng(0).normal(d, 1.0, 400_000)  # z's law under the wrong truth
    refused = np.mean(np.abs(z) >= 5)
    assert abs(refused - row.power()) < 5 * math.sqrt(row.power() * (1 - row.power()) / z.size)
    assert Row("x", 10.0, 10.0, 0.0, 0.3).power(0.2) > Row("x", 10.0, 10.0, 0.0, 0.3).power()  # a larger error
    assert Row("x", -10.0, -10.0, 0.0, 0.15).power() == row.power()  # |predicted|: the sign does not matter
    for quiet in (Row("x", 1.0, 1.0, tolerance=1e-9), Row("x", 1.0, 0.5, upper_bound=True), Row("x", math.nan, 1.0)):
        assert math.isnan(quiet.power())
    assert Row("x", 2.0, 2.0).power() == 1.0  # no noise
    assert math.isnan(Row("x", 0.0, 0.0).power()) and math.isnan(Row("x", 0.0, 0.1, 0.0, 0.05).power())  # 10 % of 0
    comp = Comparison("t", [row, Row("y", 1.0, 1.0, tolerance=1e-9)])
    assert [r["power"] for r in comp.to_dict()["rows"]][0] == row.power()
    assert f"{row.power():.3f}" in str(comp) and "power (10%)" in str(comp)


def test_compare_takes_drafting_methods_on_real_models_only():
    """Autoregressive decoding drafts nothing (it is the reference the others are measured against) and optimal
    multi-draft verification does not run on real models: ``compare`` refuses both before loading anything, and
    lists the methods it takes; the command line offers only those."""
    from speculab.cli import main
    from speculab.compare import compare
    from speculab.methods import Autoregressive, OptimalMultiDraft, get, names

    takers = [n for n in names(real_models=True) if n != "ar"]
    assert [n for n in names(real_models=True) if get(n).drafting] == takers
    for method in (Autoregressive(), OptimalMultiDraft(2), "sd"):
        with pytest.raises(
            ValueError,
            match="method must be a drafting method that runs on real models, one of " + re.escape(str(takers)),
        ):
            compare(None, method, key=0)
    assert main(["compare", "--pair", "tiny", "--method", "ar"]) == 2


def test_the_command_line_and_python_compare_the_same_runs_by_default():
    """``speculab compare`` and ``compare(pair, method, key=…)`` decode the same number of runs per prompt and
    tokens per run when neither is given: the command line's defaults are the function's."""
    import inspect

    from speculab.cli import build_parser
    from speculab.compare import compare

    defaults = {k: p.default for k, p in inspect.signature(compare).parameters.items()}
    args = build_parser().parse_args(["compare", "--pair", "tiny"])
    assert (args.runs_per_prompt, args.max_new_tokens) == (defaults["runs_per_prompt"], defaults["max_new_tokens"])


@pytest.mark.parametrize("name", ["sd", "block", "batch"])
def test_each_decode_of_a_comparison_draws_from_its_own_stream(name, monkeypatch):
    """A comparison decodes the method, and for some methods a baseline (SD for block verification and batch SD)
    and target samples: each from its own slot of the key's streams, so no two of its rows share random draws."""
    pytest.importorskip("torch")
    from speculab.backends import load_pair
    from speculab.compare import Context, compare
    from speculab.methods import SD, BatchSD, BlockVerification

    slots = []
    real = Context.decode

    def spy(self, method, slot, **kwargs):
        slots.append(slot)
        return real(self, method, slot, **kwargs)

    monkeypatch.setattr(Context, "decode", spy)
    method = {"sd": SD(), "block": BlockVerification(2), "batch": BatchSD(2, K=2)}[name]
    compare(load_pair("tiny"), method, ["Return the"], runs_per_prompt=2, max_new_tokens=4, key=0)
    assert len(slots) >= 1 + (name != "sd") and len(slots) == len(set(slots)), slots


def _fake_speed_check(seen):
    from speculab.backends.latency import SpeedCheck

    def speed_check(pair, prompts, method, *, max_new_tokens, key, sampling):
        seen.append(key)
        return SpeedCheck(
            model=None,
            predicted=1.5,
            measured=1.25,
            latency=(0.004, 0.002),
            predicted_latency=(0.0035, 0.0025),
            fit_prompts=2,
            test_prompts=len(prompts) - 2,
        )

    return speed_check


def test_speed_rows_print_the_latency_models_numbers_in_milliseconds_from_their_own_stream(monkeypatch):
    """``compare(speed=True)``'s rows are the speed check's numbers (times per token in ms, predicted beside
    measured), and the check draws from the comparison's eighth stream, its own; exactly ``SPEED_PROMPTS`` prompts
    are enough. The speed check itself (timed decoding) is replaced here: tests/test_latency.py holds it."""
    pytest.importorskip("torch")
    import speculab.backends.latency as latency
    from speculab._validate import spawn_seeds
    from speculab.backends import load_pair
    from speculab.compare import compare

    seen = []
    monkeypatch.setattr(latency, "speed_check", _fake_speed_check(seen))
    prompts = ["Return the", "It was", "The value", "A list"][: latency.SPEED_PROMPTS]
    comp = compare(load_pair("tiny"), SD(K=2), prompts, runs_per_prompt=1, max_new_tokens=3, key=4, speed=True)
    rows = {r.quantity: r for r in comp.rows}
    assert (rows["speed-up over AR (latency model)"].predicted, rows["speed-up over AR (latency model)"].measured) == (
        1.5,
        1.25,
    )
    assert rows["ms per token, AR"].predicted == pytest.approx(3.5) and rows["ms per token, AR"].measured == 4.0
    assert rows["ms per token, SD"].predicted == pytest.approx(2.5) and rows["ms per token, SD"].measured == 2.0
    assert seen == [spawn_seeds(4, 8)[7]]


def test_speed_rows_say_where_they_were_timed(monkeypatch):
    """``compare(speed=True)`` records torch's threads, the CPUs and the load average (faked: 0.5 at the start of
    the timings, 3.0 at the end) in its settings and says them beside the speed-up."""
    pytest.importorskip("torch")
    import torch

    import speculab.backends.latency as latency
    from speculab.backends import load_pair
    from speculab.compare import compare

    monkeypatch.setattr(latency, "speed_check", _fake_speed_check([]))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    loads = iter([0.5, 3.0])
    monkeypatch.setattr("os.getloadavg", lambda: (next(loads), 1.0, 1.0))
    prompts = ["Return the", "It was", "The value", "A list"][: latency.SPEED_PROMPTS]
    comp = compare(load_pair("tiny"), SD(K=2), prompts, runs_per_prompt=1, max_new_tokens=3, key=4, speed=True)
    threads = torch.get_num_threads()
    settings = comp.to_dict()["settings"]
    assert [settings[k] for k in ("threads", "cpus", "load_at_start", "load_at_end")] == [threads, 2, 0.5, 3.0]
    note = {r.quantity: r for r in comp.rows}["speed-up over AR (latency model)"].note
    assert note.endswith(f"torch on {threads} thread{'s' if threads != 1 else ''} of 2 CPUs, load average 0.5 → 3.0")


def test_speed_refuses_too_few_prompts_and_trees_only_with_speed(monkeypatch):
    pytest.importorskip("torch")
    from speculab.backends import load_pair
    from speculab.backends.latency import SPEED_PROMPTS
    from speculab.compare import compare
    from speculab.methods import RRS

    pair = load_pair("tiny")
    with pytest.raises(ValueError, match=f"speed=True needs at least {SPEED_PROMPTS} prompts"):
        compare(pair, SD(), ["Return the"] * (SPEED_PROMPTS - 1), key=0, speed=True)
    with pytest.raises(ValueError, match="does not price"):
        compare(pair, RRS((2,)), ["Return the"], key=0, speed=True)
    comp = compare(pair, RRS((2,)), ["Return the"], runs_per_prompt=1, max_new_tokens=2, key=0)
    assert comp.rows  # a tree without speed rows is compared


def test_target_calls_per_token_is_calls_over_tokens_of_the_methods_runs(monkeypatch):
    """The measured-only row is the ratio of sums over the method's own runs (found by mutation testing: the ratio
    inverted left every test green)."""
    pytest.importorskip("torch")
    from speculab.backends import load_pair
    from speculab.compare import Context, compare

    results = []
    real = Context.decode

    def spy(self, method, slot, **kwargs):
        out = real(self, method, slot, **kwargs)
        results.append(out)
        return out

    monkeypatch.setattr(Context, "decode", spy)
    comp = compare(load_pair("tiny"), SD(K=2), ["Return the"], runs_per_prompt=2, max_new_tokens=6, key=3)
    counts = results[0].counts
    row = next(r for r in comp.rows if r.quantity == "target calls per token")
    assert row.measured == pytest.approx(counts.oracle_calls.sum() / counts.tokens.sum(), rel=1e-15)
    assert 0 < row.measured < 1  # SD with two drafts a round: fewer calls than tokens


def test_a_comparison_prints_k_as_infinity_and_records_the_methods_constructor():
    """The table is for people (``SD(K=∞)``, as the docs write it, and a legend below it); ``--json`` keeps the
    constructor ``SD(K=None)``."""
    pytest.importorskip("torch")
    from speculab.backends import load_pair
    from speculab.compare import compare

    comp = compare(load_pair("tiny"), SD(), ["Return the"], runs_per_prompt=2, max_new_tokens=4, key=0)
    text = str(comp)
    assert text.startswith("theory vs measured: SD(K=∞) on the tiny pair\npair=tiny, method=SD(K=∞), ")
    assert "K=None" not in text and "  power (10%): the chance of |z| ≥ 5" in text
    assert comp.to_dict()["settings"]["method"] == "SD(K=None)"


def _sd_context(t1_runs, rejections, calls, tokens, tvs):
    """A comparison's context by hand: Thm 1's per-run sums along target samples (``t1_runs``), SD's runs' counts
    and the TV at each verified position of its runs (NaN where the position was not verified)."""
    from speculab.compare import Context

    counts = _counts(rejections, tokens)
    counts = Counts(**{**{f: getattr(counts, f) for f in counts.__dataclass_fields__}, "oracle_calls": np.array(calls)})
    result = SimpleNamespace(counts=counts, records=[SimpleNamespace(tv=np.asarray(tv, float)) for tv in tvs])
    reference = SimpleNamespace(records=[SimpleNamespace(tv=np.array([t, np.nan, 0.0])) for t in t1_runs])
    ctx = Context(pair=None, prompts=[], max_new_tokens=0, sampling=None, seeds=[], result=result)
    ctx.__dict__["reference"] = reference  # the cached autoregressive runs
    return ctx


def _se(x):
    x = np.asarray(x, float)
    return float(np.std(x, ddof=1) / np.sqrt(x.size))


T1_RUNS, REJECTIONS, CALLS, TOKENS = [3.0, 5.0, 4.5, 2.5], [4, 6, 7], [9, 11, 10], [16, 16, 16]
TVS = [[0.25, np.nan, 0.5], [0.0, 1.0], [np.nan, 0.25]]


def test_sds_thm_1_row_is_the_two_sample_comparison_by_hand():
    """K = ∞: Thm 1's Σ E_q[TV] per run from the target's samples against SD's rejections per run, each with its
    own s.e.; z = (measured − theory)/s.e.; twice the runs, each s.e. over √2 (of a sample's s.e. with ddof 1)."""
    (row,) = SD().compare_rows(_sd_context(T1_RUNS, REJECTIONS, CALLS, TOKENS, TVS))
    assert row.quantity.startswith("E[N_rej]") and not row.upper_bound and row.tolerance is None
    assert (row.predicted, row.measured) == pytest.approx((np.mean(T1_RUNS), np.mean(REJECTIONS)), abs=1e-15)
    assert (row.predicted_se, row.measured_se) == pytest.approx((_se(T1_RUNS), _se(REJECTIONS)), abs=1e-15)
    want_z = (np.mean(REJECTIONS) - np.mean(T1_RUNS)) / math.hypot(_se(T1_RUNS), _se(REJECTIONS))
    assert row.z == pytest.approx(want_z, abs=1e-12) and row.z > 0
    (twice,) = SD().compare_rows(_sd_context(T1_RUNS * 2, REJECTIONS * 2, CALLS * 2, TOKENS * 2, TVS * 2))
    assert twice.predicted == pytest.approx(row.predicted) and twice.measured == pytest.approx(row.measured)
    for n, se, se2 in ((4, row.predicted_se, twice.predicted_se), (3, row.measured_se, twice.measured_se)):
        assert se2 == pytest.approx(se / math.sqrt(2) * math.sqrt((n - 1) / (n - 0.5)), rel=1e-12)


def test_sds_finite_k_rows_are_leviathans_model_check_and_thm_1s_upper_bound_by_hand():
    """K = 4: target calls per run against Leviathan's i.i.d. model at α = 1 − mean TV along SD's own verified
    positions (a model check with the calls' s.e. only), and SD's rejections below Thm 1 (one-sided)."""
    leviathan, bound = SD(K=4).compare_rows(_sd_context(T1_RUNS, REJECTIONS, CALLS, TOKENS, TVS))
    alpha = 1 - np.mean([0.25, 0.5, 0.0, 1.0, 0.25])
    per_round = sum(alpha**i for i in range(5))
    assert f"α={alpha:.3f}" in leviathan.quantity and "model check" in leviathan.note
    assert (leviathan.predicted, leviathan.measured) == pytest.approx((16 / per_round, 10.0), abs=1e-12)
    assert (leviathan.predicted_se, leviathan.measured_se) == (0.0, pytest.approx(_se(CALLS), abs=1e-15))
    assert leviathan.z == pytest.approx((10.0 - 16 / per_round) / _se(CALLS), abs=1e-12)
    assert bound.upper_bound and (bound.predicted, bound.measured) == pytest.approx((3.75, 17 / 3), abs=1e-12)
    margin = 5 * math.hypot(_se(T1_RUNS), _se(REJECTIONS))
    assert bound.holds == (17 / 3 <= 3.75 + margin)
    (only,) = SD(K=4).compare_rows(_sd_context(T1_RUNS, REJECTIONS, CALLS, TOKENS, [[np.nan], [np.nan], []]))
    assert only.upper_bound  # nothing verified: no acceptance rate to model, the bound alone
    (above,) = SD(K=4).compare_rows(_sd_context([1.0, 1.1, 0.9, 1.0], [9, 10, 11], CALLS, TOKENS, [[], [], []]))
    assert above.holds is False  # rejections far above Thm 1 fail the one-sided check
