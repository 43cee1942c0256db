"""Batch SD ([Yin] Alg. 4, Thm 3, Prop. 1, Fig. 3 closed forms): enumeration, Monte Carlo, properties."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _enumerate import enumerate_batch, sequence_law
from conftest import binomial_se
from speculab.kernels import drain
from speculab.sim import SD, BatchSD, simulate
from speculab.testing import distribution_pairs, markov_instances
from speculab.theory.batch import CONVERGED
from speculab.theory import (
    MarkovInstance,
    batch_expected_rejections,
    batch_improvement,
    batch_rejection_probability,
    bernoulli_batch_improvement,
    residual,
    root_residual_chain,
    sd_expected_rejections,
    tv,
    uniform_batch_improvement,
)

SUPPORT_GAP = (np.array([0.5, 0.5, 0.0]), np.array([0.2, 0.3, 0.5]))  # (p, q): supp(q) ⊄ supp(p)


def _naive_product(q, p, M):
    """Π r_m with explicitly normalised residuals (the paper's form), for comparison."""
    prod, qm = 1.0, q
    for _ in range(M):
        r = tv(qm, p)
        prod *= r
        if r == 0:
            return 0.0
        qm = residual(qm, p)
    return prod


# -- single position ---------------------------------------------------------------
@given(distribution_pairs(max_V=6), st.integers(1, 12))
def test_bi_properties(pq, M):
    p, q = pq
    bi = batch_improvement(q, p, M)
    assert bi >= -1e-12
    assert batch_improvement(q, p, M + 1) >= bi - 1e-12
    assert batch_improvement(q, p, 1) == pytest.approx(0, abs=1e-12)
    assert batch_improvement(q, p, np.inf) >= batch_improvement(q, p, M) - 1e-12
    assert batch_rejection_probability(q, p, M) == pytest.approx(_naive_product(q, p, M), abs=1e-9)


@given(distribution_pairs(max_V=6))
def test_limit_is_the_mass_off_the_draft_support(pq):
    p, q = pq
    off = q[p == 0].sum()
    assert batch_rejection_probability(q, p, np.inf) == pytest.approx(off, abs=1e-15)
    # approached from above, and reached for large M up to the slow geometric tails
    assert batch_rejection_probability(q, p, 50) >= off - 1e-12


@given(st.floats(0, 1), st.floats(0, 1), st.integers(1, 30))
def test_bernoulli_closed_form(u, v, M):
    p, q = np.array([1 - u, u]), np.array([1 - v, v])
    assert bernoulli_batch_improvement(u, v, M) == pytest.approx(batch_improvement(q, p, M), abs=1e-12)
    assert bernoulli_batch_improvement(u, v, np.inf) == pytest.approx(batch_improvement(q, p, np.inf), abs=1e-12)


@pytest.mark.parametrize("V, Vsub", [(2, 1), (4, 2), (12, 8), (10, 1), (20, 7)])
@pytest.mark.parametrize("M", [1, 2, 3, 7, 40])
def test_uniform_closed_form(V, Vsub, M):
    p = np.full(V, 1 / V)
    q = np.zeros(V)
    q[:Vsub] = 1 / Vsub
    assert uniform_batch_improvement(V / Vsub, M) == pytest.approx(batch_improvement(q, p, M), abs=1e-12)


def test_support_gap_gets_no_improvement():
    p, q = SUPPORT_GAP
    for M in (1, 2, 10, np.inf):
        assert batch_improvement(q, p, M) == pytest.approx(0, abs=1e-15)
        assert batch_rejection_probability(q, p, M) == pytest.approx(0.5)


def test_zero_residual_is_safe():
    p = np.array([0.5, 0.5])
    u, R = root_residual_chain(p.copy(), p, 5)
    assert R == 0 and np.all(u == 0)
    assert batch_improvement(p, p, 5) == 0


# -- Markov instances: Thm 3 -----------------------------------------------------------
@given(markov_instances(max_T=3, max_V=3), st.integers(1, 3))
def test_t3_matches_enumeration_and_alg4_is_unbiased(inst, M):
    e = enumerate_batch(inst.P, inst.Q, inst.rho, M)
    law = sequence_law(inst.Q, inst.rho)
    for k in set(e.law) | set(law):
        assert abs(e.law.get(k, 0) - law.get(k, 0)) < 1e-12
    prof = batch_expected_rejections(inst, M)
    np.testing.assert_allclose(prof.rejections_per_position, e.rejections_per_position, atol=1e-12)
    assert prof.oracle_calls == pytest.approx(e.oracle_calls, abs=1e-12)


@pytest.mark.parametrize("K", [1, 2])
def test_alg4_with_finite_K_is_unbiased(K):
    inst = MarkovInstance.random(3, 3, 5, concentration=0.5)
    law = sequence_law(inst.Q, inst.rho)
    e = enumerate_batch(inst.P, inst.Q, inst.rho, 2, K)
    for k in set(e.law) | set(law):
        assert abs(e.law.get(k, 0) - law.get(k, 0)) < 1e-12


@given(markov_instances(max_T=6, max_V=4))
def test_t3_at_M1_is_t1_and_decreases_to_the_limit(inst):
    t1 = sd_expected_rejections(inst)
    np.testing.assert_allclose(
        batch_expected_rejections(inst, 1).rejections_per_position, t1.rejections_per_position, atol=1e-13
    )
    totals = [batch_expected_rejections(inst, M).rejections for M in (1, 2, 3, 5, 8, 200)]
    limit = batch_expected_rejections(inst, np.inf)
    assert all(b <= a + 1e-12 for a, b in zip(totals, totals[1:]))
    assert limit.rejections <= totals[-1] + 1e-12
    assert limit.rejections >= 0
    prof = batch_expected_rejections(inst, 3)
    assert np.all(prof.improvement_per_position >= -1e-12)
    assert prof.oracle_calls_per_position[0] == pytest.approx(1.0)


@given(markov_instances(max_T=8, max_V=5), st.sampled_from([1, 2, 3, 5]))
def test_the_root_probability_of_every_position_is_the_round_starts_of_the_lookahead_chain(inst, M):
    """Thm 3's per-position root probabilities (``f/q``: position ``n`` starts a round, one oracle call) equal
    the per-position round starts of the exact lookahead chain with a batch root at ``K = ∞`` — an independent
    computation (rounds propagated by their start, not roots by Thm 3's recursion) — at every position, not
    only the first (where both are 1)."""
    from speculab.theory import lookahead_counts

    prof = batch_expected_rejections(inst, M)
    chain = lookahead_counts(inst, None, M=M)
    np.testing.assert_allclose(prof.oracle_calls_per_position, chain.oracle_calls_per_position, rtol=1e-12, atol=1e-14)
    assert prof.oracle_calls_per_position[0] == pytest.approx(1.0)
    if inst.T > 1:
        assert np.all(prof.oracle_calls_per_position[1:] <= 1 + 1e-12)


def test_limit_is_positive_on_the_paper_instance_and_reached():
    inst = MarkovInstance.random(50, 7, 10, row_law="uniform")
    limit = batch_expected_rejections(inst, np.inf).rejections
    assert 0 < limit < sd_expected_rejections(inst).rejections
    assert batch_expected_rejections(inst, 20_000).rejections == pytest.approx(limit, abs=1e-3)


def test_support_gap_instance_limit():
    p, q = SUPPORT_GAP
    inst = MarkovInstance.context_free(p, q, T=20)
    for M in (1, 4, np.inf):
        assert batch_expected_rejections(inst, M).rejections == pytest.approx(20 * 0.5)


# -- Monte Carlo -------------------------------------------------------------------------
@pytest.mark.parametrize("M", [1, 2, 4])
def test_simulation_matches_t3(M, agrees):
    inst = MarkovInstance.random(50, 7, 10, row_law="uniform")
    prof = batch_expected_rejections(inst, M)
    c = simulate(inst, BatchSD(M), 20_000, key=M)
    agrees(c.estimate("rejections"), prof.rejections, "rejections")
    agrees(c.estimate("oracle_calls"), prof.oracle_calls, "oracle calls")
    agrees(
        c.rejections_per_position,
        prof.rejections_per_position,
        "rejection rate per position",
        se=binomial_se(prof.rejections_per_position, 20_000),
    )


@pytest.mark.parametrize("K", [None, 1, 2])
@pytest.mark.parametrize("M", [2, 3])
def test_simulation_counts_match_enumeration(M, K, agrees):
    inst = MarkovInstance.random(3, 3, 2, concentration=0.6)
    e = enumerate_batch(inst.P, inst.Q, inst.rho, M, K)
    c = simulate(inst, BatchSD(M, K=K), 40_000, key=10 * M + (K or 0))
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus"):
        agrees(c.estimate(name), getattr(e, name), name)


def test_simulation_support_gap_and_sequences(agrees):
    p, q = SUPPORT_GAP
    inst = MarkovInstance.context_free(p, q, T=10)
    c = simulate(inst, BatchSD(5), 20_000, key=0, return_sequences=True)
    agrees(c.estimate("rejections"), 5.0, "rejections")
    freq = np.bincount(c.sequences[:, 1:].ravel(), minlength=3) / c.sequences[:, 1:].size
    se = binomial_se(q, 20_000 * 10) * np.sqrt(10)  # conservative: ignore within-run independence
    agrees(freq, q, "token law over positions 1..10", se=se)


@pytest.mark.parametrize("bad", [0, -1, 2.5, None])
def test_bad_M(bad):
    with pytest.raises(ValueError, match="M"):
        BatchSD(bad)
    with pytest.raises(ValueError, match="M"):
        batch_improvement([0.5, 0.5], [0.2, 0.8], bad)


def _chain_without_stop(q, p, M):
    u, R = q, np.ones_like(q[..., 0])
    for _ in range(M):
        u, R = drain(u, R, p)
    return u, R


def _slow_rows():
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.ones(5), size=8)
    p[:, 0] = 1e-3  # q's mass sits where p has little: each step drains ~0.1 % of it
    return p / p.sum(-1, keepdims=True), np.tile([1.0, 0, 0, 0, 0], (8, 1))


@pytest.mark.parametrize(
    "p, q, M", [(np.array([0.999, 0.001]), np.array([0.0, 1.0]), 60_000), (*SUPPORT_GAP, 50), (*_slow_rows(), 60_000)]
)
def test_the_root_chain_stops_early_only_within_its_bound(p, q, M):
    """A finite M stops once the mass left to drain is at most CONVERGED: the result is the full M-step chain's to
    within that (the cases converge, by underflow or exactly, well before M; a looser stop would fail here)."""
    u, R = root_residual_chain(q, p, M)
    ref_u, ref_R = _chain_without_stop(q, p, M)
    assert np.all(np.abs(R - ref_R) <= CONVERGED)
    assert np.all(np.abs(u - ref_u).sum(-1) <= CONVERGED)
    assert np.all(np.abs(R - root_residual_chain(q, p, np.inf)[1]) <= CONVERGED)


@pytest.mark.parametrize("seed", range(6))
def test_the_root_chain_jumps_through_long_stretches_to_the_literal_chain(seed):
    """Beyond JUMP_FROM drafts the chain jumps from one token leaving the residual's support to the next: the same
    u_M and R_M as M literal steps (rows with mass off supp(p), tiny p(x), slow and fast draining), to the literal
    chain's own accumulated round-off."""
    from speculab.theory.batch import JUMP_FROM

    rng = np.random.default_rng(seed)
    V = 2 + seed
    p, q = rng.dirichlet(np.full(V, 0.4), size=12), rng.dirichlet(np.full(V, 0.4), size=12)
    p[::3, 0] = 0.0  # off supp(p): never drained
    p[1::3, -1] = 1e-4  # slow
    p[:, 1] += 1e-3
    p /= p.sum(-1, keepdims=True)
    for M in (JUMP_FROM + 1, 1000, 5000):
        u, R = root_residual_chain(q, p, M)
        ref_u, ref_R = _chain_without_stop(q, p, M)
        np.testing.assert_allclose(R, ref_R, rtol=0, atol=1e-12)
        np.testing.assert_allclose(u, ref_u, rtol=0, atol=1e-12)


def test_the_jumps_land_on_every_M():
    """Every M from JUMP_FROM + 1 to 500 on rows whose tokens leave the support at different steps: wherever the last
    event falls relative to M (just before it, at it, on its last step), the jumps take exactly M steps."""
    from speculab.theory.batch import JUMP_FROM

    # the first row's tokens 2 and 1 leave at steps 157 and 380 (mass off supp(p) keeps them draining slowly)
    p = np.array([[0.0, 0.001, 0.002, 0.997], [0.02, 0.03, 0.05, 0.9], [0.25, 0.25, 0.25, 0.25]])
    q = np.array([[0.5, 0.25, 0.25, 0.0], [0.4, 0.3, 0.2, 0.1], [0.97, 0.01, 0.01, 0.01]])
    u, R = q, np.ones(3)
    for M in range(1, 501):
        u, R = drain(u, R, p)
        if M > JUMP_FROM:
            got_u, got_R = root_residual_chain(q, p, M)
            np.testing.assert_allclose(got_R, R, rtol=1e-9, atol=1e-15, err_msg=f"M = {M}")
            np.testing.assert_allclose(got_u, u, rtol=1e-9, atol=1e-15, err_msg=f"M = {M}")


def test_the_jumps_survive_rounding_found_by_review():
    """Found by review: p = q whose sum rounds above 1 (x / x.sum()) gave NaN for every M > 64 (log(1 − p(A)) of a
    negative number; one step drains A whole), and an event that a plain log put at step 1 for ever (q = [0, 1,
    1e-17], p = [1, 1e-20, 1e-20]: the third token leaves after ~1000 steps) left most of M = 10^12 undone. The
    reference values: the recursion in 50-digit arithmetic (the review's)."""
    rng = np.random.default_rng(0)
    x = rng.random((2000, 6))
    p = x / x.sum(-1, keepdims=True)
    assert np.all(root_residual_chain(p, p, 100)[1] == 0.0)
    p = np.array([0.3, 0.3, 0.4 + 1e-7])  # within validation's tolerance of a sum of 1
    assert root_residual_chain(p, p, 100)[1] == 0.0
    q, p = np.array([0.0, 1.0, 1e-17]), np.array([1.0, 1e-20, 1e-20])
    assert root_residual_chain(q, p, 10**12)[1] == pytest.approx(0.99999999, rel=1e-12)
    assert root_residual_chain(q, p, 2**53)[1] == pytest.approx(0.99990993, rel=1e-7)


def test_the_jumps_are_closer_to_the_exact_chain_than_stepping():
    """A slow row (found by a random search): 5,000 literal steps accumulate 2.7e-13 of round-off, the jumps none
    visible. The reference is the literal recursion in 60-digit arithmetic (mpmath):
    R_5000 = 0.96854526978157838291892022…; and a residual that decays for ever, R_M = 0.999^M at M = 60,000,
    keeps its relative precision."""
    q = np.array(
        [0.9685452699833669, 1.6449018533731196e-17, 0.03145473001661314, 1.480386526864813e-24, 1.996477333363137e-14]
    )
    p = np.array(
        [4.166809483768132e-14, 0.0004943877282826602, 0.9937303132111347, 0.005553707674030881, 0.0002215913865100498]
    )
    assert abs(root_residual_chain(q, p, 5000)[1] - 0.968545269781578382918920222) < 2e-16
    assert abs(_chain_without_stop(q, p, 5000)[1] - 0.968545269781578382918920222) > 1e-13  # what stepping gives
    R = root_residual_chain(np.array([0.0, 1.0]), np.array([0.999, 0.001]), 60_000)[1]
    assert R == pytest.approx(0.999**60_000, rel=1e-11)


def test_yins_instance_at_a_million_drafts_is_the_limit():
    """[Yin]'s T = 50, V = 7 instance (``speculab theory batch --T 50 --V 7 --row-law uniform --seed 10``): M = 10^6 is
    the M = ∞ value to every digit (the issue's case, minutes when stepped); M = 10^4 is not yet, by what the
    stepped chain gave (11.968042282095695, 10 s)."""
    inst = MarkovInstance.random(50, 7, 10, row_law="uniform")
    limit = batch_expected_rejections(inst, np.inf).rejections
    assert batch_expected_rejections(inst, 10**6).rejections == limit == pytest.approx(11.967354430489578, abs=1e-14)
    assert batch_expected_rejections(inst, 10**4).rejections - limit == pytest.approx(6.878516e-4, rel=1e-5)


def test_a_huge_M_costs_what_convergence_costs_and_is_the_limit():
    """M = 10^12 would be 10^12 passes; the chain converges within ~50,000 (the issue's M = 10^6 took minutes)."""
    p, q = np.array([0.999, 0.001]), np.array([0.0, 1.0])
    inst = MarkovInstance.context_free(p, q, T=4)
    huge, limit = batch_expected_rejections(inst, 10**12), batch_expected_rejections(inst, np.inf)
    np.testing.assert_allclose(huge.rejections_per_position, limit.rejections_per_position, rtol=0, atol=1e-15)
    assert batch_expected_rejections(inst, 1000).rejections > limit.rejections + 0.1  # not converged at M = 1000


def test_a_chunk_of_one_run_draws_every_root_row(agrees):
    """With one run per chunk, batch SD's root (drawn from its table, ``BatchSD.root_outcome``) still gives every
    root row its chance (the old numpy root loop, which left early once no run was pending, failed this when a
    mutant made it leave with one run left). Root law against q, |z| < 5."""
    from speculab.sim import BatchSD, engine, simulate

    p, q = np.array([0.8, 0.1, 0.1]), np.array([0.1, 0.1, 0.8])  # far apart: a refused root row is likely
    inst = MarkovInstance(np.broadcast_to(p, (1, 3, 3)), np.broadcast_to(q, (1, 3, 3)), np.array([1.0, 0.0, 0.0]))
    n = 4000
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "CHUNK", 1)
        c = simulate(inst, BatchSD(3), n, key=5, return_sequences=True)
    q = inst.Q[0, 0]
    freq = np.bincount(c.sequences[:, 1], minlength=3) / n
    agrees(freq, q, "law of the first token", se=binomial_se(q, n))


def test_batch_sd_names_the_theorem_its_expectation_comes_from():
    from speculab.sim import BatchSD

    inst = MarkovInstance.random(4, 3, 0)
    assert BatchSD(2).expected(inst).source == BatchSD(2, K=4).expected(inst).source == "[Yin] Thm 3"
    assert BatchSD(2, K=3).expected(inst).source.startswith("exact lookahead counts")


def test_the_batch_improvement_along_a_run_sums_over_its_round_starts():
    """A round starts at the first position and after every correction or bonus (not after an accepted draft)."""
    from speculab.backends.decode import RunRecord
    from speculab.counts import BONUS, CORRECTION, DRAFT
    from speculab.methods.batch import _root_improvement

    kind = np.array([CORRECTION, DRAFT, CORRECTION, DRAFT, DRAFT, BONUS, DRAFT])
    tv = np.array([0.5, 0.1, 0.4, 0.2, 0.3, 0.0, 0.25])
    reject = np.array([0.2, 0.1, 0.3, 0.2, 0.3, 0.0, 0.05])
    z = np.zeros(kind.size)
    rec = RunRecord(
        tokens=np.arange(kind.size),
        kind=kind,
        tv=tv,
        reject_prob=reject,
        accept_prob=z,
        loss_tv=z,
        loss_kl=z,
        target_logprob=z,
    )
    roots = [0, 1, 3, 6]  # the first; after the corrections at 0 and 2; after the bonus at 5
    assert _root_improvement([rec]) == [pytest.approx(float((tv[roots] - reject[roots]).sum()), abs=1e-15)]


def test_batch_roots_on_disjoint_supports_refuse_every_row_and_draw_from_q():
    """Draft and target with disjoint supports: every root row is refused with nothing drained (R stays 1), and the
    token comes from q — the round-off guard (R = 0) must not mistake this for its case (found by mutation testing)."""
    from speculab.sim import BatchSD, simulate

    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.0, 1.0])
    inst = MarkovInstance(np.broadcast_to(p, (3, 3, 3)), np.broadcast_to(q, (3, 3, 3)), np.array([1.0, 0.0, 0.0]))
    c = simulate(inst, BatchSD(2), 500, key=1, return_sequences=True)
    np.testing.assert_array_equal(c.sequences[:, 1:], 2)
    np.testing.assert_array_equal(c.rejections, 3)


def _ctx(rejections_sd, rejections, records=(), t1=None):
    """A stand-in for compare's context: the method's runs, SD's runs (slot 3) and the T1 estimate."""
    from types import SimpleNamespace

    def decode(method, slot):
        assert slot not in (1, 2)  # a seed of its own: slots 1 and 2 are the reference and the method
        return SimpleNamespace(counts=SimpleNamespace(rejections=np.array(rejections_sd, dtype=float)))

    result = SimpleNamespace(
        counts=SimpleNamespace(rejections=np.array(rejections, dtype=float)), records=list(records)
    )
    return SimpleNamespace(decode=decode, result=result, t1=t1)


def test_compare_rows_with_finite_lookahead_are_measured_only():
    """K finite: Thm 3 does not apply; the row is SD's mean rejections minus batch's, with the s.e. of a difference of
    independent runs, and no prediction."""
    from speculab.sim import BatchSD

    (row,) = BatchSD(2, K=3).compare_rows(_ctx([4, 6, 5], [2, 4]))
    assert "M=2, K=3" in row.quantity and math.isnan(row.predicted) and row.predicted_se == 0
    assert row.measured == pytest.approx(5.0 - 3.0, abs=1e-15)
    assert row.measured_se == pytest.approx(math.hypot(1 / math.sqrt(3), math.sqrt(2) / math.sqrt(2)), abs=1e-15)


def test_compare_rows_pair_the_improvement_with_its_batch_run():
    """K = ∞: the prediction is the mean path improvement, and its s.e. pairs each batch run with its own improvement
    (``batch + BI`` estimates T1, like an SD run): se(SD) ⊕ se(batch + BI), not se(batch) ⊕ se(BI)."""
    from types import SimpleNamespace

    from speculab.backends.decode import RunRecord
    from speculab.counts import CORRECTION, DRAFT
    from speculab.sim import BatchSD

    def record(tv, reject):  # two rounds: a correction, then a round starting after it
        kind, z = np.array([CORRECTION, DRAFT]), np.zeros(2)
        return RunRecord(
            tokens=np.arange(2),
            kind=kind,
            tv=np.array(tv),
            reject_prob=np.array(reject),
            accept_prob=z,
            loss_tv=z,
            loss_kl=z,
            target_logprob=z,
        )

    records = [record([0.5, 0.4], [0.2, 0.1]), record([0.3, 0.3], [0.3, 0.1]), record([0.6, 0.2], [0.1, 0.1])]
    bi = np.array([0.6, 0.2, 0.6])  # Σ (TV − Π r) over the round starts of each run
    batch = np.array([1.0, 2.0, 1.0])  # anti-correlated with bi: the paired s.e. is smaller than the unpaired one
    t1 = SimpleNamespace(mean=2.5, se=0.1)
    improvement, within, sd_row = BatchSD(2).compare_rows(_ctx([3, 2, 2, 3], batch, records, t1))
    assert improvement.predicted == pytest.approx(bi.mean(), abs=1e-15)
    assert improvement.measured == pytest.approx(2.5 - batch.mean(), abs=1e-15)
    sd_se = np.std([3, 2, 2, 3], ddof=1) / 2
    paired = np.std(batch + bi, ddof=1) / math.sqrt(3)
    assert improvement.measured_se == pytest.approx(math.hypot(sd_se, paired), abs=1e-15)
    assert improvement.predicted_se == 0
    # paired on the batch runs alone: Σ TV − N_rej per run (0.9 − 1, 0.6 − 2, 0.8 − 1) against the same BI
    assert within.predicted == pytest.approx(bi.mean(), abs=1e-15) and within.predicted_se == 0
    assert within.measured == pytest.approx(np.mean([-0.1, -1.4, -0.2]), abs=1e-15)
    assert within.measured_se == pytest.approx(np.std([-0.7, -1.6, -0.8], ddof=1) / math.sqrt(3), abs=1e-15)
    assert (sd_row.predicted, sd_row.predicted_se, sd_row.measured) == (2.5, 0.1, 2.5)
    assert sd_row.measured_se == pytest.approx(sd_se, abs=1e-15)


def test_an_empty_block_of_several_rows_is_one_token_from_the_first_rows_target():
    """Rows that all proposed nothing (e.g. prompt lookup without a match): no root to verify, one token from the
    first row's ``q_1`` — the law of one round (outcome summing to 1), not one per row."""
    rng = np.random.default_rng(3)
    q = rng.dirichlet(np.ones(4), size=(1, 3, 1))
    law = BatchSD(3, K=2).round_law(np.zeros((1, 3, 0, 4)), q, np.zeros((1, 3, 0), dtype=np.int64), bonus=True)
    assert law.outcome.sum() == 1.0 and law.outcome[0, 0, 0] == 1.0
    np.testing.assert_array_equal(law.correction[0, 0, 0], q[0, 0, 0])


def test_a_one_token_vocabulary_accepts_every_row_at_the_root():
    """V = 1: every row's draft is the target's only token, so the root accepts the first row with certainty and
    the round's law is the whole block, then the bonus — the same as SD's (found by mutation testing: the root
    chain read a second token)."""
    ones = np.ones((1, 2, 2, 1))
    law = BatchSD(2, K=2).round_law(ones, np.ones((1, 2, 3, 1)), np.zeros((1, 2, 2), dtype=np.int64), bonus=True)
    sd = SD(K=2).round_law(ones[:, :1], np.ones((1, 1, 3, 1)), np.zeros((1, 1, 2), dtype=np.int64), bonus=True)
    assert law.outcome.sum() == 1.0 and law.outcome[0, 0, 2] == 1.0
    np.testing.assert_array_equal(law.outcome[:, :1], sd.outcome)
    np.testing.assert_array_equal(law.correction[0, 0, 2], sd.correction[0, 0, 2])  # the bonus, q_3 = [1]


def test_edges_of_the_inputs():
    """The largest finite M is 2^53 (float64 holds every integer up to it), one more is refused; Bernoulli
    parameters outside [0, 1] or NaN are refused (found by mutation testing)."""
    from speculab.theory.batch import MAX_M

    assert MAX_M == 2**53
    p, q = np.array([0.7, 0.3]), np.array([0.4, 0.6])
    assert batch_rejection_probability(q, p, MAX_M) == pytest.approx(
        batch_rejection_probability(q, p, np.inf), abs=1e-15
    )
    with pytest.raises(ValueError, match=r"M must be at most 2\^53"):
        batch_rejection_probability(q, p, MAX_M + 1)
    for u, v in ((1.5, 0.5), (0.5, 1.5), (0.5, -0.1), (float("nan"), 0.5), (0.5, float("nan"))):
        with pytest.raises(ValueError, match="u and v must be probabilities"):
            bernoulli_batch_improvement(u, v, 2)
    with pytest.raises(ValueError, match="M must be whole numbers >= 1 or inf"):
        bernoulli_batch_improvement(0.5, 0.3, 2.5)
    assert uniform_batch_improvement(1.0, 3) == 0.0  # V' = V: nothing to improve
    assert uniform_batch_improvement(2.0, np.inf) == 0.5  # 1 − 1/r
    assert batch_rejection_probability(np.array([1.0]), np.array([1.0]), 3) == 0.0  # one token: never refused
    # a draft without full support: the chain stops once the drainable mass is gone, even at M = 2^53 (the rest,
    # q off supp p, is never drained: R_∞ = q(outside))
    p0, q0 = np.array([0.7, 0.3, 0.0]), np.array([0.4, 0.3, 0.3])
    assert batch_rejection_probability(q0, p0, MAX_M) == pytest.approx(
        float(batch_rejection_probability(q0, p0, np.inf)), abs=1e-15
    )


def test_the_root_chain_stops_when_every_context_has_converged():
    """Stacked contexts converge at different speeds: the early exit waits for the slowest (the largest drainable
    mass), so each context's R_M is the one computed alone."""
    p = np.array([[0.5, 0.5, 0.0], [0.98, 0.01, 0.01]])
    q = np.array([[0.5, 0.5, 0.0], [0.01, 0.01, 0.98]])  # the first context is done at once, the second is slow

    def literal(q, p, M):  # R_M = Π_m TV(q^m, p), q^{m+1} the residual of q^m (SPEC B), read literally
        R = 1.0
        for _ in range(M):
            excess = np.maximum(q - p, 0.0)
            if excess.sum() == 0:
                return 0.0
            R, q = R * excess.sum(), excess / excess.sum()
        return R

    together = root_residual_chain(q, p, 40)[1]
    np.testing.assert_allclose(together, [literal(q[i], p[i], 40) for i in range(2)], rtol=1e-12, atol=1e-15)
    assert together[1] > 1e-3


def test_the_profiles_improvement_is_t1_minus_t3():
    """``improvement`` (and per position) is T1's rejections minus batch SD's, each from its own theorem: Thm 1's
    own function for T1, non-negative at every position (Thm 3: E_f[TV − Π r_m] >= 0)."""
    inst = MarkovInstance.random(6, 3, 4, concentration=0.6)
    t3 = batch_expected_rejections(inst, 3)
    t1 = sd_expected_rejections(inst)
    np.testing.assert_allclose(
        t3.improvement_per_position, t1.rejections_per_position - t3.rejections_per_position, atol=1e-15
    )
    assert t3.improvement == pytest.approx(t1.rejections - t3.rejections, abs=1e-14) and t3.improvement > 0.01
    assert np.all(t3.improvement_per_position >= -1e-15)


def test_the_jumps_have_two_passes_per_token_and_then_refuse(monkeypatch):
    """``2V + 2`` passes over the rows, then a row with drafts left is refused, never returned short. With every
    event put at the next step (``log1p(−t)`` patched to 0, as if round-off misplaced each one) a pass takes one
    literal step: on q = (0.9, 0.05, 0.05), p = (0, 0.001, 0.999) — token 1 drains by about 0.001 a step, held up by
    the mass off supp(p) — V = 3 tokens allow M = 8 steps, the literal chain's values, and M = 9 raise. With V = 1
    and p = q the one pass that drains the token is needed too (R_M = 0)."""
    from speculab.theory.batch import _drain_in_jumps

    assert _drain_in_jumps(np.array([[1.0]]), np.array([[1.0]]), 100)[1] == 0.0
    q, p = np.array([[0.9, 0.05, 0.05]]), np.array([[0.0, 0.001, 0.999]])
    ref_u, ref_R = _chain_without_stop(q, p, 8)
    log1p = np.log1p  # log1p(−p(A)) per row (1-D) kept; log1p(−t) per token (2-D) made 0: n = 1
    monkeypatch.setattr(np, "log1p", lambda x: log1p(x) if np.ndim(x) < 2 else np.zeros_like(x))
    u, R = _drain_in_jumps(q, p, 8)
    np.testing.assert_allclose(R, ref_R, rtol=1e-12)
    np.testing.assert_allclose(u, ref_u, rtol=1e-12)
    assert u[0, 1] > 0  # token 1 still drafted from
    with pytest.raises(RuntimeError, match="could not all be located"):
        _drain_in_jumps(q, p, 9)


def test_a_jax_root_chain_steps_all_its_drafts_even_past_the_jump_threshold():
    """JAX arrays never take numpy's jumps (they step all ``M`` drafts, traced or not) and give numpy's values, also
    for ``M`` past ``JUMP_FROM`` — found by mutation testing of the fast tier (``or`` for ``and`` sent JAX arrays
    into the numpy-only jumps; only slow JAX tests saw it)."""
    jnp = pytest.importorskip("jax.numpy")
    from speculab.theory.batch import JUMP_FROM

    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(5), size=3), rng.dirichlet(np.ones(5), size=3)
    p[0, 1] = 0.0
    p[0] /= p[0].sum()
    M = JUMP_FROM + 6
    import jax

    with jax.enable_x64(True):  # float64, to compare with numpy to 1e-12
        u, R = root_residual_chain(jnp.asarray(q), jnp.asarray(p), M)
    u_np, R_np = root_residual_chain(q, p, M)
    np.testing.assert_allclose(np.asarray(u), u_np, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(R), R_np, rtol=0, atol=1e-12)


@pytest.mark.parametrize("u", [0.0, 1.0])
@pytest.mark.parametrize("v", [0.3, 0.7])
def test_bernoulli_closed_form_at_a_point_mass_draft(u, v):
    """``p`` a point mass (``u`` = 0 or 1): more drafts repeat the same token, so the improvement is 0 at every M,
    ∞ included, as the general recursion says — the edges Hypothesis rarely draws exactly (found by mutation testing
    of the fast tier: the point-mass test at ``u = 0`` read as ``u = 1`` survived)."""
    p, q = np.array([1 - u, u]), np.array([1 - v, v])
    for M in (2, 5, np.inf):
        assert bernoulli_batch_improvement(u, v, M) == 0.0, M
        assert batch_improvement(q, p, M) == pytest.approx(0.0, abs=1e-15), M  # the recursion: to round-off
