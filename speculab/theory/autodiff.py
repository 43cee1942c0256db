r"""The exact expectations in JAX, differentiable with respect to the kernels: T1, T3, the lookahead counts, latency.

Each function runs the numpy theory's own per-position step — written once
against the array API: :func:`~speculab.theory.instance.push` /
:func:`~speculab.theory.instance.expect` for T1,
:func:`~speculab.theory.batch.batch_advance` for T3,
:func:`~speculab.theory.lookahead.lookahead_advance` for the lookahead counts — inside
``jax.lax.scan`` over positions, so the numbers are the numpy theory's (to float
round-off) and ``jax.grad`` differentiates them, e.g. with respect to the logits
of a draft model (:func:`draft_from_logits`).

Arguments are arrays, not a :class:`~speculab.theory.MarkovInstance` (whose
arrays are numpy and validated): ``P``, ``Q`` of shape ``(T', A', V)`` with
``T' ∈ {1, T}``, ``A' ∈ {1, V}`` (compact: one kernel for a stationary chain, one
row for a context-free one — what :func:`arrays_of` gives; numpy arrays are converted)
and ``rho`` of shape ``(V,)``; ``T`` is given when ``T' = 1``. Use float64
(``jax.config.update("jax_enable_x64", True)``) to compare with the numpy theory;
TV is not differentiable where ``p(x) = q(x)`` (JAX returns a subgradient there).
"""

from __future__ import annotations

import numpy as np

from speculab import kernels
from speculab._validate import SUM_ATOL, as_distribution, as_lookahead, as_positive_int, import_jax
from speculab.theory.batch import BatchProfile, batch_advance, batch_kernels
from speculab.theory.instance import MarkovInstance, compact
from speculab.theory.lookahead import (
    LookaheadCounts,
    latency_per_token,
    lookahead_advance,
    lookahead_kernels,
    lookahead_slots,
)
from speculab.theory.rejections import RejectionProfile, chain_advance
from speculab.theory._checks import takes_instance

__all__ = [
    "arrays_of",
    "draft_from_logits",
    "along_target",
    "sd_expected_rejections",
    "batch_expected_rejections",
    "lookahead_counts",
    "latency",
]


def _jax():
    return import_jax("speculab.theory.autodiff")


@takes_instance
def arrays_of(inst: MarkovInstance):
    """``(P, Q, rho, T)`` of an instance as JAX arrays, compact (a stationary kernel is passed once)."""
    _, jnp = _jax()
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"inst must be a MarkovInstance; got {type(inst).__name__}")
    return jnp.asarray(compact(inst.P)), jnp.asarray(compact(inst.Q)), jnp.asarray(inst.rho), inst.T


def _concrete(x) -> bool:
    """Whether ``x`` holds values (not a tracer of ``jax.grad`` / ``jit``), so that it can be checked."""
    jax, _ = _jax()
    return not isinstance(x, jax.core.Tracer)


def draft_from_logits(logits):
    """Row-stochastic kernels ``softmax(logits)`` along the last axis: a differentiable draft model.

    Logits that hold values (not under ``jax.grad``) must be finite.
    """
    jax, jnp = _jax()
    logits = jnp.asarray(logits)
    if _concrete(logits) and not bool(jnp.all(jnp.isfinite(logits))):
        raise ValueError("logits must be finite (no NaN or inf)")
    return jax.nn.softmax(logits, axis=-1)


def _inputs(P, Q, rho, T):
    """``(P, Q, rho, T)`` as JAX arrays with checked shapes: ``(T', A', V)`` kernels, ``T'`` and ``A'`` each 1 or
    full."""
    _, jnp = _jax()
    P, Q, rho = jnp.asarray(P), jnp.asarray(Q), jnp.asarray(rho)
    if P.ndim != 3 or Q.ndim != 3:
        raise ValueError(f"P and Q must have shape (T', A', V); got {P.shape} and {Q.shape}")
    V = P.shape[-1]
    if Q.shape[-1] != V or rho.shape != (V,):
        raise ValueError(f"P, Q and rho must share the vocabulary: shapes {P.shape}, {Q.shape}, {rho.shape}")
    for name, A in (("P", P), ("Q", Q)):
        if A.shape[1] not in (1, V):
            raise ValueError(f"{name} must have 1 or V = {V} rows per position (contexts); got shape {A.shape}")
    lengths = {P.shape[0], Q.shape[0]} - {1}
    if T is None:
        if not lengths:
            raise ValueError("T is needed when P and Q are stored once (stationary or context-free)")
        T = max(lengths)
    T = as_positive_int(T, "T")
    if lengths - {T}:
        raise ValueError(f"P and Q store {P.shape[0]} and {Q.shape[0]} positions; each must be 1 or T = {T}")
    for name, A in (("P", P), ("Q", Q), ("rho", rho)):  # values are checked where they exist (not while traced)
        if _concrete(A):
            as_distribution(np.asarray(A, dtype=np.float64), name, atol=_atol(A))
    return P, Q, rho, T


def _atol(A) -> float:
    """Row-sum tolerance: the package's for float64, float32's own resolution (``V`` terms) otherwise."""
    return SUM_ATOL if A.dtype == np.float64 else max(SUM_ATOL, 4 * A.shape[-1] * float(np.finfo(np.float32).eps))


def _scan(step, init, ker, P, Q, T):
    """``lax.scan`` of ``step(carry, ker(P_t, Q_t))`` over positions ``t = 0..T-1``."""
    jax, jnp = _jax()

    def at(A, t):
        return A[t] if A.shape[0] > 1 else A[0]

    return jax.lax.scan(lambda carry, t: step(carry, ker(at(P, t), at(Q, t))), init, jnp.arange(T))


def along_target(f, P, Q, rho, T: int | None = None):
    r"""Per position ``n``, :math:`E_{x_{n-1} \sim q}[f(p_n(\cdot|x_{n-1}), q_n(\cdot|x_{n-1}))]` for a row function
    ``f``.

    ``f = kernels.tv`` is [Yin] Thm 1; ``f = lambda p, q: kernels.kl(q, p)`` the distillation
    loss KL(q‖p) along the target's own text. Shape ``(T,)``.

    ``f`` is called on one position's rows, ``(A', V)`` each (array API, as :mod:`speculab.kernels`), and must
    return one real number per context: shape ``(A,)``, ``A`` the contexts of ``P`` and ``Q`` together (1 when both
    are context-free, else ``V``), or ``(1,)``, one number for every context (checked on the shapes, before the
    scan). Where ``A = 1`` an ``f`` of shape ``(V,)`` gives a number per token, not per context: refused, not
    averaged into a number that means nothing.
    """
    P, Q, rho, T = _inputs(P, Q, rho, T)
    _check_row_function(f, P, Q)
    return _scan(chain_advance, rho, lambda p, q: (f(p, q), q), P, Q, T)[1]


def _check_row_function(f, P, Q) -> None:
    """Refuse an ``f`` that does not give one real number per context on a position's rows (its output traced
    for shapes only: nothing is computed)."""
    jax, jnp = _jax()
    if not callable(f):
        raise ValueError(f"f must be a function f(p, q) of a position's rows; got {f!r}")
    A = max(P.shape[1], Q.shape[1])  # the contexts: 1 or V
    try:
        out = jax.eval_shape(f, *(jax.ShapeDtypeStruct(A.shape[1:], A.dtype) for A in (P, Q)))
    except TypeError:  # a string returned, say: not a JAX type
        out = "a value that is not an array"
    real = isinstance(out, jax.ShapeDtypeStruct) and (
        jnp.issubdtype(out.dtype, jnp.floating) or jnp.issubdtype(out.dtype, jnp.integer)
    )
    if not (real and out.shape in ((1,), (A,))):
        got = f"shape {out.shape}, {out.dtype}" if isinstance(out, jax.ShapeDtypeStruct) else out
        wanted = "(1,)" if A == 1 else f"({A},) or (1,)"
        raise ValueError(
            f"f(p, q) must return one real number per context, shape {wanted}, on rows of shapes "
            f"{P.shape[1:]} and {Q.shape[1:]}; got {got}"
        )


def sd_expected_rejections(P, Q, rho, T: int | None = None) -> RejectionProfile:
    r"""[Yin] Thm 1, :math:`\sum_n E_{x \sim q}[\mathrm{TV}(p_n, q_n)]`, in JAX (see
    :func:`speculab.theory.sd_expected_rejections`)."""
    return RejectionProfile(rejections_per_position=along_target(kernels.tv, P, Q, rho, T))


def batch_expected_rejections(P, Q, rho, M, T: int | None = None) -> BatchProfile:
    """[Yin] Thm 3 for ``M`` drafts, in JAX (see :func:`speculab.theory.batch_expected_rejections`)."""
    P, Q, rho, T = _inputs(P, Q, rho, T)
    M = np.inf if M == np.inf else as_positive_int(M, "M")
    _, (rej, sd, root) = _scan(batch_advance, (rho, rho), lambda p, q: batch_kernels(p, q, M), P, Q, T)
    return BatchProfile(rejections_per_position=rej, sd_rejections_per_position=sd, oracle_calls_per_position=root, M=M)


def lookahead_counts(P, Q, rho, K: int | None, *, M: int = 1, T: int | None = None) -> LookaheadCounts:
    """Exact counts of SD (``M = 1``) or batch SD with lookahead ``K``, in JAX (see
    :func:`speculab.theory.lookahead_counts`); every count of the result is differentiable."""
    _, jnp = _jax()
    P, Q, rho, T = _inputs(P, Q, rho, T)
    K, M = as_lookahead(K), as_positive_int(M, "M")
    k, bonus_slot, n_slots = lookahead_slots(T, K)
    S = jnp.zeros((n_slots, rho.shape[-1]), dtype=rho.dtype).at[0].set(rho)

    def step(S, ker):
        return lookahead_advance(S, ker, k, bonus_slot)

    _, (rej, bonus, acc, start) = _scan(step, S, lambda p, q: lookahead_kernels(M, p, q), P, Q, T)
    return LookaheadCounts(
        K=K,
        rejections_per_position=rej,
        bonus_per_position=bonus,
        accepted_per_position=acc,
        oracle_calls_per_position=start,
        M=M,
    )


def latency(P, Q, rho, K: int, t_draft: float, t_target: float, *, T: int | None = None):
    """Expected time per token of SD with lookahead ``K``, [SDpp] eq. (5.1), from the exact counts (differentiable)."""
    c = lookahead_counts(P, Q, rho, K, T=T)
    return latency_per_token(c.discard_rate, c.verification_rate, t_draft, t_target)
