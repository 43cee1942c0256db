"""Token trees on real models (speculab.backends.tree_decode): tree attention against plain forward passes, chains
against SD and block verification token by token, the law of the first tokens, compare, bad pairs."""

import collections
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import test_backends as tb  # noqa: E402
from conftest import Z_BOUND  # noqa: E402
from speculab.backends import Sampling, decode, load_pair, ngram_draft  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.counts import DRAFT  # noqa: E402
from speculab.methods import RRS, SD, BlockVerification, Traversal, Tree  # noqa: E402

PROMPTS = default_prompts()[:4]


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return load_pair("tiny", device=tb.model_device())


def _plain_logprobs(model, pair, prompt_ids: list[int], out: list[int], sampling) -> np.ndarray:
    """``log q_n(x_n)`` of every output token by one plain forward pass over prompt + output (teacher forcing)."""
    ids = torch.tensor([prompt_ids + out], device=pair.device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1, : pair.vocab_size].float()
    probs = sampling.probs(logits).double()
    return torch.log(probs.gather(-1, torch.tensor(out, device=pair.device)[:, None])[:, 0]).cpu().numpy()


@pytest.mark.parametrize(
    "method",
    [RRS((2, 2)), Traversal((3, 1), draws="distinct"), RRS("parents=0,0,1,1,3,3", draws="distinct")],
    ids=repr,
)
def test_tree_attention_gives_each_position_the_plain_forward_pass(pair, method):
    """Every output token's target log-probability in the records equals a plain forward pass over the prompt and the
    output so far — masks, position ids and the caches kept for the accepted paths, across rounds and the cache's
    compaction (64 tokens); and at every position a draft was decided at, ``TV(p, q)`` equals the plain passes'."""
    sampling = Sampling(1.0)
    res = decode(pair, PROMPTS, method, max_new_tokens=64, sampling=sampling, key=4)
    decided = 0
    for prompt, out, rec in zip(PROMPTS, res.tokens, res.records):
        ids = pair.tokenizer.encode(prompt)
        np.testing.assert_allclose(
            rec.target_logprob, _plain_logprobs(pair.target.model, pair, ids, out, sampling), atol=2e-4
        )
        full = torch.tensor([ids + out], device=pair.device)
        with torch.no_grad():
            q = sampling.probs(pair.target.model(full).logits[0, len(ids) - 1 : -1, : pair.vocab_size].float())
            p = sampling.probs(pair.draft.model(full).logits[0, len(ids) - 1 : -1, : pair.vocab_size].float())
        tv = 0.5 * (p.double() - q.double()).abs().sum(-1).cpu().numpy()
        checked = ~np.isnan(rec.tv)
        decided += checked.sum()
        np.testing.assert_allclose(rec.tv[checked], tv[checked], atol=2e-4)
    assert res.counts.tokens.sum() > 100 and decided > 50


@pytest.mark.parametrize("L", [1, 3])
def test_a_chain_tree_is_sd_and_block_verification_token_by_token(pair, L):
    """One child per node: RRS draws exactly SD's tokens and counts from the same stream, traversal verification block
    verification's (the same uniforms at the same lanes; the laws agree to float round-off)."""
    for tree_method, chain in ((RRS(Tree.chain(L)), SD(K=L)), (Traversal(Tree.chain(L)), BlockVerification(L))):
        a = decode(pair, PROMPTS, tree_method, max_new_tokens=32, key=9)
        b = decode(pair, PROMPTS, chain, max_new_tokens=32, key=9)
        assert a.tokens == b.tokens
        for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
            np.testing.assert_array_equal(getattr(a.counts, name), getattr(b.counts, name), err_msg=name)
        for ra, rb in zip(a.records, b.records):
            np.testing.assert_array_equal(ra.kind, rb.kind)
            np.testing.assert_allclose(ra.target_logprob, rb.target_logprob, atol=1e-4)
        for ra, rb in zip(a.rounds, b.rounds):
            np.testing.assert_allclose(ra.expected_accepted, rb.expected_accepted, atol=1e-6)


def test_nodes_past_the_context_are_kept_within_it(pair, monkeypatch):
    """A row near the context's end beside rows with more to go: the round's largest tree reaches past the
    context for it (its own tree is smaller), and those nodes' positions must be clamped into the context
    (GPT-2's position embedding has no row there; spied below)."""
    from speculab.backends import batched

    asked, original = [], batched.HFRows.feed_masked

    def spy(self, ids, pos, allow, valid, keep):
        asked.append(int(pos.max()))
        return original(self, ids, pos, allow, valid, keep)

    monkeypatch.setattr(batched.HFRows, "feed_masked", spy)
    prompts = [[7] * (pair.max_length - 10)] + PROMPTS[:2]
    res = decode(pair, prompts, Traversal((1,) * 6), max_new_tokens=10, key=0)
    assert max(asked) >= pair.max_length and [len(t) for t in res.tokens] == [10, 10, 10]


def test_a_tree_round_is_one_target_call_and_a_draft_call_a_level(pair):
    """``forward_calls`` counts calls: a round is one target call (the prompt's and every node's tokens at
    once) and, for the draft, its root's and one call per level it feeds (the leaves' laws are never asked)."""
    for shape in ((2, 2), (1, 1, 1)):
        heard, before = [], (pair.draft.forward_calls, pair.target.forward_calls)
        decode(pair, PROMPTS[:2], Traversal(shape), max_new_tokens=12, key=3, on_round=heard.append)
        rounds = max(collections.Counter(info.run for info in heard).values())  # the batch's rounds
        calls = (pair.draft.forward_calls - before[0], pair.target.forward_calls - before[1])
        assert calls[1] == rounds and rounds < calls[0] <= rounds * len(shape), (calls, rounds)


def test_one_prompt_at_a_time_gives_the_same_runs(pair):
    method = Traversal((2, 2), draws="distinct")
    a = decode(pair, PROMPTS, method, max_new_tokens=24, key=2)
    b = decode(pair, PROMPTS, method, max_new_tokens=24, key=2, batch_size=1)
    assert a.tokens == b.tokens
    np.testing.assert_array_equal(a.counts.oracle_calls, b.counts.oracle_calls)


def test_greedy_trees_are_the_targets_greedy_path(pair):
    greedy = Sampling(temperature=0)
    ar = decode(pair, PROMPTS, SD(K=1), max_new_tokens=24, sampling=greedy, key=0)
    for method in (RRS((2, 2)), Traversal((3, 1), draws="distinct")):
        assert decode(pair, PROMPTS, method, max_new_tokens=24, sampling=greedy, key=0).tokens == ar.tokens


def test_on_round_gets_each_prompts_round_in_the_node_layout(pair):
    method = Traversal((2, 2), draws="distinct")
    seen = []
    res = decode(pair, PROMPTS, method, max_new_tokens=16, key=5, on_round=seen.append)
    assert len(seen) == sum(len(r.drafted) for r in res.rounds)
    by_run = {}
    for info in seen:
        assert info.p.shape[0] == info.q.shape[0] == info.drafts.shape[0] == info.law.end.shape[-1]
        assert float(info.law.end.sum()) == pytest.approx(1.0, abs=1e-12)
        by_run.setdefault(info.run, []).append(info)
    for run, rounds in by_run.items():
        depth = [info.accepted for info in rounds]
        np.testing.assert_array_equal(depth, res.rounds[run].accepted)


def _round_starts(rec, rounds) -> list[int]:
    """Where each round's output starts in a run: its accepted drafts, then the token after them if one was output
    (the last round may end with none: all accepted at the horizon, or cut at an EOS)."""
    starts, at = [], 0
    for accepted in rounds.accepted.tolist():
        starts.append(at)
        at += accepted
        if at < len(rec.kind) and rec.kind[at] != DRAFT:
            at += 1
    return starts


def _next_laws(model, pair, ids: list[list[int]], sampling) -> torch.Tensor:
    """Each sequence's next-token law ``(n, V)`` float64 by plain forward passes (no cache, no tree mask)."""
    out = []
    with torch.no_grad():
        for seq in ids:
            logits = model(torch.tensor([seq], device=pair.device)).logits[0, -1, : pair.vocab_size].float()
            out.append(sampling.probs(logits).double().cpu())
    return torch.stack(out)


def test_every_node_of_every_round_has_its_plain_laws_and_its_records_the_rounds_law(pair):
    """on_round over two batches (runs 0–3): each drafted node's draft and target laws equal plain forward passes over
    the prompt, the output before the round and the node's path (the draft's where it drafted children); the records
    along the accepted path give the refusal probability ``P(end = v | reached v)`` of the round's law at each node
    checked, and the round's drafted nodes, mean and variance of the accepted depth are that law's."""
    method = RRS("parents=0,0,1,1,3,3", draws="distinct")  # height 3: the last rounds are cut trees
    sampling = Sampling(1.0)
    seen = []
    res = decode(pair, PROMPTS, method, max_new_tokens=20, sampling=sampling, key=7, on_round=seen.append, batch_size=3)
    assert {info.run for info in seen} == {0, 1, 2, 3}
    checked = 0
    for run, prompt in enumerate(PROMPTS):
        infos = [info for info in seen if info.run == run]
        rec, rounds, out = res.records[run], res.rounds[run], res.tokens[run]
        assert len(infos) == len(rounds.accepted)
        context = pair.tokenizer.encode(prompt)
        for k, (info, start) in enumerate(zip(infos, _round_starts(rec, rounds))):
            drafts = info.drafts.tolist()
            tree = method.layout_tree(np.asarray(drafts))
            present = [j for j in range(tree.size + 1) if all(drafts[a] >= 0 for a in tree.ancestors[j] if a)]
            paths = [context + out[:start] + [drafts[a] for a in tree.ancestors[j] if a] for j in present]
            q = _next_laws(pair.target.model, pair, paths, sampling)
            assert (info.q[present].cpu() - q).abs().max() < 2e-4
            inner = [i for i, j in enumerate(present) if tree.depth[j] < tree.height]
            p = _next_laws(pair.draft.model, pair, [paths[i] for i in inner], sampling)
            assert (info.p[[present[i] for i in inner]].cpu() - p).abs().max() < 2e-4
            end = info.law.end[0].cpu()
            depth = torch.tensor(tree.depth, dtype=end.dtype)
            mean = float(end @ depth)
            assert rounds.expected_accepted[k] == pytest.approx(mean, abs=1e-12)
            assert rounds.var_accepted[k] == pytest.approx(float(end @ depth**2) - mean**2, abs=1e-12)
            assert rounds.drafted[k] == sum(x >= 0 for x in drafts[1:])
            reach = end @ torch.from_numpy(tree.above).T.to(end.dtype)  # P(the path reaches v)
            path = [0] + [a for a in tree.ancestors[info.row] if a]
            for s, v in enumerate(path[: len(rec.kind) - start]):
                if rec.kind[start + s] == DRAFT or tree.children[v]:  # checked: a draft, or a correction at v
                    assert rec.reject_prob[start + s] == pytest.approx(float(end[v] / reach[v]), abs=1e-12)
                    checked += 1
    assert checked > 40


def test_without_an_eos_token_every_token_is_drafted_on_and_fed(pair, monkeypatch):
    """A pair without an end-of-sequence token: tokens 0 and 1 are tokens like any other. Every node of every round
    is drafted — a node whose token is 0 or 1 gets its children — and a round ending in token 0 feeds it to both
    models (the next rounds' laws are the plain passes'). Prompts chosen so the tiny pair drafts and outputs them."""
    monkeypatch.setattr(type(pair), "eos_token_id", property(lambda self: None))
    sampling, seen = Sampling(1.0), []
    wide = RRS((8, 1), draws="distinct")
    # the draft proposes "!" (id 1) after the first prompt, the EOS token's id 0 after the second
    prompts = ["!!!!!!!!"] * 8 + ["The end."] * 8
    res = decode(pair, prompts, wide, max_new_tokens=6, sampling=sampling, key=7, on_round=seen.append)
    inner = []
    for info in seen:
        drafts = info.drafts.tolist()
        tree = wide.layout_tree(np.asarray(drafts))
        assert min(drafts[1:]) >= 0  # no node left out
        inner += [drafts[j] for j in range(1, tree.size + 1) if tree.children[j]]
    assert inner.count(0) > 0 and inner.count(1) > 0
    chain = decode(pair, ["The end."] * 16, RRS((2, 1)), max_new_tokens=6, sampling=sampling, key=7)
    after = 0
    for res_, prompts_ in ((res, prompts), (chain, ["The end."] * 16)):
        for prompt, out, rec in zip(prompts_, res_.tokens, res_.records):
            ids = pair.tokenizer.encode(prompt)
            logq = _plain_logprobs(pair.target.model, pair, ids, out, sampling)
            np.testing.assert_allclose(rec.target_logprob, logq, atol=2e-4)
            after += sum(a == 0 and k != DRAFT for a, k in zip(out[:-1], rec.kind[:-1]))
    assert after > 0  # a round's correction or bonus was token 0, and a round followed it


@pytest.mark.parametrize(
    "method",
    [pytest.param(m, marks=pytest.mark.slow) for m in [RRS((2, 2), draws="distinct"), Traversal((2, 1))]],
    ids=repr,
)
def test_first_tokens_follow_the_target_law(pair, method, agrees, record_property):
    """The first token of many runs of one prompt against the target's exact law: the G-test, and the directed check
    of tests/test_backends.py (the share in ``{q > p}``), which has power against the draft's tokens kept
    unverified; the second tokens by its second-token check (power against SD-style corrections drawn from q)."""
    sampling = Sampling(1.0)
    n = tb.N_LAW["sd", "t1"]
    res = decode(pair, [tb.PROMPT] * n, method, max_new_tokens=2, sampling=sampling, key=7)
    first = np.array([t[0] for t in res.tokens])
    q = tb._exact_first_token_law(pair, sampling)
    assert tb._gof_pvalue(first, q) > 1e-4
    p = tb._exact_first_token_law(pair, sampling, model=pair.draft.model)
    inside = q > p
    qa, pa = float(q[inside].sum()), float(p[inside].sum())
    agrees(
        float(inside[first].mean()),
        qa,
        f"{method!r} real-model first tokens in {{q > p}}",
        se=math.sqrt(qa * (1 - qa) / n),
        wrong=pa,
        wrong_se=math.sqrt(pa * (1 - pa) / n),
        alternative=f"{method!r} first tokens in {{q > p}} (N = {n:,}): the draft's tokens kept unverified",
    )
    tb.second_token_law_agrees(
        agrees, record_property, pair, sampling, res.tokens, "sd", "corrections drawn from q", f"{method!r}"
    )


def test_compare_pairs_the_tree_rounds_with_their_theory(pair, agrees):
    from speculab.compare import compare

    comp = compare(pair, Traversal((2, 2), draws="distinct"), runs_per_prompt=2, max_new_tokens=16, key=3)
    quantities = [row.quantity for row in comp.rows]
    assert any(q.startswith("tokens per target call: this tree − SD(K=6)") for q in quantities)
    assert any(q.startswith("accepted drafts per round (paired") for q in quantities)
    tb._compare_rows_agree(agrees, comp, "Traversal((2, 2), distinct) on the tiny pair")


def test_a_pair_without_tree_attention_is_refused(pair):
    ngram = load_pair(ngram_draft(pair.tokenizer, default_prompts(), n=2), "tiny-target", device=tb.model_device())
    with pytest.raises(ValueError, match="needs Hugging Face draft and target models"):
        decode(ngram, PROMPTS, RRS((2,)), max_new_tokens=4, key=0)
    assert Z_BOUND == 5.0


def test_a_model_that_flattens_the_tree_mask_is_refused(pair, monkeypatch):
    """Older transformers flatten a 4-D attention mask, or raise on one: a probe of two tokens that may not see each
    other tells, and the pair is refused naming transformers rather than decoded with the wrong attention. The probe
    is remembered per model, for as long as the model lives (found by review: it was kept by ``id``)."""
    import gc
    from types import SimpleNamespace

    import speculab.backends.tree_decode as td

    class Flattening(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        @property
        def dtype(self):
            return self.inner.dtype

        def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
            return self.inner(input_ids=input_ids, position_ids=position_ids)  # the tree mask dropped: causal

    class Refusing(Flattening):
        def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
            if attention_mask is not None and attention_mask.dim() == 4:
                raise TypeError("a 2-D attention mask was expected")  # as some models' mask preparation does
            return super().forward(input_ids, attention_mask, position_ids)

    wrapped = SimpleNamespace(model=Flattening(pair.target.model), device=pair.device)
    refusing = SimpleNamespace(model=Refusing(pair.target.model), device=pair.device)
    assert td._takes_tree_masks(pair.target) and not td._takes_tree_masks(wrapped)
    assert not td._takes_tree_masks(refusing)  # a model that raises on the probe's mask takes none
    held = len(td._PROBED)
    del wrapped, refusing
    gc.collect()
    assert len(td._PROBED) == held - 2  # a verdict lives as long as its model (an id is reused once it is freed)
    monkeypatch.setattr(td, "_takes_tree_masks", lambda adapter: False)
    with pytest.raises(ValueError, match="needs a model that reads a 4-D attention mask.*upgrade transformers"):
        decode(pair, PROMPTS, RRS((2,)), max_new_tokens=4, key=0)


def test_compare_refuses_to_price_tree_rounds_with_the_chain_latency_model(pair):
    from speculab.compare import compare

    with pytest.raises(ValueError, match="does not price"):
        compare(pair, RRS((2,)), runs_per_prompt=1, max_new_tokens=4, key=0, speed=True)
