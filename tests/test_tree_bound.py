"""The most any lossless verifier of a tree accepts (speculab.methods.tree_bound): exact where the answer is known
(one node: α*; a chain: block verification), above RRS and traversal verification everywhere, refused past its
budget."""

import numpy as np
import pytest

from speculab import work_budget
from speculab._validate import TooLarge
from speculab.methods import RRS, Traversal, Tree
from speculab.methods.tree_bound import MAX_COUPLING, accepted_bound
from speculab.theory import MarkovInstance, optimal_acceptance


def _sparse(seed: int = 4) -> MarkovInstance:
    """Each row of the draft and of the target without one token, a different one from context to context: supports
    differ, so a context's drafted trees and the target's continuations differ from another context's."""
    rng = np.random.default_rng(seed)
    T, V = 4, 3
    P, Q = rng.dirichlet(np.ones(V), size=(T, V)), rng.dirichlet(np.ones(V), size=(T, V))
    for M, shift in ((P, 0), (Q, 1)):
        M[np.arange(T)[:, None], np.arange(V), (np.arange(V) + shift) % V] = 0.0
        M /= M.sum(-1, keepdims=True)
    return MarkovInstance(P, Q, np.full(V, 1 / V))


INSTANCES = [MarkovInstance.random(4, 3, seed, concentration=c) for seed, c in ((0, 0.6), (1, 0.6), (3, 1.0))]
INSTANCES.append(_sparse())
IDS = ["a", "b", "c", "sparse"]


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("inst", INSTANCES, ids=IDS)
def test_at_one_node_the_bound_is_alpha_star(k, inst):
    """k i.i.d. children of the root: SPEC O's α*(p, q, k), from each context (α* at the first position's laws)."""
    np.testing.assert_allclose(accepted_bound(inst, (k,)), optimal_acceptance(inst.P[0], inst.Q[0], k), atol=1e-9)


@pytest.mark.parametrize("L", [1, 2, 3])
@pytest.mark.parametrize("inst", INSTANCES, ids=IDS)
def test_on_a_chain_the_bound_is_block_verification(L, inst):
    """Sun et al. (2025): block verification is optimal among valid chain verifiers — the LP's optimum equals its
    expected accepted drafts, from every context."""
    bv = Traversal(Tree.chain(L)).round_kernel(inst, 0).accepted()
    np.testing.assert_allclose(accepted_bound(inst, Tree.chain(L)), bv, atol=1e-9)


@pytest.mark.parametrize("draws", ["iid", "distinct"])
@pytest.mark.parametrize("shape", [(2, 1), (2, 2), (3, 1), "parents=0,0,1"])
@pytest.mark.parametrize("inst", INSTANCES, ids=IDS)
def test_rrs_and_traversal_stay_below_the_bound(shape, draws, inst):
    bound = accepted_bound(inst, shape, draws)
    rrs = RRS(shape, draws=draws).round_kernel(inst, 0).accepted()
    trav = Traversal(shape, draws=draws).round_kernel(inst, 0).accepted()
    assert np.all(rrs <= trav + 1e-12)  # measured on these instances, not a theorem
    assert np.all(trav <= bound + 1e-9)
    assert np.all(bound <= RRS(shape).tree.height + 1e-12)


def test_when_draft_and_target_agree_every_draft_can_be_accepted():
    rng = np.random.default_rng(2)
    P = rng.dirichlet(np.ones(3), size=(3, 3))
    inst = MarkovInstance(P, P, np.full(3, 1 / 3))
    np.testing.assert_allclose(accepted_bound(inst, (2, 1)), 2.0, atol=1e-9)


def test_a_round_near_the_horizon_bounds_the_cut_tree():
    inst = INSTANCES[0]
    np.testing.assert_allclose(accepted_bound(inst, (2, 2, 2), s=inst.T - 1), accepted_bound(inst, (2,), s=inst.T - 1))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"inst": "x.npz", "tree": (2,)}, "inst must be a MarkovInstance"),
        ({"tree": (2,), "draws": "some"}, "draws must be one of"),
        ({"tree": (2,), "s": 9}, r"s must be an integer in \[0, 3\]"),
        ({"tree": "2,y"}, "tree must be"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    kwargs = {"inst": INSTANCES[0], **kwargs}
    with pytest.raises(ValueError, match=match):
        accepted_bound(**kwargs)


def test_refused_past_its_budget():
    """Two budgets: the drafted trees enumerated (MAX_TREES), then the linear program's coefficients (MAX_COUPLING)."""
    with pytest.raises(TooLarge, match="MAX_TREES"):
        accepted_bound(MarkovInstance.random(3, 3, 0), (3, 3))
    inst = MarkovInstance.random(4, 3, 0)
    with pytest.raises(TooLarge, match="MAX_COUPLING"):
        accepted_bound(inst, (2, 2, 1))
    with work_budget(1_300_000 / MAX_COUPLING):
        assert accepted_bound(MarkovInstance.random(4, 2, 0), (2, 2, 1)).shape == (2,)


def test_the_programs_budget_holds_at_its_coefficients_exactly():
    """The refusal counts the linear program's coefficients; a budget of that many solves it, one fewer refuses."""
    import re

    inst = MarkovInstance.random(3, 2, 0)
    with work_budget(2 / MAX_COUPLING), pytest.raises(TooLarge, match="MAX_COUPLING") as refused:  # 32 tree nodes
        accepted_bound(inst, (2,))
    n = int(re.search(r"variables, (\d+) coefficients", str(refused.value))[1])
    with work_budget(n / MAX_COUPLING):
        assert accepted_bound(inst, (2,)).shape == (2,)
    with work_budget((n - 1) / MAX_COUPLING), pytest.raises(TooLarge, match=f"{n:,} coefficients"):
        accepted_bound(inst, (2,))


@pytest.mark.parametrize("lie", ["breaks the equalities", "negative"])
def test_a_solvers_answer_is_believed_only_when_its_constraints_hold(lie, monkeypatch):
    """Every solver claiming success with a point that breaks the equalities, or that meets them with a negative
    mass (the solution moved along the constraints' null space), is not believed: the bound is refused rather than
    reported."""
    from types import SimpleNamespace

    from scipy.linalg import null_space

    import speculab.methods.tree_bound as tb

    real = tb.linprog

    def lying(c, A_eq, b_eq, **kwargs):
        if lie == "breaks the equalities":
            return SimpleNamespace(status=0, x=np.zeros(A_eq.shape[1]), fun=-5.0, message=lie)
        res = real(c, A_eq=A_eq, b_eq=b_eq, **kwargs)
        d = null_space(A_eq.toarray())[:, 0]
        x = res.x - d / d.max()  # an entry at x_i − 1 < 0 (x_i ≤ 1: masses of a law)
        assert np.abs(A_eq @ x - b_eq).max() < 1e-9 and x.min() < -1e-6
        return SimpleNamespace(status=0, x=x, fun=res.fun, message=lie)

    monkeypatch.setattr(tb, "linprog", lying)
    with pytest.raises(RuntimeError, match=rf"linear program failed \({lie}\)"):
        accepted_bound(MarkovInstance.random(3, 2, 0), (2,))
