r"""The most drafts any lossless verifier of a token tree can accept in a round (SPEC TR, "bound"), by linear
programming on small instances.

A verifier of a drafted tree ``𝒯`` (law: the draft's, children i.i.d. or distinct) outputs the tokens ``y_{1:i}`` of a
path of ``𝒯`` from the root (``i`` accepted drafts) and one more token ``y_{i+1}`` (none when ``i`` is the height
``H``). It is lossless iff its output, continued by the target, is the target's law on ``H`` tokens — the next
round starts from the output as from any prefix. Writing ``π(𝒯, j, y)`` for the probability of drafting ``𝒯`` and
ending at its node ``j`` (path ``u_j``, depth ``i_j``) with next token ``y``, every lossless verifier is a feasible
point of

.. math::
    \max_\pi \sum \pi(\mathcal T, j, y)\, i_j \quad\text{s.t.}\quad
    \sum_{j, y} \pi(\mathcal T, j, y) = P(\mathcal T),\qquad
    \sum_{\mathcal T, j, y:\ u_j y \preceq z} \pi(\mathcal T, j, y)\, q(z \mid u_j y) = q(z)\ \ \forall z \in V^H,

and every feasible point is a verifier (draw ``(j, y)`` given ``𝒯`` from ``π``), so the optimum is **the** most any
lossless verifier of that tree accepts in expectation — solved exactly here (HiGHS), over every drafted tree. At one
node with ``k`` i.i.d. children it is ``α*(p, q, k)`` (SPEC O; :func:`speculab.theory.optimal_acceptance`); on a chain
it is block verification's (Sun et al. 2025 prove block verification optimal among valid chain verifiers). The tests
check both, and that RRS and traversal verification stay below it. Hu et al. (ICLR 2025) characterise the optimum at
one node, with and without replacement; beyond one node no verifier is known to attain it in general, and the gap of
each verifier is measured, not claimed closed. A bound is for one round: a verifier whose path choice also shaped the
next round's context could trade acceptance now for later, which this per-round optimum does not price.
Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from speculab._budget import limit, refuse
from speculab._validate import as_positive_int
from speculab.methods.tree import DRAWS, Tree, as_tree, check_enumeration, drafted_trees
from speculab.theory._checks import takes_instance

__all__ = ["accepted_bound", "MAX_COUPLING"]

#: The solvers tried in turn (method, options); a solution counts when its constraints hold to ``1e-9``.
SOLVERS = (
    ("highs", {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}),
    ("highs", {}),
    ("highs-ds", {}),
    ("highs-ipm", {}),
)

#: Largest coupling (drafted trees × target sequences) that :func:`accepted_bound` solves.
MAX_COUPLING = 1 << 18


@takes_instance
def accepted_bound(inst, tree, draws: str = "iid", s: int = 0) -> np.ndarray:
    """The most drafts any lossless verifier of ``tree`` accepts in expectation in a round starting at position
    index ``s`` of ``inst``, after each token ``a`` (module docstring): shape ``(V,)``.

    The tree is cut to the tokens left (``T − s``), as a round's. Refused past :data:`MAX_COUPLING` coupling
    entries (``speculab.work_budget`` raises it).
    """
    tree = as_tree(tree)
    if draws not in DRAWS:
        raise ValueError(f"draws must be one of {DRAWS}; got {draws!r}")
    T, V = inst.T, inst.V
    s = as_positive_int(s, "s", minimum=0, maximum=T - 1)
    tree = tree.truncated(T - s)
    check_enumeration(tree, V, "the tree bound")
    x, w, origin = drafted_trees(inst.P, s, tree, draws)
    out = np.zeros(inst.V)
    for a in range(V):
        out[a] = _solve(inst, s, a, tree, x[origin == a], w[origin == a])
    return out


def _prefix_laws(inst, s: int, a: int, H: int) -> dict[tuple[int, ...], float]:
    """The target's probability of every prefix of length ``0..H`` after ``a`` at position index ``s``, where > 0."""
    laws, level = {(): 1.0}, {(): 1.0}
    for i in range(H):
        nxt = {}
        for u, pu in level.items():
            row = inst.Q[s + i, u[-1] if u else a]
            for y in np.flatnonzero(row > 0):
                nxt[u + (int(y),)] = pu * row[y]
        laws.update(nxt)
        level = nxt
    return laws


def _solve(inst, s: int, a: int, tree: Tree, trees: np.ndarray, weights: np.ndarray) -> float:
    """The linear program of the module docstring for one context ``a``.

    Two reductions keep it small and well scaled. A verifier sees only the set of root paths of a drafted tree, so
    trees with the same set are one variable block of their summed probability. And the lossless condition on
    ``V^H`` whole sequences is written prefix by prefix: with ``G(v)`` the probability that the output passes
    through ``v``, the output continued by ``q`` is ``q`` iff ``G(v y) = q(y | v) Σ_{y'} G(v y')`` at every prefix
    ``v`` shorter than ``H`` (by induction on ``v``: the continuation enters ``v y`` from an output that stopped at
    or before ``v`` with probability ``q(y | v)``) — constraints with coefficients in ``[−1, 1]``.
    """
    V, H = inst.V, tree.height
    q = _prefix_laws(inst, s, a, H)
    groups: dict[frozenset, float] = {}
    for tokens, w in zip(trees, weights / weights.sum()):
        paths, path = set(), {0: ()}
        for j in range(1, tree.size + 1):
            u = tree.parents[j - 1]
            if tokens[j] >= 0 and u in path:
                path[j] = path[u] + (int(tokens[j]),)
                paths.add(path[j])
        key = frozenset(paths)
        groups[key] = groups.get(key, 0.0) + w
    inner = [v for v in q if len(v) < H]  # the prefixes whose next-token masses are held to q
    row_of = {(v, y): len(groups) + r * V + y for r, v in enumerate(inner) for y in range(V)}
    rows, cols, vals, gain = [], [], [], []
    for g, (paths, _) in enumerate(groups.items()):
        for u in [(), *paths]:
            for out in [u] if len(u) == H else [u + (y,) for y in range(V)]:
                if out not in q:  # an output the target never produces: its mass must be 0
                    continue
                c = len(gain)
                gain.append(len(u))
                rows.append(g)
                cols.append(c)
                vals.append(1.0)
                for k in range(1, len(out) + 1):  # G(out[:k]) holds this output
                    v, y = out[: k - 1], out[k - 1]
                    for y2 in range(V):  # in C(v, y2): G(v y2) − q(y2 | v) Σ_{y'} G(v y') = 0
                        coef = (y2 == y) - q.get(v + (y2,), 0.0) / q[v]
                        if coef:
                            rows.append(row_of[v, y2])
                            cols.append(c)
                            vals.append(coef)
    n_rows, n_vars = len(groups) + len(inner) * V, len(gain)
    if len(vals) > limit(MAX_COUPLING):
        raise refuse(
            f"the tree bound's linear program ({n_vars} variables, {len(vals)} coefficients)",
            len(vals),
            MAX_COUPLING,
            "coefficients",
            "MAX_COUPLING",
            "use a smaller tree or vocabulary",
        )
    A = coo_matrix((vals, (rows, cols)), shape=(n_rows, n_vars)).tocsr()
    b = np.concatenate([np.fromiter(groups.values(), dtype=float), np.zeros(len(inner) * V)])
    for method, options in SOLVERS:
        res = linprog(-np.asarray(gain, dtype=float), A_eq=A, b_eq=b, bounds=(0, None), method=method, options=options)
        if res.status == 0 and np.abs(A @ res.x - b).max() <= 1e-9 and res.x.min() >= -1e-12:
            return -res.fun
    raise RuntimeError(f"the tree bound's linear program failed ({res.message})")
