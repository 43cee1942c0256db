"""Decoding methods as small frozen dataclasses (DESIGN "One vocabulary").

Every method is an instance of [Yin] Algorithm 2 — a draft structure, an
acceptance rule ``b`` and a rejection distribution ``P`` — described by data.
The same method object is understood by the theory, the simulators and (later)
the real-model backend. Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from speculab._validate import as_positive_int

__all__ = ["Autoregressive", "SD", "BatchSD", "RejectionDecoding", "Method"]


def _check_K(K) -> None:
    if K is not None:
        as_positive_int(K, "K")


@dataclass(frozen=True)
class Autoregressive:
    """[Yin] Algorithm 3: sample every token from the target ``q``, one oracle call each.

    Viewed as Algorithm 2 with ``b ≡ 0`` and ``P = q``, every token is a
    rejection: ``N_rej = T`` and the acceleration is 1.
    """


@dataclass(frozen=True)
class SD:
    """Speculative decoding, [Yin] Algorithm 1: ``b = min(1, q/p)``, ``P = [q − p]_+``.

    Args:
      K: lookahead (drafts per round). ``None`` means ``K = ∞`` (draft to the
        end, as in [Yin]'s theory). With finite ``K``, when all ``K`` drafts are
        accepted a bonus token is drawn from the target's next distribution,
        which the same oracle call already computed.
    """

    K: int | None = None

    def __post_init__(self):
        _check_K(self.K)


@dataclass(frozen=True)
class BatchSD:
    """Batch speculative decoding with ``M`` drafts, [Yin] Algorithm 4 (SPEC §1, corrected).

    Each round draws ``M`` independent draft continuations from the round's
    first position (the root). The root token of draft ``m`` is checked against
    the recursive residual ``q^m`` (``q^1 = q``, ``q^{m+1} = [q^m − p]_+``); the
    first accepted draft is followed alone with ordinary SD checks. A root
    rejection (all ``M`` refused) outputs ``x ~ q^{M+1}``. Unbiased; one oracle
    call per round. ``M = 1`` is :class:`SD`.

    Args:
      M: number of drafts (>= 1).
      K: draft length per round (``None`` = to the end, as in [Yin]); with finite
        ``K`` an all-accepted draft earns a bonus token as in :class:`SD`.
    """

    M: int
    K: int | None = None

    def __post_init__(self):
        as_positive_int(self.M, "M")
        _check_K(self.K)


@dataclass(frozen=True, eq=False)
class RejectionDecoding:
    """[Yin] Algorithm 2 with a user-supplied acceptance ``b`` and rejection law ``P``.

    Args:
      b: ``(T, V, V)`` array of acceptance probabilities ``b[n-1, a, x]``, or a
        function ``b(p, q)`` applied to the instance's ``(T, V, V)`` arrays.
      P: rejection distributions in the same forms (a function receives
        ``(p, q, b)``), or ``None`` for the unique unbiased choice
        ``(q − b p) / Σ (1 − b) p`` ([Yin] Thm 2), which requires ``b ≤ min(1, q/p)``.
      K: lookahead, as in :class:`SD`.
    """

    b: Any
    P: Any = None
    K: int | None = None

    def __post_init__(self):
        _check_K(self.K)
        if not callable(self.b):
            object.__setattr__(self, "b", np.asarray(self.b, dtype=np.float64))


Method = Autoregressive | SD | BatchSD | RejectionDecoding
