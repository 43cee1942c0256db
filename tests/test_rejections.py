"""T1 and T2 ([Yin] Thm 1, Thm 2, Cor. 1) against brute-force enumeration and as properties."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _enumerate import enumerate_decoding, sequence_law
from speculab.testing import distribution_pairs, markov_instances
from speculab.methods.sd import sd_rule
from speculab.theory import (
    MarkovInstance,
    expected_rejections,
    is_unbiased,
    output_law,
    sd_acceptance,
    sd_expected_rejections,
    tv,
    unbiased_rejection_distribution,
)


def _assert_same_law(a: dict, b: dict, atol=1e-12):
    keys = set(a) | set(b)
    for k in keys:
        assert abs(a.get(k, 0.0) - b.get(k, 0.0)) <= atol, k


def _random_unbiased_b(inst, rng):
    """b = u · min(1, q/p) with u ~ U[0, 1] per entry: unbiased by [Yin] Thm 2."""
    return rng.random(inst.P.shape) * sd_acceptance(inst.P, inst.Q)


@given(markov_instances(), st.sampled_from([None, 1, 2, 3]))
def test_sd_output_law_is_q_and_t1_is_exact(inst, K):
    """Enumerate every trajectory of Algorithm 1: law = q, E[N_rej] = T1 (K = ∞), per position too."""
    B, R = sd_rule(inst.P, inst.Q)
    e = enumerate_decoding(inst.P, inst.Q, inst.rho, B, R, K)
    _assert_same_law(e.law, sequence_law(inst.Q, inst.rho))
    t1 = sd_expected_rejections(inst)
    if K is None or K >= inst.T:
        np.testing.assert_allclose(e.rejections_per_position, t1.rejections_per_position, atol=1e-12)
        assert e.rejections == pytest.approx(t1.rejections, abs=1e-12)
        assert e.oracle_calls == pytest.approx(t1.oracle_calls, abs=1e-12)
    else:
        # A bonus position cannot be rejected, and the prefix law is q either way, so
        # finite K has, position by position, at most T1's rejection probability.
        assert np.all(e.rejections_per_position <= t1.rejections_per_position + 1e-12)


@given(markov_instances(), st.integers(0, 2**32 - 1))
def test_unbiased_alg2_law_and_t2_bound(inst, seed):
    """Any b ≤ min(1, q/p) with P = (q − bp)/Σ(1−b)p is unbiased and has E[N_rej] ≥ T1 (Thm 2)."""
    b = _random_unbiased_b(inst, np.random.default_rng(seed))
    assert is_unbiased(inst, b)
    np.testing.assert_allclose(output_law(inst, b), inst.Q, atol=1e-12)
    prof = expected_rejections(inst, b)
    t1 = sd_expected_rejections(inst)
    assert prof.rejections >= t1.rejections - 1e-12
    assert np.all(prof.rejections_per_position >= t1.rejections_per_position - 1e-12)
    R = unbiased_rejection_distribution(inst.P, inst.Q, b)
    e = enumerate_decoding(inst.P, inst.Q, inst.rho, b, R, None)
    _assert_same_law(e.law, sequence_law(inst.Q, inst.rho))
    np.testing.assert_allclose(e.rejections_per_position, prof.rejections_per_position, atol=1e-12)
    assert e.oracle_calls == pytest.approx(prof.oracle_calls, abs=1e-12)


@given(markov_instances(), st.integers(0, 2**32 - 1))
def test_biased_alg2_output_law_matches_enumeration(inst, seed):
    """A biased b with a user P: the exact output chain P_A and its rejections match enumeration."""
    rng = np.random.default_rng(seed)
    b = rng.random(inst.P.shape)
    P = rng.dirichlet(np.ones(inst.V), size=inst.P.shape[:2])
    e = enumerate_decoding(inst.P, inst.Q, inst.rho, b, P, None)
    law = output_law(inst, b, P)
    _assert_same_law(e.law, sequence_law(law, inst.rho))
    np.testing.assert_allclose(
        e.rejections_per_position, expected_rejections(inst, b, P).rejections_per_position, atol=1e-12
    )


def test_sd_attains_the_lower_bound():
    inst = MarkovInstance.random(20, 5, 0)
    assert expected_rejections(inst, sd_acceptance).rejections == pytest.approx(
        sd_expected_rejections(inst).rejections, rel=1e-13
    )
    half = lambda p, q: 0.5 * sd_acceptance(p, q)  # noqa: E731
    assert expected_rejections(inst, half).rejections > sd_expected_rejections(inst).rejections + 1
    # b ≡ 0 is autoregressive decoding: every token is a rejection.
    assert expected_rejections(inst, np.zeros(inst.P.shape)).rejections == pytest.approx(inst.T)


@given(distribution_pairs(), st.integers(1, 60))
def test_t1_context_free_is_T_times_tv(pq, T):
    p, q = pq
    inst = MarkovInstance.context_free(p, q, T)
    prof = sd_expected_rejections(inst)
    assert prof.rejections == pytest.approx(T * tv(p, q), abs=1e-10)
    np.testing.assert_allclose(prof.rejections_per_position, tv(p, q), atol=1e-12)


def test_acceleration_and_oracle_calls():
    inst = MarkovInstance.context_free([0.5, 0.5], [0.8, 0.2], T=10)
    prof = sd_expected_rejections(inst)
    assert prof.rejections == pytest.approx(3.0)
    assert prof.acceleration == pytest.approx(10 / 3)
    assert prof.oracle_calls == pytest.approx(3.0 + 1 - 0.3)
    same = sd_expected_rejections(MarkovInstance.context_free([0.5, 0.5], [0.5, 0.5], T=4))
    assert same.rejections == 0 and same.acceleration == np.inf and same.oracle_calls == 1


def test_biased_b_needs_an_explicit_rejection_distribution():
    inst = MarkovInstance.random(3, 3, 0)
    with pytest.raises(ValueError, match=r"b <= min\(1, q/p\)"):
        output_law(inst, np.ones(inst.P.shape))
    assert not is_unbiased(inst, np.ones(inst.P.shape))


@pytest.mark.parametrize(
    "b, P, match",
    [
        (np.full((3, 3, 3), 1.5), None, r"b must lie in \[0, 1\]"),
        (np.zeros((3, 3, 2)), None, "same shape"),
        (np.zeros((3, 3, 3)), np.full((3, 3, 3), 0.5), "must sum to 1"),
        (np.full((3, 3, 3), np.nan), None, "b must be finite"),
        (np.ones((3, 3, 3)), np.ones((3, 3)), "same shape"),
    ],
)
def test_bad_acceptance_and_rejection_rules(b, P, match):
    inst = MarkovInstance.random(3, 3, 0)
    with pytest.raises(ValueError, match=match):
        expected_rejections(inst, b, P)


def test_unbiased_rejection_distribution_for_sd_is_the_residual():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.1, 0.3, 0.6])
    np.testing.assert_allclose(unbiased_rejection_distribution(p, q, sd_acceptance(p, q)), [0, 0, 1])
    with pytest.raises(ValueError, match="unbiased"):
        unbiased_rejection_distribution(p, q, np.ones(3))


@given(markov_instances(max_T=4, max_V=2))
def test_lookahead_monotonicity(inst):
    """Exact counts (enumeration) for K = 1..T: fewer oracle calls and more drafts as K grows; K ≥ T is K = ∞.

    Expected rejections are *not* monotone in K on a finite horizon (bonus positions
    shift with K), but every K stays at or below T1 position by position.
    """
    B, R = sd_rule(inst.P, inst.Q)
    runs = [enumerate_decoding(inst.P, inst.Q, inst.rho, B, R, K) for K in range(1, inst.T + 1)]
    for small, large in zip(runs, runs[1:]):
        assert large.oracle_calls <= small.oracle_calls + 1e-12
        assert large.draft_calls >= small.draft_calls - 1e-12
    infinite = enumerate_decoding(inst.P, inst.Q, inst.rho, B, R, None)
    assert runs[-1].oracle_calls == pytest.approx(infinite.oracle_calls, abs=1e-12)
    assert runs[-1].rejections == pytest.approx(sd_expected_rejections(inst).rejections, abs=1e-12)


def test_acceleration_with_fewer_than_one_expected_rejection():
    """T / E[N_rej] also when 0 < E[N_rej] ≤ 1 (a nearly equal pair), inf only at 0 (found by mutation testing:
    a guard ``> 1`` survived)."""
    p, q = np.array([0.5, 0.5]), np.array([0.52, 0.48])
    inst = MarkovInstance.context_free(p, q, T=10)  # E[N_rej] = 10 · 0.02 = 0.2
    assert sd_expected_rejections(inst).acceleration == pytest.approx(10 / 0.2)
    assert sd_expected_rejections(MarkovInstance.context_free(p, p, T=10)).acceleration == float("inf")


def test_float32_instances_give_float32_profiles():
    inst = MarkovInstance.random(5, 3, 0, dtype="float32")
    assert sd_expected_rejections(inst).rejections_per_position.dtype == np.float32


def test_rejection_rows_that_are_never_sampled_need_not_be_distributions():
    """Where b = 1 for every draft nothing is rejected: the rule's rejection row there is never read and may be
    zeros (found by mutation testing: checking every row, ``>= 0`` for ``> 0``, survived)."""
    p, q = np.array([0.5, 0.5]), np.array([0.5, 0.5])
    inst = MarkovInstance.context_free(p, q, T=4)
    b = np.ones((4, 2, 2))
    P = np.zeros((4, 2, 2))
    assert expected_rejections(inst, b, P).rejections == 0.0


def test_the_unbiasedness_check_allows_round_off_of_exactly_1e_12_and_no_more():
    """``b·p − q`` may exceed 0 by round-off up to 1e-12, not beyond: exactly 1e-12 passes, 1.5e-12 is refused
    (found by mutation testing of the fast tier: ``>=`` for ``>`` and a tolerance of 2e-12 survived). With ``p = 1``
    and ``q = 0`` at the first token, ``b·p − q`` is ``b`` exactly."""
    p, q = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    unbiased_rejection_distribution(p, q, np.array([1e-12, 0.0]))
    with pytest.raises(ValueError, match=r"b <= min\(1, q/p\).*b\*p - q = 1.5e-12 > 0"):
        unbiased_rejection_distribution(p, q, np.array([1.5e-12, 0.0]))


def test_a_given_rejection_law_is_used_on_every_row_that_can_reject():
    """``rejection_array`` keeps the user's rows where ``Σ (1 − b) p > 0`` and zeros the rows that never reject:
    found by mutation testing of the fast tier (a fill of 1 for 0 on those rows survived: no fast test read the
    rows back)."""
    from speculab.theory.rejections import rejection_array

    inst = MarkovInstance.random(3, 3, 7)
    b = np.full((3, 3, 3), 0.5)
    b[1, 2] = 1.0  # the row of position 1, previous token 2: never rejects
    P = np.broadcast_to(np.array([0.2, 0.3, 0.5]), (3, 3, 3)).copy()
    R = rejection_array(inst, b, P)
    used = np.ones((3, 3), dtype=bool)
    used[1, 2] = False
    np.testing.assert_array_equal(R[used], P[used])
    np.testing.assert_array_equal(R[1, 2], 0.0)
    # and the law it gives is Alg. 2's, b p + P Σ (1 − b) p, row by row, written out here
    mass = np.sum((1 - b) * inst.P, axis=-1, keepdims=True)
    np.testing.assert_allclose(output_law(inst, b, P), b * inst.P + P * mass, rtol=0, atol=1e-15)


def test_a_users_rule_on_real_model_laws_is_checked_at_its_boundaries():
    """``RejectionDecoding.rule`` (the path real models take, with functions ``b(p, q)`` and ``rejection(p, q, b)``)
    checks its arguments with exact boundaries: ``b`` in [0, 1]; for ``rejection=None``, ``b·p − q`` at most 16 float64
    epsilons (``p = 1`` makes ``b·p − q`` exact: 16 ε passes, 16.5 ε is refused); the rejection law non-negative —
    zeros allowed — and finite. Found by mutation testing of the fast tier (``b <= 2``, ``>=`` for ``>``, 17 ε,
    ``P > 0``, ``P <= inf`` survived: the fast tests checked these on Markov instances, through
    ``acceptance_array``, only)."""
    from speculab.methods import RejectionDecoding

    p, q = np.array([1.0, 0.0]), np.array([0.5, 0.5])
    eps = np.finfo(np.float64).eps
    law = lambda b: RejectionDecoding(b=lambda p, q: b).rule(p, q)  # noqa: E731
    law(np.array([0.5 + 16 * eps, 0.0]))
    with pytest.raises(ValueError, match=r"b <= min\(1, q/p\)"):
        law(np.array([0.5 + 16.5 * eps, 0.0]))
    assert 0.5 + 16.5 * eps - 0.5 == 16.5 * eps  # both sums above are exact
    with pytest.raises(ValueError, match=r"acceptance probabilities in \[0, 1\]"):
        RejectionDecoding(b=lambda p, q: np.array([1.5, 0.0]), rejection=lambda p, q, b: q).rule(p, q)
    half = lambda p, q: np.array([0.5, 0.0])  # noqa: E731
    rule = RejectionDecoding(b=half, rejection=lambda p, q, b: np.array([0.0, 1.0])).rule(p, q)
    np.testing.assert_array_equal(rule.rejection, [0.0, 1.0])
    with pytest.raises(ValueError, match="non-negative finite weights"):
        RejectionDecoding(b=half, rejection=lambda p, q, b: np.array([np.inf, 1.0])).rule(p, q)
