"""[Yin] Algorithm 2 with any acceptance rule ``b`` and rejection distribution ``P``.

``RejectionDecoding(b, P=None, K=None)``: ``b`` and ``P`` are either ``(T, V, V)``
arrays tied to a Markov instance or functions of the draft and target laws
(``b(p, q)``, ``P(p, q, b)``), which also run on real models when written with
array-API operations. ``P=None`` is the unique unbiased choice of [Yin] Thm 2,
``(q − b p)/Σ(1 − b)p``, which requires ``b ≤ min(1, q/p)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from speculab import kernels
from speculab.methods.base import check_lookahead, param, register
from speculab.methods.chain import ChainMethod, Rule
from speculab.theory.rejections import acceptance_array, rejection_array

__all__ = ["RejectionDecoding"]


@register
@dataclass(frozen=True, eq=False)
class RejectionDecoding(ChainMethod):
    """[Yin] Algorithm 2 with a user-supplied acceptance ``b`` and rejection law ``P``.

    Args:
      b: ``(T, V, V)`` array of acceptance probabilities ``b[n-1, a, x]``, or a
        function ``b(p, q)`` applied to draft and target laws of shape ``(..., V)``.
      P: rejection distributions in the same forms (a function receives
        ``(p, q, b)``), or ``None`` for the unique unbiased choice
        ``(q − b p) / Σ (1 − b) p`` ([Yin] Thm 2), which requires ``b ≤ min(1, q/p)``.
      K: lookahead, as in :class:`~speculab.methods.SD`.

    Example:
      >>> from speculab.theory import MarkovInstance, sd_acceptance
      >>> inst = MarkovInstance.context_free([0.5, 0.5], [0.8, 0.2], T=10)
      >>> half = RejectionDecoding(b=lambda p, q: 0.5 * sd_acceptance(p, q))
      >>> round(half.expected(inst).rejections, 12)   # Σ(1 − b)p = 0.65 per token ([Yin] Thm 2)
      6.5
    """

    name: ClassVar[str] = "rejection"
    b: Any = param(help="acceptance rule: (T, V, V) array or function b(p, q)", cli=False)
    P: Any = param(None, help="rejection distribution: array, function P(p, q, b), or None (unbiased)", cli=False)
    K: int | None = param(None, help="lookahead: drafts per round (default ∞)", type=int)

    def __post_init__(self):
        check_lookahead(self.K)
        if not callable(self.b):
            object.__setattr__(self, "b", np.asarray(self.b, dtype=np.float64))
        if self.P is not None and not callable(self.P):
            object.__setattr__(self, "P", np.asarray(self.P, dtype=np.float64))

    @property
    def unbiased(self) -> bool:
        """With ``P=None`` the rule is unbiased by construction ([Yin] Thm 2; ``b`` is checked)."""
        return self.P is None

    def rule(self, p, q) -> Rule:
        b = self.b(p, q) if callable(self.b) else self._tied(self.b, p, "b")
        if self.P is None:
            P = kernels.optimal_rejection(p, q, b)  # = (q − b p)/Σ(1 − b)p when b ≤ min(1, q/p)
        else:
            P = self.P(p, q, b) if callable(self.P) else self._tied(self.P, p, "P")
        return Rule(b, P)

    @staticmethod
    def _tied(arr: np.ndarray, p, name: str):
        if getattr(p, "shape", None) != arr.shape:
            raise ValueError(f"{name} is a {arr.shape} array tied to one Markov instance; "
                             f"give a function {name}(p, q{', b' if name == 'P' else ''}) to use it elsewhere")
        return arr

    def instance_rule(self, inst) -> Rule:
        """The rule on ``inst``, validated: ``b`` in ``[0, 1]``, ``P`` rows distributions where used,
        unbiasedness for ``P=None``."""
        b = acceptance_array(inst, self.b)
        return Rule(b, rejection_array(inst, b, self.P))
