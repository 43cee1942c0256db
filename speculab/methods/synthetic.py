r"""vLLM's synthetic rejection mode: drafts accepted at fixed rates whatever the laws, a benchmarking mode; biased.

With ``rejection_sample_method="synthetic"`` vLLM's rejection sampler (``vllm/v1/sample/rejection_sampler.py``)
ignores the ratio test: it keeps the draft at slot ``i`` of a round (``i = 1..K``) with the *conditional* rate
``c_i = r_i / r_{i−1}`` (``r_0 = 1``; ``c_i = 0`` where ``r_{i−1} = 0``), where ``r_1 ≥ … ≥ r_K`` are the
configured *unconditional* rates ``synthetic_acceptance_rates`` (``r_i`` = the probability that the first ``i``
drafts are all kept; ``vllm/v1/spec_decode/utils.py``, ``unconditional_to_conditional_rates``). A refused slot
outputs vLLM's *recovered* token, drawn as in its standard mode: from the residual ``[q − p]_+`` with the draft's
probabilities (``draft_sample_method="probabilistic"``), from ``q`` without the drafted token when it has none
(greedy drafts, n-gram drafts). A round whose ``K`` drafts are all kept ends with a bonus from ``q``.

As [Yin] Algorithm 2 with a slot-dependent acceptance ``b_i ≡ c_i``, slot ``i``'s one-step output law is

.. math:: P_{A,i}(y) = c_i\, p(y) + (1 - c_i)\, R(y),

``p`` being the law the drafts come from and ``R`` the residual ``[q − p]_+`` normalised. It is the target's law only
where ``c_i p + (1 − c_i) R = q`` — not at ``c_i = 0`` (the output is then ``R``), nor at ``p = q`` (the residual is
empty: ``c_i q + (1 − c_i) δ_0``): the mode is biased by design (vLLM documents it for benchmarking acceptance
lengths), and it is the control that speculab's law test of an engine must refuse. Where the residual has no mass
(``p = q`` exactly, or ``q`` a point mass on the draft) vLLM's recovered-token kernel — an argmax of
``residual / Exp(1)`` noise over all zeros — returns token 0; so does this rule. Exact counts do not depend on the
laws (the number of kept drafts never does): they are computed over the horizon by :meth:`Synthetic.expected`.
Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from array_api_compat import array_namespace, device

from speculab import kernels
from speculab.counts import Expected
from speculab.methods.base import Method, RoundLaw, param, register
from speculab.methods.chain import chain_law
from speculab.theory._checks import takes_instance

__all__ = ["Synthetic", "DRAFTS", "conditional_rates"]

#: How the drafts are drawn (vLLM's ``draft_sample_method``): from the draft's law, or its argmax.
DRAFTS = ("probabilistic", "greedy")


def _rates(rates) -> tuple[float, ...]:
    """``rates`` as a non-empty, non-increasing tuple of probabilities (a comma-separated string allowed)."""
    if isinstance(rates, str):
        try:
            rates = [float(r) for r in rates.strip().strip("()[]").split(",")]  # 0.8,0.5 or (0.8, 0.5)
        except ValueError:
            raise ValueError(f"rates must be numbers separated by commas, e.g. 0.8,0.6; got {rates!r}") from None
    if isinstance(rates, numbers.Real):
        rates = (rates,)
    try:
        rates = tuple(rates)
    except TypeError:
        raise ValueError(f"rates must be a sequence of probabilities; got {rates!r}") from None
    ok = all(
        isinstance(r, numbers.Real) and not isinstance(r, bool) and math.isfinite(r) and 0 <= r <= 1 for r in rates
    )
    if not rates or not ok:
        raise ValueError(f"rates must be one or more numbers in [0, 1]; got {rates!r}")
    if any(b > a for a, b in zip(rates, rates[1:])):
        raise ValueError(f"rates must be non-increasing (r_i: the first i drafts all kept); got {rates!r}")
    return tuple(float(r) for r in rates)


def conditional_rates(rates) -> np.ndarray:
    """``c_i = r_i / r_{i−1}`` (``r_0 = 1``; 0 where ``r_{i−1} = 0``) from unconditional rates ``r_1..r_K``."""
    r = np.asarray(_rates(rates))
    before = np.concatenate([[1.0], r[:-1]])
    return np.divide(r, before, out=np.zeros_like(r), where=before > 0)


@register
@dataclass(frozen=True)
class Synthetic(Method):
    """vLLM's synthetic rejection mode (module docstring): slot ``i`` kept with a fixed rate, else vLLM's recovered
    token. Biased.

    Args:
      rates: the unconditional rates ``r_1 ≥ … ≥ r_K`` (vLLM's ``synthetic_acceptance_rates``; their number is the
        lookahead ``K``). On the command line, comma-separated: ``--rates 0.8,0.6,0.4``.
      draft_sample: ``"probabilistic"`` (drafts from ``p``, recovered from ``[q − p]_+``) or ``"greedy"`` (drafts
        ``argmax p``, recovered from ``q`` without it): vLLM's ``draft_sample_method``.

    Example:
      >>> Synthetic((0.8, 0.4)).draft_length(10), conditional_rates((0.8, 0.4)).tolist()
      (2, [0.8, 0.5])
    """

    name: ClassVar[str] = "synthetic"
    rates: tuple = param(help="unconditional acceptance rates r_1 >= ... >= r_K, comma-separated", type=str)
    draft_sample: str = param(
        "probabilistic", help="drafts: probabilistic (from p) or greedy (argmax p)", type=str, choices=DRAFTS
    )

    def __post_init__(self):
        object.__setattr__(self, "rates", _rates(self.rates))
        if self.draft_sample not in DRAFTS:
            raise ValueError(f"draft_sample must be one of {', '.join(DRAFTS)}; got {self.draft_sample!r}")

    @property
    def unbiased(self) -> bool:
        return False

    @property
    def K(self) -> int:
        return len(self.rates)

    def draft_law(self, p):
        """The law the drafts come from: ``p``, or its argmax's point mass for greedy drafts (array API)."""
        return kernels.argmax_mass(p) if self.draft_sample == "greedy" else p

    def draft_length(self, remaining: int) -> int:
        return min(self.K, remaining)

    def round_law(self, p, q, x, *, bonus: bool) -> RoundLaw:
        xp = array_namespace(p, q)
        p = self.draft_law(p)
        L, V = x.shape[-1], q.shape[-1]
        qs = q[..., :-1, :]
        c = xp.asarray(conditional_rates(self.rates)[:L], dtype=q.dtype, device=device(q))
        a = xp.broadcast_to(c, x.shape) * xp.ones(x.shape, dtype=q.dtype, device=device(q))  # (..., M, L)
        w = kernels.excess(qs, p)  # [q − p]_+ unnormalised: with greedy drafts, q without the draft
        mass = xp.sum(w, axis=-1, keepdims=True)
        zero = xp.astype(xp.arange(V, device=device(q)) == 0, q.dtype)  # vLLM's recovered token on no mass
        R = xp.where(mass > 0, w / xp.where(mass > 0, mass, xp.ones_like(mass)), zero)
        law = a[..., None] * p + (1.0 - a[..., None]) * R  # the one-step law at each slot
        return chain_law(a, 1.0 - a, R, q, bonus=bonus, law=law)

    @takes_instance
    def expected(self, inst) -> Expected:
        r"""Exact counts over the horizon ``T``: the kept drafts never depend on the laws, so a round started with
        ``n`` tokens to go drafts ``L = min(K, n)``, keeps ``τ`` with ``P(τ ≥ j) = r_j`` and outputs ``τ + 1``
        tokens (``τ`` when ``τ = L = n``: no position follows); the law of the rounds' start positions is carried
        forward over the horizon."""
        T = inst.T
        c = conditional_rates(self.rates)
        start = np.zeros(T + 1)  # P(a round starts at position index t)
        start[0] = 1.0
        names = ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus")
        total = dict.fromkeys(names, 0.0)
        per_position = np.zeros(T)
        for t in range(T):
            if start[t] == 0:
                continue
            n = T - t
            L = min(self.K, n)
            reach = np.concatenate([[1.0], np.cumprod(c[:L])])  # P(τ ≥ j), j = 0..L
            for tau in range(L + 1):
                prob = start[t] * reach[tau] * (1.0 - c[tau] if tau < L else 1.0)
                if prob == 0:
                    continue
                refused, bonus = tau < L, tau == L and L < n
                total["rejections"] += prob * refused
                total["oracle_calls"] += prob
                total["draft_calls"] += prob * L
                total["accepted"] += prob * tau
                total["bonus"] += prob * bonus
                if refused:
                    per_position[t + tau] += prob
                start[t + tau + (refused or bonus)] += prob
        return Expected(
            **total,
            discarded=total["draft_calls"] - total["accepted"],
            tokens=float(T),
            rejections_per_position=per_position,
            source="exact counts of fixed kept-draft rates over the horizon (vLLM synthetic)",
        )
