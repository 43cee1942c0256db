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

from array_api_compat import array_namespace, device

from speculab import kernels
from speculab.methods.base import register
from speculab.methods.tree import Tree, TreeLaw, TreeMethod, leaf_weights

__all__ = ["RRS", "rrs_round_law"]


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
            r = xp.where(present[..., None], kernels.residual(r, base), r)
            if draws == "distinct":
                vocab = xp.arange(base.shape[-1], device=device(base))
                removed = xp.where(vocab == token[..., None], 0.0, base)
                base = xp.where(present[..., None], kernels.normalize(removed, xp.zeros_like(base)), base)
        end[u], corr[u] = reach[u] * stay, r
    return TreeLaw(end=xp.stack(end, axis=-1), correction=xp.stack(corr, axis=-2))


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

    def round_law(self, p, q, x, *, bonus: bool) -> TreeLaw:
        return rrs_round_law(self.layout_tree(x), p, q, x, bonus=bonus, draws=self.draws)
