"""SPRINTER: sequential approximate verification ([SPR] Thm 3.1, 3.3, 3.4, A.4; SPEC §1, S1–S4).

Convention: ``p`` = draft, ``q`` = target. **[SPR] writes ``p`` for the target and
``q`` for the draft**; every formula here is translated to our letters.

One SPRINTER step at a position with draft ``p`` and target ``q`` ([SPR] Alg. 1/2):
draft ``x ~ p``; a verifier says "acceptable" with probability ``v(x)``. If it
does, ``x`` is kept without calling the target. Otherwise the target is called
once on that token: keep ``x`` with probability ``min(1, q(x)/p(x))``, else draw
from the residual ``[q − p]_+``. A token is *acceptable* iff ``p(x) <= q(x)``;
the i.i.d. noisy verifier of the theory has ``v = η_TP`` on acceptable and
``v = η_FP`` on unacceptable tokens.

**The single-token law, derived** (checks [SPR] Thm 3.1). With ``A = {p <= q}``:

* ``x ∉ A``: output iff the verifier passes it (``v p``) or the target keeps it
  (``(1 − v) p · q/p``): ``v(x) p(x) + (1 − v(x)) q(x)``.
* ``x ∈ A``: always kept (the target keeps acceptable tokens w.p. 1), plus the
  residual mass ``Σ_{y∉A} (1 − v(y)) (p(y) − q(y))`` spread as ``(q − p)_+ / TV``.

So for any per-token verifier

.. math:: p_{SPR}(x) = v(x) p(x) + (1 - v(x)) \\min(p, q)(x)
          + [q - p]_+(x) \\sum_y (1 - v(y)) (p(y) - q(y))_+ ,

and with ``v ≡ η_FP`` on ``{p > q}`` this is exactly ``(1 − η_FP) q + η_FP p``:
the paper's law holds, and ``η_TP`` drops out (a wrongly flagged acceptable
token is confirmed by the target). The condition it needs is that the verifier's
pass probability is **the same for every unacceptable token** (the i.i.d.
assumption of [SPR] §3.1). For a token-dependent verifier the law is *not* a
mixture, but ``TV(q, p_SPR) = η̄ TV(p, q)`` and ``β = 1 − (1 − η̄) TV(p, q)``
still hold with the ``(p − q)_+``-weighted pass rate
``η̄ = Σ_y v(y) (p(y) − q(y))_+ / TV(p, q)`` — which differs from the false-positive
rate one measures on drafted tokens, ``Σ_{y∉A} v p / Σ_{y∉A} p``.

On a Markov instance every position is such a step given the previous token, so
the output is a Markov chain with transitions ``p_SPR`` — [Yin] Algorithm 2 with
``b = v + (1 − v) min(1, q/p)`` and rejection law ``[q − p]_+``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from speculab import kernels
from speculab._validate import as_float_array, as_pair, as_positive_int, as_probability_array, check_same_shape
from speculab.theory.instance import MarkovInstance, chain_marginals, rowwise
from speculab.theory._checks import takes_instance

__all__ = [
    "SprinterDistribution",
    "sprinter_distribution",
    "sprinter_acceptance_rate",
    "sprinter_token_law",
    "sprinter_tokens_pmf",
    "sprinter_expected_tokens",
    "sprinter_stopping_time",
    "sd_flops",
    "sprinter_flops",
    "sprinter_pass_probabilities",
    "sprinter_output_law",
    "SprinterProfile",
    "sprinter_profile",
]


def _scalar_or_array(x: np.ndarray):
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


# -- S1, S4: one token -------------------------------------------------------------
class SprinterDistribution(NamedTuple):
    """The law of one SPRINTER output token and its distance to the target.

    Attributes:
      law: ``p_SPR``, shape ``(..., V)``.
      tv: ``TV(q, p_SPR)``, shape ``(...)``.
      acceptance: probability that the drafted token is kept, ``β_SPR``, shape ``(...)``.
    """

    law: np.ndarray
    tv: np.ndarray
    acceptance: np.ndarray


def sprinter_distribution(p, q, eta_fp) -> SprinterDistribution:
    r"""SPRINTER's single-token law, [SPR] Thm 3.1 and Thm A.4 (our letters: ``p`` draft, ``q`` target).

    .. math:: p_{SPR} = (1 - \eta_{FP})\, q + \eta_{FP}\, p, \qquad
              \mathrm{TV}(q, p_{SPR}) = \eta_{FP}\, \mathrm{TV}(p, q), \qquad
              \beta_{SPR} = 1 - (1 - \eta_{FP})\, \mathrm{TV}(p, q).

    ([SPR] prints ``(1 − η_FP) p + η_FP q`` with ``p`` = target.) Derived in the
    module docstring: exact for the i.i.d. verifier, whatever ``η_TP``.

    Args:
      p: draft distribution(s), shape ``(..., V)``.
      q: target distribution(s), same shape.
      eta_fp: ``η_FP = P(verifier passes a token | p(x) > q(x))``, in ``[0, 1]``;
        a scalar or an array broadcastable to ``p.shape[:-1]``.
    """
    p, q = as_pair(p, q)
    eta = as_probability_array(eta_fp, "eta_fp")
    d = kernels.tv(p, q)
    law = (1.0 - eta[..., None]) * q + eta[..., None] * p
    return SprinterDistribution(law=law, tv=eta * d, acceptance=1.0 - (1.0 - eta) * d)


def sprinter_acceptance_rate(p, q, eta_fp):
    r"""Acceptance rate of SPRINTER, [SPR] Thm A.4: :math:`\beta_{SPR} = 1 - (1 - \eta_{FP})\,\mathrm{TV}(p, q)`.

    The probability that the drafted token ends up in the output (passed by the
    verifier or kept by the target). ``η_FP = 0`` gives SD's ``1 − TV``.
    Arguments as in :func:`sprinter_distribution`.
    """
    return sprinter_distribution(p, q, eta_fp).acceptance


def sprinter_token_law(p, q, v) -> SprinterDistribution:
    r"""The single-token law of SPRINTER for an arbitrary per-token verifier, derived from [SPR] Alg. 1/2.

    .. math:: p_{SPR}(x) = v(x) p(x) + (1 - v(x)) \min(p(x), q(x))
              + [q - p]_+(x) \sum_y (1 - v(y)) (p(y) - q(y))_+

    Args:
      p: draft distribution(s), shape ``(..., V)``.
      q: target distribution(s), same shape.
      v: probability that the verifier passes token ``x`` ("acceptable"), same shape.

    Returns:
      :class:`SprinterDistribution`; ``tv`` and ``acceptance`` are computed from the law
      (they equal ``η̄ TV(p, q)`` and ``1 − (1 − η̄) TV(p, q)`` with the
      ``(p − q)_+``-weighted pass rate ``η̄``).
    """
    p, q = as_pair(p, q)
    v = as_probability_array(v, "v")
    check_same_shape(v, p, "v", "p")
    law, lost = _token_law(p, q, v)
    return SprinterDistribution(law=law, tv=kernels.tv(law, q), acceptance=1.0 - lost)


def _token_law(p: np.ndarray, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(law, P(target rejection))`` of one SPRINTER step; broadcasts over leading axes."""
    lost = ((1.0 - v) * kernels.excess(p, q)).sum(axis=-1)  # Σ (1 − v)(p − q)_+
    # If (p − q)_+ has mass only through round-off, (q − p)_+ may be all zero: the
    # lost mass is then negligible and the row simply sums to 1 − lost.
    law = v * p + (1.0 - v) * np.minimum(p, q) + kernels.residual(q, p) * lost[..., None]
    return law, lost


# -- S2, S3: the stopping process ------------------------------------------------------
def _etas(eta_tp, eta_fp) -> tuple[np.ndarray, np.ndarray]:
    return as_probability_array(eta_tp, "eta_tp"), as_probability_array(eta_fp, "eta_fp")


def _geometric_sum(eta: np.ndarray, k: int) -> np.ndarray:
    """``Σ_{i=0}^{k-1} η^i`` without cancellation near ``η = 1`` (exact limit ``k`` at 1)."""
    inner = (eta > 0) & (eta < 1)
    e = np.where(inner, eta, 0.5)
    # expm1(k log η) / (η − 1): both factors keep full relative precision as η → 1
    # (η − 1 is exact there), unlike (1 − η^k) / (1 − η).
    val = np.expm1(k * np.log(e)) / (e - 1.0)
    return np.where(inner, val, np.where(eta >= 1, float(k), 1.0 if k >= 1 else 0.0))


def sprinter_tokens_pmf(i, eta_tp, eta_fp, r: int):
    r"""Law of the number of verifier-passed tokens before the first stop, [SPR] Thm 3.3.

    Scenario of [SPR] Fig. 4: exactly the first ``r`` drafts are acceptable, all
    later ones are not; the verifier passes each independently (``η_TP`` /
    ``η_FP``). ``N`` = tokens passed before the first "not acceptable" verdict.

    .. math:: P(N = i) = \begin{cases} \eta_{TP}^i (1 - \eta_{TP}) & i < r \\
              \eta_{TP}^r \eta_{FP}^{i - r} (1 - \eta_{FP}) & i \ge r \end{cases}

    Args:
      i: non-negative integer(s).
      eta_tp, eta_fp: verifier rates in ``[0, 1]`` (scalars or broadcastable arrays).
      r: number of acceptable drafts, integer ``>= 0``.
    """
    r = as_positive_int(r, "r", minimum=0)
    tp, fp = _etas(eta_tp, eta_fp)
    i_arr = np.asarray(i)
    if not np.issubdtype(i_arr.dtype, np.integer) or np.any(i_arr < 0):
        raise ValueError(f"i must be non-negative integer(s); got {i!r}")
    # 0 ** 0 = 1 in numpy, which is the right convention for these powers.
    early = tp ** np.minimum(i_arr, r) * (1.0 - tp)
    late = tp**r * fp ** np.maximum(i_arr - r, 0) * (1.0 - fp)
    return _scalar_or_array(np.where(i_arr < r, early, late))


def sprinter_expected_tokens(eta_tp, eta_fp, r: int):
    r"""Expected number of verifier-passed tokens, [SPR] Thm 3.3 (eq. 3).

    .. math:: E[N] = \frac{\eta_{TP} - \eta_{TP}^r}{1 - \eta_{TP}} + \frac{\eta_{TP}^r}{1 - \eta_{FP}}
              = \sum_{i=1}^{r} \eta_{TP}^i + \eta_{TP}^r \frac{\eta_{FP}}{1 - \eta_{FP}}

    computed in the second (equivalent, cancellation-free) form. Limits:
    ``η_TP = 1`` gives ``r − 1 + 1/(1 − η_FP)``; ``η_FP = 1`` gives ``inf``
    (unless ``η_TP^r = 0``, i.e. ``η_TP = 0 < r``, where ``N = 0`` surely).

    Args:
      eta_tp: ``η_TP`` in ``[0, 1]`` (scalar or array).
      eta_fp: ``η_FP`` in ``[0, 1]`` (scalar or array, broadcast with ``eta_tp``).
      r: number of acceptable drafts, integer ``>= 0``.

    Returns:
      A float, or an array for array input.
    """
    r = as_positive_int(r, "r", minimum=0)
    tp, fp = _etas(eta_tp, eta_fp)
    tp, fp = np.broadcast_arrays(tp, fp)
    head = tp * _geometric_sum(tp, r)  # Σ_{i=1}^{r} η_TP^i
    reach = tp**r  # P(N >= r)
    denom = 1.0 - fp
    tail = np.divide(reach * fp, denom, out=np.zeros_like(reach), where=denom > 0)
    reachable = (tp > 0) | (r == 0)  # P(N >= r) > 0 even where η_TP^r underflows
    tail = np.where(denom > 0, tail, np.where(reachable, np.inf, 0.0))
    return _scalar_or_array(head + tail)


def _check_time(x, name: str) -> float:
    ok = isinstance(x, numbers.Real) and not isinstance(x, bool) and np.isfinite(x) and x > 0
    if not ok:
        raise ValueError(f"{name} must be a finite number > 0; got {x!r}")
    return float(x)


def sprinter_stopping_time(eta_tp, eta_fp, r: int, t_d: float):
    r"""Expected stopping time of the drafting loop, [SPR] Thm 3.4 (eq. 4).

    .. math:: E[T_{stop}] = \frac{(1 - \eta_{TP}^r)\, t_d}{1 - \eta_{TP}} + \frac{\eta_{TP}^r\, t_d}{1 - \eta_{FP}}
              = t_d\, (E[N] + 1)

    i.e. the time to draft the ``N`` passed tokens plus the one the verifier stops
    at (verifier time hidden, ``t_v <= t_d``). Same limits as
    :func:`sprinter_expected_tokens`.

    Args:
      eta_tp, eta_fp, r: as in :func:`sprinter_expected_tokens`.
      t_d: time of one draft forward pass, ``> 0`` ([SPR] Fig. 6 uses 0.1).
    """
    t_d = _check_time(t_d, "t_d")
    n = np.asarray(sprinter_expected_tokens(eta_tp, eta_fp, r))
    return _scalar_or_array(t_d * (n + 1.0))


# -- FLOPs ([SPR] eq. 5, 6) ----------------------------------------------------------
def _flops(x, name: str) -> np.ndarray:
    arr = as_float_array(x, name)
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0; got {x!r}")
    return arr


def sd_flops(K: int, F_d, F_t):
    r"""FLOPs of one SD round with ``K`` drafts ([SPR] writes ``γ``), [SPR] eq. (5): :math:`K F_d + K F_t`.

    The target's parallel verification still costs ``K`` forward passes of compute.

    Args:
      K: drafts per round, integer ``>= 1``.
      F_d: FLOPs of one draft forward pass (``>= 0``).
      F_t: FLOPs of one target forward pass (``>= 0``).
    """
    K = as_positive_int(K, "K")
    return _scalar_or_array(K * _flops(F_d, "F_d") + K * _flops(F_t, "F_t"))


def sprinter_flops(K: int, F_d, F_v, F_t):
    r"""FLOPs of one SPRINTER run with ``K`` drafts, [SPR] eq. (6): :math:`K F_d + K F_v + F_t`.

    One verifier pass per draft and a single target pass (perfect verifier).
    Saving over :func:`sd_flops`: ``(K − 1) F_t − K F_v``.

    Args:
      K: drafts, integer ``>= 1``.
      F_d, F_v, F_t: FLOPs of one draft, verifier and target forward pass (``>= 0``).
    """
    K = as_positive_int(K, "K")
    return _scalar_or_array(K * _flops(F_d, "F_d") + K * _flops(F_v, "F_v") + _flops(F_t, "F_t"))


# -- Markov instances -------------------------------------------------------------------
@takes_instance
def sprinter_pass_probabilities(inst: MarkovInstance, eta_tp: float, eta_fp: float) -> np.ndarray:
    """Pass probabilities ``v[t, a, x]`` of the i.i.d. verifier of [SPR] §3.1, shape ``(T, V, V)``.

    ``η_TP`` where the token is acceptable (``P <= Q``), ``η_FP`` elsewhere. A trained
    verifier gives any other ``v`` (see :class:`speculab.methods.Sprinter`).
    """
    tp = float(as_probability_array(eta_tp, "eta_tp"))
    fp = float(as_probability_array(eta_fp, "eta_fp"))
    return rowwise(lambda p, q: np.where(p <= q, tp, fp), inst.P, inst.Q)  # a view when the instance is compact


def _pass_array(inst: MarkovInstance, v) -> np.ndarray:
    v = rowwise(lambda part: as_probability_array(part, "v (verifier pass probabilities)"), np.asarray(v))
    check_same_shape(v, inst.P, "v (verifier pass probabilities)", "the instance's P")
    return v


@takes_instance
def sprinter_output_law(inst: MarkovInstance, v) -> np.ndarray:
    r"""Transitions of SPRINTER's output chain on a Markov instance, shape ``(T, V, V)``.

    Row ``[t, a]`` is :func:`sprinter_token_law` of ``(P[t, a], Q[t, a])`` with pass
    probabilities ``v[t, a]``; for the i.i.d. verifier (:func:`sprinter_pass_probabilities`)
    it is ``(1 − η_FP) Q[t, a] + η_FP P[t, a]`` ([SPR] Thm 3.1). Equal to
    :func:`speculab.theory.output_law` with ``b = v + (1 − v) min(1, q/p)`` and ``P = [q − p]_+``.

    Args:
      inst: the Markov instance.
      v: ``(T, V, V)`` probability that the verifier passes token ``x`` after ``a`` at position index ``t``.
    """
    return _token_law(inst.P, inst.Q, _pass_array(inst, v))[0]


@dataclass(frozen=True)
class SprinterProfile:
    """Exact expected counts of SPRINTER on a Markov instance (``T`` positions).

    Every per-position array has shape ``(T,)`` and averages over the algorithm's
    own output chain (``μ^SPR``). Count names are those of :class:`speculab.sim.Counts`.

    Attributes:
      rejections_per_position: P(position ``n``'s draft is rejected by the target and resampled).
      oracle_calls_per_position: P(the verifier says "not acceptable" at ``n``) — one target call each.
      tv_per_position: ``E[TV(q_n, p_SPR,n)]`` (``= η_FP E[TV(p_n, q_n)]`` for the i.i.d. verifier, Thm 3.1).
      kl_forward: ``KL(P_q(x_{1:T}) || P_SPR(x_{1:T}))`` (chain rule; may be inf).
      kl_reverse: ``KL(P_SPR || P_q)``.
    """

    rejections_per_position: np.ndarray
    oracle_calls_per_position: np.ndarray
    tv_per_position: np.ndarray
    kl_forward: float
    kl_reverse: float

    @property
    def T(self) -> int:
        return int(self.rejections_per_position.shape[0])

    @property
    def rejections(self) -> float:
        return float(self.rejections_per_position.sum())

    @property
    def oracle_calls(self) -> float:
        """Target calls: one per "not acceptable" verdict; the horizon end forces no extra call."""
        return float(self.oracle_calls_per_position.sum())

    @property
    def accepted(self) -> float:
        """Drafted tokens kept in the output (``T − rejections``; draft and verifier calls are ``T``)."""
        return self.T - self.rejections

    @property
    def acceptance_rate(self) -> float:
        """Mean over positions of ``β_SPR`` ([SPR] Thm A.4 averaged along the output chain)."""
        return self.accepted / self.T


@takes_instance
def sprinter_profile(inst: MarkovInstance, v) -> SprinterProfile:
    r"""Exact per-position counts and sequence divergences of SPRINTER on a Markov instance.

    With ``v`` the pass probabilities and ``μ_{n-1}`` the output chain's marginals:
    rejections ``Σ_a μ_{n-1}(a) Σ_x (1 − v)(p − q)_+``, target calls
    ``Σ_a μ_{n-1}(a) Σ_x p (1 − v)``; ``O(T V^2)``.

    Args:
      inst: the Markov instance.
      v: ``(T, V, V)`` verifier pass probabilities, e.g. :func:`sprinter_pass_probabilities`
        or ``Sprinter(...).pass_probabilities(inst)``.
    """
    from speculab.theory.fuzzy import chain_kl  # sequence KL by the chain rule

    v = _pass_array(inst, v)
    law, rej = rowwise(_token_law, inst.P, inst.Q, v)  # (T, V, V), (T, V): views when the instance is compact
    mu = chain_marginals(inst.rho, law)[:-1]  # (T, V): law of x_{n-1}
    calls = rowwise(kernels.rejection_mass, v, inst.P)  # the verifier refuses w.p. Σ (1 − v) p: a target call
    return SprinterProfile(
        rejections_per_position=np.einsum("na,na->n", mu, rej),
        oracle_calls_per_position=np.einsum("na,na->n", mu, calls),
        tv_per_position=np.einsum("na,na->n", mu, rowwise(kernels.tv, law, inst.Q)),
        kl_forward=float(chain_kl(inst.rho, inst.Q, law).sum()),
        kl_reverse=float(chain_kl(inst.rho, law, inst.Q).sum()),
    )
