"""Hugging Face transformers' speculative sampling as installed (speculab.backends.hf_reference), the black-box law
test on real models (speculab.certify.check_decoder) and ``speculab repro verifiers``.

Statistical checks use fixed keys and say their power: each G-test's least detectable TV at power 0.99 is
computed, and a biased control whose law is known exactly must be refused where the stated power against it is at
least 0.99.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speculab import kernels
from speculab.backends.hf_reference import assisted_runs, ensemble_law, hf_laws, hf_sampler, transformers_version
from speculab.certify import check_decoder, check_sampler

LOGITS = (np.array([0.3, -1.2, 1.1, 0.0]), np.array([1.4, 0.9, -2.0, -0.5]))


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def test_transformers_warpers_give_the_laws_of_the_definition():
    """Temperature divides the logits; top-k keeps the k likeliest; top-p the fewest likeliest reaching p."""
    d, t = LOGITS
    p, q = hf_laws(d, t, temperature=0.7)
    np.testing.assert_allclose(p, _softmax(d / 0.7), atol=1e-15)
    np.testing.assert_allclose(q, _softmax(t / 0.7), atol=1e-15)
    p, q = hf_laws(d, t, top_k=2)
    want = _softmax(t) * (np.argsort(np.argsort(-t)) < 2)
    np.testing.assert_allclose(q, want / want.sum(), atol=1e-15)
    _, q = hf_laws(d, t, top_p=0.8)
    full = _softmax(t)  # 0.535, 0.324, …: the two likeliest reach 0.8
    assert (q > 0).sum() == 2 and full[np.argsort(-full)[:2]].sum() >= 0.8 > full.max()


def test_the_ensemble_options_law_is_a_mixture_whose_bias_is_a_fraction_of_tv():
    p, q = hf_laws(*LOGITS)
    v = ensemble_law(p, q, 0.3)
    np.testing.assert_allclose(v, 0.3 * q + 0.7 * p, atol=1e-15)
    assert float(kernels.tv(v, q)) == pytest.approx(0.7 * float(kernels.tv(p, q)), abs=1e-15)


@pytest.mark.slow  # 100,000 calls of transformers' step, one at a time (25 s): the full tier
def test_transformers_acceptance_step_keeps_the_target_law_and_its_ensemble_option_does_not():
    """20,000 calls each (seconds): lossless at temperature 1 and under top-2 (least detectable TV at power 0.99
    about 0.03); with ``assistant_ensemble_weight = 0.5`` refused against the target (its bias, 0.5 TV(p, q) = 0.27
    here, is far past the detectable TV) and consistent with the mixture it outputs by design."""
    n = 20_000
    for warp in (dict(), dict(top_k=2)):
        p, q = hf_laws(*LOGITS, **warp)
        check = check_sampler(hf_sampler(2), p, q, n=n, key=1)
        assert not check.refused and check.detectable_tv < 0.04, check
    p, q = hf_laws(*LOGITS)
    biased = hf_sampler(2, 0.5)
    assert (0.5 * float(kernels.tv(p, q))) > 5 * check_sampler(biased, p, q, n=n, key=2).detectable_tv
    assert check_sampler(biased, p, q, n=n, key=2).refused
    assert not check_sampler(biased, p, q, n=n, key=3, law=ensemble_law(p, q, 0.5)).refused
    assert transformers_version() in biased.__name__


def test_a_sampler_is_reproducible_and_leaves_torchs_generator_and_threads_alone():
    p, q = hf_laws(*LOGITS)
    state, threads = torch.random.get_rng_state(), torch.get_num_threads()
    a = hf_sampler(2)(np.log(p), np.log(q), 50, np.random.default_rng(9))
    b = hf_sampler(2)(np.log(p), np.log(q), 50, np.random.default_rng(9))
    assert np.array_equal(a, b) and torch.equal(state, torch.random.get_rng_state())
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: hf_laws(*LOGITS, temperature=0.0), "temperature must be a finite number > 0"),
        (lambda: hf_sampler(2, ensemble_weight=1.0), r"ensemble_weight must be None or a number in \(0, 1\)"),
        (lambda: hf_sampler(0), "K must be an integer >= 1"),
        (lambda: ensemble_law([0.5, 0.5], [0.5, 0.5], 0.0), "ensemble_weight"),
        (lambda: check_sampler(hf_sampler(1), [0.5, 0.5], [0.5, 0.5], n=10, law=[1.0]), "law must be a law of shape"),
        (lambda: check_sampler(hf_sampler(1), [0.5, 0.5], [0.5, 0.5], n=10, law=[0.9, 0.9]), "law must be a law:"),
        (lambda: hf_laws(*LOGITS, temperature=True), "temperature must be a finite number > 0"),
        (lambda: hf_laws(*LOGITS, temperature=float("inf")), "temperature must be a finite number > 0"),
        (lambda: hf_laws(*LOGITS, top_p=2.0), r"top_p must be None or a number in \(0, 1\]"),
        (lambda: hf_laws(*LOGITS, top_k=1.5), "top_k must be None or an integer >= 0"),
        (lambda: hf_laws(LOGITS[0], LOGITS[1][:3]), "must be vectors of one length"),
    ],
)
def test_bad_input_is_refused_naming_it(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- real models -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pair():
    from speculab.backends import load_pair

    return load_pair("tiny", device="cpu")


@pytest.mark.slow
def test_assisted_generation_greedy_is_the_targets_greedy_decoding(pair):
    from speculab.backends import Sampling, decode
    from speculab.backends.pair import default_prompts
    from speculab.methods import Autoregressive

    prompts = default_prompts()[:3]
    greedy = Sampling(temperature=0.0)
    ours = decode(pair, prompts, Autoregressive(), max_new_tokens=12, sampling=greedy, key=0).tokens
    for prompt, mine in zip(prompts, ours):
        theirs = assisted_runs(pair, pair.tokenizer.encode(prompt), 2, sampling=greedy, key=5, max_new_tokens=12)
        assert theirs == [list(mine)] * 2


@pytest.mark.slow
def test_assisted_generation_samples_the_targets_law_and_the_control_is_refused(pair):
    """300 runs each: the first token's and first tokens' laws against the target's exact ones; the ensemble option
    (w = 0.5), whose first-token law is known exactly, is refused, and the stated power against it is >= 0.99."""
    from speculab.backends import Sampling
    from speculab.backends.pair import default_prompts
    from speculab.backends.exact_law import next_law

    prompt = default_prompts()[0]
    ids = pair.tokenizer.encode(prompt)
    sampling = Sampling()
    p1 = next_law(pair.draft.model, ids, sampling, pair.device, pair.vocab_size)
    q1 = next_law(pair.target.model, ids, sampling, pair.device, pair.vocab_size)
    control = ensemble_law(p1, q1, 0.5)

    def hf(w):
        return lambda ids, n, key: assisted_runs(pair, ids, n, sampling=sampling, key=key, ensemble_weight=w)

    row = check_decoder(hf(None), pair, prompt, runs=300, key=1, control=control, name="assisted")
    assert not row.refused and row.power >= 0.99, row
    biased = check_decoder(hf(0.5), pair, prompt, runs=300, key=2, control=control, name="ensemble")
    assert biased.refused, biased


def test_check_decoder_states_its_power_only_against_a_control(pair):
    """A decoder is tested as a lossless one; the power is stated against the control's first-token law when one
    is given, and is NaN (nothing to state it against) when not."""
    from speculab.backends import Sampling
    from speculab.backends.exact_law import next_law

    run = lambda ids, n, key: [[1, 2, 3]] * n  # noqa: E731
    ids = pair.tokenizer.encode("Return the")
    q1 = next_law(pair.target.model, ids, Sampling(), pair.device, pair.vocab_size)
    alone = check_decoder(run, pair, "Return the", runs=5, key=0)
    against = check_decoder(run, pair, "Return the", runs=5, key=0, control=np.roll(q1, 1))
    assert alone.lossless and against.lossless
    assert np.isnan(alone.power) and 0 < against.power <= 1
    eos = pair.eos_token_id
    short = check_decoder(lambda ids, n, key: [[eos], [1, eos]] * (n // 2), pair, "Return the", runs=6, key=0)
    assert short.runs == 6  # runs shorter than the law's tokens are taken when they end at EOS


def test_check_decoder_refuses_bad_input_naming_it(pair):
    from speculab.backends import Sampling

    run = lambda ids, n, key: [[1, 2, 3]] * n  # noqa: E731
    with pytest.raises(ValueError, match="needs sampling"):
        check_decoder(run, pair, "Return the", runs=5, key=0, sampling=Sampling(temperature=0.0))
    with pytest.raises(ValueError, match="prompt must be a non-empty string"):
        check_decoder(run, pair, "", runs=5, key=0)
    with pytest.raises(ValueError, match="must return 5 runs"):
        check_decoder(lambda ids, n, key: [[1, 2, 3]], pair, "Return the", runs=5, key=0)
    with pytest.raises(ValueError, match="at least 3 tokens, or ending at EOS"):
        check_decoder(lambda ids, n, key: [[1, 2]] * n, pair, "Return the", runs=5, key=0)
    with pytest.raises(ValueError, match=rf"a token outside 0\.\.{pair.vocab_size - 1}: \[1, 2, {pair.vocab_size}\]"):
        check_decoder(lambda ids, n, key: [[1, 2, pair.vocab_size]] * n, pair, "Return the", runs=5, key=0)
    with pytest.raises(ValueError, match="a token outside 0"):
        check_decoder(lambda ids, n, key: [[-1, 2, 3]] * n, pair, "Return the", runs=5, key=0)
    with pytest.raises(ValueError, match="control must be a law of shape"):
        check_decoder(run, pair, "Return the", runs=5, key=0, control=np.ones(3) / 3)


def test_check_decoder_tests_the_first_tokens_of_longer_runs(pair):
    """Found by review: runs longer than the tokens tested all fell into the test's "other" cell, and a lossless
    decoder was refused. Autoregressive decoding of 6 tokens (300 runs) is consistent with the target's law, and
    a decoder that repeats the target's likeliest first token is refused."""
    from speculab.backends import decode
    from speculab.methods import Autoregressive

    def ar(ids, n, key):
        return decode(pair, [ids] * n, Autoregressive(), max_new_tokens=6, key=key).tokens

    assert not check_decoder(ar, pair, "Return the", runs=300, key=1).refused
    first = ar(pair.tokenizer.encode("Return the"), 1, 2)[0]
    assert check_decoder(lambda ids, n, key: [first] * n, pair, "Return the", runs=300, key=1).refused


@pytest.mark.slow
def test_verifiers_reproduction(tmp_path):
    """``speculab repro verifiers`` at small sizes: lossless certificates at 0 to float precision, biased ones with
    their closed forms, transformers' tests, and the plane's exact numbers recomputed from the saved instance (Thm
    5 holds at every position; Decoding-OPT is on its front)."""
    from conftest import claims_of

    from speculab.backends.pair import default_prompts
    from speculab.repro import verifiers
    from speculab.theory import MarkovInstance

    res = verifiers.run(key=3, n_runs=4_000, runs=60, out_dir=tmp_path, prompts=default_prompts()[:4], max_new_tokens=8)
    lossless = {r["verifier"]: r for r in res["certificates"] if r["lossless"]}
    assert all(r["tv"] <= verifiers.EXACT for r in lossless.values())
    assert {"ar", "sd K=2", "engine: exact-match acceptance (mlx-lm #1709)"} <= set(lossless)
    for r in res["certificates"]:
        if "closed_form" in r:
            assert r["first_token_tv"] == pytest.approx(r["closed_form"], abs=verifiers.EXACT), r["verifier"]
        if not r["lossless"]:
            assert r["tv"] > 1e-3
    hf = res["transformers"]["tests"]
    assert not any(t["refused"] for label, t in hf.items() if "ensemble" not in label)
    assert hf["ensemble w=0.5 vs the target"]["refused"]
    assert res["assisted"]["greedy"]["identical"] == res["assisted"]["greedy"]["prompts"]
    inst = MarkovInstance.load(tmp_path / "verifiers_instance.npz")
    mu = inst.marginals()
    for family, points in verifiers._lossy(verifiers.K).items():
        for label, method in points:
            v = res["plane"][family][label]
            want = dict(reject=0.0, loss_tv=0.0, tv=0.0)  # context by context, from the method's rule
            for t in range(inst.T):
                for a in range(inst.V):
                    p, q = inst.P[t, a], inst.Q[t, a]
                    b, R = method.rule(p, q)
                    refused = float(np.sum((1 - b) * p))
                    law = b * p + refused * R
                    want["reject"] += mu[t, a] * refused / inst.T
                    want["loss_tv"] += mu[t, a] * 0.5 * float(np.abs(law - q).sum()) / inst.T
                    want["tv"] += mu[t, a] * 0.5 * float(np.abs(p - q).sum()) / inst.T
            assert {k: v[k] for k in want} == pytest.approx(want, rel=1e-12, abs=1e-15), (family, label)
            assert v["tokens_per_call"] == pytest.approx(inst.T / method.expected(inst).oracle_calls, rel=1e-12)
            assert v["thm5_gap_min"] >= -1e-12
            if family == "OPT":
                assert abs(v["front_gap"]) <= 1e-12
    for points in res["measured"].values():
        for v in points.values():
            assert v["thm5_gap_min"] >= -1e-5 and v["tokens_per_call"] >= 1.0  # float32 logits
    assert (tmp_path / "verifiers.png").stat().st_size > 10_000 and "transformers" in verifiers.summary(res)
    rows = claims_of(verifiers, res)
    assert sum(r["quantity"].startswith("certificate: ") for r in rows) == len(res["certificates"])


def test_the_ensemble_weight_takes_any_real_number():
    assert hf_sampler(1, np.float32(0.5)).__name__.endswith("assistant_ensemble_weight = 0.5)")
