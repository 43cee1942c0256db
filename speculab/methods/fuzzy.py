"""Fuzzy speculative decoding ([FSD] §4): accept a position's draft iff ``Div(q, p) < θ`` there.

The decision is a property of the two distributions at the position, not of
the sampled token; a refused position outputs a token from ``q`` (not the
residual). As [Yin] Algorithm 2: ``b = 1{Div(q, p) < θ}`` (constant in the
token) and ``P = q``. The theory (output laws, the paper's sequence-level bound)
is in :mod:`speculab.theory.fuzzy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from array_api_compat import array_namespace

from speculab.methods.base import check_lookahead, param, register
from speculab.methods.chain import ChainMethod, Rule
from speculab.theory.fuzzy import DIVERGENCES, check_div, check_theta

__all__ = ["Fuzzy"]


@register
@dataclass(frozen=True)
class Fuzzy(ChainMethod):
    """Fuzzy speculative decoding ([FSD] §4).

    Accept the drafted token at a position iff ``Div(q, p) < θ`` there (a property
    of the two distributions, not of the token); otherwise output a token from ``q``.

    Args:
      theta: threshold ``θ >= 0`` (``θ = 0``: every token from ``q``; ``θ = inf``: every draft
        accepted, the output is the draft's own law).
      div: ``"js"`` (natural log, the paper's default), ``"kl"`` = KL(q‖p),
        ``"kl_reverse"`` = KL(p‖q), or ``"tv"``.
      K: lookahead, as in :class:`~speculab.methods.SD`.
    """

    name: ClassVar[str] = "fuzzy"
    theta: float = param(help="threshold θ >= 0 on Div(q, p)", type=float)
    div: str = param(
        "js", help="divergence: js, kl (= KL(q‖p)), kl_reverse (= KL(p‖q)) or tv", type=str, choices=tuple(DIVERGENCES)
    )
    K: int | None = param(None, help="lookahead: drafts per round (default ∞)", type=int)

    def __post_init__(self):
        check_theta(self.theta)
        check_div(self.div)
        check_lookahead(self.K)

    @property
    def unbiased(self) -> bool:
        return self.theta == 0  # nothing accepted: every token from q

    def rule(self, p, q) -> Rule:
        xp = array_namespace(p, q)
        accept = DIVERGENCES[self.div](p, q) < self.theta  # (...): one decision per position
        b = xp.broadcast_to(xp.astype(accept, p.dtype)[..., None], p.shape)
        return Rule(b, q)
