"""Language-model adapters with rollback-able caches: Hugging Face causal LMs and n-gram drafts.

An adapter turns token ids into next-token logits over the shared vocabulary and
keeps a per-sequence state that can be extended, cropped (rollback after a
rejection), repeated across rows (batch drafts) and reduced to one row.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["LMState", "HFModel", "HistoryModel", "NGramModel", "PromptLookupModel"]


def cache_argument(model, cache) -> dict:
    """The keyword a Hugging Face model's ``forward`` takes its KV cache by: ``cache`` from transformers 5.24
    (``past_key_values`` deprecated there, to be removed in 5.40), ``past_key_values`` before."""
    return {_cache_keyword(type(model)): cache}


@functools.cache
def _cache_keyword(model_type: type) -> str:
    return "cache" if "cache" in inspect.signature(model_type.forward).parameters else "past_key_values"


def attention_kernels():
    """A context in which a forward pass may use every scaled-dot-product attention kernel but cuDNN's.

    torch may send half-precision attention on a GPU to cuDNN first, and cuDNN builds an execution plan for every
    new shape: decoding, whose key length grows by a few tokens a round, would pay one plan per round. Flash and
    memory-efficient attention need no plan. Elsewhere (the CPU, float32) this changes nothing but the flags it
    restores on exit."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - torch before 2.3
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _log32(prob: torch.Tensor) -> torch.Tensor:
    """``log prob`` as float32 (``-inf`` at 0), taken in numpy: torch's elementwise log of a few thousand float64
    entries can be dispatched to its thread pool, which costs milliseconds when the other cores are busy."""
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(prob.numpy()).astype(np.float32))


@dataclass
class LMState:
    """Per-sequence state: how many tokens the model has processed, plus its cache."""

    length: int = 0
    cache: Any = None
    rows: int = 1
    history: Any = field(default_factory=list)  # processed token ids (tensor rows, or lists for n-grams)


class HFModel:
    """A Hugging Face causal LM behind the adapter interface, with a KV cache.

    Args:
      model: an ``AutoModelForCausalLM`` instance (put in eval mode here).
      vocab_size: the shared vocabulary size; logits are cropped to it (padding rows dropped).
      use_cache: keep a KV cache (``False`` re-runs the whole prefix each call — for tests).
    """

    def __init__(self, model, vocab_size: int, *, use_cache: bool = True):
        self.model = model.eval()
        self.vocab_size = int(vocab_size)
        self.use_cache = use_cache
        self.max_length = getattr(model.config, "n_positions", None) or getattr(
            model.config, "max_position_embeddings", None
        )
        self.device = next(model.parameters()).device
        self.forward_calls = 0

    def start(self) -> LMState:
        return LMState(history=None)

    @torch.inference_mode()
    def extend(self, state: LMState, ids: torch.Tensor, *, hidden: bool = False, last: bool = False):
        """Feed ``ids`` ``(rows, n)`` after the ``state.length`` tokens already processed.

        Returns float32 logits ``(rows, n, V)`` for the positions after each fed token (``last=True``: after the
        last one only, ``(rows, 1, V)``), and with ``hidden=True`` also the last layer's hidden states there
        ``(rows, n, d)`` (what a learned head reads). Without a cache the whole history is re-run (slow, for
        checking the cache). The forward pass runs under ``torch.inference_mode``: the tensors returned are
        inference tensors (read them, or ``.clone()`` them before writing in place).
        """
        from transformers import DynamicCache

        self.forward_calls += 1
        if state.history is None or state.length == 0:
            state.history = ids
        else:
            state.history = torch.cat([state.history.expand(ids.size(0), -1), ids], 1)
        with attention_kernels():
            if self.use_cache:
                if state.cache is None:
                    state.cache = DynamicCache()
                out = self.model(
                    input_ids=ids,
                    **cache_argument(self.model, state.cache),
                    use_cache=True,
                    output_hidden_states=hidden,
                )
            else:
                out = self.model(input_ids=state.history, use_cache=False, output_hidden_states=hidden)
        n = ids.size(1)
        state.length += n
        state.rows = ids.size(0)
        n = 1 if last else n
        logits = out.logits[:, -n:, : self.vocab_size].float()
        return (logits, out.hidden_states[-1][:, -n:].float()) if hidden else logits

    def crop(self, state: LMState, length: int) -> None:
        """Forget every processed token after the first ``length`` (rollback)."""
        if length < state.length:
            if self.use_cache and state.cache is not None:
                state.cache.crop(length - state.length)  # negative: remove that many (all versions accept it)
            state.history = state.history[:, :length]
            state.length = length

    def repeat(self, state: LMState, rows: int) -> None:
        """Copy a one-row state to ``rows`` identical rows (batch drafts)."""
        if state.rows != 1:
            raise ValueError(f"can only repeat a one-row state; this one has {state.rows} rows")
        if rows > 1 and state.length > 0:
            if self.use_cache and state.cache is not None:
                state.cache.batch_repeat_interleave(rows)
            state.history = state.history.expand(rows, -1)
        state.rows = rows

    def select(self, state: LMState, row: int) -> None:
        """Keep only ``row`` of a multi-row state."""
        if state.rows > 1:
            if self.use_cache and state.cache is not None:
                state.cache.batch_select_indices(torch.tensor([row], device=self.device))
            state.history = state.history[row : row + 1]
            state.rows = 1


class HistoryModel:
    """A draft whose next-token law is a function of the tokens so far, with no cache (n-gram, prompt lookup).

    Subclasses implement :meth:`probs`; the adapter interface (per-row histories that
    can be extended, cropped, repeated and reduced to one row) follows. Logits are ``log p``.
    """

    max_length = None

    def __init__(self, vocab_size: int):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral) or vocab_size < 1:
            raise ValueError(f"vocab_size must be an integer >= 1; got {vocab_size!r}")
        self.vocab_size = int(vocab_size)
        self.device = torch.device("cpu")
        self.forward_calls = 0

    def probs(self, history: tuple) -> torch.Tensor:
        """``p(· | history)``: a float64 ``(V,)`` tensor summing to 1."""
        raise NotImplementedError

    def logits(self, history: tuple) -> torch.Tensor:
        """``log p(· | history)`` as float32 ``(V,)``: what :meth:`extend` returns per fed token."""
        return _log32(self.probs(history))

    def clear_cache(self) -> None:
        """Forget what the draft memoises (laws are pure functions of the history: only speed changes)."""

    def proposes(self, history: tuple) -> bool:
        """Whether the draft proposes a token after ``history``; if not, the round's block ends there (as at a
        drafted EOS) — a stopping decision that sees only the tokens, so every method stays exact."""
        return True

    def start(self) -> LMState:
        return LMState(history=[[]])

    def extend(self, state: LMState, ids: torch.Tensor, *, last: bool = False) -> torch.Tensor:
        """Feed ``ids`` ``(rows, n)``; returns log-probabilities ``(rows, n, V)`` (the logits; ``last=True``: only
        after the last token, ``(rows, 1, V)``, the others not computed)."""
        self.forward_calls += 1
        rows, n = ids.shape
        if len(state.history) == 1 and rows > 1:
            state.history = [list(state.history[0]) for _ in range(rows)]
        out = []
        for r in range(rows):
            hist = state.history[r]
            for t in ids[r].tolist():
                hist.append(t)
                if not last:
                    out.append(self.logits(tuple(hist)))
            if last:
                out.append(self.logits(tuple(hist)))
        state.length += n
        state.rows = rows
        return torch.stack(out).view(rows, 1 if last else n, self.vocab_size).to(ids.device)

    def crop(self, state: LMState, length: int) -> None:
        for hist in state.history:
            del hist[length:]
        state.length = min(state.length, length)

    def repeat(self, state: LMState, rows: int) -> None:
        state.history = [list(state.history[0]) for _ in range(rows)]
        state.rows = rows

    def select(self, state: LMState, row: int) -> None:
        state.history = [state.history[row]]
        state.rows = 1


class NGramModel(HistoryModel):
    """A count-based n-gram draft model ([Yin] Remark 1: a cost-free draft).

    ``P(x | last n−1 tokens)`` from counts with interpolated add-``alpha``
    smoothing that backs off to shorter contexts:
    ``P_k(x) = (c_k(x) + alpha · V · P_{k−1}(x)) / (c_k + alpha · V)``, ``P_0`` uniform.
    Logits are ``log P``. Counts are kept as sorted arrays of ``(context, token)`` codes
    (numpy), so millions of training tokens cost seconds and a few tens of megabytes.
    """

    def __init__(self, token_ids, n: int, vocab_size: int, *, alpha: float = 0.1):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"n must be an integer >= 1; got {n!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < alpha < math.inf:
            raise ValueError(f"alpha must be a finite number > 0; got {alpha!r}")
        if vocab_size**n >= 1 << 62:
            raise ValueError(f"n = {n} over {vocab_size} tokens overflows the 64-bit codes of (context, token)")
        super().__init__(vocab_size)
        self.n, self.alpha = int(n), float(alpha)
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(
                f"token_ids must be one sequence of integer token ids; got an array of shape {ids.shape} "
                f"and dtype {ids.dtype}"
            )
        ids = ids.astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise ValueError(f"token ids must lie in [0, {vocab_size}); got range [{ids.min()}, {ids.max()}]")
        self.tables = []  # per context length k: sorted unique codes context·V + token, and their counts
        for k in range(n):
            code = np.zeros(max(ids.size - k, 0), dtype=np.int64)
            for j in range(k + 1):  # the k context tokens, then the token
                code = code * vocab_size + ids[j : ids.size - k + j]
            self.tables.append(np.unique(code, return_counts=True))
        self._memo: dict[tuple, torch.Tensor] = {}  # context -> p, bounded by MEMO
        self._log_memo: dict[tuple, torch.Tensor] = {}  # context -> float32 log p (what decoding reads)

    def _counts(self, k: int, context: tuple):
        """Tokens seen after ``context`` (length ``k``) and how often, or ``None`` if never."""
        codes, counts = self.tables[k]
        base = 0
        for t in context:
            base = base * self.vocab_size + t
        lo, hi = np.searchsorted(codes, [base * self.vocab_size, (base + 1) * self.vocab_size])
        return None if lo == hi else (codes[lo:hi] - base * self.vocab_size, counts[lo:hi])

    #: Contexts whose law is remembered (each memo is cleared beyond this many: 64 MB of float64 laws at V = 2048).
    MEMO = 1 << 12

    def clear_cache(self) -> None:
        self._memo.clear()
        self._log_memo.clear()

    def logits(self, history: tuple) -> torch.Tensor:
        context = history[max(0, len(history) - (self.n - 1)) :]
        out = self._log_memo.get(context)
        if out is None:
            if len(self._log_memo) >= self.MEMO:
                self._log_memo.clear()  # a pure function of the context: recomputed alike
            out = self._log_memo[context] = _log32(self.probs(context))
        return out

    def probs(self, history: tuple) -> torch.Tensor:
        context = history[max(0, len(history) - (self.n - 1)) :]
        out = self._memo.get(context)
        if out is None:
            out = self._law(context)
            if len(self._memo) >= self.MEMO:
                self._memo.clear()
            self._memo[context] = out
        return out

    def _law(self, context: tuple) -> torch.Tensor:
        """``P_k`` for a context of length ``k``: ``P_{k−1}`` of its suffix (memoised in :meth:`probs` — the short
        contexts recur, so a new context costs one update over ``V``), updated by the context's counts; the
        suffix's law where the context was never seen (nor then is any longer one)."""
        V = self.vocab_size
        seen = self._counts(len(context), context)
        if context:
            lower = self.probs(context[1:])
            if seen is None:
                return lower
            prob = lower.numpy()
        else:
            prob = np.full(V, 1.0 / V)
            if seen is None:
                return torch.from_numpy(prob)
        tokens, counts = seen
        norm = counts.sum() + self.alpha * V  # (c + alpha V prob) / norm
        prob = prob * (self.alpha * V / norm)  # a new array: the suffix's memoised law is left as it is
        prob[tokens] += counts / norm
        return torch.from_numpy(prob)


class PromptLookupModel(HistoryModel):
    """A prompt-lookup draft: it copies the continuation of an earlier occurrence of the sequence's last n-gram.

    For ``n`` from ``max_ngram`` down to 1, the last ``n`` tokens of the history (prompt and
    output so far) are searched for earlier in the history, and the draft proposes, with
    probability 1, the token that followed their earliest occurrence — as Hugging Face's
    ``prompt_lookup_num_tokens`` with ``max_matching_ngram_size = max_ngram`` does. Like it,
    the draft then keeps copying: while the last token equals the one copied, the next
    proposal is the token after it in the source (a block copied from the match). Both
    rules read only the history, so ``p`` is known exactly at every step and every theorem
    applies, the acceptance in SD being ``q(proposed token)``. (Hugging Face looks up again
    at each round's start; here a copy also continues across rounds while it keeps
    matching.) Without a match the law is ``fallback``'s; without a match and without a
    ``fallback`` the draft proposes nothing (:meth:`proposes`): the round's block ends
    there, and a round with no drafts is one target step, as Hugging Face does.
    """

    #: Histories whose copy source is remembered (cleared beyond this many).
    MEMO = 1 << 15

    def __init__(self, vocab_size: int, max_ngram: int = 2, *, fallback: HistoryModel | None = None):
        if isinstance(max_ngram, bool) or not isinstance(max_ngram, numbers.Integral) or max_ngram < 1:
            raise ValueError(f"max_ngram must be an integer >= 1; got {max_ngram!r}")
        if fallback is not None and (not isinstance(fallback, HistoryModel) or fallback.vocab_size != vocab_size):
            raise ValueError(
                f"fallback must be a HistoryModel over the same {vocab_size} tokens (e.g. an NGramModel); "
                f"got {fallback!r}"
            )
        super().__init__(vocab_size)
        self.max_ngram, self.fallback = int(max_ngram), fallback
        self._source: dict[tuple, int | None] = {}

    def source(self, history: tuple) -> int | None:
        """The index in ``history`` of the token proposed after it, or ``None`` (no match).

        The copy goes on from the previous proposal's source when the last token is the one it
        proposed; otherwise the earliest earlier occurrence of the longest matching suffix.
        """
        h = tuple(history)
        if h in self._source:
            return self._source[h]
        if len(self._source) >= self.MEMO:
            self._source.clear()  # a pure function of the history: recomputed alike
        k = len(h) - 1  # the longest prefix already known (a decoding step adds one token to the last history)
        while k > 0 and h[:k] not in self._source:
            k -= 1
        found = self._source[h[:k]] if k > 0 else None
        for m in range(k + 1, len(h) + 1):  # the source after each longer prefix, from the previous one
            found = self._next_source(h[:m], found)
            self._source[h[:m]] = found
        return found

    def _next_source(self, history: tuple, previous: int | None) -> int | None:
        if previous is not None and history[previous] == history[-1]:
            return previous + 1  # continue the copy: the source's next token (earlier than the end)
        for n in range(min(self.max_ngram, len(history) - 1), 0, -1):
            suffix = history[-n:]
            for start in range(len(history) - n):  # earliest first; the suffix's own place excluded
                if history[start : start + n] == suffix:
                    return start + n
        return None

    def proposal(self, history: tuple) -> int | None:
        """The token proposed after ``history``, or ``None`` when no suffix of it occurs earlier."""
        j = self.source(tuple(history))
        return None if j is None else history[j]

    def proposes(self, history: tuple) -> bool:
        return self.fallback is not None or self.proposal(history) is not None

    def clear_cache(self) -> None:
        self._source.clear()
        if self.fallback is not None:
            self.fallback.clear_cache()

    def logits(self, history: tuple) -> torch.Tensor:
        x = self.proposal(history)
        if x is None:
            return self.fallback.logits(history) if self.fallback is not None else super().logits(history)
        out = torch.full((self.vocab_size,), -torch.inf, device="cpu")  # log of the one-hot law, formed directly
        out[x] = 0.0
        return out

    def probs(self, history: tuple) -> torch.Tensor:
        x = self.proposal(history)
        if x is None:
            if self.fallback is not None:
                return self.fallback.probs(history)
            # the block ends here (proposes() is False) — except for batch SD's M > 1 rows, which draft blocks
            # of one length and so draft from this uniform law where nothing matches (still an exact draft)
            return torch.full((self.vocab_size,), 1.0 / self.vocab_size, dtype=torch.float64, device="cpu")
        prob = torch.zeros(self.vocab_size, dtype=torch.float64, device="cpu")
        prob[x] = 1.0
        return prob
