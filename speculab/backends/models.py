"""Language-model adapters with rollback-able caches: Hugging Face causal LMs and n-gram drafts.

An adapter turns token ids into next-token logits over the shared vocabulary and
keeps a per-sequence state that can be extended, cropped (rollback after a
rejection), repeated across rows (batch drafts) and reduced to one row.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["LMState", "HFModel", "NGramModel"]


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
        self.max_length = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
        self.device = next(model.parameters()).device
        self.forward_calls = 0

    def start(self) -> LMState:
        return LMState(history=None)

    @torch.no_grad()
    def extend(self, state: LMState, ids: torch.Tensor) -> torch.Tensor:
        """Feed ``ids`` ``(rows, n)`` after the ``state.length`` tokens already processed.

        Returns float32 logits ``(rows, n, V)`` for the positions after each fed token.
        Without a cache the whole history is re-run (slow, for checking the cache).
        """
        from transformers import DynamicCache

        self.forward_calls += 1
        if state.history is None or state.length == 0:
            state.history = ids
        else:
            state.history = torch.cat([state.history.expand(ids.size(0), -1), ids], 1)
        if self.use_cache:
            if state.cache is None:
                state.cache = DynamicCache()
            logits = self.model(input_ids=ids, past_key_values=state.cache, use_cache=True).logits
        else:
            logits = self.model(input_ids=state.history, use_cache=False).logits[:, -ids.size(1):]
        state.length += ids.size(1)
        state.rows = ids.size(0)
        return logits[..., : self.vocab_size].float()

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


class NGramModel:
    """A count-based n-gram draft model ([Yin] Remark 1: a cost-free draft).

    ``P(x | last n−1 tokens)`` from counts with interpolated add-``alpha``
    smoothing that backs off to shorter contexts:
    ``P_k(x) = (c_k(x) + alpha · V · P_{k−1}(x)) / (c_k + alpha · V)``, ``P_0`` uniform.
    Logits are ``log P``.
    """

    def __init__(self, token_ids, n: int, vocab_size: int, *, alpha: float = 0.1):
        if n < 1:
            raise ValueError(f"n must be >= 1; got {n}")
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0; got {alpha}")
        self.n, self.vocab_size, self.alpha = int(n), int(vocab_size), float(alpha)
        self.max_length = None
        self.device = torch.device("cpu")
        self.forward_calls = 0
        ids = [int(t) for t in token_ids]
        if ids and (min(ids) < 0 or max(ids) >= vocab_size):
            raise ValueError(f"token ids must lie in [0, {vocab_size}); got range [{min(ids)}, {max(ids)}]")
        self.counts: list[dict[tuple, Counter]] = [defaultdict(Counter) for _ in range(n)]
        for k in range(n):  # context length k
            for i in range(k, len(ids)):
                self.counts[k][tuple(ids[i - k : i])][ids[i]] += 1
        self._memo: dict[tuple, torch.Tensor] = {}

    def _probs(self, context: tuple) -> torch.Tensor:
        context = context[max(0, len(context) - (self.n - 1)):]
        if context in self._memo:
            return self._memo[context]
        prob = torch.full((self.vocab_size,), 1.0 / self.vocab_size, dtype=torch.float64)
        for k in range(0, len(context) + 1):
            c = self.counts[k].get(context[len(context) - k:] if k else (), None)
            if not c:
                break
            total = sum(c.values())
            counts = torch.zeros(self.vocab_size, dtype=torch.float64)
            counts[list(c.keys())] = torch.tensor(list(c.values()), dtype=torch.float64)
            prob = (counts + self.alpha * self.vocab_size * prob) / (total + self.alpha * self.vocab_size)
        self._memo[context] = prob
        return prob

    def start(self) -> LMState:
        return LMState(history=[[]])

    def extend(self, state: LMState, ids: torch.Tensor) -> torch.Tensor:
        """Feed ``ids`` ``(rows, n)``; returns log-probabilities ``(rows, n, V)`` (the logits)."""
        self.forward_calls += 1
        rows, n = ids.shape
        if len(state.history) == 1 and rows > 1:
            state.history = [list(state.history[0]) for _ in range(rows)]
        out = torch.empty(rows, n, self.vocab_size)
        for r in range(rows):
            hist = state.history[r]
            for j, t in enumerate(ids[r].tolist()):
                hist.append(t)
                out[r, j] = self._probs(tuple(hist)).log().float()
        state.length += n
        state.rows = rows
        return out.to(ids.device)

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
