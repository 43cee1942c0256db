"""Which tree to draft (speculab.methods.tree_shapes): Sequoia's dynamic program against brute force over every
shape, exact where its model is (RRS on a context-free pair), and measured against the exact best where it is not."""

import math

import numpy as np
import pytest

from speculab import work_budget
from speculab._validate import TooLarge
from speculab.methods import RRS, SD, Traversal, Tree
from speculab.methods.tree_shapes import (
    MAX_SHAPES,
    Cost,
    best_tree,
    ordered_trees,
    rank_acceptance,
    round_accepted,
    sequoia_tree,
    tokens_per_call,
    tokens_per_cost,
)
from speculab.theory import MarkovInstance


def _model_value(tree: Tree, a) -> float:
    """Sequoia's F: every node's product of its path's rank acceptances, computed node by node."""
    total = 0.0
    for j in range(1, tree.size + 1):
        v, prod = j, 1.0
        while v:
            u = tree.parents[v - 1]
            rank = tree.children[u].index(v)
            prod *= a[rank] if rank < len(a) else 0.0
            v = u
        total += prod
    return total


@pytest.mark.parametrize("n", range(1, 8))
def test_ordered_trees_are_every_shape_once(n):
    trees = ordered_trees(n)
    assert len(trees) == math.comb(2 * n, n) // (n + 1)  # Catalan(n)
    assert len(set(trees)) == len(trees) and all(t.size == n for t in trees)


def test_listing_every_shape_is_refused_past_its_budget():
    with pytest.raises(TooLarge, match="MAX_SHAPES"):
        ordered_trees(12)  # Catalan(12) = 208,012
    with work_budget(3):
        assert len(ordered_trees(10)) == 16_796
    with work_budget(14 / MAX_SHAPES):  # Catalan(4) = 14 shapes, exactly the budget
        assert len(ordered_trees(4)) == 14
    with work_budget(13 / MAX_SHAPES), pytest.raises(TooLarge, match="14 shapes"):
        ordered_trees(4)


def test_sequoias_edge_acceptances():
    """Acceptances of 0 and of 1 are probabilities: a certain first child makes the chain of n the best tree
    (n accepted), and nothing ever accepted leaves a tree of one node worth 0."""
    certain = sequoia_tree([1.0], 3)
    assert certain.tree == Tree.chain(3) and certain.value == 3.0
    never = sequoia_tree([0.0, 0.0], 3)
    assert never.tree == Tree((0,)) and never.value == 0.0
    assert sequoia_tree([0.0, 0.5], 2).value == pytest.approx(0.5, abs=1e-15)  # only the second rank accepts


def test_a_first_rounds_accepted_drafts_with_one_node_are_one_minus_tv():
    """One drafted node is SD's first slot: the first round accepts Σ_a ρ(a) Σ_x min(p, q) at position 0."""
    inst = MarkovInstance.random(4, 3, 5, concentration=0.5)
    want = inst.rho @ np.minimum(inst.P[0], inst.Q[0]).sum(-1)
    assert round_accepted(inst, RRS((1,))) == pytest.approx(float(want), abs=1e-14)


@pytest.mark.parametrize("n", range(1, 8))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequoias_program_finds_the_best_shape_under_its_model(n, seed):
    """The dynamic program's value is its tree's F, and no shape of at most n nodes has a larger F (brute force)."""
    a = np.random.default_rng(seed).dirichlet(np.ones(4)) * 0.9
    shape = sequoia_tree(a, n)
    assert shape.tree.size <= n
    assert shape.value == pytest.approx(_model_value(shape.tree, a), abs=1e-12)
    best = max(_model_value(t, a) for m in range(1, n + 1) for t in ordered_trees(m))
    assert shape.value == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("draws", ["iid", "distinct"])
def test_on_a_context_free_pair_the_model_is_exact_for_rrs(draws):
    """RRS on a context-free pair: every shape's expected accepted drafts per round is Sequoia's F with the pair's own
    rank acceptances, so the program's tree is the exact best shape."""
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
    inst = MarkovInstance.context_free(p, q, T=8)
    a = rank_acceptance(inst, 4, draws)
    for tree in ordered_trees(4):
        assert round_accepted(inst, RRS(tree, draws=draws)) == pytest.approx(_model_value(tree, a), abs=1e-12)
    for n in (2, 3, 4):
        dp, exact = sequoia_tree(a, n), best_tree(inst, n, RRS, draws, objective="round")
        assert dp.value == pytest.approx(exact.value, abs=1e-12)


def test_rank_acceptance_is_the_first_childs_sd_acceptance_and_sums_below_one():
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))
    inst = MarkovInstance.context_free(p, q, T=4)
    a = rank_acceptance(inst, 3)
    assert a[0] == pytest.approx(1 - 0.5 * np.abs(p - q).sum(), abs=1e-12)
    assert np.all(a >= 0) and a.sum() <= 1 + 1e-12


def test_the_exact_search_is_the_best_of_every_shape():
    inst = MarkovInstance.random(6, 3, 0)
    best = best_tree(inst, 3, Traversal)
    values = [tokens_per_call(inst, Traversal(t)) for t in ordered_trees(3)]
    assert best.value == pytest.approx(max(values), abs=1e-12)
    assert tokens_per_call(inst, Traversal(best.tree)) == best.value


@pytest.mark.parametrize(("objective", "value"), [("horizon", 1.0), ("round", 0.0)])
def test_a_tie_goes_to_the_first_shape_searched(objective, value):
    """A draft that never proposes what the target would say (it always says token 0, the target token 1): no shape
    accepts anything, every shape ties, and the first of :func:`ordered_trees` is the one kept."""
    T, V = 3, 2
    P, Q = np.zeros((T, V, V)), np.zeros((T, V, V))
    P[..., 0], Q[..., 1] = 1.0, 1.0
    inst = MarkovInstance(P, Q, np.full(V, 1.0 / V))
    best = best_tree(inst, 3, objective=objective)
    assert best.tree == ordered_trees(3)[0] and best.value == value


def test_a_cost_on_drafted_tokens_prefers_smaller_trees():
    """Under a cost model charging each drafted token, the best shape's value is its tokens per unit cost, and no
    shape does better; with drafts free it is the tokens-per-call optimum."""
    inst = MarkovInstance.random(6, 3, 2)
    free = best_tree(inst, 4, objective="cost", cost=Cost(1.0, 0.0))
    assert free.value == pytest.approx(best_tree(inst, 4).value, abs=1e-12)
    dear = best_tree(inst, 4, objective="cost", cost=Cost(1.0, 0.5))
    assert dear.value == pytest.approx(tokens_per_cost(inst, RRS(dear.tree), Cost(1.0, 0.5)), abs=1e-12)
    assert all(tokens_per_cost(inst, RRS(t), Cost(1.0, 0.5)) <= dear.value + 1e-12 for t in ordered_trees(4))
    e = RRS(dear.tree).expected(inst)
    assert dear.value == pytest.approx(inst.T / (e.oracle_calls + 0.5 * e.draft_calls), abs=1e-12)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sequoia_tree([0.7, 0.5], 3), "summing to at most 1"),
        (lambda: sequoia_tree([-0.1], 3), "acceptance must be"),
        (lambda: sequoia_tree([0.5], 0), "n must be an integer"),
        (lambda: ordered_trees(0), "n must be an integer"),
        (lambda: best_tree(MarkovInstance.random(3, 2, 0), 2, objective="speed"), "objective must be one of"),
        (lambda: rank_acceptance("inst.npz", 2), "inst must be a MarkovInstance"),
        (lambda: sequoia_tree("abc", 3), "acceptance must be"),
        (lambda: best_tree(MarkovInstance.random(3, 2, 0), 2, RRS((2,))), "verifier must be a tree method class"),
        (lambda: best_tree(MarkovInstance.random(3, 2, 0), 2, SD), "verifier must be a tree method class"),
        (lambda: best_tree(MarkovInstance.random(3, 2, 0), 2, cost=Cost()), "cost is given with"),
        (lambda: best_tree(MarkovInstance.random(3, 2, 0), 2, objective="cost"), "cost is given with"),
        (lambda: best_tree(MarkovInstance.random(3, 2, 0), 2, objective="cost", cost=Cost(0.0, 1.0)), "cost must"),
        (lambda: best_tree(MarkovInstance.random(3, 2, 0), 2, objective="cost", cost=(1, 0)), "cost must be a Cost"),
        (lambda: best_tree(MarkovInstance.random(3, 2, 0), 2, objective="cost", cost=Cost(1.0, -0.5)), "cost must"),
        (lambda: sequoia_tree([0.5, 0.5 + 1.5e-9], 3), "summing to at most 1"),  # past the tolerance 1e-9
        (lambda: rank_acceptance(MarkovInstance.random(3, 2, 0), 2, "sometimes"), "draws must be one of"),
    ],
)
def test_bad_arguments_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.slow
def test_tree_gain_reproduction(tmp_path, agrees):
    """``speculab repro tree-gain``: every exact number is what the library computes for the instance it saved,
    every simulated one agrees with its exact value (|z| < 5), Sequoia's shape never beats the best, RRS and traversal
    stay below the bound, and the claims table carries the JSON's numbers."""
    from conftest import claims_of
    from speculab.methods import SD, BlockVerification
    from speculab.methods.tree_bound import accepted_bound
    from speculab.repro import tree_gain

    from speculab.backends.pair import default_prompts

    res = tree_gain.run(
        key=1, n_runs=1500, out_dir=tmp_path, search=3, prompts=default_prompts()[:6], max_new_tokens=12
    )
    inst = MarkovInstance.load(tmp_path / "tree_gain_instance.npz")
    T = inst.T
    for n, row in res["points"].items():
        methods = {"SD chain": SD(K=int(n)), "block chain": BlockVerification(int(n))}
        for label, (verifier, draws) in tree_gain.TREES.items():
            methods[label] = verifier(row[label]["tree"], draws=draws)
        for label, point in row.items():
            if "exact" in point:
                assert point["exact"] == pytest.approx(T / methods[label].expected(inst).oracle_calls, rel=1e-12)
            if "z" in point.get("simulated", {}):
                sim = point["simulated"]
                agrees(sim["mean"], point["exact"], f"tree-gain n = {n}: {label}", se=sim["se"])
        assert "exact" in row["RRS iid"] and "exact" in row["RRS distinct"]  # RRS's recursion at every size
    for n, row in res["sequoia"].items():
        for label, v in row.items():
            assert v["sequoia"] <= v["best"] + 1e-12, (n, label)
    for n, row in res["bound"].items():
        for draws in ("iid", "distinct"):
            v = row[draws]
            assert v["RRS"] <= v["traversal"] + 1e-12 and v["traversal"] <= v["bound"] + 1e-9
            assert v["bound"] == pytest.approx(float(inst.rho @ accepted_bound(inst, row["tree"], draws)), abs=1e-9)
    for n, row in res["measured"].items():  # real models: accepted per round against E[τ | tree], paired
        for label, v in row.items():
            gap = v["gap"]
            agrees(
                v["accepted_per_round"],
                v["expected_per_round"],
                f"tree-gain tiny pair n = {n}: {label}",
                se=gap["se"],
                carried_by="tests/test_tree_models.py (law and record checks)",
            )
            assert v["tokens_per_call"] >= 1.0
    assert (tmp_path / "tree_gain.png").stat().st_size > 10_000 and "Sequoia" in tree_gain.summary(res)
    rows = claims_of(tree_gain, res)
    first = res["points"]["4"]["traversal iid"]
    assert any(r["quantity"].startswith("n = 4: tokens per target call, traversal iid") for r in rows)
    assert f"{first['exact']:.3f}" in {
        r["theory"] for r in rows if "n = 4: tokens per target call, traversal iid" in r["quantity"]
    }
