r"""Which tree to draft: Sequoia's dynamic program over shapes, and the exact best shape by search (SPEC TR).

**Sequoia** (Chen et al. 2024, arXiv 2402.12374) chooses the tree of ``n`` nodes under a *positional acceptance*
model: a node's ``i``-th child is the one accepted with probability ``a_i`` (the same at every node, ``Σ a_i ≤ 1``),
so a tree accepts in expectation

.. math:: F(\mathcal T) = \sum_{v \in \mathcal T} \prod_{u \in \text{path}(v)} a_{\text{rank}(u)},

and the best ``F`` over trees of at most ``n`` nodes is a dynamic program (:func:`sequoia_tree`): with ``f(m)`` the best
subtree below a node holding ``m`` nodes and ``g(i, m)`` the best use of ``m`` nodes by the children of rank ``≥ i``,
``g(i, m) = max(0, max_{1 ≤ s ≤ m} a_i (1 + f(s − 1)) + g(i + 1, m − s))`` and ``f = g(1, ·)``.

Under recursive rejection sampling on a context-free pair the model is exact (a node's children are verified the same
way at every depth, and which child was accepted does not change what follows), so the program's tree is then the
exact best (a test). Under traversal verification (sequence-level acceptance) or on a Markov instance (laws that
depend on the context) it is a model: :func:`best_tree` searches every shape of ``n`` nodes exactly
(:func:`ordered_trees`, Catalan(n) of them) and the distance between the two is measured.
Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from speculab._budget import limit, refuse
from speculab._validate import as_positive_int
from speculab.methods.rrs import RRS, star_acceptance
from speculab.methods.tree import Tree, TreeMethod
from speculab.theory._checks import takes_instance

__all__ = [
    "rank_acceptance",
    "sequoia_tree",
    "ordered_trees",
    "best_tree",
    "Shape",
    "tokens_per_call",
    "round_accepted",
    "tokens_per_cost",
    "Cost",
    "MAX_SHAPES",
]


class Shape(NamedTuple):
    """A tree and its value (the objective of the function that returned it)."""

    tree: Tree
    value: float


@takes_instance
def rank_acceptance(inst, k: int, draws: str = "iid") -> np.ndarray:
    """Sequoia's positional acceptance ``a_1..a_k`` on ``inst``: the probability that a node's ``i``-th of ``k``
    children is the one RRS accepts, averaged over every position ``t`` and context, each context weighted by the
    target chain's marginal ``μ_t`` there."""
    k = as_positive_int(k, "k")
    star = RRS((k,), draws=draws)  # checks draws
    T = inst.T
    mu, total = np.asarray(inst.rho, dtype=float), np.zeros(k)
    for t in range(T):
        total += mu @ star_acceptance(inst.P[t], inst.Q[t], k, star.draws)
        mu = mu @ inst.Q[t]
    return total / T


def sequoia_tree(acceptance, n: int) -> Shape:
    """The tree of at most ``n`` nodes with the largest ``F`` under the positional model ``acceptance`` (module
    docstring), and that ``F``: the expected accepted drafts per round the model predicts."""
    try:
        a = np.asarray(acceptance, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(
            f"acceptance must be probabilities a_1..a_k summing to at most 1; got {acceptance!r}"
        ) from None
    if a.ndim != 1 or a.size < 1 or not np.all((a >= 0) & (a <= 1)) or a.sum() > 1 + 1e-9:
        raise ValueError(f"acceptance must be probabilities a_1..a_k summing to at most 1; got {acceptance!r}")
    n = as_positive_int(n, "n")
    k = a.size

    @lru_cache(maxsize=None)
    def f(m: int) -> tuple[float, tuple]:
        """Best value of ``m`` nodes below a node, and its children's subtrees (each ``(size, subtree)``)."""
        return g(0, m)

    @lru_cache(maxsize=None)
    def g(i: int, m: int) -> tuple[float, tuple]:
        best = (0.0, ())
        if i == k or m == 0:
            return best
        for size in range(1, m + 1):
            below, shape = f(size - 1)
            rest, others = g(i + 1, m - size)
            value = a[i] * (1.0 + below) + rest
            if value > best[0] + 1e-15:
                best = (value, ((size, shape),) + others)
        return best

    value, children = f(n)
    return Shape(_tree_of(children) if children else Tree((0,)), float(value))  # nothing accepted: any tree, one node


def _tree_of(forest: tuple) -> Tree:
    """The tree whose root's children carry ``forest`` (tuples of ``(subtree size, its children's forest)``), nodes
    numbered in preorder."""
    parents: list[int] = []

    def build(node: int, kids: tuple) -> None:
        for _, sub in kids:
            parents.append(node)
            build(len(parents), sub)

    build(0, forest)
    return Tree(tuple(parents))


#: Most shapes :func:`ordered_trees` lists (Catalan(9) = 4,862 fit; Catalan(10) = 16,796 do not).
MAX_SHAPES = 1 << 13


def ordered_trees(n: int) -> list[Tree]:
    """Every ordered tree of exactly ``n`` drafted nodes (Catalan(n) of them), nodes numbered in preorder; refused
    past :data:`MAX_SHAPES` (``speculab.work_budget`` raises it)."""
    n = as_positive_int(n, "n")
    shapes = math.comb(2 * n, n) // (n + 1)
    if shapes > limit(MAX_SHAPES):
        raise refuse(
            f"every ordered tree of {n} nodes", shapes, MAX_SHAPES, "shapes", "MAX_SHAPES", "search fewer nodes n"
        )

    @lru_cache(maxsize=None)
    def forests(m: int) -> tuple[tuple, ...]:
        """Every ordered forest of ``m`` nodes, as tuples of (subtree size, subtree forest)."""
        if m == 0:
            return ((),)
        out = []
        for first in range(1, m + 1):  # the first tree's size, its root included
            for below in forests(first - 1):
                for rest in forests(m - first):
                    out.append(((first, below),) + rest)
        return tuple(out)

    return [_tree_of(forest) for forest in forests(n)]


@takes_instance
def tokens_per_call(inst, method: TreeMethod) -> float:
    """Tokens per target call over the horizon, exactly: ``T / E[target calls]``."""
    return inst.T / method.expected(inst).oracle_calls


@takes_instance
def round_accepted(inst, method: TreeMethod) -> float:
    """Expected accepted drafts of the first round, from the prompt's law ``ρ`` (exact)."""
    return float(np.asarray(inst.rho) @ method.round_kernel(inst, 0).accepted())


class Cost(NamedTuple):
    """A cost model of a run: each target call costs ``target``, each drafted token ``per_draft`` (any unit: times on
    a given machine, or FLOPs). Sequoia's own model prices the target's call by the tree's size and the draft by
    its depth; this linear one is what the exact counts give exactly."""

    target: float = 1.0
    per_draft: float = 0.0


@takes_instance
def tokens_per_cost(inst, method: TreeMethod, cost: Cost) -> float:
    """Tokens per unit of ``cost`` over the horizon, exactly: ``T / (c_target E[calls] + c_draft E[drafted])``."""
    e = method.expected(inst)
    return inst.T / (cost.target * e.oracle_calls + cost.per_draft * e.draft_calls)


#: What :func:`best_tree` maximises.
OBJECTIVES = ("horizon", "round", "cost")


@takes_instance
def best_tree(
    inst,
    n: int,
    verifier: type[TreeMethod] = RRS,
    draws: str = "iid",
    objective: str = "horizon",
    cost: Cost | None = None,
) -> Shape:
    """The exact best tree of ``n`` nodes for ``verifier`` on ``inst``: every ordered shape searched, by
    ``objective`` — ``"horizon"``: tokens per target call over the horizon (:func:`tokens_per_call`), ``"round"``:
    expected accepted drafts of a round from ``ρ`` (:func:`round_accepted`), ``"cost"``: tokens per unit of
    ``cost`` (:func:`tokens_per_cost`). Of shapes whose values lie within 1e-12 of each other the first in
    :func:`ordered_trees`' order is kept."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {list(OBJECTIVES)}; got {objective!r}")
    if not (isinstance(verifier, type) and issubclass(verifier, TreeMethod)):
        raise ValueError(f"verifier must be a tree method class such as RRS or Traversal; got {verifier!r}")
    if (objective == "cost") != (cost is not None):
        raise ValueError('cost is given with objective="cost", and only then')
    if cost is not None and not (
        isinstance(cost, Cost) and all(math.isfinite(c) and c >= 0 for c in cost) and cost.target > 0
    ):
        raise ValueError(f"cost must be a Cost with finite costs >= 0 and a target call's > 0; got {cost!r}")
    score = {
        "horizon": tokens_per_call,
        "round": round_accepted,
        "cost": lambda inst, method: tokens_per_cost(inst, method, cost),
    }[objective]
    best = None
    for tree in ordered_trees(n):
        value = score(inst, verifier(tree, draws=draws))
        if best is None or value > best.value + 1e-12:
            best = Shape(tree, value)
    return best
