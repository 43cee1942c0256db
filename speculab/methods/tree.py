r"""Token trees: the shape of a drafted tree, its drafting, the law of a tree round, and exact counts (SPEC TR).

A round of a tree method drafts a **tree** of tokens from the draft ``p`` and verifies it with one target call
(tree attention gives the target's law at every node's prefix in one pass). The tree's **nodes** are numbered
``0..N``: node ``0`` is the root (the context; it holds no drafted token), node ``j ≥ 1`` holds one drafted token
whose parent is ``parent(j) < j``; siblings are ordered by number (the order a verifier visits them in). The
children of a node are drafted from ``p`` at that node's prefix, either

* **i.i.d.** (``draws="iid"``, with replacement: siblings may repeat a token), or
* **distinct** (``draws="distinct"``, without replacement: the ``i``-th child from ``p`` with the earlier
  siblings' tokens removed and renormalised — sequential sampling, the law of Gumbel-top-k). A child whose law has
  no mass left (``p``'s support is exhausted) is **absent**: token ``-1``, never drafted nor verified, and its
  subtree absent with it.

**The node layout** every tree verifier's :meth:`TreeMethod.round_law` reads (array API, batched over ``...``):
``p`` ``(..., N + 1, V)`` the draft's law at each node's prefix (the law its children are drafted from), ``q``
``(..., N + 1, V)`` the target's there, ``x`` ``(..., N + 1)`` the nodes' tokens (``x[..., 0]`` unused, ``-1`` for
an absent node). The round outputs the tokens on the path from the root to one **end node** ``j`` and then one
token ``y``: a **correction** when ``j`` has children (all of them refused), a **bonus** from ``q`` at ``j`` when
``j`` is a leaf (a leaf at the horizon outputs nothing after it). :class:`TreeLaw` holds ``P(end = j)`` and the
weights of ``y``. A tree with one child per node is a chain; a round of ``d`` drafted levels is truncated at the
horizon like a chain's block (:meth:`Tree.truncated`).

**Exact counts** (:func:`tree_kernel`, :func:`tree_counts`) on a Markov instance enumerate every drafted tree
from every round start (``V^N`` trees with i.i.d. children), evaluate the verifier's own round law on all of them
at once, and propagate the distribution of round starts over the horizon, as block verification's counts do.
Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, NamedTuple

import numpy as np
from array_api_compat import array_namespace, device

from speculab import kernels
from speculab._budget import EXACT_BITS, limit, power, progress_bar, refuse
from speculab._validate import TooLarge
from speculab.counts import Expected
from speculab.methods.base import Method, RoundLaw, param, sample_round
from speculab.methods.sd import SD
from speculab.rows import Row
from speculab.theory._checks import takes_instance

__all__ = [
    "Tree",
    "TreeLaw",
    "TreeMethod",
    "DRAWS",
    "as_tree",
    "draft_children",
    "sample_tree_round",
    "leaf_weights",
    "drafted_trees",
    "check_enumeration",
    "tree_kernel",
    "TreeKernel",
    "tree_counts",
    "MAX_TREES",
    "MAX_TREE_NODES",
    "MAX_LAYOUT",
]

#: How the children of a node are drafted: ``"iid"`` (with replacement) or ``"distinct"`` (without).
DRAWS = ("iid", "distinct")

#: Largest number of drafted trees (times the vocabulary) that :func:`tree_kernel` enumerates per round start.
MAX_TREES = 1 << 22

#: Largest number of drafted nodes a :class:`Tree` holds (its parents, depths and children are Python tuples).
MAX_TREE_NODES = 1 << 20

#: Largest node-by-depth or node-by-node table (:attr:`Tree.ancestors`, :attr:`Tree.above`) a tree builds.
MAX_LAYOUT = 1 << 26


def check_nodes(nodes: int | float, what: str) -> None:
    """Refuse (:class:`~speculab._validate.TooLarge`) a tree of ``nodes`` drafted nodes past :data:`MAX_TREE_NODES`,
    before it is built; ``what`` says how it was given."""
    if nodes > limit(MAX_TREE_NODES):
        raise refuse(
            f"a draft tree ({what})", nodes, MAX_TREE_NODES, "nodes", "MAX_TREE_NODES", "use fewer or narrower levels"
        )


def _check_layout(values: int, what: str) -> None:
    """Refuse a table of ``values`` entries about a tree's nodes past :data:`MAX_LAYOUT` (the JAX engine's and the
    real-model tree decoding's paths and attention masks)."""
    if values > limit(MAX_LAYOUT):
        raise refuse(what, values, MAX_LAYOUT, "entries", "MAX_LAYOUT", "use a smaller or shallower tree")


# -- the shape ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tree:
    """The shape of a draft tree: ``parents[j − 1]`` is the parent of node ``j`` (``0`` is the root).

    Each parent comes before its children (``parents[j − 1] < j``); siblings are ordered by number.

    Example:
      >>> t = Tree.from_widths((2, 1))      # two children of the root, one child each
      >>> t.parents, t.size, t.height, t.leaves
      ((0, 0, 1, 2), 4, 2, (3, 4))
      >>> Tree.chain(3).parents
      (0, 1, 2)
    """

    parents: tuple[int, ...]

    def __post_init__(self):
        parents = self.parents
        if isinstance(parents, (str, bytes)) or not hasattr(parents, "__iter__"):
            raise ValueError(f"a tree's parents must be a sequence of node numbers; got {parents!r}")
        parents = tuple(parents)
        check_nodes(len(parents), f"{len(parents):,} given parents")
        for j, u in enumerate(parents, start=1):
            if isinstance(u, bool) or not isinstance(u, numbers.Integral) or not 0 <= u < j:
                raise ValueError(
                    f"a tree's parents must list each node's parent before it: node {j}'s parent must be an "
                    f"integer in [0, {j - 1}]; got {u!r}"
                )
        if not parents:
            raise ValueError("a tree needs at least one drafted node")
        object.__setattr__(self, "parents", tuple(int(u) for u in parents))

    @classmethod
    def from_widths(cls, widths) -> "Tree":
        """The tree whose every node at depth ``d`` has ``widths[d]`` children (nodes numbered breadth first)."""
        widths = tuple(widths) if hasattr(widths, "__iter__") and not isinstance(widths, str) else (widths,)
        if not widths or any(isinstance(w, bool) or not isinstance(w, numbers.Integral) or w < 1 for w in widths):
            raise ValueError(f"tree widths must be integers >= 1, one per depth; got {widths!r}")
        nodes, width = 0, 1
        for w in widths:  # Σ_d Π_{i ≤ d} widths[i], exact until past every budget
            width *= int(w)
            nodes += width
            if nodes.bit_length() > EXACT_BITS:
                nodes = float("inf")
                break
        check_nodes(nodes, f"widths {','.join(map(str, widths[:8]))}{',…' if len(widths) > 8 else ''}")
        parents, level = [], [0]
        for w in widths:
            nxt = []
            for u in level:
                for _ in range(int(w)):
                    parents.append(u)
                    nxt.append(len(parents))
            level = nxt
        return cls(tuple(parents))

    @classmethod
    def chain(cls, L: int) -> "Tree":
        """A chain of ``L`` drafts: one child per node."""
        if isinstance(L, bool) or not isinstance(L, numbers.Integral) or L < 1:
            raise ValueError(f"a chain's length L must be an integer >= 1; got {L!r}")
        check_nodes(L, f"a chain of {L:,} drafts")
        return cls.from_widths((1,) * int(L))

    # -- derived structure ------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """``N``: drafted nodes (the root not counted)."""
        return len(self.parents)

    @cached_property
    def depth(self) -> tuple[int, ...]:
        """Depth of every node ``0..N`` (the root's is 0)."""
        d = [0]
        for u in self.parents:
            d.append(d[u] + 1)
        return tuple(d)

    @property
    def height(self) -> int:
        """The deepest node's depth: the most tokens a round can accept."""
        return max(self.depth)

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """The children of every node ``0..N``, in order."""
        out = [[] for _ in range(self.size + 1)]
        for j, u in enumerate(self.parents, start=1):
            out[u].append(j)
        return tuple(tuple(c) for c in out)

    @cached_property
    def ancestors(self) -> np.ndarray:
        """``A[j, d − 1]``: node ``j``'s ancestor at depth ``d`` (``j`` itself at its own depth, 0 below it), shape
        ``(N + 1, max(height, 1))``; refused past :data:`MAX_LAYOUT` entries."""
        _check_layout((self.size + 1) * max(self.height, 1), f"the ancestors of {self.size + 1} nodes by depth")
        A = np.zeros((self.size + 1, max(self.height, 1)), dtype=np.int64)
        for j in range(1, self.size + 1):
            v = j
            while v:
                A[j, self.depth[v] - 1] = v
                v = self.parents[v - 1]
        return A

    @cached_property
    def above(self) -> np.ndarray:
        """``B[a, j]``: node ``a`` is ``j`` or an ancestor of ``j`` (the root is above every node), ``(N + 1,) * 2``;
        refused past :data:`MAX_LAYOUT` entries."""
        _check_layout((self.size + 1) ** 2, f"the attention mask of {self.size + 1} nodes")
        B = np.eye(self.size + 1, dtype=bool)
        rows = self.ancestors
        for j in range(1, self.size + 1):
            B[rows[j][rows[j] > 0], j] = True
            B[0, j] = True
        return B

    @property
    def leaves(self) -> tuple[int, ...]:
        """The nodes without children."""
        return tuple(j for j in range(1, self.size + 1) if not self.children[j])

    @property
    def widths(self) -> tuple[int, ...] | None:
        """The children per node at each depth, if every node at a depth above the leaves has as many (else None)."""
        out = []
        for d in range(self.height):
            counts = {len(self.children[j]) for j in range(self.size + 1) if self.depth[j] == d}
            if len(counts) != 1:
                return None
            out.append(counts.pop())
        return tuple(out) if Tree.from_widths(out) == self else None

    def truncated(self, L: int) -> "Tree":
        """The nodes of depth ``≤ L`` (``L ≥ 1``), numbered in the same order."""
        if isinstance(L, bool) or not isinstance(L, numbers.Integral) or L < 1:
            raise ValueError(f"a tree is cut to L >= 1 levels; got L = {L!r}")
        if L >= self.height:
            return self
        keep = [j for j in range(1, self.size + 1) if self.depth[j] <= L]
        new = {0: 0, **{j: i for i, j in enumerate(keep, start=1)}}
        return Tree(tuple(new[self.parents[j - 1]] for j in keep))

    def __repr__(self) -> str:
        w = self.widths
        return f"Tree.from_widths({w})" if w is not None else f"Tree(parents={self.parents})"

    def __str__(self) -> str:
        w = self.widths
        return ",".join(map(str, w)) if w is not None else "parents=" + ",".join(map(str, self.parents))


def as_tree(value, name: str = "tree") -> Tree:
    """A :class:`Tree` from a tree, widths per depth (``(4, 2, 2, 1)``), or the command line's text
    (``"4,2,2,1"`` for widths, ``"parents=0,0,1,2"`` for an explicit tree)."""
    try:
        if isinstance(value, Tree):
            return value
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("parents="):
                return Tree(tuple(int(v) for v in text[len("parents=") :].split(",")))
            return Tree.from_widths(tuple(int(v) for v in text.split(",")))
        return Tree.from_widths(value)
    except TooLarge as err:
        raise TooLarge(f"{name} must fit the node budget: {err}") from None
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"{name} must be a Tree, widths per depth such as (4, 2, 2, 1) or '4,2,2,1', or 'parents=0,0,1,2'; "
            f"got {value!r} ({err})"
        ) from None


# -- drafting (array API) ----------------------------------------------------------------------------------------
def draft_children(p, u, draws: str):
    """The children of a node drafted from its draft law ``p`` ``(..., V)`` with the uniforms ``u`` ``(..., k)``:
    tokens ``(..., k)``, ``-1`` for an absent child (``draws="distinct"`` past ``p``'s support; every child where
    ``p`` has no mass: below an absent node, or an end-of-sequence token on real models).

    Sequential sampling without replacement: child ``i`` is drawn from ``p`` with the tokens of children
    ``1..i−1`` removed, renormalised (the law of the first ``k`` of a Gumbel-top-k race).
    """
    xp = array_namespace(p, u)
    k = u.shape[-1]
    if draws == "iid":
        cum = xp.cumulative_sum(p, axis=-1)
        x = kernels.sample_cumulative(xp.broadcast_to(cum[..., None, :], (*u.shape, p.shape[-1])), u)
        return xp.where(cum[..., -1:] > 0, x, -1)  # a law without mass (an absent parent): absent children
    tokens, left = [], p
    vocab = xp.arange(p.shape[-1], device=device(p))
    for i in range(k):
        mass = xp.sum(left, axis=-1)
        cum = xp.cumulative_sum(left, axis=-1)
        x = kernels.sample_cumulative(cum, u[..., i])
        x = xp.where(mass > 0, xp.clip(x, max=p.shape[-1] - 1), -1)
        tokens.append(x)
        left = xp.where(vocab == x[..., None], 0.0, left)
    return xp.stack(tokens, axis=-1)


# -- the law of a round -----------------------------------------------------------------------------------------
class TreeLaw(NamedTuple):
    """The exact law of a tree round's decision given the drafted tree (array API; leading batch axes ``...``).

    Attributes:
      end: ``(..., N + 1)`` probability that the accepted path ends at node ``j`` (``0``: nothing accepted).
      correction: ``(..., N + 1, V)`` unnormalised weights of the token output after the path to ``j``: a correction
        where ``j`` has children, the bonus law ``q`` at ``j`` at a leaf (all zeros where nothing follows).
    """

    end: Any
    correction: Any


def sample_tree_round(law: TreeLaw, u_end, u_token):
    """Draw a tree round's decision with two uniforms (array API, batched): ``(end node, token)``, ``token = -1``
    where nothing follows — :func:`~speculab.methods.sample_round` on the end nodes as one row's outcomes."""
    rows = RoundLaw(
        outcome=law.end[..., None, :], correction=law.correction[..., None, :, :], reject_prob=None, accept_prob=None
    )
    _, end, token = sample_round(rows, u_end, u_token)
    return end, token


@dataclass(frozen=True)
class TreeMethod(Method):
    """Base of the tree verifiers (module docstring): a frozen dataclass with the tree and how its children are drawn.

    Subclasses set ``name`` and give :meth:`round_law` in the node layout. A round drafts the tree truncated to the
    tokens left (:meth:`round_tree`); its exact counts on a Markov instance come from :func:`tree_counts`.

    Args:
      tree: the drafted tree — widths per depth (``(4, 2, 2, 1)``: four children of the root, two of each of
        those, …), a :class:`Tree`, or on the command line ``4,2,2,1`` or ``parents=0,0,1,2``.
      draws: ``"iid"`` children drafted with replacement, ``"distinct"`` without.
    """

    tree: Tree = param(help="draft tree: children per node at each depth, e.g. 4,2,2,1, or parents=0,0,1", type=str)
    draws: str = param("iid", help="children drafted iid (with replacement) or distinct", type=str, choices=DRAWS)

    def __post_init__(self):
        object.__setattr__(self, "tree", as_tree(self.tree))
        if self.draws not in DRAWS:
            raise ValueError(f"draws must be one of {DRAWS} (children with or without replacement); got {self.draws!r}")

    #: How :meth:`expected` is computed (its ``source``).
    exact_by: ClassVar[str] = "drafted trees enumerated"

    def round_kernel(self, inst, s: int) -> "TreeKernel":
        """The law of a round starting at position index ``s`` on ``inst`` (:func:`tree_kernel`: by enumeration)."""
        return tree_kernel(inst, self, s)

    def compare_rows(self, ctx) -> list:
        """The gain over a chain that drafts as many tokens per round with one target call: tokens per target call
        of this tree minus SD's with ``K = N`` (separate runs on the same prompts)."""
        chain = ctx.decode(SD(K=self.tree.size), slot=3)
        mine, theirs = ctx.result.counts, chain.counts
        rate = lambda c: c.tokens.sum() / c.oracle_calls.sum()  # noqa: E731
        return [
            Row(
                f"tokens per target call: this tree − SD(K={self.tree.size}) (separate runs)",
                float("nan"),
                float(rate(mine) - rate(theirs)),
                note=f"{self.tree.size} drafted tokens and one target call per round each; > 0: the tree gains",
            )
        ]

    def round_tree(self, remaining: int) -> Tree:
        """The tree a round drafts when it may output at most ``remaining`` tokens (``remaining ≥ 1``)."""
        return self.tree.truncated(self.draft_length(remaining))

    def draft_length(self, remaining: int) -> int:
        return min(self.tree.height, remaining)

    def layout_tree(self, x) -> Tree:
        """The round tree whose node layout the tokens ``x`` ``(..., N + 1)`` have (the tree truncated to a depth)."""
        n = x.shape[-1]
        for L in range(1, self.tree.height + 1):
            tree = self.tree.truncated(L)
            if tree.size + 1 == n:
                return tree
        sizes = sorted({self.tree.truncated(L).size + 1 for L in range(1, self.tree.height + 1)})
        raise ValueError(f"{type(self).__name__}: a round of tree {self.tree} has {sizes} nodes; got x with {n}")

    @takes_instance
    def expected(self, inst) -> Expected:
        return tree_counts(inst, self)


def leaf_weights(q, tree: Tree, j: int, bonus: bool):
    """The bonus law at leaf ``j``: ``q`` there, or zeros at the horizon (a leaf of the full depth, no bonus)."""
    xp = array_namespace(q)
    return q if (bonus or tree.depth[j] < tree.height) else xp.zeros_like(q)


# -- exact counts ----------------------------------------------------------------------------------------------------
def drafted_trees(draft, s: int, tree: Tree, draws: str):
    """Every tree drafted from every context at position index ``s`` of the draft's kernels ``draft`` ``(T, V, V)``
    (a node of depth ``d`` is drafted from ``draft[s + d]`` at its parent's token): ``(x, weight, origin)``.

    ``x`` ``(n, N + 1)`` the nodes' tokens (``x[:, 0]`` the context's token ``a``), ``weight`` ``(n,)`` the
    probability of drafting that tree from ``a``, ``origin`` ``(n,)`` = ``a``.
    """
    V, N = draft.shape[-1], tree.size
    x = np.full((V, N + 1), -1, dtype=np.int64)
    x[:, 0] = np.arange(V)
    w = np.ones(V)
    for j in range(1, N + 1):
        u = tree.parents[j - 1]
        parent_token = x[:, u]
        present = parent_token >= 0
        law = np.where(present[:, None], draft[s + tree.depth[u], np.maximum(parent_token, 0)], 0.0)  # (n, V)
        if draws == "distinct":
            for sib in tree.children[u]:
                if sib == j:
                    break
                law[np.arange(len(x)), np.maximum(x[:, sib], 0)] *= x[:, sib] < 0  # remove an earlier sibling
        mass = law.sum(axis=1)
        absent = mass <= 0  # no parent, or (distinct) the support exhausted: the child is absent
        law = law / np.where(absent, 1.0, mass)[:, None]  # (distinct) renormalised without the earlier siblings
        branch_w = np.where(absent[:, None], np.eye(1, V, 0)[0], law)  # absent: one branch of weight 1
        keep = branch_w > 0
        rows, tokens = np.nonzero(keep)
        x = x[rows]
        x[:, j] = np.where(absent[rows], -1, tokens)
        w = w[rows] * branch_w[rows, tokens]
    return x, w, x[:, 0].copy()


class TreeKernel(NamedTuple):
    """The law of a tree round from each context ``a``, by the depth ``e`` of the node the accepted path ends at."""

    correction: np.ndarray  # (V, L + 1, V): P(end at a node with children, at depth e; correction y | a)
    bonus: np.ndarray  # (V, L + 1, V): P(end at a leaf at depth e; bonus y | a)
    stop: np.ndarray  # (V,): P(end at a leaf at the horizon | a): nothing follows
    drafted: np.ndarray  # (V,): expected drafted tokens

    def accepted(self) -> np.ndarray:
        """``E[accepted drafts | a]`` ``(V,)``."""
        e = np.arange(self.correction.shape[1])
        return (self.correction.sum(-1) + self.bonus.sum(-1)) @ e + self.stop * (len(e) - 1)


def check_enumeration(tree: Tree, V: int, what: str, advice: str = "") -> None:
    """Refuse (:class:`~speculab._validate.TooLarge`) enumerating every drafted ``tree`` over ``V`` tokens —
    ``V^(N+1) (N+1)`` tree nodes — past :data:`MAX_TREES`; ``what`` names the computation."""
    work = power(V, tree.size + 1) * (tree.size + 1)  # exact: no float overflow for large trees
    if work > limit(MAX_TREES):
        raise refuse(
            f"{what} ({V}^{tree.size + 1} drafted trees of {tree.size + 1} nodes)",
            work,
            MAX_TREES,
            "tree nodes",
            "MAX_TREES",
            "use a smaller tree or vocabulary" + advice,
        )


def tree_kernel(inst, method: TreeMethod, s: int) -> TreeKernel:
    """The law of a round of ``method`` starting at position index ``s``, by enumeration of its drafted trees
    (the round's tree: :meth:`TreeMethod.round_tree`) through the method's own round law. Fewer than ``N`` tokens
    are drafted in expectation where distinct children exhaust ``p``'s support."""
    T, V = inst.T, inst.V
    tree = method.round_tree(T - s)
    L = tree.height
    check_enumeration(tree, V, "exact tree counts", " (the simulator has no such limit)")
    x, w, origin = drafted_trees(inst.P, s, tree, method.draws)
    n = len(x)
    p = np.empty((n, tree.size + 1, V))
    q = np.empty((n, tree.size + 1, V))
    for j in range(tree.size + 1):
        t = s + tree.depth[j]
        tok = np.maximum(x[:, j], 0)
        p[:, j] = inst.P[min(t, T - 1), tok]  # past the horizon: unused (a leaf drafts nothing)
        q[:, j] = inst.Q[t, tok] if t < T else 1.0 / V  # past the horizon: unused (no bonus)
    law = method.round_law(p, q, x, bonus=s + L < T)
    end, corr = np.asarray(law.end, dtype=np.float64), np.asarray(law.correction, dtype=np.float64)
    sums = corr.sum(axis=-1, keepdims=True)
    y = (w[:, None] * end)[..., None] * np.where(sums > 0, corr / np.where(sums > 0, sums, 1.0), 0.0)  # (n, N+1, V)
    out = TreeKernel(np.zeros((V, L + 1, V)), np.zeros((V, L + 1, V)), np.zeros(V), np.zeros(V))
    for j in range(tree.size + 1):
        d = tree.depth[j]
        if tree.children[j]:
            np.add.at(out.correction[:, d], origin, y[:, j])
        elif s + d < T:
            np.add.at(out.bonus[:, d], origin, y[:, j])
        else:
            np.add.at(out.stop, origin, w * end[:, j])
    np.add.at(out.drafted, origin, w * np.count_nonzero(x[:, 1:] >= 0, axis=1))
    return out


def tree_counts(inst, method: TreeMethod) -> Expected:
    r"""Exact expected counts of a tree method over the horizon, from its round kernels
    (:meth:`TreeMethod.round_kernel`).

    The distribution of round starts ``D_s(a)`` is propagated: a round at ``s`` ending at depth ``e`` outputs
    ``e`` accepted drafts and then a correction (the end node has children) or a bonus (a leaf; nothing at the
    horizon), and the next round starts at ``s + e + 1`` with that token as context. One target call per round.
    """
    T, V = inst.T, inst.V
    D = np.zeros((T + 1, V))
    D[0] = inst.rho
    rej_pos = np.zeros(T)
    totals = dict.fromkeys(("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"), 0.0)
    for s in progress_bar(range(T), "exact tree counts", "position"):
        if not D[s].any():
            continue
        k = method.round_kernel(inst, s)
        totals["oracle_calls"] += D[s].sum()
        totals["draft_calls"] += D[s] @ k.drafted
        totals["accepted"] += D[s] @ k.accepted()
        corrections, bonuses = np.einsum("a,aey->ey", D[s], k.correction), np.einsum("a,aey->ey", D[s], k.bonus)
        for e in range(k.correction.shape[1]):
            if s + e < T:  # a token follows
                D[s + e + 1] += corrections[e] + bonuses[e]
                rej_pos[s + e] += corrections[e].sum()
        totals["rejections"] += corrections.sum()
        totals["bonus"] += bonuses.sum()
    totals["discarded"] = totals["draft_calls"] - totals["accepted"]
    return Expected(
        **{k: float(v) for k, v in totals.items()},
        tokens=float(T),
        rejections_per_position=rej_pos,
        source=f"{type(method).__name__} on a token tree: exact, {method.exact_by}",
    )
