r"""Exact counts of speculative decoding with a fixed lookahead ``K`` (SPEC "L") and the [SDpp] cost model (SPEC "D").

Convention: ``p`` = draft, ``q`` = target ([SDpp] writes ``q`` for the draft and
``p`` for the target; every formula here is translated).

**Counting semantics** (exactly those of ``simulate(inst, SD(K=K), ...)``): a
round that starts at position index ``s`` (0-based, it produces ``x_{s+1}``
first) drafts ``min(K, T − s)`` tokens and makes one target call. It ends at the
first rejection (the token there comes from the rejection distribution), or after
``K`` accepted drafts with a **bonus** token from ``q`` at the next position if
that position exists (``s + K < T``), or at the end of the horizon. Drafts that
are not accepted are *discarded*: ``discarded = drafts − accepted``. Every output
token is an accepted draft, a rejection or a bonus: ``accepted + rejections + bonus = T``.

**Position-major chain.** On a Markov instance the state that matters at
position index ``t`` is the slot ``i = t − s`` inside the current round and the
last output token ``y``. With ``D_t[i, y] = P(slot i at t, x_t = y)``,
``D_0 = e_0 ⊗ ρ``, for ``i < K`` (a draft is verified at ``t``)

.. math::
    D_{t+1}[i+1] \mathrel{+}= D_t[i]\, A_t, \qquad
    D_{t+1}[0] \mathrel{+}= D_t[i]\, J_t ,

with the *accept* kernel ``A = b ⊙ P`` (draft ``y``, keep it) and the *reject* kernel
``J = D ⊗ R`` (``D = Σ_x (1 − b) p`` the rejection probability, ``R`` the rejection
distribution) of [Yin] Algorithm 2 — for SD ``A = min(P, Q)`` and ``J = (Q − P)_+`` —
and for ``i = K`` (bonus) ``D_{t+1}[0] += D_t[K] Q_t``. Slot 0 is a round start, so

* ``E[N_target] = Σ_t |D_t[0]|``, ``E[N_draft] = M Σ_t |D_t[0]| min(K, T − t)``,
* ``P(rejection at t) = Σ_{i<K} D_t[i] · D_t``, ``P(bonus at t) = |D_t[K]|``.

Batch SD ([Yin] Alg. 4) differs only at slot 0 (the root): it rejects with
``R_M = Π_m r_m`` and outputs ``u_M = R_M q^{M+1}`` there, so its root kernels are
``J_root = u_M`` and ``A_root = Q − u_M`` (Alg. 4 is unbiased: a root outputs ``q``).

This is SPEC L's ``α_i(y) = P(first i drafts accepted, y_i = y)`` propagated for
all round starts at once: ``O(T K V²)`` time, ``O(K V + V²)`` memory (the kernels
of one position at a time; a stationary instance's are derived once). When ``K ≥ T`` no
bonus is possible and the slots past the root behave alike, so two slots suffice:
``O(T V²)``, the cost of [Yin] Thm 1.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from array_api_compat import array_namespace

from speculab import kernels
from speculab._validate import as_float_array, as_lookahead, as_positive_int
from speculab.theory.batch import root_residual_chain
from speculab.theory.instance import MarkovInstance, compact, expect, per_position, push, scalar
from speculab.theory.rejections import acceptance_array, rejection_array
from speculab.theory._checks import takes_instance

__all__ = [
    "LookaheadCounts",
    "LookaheadChoice",
    "lookahead_counts",
    "best_lookahead",
    "latency_per_token",
    "iid_tokens_per_round",
    "iid_speedup",
]


def _check_time(x, name: str, *, positive: bool) -> float:
    ok = isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
    ok = ok and (x > 0 if positive else x >= 0)
    if not ok:
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}; got {x!r}")
    return float(x)


def _check_times(t_draft, t_target) -> tuple[float, float]:
    return _check_time(t_draft, "t_draft", positive=False), _check_time(t_target, "t_target", positive=True)


def latency_per_token(discard_rate, verification_rate, t_draft: float, t_target: float):
    r"""Latency per output token, [SDpp] eq. (5.1) (SPEC D).

    .. math:: \text{latency} = t_{draft}\,(1 + N_{discarded}/N) + (t_{target} - t_{draft})\, N_{target}/N

    It is linear in the two rates, so a policy whose (discard rate, verification
    rate) point is below-left of another's is faster on *every* hardware
    (``t_target ≥ t_draft``) — the reason [SDpp] Fig. 3 plots only the rates.

    Args:
      discard_rate: ``N_discarded / N`` (array-like, broadcasts).
      verification_rate: ``N_target / N`` (target calls per output token).
      t_draft: time of one draft forward pass (``c_1`` of [SDpp] Thm 4.2), ``>= 0``.
      t_target: time of one target forward pass (``c_1 + c_2``), ``> 0``.
    """
    t_draft, t_target = _check_times(t_draft, t_target)
    if not any(type(x).__module__.startswith("jax") for x in (discard_rate, verification_rate)):
        discard_rate = as_float_array(discard_rate, "discard_rate")  # numbers, lists, numpy (JAX stays traceable)
        verification_rate = as_float_array(verification_rate, "verification_rate")
        for name, rate in (("discard_rate", discard_rate), ("verification_rate", verification_rate)):
            if np.any(rate < 0):
                raise ValueError(f"{name} must be >= 0 (a count per output token); got {rate.min()}")
    out = t_draft * (1.0 + discard_rate) + (t_target - t_draft) * verification_rate
    return scalar(out) if out.ndim == 0 else out


class DraftRates:
    """What exact counts of a drafting method derive from ``draft_calls``, ``accepted``, ``oracle_calls`` and ``T``."""

    @property
    def discarded(self) -> float:
        """``E[N_discarded] = E[N_draft] − E[accepted]``."""
        return self.draft_calls - self.accepted

    @property
    def tokens(self) -> float:
        """``N = T`` (every run outputs ``T`` tokens)."""
        return float(self.T)

    @property
    def discard_rate(self) -> float:
        """``E[N_discarded] / N`` ([SDpp] §5.1; ``N = T`` is not random here)."""
        return self.discarded / self.T

    @property
    def verification_rate(self) -> float:
        """``E[N_target] / N`` ([SDpp] §5.1)."""
        return self.oracle_calls / self.T


@dataclass(frozen=True)
class LookaheadCounts(DraftRates):
    """Exact expected counts of one fixed-lookahead method on a Markov instance.

    The count names match :class:`speculab.sim.Counts`: ``oracle_calls`` is
    ``N_target`` (= rounds), ``draft_calls`` is ``N_draft``, ``tokens`` is ``N = T``.

    Attributes:
      K: the lookahead as given (``None`` = ∞); rounds draft ``min(K, T − s)`` tokens per draft row.
      rejections_per_position: ``(T,)`` P(position ``n`` (index ``n − 1``) is a rejection).
      bonus_per_position: ``(T,)`` P(position ``n`` is a bonus token).
      accepted_per_position: ``(T,)`` P(position ``n`` is an accepted draft).
      oracle_calls_per_position: ``(T,)`` P(a round — one target call — starts at position ``n``).
      M: draft rows per round (batch SD drafts ``M`` continuations; 1 otherwise).
    """

    K: int | None
    rejections_per_position: np.ndarray
    bonus_per_position: np.ndarray
    accepted_per_position: np.ndarray
    oracle_calls_per_position: np.ndarray
    M: int = 1

    # -- sizes -----------------------------------------------------------------
    @property
    def T(self) -> int:
        return int(self.rejections_per_position.shape[0])

    @property
    def K_effective(self) -> int:
        """``min(K, T)`` (``T`` for ``K = None``): what the simulator uses."""
        return self.T if self.K is None else min(self.K, self.T)

    # -- expected counts (same names as Counts) -----------------------------------
    @property
    def rejections(self) -> float:
        """``E[N_rej]``; equals [Yin] Thm 1 (T1) for SD when ``K ≥ T``."""
        return scalar(self.rejections_per_position.sum())

    @property
    def bonus(self) -> float:
        return scalar(self.bonus_per_position.sum())

    @property
    def accepted(self) -> float:
        return scalar(self.accepted_per_position.sum())

    @property
    def oracle_calls(self) -> float:
        """``E[N_target]``: target forward passes = rounds."""
        return scalar(self.oracle_calls_per_position.sum())

    @property
    def draft_calls(self) -> float:
        """``E[N_draft] = M Σ_s P(round starts at s) · min(K, T − s)``."""
        drafts = kernels.drafts_per_round(self.M, self.K_effective, self.T - np.arange(self.T))
        return scalar(self.oracle_calls_per_position @ drafts)

    @property
    def tokens_per_round(self) -> float:
        r"""``T / E[N_target]`` — a ratio of expectations (the long-run tokens per round).

        This is the quantity of Leviathan et al.'s ``(1 − α^{K+1})/(1 − α)``; it is
        *not* ``E[T / N_target]``, the mean of per-run ratios that
        ``Counts.estimate("tokens_per_round")`` reports.
        """
        return self.T / self.oracle_calls

    @property
    def final_round_all_accepted(self) -> float:
        """P(the last round reaches the horizon with all drafts accepted), so it outputs no target token.

        Equals ``E[N_draft] + E[N_target] − N − E[N_discarded]`` (for one draft row): the only gap in
        [SDpp]'s identity ``N_draft + N_target = N + N_discarded`` on a finite horizon.
        """
        return self.oracle_calls - self.rejections - self.bonus

    # -- [SDpp] cost model ---------------------------------------------------------
    def total_time(self, t_draft: float, t_target: float) -> float:
        r"""Expected total time, [SDpp] Lemma 3.1 / eq. (3.2) (SPEC D; the convention of this module).

        .. math:: T_{total} = t_{draft} N + t_{draft} N_{discarded} + (t_{target} - t_{draft}) N_{target}

        with ``N = T``. It charges every output token one draft pass; it is
        :meth:`forward_pass_time` minus ``t_draft ·`` :attr:`final_round_all_accepted` (one draft row).
        """
        t_draft, t_target = _check_times(t_draft, t_target)
        return t_draft * (self.T + self.discarded) + (t_target - t_draft) * self.oracle_calls

    def forward_pass_time(self, t_draft: float, t_target: float) -> float:
        r"""Expected time counted pass by pass, [SDpp] eq. (3.1): :math:`t_{draft} N_{draft} + t_{target}
        N_{target}`."""
        t_draft, t_target = _check_times(t_draft, t_target)
        return t_draft * self.draft_calls + t_target * self.oracle_calls

    def latency(self, t_draft: float, t_target: float) -> float:
        """Expected time per output token, [SDpp] eq. (5.1): ``total_time / T`` (see :func:`latency_per_token`)."""
        return latency_per_token(self.discard_rate, self.verification_rate, t_draft, t_target)


def _rule(inst: MarkovInstance, b, rejection, M) -> tuple[np.ndarray, ...]:
    """The compact arrays the kernels are built from: ``(P, Q)`` for SD, ``(P, Q, b, R)`` for any other rule."""
    if M > 1 and (b is not None or rejection is not None):
        raise ValueError("M > 1 (batch SD, [Yin] Alg. 4) uses SD's rule; give no b or rejection with it")
    if b is None and rejection is None:
        return compact(inst.P), compact(inst.Q)
    b_arr = acceptance_array(inst, b if b is not None else lambda p, q: kernels.sd_acceptance(p, q))
    R = rejection_array(inst, b_arr, rejection)
    return compact(inst.P), compact(inst.Q), compact(b_arr), compact(R)


def _checked_root_law(a, q):
    """A root verifier's accepted law, refused unless ``0 ≤ a ≤ q`` (to round-off) with the shape of ``q``."""
    a = np.asarray(a, dtype=float)
    if a.shape != np.shape(q) or not np.all(np.isfinite(a)) or np.any(a < -1e-12) or np.any(a > q + 1e-12):
        raise ValueError(
            "root(p, q) must return the accepted law a of the root's verifier, with 0 <= a <= q "
            f"entrywise and the shape of q {np.shape(q)}; got shape {a.shape}, range "
            f"[{np.nanmin(a) if a.size else 0:.3g}, {np.nanmax(a) if a.size else 0:.3g}]"
        )
    return a


def lookahead_kernels(M, p, q, b=None, R=None, *, root=None) -> tuple:
    """At one position (array API): the accept kernel ``A``, reject kernel ``J`` and rejection mass ``D``, the
    root's ``(A_root, J_root, D_root)``, and ``Q`` (the bonus kernel); ``root(p, q)``, when given, is the
    accepted law ``a`` of another root verifier of the ``M`` drafts (root kernels ``a``, ``q − a``)."""
    xp = array_namespace(p, q)
    if b is None:  # SD: A = min(P, Q), J = (Q − P)_+, D = TV
        A, J, D = xp.minimum(p, q), kernels.excess(q, p), kernels.tv(p, q)
    else:
        D = kernels.rejection_mass(b, p)  # (A,)
        A, J = b * p, D[..., None] * R
    if M == 1:
        return A, J, D, A, J, D, q
    if root is not None:
        a = _checked_root_law(root(p, q), q)
        return A, J, D, a, q - a, xp.sum(q - a, axis=-1), q
    u, R_M = root_residual_chain(q, p, M)  # u_M = R_M q^{M+1}: output by a root rejection
    return A, J, D, q - u, u, R_M, q


def lookahead_slots(T: int, K: int | None) -> tuple[int, bool, int]:
    """``(k, bonus_slot, n_slots)`` of the slot chain: drafts per round ``k = min(K, T)``, whether a bonus
    position can follow them (``k < T``), and the slots kept — 0 = round start (root), 1..k-1 in the
    round, k = bonus; without a bonus the slots past the root are alike and one is kept."""
    k = T if K is None else min(K, T)
    bonus_slot = k < T
    return k, bonus_slot, k + 1 if bonus_slot else min(k, 2)


def lookahead_advance(S, ker: tuple, k: int, bonus_slot: bool):
    """One position of the slot chain (array API; the numpy loop and the JAX scan share it).

    ``S[i, y] = P(this position is slot i of its round, previous token y)``; ``ker`` from
    :func:`lookahead_kernels`. Returns the next ``S`` and the position's (rejection,
    bonus, accepted draft, round start) probabilities.
    """
    xp = array_namespace(S)
    A, J, D, A0, J0, D0, Q = ker
    root = S[0]
    rest = xp.sum(S[1:k], axis=0) if bonus_slot else xp.sum(S[1:], axis=0)  # slots past the root, alike
    start = xp.sum(root)
    rej = expect(root, D0) + expect(rest, D)
    acc = start + xp.sum(rest) - rej
    if bonus_slot:  # slot 0 ← rejections and the bonus; 1 ← an accepted root; i + 1 ← i (i = 1..k-1)
        first = push(root, J0) + push(rest, J) + push(S[k], Q)
        nxt = xp.concat([first[None, :], push(root, A0)[None, :], push(S[1:k], A)], axis=0)
        return nxt, (rej, xp.sum(S[k]), acc, start)
    first = push(root, J0) + push(rest, J)
    nxt = xp.stack([first, push(root, A0) + push(rest, A)]) if S.shape[0] == 2 else first[None, :]
    return nxt, (rej, xp.zeros_like(start), acc, start)


@takes_instance
def lookahead_counts(
    inst: MarkovInstance, K: int | None, *, b=None, rejection=None, M: int = 1, root=None
) -> LookaheadCounts:
    r"""Exact expected counts of a fixed-lookahead method with the bonus token (SPEC L).

    Propagates the position-major chain of the module docstring:
    ``D_t[i, y] = P(position index t is slot i of its round, x_t = y)`` with the
    accept kernel ``b ⊙ P``, the reject kernel ``(Σ(1 − b)p) R`` and the bonus
    kernel ``Q``. With the default rule (SD) it matches ``simulate(inst, SD(K=K))`` in
    every count; ``K ≥ T`` (or ``None``) is [Yin] Thm 1; on a stationary
    context-free instance with ``α = 1 − TV(p, q)`` the rounds away from the horizon
    end output ``(1 − α^{K+1})/(1 − α)`` tokens on average (Leviathan et al.).

    Args:
      inst: the Markov instance (``P`` = draft, ``Q`` = target).
      K: lookahead (int ``>= 1``) or ``None`` for ``K = ∞``.
      b, rejection: any rule of [Yin] Algorithm 2, in the forms of
        :func:`~speculab.theory.expected_rejections` (``None``: speculative decoding);
        biased rules are followed along their own output chain.
      M: drafts per round at the root, [Yin] Algorithm 4 (batch SD, SD's rule only);
        ``K = None`` then gives [Yin] Thm 3.
      root: with ``M > 1``, another verifier of the root's drafts as its accepted law
        ``root(p, q) -> a`` ``(..., V)`` (``a(y) = P(y output, a draft accepted)``; e.g.
        :meth:`speculab.methods.OptimalMultiDraft.accepted_law`); ``None``: Algorithm 4's.

    Returns:
      :class:`LookaheadCounts`. Cost ``O(T min(K, 2) V²)`` … ``O(T K V²)``.

    Example:
      >>> inst = MarkovInstance.context_free([0.5, 0.5], [0.8, 0.2], T=1000)
      >>> round(lookahead_counts(inst, 3).tokens_per_round, 2)   # α = 0.7: (1 − 0.7⁴)/0.3
      2.53
    """
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"inst must be a MarkovInstance; got {type(inst).__name__}")
    K = as_lookahead(K)
    M = as_positive_int(M, "M")
    if root is not None and (M == 1 or not callable(root)):
        raise ValueError(
            f"root must be a function root(p, q) -> accepted law, for a verifier of M > 1 drafts "
            f"(M = 1 is the rule's own root); got root={root!r} with M={M}"
        )
    T, V = inst.T, inst.V
    k, bonus_slot, n_slots = lookahead_slots(T, K)
    rows = per_position(lambda *arrays: lookahead_kernels(M, *arrays, root=root), T, *_rule(inst, b, rejection, M))
    dtype = np.result_type(inst.rho, inst.P)
    rej, bonus, acc, start = (np.zeros(T, dtype=dtype) for _ in range(4))
    S = np.zeros((n_slots, V), dtype=dtype)  # (slot, last token)
    S[0] = inst.rho
    for t, ker in enumerate(rows):
        S, (rej[t], bonus[t], acc[t], start[t]) = lookahead_advance(S, ker, k, bonus_slot)
    return LookaheadCounts(
        K=K,
        rejections_per_position=rej,
        bonus_per_position=bonus,
        accepted_per_position=acc,
        oracle_calls_per_position=start,
        M=M,
    )


@dataclass(frozen=True)
class LookaheadChoice:
    """The fixed lookahead with the lowest [SDpp] eq. (5.1) latency.

    Attributes:
      K: the best lookahead (the smallest on ties).
      latency: its expected time per token.
      latencies: ``(max_K,)`` latency of ``K = 1..max_K``.
      counts: the :class:`LookaheadCounts` of the best ``K``.
    """

    K: int
    latency: float
    latencies: np.ndarray
    counts: LookaheadCounts


@takes_instance
def best_lookahead(inst: MarkovInstance, t_draft: float, t_target: float, max_K: int = 20) -> LookaheadChoice:
    r"""The fixed ``K ∈ {1..max_K}`` that minimises the exact latency per token, [SDpp] eq. (5.1).

    .. math:: K^* = \arg\min_K\ t_{draft}(1 + E[N_{discarded}]/T) + (t_{target} - t_{draft}) E[N_{target}]/T

    Args:
      inst: the Markov instance.
      t_draft, t_target: forward-pass times of the draft and target models.
      max_K: largest lookahead tried (``>= 1``); cost ``O(T max_K² V²)``.
    """
    t_draft, t_target = _check_times(t_draft, t_target)
    max_K = as_positive_int(max_K, "max_K")
    all_counts = [lookahead_counts(inst, K) for K in range(1, max_K + 1)]
    lat = np.array([c.latency(t_draft, t_target) for c in all_counts])
    i = int(np.argmin(lat))
    return LookaheadChoice(K=i + 1, latency=float(lat[i]), latencies=lat, counts=all_counts[i])


def iid_tokens_per_round(alpha, K: int):
    r"""Leviathan et al.'s expected tokens per round with i.i.d. acceptance ``α``, lookahead ``K`` and the bonus.

    .. math:: E[\text{tokens}] = \sum_{i=0}^{K} \alpha^i = \frac{1 - \alpha^{K+1}}{1 - \alpha}
              \quad (= K + 1 \text{ at } \alpha = 1)

    Args:
      alpha: acceptance probability ``1 − TV(p, q)``, in ``[0, 1]`` (broadcasts).
      K: lookahead ``>= 1``.
    """
    K = as_positive_int(K, "K")
    a = np.asarray(alpha, dtype=np.float64)
    if np.any(~((a >= 0) & (a <= 1))):
        raise ValueError(f"alpha must lie in [0, 1]; got {alpha!r}")
    out = (a[..., None] ** np.arange(K + 1)).sum(axis=-1)  # no division: exact at α = 1
    return float(out) if out.ndim == 0 else out


def iid_speedup(alpha, K: int, c: float):
    r"""Leviathan et al.'s walltime improvement factor (SPEC L).

    .. math:: \frac{1 - \alpha^{K+1}}{(1 - \alpha)(K c + 1)}, \qquad c = t_{draft} / t_{target}

    (rounds cost ``K c + 1`` target-pass units and output :func:`iid_tokens_per_round` tokens).
    """
    c = _check_time(c, "c", positive=False)
    return iid_tokens_per_round(alpha, K) / (as_positive_int(K, "K") * c + 1.0)
