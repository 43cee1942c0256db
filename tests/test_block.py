"""Block verification (Sun et al., ICLR 2025; SPEC BV): the rule against a literal reading of the algorithm.

The reference below enumerates every block ``x_1..x_K`` and reads the algorithm
literally (``τ`` = the largest ``i`` with ``η_i < h_i``, so ``P(τ = i | block) =
h_i Π_{j>i}(1 − h_j)``), with its own loops; nothing in it comes from speculab.
The generic checks (law = target's on Markov instances, exact counts = enumeration,
simulation, same seed, numpy = torch) run for this method in ``tests/test_methods.py``.
"""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import agrees_json, claims_of, model_device
from speculab import work_budget
from speculab._validate import TooLarge
from speculab.methods import SD, BlockVerification
from speculab.methods.block import block_accepted, block_counts, block_kernel, block_round_law
from speculab.theory import MarkovInstance, lookahead_counts


# -- a literal reference ---------------------------------------------------------------------------------------
def _literal(Pk, Qk, a0, K):
    """Every block with its probability and the algorithm's quantities, read literally.

    ``Pk[i][a, x]``, ``Qk[i][a, x]``: draft and target laws of slot ``i + 1`` after token ``a``
    (``Qk`` has ``K + 1`` slots). Returns ``{block: (prob, w, r, h, P(τ = ·))}``.
    """
    V = Pk[0].shape[0]
    out = {}
    for block in itertools.product(range(V), repeat=K):
        prev, prob, w = a0, 1.0, [1.0]
        for i, x in enumerate(block):
            prob *= Pk[i][prev, x]
            wq, p = w[-1] * Qk[i][prev, x], Pk[i][prev, x]
            w.append(1.0 if wq >= p else wq / p)  # min(1, w q/p), without overflow for tiny p
            prev = x
        if prob == 0:
            continue
        ctx = (a0,) + block
        r = [sum(max(w[i] * Qk[i][ctx[i], y] - Pk[i][ctx[i], y], 0.0) for y in range(V)) for i in range(K)]
        # h_i = r_i / (r_i + 1 − w_i), summed as (1 − w_i) + r_i: exact near w_i = 1, so h_i <= 1 in floats too
        h = [1.0] + [r[i] / ((1 - w[i]) + r[i]) if (1 - w[i]) + r[i] > 0 else 0.0 for i in range(1, K)] + [w[K]]
        tau = [h[i] * math.prod(1 - h[j] for j in range(i + 1, K + 1)) for i in range(K + 1)]
        out[block] = (prob, w, r, h, tau)
    return out


def _kernels(draw, V, K):
    def law():
        w = np.array(draw(st.lists(st.floats(0, 1), min_size=V, max_size=V)))
        w[draw(st.integers(0, V - 1))] += 0.05  # never all zero
        return w / w.sum()

    Pk = [np.array([law() for _ in range(V)]) for _ in range(K)]
    Qk = [np.array([law() for _ in range(V)]) for _ in range(K + 1)]
    return Pk, Qk


@st.composite
def blocks(draw):
    V, K = draw(st.integers(2, 3)), draw(st.integers(1, 3))
    Pk, Qk = _kernels(draw, V, K)
    return Pk, Qk, draw(st.integers(0, V - 1)), K


def _arrays(Pk, Qk, a0, block):
    """The rule's inputs for one block: p (1, 1, L, V), q (1, 1, L+1, V), x (1, 1, L)."""
    ctx = (a0,) + block
    p = np.stack([Pk[i][ctx[i]] for i in range(len(block))])
    q = np.stack([Qk[i][ctx[i]] for i in range(len(block) + 1)])
    return p[None, None], q[None, None], np.array(block)[None, None]


@given(blocks())
def test_round_law_is_the_literal_algorithm(case):
    Pk, Qk, a0, K = case
    for block, (_, _, r, _, tau) in _literal(Pk, Qk, a0, K).items():
        law = block_round_law(*_arrays(Pk, Qk, a0, block), bonus=True)
        np.testing.assert_allclose(law.outcome[0, 0], tau, atol=1e-12)
        assert law.outcome[0, 0].sum() == pytest.approx(1.0, abs=1e-12)


@given(blocks())
def test_prefix_property_output_law_and_paired_probabilities(case):
    """P(τ ≥ i, x_{1:i}) = p(x_{1:i}) w_i; the output is the target's law; r_i/w_i and the accept probability."""
    Pk, Qk, a0, K = case
    V = Pk[0].shape[0]
    lit = _literal(Pk, Qk, a0, K)
    ge = {}  # (prefix) -> P(τ ≥ len(prefix), x̃ starts with prefix)
    out = np.zeros((V,) * (K + 1))  # the output continued by the target to K + 1 tokens
    for block, (prob, w, r, h, tau) in lit.items():
        for i in range(K + 1):
            ge[block[:i]] = ge.get(block[:i], 0.0) + prob * sum(tau[i:])
        law = block_round_law(*_arrays(Pk, Qk, a0, block), bonus=True)
        for i in range(K + 1):
            corr = law.correction[0, 0, i] / law.correction[0, 0, i].sum()
            for y in range(V):
                z = block[:i] + (y,)
                mass = prob * tau[i] * corr[y]
                for rest in itertools.product(range(V), repeat=K - i):  # continue from the target
                    full, m = z + rest, mass
                    for j, v in enumerate(rest, start=i + 1):
                        m *= Qk[j][full[j - 1], v]
                    out[full] += m
        # paired probabilities: P(τ = i | τ ≥ i, x_{1:i}) and P(τ ≥ i+1 | τ ≥ i, x_{1:i+1}) by enumeration below
    for prefix, mass in ge.items():
        i = len(prefix)
        w_i, p_i, prev = 1.0, 1.0, a0
        for j, x in enumerate(prefix):
            p_i *= Pk[j][prev, x]
            w_i = 1.0 if w_i * Qk[j][prev, x] >= Pk[j][prev, x] else w_i * Qk[j][prev, x] / Pk[j][prev, x]
            prev = x
        assert mass == pytest.approx(p_i * w_i, abs=1e-12)
        if i < K and mass > 1e-9:
            block = next(b for b in lit if b[:i] == prefix)
            law = block_round_law(*_arrays(Pk, Qk, a0, block), bonus=True)
            stop = mass - sum(ge.get(prefix + (x,), 0.0) for x in range(V))
            assert law.reject_prob[0, 0, i] == pytest.approx(stop / mass, abs=1e-9)
            for x in range(V):
                grown = prefix + (x,)
                drafted = p_i * Pk[i][prev, x]
                if drafted > 1e-9 and grown in ge:
                    b2 = next(b for b in lit if b[: i + 1] == grown)
                    at_least_i = sum(lit[b][0] * sum(lit[b][4][i:]) for b in lit if b[: i + 1] == grown)
                    if at_least_i < 1e-9:  # τ ≥ i never happens on these blocks (e.g. r_i = 0, w_{i+1} = 0)
                        continue
                    law2 = block_round_law(*_arrays(Pk, Qk, a0, b2), bonus=True)
                    assert law2.accept_prob[0, 0, i] == pytest.approx(ge[grown] / at_least_i, abs=1e-9)
    target = np.zeros_like(out)
    for z in itertools.product(range(V), repeat=K + 1):
        ctx = (a0,) + z
        target[z] = math.prod(Qk[j][ctx[j], ctx[j + 1]] for j in range(K + 1))
    np.testing.assert_allclose(out, target, atol=1e-12)


@given(blocks())
def test_never_fewer_accepted_drafts_than_token_verification_in_expectation(case):
    """E[τ] of block verification >= that of SD over the blocks drafted from a context (Sun et al.: optimal)."""
    Pk, Qk, a0, K = case
    bv_mean = sd_mean = 0.0
    for block, (prob, _, _, _, tau) in _literal(Pk, Qk, a0, K).items():
        args = _arrays(Pk, Qk, a0, block)
        bv = block_round_law(*args, bonus=True).expected_accepted()[0][0]
        assert bv == pytest.approx(sum(i * t for i, t in enumerate(tau)), abs=1e-12)
        bv_mean += prob * bv
        sd_mean += prob * SD(K=K).round_law(*args, bonus=True).expected_accepted()[0][0]
    assert bv_mean >= sd_mean - 1e-12


def test_not_per_block():
    """SPEC BV says "never below SD with the same block"; that holds in expectation over the blocks, not block by block.

    Here ``x_1 = x_2 = 0`` surely, ``q_2(0) = 1/21``, and the block ``(0, 0, 1)`` has
    ``q_3(1) = 0``: SD accepts ``1 + 1/21`` drafts on it in expectation, block
    verification exactly 1 (``h_1 = 1``, ``h_2 = h_3 = 0``) — while over all blocks of
    this context block verification accepts more.
    """
    e = 1 / 21
    one, split = np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([[e, 1 - e], [1.0, 0.0]])
    Pk, Qk = [one, one, split], [one, split, one, one]
    args = _arrays(Pk, Qk, 0, (0, 0, 1))
    bv = block_round_law(*args, bonus=True).expected_accepted()[0][0]
    sd = SD(K=3).round_law(*args, bonus=True).expected_accepted()[0][0]
    assert bv == pytest.approx(1.0, abs=1e-15) and sd == pytest.approx(1 + e, abs=1e-15)
    lit = _literal(Pk, Qk, 0, 3)
    mean = lambda law: sum(  # noqa: E731
        prob * law(*_arrays(Pk, Qk, 0, b), bonus=True).expected_accepted()[0][0] for b, (prob, *_) in lit.items()
    )
    assert mean(block_round_law) > mean(SD(K=3).round_law) + 0.04


def test_binary_example_of_the_paper():
    """SPEC BV: q = (1/3, 2/3), p = (2/3, 1/3), K = 2 — SD accepts 10/9 drafts per round, BV 11/9."""
    p, q = [2 / 3, 1 / 3], [1 / 3, 2 / 3]
    assert block_accepted(p, q, 2) == pytest.approx(11 / 9, abs=1e-14)
    P, Q = np.array([p, p]), np.array([q, q])  # context-free kernels
    lit = _literal([P, P], [Q, Q, Q], 0, 2)
    per_round = lambda law: sum(  # noqa: E731
        prob * law(*_arrays([P, P], [Q, Q, Q], 0, b), bonus=True).expected_accepted()[0][0]
        for b, (prob, *_) in lit.items()
    )
    assert per_round(block_round_law) == pytest.approx(11 / 9, abs=1e-14)
    assert per_round(SD(K=2).round_law) == pytest.approx(10 / 9, abs=1e-14)  # α + α², α = 1 − TV = 2/3
    assert block_accepted(p, q, 1) == pytest.approx(2 / 3, abs=1e-14)  # K = 1: SD's 1 − TV


def test_gamma_one_is_speculative_decoding():
    inst = MarkovInstance.random(10, 3, 4, concentration=0.7)
    bv, sd = BlockVerification(1).expected(inst), SD(K=1).expected(inst)
    for name, value in sd.items():
        assert bv.get(name) == pytest.approx(value, abs=1e-12), name
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=(5, 1, 1))
    q = rng.dirichlet(np.ones(4), size=(5, 1, 2))
    x = np.array([[[rng.choice(4, p=p[i, 0, 0])]] for i in range(5)])
    a, b = block_round_law(p, q, x, bonus=True), SD(K=1).round_law(p, q, x, bonus=True)
    for name in ("outcome", "reject_prob", "accept_prob"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-15, err_msg=name)
    unit = lambda w: w / w.sum(-1, keepdims=True)  # noqa: E731  (correction weights are unnormalised)
    np.testing.assert_allclose(unit(a.correction), unit(b.correction), atol=1e-15)


@pytest.mark.parametrize("K", [1, 2, 3])
def test_counts_per_position_equal_the_enumeration(K):
    """Where each rejection and each bonus falls, not only how many (the generic table checks totals and
    rejections per position): against the literal enumeration of rounds, and at K = 1 against SD's own lookahead
    counts, every per-position array (a bonus booked at ``s − L`` instead of ``s + L`` was found by mutation)."""
    from _enumerate import enumerate_rounds

    inst = MarkovInstance.random(5, 2, 11, concentration=0.6)
    method = BlockVerification(K)
    exact = block_counts(inst, K)
    e = enumerate_rounds(inst.P, inst.Q, inst.rho, method.round_law, method.draft_length)
    np.testing.assert_allclose(exact.rejections_per_position, e.rejections_per_position, atol=1e-12)
    np.testing.assert_allclose(exact.bonus_per_position, e.bonus_per_position, atol=1e-12)
    assert exact.bonus_per_position[:K].sum() == 0  # a bonus follows K drafts: never before position K + 1
    if K == 1:
        sd = lookahead_counts(inst, 1)
        for name in (
            "rejections_per_position",
            "bonus_per_position",
            "accepted_per_position",
            "oracle_calls_per_position",
        ):
            np.testing.assert_allclose(getattr(exact, name), getattr(sd, name), atol=1e-12, err_msg=name)


def test_one_token_vocabulary():
    """V = 1: every draft is the target's only token, so every block is accepted whole."""
    assert block_accepted([1.0], [1.0], 3) == 3.0
    J, accepted = block_kernel(MarkovInstance.context_free([1.0], [1.0], T=5), 0, 3)
    assert J.shape == (1, 4, 1) and accepted.tolist() == [3.0] and J[0, :, 0].tolist() == [0, 0, 0, 1]


def test_gain_probe_records_both_expectations_of_each_block():
    """The probe a real-model run feeds: per round, ``E[τ | block]`` under block verification (the literal algorithm)
    and under SD on the very same block, ``Σ_i Π_{j ≤ i} min(1, q_j(x_j) / p_j(x_j))`` — means, not variances."""
    from types import SimpleNamespace

    V, K = 3, 3
    rng = np.random.default_rng(5)
    Pk = [rng.dirichlet(np.ones(V), size=V) for _ in range(K)]
    Qk = [rng.dirichlet(np.ones(V), size=V) for _ in range(K + 1)]
    probe = BlockVerification(K).round_probe()
    literal = _literal(Pk, Qk, 0, K)
    for block in [(0, 1, 2), (2, 2, 0)]:
        p, q, x = _arrays(Pk, Qk, 0, block)
        probe(SimpleNamespace(run=0, p=p[0], q=q[0], drafts=x[0], law=block_round_law(p, q, x, bonus=True)))
        ratio = np.minimum(1.0, q[0, 0, np.arange(K), x[0, 0]] / p[0, 0, np.arange(K), x[0, 0]])
        assert probe.token[-1] == pytest.approx(np.cumprod(ratio).sum(), abs=1e-14)
        assert probe.block[-1] == pytest.approx(sum(i * t for i, t in enumerate(literal[block][4])), abs=1e-14)


def test_gain_rows_of_compare():
    """The two rows :meth:`BlockVerification.compare_rows` adds, on a context with hand-made numbers: the mean
    per-block gain ``E[τ | block]`` (block − token verification) with its s.e., and SD's target calls per token
    minus block verification's (a run of zero tokens counts as one), with the s.e. of a difference of two runs."""
    from types import SimpleNamespace

    run = lambda calls, tokens: SimpleNamespace(  # noqa: E731
        counts=SimpleNamespace(oracle_calls=np.array(calls), tokens=np.array(tokens))
    )
    slots = []

    def decode(method, slot):
        slots.append(slot)
        assert method == SD(K=3)
        return run([3, 1, 0], [4, 1, 0])  # rates 0.75, 1, 0

    probe = SimpleNamespace(block=[2.0, 3.0, 3.0, 4.0], token=[1.0, 1.0, 2.0, 0.0])  # gains 1, 2, 1, 4
    ctx = SimpleNamespace(probe=probe, result=run([2, 3], [4, 12]), decode=decode)  # rates 0.5, 0.25
    gain, calls = BlockVerification(3).compare_rows(ctx)
    assert slots and slots[0] not in (1, 2)  # a seed of its own: slots 1 and 2 are the reference and the method
    assert "same blocks" in gain.quantity and math.isnan(gain.predicted) and gain.predicted_se == 0
    assert gain.measured == 2.0 and gain.measured_se == pytest.approx(math.sqrt(2 / 4), abs=1e-15)  # s² = 2
    assert "4 blocks" in gain.note
    theirs, mine = np.array([0.75, 1.0, 0.0]), np.array([0.5, 0.25])
    assert math.isnan(calls.predicted) and calls.predicted_se == 0
    assert calls.measured == pytest.approx(theirs.mean() - mine.mean(), abs=1e-15)
    se = math.hypot(theirs.std(ddof=1) / math.sqrt(3), mine.std(ddof=1) / math.sqrt(2))
    assert calls.measured_se == pytest.approx(se, abs=1e-15)


def test_gain_over_token_verification_exact_and_simulated(agrees):
    """Markov instance: BV(K) makes fewer target calls than SD(K=K) for K >= 2, exactly and in simulation."""
    from speculab.sim import simulate

    inst = MarkovInstance.random(30, 3, 8, concentration=0.5)
    for K in (2, 4):
        bv, sd = block_counts(inst, K), lookahead_counts(inst, K)
        assert bv.oracle_calls < sd.oracle_calls - 0.05 and bv.accepted > sd.accepted
        c_bv = simulate(inst, BlockVerification(K), 20_000, key=K)
        c_sd = simulate(inst, SD(K=K), 20_000, key=10 + K)
        diff = c_sd.estimate("oracle_calls").mean - c_bv.estimate("oracle_calls").mean
        se = math.hypot(c_sd.estimate("oracle_calls").se, c_bv.estimate("oracle_calls").se)
        # the bug this check is for: no gain at all (a 10 % error of the gain is 1.4 s.e. at K = 2; the counts
        # themselves are held to 10 % by the method table's checks)
        agrees(
            diff,
            sd.oracle_calls - bv.oracle_calls,
            f"target calls saved by BV({K}) over SD(K = {K})",
            se=se,
            wrong=0.0,
            alternative=f"BV({K}) saves no target calls over SD(K = {K})",
        )


def test_kernel_rows_are_distributions_and_refuse_huge_blocks():
    inst = MarkovInstance.random(6, 3, 2)
    J, acc = block_kernel(inst, 1, 3)
    assert J.shape == (3, 4, 3) and block_kernel(inst, 4, 3)[0].shape == (3, 3, 3)  # (V, L + 1, V), L = min(K, T − s)
    np.testing.assert_allclose(J.sum(axis=(1, 2)), 1.0, atol=1e-12)  # s + L < T: every round ends in a token
    J_end, _ = block_kernel(inst, 3, 3)  # s + L = T: the all-accepted mass has no next token
    assert np.all(J_end.sum(axis=(1, 2)) < 1 + 1e-12) and np.all(acc <= 3)
    big = MarkovInstance.random(30, 40, 0)
    with pytest.raises(ValueError, match="MAX_PATHS"):
        block_counts(big, 4)
    # exactly at the cap, V^(K+2) = 4^12 = MAX_PATHS block prefixes are enumerated; one more power of V is refused
    rng = np.random.default_rng(0)
    four = MarkovInstance.stationary(rng.dirichlet(np.ones(4), size=4), rng.dirichlet(np.ones(4), size=4), T=30)
    np.testing.assert_allclose(block_kernel(four, 0, 10)[0].sum(axis=(1, 2)), 1.0, atol=1e-12)
    with pytest.raises(
        TooLarge,
        match=r"^exact block counts \(V\^\(K\+2\) = 4\^13 block prefixes\) would take "
        r"67,108,864 prefixes, over the budget of 16,777,216 prefixes "
        r"\(MAX_PATHS\): use a smaller",
    ):
        block_kernel(four, 0, 11)
    with work_budget(0.25):  # a quarter of the budget: 4^11 prefixes fit, 4^12 are refused
        np.testing.assert_allclose(block_kernel(four, 0, 9)[0].sum(axis=(1, 2)), 1.0, atol=1e-12)
        with pytest.raises(
            TooLarge,
            match=r"would take 16,777,216 prefixes, over the budget of 4,194,304 prefixes "
            r"\(MAX_PATHS, times 0.25\)",
        ):
            block_kernel(four, 0, 10)


@pytest.mark.parametrize("K, match", [(0, "K"), (True, "K"), (2.5, "K"), (None, "K")])
def test_bad_block_size(K, match):
    with pytest.raises(ValueError, match=match):
        BlockVerification(K)


def test_cli(capsys, agrees):
    import json

    from speculab.cli import main

    argv = ["sim", "--method", "block", "--K", "3", "--T", "12", "--V", "3", "--n-runs", "5000", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["theory"]["oracle_calls"] == pytest.approx(
        block_counts(MarkovInstance.random(12, 3, 0), 3).oracle_calls, rel=1e-12
    )
    agrees_json(agrees, out)
    assert main(["sim", "--method", "block"]) == 2 and "needs --K" in capsys.readouterr().err


# -- real models ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pair():
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from speculab.backends import load_pair

    torch.set_num_threads(1)
    return load_pair("tiny", device=model_device())


def test_real_models_greedy_equals_target_greedy_and_cache_rollback(pair):
    from speculab.backends import Sampling, decode, load_pair
    from speculab.backends.pair import default_prompts
    from speculab.methods import Autoregressive

    prompts = default_prompts()[:3]
    greedy = Sampling(temperature=0)
    ar = decode(pair, prompts, Autoregressive(), max_new_tokens=24, sampling=greedy, key=0)
    for K in (2, 5):
        assert (
            decode(pair, prompts, BlockVerification(K), max_new_tokens=24, sampling=greedy, key=0).tokens == ar.tokens
        )
    nocache = load_pair("tiny", device=model_device(), use_cache=False)
    a = decode(pair, prompts[:2], BlockVerification(3), max_new_tokens=20, key=3)
    b = decode(nocache, prompts[:2], BlockVerification(3), max_new_tokens=20, key=3)
    assert a.tokens == b.tokens
    np.testing.assert_array_equal(a.counts.rejections, b.counts.rejections)
    c = a.counts
    np.testing.assert_array_equal(c.accepted + c.rejections + c.bonus, c.tokens)


@pytest.mark.power
def test_real_models_records_are_the_block_law_of_their_logits(pair, record_property):
    """Block verification (K = 3) on real models, every round, exactly: from that round's logits, with the weights
    written out here (``w_0 = 1``, ``w_i = min(1, w_{i−1} q_i(x_i) / p_i(x_i))``, ``r_i = Σ(w_i q_{i+1} − p_{i+1})_+``,
    ``h_i = r_i / (r_i + 1 − w_i)``), each output slot ``i`` records the rejection probability ``r_i / w_i``, a
    verified draft the acceptance probability ``w_{i+1} / (1 − (1 − h_i)(1 − w_{i+1}))``, a bonus 0, and a
    correction's token lies in the support of ``(w_τ q_{τ+1} − p_{τ+1})_+``. Power of the support check against a
    correction drawn from ``q``: ``1 − Π(1 − q(outside))`` over the corrections, required above ``1 − e^{-20}``."""
    import torch
    from conftest import assert_power
    from speculab.backends import decode
    from speculab.backends.pair import default_prompts

    rounds = {}
    seen = lambda info: rounds.setdefault(info.run, []).append(info)  # noqa: E731
    res = decode(pair, default_prompts()[:16], BlockVerification(3), max_new_tokens=24, key=13, on_round=seen)
    outside, corrections, checked = 0.0, 0, 0
    for run, rec in enumerate(res.records):
        kinds, pos = rec.kind.tolist(), 0
        for info in rounds[run]:
            P, Q, x, tau = info.p[0], info.q[0], info.drafts[0].tolist(), info.accepted
            w = [1.0]
            for i, xi in enumerate(x):
                w.append(min(1.0, w[-1] * float(Q[i, xi]) / float(P[i, xi])))
            r = [float(torch.clamp(w[i] * Q[i] - P[i], min=0).sum()) for i in range(len(x))]
            h = [r[i] / (r[i] + 1 - w[i]) if r[i] + 1 - w[i] > 0 else 0.0 for i in range(len(x))]
            for i in range(min(tau + 1, len(kinds) - pos)):  # the accepted drafts, then the round's last token
                if kinds[pos + i] == 2:
                    assert rec.reject_prob[pos + i] == 0 and math.isnan(rec.accept_prob[pos + i])
                    continue
                assert rec.reject_prob[pos + i] == pytest.approx(r[i] / w[i], abs=1e-9)
                accept = w[i + 1] / (1 - (1 - h[i]) * (1 - w[i + 1]))
                assert rec.accept_prob[pos + i] == pytest.approx(accept, abs=1e-9)
                checked += 1
            if tau < len(x) and pos + tau < len(kinds) and kinds[pos + tau] == 1:
                residual = torch.clamp(w[tau] * Q[tau] - P[tau], min=0)
                assert residual[rec.tokens[pos + tau]] > 0
                outside -= math.log1p(-float(Q[tau][residual == 0].sum()))
                corrections += 1
            after = kinds[pos + tau] if pos + tau < len(kinds) else None
            pos += tau + (after in (1, 2))
        assert pos == len(kinds)
    assert checked > 200 and corrections > 0 and outside > 20, (checked, corrections, outside)
    assert_power(
        record_property,
        "BV(3) real-model corrections, exact support check (16 runs): the correction drawn from q",
        -math.expm1(-outside),
    )


@pytest.mark.slow
def test_real_models_first_tokens_follow_the_target_law(pair, agrees, record_property):
    import test_backends as tb
    from speculab.backends import Sampling, decode

    sampling = Sampling(1.0)
    n = tb.N_LAW["batch", "t1"]  # the runs the law test needs at temperature 1 for its weakest bug
    res = decode(pair, [tb.PROMPT] * n, BlockVerification(3), max_new_tokens=2, sampling=sampling, key=7)
    first = np.array([t[0] for t in res.tokens])
    q = tb._exact_first_token_law(pair, sampling)
    assert tb._gof_pvalue(first, q) > 1e-4
    p = tb._exact_first_token_law(pair, sampling, model=pair.draft.model)
    record_property(
        "power",
        f"{tb._gtest_power(p, q, n):.6f} | BV(3) real-model first-token G-test (N = {n:,}): the "
        "draft's tokens kept unverified [not asserted: carried by the directed check below]",
    )
    inside = q > p  # the directed check of test_backends: the share of first tokens in A = {q > p}
    qa, pa = float(q[inside].sum()), float(p[inside].sum())
    agrees(
        float(inside[first].mean()),
        qa,
        "BV(3) real-model first tokens in {q > p}",
        se=math.sqrt(qa * (1 - qa) / n),
        wrong=pa,
        wrong_se=math.sqrt(pa * (1 - pa) / n),
        alternative=f"BV(3) real-model first tokens in {{q > p}} (N = {n:,}): the draft's tokens kept unverified",
    )
    tb.second_token_law_agrees(
        agrees,
        record_property,
        pair,
        sampling,
        res.tokens,
        "draft",
        "the draft's second token kept unverified",
        "BV(3), t1",
    )


def test_real_models_gain_on_the_same_blocks_and_compare(pair, agrees):
    import test_backends as tb
    from speculab.backends import decode
    from speculab.backends.pair import default_prompts
    from speculab.compare import compare

    method = BlockVerification(4)
    probe = method.round_probe()
    decode(pair, default_prompts()[:6], method, max_new_tokens=24, key=5, on_round=probe)
    gain = np.asarray(probe.block) - np.asarray(probe.token)
    assert gain.size > 10 and gain.mean() > 0  # positive on average (per block it can be negative: test_not_per_block)
    comp = compare(pair, method, default_prompts()[:8], runs_per_prompt=2, max_new_tokens=16, key=1)
    tb._compare_rows_agree(
        agrees,
        comp,
        "compare BV(4) (tiny pair, 16 runs)",
        carried_by="test_real_models_records_are_the_block_law_of_their_logits (records, "
        "exactly) and the simulation checks (formulas)",
    )
    assert any("same blocks" in r.quantity for r in comp.rows)


@pytest.mark.slow
def test_gain_reproduction_smoke(pair, tmp_path, agrees):
    """``speculab repro block-gain``: exact = what the library computes, simulated within |z| < 5, files written."""
    from speculab.backends.pair import default_prompts
    from speculab.repro import block_gain

    res = block_gain.run(
        key=0, n_runs=3000, out_dir=tmp_path, prompts=default_prompts()[:2], runs_per_prompt=1, max_new_tokens=8
    )
    inst = MarkovInstance.load(tmp_path / "block_gain_instance.npz")
    for K in block_gain.KS:
        row = res["K"][str(K)]
        assert row["exact"]["block"]["oracle_calls"] == pytest.approx(block_counts(inst, K).oracle_calls, rel=1e-12)
        assert row["exact"]["block"]["oracle_calls"] < row["exact"]["sd"]["oracle_calls"]
        for name in ("block", "sd"):
            for field, v in row["simulated"][name].items():
                agrees(v["mean"], row["exact"][name][field], f"repro block-gain K = {K}, {name}: {field}", se=v["se"])
    assert (tmp_path / "block_gain.png").stat().st_size > 10_000 and "K" in block_gain.summary(res)
    rows = claims_of(block_gain, res)
    ex, gain = res["K"]["4"]["exact"], res["K"]["4"]["measured"]["same_block_gain"]
    assert rows[1]["theory"] == f"{ex['block']['oracle_calls']:.2f} / {ex['sd']['oracle_calls']:.2f}"
    assert rows[4]["quantity"].startswith("K = 4, tiny pair") and rows[4]["measured"].endswith(
        f"; {gain['mean']:+.3f} ± {gain['se']:.3f} ({gain['rounds']:,} blocks)".replace("-", "−")
    )


def test_a_block_without_batch_axes_has_the_law_of_a_batch_of_one():
    """``block_round_law`` takes ``(1, L, V)`` laws with no batch axis as well as ``(..., 1, L, V)``; the law is the
    same as for a batch of one. Found by mutation testing of the fast tier: reading ``L`` from axis 2, the batch
    shape from ``shape[:2]`` or joining the corrections on axis 2 — right for rank 4 only — survived, as every
    fast test passed a batch. L = 2, V = 3, so axis 2 is not the slot axis at rank 3."""
    rng = np.random.default_rng(5)
    L, V = 2, 3
    p, q = rng.dirichlet(np.ones(V), size=(1, L)), rng.dirichlet(np.ones(V), size=(1, L + 1))
    x = np.array([[2, 0]])
    for bonus in (True, False):
        single = block_round_law(p, q, x, bonus=bonus)
        batch = block_round_law(p[None], q[None], x[None], bonus=bonus)
        for name, got, want in zip(single._fields, single, batch):
            if want is None:
                assert got is None, name
                continue
            assert got.shape == want.shape[1:], name
            np.testing.assert_array_equal(got, want[0], err_msg=name)
        assert single.outcome.shape == (1, L + 1) and single.correction.shape == (1, L + 1, V)


def test_a_block_longer_than_the_horizon_is_the_horizon():
    """``K`` past ``T`` drafts what is left, as ``K = T`` does: the same runs for the same key, the same theory —
    ``K = 10^20`` included (found by review: the simulator sized its buffers by ``K`` and failed in numpy with
    "Maximum allowed dimension exceeded")."""
    from speculab.sim import simulate

    inst = MarkovInstance.random(5, 3, 6)
    same = simulate(inst, BlockVerification(5), 200, key=3)
    for K in (6, 10**20):
        c = simulate(inst, BlockVerification(K), 200, key=3)
        np.testing.assert_array_equal(c.rejections, same.rejections)
        np.testing.assert_array_equal(c.oracle_calls, same.oracle_calls)
        assert BlockVerification(K).expected(inst).rejections == BlockVerification(5).expected(inst).rejections
