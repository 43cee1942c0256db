r"""Greedy drafting verified against the target's law: the rule vLLM runs for its draft-model method by default.

vLLM's draft-model speculative decoding (``speculative_config={"method": "draft_model", ...}``) drafts, by default
(``draft_sample_method="greedy"``), the draft's most likely token ``x = argmax p`` and hands the rejection sampler no
draft probabilities; its rejection sampler then takes the draft probability of ``x`` to be 1
(``vllm/v1/sample/rejection_sampler.py``, the ``NO_DRAFT_PROBS`` path). The same path verifies the drafts of its
n-gram lookup, which are deterministic too. In [Yin]'s terms this is Algorithm 1 (SD) run on the law the drafts
really come from, the point mass :math:`\delta_x`:

.. math:: b(x) = \min(1, q(x)/1) = q(x), \qquad P = [q - \delta_x]_+ = q(\cdot \mid \cdot \ne x),

a draft is kept with the target's probability of it, and a refused slot outputs a token of ``q`` with the draft's
token removed. **Lossless**: ``P(y) = q(x)\,1\{y = x\} + (1 - q(x))\, q(y)\,1\{y \ne x\} / (1 - q(x)) = q(y)``.
It accepts ``q(argmax p)`` per slot where SD, drafting from ``p``, accepts ``Σ min(p, q) = 1 − TV(p, q)``; the
one can be above the other either way (a peaked draft whose mode the target shares gains, a flat one loses).

The draft's law enters only through its argmax (:meth:`GreedyDraft.draft_law`, the
:class:`~speculab.methods.capabilities.DraftLaw` capability): every engine drafts ``argmax p``, ties to the first
largest entry as ``torch.argmax`` and ``numpy.argmax`` break them. Exact counts are the lookahead counts of SD on
the instance whose draft kernels are those point masses (SPEC L). Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from speculab import kernels
from speculab.counts import Expected
from speculab.methods.base import RoundLaw, register
from speculab.methods.capabilities import drafting_instance
from speculab.methods.chain import Rule
from speculab.methods.sd import SD, sd_rule
from speculab.theory._checks import takes_instance

__all__ = ["GreedyDraft"]


@register
@dataclass(frozen=True)
class GreedyDraft(SD):
    """The draft's most likely token, kept with the target's probability of it (module docstring: vLLM's default
    draft-model rule, and its n-gram rule): :class:`~speculab.methods.SD` on the drafted point mass.

    Args:
      K: lookahead (drafts per round), as in :class:`~speculab.methods.SD`; vLLM's ``num_speculative_tokens``.

    Example:
      >>> from speculab.theory import MarkovInstance
      >>> inst = MarkovInstance.context_free([0.6, 0.4], [0.3, 0.7], T=10)
      >>> round(GreedyDraft().expected(inst).rejections, 12)   # every slot refused with 1 − q(argmax p) = 0.7
      7.0
      >>> round(SD().expected(inst).rejections, 12)   # SD refuses with TV(p, q) = 0.3
      3.0
    """

    name: ClassVar[str] = "greedy-draft"

    def draft_law(self, p):
        """The point mass at ``argmax p`` (array API): what greedy drafting draws from."""
        return kernels.argmax_mass(p)

    def rule(self, p, q) -> Rule:
        """SD's rule on the drafted point mass: ``b = q`` at the draft, ``P = q`` without it (the law handed in is
        mapped to its argmax first; a point mass is unchanged)."""
        return sd_rule(self.draft_law(p), q)

    def round_law(self, p, q, x, *, bonus: bool) -> RoundLaw:
        return super().round_law(self.draft_law(p), q, x, bonus=bonus)

    def compare_rows(self, ctx) -> list:
        """None of SD's own: its Thm 1 row reads the draft model's laws, not the drafted point masses (the paired
        rows of ``compare`` hold)."""
        return []

    @takes_instance
    def expected(self, inst) -> Expected:
        return super().expected(drafting_instance(self, inst))
