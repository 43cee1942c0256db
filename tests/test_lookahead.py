"""Exact fixed-lookahead counts (SPEC L) and the [SDpp] cost model (SPEC D).

References: the literal enumeration of SD with finite K (``_enumerate``), T1,
Leviathan et al.'s i.i.d. formulas (via an independent renewal recursion), and
the numpy simulator (Monte Carlo, fixed seeds, |z| < 5).
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _enumerate import enumerate_decoding
from conftest import Z_BOUND, assert_power, binomial_se, power
from speculab.sim import SD, Counts, simulate
from speculab.testing import distribution_pairs, markov_instances
from speculab.methods.sd import sd_rule
from speculab.theory import MarkovInstance, sd_expected_rejections, tv
from speculab.theory.lookahead import (
    best_lookahead,
    iid_speedup,
    iid_tokens_per_round,
    latency_per_token,
    lookahead_counts,
)

COUNT_FIELDS = ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus")


# -- exactness ------------------------------------------------------------------------
@given(markov_instances(), st.sampled_from([None, 1, 2, 3, 5]))
def test_every_count_matches_enumeration(inst, K):
    """Each expectation and both per-position profiles equal the literal enumeration of Alg. 1 with lookahead K."""
    B, R = sd_rule(inst.P, inst.Q)
    e = enumerate_decoding(inst.P, inst.Q, inst.rho, B, R, K)
    c = lookahead_counts(inst, K)
    for name in COUNT_FIELDS:
        assert getattr(c, name) == pytest.approx(getattr(e, name), abs=1e-12), name
    np.testing.assert_allclose(c.rejections_per_position, e.rejections_per_position, atol=1e-12)
    np.testing.assert_allclose(c.bonus_per_position, e.bonus_per_position, atol=1e-12)
    assert c.tokens_per_round == pytest.approx(inst.T / e.oracle_calls, abs=1e-12)


@given(markov_instances(max_T=6, max_V=4), st.sampled_from([None, 0, 1, 7]))
def test_every_position_is_accepted_rejected_or_bonus(inst, extra):
    """Per position the three outcomes partition probability one; the finite-horizon gap is a probability."""
    K = None if extra is None else inst.T + extra if extra else max(1, inst.T // 2)
    c = lookahead_counts(inst, K)
    np.testing.assert_allclose(
        c.accepted_per_position + c.rejections_per_position + c.bonus_per_position, 1.0, atol=1e-12
    )
    assert c.oracle_calls_per_position[0] == pytest.approx(1.0, abs=1e-12)
    assert -1e-12 <= c.final_round_all_accepted <= 1 + 1e-12
    assert c.discarded == pytest.approx(c.draft_calls - c.accepted, abs=1e-12)
    assert c.discarded >= -1e-12


@given(markov_instances(max_T=8, max_V=4), st.integers(0, 3))
def test_K_at_least_T_is_theorem_1(inst, extra):
    """K ≥ T (and K = None) is [Yin] Thm 1, position by position; no bonus token is ever drawn."""
    t1 = sd_expected_rejections(inst)
    for K in (inst.T + extra, None):
        c = lookahead_counts(inst, K)
        np.testing.assert_allclose(c.rejections_per_position, t1.rejections_per_position, atol=1e-12)
        assert c.oracle_calls == pytest.approx(t1.oracle_calls, abs=1e-12)
        assert c.bonus == 0.0
        assert c.K_effective == inst.T


def test_finite_K_differs_from_theorem_1():
    """Power check: on a T = 50 instance, K = 3 has clearly fewer rejections than T1 (bonus positions)."""
    inst = MarkovInstance.random(50, 7, 10, row_law="uniform")
    assert lookahead_counts(inst, 3).rejections < sd_expected_rejections(inst).rejections - 1.0


# -- Leviathan et al. (i.i.d.) ----------------------------------------------------------
def _renewal(alpha: float, K: int, T: int) -> dict:
    """Independent reference for a context-free instance: a recursion on the number of remaining positions.

    A round with ``m`` positions left drafts ``L = min(K, m)``; it rejects at draft ``j``
    w.p. ``α^{j−1}(1 − α)`` (``j`` tokens), accepts all w.p. ``α^L`` and then emits a bonus if ``L < m``.
    """
    rounds, rej, bonus, drafts = (np.zeros(T + 1) for _ in range(4))
    for m in range(1, T + 1):
        L = min(K, m)
        for j in range(1, L + 1):
            w = alpha ** (j - 1) * (1 - alpha)
            rounds[m] += w * rounds[m - j]
            rej[m] += w * (1 + rej[m - j])
            bonus[m] += w * bonus[m - j]
            drafts[m] += w * drafts[m - j]
        w, used = alpha**L, L + (L < m)
        rounds[m] += 1 + w * rounds[m - used]
        rej[m] += w * rej[m - used]
        bonus[m] += w * ((L < m) + bonus[m - used])
        drafts[m] += L + w * drafts[m - used]
    return {"oracle_calls": rounds[T], "rejections": rej[T], "bonus": bonus[T], "draft_calls": drafts[T]}


@given(distribution_pairs(max_V=5), st.integers(1, 6), st.integers(1, 25))
def test_context_free_matches_the_iid_renewal_recursion(pq, K, T):
    p, q = pq
    alpha = 1.0 - float(tv(p, q))
    c = lookahead_counts(MarkovInstance.context_free(p, q, T), K)
    for name, value in _renewal(alpha, K, T).items():
        assert getattr(c, name) == pytest.approx(value, abs=1e-10), name


@pytest.mark.parametrize("K", [1, 3, 8])
@pytest.mark.parametrize(
    "pq", [([0.5, 0.5], [0.8, 0.2]), ([0.2, 0.3, 0.5], [0.25, 0.25, 0.5]), ([0.6, 0.4], [0.6, 0.4])]
)
def test_tokens_per_round_away_from_the_horizon_is_leviathan(pq, K):
    """The per-round average away from the end: rounds added per extra position → (1 − α)/(1 − α^{K+1}).

    (360 positions are a whole number of rounds when α = 1, where rounds have length K + 1 exactly.)
    """
    p, q = map(np.array, pq)
    alpha = 1.0 - float(tv(p, q))
    closed = (K + 1.0) if alpha == 1 else (1 - alpha ** (K + 1)) / (1 - alpha)
    assert iid_tokens_per_round(alpha, K) == pytest.approx(closed, rel=1e-12)
    calls = {T: lookahead_counts(MarkovInstance.context_free(p, q, T), K).oracle_calls for T in (360, 720)}
    assert (720 - 360) / (calls[720] - calls[360]) == pytest.approx(closed, rel=1e-9)
    assert lookahead_counts(MarkovInstance.context_free(p, q, 720), K).tokens_per_round == pytest.approx(
        closed, rel=0.02
    )


def test_iid_formulas():
    assert iid_tokens_per_round(0.0, 5) == 1.0
    assert iid_tokens_per_round(1.0, 5) == 6.0
    np.testing.assert_allclose(iid_tokens_per_round(np.array([0.5, 0.9]), 2), [1.75, 2.71])
    assert iid_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8**5) / (0.2 * 1.2))
    assert iid_speedup(0.8, 4, 0.0) == iid_tokens_per_round(0.8, 4)  # free drafts: the speedup is the tokens per round


def test_root_kernels_are_batched_over_leading_axes():
    """``lookahead_kernels`` is array API over leading axes: a stack of positions gives each position's kernels,
    with a user root law as with the built-in one (the root's refusal mass summed over the token axis)."""
    from speculab.methods import OptimalMultiDraft
    from speculab.theory.lookahead import lookahead_kernels

    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(3), size=(2, 3)), rng.dirichlet(np.ones(3), size=(2, 3))  # (T, V, V)
    for root in (None, OptimalMultiDraft(2).accepted_law):
        stacked = lookahead_kernels(2, p, q, root=root)
        for t in range(2):
            for whole, one in zip(stacked, lookahead_kernels(2, p[t], q[t], root=root)):
                np.testing.assert_allclose(whole[t], one, atol=1e-14)


# -- Monte Carlo --------------------------------------------------------------------------
@pytest.mark.parametrize("K", [1, 4, 11])
def test_matches_the_simulator(K, agrees):
    """T = 50, V = 7: every simulated count of SD(K) within |z| < 5 of the exact value, per position too."""
    inst = MarkovInstance.random(50, 7, 21, row_law="uniform")
    exact = lookahead_counts(inst, K)
    n = 35_000  # the bonus of K = 11 needs 30,000 runs to see a 10 % error
    sim: Counts = simulate(inst, SD(K=K), n, key=1000 + K)
    for name in COUNT_FIELDS:
        agrees(sim.estimate(name), getattr(exact, name), name)
    p = exact.rejections_per_position
    agrees(sim.rejections_per_position, p, "rejection rate per position", se=binomial_se(p, n))


@pytest.mark.power
def test_a_wrong_K_would_be_caught(record_property):
    """Power check: the simulator's counts for K = 4 are far from the exact counts for K = 5 (an off-by-one in the
    lookahead), in standard errors of the same simulation."""
    inst = MarkovInstance.random(50, 7, 21, row_law="uniform")
    sim = simulate(inst, SD(K=4), 20_000, key=7)
    wrong, right = lookahead_counts(inst, 5), lookahead_counts(inst, 4)
    shift = (wrong.oracle_calls - right.oracle_calls) / sim.estimate("oracle_calls").se
    assert_power(
        record_property, "SD(K=4) target calls vs exact lookahead counts (N = 20,000): K off by one", power(shift)
    )
    assert abs(sim.estimate("oracle_calls").z(wrong.oracle_calls)) > Z_BOUND
    assert abs(sim.estimate("draft_calls").z(wrong.draft_calls)) > Z_BOUND


# -- cost model ---------------------------------------------------------------------------
def test_cost_model_conventions():
    """eq. (3.2)/(5.1) vs eq. (3.1): they differ by t_draft · P(final round all accepted, no target token)."""
    inst = MarkovInstance.random(30, 5, 4)
    c = lookahead_counts(inst, 4)
    td, tt = 0.07, 1.3
    assert c.forward_pass_time(td, tt) - c.total_time(td, tt) == pytest.approx(
        td * c.final_round_all_accepted, abs=1e-12
    )
    assert c.latency(td, tt) == pytest.approx(c.total_time(td, tt) / c.T, rel=1e-13)
    np.testing.assert_allclose(latency_per_token([0.0, 1.0], [1.0, 0.5], 0.1, 1.0), [1.0, 0.65])


@pytest.mark.parametrize("same", [True, False], ids=["draft=target", "disjoint"])
def test_cost_model_on_runs_counted_by_hand(same):
    """T = 8, K = 4, deterministic runs. Draft = target: a round of 4 accepted drafts and a bonus, then 3 drafts
    accepted at the horizon (7 drafts, 2 target calls, nothing discarded; the last round outputs no target
    token). Disjoint supports: each round's first draft is rejected (drafts 4, 4, 4, 4, 4, 3, 2, 1, all 26
    discarded, 8 target calls)."""
    p, q = ([0.5, 0.5, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]) if same else ([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5])
    c = lookahead_counts(MarkovInstance.context_free(p, q, 8), 4)
    drafts, target, discarded, last = (7, 2, 0, 1) if same else (26, 8, 26, 0)
    assert (c.draft_calls, c.oracle_calls, c.discarded, c.final_round_all_accepted) == pytest.approx(
        (drafts, target, discarded, last), abs=1e-12
    )
    td, tt = 0.07, 1.3
    assert c.forward_pass_time(td, tt) == pytest.approx(drafts * td + target * tt, rel=1e-13)  # eq. (3.1)
    total = td * (8 + discarded) + (tt - td) * target  # eq. (3.2): one draft pass charged per output token
    assert c.total_time(td, tt) == pytest.approx(total, rel=1e-13)
    assert c.latency(td, tt) == pytest.approx(total / 8, rel=1e-13)


def test_best_lookahead_is_the_argmin_and_agrees_with_leviathan():
    inst = MarkovInstance.random(40, 6, 5)
    best = best_lookahead(inst, 0.1, 1.0, max_K=12)
    brute = [lookahead_counts(inst, K).latency(0.1, 1.0) for K in range(1, 13)]
    assert best.K == int(np.argmin(brute)) + 1
    np.testing.assert_allclose(best.latencies, brute, rtol=1e-13)
    assert best.latency == min(brute) and best.counts.K == best.K
    # free drafts: verification rate is non-increasing in K, so the largest K is (among the) best
    free = best_lookahead(inst, 0.0, 1.0, max_K=12)
    assert free.latency == pytest.approx(lookahead_counts(inst, 12).latency(0.0, 1.0), rel=1e-12)
    # i.i.d. with a long horizon: Leviathan's optimal K maximises the walltime factor
    p, q = [0.5, 0.3, 0.2], [0.4, 0.35, 0.25]
    alpha = 1.0 - float(tv(p, q))
    for c in (0.05, 0.2):
        expected = 1 + int(np.argmax([iid_speedup(alpha, K, c) for K in range(1, 21)]))
        assert best_lookahead(MarkovInstance.context_free(p, q, 3000), c, 1.0, max_K=20).K == expected


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda inst: lookahead_counts(inst, 0), "K must be an integer >= 1"),
        (lambda inst: lookahead_counts(inst, 2.5), "K must be an integer"),
        (lambda inst: lookahead_counts(inst.P, 2), "inst must be a MarkovInstance"),
        (lambda inst: lookahead_counts(inst, 2).latency(-0.1, 1.0), "t_draft"),
        (lambda inst: lookahead_counts(inst, 2).total_time(0.1, 0.0), "t_target"),
        (lambda inst: best_lookahead(inst, 0.1, 1.0, max_K=0), "max_K"),
        (lambda inst: best_lookahead(inst, float("nan"), 1.0), "t_draft"),
        (lambda inst: iid_tokens_per_round(1.5, 3), "alpha"),
        (lambda inst: iid_speedup(0.5, 3, -1.0), "c must be"),
        (lambda inst: latency_per_token(-0.1, 0.2, 0.1, 1.0), "discard_rate must be >= 0"),
        (lambda inst: latency_per_token([0.5, -0.25], 0.2, 0.1, 1.0), r"discard_rate must be >= 0 .*got -0\.25"),
        (lambda inst: latency_per_token(0.1, 0.2, float("inf"), 1.0), "t_draft must be a finite number"),
        (lambda inst: latency_per_token(0.1, 0.2, "fast", 1.0), "t_draft must be a finite number"),
        (lambda inst: latency_per_token(0.1, 0.2, 0.1, True), "t_target must be a finite number"),
        (
            lambda inst: lookahead_counts(inst, 2, M=2, root=lambda p, q: np.zeros(0)),
            r"got shape \(0,\), range \[0, 0\]",
        ),
        (lambda inst: latency_per_token(0.1, [0.2, float("nan")], 0.1, 1.0), "verification_rate must be finite"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call(MarkovInstance.random(5, 3, 0))


def test_latency_per_token_takes_lists_next_to_arrays():
    """Regression: a list beside a numpy array (numpy ≥ 2 arrays have __array_namespace__) is converted."""
    from speculab.theory import latency_per_token

    np.testing.assert_allclose(latency_per_token(np.array([0.1]), [0.2], 0.1, 1.0), [0.29])
    assert latency_per_token(0.1, 0.2, 0.1, 1.0) == pytest.approx(0.29)


def test_a_rule_given_by_its_acceptance_or_its_rejection_law_alone_is_that_rule():
    """``b`` alone (with its unbiased rejection law) and ``P`` alone (with SD's acceptance) each change the counts
    from SD's, to Theorem 2's ([Yin], :func:`expected_rejections`, another code path) at ``K = ∞`` — found by
    mutation testing of the fast tier: ``or`` for ``and`` in the SD shortcut survived."""
    from speculab.theory import expected_rejections, sd_acceptance
    from speculab.theory.lookahead import lookahead_counts

    inst = MarkovInstance.random(4, 3, 11)
    half = lambda p, q: 0.5 * sd_acceptance(p, q)  # noqa: E731 — unbiased, rejects more than SD
    flat = np.full((4, 3, 3), 1 / 3)  # a rejection law other than the residual: biased, another output chain
    sd = lookahead_counts(inst, None).rejections
    for b, P in ((half, None), (None, flat)):
        theory = expected_rejections(inst, b if b is not None else sd_acceptance(inst.P, inst.Q), P).rejections
        got = lookahead_counts(inst, None, b=b, rejection=P).rejections
        assert got == pytest.approx(theory, rel=1e-12) and abs(got - sd) > 1e-3, (b, P)


def test_the_slot_chain_has_a_bonus_slot_only_when_a_round_can_end_before_the_horizon():
    """``lookahead_slots``: ``K >= T`` (or ``None``) never reaches a bonus, so only two slots are kept (root, rest);
    ``K < T`` keeps the root, ``K − 1`` slots and the bonus (found by mutation testing of the fast tier: ``<=`` for
    ``<`` survived there)."""
    from speculab.theory.lookahead import lookahead_slots

    assert lookahead_slots(4, None) == (4, False, 2) and lookahead_slots(4, 4) == (4, False, 2)
    assert lookahead_slots(4, 9) == (4, False, 2) and lookahead_slots(1, None) == (1, False, 1)
    assert lookahead_slots(4, 3) == (3, True, 4) and lookahead_slots(4, 1) == (1, True, 2)


def test_lookahead_defaults_and_refusals_the_fast_tier_checks():
    """Found by mutation testing of the fast tier (only slow tests saw them): the counts are frozen, batch SD takes
    no other rule (``b`` alone or ``P`` alone is refused, not only both), and ``best_lookahead`` tries K = 1..20 by
    default."""
    from conftest import assert_frozen
    from speculab.theory import sd_acceptance
    from speculab.theory.lookahead import best_lookahead, lookahead_counts

    inst = MarkovInstance.random(4, 3, 2)
    assert_frozen(lookahead_counts(inst, 2))
    for rule in ({"b": lambda p, q: 0.5 * sd_acceptance(p, q)}, {"rejection": np.full((4, 3, 3), 1 / 3)}):
        with pytest.raises(ValueError, match=r"M > 1 \(batch SD, \[Yin\] Alg. 4\) uses SD's rule"):
            lookahead_counts(inst, 2, M=2, **rule)
    best = best_lookahead(inst, 0.1, 1.0)
    assert len(best.latencies) == 20
    assert_frozen(best)
