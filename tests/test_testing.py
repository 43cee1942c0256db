"""``speculab.testing``: the strategies and the ready-made property checks users apply to their own methods.

The checks are themselves checked: they agree with every built-in method's exact theory and simulator, pass
for the unbiased methods and fail — with a message naming what is wrong — for biased ones, a wrong theory, a
wrong simulator and a round law that is not a law.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speculab import kernels
from speculab.methods import (
    SD,
    Autoregressive,
    BatchSD,
    Biased,
    BlockVerification,
    Fuzzy,
    OptimalMultiDraft,
    RejectionDecoding,
    Sprinter,
)
from speculab.methods.chain import Rule, chain_round_law
from speculab.theory import MarkovInstance, tv
from speculab.testing import (
    OverAcceptance,
    acceptance_rules,
    assert_counts_match_theory,
    assert_preserves_target_law,
    enumerate_method,
    markov_instances,
    nasty_distribution_pairs,
    nasty_markov_instances,
)

INST = MarkovInstance.random(3, 3, key=1)
UNBIASED = [
    Autoregressive(),
    SD(),
    SD(K=1),
    SD(K=2),
    BatchSD(2),
    BatchSD(2, K=1),
    BlockVerification(2),
    OptimalMultiDraft(2, K=1),
]
BIASED = [Biased(0.2, "opt"), Biased(0.2, "uno", K=2), Fuzzy(0.3)]


@pytest.mark.parametrize("method", UNBIASED + BIASED, ids=repr)
def test_enumeration_equals_every_methods_own_theory(method):
    """The enumeration uses only ``round_law``; each method's ``expected`` is its own closed form or recursion."""
    exact = enumerate_method(method, INST)
    assert sum(exact.law.values()) == pytest.approx(1.0, abs=1e-12)
    theory = dict(method.expected(INST).items())
    for name, value in exact.counts.items():
        assert value == pytest.approx(theory[name], abs=1e-12), name


@pytest.mark.parametrize("method", UNBIASED, ids=repr)
def test_unbiased_methods_preserve_the_target_law_and_match_their_theory(method):
    assert assert_preserves_target_law(method, INST) < 1e-12
    scores = assert_counts_match_theory(method, INST, n_runs=4000, key=0)
    assert set(scores) == {"rejections", "oracle_calls", "accepted", "bonus"}


@pytest.mark.parametrize("method", BIASED, ids=repr)
def test_biased_methods_are_caught(method):
    with pytest.raises(AssertionError, match="does not output the target's law"):
        assert_preserves_target_law(method, INST)


@dataclasses.dataclass(frozen=True)
class _WrongTheory(SD):
    def expected(self, inst):
        return dataclasses.replace(super().expected(inst), rejections=super().expected(inst).rejections + 1e-6)


@dataclasses.dataclass(frozen=True)
class _WrongSimulator(SD):
    """Its round law accepts half as often as its rule, which the engines simulate: a slotwise method's rule and
    round law must agree (the engines read the one, the enumeration the other)."""

    def round_law(self, p, q, x, *, bonus):
        b, R = self.rule(p, q[..., :-1, :])
        return chain_round_law(
            Rule(0.5 * b, kernels.optimal_rejection(p, q[..., :-1, :], 0.5 * b)), p, q, x, bonus=bonus, biased=False
        )


@dataclasses.dataclass(frozen=True)
class _CorrectionFromTarget(SD):
    def round_law(self, p, q, x, *, bonus):
        law = super().round_law(p, q, x, bonus=bonus)
        return law._replace(correction=np.where(law.correction.sum(-1, keepdims=True) > 0, q, 0.0))  # not q − p


@dataclasses.dataclass(frozen=True)
class _NotALaw(SD):
    def round_law(self, p, q, x, *, bonus):
        law = super().round_law(p, q, x, bonus=bonus)
        return law._replace(outcome=law.outcome * 0.9)


def test_the_checks_catch_a_wrong_theory_simulator_and_rule():
    with pytest.raises(AssertionError, match="theory rejections = .* enumeration"):
        assert_counts_match_theory(_WrongTheory(), INST, n_runs=2000)
    with pytest.raises(AssertionError, match="simulated oracle_calls"):
        assert_counts_match_theory(_WrongSimulator(), INST, n_runs=20_000)
    with pytest.raises(AssertionError, match="does not output the target's law"):
        assert_preserves_target_law(_CorrectionFromTarget(K=2), INST)
    with pytest.raises(AssertionError, match="outcome probabilities are not a law"):
        enumerate_method(_NotALaw(), INST)


@pytest.mark.parametrize(
    "args, message",
    [
        (("sd", INST), "method must be a speculab.methods.Method"),
        ((SD(), "inst"), "inst must be a speculab.theory.MarkovInstance"),
        ((Sprinter(0.5, 0.1), INST), "has no round rule"),
        ((BatchSD(4, K=4), MarkovInstance.random(4, 6, key=0)), "exceed max_blocks"),
        ((SD(K=1), MarkovInstance.random(8, 4, key=0)), "more than max_sequences"),
    ],
)
def test_bad_inputs_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        enumerate_method(*args)


@settings(max_examples=40, deadline=None)
@given(acceptance_rules(unbiased=True), markov_instances(max_T=3, max_V=3))
def test_every_unbiased_acceptance_rule_preserves_the_target(method, inst):
    """[Yin] Thm 2: any ``b ≤ min(1, q/p)`` with its unique rejection law is unbiased, at every lookahead."""
    assert_preserves_target_law(method, inst)


@settings(max_examples=20, deadline=None)
@given(acceptance_rules(unbiased=False))
def test_over_acceptance_is_caught_wherever_the_draft_differs(method):
    with pytest.raises(AssertionError, match="does not output the target's law"):
        assert_preserves_target_law(method, INST)


@settings(max_examples=200, deadline=None)
@given(nasty_distribution_pairs())
def test_sd_is_exact_on_the_nasty_pairs(pair):
    """Disjoint and nested supports, near-equal pairs, masses of 1e-300 and point masses: SD's one-position law is
    the target's, TV is the overlap's complement, and 1 when the supports are disjoint (to rounding: the
    entries of a normalised vector need not sum to exactly 1)."""
    p, q = pair
    assert np.isclose(p.sum(), 1) and np.isclose(q.sum(), 1) and (p >= 0).all() and (q >= 0).all()
    assert assert_preserves_target_law(SD(), MarkovInstance.context_free(p, q, T=1)) < 1e-9
    assert tv(p, q) == pytest.approx(1.0 - np.minimum(p, q).sum(), abs=1e-12)
    if not np.any((p > 0) & (q > 0)):
        assert tv(p, q) == pytest.approx(1.0, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(nasty_distribution_pairs())
def test_nasty_pairs_are_probability_vectors_sd_can_verify(pair):
    p, q = pair
    assert p.shape == q.shape and np.all(p >= 0) and np.all(q >= 0)
    assert p.sum() == pytest.approx(1.0, abs=1e-12) and q.sum() == pytest.approx(1.0, abs=1e-12)
    b = kernels.sd_acceptance(p, q)
    assert np.all((b >= 0) & (b <= 1))


def test_over_acceptance_is_not_within_thm_2():
    """The biased family accepts more than ``min(1, q/p)`` somewhere (why no rejection law can fix it)."""
    p, q = INST.P[0, 0], INST.Q[0, 0]
    assert np.any(OverAcceptance(2.0)(p, q) > kernels.sd_acceptance(p, q))
    with pytest.raises(ValueError, match="b <= min"):
        RejectionDecoding(b=OverAcceptance(2.0)).expected(INST)


@settings(max_examples=40, deadline=None)
@given(nasty_markov_instances(), st.sampled_from([SD(), SD(K=1), BatchSD(2, K=1), BlockVerification(2)]))
def test_unbiased_methods_are_exact_on_nasty_instances(inst, method):
    """Every row pair from the corners (disjoint, nested, near-equal, 1e-300, point masses): still the target law,
    and the enumerated counts are the method's own theory."""
    assert assert_preserves_target_law(method, inst) < 1e-9
    exact = enumerate_method(method, inst).counts
    theory = dict(method.expected(inst).items())
    for name, value in exact.items():
        assert value == pytest.approx(theory[name], abs=1e-9), name
