"""Device hygiene of every real-model path, checked on the CPU.

The models stay on the CPU while torch's default device is ``meta`` (no data: any operation that mixes a meta
tensor with a CPU tensor fails). So a tensor built anywhere without an explicit device — the bug that broke every
real-model path on CUDA — fails here, on a machine without a GPU. Every registered real-model method runs this
way, batched and one prompt at a time, with its head where it has one, with an n-gram draft, journaled and resumed
after an interruption, observed by its round probe, in ``compare`` (speed included), in ``validate``, and in every
reproduction that decodes; each result must equal the same call's result with the default device left alone.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _heads import constant  # noqa: E402
from speculab.backends import decode, load_pair, ngram_draft  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.methods import (  # noqa: E402
    SD,
    GreedyDraft,
    Synthetic,
    Autoregressive,
    BatchSD,
    Biased,
    BlockVerification,
    Fuzzy,
    Typical,
    RRS,
    RejectionDecoding,
    SpecDecPP,
    Sprinter,
    Traversal,
    names,
)
from speculab.sim.checkpoint import resumable  # noqa: E402

PROMPTS = default_prompts()[:3] + ["x"]


def _scaled_sd(p, q):
    from speculab import kernels

    return 0.7 * kernels.sd_acceptance(p, q)


def methods(pair) -> dict:
    """One instance of every registered method that runs on real models (heads: constant ones)."""
    return {
        "ar": Autoregressive(),
        "sd": SD(K=3),
        "batch": BatchSD(2, K=2),
        "rejection": RejectionDecoding(b=_scaled_sd, K=2),
        "biased": Biased(0.1, "opt", K=2),
        "fuzzy": Fuzzy(0.2, "js", K=2),
        "typical": Typical(0.09, 0.3, K=2),
        "sprinter": Sprinter(verifier=constant(pair, 0.6), threshold=None),
        "specdecpp": SpecDecPP(0.5, head=constant(pair, 0.8), max_K=4),
        "block": BlockVerification(3),
        "rrs": RRS((2, 2), draws="distinct"),
        "traversal": Traversal("parents=0,0,1,1,3"),
        "greedy-draft": GreedyDraft(K=3),
        "synthetic": Synthetic((0.7, 0.4), draft_sample="greedy"),
    }


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny", device="cpu")


@pytest.fixture
def meta():
    """torch's default device set to ``meta`` for the test's body (and restored)."""
    with torch.device("meta"):
        yield


def _same(a, b):
    assert a.tokens == b.tokens
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus", "tokens"):
        np.testing.assert_array_equal(getattr(a.counts, name), getattr(b.counts, name), err_msg=name)
    for ra, rb in zip(a.records, b.records):
        for name in ("kind", "tv", "reject_prob", "accept_prob", "loss_tv", "loss_kl", "target_logprob"):
            np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name), err_msg=name)


def test_the_table_has_every_real_model_method(pair):
    assert sorted(methods(pair)) == sorted(names(real_models=True))


def test_the_meta_device_catches_a_tensor_built_without_a_device(pair, meta):
    """The check itself: a CPU tensor beside one built on the default device fails."""
    with pytest.raises((RuntimeError, NotImplementedError)):
        float((torch.ones(3, device="cpu") * torch.ones(3)).sum())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(names(real_models=True)))
@pytest.mark.parametrize("batch_size", [None, 1], ids=["batched", "one-prompt"])
def test_every_method_on_every_path_builds_its_tensors_on_the_models_device(pair, name, batch_size):
    method = methods(pair)[name]
    kwargs = dict(max_new_tokens=10, key=3, batch_size=batch_size, track_draft=name == "ar")
    expected = decode(pair, PROMPTS, method, **kwargs)
    seen = []
    with torch.device("meta"):
        got = decode(pair, PROMPTS, method, **kwargs, on_round=lambda info: seen.append(info.accepted))
    _same(expected, got)
    assert len(seen) == sum(len(r.drafted) for r in got.rounds)


@pytest.mark.parametrize("batch_size", [None, 1], ids=["batched", "one-prompt"])
def test_a_history_draft_builds_its_tensors_on_the_models_device(pair, batch_size):
    ngram = load_pair(ngram_draft(pair.tokenizer, default_prompts(), n=2), "tiny-target", device="cpu")
    kwargs = dict(max_new_tokens=8, key=1, batch_size=batch_size)
    expected = decode(ngram, PROMPTS, SD(K=3), **kwargs)
    with torch.device("meta"):
        _same(expected, decode(ngram, PROMPTS, SD(K=3), **kwargs))


@pytest.mark.parametrize(
    "batch_size", [pytest.param(2, id="batched"), pytest.param(1, id="one-prompt", marks=pytest.mark.slow)]
)
def test_a_journaled_run_interrupted_and_resumed_on_the_meta_device(pair, tmp_path, monkeypatch, batch_size):
    """The journal and its replay: a call interrupted after its first block, then resumed, equals a whole run."""
    import importlib

    dec = importlib.import_module("speculab.backends.decode")  # the module (the package exports the function)

    method, probe = BlockVerification(2), None
    kwargs = dict(max_new_tokens=8, key=5, batch_size=batch_size)
    expected = decode(pair, PROMPTS, method, **kwargs, on_round=method.round_probe())
    real, calls = dec.decode_batched if batch_size > 1 else dec._Run, []

    def interrupted(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kw)

    with torch.device("meta"):
        monkeypatch.setattr(dec, "decode_batched" if batch_size > 1 else "_Run", interrupted)
        with pytest.raises(KeyboardInterrupt), resumable(tmp_path):
            decode(pair, PROMPTS, method, **kwargs, on_round=method.round_probe())
        monkeypatch.setattr(dec, "decode_batched" if batch_size > 1 else "_Run", real)
        with resumable(tmp_path, resume=True):
            probe = method.round_probe()
            _same(expected, decode(pair, PROMPTS, method, **kwargs, on_round=probe))
    assert probe.block  # the probe's observations: replayed and new


@pytest.mark.slow
def test_compare_with_speed_and_validate_on_the_meta_device(pair):
    from speculab.compare import compare
    from speculab.validate import validate

    kwargs = dict(runs_per_prompt=1, max_new_tokens=6, key=2, speed=True)
    prompts = default_prompts()[:8]
    expected = compare(pair, BatchSD(2, K=2), prompts, **kwargs)
    with torch.device("meta"):
        got = compare(pair, BatchSD(2, K=2), prompts, **kwargs)
        report = validate(
            pair,
            methods=["sd", "block"],
            runs=64,
            compare_runs=1,
            max_new_tokens=4,
            batch_prompts=8,
            speed_tokens=4,
            speed_prompts=8,
            key=0,
        )
    for a, b in zip(expected.rows, got.rows):  # the timed rows differ; every computed value agrees
        if "ms per token" not in a.quantity and "speed-up" not in a.quantity:
            np.testing.assert_equal((a.quantity, a.predicted, a.measured), (b.quantity, b.predicted, b.measured))
    assert len(report.laws) == 3 and report.compare and report.speed


def test_heads_from_data_to_decoding_on_the_meta_device(pair):
    """A head's whole life: training examples drawn with both models ([SPR] and [SDpp]'s data), a head trained on
    them, and decoding with it — each equal to the same steps with the default device left alone."""
    from speculab.backends.head_data import specdecpp_examples, specdecpp_targets, sprinter_examples
    from speculab.backends.heads import HeadConfig, train_head

    texts = default_prompts()

    def life():
        examples = sprinter_examples(pair, texts, n_prefixes=8, prefix_tokens=4, completion_tokens=3, key=1)
        mixed = specdecpp_examples(pair, texts, n_prefixes=8, prefix_tokens=4, completion_tokens=3, key=2)
        config = HeadConfig(d_in=examples.features("previous").shape[1], epochs=2, batch_size=8)
        verifier = train_head(examples.features("previous"), examples.labels(1.0), config=config)
        targets, weights = specdecpp_targets(mixed, 6.0)
        head = train_head(mixed.features("token"), targets, weights, config=config)
        runs = [
            decode(pair, PROMPTS, m, max_new_tokens=6, key=4)
            for m in (Sprinter(verifier=verifier, threshold=0.5), SpecDecPP(0.5, head=head, max_K=3))
        ]
        return examples, runs

    expected, expected_runs = life()
    with torch.device("meta"):
        got, got_runs = life()
    np.testing.assert_array_equal(expected.p, got.p)
    assert torch.equal(expected.previous_features, got.previous_features)
    for a, b in zip(expected_runs, got_runs):
        _same(a, b)


REPRODUCTIONS = {  # module: the smallest arguments that decode
    "yin_table1": dict(n_runs=1, max_new_tokens=4),
    "fsd_tradeoff": dict(n_runs=1, max_new_tokens=4, K=2),
    "block_gain": dict(n_runs=200, prompts=PROMPTS[:2], runs_per_prompt=1, max_new_tokens=4),
    "batch_optimality": dict(prompts=PROMPTS[:2], max_new_tokens=4),
    "tree_gain": dict(n_runs=100, prompts=PROMPTS[:2], max_new_tokens=4, search=1),
    "verifiers": dict(n_runs=200, runs=10, prompts=PROMPTS[:2], max_new_tokens=4),
}


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(REPRODUCTIONS))
def test_reproductions_that_decode_build_their_tensors_on_the_models_device(pair, module, tmp_path, monkeypatch):
    """Each reproduction that decodes, given the pair on the CPU (``load_pair`` cannot load weights under a meta
    default device, so it hands over the loaded pair) and run with the meta default device."""
    import importlib

    import speculab.backends as backends

    monkeypatch.setattr(backends, "load_pair", lambda *a, **k: pair)
    repro = importlib.import_module(f"speculab.repro.{module}")
    with torch.device("meta"):
        out = repro.run(key=0, out_dir=tmp_path, **REPRODUCTIONS[module])
    assert out


@pytest.mark.parametrize("batch_size", [None, 1], ids=["batched", "one prompt"])
def test_no_attention_call_may_use_cudnn_and_the_flag_comes_back(pair, monkeypatch, batch_size):
    """Every attention call of a decode runs with cuDNN's kernel switched off (it builds a plan per new shape: on an
    H200, bfloat16 decoding ran 15 times slower than float32 through it), including the drafting head's passes, and
    the user's setting is back afterwards. Checked through the flag torch reads when it picks a kernel, which is
    there on the CPU too."""
    from torch.nn import functional

    seen, attention = [], functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return attention(*args, **kwargs)

    monkeypatch.setattr(functional, "scaled_dot_product_attention", spy)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    for method in (SD(K=2), SpecDecPP(0.5, head=constant(pair, 0.8), max_K=2)):
        decode(pair, PROMPTS[:2], method, max_new_tokens=5, key=1, batch_size=batch_size)
    assert seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
