"""Token trees (SPEC TR): shapes, drafting, the verifiers' laws against literal references, losslessness by exact
enumeration, the chain identities, exact counts, and both engines.

References are independent of ``speculab``: ``tests/_enumerate_trees.py`` drafts every tree literally and runs each
verifier as its paper states it (recursive rejection sampling with or without replacement; traversal verification
with the remaining tree kept explicitly and every rate recomputed after each rejection).
"""

import itertools

import numpy as np
import pytest

from _enumerate import sequence_law
from _enumerate_trees import drafted_trees, enumerate_tree_rounds, rrs_verify, traversal_verify
from conftest import binomial_se
from speculab import work_budget
from speculab._validate import TooLarge
from speculab.methods import RRS, SD, BatchSD, Traversal, Tree
from speculab.methods.block import block_round_law
from speculab.methods.tree import (
    MAX_LAYOUT,
    MAX_TREE_NODES,
    MAX_TREES,
    as_tree,
    check_enumeration,
    check_nodes,
    draft_children,
    sample_tree_round,
)
from speculab.sim import simulate
from speculab.theory import MarkovInstance

VERIFY = {"rrs": rrs_verify, "traversal": traversal_verify}
SHAPES = [(2, 1), (3,), (1, 2), "parents=0,0,1,1,2", (1, 1, 1)]
METHODS = [cls(shape, draws=d) for cls in (RRS, Traversal) for shape in SHAPES for d in ("iid", "distinct")]


def _reference(method, inst):
    return enumerate_tree_rounds(
        inst.P, inst.Q, inst.rho, list(method.tree.parents), method.draws, VERIFY[type(method).name]
    )


def _nasty(kind: str, T: int = 3, V: int = 3) -> MarkovInstance:
    """Instances where formulas divide by zero: disjoint or nested supports, point masses, p = q."""
    rng = np.random.default_rng(5)
    P = rng.dirichlet(np.full(V, 0.7), size=(T, V))
    Q = rng.dirichlet(np.full(V, 0.7), size=(T, V))
    if kind == "disjoint":  # the draft proposes only token 0, the target never
        P = np.zeros((T, V, V))
        P[..., 0] = 1.0
        Q[..., 0] = 0.0
        Q /= Q.sum(-1, keepdims=True)
    elif kind == "nested":  # the draft's support inside the target's, smaller
        P[..., -1] = 0.0
        P /= P.sum(-1, keepdims=True)
    elif kind == "point masses":
        P = np.eye(V)[rng.integers(V, size=(T, V))]
        Q = np.eye(V)[rng.integers(V, size=(T, V))]
    elif kind == "equal":
        Q = P.copy()
    return MarkovInstance(P, Q, np.full(V, 1.0 / V))


INSTANCES = [("random", lambda: MarkovInstance.random(3, 3, 0, concentration=0.6))] + [
    (k, lambda k=k: _nasty(k)) for k in ("disjoint", "nested", "point masses", "equal")
]


# -- shapes ---------------------------------------------------------------------------------------------------------
def test_tree_shapes():
    t = Tree.from_widths((2, 2, 1))
    assert t.size == 2 + 4 + 4 and t.height == 3 and t.widths == (2, 2, 1)
    assert t.children[0] == (1, 2) and t.children[1] == (3, 4) and len(t.leaves) == 4
    assert t.truncated(2) == Tree.from_widths((2, 2)) and t.truncated(5) is t
    assert Tree.chain(3) == Tree((0, 1, 2)) == Tree.from_widths((1, 1, 1))
    assert Tree.chain(2).widths == (1, 1) and Tree.from_widths((1, 2)).widths == (1, 2)
    odd = Tree((0, 0, 1))
    assert odd.widths is None and str(odd) == "parents=0,0,1" and odd.depth == (0, 1, 1, 2)
    assert odd.truncated(1) == Tree((0, 0))
    for tree in (t, odd):
        assert as_tree(str(tree)) == tree and eval(repr(tree), {"Tree": Tree}) == tree
    assert as_tree((4, 2)) == as_tree("4,2") == Tree.from_widths((4, 2))


@pytest.mark.parametrize(
    "bad, match",
    [
        ((0, 2), r"parents=|node 2's parent"),
        ("2,0", "widths"),
        ("2,x", "'2,x'"),
        ("parents=0,3", r"node 2's parent must be an integer in \[0, 1\]; got 3"),
        ("parents=0,2", r"node 2's parent must be an integer in \[0, 1\]; got 2"),
        ((), "widths"),
        (2.5, "2.5"),
    ],
)
def test_bad_trees_are_refused_by_name(bad, match):
    with pytest.raises(ValueError, match=match):
        RRS(bad)


def test_bad_chain_lengths_and_cuts_are_refused_by_name():
    for bad in (2.5, 0, True):
        with pytest.raises(ValueError, match="a chain's length L must be an integer >= 1"):
            Tree.chain(bad)
    with pytest.raises(ValueError, match="cut to L >= 1 levels; got L = 0"):
        Tree.from_widths((2, 1)).truncated(0)


def test_a_tree_too_large_to_count_is_refused_not_overflowed():
    """The work of enumerating a tree of 201 nodes over 50 tokens is past any float (50^202): counted as an integer,
    it is refused with its order of magnitude, as a smaller excess is."""
    inst = MarkovInstance.random(4, 50, 0)
    with pytest.raises(TooLarge, match=r"about [\d.]+e3\d\d tree nodes"):
        Traversal((8, 8, 2)).expected(inst)
    with pytest.raises(TooLarge, match="MAX_TREES"):
        RRS((400,)).expected(inst)


def test_bad_draws_are_refused():
    with pytest.raises(ValueError, match="draws must be one of"):
        Traversal((2,), draws="sometimes")


# -- drafting ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("draws", ["iid", "distinct"])
def test_drafted_children_follow_their_law(draws, agrees):
    """``draft_children`` (the engines' drafting) against the exact law of the children's tuple: i.i.d. products, or
    sequential sampling without replacement (``p`` with the earlier children removed, renormalised)."""
    rng = np.random.default_rng(3)
    p = np.array([0.5, 0.3, 0.2, 0.0])
    n, k = 60_000, 3
    x = draft_children(np.broadcast_to(p, (n, 4)), rng.random((n, k)), draws)
    exact = {}
    for tup in itertools.product(range(4), repeat=k):
        w, left = 1.0, p.copy()
        for y in tup:
            w *= left[y] / left.sum()
            if draws == "distinct":
                left[y] = 0.0
        if w > 0:
            exact[tup] = w
    seen = {tuple(r): c / n for r, c in zip(*np.unique(x, axis=0, return_counts=True))}
    assert set(seen) <= set(exact)
    keys = sorted(exact)
    e = np.array([exact[t] for t in keys])
    agrees(np.array([seen.get(t, 0.0) for t in keys]), e, f"children drafted {draws}", se=binomial_se(e, n))


def test_distinct_children_past_the_support_are_absent():
    x = draft_children(np.array([[0.0, 1.0, 0.0]]), np.array([[0.3, 0.9, 0.5]]), "distinct")
    np.testing.assert_array_equal(x, [[1, -1, -1]])


def test_iid_children_are_drafted_one_per_uniform_and_absent_only_without_mass():
    """I.i.d. children: child ``i`` is the inverse CDF at uniform ``i``, whatever ``k``; a law on its last token alone
    still drafts that token, and a law without mass (an absent parent) drafts none."""
    p = np.array([[0.2, 0.3, 0.5], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    x = draft_children(p, np.tile([0.1, 0.3, 0.9], (3, 1)), "iid")
    np.testing.assert_array_equal(x, [[0, 1, 2], [2, 2, 2], [-1, -1, -1]])


# -- losslessness and the counts, exactly ----------------------------------------------------------------------
def _whole_sequence_cases():
    """Every method on every instance; the literal enumeration of the five-node tree's i.i.d. drafts on the random
    instance (3^5 drafted trees a round, in Python: seconds) runs in the full tier, the others in the fast one."""
    for kind, make in INSTANCES:
        for method in METHODS:
            heavy = kind == "random" and method.tree.size == 5 and method.draws == "iid"
            yield pytest.param(method, kind, make, id=f"{kind}-{method!r}", marks=[pytest.mark.slow] if heavy else [])


@pytest.mark.parametrize("method, kind, make", list(_whole_sequence_cases()))
def test_output_law_is_the_target_law_and_counts_are_exact(method, kind, make):
    """The literal algorithm's law of whole sequences is the target's exactly (lossless), and the method's exact
    counts (its own round law over every drafted tree) equal the literal enumeration's."""
    inst = make()
    ref = _reference(method, inst)
    target = sequence_law(inst.Q, inst.rho)
    gap = max(abs(ref.law.get(s, 0.0) - target.get(s, 0.0)) for s in set(ref.law) | set(target))
    assert gap < 1e-12
    e = method.expected(inst)
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus"):
        assert e.get(name) == pytest.approx(getattr(ref, name), abs=1e-12), name
    np.testing.assert_allclose(e.rejections_per_position, ref.rejections_per_position, atol=1e-12)
    assert e.accepted + e.rejections + e.bonus == pytest.approx(inst.T, abs=1e-12)


def _random_laws(rng, V, n_nodes):
    w = rng.dirichlet(np.full(V, 0.5), size=n_nodes)
    w[rng.random(w.shape) < 0.2] = 0.0
    w[:, 0] += 1e-3
    return w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize("method", METHODS, ids=repr)
def test_round_law_equals_the_literal_verifier_tree_by_tree(method):
    """For every drafted tree of random per-node laws (exact zeros included), the round law in the node layout gives
    the literal verifier's probability of each end node and its next-token law."""
    rng = np.random.default_rng(1)
    V = 3
    tree = method.tree
    for bonus in (True, False):
        p, q = _random_laws(rng, V, tree.size + 1), _random_laws(rng, V, tree.size + 1)
        trees = drafted_trees(list(tree.parents), lambda u, tk: p[u], method.draws)
        x = np.array([[-1] + tk[1:] for tk, _ in trees])
        n = len(x)
        law = method.round_law(np.broadcast_to(p, (n, *p.shape)), np.broadcast_to(q, (n, *q.shape)), x, bonus=bonus)
        for b, (tokens, _) in enumerate(trees):
            want_end = np.zeros(tree.size + 1)
            want_next = np.zeros((tree.size + 1, V))
            for pr, j, nxt in VERIFY[type(method).name](
                list(tree.parents), tokens, lambda j: p[j], lambda j: q[j], method.draws
            ):
                want_end[j] += pr
                want_next[j] += pr * (nxt / nxt.sum() if nxt.sum() > 0 else nxt)
            np.testing.assert_allclose(law.end[b], want_end, atol=1e-12)
            got = law.correction[b] / np.where(
                law.correction[b].sum(-1, keepdims=True) > 0, law.correction[b].sum(-1, keepdims=True), 1.0
            )
            at_horizon = [j for j in tree.leaves if tree.depth[j] == tree.height and not bonus]
            want = want_next.copy()
            want[at_horizon] = 0.0  # nothing follows a leaf at the horizon
            np.testing.assert_allclose(got * law.end[b][:, None], want, atol=1e-12)


def test_traversal_reproduces_the_papers_worked_example():
    """Weng et al. (2025), Section 3.2: q = (.3, .4, .3), p = (.6, .3, .1) at every node, nodes X1..X5 = a, c, b, c, a
    (X1, X2 children of the root; X3, X4 of X1; X5 of X2), drafted without replacement. a(X3) = min(0.5 · .4/.3, 1)
    = 2/3; after X3 is rejected S = 0.05, a(X1) = 1/11, q' = (0, 0, 1), p' = (6/7, 0, 1/7), so a(X4) = 7/11."""
    a, b, c = 0, 1, 2
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.3, 0.4, 0.3])
    tree = Tree((0, 0, 1, 1, 2))
    x = np.array([-1, a, c, b, c, a])
    law = Traversal(tree, draws="distinct").round_law(np.tile(p, (6, 1)), np.tile(q, (6, 1)), x, bonus=True)
    assert law.end[3] == pytest.approx(2 / 3, abs=1e-15)
    assert law.end[4] == pytest.approx((1 / 3) * (7 / 11), abs=1e-15)
    assert law.end[1] == pytest.approx((1 / 3) * (4 / 11) * 0.0, abs=1e-15)  # a(X1) = 0 once X4 is rejected too
    assert law.end.sum() == pytest.approx(1.0, abs=1e-15)


# -- chains -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("L", [1, 2, 3])
@pytest.mark.parametrize("bonus", [True, False])
def test_on_a_chain_rrs_is_sd_and_traversal_is_block_verification(L, bonus):
    """Block by block: RRS with one child per node has SD's round law, traversal verification block verification's
    (end at depth i = τ = i, the same correction weights up to normalisation)."""
    rng = np.random.default_rng(L)
    V, n = 4, 50
    p, q = (
        _random_laws(rng, V, n * (L + 1)).reshape(n, L + 1, V),
        _random_laws(rng, V, n * (L + 1)).reshape(n, L + 1, V),
    )
    x = np.concatenate([np.full((n, 1), -1), rng.integers(V, size=(n, L))], axis=1)
    for method, ref in ((RRS(Tree.chain(L)), SD(K=L).round_law), (Traversal(Tree.chain(L)), block_round_law)):
        law = method.round_law(p, q, x, bonus=bonus)
        want = ref(p[:, None, :L], q[:, None], x[:, None, 1:], bonus=bonus)
        np.testing.assert_allclose(law.end, want.outcome[:, 0], atol=1e-13)
        norm = lambda w: w / np.where(w.sum(-1, keepdims=True) > 0, w.sum(-1, keepdims=True), 1.0)  # noqa: E731
        live = law.end > 1e-12
        np.testing.assert_allclose(norm(law.correction)[live], norm(want.correction[:, 0])[live], atol=1e-10)


def test_rrs_at_a_root_of_chains_is_batch_sd():
    """M children of the root each carrying a chain is [Yin] Algorithm 4: the same exact counts."""
    inst = MarkovInstance.random(7, 3, 4)
    for M, K in ((2, 2), (3, 1), (2, 3)):
        tree = Tree.from_widths((M,) + (1,) * (K - 1))
        a, b = RRS(tree).expected(inst), BatchSD(M, K=K).expected(inst)
        for name in ("rejections", "oracle_calls", "accepted", "bonus"):
            assert a.get(name) == pytest.approx(b.get(name), abs=1e-12), (M, K, name)


def test_traversal_accepts_at_least_what_rrs_does_on_these_instances():
    """Not a theorem for every tree (the paper proves it on chains), measured here: traversal verification accepts
    more in expectation than RRS on the same tree, both with and without replacement."""
    inst = MarkovInstance.random(8, 3, 2)
    for shape in ((2, 2), (3, 1), "parents=0,0,1,1,3"):
        for draws in ("iid", "distinct"):
            assert (
                Traversal(shape, draws=draws).expected(inst).accepted > RRS(shape, draws=draws).expected(inst).accepted
            )


# -- engines ----------------------------------------------------------------------------------------------------
ENGINE_CASES = [RRS((2, 2), draws="distinct"), Traversal("parents=0,0,1,1,3"), RRS((3, 1))]


@pytest.mark.parametrize("engine", ["numpy", pytest.param("jax", marks=pytest.mark.slow)])
@pytest.mark.parametrize("method", ENGINE_CASES, ids=repr)
def test_simulation_matches_the_exact_counts(method, engine, agrees):
    if engine == "jax":
        pytest.importorskip("jax")
    inst = MarkovInstance.random(7, 3, 1, concentration=0.7)
    e = method.expected(inst)
    c = simulate(inst, method, 30_000, key=3, engine=engine)
    for name, value in e.items():
        if name != "tokens":
            agrees(c.estimate(name), value, f"{method!r} on {engine}: {name}")
    np.testing.assert_array_equal(c.accepted + c.rejections + c.bonus, c.tokens)
    np.testing.assert_array_equal(c.discarded, c.draft_calls - c.accepted)


def test_sampled_ends_follow_the_tree_law(agrees):
    rng = np.random.default_rng(6)
    method = Traversal((2, 2), draws="distinct")
    p, q = _random_laws(rng, 4, 7), _random_laws(rng, 4, 7)
    x = np.array([-1, 0, 1, 0, 2, 1, 3])
    law = method.round_law(p, q, x, bonus=True)
    n = 40_000
    end, token = sample_tree_round(
        type(law)(np.broadcast_to(law.end, (n, 7)), np.broadcast_to(law.correction, (n, 7, 4))),
        rng.random(n),
        rng.random(n),
    )
    freq = np.bincount(end, minlength=7) / n
    agrees(freq, law.end, "end node of one tree round", se=binomial_se(law.end, n))
    assert np.all(token >= 0)


def test_numpy_and_torch_give_the_same_tree_law():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    for method in (RRS((2, 2), draws="distinct"), Traversal((2, 2)), Traversal((3, 1), draws="distinct")):
        n = 20
        p = _random_laws(rng, 4, n * (method.tree.size + 1)).reshape(n, -1, 4)
        q = _random_laws(rng, 4, n * (method.tree.size + 1)).reshape(n, -1, 4)
        x = rng.integers(-1, 4, size=(n, method.tree.size + 1))
        for bonus in (True, False):
            a = method.round_law(p, q, x, bonus=bonus)
            b = method.round_law(torch.from_numpy(p), torch.from_numpy(q), torch.from_numpy(x), bonus=bonus)
            np.testing.assert_allclose(b.end.numpy(), a.end, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(b.correction.numpy(), a.correction, rtol=1e-12, atol=1e-15)


def test_rrs_counts_run_at_their_budget_exactly_and_refuse_one_past():
    """RRS's recursion on the tree 2 at V = 2 costs 2^3·3 at the root and 2^1·1 at each leaf: 28. A budget of 28
    runs it; of 27, refused."""
    inst = MarkovInstance.random(4, 2, 0)
    with work_budget(28 / MAX_TREES):
        assert RRS((2,)).expected(inst).oracle_calls > 0
    with work_budget(27 / MAX_TREES), pytest.raises(TooLarge, match=r"per node, 3 nodes\).*MAX_TREES"):
        RRS((2,)).expected(inst)


def test_the_tree_budgets_hold_at_their_limit_exactly():
    """Each of the trees' budgets admits work equal to it and refuses one unit more: the nodes of a tree, the entries
    of its attention mask ((N + 1)² = 16 for a star of 3) and of its ancestors by depth (4 nodes × 1 level, 5 × 2), and
    the nodes of every drafted tree (2^(N+1) (N+1) = 8 for one node over two tokens)."""
    with work_budget(1 / 64):  # 2^20 / 64 = 16,384 nodes
        check_nodes(16_384, "at the budget")
        with pytest.raises(TooLarge, match="16,385 nodes"):
            check_nodes(16_385, "one past")
    star, other = Tree.from_widths((3,)), Tree.from_widths((3,))
    with work_budget(16 / MAX_LAYOUT):
        assert star.above.shape == (4, 4)
    with work_budget(15 / MAX_LAYOUT), pytest.raises(TooLarge, match="attention mask of 4 nodes"):
        other.above
    for widths, entries in (((3,), 4), ((2, 1), 10)):  # 4 nodes by 1 level, 5 by 2
        tree, other = Tree.from_widths(widths), Tree.from_widths(widths)
        with work_budget(entries / MAX_LAYOUT):
            assert tree.ancestors.size == entries
        with work_budget((entries - 1) / MAX_LAYOUT), pytest.raises(TooLarge, match=f"of {tree.size + 1} nodes by"):
            other.ancestors
    one = Tree.chain(1)
    with work_budget(8 / MAX_TREES):
        check_enumeration(one, 2, "at the budget")
    with work_budget(7 / MAX_TREES), pytest.raises(TooLarge, match=r"2\^2 drafted trees of 2 nodes"):
        check_enumeration(one, 2, "one past")


@pytest.mark.parametrize("shape", [(2, 2, 1), "parents=0,0,1,1,3", (1, 1, 1), (4,)])
def test_the_attention_mask_and_the_ancestors_are_the_paths_to_the_root(shape):
    """``above[a, j]``: ``a`` is ``j`` or on its path to the root; ``ancestors[j, d − 1]``: the node of depth ``d`` on
    that path (``j`` itself at its depth, 0 below it), one column per level — both walked here through the parents."""
    tree = as_tree(shape)
    want = np.eye(tree.size + 1, dtype=bool)
    by_depth = np.zeros((tree.size + 1, tree.height), dtype=np.int64)
    for j in range(1, tree.size + 1):
        v = j
        while v:
            by_depth[j, tree.depth[v] - 1] = v
            v = tree.parents[v - 1]
            want[v, j] = True
    np.testing.assert_array_equal(tree.above, want)
    np.testing.assert_array_equal(tree.ancestors, by_depth)


def test_a_tree_is_given_by_its_parents_or_its_widths_not_by_one_number():
    """One width is a tree of one level; one parent is no sequence of parents, and a string of digits is refused by
    name rather than read character by character."""
    assert Tree.from_widths(3) == Tree.from_widths((3,)) == Tree((0, 0, 0))
    for bad in (3, "001", b"001"):
        with pytest.raises(ValueError, match="a tree's parents must be a sequence of node numbers"):
            Tree(bad)


@pytest.mark.parametrize("draws", ["iid", "distinct"])
def test_a_stars_acceptance_with_one_child_is_one_minus_tv_and_over_one_token_is_certain(draws):
    """``star_acceptance``: one child is accepted with Σ min(p, q) from every context; over a vocabulary of one token
    the first child is accepted and the others never are (absent, or the same token after it)."""
    from speculab.methods.rrs import star_acceptance

    inst = MarkovInstance.random(1, 4, 3, concentration=0.5)
    np.testing.assert_allclose(
        star_acceptance(inst.P[0], inst.Q[0], 1, draws)[:, 0], np.minimum(inst.P[0], inst.Q[0]).sum(-1), atol=1e-15
    )
    np.testing.assert_array_equal(star_acceptance(np.ones((1, 1)), np.ones((1, 1)), 3, draws), [[1.0, 0.0, 0.0]])


@pytest.mark.parametrize("method", [Traversal((2,)), Traversal((2, 1), draws="distinct"), RRS((2,))], ids=repr)
def test_a_draft_equal_to_the_target_has_its_first_path_accepted(method):
    """p = q: the first child's path is accepted with certainty, so every node after it has nothing left to refuse
    (traversal's parent rate S / (S + 1 − rate) is 0 / 0 there): the ends are exactly that path's, with no NaN."""
    tree = method.tree
    p = np.array([0.5, 0.3, 0.2])
    x = np.array([[-1] + [j % 3 for j in range(tree.size)]])
    rows = np.broadcast_to(p, (1, tree.size + 1, 3))
    law = method.round_law(rows, rows, x, bonus=True)
    want = np.zeros(tree.size + 1)
    want[tree.leaves[0] if isinstance(method, Traversal) else 1] = 1.0
    np.testing.assert_array_equal(law.end[0], want)
    assert np.isfinite(law.correction).all()


@pytest.mark.parametrize(
    "method", [RRS("parents=0,0,2", draws="distinct"), Traversal("parents=0,0,2", draws="distinct")]
)
def test_below_an_absent_node_nothing_is_drafted(method):
    """Point-mass drafts with distinct children: the root's second child finds no token left and is absent, and so is
    its child — each round drafts one token (one draft call), so every run's drafted tokens equal its rounds."""
    rng = np.random.default_rng(0)
    T, V = 4, 3
    P = np.eye(V)[rng.integers(V, size=(T, V))]
    inst = MarkovInstance(P, rng.dirichlet(np.ones(V), size=(T, V)), np.full(V, 1.0 / V))
    c = simulate(inst, method, 200, key=0)
    np.testing.assert_array_equal(c.accepted + c.discarded, c.oracle_calls)
    np.testing.assert_array_equal(c.draft_calls, c.oracle_calls)


@pytest.mark.parametrize("draws", ["iid", "distinct"])
def test_a_round_law_of_batches_of_batches_is_each_batchs(draws):
    """The round law takes any leading axes: rounds of shape ``(2, 3)`` at once are the two batches of 3 each."""
    from speculab.methods.rrs import rrs_round_law

    rng = np.random.default_rng(0)
    tree = Tree.from_widths((2, 1))
    p, q = (rng.dirichlet(np.ones(4), size=(2, 3, tree.size + 1)) for _ in range(2))
    x = rng.integers(0, 4, size=(2, 3, tree.size + 1))
    x[..., 0] = -1
    both = rrs_round_law(tree, p, q, x, bonus=True, draws=draws)
    for i in range(2):
        one = rrs_round_law(tree, p[i], q[i], x[i], bonus=True, draws=draws)
        np.testing.assert_array_equal(both.end[i], one.end)
        np.testing.assert_array_equal(both.correction[i], one.correction)


def test_exact_counts_refuse_past_their_budget():
    """Enumerating whole trees (traversal verification) costs V^(N+1) (N+1); RRS's recursion V^(1+k) (1+k) per node
    of k children: each refuses past MAX_TREES, and runs under a larger work budget."""
    inst = MarkovInstance.random(4, 4, 0)
    with pytest.raises(TooLarge, match="MAX_TREES"):
        Traversal((3, 3)).expected(inst)
    assert RRS((3, 3)).expected(inst).oracle_calls > 0  # 4^4 children tuples per node: cheap
    with pytest.raises(TooLarge, match="MAX_TREES"):
        RRS((11,)).expected(inst)
    small = MarkovInstance.random(2, 2, 0)
    with work_budget(13 * 2**13 / MAX_TREES):
        assert Traversal((3, 3)).expected(small).oracle_calls > 0


@pytest.mark.parametrize(
    "broken, message",
    [
        (lambda law: law._replace(end=law.end * 0.5), "gave end probabilities that are not a law"),
        (  # a negative end, the rows still summing to 1
            lambda law: law._replace(end=law.end + 2 * np.eye(law.end.shape[-1])[1] - 2 * np.eye(law.end.shape[-1])[0]),
            "gave end probabilities that are not a law",
        ),
        (  # one round's ends off, the others a law
            lambda law: law._replace(end=law.end * (1 + (np.arange(len(law.end)) == 0))[:, None]),
            "gave end probabilities that are not a law",
        ),
        (lambda law: law._replace(end=law.end[..., :-1]), "gave ends of shape"),  # the corrections' shape is right
        (lambda law: law._replace(correction=law.correction[..., :-1]), "gave ends of shape"),  # the ends' is right
        (  # a negative weight, the sum finite
            lambda law: law._replace(correction=law.correction - 2 * (np.arange(law.correction.shape[-1]) == 0)),
            "gave correction weights that are negative, infinite or NaN",
        ),
        (lambda law: law._replace(correction=law.correction + np.inf), "gave correction weights that are negative"),
    ],
)
def test_the_engine_refuses_a_tree_law_that_is_not_a_law(broken, message):
    """Each check of a tree method's round law on its own: the ends' shape or the corrections' (either one wrong),
    the ends a law (in every round of the batch), the corrections non-negative (one negative weight, the sum finite)
    and finite."""

    class Broken(RRS):
        def round_law(self, p, q, x, *, bonus):
            return broken(super().round_law(p, q, x, bonus=bonus))

    with pytest.raises(ValueError, match=f"Broken.round_law {message}"):
        simulate(MarkovInstance.random(4, 3, 0), Broken((2,)), 100, key=0)


@pytest.mark.parametrize("draws", ["iid", "distinct"])
@pytest.mark.parametrize("shape", [(2, 2), (3, 1), "parents=0,0,1,1,3", (1, 1, 1), (4,)])
def test_rrs_recursion_equals_the_enumeration_of_whole_trees(shape, draws):
    """RRS's exact counts come from a recursion over the nodes (children tuples only); every round start's law
    equals the enumeration of whole drafted trees through the round law, at every position (horizon included)."""
    from speculab.methods.rrs import rrs_kernel
    from speculab.methods.tree import tree_kernel

    inst = MarkovInstance.random(5, 3, 7, concentration=0.5)
    method = RRS(shape, draws=draws)
    for s in range(inst.T):
        a, b = rrs_kernel(inst, method, s), tree_kernel(inst, method, s)
        for name, x, y in zip(a._fields, a, b):
            np.testing.assert_allclose(x, y, atol=1e-13, err_msg=f"{name} at s={s}")
    assert method.expected(inst).source.endswith("a recursion over the tree's nodes")


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: Tree.from_widths((2,) * 30), r"widths 2,2,2,2,2,2,2,2,….* 2,147,483,646 nodes.*MAX_TREE_NODES"),
        (lambda: Tree.from_widths((10**6,) * 10**4), r"more than 1e3010 nodes.*MAX_TREE_NODES"),
        (lambda: Tree.chain(10**9), r"a chain of 1,000,000,000 drafts.*MAX_TREE_NODES"),
        (lambda: RRS((2,) * 30), r"^tree must fit the node budget: a draft tree \(widths 2,2"),
        (lambda: Tree.chain(10**5).ancestors, r"ancestors of 100001 nodes.*MAX_LAYOUT"),
        (lambda: Tree.from_widths((10**4,)).above, r"attention mask of 10001 nodes.*MAX_LAYOUT"),
    ],
)
def test_a_tree_past_its_budget_is_refused_before_it_is_built(build, match):
    """A 30-level binary tree (2³¹ nodes) was built node by node: from the command line a generic out-of-memory
    line after 21 s, from the API without end. Its size is now counted from the widths first, and the tables of a
    large tree (the JAX engine's paths, tree decoding's mask) are refused before they are allocated."""
    with pytest.raises(TooLarge, match=match):
        build()
    with work_budget(1 / 64):  # MAX_TREE_NODES / 64 = 16,384 nodes
        assert Tree.from_widths((2,) * 13).size == 2**14 - 2
        with pytest.raises(TooLarge, match="32,766 nodes, over the budget of 16,384 nodes"):
            Tree.from_widths((2,) * 14)


def test_the_gain_row_of_compare_is_tokens_per_target_call_minus_a_chains():
    """:meth:`TreeMethod.compare_rows` on a context with hand-made counts: tokens per target call pooled over the
    runs, this tree's (16 / 5) minus SD's with as many drafts (5 / 4), measured only; SD decoded with a seed of its
    own."""
    from types import SimpleNamespace

    run = lambda calls, tokens: SimpleNamespace(  # noqa: E731
        counts=SimpleNamespace(oracle_calls=np.array(calls), tokens=np.array(tokens))
    )
    asked = []

    def decode(method, slot):
        asked.append((method, slot))
        return run([3, 1], [4, 1])

    (row,) = RRS((2, 1)).compare_rows(SimpleNamespace(result=run([2, 3], [4, 12]), decode=decode))
    assert asked == [(SD(K=4), 3)]
    assert "SD(K=4)" in row.quantity and np.isnan(row.predicted)
    assert row.measured == pytest.approx(16 / 5 - 5 / 4, abs=1e-15)


def test_a_refused_tree_names_its_first_eight_widths():
    """The refusal of a tree too large to build names its widths, the first eight of them and "…" past eight."""
    with work_budget(100 / MAX_TREE_NODES):  # 100 nodes
        with pytest.raises(TooLarge, match=r"\(widths 2,2,2,2,2,2,2,2\)"):
            Tree.from_widths((2,) * 8)
        with pytest.raises(TooLarge, match=r"\(widths 2,2,2,2,2,2,2,2,…\)"):
            Tree.from_widths((2,) * 9)


def test_a_round_law_given_a_layout_of_no_round_names_the_sizes_it_takes():
    """A tree method's round law takes the layouts of its tree cut to each depth; any other width is refused with
    the sizes it takes."""
    method = Traversal((2, 1))
    p = np.full((1, 4, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"Traversal: a round of tree 2,1 has \[3, 5\] nodes; got x with 4"):
        method.round_law(p, p, np.zeros((1, 4), dtype=np.int64), bonus=True)


class _Reweighted(Traversal):
    """Traversal whose correction weights are scaled by ``scale``, or zeroed where the round cannot end (``0``): the
    same law (weights, not probabilities)."""

    def __init__(self, tree, scale):
        super().__init__(tree)
        object.__setattr__(self, "scale", scale)

    def round_law(self, p, q, x, *, bonus):
        law = super().round_law(p, q, x, bonus=bonus)
        weight = (law.end > 0)[..., None] if self.scale == 0 else self.scale
        return law._replace(correction=law.correction * weight)


@pytest.mark.parametrize("scale", [3.0, 0.5, 0])
def test_exact_counts_read_correction_weights_not_probabilities(scale):
    """The enumeration's kernel normalises each node's correction weights: scaled, or zero where the round never ends
    (no law to normalise there), they give the same counts."""
    inst = MarkovInstance.random(4, 3, 2, concentration=0.6)
    Q = inst.Q.copy()
    Q[..., 0] = 0.0  # a drafted 0 is never accepted: the nodes below it are never ended at (end 0, weights zeroed)
    inst = MarkovInstance(inst.P, Q / Q.sum(-1, keepdims=True), inst.rho)
    want, got = Traversal((2, 1)).expected(inst), _Reweighted((2, 1), scale).expected(inst)
    for name in ("rejections", "oracle_calls", "accepted", "bonus"):
        assert getattr(got, name) == pytest.approx(getattr(want, name), abs=1e-12), name
    np.testing.assert_allclose(got.rejections_per_position, want.rejections_per_position, atol=1e-12)
