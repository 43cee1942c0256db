r"""Traversal verification of a token tree (Weng, Hu, Chen, Liu, Mei, Qiu, Tian, Shi, NeurIPS 2025,
arXiv 2505.12398, Algorithm 3; SPEC TR): leaf to root, a whole path accepted at once.

The paper writes ``𝓜_b`` for the target and ``𝓜_s`` for the draft; here ``q`` = target, ``p`` = draft. Every node
``v`` carries a current target law ``q_v``, a current draft law ``p_v`` (at first the models' laws at ``v``'s
prefix) and a **sequence-level acceptance rate** ``a(v)``, defined top-down from ``a(root) = 1``:

.. math:: a(c) = \min\Big(1,\ a(v)\, \frac{q_v(t_c)}{p_v(t_c)}\Big)\qquad (t_c \text{ the token of } c).

The round visits the nodes in post-order (from the root, step to the first remaining child until a node without
remaining children is reached: the first leaf), testing each with a fresh uniform:

* **accept** ``u`` (probability ``a(u)``): output the path root → ``u`` and one token from ``u``'s current ``q_u`` —
  the target's law at an original leaf (a bonus), the residual left by its rejected children otherwise (a
  correction); the round ends;
* **reject** ``u``: delete it, and at its parent ``v``, with ``S = Σ_x (a(v) q_v(x) − p_v(x))_+``,

  .. math:: q_v \leftarrow \frac{(a(v)\, q_v - p_v)_+}{S},\qquad a(v) \leftarrow \frac{S}{S + 1 - a(v)},

  and ``p_v`` loses ``t_u`` (renormalised) when siblings are drafted without replacement — unchanged for i.i.d.
  siblings, the law the next sibling was drawn from (the paper shows the without-replacement case, the one its
  experiments use; with replacement is our reading of the same argument, and the tests prove it lossless by
  enumeration). The rates of the nodes below ``v`` that remain are recomputed top-down from the new ``a(v)``.

The root keeps ``a = 1`` (``S / (S + 1 − 1)``), so a round whose every drafted node is rejected outputs one token
from the root's residual: at the root the updates are recursive rejection sampling. On a chain the visits test
``w_K, h_{K−1}, …, h_1`` of block verification (Sun et al. 2025) with its residuals: the same law as
:func:`~speculab.methods.block.block_round_law` (a test checks it exactly); the paper's Theorem 3.4 states the
equality of expected accepted lengths. A rejected node's subtree has already been visited (post-order), so a node
is tested only when every child of it is gone, and since the round stops at its first acceptance, the state at
each visit is a function of the drafted tree alone: ``P(end = u_k) = a_k Π_{i<k} (1 − a_i)`` over the visits
``u_1, u_2, …`` in order, which is what :func:`traversal_round_law` evaluates. Lossless only averaged over the
drafted tree (the paper's Lemma A.2), not tree by tree; the tests enumerate both.

The formulas of the paper's displays (1)–(3) are not legible in the text we read; they are restated here from its
worked example (Section 3.2: ``a(X_3) = min(0.5 · 0.4 / 0.3, 1)``, then ``S = 0.05`` and ``a(X_1) = 1/11``), its
"pseudo-child" argument and its appendix, and checked by the enumeration tests (lossless; the chain is block
verification; the worked example's numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from array_api_compat import array_namespace, device

from speculab import kernels
from speculab.methods.base import register
from speculab.methods.tree import Tree, TreeLaw, TreeMethod, leaf_weights

__all__ = ["Traversal", "traversal_round_law"]


def traversal_round_law(tree: Tree, p, q, x, *, bonus: bool, draws: str) -> TreeLaw:
    """The law of a traversal-verification round on ``tree`` (module docstring), node layout
    (:mod:`speculab.methods.tree`), any array library."""
    xp = array_namespace(p, q)
    N1 = tree.size + 1
    ones = xp.ones(x.shape[:-1], dtype=p.dtype, device=device(p))
    vocab = xp.arange(p.shape[-1], device=device(p))
    end: list[Any] = [None] * N1
    corr: list[Any] = [None] * N1
    state = {"alive": ones}  # P(every node visited so far was rejected)
    rate: list[Any] = [None] * N1
    q_now: list[Any] = [None] * N1
    p_now: list[Any] = [None] * N1

    def enter(c: int, v: int, present):
        """The first visit below ``c``: its rate from its parent's current state."""
        token = xp.clip(x[..., c], min=0)
        ratio = kernels.sd_acceptance(kernels.gather(p_now[v], token), rate[v] * kernels.gather(q_now[v], token))
        rate[c] = xp.where(present, ratio, 0.0)
        q_now[c], p_now[c] = q[..., c, :], p[..., c, :]

    def test(u: int, v: int, present):
        """Visit ``u`` (every child of it gone): accept it, or reject it and update its parent ``v``."""
        end[u] = state["alive"] * rate[u]
        state["alive"] = state["alive"] * (1.0 - rate[u])
        excess = kernels.excess(rate[v][..., None] * q_now[v], p_now[v])
        S = xp.sum(excess, axis=-1)
        den = S + (1.0 - rate[v])
        q_new = kernels.normalize(excess, q_now[v])  # no excess: refused only by round-off; q_v kept there
        a_new = xp.where(den > 0, S / xp.where(den > 0, den, 1.0), 0.0)
        q_now[v] = xp.where(present[..., None], q_new, q_now[v])
        rate[v] = xp.where(present, a_new, rate[v])
        if draws == "distinct":
            token = xp.clip(x[..., u], min=0)
            removed = xp.where(vocab == token[..., None], 0.0, p_now[v])
            p_now[v] = xp.where(present[..., None], kernels.normalize(removed, xp.zeros_like(removed)), p_now[v])

    def subtree(c: int, v: int):
        present = x[..., c] >= 0
        enter(c, v, present)
        for g in tree.children[c]:
            subtree(g, c)
        corr[c] = leaf_weights(q[..., c, :], tree, c, bonus) if not tree.children[c] else q_now[c]
        test(c, v, present)

    rate[0], q_now[0], p_now[0] = ones, q[..., 0, :], p[..., 0, :]
    for c in tree.children[0]:
        subtree(c, 0)
    end[0], corr[0] = state["alive"], q_now[0]  # the root: accepted with rate 1, a token from its residual
    return TreeLaw(end=xp.stack(end, axis=-1), correction=xp.stack(corr, axis=-2))


@register
@dataclass(frozen=True)
class Traversal(TreeMethod):
    """Traversal verification of a token tree (Weng et al., NeurIPS 2025): leaf to root, paths accepted whole.

    Args: ``tree`` and ``draws`` (``"distinct"`` in the paper's experiments), as every
    :class:`~speculab.methods.tree.TreeMethod`.

    Example:
      >>> from speculab.theory import MarkovInstance
      >>> from speculab.methods import BlockVerification
      >>> inst = MarkovInstance.random(6, 3, 0)
      >>> chain = Traversal((1, 1, 1)).expected(inst).oracle_calls
      >>> bool(abs(chain - BlockVerification(3).expected(inst).oracle_calls) < 1e-12)   # a chain: block verification
      True
    """

    name: ClassVar[str] = "traversal"

    def round_law(self, p, q, x, *, bonus: bool) -> TreeLaw:
        return traversal_round_law(self.layout_tree(x), p, q, x, bonus=bonus, draws=self.draws)
