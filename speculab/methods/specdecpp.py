r"""SpecDec++ ([SDpp] Alg. 1; SPEC §1, D): adaptive candidate lengths by an acceptance head; its law and heads.

Convention: ``p`` = draft, ``q`` = target. [SDpp] writes ``q`` for the draft and
``p`` for the target; everything here is translated.

**Algorithm.** A round drafts one token at a time from ``p``. After drafting
``Y_k`` the acceptance head predicts ``a_k ≈ P(Y_k accepted | Y_{<k} accepted)
= min(1, q(Y_k)/p(Y_k))`` (context: the previous *drafted* token), and drafting
stops when

.. math:: 1 - \prod_{i \le k} a_i > h \quad\text{or}\quad k = \mathrm{max\_K} \quad\text{or the horizon is reached.}

The drafts are then verified as in SD with one target call: accept ``Y_i`` with
probability ``min(1, q/p)``; at the first rejection output ``[q − p]_+`` and end
the round; if all drafts are accepted and a next position exists, output a
**bonus** token from ``q`` there. The bonus is free exactly as in SD: the one
target call that scores the drafts also computes ``q`` at the next position
([SDpp] Alg. 1, "sample y' from p_{K+1}" in their letters). So ``h = 1`` (never
stop early) is ``SD(K=max_K)``. With ``h = 0`` drafting continues while every draft
is certain to be accepted (``Π a_i = 1``) and stops at the first uncertain one;
this is ``SD(K=1)`` only if no draft is ever certain. Either way no draft
follows an uncertain one, so the only discarded drafts are the rejected ones
(``discarded = rejections`` run by run).

Unbiased whatever the head: the stopping decisions depend only on the drafts,
and once a draft is accepted it *is* the output prefix, so every position is
decided by an SD verification against ``q`` given the output prefix.

**Vectorisation (exact in law).** Both engines run SpecDec++ from
:meth:`SpecDecPP.adaptive_drafting`, position by position: at each position a run verifies the draft it
samples there, or draws a bonus token. Unlike SD, the *number* of drafts of a
round depends on drafts after its first rejection (the head keeps reading the
draft chain until it stops), so those drafts cannot be skipped: at a rejection
in a round that had not stopped, the rest of that round's draft chain (from the
rejected draft token, not from the correction) is drawn at once and only
counted. Each draft is drawn from the same conditional law and every
verification uniform is independent of the drafts, so the joint law of outputs
and counts is that of the literal algorithm (checked against exact enumeration
in ``tests/test_specdecpp.py``; :mod:`speculab.sim.engine`). The JAX engine draws that same chain one
token per position instead (the chains still drafting share one pool of slots; :mod:`speculab.sim.jax_adaptive`).

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
from typing import Callable, ClassVar

import numpy as np
from scipy.special import expit

from speculab._validate import as_float_array, as_generator, as_positive_int
from speculab.counts import Expected
from speculab.methods.base import AdaptiveDrafting, Method, check_probability, param, register
from speculab.methods.capabilities import head_probability
from speculab.methods.sd import SD, sd_rule
from speculab.theory.instance import MarkovInstance, rowwise
from speculab.theory._checks import takes_instance

__all__ = ["SpecDecPP", "TableHead", "oracle_head", "noisy_head", "miscalibrated_head", "stops_drafting"]


# -- acceptance heads ------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TableHead:
    """A head given by a table: ``head(t, prev, x) = table[t, prev, x]``.

    Attributes:
      table: ``(T, V, V)`` predicted acceptance probabilities, in ``[0, 1]`` (copied, read-only).
    """

    table: np.ndarray

    def __post_init__(self):
        arr = np.asarray(self.table)
        if arr.ndim != 3 or arr.shape[1] != arr.shape[2]:
            raise ValueError(f"table must have shape (T, V, V); got {arr.shape}")

        def copy(part):  # a compact table (a stationary instance's) is checked and copied once
            part = np.array(part, dtype=np.float64, copy=True)
            if not np.all((part >= 0) & (part <= 1)):
                raise ValueError("table must hold probabilities in [0, 1] (and no NaN)")
            return part

        object.__setattr__(self, "table", rowwise(copy, arr))  # read-only

    def __call__(self, t: int, prev: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.table[t, prev, x]


def _check_instance(inst) -> MarkovInstance:
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"inst must be a MarkovInstance; got {type(inst).__name__}")
    return inst


def _check_head(head, inst) -> MarkovInstance:
    """``inst``, checked to be a Markov instance whose shape ``head``'s table (if it has one) fits."""
    if getattr(head, "reads_hidden_states", False):
        raise ValueError(
            "a head trained on a draft's hidden states (speculab.backends.heads) runs on real models "
            "only; on a Markov instance give head(t, prev, x) or a TableHead"
        )
    inst = _check_instance(inst)
    if isinstance(head, TableHead) and head.table.shape != (inst.T, inst.V, inst.V):
        raise ValueError(
            f"the head's table has shape {head.table.shape}; the instance needs {(inst.T, inst.V, inst.V)}"
        )
    return inst


def _logit(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):  # a ∈ {0, 1} maps to ∓inf on purpose
        return np.log(a) - np.log1p(-a)


def oracle_head(inst: MarkovInstance) -> TableHead:
    r"""The oracle head :math:`a(t, y, x) = \min(1, Q[t, y, x] / P[t, y, x])` (what ``head=None`` uses)."""
    return TableHead(rowwise(sd_rule, _check_instance(inst).P, inst.Q)[0])


def noisy_head(inst: MarkovInstance, noise: float, key, *, eps: float = 0.01) -> TableHead:
    r"""The oracle head with Gaussian noise on its logit: a fixed, imperfect head.

    .. math:: a(t, y, x) = \sigma\big(\operatorname{logit}(\operatorname{clip}(a^*, \varepsilon, 1 - \varepsilon))
              + s\, Z_{t,y,x}\big), \qquad a^* = \min(1, q/p),\ Z \sim N(0, 1) \text{ i.i.d.}

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
    a = np.clip(rowwise(sd_rule, inst.P, inst.Q)[0], eps, 1.0 - eps)
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
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, numbers.Real)
        or not (math.isfinite(temperature) and temperature > 0)
    ):
        raise ValueError(f"temperature must be a finite number > 0; got {temperature!r}")
    return TableHead(expit(_logit(rowwise(sd_rule, inst.P, inst.Q)[0]) / temperature))


def _predictor(head: Callable | None, B: np.ndarray) -> Callable[[int, np.ndarray, np.ndarray], np.ndarray]:
    """``head`` with its output checked (``None``: the oracle table ``B``)."""
    if head is None:
        return lambda t, prev, x: B[t, prev, x]

    def predict(t: int, prev: np.ndarray, x: np.ndarray) -> np.ndarray:
        a = as_float_array(head(t, prev, x), f"head(t, prev, x) at t={t}")  # text, complex, None: refused by name
        if a.shape != x.shape:
            raise ValueError(f"head(t, prev, x) must return an array of shape {x.shape}; got {a.shape}")
        if not np.all((a >= 0) & (a <= 1)):
            raise ValueError(f"head(t, prev, x) must return probabilities in [0, 1] (no NaN); at t={t} got {a}")
        return a

    return predict


def stops_drafting(prod, count, t, T, h, max_K):
    """[SDpp] Alg. 1's stopping rule with max_K and the horizon (array API; ``t`` and ``h`` may be traced).

    Drafting stops after the ``count``-th draft of a round, drafted at position index
    ``t`` of ``T``, when ``1 − prod > h`` (``prod``: the product of the round's predictions),
    when ``count >= max_K``, or at the last position.
    """
    return (1.0 - prod > h) | (count >= max_K) | (t + 1 >= T)


# -- the method --------------------------------------------------------------------
@register
@dataclass(frozen=True, eq=False)
class SpecDecPP(Method):
    """SpecDec++ ([SDpp] Alg. 1; SPEC §1 — [SDpp] writes ``p`` for the target, translated here).

    Draft one token at a time; an acceptance head predicts ``a_i ≈ min(1, q(Y_i)/p(Y_i))``;
    stop drafting when ``1 − Π_{i≤k} a_i > h`` or at ``max_K`` drafts, then verify as SD.
    Counts: ``oracle_calls`` = rounds (``N_target``), ``draft_calls`` every drafted token
    (``N_draft``, including those drafted after a round's first rejection),
    ``discarded = draft_calls − accepted``, ``bonus`` the tokens drawn from ``q`` after a
    fully accepted round. No closed form exists (the stopping time depends on the product
    of predictions): :meth:`expected` gives exact counts on small instances by recursion
    over each round's draft tree; on real models it needs a trained head. Both engines run
    it from :meth:`adaptive_drafting` (with JAX, a sweep over ``h`` is one
    compiled call, :func:`speculab.sim.simulate_sweep`).

    On real models (batched over prompts) the head reads the draft's hidden state at each
    drafted token. [SDpp] Alg. 1 decides after sampling ``y_i``, from the prediction for
    ``y_{i−1}``: its block ends one token past the decision, drafted from the logits the
    deciding forward pass computed anyway. Here, as SPEC §1 states the rule and as on
    Markov instances, the block ends at the last predicted token, so a round the head stops
    early costs one draft forward pass beyond its drafts (``speculab repro
    specdecpp-pareto`` counts them); ``h = 0`` is then ``SD(K = 1)``, where Alg. 1 would
    give two drafts per round (tests/test_specdecpp_models.py).

    Args:
      h: stopping threshold in ``[0, 1]`` (``h = 0`` stops after one draft unless it
        is certain to be accepted; ``h = 1`` never stops before max_K).
      head: ``head(t, prev, x) -> predicted acceptance`` (arrays as for
        :class:`~speculab.methods.Sprinter`), or ``None`` for the oracle ``min(1, q/p)`` — on
        Markov instances; on real models a head trained on the draft's hidden states
        (:class:`speculab.backends.heads.TrainedHead`), which the decoding loop runs at every
        drafted token.
      max_K: the most drafts a round makes (20 in [SDpp]).
    """

    name: ClassVar[str] = "specdecpp"
    h: float = param(help="stopping threshold h in [0, 1]", type=float)
    head: Callable | None = param(None, help="acceptance head head(t, prev, x), or None for the oracle", cli=False)
    max_K: int = param(20, help="the most drafts per round (default 20)", type=int)

    def __post_init__(self):
        check_probability(self.h, "h")
        if self.head is not None and not callable(self.head):
            raise ValueError(f"head must be callable or None; got {self.head!r}")
        as_positive_int(self.max_K, "max_K")

    # -- real models ---------------------------------------------------------------------------------
    #: On real models the round's length is decided while drafting, by a head on the draft's hidden states
    #: (:class:`~speculab.methods.capabilities.DraftHead`).
    head_param: ClassVar[str] = "head"
    head_reads: ClassVar[str] = "token"

    @property
    def draft_head(self):
        """The head the decoding loop runs on the draft's hidden state at each drafted token, or ``None`` (a head
        ``f(t, prev, x)`` or the oracle, which read ``q`` or a Markov instance: not available while drafting)."""
        return self.head if getattr(self.head, "reads_hidden_states", False) else None

    def read_head(self, score, uniform: float) -> float:
        """A head's prediction as a float, refused unless it is a probability (a NaN would never stop a round)."""
        return head_probability(score, "acceptance head")

    def stop_drafting(self, predictions: list[float], remaining: int) -> bool:
        """Whether the round stops after the drafts whose head predictions are ``predictions`` (``remaining``: tokens
        still to output before this round): :func:`stops_drafting`."""
        return bool(
            stops_drafting(
                math.prod(predictions), len(predictions), len(predictions) - 1, remaining, self.h, self.max_K
            )
        )

    @staticmethod
    def target_called(predictions: list[float]) -> bool:
        """Every round calls the target: the head decides only how long the round drafts."""
        return True

    def draft_length(self, remaining: int) -> int:
        return min(self.max_K, remaining)

    def round_law(self, p, q, x, *, bonus: bool, predictions=None):
        """SD's round law: the stopping rule reads only the drafts, so a round verifies its block as SD does."""
        return SD().round_law(p, q, x, bonus=bonus)

    @takes_instance
    def expected(self, inst) -> Expected:
        """Exact counts, every head, by recursion over the draft tree (:func:`~speculab.theory.stopping_counts`):
        ``V^(min(max_K, T) + 1)`` leaves of ``6 + T`` values, within
        :data:`~speculab.theory.stopping.NODE_BUDGET` leaves of 6 (:func:`speculab.work_budget` scales it).
        Raises :class:`~speculab._validate.TooLarge` with the estimate above it: the counts exist, the budget
        stops them (no closed form is known)."""
        from speculab.theory.stopping import stopping_counts

        counts = stopping_counts(inst, self.adaptive_drafting(inst), per_position=True)
        return Expected.from_counts(counts, source="exact recursion over the draft tree (speculab.theory.stopping)")

    def adaptive_drafting(self, inst) -> AdaptiveDrafting:
        """The round as tables (what the JAX engine runs): SD's verification, the head's predictions as the
        scores, :func:`stops_drafting` with ``(h, max_K)``.

        The head is tabulated once over ``(t, prev, x)`` — a head is a deterministic function of
        them — so a head given as a function costs ``T`` calls of ``V²`` tokens each and a
        ``(T, V, V)`` table; the oracle and a :class:`TableHead` keep a compact instance's storage.
        """
        inst = _check_head(self.head, inst)
        if self.head is None:
            score = rowwise(sd_rule, inst.P, inst.Q)[0]
        elif isinstance(self.head, TableHead):
            score = self.head.table
        else:
            predict = _predictor(self.head, None)
            prev, x = (g.ravel() for g in np.indices((inst.V, inst.V)))
            score = np.stack([predict(t, prev, x).reshape(inst.V, inst.V) for t in range(inst.T)])
        return AdaptiveDrafting(SD(), score, stops_drafting, (self.h, self.max_K), self.max_K)
