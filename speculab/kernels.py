"""Array-API building blocks of verification rules, written once for every engine.

Each function takes arrays of any library that implements the Python array API —
numpy, torch, JAX — through ``array-api-compat`` (``xp = array_namespace(x)``,
then ``xp.…``, as scipy does), and returns arrays of the same library on the
same device. The theory (numpy), the Markov simulators (numpy), the real-model
backend (torch) and a JAX engine therefore run the very same formula.

Nothing here validates its input (the public entry points do) and nothing
updates an array in place (JAX arrays are immutable). Every function acts on the
last axis and broadcasts over leading axes. Convention: ``p`` = draft, ``q`` = target.

Example:
  >>> import numpy as np
  >>> p, q = np.array([0.5, 0.5]), np.array([0.8, 0.2])
  >>> float(tv(p, q)), sd_acceptance(p, q).tolist()
  (0.3, [1.0, 0.4])
"""

from __future__ import annotations

from array_api_compat import array_namespace, device

__all__ = [
    "excess",
    "tv",
    "normalize",
    "residual",
    "sd_acceptance",
    "sd_rejection",
    "over_acceptance",
    "optimal_rejection",
    "kl",
    "js",
    "drain",
    "rejection_mass",
    "drafts_per_round",
    "root_acceptance",
    "gather",
    "argmax_mass",
    "sample_cumulative",
    "sample_index",
]


def excess(q, p):
    r"""The unnormalised residual :math:`(q - p)_+`, elementwise."""
    xp = array_namespace(q, p)
    return xp.clip(q - p, min=0.0)


def tv(p, q):
    r"""Total variation :math:`\mathrm{TV}(p, q) = \sum_x (p(x) - q(x))_+`.

    Exact for sub-normalised float input and never negative (unlike ``½ Σ|p − q|``
    or ``1 − Σ min(p, q)``, which can round below 0).
    """
    xp = array_namespace(p, q)
    return xp.sum(excess(p, q), axis=-1)


def normalize(w, fallback):
    """Rows of non-negative ``w`` divided by their sums; rows summing to 0 are replaced by finite ``fallback``
    (broadcast).

    A row sums to 0 only if it is all zeros, so adding ``fallback`` times the row's indicator
    is exact (it adds 0.0 elsewhere) and costs one pass over ``V`` instead of a select.
    """
    xp = array_namespace(w, fallback)
    s = xp.sum(w, axis=-1, keepdims=True)
    empty = s <= 0
    return w / xp.where(empty, 1.0, s) + xp.astype(empty, w.dtype) * fallback


def residual(q, p):
    r"""The residual distribution :math:`[q - p]_+ = (q - p)_+ / \sum_x (q(x) - p(x))_+`.

    Where ``p == q`` the residual is undefined and never sampled; those rows are all zeros.
    """
    xp = array_namespace(q, p)
    return normalize(excess(q, p), xp.zeros_like(q))


def sd_acceptance(p, q):
    r"""Speculative decoding's acceptance :math:`b(x) = \min(1, q(x)/p(x))` ([Yin] Alg. 1).

    The ratio is formed only where ``q < p`` (so it is ``< 1`` and a subnormal ``p``
    cannot overflow it); entries with ``p(x) = 0`` are never drafted and are set to 1.
    """
    xp = array_namespace(p, q)
    below = p > q
    return xp.where(below, q / xp.where(below, p, 1.0), 1.0)


def sd_rejection(p, q):
    r"""Speculative decoding's rejection law :math:`P = [q - p]_+` ([Yin] Alg. 1); rows whose residual has no
    mass (``p = q`` up to round-off: nothing is ever rejected there) fall back to ``q``."""
    return normalize(excess(q, p), q)


def over_acceptance(p, q, eps: float):
    r"""Biased over-acceptance :math:`b(x) = \min(1, (q(x) + \varepsilon)/p(x))`, [Yin] §4.2 (1 where ``p = 0``)."""
    xp = array_namespace(p, q)
    below = p > q + eps
    return xp.where(below, (q + eps) / xp.where(below, p, 1.0), 1.0)


def optimal_rejection(p, q, b):
    r"""The canonical optimal rejection distribution of [Yin] Thm 4: :math:`P^* \propto (q - b\,p)_+`.

    With ``A = (q − b p) / Σ(1 − b) p`` the normalisation of ``[A]_+`` cancels.
    Rows with ``(q − b p)_+ = 0`` (nothing is ever rejected there — up to round-off,
    e.g. ``p = (1, 3e-94)``, ``q = (1, 0)``) fall back to ``q``, never to zeros.
    """
    return normalize(excess(q, b * p), q)


def kl(p, q):
    r"""Kullback–Leibler divergence :math:`\sum_x p(x) (\log p(x) - \log q(x))`, natural log.

    Written as a difference of logs (no overflow for subnormal ``q``); ``inf`` exactly
    where ``p`` puts mass on a token with ``q = 0``. Argument order: ``kl(q, p)`` is
    the target-to-draft direction.
    """
    xp = array_namespace(p, q)
    pos = p > 0
    logp = xp.log(xp.where(pos, p, 1.0))
    logq = xp.log(xp.where(pos & (q > 0), q, 1.0))
    terms = xp.where(pos, p * (logp - logq), 0.0)
    return xp.where(xp.any(pos & (q == 0), axis=-1), xp.inf, xp.sum(terms, axis=-1))


def js(p, q):
    r"""Jensen–Shannon divergence (natural log, :math:`0 \le \mathrm{JS} \le \ln 2`).

    .. math:: \mathrm{JS}(p, q) = \tfrac12 \mathrm{KL}(p \| m) + \tfrac12 \mathrm{KL}(q \| m), \quad m = (p + q)/2,

    each term written as ``x log(2x / (p + q))``: the midpoint ``m`` itself would
    underflow to 0 for subnormal ``x`` and turn a negligible term into ``inf``.
    """
    xp = array_namespace(p, q)
    s = p + q

    def half_kl_to_mid(x):
        pos = x > 0
        ratio = xp.where(pos, 2.0 * x / xp.where(pos, s, 1.0), 1.0)
        return 0.5 * xp.sum(x * xp.log(ratio), axis=-1)

    return half_kl_to_mid(p) + half_kl_to_mid(q)


def root_acceptance(u, R, p):
    r"""Acceptance at a batch root of drafts against the unnormalised residual ``u = R q^m``: :math:`\min(1, u/(R\,p))`.

    Elementwise over tokens, ``(..., V)``; computed as a ratio only where ``R p > u``
    (so no overflow, and ``R = 0`` — never reached — gives 1). [Yin] Alg. 4 accepts
    draft ``m`` w.p. ``min(1, q^m(x)/p(x))``; with ``u_{m−1} = R_{m−1} q^m`` this is that.
    """
    xp = array_namespace(u, p)
    Rp = R[..., None] * p
    below = Rp > u
    return xp.where(below, u / xp.where(below, Rp, 1.0), 1.0)


def rejection_mass(b, p):
    r"""Probability that a draft ``x ~ p`` is refused by acceptance ``b``: :math:`D = \sum_x (1 - b(x))\, p(x)`
    ([Yin] Alg. 2)."""
    xp = array_namespace(b, p)
    return xp.sum((1.0 - b) * p, axis=-1)


def drafts_per_round(rows, k, remaining):
    """Tokens drafted by a round of ``rows`` draft rows and lookahead ``k`` that starts with ``remaining``
    positions left (an array): ``rows · min(k, remaining)``."""
    xp = array_namespace(remaining)
    return rows * xp.minimum(k, remaining)


def drain(u, R, p):
    r"""One step of batch speculative decoding's root recursion ([Yin] Alg. 4; SPEC T3), without division.

    .. math:: u_m = (u_{m-1} - R_{m-1}\, p)_+, \qquad R_m = \sum_x u_m(x),

    from ``u_0 = q``, ``R_0 = 1``. Then ``u_m = R_m q^{m+1}`` and
    ``R_m = \prod_{k \le m} \mathrm{TV}(q^k, p)`` (because ``r_m q^{m+1} = (q^m − p)_+``),
    so ``r_m = 0`` is harmless: every later ``u`` and ``R`` is exactly 0.

    Args:
      u: ``(..., V)`` unnormalised residual ``u_{m−1}``.
      R: ``(...)`` its mass ``R_{m−1}``.
      p: ``(..., V)`` draft distribution at the root.

    Returns:
      ``(u_m, R_m)``.
    """
    xp = array_namespace(u, p)
    nxt = excess(u, R[..., None] * p)
    return nxt, xp.sum(nxt, axis=-1)


def gather(a, index):
    """``a[..., index]`` per row: ``a`` of shape ``(..., V)``, integer ``index`` of shape ``(...)``."""
    xp = array_namespace(a, index)
    return xp.take_along_axis(a, index[..., None], axis=-1)[..., 0]


def argmax_mass(a):
    """The point mass at each row's first largest entry, shape ``(..., V)`` like ``a`` (the law of a greedy draw)."""
    xp = array_namespace(a)
    top = xp.argmax(a, axis=-1)[..., None]
    return xp.astype(xp.arange(a.shape[-1], device=device(a)) == top, a.dtype)


def sample_cumulative(cum, u):
    r"""Inverse-CDF sampling of one index per row from cumulative (unnormalised) weights.

    Returns the smallest ``i`` with ``cum[i] > u · cum[-1]``. With ``u ∈ [0, 1)`` a
    zero-weight index is never returned and the result never exceeds ``V − 1`` —
    provided the row has positive mass (callers ensure it). Simulators precompute
    ``cum`` once per table and call this in their inner loop.

    Args:
      cum: ``(..., V)`` cumulative sums of non-negative weights.
      u: ``(...)`` uniforms in ``[0, 1)``.
    """
    xp = array_namespace(cum, u)
    return xp.count_nonzero(cum <= u[..., None] * cum[..., -1:], axis=-1)


def sample_index(w, u):
    """One index per row drawn from unnormalised weights ``w`` ``(..., V)`` with uniforms ``u``

    (see :func:`sample_cumulative`).
    """
    xp = array_namespace(w, u)
    return sample_cumulative(xp.cumulative_sum(w, axis=-1), u)
