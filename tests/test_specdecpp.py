"""SpecDec++ simulator ([SDpp] Alg. 1) and acceptance heads.

References: a literal enumeration of every branch of SpecDec++ on tiny instances
(below, independent of the simulator), the exact fixed-K counts at the two ends of
the threshold (h = 1 is SD(K = max_K); h = 0 is SD(K = 1) when no draft is ever
certain), and the target's marginals (the output law is q whatever the head).
Monte Carlo with fixed seeds and |z| < 5.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _enumerate import enumerate_specdecpp, sequence_law
from conftest import Z_BOUND, assert_power, binomial_se, claims_of, power
from speculab.sim import SpecDecPP, simulate
from speculab.methods.capabilities import DraftHead, has
from speculab.methods.specdecpp import TableHead, miscalibrated_head, noisy_head, oracle_head
from speculab.testing import markov_instances
from speculab.methods.sd import sd_rule
from speculab.theory import MarkovInstance
from speculab.theory.lookahead import lookahead_counts

FIELDS = ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus")
N = 45_000  # the pair law of (x_6, x_7) in test_output_law_is_q needs 41,200 to see a 10 % error


def _tiny(seed, T=4, V=3):
    return MarkovInstance.random(T, V, seed, concentration=0.7)


def _check_identities(c, T):
    np.testing.assert_array_equal(c.accepted + c.rejections + c.bonus, T)
    np.testing.assert_array_equal(c.discarded, c.draft_calls - c.accepted)
    assert np.all(c.oracle_calls >= 1) and np.all(c.discarded >= 0)


# -- against the literal enumeration ---------------------------------------------------
@pytest.mark.parametrize("h", [0.0, 0.25, 0.6, 1.0])
@pytest.mark.parametrize("head", ["oracle", "noisy"])
def test_counts_match_enumeration(h, head, agrees):
    inst = _tiny(2)
    table = oracle_head(inst) if head == "oracle" else noisy_head(inst, 1.5, key=3, eps=0.05)
    e = enumerate_specdecpp(inst.P, inst.Q, inst.rho, table.table, h, max_K=3)
    c = simulate(inst, SpecDecPP(h, head=None if head == "oracle" else table, max_K=3), N, key=17)
    for name in FIELDS:
        agrees(c.estimate(name), e[name], name)
    p = e["rej_pos"]
    agrees(c.rejections_per_position, p, "rejection rate per position", se=binomial_se(p, N))
    _check_identities(c, inst.T)


def test_a_lone_chain_drafts_on_after_a_rejection_until_the_rule_stops():
    """A round rejected before its rule stopped goes on drafting; the loop over those chains leaves once none is
    left — a lone chain (one run per chunk) must still draft to the end (found by mutation testing: leaving at one
    chain left passed, as thousands of runs per chunk rarely leave exactly one). With h = 1 the rule stops only at
    max_K or the horizon, so the number of further drafts is exact."""
    inst = _tiny(2, T=6)
    from speculab.sim.engine import walker

    walk = walker(SpecDecPP(1.0, max_K=4), inst)
    rng = np.random.default_rng(0)
    for t, count, more in [(0, 1, 3), (1, 2, 2), (3, 1, 2), (4, 1, 1)]:  # min(max_K − count, T − 1 − t) more drafts
        for n in (1, 5):
            extra = walk._drafts_on(t, np.zeros(n, dtype=np.int64), np.ones(n), np.full(n, count), rng)
            np.testing.assert_array_equal(extra, more)


@pytest.mark.power
def test_a_wrong_stopping_rule_would_be_caught(record_property):
    """Power check: the enumeration at a different threshold is far from the simulation (in its standard errors)."""
    inst = _tiny(2)
    A = oracle_head(inst).table
    c = simulate(inst, SpecDecPP(0.6, max_K=3), N, key=17)
    wrong = enumerate_specdecpp(inst.P, inst.Q, inst.rho, A, 0.25, max_K=3)
    right = enumerate_specdecpp(inst.P, inst.Q, inst.rho, A, 0.6, max_K=3)
    shift = max(abs(wrong[f] - right[f]) / c.estimate(f).se for f in FIELDS)
    assert_power(
        record_property, f"SpecDec++ h = 0.6 counts vs enumeration (N = {N:,}): the threshold 0.25", power(shift)
    )
    assert max(abs(c.estimate(f).z(wrong[f])) for f in FIELDS) > Z_BOUND


@given(markov_instances(max_T=3, max_V=3), st.floats(0, 1), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_literal_algorithm_is_unbiased_for_any_head(inst, h, max_K, seed):
    """Exact: for any head table, threshold and max_K the output law is q (the stopping rule only sees drafts)."""
    A = np.random.default_rng(seed).random(inst.P.shape)
    e = enumerate_specdecpp(inst.P, inst.Q, inst.rho, A, h, max_K)
    target = sequence_law(inst.Q, inst.rho)
    for k in set(e["law"]) | set(target):
        assert abs(e["law"].get(k, 0.0) - target.get(k, 0.0)) < 1e-12, k
    assert e["accepted"] + e["rejections"] + e["bonus"] == pytest.approx(inst.T, abs=1e-12)


# -- the two ends of the threshold --------------------------------------------------------
@pytest.mark.parametrize("max_K", [1, 5, 20])
def test_h_one_is_fixed_K_equal_to_cap(max_K, agrees):
    inst = MarkovInstance.random(50, 7, 31, row_law="uniform")
    exact, n = lookahead_counts(inst, max_K), 70_000
    c = simulate(inst, SpecDecPP(1.0, max_K=max_K), n, key=max_K)
    for name in FIELDS:
        if name == "bonus" and max_K == 20:
            # 20 accepted drafts in a row end 0.34 % of runs on a bonus: a 10 % error would need 1.6 M runs. The bug
            # this test is for is max_K off by one — the rule stopping a draft early, SD(K = 19), whose bonus is
            # 1.5 times as large (70,000 runs see it; the other counts see a 10 % error).
            agrees(
                c.estimate(name),
                exact.bonus,
                f"{name} vs SD(K={max_K})",
                wrong=lookahead_counts(inst, max_K - 1).bonus,
                alternative=f"bonus vs SD(K={max_K}): max_K off by one, SD(K={max_K - 1})",
            )
        else:
            agrees(c.estimate(name), getattr(exact, name), f"{name} vs SD(K={max_K})")
    p = exact.rejections_per_position
    agrees(c.rejections_per_position, p, "rejection rate per position", se=binomial_se(p, n))


def _never_certain(T=50, V=7, seed=5):
    """q = 0.9 p + 0.1 δ_{V−1} with p(V−1) = 0: every draftable token has q < p, so min(1, q/p) < 1."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(V - 1), size=(T, V))
    P = np.concatenate([P, np.zeros((T, V, 1))], axis=-1)
    Q = 0.9 * P
    Q[..., -1] += 0.1
    return MarkovInstance(P, Q, np.full(V, 1.0 / V))


def test_h_zero_is_K_one_when_no_draft_is_certain(agrees):
    inst = _never_certain()
    assert np.all(sd_rule(inst.P, inst.Q)[0][inst.P > 0] < 1)
    exact = lookahead_counts(inst, 1)
    c = simulate(inst, SpecDecPP(0.0), 20_000, key=2)
    np.testing.assert_array_equal(c.draft_calls, c.oracle_calls)  # one draft per round, run by run
    for name in FIELDS:
        agrees(c.estimate(name), getattr(exact, name), f"{name} vs SD(K=1)")


def test_h_zero_drafts_through_certain_tokens():
    """In general h = 0 keeps drafting while Π a_i = 1: never a draft after an uncertain one, so
    discarded = rejections run by run, and fewer target calls than K = 1 (it is *not* SD(K=1))."""
    inst = MarkovInstance.random(50, 7, 31, row_law="uniform")
    c = simulate(inst, SpecDecPP(0.0), 20_000, key=3)
    np.testing.assert_array_equal(c.discarded, c.rejections)
    k1 = lookahead_counts(inst, 1)
    assert c.estimate("oracle_calls").z(k1.oracle_calls) < -Z_BOUND


# -- output law and bookkeeping ----------------------------------------------------------
@pytest.mark.parametrize("head", ["oracle", "noisy", "miscalibrated"])
def test_output_law_is_q(head, agrees):
    inst = MarkovInstance.random(12, 5, 8, row_law="uniform")
    heads = {"oracle": None, "noisy": noisy_head(inst, 2.0, key=1), "miscalibrated": miscalibrated_head(inst, 3.0)}
    c = simulate(inst, SpecDecPP(0.5, head=heads[head], max_K=6), N, key=9, return_sequences=True)
    mu = inst.marginals()
    for n in range(inst.T + 1):
        freq = np.bincount(c.sequences[:, n], minlength=inst.V) / N
        agrees(freq, mu[n], f"marginal law of x_{n}", se=binomial_se(mu[n], N))
    n = 6  # a pair law checks the transitions too
    joint = np.zeros((inst.V, inst.V))
    np.add.at(joint, (c.sequences[:, n], c.sequences[:, n + 1]), 1.0 / N)
    exact = mu[n][:, None] * inst.Q[n]
    agrees(joint, exact, f"pair law of (x_{n}, x_{n + 1})", se=binomial_se(exact, N))
    _check_identities(c, inst.T)


def test_oracle_head_object_is_head_none_and_seeds_reproduce():
    inst = _tiny(4, T=10)
    a = simulate(inst, SpecDecPP(0.4, max_K=5), 3000, key=11, return_sequences=True)
    b = simulate(
        inst,
        SpecDecPP(0.4, head=oracle_head(inst), max_K=5),
        3000,
        key=np.random.default_rng(11),
        return_sequences=True,
    )
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.sequences, b.sequences)
    c = simulate(inst, SpecDecPP(0.4, max_K=5), 3000, key=12)
    assert not np.array_equal(a.draft_calls, c.draft_calls)


def test_larger_threshold_drafts_more():
    """For a fixed draft chain the stopping time is non-decreasing in h, so are the mean drafts and discards."""
    inst = MarkovInstance.random(30, 6, 12, row_law="uniform")
    runs = [simulate(inst, SpecDecPP(h, max_K=12), 10_000, key=4) for h in (0.1, 0.5, 0.9)]
    for name in ("draft_calls", "discarded"):
        means = [c.estimate(name).mean for c in runs]
        assert means[0] < means[1] < means[2], name
    calls = [c.estimate("oracle_calls").mean for c in runs]
    assert calls[0] > calls[1] > calls[2]


# -- heads ------------------------------------------------------------------------------
def test_heads():
    inst = _tiny(6, T=5, V=4)
    oracle = sd_rule(inst.P, inst.Q)[0]
    np.testing.assert_array_equal(oracle_head(inst).table, oracle)
    np.testing.assert_allclose(noisy_head(inst, 0.0, key=0, eps=0.0).table, oracle, atol=1e-12)
    np.testing.assert_allclose(miscalibrated_head(inst, 1.0).table, oracle, atol=1e-12)
    np.testing.assert_array_equal(noisy_head(inst, 1.0, key=3).table, noisy_head(inst, 1.0, key=3).table)
    assert not np.array_equal(noisy_head(inst, 1.0, key=3).table, noisy_head(inst, 1.0, key=4).table)
    noisy = noisy_head(inst, 1.0, key=3, eps=0.01).table
    assert np.all((noisy > 0) & (noisy < 1))
    hot, cold = miscalibrated_head(inst, 4.0).table, miscalibrated_head(inst, 0.25).table
    inner = (oracle > 0) & (oracle < 1)
    assert np.all(np.abs(hot - 0.5)[inner] <= np.abs(oracle - 0.5)[inner] + 1e-15)  # under-confident
    assert np.all(np.abs(cold - 0.5)[inner] >= np.abs(oracle - 0.5)[inner] - 1e-15)  # over-confident
    np.testing.assert_array_equal(hot[~inner], oracle[~inner])  # certain predictions kept
    t, prev, x = 2, np.array([0, 1, 3]), np.array([2, 2, 0])
    np.testing.assert_array_equal(oracle_head(inst)(t, prev, x), oracle[t, prev, x])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda inst: simulate(inst, SpecDecPP(0.5, head=lambda t, prev, x: np.ones(3)), 10, key=0), "shape"),
        (lambda inst: simulate(inst, SpecDecPP(0.5, head=lambda t, prev, x: 2.0 + 0 * x), 10, key=0), r"\[0, 1\]"),
        (
            lambda inst: simulate(inst, SpecDecPP(0.5, head=lambda t, prev, x: np.nan + 0 * x), 10, key=0),
            r"head\(t, prev, x\) at t=0 must be finite",
        ),
        (lambda inst: noisy_head(inst, -1.0, key=0), "noise"),
        (lambda inst: noisy_head(inst, 1.0, key=0, eps=0.5), "eps"),
        (lambda inst: noisy_head(inst, 1.0, key="a"), "key"),
        (lambda inst: miscalibrated_head(inst, 0.0), "temperature"),
        (lambda inst: miscalibrated_head(inst.P, 1.0), "MarkovInstance"),
        (lambda inst: TableHead(np.ones((2, 3))), "shape"),
        (lambda inst: TableHead(np.full((2, 3, 3), 1.5)), r"\[0, 1\]"),
        (lambda inst: SpecDecPP(1.5), "h must be"),
        (lambda inst: SpecDecPP(0.5, max_K=0), "max_K"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call(_tiny(0))


def test_specdecpp_needs_a_trained_head_on_real_models_and_has_exact_counts_only_on_small_instances():
    """SpecDec++ runs on real models with a head trained on the draft's hidden states (tests/test_specdecpp_models.py;
    without one decoding is refused); its exact counts come from the draft-tree recursion, which has no closed
    form and is refused (``TooLarge``, with the estimate) once the trees exceed the node budget."""
    from speculab._validate import TooLarge
    from speculab.theory import MarkovInstance

    assert SpecDecPP(0.5).runs_on_real_models() and has(SpecDecPP, DraftHead)
    assert SpecDecPP(0.5).draft_head is None  # the oracle reads q: not a drafting head
    assert SpecDecPP(0.5).expected(_tiny(0)) is not None
    with pytest.raises(
        TooLarge,
        match=r"draft tree \(8 × 8\^20 leaves per round start\) would take "
        r"about 3.32e20 values, over the budget of 6,291,456 values \(NODE_BUDGET "
        r"leaves of 6 values\): use a smaller vocabulary, max_K or horizon, or raise the budget: "
        r"speculab.work_budget\(k\) in Python, --budget k on the command line \(sim, certify\)",
    ):
        SpecDecPP(0.5, max_K=20).expected(MarkovInstance.random(30, 8, 0))  # 8^21 leaves of 6 + 30 values


def test_specdecpp_exact_counts_with_an_imperfect_head_match_simulation(agrees):
    """A head that is not the oracle changes the stopping times; the recursion reads the same head's table."""
    from speculab.theory import MarkovInstance

    inst = MarkovInstance.random(5, 3, 4, concentration=0.7)
    method = SpecDecPP(0.5, head=miscalibrated_head(inst, 0.3), max_K=4)
    exact = method.expected(inst)
    c = simulate(inst, method, 40_000, key=2)
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
        agrees(c.estimate(name), exact.get(name), name)
    rate, p = c.rejections_per_position, exact.rejections_per_position
    agrees(rate, p, "rejection rate per position", se=binomial_se(p, 40_000))
    assert p.sum() == pytest.approx(exact.rejections, rel=1e-12)


# -- the [SDpp] Fig. 3 reproduction ----------------------------------------------------------
@pytest.mark.slow
def test_fig3_reproduction_smoke(tmp_path):
    """run() writes the figure, the JSON and the instance; its fixed-K points are the exact counts of that instance."""
    import json

    from speculab.repro import specdecpp_fig3 as fig3

    result = fig3.run(key=1, n_runs=200, out_dir=tmp_path)
    for name in ("specdecpp_fig3.png", "specdecpp_fig3.json", "specdecpp_fig3_instance.npz"):
        assert (tmp_path / name).stat().st_size > 0, name
    saved = json.loads((tmp_path / "specdecpp_fig3.json").read_text())
    assert saved["verdict"] == result["verdict"] and set(saved["best"]) == {"0.05", "0.2"}
    inst = MarkovInstance.load(tmp_path / "specdecpp_fig3_instance.npz")
    for K in (2, 9, 14):
        exact = lookahead_counts(inst, K)
        assert saved["fixed_K"][str(K)]["verification_rate"] == pytest.approx(exact.verification_rate, rel=1e-12)
        assert saved["fixed_K"][str(K)]["latency"]["0.2"] == pytest.approx(exact.latency(0.2, 1.0), rel=1e-12)
    assert saved["best"]["0.05"]["fixed_K"]["K"] == fig3.best_lookahead(inst, 0.05, 1.0, max_K=fig3.MAX_K).K
    assert len(saved["thresholds"]) == 3 and "best latency, c = 0.05" in fig3.summary(result)
    rows = claims_of(fig3, result)
    best = saved["best"]["0.2"]
    row = next(r for r in rows if r["quantity"].startswith("best latency per token at c = t_draft/t_target = 0.2 "))
    assert row["paper"].startswith("18.88 vs 17.62 tokens/s")  # [SDpp] Table 1, Alpaca
    assert row["theory"] == f"fixed K = {best['fixed_K']['K']}: {best['fixed_K']['latency']:.4f}"
    assert row["simulation"].startswith(f"oracle h = {best['oracle']['h']:g}: {best['oracle']['latency']:.4f} ± ")
    assert rows[0]["simulation"].startswith(f"{len(saved['pareto']['oracle']['dominated_K'])} of 13")


def test_only_a_head_on_hidden_states_runs_in_the_decoding_loop():
    """``draft_head`` hands the decoding loop a head that reads the draft's hidden states, and nothing else: a head
    ``f(t, prev, x)`` (a table, a function) reads a Markov instance, and the oracle reads q."""
    inst = _tiny(0)
    assert SpecDecPP(0.4).draft_head is None
    assert SpecDecPP(0.4, head=oracle_head(inst)).draft_head is None
    assert SpecDecPP(0.4, head=lambda t, prev, x: np.ones(np.shape(x))).draft_head is None
    trained = type("Trained", (), {"reads_hidden_states": True, "__call__": lambda self, *a: 1.0})()
    assert SpecDecPP(0.4, head=trained).draft_head is trained


def test_boundaries_of_the_inputs():
    """Edge values on the right side of each check (found by mutation testing): a prediction of exactly 0 is a
    probability; a table must be (T, V, V) and is copied; the rule stops at the horizon, not one draft past it;
    exact counts are given exactly when the per-position tree fits."""
    from speculab.theory.stopping import tree_fits

    table = np.zeros((2, 3, 3))
    head = TableHead(table)
    table[:] = 0.5
    assert np.all(head.table == 0.0)  # copied: the caller's array can change, the head cannot
    with pytest.raises(ValueError, match=r"shape \(T, V, V\)"):
        TableHead(np.full((2, 3, 4), 0.5))
    inst = _tiny(1)
    zero = lambda t, prev, x: np.zeros(np.shape(x))  # noqa: E731  (a head that predicts certain rejection)
    assert simulate(inst, SpecDecPP(0.5, head=zero, max_K=3), 200, key=0).oracle_calls.min() >= 1
    method = SpecDecPP(1.0, max_K=10)
    assert method.stop_drafting([1.0] * 3, remaining=3) and not method.stop_drafting([1.0] * 2, remaining=3)
    big = MarkovInstance.random(60, 2, 0)  # fits without per-position values, not with them
    assert tree_fits(2, 60, 16) and not tree_fits(2, 60, 16, per_position=True)
    from speculab import work_budget
    from speculab._validate import TooLarge

    with pytest.raises(TooLarge, match=r"would take 8,650,752 values, over the budget of 6,291,456 values"):
        SpecDecPP(0.5, max_K=16).expected(big)  # 2 × 2^16 leaves of 6 + 60 values
    with (
        work_budget(1.37),
        pytest.raises(
            TooLarge,
            match=r"budget of 8,619,294 values \(NODE_BUDGET leaves of 6 "
            r"values, times 1.37\)",
        ),
    ):
        SpecDecPP(0.5, max_K=16).expected(big)


@pytest.mark.slow
def test_a_budget_of_exactly_the_trees_size_is_enough():
    """The draft tree of 8,650,752 values is computed at a budget of exactly 1.375 × 6,291,456 (seconds of exact
    computation: the full tier; one less is refused, the test above)."""
    from speculab import work_budget

    with work_budget(1.375):
        assert SpecDecPP(0.5, max_K=16).expected(MarkovInstance.random(60, 2, 0)).rejections > 0


def test_the_default_cap_is_the_papers_twenty_drafts():
    """[SDpp] max_Ks a round at 20 drafts, the default here: with ``p = q`` (every draft accepted, the head never
    stops) 22 tokens take a round of 20 drafts and a bonus, then one of a single draft — two target calls (found
    by mutation testing of the fast tier: a default of 21, one round, survived)."""
    one = np.array([1.0])
    inst = MarkovInstance.context_free(one, one, T=22)
    e = SpecDecPP(0.5).expected(inst)
    assert (e.oracle_calls, e.draft_calls, e.bonus) == (2.0, 21.0, 1.0)
    assert SpecDecPP(0.5, max_K=21).expected(inst).oracle_calls == 1.0


def test_the_noisy_head_is_its_definition():
    """``noisy_head(inst, s, key)`` is ``σ(logit(clip(a*, ε, 1 − ε)) + s Z)`` with ``ε = 0.01`` by default and ``Z``
    the standard normals of ``key``'s generator, written out here (found by mutation testing of the fast tier:
    ``− s Z`` — the same law, another head for the key — and ``ε = 0.02`` survived)."""
    from scipy.special import expit, logit

    inst = _tiny(6, T=5, V=4)
    a = np.clip(sd_rule(inst.P, inst.Q)[0], 0.01, 0.99)
    z = np.random.default_rng(3).standard_normal(a.shape)
    np.testing.assert_allclose(noisy_head(inst, 0.7, key=3).table, expit(logit(a) + 0.7 * z), rtol=1e-12, atol=0)


def test_a_round_on_real_models_drafts_at_most_the_cap_and_the_tokens_left():
    """The decoding loop drafts up to ``draft_length(remaining)`` tokens and stops earlier where the head says:
    at most ``max_K``, and never past the tokens left to output (found by mutation testing of the fast tier: ``max``
    for ``min`` survived — only slow real-model tests read it)."""
    assert SpecDecPP(0.5, max_K=3).draft_length(10) == 3
    assert SpecDecPP(0.5).draft_length(5) == 5 and SpecDecPP(0.5).draft_length(50) == 20


def test_a_head_certain_of_every_draft_drafts_to_the_cap(agrees):
    """A head function that predicts 1 everywhere — a probability, so accepted — never stops a round before max_K
    (``1 − Π a = 0 ≤ h``): the rounds are those of ``SD(K = max_K)``, whose target calls it then makes (found by
    mutation testing: refusing a prediction of exactly 1 survived once the engine tabulated function heads)."""
    from speculab.methods import SD

    inst = _tiny(3, T=6)
    certain = SpecDecPP(0.5, head=lambda t, prev, x: np.ones(x.shape), max_K=3)
    c = simulate(inst, certain, 20_000, key=4)
    agrees(c.estimate("oracle_calls"), SD(K=3).expected(inst).oracle_calls, "target calls")
