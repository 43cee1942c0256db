"""Fuzzy SD ([FSD] §4, App. B; SPEC F): exact laws, Monte Carlo (|z| < 5), enumeration, the bound."""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from _enumerate import enumerate_decoding
from _enumerate import sequence_law as brute_law
from conftest import Z_BOUND, assert_frozen, assert_power, binomial_se, claims_of, power
from speculab import work_budget
from speculab._validate import TooLarge
from speculab.sim import Fuzzy, simulate
from speculab.testing import markov_instances
from speculab.theory import MarkovInstance, chain_marginals
from speculab.theory.fuzzy import (
    MAX_ENUMERATION,
    chain_kl,
    fuzzy_bound_check,
    fuzzy_divergence,
    fuzzy_output_law,
    fuzzy_profile,
    fuzzy_sequence_law,
    sequence_divergence,
    sequence_law,
)

N = 40_000
DIVS = ["js", "kl", "kl_reverse", "tv"]


def _inst(seed=0, T=10, V=4):
    return MarkovInstance.random(T, V, seed, concentration=0.7)


def _above_max(inst, div):
    d = fuzzy_divergence(inst, div)
    return float(d[np.isfinite(d)].max()) + 1.0


# -- brute force (independent of speculab.theory.fuzzy) --------------------------------------------
def _kl(a: dict, b: dict) -> float:
    total = 0.0
    for k, w in a.items():
        if b.get(k, 0.0) == 0.0:
            return np.inf
        total += w * np.log(w / b[k])
    return total


def _js(a: dict, b: dict) -> float:
    m = {k: 0.5 * (a.get(k, 0.0) + b.get(k, 0.0)) for k in set(a) | set(b)}
    return 0.5 * _kl(a, m) + 0.5 * _kl(b, m)


def _tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


# -- the two extremes --------------------------------------------------------------------
@pytest.mark.parametrize("div", DIVS)
def test_theta_zero_is_autoregressive_from_the_target(div):
    inst = _inst(1)
    np.testing.assert_array_equal(fuzzy_output_law(inst, 0.0, div), inst.Q)
    prof = fuzzy_profile(inst, 0.0, div)
    assert prof.draft_fraction == 0 and prof.rejections == pytest.approx(inst.T, abs=1e-12)
    np.testing.assert_allclose(prof.rejections_per_position, 1.0)
    assert prof.kl_forward == 0 and prof.kl_reverse == 0 and prof.bound == 0
    c = simulate(inst, Fuzzy(0.0, div), 2_000, key=2, return_sequences=True)
    np.testing.assert_array_equal(c.rejections, inst.T)  # every token rejected
    np.testing.assert_array_equal(c.oracle_calls, inst.T)
    np.testing.assert_array_equal(c.accepted, 0)


@pytest.mark.parametrize("div", DIVS)
def test_theta_above_every_divergence_is_pure_draft_decoding(div):
    inst = _inst(2)
    theta = _above_max(inst, div)
    np.testing.assert_array_equal(fuzzy_output_law(inst, theta, div), inst.P)
    prof = fuzzy_profile(inst, theta, div)
    assert_frozen(prof)
    assert prof.draft_fraction == 1 and prof.rejections == 0
    assert prof.kl_forward == pytest.approx(chain_kl(inst.rho, inst.Q, inst.P).sum())
    c = simulate(inst, Fuzzy(theta, div), 2_000, key=3)
    np.testing.assert_array_equal(c.rejections, 0)
    np.testing.assert_array_equal(c.oracle_calls, 1)  # K = ∞: a single round


# -- exact law vs simulation ----------------------------------------------------------------
@pytest.mark.parametrize("div, K", [("js", None), ("kl", None), ("kl_reverse", None), ("tv", 100)])
def test_exact_law_and_rejections_vs_simulation(div, K, agrees):
    inst = _inst(4, T=12, V=4)
    theta = float(np.median(fuzzy_divergence(inst, div)))  # about half the contexts accept
    law = fuzzy_output_law(inst, theta, div)
    prof = fuzzy_profile(inst, theta, div)
    assert 0.1 < prof.draft_fraction < 0.9
    c = simulate(inst, Fuzzy(theta, div, K=K), N, key=5, return_sequences=True)
    mu = chain_marginals(inst.rho, law)
    for n in range(inst.T + 1):
        freq = np.bincount(c.sequences[:, n], minlength=inst.V) / N
        agrees(freq, mu[n], f"marginal law of x_{n}", se=binomial_se(mu[n], N))
    n = 5
    joint = np.zeros((inst.V, inst.V))
    np.add.at(joint, (c.sequences[:, n], c.sequences[:, n + 1]), 1.0 / N)
    exact = mu[n][:, None] * law[n]
    agrees(joint, exact, f"pair law of (x_{n}, x_{n + 1})", se=binomial_se(exact, N))
    agrees(c.estimate("rejections"), prof.rejections, "rejections")
    rate = prof.rejections_per_position
    np.testing.assert_allclose(rate, 1 - prof.accepted_per_position, atol=1e-12)  # K = ∞: no bonus
    agrees(c.rejections_per_position, rate, "rejection rate per position", se=binomial_se(rate, N))
    agrees(c.estimate("accepted"), inst.T * prof.draft_fraction, "accepted")


@pytest.mark.parametrize("K", [None, 1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_finite_lookahead_law_matches_literal_enumeration(K, seed):
    """With finite K the bonus token comes from q: the phase-aware law and counts match a literal
    enumeration of Algorithm 2 (tests/_enumerate.py), and differ from the K = ∞ chain."""
    inst = MarkovInstance.random(4, 3, seed, concentration=0.7)
    theta = float(np.quantile(fuzzy_divergence(inst, "js"), 0.7))
    B, R = Fuzzy(theta, "js").rule(inst.P, inst.Q)
    e = enumerate_decoding(inst.P, inst.Q, inst.rho, B, R, K)
    joint = fuzzy_sequence_law(inst, theta, "js", K)
    assert max(abs(joint[k] - w) for k, w in e.law.items()) < 1e-12
    assert joint.sum() == pytest.approx(1.0)
    prof = fuzzy_profile(inst, theta, "js", K)
    assert prof.rejections == pytest.approx(e.rejections, abs=1e-12)
    assert prof.bonus == pytest.approx(e.bonus, abs=1e-12)
    assert inst.T * prof.draft_fraction == pytest.approx(e.accepted, abs=1e-12)
    lq = brute_law(inst.Q, inst.rho)
    assert prof.kl_forward == pytest.approx(_kl(lq, e.law), abs=1e-10)
    assert prof.kl_reverse == pytest.approx(_kl(e.law, lq), abs=1e-10)
    markov = sequence_law(inst.rho, fuzzy_output_law(inst, theta, "js"))
    if K is None:
        np.testing.assert_allclose(joint, markov, atol=1e-15)
    elif K == 1 and prof.bonus > 0.01:
        assert np.abs(joint - markov).max() > 1e-3


@pytest.mark.parametrize("K", [1, 3])
def test_finite_lookahead_vs_simulation(K, agrees):
    inst = MarkovInstance.random(7, 3, 6, concentration=0.7)
    theta = float(np.quantile(fuzzy_divergence(inst, "kl"), 0.6))
    joint = fuzzy_sequence_law(inst, theta, "kl", K)
    prof = fuzzy_profile(inst, theta, "kl", K)
    c = simulate(inst, Fuzzy(theta, "kl", K=K), N, key=8, return_sequences=True)
    for n in range(inst.T + 1):
        mu = joint.sum(axis=tuple(i for i in range(inst.T + 1) if i != n))
        freq = np.bincount(c.sequences[:, n], minlength=inst.V) / N
        agrees(freq, mu, f"marginal law of x_{n}", se=binomial_se(mu, N))
    for name, exact in (
        ("rejections", prof.rejections),
        ("bonus", prof.bonus),
        ("accepted", inst.T * prof.draft_fraction),
    ):
        agrees(c.estimate(name), exact, name)


@pytest.mark.power
def test_the_simulation_check_can_fail(record_property):
    """The same data are far from the law of a neighbouring threshold (the 80th percentile of the divergences
    for the median), in standard errors of the same simulation."""
    inst = _inst(4, T=12, V=4)
    d = np.sort(fuzzy_divergence(inst, "js").ravel())
    theta = float(np.median(d))
    c = simulate(inst, Fuzzy(theta, "js"), N, key=5)
    other = fuzzy_profile(inst, float(d[int(0.8 * d.size)]), "js")
    shift = (other.rejections - fuzzy_profile(inst, theta, "js").rejections) / c.estimate("rejections").se
    assert_power(record_property, f"FSD rejections vs its profile (N = {N:,}): a neighbouring threshold", power(shift))
    assert abs(c.estimate("rejections").z(other.rejections)) > Z_BOUND


# -- sequence level: chain rule vs enumeration ------------------------------------------------------
def _not_subnormal(inst):
    """Entries in (0, 1e-12) make products underflow in the brute-force reference."""
    arrs = (inst.P, inst.Q, inst.rho)
    return all(not np.any((a > 0) & (a < 1e-12)) for a in arrs)


@given(markov_instances(max_T=3, max_V=3), st.floats(0.0, 1.5), st.sampled_from(DIVS))
def test_sequence_divergences_match_enumeration(inst, theta, div):
    assume(_not_subnormal(inst))
    law = fuzzy_output_law(inst, theta, div)
    lq, lf = brute_law(inst.Q, inst.rho), brute_law(law, inst.rho)
    prof = fuzzy_profile(inst, theta, div)
    for exact, brute in ((prof.kl_forward, _kl(lq, lf)), (prof.kl_reverse, _kl(lf, lq))):
        assert (np.isinf(exact) and np.isinf(brute)) or exact == pytest.approx(brute, abs=1e-9)
    assert sequence_divergence(inst.rho, inst.Q, law, "tv") == pytest.approx(_tv(lq, lf), abs=1e-12)
    assert sequence_divergence(inst.rho, inst.Q, law, "js") == pytest.approx(_js(lq, lf), abs=1e-9)
    kl_fwd = sequence_divergence(inst.rho, inst.Q, law, "kl")
    assert (np.isinf(kl_fwd) and np.isinf(prof.kl_forward)) or kl_fwd == pytest.approx(prof.kl_forward)
    # the joint law itself
    joint = sequence_law(inst.rho, law)
    for seq, w in lf.items():
        assert joint[seq] == pytest.approx(w, abs=1e-15)
    assert joint.sum() == pytest.approx(1.0)


# -- the paper's bound --------------------------------------------------------------------------
@given(markov_instances(max_T=4, max_V=3), st.floats(0.0, 1.5))
def test_bounds_that_are_theorems(inst, theta):
    """Chain rule: KL(P_FSD||P_q) <= N %draft θ under the reverse-KL threshold; KL(P_q||P_FSD) <= N %draft_q θ
    under the forward one; sequence TV under the TV threshold with either %draft."""
    assert fuzzy_bound_check(inst, theta, "kl_reverse").holds
    assert fuzzy_bound_check(inst, theta, "kl").holds_target
    tvc = fuzzy_bound_check(inst, theta, "tv")
    assert tvc.holds and tvc.holds_target


def _adversarial(T=8):
    """State 0: q stays, p leaves w.p. 0.8 (accepted for θ > KL(q||p) = ln 5). State 1: always rejected."""
    P = np.array([[0.2, 0.8], [0.0, 1.0]])
    Q = np.array([[1.0, 0.0], [1.0, 0.0]])
    return MarkovInstance.stationary(P, Q, T, rho=np.array([1.0, 0.0]))


def test_bound_with_fsd_draft_fraction_fails_on_a_counterexample():
    inst = _adversarial()
    kl_check = fuzzy_bound_check(inst, 1.7, "kl")  # just above ln 5 = 1.609
    assert kl_check.divergence == pytest.approx(inst.T * np.log(5))
    assert kl_check.draft_fraction_target == 1.0 and kl_check.draft_fraction < 0.6
    assert not kl_check.holds and kl_check.holds_target
    short = _adversarial(T=2)  # sequence JS <= ln 2, so the linear bound can only fail for small N
    js_row = float(fuzzy_divergence(short, "js")[0, 0])
    js_check = fuzzy_bound_check(short, js_row + 1e-3, "js")
    assert not js_check.holds and js_check.holds_target
    # thresholding KL(q||p) leaves the reverse KL unbounded
    assert fuzzy_profile(inst, 1.7, "kl").kl_reverse == np.inf


def test_simulated_draft_fraction_of_the_counterexample(agrees):
    inst = _adversarial()
    prof = fuzzy_profile(inst, 1.7, "kl")
    c = simulate(inst, Fuzzy(1.7, "kl"), N, key=9)
    agrees(c.estimate("accepted"), inst.T * prof.draft_fraction, "accepted")


# -- bad inputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda i: fuzzy_output_law(i, -0.1, "js"), "theta"),
        (lambda i: fuzzy_profile(i, float("nan"), "js"), "theta"),
        (lambda i: Fuzzy(True, "js"), "theta"),
        (lambda i: fuzzy_profile(i, 0.1, "hellinger"), "div must be"),
        (lambda i: sequence_divergence(i.rho, i.Q, i.P, "l2"), "div must be"),
        (lambda i: chain_kl(i.rho, i.Q, i.P[:-1]), "shape"),
        (lambda i: chain_kl(i.rho[:-1], i.Q, i.P), "rho"),
        (lambda i: fuzzy_profile(i, 0.1, "js", K=0), "K must be"),
        (lambda i: fuzzy_output_law(i, 0.1, "jsd"), "div must be"),
        (lambda i: sequence_law(i.rho, np.broadcast_to(i.Q[:1], (40, i.V, i.V))), "MAX_ENUMERATION"),
        (lambda i: fuzzy_bound_check(MarkovInstance.random(30, 4, 0), 0.1, "js"), "MAX_ENUMERATION"),
        (
            lambda i: fuzzy_sequence_law(MarkovInstance.random(30, 4, 0), 0.1, "js", K=2),
            r"^the sequence law \(4\^31 sequences\) would take about 4.61e18 sequences, over the budget "
            r"of 4,194,304 sequences \(MAX_ENUMERATION\): use a shorter horizon or a smaller vocabulary, or raise",
        ),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call(_inst(0))
    assert MAX_ENUMERATION >= 4**9


@pytest.mark.slow
def test_repro_fsd_bound(tmp_path):
    from speculab.repro import fsd_bound

    r = fsd_bound.run(key=0, out_dir=tmp_path)
    assert (tmp_path / "fsd_bound.png").stat().st_size > 0 and (tmp_path / "fsd_bound.json").exists()
    s = r["seeded_summary"]
    assert s["kl_reverse"]["fails"] == 0 and s["tv"]["fails"] == 0  # theorems
    assert s["kl"]["fails_with_target_draft_fraction"] == 0 and s["tv"]["fails_with_target_draft_fraction"] == 0
    assert r["adversarial_summary"]["kl"]["fails"] >= 1 and r["adversarial_summary"]["js_T2"]["fails"] >= 1
    assert r["large"]["kl_reverse"]["fails"] == 0
    assert "two-state counterexample" in fsd_bound.summary(r)
    rows = {row["quantity"]: row for row in claims_of(fsd_bound, r)}
    tv, adv = s["tv"], r["adversarial_summary"]["kl"]
    assert rows["TV threshold: sequence TV vs the bound (N = 8, V = 4)"]["theory"] == (
        f"holds at all {tv['n_theta']} θ (max Div/bound {tv['max_ratio']:.3f})"
    )
    assert rows["two-state counterexample (N = 8; JS at N = 2)"]["theory"].startswith(
        f"KL(q‖p) threshold fails at {adv['fails']} of {adv['n_theta']} θ (ratio up to {adv['max_ratio']:.2f})"
    )


def test_sequence_law_enumerates_exactly_up_to_its_cap():
    """``V^(T+1) = MAX_ENUMERATION`` sequences are enumerated (and sum to 1), one more power of V is refused — the
    documented cap, at 2^22 (found by mutation testing: a doubled cap or ``>=`` for ``>`` went unnoticed)."""
    assert MAX_ENUMERATION == 1 << 22
    A = np.full((21, 2, 2), 0.5)
    law = sequence_law([0.5, 0.5], A)  # 2^22 sequences
    assert law.shape == (2,) * 22 and law.sum() == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(
        TooLarge,
        match=r"\(2\^23 sequences\) would take 8,388,608 sequences, over the budget of "
        r"4,194,304 sequences \(MAX_ENUMERATION\)",
    ):
        sequence_law([0.5, 0.5], np.full((22, 2, 2), 0.5))
    with work_budget(2):  # twice the budget: 2^23 sequences, one more power refused
        assert sequence_law([0.5, 0.5], np.full((22, 2, 2), 0.5)).shape == (2,) * 23
        with pytest.raises(TooLarge, match=r"budget of 8,388,608 sequences \(MAX_ENUMERATION, times 2\)"):
            sequence_law([0.5, 0.5], np.full((23, 2, 2), 0.5))


def test_a_divergence_equal_to_theta_is_not_accepted():
    """[FSD] §4 accepts iff ``Div(q, p) < θ`` (SPEC): at ``θ`` equal to a context's divergence that context draws from
    ``q``, in the output law and in the profile's draft fraction (found by mutation testing: ``<=`` went unnoticed)."""
    inst = _inst(0, T=3, V=3)
    d = fuzzy_divergence(inst, "js")
    n, a = np.unravel_index(np.argmax(d), d.shape)
    theta = float(d[n, a])
    law = fuzzy_output_law(inst, theta, "js")
    np.testing.assert_array_equal(law[n, a], inst.Q[n, a])
    accepted = d < theta
    np.testing.assert_array_equal(law, np.where(accepted[..., None], inst.P, inst.Q))
    assert not accepted.all() and fuzzy_profile(inst, theta, "js").draft_fraction < 1


def test_holds_within_allows_exactly_its_relative_round_off():
    from speculab.theory.fuzzy import holds_within

    assert holds_within(1.0, 1.0) and holds_within(1.0 + 1e-12, 1.0) and not holds_within(1.0 + 3e-12, 1.0)
    assert holds_within(0.5 + 0.9e-12, 0.5) and not holds_within(0.5 + 1.5e-12, 0.5)  # at least 1e-12 absolute
    assert holds_within(4.0 + 3.5e-12, 4.0) and not holds_within(4.0 + 5e-12, 4.0)  # relative above 1


def test_fuzzy_sequence_law_enumerates_exactly_up_to_its_cap():
    """2^22 sequences with the round phase tracked (K = 3): a law; one more position: refused."""
    law = fuzzy_sequence_law(MarkovInstance.random(21, 2, 0), 0.1, "js", K=3)
    assert law.shape == (2,) * 22 and law.sum() == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(TooLarge, match=r"\(2\^23 sequences\) would take 8,388,608 sequences"):
        fuzzy_sequence_law(MarkovInstance.random(22, 2, 0), 0.1, "js", K=3)


def test_only_theta_zero_is_unbiased():
    """θ = 0 accepts nothing (every token from q): unbiased. Any θ > 0 — 1 included — can accept a draft whose law
    differs from q's, so the method reports its bias (found by mutation testing of the fast tier: ``== 1`` for
    ``== 0`` survived)."""
    assert Fuzzy(0.0).unbiased
    for theta in (1e-9, 0.5, 1.0, 2.0, float("inf")):
        assert not Fuzzy(theta).unbiased, theta
