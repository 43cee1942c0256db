r"""Typical acceptance (Medusa, Cai et al. 2024, §2.3.1), a lossy verifier that engines ship: accept a drafted
``x`` iff ``q(x) > min(ε, δ·exp(−H(q)))``.

The threshold is small where the target is unsure (high entropy ``H(q)``, natural log) and at most ``ε``. The
decision reads only the target's probability of the drafted token, never the draft's, so the output law is
biased wherever ``p ≠ q`` on the accepted tokens: as [Yin] Algorithm 2 the rule is ``b(x) = 1{q(x) > τ(q)}`` and a
refused position outputs a token from a correction law ``P``, giving the one-step law

.. math:: P_A(y) = b(y)\, p(y) + P(y) \sum_x (1 - b(x))\, p(x).

The papers and engines differ on ``P``, so it is a parameter:

* ``"q"``: a fresh draw from the target (a refused position is decoded as without a draft);
* ``"argmax"``: the target's most likely token (greedy recovery, the choice of vLLM's typical-acceptance sampler);
* ``"typical"``: a draw from ``q`` restricted to ``{y: q(y) ≥ τ(q)}`` (Medusa's reference code samples its next
  token so); where no token reaches ``τ`` (possible only when ``δ > 1``) from ``q``.

A whole accepted block is followed by a bonus token from ``q``. Where no drafted token can pass (``τ(q) ≥ max q``)
the position outputs ``P``: with ``"q"`` that is the target's own law, so a threshold above every probability is
lossless, and nothing else is in general. The exact per-token bias ``TV(P_A, q)`` is
:func:`typical_law`'s distance to ``q``; ``certify`` reports its worst case over a battery of pairs.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import ClassVar

from array_api_compat import array_namespace

from speculab import kernels
from speculab.methods.base import check_lookahead, param, register
from speculab.methods.chain import ChainMethod, Rule, one_step_law

__all__ = ["Typical", "CORRECTIONS", "typical_threshold", "typical_rule", "typical_law"]

#: What a refused position outputs (module docstring).
CORRECTIONS = ("q", "argmax", "typical")


def _check_nonnegative(x, name: str) -> float:
    ok = isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
    if not ok:
        raise ValueError(f"{name} must be a finite number >= 0; got {x!r}")
    return float(x)


def typical_threshold(q, eps: float, delta: float):
    """``τ(q) = min(ε, δ·exp(−H(q)))`` per law, shape ``(...)`` from ``(..., V)`` (array API; ``0 log 0 = 0``)."""
    eps, delta = _check_nonnegative(eps, "eps"), _check_nonnegative(delta, "delta")
    xp = array_namespace(q)
    entropy = -xp.sum(q * xp.log(xp.where(q > 0, q, xp.ones_like(q))), axis=-1)
    return xp.minimum(xp.full_like(entropy, eps), delta * xp.exp(-entropy))


def typical_rule(p, q, eps: float, delta: float, correction: str = "q") -> Rule:
    """The rule ``(b, P)`` of typical acceptance at laws ``p``, ``q`` of shape ``(..., V)`` (array API)."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}; got {correction!r}")
    xp = array_namespace(p, q)
    tau = typical_threshold(q, eps, delta)[..., None]
    b = xp.astype(q > tau, q.dtype)
    if correction == "q":
        R = q
    elif correction == "argmax":
        R = kernels.argmax_mass(q)
    else:
        kept = xp.where(q >= tau, q, xp.zeros_like(q))
        mass = xp.sum(kept, axis=-1, keepdims=True)
        R = xp.where(mass > 0, kept / xp.where(mass > 0, mass, xp.ones_like(mass)), q)
    return Rule(xp.broadcast_to(b, p.shape), xp.broadcast_to(R, p.shape))


def typical_law(p, q, eps: float, delta: float, correction: str = "q"):
    """The one-step output law ``P_A = b p + P Σ (1 − b) p`` (module docstring), shape ``(..., V)`` (array API)."""
    return one_step_law(typical_rule(p, q, eps, delta, correction), p)


@register
@dataclass(frozen=True)
class Typical(ChainMethod):
    """Typical acceptance (Medusa, Cai et al. 2024): accept a drafted ``x`` iff ``q(x) > min(ε, δ·exp(−H(q)))``.

    Args:
      eps: the threshold's cap ``ε >= 0`` (Medusa's ``posterior_threshold``).
      delta: the entropy factor ``δ >= 0`` (Medusa's ``posterior_alpha``).
      correction: what a refused position outputs: ``"q"``, ``"argmax"`` or ``"typical"`` (module docstring).
      K: lookahead, as in :class:`~speculab.methods.SD`.

    Example:
      >>> import numpy as np
      >>> p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.3, 0.5])
      >>> b, P = Typical(0.25, 1.0).rule(p, q)
      >>> b.tolist()   # τ = min(0.25, exp(−H(q))) = 0.25: only q(x) > 0.25 passes
      [0.0, 1.0, 1.0]
      >>> typical_law(p, q, 0.25, 1.0).round(3).tolist()   # 0.6 of the draft's mass refused, then from q
      [0.12, 0.48, 0.4]
    """

    name: ClassVar[str] = "typical"
    eps: float = param(help="threshold cap ε >= 0 (Medusa's posterior_threshold)", type=float)
    delta: float = param(help="entropy factor δ >= 0 (Medusa's posterior_alpha)", type=float)
    correction: str = param("q", help="a refused position's token: q, argmax or typical", type=str, choices=CORRECTIONS)
    K: int | None = param(None, help="lookahead: drafts per round (default ∞)", type=int)

    def __post_init__(self):
        _check_nonnegative(self.eps, "eps")
        _check_nonnegative(self.delta, "delta")
        if self.correction not in CORRECTIONS:
            raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}; got {self.correction!r}")
        check_lookahead(self.K)

    @property
    def unbiased(self) -> bool:
        return False  # lossless only on pairs where no draft passes (module docstring): not a property of (ε, δ)

    def rule(self, p, q) -> Rule:
        return typical_rule(p, q, self.eps, self.delta, self.correction)
