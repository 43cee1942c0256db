"""Decoding methods as small frozen dataclasses (DESIGN "One vocabulary").

Every method is an instance of [Yin] Algorithm 2 — a draft structure, an
acceptance rule ``b`` and a rejection distribution ``P`` — described by data.
The same method object is understood by the theory, the simulators and (later)
the real-model backend. Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Callable

import numpy as np

from speculab._validate import as_positive_int

__all__ = [
    "Autoregressive",
    "SD",
    "BatchSD",
    "RejectionDecoding",
    "Biased",
    "Sprinter",
    "SpecDecPP",
    "Fuzzy",
    "Method",
]


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


def _check_probability(x, name: str, *, open_low: bool = False, open_high: bool = False) -> None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    ok = ok and (x > 0 if open_low else x >= 0) and (x < 1 if open_high else x <= 1)
    if not ok:
        lo, hi = "(" if open_low else "[", ")" if open_high else "]"
        raise ValueError(f"{name} must be a number in {lo}0, 1{hi}; got {x!r}")


@dataclass(frozen=True)
class Biased:
    """Biased (over-accepting) decoding, [Yin] §4.2 and App. G.

    Acceptance ``b = min(1, (q + ε)/p)``; after a rejection the token is drawn from
    ``P* = [A]_+`` (``rejection="opt"``, Decoding-OPT, [Yin] Thm 4 — for this ``b``
    it is the residual ``[q − p]_+``) or from ``q`` itself (``"uno"``, Decoding-UNO).

    Args:
      eps: over-acceptance ``ε >= 0`` (``ε = 0`` with ``"opt"`` is SD).
      rejection: ``"opt"`` or ``"uno"``.
      K: lookahead, as in :class:`SD`.
    """

    eps: float
    rejection: str = "opt"
    K: int | None = None

    def __post_init__(self):
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not (math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"eps must be a finite number >= 0; got {self.eps!r}")
        if self.rejection not in ("opt", "uno"):
            raise ValueError(f"rejection must be 'opt' or 'uno'; got {self.rejection!r}")
        _check_K(self.K)


@dataclass(frozen=True, eq=False)
class Sprinter:
    """SPRINTER ([SPR] Alg. 1/2; SPEC §1 — [SPR] writes ``p`` for the target, translated here).

    Draft ``x ~ p``; a verifier says "acceptable" (ideal: ``p(x) <= q(x)``) or not.
    Acceptable: keep ``x`` without a target call and draft on. Not acceptable: one
    target call on that token — accept with ``min(1, q/p)``, else draw ``[q − p]_+``.

    Either the i.i.d. noisy verifier of the theory, ``Sprinter(eta_tp, eta_fp)``
    (``η_TP = P(says acceptable | acceptable)``, ``η_FP = P(says acceptable | not)``),
    or ``Sprinter(verifier=f)`` with ``f(t, prev, x) -> probability of saying
    acceptable`` (arrays: position index ``t`` (int), previous tokens ``(n,)``,
    drafted tokens ``(n,)``), e.g. a trained verifier.
    """

    eta_tp: float | None = None
    eta_fp: float | None = None
    verifier: Callable | None = None

    def __post_init__(self):
        if self.verifier is None:
            if self.eta_tp is None or self.eta_fp is None:
                raise ValueError("Sprinter needs eta_tp and eta_fp, or a verifier function")
            _check_probability(self.eta_tp, "eta_tp")
            _check_probability(self.eta_fp, "eta_fp")
        else:
            if not callable(self.verifier):
                raise ValueError(f"verifier must be callable; got {self.verifier!r}")
            if self.eta_tp is not None or self.eta_fp is not None:
                raise ValueError("give either eta_tp/eta_fp or a verifier, not both")


@dataclass(frozen=True, eq=False)
class SpecDecPP:
    """SpecDec++ ([SDpp] Alg. 1; SPEC §1 — [SDpp] writes ``p`` for the target, translated here).

    Draft one token at a time; an acceptance head predicts ``a_i ≈ min(1, q(Y_i)/p(Y_i))``;
    stop drafting when ``1 − Π_{i≤k} a_i > h`` or at ``cap`` drafts, then verify as SD.

    Args:
      h: stopping threshold in ``[0, 1]`` (``h = 0`` stops after one draft unless it
        is certain to be accepted; ``h = 1`` never stops before the cap).
      head: ``head(t, prev, x) -> predicted acceptance`` (arrays as for
        :class:`Sprinter`), or ``None`` for the oracle ``min(1, q/p)``.
      cap: hard cap on the number of drafts per round (20 in [SDpp]).
    """

    h: float
    head: Callable | None = None
    cap: int = 20

    def __post_init__(self):
        _check_probability(self.h, "h")
        if self.head is not None and not callable(self.head):
            raise ValueError(f"head must be callable or None; got {self.head!r}")
        as_positive_int(self.cap, "cap")


#: FSD divergences: ``"kl"`` is KL(q || p) (target to draft), ``"kl_reverse"`` is KL(p || q).
FUZZY_DIVERGENCES = ("js", "kl", "kl_reverse", "tv")


@dataclass(frozen=True)
class Fuzzy:
    """Fuzzy speculative decoding ([FSD] §4).

    Accept the drafted token at a position iff ``Div(q, p) < θ`` there (a property
    of the two distributions, not of the token); otherwise output a token from ``q``.

    Args:
      theta: threshold ``θ >= 0`` (``θ = 0``: every token from ``q``).
      div: ``"js"`` (natural log, the paper's default), ``"kl"`` = KL(q‖p),
        ``"kl_reverse"`` = KL(p‖q), or ``"tv"``.
      K: lookahead, as in :class:`SD`.
    """

    theta: float
    div: str = "js"
    K: int | None = None

    def __post_init__(self):
        if isinstance(self.theta, bool) or not isinstance(self.theta, (int, float)) or math.isnan(self.theta) or self.theta < 0:
            raise ValueError(f"theta must be a number >= 0; got {self.theta!r}")
        if self.div not in FUZZY_DIVERGENCES:
            raise ValueError(f"div must be one of {FUZZY_DIVERGENCES}; got {self.div!r}")
        _check_K(self.K)


Method = Autoregressive | SD | BatchSD | RejectionDecoding | Biased | Sprinter | SpecDecPP | Fuzzy
