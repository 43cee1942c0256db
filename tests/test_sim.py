"""The numpy simulator against exact enumeration and T1 (Monte Carlo, fixed seeds, |z| < 5)."""

import dataclasses
from typing import ClassVar

import numpy as np
import pytest

from _enumerate import enumerate_decoding
from conftest import assert_power, binomial_se, power
from speculab.sim import SD, Autoregressive, BatchSD, BlockVerification, RejectionDecoding, Sprinter, simulate
from speculab.methods import Method
from speculab.methods.capabilities import Slotwise, has
from speculab.methods.sd import sd_rule
from speculab.theory import (
    MarkovInstance,
    chain_marginals,
    sd_acceptance,
    sd_expected_rejections,
    unbiased_rejection_distribution,
)

N = 60_000  # the rarest count checked (the bonus of K = 3 on T = 4) needs it to see a 10 % error


def _tiny(seed, T=4, V=3, c=0.7):
    return MarkovInstance.random(T, V, seed, concentration=c)


@pytest.mark.parametrize("K", [None, 1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_sd_counts_match_enumeration(K, seed, agrees):
    """Every expected count of Algorithm 1 (finite K with bonus, and K = ∞) vs the literal enumeration."""
    inst = _tiny(seed)
    B, R = sd_rule(inst.P, inst.Q)
    e = enumerate_decoding(inst.P, inst.Q, inst.rho, B, R, K)
    c = simulate(inst, SD(K=K), N, key=100 + seed)
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus"):
        agrees(c.estimate(name), getattr(e, name), name)
    # per position: binomial standard errors
    p = e.rejections_per_position
    agrees(c.rejections_per_position, p, "rejection rate per position", se=binomial_se(p, N))
    # exact identities, run by run
    np.testing.assert_array_equal(c.accepted + c.rejections + c.bonus, inst.T)
    np.testing.assert_array_equal(c.discarded, c.draft_calls - c.accepted)
    # the standard error itself is right: the simulated variance matches the exact one
    var = e.rejections_sq - e.rejections**2
    assert c.estimate("rejections").se == pytest.approx(np.sqrt(var / N), rel=0.05)


def test_alg2_with_user_acceptance_matches_enumeration(agrees):
    inst = _tiny(3)
    b = 0.6 * sd_acceptance(inst.P, inst.Q)
    R = unbiased_rejection_distribution(inst.P, inst.Q, b)
    e = enumerate_decoding(inst.P, inst.Q, inst.rho, b, R, 2)
    c = simulate(inst, RejectionDecoding(b=b, K=2), N, key=5)
    for name in ("rejections", "oracle_calls", "draft_calls", "bonus"):
        agrees(c.estimate(name), getattr(e, name), name)
    # a callable b gives the very same runs
    c2 = simulate(inst, RejectionDecoding(b=lambda p, q: 0.6 * sd_acceptance(p, q), K=2), N, key=5)
    np.testing.assert_array_equal(c.rejections, c2.rejections)


def test_sequence_law_matches_target_marginals(agrees):
    """Sampled tokens of SD follow q: per-position marginals within |z| < 5 of μ_n."""
    inst = MarkovInstance.random(12, 5, 8, row_law="uniform")
    c = simulate(inst, SD(K=3), N, key=9, return_sequences=True)
    mu = inst.marginals()
    assert c.sequences.shape == (N, inst.T + 1)
    for n in range(inst.T + 1):
        freq = np.bincount(c.sequences[:, n], minlength=inst.V) / N
        agrees(freq, mu[n], f"marginal law of x_{n}", se=binomial_se(mu[n], N))
    # the target's pair law at (n, n+1) as well: checks the transitions, not only marginals
    n = 6
    joint = np.zeros((inst.V, inst.V))
    np.add.at(joint, (c.sequences[:, n], c.sequences[:, n + 1]), 1.0 / N)
    exact = mu[n][:, None] * inst.Q[n]
    agrees(joint, exact, f"pair law of (x_{n}, x_{n + 1})", se=binomial_se(exact, N))


def test_t1_on_the_paper_sized_instance(agrees):
    """[Yin] Fig. 2(a) setting: T = 50, V = 7; the simulated mean agrees with T1."""
    inst = MarkovInstance.random(50, 7, 10, row_law="uniform")
    t1 = sd_expected_rejections(inst)
    c = simulate(inst, SD(), 20_000, key=11)
    agrees(c.estimate("rejections"), t1.rejections, "rejections")
    agrees(c.estimate("oracle_calls"), t1.oracle_calls, "oracle calls")
    agrees(
        c.rejections_per_position,
        t1.rejections_per_position,
        "rejection rate per position",
        se=binomial_se(t1.rejections_per_position, 20_000),
    )


@pytest.mark.power
def test_a_wrong_formula_would_be_caught(record_property):
    """Power of ``test_t1_on_the_paper_sized_instance`` against a plausible wrong answer (T1 under the draft's
    marginals instead of the target's), in standard errors of the same simulation. The total alone sits 4.5 s.e.
    away (power 0.31: this test once passed on a lucky draw); the per-position rates carry the power."""
    inst = MarkovInstance.random(50, 7, 10, row_law="uniform")
    per_position = np.einsum("na,na->n", chain_marginals(inst.rho, inst.P)[:-1], inst.tv())
    c = simulate(inst, SD(), 20_000, key=11)
    t1 = sd_expected_rejections(inst)
    total = (per_position.sum() - t1.rejections) / c.estimate("rejections").se
    r = t1.rejections_per_position
    rates = np.abs(per_position - r) / np.sqrt(r * (1 - r) / 20_000)
    assert power(total) < 0.5 < power(rates.max())
    assert_power(
        record_property,
        "SD rejections vs T1, total and per position (T = 50, V = 7, N = 20,000): T1 under the draft's marginals",
        power(rates.max()),
    )


def test_autoregressive_counts_and_law(agrees):
    inst = _tiny(2, T=5)
    c = simulate(inst, Autoregressive(), 20_000, key=1, return_sequences=True)
    assert np.all(c.rejections == 5) and np.all(c.oracle_calls == 5) and np.all(c.draft_calls == 0)
    mu = inst.marginals()
    freq = np.bincount(c.sequences[:, -1], minlength=inst.V) / 20_000
    agrees(freq, mu[-1], "law of the last token", se=binomial_se(mu[-1], 20_000))


def test_identical_models_never_reject():
    inst = MarkovInstance(*(2 * [MarkovInstance.random(6, 4, 0).Q]), rho=np.full(4, 0.25))
    c = simulate(inst, SD(), 1000, key=0)
    assert np.all(c.rejections == 0) and np.all(c.oracle_calls == 1) and np.all(c.draft_calls == 6)
    c = simulate(inst, SD(K=2), 1000, key=0)
    assert np.all(c.oracle_calls == 2) and np.all(c.bonus == 2)  # rounds: 2+bonus, 2+bonus


def test_same_seed_same_result_and_chunking_is_invisible(monkeypatch):
    inst = _tiny(4)
    a = simulate(inst, SD(K=2), 5000, key=42, return_sequences=True)
    b = simulate(inst, SD(K=2), 5000, key=np.random.default_rng(42), return_sequences=True, progress=True)
    np.testing.assert_array_equal(a.sequences, b.sequences)
    np.testing.assert_array_equal(a.oracle_calls, b.oracle_calls)
    c = simulate(inst, SD(K=2), 5000, key=43)
    assert not np.array_equal(a.rejections, c.rejections)
    import speculab.sim.engine as eng

    monkeypatch.setattr(eng, "CHUNK", 1000)  # several chunks: same statistics, merged correctly
    d = simulate(inst, SD(K=2), 5000, key=42, return_sequences=True)
    assert d.n_runs == 5000 and d.sequences.shape == (5000, inst.T + 1)
    for counts in (a, d):  # per-position rates add up to the mean count, also after merging chunks
        assert counts.rejections_per_position.sum() == pytest.approx(counts.rejections.mean(), rel=1e-12)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda inst: simulate(inst, SD(), 0, key=0), "n_runs"),
        (lambda inst: simulate(inst, SD(), 10, key="seed"), "key"),
        (lambda inst: simulate(inst, SD(), 10, key=0, engine="torch"), "engine"),
        (lambda inst: simulate(inst.P, SD(), 10, key=0), "MarkovInstance"),
        (lambda inst: simulate(inst, "sd", 10, key=0), "method"),
        (lambda inst: SD(K=0), "K must be an integer >= 1"),
        (lambda inst: SD(K=2.5), "K must be an integer"),
        (lambda inst: simulate(inst, RejectionDecoding(b=np.ones(inst.P.shape)), 10, key=0), "unbiased"),
    ],
)
def test_bad_simulation_input(call, match):
    with pytest.raises(ValueError, match=match):
        call(_tiny(0))


def test_z_of_a_constant_count_tolerates_the_theorys_round_off():
    """Every run gave the same count (se = 0): an exact value off by float round-off is agreement, a real gap is not."""
    from speculab.counts import Estimate

    est = Estimate.of(np.full(10, 50.0))
    assert est.z(50.0 + 1e-13) == 0.0 and est.z(50.0) == 0.0
    assert est.z(49.9) == np.inf and est.z(50.1) == -np.inf


def test_chunks_are_sized_from_a_memory_budget():
    """Up to V = 1024 a method read one row at a time runs chunks of CHUNK runs; beyond, a chunk's per-run floats
    (a (runs, V) row each; a round's block of laws for a method run round by round) stay within CHUNK_BYTES, and
    the peak memory of a simulation is the (T, V, V) tables plus about one such array — not the 2 GB per gather
    that 32,768 runs × V = 8192 would take, nor a block of γ + 1 such arrays per run."""
    import tracemalloc

    from speculab.sim.engine import CHUNK, CHUNK_BYTES, chunk_runs, walker

    def runs(floats):
        return chunk_runs(type("Walk", (), {"floats_per_run": floats})())

    assert runs(7) == runs(1024) == CHUNK
    for floats in (1025, 5000, 50_000, 10**9):
        assert 1 <= runs(floats) < CHUNK and (runs(floats) * 8 * floats <= CHUNK_BYTES or runs(floats) == 1)
    small = MarkovInstance.random(3, 7, np.random.default_rng(0))
    assert chunk_runs(walker(SD(), small)) == chunk_runs(walker(BlockVerification(3), small)) == CHUNK
    for method, V, tables in [(SD(), 2048, 4), (BlockVerification(3), 256, 4)]:  # cumulative P, Q, residual; b
        inst = MarkovInstance.random(1 if method == SD() else 4, V, np.random.default_rng(0))
        walk = walker(method, inst)
        assert chunk_runs(walk) < CHUNK and chunk_runs(walk) * 8 * walk.floats_per_run <= CHUNK_BYTES
        tracemalloc.start()
        try:
            simulate(inst, method, 40_000, 1)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= tables * inst.T * V * V * 8 + 1.5 * CHUNK_BYTES, (method, peak / 1e6)


@dataclasses.dataclass(frozen=True)
class _RootByLaw(BatchSD):
    """Batch SD without its root table: the engine draws the root from a one-slot round law over the M rows."""

    root_outcome = None  # opts out of the capability (capabilities.has)


@dataclasses.dataclass(frozen=True)
class _BatchByRounds(BatchSD):
    """Batch SD read round by round (its rule taken away: not slotwise): whole blocks of M rows decided by its round
    law (which reads SD's rule past the root, not the method's)."""

    rule = None  # opts out of the capability (capabilities.has)


def test_a_round_of_one_draft_is_read_round_by_round():
    """Block verification with γ = 1 is SD(K = 1) (SPEC BV): its rounds of one draft go through its round law — only
    a method that never drafts is read as one target sample per position."""
    inst = _tiny(1, T=5)
    c = simulate(inst, BlockVerification(1), N, key=8)
    exact = SD(K=1).expected(inst)
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
        assert abs(c.estimate(name).z(getattr(exact, name))) < 5, name
    assert c.draft_calls.mean() > 0


@dataclasses.dataclass(frozen=True)
class _OddByTarget(BlockVerification):
    """Block verification that drafts nothing when an odd number of tokens is left: those rounds have no drafts."""

    def draft_length(self, remaining):
        return min(self.K, 1) if remaining % 2 == 0 else 0


def test_a_round_without_drafts_among_rounds_with_drafts_is_one_target_sample():
    """A round of ``L = 0`` drafts between rounds that draft (the protocol: one token from ``q``, nothing to accept)
    outputs a target sample, counted as a rejection: every run's first token here (T = 5 left), and no other
    position is always rejected."""
    inst = _tiny(0, T=5)
    c = simulate(inst, _OddByTarget(2), 2000, key=3)
    assert c.rejections_per_position[0] == 1.0 and c.rejections_per_position[1:].max() < 1.0
    np.testing.assert_array_equal(c.accepted + c.rejections + c.bonus, inst.T)


@pytest.mark.parametrize("method", [_RootByLaw(3, K=2), _BatchByRounds(3, K=2), _BatchByRounds(2)], ids=repr)
def test_every_reading_of_a_method_gives_its_counts(method, agrees):
    """The engine runs a method from whichever law it gives (module docstring of speculab.sim.engine): batch SD's root
    from the round law of a one-slot round over its rows, or whole rounds from its round law, give its exact counts
    (Thm 3 and the lookahead chain with a batch root) — the paths batch SD itself does not take."""
    inst = _tiny(2, T=5)
    exact = BatchSD(method.M, K=method.K).expected(inst)
    c = simulate(inst, method, N, key=21)
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
        agrees(c.estimate(name), getattr(exact, name), name)
    agrees(
        c.rejections_per_position,
        exact.rejections_per_position,
        "rejection rate per position",
        se=binomial_se(exact.rejections_per_position, N),
    )
    np.testing.assert_array_equal(c.accepted + c.rejections + c.bonus, inst.T)
    if not has(method, Slotwise):  # a round drafts M · min(K, T − t) tokens at once
        assert set(np.unique(c.draft_calls % method.M)) == {0}


def test_every_method_gives_the_core_round_law():
    """The core protocol: a method without ``draft_length`` and ``round_law`` cannot be made, so every method runs
    on both engines (round by round when it declares no other capability)."""

    @dataclasses.dataclass(frozen=True)
    class Lawless(Method):
        name: ClassVar[str] = "lawless-test"

    with pytest.raises(TypeError, match="abstract"):
        Lawless()


@dataclasses.dataclass(frozen=True)
class _RootTable(BatchSD):
    """Batch SD whose root table is cut, poisoned or scaled by ``how``."""

    how: str = "width"

    def root_outcome(self, p, q):
        table = super().root_outcome(p, q)
        V = p.shape[-1]
        return {"width": table[..., : V + 1], "nan": table * np.nan, "half": table / 2}[self.how]


@dataclasses.dataclass(frozen=True)
class _BadRule(SD):
    """SD with its rule spoilt by ``how``."""

    how: str = "b"

    def rule(self, p, q):
        b, R = super().rule(p, q)
        return {"b": (b + 0.5, R), "P": (b, R - 1.0), "inf": (b, R + np.inf)}.get(self.how, (b, R))

    def instance_rule(self, inst):
        b, R = super().instance_rule(inst)
        return (b[:1], R) if self.how == "shape" else (b, R)


@dataclasses.dataclass(frozen=True)
class _BadLaw(_BatchByRounds):
    """Batch SD read round by round, its round law spoilt by ``how``."""

    how: str = "outcome"

    def round_law(self, p, q, x, *, bonus):
        law = super().round_law(p, q, x, bonus=bonus)
        outcome = law.outcome.copy()
        if self.how == "outcome":  # the first block's outcome halved: one block of many is enough to refuse
            outcome[0] *= 0.5
            return law._replace(outcome=outcome)
        if self.how == "signed":  # a negative entry, every block still summing to 1
            outcome[..., 0, 0] += 2.0
            outcome[..., 0, 1] -= 2.0
            return law._replace(outcome=outcome)
        if self.how == "shape":
            return law._replace(correction=law.correction[..., :1])
        if self.how == "negative":  # finite, and negative where there was no weight
            return law._replace(correction=law.correction - 0.01)
        return law._replace(correction=law.correction * 0.0)  # nothing to output after a refusal


@pytest.mark.parametrize(
    "method, match",
    [
        (
            _RootTable(2, how="width"),
            r"_RootTable.root_outcome must return a law over 2V = 6 outcomes per row, shape "
            r"\(5, 3, 6\); got \(5, 3, 4\)",
        ),
        (_RootTable(2, how="nan"), r"_RootTable.root_outcome must return non-negative rows summing to 1"),
        (_RootTable(2, how="half"), r"_RootTable.root_outcome must return non-negative rows summing to 1"),
        (_BadRule(how="b"), r"_BadRule's rule gave an acceptance b outside \[0, 1\]"),
        (_BadRule(how="P"), r"_BadRule's rule gave a rejection law P with negative"),
        (_BadRule(how="inf"), r"_BadRule's rule gave a rejection law P with negative, infinite or NaN weights"),
        (
            _BadRule(how="shape"),
            r"_BadRule's rule gave its acceptance b of shape \(1, 3, 3\); the instance's laws are "
            r"\(5, 3, 3\)",
        ),
        (_BadLaw(2, how="outcome"), r"_BadLaw.round_law gave outcome probabilities that are not a law"),
        (_BadLaw(2, how="signed"), r"_BadLaw.round_law gave outcome probabilities that are not a law"),
        (_BadLaw(2, how="shape"), r"_BadLaw.round_law gave an outcome of shape"),
        (_BadLaw(2, how="zero"), r"_BadLaw.round_law gave an outcome without a token to output"),
        (_BadLaw(2, how="negative"), r"_BadLaw.round_law gave correction weights that are negative, infinite or NaN"),
    ],
    ids=lambda v: getattr(v, "how", None) and f"{type(v).__name__}-{v.how}",
)
def test_a_methods_spoilt_law_is_refused_by_name(method, match):
    """What the engine reads of a method — its root table, its rule, its round law — is checked as it is read: a
    table of the wrong width, NaN or not a law, an acceptance outside [0, 1], negative rejection weights, a round
    law that is not a law or leaves nothing to output are refused with the method's and the member's names."""
    with pytest.raises(ValueError, match=match):
        simulate(_tiny(2, T=5), method, 200, key=0)


@dataclasses.dataclass(frozen=True)
class _NoRejectionWeight(SD):
    def rule(self, p, q):
        b, R = super().rule(p, q)
        return b * 0.5, R * 0.0  # refusals possible, nothing to output after one


@dataclasses.dataclass(frozen=True)
class _LongRounds(BlockVerification):
    def draft_length(self, remaining):
        return remaining + 1


@dataclasses.dataclass(frozen=True, eq=False)
class _KeepsTooOften(Sprinter):
    def position_law(self, inst):
        free, called, correction, extra = super().position_law(inst)
        return 3 * free, called, correction, extra


@pytest.mark.parametrize("engine", ["numpy", "jax"])
@pytest.mark.parametrize(
    "method, match",
    [
        (_NoRejectionWeight(), r"_NoRejectionWeight's rule gives a rejection law P without weight at a context where"),
        (_LongRounds(2), r"_LongRounds.draft_length\(1\) gave 2; a round that may output 1 more tokens drafts 0 to 1"),
        (_KeepsTooOften(0.9, 0.1), r"_KeepsTooOften.position_law gave probabilities of keeping a draft that are"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else None,
)
def test_laws_no_engine_can_run_are_refused_before_either_runs(method, match, engine):
    """simulate checks, for both engines, what neither checks well inside its loop: a refusal with nothing to output,
    a round drafting more than it may output, a position law that is not a law (speculab/sim/_laws.py)."""
    with pytest.raises(ValueError, match=match):
        simulate(_tiny(0), method, 10, key=0, engine=engine)


def test_both_engines_read_a_method_the_same_way():
    """``reading`` is the one dispatch both engines use, in its order (adaptive, slots, positions, rounds)."""
    from speculab.methods import Autoregressive, BlockVerification, Sprinter, SpecDecPP
    from speculab.methods.capabilities import reading
    from speculab.sim import engine

    cases = {
        SD(): ("slots", "_Slots"),
        BatchSD(3): ("slots", "_Slots"),
        Sprinter(0.9, 0.1): ("positions", "_Positions"),
        SpecDecPP(0.5, max_K=3): ("adaptive", "_Adaptive"),
        BlockVerification(2): ("rounds", "_Rounds"),
        Autoregressive(): ("rounds", "_Rounds"),
        _BatchByRounds(2): ("rounds", "_Rounds"),
    }
    for method, (how, walk) in cases.items():
        assert reading(method) == how and type(engine.walker(method, _tiny(0))).__name__ == walk, method


def test_an_adaptive_method_needs_a_one_row_slotwise_verifier():
    from speculab.methods import SpecDecPP

    @dataclasses.dataclass(frozen=True)
    class Batched(SpecDecPP):
        def adaptive_drafting(self, inst):
            return super().adaptive_drafting(inst)._replace(verifier=BatchSD(3))

    with pytest.raises(ValueError, match="Batched's verifier must be a slotwise method of one row; got BatchSD"):
        simulate(_tiny(0), Batched(0.5, max_K=3), 10, key=0)


def _same_counts(a, b):
    for name in a.FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.rejections_per_position, b.rejections_per_position)
    assert a.extra.keys() == b.extra.keys() and all(np.array_equal(a.extra[k], b.extra[k]) for k in a.extra)


@pytest.mark.parametrize("method", [SD(K=2), BatchSD(3)], ids=repr)
def test_an_interrupted_simulation_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, method):
    """Interrupted after two of four chunks (and once more with the last line cut short): resuming reads the two
    back, restores the generator and runs the rest — the same runs as one uninterrupted simulation."""
    from speculab.sim import engine

    inst = MarkovInstance.random(6, 4, 3)
    n = 3 * engine.CHUNK + 17
    whole = simulate(inst, method, n, 5)
    path = tmp_path / "sim.jsonl"
    real, calls = engine._chunk, []

    def interrupted(*args):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(engine, "_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        simulate(inst, method, n, 5, checkpoint=path)
    monkeypatch.setattr(engine, "_chunk", real)
    assert len(path.read_text().splitlines()) == 3  # the header and two chunks
    with open(path, "a") as f:
        f.write('{"chunk": 2, "counts": {"fields": {"rejec')  # a line the interruption cut short
    with pytest.raises(ValueError, match="exists"):
        simulate(inst, method, n, 5, checkpoint=path)  # never overwritten without resume
    _same_counts(simulate(inst, method, n, 5, checkpoint=path, resume=True), whole)
    assert len(path.read_text().splitlines()) == 5 and path.read_text().endswith("}\n")
    _same_counts(simulate(inst, method, n, 5, checkpoint=path, resume=True), whole)  # nothing left: read back


def test_a_checkpoint_resumes_only_its_own_simulation(tmp_path):
    inst = MarkovInstance.random(6, 4, 3)
    path = tmp_path / "sim.jsonl"
    simulate(inst, SD(), 100, 5, checkpoint=path)
    for change, match in [
        (dict(key=6), "rng_state"),
        (dict(n_runs=200), "n_runs"),
        (dict(method=SD(K=3)), "method"),
        (dict(inst=MarkovInstance.random(6, 4, 4)), "instance"),
    ]:
        kwargs = dict(inst=inst, method=SD(), n_runs=100, key=5) | change
        with pytest.raises(ValueError, match=f"another simulation.*{match}"):
            simulate(**kwargs, checkpoint=path, resume=True)
    with pytest.raises(ValueError, match="nothing to resume"):
        simulate(inst, SD(), 100, 5, checkpoint=tmp_path / "none.jsonl", resume=True)
    with pytest.raises(ValueError, match="needs the checkpoint"):
        simulate(inst, SD(), 100, 5, resume=True)
    with pytest.raises(ValueError, match="return_sequences"):
        simulate(inst, SD(), 100, 5, checkpoint=tmp_path / "s.jsonl", return_sequences=True)
    (tmp_path / "junk.jsonl").write_text('{"x": 1}\n')
    with pytest.raises(ValueError, match="not a speculab simulation checkpoint"):
        simulate(inst, SD(), 100, 5, checkpoint=tmp_path / "junk.jsonl", resume=True)


@pytest.mark.slow
def test_an_interrupted_reproduction_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, capsys):
    """``speculab repro yin-fig2b`` (two simulations of two chunks each) interrupted in the second simulation's
    second chunk: ``--resume`` reads the first simulation and the finished chunk back, runs one chunk, and writes the
    uninterrupted run's numbers."""
    import json

    from speculab.cli import main
    from speculab.sim import engine

    argv = ["repro", "yin-fig2b", "--n-runs", str(engine.CHUNK + 5), "--seed", "3", "--json"]
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    whole = json.loads((tmp_path / "whole" / "yin_fig2b.json").read_text())
    out, folder = tmp_path / "cut", tmp_path / "cut" / ".yin-fig2b.resume"
    real, calls = engine._chunk, []

    def counted(*args):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(engine, "_chunk", counted)
    assert main([*argv, "--out", str(out)]) == 130
    assert "add --resume" in capsys.readouterr().err
    assert not (out / "yin_fig2b.json").exists() and len(list(folder.glob("sim-*.jsonl"))) == 2
    calls.clear()
    assert main([*argv, "--out", str(out), "--resume"]) == 0
    assert len(calls) == 1  # one chunk left to run; the rest read back
    resumed = json.loads((out / "yin_fig2b.json").read_text())
    for M in ("4", "5"):  # every number but the speed
        del whole["M"][M]["simulation"]["runs_per_second"], resumed["M"][M]["simulation"]["runs_per_second"]
    assert resumed == whole
    assert not folder.exists()  # finished: the checkpoints are gone
    capsys.readouterr()
    assert main([*argv, "--out", str(out), "--resume"]) == 2  # nothing left to resume
    assert "nothing to resume" in capsys.readouterr().err


@pytest.mark.slow
def test_jax_simulations_and_sweeps_are_recorded_and_read_back_inside_resumable(tmp_path, monkeypatch):
    """Inside ``resumable`` a finished JAX simulation or sweep is kept whole; a resumed block reads it back (the
    engine is not called again) with identical counts; a different key is a different call."""
    pytest.importorskip("jax")
    from speculab.sim import jax_engine, simulate_sweep
    from speculab.sim.checkpoint import resumable

    inst = MarkovInstance.random(5, 3, 2)
    grid = [SD(K=1), SD(K=2)]
    with resumable(tmp_path / "r") as folder:
        one = simulate(inst, SD(K=2), 300, 4, engine="jax")
        sweep = simulate_sweep(inst, grid, 200, 5)
        assert len(list(folder.glob("sim-*.jsonl"))) == 2
    assert not (tmp_path / "r").exists()  # finished: nothing kept

    with pytest.raises(KeyboardInterrupt), resumable(tmp_path / "r"):
        simulate(inst, SD(K=2), 300, 4, engine="jax")
        simulate_sweep(inst, grid, 200, 5)
        raise KeyboardInterrupt
    calls = []
    monkeypatch.setattr(jax_engine, "simulate_jax", lambda *a, **k: calls.append(a) or one)
    monkeypatch.setattr(jax_engine, "simulate_sweep", lambda *a, **k: calls.append(a) or sweep)
    with resumable(tmp_path / "r", resume=True):
        _same_counts(simulate(inst, SD(K=2), 300, 4, engine="jax"), one)
        for a, b in zip(simulate_sweep(inst, grid, 200, 5), sweep, strict=True):
            _same_counts(a, b)
        assert calls == []  # both read back
        simulate(inst, SD(K=2), 300, 5, engine="jax")  # another key: computed
        assert len(calls) == 1
