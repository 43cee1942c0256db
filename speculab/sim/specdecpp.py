r"""SpecDec++ simulator on Markov instances ([SDpp] Alg. 1; SPEC §1, D) and acceptance heads.

Convention: ``p`` = draft, ``q`` = target. [SDpp] writes ``q`` for the draft and
``p`` for the target; everything here is translated.

**Algorithm.** A round drafts one token at a time from ``p``. After drafting
``Y_k`` the acceptance head predicts ``a_k ≈ P(Y_k accepted | Y_{<k} accepted)
= min(1, q(Y_k)/p(Y_k))`` (context: the previous *drafted* token), and drafting
stops when

.. math:: 1 - \prod_{i \le k} a_i > h \quad\text{or}\quad k = \text{cap} \quad\text{or the horizon is reached.}

The drafts are then verified as in SD with one target call: accept ``Y_i`` with
probability ``min(1, q/p)``; at the first rejection output ``[q − p]_+`` and end
the round; if all drafts are accepted and a next position exists, output a
**bonus** token from ``q`` there. The bonus is free exactly as in SD: the one
target call that scores the drafts also computes ``q`` at the next position
([SDpp] Alg. 1, "sample y' from p_{K+1}" in their letters). So ``h = 1`` (never
stop early) is ``SD(K=cap)``. With ``h = 0`` drafting continues while every draft
is certain to be accepted (``Π a_i = 1``) and stops at the first uncertain one;
this is ``SD(K=1)`` only if no draft is ever certain. Either way no draft
follows an uncertain one, so the only discarded drafts are the rejected ones
(``discarded = rejections`` run by run).

Unbiased whatever the head: the stopping decisions depend only on the drafts,
and once a draft is accepted it *is* the output prefix, so every position is
decided by an SD verification against ``q`` given the output prefix.

**Vectorisation (exact in law).** Runs are advanced position by position, as in
:mod:`speculab.sim.numpy_engine`: at each position a run verifies the draft it
samples there, or draws a bonus token. Unlike SD, the *number* of drafts of a
round depends on drafts after its first rejection (the head keeps reading the
draft chain until it stops), so those drafts cannot be skipped: at a rejection
in a round that had not stopped, the rest of that round's draft chain (from the
rejected draft token, not from the correction) is drawn at once and only
counted. Each draft is drawn from the same conditional law and every
verification uniform is independent of the drafts, so the joint law of outputs
and counts is that of the literal algorithm (checked against exact enumeration
in ``tests/test_specdecpp.py``).

**Heads.** A head is ``head(t, prev, x) -> a`` with ``t`` the position index
(an int, ``0..T−1``), ``prev`` the previous tokens ``(n,)`` and ``x`` the drafted
tokens ``(n,)``; it returns ``(n,)`` predictions in ``[0, 1]``. ``head=None`` is
the oracle ``min(1, q/p)``. :func:`noisy_head` and :func:`miscalibrated_head`
build imperfect heads; like a trained head they are deterministic functions of
``(t, prev, x)`` (their randomness is drawn once, at construction).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.special import expit

from speculab._validate import as_generator
from speculab.methods import SpecDecPP
from speculab.sim.counts import Counts
from speculab.sim.numpy_engine import run_chunks, sample_rows
from speculab.theory.instance import MarkovInstance
from speculab.theory.rejections import sd_arrays

__all__ = ["simulate_specdecpp", "TableHead", "oracle_head", "noisy_head", "miscalibrated_head"]


# -- acceptance heads ------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TableHead:
    """A head given by a table: ``head(t, prev, x) = table[t, prev, x]``.

    Attributes:
      table: ``(T, V, V)`` predicted acceptance probabilities, in ``[0, 1]`` (copied, read-only).
    """

    table: np.ndarray

    def __post_init__(self):
        arr = np.array(self.table, dtype=np.float64, copy=True)
        if arr.ndim != 3 or arr.shape[1] != arr.shape[2]:
            raise ValueError(f"table must have shape (T, V, V); got {arr.shape}")
        if not np.all((arr >= 0) & (arr <= 1)):
            raise ValueError("table must hold probabilities in [0, 1] (and no NaN)")
        arr.setflags(write=False)
        object.__setattr__(self, "table", arr)

    def __call__(self, t: int, prev: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.table[t, prev, x]


def _check_instance(inst) -> MarkovInstance:
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"inst must be a MarkovInstance; got {type(inst).__name__}")
    return inst


def _logit(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):  # a ∈ {0, 1} maps to ∓inf on purpose
        return np.log(a) - np.log1p(-a)


def oracle_head(inst: MarkovInstance) -> TableHead:
    r"""The oracle head :math:`a(t, y, x) = \min(1, Q[t, y, x] / P[t, y, x])` (what ``head=None`` uses)."""
    return TableHead(sd_arrays(_check_instance(inst))[0])


def noisy_head(inst: MarkovInstance, noise: float, key, *, eps: float = 0.01) -> TableHead:
    r"""The oracle head with Gaussian noise on its logit: a fixed, imperfect head.

    .. math:: a(t, y, x) = \sigma\big(\operatorname{logit}(\operatorname{clip}(a^*, \varepsilon, 1 - \varepsilon)) + s\, Z_{t,y,x}\big),
              \qquad a^* = \min(1, q/p),\ Z \sim N(0, 1) \text{ i.i.d.}

    The clip mimics a sigmoid head that is never exactly certain (a trained
    [SDpp] head outputs ``sigmoid(f)``); without it the noise could not move
    ``a* = 1``. ``noise = 0, eps = 0`` is the oracle (up to round-off).

    Args:
      inst: the Markov instance.
      noise: logit noise scale ``s >= 0``.
      key: int seed or ``np.random.Generator`` for ``Z`` (drawn once, here).
      eps: clip level ``ε ∈ [0, 1/2)``.
    """
    inst = _check_instance(inst)
    if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not (math.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be a finite number >= 0; got {noise!r}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (0 <= eps < 0.5):
        raise ValueError(f"eps must be a number in [0, 0.5); got {eps!r}")
    rng = as_generator(key)
    a = np.clip(sd_arrays(inst)[0], eps, 1.0 - eps)
    z = rng.standard_normal(a.shape)  # (T, V, V)
    return TableHead(expit(_logit(a) + noise * z))


def miscalibrated_head(inst: MarkovInstance, temperature: float) -> TableHead:
    r"""The oracle head with a temperature on its logit: :math:`a = \sigma(\operatorname{logit}(a^*) / \tau)`.

    ``τ > 1`` pulls predictions towards 1/2 (under-confident on good tokens: it
    stops early); ``τ < 1`` pushes them to 0 or 1 (over-confident). Certain
    predictions ``a* ∈ {0, 1}`` are kept; ``τ = 1`` is the oracle. The ranking of
    tokens is preserved, but the stopping rule uses a *product* of predictions,
    so this is not a mere change of ``h``.

    Args:
      inst: the Markov instance.
      temperature: ``τ > 0``.
    """
    inst = _check_instance(inst)
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not (
        math.isfinite(temperature) and temperature > 0
    ):
        raise ValueError(f"temperature must be a finite number > 0; got {temperature!r}")
    return TableHead(expit(_logit(sd_arrays(inst)[0]) / temperature))


def _predictor(head: Callable | None, B: np.ndarray) -> Callable[[int, np.ndarray, np.ndarray], np.ndarray]:
    """``head`` with its output checked (``None``: the oracle table ``B``)."""
    if head is None:
        return lambda t, prev, x: B[t, prev, x]

    def predict(t: int, prev: np.ndarray, x: np.ndarray) -> np.ndarray:
        a = np.asarray(head(t, prev, x), dtype=np.float64)
        if a.shape != x.shape:
            raise ValueError(f"head(t, prev, x) must return an array of shape {x.shape}; got {a.shape}")
        if not np.all((a >= 0) & (a <= 1)):
            raise ValueError(f"head(t, prev, x) must return probabilities in [0, 1] (no NaN); at t={t} got {a}")
        return a

    return predict


# -- simulator ----------------------------------------------------------------
def _chunk_specdecpp(inst: MarkovInstance, B, cR, predict, h: float, cap: int, n: int,
                     rng: np.random.Generator, keep: bool) -> Counts:
    """``n`` runs of SpecDec++ (module docstring), position by position, vectorised across runs."""
    T, V = inst.T, inst.V
    cP = np.cumsum(inst.P, axis=-1)
    cQ = np.cumsum(inst.Q, axis=-1)
    runs = np.arange(n)

    def stops(t: int, prod: np.ndarray, count: np.ndarray) -> np.ndarray:
        """Drafting stops after the draft at position index ``t`` ([SDpp] Alg. 1 with the cap and horizon)."""
        return (1.0 - prod > h) | (count >= cap) | (t + 1 >= T)

    def rest_of_chain(t: int, y: np.ndarray, prod: np.ndarray, count: np.ndarray) -> np.ndarray:
        """Draft on from ``y`` (drafted at ``t``) until the rule stops; return how many more drafts."""
        extra = np.zeros(y.size, dtype=np.int64)
        alive = np.arange(y.size)
        y, prod = y.copy(), prod.copy()
        for s in range(t + 1, T):
            z = sample_rows(cP[s, y[alive]], rng.random(alive.size))
            extra[alive] += 1
            prod[alive] *= predict(s, y[alive], z)
            y[alive] = z
            alive = alive[~stops(s, prod[alive], count[alive] + extra[alive])]
            if alive.size == 0:
                break
        return extra

    prev = sample_rows(np.broadcast_to(np.cumsum(inst.rho), (n, V)), rng.random(n))
    is_bonus = np.zeros(n, dtype=bool)  # position t is the bonus token of a fully accepted round
    count = np.zeros(n, dtype=np.int64)  # drafts so far in the current round
    prod = np.ones(n)  # Π a_i over the current round's drafts
    oracle = np.ones(n, dtype=np.int64)
    drafts = np.zeros(n, dtype=np.int64)
    accepted = np.zeros(n, dtype=np.int64)
    rejections = np.zeros(n, dtype=np.int64)
    bonus = np.zeros(n, dtype=np.int64)
    rate = np.zeros(T)
    seq = np.empty((n, T + 1), dtype=np.int64) if keep else None
    if keep:
        seq[:, 0] = prev

    for t in range(T):
        x = np.empty(n, dtype=np.int64)
        if is_bonus.any():
            x[is_bonus] = sample_rows(cQ[t, prev[is_bonus]], rng.random(int(is_bonus.sum())))
            bonus += is_bonus

        r = runs[~is_bonus]  # runs that draft and verify at t
        a = prev[r]
        y = sample_rows(cP[t, a], rng.random(r.size))
        drafts[r] += 1
        count[r] += 1
        prod[r] *= predict(t, a, y)
        stop = stops(t, prod[r], count[r])
        ok = rng.random(r.size) < B[t, a, y]
        x[r[ok]] = y[ok]
        accepted[r[ok]] += 1
        rej = r[~ok]
        if rej.size:
            x[rej] = sample_rows(cR[t, prev[rej]], rng.random(rej.size))
            rejections[rej] += 1
            cont = ~ok & ~stop  # rejected before the round stopped drafting: its later drafts are discarded
            if cont.any():
                drafts[r[cont]] += rest_of_chain(t, y[cont], prod[r[cont]], count[r[cont]])
        rate[t] = rej.size / n

        # A round ends at a rejection or a bonus token; one that stopped with all drafts accepted gets a bonus next.
        ended = is_bonus.copy()
        ended[rej] = True
        if t + 1 < T:
            oracle[ended] += 1
        count[ended] = 0
        prod[ended] = 1.0
        is_bonus = np.zeros(n, dtype=bool)
        is_bonus[r[ok & stop]] = True
        prev = x
        if keep:
            seq[:, t + 1] = x

    return Counts(
        rejections=rejections, oracle_calls=oracle, draft_calls=drafts, accepted=accepted,
        discarded=drafts - accepted, bonus=bonus, tokens=np.full(n, T, dtype=np.int64),
        rejection_rate=rate, sequences=seq,
    )


def simulate_specdecpp(inst: MarkovInstance, method: SpecDecPP, n_runs: int, rng: np.random.Generator, *,
                       return_sequences: bool = False, progress: bool = False) -> Counts:
    """Simulate ``n_runs`` runs of SpecDec++ on ``inst``; called by :func:`speculab.sim.simulate`.

    Counts as in :class:`~speculab.sim.Counts`: ``oracle_calls`` = rounds
    (``N_target``), ``draft_calls`` every drafted token (``N_draft``, including
    those drafted after a round's first rejection), ``discarded = draft_calls − accepted``,
    ``bonus`` the tokens drawn from ``q`` after a fully accepted round.

    Args:
      inst: the Markov instance (``P`` = draft, ``Q`` = target).
      method: ``SpecDecPP(h, head=None, cap=20)``.
      n_runs: number of runs.
      rng: the generator (consumed).
      return_sequences: also return the ``(n_runs, T + 1)`` tokens.
      progress: progress bar over chunks.
    """
    inst = _check_instance(inst)
    if not isinstance(method, SpecDecPP):
        raise ValueError(f"method must be a SpecDecPP; got {method!r}")
    B, R = sd_arrays(inst)
    cR = np.cumsum(R, axis=-1)
    predict = _predictor(method.head, B)
    chunk = lambda n: _chunk_specdecpp(inst, B, cR, predict, float(method.h), method.cap, n, rng, return_sequences)  # noqa: E731
    return run_chunks(chunk, n_runs, progress)
