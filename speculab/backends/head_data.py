"""Training data for heads on a draft's hidden states, from a real draft/target pair: the SPRINTER verifier
([SPR] §3.2) and the SpecDec++ acceptance head ([SDpp] §4.1, token mixing).

Convention: ``p`` = draft, ``q`` = target ([SPR] writes them the other way round).

Prefixes are spans of original text. Each gets a completion of ``completion_tokens``
tokens from one of four sources, in equal shares as [SPR] §3.2 asks ("an original
prefix, … completions only from the draft model, … only from the target model, … from
both"): the text's own continuation, draft samples, target samples, or a fair coin per
token between the two. Every completion token ``x`` becomes one example, with

* the draft's last hidden state *at* ``x`` (after feeding it: what a verifier can read for
  free, since the draft feeds ``x`` to draft the next token) and at the token before it
  ([SPR]'s "last embedding of the previous token", which does not see ``x``; [SPR] also
  allows "the probability distribution", so ``log p(x)`` can be appended);
* ``p(x)`` and ``q(x)`` under the same sampling warp, exactly, from both models' logits.

[SDpp]'s data is :func:`specdecpp_examples`: every completion mixes the two models token by
token, a share ``r`` (15 % in [SDpp]) of the tokens from the target, and the head learns
``min(1, q(x)/p(x))`` on the draft's tokens only (:meth:`Examples.acceptance`, with the
weights of :func:`specdecpp_targets`). This deviates from [SDpp] §4.4, which draws a whole
target response ``X`` first and then each draft candidate ``Y_i`` and its label given
``X_{<i}``, mixing ``X`` and ``Y`` afterwards; here each token and its label are drawn given
the mixed prefix itself — the context the head reads — and a target token is a one-token
sample from ``q`` there.

A SPRINTER label for a training threshold ``λ`` is ``p(x)/q(x) ≤ λ`` (:meth:`Examples.labels`;
``λ = 1``: SD would keep ``x`` with probability 1; [SPR] §3.2 raises λ to accept more and
lowers it to accept fewer, so any ``λ > 0`` is taken, though SPEC §1 and the paper's
experiments use ``λ ≥ 1``). The feature ``"token+logp"`` is ``-inf`` where ``p(x) = 0``
(a text token outside a top-k/top-p draft's support), which training refuses.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import torch

from speculab import kernels
from speculab._validate import as_positive_int, as_torch_generator
from speculab.backends.models import HFModel, attention_kernels, cache_argument
from speculab.backends.pair import check_pair
from speculab.backends.warp import Sampling

__all__ = ["SOURCES", "FEATURES", "Examples", "sprinter_examples", "specdecpp_examples", "specdecpp_targets"]

#: Where a completion's tokens come from, by category index.
SOURCES = ("text", "draft", "target", "mixed")
#: What a verifier may read (:meth:`Examples.features`).
FEATURES = ("previous", "token", "token+logp")


@dataclass(frozen=True)
class Examples:
    """One row per completion token.

    Attributes:
      token_features: ``(n, d)`` the draft's last hidden state after feeding the token.
      previous_features: ``(n, d)`` … after feeding the token before it.
      p, q: ``(n,)`` the token's probability under the draft and the target (same warp).
      source: ``(n,)`` index into :data:`SOURCES` of the completion the token belongs to.
      prefix: ``(n,)`` which prefix (split train/test by it: tokens of one completion are correlated).
      step: ``(n,)`` the token's place in its completion (0-based).
      ids: ``(n_prefixes, prefix_tokens + completion_tokens)`` each prefix and its completion.
      from_draft: ``(n,)`` whether the token was sampled from the draft.
    """

    token_features: torch.Tensor
    previous_features: torch.Tensor
    p: np.ndarray
    q: np.ndarray
    source: np.ndarray
    prefix: np.ndarray
    step: np.ndarray
    ids: np.ndarray
    from_draft: np.ndarray

    @property
    def ratio(self) -> np.ndarray:
        """``p(x)/q(x)`` (``inf`` where ``q(x) = 0 < p(x)``; ``0`` where ``p(x) = 0``)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.p > 0, self.p / self.q, 0.0)

    def acceptance(self) -> np.ndarray:
        """SD's acceptance of the token, ``min(1, q(x)/p(x))`` ([SDpp]'s soft label; 1 where ``p(x) = 0``)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.p > self.q, self.q / np.where(self.p > 0, self.p, 1.0), 1.0)

    def labels(self, lam: float) -> np.ndarray:
        """``1`` where the token is acceptable at training threshold ``λ``: ``p(x)/q(x) ≤ λ``."""
        if isinstance(lam, bool) or not isinstance(lam, numbers.Real) or not (np.isfinite(lam) and lam > 0):
            raise ValueError(f"lam must be a finite number > 0; got {lam!r}")
        return (self.ratio <= lam).astype(np.float64)

    def features(self, which: str) -> torch.Tensor:
        """A verifier's input, one of :data:`FEATURES`: the hidden state at the token, at the token before it
        ([SPR]'s), or at the token with the draft's own ``log p(x)`` appended (both known when ``x`` is drafted)."""
        if which not in FEATURES:
            raise ValueError(f"which must be one of {FEATURES}; got {which!r}")
        if which == "previous":
            return self.previous_features
        if which == "token":
            return self.token_features
        log_p = torch.as_tensor(np.log(self.p), dtype=torch.float32, device="cpu")
        return torch.cat([self.token_features, log_p[:, None]], 1)

    def subset(self, mask: np.ndarray) -> "Examples":
        m = np.asarray(mask, dtype=bool)
        t = torch.from_numpy(m)
        return Examples(
            self.token_features[t],
            self.previous_features[t],
            self.p[m],
            self.q[m],
            self.source[m],
            self.prefix[m],
            self.step[m],
            self.ids,
            self.from_draft[m],
        )


def _spans(docs: list[list[int]], n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` random spans of ``length`` tokens from documents long enough to hold one, ``(n, length)``."""
    long = [d for d in docs if len(d) >= length]
    if not long:
        raise ValueError(f"no document has {length} tokens (prefix + completion); give longer texts")
    out = np.empty((n, length), dtype=np.int64)
    for i, j in enumerate(rng.integers(0, len(long), n)):
        start = rng.integers(0, len(long[j]) - length + 1)
        out[i] = long[j][start : start + length]
    return out


@torch.inference_mode()
def _forward(model, ids, cache, hidden: bool):
    with attention_kernels():
        out = model(input_ids=ids, **cache_argument(model, cache), use_cache=True, output_hidden_states=hidden)
    return out.logits[:, -1], (out.hidden_states[-1][:, -1].float() if hidden else None)


def sprinter_examples(
    pair,
    texts: list[str],
    *,
    n_prefixes: int = 512,
    prefix_tokens: int = 16,
    completion_tokens: int = 16,
    sampling: Sampling = Sampling(1.0),
    key=0,
    batch_size: int = 128,
    sources: tuple = SOURCES,
    draft_share: float = 0.5,
) -> Examples:
    """Examples for a SPRINTER verifier from ``texts`` (module docstring), ``n_prefixes · completion_tokens`` rows.

    The ``sources`` (names from :data:`SOURCES`) take turns over the prefixes (equal shares); a
    ``"mixed"`` completion takes each token from the draft with probability ``draft_share``.
    ``key`` (an int seed or a ``torch.Generator``) draws the spans, the samples and the coins.
    Needs a Hugging Face draft (its hidden states are the features).
    """
    from transformers import DynamicCache

    check_pair(pair)
    if not isinstance(pair.draft, HFModel) or not isinstance(pair.target, HFModel):
        raise ValueError("sprinter_examples needs Hugging Face models for draft and target (hidden states)")
    n_prefixes = as_positive_int(n_prefixes, "n_prefixes")
    P, C = as_positive_int(prefix_tokens, "prefix_tokens"), as_positive_int(completion_tokens, "completion_tokens")
    batch_size = as_positive_int(batch_size, "batch_size")
    if not isinstance(sampling, Sampling) or sampling.greedy:
        raise ValueError("sampling must be a Sampling with temperature > 0 (labels compare probabilities)")
    if pair.max_length and P + C > pair.max_length:
        raise ValueError(
            f"prefix_tokens + completion_tokens = {P + C} exceeds the models' context of {pair.max_length}"
        )
    if not sources or any(src not in SOURCES for src in sources):
        raise ValueError(f"sources must be a non-empty sequence of names from {SOURCES}; got {sources!r}")
    if isinstance(draft_share, bool) or not isinstance(draft_share, numbers.Real) or not 0 <= draft_share <= 1:
        raise ValueError(f"draft_share must be a number in [0, 1]; got {draft_share!r}")
    g = as_torch_generator(key, "cpu")  # uniforms drawn on the host, then moved: the same on every device
    rng = np.random.default_rng(int(torch.randint(0, 2**62, (), generator=g, device="cpu")))
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a non-empty list of strings (the original text prefixes are taken from)")
    docs = pair.tokenizer(texts)["input_ids"]
    spans = _spans(docs, n_prefixes, P + C, rng)
    source = np.resize([SOURCES.index(src) for src in sources], n_prefixes)
    rng.shuffle(source)
    dev = pair.device
    cols = {k: [] for k in ("tok", "prev", "p", "q", "ids", "draft")}
    for start in range(0, n_prefixes, batch_size):
        rows = slice(start, min(start + batch_size, n_prefixes))
        span = torch.as_tensor(spans[rows], device=dev)
        src = torch.as_tensor(source[rows], device=dev)
        B = span.shape[0]
        dc, tc = DynamicCache(), DynamicCache()
        d_logits, prev = _forward(pair.draft.model, span[:, :P], dc, True)
        t_logits, _ = _forward(pair.target.model, span[:, :P], tc, False)
        toks, prevs, ps, qs, xs, drafted = [], [], [], [], [], []
        for i in range(C):
            p = sampling.probs(d_logits[:, : pair.vocab_size].double())
            q = sampling.probs(t_logits[:, : pair.vocab_size].double())
            u = torch.rand(3, B, generator=g, dtype=torch.float64, device="cpu").to(dev)
            from_draft = kernels.sample_index(p, u[0])
            from_target = kernels.sample_index(q, u[1])
            use_draft = (src == 1) | ((src == 3) & (u[2] < draft_share))
            x = torch.where(src == 0, span[:, P + i], torch.where(use_draft, from_draft, from_target))
            drafted.append(use_draft & (src != 0))
            ps.append(p.gather(1, x[:, None])[:, 0])
            qs.append(q.gather(1, x[:, None])[:, 0])
            prevs.append(prev)
            d_logits, prev = _forward(pair.draft.model, x[:, None], dc, True)
            t_logits, _ = _forward(pair.target.model, x[:, None], tc, False)
            toks.append(prev)
            xs.append(x)
        for k, v in (("tok", toks), ("prev", prevs), ("p", ps), ("q", qs), ("draft", drafted)):
            cols[k].append(torch.stack(v, 1).reshape(B * C, *v[0].shape[1:]).cpu())
        cols["ids"].append(torch.cat([span[:, :P], torch.stack(xs, 1)], 1).cpu())
    n = n_prefixes * C
    return Examples(
        torch.cat(cols["tok"]),
        torch.cat(cols["prev"]),
        torch.cat(cols["p"]).numpy(),
        torch.cat(cols["q"]).numpy(),
        np.repeat(source, C),
        np.repeat(np.arange(n_prefixes), C),
        np.tile(np.arange(C), n_prefixes)[:n],
        torch.cat(cols["ids"]).numpy(),
        torch.cat(cols["draft"]).numpy(),
    )


def specdecpp_examples(pair, texts: list[str], *, target_share: float = 0.15, **kwargs) -> Examples:
    """[SDpp] §4.1's data: completions mixing the models token by token, ``target_share`` of the tokens from the
    target (*token mixing*: the head sees prefixes the target helped write, as in decoding); other arguments
    as :func:`sprinter_examples`."""
    check_pair(pair)
    if isinstance(target_share, bool) or not isinstance(target_share, numbers.Real) or not 0 <= target_share < 1:
        raise ValueError(f"target_share must be a number in [0, 1); got {target_share!r}")
    fixed = {"sources", "draft_share"} & set(kwargs)
    if fixed:
        raise ValueError(f"specdecpp_examples mixes every completion by target_share; {sorted(fixed)} cannot be given")
    return sprinter_examples(pair, texts, sources=("mixed",), draft_share=1.0 - target_share, **kwargs)


def specdecpp_targets(examples: Examples, w_rej: float, w_acc: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Targets and weights for :func:`speculab.backends.heads.train_head` giving [SDpp]'s weighted BCE.

    [SDpp] weighs the soft label ``y = min(1, q/p)``'s two terms, ``w_acc · y · (−log a) + w_rej · (1 − y) ·
    (−log(1 − a))``, and counts only the draft's tokens. That equals a BCE with target
    ``w_acc y / (w_acc y + w_rej (1 − y))`` and weight ``w_acc y + w_rej (1 − y)`` (0 for the target's tokens).
    """
    for name, value in (("w_rej", w_rej), ("w_acc", w_acc)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    y = examples.acceptance()
    weight = w_acc * y + w_rej * (1.0 - y)
    return w_acc * y / weight, np.where(examples.from_draft, weight, 0.0)
