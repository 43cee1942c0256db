r"""Recursive rejection sampling on a token tree (SPEC TR): SpecInfer's verifier, with or without replacement.

At each node, from its draft law ``p`` and target law ``q``, the children ``x_1..x_k`` are tried in order with a
running target residual (``r_0 = q``):

.. math::
    a_i = \min\Big(1, \frac{r_{i-1}(x_i)}{p_{i-1}(x_i)}\Big),\qquad
    r_i = \frac{(r_{i-1} - p_{i-1})_+}{\sum_x (r_{i-1}(x) - p_{i-1}(x))_+},

where ``p_{i−1} = p`` for children drafted i.i.d. (with replacement: SpecInfer's multi-step speculative sampling,
Miao et al. 2024; [Yin] Algorithm 4 at every node), and ``p_{i−1}`` is ``p`` with ``x_1..x_{i−1}`` removed and
renormalised for children drafted without replacement (Jeon et al. 2024, "Recursive Speculative Decoding" — the
law child ``i`` was drawn from). Child ``i`` is accepted with probability ``a_i``: the round descends into its
subtree, where the same is done with that prefix's laws. If every child is refused, the round outputs
``y ~ r_k`` (a correction) and ends; an accepted leaf ends it with a bonus from ``q`` at the leaf. An absent child
(distinct draws past ``p``'s support) is skipped: refused with certainty, the residual unchanged.

Lossless: at a node, ``P(y) = Σ_i P(reach i) min(p_{i−1}, r_{i−1})(y) + P(all refused) r_k(y) = q(y)`` by the
telescoping of ``r_{i−1} − min(p_{i−1}, r_{i−1}) = (r_{i−1} − p_{i−1})_+`` — for i.i.d. children since the ``x_i`` are
independent of the residuals, without replacement since ``x_i ~ p_{i−1}`` given the earlier children. The tests
check it by enumerating every tree on small instances. With one child per node it is SD; at the root of ``M``
children each carrying a chain it is [Yin] Algorithm 4 (batch SD). Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from array_api_compat import array_namespace, device

from speculab import kernels
from speculab.methods.base import register
from speculab._budget import limit, power, refuse
from speculab.methods.tree import MAX_TREES, Tree, TreeKernel, TreeLaw, TreeMethod, drafted_trees, leaf_weights

__all__ = ["RRS", "rrs_round_law", "rrs_kernel", "star_acceptance"]


def rrs_round_law(tree: Tree, p, q, x, *, bonus: bool, draws: str) -> TreeLaw:
    """The law of a recursive-rejection round on ``tree`` (module docstring), node layout
    (:mod:`speculab.methods.tree`), any array library."""
    xp = array_namespace(p, q)
    N1 = tree.size + 1
    reach: list[Any] = [None] * N1
    end: list[Any] = [None] * N1
    corr: list[Any] = [None] * N1
    reach[0] = xp.ones(x.shape[:-1], dtype=p.dtype, device=device(p))
    for u in range(N1):
        if not tree.children[u]:
            end[u], corr[u] = reach[u], leaf_weights(q[..., u, :], tree, u, bonus)
            continue
        r, base, stay = q[..., u, :], p[..., u, :], xp.ones_like(reach[u])
        for c in tree.children[u]:
            present = x[..., c] >= 0
            token = xp.clip(x[..., c], min=0)
            a = xp.where(present, kernels.sd_acceptance(kernels.gather(base, token), kernels.gather(r, token)), 0.0)
            reach[c] = reach[u] * stay * a
            stay = stay * (1.0 - a)
            # no excess left: r = p up to round-off, so the child was accepted but for round-off; keep r there
            r = xp.where(present[..., None], kernels.normalize(kernels.excess(r, base), r), r)
            if draws == "distinct":
                vocab = xp.arange(base.shape[-1], device=device(base))
                removed = xp.where(vocab == token[..., None], 0.0, base)
                base = xp.where(present[..., None], kernels.normalize(removed, xp.zeros_like(base)), base)
        end[u], corr[u] = reach[u] * stay, r
    return TreeLaw(end=xp.stack(end, axis=-1), correction=xp.stack(corr, axis=-2))


def _child_tuples(p: np.ndarray, k: int, draws: str) -> tuple[np.ndarray, np.ndarray]:
    """Every tuple of ``k`` children drafted from ``p`` ``(V,)``: tokens ``(n, k)`` (``-1``: absent), probabilities
    (:func:`~speculab.methods.tree.drafted_trees` on a star, from one context)."""
    V = p.size
    x, w, origin = drafted_trees(np.broadcast_to(p, (1, V, V)), 0, Tree((0,) * k), draws)
    return x[origin == 0, 1:], w[origin == 0]


def star_acceptance(P, Q, k: int, draws: str) -> np.ndarray:
    """``A[a, i]``: the probability that RRS accepts the ``i``-th of ``k`` children drafted from ``P[a]`` and verified
    against ``Q[a]`` (draft and target rows ``(V, V)``), over the children's draws."""
    V = P.shape[-1]
    star = Tree((0,) * k)
    out = np.zeros((V, k))
    for a in range(V):
        x, w = _child_tuples(P[a], k, draws)
        n = len(x)
        layout = np.concatenate([np.full((n, 1), -1), x], axis=1)
        law = rrs_round_law(
            star,
            np.broadcast_to(P[a], (n, k + 1, V)),
            np.broadcast_to(Q[a], (n, k + 1, V)),
            layout,
            bonus=True,
            draws=draws,
        )
        out[a] = w @ law.end[:, 1:]
    return out


def rrs_kernel(inst, method: "RRS", s: int) -> TreeKernel:
    r"""The law of an RRS round starting at position index ``s``, by a recursion over the tree's nodes.

    At a node ``u`` of depth ``d`` whose prefix ends in ``c``, only its children's tokens are enumerated (``V^k``
    tuples for ``k`` children) and verified as the round law does at one node; a child accepted with token ``x``
    continues as the subtree below it from context ``x``, whose law is memoised per ``(node, x)``. The work is
    ``Σ_u V^{1 + k_u}`` per context instead of ``V^N`` for enumerating whole trees (:func:`tree_kernel`, which the
    tests hold it to).
    """
    T, V = inst.T, inst.V
    tree = method.round_tree(T - s)
    L = tree.height
    work = sum(power(V, 1 + len(c)) * (1 + len(c)) for c in tree.children)  # exact: no float overflow
    if work > limit(MAX_TREES):
        raise refuse(
            f"exact RRS counts (V^(1+k) children tuples per node, {tree.size + 1} nodes)",
            work,
            MAX_TREES,
            "children",
            "MAX_TREES",
            "use narrower nodes or a smaller vocabulary (the simulator has no such limit)",
        )
    memo: dict = {}

    def below(u: int, c: int):
        """``(correction (L+1, V), bonus (L+1, V), stop, drafted)`` of the subtree at ``u`` reached with token ``c``."""
        if (u, c) in memo:
            return memo[u, c]
        d, kids = tree.depth[u], tree.children[u]
        corr, bon, stop, drafted = np.zeros((L + 1, V)), np.zeros((L + 1, V)), 0.0, 0.0
        if not kids:
            if s + d < T:
                bon[d] = inst.Q[s + d, c]
            else:
                stop = 1.0
        else:
            p, q = inst.P[s + d, c], inst.Q[s + d, c]
            x, w = _child_tuples(p, len(kids), method.draws)
            n, star = len(x), Tree((0,) * len(kids))
            layout = np.concatenate([np.full((n, 1), -1), x], axis=1)
            law = rrs_round_law(
                star,
                np.broadcast_to(p, (n, star.size + 1, V)),
                np.broadcast_to(q, (n, star.size + 1, V)),
                layout,
                bonus=True,
                draws=method.draws,
            )
            refused = w @ law.end[:, 0]
            residual = (w * law.end[:, 0]) @ kernels.normalize(law.correction[:, 0], np.zeros(V))
            corr[d] += residual if refused > 0 else 0.0
            for i, child in enumerate(kids):
                present = x[:, i] >= 0
                drafted += w @ present
                for token in np.unique(x[present, i]):
                    rows = x[:, i] == token
                    c_corr, c_bon, c_stop, c_drafted = below(child, int(token))
                    drafted += (w[rows].sum()) * c_drafted
                    mass = w[rows] @ law.end[rows, i + 1]  # P(child i accepted with this token | u reached)
                    corr += mass * c_corr
                    bon += mass * c_bon
                    stop += mass * c_stop
        memo[u, c] = (corr, bon, stop, drafted)
        return memo[u, c]

    out = TreeKernel(np.zeros((V, L + 1, V)), np.zeros((V, L + 1, V)), np.zeros(V), np.zeros(V))
    for a in range(V):
        out.correction[a], out.bonus[a], out.stop[a], out.drafted[a] = below(0, a)
    return out


@register
@dataclass(frozen=True)
class RRS(TreeMethod):
    """Recursive rejection sampling on a token tree (SpecInfer; without replacement, Jeon et al. 2024).

    Args: ``tree`` and ``draws``, as every :class:`~speculab.methods.tree.TreeMethod`.

    Example:
      >>> from speculab.theory import MarkovInstance
      >>> from speculab.methods import SD
      >>> inst = MarkovInstance.random(6, 3, 0)
      >>> chain = RRS((1, 1)).expected(inst).oracle_calls
      >>> bool(abs(chain - SD(K=2).expected(inst).oracle_calls) < 1e-12)   # one child per node: SD
      True
      >>> RRS((3, 1)).expected(inst).oracle_calls < chain                  # three candidates at the root
      True
    """

    name: ClassVar[str] = "rrs"
    exact_by: ClassVar[str] = "a recursion over the tree's nodes"

    def round_kernel(self, inst, s: int) -> TreeKernel:
        """By the recursion (:func:`rrs_kernel`), which evaluates RRS's own law at each node; a subclass with a
        round law of its own gets the enumeration of whole trees through it."""
        if type(self).round_law is not RRS.round_law:
            return super().round_kernel(inst, s)
        return rrs_kernel(inst, self, s)

    def round_law(self, p, q, x, *, bonus: bool) -> TreeLaw:
        return rrs_round_law(self.layout_tree(x), p, q, x, bonus=bonus, draws=self.draws)
