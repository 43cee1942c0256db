"""Optimal multi-draft verification (SPEC O): α*, the feasible accepted laws, the best root policy on Markov instances,
the law of the draft set (i.i.d. and distinct drafts) and the LP verifier that attains the optimum.

References are independent of the prefix arguments of :mod:`speculab.theory.optimal`: all
``2^V`` subsets, the coupling itself as a linear program over draft tuples × tokens, the
polymatroid as a linear program with one constraint per subset, [Yin] Thm 3's forward
recursion for Algorithm 4, every ordered draw of the drafts, and Monte Carlo through the verifier's sampler.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import linprog

from conftest import binomial_se, claims_of
from speculab.testing import distribution_pairs, markov_instances
from speculab.theory import (
    MarkovInstance,
    batch_expected_rejections,
    batch_rejection_probability,
    sd_expected_rejections,
    tv,
)
from speculab.theory.optimal import (
    accepted_law_rank,
    algorithm4_accepted_law,
    batch_rejections_backward,
    best_accepted_law,
    coverage,
    draft_set_law,
    optimal_acceptance,
    optimal_batch_rejections,
    optimal_coupling,
    set_acceptance,
)

Ms = st.integers(1, 5)


def _subsets(V):
    return [list(S) for r in range(V + 1) for S in itertools.combinations(range(V), r)]


def _alpha_brute(p, q, M):
    return 1.0 - max(p[H].sum() ** M - q[H].sum() for H in _subsets(len(p)))


def _alpha_coupling_lp(p, q, M):
    """max P(Y ∈ {X_1..X_M}) over couplings of X ~ p^{⊗M} and Y ~ q, as a linear program."""
    V = len(p)
    tuples = list(itertools.product(range(V), repeat=M))
    n = len(tuples) * V  # variable π(t, y) at index i * V + y
    c = np.zeros(n)
    A = np.zeros((len(tuples) + V, n))
    for i, t in enumerate(tuples):
        A[i, i * V : (i + 1) * V] = 1.0
        for y in set(t):
            c[i * V + y] = -1.0
        A[len(tuples) :, i * V : (i + 1) * V] += np.eye(V)
    b = np.concatenate([[np.prod(p[list(t)]) for t in tuples], q])
    res = linprog(c, A_eq=A, b_eq=b, bounds=(0, None), method="highs")
    assert res.status == 0
    return -res.fun


def _best_law_lp(p, q, M, w):
    """max Σ a w subject to 0 ≤ a ≤ q and a(S) ≤ 1 − (1 − p(S))^M for every S (one row per subset)."""
    V = len(p)
    rows = [S for S in _subsets(V) if S]
    A = np.array([np.isin(np.arange(V), S).astype(float) for S in rows])
    b = np.array([1.0 - (1.0 - p[S].sum()) ** M for S in rows])
    res = linprog(-w, A_ub=A, b_ub=b, bounds=list(zip(np.zeros(V), q)), method="highs")
    assert res.status == 0
    return -res.fun


def _feasible(a, p, q, M, atol=1e-12):
    return bool(
        np.all(a >= -atol)
        and np.all(a <= q + atol)
        and all(a[S].sum() <= coverage(p[S].sum(), M) + atol for S in _subsets(len(p)))
    )


# -- α* at one position ------------------------------------------------------------------------------
@given(distribution_pairs(max_V=6), Ms)
def test_alpha_star_is_the_brute_force_maximum_over_all_subsets(pair, M):
    p, q = pair
    assert optimal_acceptance(p, q, M) == pytest.approx(_alpha_brute(p, q, M), abs=1e-12)


@pytest.mark.parametrize("V, M", [(2, 2), (3, 2), (3, 3), (4, 2)])
def test_alpha_star_is_attained_by_a_coupling(V, M):
    """The duality of SPEC O (max-flow / min-cut), checked by solving for the coupling itself."""
    rng = np.random.default_rng(V * 10 + M)
    for _ in range(5):
        p, q = rng.dirichlet(np.full(V, 0.6)), rng.dirichlet(np.full(V, 0.6))
        p[rng.integers(V)] = 0.0  # a token the draft never proposes
        p /= p.sum()
        assert optimal_acceptance(p, q, M) == pytest.approx(_alpha_coupling_lp(p, q, M), abs=1e-8)


@given(distribution_pairs(max_V=8), Ms)
def test_alpha_star_bounds_and_limits(pair, M):
    p, q = pair
    alpha = optimal_acceptance(p, q, M)
    assert optimal_acceptance(p, q, 1) == pytest.approx(1.0 - tv(p, q), abs=1e-12)  # one draft: SD
    assert alpha >= 1.0 - batch_rejection_probability(q, p, M) - 1e-12  # [Yin] Alg. 4's root
    assert optimal_acceptance(p, q, M + 1) >= alpha - 1e-12  # more drafts never hurt
    assert optimal_acceptance(p, q, np.inf) == pytest.approx(q[p > 0].sum(), abs=1e-12)
    assert optimal_acceptance(p, q, np.inf) >= alpha - 1e-12


def test_alpha_star_beats_algorithm4_by_a_measurable_margin():
    """SPEC O: on Dirichlet pairs with V = 7, Algorithm 4 leaves about 0.05 (M = 2) and 0.1 (M = 8) on the table."""
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(7), size=2000), rng.dirichlet(np.ones(7), size=2000)
    for M, low, high in ((2, 0.02, 0.08), (8, 0.06, 0.15)):
        gap = optimal_acceptance(p, q, M) - (1.0 - batch_rejection_probability(q, p, M))
        assert gap.min() >= -1e-12 and low < gap.mean() < high


def test_alpha_star_closed_example():
    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.2, 0.3, 0.5])
    # H = {0, 1}: p(H)^M − q(H) = 1 − 0.5, so α* = q(supp p) = 0.5 for every M ≥ 1: only 0.5 of q is draftable
    assert optimal_acceptance(p, q, 1) == pytest.approx(0.5)
    # binary, M = 2, p = (.9, .1), q = (.5, .5): H = {0} gives .81 − .5, so α* = .69; Algorithm 4: r_1 = .4,
    # q^2 = (0, 1), r_2 = TV(q^2, p) = .9, root acceptance 1 − .36 = .64
    p, q = np.array([0.9, 0.1]), np.array([0.5, 0.5])
    assert optimal_acceptance(p, q, 2) == pytest.approx(0.69)
    assert 1.0 - batch_rejection_probability(q, p, 2) == pytest.approx(0.64)


@pytest.mark.parametrize("bad, match", [((0.0,), "M must be"), ((1.5,), "M must be"), ((-np.inf,), "M must be")])
def test_bad_draft_counts_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        optimal_acceptance([0.5, 0.5], [0.5, 0.5], *bad)


def test_bad_distributions_are_refused():
    with pytest.raises(ValueError, match="p must sum to 1"):
        optimal_acceptance([0.5, 0.6], [0.5, 0.5], 2)
    with pytest.raises(ValueError, match="q must be non-negative"):
        optimal_acceptance([0.5, 0.5], [1.5, -0.5], 2)
    with pytest.raises(ValueError, match="same shape"):
        optimal_acceptance([0.5, 0.5], [1.0, 0.0, 0.0], 2)


# -- the feasible accepted laws (a polymatroid) ------------------------------------------------------
@given(distribution_pairs(max_V=5), Ms, st.data())
def test_rank_is_the_brute_force_minimum(pair, M, data):
    p, q = pair
    V = len(p)
    members = np.array([data.draw(st.lists(st.booleans(), min_size=V, max_size=V)) for _ in range(3)])
    got = accepted_law_rank(p, q, M, members)
    for S, g in zip(members, got):
        S = list(np.flatnonzero(S))
        ref = min(
            coverage(p[T].sum(), M) + q[[x for x in S if x not in T]].sum()
            for T in (list(T) for r in range(len(S) + 1) for T in itertools.combinations(S, r))
        )
        assert g == pytest.approx(ref, abs=1e-12)


@given(distribution_pairs(max_V=5), st.sampled_from([1, 2, 3, np.inf]), st.data())
def test_greedy_law_is_feasible_and_optimal_against_the_lp(pair, M, data):
    p, q = pair
    V = len(p)
    w = np.array(data.draw(st.lists(st.floats(-1.0, 2.0), min_size=V, max_size=V)))
    a = best_accepted_law(p, q, M, w)
    assert _feasible(a, p, q, M, atol=1e-10)
    if M != np.inf:
        assert a @ w == pytest.approx(_best_law_lp(p, q, M, w), abs=1e-6)  # HiGHS is feasible to 1e-7 only
    if np.all(w > 0):  # positive weights: the greedy reaches a base, i.e. the largest acceptance
        assert a.sum() == pytest.approx(optimal_acceptance(p, q, M), abs=1e-10)


@given(distribution_pairs(max_V=5), Ms)
def test_algorithm4_law_is_feasible_with_its_root_acceptance(pair, M):
    p, q = pair
    a = algorithm4_accepted_law(p, q, M)
    assert _feasible(a, p, q, M, atol=1e-12)
    assert a.sum() == pytest.approx(1.0 - batch_rejection_probability(q, p, M), abs=1e-12)


def test_batched_rows_match_row_by_row():
    rng = np.random.default_rng(3)
    p, q, w = rng.dirichlet(np.ones(5), 4), rng.dirichlet(np.ones(5), 4), rng.normal(size=(4, 5))
    a = best_accepted_law(p, q, 3, w)
    for i in range(4):
        np.testing.assert_allclose(a[i], best_accepted_law(p[i], q[i], 3, w[i]), atol=1e-15)
    np.testing.assert_allclose(optimal_acceptance(p, q, 3), [optimal_acceptance(p[i], q[i], 3) for i in range(4)])


# -- Markov instances: the best root verifier --------------------------------------------------------
INSTANCES = {
    "random": MarkovInstance.random(12, 4, 3, concentration=0.6),
    "stationary": MarkovInstance.stationary(*np.random.default_rng(4).dirichlet(np.ones(5), (2, 5)), T=15),
    "context-free": MarkovInstance.context_free([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], T=10),
}


@pytest.mark.parametrize("name", INSTANCES)
@pytest.mark.parametrize("M", [1, 2, 3, np.inf])
def test_backward_recursion_with_algorithm4_roots_is_theorem3(name, M):
    inst = INSTANCES[name]
    value, _, _ = batch_rejections_backward(inst, M, lambda p, q, M, w: algorithm4_accepted_law(p, q, M))
    assert value == pytest.approx(batch_expected_rejections(inst, M).rejections, rel=1e-12)


@pytest.mark.parametrize("name", INSTANCES)
def test_optimal_roots_never_lose_and_equal_theorem1_with_one_draft(name):
    inst = INSTANCES[name]
    t1 = sd_expected_rejections(inst).rejections
    assert optimal_batch_rejections(inst, 1).rejections == pytest.approx(t1, rel=1e-12)  # [Yin] Thm 2
    previous = t1
    for M in (2, 3, 5, 8):
        opt = optimal_batch_rejections(inst, M)
        t3 = batch_expected_rejections(inst, M)
        assert opt.rejections <= t3.rejections + 1e-12
        assert opt.rejections <= previous + 1e-12
        assert opt.rejections == pytest.approx(batch_rejections_backward(inst, M)[0], rel=1e-12)  # forward = backward
        np.testing.assert_allclose(opt.sd_rejections_per_position, t3.sd_rejections_per_position, rtol=1e-12)
        previous = opt.rejections


def test_optimal_roots_gain_on_a_random_instance():
    inst = INSTANCES["random"]
    gain = batch_expected_rejections(inst, 4).rejections - optimal_batch_rejections(inst, 4).rejections
    assert gain > 0.05  # a real gap, not round-off


@given(markov_instances(max_T=3, max_V=3), st.sampled_from([2, 3]))
def test_dynamic_programme_equals_a_linear_programme_at_every_root(inst, M):
    """The greedy inside the recursion against scipy's LP over the polymatroid (one constraint per subset)."""

    def lp_law(p, q, M, w):
        out = np.zeros_like(p)
        for i in range(p.shape[0]):
            V = p.shape[1]
            rows = [S for S in _subsets(V) if S]
            A = np.array([np.isin(np.arange(V), S).astype(float) for S in rows])
            b = np.array([1.0 - (1.0 - p[i, S].sum()) ** M for S in rows])
            res = linprog(-w[i], A_ub=A, b_ub=b, bounds=list(zip(np.zeros(V), q[i])), method="highs")
            out[i] = res.x
        return out

    assert batch_rejections_backward(inst, M)[0] == pytest.approx(
        batch_rejections_backward(inst, M, lp_law)[0], abs=1e-6
    )  # HiGHS: feasible to 1e-7


def test_compact_and_broadcast_instances_agree():
    inst = INSTANCES["stationary"]
    full = MarkovInstance(np.array(inst.P), np.array(inst.Q), inst.rho)
    a, b = optimal_batch_rejections(inst, 3), optimal_batch_rejections(full, 3)
    np.testing.assert_allclose(a.rejections_per_position, b.rejections_per_position, rtol=1e-13)


@given(markov_instances(max_T=4, max_V=4), st.integers(2, 5))
def test_fewest_rejections_come_with_the_largest_root_acceptance_on_every_instance_tried(inst, M):
    """An observation, not a theorem (the module docstring): the weights of the greedy stay positive, so the best
    root verifier accepts with probability α* at every root. A counterexample would fail here — and be a finding."""
    _, W, N = batch_rejections_backward(inst, M)
    assert np.all(1.0 + W[1:] - N[1:] > 0)
    assert optimal_batch_rejections(inst, M).root_shortfall < 1e-9


@pytest.mark.slow
def test_reproduction_batch_optimality(tmp_path, agrees):
    pytest.importorskip("torch")
    from speculab.repro import batch_optimality

    out = batch_optimality.run(out_dir=tmp_path, prompts=["Return the", "The default value"], max_new_tokens=8)
    assert (tmp_path / "batch_optimality.png").stat().st_size > 10_000
    assert all(o <= a + 1e-12 for o, a in zip(out["optimal_rejections"], out["algorithm4_rejections"]))
    assert out["algorithm4_rejections"][1] - out["optimal_rejections"][1] > 0.5  # M = 2: a real gain
    assert out["optimal_rejections"][0] == pytest.approx(out["sd_rejections"], rel=1e-12)  # M = 1 is SD
    c = out["coupling"]
    for M, r in zip(c["M"], c["rejections"]):  # the α*-coupling method lies between the optimum and Algorithm 4 here
        i = list(out["M"]).index(M)
        assert out["optimal_rejections"][i] - 1e-9 <= r < out["algorithm4_rejections"][i]
    agrees(
        c["simulated"],
        c["exact"],
        f"rejections of the α*-coupling method at M = {c['simulated_M']}",
        se=c["simulated_se"],
    )
    real = out["real"]
    assert real["positions"] >= 8 and all(g >= -1e-12 for g in real["gap_mean"])
    assert all(o > a for o, a in zip(real["optimal"], real["algorithm4"]))  # the tiny pair leaves acceptance behind
    rows = claims_of(batch_optimality, out)
    i = list(out["M"]).index(4)
    assert rows[1]["theory"] == (
        f"{out['algorithm4_rejections'][i]:.3f} / {out['optimal_rejections'][i]:.4f} / {c['exact']:.4f}"
    )
    assert rows[1]["simulation"].startswith(f"α*-coupling method: {c['simulated']:.4f} ± {c['simulated_se']:.4f}")
    assert rows[-1]["measured"].startswith(f"M = 2: {real['optimal'][0]:.3f} / {real['algorithm4'][0]:.3f}; ")


# -- the draft set and a verifier that attains the optimum -----------------------------------------------------
def _set_law_brute(p, M, replacement):
    """P(D = S) by enumerating every ordered draw (i.i.d., or one distinct token after another)."""
    V = len(p)
    law = np.zeros(1 << V)
    if replacement:
        for t in itertools.product(range(V), repeat=M):
            law[sum(1 << x for x in set(t))] += np.prod(p[list(t)])
        return law

    def walk(mask, prob, left):
        rest = sum(p[x] for x in range(V) if not mask >> x & 1)  # the mass still drawable
        if left == 0 or rest == 0:
            law[mask] += prob
            return
        for x in range(V):
            if not mask >> x & 1 and p[x] > 0:
                walk(mask | 1 << x, prob * p[x] / rest, left - 1)

    walk(0, 1.0, M)
    return law


@pytest.mark.parametrize("replacement", [True, False])
@given(pair=distribution_pairs(max_V=4), M=st.integers(1, 4))
def test_draft_set_law_is_the_enumeration(replacement, pair, M):
    p, _ = pair
    np.testing.assert_allclose(
        draft_set_law(p, M, replacement=replacement), _set_law_brute(p, M, replacement), atol=1e-12
    )


@given(distribution_pairs(max_V=6), Ms)
def test_the_set_formula_agrees_with_the_prefix_formula_and_distinct_drafts_never_lose(pair, M):
    p, q = pair
    iid = set_acceptance(draft_set_law(p, M), q)
    assert iid == pytest.approx(optimal_acceptance(p, q, M), abs=1e-12)
    assert set_acceptance(draft_set_law(p, M, replacement=False), q) >= iid - 1e-12


@pytest.mark.parametrize("replacement", [True, False])
@given(pair=distribution_pairs(max_V=5), M=st.integers(1, 4))
def test_the_lp_verifier_is_unbiased_and_attains_the_optimum(replacement, pair, M):
    p, q = pair
    c = optimal_coupling(p, q, M, replacement=replacement)
    # the output law from the draft sets' own enumeration (not the coupling's P(D = S)) through its acceptance rows
    law = _set_law_brute(np.asarray(p), M, replacement)
    rows = {int(S): i for i, S in enumerate(c.sets)}
    out = np.zeros(len(q))
    for S in np.flatnonzero(law > 1e-300):
        accept = c.accept[rows[int(S)]]
        out += law[S] * (accept + (1.0 - accept.sum()) * c.residual)
    np.testing.assert_allclose(out, q, atol=1e-12)  # the target's law, exactly
    assert c.acceptance == pytest.approx(set_acceptance(draft_set_law(p, M, replacement=replacement), q), abs=1e-7)
    members = (c.sets[:, None] >> np.arange(len(p))) & 1 == 1
    assert np.all(c.accept[~members] == 0) and np.all(c.accept >= 0)  # only drafted tokens are accepted
    assert np.all(c.accept.sum(axis=1) <= 1 + 1e-12)
    if M == 1:
        assert c.acceptance == pytest.approx(1 - tv(p, q), abs=1e-7)


@pytest.mark.parametrize("replacement", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_the_lp_verifier_samples_the_target_with_the_optimal_acceptance(replacement, agrees):
    """Monte Carlo through ``SetCoupling.sample`` on drafts drawn independently of the coupling's own tables."""
    rng = np.random.default_rng(11)
    p, q, M, n = np.array([0.45, 0.3, 0.15, 0.1, 0.0]), np.array([0.05, 0.1, 0.2, 0.3, 0.35]), 3, 200_000
    c = optimal_coupling(p, q, M, replacement=replacement)
    if replacement:
        drafts = rng.choice(5, size=(n, M), p=p)
    else:
        drafts = np.stack([rng.choice(5, size=M, replace=False, p=p) for _ in range(n)])
    accepted, token = c.sample(drafts, rng.random(n), rng.random(n))
    assert np.all(accepted <= np.any(drafts == token[:, None], axis=1))  # an accepted token was drafted
    agrees(accepted.mean(), c.acceptance, "acceptance", se=binomial_se(c.acceptance, n))
    freq = np.bincount(token, minlength=5) / n
    agrees(freq, q, "law of the output token", se=binomial_se(q, n))
    assert c.acceptance > 1 - batch_rejection_probability(q, p, M) + 0.05  # beats Algorithm 4 by a margin here


def test_set_functions_refuse_large_vocabularies_and_impossible_draft_sets():
    with pytest.raises(ValueError, match="MAX_SET_V"):
        draft_set_law(np.full(20, 0.05), 2)
    c = optimal_coupling([0.5, 0.5, 0.0], [0.2, 0.3, 0.5], 2)
    with pytest.raises(ValueError, match="probability 0"):
        c.sample(np.array([[2, 2]]), np.array([0.5]), np.array([0.5]))


def test_distinct_drafts_keep_their_mass_with_a_tiny_token():
    """Regression (found by hypothesis in CI): p = (2.4e-15, 1) renormalised by 1 − p(S) lost 1.6 % of the law."""
    law = draft_set_law(np.array([2.36847579e-15, 1.0]), 2, replacement=False)
    assert law.sum() == pytest.approx(1.0, abs=1e-12)
    assert set_acceptance(law, [0.0, 1.0]) == pytest.approx(1.0, abs=1e-12)


# -- the registered verifier (speculab.methods.OptimalMultiDraft) -----------------------------------------------------
@pytest.mark.parametrize("name", INSTANCES)
@pytest.mark.parametrize("M", [2, 4])
def test_the_optimal_multidraft_method_accepts_alpha_star_at_every_root_and_is_exact(name, M):
    """Its root table accepts with α* (to HiGHS's tolerance; the table itself is checked against the round law in
    test_methods); its exact rejections (K = ∞) are the backward recursion with its own accepted law, never below the
    dynamic programme's minimum."""
    from speculab.methods import OptimalMultiDraft

    inst, method = INSTANCES[name], OptimalMultiDraft(M)
    P, Q = np.asarray(inst.P), np.asarray(inst.Q)
    outcome = method.root_outcome(P, Q)  # (T, V, 2V)
    V = inst.V
    np.testing.assert_allclose(outcome[..., :V].sum(-1), optimal_acceptance(P, Q, M), atol=1e-7)
    assert outcome.min() >= 0
    rejections = method.expected(inst).rejections
    own = batch_rejections_backward(inst, M, lambda p, q, M, w: method.accepted_law(p, q))[0]
    assert rejections == pytest.approx(own, rel=1e-12)  # forward chain = backward recursion, same root
    assert rejections >= optimal_batch_rejections(inst, M).rejections - 1e-9


def test_the_optimal_multidraft_method_simulates_alpha_star(agrees):
    """Simulated: the rate of root rejections is 1 − α* where Algorithm 4's is Π r_m, measurably higher."""
    from speculab.methods import OptimalMultiDraft
    from speculab.sim import simulate

    p, q, M = [0.45, 0.3, 0.15, 0.1, 0.0], [0.05, 0.1, 0.2, 0.3, 0.35], 3
    inst = MarkovInstance.context_free(p, q, T=1)  # every run is one root
    c = simulate(inst, OptimalMultiDraft(M), 100_000, key=5)
    rate, alpha = c.rejections.mean(), float(optimal_acceptance(p, q, M))
    agrees(rate, 1 - alpha, "root rejection rate", se=binomial_se(alpha, c.rejections.size))
    assert rate < batch_rejection_probability(np.array(q), np.array(p), M) - 0.03


def test_the_coupling_scales_to_the_largest_vocabulary():
    """V = 14, M = 8: the LP's matrix is sparse (a dense one would need 30 GB); its optimum is α*."""
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(14)), rng.dirichlet(np.ones(14))
    assert optimal_coupling(p, q, 8).acceptance == pytest.approx(float(optimal_acceptance(p, q, 8)), abs=1e-7)


def test_bad_inputs_to_the_set_functions_and_the_root_hook():
    from speculab.methods import OptimalMultiDraft
    from speculab.theory import lookahead_counts

    with pytest.raises(ValueError, match="q"):
        set_acceptance(draft_set_law([0.5, 0.5], 2), [-1.0, 2.0])
    with pytest.raises(ValueError, match="q"):
        set_acceptance(draft_set_law([0.5, 0.5], 2), [np.nan, 1.0])
    with pytest.raises(ValueError, match="2\\^V = 4"):
        set_acceptance(np.full(8, 1 / 8), [0.5, 0.5])
    with pytest.raises(ValueError, match="M must be at most 2\\^53"):
        optimal_acceptance([0.5, 0.5], [0.2, 0.8], 10**400)
    with pytest.raises(ValueError, match="MAX_SET_DRAFTS"):
        draft_set_law([0.5, 0.5], 10**8)
    with pytest.raises(ValueError, match="MAX_SET_DRAFTS"):
        OptimalMultiDraft(10**8)
    with pytest.raises(ValueError, match="p"):
        accepted_law_rank([np.nan, 1.0], [0.5, 0.5], 2, [[True, False]])
    with pytest.raises(ValueError, match="M"):
        best_accepted_law([0.5, 0.5], [0.5, 0.5], 0, [1.0, 1.0])
    inst = INSTANCES["context-free"]
    with pytest.raises(ValueError, match="root"):
        lookahead_counts(inst, None, root=lambda p, q: q)  # M = 1: no other root to replace
    with pytest.raises(ValueError, match="root"):
        lookahead_counts(inst, None, M=2, root="optimal")
    with pytest.raises(ValueError, match="0 <= a <= q"):
        lookahead_counts(inst, None, M=2, root=lambda p, q: 2 * q)


def test_optimal_multi_draft_accepts_up_to_max_set_drafts():
    from speculab.methods import OptimalMultiDraft
    from speculab.theory.optimal import MAX_SET_DRAFTS

    assert OptimalMultiDraft(MAX_SET_DRAFTS).M == MAX_SET_DRAFTS
    with pytest.raises(ValueError, match=f"M must be at most MAX_SET_DRAFTS = {MAX_SET_DRAFTS}"):
        OptimalMultiDraft(MAX_SET_DRAFTS + 1)


def test_the_coupling_cache_keeps_its_byte_budget_least_recently_used_first(monkeypatch):
    """Couplings are cached per (p, q, M); past CACHE_BYTES the least recently used is dropped (never the last one),
    and the running byte count is that of the couplings kept."""
    from speculab.methods import optimal as om

    rng = np.random.default_rng(0)
    pairs = [(rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))) for _ in range(4)]
    cache = om._Couplings()
    first = cache.get(*pairs[0], 2)
    size = first.accept.nbytes + first.sets.nbytes + first.set_prob.nbytes
    assert cache.held == size and cache.get(*pairs[0], 2) is first  # a hit returns the same coupling
    monkeypatch.setattr(om, "CACHE_BYTES", 2.5 * size)  # room for two
    cache.get(*pairs[1], 2)
    cache.get(*pairs[0], 2)  # used again: now the most recent
    third = cache.get(*pairs[2], 2)  # over budget: drops pairs[1], the least recently used
    assert len(cache.items) == 2 and cache.held == 2 * size
    assert cache.get(*pairs[0], 2) is first and cache.get(*pairs[2], 2) is third  # both kept, not recomputed
    monkeypatch.setattr(om, "CACHE_BYTES", 0)
    cache.get(*pairs[3], 2)
    assert len(cache.items) == 1 and cache.held == size  # however small the budget, the coupling in use stays


def test_edges_of_the_set_functions_and_the_greedy():
    """Edge values on the right side of each check (found by mutation testing): the caps MAX_SET_V and
    MAX_SET_DRAFTS exactly and one past; coverage at M = ∞ of an empty set; a weight of 0 earns no mass; bad
    weights refused; the backward pass's row T stays 0; the coupling is a frozen result whose output law is q."""
    from conftest import assert_frozen
    from speculab.theory.optimal import MAX_SET_DRAFTS, MAX_SET_V

    assert (MAX_SET_V, MAX_SET_DRAFTS) == (14, 1024)
    p3 = np.array([0.5, 0.3, 0.2])
    assert draft_set_law(p3, MAX_SET_DRAFTS).sum() == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="MAX_SET_DRAFTS = 1024"):
        draft_set_law(p3, MAX_SET_DRAFTS + 1)
    flat = np.full(MAX_SET_V, 1 / MAX_SET_V)
    assert draft_set_law(flat, 2).shape == (1 << MAX_SET_V,)
    with pytest.raises(ValueError, match="MAX_SET_V = 14"):
        draft_set_law(np.full(MAX_SET_V + 1, 1 / (MAX_SET_V + 1)), 2)
    np.testing.assert_array_equal(coverage(np.array([0.0, 0.3, 1.0]), np.inf), [0.0, 1.0, 1.0])
    q3 = np.array([0.2, 0.3, 0.5])
    a = best_accepted_law(p3, q3, 2, np.array([1.0, 0.0, 2.0]))
    assert a[1] == 0.0 and a[0] > 0 and a[2] > 0  # a token of weight 0 adds nothing to Σ a w: it is left out
    for w, what in ((np.ones(2), "shape"), (np.array([1.0, np.nan, 1.0]), "finite")):
        with pytest.raises(ValueError, match="w must be finite weights of the shape of p"):
            best_accepted_law(p3, q3, 2, w)
    inst = MarkovInstance.random(4, 3, 1)
    _, W, N = batch_rejections_backward(inst, 2)
    assert W.shape == N.shape == (5, 3) and not W[4].any() and not N[4].any()
    coupling = optimal_coupling(p3, q3, 2)
    assert_frozen(coupling)
    np.testing.assert_allclose(coupling.output_law(), q3, atol=1e-12)


def test_root_shortfall_is_the_largest_gap_below_the_best_acceptance(monkeypatch):
    """``root_shortfall`` bookkeeping, on a policy that does fall short: with the roots' choice replaced by
    Algorithm 4's accepted law, the shortfall is the largest ``α* − (1 − Π_m r_m)`` over positions and contexts."""
    import speculab.theory.optimal as optimal

    inst = MarkovInstance.random(5, 3, 2, concentration=0.5)
    M = 2
    monkeypatch.setattr(optimal, "best_accepted_law", lambda p, q, M, w: algorithm4_accepted_law(p, q, M))
    profile = optimal_batch_rejections(inst, M)
    gaps = [
        optimal_acceptance(inst.P[n], inst.Q[n], M) - algorithm4_accepted_law(inst.P[n], inst.Q[n], M).sum(-1)
        for n in range(inst.T)
    ]
    assert profile.root_shortfall == pytest.approx(float(np.max(gaps)), abs=1e-15) and profile.root_shortfall > 0.01


def test_the_largest_acceptance_of_a_pair_with_itself_is_one_exactly():
    """``α*(p, p, M) = 1``, also when the cumulative sums of ``p`` round above 1 (``p(H)`` is capped at 1 before the
    power ``M``: uncapped, ``(1 + 2⁻⁵²)^50`` would leave ``α*`` 1e-14 below 1)."""
    rng = np.random.default_rng(0)
    p = next(x for x in rng.dirichlet(np.ones(5), size=200) if np.cumsum(x)[-1] > 1)
    assert float(optimal_acceptance(p, p, 50)) == 1.0


def test_the_forward_pass_repeats_the_backward_pass_choice_on_peaked_instances():
    """The forward profile recomputes each root's law from the backward pass's weights ``1 + W − N``; on peaked
    instances (V = 4, concentration 0.3) the greedy's order of those weights decides the law, so a wrong weight
    (``+ N``, found by mutation testing: the milder instances above have the same order either way) gives
    a forward total that is not the backward optimum."""
    for seed in range(3):
        inst = MarkovInstance.random(6, 4, seed, concentration=0.3)
        for M in (2, 3):
            forward = optimal_batch_rejections(inst, M).rejections
            assert forward == pytest.approx(batch_rejections_backward(inst, M)[0], rel=1e-12, abs=1e-12)


def test_the_round_law_reads_concrete_jax_and_torch_arrays():
    """The coupling's linear program runs on numpy values: ``round_law`` reads concrete JAX arrays (eager, not
    traced) and torch tensors as well as numpy's, and gives the same law in their own library (found by mutation
    testing of the fast tier: ``or`` for ``and`` in the test that picks ``.cpu()`` survived — it calls ``.cpu()`` on a
    JAX array, which has none, and the error reads as a traced array)."""
    import jax.numpy as jnp
    import torch

    from speculab.methods import OptimalMultiDraft

    rng = np.random.default_rng(8)
    M, L, V = 2, 1, 3
    p = rng.dirichlet(np.ones(V), size=(M, L)).astype(np.float32)
    q = rng.dirichlet(np.ones(V), size=(M, L + 1)).astype(np.float32)
    p[1], q[1] = p[0], q[0]  # rows drafted from one law (the rows share their context)
    x = np.array([[0], [2]])
    want = OptimalMultiDraft(M, K=L).round_law(p, q, x, bonus=True)
    for lib in (jnp.asarray, torch.from_numpy):
        got = OptimalMultiDraft(M, K=L).round_law(lib(p), lib(q), lib(x), bonus=True)
        for name, a, b in zip(want._fields, got, want):
            if b is not None:
                np.testing.assert_allclose(np.asarray(a), b, rtol=0, atol=1e-6, err_msg=f"{lib.__module__}: {name}")


def test_the_linear_programs_size_is_the_draft_sets_members():
    """``lp_variables`` (the estimate the budget reads) counts one variable per token of each draft set of positive
    probability, as the program is built: checked against ``draft_set_law`` with zeros in ``p`` and ``M`` below,
    at and above the support's size."""
    from speculab.methods.optimal import lp_variables
    from speculab.theory.optimal import draft_set_law

    rng = np.random.default_rng(4)
    for V, zeros, M in ((5, 0, 1), (5, 0, 3), (6, 2, 2), (6, 2, 4), (6, 2, 9), (4, 3, 2)):
        p = rng.dirichlet(np.ones(V))
        p[:zeros] = 0.0
        p /= p.sum()
        sets = np.flatnonzero(draft_set_law(p, M) > 0)
        assert lp_variables(p, M) == sum(bin(s).count("1") for s in sets), (V, zeros, M)
    assert lp_variables(np.full(14, 1 / 14), 8) == 81_368  # the module's example: V = 14, M = 8


def test_the_root_couplings_are_estimated_then_refused_past_their_budget():
    """``OptimalMultiDraft`` solves one linear program per distinct pair of rows: before any, their variables are
    summed and refused past ``LP_BUDGET`` (scaled by ``work_budget``) with the estimate — by the theory and by the
    simulator alike, at once. Pairs solved before are not counted again."""
    from speculab import work_budget
    from speculab._validate import TooLarge
    from speculab.methods import SD, OptimalMultiDraft
    from speculab.methods.optimal import LP_BUDGET, lp_variables
    from speculab.sim import simulate

    big = MarkovInstance.random(5, 14, 31)  # 70 pairs of 81,368 variables: 5,695,760 > LP_BUDGET
    message = (
        r"^OptimalMultiDraft\(M=8, K=None\)'s root couplings \(70 linear programs\) would take 5,695,760 "
        r"linear-program variables, over the budget of 4,000,000 linear-program variables \(LP_BUDGET\): use "
        r"fewer drafts M or a smaller vocabulary V, or raise the budget: speculab.work_budget\(k\) in Python, "
        r"--budget k on the command line \(sim, certify\)$"
    )
    assert LP_BUDGET == 4_000_000
    with pytest.raises(TooLarge, match=message):
        OptimalMultiDraft(8).expected(big)
    with pytest.raises(TooLarge, match=message):
        simulate(big, OptimalMultiDraft(8), 10, key=0)
    with work_budget(1e-9), pytest.raises(TooLarge, match=r"OptimalMultiDraft\(M=2, K=None\)'s root couplings"):
        simulate(MarkovInstance.random(2, 3, 33), OptimalMultiDraft(2), 10, key=0)  # M = 2 alike
    with work_budget(1e-9):  # one draft: SD's rule, no linear program to budget
        assert OptimalMultiDraft(1).expected(big).rejections == SD().expected(big).rejections
        assert simulate(big, OptimalMultiDraft(1), 10, key=0).n_runs == 10
    small = MarkovInstance.random(2, 4, 32)  # 8 pairs
    need = sum(lp_variables(small.P[t, a], 3) for t in range(2) for a in range(4))
    with (
        work_budget(need / LP_BUDGET * 0.999),
        pytest.raises(
            TooLarge,
            match=rf"\(8 linear programs\) would take "
            rf"{need:,} linear-program variables",
        ),
    ):
        OptimalMultiDraft(3).expected(small)
    with work_budget(need / LP_BUDGET):  # exactly the estimate: solved
        first = OptimalMultiDraft(3).expected(small)
    with work_budget(1e-9):  # all 8 solved before: nothing new to estimate
        again = OptimalMultiDraft(3).expected(small)
    assert again.rejections == first.rejections and again.oracle_calls == first.oracle_calls
