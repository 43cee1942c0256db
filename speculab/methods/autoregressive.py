"""Autoregressive decoding, [Yin] Algorithm 3: every token sampled from the target.

Viewed as Algorithm 2 with ``b ≡ 0`` and ``P = q``, every token is a rejection:
``N_rej = T``, one oracle call per token, acceleration 1. It is the reference
every speculative method is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from array_api_compat import array_namespace, device

from speculab.counts import Expected
from speculab.methods.base import Method, RoundLaw, register
from speculab.theory._checks import takes_instance

__all__ = ["Autoregressive"]


@register
@dataclass(frozen=True)
class Autoregressive(Method):
    """[Yin] Algorithm 3: sample every token from the target ``q``, one oracle call each.

    Example:
      >>> from speculab.theory import MarkovInstance
      >>> Autoregressive().expected(MarkovInstance.random(T=5, V=3, key=0)).rejections
      5.0
    """

    name: ClassVar[str] = "ar"
    drafting: ClassVar[bool] = False

    @takes_instance
    def expected(self, inst) -> Expected:
        T = float(inst.T)
        return Expected(
            rejections=T,
            oracle_calls=T,
            draft_calls=0.0,
            accepted=0.0,
            discarded=0.0,
            bonus=0.0,
            tokens=T,
            rejections_per_position=np.ones(inst.T),
            source="[Yin] Alg. 3: every token a target call",
        )

    def draft_length(self, remaining: int) -> int:
        return 0

    def round_law(self, p, q, x, *, bonus: bool) -> RoundLaw:
        """A round without drafts: the one output token is drawn from ``q_1`` (every token is a "rejection")."""
        xp = array_namespace(q)
        one = xp.ones(q.shape[:-1], dtype=q.dtype, device=device(q))  # (..., 1, 1): one row, one slot (L = 0)
        return RoundLaw(outcome=one, correction=q, reject_prob=one, accept_prob=one[..., :0])
