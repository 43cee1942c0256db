"""The JAX simulation engine: keys, jit = eager, both slot paths, sequences, sweeps, sharding (statistics per method
are in ``tests/test_methods.py``, which runs every registered method on both engines)."""

import os
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from conftest import binomial_se  # noqa: E402
from speculab.methods import (  # noqa: E402
    SD,
    Autoregressive,
    BatchSD,
    Biased,
    BlockVerification,
    Fuzzy,
    Method,
    SpecDecPP,
    Sprinter,
)
from speculab.sim import jax_common, jax_engine, simulate  # noqa: E402
from speculab.methods.capabilities import Slotwise, has  # noqa: E402
from speculab.sim.jax_engine import simulate_sweep  # noqa: E402
from speculab.theory import MarkovInstance  # noqa: E402


@pytest.fixture(scope="module")
def inst():
    return MarkovInstance.random(8, 4, 1, concentration=0.7)


def _same(a, b):
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.slow
@pytest.mark.parametrize("method", [SD(K=3), BatchSD(2), BlockVerification(2)], ids=repr)
def test_same_key_same_counts_and_keys_of_every_kind(inst, method):
    a = simulate(inst, method, 3000, key=5, engine="jax")
    _same(a, simulate(inst, method, 3000, key=5, engine="jax"))
    _same(
        simulate(inst, method, 3000, key=jax.random.key(9), engine="jax"),
        simulate(inst, method, 3000, key=jax.random.key(9), engine="jax"),
    )
    b = simulate(inst, method, 3000, key=6, engine="jax")
    assert not np.array_equal(a.rejections, b.rejections)
    simulate(inst, method, 10, key=np.random.default_rng(0), engine="jax")  # a numpy generator gives a seed
    simulate(inst, method, 10, key=2**64 - 1, engine="jax")  # 64-bit seeds are folded, not truncated


@pytest.mark.parametrize(
    "key, match",
    [
        (-1, "out of range"),
        ("seed", "key must be"),
        (1.5, "key must be"),
        (np.zeros(3, dtype=np.float32), "key must be"),
        (jax.random.split(jax.random.key(0), 2), "JAX PRNG key"),
    ],
)
def test_bad_keys_are_refused(inst, key, match):
    with pytest.raises(ValueError, match=match):
        simulate(inst, SD(), 10, key=key, engine="jax")


def test_bad_run_counts_are_refused(inst):
    with pytest.raises(ValueError, match="n_runs"):
        simulate(inst, SD(), 0, key=0, engine="jax")
    with pytest.raises(ValueError, match="engine must be"):
        simulate(inst, SD(), 10, key=0, engine="torch")


class _AvoidsTheDraft(SD):
    """Not Algorithm 2: after a refusal it weighs the refused draft twice in the correction, which then depends on
    the draft — what :class:`~speculab.methods.capabilities.Slotwise` rules out."""

    def round_law(self, p, q, x, *, bonus):
        import jax.numpy as jnp

        law = super().round_law(p, q, x, bonus=bonus)
        w, L = law.correction, x.shape[-1]
        twice = 1.0 + (jnp.arange(w.shape[-1]) == x[..., None])  # (..., M, L, V)
        return law._replace(correction=jnp.concatenate([w[..., :L, :] * twice, w[..., L:, :]], axis=-2))


class _VerifiedByAvoidsTheDraft(SpecDecPP):
    def adaptive_drafting(self, inst):
        return super().adaptive_drafting(inst)._replace(verifier=_AvoidsTheDraft())


def test_a_slotwise_method_whose_correction_depends_on_the_draft_is_refused(inst):
    """The engine tabulates one correction per position and context; a slotwise method whose correction depends
    on the refused draft breaks the contract and is refused — alone, in a sweep and as a verifier."""
    match = "_AvoidsTheDraft is slotwise but its correction after a refused draft depends on the draft"
    with pytest.raises(ValueError, match=match):
        simulate(inst, _AvoidsTheDraft(K=2), 10, key=0, engine="jax")
    with pytest.raises(ValueError, match=match):
        simulate_sweep(inst, [_AvoidsTheDraft(K=1), _AvoidsTheDraft(K=2)], 10, key=0)
    with pytest.raises(ValueError, match=match):
        simulate(inst, _VerifiedByAvoidsTheDraft(0.5), 10, key=0, engine="jax")


def _agree2(agrees, a, b, name, what):
    """Two-sample agreement of the mean of count ``name`` of simulation ``a`` with that of the reference ``b``
    (standard errors in quadrature; the power is against a 10 % error of the reference's mean)."""
    x, y = a.estimate(name), b.estimate(name)
    agrees(x.mean, y.mean, what, se=np.hypot(x.se, y.se))


def _token_law_agrees(agrees, c, t: int, target):
    """The law of the token at sequence column ``t`` of simulation ``c`` against ``target`` (binomial errors)."""
    law = np.bincount(c.sequences[:, t], minlength=len(target)) / c.n_runs
    agrees(law, target, f"law of x_{t}", se=binomial_se(target, c.n_runs))


SDPP_COUNTS = ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus")


@pytest.mark.parametrize(
    "method",
    [pytest.param(SpecDecPP(1.0, max_K=20), marks=pytest.mark.slow), SpecDecPP(0.7, max_K=6), SpecDecPP(0.0)],
    ids=repr,
)
def test_specdecpp_runs_with_the_drafting_it_discards(method, agrees):
    """Rounds rejected before the rule stops keep drafting (counted only); with T = 24 and max_Ks up to 20 many such
    chains overlap in the pool. The same counts in law as the numpy engine's literal step."""
    long = MarkovInstance.random(24, 4, 6, concentration=0.5)
    a = simulate(long, method, 20_000, key=1)
    b = simulate(long, method, 20_000, key=2, engine="jax")
    for name in SDPP_COUNTS:
        _agree2(agrees, b, a, name, f"{name}, JAX vs numpy")
    if method.h == 0:  # no draft follows an uncertain one: the only discarded drafts are the rejected ones
        np.testing.assert_array_equal(b.discarded, b.rejections)
    else:
        assert np.all(b.discarded >= b.rejections) and b.discarded.mean() > b.rejections.mean() + 1  # and counted


@pytest.mark.slow
def test_specdecpp_that_never_stops_early_is_sd_with_lookahead_cap(agrees):
    """h = 1: every round drafts min(max_K, remaining) tokens whatever is rejected, as SD(K=max_K) does: the exact
    lookahead counts hold for every count."""
    inst = MarkovInstance.random(12, 4, 2, concentration=0.5)
    # 2 chunks of CHUNK = 2^16 runs, one compiled shape: the bonus (6 % of runs) needs 82,000 to see a 10 % error
    c, e = simulate(inst, SpecDecPP(1.0, max_K=5), 131_072, key=1, engine="jax"), SD(K=5).expected(inst)
    for name in SDPP_COUNTS:
        agrees(c.estimate(name), e.get(name), f"{name} vs SD(K=5)")


@pytest.mark.parametrize(
    "T, max_K, engine",
    [  # JAX's compiled pools: the full tier's, but for the horizon's (T < max_K: drafting cut by it), 9 s here
        pytest.param(T, max_K, engine, marks=pytest.mark.slow if engine == "jax" and T >= max_K else ())
        for T, max_K in [(10, 10), (24, 20), (12, 5), (6, 20)]
        for engine in ["numpy", "jax"]
    ],
)
def test_specdecpp_drafting_past_rejections_is_all_counted(T, max_K, engine):
    """Where every draft is rejected, with h = 1 every position starts a round whose drafting outlives its rejection
    by min(max_K, T − t) − 1 drafts: each run's count is exactly Σ_t min(max_K, T − t), with min(max_K, T) − 1 chains of
    each run drafting at once (a pool one chain short per run loses drafts)."""
    disjoint = MarkovInstance.context_free([0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], T)
    c = simulate(disjoint, SpecDecPP(1.0, max_K=max_K), 500, key=0, engine=engine)
    np.testing.assert_array_equal(c.draft_calls, sum(min(max_K, T - t) for t in range(T)))
    np.testing.assert_array_equal(c.rejections, T)
    assert SD(K=max_K).expected(disjoint).draft_calls == pytest.approx(c.draft_calls[0], abs=1e-9)


def _record_pool_chunks(monkeypatch) -> list:
    """Record each call of SpecDec++'s compiled chunk as ``(C, peak)``: the pool's slots and the most chains it held."""
    from speculab.sim import jax_adaptive

    calls, compiled = [], jax_adaptive._adaptive_chunk_fn

    def recording(stops, T, S, n, C, keep):
        fn = compiled(stops, T, S, n, C, keep)

        def call(*args):
            out = fn(*args)
            calls.append((C, int(out[3])))
            return out

        return call

    monkeypatch.setattr(jax_adaptive, "_adaptive_chunk_fn", recording)
    return calls


@pytest.mark.parametrize(
    "T, max_K",
    [*(pytest.param(T, max_K, marks=pytest.mark.slow) for T, max_K in [(10, 10), (6, 20), (12, 5)]), (6, 2), (6, 1)],
)
def test_specdecpp_pool_bound_is_the_most_chains_a_run_holds(T, max_K, monkeypatch):
    """The pool's bound per run, G = min(max_K, T) − 1 chains drafting past rejections at once, is reached: where every
    draft is rejected and h = 1 each run holds exactly G (the peak the compiled chunk reports is n G; with max_K = 2,
    one), and with max_K = 1 none, so no pool is compiled (C = 0)."""
    from speculab.sim import jax_adaptive

    calls = _record_pool_chunks(monkeypatch)
    monkeypatch.setattr(jax_adaptive, "_POOL_HINT", {})
    disjoint = MarkovInstance.context_free([0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], T)
    simulate(disjoint, SpecDecPP(1.0, max_K=max_K), 200, key=0, engine="jax")
    G = min(max_K, T) - 1
    assert calls[-1][1] == 200 * G
    assert calls[-1][0] >= 200 * G and (calls == [(0, 0)]) == (G == 0)


@pytest.mark.slow
def test_a_sweep_over_the_cap_sizes_its_pool_for_the_largest(monkeypatch):
    """Points with different max_Ks share one pool, sized for the largest max_K's chains: every point's drafting past
    rejections is counted in full; and a bound that is too small is an error, not a silent loss of drafts."""
    from speculab.sim import jax_adaptive

    T, max_Ks = 12, (2, 8, 5)
    disjoint = MarkovInstance.context_free([0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], T)
    points = simulate_sweep(disjoint, [SpecDecPP(1.0, max_K=c) for c in max_Ks], 200, key=0)
    for max_K, c in zip(max_Ks, points):
        np.testing.assert_array_equal(c.draft_calls, sum(min(max_K, T - t) for t in range(T)))
    monkeypatch.setattr(jax_adaptive, "_ghost_slots", lambda max_K, T: 1)
    with pytest.raises(RuntimeError, match="overflowed"):
        simulate(disjoint, SpecDecPP(1.0, max_K=5), 200, key=1, engine="jax")


@pytest.mark.parametrize("n", [1, 8, 40, 100, 4096])
@pytest.mark.parametrize("G", [1, 3, 19])
def test_specdecpp_pool_grows_by_doubling_from_an_eighth_of_the_runs(n, G):
    """A pool that overflowed is sized n/8 · 2^k, the least such with room for 1.25 × the chains it must hold,
    at most n G (which always suffices) — against the closed form."""
    from speculab.sim.jax_adaptive import _pool_size

    start = max(n // 8, 1)
    for peak in range(0, n * G + 1, max(n * G // 37, 1)):
        k = max(0, int(np.ceil(np.log2(max(1.25 * peak, 1) / start) - 1e-12)))
        assert _pool_size(n, G, peak) == min(start * 2**k, n * G), (n, G, peak)


def test_adaptive_drafting_the_engine_cannot_run_is_refused(inst):
    """The JAX engine verifies each draft with a one-row slotwise rule and shares one stopping rule over a sweep:
    a verifier with two rows, one that is not slotwise, or points with different rules are refused."""

    class Drafting(SpecDecPP):  # SpecDec++ with another verifier or stopping rule in its tables
        def __init__(self, h, verifier=None, stops=None):
            super().__init__(h)
            self._verifier, self._stops = verifier, stops

        def adaptive_drafting(self, inst):
            rule = super().adaptive_drafting(inst)
            return rule._replace(verifier=self._verifier or rule.verifier, stops=self._stops or rule.stops)

    for verifier in (BatchSD(2), BlockVerification(2)):
        with pytest.raises(ValueError, match="verifier must be a slotwise method of one row"):
            simulate(inst, Drafting(0.5, verifier), 10, key=0, engine="jax")
    from speculab.methods.specdecpp import stops_drafting

    def never_before_the_cap(prod, count, t, T, h, max_K):
        return (count >= max_K) | (t + 1 >= T)

    with pytest.raises(ValueError, match="share one stopping rule"):
        simulate_sweep(inst, [Drafting(0.5, stops=stops_drafting), Drafting(0.5, stops=never_before_the_cap)], 10, 0)
    assert len(simulate_sweep(inst, [Drafting(0.5), Drafting(0.7, stops=stops_drafting)], 10, 0)) == 2


@pytest.mark.parametrize("method", [SD(K=3), pytest.param(SpecDecPP(0.9, max_K=4), marks=pytest.mark.slow)], ids=repr)
def test_the_same_key_gives_the_same_counts_whatever_jaxs_threefry_setting(inst, method):
    """The engines draw in one Threefry counter layout (jax_common.sequential_stream) whatever the caller's global
    ``jax_threefry_partitionable``: a key splits and draws alike under both, and the adaptive
    engine's pool still gives counts that do not depend on its size."""
    before = jax.config.jax_threefry_partitionable
    runs = {}
    try:
        for flag in (True, False):
            jax.config.update("jax_threefry_partitionable", flag)
            runs[flag] = simulate(inst, method, 700, key=5, engine="jax", return_sequences=True)
    finally:
        jax.config.update("jax_threefry_partitionable", before)
    _same(runs[True], runs[False])
    assert np.array_equal(runs[True].sequences, runs[False].sequences)


@pytest.mark.slow
def test_specdecpp_counts_do_not_depend_on_the_pool_size(inst, monkeypatch):
    """The chains drafting past rejections share a pool that grows when it overflows: a pool started with one slot
    (overflow, then the chunk run again with a larger one) gives the same counts as the default, for the same key."""
    method = SpecDecPP(0.9, max_K=6)
    default = simulate(inst, method, 3000, key=4, engine="jax")

    class OneSlot(dict):
        def get(self, key, default=None):
            return 1

    from speculab.sim import jax_adaptive

    monkeypatch.setattr(jax_adaptive, "_POOL_HINT", OneSlot())
    calls = _record_pool_chunks(monkeypatch)
    _same(default, simulate(inst, method, 3000, key=4, engine="jax"))
    sizes = [C for C, _ in calls]
    assert sizes[0] == 1 and len(sizes) >= 2 and sizes[-1] > 1


@pytest.mark.slow
def test_specdecpp_heads_as_tables_and_functions_run_on_jax(inst, agrees):
    from speculab.methods.specdecpp import miscalibrated_head, noisy_head

    heads = {
        "noisy": noisy_head(inst, 1.0, 3),
        "miscalibrated": miscalibrated_head(inst, 2.0),
        "function": lambda t, prev, x: np.where(prev == x, 0.9, 0.6 - 0.05 * t),
    }
    for kind, head in heads.items():
        method = SpecDecPP(0.5, head=head, max_K=4)
        a, b = simulate(inst, method, 20_000, key=1), simulate(inst, method, 20_000, key=2, engine="jax")
        for name in SDPP_COUNTS:
            _agree2(agrees, b, a, name, f"{name}, {kind} head, JAX vs numpy")


@pytest.mark.parametrize(
    "head, match",
    [
        (lambda t, prev, x: np.full(3, 0.5), "must return an array of shape"),
        (lambda t, prev, x: 2.0 + 0 * x, r"probabilities in \[0, 1\]"),
        ("head", "head must be callable"),
    ],
)
@pytest.mark.parametrize("engine", ["numpy", "jax"])
def test_bad_heads_are_refused_on_both_engines(inst, head, match, engine):
    with pytest.raises(ValueError, match=match):
        simulate(inst, SpecDecPP(0.5, head=head), 10, key=0, engine=engine)


def test_specdecpp_tables_over_the_budget_are_refused(inst, monkeypatch):
    """Per-token tables (T' A' V² = T V³ entries on a full instance) run at a budget of exactly that and are refused
    one entry below it."""
    monkeypatch.setattr(jax_common, "TABLE_BUDGET", inst.T * inst.V**3)
    assert simulate(inst, SpecDecPP(0.5), 10, key=0, engine="jax").n_runs == 10
    monkeypatch.setattr(jax_common, "TABLE_BUDGET", inst.T * inst.V**3 - 1)
    with pytest.raises(ValueError, match="SpecDecPP from per-token tables, which would exceed TABLE_BUDGET"):
        simulate(inst, SpecDecPP(0.5), 10, key=0, engine="jax")


def test_a_head_table_for_another_instance_is_refused(inst):
    from speculab.methods.specdecpp import oracle_head

    head = oracle_head(MarkovInstance.random(5, 4, 0))
    for engine in ("numpy", "jax"):
        with pytest.raises(ValueError, match=r"head's table has shape \(5, 4, 4\); the instance needs \(8, 4, 4\)"):
            simulate(inst, SpecDecPP(0.5, head=head), 10, key=0, engine=engine)


def test_sprinter_with_a_verifier_function_runs_from_its_position_law(inst, agrees):
    """A trained verifier is any function of (t, prev, x): tabulated once, run by the scan."""
    method = Sprinter(verifier=lambda t, prev, x: np.where(x == 0, 0.9, 0.2))
    c = simulate(inst, method, 20_000, key=3, engine="jax")
    e = method.expected(inst)
    for name in ("rejections", "oracle_calls", "accepted"):
        agrees(c.estimate(name), e.get(name), name)
    np.testing.assert_array_equal(c.verifier_calls, inst.T)


@pytest.mark.parametrize("engine", ["numpy", "jax"])
def test_sprinter_corrects_only_at_a_position_it_called_the_target(engine):
    """A correction is the target's token: with one position, a run that is corrected made the call. The expected
    counts cannot tell a correction drawn without a call (an independent uniform for the call), this can."""
    one = MarkovInstance.random(1, 4, 0, concentration=0.7)
    c = simulate(one, Sprinter(0.8, 0.2), 5000, key=0, engine=engine)
    assert (c.rejections <= c.oracle_calls).all()
    assert c.rejections.sum() > 100 and (c.oracle_calls > c.rejections).sum() > 100  # both outcomes of a call occur
    assert (c.oracle_calls == 0).sum() > 100  # and passes without one


@pytest.mark.slow
@pytest.mark.parametrize("method", [SD(K=2), BatchSD(2, K=2), BlockVerification(2)], ids=repr)  # compile-bound
def test_jitted_and_eager_runs_agree(method):
    short = MarkovInstance.random(4, 3, 2, concentration=0.7)  # eager JAX dispatches op by op: keep it small
    jitted = simulate(short, method, 100, key=3, engine="jax")
    with jax.disable_jit():
        eager = simulate(short, method, 100, key=3, engine="jax")
    _same(jitted, eager)


class _BatchWithoutRootTable(BatchSD):
    """Batch SD without its :class:`~speculab.methods.capabilities.RootTable`: its later slots from tables, its
    root's one-slot round over the M rows evaluated in the scan (``M + 2`` uniforms)."""

    root_outcome = None  # opts out of the capability


@pytest.mark.slow
@pytest.mark.parametrize(
    "method", [SD(K=2), Biased(0.1), Fuzzy(0.2, "tv"), BatchSD(2, K=2), _BatchWithoutRootTable(2, K=2)], ids=repr
)
def test_tabulated_and_evaluated_slot_laws_agree_in_law(inst, method, monkeypatch, agrees):
    """Above TABLE_BUDGET the one-slot law is evaluated inside the scan: the same counts in law as the tables."""
    expected = method.expected(inst)
    tabulated = simulate(inst, method, 20_000, key=1, engine="jax")
    monkeypatch.setattr(jax_common, "TABLE_BUDGET", 0)
    evaluated = simulate(inst, method, 20_000, key=2, engine="jax")
    for kind, c in (("tabulated", tabulated), ("evaluated", evaluated)):
        for name in ("rejections", "oracle_calls", "accepted", "bonus"):
            agrees(c.estimate(name), expected.get(name), f"{name}, {kind} slot law")


def test_sequences_are_the_runs_tokens(inst, agrees):
    n = 12_000  # a 10 % error of the law of x_1 needs 9,800 runs
    c = simulate(inst, SD(K=2), n, key=0, engine="jax", return_sequences=True)
    assert c.sequences.shape == (n, inst.T + 1) and c.sequences.min() >= 0 and c.sequences.max() < inst.V
    _token_law_agrees(agrees, c, 1, inst.rho @ inst.Q[0])  # x_1 ~ Σ_a ρ(a) Q[0, a] (SD is unbiased)


@pytest.mark.slow
@pytest.mark.parametrize(
    "method, p, q",
    [
        (SD(K=2), [0.6, 0.2, 0.2, 0.0], [0.2, 0.2, 0.3, 0.3]),
        (BatchSD(2, K=2), [0.7, 0.1, 0.1, 0.1], [0.1, 0.3, 0.3, 0.3]),
        (BatchSD(3, K=2), [0.7, 0.1, 0.1, 0.1], [0.1, 0.3, 0.3, 0.3]),
    ],
    ids=["SD", "BatchSD, M = 2", "BatchSD, M = 3"],
)
@pytest.mark.parametrize("budget", [None, 0], ids=["tabulated", "evaluated"])
def test_a_correction_is_drawn_with_its_own_uniform(method, p, q, budget, monkeypatch, agrees):
    """A correction drawn with the uniform that decided the refusal is drawn from part of [0, 1) only, which moves
    the law of the token whenever the residual spreads over several tokens — tabulated, and evaluated in the scan.

    SD: p = (0.6, 0.2, 0.2, 0), q = (0.2, 0.2, 0.3, 0.3); refusing x = 0 (accepted with probability 1/3) leaves the
    residual (0, 0, 0.1, 0.3)/0.4. Drawn with the refusal's uniform, the correction is token 2 with probability
    0.375 instead of 0.25 where the refusal is u < 2/3 (evaluated: ``sample_round`` puts it first) and never where
    it is u ≥ 1/3 (tabulated), so P(x_1 = 2) is 0.35 or 0.2 instead of q's 0.3. Batch SD's evaluated root: on
    p = (0.7, 0.1, 0.1, 0.1), q = (0.1, 0.3, 0.3, 0.3) it refuses only where both drafts are 0 and the first is
    refused (0.7 · 6/7 · 0.7 = 0.42), leaving the residual (0, 1, 1, 1)/3; drawn with the refusal's uniform
    (u < 6/7), P(x_1 = 3) = 0.16 + 0.42 · 2/9 = 0.253 instead of 0.3 (0.16: token 3 accepted as a draft). On SD's
    instance batch SD's residual after both rows is (0, 0, 1/16, 15/16), where the same mistake moves P(x_1 = 2)
    by 0.01 only, under this test's bound. With three rows the root's outcome must not reuse a draft's uniform
    either: drawn with the third draft's (``u[2]``, which with two rows is the outcome's own), x_1 = 0 had
    frequency 0.030 instead of 0.1 in 16,000 runs."""
    if budget is not None:
        monkeypatch.setattr(jax_common, "TABLE_BUDGET", budget)
    free = MarkovInstance.context_free(p, q, T=2)
    n = 16_000  # against a 10 % error, 12,000 runs have power 0.985 only (SD's instance: q's entries of 0.2)
    c = simulate(free, method, n, key=0, engine="jax", return_sequences=True)
    target = free.Q[0, 0]  # both methods are unbiased
    for t in (1, 2):
        _token_law_agrees(agrees, c, t, target)


def test_batch_sd_runs_on_a_context_free_instance(agrees):
    """A context-free instance's compact kernels have one context row, so the vocabulary is their last axis, not
    their second — which the root's tabulated outcome (``2V`` entries: accept ``x``, or refuse and output ``y``)
    must split at."""
    rng = np.random.default_rng(0)
    free = MarkovInstance.context_free(rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4)), T=6)
    method = BatchSD(2, K=2)
    c = simulate(free, method, 20_000, key=0, engine="jax", return_sequences=True)
    e = method.expected(free)
    for name in ("rejections", "accepted", "bonus"):
        agrees(c.estimate(name), e.get(name), name)
    _token_law_agrees(agrees, c, 1, free.Q[0, 0])  # batch SD is unbiased: every token is q's


@pytest.mark.parametrize(
    "layout",
    [(True, True), (True, False), (False, True), (False, False)],
    ids=["full", "per position", "stationary", "context-free"],
)
def test_a_compact_table_is_read_as_its_full_broadcast(layout):
    """Both engines read row ``(t, a)`` of a compact ``(T', A', V)`` table (``T' = 1`` or ``A' = 1`` broadcast) as the
    full table's — ``_Tables.row``, and ``_at`` on a stack of sweep points — against numpy's ``broadcast_to``, at
    T = V = 2 and at T = 5, V = 3 (every entry distinct, so a wrong row cannot pass)."""
    from speculab.sim.jax_adaptive import _at

    by_position, by_context = layout
    rng = np.random.default_rng(1)
    for T, V in ((2, 2), (5, 3)):
        A = rng.random((T if by_position else 1, V if by_context else 1, V)).astype(np.float32)
        full = np.broadcast_to(A, (T, V, V))
        stack = jax.numpy.asarray(np.stack([A, A + 1]))  # two sweep points
        for t in range(T):
            for a in range(V):
                np.testing.assert_array_equal(jax_engine._Tables.row(jax.numpy.asarray(A), t, a), full[t, a])
                np.testing.assert_array_equal(_at(stack, 1, t, a), full[t, a] + 1)


@pytest.mark.slow
def test_stationary_instance_stays_compact_on_the_device(agrees):
    rng = np.random.default_rng(0)
    P, Q = rng.dirichlet(np.ones(300), size=300), rng.dirichlet(np.ones(300), size=300)
    inst = MarkovInstance.stationary(P, Q, T=200)  # (T, V, V) would be 144 MB per kernel in float64
    c = simulate(inst, SD(), 2000, key=0, engine="jax")
    agrees(c.estimate("rejections"), SD().expected(inst).rejections, "rejections")


@pytest.mark.slow
def test_sweep_over_eps_in_one_call_matches_each_points_theory(inst, agrees):
    eps = [0.0, 0.05, 0.2, 0.6]
    methods = [Biased(e, K=3) for e in eps]
    n = 131_072  # 2 chunks of one compiled shape: the rejections of ε = 0.6 need 72,000 runs to see a 10 % error
    runs = simulate_sweep(inst, methods, n, key=0)
    for m, c in zip(methods, runs):
        e = m.expected(inst)
        for name in ("rejections", "oracle_calls", "accepted"):
            agrees(c.estimate(name), e.get(name), f"{name}, {m}")
    assert runs[0].rejections.mean() > runs[-1].rejections.mean()


def test_sweep_over_a_stack_of_instances(inst, agrees):
    insts = [MarkovInstance.random(8, 4, s, concentration=0.7) for s in range(3)]
    for s, (i, c) in enumerate(zip(insts, simulate_sweep(insts, SD(K=2), 20_000, key=1))):
        agrees(c.estimate("oracle_calls"), SD(K=2).expected(i).oracle_calls, f"oracle calls, instance {s}")


def test_a_sweep_of_one_point(inst, agrees):
    """One method on one instance is a sweep of one point: a list of one ``Counts``, the method's."""
    (c,) = simulate_sweep(inst, SD(K=2), 20_000, key=3)
    agrees(c.estimate("oracle_calls"), SD(K=2).expected(inst).oracle_calls, "oracle calls")


@pytest.mark.slow
@pytest.mark.parametrize(
    "methods",
    [
        [SD(K=1), SD(K=2), SD(K=5), SD()],
        [BatchSD(1), BatchSD(2, K=3), BatchSD(4), BatchSD(3, K=1)],
    ],
    ids=["K", "M and K"],
)
def test_sweeps_over_lookahead_and_draft_rows(inst, methods, agrees):
    """K and M are traced numbers of one compiled call; the root tables are padded to the largest M."""
    for m, c in zip(methods, simulate_sweep(inst, methods, 65_536, key=4)):  # the bonus of K = 5 needs 58,000
        e = m.expected(inst)
        for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
            agrees(c.estimate(name), e.get(name), f"{name}, {m}")


@pytest.mark.slow
def test_sweep_over_the_specdecpp_threshold(inst, agrees):
    """h and max_K are traced numbers of one compiled call; the points share one pool of chains drafting past
    rejections."""
    methods = [SpecDecPP(h, max_K=c) for h, c in [(0.0, 20), (0.3, 3), (0.6, 5), (0.9, 20), (1.0, 4)]]
    n = 131_072  # 2 chunks of one compiled shape: the bonus of h = 0.9 needs 78,000 runs on each side
    runs = simulate_sweep(inst, methods, n, key=5)
    for m, b in zip(methods, runs):
        a = simulate(inst, m, n, key=6)
        for name in SDPP_COUNTS:
            _agree2(agrees, b, a, name, f"{name}, {m}, sweep vs numpy")
    assert runs[0].draft_calls.mean() < runs[3].draft_calls.mean()
    assert all(r.sequences is None for r in runs)  # a sweep keeps no sequences


@pytest.mark.parametrize(
    "methods, match",
    [
        ([SD(), Biased(0.1)], "parameters of one method; got SD"),
        ([BlockVerification(2)], "BlockVerification is neither"),
        ([SpecDecPP(0.5), SD()], "parameters of one method; got SpecDecPP"),
        ([], "give one instance or one method"),
        ([_BatchWithoutRootTable(2, K=1), _BatchWithoutRootTable(2, K=2)], "needs the root as tables"),
    ],
)
def test_sweeps_that_would_change_shapes_are_refused(inst, methods, match):
    with pytest.raises(ValueError, match=match):
        simulate_sweep(inst, methods, 10, key=0)


def test_sweeps_over_instances_that_do_not_stack_are_refused(inst):
    """The points' instances stack only with the same T, V and storage; lists must pair up."""
    for other in (
        MarkovInstance.random(inst.T + 1, inst.V, 0),
        MarkovInstance.random(inst.T, inst.V + 1, 0),
        MarkovInstance.stationary(inst.P[0], inst.Q[0], inst.T),
    ):
        with pytest.raises(ValueError, match="the instances of a sweep must have the same T, V and storage"):
            simulate_sweep([inst, other], SD(), 10, key=0)
    with pytest.raises(ValueError, match="inst must be a MarkovInstance or a list of them; got str"):
        simulate_sweep([inst, "inst"], SD(), 10, key=0)
    with pytest.raises(ValueError, match="lists of the same length; got 2 instances and 3 methods"):
        simulate_sweep([inst, inst], [SD(), SD(K=2), SD(K=3)], 10, key=0)


def test_sweep_is_sharded_over_several_devices():
    """With two (virtual CPU) devices the sweep axis is split over them and gives the same counts; a sweep of three
    points, which does not divide, runs on the default device."""
    code = (
        "import jax, numpy as np\n"
        "from speculab.theory import MarkovInstance\n"
        "from speculab.methods import Biased\n"
        "from speculab.sim.jax_engine import simulate_sweep\n"
        "assert jax.device_count() == 2\n"
        "put, seen = jax.device_put, []\n"
        "jax.device_put = lambda x, s=None, **kw: (seen.append(s), put(x, s, **kw))[1]\n"
        "inst = MarkovInstance.random(6, 3, 0)\n"
        "r = simulate_sweep(inst, [Biased(e) for e in (0.0, 0.1, 0.2, 0.3)], 500, key=0)\n"
        "assert any(isinstance(s, jax.sharding.NamedSharding) and s.mesh.devices.size == 2 for s in seen), seen\n"
        "print(','.join(str(int(c.rejections.sum())) for c in r))\n"
        "seen.clear()\n"
        "r = simulate_sweep(inst, [Biased(e) for e in (0.0, 0.1, 0.2)], 500, key=0)\n"
        "assert not any(isinstance(s, jax.sharding.NamedSharding) for s in seen), seen\n"
        "print(','.join(str(int(c.rejections.sum())) for c in r))\n"
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    two = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    inst = MarkovInstance.random(6, 3, 0)
    one = [
        simulate_sweep(inst, [Biased(e) for e in eps], 500, key=0) for eps in ((0.0, 0.1, 0.2, 0.3), (0.0, 0.1, 0.2))
    ]
    assert two.split() == [",".join(str(int(c.rejections.sum())) for c in r) for r in one]


@pytest.mark.slow
@pytest.mark.parametrize(
    "method", [SD(K=3), BatchSD(2), BlockVerification(2), Sprinter(0.8, 0.2), SpecDecPP(0.6)], ids=repr
)
def test_chunks_get_their_own_keys(inst, method, monkeypatch, agrees):
    """Runs past one compiled call (CHUNK) come from a new key: the chunks differ and the law is unchanged."""
    monkeypatch.setattr(jax_common, "CHUNK", 1000)
    # 20 chunks: the bonus (of SD(K=3), SpecDecPP) needs 20,000 runs beside the reference's to see a 10 % error
    c = simulate(inst, method, 20_000, key=3, engine="jax", return_sequences=True)
    assert not np.array_equal(c.sequences[:1000], c.sequences[1000:2000])
    whole = simulate(inst, method, 20_000, key=4)  # numpy reference
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
        _agree2(agrees, c, whole, name, f"{name}, chunked JAX vs numpy")


@pytest.mark.slow
@pytest.mark.parametrize(
    "method", [SD(K=3), BatchSD(2), BlockVerification(2), Sprinter(0.8, 0.2), SpecDecPP(0.6)], ids=repr
)
def test_every_run_asked_for_is_simulated_once(inst, method, monkeypatch):
    """However the runs split into chunks (CHUNK = 1000 here: one run, two chunks, two chunks and a half), the
    counts and sequences hold exactly ``n_runs`` runs, alone and in a sweep."""
    monkeypatch.setattr(jax_common, "CHUNK", 1000)
    sweepable = has(method, Slotwise) or isinstance(method, SpecDecPP)
    for n in (1, 2000, 2501):
        c = simulate(inst, method, n, key=0, engine="jax", return_sequences=True)
        assert c.n_runs == n and c.rejections.shape == c.bonus.shape == (n,) and c.sequences.shape == (n, inst.T + 1)
        if sweepable:
            assert [p.n_runs for p in simulate_sweep(inst, [method, method], n, key=0)] == [n, n]


def _slow(*values):
    return pytest.param(*values, marks=pytest.mark.slow)


@pytest.mark.parametrize(
    "method, width, budget",
    [
        _slow(SD(K=3), 3, None),
        _slow(BatchSD(2), 3, None),
        _slow(BatchSD(2), 4, 0),
        _slow(_BatchWithoutRootTable(2), 4, None),
        (BlockVerification(2), 4, None),  # the fast tier's run of the round-by-round path end to end
        _slow(BatchSD(3, K=1), 3, None),
        _slow(Autoregressive(), 3, None),
        (Sprinter(0.8, 0.2), 3, None),  # and of a method decided position by position
        _slow(SpecDecPP(0.6), 3, None),
    ],
    ids=lambda v: repr(v) if isinstance(v, Method) else str(v),
)
def test_uniforms_per_position_are_those_a_run_draws(inst, method, width, budget, monkeypatch):
    """The module docstring's count — 3 for a slotwise method read from its tables (the root's too), M + 2 when its
    law is evaluated in the scan (tables over the budget), max(M L, 1) + 2 round by round, 3 for SPRINTER and
    SpecDec++ — is the width of the uniforms each run draws per position (recorded while the chunk is traced) and
    what ``uniforms_per_position`` reports."""
    if budget is not None:
        monkeypatch.setattr(jax_common, "TABLE_BUDGET", budget)
    n, widths, uniform = 37, set(), jax.random.uniform

    def recording(key, shape=(), *args, **kwargs):
        if len(shape) == 2 and shape[0] == n:
            widths.add(shape[1])
        return uniform(key, shape, *args, **kwargs)

    monkeypatch.setattr(jax.random, "uniform", recording)
    simulate(inst, method, n, key=0, engine="jax")
    assert widths == {width} and jax_engine.uniforms_per_position(method, inst) == width


def test_the_random_number_bound_is_uniforms_per_second_over_the_width(monkeypatch):
    """``positions_per_second_bound(width)``: the uniforms JAX draws per second (the best of the repeats) over
    ``width`` — on a clock where the timed draws take 5 s then 2 s, ``n / 2 / width``."""
    import time

    now = iter([0.0, 5.0, 10.0, 12.0])
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(now)))
    assert jax_engine.positions_per_second_bound(4, n=1024, repeats=2) == 1024 / 2 / 4


def test_simulate_jax_keeps_sequences_only_when_asked(inst):
    assert jax_engine.simulate_jax(inst, SD(K=2), 10, key=0).sequences is None
    assert jax_engine.simulate_jax(inst, SD(K=2), 10, key=0, return_sequences=True).sequences.shape == (10, inst.T + 1)


def test_sweep_points_get_independent_keys(inst, agrees):
    a, b = simulate_sweep(inst, [Biased(0.1), Biased(0.1)], 4000, key=0)  # 3,700 see a 10 % error
    assert not np.array_equal(a.rejections, b.rejections)
    _agree2(agrees, a, b, "rejections", "rejections of two sweep points")


@pytest.mark.slow
def test_large_vocabularies_run_in_smaller_chunks(monkeypatch):
    """Without tables a run evaluates rows of V inside the scan: the chunk shrinks so memory stays bounded."""
    big = MarkovInstance.context_free(np.full(20_000, 1 / 20_000), np.full(20_000, 1 / 20_000), T=3)
    assert jax_engine._chunk_runs(SD(), big, None) == jax_common.SCAN_BUDGET // 20_000
    assert jax_engine._chunk_runs(BatchSD(4), big, None) == jax_common.SCAN_BUDGET // 80_000
    assert jax_engine._chunk_runs(BlockVerification(2), big, None) == jax_common.SCAN_BUDGET // 60_000  # rows (L + 1) V
    assert jax_engine._chunk_runs(SD(), big, {"table": 1}) == jax_common.CHUNK
    assert jax_engine._chunk_runs(SD(), MarkovInstance.random(3, 4, 0), None) == jax_common.CHUNK  # at most CHUNK
    c = simulate(big, SD(), 2000, key=0, engine="jax")  # p = q: nothing is ever rejected
    assert c.rejections.sum() == 0 and c.accepted.mean() == 3
    monkeypatch.setattr(jax_common, "SCAN_BUDGET", 10_000)  # one run's rows over the budget: one run at a time
    assert jax_engine._chunk_runs(SD(), big, None) == 1


def test_function_heads_and_verifiers_over_the_table_budget_are_refused(monkeypatch):
    monkeypatch.setattr(jax_common, "TABLE_BUDGET", 100)
    inst = MarkovInstance.stationary(np.full((4, 4), 0.25), np.full((4, 4), 0.25), T=20)  # 16 entries, tabled
    head = lambda t, prev, x: np.full(x.shape, 0.5)  # noqa: E731  a function: tabulated over (T, V, V) = 320
    with pytest.raises(ValueError, match="TABLE_BUDGET"):
        simulate(inst, SpecDecPP(0.5, head=head), 10, key=0, engine="jax")
    with pytest.raises(ValueError, match="TABLE_BUDGET"):
        simulate(inst, Sprinter(verifier=lambda t, prev, x: np.ones(x.shape)), 10, key=0, engine="jax")
    monkeypatch.setattr(jax_common, "TABLE_BUDGET", 3 * 320)  # SPRINTER's three (T, V, V) tables: exactly the budget
    assert simulate(inst, Sprinter(verifier=lambda t, prev, x: np.ones(x.shape)), 10, key=0, engine="jax").n_runs == 10


def test_the_engines_streams_are_sequential_and_the_pools_size_free():
    """``sequential_stream`` draws in JAX's sequential Threefry layout whatever the global setting (the layouts
    differ on this draw, so the test can tell them apart); ``size_free_uniforms`` draws element ``i`` the same for
    every size past ``i``, which the sequential layout does not (also checked here)."""
    key = jax.random.PRNGKey(7)
    with jax.threefry_partitionable(True), jax_common.sequential_stream():
        inside = np.asarray(jax.random.uniform(key, (5,)))
    with jax.threefry_partitionable(False):
        sequential = np.asarray(jax.random.uniform(key, (5,)))
        sequential_9 = np.asarray(jax.random.uniform(key, (9,)))
    with jax.threefry_partitionable(True):
        partitionable = np.asarray(jax.random.uniform(key, (5,)))
    np.testing.assert_array_equal(inside, sequential)
    assert not np.array_equal(sequential, partitionable) and not np.array_equal(sequential, sequential_9[:5])
    with jax_common.sequential_stream():
        five, nine = (np.asarray(jax_common.size_free_uniforms(key, n, np.float32)) for n in (5, 9))
    np.testing.assert_array_equal(five, nine[:5])


def test_the_root_table_is_built_for_more_than_one_draft_row():
    """By default the slot tables carry the root's one-uniform table for a method with several draft rows that has
    one (BatchSD), and none for one row (SD)."""
    P, Q = np.full((3, 3), 1 / 3), np.array([[0.5, 0.3, 0.2]] * 3)
    with jax_common.sequential_stream():
        assert "root_cJ" in jax_common._slot_tables(BatchSD(2, K=2), P, Q)
        assert "root_cJ" not in jax_common._slot_tables(SD(K=2), P, Q)


def test_specdecpps_tokens_follow_the_target_in_the_jax_engine(agrees):
    """SpecDec++ is lossless: every output token follows q. The engine draws a position's draft, its verdict and
    its correction from three uniforms of their own; with the verdict's uniform reused for the correction, a refusal
    (u ≥ q(x)/p(x)) draws only from the top of the residual's CDF — here token 1 three times as often as token 0,
    where the residual (0.75, 0.25, 0, 0) has it a third as often (found by mutation testing: the counts'
    agreement tests could not see it)."""
    p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    free = MarkovInstance.context_free(p, q, T=2)
    c = simulate(free, SpecDecPP(0.7, max_K=2), 16_000, key=3, engine="jax", return_sequences=True)
    for t in (1, 2):
        _token_law_agrees(agrees, c, t, q)


def test_adaptive_runs_come_in_chunks_and_a_pool_too_small_is_an_error(monkeypatch):
    """Chunks of 64 runs: 100 runs are 64 and then 36, every one counted; points of a sweep with different caps
    share a pool sized for the largest cap (max_K = 1 drafts nothing past a rejection, 4 drafts 3 chains at once),
    where every draft is rejected and each run's drafts are Σ_t min(max_K, T − t); a bound too small for the chains
    (one per run) is an error, not a silent loss of drafts."""
    from speculab.sim import jax_adaptive

    monkeypatch.setattr(jax_common, "CHUNK", 64)
    monkeypatch.setattr(jax_adaptive, "_POOL_HINT", {})
    T = 6
    disjoint = MarkovInstance.context_free([0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], T)
    points = simulate_sweep(disjoint, [SpecDecPP(1.0, max_K=1), SpecDecPP(1.0, max_K=4)], 100, key=0)
    for max_K, c in zip((1, 4), points):
        assert c.n_runs == 100 and c.sequences is None  # a sweep keeps no tokens
        np.testing.assert_array_equal(c.draft_calls, sum(min(max_K, T - t) for t in range(T)))
    monkeypatch.setattr(jax_adaptive, "_ghost_slots", lambda max_K, T: 1)
    with pytest.raises(RuntimeError, match="overflowed"):
        simulate(disjoint, SpecDecPP(1.0, max_K=4), 100, key=1, engine="jax")


def _inverse_cdf(w: np.ndarray, u: float) -> tuple[int, float]:
    """The smallest ``i`` with ``cumsum(w)[i] > u · sum(w)``, and how far ``u`` lies from the nearest boundary (a
    uniform within float32's reach of one may fall either way in JAX's float)."""
    cum = np.cumsum(w) / w.sum()
    return int(np.argmax(cum > u)), float(np.min(np.abs(cum - u)))


def _slot_reference(method, p, q, slot, k, u, tabulated):
    """One slotwise position written out from the module docstring in numpy: ``(token, kind, near)``, ``near`` how
    close a uniform fell to a boundary. At a later slot, one row: the draft ``x₀`` from ``p`` at ``u₀``; from the
    tables it is accepted iff ``u₋₂ < a(x₀)``, while the evaluated one-slot round law refuses iff ``u₋₂ < 1 − a(x₀)``
    (sample_round's outcome order); the correction from the law's weights at ``u₋₁``. At the root of ``M > 1`` rows:
    from the root table, its outcome at ``u₋₂`` (``j < V``: ``j`` accepted, else ``j − V`` output); evaluated, the
    rows' drafts at ``u₀ … u_{M−1}`` and the one-slot round law of all of them drawn at ``u₋₂``, ``u₋₁``. After
    ``k`` accepted drafts, the bonus from ``q`` at ``u₀``."""
    from speculab.counts import BONUS, CORRECTION, DRAFT
    from speculab.methods.capabilities import root_table

    V, rows = p.size, method.rows
    if slot == k:
        token, near = _inverse_cdf(q, u[0])
        return token, BONUS, near
    if slot == 0 and rows > 1 and tabulated:
        j, near = _inverse_cdf(root_table(method, p[None], q[None])[0], u[-2])
        return (j, DRAFT, near) if j < V else (j - V, CORRECTION, near)
    m = rows if slot == 0 else 1
    drafts, near = zip(*(_inverse_cdf(p, u[i]) for i in range(m)))
    law = method.round_law(np.stack([p] * m)[:, None], np.stack([[q, q]] * m), np.array(drafts)[:, None], bonus=False)
    near = min(near)
    if m == 1 and tabulated:
        a = float(law.outcome[0, 1])
        near = min(near, abs(u[-2] - a))
        if u[-2] < a:
            return drafts[0], DRAFT, near
        token, near_c = _inverse_cdf(law.correction[0, 0], u[-1])
        return token, CORRECTION, min(near, near_c)
    row_tau, near_o = _inverse_cdf(law.outcome.reshape(-1), u[-2])  # sample_round: (row, τ) flattened, then token
    row, tau = divmod(row_tau, 2)
    if tau == 1:
        return drafts[row], DRAFT, min(near, near_o)
    token, near_c = _inverse_cdf(law.correction[row, 0], u[-1])
    return token, CORRECTION, min(near, near_o, near_c)


@pytest.mark.parametrize("tabulated", [True, False], ids=["tables", "evaluated"])
@pytest.mark.parametrize("method", [SD(K=2), Biased(0.2, "uno", K=2), BatchSD(2, K=2)], ids=repr)
def test_a_slotwise_position_is_its_documented_rule_on_its_uniforms(method, tabulated):
    """One position of a slotwise method at every position, context and slot, on random uniforms, against the rule
    written out in numpy (:func:`_slot_reference`): the token, its kind, the next slot, whether a round starts and
    its drafts ``M min(k, T − t)`` — which uniform each decision reads, not only the law it follows."""
    from speculab.counts import BONUS, DRAFT

    inst, k = MarkovInstance.random(4, 3, 5), 2
    _, jnp = jax_common._jax()
    P, Q, _ = jax_common._Tables(inst, jnp).arrays
    tables = jax_common._slot_tables(method, P, Q) if tabulated else None
    width = jax_engine._slot_width(method.rows, tables)
    cases = [(t, prev, slot) for t in range(inst.T) for prev in range(inst.V) for slot in range(k + 1)] * 6
    t, prev, slot = (np.array(c, dtype=np.int32) for c in zip(*cases))
    us = np.random.default_rng(6).random((len(cases), width))

    def one(t, prev, slot, u):
        return jax_engine._slot_position(
            method, k, method.rows, method.rows, True, inst.T, P, Q, tables, t, (prev, slot), u
        )

    (x, after), (x_out, kind_out, new_round, drafts) = jax.jit(jax.vmap(one))(t, prev, slot, jnp.asarray(us, P.dtype))
    checked = 0
    for i, u in enumerate(us):
        token, kind, near = _slot_reference(
            method, inst.P[t[i], prev[i]], inst.Q[t[i], prev[i]], slot[i], k, u, tabulated
        )
        if near < 1e-5:
            continue
        assert (int(x[i]), int(x_out[i]), int(kind_out[i])) == (token, token, kind), (cases[i], u)
        assert int(after[i]) == (slot[i] + 1 if kind == DRAFT else 0)
        assert bool(new_round[i]) == (slot[i] == 0) and not (kind == BONUS and slot[i] != k)
        assert int(drafts[i]) == (method.rows * min(k, inst.T - t[i]) if slot[i] == 0 else 0)
        checked += 1
    assert checked > 150


def test_a_slotwise_position_draws_three_uniforms_from_tables_else_one_per_row_and_two():
    """_slot_width: 3 from tables (with more than one row, only when the root is a table too), ``M + 2`` else (it
    reads which tables there are: stand-ins for a one-row method's and a root table's)."""
    one, two = {"cP": None, "accept": None, "cC": None}, {"cP": None, "accept": None, "cC": None, "root_cJ": None}
    assert [jax_engine._slot_width(1, one), jax_engine._slot_width(1, None)] == [3, 3]
    assert [jax_engine._slot_width(2, two), jax_engine._slot_width(2, one), jax_engine._slot_width(2, None)] == [
        3,
        4,
        4,
    ]
    assert [jax_engine._slot_width(3, one), jax_engine._slot_width(3, None)] == [5, 5]


def _round_reference(method, inst, t, prev, L, bonus, u):
    """A round of a round-by-round method started at position ``t`` after token ``prev``, written out in numpy from
    the docstring: draft row ``m``'s ``i``-th token from ``p`` at ``u[i M + m]``, the method's round law of the block
    (the target's law after it at ``min(t + L, T − 1)``), its decision drawn at ``u[M L]`` and ``u[M L + 1]``
    (sample_round); the tokens it outputs, their kinds, and how near a uniform fell to a boundary."""
    from speculab.counts import BONUS, CORRECTION, DRAFT, TARGET

    M, near = method.rows, 1.0
    a, ps, qs, xs = np.full(M, prev), [], [], []
    for i in range(L):
        p = inst.P[t + i, a]
        ps.append(p)
        qs.append(inst.Q[t + i, a])
        drawn = [_inverse_cdf(p[m], u[i * M + m]) for m in range(M)]
        a = np.array([d[0] for d in drawn])
        near = min([near] + [d[1] for d in drawn])
        xs.append(a)
    qs.append(inst.Q[min(t + L, inst.T - 1), a])
    V = inst.V
    x = np.stack(xs, -1) if L else np.zeros((M, 0), dtype=np.int64)
    p_blk = np.stack(ps, -2) if L else np.zeros((M, 0, V))
    law = method.round_law(p_blk, np.stack(qs, -2), x, bonus=bonus)
    flat, near_o = _inverse_cdf(law.outcome.reshape(-1), u[M * L])
    row, tau = divmod(flat, L + 1)
    w = law.correction[row, tau]
    out, kinds = list(x[row, :tau]), [DRAFT] * tau
    if w.sum() > 0:
        token, near_c = _inverse_cdf(w, u[M * L + 1])
        out.append(token)
        kinds.append(TARGET if L == 0 else CORRECTION if tau < L else BONUS)
        near = min(near, near_c)
    return out, kinds, min(near, near_o)


@pytest.mark.parametrize("method", [BlockVerification(2), Autoregressive()], ids=repr)
def test_a_round_by_round_position_is_its_documented_rule_on_its_uniforms(method):
    """Rounds of a method run round by round, started at every position and context on random uniforms, against
    :func:`_round_reference`: the round's first position draws it (M L drafts), the next ones emit its tokens and
    kinds from the buffers and draw nothing, and the position after its last starts the next round."""
    rng = np.random.default_rng(7)  # laws that change with the position (T = 5: no index t − L wraps onto t + L)
    inst = MarkovInstance(rng.dirichlet(np.ones(3), (5, 3)), rng.dirichlet(np.ones(3), (5, 3)), np.full(3, 1 / 3))
    _, jnp = jax_common._jax()
    P, Q, _ = jax_common._Tables(inst, jnp).arrays
    M, L_max = method.rows, method.draft_length(inst.T)
    width = max(M * L_max, 1) + 2
    checked = 0
    for start, stop, L, bonus in jax_engine._segments(method, inst.T):

        def step(t, state, u, L=L, bonus=bonus):
            return jax_engine._round_position(method, M, L, bonus, inst.T, L_max, P, Q, t, state, u)

        cases = [(t, prev) for t in range(start, stop) for prev in range(inst.V)] * 8
        t, prev = (np.array(c, dtype=np.int32) for c in zip(*cases))
        us = np.random.default_rng(start).random((len(cases), width))
        n = len(cases)
        state = (jnp.asarray(prev), jnp.zeros((n, L_max + 1), jnp.int32), jnp.zeros((n, L_max + 1), jnp.int8))
        state = (*state, jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32))
        run = jax.jit(jax.vmap(step))
        steps = []
        for _ in range(L_max + 2):  # a round's positions, then the next round's first
            state, emitted = run(jnp.asarray(t), state, jnp.asarray(us, P.dtype))
            steps.append([np.asarray(e) for e in emitted])
            assert state[1].shape == state[2].shape == (n, L_max + 1)  # the scan's carry keeps its shape
        for i in range(n):
            out, kinds, near = _round_reference(method, inst, t[i], prev[i], L, bonus, us[i])
            if near < 1e-5:
                continue
            k = len(out)
            assert [int(s[0][i]) for s in steps[:k]] == out and [int(s[1][i]) for s in steps[:k]] == kinds, cases[i]
            assert [bool(s[2][i]) for s in steps[: k + 1]] == [True] + [False] * (k - 1) + [True]
            assert [int(s[3][i]) for s in steps[:k]] == [M * L] + [0] * (k - 1)
            checked += 1
    assert checked > 60


def test_positions_are_grouped_by_the_shape_of_a_round_started_there():
    """_segments: ``(start, stop, L, bonus)`` with ``L = draft_length(T − t)`` and a bonus iff ``t + L < T``."""
    assert jax_engine._segments(BlockVerification(2), 4) == [(0, 2, 2, True), (2, 3, 2, False), (3, 4, 1, False)]
    assert jax_engine._segments(BlockVerification(3), 6) == [
        (0, 3, 3, True),
        (3, 4, 3, False),
        (4, 5, 2, False),
        (5, 6, 1, False),
    ]
    assert jax_engine._segments(Autoregressive(), 3) == [(0, 3, 0, True)]


@pytest.mark.parametrize(
    "method, width, budget",
    [
        (SD(K=3), 3, None),
        (BatchSD(2), 3, None),
        (BatchSD(2), 4, 0),
        (_BatchWithoutRootTable(2), 4, None),
        (BlockVerification(2), 4, None),
        (BlockVerification(3), 5, None),
        (BatchSD(3, K=1), 3, None),
        (Autoregressive(), 3, None),
        (Sprinter(0.8, 0.2), 3, None),
        (SpecDecPP(0.6), 3, None),
    ],
    ids=lambda v: repr(v) if isinstance(v, Method) else str(v),
)
def test_uniforms_per_position_follow_the_docstrings_count(inst, method, width, budget, monkeypatch):
    """``uniforms_per_position`` without running anything (the slow test above also counts the draws): 3 from
    tables, M + 2 evaluated, max(M L, 1) + 2 round by round, 3 for SPRINTER and SpecDec++."""
    if budget is not None:
        monkeypatch.setattr(jax_common, "TABLE_BUDGET", budget)
    assert jax_engine.uniforms_per_position(method, inst) == width


def test_a_chunk_holds_as_many_runs_as_the_scans_budget_allows(inst, monkeypatch):
    """_chunk_runs: CHUNK runs from tables; else SCAN_BUDGET over the rows of V a run evaluates in the scan — a
    slotwise method's M, a tree's 2 (width − 1), a round's M (L + 1) — and at least one run."""
    from speculab.methods import RRS

    monkeypatch.setattr(jax_common, "CHUNK", 1000)
    monkeypatch.setattr(jax_common, "SCAN_BUDGET", 240)
    V, T = inst.V, inst.T
    assert jax_engine._chunk_runs(SD(K=2), inst, {"cP": None}) == 1000
    assert jax_engine._chunk_runs(BatchSD(3, K=2), inst, None) == 240 // (3 * V)
    tree = RRS((2, 1))
    assert jax_engine._chunk_runs(tree, inst, None) == 240 // (2 * (jax_engine.tree_width(tree, T) - 1) * V)
    assert jax_engine._chunk_runs(BlockVerification(2), inst, None) == 240 // (3 * V)
    monkeypatch.setattr(jax_common, "SCAN_BUDGET", 1)
    assert jax_engine._chunk_runs(BlockVerification(2), inst, None) == 1
    monkeypatch.setattr(jax_common, "SCAN_BUDGET", 10**9)
    assert jax_engine._chunk_runs(BlockVerification(2), inst, None) == 1000


def test_runs_past_a_chunk_are_each_simulated_once_alone_and_in_sweeps(monkeypatch):
    """CHUNK = 4: two chunks, and two and a half, hold exactly the runs asked for, each run its own (no chunk
    repeated), alone and in sweeps over the lookahead and over the draft rows (the slow test above: more methods)."""
    monkeypatch.setattr(jax_common, "CHUNK", 4)
    small = MarkovInstance.random(3, 3, 2)
    for n in (8, 10):
        c = simulate(small, SD(K=2), n, key=0, engine="jax", return_sequences=True)
        assert c.n_runs == n and c.sequences.shape == (n, small.T + 1) and c.rejections.shape == (n,)
        assert not np.array_equal(c.sequences[:4], c.sequences[4:8])
    for methods in ([SD(K=1), SD(K=2)], [BatchSD(2, K=2), BatchSD(3, K=2)]):
        assert [p.n_runs for p in simulate_sweep(small, methods, 10, key=0)] == [10, 10]
        assert [p.n_runs for p in simulate_sweep([small, small], methods[0], 8, key=0)] == [8, 8]


def test_a_sprinter_position_is_its_documented_rule_on_its_uniforms():
    """One SPRINTER position at every position and context on random uniforms, against its position law written
    out in numpy: the draft from ``p`` at ``u₀``; kept without a call iff ``u₁ < free(x)``, kept after a call iff
    ``free(x) ≤ u₁ < free(x) + called(x)``, else corrected from the correction law at ``u₂``."""
    from speculab.counts import CORRECTION, DRAFT

    rng = np.random.default_rng(8)
    inst = MarkovInstance(rng.dirichlet(np.ones(3), (3, 3)), rng.dirichlet(np.ones(3), (3, 3)), np.full(3, 1 / 3))
    method = Sprinter(0.8, 0.3)
    free, called, correction, _ = method.position_law(inst)
    _, jnp = jax_common._jax()
    P, Q, _ = jax_common._Tables(inst, jnp).arrays
    tables, _ = jax_engine._position_tables(method, inst)
    cases = [(t, prev) for t in range(inst.T) for prev in range(inst.V)] * 12
    t, prev = (np.array(c, dtype=np.int32) for c in zip(*cases))
    us = rng.random((len(cases), 3))

    def one(t, prev, u):
        return jax_engine._decided_position(P, Q, tables, t, prev, u)

    x, (x_out, kind, call, drafted) = jax.jit(jax.vmap(one))(t, prev, jnp.asarray(us, P.dtype))
    checked = 0
    for i, u in enumerate(us):
        f = lambda a: np.asarray(a)[min(t[i], np.shape(a)[0] - 1), min(prev[i], np.shape(a)[1] - 1)]  # noqa: E731
        draft, near = _inverse_cdf(inst.P[t[i], prev[i]], u[0])
        kept, after_call = f(free)[draft], f(called)[draft]
        near = min(near, abs(u[1] - kept), abs(u[1] - kept - after_call))
        token, near_c = _inverse_cdf(f(correction), u[2]) if u[1] >= kept + after_call else (draft, 1.0)
        if min(near, near_c) < 1e-5:
            continue
        assert (int(x[i]), int(x_out[i])) == (token, token), (cases[i], u)
        assert int(kind[i]) == (CORRECTION if u[1] >= kept + after_call else DRAFT)
        assert bool(call[i]) == (u[1] >= kept) and int(drafted[i]) == 1
        checked += 1
    assert checked > 60


def test_a_sweep_over_draft_rows_gives_each_point_its_own_rows(inst, agrees):
    """One row and four in one compiled call: the root's tables are padded to the most rows, and the point of four
    rows rejects as batch SD with four drafts does, not as SD (the fast tier's twin of the sweeps over ``K`` and
    ``M``)."""
    methods = [BatchSD(1, K=2), BatchSD(4, K=2)]
    for m, c in zip(methods, simulate_sweep(inst, methods, 16_384, key=7)):
        e = m.expected(inst)
        for name in ("rejections", "oracle_calls"):
            agrees(c.estimate(name), e.get(name), f"{name}, {m}")


def test_several_draft_rows_without_tables_draw_their_own_uniforms(inst, monkeypatch, agrees):
    """Where the tables exceed their budget the root's one-slot round over the rows is evaluated in the scan, from
    ``rows + 2`` uniforms a position: the rows' drafts, then the outcome's and the token's, each its own (one shared
    between them, or with a draft, would correlate the round's outcome with its token or its drafts)."""
    monkeypatch.setattr(jax_common, "TABLE_BUDGET", 0)
    m, n = BatchSD(3, K=1), 16_384
    c = simulate(inst, m, n, key=8, engine="jax", return_sequences=True)
    e = m.expected(inst)
    for name in ("rejections", "oracle_calls", "accepted"):
        agrees(c.estimate(name), e.get(name), f"{name}, {m} without tables")
    mu = inst.marginals()
    for t in (1, 2, 5):  # each token a round of the three rows
        _token_law_agrees(agrees, c, t, mu[t])
