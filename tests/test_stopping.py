"""Exact counts of drafting rules and the optimal stopping rule (speculab.theory.stopping), against independent
references:
the lookahead chain (fixed K), Monte Carlo (SpecDec++), and brute force over every stopping rule of a tiny instance."""

import itertools
from functools import lru_cache

import numpy as np
import pytest

from conftest import assert_frozen, claims_of
from speculab._validate import TooLarge
from speculab.methods import SpecDecPP
from speculab.methods.specdecpp import noisy_head
from speculab.sim import simulate
from speculab.theory import MarkovInstance, latency_per_token, lookahead_counts
from speculab.theory.stopping import NODE_BUDGET, fixed_lookahead, optimal_stopping, stopping_counts

COUNTS = ("oracle_calls", "draft_calls", "accepted", "rejections", "bonus")
INSTANCES = {
    "random": MarkovInstance.random(8, 3, 1, concentration=0.6),
    "stationary": MarkovInstance.stationary(*np.random.default_rng(2).dirichlet(np.full(3, 0.7), (2, 3)), T=9),
    "context-free": MarkovInstance.context_free([0.6, 0.3, 0.1], [0.2, 0.3, 0.5], T=7),
}


@pytest.mark.parametrize("name", INSTANCES)
@pytest.mark.parametrize("K", [1, 2, 3, 10])
def test_fixed_lookahead_is_the_lookahead_chain(name, K):
    inst = INSTANCES[name]
    tree, chain = stopping_counts(inst, fixed_lookahead(K), 0.2, 1.0), lookahead_counts(inst, K)
    assert_frozen(tree)
    for f in COUNTS + ("discarded",):
        assert getattr(tree, f) == pytest.approx(getattr(chain, f), rel=1e-12, abs=1e-12), f
    assert tree.time == pytest.approx(0.2 * chain.draft_calls + chain.oracle_calls, rel=1e-12)
    # [SDpp] eq. (5.1) misses only the last round's drafts when it ends fully accepted at the horizon: t_draft f / T
    eq51 = latency_per_token(chain.discard_rate, chain.verification_rate, 0.2, 1.0)
    assert tree.latency_per_token - eq51 == pytest.approx(0.2 * chain.final_round_all_accepted / inst.T, abs=1e-12)


@pytest.mark.parametrize(
    "name, method",
    [
        ("random", SpecDecPP(0.6, max_K=5)),
        ("random", SpecDecPP(0.3, max_K=8)),
        ("random", SpecDecPP(1.0, max_K=3)),
        ("stationary", SpecDecPP(0.5, head=noisy_head(INSTANCES["stationary"], 1.0, key=0), max_K=6)),
    ],
    ids=repr,
)
def test_specdecpp_exact_counts_match_simulation(name, method, agrees):
    inst = INSTANCES[name]
    exact = stopping_counts(inst, method.adaptive_drafting(inst), 0.1, 1.0)
    sim = simulate(inst, method, 100_000, key=3)
    for f in COUNTS:
        agrees(sim.estimate(f), getattr(exact, f), f)


def test_specdecpp_that_never_stops_early_is_fixed_lookahead_at_its_cap():
    inst = INSTANCES["random"]
    a = stopping_counts(inst, SpecDecPP(1.0, max_K=4).adaptive_drafting(inst))
    b = stopping_counts(inst, fixed_lookahead(4))
    assert a == b
    assert (a.t_draft, a.t_target) == (0.0, 1.0)  # the documented default times: a free draft, a unit target call
    assert a.time == a.oracle_calls  # a unit target call and a free draft: the time is the number of target calls


@pytest.mark.parametrize("name", INSTANCES)
@pytest.mark.parametrize("t_draft", [0.02, 0.2, 0.6])
def test_the_optimum_is_never_worse_than_any_threshold_or_fixed_lookahead(name, t_draft):
    inst, max_K = INSTANCES[name], 6
    best = optimal_stopping(inst, t_draft, 1.0, max_K)
    rivals = [stopping_counts(inst, fixed_lookahead(K), t_draft, 1.0) for K in range(1, max_K + 1)]
    rivals += [
        stopping_counts(inst, SpecDecPP(h, max_K=max_K).adaptive_drafting(inst), t_draft, 1.0)
        for h in np.linspace(0.0, 1.0, 21)
    ]
    assert all(best.time <= r.time + 1e-12 for r in rivals)
    assert best.time <= inst.T * 1.0 + 1e-12  # autoregressive decoding costs T target calls


def test_the_optimum_beats_every_threshold_on_a_random_instance():
    """[SDpp] Thm 4.3's Δ is not zero here: the best threshold is measurably slower than the optimum."""
    inst = INSTANCES["random"]
    best = optimal_stopping(inst, 0.1, 1.0, 6).time
    threshold = min(
        stopping_counts(inst, SpecDecPP(h, max_K=6).adaptive_drafting(inst), 0.1, 1.0).time
        for h in np.linspace(0.0, 1.0, 101)
    )
    assert threshold - best > 0.01 * best


def _nodes(inst, max_K):
    """The decision nodes of every round's draft tree: ``(round start n, last token a, drafts so far)``."""
    return [
        (n, a, path)
        for n in range(inst.T)
        for a in range(inst.V)
        for k in range(min(max_K, inst.T - n))
        for path in itertools.product(range(inst.V), repeat=k)
    ]


def _brute_force_best_time(inst, t_draft, t_target, max_K):
    """Every deterministic stopping rule of the instance (a stop/go choice at every node of every round's draft tree,
    stopping before the first draft included), each evaluated by direct recursion over the process."""
    nodes = _nodes(inst, max_K)
    return min(
        _rule_time(inst, t_draft, t_target, max_K, dict(zip(nodes, choice)))
        for choice in itertools.product([False, True], repeat=len(nodes))
    )


def _rule_time(inst, t_draft, t_target, max_K, stops):
    """The expected time of the stopping rule ``stops[(n, a, path)]`` (stop and verify there?), by direct recursion."""
    T, V = inst.T, inst.V
    P, Q = np.asarray(inst.P), np.asarray(inst.Q)

    @lru_cache(maxsize=None)
    def future(n, a):  # expected time from a round start at position n after token a
        return 0.0 if n == T else drafted(n, a, ())

    def drafted(n, a, path):
        k = len(path)
        if k == min(max_K, T - n) or stops[(n, a, path)]:
            return verified(n, a, path)
        last = path[-1] if path else a
        return sum(P[n + k, last, z] * drafted(n, a, path + (z,)) for z in range(V) if P[n + k, last, z] > 0)

    def verified(n, a, path):
        total, reach, ctx = t_target + len(path) * t_draft, 1.0, a
        for i, y in enumerate(path):
            p, q = P[n + i, ctx], Q[n + i, ctx]
            b = min(1.0, q[y] / p[y])
            excess = np.maximum(q - p, 0.0)
            if b < 1:
                total += reach * (1 - b) * sum(excess[c] / excess.sum() * future(n + i + 1, c) for c in range(V))
            reach *= b
            ctx = y
        m = n + len(path)
        if m < T:
            total += reach * sum(Q[m, ctx, c] * future(m + 1, c) for c in range(V))
        return total

    return sum(inst.rho[a] * future(0, a) for a in range(V))


def test_a_rule_that_depends_on_the_position_is_asked_at_the_drafts_position():
    """A rule that reads the position index ``t`` of the draft it has just made (stop after drafting at a position
    index 1 mod 3), against the direct recursion: the tree must pass the draft's own position, not the round's."""
    inst = MarkovInstance.random(5, 2, 3, concentration=0.7)
    max_K = 3
    rule = lambda prod, count, t, T, K: (count >= K) | (t + 1 >= T) | (t % 3 == 1)  # noqa: E731
    every_third = fixed_lookahead(max_K)._replace(stops=rule)
    stops = {(n, a, path): len(path) > 0 and (n + len(path) - 1) % 3 == 1 for n, a, path in _nodes(inst, max_K)}
    tree = stopping_counts(inst, every_third, 0.3, 1.0)
    assert tree.time == pytest.approx(_rule_time(inst, 0.3, 1.0, max_K, stops), rel=1e-12)
    assert abs(tree.time - stopping_counts(inst, fixed_lookahead(max_K), 0.3, 1.0).time) > 0.05  # it does change things


def test_bellman_ties_verify_at_once():
    """Free drafts that the target always refuses (disjoint supports) change nothing in time: drafting or verifying
    at once tie exactly, and the documented tie-break (verify) drafts nothing."""
    inst = MarkovInstance.context_free([1.0, 0.0], [0.0, 1.0], T=4)
    best = optimal_stopping(inst, 0.0, 1.0, 3)
    assert (best.time, best.oracle_calls, best.draft_calls, best.rejections) == (4.0, 4.0, 0.0, 4.0)


@pytest.mark.parametrize(
    "T, key, t_draft", [(2, 5, 0.05), (2, 6, 0.3), (2, 7, 0.8), pytest.param(3, 5, 0.2, marks=pytest.mark.slow)]
)
def test_the_optimum_equals_brute_force_over_every_stopping_rule(T, key, t_draft):
    """V = 2, max_K = 2: 8 decision nodes (256 rules) at T = 2, 14 (16,384 rules) at T = 3."""
    inst = MarkovInstance.random(T, 2, key, concentration=0.8)
    assert optimal_stopping(inst, t_draft, 1.0, 2).time == pytest.approx(
        _brute_force_best_time(inst, t_draft, 1.0, 2), rel=1e-12
    )


def test_free_drafts_make_the_longest_lookahead_optimal():
    """With t_draft = 0 drafting more never costs time, so verifying only at max_K (or the horizon) is optimal."""
    inst = INSTANCES["random"]
    assert optimal_stopping(inst, 0.0, 1.0, 5).time == pytest.approx(
        stopping_counts(inst, fixed_lookahead(5), 0.0, 1.0).time, rel=1e-12
    )


def test_expensive_drafts_make_autoregressive_decoding_optimal():
    inst = INSTANCES["random"]
    best = optimal_stopping(inst, 1.0, 1.0, 4)  # a draft costs a target call: never worth it
    assert (
        best.draft_calls == 0
        and best.oracle_calls == pytest.approx(inst.T)
        and best.rejections == pytest.approx(inst.T)
    )


def test_bad_inputs_are_refused():
    inst = INSTANCES["random"]
    with pytest.raises(ValueError, match="t_target"):
        optimal_stopping(inst, 0.1, 0.0, 3)
    with pytest.raises(ValueError, match="t_draft"):
        optimal_stopping(inst, -0.1, 1.0, 3)
    with pytest.raises(ValueError, match="max_K"):
        optimal_stopping(inst, 0.1, 1.0, 0)
    with pytest.raises(ValueError, match="NODE_BUDGET"):
        optimal_stopping(MarkovInstance.random(30, 7, 0), 0.1, 1.0, 20)
    with pytest.raises(ValueError, match="rule must be an AdaptiveDrafting"):
        stopping_counts(inst, SpecDecPP(0.5))
    with pytest.raises(ValueError, match="inst must be a MarkovInstance"):
        optimal_stopping("inst", 0.1, 1.0, 3)
    assert NODE_BUDGET >= 3 * 3**8


def test_a_rule_is_asked_only_after_a_draft():
    """SpecDec++ always drafts once before its rule is read: a rule that always says stop is lookahead 1."""
    inst = INSTANCES["random"]
    eager = fixed_lookahead(1)._replace(stops=lambda prod, count, t, T: np.ones_like(prod, dtype=bool), params=())
    assert stopping_counts(inst, eager, 0.1, 1.0) == stopping_counts(inst, fixed_lookahead(1), 0.1, 1.0)


@pytest.mark.slow
def test_reproduction_optimal_stopping(tmp_path, capsys):
    from speculab.cli import main
    from speculab.repro import optimal_stopping

    assert main(["repro", "optimal-stopping", "--out", str(tmp_path), "--json"]) == 0
    out = __import__("json").loads(capsys.readouterr().out)
    assert (tmp_path / "optimal_stopping.png").stat().st_size > 10_000
    for r in out["rows"]:  # the optimum over stopping rules beats both families of stopping rules at every cost
        assert r["optimal"] <= min(r["threshold"], r["fixed"]) + 1e-12
    assert out["rows"][-1]["delta"] > 0.01  # Δ of [SDpp] Thm 4.3 is measurably positive at c = 0.5
    rows = claims_of(optimal_stopping, out)
    last = out["rows"][-1]
    assert rows[-1]["theory"] == (
        f"{last['optimal']:.3f}; h = {last['h']:.2f}: {last['threshold']:.3f}, "
        f"K = {last['K']}: {last['fixed']:.3f}, K = {last['block_K']}: {last['block']:.3f}"
    )
    assert f"{last['delta'] / last['optimal']:+.1%} (c = 0.5)" in rows[0]["theory"]  # Δ grows with the cost ratio


@pytest.mark.parametrize("K", [1, 2, 4])
def test_rejections_per_position_of_a_fixed_lookahead_are_the_lookahead_chains(K):
    """The recursion's per-position rejections (T more values per node) against the forward slot chain (SPEC L)."""
    inst = MarkovInstance.random(7, 3, K, concentration=0.6)
    tree = stopping_counts(inst, fixed_lookahead(K), per_position=True)
    chain = lookahead_counts(inst, K)
    np.testing.assert_allclose(tree.rejections_per_position, chain.rejections_per_position, atol=1e-12)
    assert stopping_counts(inst, fixed_lookahead(K)).rejections_per_position is None


def test_per_position_values_count_against_the_node_budget():
    from speculab.theory.stopping import tree_fits

    assert tree_fits(2, 60, 16) and not tree_fits(2, 60, 16, per_position=True)  # 2^17 leaves × 6 vs × 66 values
    assert tree_fits(2, 60, 19) and not tree_fits(2, 60, 20)  # 2 · 2^19 = NODE_BUDGET leaves fit, twice that not
    assert optimal_stopping(MarkovInstance.random(4, 2, 0), 0.1, 1.0, max_K=2).rejections_per_position is None
    with pytest.raises(
        TooLarge,
        match=r"^the exact recursion over the draft tree \(2 × 2\^16 leaves per round start\) "
        r"would take 8,650,752 values, over the budget of 6,291,456 values "
        r"\(NODE_BUDGET leaves of 6 values\): use a smaller vocabulary, max_K or "
        r"horizon, or raise",
    ):
        stopping_counts(MarkovInstance.random(60, 2, 0), fixed_lookahead(16), per_position=True)
