"""Decoding prompts as the rows of one batch (speculab.backends.batched) against the one-prompt path.

Each prompt has its own random stream, consumed alike on both paths, so for the same
key tokens, counts and records must agree prompt by prompt — sampled and greedy,
across prompts of very different lengths (up to the context limit), rows that stop at
EOS in different rounds, batches of one and of a few, n-gram and prompt-lookup drafts
and batch SD. The output law itself is also checked against the target's, computed
from the target's logits.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import binomial_se  # noqa: E402
from speculab.backends import Sampling, decode, load_pair, ngram_draft  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.methods import SD, Autoregressive, BatchSD, Biased, BlockVerification, Fuzzy  # noqa: E402

GREEDY = Sampling(temperature=0)


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(2)
    return load_pair("tiny", device="cpu")


def _same(a, b):
    assert a.tokens == b.tokens
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus", "tokens"):
        np.testing.assert_array_equal(getattr(a.counts, name), getattr(b.counts, name), err_msg=name)
    for ra, rb in zip(a.records, b.records):
        np.testing.assert_array_equal(ra.kind, rb.kind)
        np.testing.assert_allclose(ra.tv, rb.tv, atol=1e-5)  # float32 logits: batched reductions differ in the last bits
        np.testing.assert_allclose(ra.target_logprob, rb.target_logprob, atol=1e-4)


@pytest.mark.parametrize("method", [Autoregressive(), SD(K=4), SD(), SD(K=1), BlockVerification(3), Fuzzy(0.0, "js", K=3)],
                         ids=repr)
def test_greedy_batched_equals_one_prompt_at_a_time(pair, method):
    prompts = default_prompts()[:6] + ["x", "def f(" * 20]  # lengths from 1 token to over 100
    one = decode(pair, prompts, method, max_new_tokens=20, sampling=GREEDY, key=0, batch_size=1)
    many = decode(pair, prompts, method, max_new_tokens=20, sampling=GREEDY, key=0)
    _same(one, many)
    assert len({len(t) for t in pair.tokenizer(prompts)["input_ids"]}) > 4


def test_rows_that_stop_at_eos_in_different_rounds(pair):
    """Long generations: some rows emit EOS early and leave the batch, the others go on (and batches of 3)."""
    prompts = default_prompts()[:12]
    one = decode(pair, prompts, SD(K=4), max_new_tokens=60, sampling=GREEDY, key=0, batch_size=1)
    lengths = [len(t) for t in one.tokens]
    assert min(lengths) < 60 and max(lengths) == 60 and pair.eos_token_id in one.tokens[lengths.index(min(lengths))]
    assert all("<|endoftext|>" not in text for text in one.texts)  # texts leave special tokens out
    for size in (None, 3):
        _same(one, decode(pair, prompts, SD(K=4), max_new_tokens=60, sampling=GREEDY, key=0, batch_size=size))


def test_a_batch_of_one_and_an_ngram_draft(pair):
    ngram = load_pair(ngram_draft(pair.tokenizer, default_prompts(), n=3), "tiny-target", device="cpu")
    prompts = default_prompts()[:5]
    for p in (ngram, pair):
        for prompt in (prompts[:1], prompts):
            _same(decode(p, prompt, SD(K=3), max_new_tokens=16, sampling=GREEDY, key=1, batch_size=1),
                  decode(p, prompt, SD(K=3), max_new_tokens=16, sampling=GREEDY, key=1))


def test_autoregressive_tracking_the_draft(pair):
    prompts = default_prompts()[:4]
    one = decode(pair, prompts, Autoregressive(), max_new_tokens=8, sampling=GREEDY, key=0, batch_size=1,
                 track_draft=True)
    many = decode(pair, prompts, Autoregressive(), max_new_tokens=8, sampling=GREEDY, key=0, track_draft=True)
    _same(one, many)
    assert np.isfinite(np.concatenate([r.tv for r in many.records])).all()


def test_batched_sampling_has_the_target_law(pair, agrees):
    """400 copies of one prompt, SD with K = 2, two tokens each: the first token's law is q(· | prompt) and the
    second's, after the most frequent first token, q(· | prompt, x_1) — z-tests on their likeliest tokens.
    The bug this is for is a batching one: rows sharing their random numbers draw one token for all (power ≈ 1);
    the laws themselves are held to their named bugs by test_backends' law tests (N_LAW runs)."""
    prompt = default_prompts()[3]
    n = 400
    res = decode(pair, [prompt] * n, SD(K=2), max_new_tokens=2, key=5)
    first = np.array([t[0] for t in res.tokens])
    ids = pair.tokenizer.encode(prompt)
    with torch.no_grad():
        q1 = torch.softmax(pair.target.model(torch.tensor([ids])).logits[0, -1, : pair.vocab_size].double(), -1).numpy()
    top = np.argsort(q1)[::-1][:8]
    freq = np.array([(first == x).mean() for x in top])
    # every row the same draw: the likeliest token's frequency is 0 or 1 — the nearer, 0, while its q is below 1/2
    assert q1[top[0]] < 0.5
    shared = np.zeros(top.size)
    agrees(freq, q1[top], "batched first-token law", se=binomial_se(q1[top], n), wrong=shared, wrong_se=0,
           alternative=f"batched first-token law ({n} rows): rows sharing their random numbers")
    x1 = np.bincount(first).argmax()
    second = np.array([t[1] for t in res.tokens if t[0] == x1 and len(t) > 1])
    with torch.no_grad():
        logits = pair.target.model(torch.tensor([ids + [int(x1)]])).logits[0, -1, : pair.vocab_size]
    q2 = torch.softmax(logits.double(), -1).numpy()
    top = np.argsort(q2)[::-1][:5]
    freq = np.array([(second == x).mean() for x in top])
    # about 50 rows: power against a 10 % error is low (recorded, not asserted); the second token's law is held, with
    # power against named bugs at the second position, by test_backends' directed second-token checks (whose runs
    # are decoded as one batch)
    agrees(freq, q2[top], f"batched second-token law ({second.size} rows)", se=binomial_se(q2[top], second.size),
           carried_by="test_backends::test_first_tokens_follow_the_target_law (second tokens in A(x1), batched)")


@pytest.mark.parametrize("method", [SD(K=4), Autoregressive(), SD(), BlockVerification(3), Biased(0.2, "opt", K=3)],
                         ids=repr)
def test_sampled_batched_equals_one_prompt_with_the_same_key(pair, method):
    """Temperature 1: each prompt consumes its own random stream in the same order on both paths, so the same key
    gives the same tokens and counts prompt by prompt (ragged rows, EOS, different prompt lengths included)."""
    prompts = default_prompts()[:10] + ["x"]
    one = decode(pair, prompts, method, max_new_tokens=24, key=11, batch_size=1)
    _same(one, decode(pair, prompts, method, max_new_tokens=24, key=11))
    _same(one, decode(pair, prompts, method, max_new_tokens=24, key=11, batch_size=4))


@pytest.mark.parametrize("method", [BatchSD(3, K=2), BatchSD(2)], ids=repr)
def test_batch_sd_batched_equals_one_prompt_with_the_same_key(pair, method):
    """M draft rows per prompt as M consecutive batch rows, reduced to the followed one: same tokens and counts,
    sampled and greedy, and the same records (the batch root's rejection probability Π r_m included)."""
    prompts = default_prompts()[:7]
    for sampling in (Sampling(), GREEDY):
        one = decode(pair, prompts, method, max_new_tokens=16, sampling=sampling, key=3, batch_size=1)
        many = decode(pair, prompts, method, max_new_tokens=16, sampling=sampling, key=3, batch_size=3)
        _same(one, many)
        for ra, rb in zip(one.records, many.records):
            np.testing.assert_allclose(ra.reject_prob, rb.reject_prob, atol=1e-5)


def test_bad_batch_sizes(pair):
    """Bad sizes are refused by name."""
    prompts = default_prompts()[:2]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            decode(pair, prompts, SD(K=2), max_new_tokens=4, key=0, batch_size=bad)


@pytest.mark.parametrize("method", [SD(), BatchSD(2)], ids=repr)
def test_a_prompt_at_the_context_limit_beside_short_ones(pair, method):
    """Regression (review): short rows draft past their own block while the long one drafts on; their padding
    drafts ran past the context (an IndexError in GPT-2's position embedding)."""
    prompts = [[7] * (pair.max_length - 16)] + default_prompts()[:3]
    one = decode(pair, prompts, method, max_new_tokens=16, key=5, batch_size=1)
    _same(one, decode(pair, prompts, method, max_new_tokens=16, key=5))


def test_prompts_longer_than_the_context_are_refused(pair):
    with pytest.raises(ValueError, match="context"):
        decode(pair, ["ok", "def f(" * 200], SD(K=2), max_new_tokens=4, key=0)


def test_on_round_sees_each_rows_own_block(pair):
    seen = []
    decode(pair, default_prompts()[:3], SD(K=3), max_new_tokens=6, key=0,
           on_round=lambda info: seen.append((info.run, tuple(info.p.shape), tuple(info.q.shape), info.accepted)))
    assert {r for r, *_ in seen} == {0, 1, 2}
    for _, p, q, acc in seen:
        assert p[0] == 1 and q[1] == p[1] + 1 and 0 <= acc <= p[1]


def test_the_cache_is_compacted_and_stays_exact(pair, monkeypatch):
    """K = ∞ refuses most of each round's drafts: the holes are compacted away (spied) and greedy tokens still
    equal the one-prompt path's; the cache never holds more than twice the longest row."""
    from speculab.backends import batched

    widths, original = [], batched._HFRows.compact

    def spy(self):
        before = self.mask.size(1)
        original(self)
        widths.append((before, self.mask.size(1), int(self.valid.max())))

    monkeypatch.setattr(batched._HFRows, "compact", spy)
    prompts = default_prompts()[:6]
    one = decode(pair, prompts, SD(), max_new_tokens=24, sampling=GREEDY, key=0, batch_size=1)
    _same(one, decode(pair, prompts, SD(), max_new_tokens=24, sampling=GREEDY, key=0))
    assert sum(after < before for before, after, _ in widths) >= 3  # compactions really happened
