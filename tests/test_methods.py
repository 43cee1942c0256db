"""Table-driven tests over every registered method (numpyro's shape: one list of cases drives every generic test).

A new method is tested by everything here once it has a line in ``CASES`` — and
``test_every_registered_method_has_a_case`` fails until it does.

References are independent of the simulators: literal enumeration of every branch
(``tests/_enumerate.py``) — through the method's own round law for methods that
have one, literally for the drafting policies (SPRINTER, SpecDec++).
"""

import dataclasses
import functools
import math
import json
from typing import Callable, NamedTuple

import numpy as np
import pytest

from _enumerate import enumerate_rounds, enumerate_specdecpp, enumerate_sprinter, sequence_law
from _enumerate_trees import enumerate_tree_rounds, rrs_verify, traversal_verify
from conftest import Z_BOUND, agrees_json, assert_frozen, assert_power, binomial_se, full_tier_only
from speculab import kernels
from speculab.cli import main
from speculab.methods import (
    REGISTRY,
    SD,
    Autoregressive,
    BatchSD,
    Biased,
    BlockVerification,
    Fuzzy,
    Typical,
    OptimalMultiDraft,
    RRS,
    RejectionDecoding,
    SpecDecPP,
    Sprinter,
    Traversal,
    GreedyDraft,
    Synthetic,
    sample_round,
)
from speculab.methods.base import Method, cli_params, option
from speculab.methods.capabilities import head_probability, reading
from speculab.sim import simulate
from speculab.theory import MarkovInstance


def _rounds(method, inst):
    """Methods with a round law: every branch of every round, through the method's own law."""
    e = enumerate_rounds(inst.P, inst.Q, inst.rho, method.round_law, method.draft_length, method.rows)
    return e.law, {k: getattr(e, k) for k in COUNTS}, e.rejections_per_position


def _sprinter(method, inst):
    """SPRINTER's drafting policy read literally (it has no round law)."""
    e = enumerate_sprinter(inst.P, inst.Q, inst.rho, method.pass_probabilities(inst))
    return e.law, {k: getattr(e, k) for k in COUNTS}, e.rejections_per_position


def _specdecpp(method, inst):
    """SpecDec++'s stopping policy with the oracle head, read literally."""
    table = kernels.sd_acceptance(inst.P, inst.Q)
    d = enumerate_specdecpp(inst.P, inst.Q, inst.rho, table, method.h, method.max_K)
    return d["law"], {k: d[k] for k in COUNTS}, d["rej_pos"]


def _trees(method, inst):
    """Tree methods: every drafted tree, and the verifier run literally as its paper states it."""
    verify = {"rrs": rrs_verify, "traversal": traversal_verify}[type(method).name]
    e = enumerate_tree_rounds(inst.P, inst.Q, inst.rho, list(method.tree.parents), method.draws, verify)
    return e.law, {k: getattr(e, k) for k in COUNTS}, e.rejections_per_position


def _vllm_literal(p, q, x, *, bonus, rates=None):
    """vLLM's rejection sampler read literally, one block at a time: slot ``i`` keeps its draft with ``q_i(x_i)`` (no
    draft probabilities: greedy drafts) or with the synthetic conditional rate ``c_i``; a refused slot outputs a token
    of ``q_i`` without ``x_i`` (no draft probabilities) or of ``(q_i − p_i)_+`` (token 0 where it has no mass); a
    kept block is followed by the bonus from ``q_{L+1}``."""
    B, M, L, V = p.shape
    outcome, correction = np.zeros((B, M, L + 1)), np.zeros((B, M, L + 1, V))
    greedy = np.all((p == 0) | (p == 1))
    for b in range(B):
        for m in range(M):
            reach = 1.0
            for i in range(L):
                tok = x[b, m, i]
                keep = q[b, m, i, tok] if rates is None else rates[i]
                w = np.zeros(V)
                for y in range(V):
                    w[y] = q[b, m, i, y] * (y != tok) if greedy else max(q[b, m, i, y] - p[b, m, i, y], 0.0)
                if w.sum() == 0:
                    w[0] = 1.0
                outcome[b, m, i] = reach * (1 - keep)
                correction[b, m, i] = w / w.sum()
                reach *= keep
            outcome[b, m, L] = reach
            correction[b, m, L] = q[b, m, L] if bonus else 0.0
    return RoundLawLiteral(outcome, correction)


class RoundLawLiteral(NamedTuple):
    outcome: np.ndarray
    correction: np.ndarray


def _vllm(method, inst):
    """vLLM's rules (greedy drafts, synthetic rates) literally: greedy drafts from the point mass at each row's first
    largest draft probability, and synthetic's conditional rates ``r_i / r_{i−1}``, both built here."""
    P = np.asarray(inst.P, dtype=float)
    if isinstance(method, GreedyDraft) or getattr(method, "draft_sample", None) == "greedy":
        point = np.zeros_like(P)
        for t in range(P.shape[0]):
            for a in range(P.shape[1]):
                point[t, a, int(np.argmax(P[t, a]))] = 1.0
        P = point
    rates = None
    if isinstance(method, Synthetic):
        r = [1.0, *method.rates]
        rates = [r[i] / r[i - 1] if r[i - 1] > 0 else 0.0 for i in range(1, len(r))]
    law = functools.partial(_vllm_literal, rates=rates)
    e = enumerate_rounds(P, inst.Q, inst.rho, law, method.draft_length, method.rows)
    return e.law, {k: getattr(e, k) for k in COUNTS}, e.rejections_per_position


class _ScaledSD:
    """The acceptance ``c · min(1, q/p)`` of a rejection-decoding case, with a stable repr (test ids, power table)."""

    def __init__(self, c: float):
        self.c = c

    def __call__(self, p, q):
        return self.c * kernels.sd_acceptance(p, q)

    def __repr__(self) -> str:
        return f"{self.c}*min(1, q/p)"


class Case(NamedTuple):
    """A method of the table, with its exact reference and what to expect of it."""

    method: object
    reference: Callable = _rounds
    theory: bool = True  # whether ``method.expected`` gives exact counts
    min_target_calls: int = 1  # per run (SPRINTER's verifier may accept a whole run without the target)


CASES = [
    Case(Autoregressive()),
    Case(SD()),
    Case(SD(K=2)),
    Case(BatchSD(2, K=2)),
    Case(BatchSD(3, K=1)),
    Case(RejectionDecoding(b=_ScaledSD(0.6), K=2)),
    Case(Biased(0.1, "opt")),
    Case(Biased(0.1, "uno", K=2)),
    Case(Fuzzy(0.1, "js", K=2)),  # θ = 0.05 never accepts two drafts on these instances: no bonus to test
    Case(Typical(0.3, 0.6, K=2)),
    Case(Typical(0.25, 1.0, "typical", K=1)),
    Case(Sprinter(0.8, 0.0), _sprinter, min_target_calls=0),
    Case(Sprinter(0.7, 0.3), _sprinter, min_target_calls=0),
    Case(SpecDecPP(0.4, max_K=3), _specdecpp),
    Case(BlockVerification(2)),
    Case(BlockVerification(3)),
    Case(OptimalMultiDraft(2, K=2)),
    Case(OptimalMultiDraft(3, K=1)),
    Case(RRS((2, 1)), _trees),
    Case(RRS((2, 1), draws="distinct"), _trees),
    Case(Traversal("parents=0,0,1"), _trees),
    Case(Traversal((2, 1), draws="distinct"), _trees),
    Case(GreedyDraft(K=2), _vllm),
    Case(Synthetic((0.8, 0.5)), _vllm),
    Case(Synthetic((0.7, 0.7), draft_sample="greedy"), _vllm),
]
METHODS = [c.method for c in CASES]
IDS = [repr(m) for m in METHODS]
CASE_OF = {id(c.method): c for c in CASES}
COUNTS = ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus")
N = 40_000


def _runs(method) -> int:
    """Runs of the simulation checks: ``N``, more where the rarest count needs them to see a 10 % error (the bonus
    of acceptance scaled by 0.6 has power 0.958 at ``N``), and where the law of whole sequences must carry its own
    power (methods outside ``POWER_CASES``: 0.81–0.84 at ``N``, above 0.99 at 70,000)."""
    if isinstance(method, RejectionDecoding):
        return 60_000
    return N if method in POWER_CASES else 70_000


def _tiny(seed: int = 0, T: int = 3, V: int = 3) -> MarkovInstance:
    return MarkovInstance.random(T, V, seed, concentration=0.6)


def _exact(method, inst):
    """The literal enumeration of ``method`` on ``inst``: ``(law, {count: expectation}, rejections per position)``."""
    return CASE_OF[id(method)].reference(method, inst)


def test_every_registered_method_has_a_case():
    assert {type(m).name for m in METHODS} == set(REGISTRY)


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_methods_are_frozen_hashable_configurations(method):
    """STYLE: a method is a frozen, hashable configuration."""
    assert_frozen(method)
    assert hash(method) == hash(method) and method == method


def test_a_method_prints_an_unlimited_lookahead_as_infinity_and_keeps_its_repr():
    """``str`` is for people (``K=∞``, as the docs write it); ``repr`` stays the constructor that journals and JSON
    record: the two differ only there, for every case."""
    assert str(SD()) == "SD(K=∞)" and repr(SD()) == "SD(K=None)" and str(SD(K=4)) == "SD(K=4)"
    for method in METHODS:
        assert str(method).replace("K=∞", "K=None") == repr(method)
        assert ("K=∞" in str(method)) == (getattr(method, "K", 0) is None)


def test_what_holds_an_unhashable_callable_or_an_array_is_still_hashable():
    """Methods holding a callable or an array that is not hashable itself compare by identity and hash; so do an
    instance and a table head, which hold arrays (and are frozen)."""
    from speculab.methods.specdecpp import oracle_head

    class Unhashable:  # a callable with __eq__ and no __hash__, like a dataclass holding arrays
        def __eq__(self, other):
            return self is other

        def __call__(self, t, prev, x):
            return np.ones(np.shape(x))

    for held in (
        SpecDecPP(0.4, head=Unhashable()),
        Sprinter(verifier=Unhashable()),
        RejectionDecoding(b=np.full((3, 2, 2), 0.5)),
    ):
        assert hash(held) == hash(held) and held == held
    inst = _tiny(0)
    head = oracle_head(inst)
    for obj in (inst, head):
        assert_frozen(obj)
        assert hash(obj) == hash(obj)


@pytest.mark.parametrize(
    "seed, method",
    full_tier_only(
        (pytest.param(seed, m, id=f"{seed}-{i}") for seed in (0, 1) for m, i in zip(METHODS, IDS)),
        "0-OptimalMultiDraft(M=2, K=2)",
        "0-BatchSD(M=2, K=2)",
        "0-OptimalMultiDraft(M=3, K=1)",
    ),
)
def test_output_law_is_the_target_law_exactly_for_unbiased_methods(method, seed):
    inst = _tiny(seed)
    law, _, _ = _exact(method, inst)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    target = sequence_law(inst.Q, inst.rho)
    gap = max(abs(law.get(k, 0.0) - target.get(k, 0.0)) for k in set(law) | set(target))
    if method.unbiased:
        assert gap < 1e-12
    else:
        assert gap > 1e-4  # the biased cases of the table really are biased on these instances


@pytest.mark.parametrize(
    "method", full_tier_only((pytest.param(m, id=i) for m, i in zip(METHODS, IDS)), "OptimalMultiDraft(M=3, K=1)")
)
def test_expected_counts_equal_the_enumeration(method):
    inst = _tiny(2)
    expected = method.expected(inst)
    assert (expected is not None) == CASE_OF[id(method)].theory
    if expected is None:
        return
    _, exact, rej_pos = _exact(method, inst)
    for name in COUNTS:
        assert expected.get(name) == pytest.approx(exact[name], abs=1e-12), name
    np.testing.assert_allclose(expected.rejections_per_position, rej_pos, atol=1e-12)
    assert expected.source


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_simulation_matches_the_enumeration(method, agrees):
    inst = _tiny(3)
    law, exact, rej_pos = _exact(method, inst)
    c = simulate(inst, method, _runs(method), key=7, return_sequences=True)
    _assert_matches(agrees, c, law, exact, rej_pos, repr(method), method)


def _assert_matches(agrees, c, law, exact, rej_pos, label: str, method):
    """Simulated counts, per-position rejection rates and the law of whole sequences against the enumeration.

    For a method of ``POWER_CASES`` the law of whole sequences is held to a 10 % error of its likeliest sequence
    with power 0.84 only (at N); its power against the named bugs of a round is computed, above 0.999999, by
    ``test_the_simulation_check_has_power_against_plausible_bugs``, and recorded here as carried by it. Other
    methods run more (``_runs``) and assert it."""
    n = c.rejections.size
    for name in COUNTS:
        agrees(c.estimate(name), exact[name], f"{label}: {name}")
    agrees(c.rejections_per_position, rej_pos, f"{label}: rejection rate per position", se=binomial_se(rej_pos, n))
    seqs, hits = np.unique(c.sequences, axis=0, return_counts=True)
    seen = {tuple(int(x) for x in s): k / n for s, k in zip(seqs, hits)}
    every = sorted(set(law) | set(seen))
    for seq in every:
        assert law.get(seq, 0.0) > 0 or seen.get(seq, 0.0) == 0, seq  # an impossible sequence never appears
    p, f = np.array([law.get(s, 0.0) for s in every]), np.array([seen.get(s, 0.0) for s in every])
    p, f = _pooled(p, f, n)
    carried = "test_the_simulation_check_has_power_against_plausible_bugs" if method in POWER_CASES else None
    agrees(f, p, f"{label}: law of whole sequences", se=binomial_se(p, n), carried_by=carried)


def _pooled(p: np.ndarray, f: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The possible sequences expected fewer than once in ``n`` runs pooled into one cell (appended last).

    Found with typical acceptance: one run of a sequence expected 0.016 times is ``z = 7.9`` on its own cell, a
    false alarm in about 1.6 % of keys, and such cells add up over a method's rare sequences. Pooled, they are one
    binomial cell like the others; an impossible sequence stays its own cell (any run of it fails)."""
    rare = (p > 0) & (p * n < 1)
    if not rare.any():
        return p, f
    return np.append(p[~rare], p[rare].sum()), np.append(f[~rare], f[rare].sum())


def _wrong_round_law(method, kind: str):
    """``method``'s round law with one plausible bug (the named wrong alternatives of the power check)."""

    def law(p, q, x, *, bonus):
        right = method.round_law(p, q, x, bonus=bonus)
        corr = np.array(right.correction, dtype=float)  # (n, M, L + 1, V)
        L = x.shape[-1]
        if kind == "correction drawn from q":  # the residual replaced by the target's own law at that slot
            corr[..., :L, :] = np.where(corr[..., :L, :].sum(-1, keepdims=True) > 0, q[..., :L, :], 0.0)
        elif kind == "bonus drawn from q_L":  # an off-by-one: the last draft's target law for q_{L+1}
            corr[..., L, :] = np.where(corr[..., L, :].sum(-1, keepdims=True) > 0, q[..., L - 1, :], 0.0)
        elif kind == "bonus never drawn":  # a round that accepts every draft ends there
            corr[..., L, :] = 0.0
        return right._replace(correction=corr)

    return law


def _rejects(p_true: float, p_wrong: float, bound: float) -> float:
    """P(|k/N − p_true| ≥ bound) for k ~ Binomial(N, p_wrong): the chance one check of ``_assert_matches`` fails."""
    from scipy.stats import binom

    if p_true == 0.0:
        return 1.0 - (1.0 - p_wrong) ** N  # any occurrence of an impossible sequence fails
    lo, hi = np.ceil(N * (p_true - bound)) - 1, np.floor(N * (p_true + bound)) + 1  # passing: lo < k < hi
    return float(binom.cdf(lo, N, p_wrong) + binom.sf(hi - 1, N, p_wrong))


def _power(right, wrong, right_law) -> float:
    """A lower bound on the chance ``_assert_matches`` refuses a simulation of the ``wrong`` enumeration at ``N`` runs.

    The largest single-check refusal probability over the law of whole sequences (binomial),
    the rejection rate of each position (binomial) and the rejection and target-call means
    (normal, with the wrong method's own standard error): a union is at least its largest part.
    """
    every = sorted(set(right_law) | set(wrong.law))
    p, w = _pooled(
        np.array([right_law.get(s, 0.0) for s in every]), np.array([wrong.law.get(s, 0.0) for s in every]), N
    )
    checks = [_rejects(a, b, Z_BOUND * np.sqrt(a * (1 - a) / N) + 1e-12) for a, b in zip(p, w)]
    for r, w in zip(right.rejections_per_position, wrong.rejections_per_position):
        checks.append(_rejects(r, w, Z_BOUND * np.sqrt(max(r * (1 - r), 1e-12) / N)))
    from scipy.stats import norm

    for name in ("rejections", "oracle_calls"):
        mean, sq = getattr(wrong, name), getattr(wrong, name + "_sq")
        se = np.sqrt(max(sq - mean * mean, 0.0) / N)
        gap = abs(mean - getattr(right, name))
        checks.append(1.0 if se == 0 and gap > 1e-9 else float(norm.sf(Z_BOUND - gap / se) if se else 0.0))
    return max(checks)


WRONG = ("correction drawn from q", "bonus drawn from q_L", "bonus never drawn")
POWER_CASES = [
    m
    for m in METHODS  # a round law of rows that drafts and needs no verifier's verdicts
    if not isinstance(m, Sprinter) and m.draft_length(3) > 0 and reading(m) != "trees"
]


def _not_a_bug(method, kind: str) -> str | None:
    """Why ``kind`` is no bug for ``method`` on the power check's T = 3 instance (then it must change nothing)."""
    if kind.startswith("bonus") and method.draft_length(3) >= 3:
        return "every round drafts to the horizon: there is no bonus token on T = 3"
    by_definition = isinstance(method, Fuzzy) or getattr(method, "rejection", "") == "uno"
    if kind == "correction drawn from q" and (by_definition or getattr(method, "correction", "") == "q"):
        return "the method corrects from q by definition (FSD, Decoding-UNO, typical acceptance with P = q)"
    return None


@functools.cache
def _right_enumeration(method):
    inst = _tiny(3)
    return enumerate_rounds(inst.P, inst.Q, inst.rho, method.round_law, method.draft_length, method.rows)


@pytest.mark.slow
@pytest.mark.power
@pytest.mark.parametrize(
    "method, kind",
    [  # the full tier's: 60 s of enumerations
        pytest.param(m, kind, id=f"{m!r}-{kind}") for kind in WRONG for m in POWER_CASES
    ],
)
def test_the_simulation_check_has_power_against_plausible_bugs(method, kind, record_property):
    """Power of ``test_simulation_matches_the_enumeration`` (N runs, |z| < 5) against each named bug of a round,
    computed from the exact law of the wrong method (enumerated like the right one): above 0.99 for every pair
    where it is a bug; where it is not (``_not_a_bug``), the wrong law must equal the right one."""
    inst = _tiny(3)
    right = _right_enumeration(method)
    wrong = enumerate_rounds(inst.P, inst.Q, inst.rho, _wrong_round_law(method, kind), method.draft_length, method.rows)
    gap = max(
        max(abs(right.law.get(s, 0.0) - wrong.law.get(s, 0.0)) for s in set(right.law) | set(wrong.law)),
        np.abs(right.rejections_per_position - wrong.rejections_per_position).max(),
        abs(right.oracle_calls - wrong.oracle_calls),
    )
    if _not_a_bug(method, kind):
        assert gap < 1e-12, _not_a_bug(method, kind)
    else:
        assert_power(
            record_property, f"{method!r}: {kind} (simulation vs enumeration, N = {N})", _power(right, wrong, right.law)
        )


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_accounting_identities(method):
    """Every output token is an accepted draft, a rejection or a bonus; discarded = drafted − accepted."""
    inst = MarkovInstance.random(12, 4, 5, concentration=0.8)
    c = simulate(inst, method, 2_000, key=1)
    np.testing.assert_array_equal(c.accepted + c.rejections + c.bonus, c.tokens)
    np.testing.assert_array_equal(c.tokens, inst.T)
    np.testing.assert_array_equal(c.discarded, c.draft_calls - c.accepted)
    assert np.all(c.discarded >= 0) and np.all(c.oracle_calls >= CASE_OF[id(method)].min_target_calls)
    assert c.rejections_per_position.sum() == pytest.approx(c.rejections.mean(), rel=1e-12)
    e = method.expected(inst)
    if e is not None:
        assert e.accepted + e.rejections + e.bonus == pytest.approx(inst.T, abs=1e-9)
        assert e.discarded == pytest.approx(e.draft_calls - e.accepted, abs=1e-9)
        assert e.rejections_per_position.sum() == pytest.approx(e.rejections, abs=1e-9)


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_same_key_same_counts(method):
    inst = MarkovInstance.random(10, 4, 6)
    a = simulate(inst, method, 3_000, key=11, return_sequences=True)
    b = simulate(inst, method, 3_000, key=np.random.default_rng(11), return_sequences=True)
    for name in a.names:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.sequences, b.sequences)
    assert not np.array_equal(a.sequences, simulate(inst, method, 3_000, key=12, return_sequences=True).sequences)


# -- one rule for every array library ---------------------------------------------------------------------
def _blocks(rng, n=6, M=1, L=3, V=5):
    """Random blocks with exact zeros and near-equal laws: p (n, M, L, V), q (n, M, L+1, V), x (n, M, L)."""

    def laws(*shape):
        w = rng.dirichlet(np.full(V, 0.5), size=shape)
        w[rng.random(w.shape) < 0.15] = 0.0
        w[..., 0] += 1e-3
        return w / w.sum(-1, keepdims=True)

    p, q = laws(n, M, L), laws(n, M, L + 1)
    q[0, :, :L] = p[0] + 1e-9 * (q[0, :, :L] - p[0])  # one nearly equal block
    if M > 1:  # every row of a batch round shares the root laws
        p[:, :, 0], q[:, :, 0] = p[:, :1, 0], q[:, :1, 0]
    x = np.stack([np.stack([[rng.choice(V, p=p[i, m, j]) for j in range(L)] for m in range(M)]) for i in range(n)])
    return p, q, x


ROUND_CASES = [m for m in METHODS if reading(m) != "trees"]  # round laws of rows (trees: tests/test_trees.py)


def _round_law(method, p, q, x, *, bonus: bool):
    """``method``'s round law; SPRINTER's given the verdicts pass, …, pass, refuse (a round stops at a refusal)."""
    if isinstance(method, Sprinter):
        return method.round_law(p, q, x, bonus=bonus, predictions=[1.0] * (x.shape[-1] - 1) + [0.0])
    return method.round_law(p, q, x, bonus=bonus)


ROOT_CASES = [m for m in METHODS if m.rows > 1]


@pytest.mark.parametrize("method", ROOT_CASES, ids=[repr(m) for m in ROOT_CASES])
@pytest.mark.parametrize("seed", [0, 1])
def test_root_outcome_is_the_round_laws_root_over_the_drafts(method, seed):
    """The table engines read (RootTable.root_outcome) is the round law's root averaged over the M drafted tokens:
    for every tuple of first tokens (weight Π p(x_m)), a followed row adds its token, a refusal its correction law."""
    import itertools

    rng = np.random.default_rng(seed)
    V, M = 3, method.rows
    p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
    p[rng.integers(V)] = 0.0  # a token the draft never proposes
    p /= p.sum()
    expected = np.zeros(2 * V)
    for x in itertools.product(range(V), repeat=M):
        weight = np.prod(p[list(x)])
        if weight == 0:
            continue
        law = method.round_law(
            np.broadcast_to(p, (M, 1, V)), np.broadcast_to(q, (M, 2, V)), np.array(x)[:, None], bonus=False
        )
        np.add.at(expected, list(x), weight * law.outcome[:, 1])
        refusal = law.correction[0, 0] / law.correction[0, 0].sum()
        expected[V:] += weight * law.outcome[:, 0].sum() * refusal
    np.testing.assert_allclose(method.root_outcome(p, q), expected, atol=1e-12)
    assert method.root_outcome(p, q)[V:].sum() == pytest.approx(law.reject_prob[0, 0], abs=1e-12)


@pytest.mark.parametrize("method", ROUND_CASES, ids=[repr(m) for m in ROUND_CASES])
def test_numpy_rule_equals_torch_rule(method):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    L = method.draft_length(3)
    p, q, x = _blocks(rng, M=method.rows, L=L)
    for bonus in (True, False):
        a = _round_law(method, p, q, x, bonus=bonus)
        b = _round_law(method, torch.from_numpy(p), torch.from_numpy(q), torch.from_numpy(x), bonus=bonus)
        for name, value in a._asdict().items():
            if value is None:
                assert getattr(b, name) is None, name
                continue
            np.testing.assert_allclose(getattr(b, name).numpy(), value, rtol=1e-12, atol=1e-15, err_msg=name)
        np.testing.assert_allclose(a.outcome.sum(axis=(-2, -1)), 1.0, atol=1e-12)
        u = rng.random((2, p.shape[0]))
        da = sample_round(a, u[0], u[1])
        db = sample_round(b, torch.from_numpy(u[0]), torch.from_numpy(u[1]))
        for va, vb in zip(da, db):
            np.testing.assert_array_equal(va, vb.numpy())


@pytest.mark.parametrize("method", ROUND_CASES, ids=[repr(m) for m in ROUND_CASES])
def test_round_laws_are_probabilities_on_degenerate_blocks(method):
    """Every field of a round law is a probability (finite, in [0, 1]; the outcome sums to 1; weights >= 0) — also on
    the blocks where formulas divide by zero: every slot with ``p = q`` exactly (nothing to correct), and a first
    draft the target cannot produce (every later slot unreachable, its conditional probabilities given an
    impossible event still reported as probabilities). Under mutation block verification reported a refusal
    probability of 2 on the second, and no other test looked; OptimalMultiDraft reported −2.2e−16 on the first."""
    rng = np.random.default_rng(12)
    L = method.draft_length(3)
    p, q, x = _blocks(rng, n=3, M=method.rows, L=L)
    q[1, :, :L] = p[1]  # p = q at every drafted slot
    if L:
        q[2, :, 0, x[2, :, 0]] = 0.0  # the target refuses every row's first draft
        q[2, :, 0] /= q[2, :, 0].sum(-1, keepdims=True)
    for bonus in (True, False):
        law = _round_law(method, p, q, x, bonus=bonus)
        for name in ("outcome", "reject_prob", "accept_prob"):
            v = np.asarray(getattr(law, name))
            assert np.all(np.isfinite(v)) and np.all((v >= 0) & (v <= 1)), (name, v)
        np.testing.assert_allclose(law.outcome.sum(axis=(-2, -1)), 1.0, atol=1e-12)
        assert np.all(np.isfinite(law.correction)) and np.all(law.correction >= 0)
        if L and method.unbiased and type(method).name != "sprinter":  # a refused first draft is never kept
            np.testing.assert_allclose(law.outcome[2, :, 1:], 0.0, atol=1e-15)


@pytest.mark.parametrize("method", ROUND_CASES, ids=[repr(m) for m in ROUND_CASES])
def test_sampled_decisions_follow_the_round_law(method, agrees):
    """``sample_round`` draws (row, accepted) with the law's probabilities (Monte Carlo, one block)."""
    rng = np.random.default_rng(9)
    p, q, x = _blocks(rng, n=1, M=method.rows, L=method.draft_length(3))
    law = _round_law(method, p, q, x, bonus=True)
    n = 20_000
    tiled = type(law)(*(None if v is None else np.repeat(v, n, axis=0) for v in law))
    row, tau, token = sample_round(tiled, rng.random(n), rng.random(n))
    freq = np.zeros(law.outcome.shape[1:])
    np.add.at(freq, (row, tau), 1.0 / n)
    exact = law.outcome[0]
    agrees(freq, exact, f"{method!r}: law of (row, accepted) of one round", se=binomial_se(exact, n))
    if isinstance(method, Sprinter):  # no bonus token ever: a round whose refused draft is kept ends there
        np.testing.assert_array_equal(token >= 0, tau < x.shape[-1])
    else:
        assert np.all(token >= 0)  # with a bonus position, every outcome is followed by a token


# -- the CLI asks each method for its own theory ---------------------------------------------------------------
def _cli_args(method) -> list[str] | None:
    cls = type(method)
    if not cls.constructible_from_cli():
        return None
    argv = ["--method", cls.name]
    for name, f in cli_params(cls).items():
        value = getattr(method, name)
        if value != f.default and value is not None:
            argv += [option(name), str(value)]
    return argv


CLI_CASES = [m for m in METHODS if _cli_args(m) is not None]


def test_every_command_line_parameter_has_a_command_line_type():
    """Functions and arrays (heads, verifiers, acceptance tables) are Python-only: a parameter on the command line
    must parse from a string as int, float or str."""
    from speculab.methods.base import REGISTRY

    for cls in REGISTRY.values():
        for name, f in cli_params(cls).items():
            assert f.metadata["type"] in (int, float, str), (cls.name, name)
    assert "head" not in cli_params(SpecDecPP) and not {"verifier", "threshold"} & set(cli_params(Sprinter))


@pytest.mark.parametrize("method", CLI_CASES, ids=[repr(m) for m in CLI_CASES])
def test_cli_sim_prints_the_methods_own_theory(method, capsys, agrees):
    argv = ["sim", "--T", "8", "--V", "3", "--seed", "4", "--n-runs", "20000", "--json"] + _cli_args(method)
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == repr(method)
    expected = method.expected(MarkovInstance.random(8, 3, 4))
    if expected is None:
        assert out["theory"] == {} and out["theory_source"].startswith("none")
        return
    assert out["theory"] == pytest.approx(dict(expected.items()), rel=1e-12)
    assert out["theory_source"] == expected.source
    agrees_json(agrees, out)


def test_cli_biased_regression(capsys, agrees):
    """The reported bug: ``sim --method biased`` printed Thm 1's SD value (z ≈ −200) as its theory."""
    argv = ["sim", "--method", "biased", "--eps", "0.2", "--T", "10", "--V", "3", "--seed", "1", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    inst = MarkovInstance.random(10, 3, 1)
    assert out["theory"]["rejections"] == pytest.approx(Biased(0.2).expected(inst).rejections, rel=1e-12)
    assert abs(out["theory"]["rejections"] - SD().expected(inst).rejections) > 1.0
    agrees_json(agrees, out, ["rejections"])


def test_methods_listing_names_every_method(capsys):
    assert main(["methods", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == set(REGISTRY)
    assert out["sd"]["options"] == {"--K": dataclasses.fields(SD)[0].metadata["help"]}
    assert out["optimal-batch"]["real_models"] is False and out["sd"]["real_models"] is True


# -- one randomness argument --------------------------------------------------------------------------------
def test_key_is_one_argument_with_the_same_types_everywhere():
    """``key``: an int seed, a numpy Generator or a torch Generator, in simulate and MarkovInstance.random alike."""
    torch = pytest.importorskip("torch")
    from speculab.methods.sprinter import simulate_stopping

    for key in (3, np.random.default_rng(3), torch.Generator().manual_seed(3)):
        inst = MarkovInstance.random(6, 3, key)
        assert simulate(inst, SD(K=2), 100, key=key).n_runs == 100
        assert simulate_stopping(0.5, 0.5, 2, 10, key).shape == (10,)
    same = [simulate(MarkovInstance.random(6, 3, 5), SD(), 500, key=9).rejections for _ in range(2)]
    np.testing.assert_array_equal(*same)
    for bad in ("seed", -1, 1 << 64, True, 2.0, None):
        with pytest.raises(ValueError, match="key must be an int seed in \\[0, 2\\*\\*64\\)"):
            simulate(MarkovInstance.random(6, 3, 5), SD(), 10, key=bad)
        with pytest.raises(ValueError, match="key must be"):
            MarkovInstance.random(6, 3, bad)


@pytest.mark.parametrize(
    "b, P, match",
    [
        (lambda p, q: p * 0 + 1, None, r"b <= min\(1, q/p\)"),  # accept everything, yet "unbiased": refused
        (lambda p, q: p * 0 + 3, None, r"in \[0, 1\]"),
        (lambda p, q: p * np.nan, None, "NaN refused"),
        (lambda p, q: q[..., :1], None, "shape of p"),
        (lambda p, q: 0.5 * kernels.sd_acceptance(p, q), lambda p, q, b: -q, "non-negative"),
        (lambda p, q: 0.5 * kernels.sd_acceptance(p, q), lambda p, q, b: q[..., :1], "shape of p"),
    ],
)
def test_a_user_rule_is_checked_wherever_it_runs(b, P, match):
    """The same checks on the simulator's tables and on the laws a real model gives one round at a time."""
    method = RejectionDecoding(b=b, rejection=P)
    p = np.array([[[0.5, 0.3, 0.2]]])
    q = np.array([[[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]])
    with pytest.raises(ValueError, match=match):
        method.round_law(p, q, np.array([[0]]), bonus=True)  # what decode calls with the models' laws
    with pytest.raises(ValueError):
        simulate(_tiny(), method, 10, key=0)


def test_rule_arguments_that_are_not_arrays_are_named():
    with pytest.raises(ValueError, match="b must be an array of numbers"):
        RejectionDecoding(b="x")
    with pytest.raises(ValueError, match="b and the instance's"):
        simulate(_tiny(), RejectionDecoding(b=0.5), 10, key=0)


def test_rule_arrays_are_tied_to_their_instance():
    """An array ``b`` (or ``P``) is one instance's: the rule applies it to that instance's kernels and refuses other
    laws (a real model's rows) by name, instead of broadcasting it against them (found by mutation testing)."""
    inst = _tiny(0)
    b = 0.6 * kernels.sd_acceptance(inst.P, inst.Q)
    rule = RejectionDecoding(b=b).rule(inst.P, inst.Q)
    np.testing.assert_array_equal(rule.acceptance, b)
    with pytest.raises(
        ValueError,
        match=r"b is a \(3, 3, 3\) array tied to one Markov instance; give a function "
        r"b\(p, q\) to use it elsewhere",
    ):
        RejectionDecoding(b=b).rule(inst.P[0], inst.Q[0])
    P = kernels.optimal_rejection(inst.P, inst.Q, 0.5 * b)
    np.testing.assert_array_equal(
        RejectionDecoding(b=lambda p, q: 0.3 * kernels.sd_acceptance(p, q), rejection=P).rule(inst.P, inst.Q).rejection,
        P,
    )
    with pytest.raises(
        ValueError, match=r"rejection is a .* array tied to one Markov instance; give a function rejection\(p, q, b\)"
    ):
        RejectionDecoding(b=lambda p, q: 0.3 * kernels.sd_acceptance(p, q), rejection=P).rule(inst.P[0], inst.Q[0])


# -- the JAX engine runs every method's own rule ---------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_jax_engine_matches_the_enumeration(method, agrees):
    """engine='jax' reads only the protocol (slotwise flag, rows, draft_length, round_law, position_law,
    adaptive_drafting): the same counts and the same law of whole sequences as the enumeration."""
    pytest.importorskip("jax")
    inst = _tiny(3)
    law, exact, rej_pos = _exact(method, inst)
    c = simulate(inst, method, _runs(method), key=7, engine="jax", return_sequences=True)
    _assert_matches(agrees, c, law, exact, rej_pos, f"{method!r} on the JAX engine", method)
    np.testing.assert_array_equal(c.accepted + c.rejections + c.bonus, c.tokens)


@pytest.mark.parametrize("method", [m for m in ROUND_CASES if m.rows == 1] + [BatchSD(1, K=2)], ids=repr)
def test_a_round_without_drafts_is_one_token_from_the_target(method):
    """The protocol's rule the decoding loop relies on to skip the law of an empty round: with ``L = 0`` every
    method outputs one token from ``q_1`` (outcome 1 at τ = 0, its weights ``q_1`` exactly)."""
    rng = np.random.default_rng(2)
    V = 5
    p, q = np.zeros((1, 1, 0, V)), rng.dirichlet(np.ones(V), size=(1, 1, 1))
    x = np.zeros((1, 1, 0), dtype=np.int64)
    law = method.round_law(p, q, x, bonus=True, **({"predictions": []} if isinstance(method, Sprinter) else {}))
    np.testing.assert_array_equal(law.outcome, [[[1.0]]])
    np.testing.assert_array_equal(law.correction[0, 0, 0], q[0, 0, 0])


@pytest.mark.parametrize("bonus", [True, False])
@pytest.mark.parametrize("M", [1, 3])
def test_sds_closed_form_round_law_is_the_chain_law_of_its_rule(bonus, M):
    """``SD.round_law`` skips the generic chain law's passes over the vocabulary (``b`` only at the drafts, the
    refusal probability as the residual's mass, unnormalised residual weights); it must be the generic law of
    ``sd_rule`` — on blocks with exact zeros, a nearly equal block, and a slot with ``p = q`` exactly (no residual
    mass: the rule falls back to ``q``)."""
    from speculab.methods.chain import chain_round_law
    from speculab.methods.sd import sd_rule

    rng = np.random.default_rng(7)
    p, q, x = _blocks(rng, n=8, M=M, L=3)
    q[1, :, 1] = p[1, :, 1]  # a slot with p = q exactly
    p[2, :, 0], q[2, :, 0] = [1.0, 0, 0, 0, 0], [0, 0, 0, 0.5, 0.5]  # disjoint supports: every draft refused
    x[2, :, 0] = 0
    fast = SD(K=3).round_law(p, q, x, bonus=bonus)
    generic = chain_round_law(sd_rule(p, q[..., :-1, :]), p, q, x, bonus=bonus, biased=False)
    for name in ("outcome", "reject_prob", "accept_prob"):
        np.testing.assert_allclose(getattr(fast, name), getattr(generic, name), rtol=0, atol=1e-15, err_msg=name)
    assert fast.law is None and generic.law is None

    def unit(w):
        s = w.sum(-1, keepdims=True)
        return np.divide(w, s, out=np.zeros_like(w), where=s > 0)

    np.testing.assert_allclose(unit(fast.correction), unit(generic.correction), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(fast.correction.sum(-1) > 0, generic.correction.sum(-1) > 0)  # same rows empty
    np.testing.assert_array_equal(fast.correction[1, :, 1], q[1, :, 1])  # p = q: the fallback is q itself


@pytest.mark.parametrize("rejection, unbiased", [("opt", True), ("uno", False)])
def test_biased_decoding_at_zero_tolerance(rejection, unbiased):
    """``Biased(0, "opt")`` is SD (unbiased, [Yin] Thm 4 with ε = 0); ``Biased(0, "uno")`` still corrects from ``q``
    and is biased — ``unbiased`` must say which, and the exact law agree (found by mutation testing)."""
    method = Biased(0.0, rejection, K=2)
    assert method.unbiased is unbiased
    inst = _tiny(0)
    law, _, _ = _rounds(method, inst)
    target = sequence_law(inst.Q, inst.rho)
    gap = max(abs(law.get(k, 0.0) - target.get(k, 0.0)) for k in set(law) | set(target))
    assert bool(gap < 1e-12) == unbiased


def test_sd_names_the_theorem_its_expectation_comes_from():
    """``K ≥ T`` never leaves a bonus position: [Yin] Thm 1 itself; a smaller K: the lookahead counts."""
    inst = _tiny(0)
    assert SD().expected(inst).source == SD(K=inst.T).expected(inst).source == "[Yin] Thm 1"
    assert SD(K=inst.T - 1).expected(inst).source.startswith("exact lookahead counts")


@pytest.mark.parametrize("rejection", ["opt", "uno"])
def test_biased_compare_rows_read_the_verified_steps(rejection):
    """The Thm 5 row on hand-made records: OPT reports the largest |P(reject) + Loss_TV − TV| over verified steps
    (a bonus step is not verified and its numbers are ignored), UNO the mean gap."""
    from types import SimpleNamespace

    from speculab.counts import BONUS, CORRECTION, DRAFT

    def record(kind, tv, reject, loss):
        n = len(kind)
        return SimpleNamespace(
            kind=np.array(kind),
            tv=np.array(tv),
            reject_prob=np.array(reject),
            loss_tv=np.array(loss),
            loss_kl=np.full(n, 0.5),
        )

    records = [
        record([DRAFT, CORRECTION], [0.3, 0.2], [0.1, 0.25], [0.2, 0.0]),  # gaps 0, +0.05
        record([DRAFT, BONUS], [0.4, 0.0], [0.2, 0.9], [0.1, 0.9]),
    ]  # gaps −0.1, (bonus: 1.8, ignored)
    counts = SimpleNamespace(rejections=np.array([1.0, 0.0]), tokens=np.array([2.0, 2.0]), n_runs=2)
    rows = Biased(0.1, rejection).compare_rows(SimpleNamespace(result=SimpleNamespace(records=records, counts=counts)))
    gap = rows[0]
    if rejection == "opt":
        assert gap.measured == pytest.approx(0.1, abs=1e-15) and gap.predicted == 0.0 and gap.tolerance == 1e-5
    else:
        assert gap.measured == pytest.approx((0.0 + 0.05 - 0.1) / 3, abs=1e-15) and math.isnan(gap.predicted)
    assert rows[1].measured == pytest.approx((0.2 + 0.0 + 0.1) / 3, abs=1e-15)  # per-token loss, verified steps
    assert rows[2].measured == 0.5


# -- the protocol's own rules (found by mutation testing) -------------------------------------------------------
def test_register_refuses_what_would_break_the_registry_or_the_command_line():
    from speculab.methods.base import param, register

    @dataclasses.dataclass(frozen=True)
    class Nameless(Method):
        pass

    for name in (None, "", 3):
        cls = type("Bad", (Nameless,), {"name": name})
        with pytest.raises(ValueError, match="needs a class attribute `name`"):
            register(cls)
    with pytest.raises(ValueError, match="method name 'sd' is taken by SD"):
        register(type("Other", (Nameless,), {"name": "sd"}))
    assert register(SD) is SD  # registering a class again is harmless

    @dataclasses.dataclass(frozen=True)
    class Clash(Method):
        name = "clash-test"
        K: str = param("a", help="a K of another type", type=str)

    @dataclasses.dataclass(frozen=True)
    class Choices(Method):
        name = "choices-test"
        rejection: str = param("opt", help="other choices", type=str, choices=("opt", "x"))

    for cls in (Clash, Choices):
        with pytest.raises(ValueError, match="clashes with"):
            register(cls)
        assert cls.name not in REGISTRY


def test_protocol_defaults():
    """What the protocol's helpers give: a head's output must be a probability, a round law's variance of τ, every
    round of a head-reading method that does not say otherwise calls the target."""
    from speculab.methods.base import RoundLaw

    assert SpecDecPP(0.5).target_called([0.3, 0.9]) is True and Sprinter(0.9, 0.1).target_called([1.0, 0.0]) is True
    assert Sprinter(0.9, 0.1).target_called([1.0, 1.0]) is False
    for ok in (0, 0.5, 1):
        assert head_probability(ok, "head") == ok
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="the head gave"):
            head_probability(bad, "head")
    law = RoundLaw(outcome=np.array([[[0.2, 0.3, 0.5]]]), correction=None, reject_prob=None, accept_prob=None)
    mean, var = law.expected_accepted()
    assert mean[0] == pytest.approx(1.3, abs=1e-15) and var[0] == pytest.approx(2.3 - 1.3**2, abs=1e-15)
    # every draft accepted at the horizon: nothing follows, the token is -1 (documented)
    done = RoundLaw(
        outcome=np.array([[[0.0, 1.0]]]), correction=np.zeros((1, 1, 2, 3)), reject_prob=None, accept_prob=None
    )
    assert [int(v[0]) for v in sample_round(done, np.array([0.5]), np.array([0.5]))] == [0, 1, -1]
    assert not RejectionDecoding.constructible_from_cli() and SD.constructible_from_cli()  # b has no CLI form


def test_names_filter_by_engine_and_command_line():
    from speculab.methods.base import names

    assert names() == list(REGISTRY)
    real, cli = names(real_models=True), names(cli=True)
    assert "sd" in real and "optimal-batch" not in real and set(names(real_models=False)) == set(REGISTRY) - set(real)
    assert all(REGISTRY[n].constructible_from_cli() for n in cli)
    assert set(names(cli=False)) == set(REGISTRY) - set(cli) and "rejection" in names(cli=False)
    assert set(names(real_models=True, cli=True)) == set(real) & set(cli)


def test_sample_round_batched_over_two_axes_is_each_blocks_own_draw():
    """``sample_round`` over a ``(2, 3)`` batch of blocks draws, block by block, what it draws for that block alone
    (the token's cumulative sum runs over the vocabulary, the last axis, whatever the batch's rank — found by
    mutation testing of the fast tier: ``axis=1`` for ``axis=-1`` survived, every fast test's batch being 1-D)."""
    rng = np.random.default_rng(4)
    method = BatchSD(2, K=2)
    p, q, x = _blocks(rng, n=6, M=method.rows, L=method.draft_length(3))
    law = _round_law(method, p, q, x, bonus=True)
    u, v = rng.random(6), rng.random(6)
    grid = type(law)(*(None if a is None else a.reshape(2, 3, *a.shape[1:]) for a in law))
    row, tau, token = sample_round(grid, u.reshape(2, 3), v.reshape(2, 3))
    for i in range(6):
        one = type(law)(*(None if a is None else a[i : i + 1] for a in law))
        expected = sample_round(one, u[i : i + 1], v[i : i + 1])
        assert (row.reshape(-1)[i], tau.reshape(-1)[i], token.reshape(-1)[i]) == tuple(int(e[0]) for e in expected)


class _Uniforms:
    """A generator whose ``random(n)`` returns ``n`` copies of one value (to hit a boundary of a uniform draw)."""

    def __init__(self, u: float):
        self.u = u

    def random(self, n: int) -> np.ndarray:
        return np.full(n, self.u)


@pytest.mark.parametrize("u", [0.0, np.nextafter(1.0, 0.0)])
def test_a_draft_is_accepted_iff_its_uniform_is_below_b(u):
    """The numpy simulator accepts a draft iff ``U < b`` with ``U`` uniform on [0, 1): a draft with ``b = 0`` is
    refused even at ``U = 0``, one with ``b = 1`` accepted even at ``U`` just below 1 (found by mutation testing of
    the fast tier: ``<=`` for ``<`` survived — it accepts with probability ``b + 2⁻⁵³`` at ``b = 0``)."""
    from speculab.methods.chain import Rule
    from speculab.sim.engine import _Verify

    @dataclasses.dataclass(frozen=True)
    class OnlyOne(SD):
        def rule(self, p, q):
            b = np.zeros_like(p)
            b[..., 1] = 1.0  # token 1 always accepted, the others never
            return Rule(b, q)

    inst = _tiny(4)
    draft = np.array([0, 1, 2, 1])
    ok, x = _Verify(OnlyOne(), inst)(0, np.zeros(4, dtype=int), draft, _Uniforms(u))
    np.testing.assert_array_equal(ok, [False, True, False, True])
    np.testing.assert_array_equal(x[[1, 3]], [1, 1])


@pytest.mark.parametrize("lead", [(), (3,)], ids=["no batch", "batch of 3"])
def test_autoregressive_round_law_is_one_token_from_q(lead):
    """A round of autoregressive decoding, with or without batch axes: one row, no draft, one slot whose token is
    drawn from ``q_1`` and counted as a rejection — outcome and rejection probability 1, no acceptance
    (``(..., 1, 0)``), the correction ``q`` itself (found by mutation testing of the fast tier: reading the shapes
    from the wrong axes survived — no fast test called this law without a batch axis)."""
    rng = np.random.default_rng(2)
    V = 4
    p, x = np.zeros((*lead, 1, 0, V)), np.zeros((*lead, 1, 0), dtype=np.int64)
    q = rng.dirichlet(np.ones(V), size=(*lead, 1, 1))
    law = Autoregressive().round_law(p, q, x, bonus=True)
    np.testing.assert_array_equal(law.outcome, np.ones((*lead, 1, 1)))
    np.testing.assert_array_equal(law.reject_prob, np.ones((*lead, 1, 1)))
    assert law.accept_prob.shape == (*lead, 1, 0) and law.law is None
    np.testing.assert_array_equal(law.correction, q)
    _, tau, token = sample_round(law, np.full(lead, 0.3), np.full(lead, 0.6))
    np.testing.assert_array_equal(tau, 0)
    np.testing.assert_array_equal(token, np.argmax(np.cumsum(q[..., 0, 0, :], axis=-1) > 0.6, axis=-1))
