"""The quality/speed trade-off of biased decoding: [Yin] Thm 4, Thm 5, and the sequence level (SPEC §1, §2).

Convention: ``p`` = draft, ``q`` = target (as in [Yin]). One step of [Yin]
Algorithm 2 with acceptance ``b`` and rejection distribution ``P`` outputs

    P_A = b p + D P,    D = Σ_x (1 − b(x)) p(x) = P(reject)   ([Yin] footnote 7).

Single-token functions act on the last axis and broadcast over leading axes.
Three closed forms carry everything; none divides by ``D`` (so ``D = 0`` needs no care):

* Thm 4, optimal loss:  ``Loss*_TV(b) = Σ_x (b(x)p(x) − q(x))_+``
  ``= ½ Σ|q − bp| − ½ Σ(1 − b)p`` (the paper's form, with its ½).
* Excess loss of any ``P``: ``TV(P_A, q) − Loss* = D·P(A−) + Σ_{A+} (D P − (q − bp))_+``,
  zero exactly on the optimal set ``{P = 0 on A−, 0 ≤ P ≤ A on A+}``.
* Thm 5, for every ``b`` in ``[0, 1]`` (the paper states the case ``b ≥ min(1, q/p)``):
  ``P(reject) + Loss*(b) = TV(p, q) + Σ_x (min(p, q) − b p)_+``. The last sum, the
  Pareto gap, vanishes iff ``b ≥ min(1, q/p)`` on ``supp(p)``: nothing lies below the line.

On a Markov instance the output of Algorithm 2 (lookahead ``K = ∞``) is itself a
Markov chain with transitions ``P_A,n`` (:func:`~speculab.theory.output_law`), so the
sequence-level KL follows from the chain rule and, for small ``V^(T+1)``, the
sequence-level TV by enumeration ([Yin] Remark 6 leaves the sequence level open).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from speculab import kernels
from speculab._validate import as_distribution, as_pair, as_positive_int, as_probability_array, check_same_shape
from speculab.theory.instance import MarkovInstance, chain_marginals, rowwise
from speculab.theory.rejections import Acceptance, RejectionRule, acceptance_array, output_law
from speculab.theory._checks import takes_instance

__all__ = [
    "OptimalRejection",
    "rejection_probability",
    "optimal_loss",
    "optimal_rejection",
    "rejection_loss",
    "is_optimal_rejection",
    "optimal_loss_lp",
    "pareto_loss",
    "pareto_gap",
    "pareto_acceptance",
    "TradeoffProfile",
    "tradeoff_profile",
    "SequenceBias",
    "markov_kl",
    "markov_tv",
    "log_likelihood_ratio",
    "sequence_bias",
]

#: Absolute round-off slack on masses such as ``q − b p`` (membership test only).
_ROUNDOFF = 1e-15
#: Default cap on ``V^(T+1)`` for exact sequence-level TV (two float arrays of this length).
MAX_SEQUENCES = 1 << 20


# -- single token: [Yin] Thm 4 and Thm 5 ------------------------------------------------
def _triple(p, q, b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p, q = as_pair(p, q)
    b = as_probability_array(b, "b")
    check_same_shape(b, p, "b", "p")
    return p, q, b


def _optimal_loss(p: np.ndarray, q: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(b * p - q, 0.0).sum(axis=-1)


def _rejection_loss(p, q, b, rejection) -> np.ndarray:
    D = kernels.rejection_mass(b, p)[..., None]
    return np.maximum(b * p + D * rejection - q, 0.0).sum(axis=-1)  # TV(P_A, q) = Σ (P_A − q)_+


def rejection_probability(p, b) -> np.ndarray:
    r"""Probability that a drafted token is rejected, [Yin] footnote 7 and Thm 5.

    .. math:: P(\text{reject}) = \sum_x (1 - b(x))\, p(x)

    Args:
      p: draft distribution(s), shape ``(..., V)``.
      b: acceptance probabilities ``b(x) ∈ [0, 1]``, same shape.
    """
    p = as_distribution(p, "p")
    b = as_probability_array(b, "b")
    check_same_shape(b, p, "b", "p")
    return np.minimum(kernels.rejection_mass(b, p), 1.0)  # Σp may exceed 1 by round-off


def optimal_loss(p, q, b) -> np.ndarray:
    r"""The least TV bias of Algorithm 2 with acceptance ``b``, [Yin] Thm 4.

    .. math:: \mathrm{Loss}^*_{TV}(b) = \min_P \mathrm{TV}(P_A, q)
              = \tfrac12 \sum_x |q(x) - b(x)p(x)| - \tfrac12 \sum_x (1 - b(x))p(x)
              = \sum_x (b(x)p(x) - q(x))_+ .

    The last form (computed here, never negative) says the optimum removes all bias
    except the mass the acceptance step alone puts above ``q``. Keep the ½: ``b ≡ 1``
    gives ``TV(p, q)`` (the paper's proof of Thm 5 drops it). ``D = Σ(1 − b)p = 0``
    gives ``TV(p, q)`` whatever ``P``; ``b ≤ min(1, q/p)`` gives 0.

    Args:
      p: draft distribution(s) ``p``, shape ``(..., V)``.
      q: target distribution(s) ``q``, same shape.
      b: acceptance probabilities ``b``, same shape, in ``[0, 1]``.
    """
    p, q, b = _triple(p, q, b)
    return _optimal_loss(p, q, b)


class OptimalRejection(NamedTuple):
    """[Yin] Thm 4 for one acceptance rule (arrays broadcast over leading axes).

    Attributes:
      rejection: the canonical optimal rejection distribution ``P* = [A]_+ ∝ (q − b p)_+``;
        where ``(q − b p)_+ = 0`` (then ``D = 0`` and every rejection law is optimal) it is ``q``.
      loss: ``Loss*_TV(b)``, shape ``(...)``.
      rejection_prob: ``D = Σ (1 − b) p = P(reject)``, shape ``(...)``.
      A: ``A = (q − b p) / D``, shape ``(..., V)``; ``nan`` where ``D = 0``.
    """

    rejection: np.ndarray
    loss: np.ndarray
    rejection_prob: np.ndarray
    A: np.ndarray


def optimal_rejection(p, q, b) -> OptimalRejection:
    r"""The optimal rejection distribution and loss of [Yin] Thm 4.

    With :math:`D = \sum_x (1 - b(x))p(x) > 0`, :math:`A(x) = (q(x) - b(x)p(x))/D`,
    :math:`A_+ = \{A \ge 0\}`, :math:`A_- = \{A < 0\}`, the optimal set of
    :math:`\min_P \mathrm{TV}(P_A, q)` is :math:`\{P : P = 0 \text{ on } A_-,\ 0 \le P \le A
    \text{ on } A_+,\ \sum P = 1\}` (test with :func:`is_optimal_rejection`); its
    canonical member is :math:`P^* = [A]_+ = (q - bp)_+ / \sum (q - bp)_+`. For
    ``b = min(1, (q + ε)/p)``, ``ε > 0``, this is the SD residual ``[q − p]_+``.

    Args:
      p: draft distribution(s), shape ``(..., V)``.
      q: target distribution(s), same shape.
      b: acceptance probabilities in ``[0, 1]``, same shape.

    Example:
      >>> r = optimal_rejection([0.6, 0.4], [0.3, 0.7], [1.0, 1.0])   # always accept
      >>> float(r.loss), float(r.rejection_prob)   # TV(p, q), never rejects
      (0.3, 0.0)
    """
    p, q, b = _triple(p, q, b)
    D = kernels.rejection_mass(b, p)
    P = kernels.optimal_rejection(p, q, b)
    with np.errstate(over="ignore"):  # D can be subnormal: A is then huge, honestly
        A = np.divide(q - b * p, D[..., None], out=np.full(p.shape, np.nan), where=D[..., None] > 0)
    return OptimalRejection(rejection=P, loss=_optimal_loss(p, q, b), rejection_prob=D, A=A)


def rejection_loss(p, q, b, rejection) -> np.ndarray:
    r"""TV bias of Algorithm 2 with acceptance ``b`` and rejection distribution ``rejection = P`` ([Yin] eq. (1)).

    .. math:: \mathrm{TV}(P_A, q),\quad P_A = b\,p + P \sum_{\tilde x} (1 - b(\tilde x))\, p(\tilde x).

    ``P = q`` is Decoding-UNO ([Yin] §4.2); ``P = P*`` attains :func:`optimal_loss`.
    """
    p, q, b = _triple(p, q, b)
    P = as_distribution(rejection, "rejection")
    check_same_shape(P, p, "rejection", "p")
    return _rejection_loss(p, q, b, P)


def is_optimal_rejection(p, q, b, rejection, *, atol: float = 1e-9) -> np.ndarray:
    r"""Membership in the optimal set of [Yin] Thm 4: ``P = 0`` on ``A−`` and ``0 ≤ P ≤ A`` on ``A+``.

    Checked without dividing by ``D``: ``P(x) ≤ atol`` where ``q − b p < 0`` and
    ``D P(x) ≤ q(x) − b(x)p(x) + atol·D`` elsewhere, both up to an absolute slack of
    ``1e-15`` on the masses ``q − b p`` (their round-off). Rows with ``D = 0`` accept every
    ``P`` (the loss does not depend on it). When ``D`` is tiny (near-equal ``p, q``) the
    set is ill-conditioned in floating point and the test lenient; compare losses instead.

    Args:
      p, q, b: as in :func:`optimal_rejection`.
      rejection: candidate rejection distribution(s) ``P``, same shape (must be distributions).
      atol: tolerance on ``P``.

    Returns:
      Boolean array of shape ``(...)``.
    """
    p, q, b = _triple(p, q, b)
    P = as_distribution(rejection, "rejection")
    check_same_shape(P, p, "rejection", "p")
    D = kernels.rejection_mass(b, p)[..., None]
    r = q - b * p  # = D · A
    inside = np.where(r < -_ROUNDOFF, P <= atol, D * P <= r + atol * D + _ROUNDOFF)
    return np.all(inside, axis=-1) | (D[..., 0] == 0)


def optimal_loss_lp(p, q, b) -> float:
    r"""``min_P TV(P_A, q)`` by linear programming (``scipy.optimize.linprog``, HiGHS): a reference for Thm 4.

    Variables ``P, t ∈ R^V``: minimise ``½ Σ t`` subject to
    ``|q − b p − D P| ≤ t``, ``Σ P = 1``, ``P ≥ 0``. Single vectors only (shape ``(V,)``).
    """
    from scipy.optimize import linprog

    p, q, b = _triple(p, q, b)
    if p.ndim != 1:
        raise ValueError(f"optimal_loss_lp takes single vectors of shape (V,); got {p.shape}")
    V = p.shape[0]
    D, r = kernels.rejection_mass(b, p), q - b * p
    eye = np.eye(V)
    A_ub = np.block([[-D * eye, -eye], [D * eye, -eye]])
    b_ub = np.concatenate([-r, r])
    A_eq = np.concatenate([np.ones(V), np.zeros(V)])[None, :]
    res = linprog(
        np.concatenate([np.zeros(V), np.full(V, 0.5)]),
        A_ub=A_ub,
        b_ub=b_ub,
        A_eq=A_eq,
        b_eq=[1.0],
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"linprog failed: {res.message}")
    return float(res.fun)


def pareto_loss(p, q, rejection_prob) -> np.ndarray:
    r"""The Pareto front of [Yin] Thm 5: the least TV bias at a given rejection probability ``r``.

    .. math:: L(r) = (\mathrm{TV}(p, q) - r)_+ , \qquad r \in [0, 1].

    Attained for ``r ≤ TV`` by any ``b ≥ min(1, q/p)`` with ``P(reject) = r`` and an
    optimal ``P``, and for ``r ≥ TV`` (loss 0) by ``b = s·min(1, q/p)``. No
    Algorithm 2 does better (:func:`pareto_gap` ≥ 0).

    Args:
      p: draft distribution(s), shape ``(..., V)``.
      q: target distribution(s), same shape.
      rejection_prob: rejection probabilities in ``[0, 1]``, broadcastable to ``(...)``.
    """
    p, q = as_pair(p, q)
    r = as_probability_array(rejection_prob, "rejection_prob")
    return np.maximum(kernels.tv(p, q) - r, 0.0)


def pareto_gap(p, q, b) -> np.ndarray:
    r"""Distance of ``(Loss*(b), P(reject))`` above the Pareto line; [Yin] Thm 5 says 0 for ``b ≥ min(1, q/p)``.

    .. math:: P(\text{reject}) + \mathrm{Loss}^*_{TV}(b) - \mathrm{TV}(p, q)
              = \sum_x (\min(p(x), q(x)) - b(x)p(x))_+ \;\ge 0

    for every ``b ∈ [0, 1]`` (derived here; term by term, ``(1 − b)p + (bp − q)_+ −
    (p − q)_+`` is ``(min(p, q) − bp)_+``). Zero iff ``b ≥ min(1, q/p)`` on ``supp(p)``.
    """
    p, q, b = _triple(p, q, b)
    return np.maximum(np.minimum(p, q) - b * p, 0.0).sum(axis=-1)


def pareto_acceptance(p, q, b) -> np.ndarray:
    r"""Raise a user acceptance rule onto the Pareto front: :math:`b' = \max(b, \min(1, q/p))`.

    ``b'`` has the same :func:`optimal_loss` as ``b`` (raising ``b`` where
    ``b p < q`` lowers ``½Σ|q − bp|`` and ``½Σ(1 − b)p`` equally) and a rejection
    probability smaller by :func:`pareto_gap`: it dominates ``b``. Over-acceptance
    ``b = min(1, (q + ε)/p)`` (:func:`speculab.theory.biased.biased_acceptance`) is already on the front.
    """
    p, q, b = _triple(p, q, b)
    return np.maximum(b, kernels.sd_acceptance(p, q))


# -- Markov instances: per-token trade-off under the algorithm's own prefixes -------------
@dataclass(frozen=True)
class TradeoffProfile:
    """Per-position trade-off of an Algorithm 2 on a Markov instance (``K = ∞``).

    Every entry is an expectation over the prefix ``x_{n-1} ~ ν_{n-1}``, the marginal
    of the algorithm's own output chain (``ν = μ``, the target's, when unbiased).

    Attributes:
      rejections_per_position: ``(T,)`` ``E_ν[Σ (1 − b_n) p_n]`` = P(position ``n`` is a rejection).
      loss_per_position: ``(T,)`` ``E_ν[TV(P_A,n, q_n)]``, the per-token bias.
      optimal_loss_per_position: ``(T,)`` ``E_ν[Loss*_TV(b_n)]`` (Thm 4) — the loss of an optimal ``P``.
      tv_per_position: ``(T,)`` ``E_ν[TV(p_n, q_n)]``.
      output: ``(T, V, V)`` transitions ``P_A,n`` of the output chain.
      marginals: ``(T + 1, V)`` marginals ``ν_n`` of the output chain.
    """

    rejections_per_position: np.ndarray
    loss_per_position: np.ndarray
    optimal_loss_per_position: np.ndarray
    tv_per_position: np.ndarray
    output: np.ndarray
    marginals: np.ndarray

    @property
    def T(self) -> int:
        return self.rejections_per_position.shape[0]

    @property
    def rejections(self) -> float:
        """``E[N_rej]`` (equals :func:`~speculab.theory.expected_rejections`)."""
        return float(self.rejections_per_position.sum())

    @property
    def rejection_rate(self) -> float:
        """``E[N_rej] / T``, rejections per output token."""
        return float(self.rejections_per_position.mean())

    @property
    def token_loss(self) -> float:
        """Mean per-position TV bias ``(1/T) Σ_n E_ν[TV(P_A,n, q_n)]``."""
        return float(self.loss_per_position.mean())

    @property
    def pareto_gap(self) -> float:
        """``rejection_rate + token_loss − mean E_ν[TV(p_n, q_n)]``: 0 for OPT with ``b ≥ min(1, q/p)`` (Thm 5)."""
        return float((self.rejections_per_position + self.loss_per_position - self.tv_per_position).mean())


@takes_instance
def tradeoff_profile(inst: MarkovInstance, b: Acceptance, rejection: RejectionRule = None) -> TradeoffProfile:
    r"""Rejections and TV bias per position of Algorithm 2 ``(b, P)`` on a Markov instance.

    .. math:: \mathrm{rej}_n = E_{\nu_{n-1}}\Big[\sum_x (1 - b_n(x))p_n(x)\Big],\quad
              \mathrm{loss}_n = E_{\nu_{n-1}}[\mathrm{TV}(P_{A,n}, q_n)]

    with ``ν`` the output chain's marginals. Per context, Thm 5 makes
    ``rej + Loss* = TV(p, q)`` for ``b ≥ min(1, q/p)``; the average is then
    ``E_ν[TV(p_n, q_n)]``, which moves with ``ν`` (hence with ``ε``).

    Args:
      inst: the draft/target pair.
      b, rejection: acceptance and rejection rules as for :func:`~speculab.theory.output_law`,
        e.g. a method's rule on the instance: ``Biased(eps, "opt").rule(inst.P, inst.Q)``.
    """
    b_arr = acceptance_array(inst, b)
    out = output_law(inst, b_arr, rejection)  # (T, V, V)
    nu = chain_marginals(inst.rho, out)  # (T+1, V)
    per_ctx = {  # each (T, V), from the kernels' compact parts (nothing of size T V² on a compact instance)
        "rejections_per_position": rowwise(kernels.rejection_mass, b_arr, inst.P),
        "loss_per_position": rowwise(kernels.tv, out, inst.Q),
        "optimal_loss_per_position": rowwise(_optimal_loss, inst.P, inst.Q, b_arr),
        "tv_per_position": inst.tv(),
    }
    avg = {k: np.einsum("na,na->n", nu[:-1], v) for k, v in per_ctx.items()}
    return TradeoffProfile(**avg, output=out, marginals=nu)


# -- sequence level ---------------------------------------------------------------------
def _chain(C, name: str, shape=None) -> np.ndarray:
    C = np.asarray(C)
    if C.ndim != 3:
        raise ValueError(f"{name} must have 3 dimension(s); got shape {C.shape}")
    C = rowwise(lambda part: as_distribution(part, name), C)  # a compact (broadcast) chain is checked once
    if C.shape[1] != C.shape[2]:
        raise ValueError(f"{name} must have shape (T, V, V); got {C.shape}")
    if shape is not None and C.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got {C.shape}")
    return C


def markov_kl(rho, chain, reference) -> np.ndarray:
    r"""Chain-rule terms of the KL divergence between two Markov chains with the same start law.

    .. math:: \mathrm{KL}(P^C \| P^R) = \sum_{n=1}^{T} E_{x_{n-1} \sim \nu_{n-1}}
              \big[\mathrm{KL}(K_n(\cdot \mid x_{n-1}) \,\|\, L_n(\cdot \mid x_{n-1}))\big],

    ``ν`` the marginals of chain ``C``. A term is ``inf`` iff a context reachable
    under ``C`` (decided on supports, not on underflowing products) has an infinite row KL.

    Args:
      rho: law of ``x_0``, shape ``(V,)``.
      chain, reference: ``(T, V, V)`` transitions ``C`` and ``R``; ``C`` is the chain in the first argument of KL.

    Returns:
      ``(T,)`` per-position terms; their sum is the sequence-level KL.
    """
    rho = as_distribution(rho, "rho", ndim=1)
    C = _chain(chain, "chain")
    R = _chain(reference, "reference", C.shape)
    if rho.shape[0] != C.shape[2]:
        raise ValueError(f"rho must have length V = {C.shape[2]}; got {rho.shape[0]}")
    nu = chain_marginals(rho, C)
    row = rowwise(kernels.kl, C, R)  # (T, V)
    reach = rho > 0
    out = np.empty(C.shape[0])
    for n in range(C.shape[0]):
        out[n] = np.inf if np.any(reach & np.isinf(row[n])) else nu[n] @ np.where(reach, row[n], 0.0)
        reach = (reach.astype(np.float64) @ (C[n] > 0)) > 0
    return out


def markov_tv(rho, chain, reference, *, max_sequences: int = MAX_SEQUENCES) -> float:
    r"""Exact TV distance between the laws of ``(x_0, …, x_T)`` under two Markov chains, by enumeration.

    .. math:: \mathrm{TV} = \sum_{x_{0:T}} \big(P^C(x_{0:T}) - P^R(x_{0:T})\big)_+

    Builds both laws over all ``V^(T+1)`` sequences; refuses more than ``max_sequences``.
    """
    rho = as_distribution(rho, "rho", ndim=1)
    C = _chain(chain, "chain")
    R = _chain(reference, "reference", C.shape)
    T, V = C.shape[0], C.shape[2]
    if rho.shape[0] != V:
        raise ValueError(f"rho must have length V = {V}; got {rho.shape[0]}")
    max_sequences = as_positive_int(max_sequences, "max_sequences")
    if V ** (T + 1) > max_sequences:
        raise ValueError(f"exact sequence TV needs V^(T+1) = {V}^{T + 1} sequences > max_sequences = {max_sequences}")
    a, c = rho.copy(), rho.copy()  # laws of x_{0:n}, flattened with x_n the fastest index
    for n in range(T):
        last = np.arange(a.size) % V
        a = (a[:, None] * C[n][last]).ravel()  # (V^(n+1), V) -> (V^(n+2),)
        c = (c[:, None] * R[n][last]).ravel()
    return float(np.maximum(a - c, 0.0).sum())


def log_likelihood_ratio(chain, reference, sequences) -> np.ndarray:
    r"""``log P^C(x_{1:T} | x_0) − log P^R(x_{1:T} | x_0)`` for given sequences (both chains start from ``ρ``).

    For sequences drawn from chain ``C`` this is the Monte-Carlo integrand of both
    sequence-level divergences: ``KL(P^C ‖ P^R) = E_C[ℓ]`` and
    ``TV(P^C, P^R) = E_C[(1 − e^{−ℓ})_+]`` (values in ``[0, 1]``, so the estimate's
    standard error is at most ``1/(2√N)``). ``+inf`` where ``R`` gives the sequence probability 0.

    Args:
      chain, reference: ``(T, V, V)`` transitions ``C`` and ``R``.
      sequences: ``(N, T + 1)`` integer tokens ``x_0..x_T`` (e.g. ``Counts.sequences``), each with ``P^C > 0``.

    Returns:
      ``(N,)`` log-likelihood ratios.
    """
    C = _chain(chain, "chain")
    R = _chain(reference, "reference", C.shape)
    seq = np.asarray(sequences)
    T, V = C.shape[0], C.shape[2]
    if seq.ndim != 2 or seq.shape[1] != T + 1 or not np.issubdtype(seq.dtype, np.integer):
        raise ValueError(f"sequences must be integers of shape (N, T + 1 = {T + 1}); got {seq.dtype} {seq.shape}")
    if seq.size and (seq.min() < 0 or seq.max() >= V):
        raise ValueError(f"sequences must hold tokens in 0..{V - 1}")
    n = np.arange(T)
    c, r = C[n, seq[:, :-1], seq[:, 1:]], R[n, seq[:, :-1], seq[:, 1:]]  # (N, T) transition probabilities
    if np.any(c == 0):
        raise ValueError("sequences must have positive probability under chain")
    logr = np.log(r, out=np.full(r.shape, -np.inf), where=r > 0)
    return (np.log(c) - logr).sum(axis=1)


@dataclass(frozen=True)
class SequenceBias:
    """Sequence-level divergences between an algorithm's output ``P_A(x_{1:T})`` and the target ``q(x_{1:T})``.

    Attributes:
      kl: ``KL(P_A ‖ q)`` (nats).
      kl_reverse: ``KL(q ‖ P_A)``.
      kl_per_position: ``(T,)`` chain-rule terms of ``kl``.
      kl_reverse_per_position: ``(T,)`` chain-rule terms of ``kl_reverse``.
      tv: exact sequence TV, or ``None`` when ``V^(T+1)`` exceeds ``max_sequences``.
      tv_lower: ``max_n`` TV between the laws of ``(x_{n-1}, x_n)`` (a lower bound).
      tv_upper: ``min(1, Σ_n E_ν[TV(P_A,n, q_n)], Pinsker and Bretagnolle–Huber in both directions)``.
    """

    kl: float
    kl_reverse: float
    kl_per_position: np.ndarray
    kl_reverse_per_position: np.ndarray
    tv: float | None
    tv_lower: float
    tv_upper: float


def _kl_tv_bound(kl: float) -> float:
    # Pinsker sqrt(KL/2) and Bretagnolle–Huber sqrt(1 − e^{−KL}); inf KL bounds nothing
    kl = max(kl, 0.0)  # a chain-rule sum can round to -1e-17
    return min(np.sqrt(kl / 2.0), np.sqrt(-np.expm1(-kl))) if np.isfinite(kl) else 1.0


@takes_instance
def sequence_bias(
    inst: MarkovInstance, b: Acceptance, rejection: RejectionRule = None, *, max_sequences: int = MAX_SEQUENCES
) -> SequenceBias:
    r"""Exact sequence-level bias of Algorithm 2 ``(b, P)`` on a Markov instance (beyond [Yin]; Remark 6).

    The output is a Markov chain with transitions ``P_A,n`` (:func:`~speculab.theory.output_law`), so

    .. math:: \mathrm{KL}(P_A \| q) = \sum_n E_{\nu_{n-1}}[\mathrm{KL}(P_{A,n} \| q_n)],\qquad
              \mathrm{KL}(q \| P_A) = \sum_n E_{\mu_{n-1}}[\mathrm{KL}(q_n \| P_{A,n})]

    (``ν``, ``μ``: output and target marginals; both chains start from ``x_0 ~ ρ``).
    The sequence TV is exact by enumeration when ``V^(T+1) ≤ max_sequences``, and
    always bracketed: ``tv_lower ≤ TV ≤ tv_upper`` (the sum of per-token losses
    bounds it by a hybrid argument); :func:`log_likelihood_ratio` estimates it by Monte Carlo.

    Per-token optimality does not carry over: Decoding-OPT (TV-optimal at every
    context) can have a larger sequence TV than Decoding-UNO, because it changes
    which contexts later positions see (an example with ``T = 2`` is in ``tests/test_tradeoff.py``).
    """
    prof = tradeoff_profile(inst, b, rejection)
    out, Q, rho = prof.output, inst.Q, inst.rho
    fwd, rev = markov_kl(rho, out, Q), markov_kl(rho, Q, out)
    kl, kl_rev = float(fwd.sum()), float(rev.sum())
    nu, mu = prof.marginals, inst.marginals()
    # the largest TV of the laws of a pair (x_{n-1}, x_n), one position at a time (O(V²) memory, not O(T V²))
    tv_lower = max(float(np.maximum(nu[n][:, None] * out[n] - mu[n][:, None] * Q[n], 0.0).sum()) for n in range(inst.T))
    tv_upper = min(1.0, float(prof.loss_per_position.sum()), _kl_tv_bound(kl), _kl_tv_bound(kl_rev))
    T, V = inst.T, inst.V
    tv = markov_tv(rho, out, Q, max_sequences=max_sequences) if V ** (T + 1) <= max_sequences else None
    return SequenceBias(
        kl=kl,
        kl_reverse=kl_rev,
        kl_per_position=fwd,
        kl_reverse_per_position=rev,
        tv=tv,
        tv_lower=tv_lower,
        tv_upper=tv_upper,
    )
