"""Training data for heads on the draft's hidden states — SPRINTER's ([SPR] §3.2) and SpecDec++'s token mixing
([SDpp] §4) — against the models' own probabilities and hidden states."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import binomial_se, model_device  # noqa: E402
from speculab.backends import load_pair  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.backends.head_data import FEATURES, SOURCES, sprinter_examples  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny", device=model_device())


def test_sprinter_examples_are_the_models_own_probabilities(pair):
    texts = default_prompts() * 4  # short texts: spans of prefix + completion tokens
    ex = sprinter_examples(pair, [" ".join(texts)], n_prefixes=8, prefix_tokens=6, completion_tokens=5, key=2)
    assert ex.p.shape == (40,) and ex.token_features.shape == (40, pair.draft.model.config.n_embd)
    assert sorted(np.bincount(ex.source[::5])) == [2, 2, 2, 2]  # equal shares of the four sources
    again = sprinter_examples(pair, [" ".join(texts)], n_prefixes=8, prefix_tokens=6, completion_tokens=5, key=2)
    np.testing.assert_array_equal(ex.p, again.p)  # the same key, the same examples
    # every example against one fresh forward pass (no cache) of each model over its prefix and completion
    with torch.no_grad():
        ids = torch.as_tensor(ex.ids)
        out = pair.draft.model(ids, output_hidden_states=True)
        p_all = torch.softmax(out.logits[..., : pair.vocab_size].double(), -1)
        q_all = torch.softmax(pair.target.model(ids).logits[..., : pair.vocab_size].double(), -1)
        hidden = out.hidden_states[-1]
    P = 6
    for row in range(40):
        i, s = ex.prefix[row], ex.step[row]
        x = ex.ids[i, P + s]
        assert ex.p[row] == pytest.approx(float(p_all[i, P + s - 1, x]), rel=1e-5)
        assert ex.q[row] == pytest.approx(float(q_all[i, P + s - 1, x]), rel=1e-5)
        np.testing.assert_allclose(ex.token_features[row], hidden[i, P + s], atol=1e-4)
        np.testing.assert_allclose(ex.previous_features[row], hidden[i, P + s - 1], atol=1e-4)
    text = " ".join(texts)
    for i in np.flatnonzero(ex.source[::5] == SOURCES.index("text")):  # the text's own continuation
        assert pair.tokenizer.decode(ex.ids[i]) in text
    for which in FEATURES:
        assert ex.features(which).shape[0] == 40
    assert ex.features("token+logp")[:, -1].numpy() == pytest.approx(np.log(ex.p), rel=1e-6)
    with pytest.raises(ValueError, match="which must be one of"):
        ex.features("logits")
    lab = ex.labels(1.2)
    np.testing.assert_array_equal(lab, (ex.p / ex.q <= 1.2).astype(float))
    with pytest.raises(ValueError, match="lam must"):
        ex.labels(0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(texts=[]), "non-empty list of strings"),
        (dict(texts=[1, 2]), "non-empty list of strings"),
        (dict(n_prefixes=0), "n_prefixes"),
        (dict(prefix_tokens=600, completion_tokens=600), "context"),
        (dict(texts=["too short"]), "no document has"),
    ],
)
def test_sprinter_examples_refuse_bad_arguments(pair, kwargs, match):
    args = {"texts": [" ".join(default_prompts())], **kwargs}
    with pytest.raises(ValueError, match=match):
        sprinter_examples(pair, args.pop("texts"), **args)


def test_sprinter_examples_need_hugging_face_models(pair):
    from speculab.backends import NGramModel

    ngram = load_pair(NGramModel(np.arange(100) % 7, 2, pair.vocab_size), "tiny-target", device=model_device())
    with pytest.raises(ValueError, match="Hugging Face models"):
        sprinter_examples(ngram, ["some text"], n_prefixes=2)


def test_specdecpp_examples_mix_the_target_in_and_weigh_the_drafts_tokens_only(pair, agrees):
    from speculab.backends.head_data import specdecpp_examples, specdecpp_targets

    text = " ".join(default_prompts() * 4)
    # 160 prefixes (not 64): 1,280 tokens, so that the draft's share is seen 10 % off (0.935 for 0.85)
    ex = specdecpp_examples(
        pair, [text], target_share=0.15, n_prefixes=160, prefix_tokens=6, completion_tokens=8, key=4
    )
    n = ex.p.size
    share = ex.from_draft.mean()
    agrees(share, 0.85, "share of the draft's tokens", se=binomial_se(0.85, n))  # each token from the draft w.p. 0.85
    assert np.all(ex.source == SOURCES.index("mixed"))
    np.testing.assert_allclose(ex.acceptance(), np.minimum(1, ex.q / ex.p), rtol=1e-12)
    target, weight = specdecpp_targets(ex, w_rej=6.0)
    assert np.all(weight[~ex.from_draft] == 0) and np.all(weight[ex.from_draft] > 0)
    # the weighted BCE with these targets is [SDpp]'s two weighted terms, for any prediction a
    a = np.random.default_rng(0).uniform(0.01, 0.99, n)
    y = ex.acceptance()
    ours = weight * -(target * np.log(a) + (1 - target) * np.log(1 - a))
    paper = np.where(ex.from_draft, -(1.0 * y * np.log(a) + 6.0 * (1 - y) * np.log(1 - a)), 0.0)
    np.testing.assert_allclose(ours, paper, rtol=1e-12, atol=1e-15)
    for bad, match in ((dict(w_rej=0), "w_rej"), (dict(w_rej=1, w_acc=float("nan")), "w_acc")):
        with pytest.raises(ValueError, match=match):
            specdecpp_targets(ex, **bad)
    with pytest.raises(ValueError, match="target_share"):
        specdecpp_examples(pair, [text], target_share=1.0)
    with pytest.raises(ValueError, match="sources must be"):
        sprinter_examples(pair, [text], sources=("books",))
    with pytest.raises(ValueError, match="cannot be given"):
        specdecpp_examples(pair, [text], draft_share=0.3)
