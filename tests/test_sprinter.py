"""SPRINTER ([SPR] Thm 3.1, 3.3, 3.4, A.4; SPEC S1–S4): literal enumeration, series, Monte Carlo (|z| < 5)."""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from _enumerate import sequence_law
from conftest import Z_BOUND, assert_frozen, assert_power, binomial_se, claims_of, power
from speculab.sim import Sprinter, simulate
from speculab.methods.sprinter import signed_tv_statistic, simulate_stopping
from speculab.sim import Counts
from speculab.testing import distribution_pairs, markov_instances
from speculab.theory import MarkovInstance, chain_marginals, output_law, residual, sd_acceptance, tv
from speculab.theory.sprinter import (
    sd_flops,
    sprinter_acceptance_rate,
    sprinter_distribution,
    sprinter_expected_tokens,
    sprinter_flops,
    sprinter_output_law,
    sprinter_profile,
    sprinter_stopping_time,
    sprinter_token_law,
    sprinter_tokens_pmf,
)

N = 40_000
probs = st.floats(0.0, 1.0)


def _literal_step(p, q, v):
    """One SPRINTER step enumerated branch by branch ([SPR] Alg. 2), independent of the library.

    Returns (law of the output token, P(target call), P(target rejection)).
    """
    V = len(p)
    res = np.maximum(q - p, 0.0)
    res = res / res.sum() if res.sum() > 0 else res
    law, call, rej = np.zeros(V), 0.0, 0.0
    for x in range(V):
        if p[x] == 0:
            continue
        law[x] += p[x] * v[x]  # verifier passes: keep x, no target call
        stop = p[x] * (1 - v[x])
        call += stop
        keep = 1.0 if q[x] >= p[x] else q[x] / p[x]
        law[x] += stop * keep
        rej += stop * (1 - keep)
        law += stop * (1 - keep) * res
    return law, call, rej


def _iid_v(p, q, eta_tp, eta_fp):
    return np.where(p <= q, eta_tp, eta_fp)


# -- S1 / S4: one token --------------------------------------------------------------------
@given(distribution_pairs(max_V=6), probs, probs)
def test_s1_s4_match_the_literal_algorithm(pq, eta_tp, eta_fp):
    """Thm 3.1 (law, TV) and Thm A.4 (acceptance) hold exactly for the i.i.d. verifier, whatever η_TP."""
    p, q = pq
    law, _, rej = _literal_step(p, q, _iid_v(p, q, eta_tp, eta_fp))
    s = sprinter_distribution(p, q, eta_fp)
    np.testing.assert_allclose(s.law, law, atol=1e-12)
    assert s.tv == pytest.approx(eta_fp * tv(p, q), abs=1e-12)
    assert float(tv(q, law)) == pytest.approx(float(s.tv), abs=1e-12)
    assert sprinter_acceptance_rate(p, q, eta_fp) == pytest.approx(1 - rej, abs=1e-12)
    assert s.acceptance == pytest.approx(1 - (1 - eta_fp) * tv(p, q), abs=1e-12)
    # the general (token-dependent) law reduces to S1
    g = sprinter_token_law(p, q, _iid_v(p, q, eta_tp, eta_fp))
    np.testing.assert_allclose(g.law, s.law, atol=1e-12)


@given(distribution_pairs(max_V=6, allow_zeros=False), st.data())
def test_token_dependent_verifier(pq, data):
    """Any verifier: the derived law matches the literal algorithm; TV and β follow the
    (p − q)_+-weighted pass rate η̄ (not the mixture law)."""
    p, q = pq
    v = np.array(data.draw(st.lists(probs, min_size=len(p), max_size=len(p))))
    law, _, rej = _literal_step(p, q, v)
    g = sprinter_token_law(p, q, v)
    np.testing.assert_allclose(g.law, law, atol=1e-12)
    d = float(tv(p, q))
    eta_bar = (v * np.maximum(p - q, 0)).sum() / d if d > 0 else 0.0
    assert g.tv == pytest.approx(eta_bar * d, abs=1e-12)
    assert g.acceptance == pytest.approx(1 - rej, abs=1e-12)
    assert g.acceptance == pytest.approx(1 - (1 - eta_bar) * d, abs=1e-12)


def test_mixture_law_needs_a_constant_false_positive_rate():
    """Two unacceptable tokens passed at different rates: not (1 − η̄) q + η̄ p for any η̄."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.1, 0.7])  # tokens 0 and 1 are unacceptable
    v = np.array([1.0, 0.0, 0.5])
    g = sprinter_token_law(p, q, v)
    # the best mixture weight fitted on token 0 misses token 1
    eta0 = (g.law[0] - q[0]) / (p[0] - q[0])
    assert abs(g.law[1] - ((1 - eta0) * q[1] + eta0 * p[1])) > 0.1


# -- Markov instances: exact law and counts vs simulation -------------------------------------
def _check_marginals(agrees, seq, mu):
    """Every position's token frequencies against the exact marginals (a token of probability 0 is never drawn)."""
    n = seq.shape[0]
    for k in range(mu.shape[0]):
        freq = np.bincount(seq[:, k], minlength=mu.shape[1]) / n
        assert np.all(freq[mu[k] == 0] == 0)
        agrees(freq, mu[k], f"marginal law of x_{k}", se=binomial_se(mu[k], n))


@pytest.mark.parametrize("eta_tp, eta_fp", [(0.8, 0.3), (0.0, 1.0), (1.0, 0.0), (0.5, 0.5)])
def test_exact_law_and_counts_vs_simulation(eta_tp, eta_fp, agrees):
    inst = MarkovInstance.random(12, 4, 3, concentration=0.6)
    m = Sprinter(eta_tp, eta_fp)
    v = m.pass_probabilities(inst)
    law = sprinter_output_law(inst, v)
    np.testing.assert_allclose(law, (1 - eta_fp) * inst.Q + eta_fp * inst.P, atol=1e-12)  # Thm 3.1 per context
    b = v + (1 - v) * sd_acceptance(inst.P, inst.Q)  # as [Yin] Alg. 2 with the residual
    np.testing.assert_allclose(output_law(inst, b, residual(inst.Q, inst.P)), law, atol=1e-12)
    c = simulate(inst, m, N, key=11, return_sequences=True)
    assert isinstance(c, Counts) and c.names[-1] == "verifier_calls"
    mu = chain_marginals(inst.rho, law)
    _check_marginals(agrees, c.sequences, mu)
    # transition law at one position (pairs)
    n = 6
    joint = np.zeros((inst.V, inst.V))
    np.add.at(joint, (c.sequences[:, n], c.sequences[:, n + 1]), 1.0 / N)
    exact = mu[n][:, None] * law[n]
    agrees(joint, exact, f"pair law of (x_{n}, x_{n + 1})", se=binomial_se(exact, N))
    prof = sprinter_profile(inst, v)
    assert_frozen(prof)
    agrees(c.estimate("rejections"), prof.rejections, "rejections")
    agrees(c.estimate("oracle_calls"), prof.oracle_calls, "oracle calls")
    agrees(c.estimate("accepted"), prof.accepted, "accepted")
    p_rej = prof.rejections_per_position
    agrees(c.rejections_per_position, p_rej, "rejection rate per position", se=binomial_se(p_rej, N))
    # exact identities, run by run
    np.testing.assert_array_equal(c.accepted + c.rejections, inst.T)
    np.testing.assert_array_equal(c.draft_calls, inst.T)
    np.testing.assert_array_equal(c.verifier_calls, inst.T)
    np.testing.assert_array_equal(c.discarded, c.rejections)
    np.testing.assert_array_equal(c.bonus, 0)
    assert np.all(c.rejections <= c.oracle_calls)
    if eta_fp == 1.0 and eta_tp == 0.0:  # passes exactly the unacceptable tokens: target never rejects
        np.testing.assert_array_equal(c.rejections, 0)


@pytest.mark.power
def test_thm_3_1_tv_and_a_4_acceptance_by_simulation(record_property, agrees):
    """The signed TV statistic estimates η_FP Σ_n E[TV_n]; accepted/T estimates mean β_SPR (Thm A.4)."""
    inst = MarkovInstance.random(20, 5, 21, row_law="uniform")
    eta_fp = 0.4
    m = Sprinter(0.7, eta_fp)
    prof = sprinter_profile(inst, m.pass_probabilities(inst))
    c = simulate(inst, m, N, key=22, return_sequences=True)
    stat = signed_tv_statistic(inst, c.sequences)
    se = stat.std(ddof=1) / np.sqrt(N)
    mu = chain_marginals(inst.rho, sprinter_output_law(inst, m.pass_probabilities(inst)))[:-1]
    claimed = eta_fp * float(np.einsum("na,na->", mu, inst.tv()))
    assert prof.tv_per_position.sum() == pytest.approx(claimed, rel=1e-12)
    agrees(stat.mean(), claimed, "signed TV statistic", se=se)
    beta = 1 - (1 - eta_fp) * np.einsum("na,na->n", mu, inst.tv())  # Thm A.4 per position, averaged
    agrees(c.estimate("accepted"), beta.sum(), "accepted")
    assert prof.acceptance_rate == pytest.approx(beta.mean(), abs=1e-12)
    # the statistic can fail: with the wrong η_FP the same data are rejected
    wrong = 0.6 * float(np.einsum("na,na->", mu, inst.tv()))
    assert abs(stat.mean() - wrong) / se > Z_BOUND
    assert_power(
        record_property,
        f"SPRINTER's signed TV statistic vs Thm 3.1 (N = {N:,}): η_FP = 0.6 for 0.4",
        power((wrong - claimed) / se),
    )


def test_verifier_function_equals_iid_path():
    """Same seed, same counts and tokens when the function returns η_TP/η_FP by acceptability."""
    inst = MarkovInstance.random(15, 5, 4, concentration=0.8)
    P, Q = inst.P, inst.Q
    f = lambda t, prev, x: np.where(P[t, prev, x] <= Q[t, prev, x], 0.75, 0.2)  # noqa: E731
    a = simulate(inst, Sprinter(0.75, 0.2), 5_000, key=7, return_sequences=True)
    b = simulate(inst, Sprinter(verifier=f), 5_000, key=7, return_sequences=True)
    for name in a.names:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.sequences, b.sequences)
    np.testing.assert_allclose(
        Sprinter(verifier=f).pass_probabilities(inst), Sprinter(0.75, 0.2).pass_probabilities(inst)
    )


def test_token_dependent_verifier_function_vs_simulation(agrees):
    """A verifier whose pass rate depends on the token: exact law (not the mixture) vs simulation."""
    inst = MarkovInstance.random(8, 4, 5, concentration=0.6)
    f = lambda t, prev, x: (x + 1) / (inst.V + 1) * (t % 2 == 0) + 0.1 * (t % 2 == 1)  # noqa: E731
    m = Sprinter(verifier=f)
    law = sprinter_output_law(inst, m.pass_probabilities(inst))
    c = simulate(inst, m, N, key=3, return_sequences=True)
    _check_marginals(agrees, c.sequences, chain_marginals(inst.rho, law))
    prof = sprinter_profile(inst, m.pass_probabilities(inst))
    agrees(c.estimate("oracle_calls"), prof.oracle_calls, "oracle calls")
    agrees(c.estimate("rejections"), prof.rejections, "rejections")


def test_many_chunks_keep_verifier_calls():
    from speculab.sim.engine import CHUNK

    inst = MarkovInstance.random(2, 3, 0)
    c = simulate(inst, Sprinter(0.5, 0.5), CHUNK + 10, key=0)
    assert c.verifier_calls.shape == (CHUNK + 10,)
    assert c.to_dict()["verifier_calls"]["mean"] == 2.0
    assert np.all(np.isfinite(c.tokens_per_round))


@given(markov_instances(max_T=3, max_V=3), probs, probs)
def test_sequence_kl_matches_enumeration(inst, eta_tp, eta_fp):
    v = Sprinter(eta_tp, eta_fp).pass_probabilities(inst)
    prof = sprinter_profile(inst, v)
    law_q = sequence_law(inst.Q, inst.rho, keep_underflow=True)
    law_s = sequence_law(sprinter_output_law(inst, v), inst.rho, keep_underflow=True)
    # the brute-force reference multiplies probabilities: skip laws whose products are subnormal or
    # underflow (0.5 · 5e-324 rounds to 0 and would hide a sequence that makes the exact KL infinite)
    assume(all(w > 1e-300 for law in (law_q, law_s) for w in law.values()))

    def kl(a, b):
        total = 0.0
        for k, w in a.items():
            if b.get(k, 0.0) == 0.0:
                return np.inf
            total += w * np.log(w / b[k])
        return total

    for exact, brute in ((prof.kl_forward, kl(law_q, law_s)), (prof.kl_reverse, kl(law_s, law_q))):
        if np.isinf(brute):
            assert np.isinf(exact)
        else:
            assert exact == pytest.approx(brute, abs=1e-9)


# -- S2 / S3: the stopping process -----------------------------------------------------------
def _series_mean(eta_tp, eta_fp, r, terms=6000):
    i = np.arange(terms)
    return float((i * sprinter_tokens_pmf(i, eta_tp, eta_fp, r)).sum())


@given(probs, st.floats(0.0, 0.99), st.integers(0, 30))
def test_s2_closed_form_equals_series(eta_tp, eta_fp, r):
    i = np.arange(6000)
    pmf = sprinter_tokens_pmf(i, eta_tp, eta_fp, r)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
    e = sprinter_expected_tokens(eta_tp, eta_fp, r)
    assert e == pytest.approx(_series_mean(eta_tp, eta_fp, r), rel=1e-9, abs=1e-9)
    if eta_tp < 1 - 1e-3:  # the paper's printed form, away from its removable singularity
        paper = (eta_tp - eta_tp**r) / (1 - eta_tp) + eta_tp**r / (1 - eta_fp)
        assert e == pytest.approx(paper, rel=1e-9, abs=1e-9)
    t_d = 0.1
    stop = sprinter_stopping_time(eta_tp, eta_fp, r, t_d)
    assert stop == pytest.approx(t_d * (e + 1), rel=1e-12)
    if eta_tp < 1 - 1e-3:
        paper = (1 - eta_tp**r) * t_d / (1 - eta_tp) + eta_tp**r * t_d / (1 - eta_fp)
        assert stop == pytest.approx(paper, rel=1e-9)


@given(st.floats(0.0, 0.99), st.integers(0, 40))
def test_s2_limit_at_perfect_true_positive_rate(eta_fp, r):
    exact = r - 1 + 1 / (1 - eta_fp)
    assert sprinter_expected_tokens(1.0, eta_fp, r) == pytest.approx(exact, rel=1e-12)
    assert sprinter_expected_tokens(1.0, eta_fp, r) == pytest.approx(_series_mean(1.0, eta_fp, r), rel=1e-9)
    # continuous from below, without cancellation (the printed form loses digits here)
    assert sprinter_expected_tokens(1 - 1e-12, eta_fp, r) == pytest.approx(exact, rel=1e-9)
    assert sprinter_stopping_time(1.0, eta_fp, r, 0.1) == pytest.approx(0.1 * (r + 1 / (1 - eta_fp)), rel=1e-12)


@given(st.floats(0.0, 1.0, exclude_min=True), st.integers(0, 20))
def test_s2_infinite_when_false_positives_never_stop(eta_tp, r):
    assert sprinter_expected_tokens(eta_tp, 1.0, r) == np.inf
    assert sprinter_stopping_time(eta_tp, 1.0, r, 0.1) == np.inf
    assert sprinter_expected_tokens(eta_tp, 1 - 1e-9, r) > 1e8 * eta_tp**r
    # η_TP = 0 < r: the verifier stops at the first draft whatever η_FP
    assert sprinter_expected_tokens(0.0, 1.0, r + 1) == 0.0


def test_s2_arrays_and_plotted_values():
    eta = np.array([0.0, 0.5, 0.9, 1.0])
    np.testing.assert_allclose(sprinter_expected_tokens(eta, 0.5, 5), [0.0, 1.0, 4.27608, 6.0], rtol=1e-12)
    np.testing.assert_allclose(sprinter_expected_tokens(1.0, np.array([0.1, 0.5]), 5), [4 + 1 / 0.9, 6.0])


@pytest.mark.parametrize("eta_tp, eta_fp, r", [(0.9, 0.5, 5), (1.0, 0.1, 5), (0.3, 0.8, 2), (0.95, 0.0, 0)])
def test_stopping_process_simulation(eta_tp, eta_fp, r, agrees):
    n = simulate_stopping(eta_tp, eta_fp, r, 100_000, key=1)
    agrees(n.mean(), sprinter_expected_tokens(eta_tp, eta_fp, r), "E[N]", se=n.std(ddof=1) / np.sqrt(n.size))
    counts = np.bincount(n, minlength=8)[:8] / n.size
    pmf = sprinter_tokens_pmf(np.arange(8), eta_tp, eta_fp, r)
    agrees(counts, pmf, "law of N (0..7)", se=binomial_se(pmf, n.size))


# -- FLOPs -------------------------------------------------------------------------------
def test_flops():
    assert sd_flops(5, 2.0, 100.0) == 510.0
    assert sprinter_flops(5, 2.0, 0.5, 100.0) == 112.5
    # the saving of [SPR] App. A.8: (γ − 1) F_t − γ F_v
    g, Fd, Fv, Ft = 20, 1.3, 0.01, 10.4
    assert sd_flops(g, Fd, Ft) - sprinter_flops(g, Fd, Fv, Ft) == pytest.approx((g - 1) * Ft - g * Fv)
    assert sprinter_flops(1, 1.0, 0.0, 3.0) == sd_flops(1, 1.0, 3.0)


# -- bad inputs ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sprinter_distribution([0.5, 0.5], [0.2, 0.8], 1.5), "eta_fp"),
        (lambda: sprinter_distribution([0.5, 0.5], [0.2, 0.8, 0.0], 0.5), "same shape"),
        (lambda: sprinter_distribution([0.5, 0.6], [0.2, 0.8], 0.5), "sum to 1"),
        (lambda: sprinter_token_law([0.5, 0.5], [0.2, 0.8], [0.5]), "same shape"),
        (lambda: sprinter_token_law([0.5, 0.5], [0.2, 0.8], [0.5, -0.1]), "v must lie"),
        (lambda: sprinter_expected_tokens(-0.1, 0.5, 5), "eta_tp"),
        (lambda: sprinter_expected_tokens(0.5, np.nan, 5), "eta_fp"),
        (lambda: sprinter_expected_tokens(0.5, 0.5, -1), "r must be"),
        (lambda: sprinter_expected_tokens(0.5, 0.5, 2.5), "r must be"),
        (lambda: sprinter_tokens_pmf(-1, 0.5, 0.5, 3), "i must be"),
        (lambda: sprinter_tokens_pmf(1.5, 0.5, 0.5, 3), "i must be"),
        (lambda: sprinter_stopping_time(0.5, 0.5, 5, 0.0), "t_d"),
        (lambda: sprinter_stopping_time(0.5, 0.5, 5, np.inf), "t_d"),
        (lambda: sd_flops(0, 1.0, 1.0), "K"),
        (lambda: sprinter_flops(3, 1.0, -1.0, 1.0), "F_v"),
        (lambda: simulate_stopping(0.5, 1.0, 3, 10, 0), "infinite"),
        (lambda: simulate_stopping(0.5, 0.5, 3, 0, 0), "n_runs"),
        (lambda: Sprinter(1.2, 0.1), "eta_tp"),
        (lambda: Sprinter(0.5), "eta_tp and eta_fp"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_verifier_and_method():
    inst = MarkovInstance.random(3, 3, 0)
    with pytest.raises(ValueError, match="one probability per token"):
        simulate(inst, Sprinter(verifier=lambda t, prev, x: np.ones(2)), 10, key=0)
    with pytest.raises(ValueError, match="verifier output must lie"):
        Sprinter(verifier=lambda t, prev, x: 2.0 + 0 * x).pass_probabilities(inst)
    with pytest.raises(ValueError, match="v \\(verifier pass probabilities\\) must lie"):
        sprinter_profile(inst, np.full(inst.P.shape, 1.5))
    with pytest.raises(ValueError, match="must have the same shape"):
        sprinter_output_law(inst, np.full((2, 3, 3), 0.5))
    # a constant verifier function is accepted
    law = sprinter_output_law(inst, Sprinter(verifier=lambda t, prev, x: 0.3).pass_probabilities(inst))
    np.testing.assert_allclose(law, 0.7 * inst.Q + 0.3 * inst.P, atol=1e-12)


# -- reproductions -------------------------------------------------------------------------
@pytest.mark.slow
def test_repro_sprinter_fig5_and_fig6(tmp_path, agrees):
    from speculab.repro import sprinter_fig5, sprinter_fig6

    # 40,000 runs (not 4,000): the context-free TV at η_FP = 0.1 (0.044) needs them to see a 10 % error
    r5 = sprinter_fig5.run(key=1, n_runs=40_000, out_dir=tmp_path)
    assert (tmp_path / "sprinter_fig5.png").stat().st_size > 0 and (tmp_path / "sprinter_fig5.json").exists()
    assert (tmp_path / "sprinter_fig5_instance.npz").exists()
    for key, pts in r5["points"].items():
        np.testing.assert_allclose(pts["closed_form"], sprinter_expected_tokens(np.array(pts["eta_tp"]), float(key), 5))
        agrees(pts["mean"], pts["closed_form"], f"Fig. 5 E[N] at η_FP = {key}", se=pts["se"])
        assert r5["limit_eta_tp_1"][key]["gap_over_r"] == pytest.approx(float(key) / (1 - float(key)))
    for key, chk in r5["markov"].items():
        assert chk["law_matches_mixture"] and chk["law_max_abs_z"] < Z_BOUND
        law = chk["law_marginals"]  # per position, the share of runs with each token: binomial errors over the runs
        agrees(
            law["frequency"],
            law["theory"],
            f"Fig. 5 Markov marginal law at η_FP = {key}",
            se=binomial_se(law["theory"], r5["n_runs"]),
        )
        agrees(
            law["frequency"],
            law["theory"],
            f"Fig. 5 Markov marginal law at η_FP = {key}",
            se=binomial_se(law["theory"], r5["n_runs"]),
            wrong=law["target"],
            alternative=f"Fig. 5 Markov marginal law at η_FP = {key}: the target's (false passes not kept)",
        )
        for name in ("tv_sum", "acceptance_rate", "target_calls", "rejections"):
            est = chk[name]
            agrees(est["mean"], est["theory"], f"Fig. 5 Markov {name} at η_FP = {key}", se=est["se"])
    for key, cf in r5["context_free"].items():
        # the pooled tokens are i.i.d. draws from the law: binomial errors over n_runs · T of them
        agrees(
            cf["frequency"],
            cf["law"],
            f"Fig. 5 context-free law at η_FP = {key}",
            se=binomial_se(cf["law"], r5["n_runs"] * sprinter_fig5.T_CONTEXT_FREE),
        )
        agrees(cf["tv"]["mean"], cf["tv"]["theory"], f"Fig. 5 context-free TV at η_FP = {key}", se=cf["tv"]["se"])
    assert "Fig. 5" in sprinter_fig5.summary(r5)
    rows = {row["quantity"]: row for row in claims_of(sprinter_fig5, r5)}
    assert rows["E[N] at η_TP = 1, η_FP = 0.5 (r = 5)"]["theory"] == "6.000 (gap 1.000)"  # Thm 3.3: r + η_FP/(1 − η_FP)
    pts, tv = r5["points"]["0.1"], r5["markov"]["0.1"]["tv_sum"]
    assert rows["E[N] at η_TP = 1, η_FP = 0.1 (r = 5)"]["simulation"].startswith(
        f"{pts['mean'][-1]:.3f} ± {pts['se'][-1]:.3f} (z = "
    )
    assert rows["Σ_n TV(P_SPR,n, q_n), Markov T = 50, η_FP = 0.1"]["simulation"].startswith(
        f"{tv['mean']:.3f} ± {tv['se']:.3f}"
    )

    r6 = sprinter_fig6.run(key=1, n_runs=4_000, out_dir=tmp_path)
    assert (tmp_path / "sprinter_fig6.png").exists() and (tmp_path / "sprinter_fig6.json").exists()
    for key, pts in r6["points"].items():
        agrees(pts["mean"], pts["closed_form"], f"Fig. 6 E[T_stop] at η_FP = {key}", se=pts["se"])
    assert r6["limit_eta_tp_1"]["0.5"]["stopping_time"] == pytest.approx(0.7)
    assert "Fig. 6" in sprinter_fig6.summary(r6)
    rows = {row["quantity"]: row for row in claims_of(sprinter_fig6, r6)}
    pts = r6["points"]["0.5"]
    row = rows["E[T_stop] at η_TP = 1, η_FP = 0.5 (r = 5, t_d = 0.1)"]
    assert row["theory"] == "0.7000 (gap 0.1000)" and row["simulation"].startswith(
        f"{pts['mean'][-1]:.4f} ± {pts['se'][-1]:.4f}"
    )


def test_the_round_law_on_real_models_keeps_passed_drafts_and_checks_the_refused_one():
    """Verdicts pass, refuse on a two-draft block, against the law written out by hand: the passed draft is kept
    (its slot's law is ``p``), the refused one is SD's check (kept w.p. ``min(1, q/p)``, else a draw from
    ``[q − p]_+``; its slot's law is ``q``), and nothing follows the block — even where a bonus position exists."""
    p = np.array([[[[0.5, 0.3, 0.2], [0.6, 0.1, 0.3]]]])
    q = np.array([[[[0.2, 0.3, 0.5], [0.3, 0.3, 0.4], [0.1, 0.1, 0.8]]]])
    x = np.array([[[0, 0]]])
    law = Sprinter(verifier=lambda t, prev, x: 0.5).round_law(p, q, x, bonus=True, predictions=[1.0, 0.0])
    keep = 0.3 / 0.6
    np.testing.assert_allclose(law.outcome[0, 0], [0.0, 1 - keep, keep], atol=1e-15)
    np.testing.assert_allclose(law.correction[0, 0, 1] / law.correction[0, 0, 1].sum(), [0.0, 2 / 3, 1 / 3], atol=1e-15)
    np.testing.assert_array_equal(law.correction[0, 0, 2], 0.0)  # no bonus token
    np.testing.assert_allclose(law.law[0, 0], [p[0, 0, 0], q[0, 0, 1]], atol=1e-15)
    np.testing.assert_allclose(law.reject_prob[0, 0], [0.0, 0.3, 0.0], atol=1e-15)  # refused slot: TV(p, q) = 0.3
    with pytest.raises(ValueError, match="one verdict per drafted slot"):
        Sprinter(0.9, 0.1).round_law(p, q, x, bonus=True, predictions=[1.0])


def test_a_token_the_draft_and_target_give_equal_probability_is_acceptable():
    """[SPR] §3.1: a draft is acceptable where ``p <= q`` — equality included (SD would accept it surely), so the
    i.i.d. verifier passes it with ``η_TP`` (found by mutation testing: ``p < q`` went unnoticed)."""
    from speculab.theory import MarkovInstance
    from speculab.theory.sprinter import sprinter_pass_probabilities

    P = np.array([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6], [1 / 3, 1 / 3, 1 / 3]])
    Q = np.array([[0.5, 0.1, 0.4], [0.1, 0.2, 0.7], [1 / 3, 1 / 3, 1 / 3]])  # equal at (0,0), (1,1) and row 2
    v = sprinter_pass_probabilities(MarkovInstance.stationary(P, Q, 2), 0.9, 0.2)
    expected = np.where(P <= Q, 0.9, 0.2)
    assert expected[0, 0] == expected[1, 1] == 0.9 and np.all(expected[2] == 0.9)
    np.testing.assert_array_equal(v, np.broadcast_to(expected, (2, 3, 3)))


def test_boundaries_of_the_inputs():
    """Edge values on the right side of each check (found by mutation testing): τ = 0 and τ = 1 are thresholds;
    a verifier goes with neither η; η_FP = 1 is refused exactly when the stopping time is infinite (η_TP^r > 0);
    sequences of the wrong rank or length are refused."""
    f = lambda t, prev, x: np.full(np.shape(x), 0.5)  # noqa: E731
    for threshold in (0.0, 1.0):
        assert Sprinter(verifier=f, threshold=threshold).threshold == threshold
    for eta in ({"eta_tp": 0.5}, {"eta_fp": 0.5}):
        with pytest.raises(ValueError):
            Sprinter(verifier=f, **eta)
    np.testing.assert_array_equal(simulate_stopping(0.0, 1.0, 2, 50, key=0), 0)  # η_TP^r = 0: the first draft stops
    for tp, r in ((0.5, 0), (0.5, 3), (1.0, 2)):
        with pytest.raises(ValueError, match="eta_fp = 1"):
            simulate_stopping(tp, 1.0, r, 10, key=0)
    inst = MarkovInstance.random(3, 2, 0)
    for bad in (np.zeros(4, dtype=int), np.zeros((5, 3), dtype=int), np.zeros((5, 4, 1), dtype=int)):
        with pytest.raises(ValueError, match=r"sequences must have shape \(n_runs, T \+ 1 = 4\)"):
            signed_tv_statistic(inst, bad)
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(3), size=(1, 1, 3)), rng.dirichlet(np.ones(3), size=(1, 1, 4))
    with pytest.raises(ValueError, match=r"one verdict per drafted slot \(3\); got \(2,\)"):
        Sprinter(0.8, 0.1).round_law(p, q, np.zeros((1, 1, 3), dtype=np.int64), bonus=True, predictions=[1.0, 0.0])


def test_only_a_verifier_on_hidden_states_runs_in_the_decoding_loop():
    f = lambda t, prev, x: np.full(np.shape(x), 0.5)  # noqa: E731
    assert Sprinter(0.8, 0.1).draft_head is None and Sprinter(verifier=f).draft_head is None
    trained = type("Trained", (), {"reads_hidden_states": True, "__call__": lambda self, *a: 0.5})()
    assert Sprinter(verifier=trained).draft_head is trained


def test_the_command_line_needs_both_rates(capsys):
    from speculab.cli import main

    for argv in (["--eta-fp", "0.1"], ["--eta-tp", "0.9"]):
        assert main(["sim", "--method", "sprinter", "--T", "4", "--V", "2", "--n-runs", "10", *argv]) == 2
        assert "needs --eta-" in capsys.readouterr().err


def test_the_signed_tv_statistic_is_its_definition_run_by_run():
    """``signed_tv_statistic`` is ``Σ_n ½ [s_n(x_{n−1}, x_n) − Σ_y s_n(x_{n−1}, y) q_n(y | x_{n−1})]`` per run, with
    ``s = sign(p − q)``: written out here with loops over runs and positions (found by mutation testing of the
    fast tier: pairing the wrong previous tokens with the outputs survived — the one fast test had ``T = 1``)."""
    inst = MarkovInstance.random(3, 3, 4)
    seq = np.array([[0, 1, 2, 0], [2, 2, 1, 1], [1, 0, 0, 2]])
    want = np.zeros(len(seq))
    for run, xs in enumerate(seq):
        for n in range(inst.T):
            a, x = xs[n], xs[n + 1]
            s = np.sign(inst.P[n, a] - inst.Q[n, a])
            want[run] += 0.5 * (s[x] - float(np.dot(s, inst.Q[n, a])))
    np.testing.assert_allclose(signed_tv_statistic(inst, seq), want, rtol=0, atol=1e-15)


def test_a_trained_verifiers_default_threshold_is_the_papers_one_half():
    """By default a trained verifier passes a slot iff its score is ``>= 0.5``, the inference threshold [SPR] A.9
    reports as sufficient, whatever the uniform (found by mutation testing of the fast tier: a default of 1.0
    survived — every fast test gave ``threshold``)."""
    m = Sprinter(verifier=lambda t, prev, x: np.full(np.shape(x), 0.5))
    for u in (0.0, 0.99):
        assert m.read_head(0.5, u) == 1.0 and m.read_head(0.75, u) == 1.0
        assert m.read_head(np.nextafter(0.5, 0.0), u) == 0.0


def test_the_command_line_asks_for_both_rates_and_offers_no_verifier_function():
    """On the command line SPRINTER is its two rates, both required (a Python default of None stands for a verifier
    given instead); the verifier function and its threshold are Python-only (a trained head replaces them)."""
    from speculab.methods.base import build, cli_params

    assert set(cli_params(Sprinter)) == {"eta_tp", "eta_fp"}
    with pytest.raises(ValueError, match=r"needs --eta-tp \(η_TP.*\), --eta-fp \(η_FP"):
        build("sprinter", {})
    with pytest.raises(ValueError, match=r"needs --eta-fp \(η_FP"):
        build("sprinter", {"eta_tp": 0.5})
    built = build("sprinter", {"eta_tp": 0.5, "eta_fp": 0.25})
    assert (built.eta_tp, built.eta_fp, built.verifier) == (0.5, 0.25, None)
