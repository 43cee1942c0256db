"""[Yin] Algorithm 2 with any acceptance rule ``b`` and rejection distribution ``P``.

``RejectionDecoding(b, rejection=None, K=None)``: ``b`` and the rejection law ``rejection`` (``P``) are either
``(T, V, V)`` arrays tied to a Markov instance or functions of the draft and target laws (``b(p, q)``,
``rejection(p, q, b)``), which also run on real models when written with array-API operations. ``rejection=None`` is
the unique unbiased choice of [Yin] Thm 2, ``(q − b p)/Σ(1 − b)p``, which requires ``b ≤ min(1, q/p)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from array_api_compat import array_namespace

from speculab import kernels
from speculab._validate import as_float_array
from speculab.methods.base import check_lookahead, param, register
from speculab.methods.chain import ChainMethod, Rule
from speculab.theory.rejections import acceptance_array, rejection_array

__all__ = ["RejectionDecoding"]


def _traced(x) -> bool:
    """Whether ``x`` is being traced (``jax.jit``): its values are unknown and cannot be checked here."""
    return type(x).__name__.endswith("Tracer")


def _checked(out, p, what: str):
    """The namespace of a user function's output, after checking its shape against ``p``; ``None`` when traced."""
    if getattr(out, "shape", None) != p.shape:
        raise ValueError(
            f"{what} must return an array of the shape of p, {tuple(p.shape)}; "
            f"got {getattr(out, 'shape', type(out).__name__)}"
        )
    return None if _traced(out) else array_namespace(out, p)


def _check_acceptance(b, p, q, *, unbiased: bool) -> None:
    xp = _checked(b, p, "b(p, q)")
    if xp is None:
        return
    if not bool(xp.all((b >= 0) & (b <= 1))):
        raise ValueError("b(p, q) must return acceptance probabilities in [0, 1] (NaN refused)")
    if unbiased and bool(xp.any(b * p - q > 16 * xp.finfo(p.dtype).eps)):
        raise ValueError(
            "b must satisfy b <= min(1, q/p) for an unbiased algorithm ([Yin] Thm 2, rejection=None); "
            "give a rejection law for a biased rule"
        )


def _check_rejection(rejection, p) -> None:
    xp = _checked(rejection, p, "rejection(p, q, b)")
    if xp is not None and not bool(xp.all((rejection >= 0) & (rejection < float("inf")))):
        raise ValueError("rejection(p, q, b) must return non-negative finite weights (NaN refused)")


@register
@dataclass(frozen=True, eq=False)
class RejectionDecoding(ChainMethod):
    """[Yin] Algorithm 2 with a user-supplied acceptance ``b`` and rejection law ``P``.

    Args:
      b: ``(T, V, V)`` array of acceptance probabilities ``b[n-1, a, x]``, or a
        function ``b(p, q)`` applied to draft and target laws of shape ``(..., V)``.
      rejection: rejection distributions ``P`` in the same forms (a function receives
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
    rejection: Any = param(
        None, help="rejection distribution P: array, function rejection(p, q, b), or None (unbiased)", cli=False
    )
    K: int | None = param(None, help="lookahead: drafts per round (default ∞)", type=int)

    def __post_init__(self):
        check_lookahead(self.K)
        if not callable(self.b):
            object.__setattr__(self, "b", as_float_array(self.b, "b"))
        if self.rejection is not None and not callable(self.rejection):
            object.__setattr__(self, "rejection", as_float_array(self.rejection, "rejection"))

    @property
    def unbiased(self) -> bool:
        """With ``rejection=None`` the rule is unbiased by construction ([Yin] Thm 2; ``b`` is checked)."""
        return self.rejection is None

    def rule(self, p, q) -> Rule:
        """The user's ``b`` and ``P`` at these laws, checked (on concrete arrays: numpy, torch, eager JAX)."""
        b = self.b(p, q) if callable(self.b) else self._tied(self.b, p, "b")
        _check_acceptance(b, p, q, unbiased=self.rejection is None)
        if self.rejection is None:
            P = kernels.optimal_rejection(p, q, b)  # = (q − b p)/Σ(1 − b)p when b ≤ min(1, q/p)
        else:
            P = self.rejection(p, q, b) if callable(self.rejection) else self._tied(self.rejection, p, "rejection")
            _check_rejection(P, p)
        return Rule(b, P)

    @staticmethod
    def _tied(arr: np.ndarray, p, name: str):
        if getattr(p, "shape", None) != arr.shape:
            raise ValueError(
                f"{name} is a {arr.shape} array tied to one Markov instance; "
                f"give a function {name}(p, q{', b' if name == 'rejection' else ''}) to use it elsewhere"
            )
        return arr

    def instance_rule(self, inst) -> Rule:
        """The rule on ``inst``, validated: ``b`` in ``[0, 1]``, ``P`` rows distributions where used,
        unbiasedness for ``rejection=None``."""
        b = acceptance_array(inst, self.b)
        return Rule(b, rejection_array(inst, b, self.rejection))
