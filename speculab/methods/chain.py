r"""Algorithm 2 of [Yin] as shared machinery: a rule ``(b, P)`` turned into a round law and exact counts.

Every method of this family — speculative decoding, any unbiased or biased
acceptance rule, Decoding-OPT/UNO, FSD — is fully described by its **rule** on
one position: the acceptance probability ``b(x̃)`` of a drafted token and the
rejection distribution ``P`` that a refused position is drawn from,

.. math:: P_{A}(x) = b(x)\, p(x) + P(x) \sum_{\tilde x} (1 - b(\tilde x))\, p(\tilde x)

([Yin] §2). A method module writes :meth:`ChainMethod.rule` once, against the
array API; this module derives from it

* the round law (:func:`chain_round_law`): a round drafts ``x_1..x_L``, accepts
  them in order with probabilities ``b_i(x_i)``, and at the first refusal outputs
  a token from ``P_i``; after ``L`` acceptances it outputs a bonus token from
  ``q_{L+1}`` when a next position exists;
* the simulators' reading of it (:class:`~speculab.methods.capabilities.Slotwise`): both engines draw a
  draft only when it is verified, since a round's drafts beyond its first rejection
  are discarded unseen — the same joint law of outputs and counts as drafting the
  whole chain up front (checked against a literal, enumerate-every-branch
  implementation in ``tests/``);
* exact expected counts (:func:`speculab.theory.lookahead_counts` with the rule).

Convention: ``p`` = draft, ``q`` = target.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from array_api_compat import array_namespace, device

from speculab import kernels
from speculab.counts import Expected
from speculab.methods.base import Method, RoundLaw
from speculab.theory.instance import rowwise
from speculab.theory._checks import takes_instance

__all__ = ["Rule", "ChainMethod", "chain_round_law", "chain_law", "one_step_law"]


class Rule(NamedTuple):
    """A rule of [Yin] Algorithm 2 on one position (arrays of shape ``(..., V)``).

    Attributes:
      acceptance: ``b(x)``, the probability that a drafted ``x`` is accepted.
      rejection: ``P``, the rejection distribution (rows sum to 1 wherever a refusal
        is possible).
    """

    acceptance: Any
    rejection: Any


def chain_round_law(rule: Rule, p, q, x, *, bonus: bool, biased: bool) -> RoundLaw:
    r"""The law of a round of Algorithm 2 given its drafts (array API).

    With ``a_i = b_i(x_i)``, the round accepts exactly ``τ`` drafts with probability
    :math:`\prod_{i \le \tau} a_i\,(1 - a_{\tau+1})` (``τ < L``) or :math:`\prod_{i \le L} a_i`
    (``τ = L``), and then outputs a token from ``P_{τ+1}`` (a correction) or from
    ``q_{L+1}`` (a bonus, if ``bonus``).

    Args:
      rule: the rule at the drafted slots, arrays of shape ``(..., M, L, V)``.
      p, q, x: as in :meth:`speculab.methods.Method.round_law`.
      bonus: whether a position follows the block.
      biased: also return each slot's one-step output law (to report the per-token bias).
    """
    xp = array_namespace(p, q)
    b, R = rule
    a = kernels.gather(b, x)  # (..., M, L): acceptance of each drafted token
    reject = xp.sum((1.0 - b) * p, axis=-1)  # (..., M, L): D = Σ (1 − b) p
    return chain_law(a, reject, R, q, bonus=bonus, law=one_step_law(rule, p) if biased else None)


def one_step_law(rule: Rule, p):
    """The one-step output law of a rule, ``P_A = b p + P Σ (1 − b) p`` ([Yin] §2), shape ``(..., V)`` (array API)."""
    xp = array_namespace(p)
    b, R = rule
    return b * p + R * xp.sum((1.0 - b) * p, axis=-1, keepdims=True)


def chain_law(a, reject, weights, q, *, bonus: bool, law=None) -> RoundLaw:
    """The round law of a chain from its slots' acceptances ``a`` ``(..., M, L)`` of the drafts, refusal
    probabilities ``reject`` ``(..., M, L)`` (before the draft is seen) and correction weights ``weights``
    ``(..., M, L, V)``; the bonus law is ``q``'s last slot (array API)."""
    xp = array_namespace(a, q)
    ones = xp.ones((*a.shape[:-1], 1), dtype=q.dtype, device=device(q))  # (..., M, 1); L may be 0
    reach = xp.concat([ones, xp.cumulative_prod(a, axis=-1)], axis=-1)  # P(first i drafts accepted), i = 0..L
    outcome = reach * xp.concat([1.0 - a, ones], axis=-1)  # (..., M, L+1)
    last = q[..., -1:, :] if bonus else xp.zeros_like(q[..., -1:, :])
    correction = xp.concat([weights, last], axis=-2)  # (..., M, L+1, V)
    reject_prob = xp.concat([reject, xp.zeros_like(ones)], axis=-1)
    return RoundLaw(outcome=outcome, correction=correction, reject_prob=reject_prob, accept_prob=a, law=law)


class ChainMethod(Method):
    """A method that is [Yin] Algorithm 2 with a rule (``b``, ``P``) and a lookahead ``K``.

    Subclasses are frozen dataclasses with a field ``K`` and implement :meth:`rule`
    (array API) and :attr:`unbiased`; everything else follows from the rule.
    """

    K: int | None

    def rule(self, p, q) -> Rule:
        """The acceptance ``b`` and rejection distribution ``P`` at positions with draft law ``p``
        and target law ``q`` (arrays of shape ``(..., V)``, any array-API library)."""
        raise NotImplementedError

    def instance_rule(self, inst) -> Rule:
        """The rule as ``(T, V, V)`` numpy arrays on a Markov instance (views of the compact kernels' rule)."""
        return Rule(*rowwise(self.rule, inst.P, inst.Q))

    # -- theory ----------------------------------------------------------------------------------
    @takes_instance
    def expected(self, inst) -> Expected:
        """Exact counts for any ``K``: :func:`~speculab.theory.lookahead_counts` with this rule."""
        from speculab.theory.lookahead import lookahead_counts

        b, R = self.instance_rule(inst)
        return Expected.from_counts(
            lookahead_counts(inst, self.K, b=b, rejection=R),
            source="exact lookahead counts of [Yin] Alg. 2 with this rule (SPEC L)",
        )

    # -- real models ---------------------------------------------------------------------------------
    def draft_length(self, remaining: int) -> int:
        return remaining if self.K is None else min(self.K, remaining)

    def round_law(self, p, q, x, *, bonus: bool) -> RoundLaw:
        rule = self.rule(p, q[..., :-1, :])
        return chain_round_law(rule, p, q, x, bonus=bonus, biased=not self.unbiased)
