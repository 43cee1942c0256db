"""Expected rejections of speculative decoding and of [Yin] Algorithm 2 (T1, T2).

Convention: ``p`` = draft, ``q`` = target. A *rejection* at position ``n`` is the
event that the token there was drawn from the rejection distribution ``P_n``;
an *oracle call* is one forward pass of the target, i.e. one round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from speculab import kernels
from speculab._validate import as_distribution, as_float_array, as_pair, as_probability_array, check_same_shape
from speculab.theory.instance import MarkovInstance, compact, expect, per_position, push, rowwise, scalar
from speculab.theory._checks import takes_instance

__all__ = [
    "RejectionProfile",
    "sd_expected_rejections",
    "acceleration",
    "acceptance_array",
    "rejection_array",
    "unbiased_rejection_distribution",
    "output_law",
    "expected_rejections",
    "is_unbiased",
]
# acceptance_array / rejection_array resolve a rule on an instance (used by the
# methods and the exact counts); they are not re-exported by speculab.theory.

#: An acceptance rule: an array ``b[n-1, a, x]`` of shape ``(T, V, V)``, or a
#: function ``b(p, q)`` applied elementwise to the ``(T, V, V)`` arrays ``P, Q``.
Acceptance = Union[np.ndarray, Callable[[np.ndarray, np.ndarray], np.ndarray]]
#: A rejection rule: ``(T, V, V)`` rows, or a function ``P(p, q, b)`` giving them.
RejectionRule = Union[np.ndarray, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], None]

_UNBIASED_ATOL = 1e-12


@dataclass(frozen=True)
class RejectionProfile:
    """Exact expected rejections of a decoding algorithm with lookahead ``K = ∞``.

    Attributes:
      rejections_per_position: ``(T,)``, the probability that position ``n``
        (index ``n-1``) is produced by a rejection.
    """

    rejections_per_position: np.ndarray

    @property
    def T(self) -> int:
        return self.rejections_per_position.shape[0]

    @property
    def rejections(self) -> float:
        """:math:`E[N_{rej}]`."""
        return scalar(self.rejections_per_position.sum())

    @property
    def oracle_calls(self) -> float:
        """Expected rounds = rejections, plus one if the last round ends without one (SPEC T1)."""
        return self.rejections + 1.0 - scalar(self.rejections_per_position[-1])

    @property
    def acceleration(self) -> float:
        """``T / E[N_rej]`` — [Yin]'s oracle-call speed-up over autoregressive decoding (inf if 0)."""
        return self.T / self.rejections if self.rejections > 0 else float("inf")


@takes_instance
def sd_expected_rejections(inst: MarkovInstance) -> RejectionProfile:
    r"""Expected rejections of speculative decoding, [Yin] Thm 1 (``K = ∞``).

    .. math:: E[N_{rej}] = \sum_{n=1}^{T} E_{x_{1:n-1} \sim q}
              \big[\mathrm{TV}(p_n, q_n)(\cdot \mid x_{1:n-1})\big]
              = \sum_n \sum_a \mu_{n-1}(a)\, \mathrm{TV}(P[n, a], Q[n, a])

    on a Markov instance, with :math:`\mu` the target's marginals; ``O(T V^2)`` time and
    ``O(V^2)`` memory (the marginal is carried position by position; a stationary
    instance's TV is computed once, a context-free one's in ``O(V)``).

    Example:
      >>> inst = MarkovInstance.context_free([0.5, 0.5], [0.8, 0.2], T=10)
      >>> round(sd_expected_rejections(inst).rejections, 12)   # T * TV(p, q)
      3.0
    """
    rows = per_position(lambda p, q: (kernels.tv(p, q), q), inst.T, compact(inst.P), compact(inst.Q))
    return RejectionProfile(rejections_per_position=_along_chain(inst.rho, rows, inst.T))


def chain_advance(mu, ker):
    """One position of an expectation along a chain (array API; the numpy loop and the JAX scan share it).

    ``ker = (f, K)``: a per-context quantity ``f`` and the chain's kernel ``K`` at this
    position. Returns the next marginal ``μ K`` and this position's ``E_μ[f]``.
    """
    f, kernel = ker
    return push(mu, kernel), expect(mu, f)


def _along_chain(rho, rows, T: int, dtype=None) -> np.ndarray:
    """``E[f_n]`` per position along the chain started at ``rho``, for ``(f_n, K_n)`` from ``rows``."""
    out = np.empty(T, dtype=rho.dtype if dtype is None else dtype)
    mu = rho
    for n, ker in enumerate(rows):
        mu, out[n] = chain_advance(mu, ker)
    return out


@takes_instance
def acceleration(inst: MarkovInstance) -> float:
    """[Yin]'s acceleration ``T / E[N_rej]`` of speculative decoding (Thm 1)."""
    return sd_expected_rejections(inst).acceleration


@takes_instance
def acceptance_array(inst: MarkovInstance, b: Acceptance) -> np.ndarray:
    """Resolve an acceptance rule to a checked ``(T, V, V)`` array of probabilities.

    A function ``b(p, q)`` is applied to the instance's compact kernels (it acts
    row by row), so on a stationary or context-free instance the result is a
    read-only broadcast view of the compact part, never a ``(T, V, V)`` copy.
    """
    if callable(b):

        def checked(p, q):
            out = as_probability_array(b(p, q), "b(p, q)")
            check_same_shape(out, p, "b(p, q)", "its arguments p, q")
            return out

        return rowwise(checked, inst.P, inst.Q)
    arr = rowwise(lambda x: as_probability_array(x, "b"), np.asarray(b))  # checked on its compact part
    check_same_shape(arr, inst.P, "b", "the instance's (T, V, V) kernels")
    return arr


def _unbiased_rejection(p: np.ndarray, q: np.ndarray, b: np.ndarray) -> np.ndarray:
    # For b ≤ min(1, q/p): Σ_x (q − b p)_+ = Σ_x (1 − b) p = D, so Thm 2's P = (q − b p)/D is
    # Thm 4's P* ∝ (q − b p)_+ — one formula (kernels.optimal_rejection), here with zero rows where D = 0.
    return kernels.normalize(kernels.excess(q, b * p), np.zeros_like(q))


def _check_unbiased(p: np.ndarray, q: np.ndarray, b: np.ndarray, name: str = "b") -> None:
    slack = b * p - q
    if np.any(slack > _UNBIASED_ATOL):
        bad = tuple(int(i) for i in np.argwhere(slack > _UNBIASED_ATOL)[0])
        raise ValueError(
            f"{name} must satisfy b <= min(1, q/p) for an unbiased algorithm ([Yin] Thm 2); "
            f"at index {bad} b*p - q = {slack[bad]:.3g} > 0"
        )


@takes_instance
def is_unbiased(inst: MarkovInstance, b: Acceptance) -> bool:
    """Whether ``b <= min(1, q/p)`` wherever ``p > 0`` (necessary and sufficient, [Yin] Thm 2)."""
    arr = acceptance_array(inst, b)
    return bool(np.all(rowwise(lambda b, p, q: b * p - q <= _UNBIASED_ATOL, arr, inst.P, inst.Q)))


def unbiased_rejection_distribution(p, q, b) -> np.ndarray:
    r"""The only rejection distribution that makes Algorithm 2 unbiased, [Yin] Thm 2.

    .. math:: P(x) = \frac{q(x) - b(x) p(x)}{\sum_{x'} (1 - b(x')) p(x')}

    Args:
      p: draft distribution(s), shape ``(..., V)``.
      q: target distribution(s), same shape.
      b: acceptance probabilities, same shape, with ``b <= min(1, q/p)``.

    Returns:
      Rows of the same shape; all zeros where ``Σ (1 − b) p = 0`` (never sampled).
      With ``b = min(1, q/p)`` this is the residual ``[q − p]_+``.
    """
    p, q = as_pair(p, q)
    b = as_probability_array(b, "b")
    check_same_shape(b, p, "b", "p")
    _check_unbiased(p, q, b)
    return _unbiased_rejection(p, q, b)


@takes_instance
def rejection_array(inst: MarkovInstance, b: np.ndarray, rejection: RejectionRule = None) -> np.ndarray:
    """Resolve a rejection rule to ``(T, V, V)`` rows, given the resolved acceptance array ``b``.

    ``rejection=None`` means the unbiased choice of [Yin] Thm 2 (and requires an unbiased ``b``).
    Rows that are used (``Σ (1 − b) p > 0``) must be distributions; unused rows may be anything.
    """
    if rejection is None:

        def unbiased(p, q, b):
            _check_unbiased(p, q, b)
            return _unbiased_rejection(p, q, b)

        return rowwise(unbiased, inst.P, inst.Q, b)
    if callable(rejection):

        def checked(p, q, b):
            out = as_float_array(rejection(p, q, b), "rejection(p, q, b)")
            check_same_shape(out, p, "rejection(p, q, b)", "its arguments p, q, b")
            return out

        arr = rowwise(checked, inst.P, inst.Q, b)
    else:
        arr = rowwise(lambda x: as_float_array(x, "rejection (the rejection distribution)"), np.asarray(rejection))
    check_same_shape(arr, inst.P, "rejection (the rejection distribution)", "the instance's draft P")

    def used_rows_only(p, b, r):
        used = kernels.rejection_mass(b, p) > 0
        as_distribution(r[used], "rejection (the rejection distribution) rows that can be sampled")
        return np.where(used[..., None], r, 0.0)

    return rowwise(used_rows_only, inst.P, b, arr)


@takes_instance
def output_law(inst: MarkovInstance, b: Acceptance, rejection: RejectionRule = None) -> np.ndarray:
    r"""Per-position output law of [Yin] Algorithm 2 on a Markov instance.

    .. math:: P_{A,n}(x) = b_n(x)\, p_n(x) + P_n(x) \sum_{\tilde x} (1 - b_n(\tilde x))\, p_n(\tilde x)

    With ``K = ∞`` the output is itself a Markov chain with these transitions.
    Unbiased ``b`` with ``rejection=None`` gives exactly ``Q`` ([Yin] Thm 2) whatever the
    lookahead; a *biased* rule with finite ``K`` mixes in bonus tokens drawn from
    ``q``, so its law then depends on the round phase (see
    :func:`speculab.theory.fuzzy_profile` for an exact phase-tracking computation).

    Returns:
      ``(T, V, V)`` transition array of the output chain.
    """
    b_arr = acceptance_array(inst, b)
    R = rejection_array(inst, b_arr, rejection)
    return rowwise(_output_kernel, inst.P, b_arr, R)


def _output_kernel(p: np.ndarray, b: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Algorithm 2's transition rows ``b p + R Σ(1 − b) p`` (row-wise)."""
    return b * p + R * kernels.rejection_mass(b, p)[..., None]


@takes_instance
def expected_rejections(inst: MarkovInstance, b: Acceptance, rejection: RejectionRule = None) -> RejectionProfile:
    r"""Expected rejections of Algorithm 2 with acceptance ``b`` (``K = ∞``), [Yin] Thm 2.

    .. math:: E[N_{rej}] = \sum_n E_{x_{1:n-1} \sim P_A}\Big[\sum_x (1 - b_n(x))\, p_n(x)\Big]

    where the prefix follows the algorithm's own output chain (``= q`` when unbiased).
    For every unbiased ``b`` this is at least :func:`sd_expected_rejections`
    (Thm 2), with equality for ``b = min(1, q/p)``.
    """
    b_arr = acceptance_array(inst, b)
    R = rejection_array(inst, b_arr, rejection)
    parts = compact(inst.P), compact(b_arr), compact(R)
    rows = per_position(lambda p, b, r: (kernels.rejection_mass(b, p), _output_kernel(p, b, r)), inst.T, *parts)
    per_position_rejections = _along_chain(inst.rho, rows, inst.T, np.result_type(inst.rho, *parts))
    return RejectionProfile(rejections_per_position=per_position_rejections)
