"""Cheap exact drafts: the n-gram model's counts and smoothing, prompt lookup's proposals, both in decoding."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import model_device  # noqa: E402

from speculab.backends import NGramModel, PromptLookupModel, Sampling, decode, load_pair, ngram_draft  # noqa: E402
from speculab.backends.models import HistoryModel  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.methods import SD, Autoregressive, BatchSD  # noqa: E402

GREEDY = Sampling(temperature=0)


def _ngram_brute(ids, n, V, alpha, history):
    """The interpolated add-alpha formula of NGramModel's docstring, counted by brute force over the text."""
    context = tuple(history[max(0, len(history) - (n - 1)) :])
    prob = np.full(V, 1.0 / V)
    for k in range(len(context) + 1):
        ctx = context[len(context) - k :]
        counts = np.zeros(V)
        for i in range(k, len(ids)):
            if tuple(ids[i - k : i]) == ctx:
                counts[ids[i]] += 1
        if counts.sum() == 0:
            break
        prob = (counts + alpha * V * prob) / (counts.sum() + alpha * V)
    return prob


@pytest.mark.parametrize("size", [200, 12])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ngram_probabilities_are_the_counted_formula(n, size):
    """Every context, in an order that reaches long contexts before and after their suffixes' laws are memoised;
    the short text leaves contexts unseen whose suffixes were seen, and token 4 is never seen."""
    rng = np.random.default_rng(n)
    V = 5
    ids = rng.integers(0, V - 1, size).tolist()
    model = NGramModel(ids, n, V, alpha=0.3)
    for history in list(itertools.product(range(V), repeat=3))[::-1] + list(itertools.product(range(V), repeat=2)):
        np.testing.assert_allclose(model.probs(history).numpy(), _ngram_brute(ids, n, V, 0.3, history), atol=1e-14)
    assert model.probs((4, 4, 4)).sum().item() == pytest.approx(1.0, abs=1e-12)


def test_the_memoised_logits_are_the_laws_logs_bounded_and_forgotten_on_request(monkeypatch):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 6, 300).tolist()
    model = NGramModel(ids, 3, 6, alpha=0.3)
    monkeypatch.setattr(NGramModel, "MEMO", 5)
    histories = list(itertools.product(range(6), repeat=2))
    for history in histories:  # 36 contexts through a memo of 5: cleared and refilled, the values unchanged
        logits = model.logits((0,) + history)  # only the last n - 1 tokens are the context
        np.testing.assert_array_equal(logits.numpy(), np.log(_ngram_brute(ids, 3, 6, 0.3, history)).astype(np.float32))
        assert logits is model.logits(history)  # memoised by context
        assert len(model._memo) <= 5 and len(model._log_memo) <= 5
    model.clear_cache()
    assert not model._memo and not model._log_memo
    lookup = PromptLookupModel(6, fallback=model)
    np.testing.assert_array_equal(lookup.logits((1, 2, 3)).numpy(), model.logits((2, 3)).numpy())  # no match
    assert lookup.logits((1, 2, 1))[2] == 0 and torch.isinf(lookup.logits((1, 2, 1))).sum() == 5  # copies 2
    lookup.clear_cache()
    assert not lookup._source and not model._memo


def test_ngram_refuses_bad_arguments():
    for bad, match in (
        ({"n": 0}, "n must"),
        ({"n": 2.5}, "n must"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
    ):
        kwargs = {"n": 2, **bad}
        with pytest.raises(ValueError, match=match):
            NGramModel([1, 2, 3], kwargs.pop("n"), 10, **kwargs)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        NGramModel([1, 12], 2, 10)
    with pytest.raises(ValueError, match="overflows"):
        NGramModel([1, 2], 7, 2048)


def test_prompt_lookup_proposes_the_continuation_of_the_earliest_match():
    m = PromptLookupModel(10, max_ngram=2)
    assert m.proposal((1, 2, 3, 9, 1, 2)) == 3  # the bigram (1, 2) occurred at 0
    assert m.proposal((1, 2, 3, 9, 4, 2)) == 3  # no earlier (4, 2): the unigram 2 did, followed by 3
    assert m.proposal((5, 1, 7, 1, 8, 1)) == 7  # earliest of two matches
    assert m.proposal((1, 2, 3)) is None and m.proposal((4,)) is None
    p = m.probs((1, 2, 3, 9, 1, 2))
    assert p[3] == 1 and p.sum() == 1
    np.testing.assert_allclose(m.probs((1, 2, 3)).numpy(), np.full(10, 0.1))  # no match: uniform
    fallback = NGramModel([1, 2, 3, 4], 2, 10)
    with_fallback = PromptLookupModel(10, fallback=fallback)
    np.testing.assert_array_equal(with_fallback.probs((1, 2, 3)).numpy(), fallback.probs((1, 2, 3)).numpy())


def test_prompt_lookup_copies_a_block_and_is_a_function_of_the_history_alone():
    m = PromptLookupModel(10, max_ngram=2)
    history = (1, 2, 3, 4, 9, 1, 2)
    assert [m.proposal(history + (3, 4)[:i]) for i in range(3)] == [3, 4, 9]  # the block after (1, 2), copied on
    assert (
        m.proposal((7, 1, 2, 5, 1, 2)) == 5 and m.proposal((7, 1, 2, 5, 1, 2, 3)) is None
    )  # 3 ≠ the copied 5: looked up, no match
    fresh = PromptLookupModel(10, max_ngram=2)
    fresh.MEMO = 2  # forgets almost everything: the same answers, recomputed
    for h in [history, history + (3,), history + (3, 4), (7, 1, 2, 5, 1, 2, 3)]:
        assert fresh.proposal(h) == PromptLookupModel(10, max_ngram=2).proposal(h) == m.proposal(h)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"max_ngram": 0}, "max_ngram"),
        ({"max_ngram": True}, "max_ngram"),
        ({"fallback": "ngram"}, "fallback"),
        ({"fallback": NGramModel([1], 1, 5)}, "same 10 tokens"),
    ],
)
def test_prompt_lookup_refuses_bad_arguments(bad, match):
    with pytest.raises(ValueError, match=match):
        PromptLookupModel(10, **bad)


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(2)
    return load_pair("tiny", device=model_device())


@pytest.mark.slow
def test_greedy_sd_with_cheap_drafts_is_the_targets_greedy_decoding(pair):
    """Exact drafts: under greedy decoding SD outputs what the target alone does, on both decoding paths."""
    prompts = ["def f(x): return f(x", "The default value of the default"] + default_prompts()[:3]
    V = pair.vocab_size
    ngram = ngram_draft(pair.tokenizer, default_prompts(), n=2)
    target_alone = decode(pair, prompts, Autoregressive(), max_new_tokens=20, sampling=GREEDY, key=0)
    for draft in (PromptLookupModel(V), PromptLookupModel(V, max_ngram=3, fallback=ngram)):
        drafted = load_pair(draft, "tiny-target", device=model_device())
        for batch_size in (None, 1):
            res = decode(drafted, prompts, SD(K=4), max_new_tokens=20, sampling=GREEDY, key=0, batch_size=batch_size)
            assert res.tokens == target_alone.tokens
            assert res.counts.accepted.sum() > 0  # the lookups do propose accepted tokens


@pytest.mark.slow
def test_sampled_sd_with_prompt_lookup_matches_the_exact_rejection_rate(pair, agrees):
    """Temperature 1: each position's rejection probability is TV(p_n, q_n) (SD, Thm 1 along the run); the mean
    rejections per run equal the summed TV along the runs within standard errors."""
    drafted = load_pair(
        PromptLookupModel(pair.vocab_size, fallback=ngram_draft(pair.tokenizer, default_prompts())),
        "tiny-target",
        device=model_device(),
    )
    res = decode(drafted, default_prompts() * 4, SD(K=3), max_new_tokens=16, key=3)
    rej = res.counts.rejections.astype(float)
    predicted = np.array([np.nansum(np.where(r.kind == 2, 0.0, r.reject_prob)) for r in res.records])
    diff = rej - predicted  # paired: the standard error of the difference, run by run
    agrees(rej.mean(), predicted.mean(), "rejections per run", se=diff.std(ddof=1) / np.sqrt(diff.size))


@pytest.mark.slow
def test_prompt_lookup_without_a_match_proposes_nothing_and_both_paths_agree(pair, agrees):
    """No fallback: where no n-gram matches the block ends (possibly empty: one target step, counted like an
    autoregressive step); the batched path cuts each row's block where the one-prompt path stops drafting, so the
    same key gives the same tokens and counts; the paired rejection count still holds."""
    from speculab.compare import paired_rejections

    m = PromptLookupModel(pair.vocab_size)
    assert not m.proposes((1, 2, 3)) and m.proposes((1, 2, 1))
    drafted = load_pair(m, "tiny-target", device=model_device())
    prompts = default_prompts()[:6] + ["def f(x): return f(x) + f(x"]
    one = decode(drafted, prompts, SD(K=3), max_new_tokens=20, key=4, batch_size=1)
    many = decode(drafted, prompts, SD(K=3), max_new_tokens=20, key=4)
    assert one.tokens == many.tokens
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
        np.testing.assert_array_equal(getattr(one.counts, name), getattr(many.counts, name))
    for ra, rb in zip(one.records, many.records):  # target steps record no TV (the draft is not tracked) on both
        np.testing.assert_array_equal(np.isnan(ra.tv), np.isnan(rb.tv))
        np.testing.assert_allclose(ra.reject_prob, rb.reject_prob, atol=1e-5)
    empty = sum(int((r.drafted == 0).sum()) for r in many.rounds)
    assert 0 < empty < many.counts.oracle_calls.sum()  # some rounds had no match, some did
    row = paired_rejections(many)
    agrees(row.measured, row.predicted, "rejections per run (paired)", se=row.predicted_se)


class _EOSHeavyDraft(HistoryModel):
    """Drafts EOS half the time (the rest uniform): many blocks end with a drafted EOS."""

    def __init__(self, vocab_size: int, eos: int):
        super().__init__(vocab_size)
        self.law = torch.full((vocab_size,), 0.5 / (vocab_size - 1), dtype=torch.float64)
        self.law[eos] = 0.5

    def probs(self, history: tuple) -> torch.Tensor:
        return self.law


class _IntermittentDraft(HistoryModel):
    """A user's history draft that proposes nothing after a history whose length is a multiple of 7: blocks of up
    to 6 drafts end there, mid-round."""

    def __init__(self, vocab_size: int):
        super().__init__(vocab_size)
        self.law = torch.softmax(torch.linspace(3.0, -3.0, vocab_size, dtype=torch.float64), 0)

    def probs(self, history: tuple) -> torch.Tensor:
        return self.law

    def proposes(self, history: tuple) -> bool:
        return len(history) % 7 != 0


@pytest.mark.slow
def test_a_row_stops_asking_the_draft_at_its_own_block_length(pair):
    """Batched, a prompt with fewer tokens to go than the round's longest block stops drafting at its own length:
    a draft that would stop proposing just past it must not lengthen its block (that draft is never asked on the
    one-prompt path). Batched equals one prompt at a time; blocks ended by the draft and by the horizon occur."""
    drafted = load_pair(_IntermittentDraft(pair.vocab_size), "tiny-target", device=model_device())
    prompts, method = default_prompts()[:8], SD(K=6)
    blocks = []
    one = decode(drafted, prompts, method, max_new_tokens=24, key=8, batch_size=1)
    many = decode(
        drafted, prompts, method, max_new_tokens=24, key=8, on_round=lambda info: blocks.append(info.drafts.shape[-1])
    )
    assert one.tokens == many.tokens
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
        np.testing.assert_array_equal(getattr(one.counts, name), getattr(many.counts, name), err_msg=name)
    assert set(range(7)) <= set(blocks)  # every block length from 0 to K


@pytest.mark.parametrize(
    "batch_size", [pytest.param(1, id="one-prompt", marks=pytest.mark.slow), pytest.param(None, id="batched")]
)
def test_no_bonus_is_offered_after_a_drafted_eos(pair, batch_size):
    """A single row's block that ends with a drafted EOS ends the sequence if accepted, so its round law offers no
    bonus (its weights after the last draft are zero); other blocks short of the horizon offer one — one prompt at
    a time and batched."""
    eos = pair.eos_token_id
    drafted = load_pair(_EOSHeavyDraft(pair.vocab_size, eos), "tiny-target", device=model_device())
    infos = []
    decode(
        drafted, default_prompts()[:4], SD(K=3), max_new_tokens=40, key=6, batch_size=batch_size, on_round=infos.append
    )
    bonus = [(int(i.drafts[0, -1]) == eos, float(i.law.correction[0, 0, -1].sum())) for i in infos if i.drafts.numel()]
    assert {weight for ends_eos, weight in bonus if ends_eos} == {0.0}
    assert any(weight > 0 for ends_eos, weight in bonus if not ends_eos)


def test_a_bonus_is_possible_short_of_the_horizon_unless_one_rows_block_ends_in_eos():
    """``bonus_possible(L, remaining, rows, last, eos)``, the rule the test above watches, case by case."""
    from speculab.backends.decode import bonus_possible

    assert bonus_possible(3, 5, 1, 7, 0) and not bonus_possible(3, 3, 1, 7, 0)  # short of the horizon, at it
    assert not bonus_possible(3, 5, 1, 0, 0)  # one row's block ending in the EOS
    assert bonus_possible(3, 5, 2, 0, 0)  # batch SD: the followed row need not be the one ending in it
    assert bonus_possible(0, 5, 1, None, 0) and bonus_possible(3, 5, 1, 0, None)  # no block; no EOS token


def test_an_autoregressive_step_builds_no_round_law_unless_one_is_watched(pair, monkeypatch):
    """The one-prompt loop's shortcut: a round without drafts draws its token from ``q_1`` directly; only with
    ``on_round``, which is given the law, is one built (a round per token)."""
    built, round_law = [], Autoregressive.round_law
    monkeypatch.setattr(Autoregressive, "round_law", lambda self, *a, **k: built.append(1) or round_law(self, *a, **k))
    prompts = default_prompts()[:2]
    fast = decode(pair, prompts, Autoregressive(), max_new_tokens=6, key=1, batch_size=1)
    assert built == [] and fast.counts.tokens.tolist() == [6, 6]
    decode(pair, prompts, Autoregressive(), max_new_tokens=6, key=1, batch_size=1, on_round=lambda info: None)
    assert len(built) == 12


@pytest.mark.slow
@pytest.mark.parametrize("sampling", [GREEDY, Sampling()], ids=["greedy", "sampled"])
def test_a_round_without_drafts_gives_what_its_round_law_gives(pair, sampling):
    """The one-prompt loop draws an empty round's token from ``q_1`` without building its law; with ``on_round``
    it builds the law and samples it (the general path). Same key: same tokens, counts and records, for
    autoregressive decoding and for prompt lookup's empty blocks — SD and block verification (whose round law
    once failed on an empty block). Only a method with one draft row stops drafting where prompt lookup proposes
    nothing: batch SD with two rows drafts its K tokens on both paths alike (a batched path that cut its rows
    there too would differ: found by mutation testing)."""
    from speculab.methods import BlockVerification

    lookup = load_pair(PromptLookupModel(pair.vocab_size), "tiny-target", device=model_device())
    prompts = default_prompts()[:3] + ["def f(x): return f(x) + f(x"]
    seen = []
    for drafted, method in (
        (pair, Autoregressive()),
        (lookup, SD(K=3)),
        (lookup, BlockVerification(3)),
        (lookup, BatchSD(1, K=3)),
        (lookup, BatchSD(2, K=3)),
    ):
        fast = decode(drafted, prompts, method, max_new_tokens=12, sampling=sampling, key=5, batch_size=1)
        general = decode(
            drafted,
            prompts,
            method,
            max_new_tokens=12,
            sampling=sampling,
            key=5,
            batch_size=1,
            on_round=lambda info: seen.append(info.drafts.shape[-1]),
        )
        assert fast.tokens == general.tokens
        for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
            np.testing.assert_array_equal(getattr(fast.counts, name), getattr(general.counts, name))
        for ra, rb in zip(fast.records, general.records):
            for name in ("kind", "tv", "reject_prob", "accept_prob", "loss_tv", "loss_kl", "target_logprob"):
                np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name), err_msg=name)
        for ra, rb in zip(fast.rounds, general.rounds):  # what compare and the latency model read
            for name in ("drafted", "accepted", "expected_accepted", "var_accepted"):
                np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name), err_msg=name)
        batched = decode(drafted, prompts, method, max_new_tokens=12, sampling=sampling, key=5)
        assert batched.tokens == fast.tokens
    assert 0 in seen and max(seen) > 0  # empty rounds went through the general path, and drafted ones too


def test_extend_with_last_gives_the_last_positions_logits_only(pair):
    """``extend(..., last=True)`` (the draft's catch-up) is the last column of the full call, for a Hugging Face
    model and for history drafts, with the state advanced alike."""
    ids = torch.tensor([[5, 9, 5, 9, 7]], device=pair.device)
    models = (
        pair.draft,
        ngram_draft(pair.tokenizer, default_prompts(), n=2),
        PromptLookupModel(pair.vocab_size, fallback=ngram_draft(pair.tokenizer, default_prompts(), n=1)),
    )
    for model in models:
        full_state, last_state = model.start(), model.start()
        full = model.extend(full_state, ids)
        last = model.extend(last_state, ids, last=True)
        assert last.shape == (1, 1, pair.vocab_size) and full.shape == (1, 5, pair.vocab_size)
        torch.testing.assert_close(last, full[:, -1:], rtol=0, atol=0)
        assert last_state.length == full_state.length == 5
        more = torch.tensor([[3]], device=pair.device)
        torch.testing.assert_close(model.extend(last_state, more), model.extend(full_state, more), rtol=0, atol=0)


def test_the_kv_cache_goes_by_the_keyword_the_model_takes():
    """transformers 5.24 renamed ``forward``'s ``past_key_values`` to ``cache`` (the old name deprecated): each
    model gets the name its own signature has."""
    from speculab.backends.models import cache_argument

    class New:
        def forward(self, input_ids, cache=None, use_cache=True):
            pass

    class Old:
        def forward(self, input_ids, past_key_values=None, use_cache=True):
            pass

    marker = object()
    assert cache_argument(New(), marker) == {"cache": marker}
    assert cache_argument(Old(), marker) == {"past_key_values": marker}
    assert PromptLookupModel(10, max_ngram=np.int64(3)).max_ngram == 3  # numpy integers are integers
