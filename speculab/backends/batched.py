"""Decoding many prompts at once: every prompt a row of one batch, each with its own accepted length.

Convention: ``p`` = draft, ``q`` = target. The one-prompt loop of
:mod:`speculab.backends.decode` pays a forward call of each model per drafted token
*per prompt*; here a round makes those calls once for all prompts still running, and
the rows advance by their own accepted lengths. A round's cost does not grow with the
rows beyond the models' own work: it dispatches the same tensor operations whatever
the number of rows (``tests/test_batched.py`` counts them at 16 and 1,024 rows).

* **Ragged rows without rollback.** Each model keeps one cache for the batch and an
  attention mask over its columns. A token a row no longer holds — a refused draft, a
  draft past the row's own block — is masked out rather than cropped, and new tokens
  take position ids counted over the row's valid tokens only, so every row sees
  exactly its own sequence (the logits equal the one-prompt path's up to float
  round-off: ``tests/test_batched.py``). Prompts of different lengths are left-padded.
  Finished rows leave the batch. Once masked columns outnumber the longest row's
  valid ones, the cache is compacted (each row's entries gathered to the right), so
  it stays within twice the longest sequence however many drafts are refused.
* **The same round, row by row.** A row with ``remaining`` tokens to go drafts
  ``ℓ = method.draft_length(remaining)`` tokens (tabulated once per batch), cut after its
  first drafted EOS or where a history draft proposes nothing (as the one-prompt path
  stops drafting there); rows draft the batch's longest block ``L`` together and the extra
  drafts are masked out. A slotwise method's :meth:`~speculab.methods.Method.round_law`
  is evaluated once on the whole batch and cut to each row's block
  (:func:`~speculab.backends.rounds.cut_law`); another method's once per block shape
  present (at most ``2(L + 1)`` calls, whatever the rows). The decision is drawn with
  :func:`~speculab.methods.sample_round`, so the output law of every row is the
  one-prompt path's, and its counts mean the same (``draft_calls`` counts a row's own
  block, not the padding drafts).
* **The same random draws.** Every uniform is a function of the prompt's seed, the
  round and what it is for (:mod:`speculab.backends.streams`), computed for all rows at
  once; both paths therefore give the same tokens and counts prompt by prompt
  (``tests/test_batched.py``), up to a draw within float round-off of a boundary (the
  batched logits differ from one row's in the last bits), on any device.
* **A fixed number of host synchronisations per round**, whatever the rows: one read of
  the round's state at its end — each row's progress, whether any law held NaN, the
  caches' lengths — and, for a method that is not slotwise, one of its block shapes
  before its laws; besides those the models make themselves (transformers' attention
  reads the padding mask on the host at each forward call). Nothing is copied to the
  device within a round either (the round's index enters the uniforms as a scalar;
  lanes, positions and lengths are computed there). Outputs and records stay on the
  device (:class:`~speculab.backends.rounds.Records`) and are copied once per batch. (A draft
  computed on the host from the token history — n-gram, prompt lookup — is on the
  host anyway, row by row; so is an ``on_round`` callback, called once per prompt; and a
  drafting head's decisions, below.) Only the logits a round reads are computed (``logits_to_keep``).
* **A head that decides where a round stops** (SpecDec++'s, on each drafted token's
  hidden state) runs on every row at once after each slot's draft forward; its scores and
  the slot's drafts are then read (two reads per slot, plus the head's uniforms once per
  round) and each row still drafting is stopped on the host by the method's own hooks,
  which take one prompt's values — so both paths decide every round alike.

Every method with a round law: autoregressive decoding, SD with any ``K``, biased,
fuzzy, rejection-rule and block verification, SpecDec++ with a head, and batch SD, whose
``M`` draft rows per prompt are ``M`` consecutive rows of the batch while it drafts (both
caches repeated, then reduced to the followed row). SPRINTER, whose verifier reads the
state before each slot and may skip the target's call, is decoded one prompt at a time.
Adapters: Hugging Face causal LMs (:class:`~speculab.backends.models.HFModel`) and drafts
computed from the token history (:class:`~speculab.backends.models.HistoryModel`: n-gram,
prompt lookup).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from speculab import kernels
from speculab._progress import advance
from speculab.backends.models import HFModel, HistoryModel, attention_kernels, cache_argument
from speculab.backends.pair import ModelPair
from speculab.backends.rounds import Records, RoundInfo, cut_law, pad_law, round_output
from speculab.backends.streams import OUTCOME, TOKEN, head_lane, key_words, uniforms
from speculab.backends.warp import NAN_LOGITS, Sampling, nan_flag
from speculab.methods import Method, RoundLaw, sample_round
from speculab.methods.capabilities import Slotwise, drafting_law, has, head_of

__all__ = ["decode_batched", "batchable", "HFRows", "RoundLoop", "right_aligned"]


def batchable(method: Method, pair: ModelPair) -> bool:
    """Whether :func:`decode_batched` runs ``method`` on ``pair``: adapters it knows, and Hugging Face models whose
    attention reads positions from ``position_ids`` over the whole cache (not a sliding window, not ALiBi), so a
    masked hole in a row changes nothing (tested on GPT-2; others fall back to one prompt at a time)."""
    models = [m for m in (pair.draft, pair.target) if isinstance(m, HFModel)]
    return (
        isinstance(pair.target, HFModel)
        and isinstance(pair.draft, (HFModel, HistoryModel))
        and all(_holes_are_exact(m.model.config) for m in models)
    )


def _holes_are_exact(config) -> bool:
    return (
        not getattr(config, "sliding_window", None)
        and not getattr(config, "alibi", False)
        and getattr(config, "model_type", "") not in ("bloom", "mpt", "falcon")
    )


# -- the models as batches of ragged rows ---------------------------------------------------------------------
class HFRows:
    """A Hugging Face causal LM over ``B`` rows: one cache, a mask over its columns, per-row valid lengths."""

    def __init__(self, adapter: HFModel, rows: int):
        from transformers import DynamicCache

        self.adapter, self.model, self.V = adapter, adapter.model, adapter.vocab_size
        self.dev = adapter.device
        self.cache = DynamicCache()
        self.mask = torch.zeros((rows, 0), dtype=torch.long, device=self.dev)
        self.valid = torch.zeros(rows, dtype=torch.long, device=self.dev)
        self.logits_to_keep = True

    @torch.inference_mode()
    def feed(self, ids: torch.Tensor, present: torch.Tensor, keep: int, hidden: bool = False):
        """Feed ``ids`` ``(B, w)`` where ``present`` (bool) and padding elsewhere; logits of the last ``keep``
        columns ``(B, keep, V)`` (float32; the others are not computed when the model supports it), and with
        ``hidden=True`` also the last layer's hidden states there ``(B, keep, d)`` (float32: what a head reads)."""
        present = present.long()
        # padding drafts of a row past its own block may run past the context: any valid position will do
        # for them (they are dropped unseen); a row's own tokens stay within it (decode checks the prompts)
        top = (self.adapter.max_length or 1 << 62) - 1
        pos = (self.valid[:, None] + present.cumsum(-1) - 1).clamp(0, top)
        self.mask = torch.cat([self.mask, present], 1)
        self.adapter.forward_calls += 1
        kwargs = dict(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=pos,
            use_cache=True,
            output_hidden_states=hidden,
            **cache_argument(self.model, self.cache),
        )
        with attention_kernels():
            out = self._forward(kwargs, keep)
        self.valid += present.sum(-1)
        logits = out.logits[:, -keep:, : self.V].float()
        return (logits, out.hidden_states[-1][:, -keep:].float()) if hidden else logits

    def _forward(self, kwargs: dict, keep: int):
        """The model's forward pass, computing only the last ``keep`` columns' logits where it can."""
        if self.logits_to_keep:
            try:
                return self.model(**kwargs, logits_to_keep=keep)
            except TypeError:  # an older model without logits_to_keep
                self.logits_to_keep = False
        return self.model(**kwargs)

    @torch.inference_mode()
    def feed_masked(self, ids: torch.Tensor, pos: torch.Tensor, allow: torch.Tensor, valid: torch.Tensor, keep: int):
        """Feed ``ids`` ``(B, w)`` at positions ``pos`` with an attention mask of their own (a token tree): each
        new token attends the cache's valid columns before the last ``R`` and, among those last ``R`` (this round's
        columns, the new ones included), where ``allow`` ``(B, w, R)`` says (every token attends itself, so that
        no row of the mask is empty). ``valid`` ``(B, w)``: which new columns count as the row's tokens from now
        on (a tree node only once accepted, :meth:`validate`). Logits of the last ``keep`` columns, float32."""
        B, w = ids.shape
        C, R = self.mask.size(1), allow.size(2)
        before = self.mask[:, : C + w - R].bool()[:, None, :].expand(B, w, -1)
        seen = torch.cat([before, allow], dim=2)  # (B, w, C + w)
        own = torch.arange(w, device=self.dev)
        seen[:, own, C + own] = True
        dtype = self.model.dtype
        mask = torch.zeros(seen.shape, dtype=dtype, device=self.dev).masked_fill(~seen, torch.finfo(dtype).min)
        self.mask = torch.cat([self.mask, valid.long()], 1)
        self.adapter.forward_calls += 1
        kwargs = dict(
            input_ids=ids,
            attention_mask=mask[:, None],
            position_ids=pos.clamp(0, (self.adapter.max_length or 1 << 62) - 1),
            use_cache=True,
            **cache_argument(self.model, self.cache),
        )
        with attention_kernels():
            out = self._forward(kwargs, keep)
        self.valid += valid.long().sum(-1)
        return out.logits[:, -keep:, : self.V].float()

    def validate(self, start: int, region: torch.Tensor) -> None:
        """Count the columns ``start .. start + R`` of each row as its tokens where ``region`` ``(B, R)`` says (they
        were fed as not yet valid, :meth:`feed_masked`): a tree's accepted path."""
        R = region.size(1)
        self.mask = torch.cat(
            [self.mask[:, :start], self.mask[:, start : start + R] | region.long(), self.mask[:, start + R :]], 1
        )
        self.valid += region.long().sum(-1)

    def drop_last(self, counts: torch.Tensor) -> None:
        """Forget the last ``counts[r]`` columns of each row (all fed as present, this round's drafts)."""
        C = self.mask.size(1)
        cols = torch.arange(C, device=self.dev)
        self.mask = self.mask * (cols[None, :] < C - counts[:, None]).long()
        self.valid -= counts

    def keep(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.mask, self.valid = self.mask[rows], self.valid[rows]

    def repeat(self, M: int) -> None:
        """Each row ``M`` times, consecutively (a prompt's draft rows)."""
        self.cache.batch_repeat_interleave(M)
        self.mask, self.valid = self.mask.repeat_interleave(M, 0), self.valid.repeat_interleave(M, 0)

    def longest(self) -> torch.Tensor:
        """The longest row's valid length, a 0-d tensor (read with the round's other values, see :meth:`compact`)."""
        return self.valid.max() if self.valid.numel() else torch.zeros((), dtype=torch.long, device=self.dev)

    def compact(self, W: int | None = None) -> None:
        """Drop the masked columns once they outnumber a row's valid ones: each row's valid entries move, in
        order, to the right end of a cache as long as the longest row (left padding). Keys and values keep
        the positions they were computed at, and attention is over the mask, so nothing else changes.
        ``W``: the longest row's valid length when the caller has read it already (else it is read here)."""
        C = self.mask.size(1)
        W = int(self.longest()) if W is None else W
        if C <= 2 * W:
            return
        order = torch.argsort(self.mask, dim=1, stable=True)  # masked columns first, each group in order
        idx = order[:, C - W :]  # (B, W): every valid column of the row, right-aligned

        def gather(t):  # (B, heads, C, d) -> (B, heads, W, d)
            return torch.gather(t, 2, idx[:, None, :, None].expand(-1, t.size(1), -1, t.size(3)))

        if hasattr(self.cache, "layers"):  # transformers >= 4.56: one object per layer
            for layer in self.cache.layers:
                layer.keys, layer.values = gather(layer.keys), gather(layer.values)
        elif hasattr(self.cache, "key_cache"):  # older: lists of tensors
            self.cache.key_cache = [gather(t) for t in self.cache.key_cache]
            self.cache.value_cache = [gather(t) for t in self.cache.value_cache]
        else:  # an unknown layout: keep the holes (masked, so still exact)
            return
        self.mask = torch.gather(self.mask, 1, idx)


class _HistoryRows:
    """A history draft (n-gram, prompt lookup) over ``B`` rows: one token history per row (padding never stored),
    on the host, row by row (its laws are computed there)."""

    def __init__(self, adapter: HistoryModel, rows: int, dev):
        self.adapter, self.V, self.dev = adapter, adapter.vocab_size, dev
        self.history: list[list[int]] = [[] for _ in range(rows)]

    def feed(self, ids: torch.Tensor, present: torch.Tensor, keep: int) -> torch.Tensor:
        self.adapter.forward_calls += 1
        B, w = ids.shape
        out = torch.zeros(B, keep, self.V, device="cpu")
        for r, (row, here) in enumerate(zip(ids.tolist(), present.tolist())):
            for j, (t, h) in enumerate(zip(row, here)):
                if h:
                    self.history[r].append(t)
                    if j >= w - keep:  # only the laws the caller reads
                        out[r, j - (w - keep)] = self.adapter.logits(tuple(self.history[r]))
        return out.to(ids.device)

    def drop_last(self, counts: torch.Tensor) -> None:
        for hist, n in zip(self.history, counts.tolist()):
            del hist[len(hist) - n :]

    def keep(self, rows: torch.Tensor) -> None:
        self.history = [list(self.history[r]) for r in rows.tolist()]

    def repeat(self, M: int) -> None:
        self.history = [list(h) for h in self.history for _ in range(M)]

    def longest(self) -> torch.Tensor:
        return torch.zeros((), dtype=torch.long, device=self.dev)

    def compact(self, W: int | None = None) -> None:
        """Histories hold no padding: nothing to compact."""


def _rows(adapter, rows: int, dev):
    return HFRows(adapter, rows) if isinstance(adapter, HFModel) else _HistoryRows(adapter, rows, dev)


def right_aligned(tokens: list[list[int]], dev) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row token lists as ``(B, w)`` ids right-aligned (left padding) and the mask of the real ones (built on
    the host with numpy, then copied once)."""
    w = max(len(t) for t in tokens)
    ids = np.zeros((len(tokens), w), dtype=np.int64)
    present = np.zeros((len(tokens), w), dtype=bool)
    for r, t in enumerate(tokens):
        if t:
            ids[r, w - len(t) :] = t
            present[r, w - len(t) :] = True
    return torch.from_numpy(ids).to(dev), torch.from_numpy(present).to(dev)


# -- decoding -------------------------------------------------------------------------------------------------------
def decode_batched(
    pair: ModelPair,
    encoded: list[list[int]],
    method: Method,
    *,
    max_new_tokens: int,
    sampling: Sampling,
    seeds: list[int],
    track_draft: bool = False,
    on_round: Callable | None = None,
    batch_size: int | None = None,
    first_index: int = 0,
) -> list:
    """Decode the prompts ``encoded`` (token ids, checked by the caller) in batches of ``batch_size`` rows.

    Returns one ``(tokens, RunRecord, RoundRecord, counts)`` per prompt (:meth:`Records.collect
    <speculab.backends.rounds.Records.collect>`); the caller (:func:`speculab.backends.decode`) assembles the
    result. ``seeds``: each prompt's stream (:mod:`speculab.backends.streams`). ``batch_size=None``: all at
    once. ``first_index``: the run index of ``encoded[0]`` in the caller's prompts (what ``on_round`` is told).
    """
    size = len(encoded) if batch_size is None else batch_size
    out = []
    for start in range(0, len(encoded), size):
        out.extend(
            _Batch(
                pair,
                encoded[start : start + size],
                first_index + start,
                method,
                max_new_tokens,
                sampling,
                seeds[start : start + size],
                track_draft,
                on_round,
            ).run()
        )
    return out


class RoundLoop:
    """The loop both batched paths share (chains here, trees in :mod:`speculab.backends.tree_decode`): rounds until
    every row finished, and each round's end — its one reading of the device (each row's tokens to go, whether it
    finished, whether any law held NaN, the caches' longest rows), the progress bar, the caches' compaction and the
    finished rows' retirement. A subclass sets ``records``, ``run_ids``, ``remaining`` (host), ``round_index``,
    ``target``, ``draft`` (or ``None``), ``dev``, ``on_round`` and gives ``round`` and ``_retire``."""

    def run(self) -> list:
        while self.run_ids.numel():
            self.round()
        return self.records.collect()

    def refuse_nan_before_telling(self, nan: torch.Tensor) -> None:
        """With an ``on_round`` (which reads the host anyway) a round whose laws hold NaN is refused before it is
        told, as the one-prompt path does; without one, at the round's one reading (:meth:`finish_round`)."""
        if self.on_round is not None and bool(nan):
            raise ValueError(NAN_LOGITS)

    def finish_round(self, remaining_dev: torch.Tensor, finished: torch.Tensor, nan: torch.Tensor) -> None:
        """End a round: ``remaining_dev`` ``(B,)`` tokens to go, ``finished`` ``(B,)`` rows done, ``nan`` 0-d flag."""
        B = self.remaining.size
        zero = torch.zeros((), dtype=torch.long, device=self.dev)
        longest = [self.target.longest(), self.draft.longest() if self.draft is not None else zero]
        state = torch.cat([remaining_dev, finished.long(), nan.long()[None], *(v[None] for v in longest)])
        state = state.cpu().numpy()  # the round's one reading of the device
        if state[2 * B]:
            raise ValueError(NAN_LOGITS)
        done = state[B : 2 * B].astype(bool)
        advance(int((self.remaining - np.where(done, 0, state[:B])).sum()))  # a finished row: the rest of its budget
        self.remaining = state[:B]
        self.target.compact(int(state[2 * B + 1]))
        if self.draft is not None:
            self.draft.compact(int(state[2 * B + 2]))
        self.round_index += 1
        if done.any():
            self._retire(np.flatnonzero(~done))


class _Batch(RoundLoop):
    """One batch of prompts decoded together (module docstring). Per live row, on the device: its run index,
    stream key, tokens to go and the tokens each model has not seen yet; on the host, the tokens to go (read
    once per round) and, for history drafts and ``on_round``, what they read."""

    def __init__(self, pair, prompts, first_index, method, max_new, sampling, seeds, track_draft, on_round):
        self.pair, self.method, self.sampling = pair, method, sampling
        self.max_new, self.eos, self.dev = max_new, pair.eos_token_id, pair.device
        self.on_round = on_round
        self.first_index = first_index
        B = len(prompts)
        self.records = Records(B)
        self.run_ids = torch.arange(B, device=self.dev)  # each live row's index in this batch
        self.keys = key_words(seeds, self.dev)  # (B, 2)
        self.round_index = 0
        # draft lengths by tokens to go, tabulated once (the method's draft_length is a Python function)
        self.table = np.array([0] + [method.draft_length(r) for r in range(1, max_new + 1)], dtype=np.int64)
        self.table_dev = torch.from_numpy(self.table).to(self.dev)
        self.remaining = np.full(B, max_new, dtype=np.int64)  # host copy, read at each round's end
        self.remaining_dev = torch.full((B,), max_new, dtype=torch.long, device=self.dev)
        self.track_draft = track_draft
        self.track = track_draft or method.drafting
        self.head = head_of(method)  # a head reading each drafted token's hidden state (decode checks which)
        self.target = _rows(pair.target, B, self.dev)
        self.draft = _rows(pair.draft, B, self.dev) if self.track else None
        self.history = isinstance(self.draft, _HistoryRows)
        self.unseen_t = right_aligned(prompts, self.dev)  # (ids, present): the prompts at first
        self.unseen_d = self.unseen_t

    def round(self) -> None:
        """One round for every live prompt: draft, one target call, each prompt's decision, records, rollback."""
        method, dev = self.method, self.dev
        lengths = self.table[self.remaining]  # (B,) host: each row's block before any cut
        L = int(lengths.max())
        B = lengths.size
        M = method.rows if L else 1  # draft rows per prompt (expanded row e belongs to prompt e // M)
        lanes = torch.arange(2 + L * M, device=dev)  # OUTCOME, TOKEN, then draft_lane(i, m, M) = 2 + i M + m
        if self.head is not None:  # then the head's, one per slot
            lanes = torch.cat([lanes, head_lane(torch.arange(L, device=dev))])
        U = uniforms(self.keys, self.round_index, lanes)  # (B, 2 + L M [+ L])
        X, P, p_next, cut, predictions = self._draft(L, M, lengths, U)
        Q = self._verify(X, L, M)
        V = Q.size(-1)
        P4, Q4, X3 = P.reshape(B, M, L, V), Q.reshape(B, M, L + 1, V), X.reshape(B, M, L)
        if M < method.rows:  # a round drafting nothing: one row per prompt stands for its equal rows (views)
            R = method.rows
            P4, Q4, X3 = P4.expand(-1, R, -1, -1), Q4.expand(-1, R, -1, -1), X3.expand(-1, R, -1)
        nan = nan_flag(P, Q, *(() if p_next is None else (p_next,)))
        length = self.table_dev[self.remaining_dev] if cut is None else torch.from_numpy(cut).to(dev)
        bonus = length < self.remaining_dev
        if M == 1 and self.eos is not None and L:  # a block ends after its first drafted EOS, and nothing follows
            slot = torch.arange(L, device=dev)
            eos = (X3[:, 0] == self.eos) & (slot < length[:, None])
            cut_here = eos.any(-1)
            length = torch.where(cut_here, eos.long().argmax(-1) + 1, length)
            bonus = bonus & ~cut_here
        law = self._law(P4, Q4, X3, length, bonus, lengths if cut is None else cut, L, predictions)
        decision = sample_round(law, U[:, OUTCOME], U[:, TOKEN])
        tracked = None
        if self.track_draft and p_next is not None:  # autoregressive rounds with the draft alongside
            tracked = kernels.tv(p_next, Q4[:, 0, 0])
        called = None
        if predictions is not None:  # a head: the method says which rounds call the target (host, per row)
            called = torch.tensor([int(method.target_called(v)) for v in predictions], dtype=torch.long, device=dev)
        out = round_output(
            law, P4, Q4, X3, decision, length, rows=M, eos=self.eos, tracked_tv=tracked, oracle_calls=called
        )
        self.records.add(self.run_ids, out.chunk)
        self.refuse_nan_before_telling(nan)
        if self.on_round is not None:
            self._tell(P4, Q4, X3, length, bonus, decision, predictions)
        row, tau, token = decision
        self._roll_back(out, row, tau, token, L, M)
        self.remaining_dev = self.remaining_dev - out.produced
        self.finish_round(self.remaining_dev, out.eos | (self.remaining_dev <= 0), nan)

    # -- the steps of a round ----------------------------------------------------------------------------------
    def _draft(self, L: int, M: int, lengths: np.ndarray, U):
        """Draft each prompt's block on its ``M`` rows, all rows at once, with no host synchronisation (but for a
        history draft or a head, below).

        Returns the drafts ``X`` ``(B M, L)``, their laws ``P`` ``(B M, L, V)`` float64, the draft's law at each
        prompt's next position ``(B, V)`` (``None`` without a draft), each prompt's block length where drafting
        stopped before its table's (``None``: no cut) and, with a head, each prompt's values the method stored at
        its drafted slots (``None`` without one).

        A history draft that proposes nothing ends the block there (checked on the host, row by row). A method's
        head (SpecDec++'s, reading each drafted token's hidden state) is run on every row at once after each
        slot's draft forward; its scores and the drafted tokens are then read once per slot, and each prompt
        still drafting stores the method's ``read_head`` (:class:`~speculab.methods.capabilities.DraftHead`) and
        stops where its ``stop_drafting`` says — on the host, as the one-prompt loop does (those
        hooks take one prompt's values), so both paths decide every round alike. As there, no head is read at a
        prompt's last possible slot, nor after it drafted EOS.
        """
        B, V, dev = lengths.size, self.pair.vocab_size, self.dev
        p = None
        if self.draft is not None:  # catch the draft up: the last column is each row's newest token
            ids, present = self.unseen_d
            p = self.sampling.probs(self.draft.feed(ids, present, 1)[:, -1].double(), check=False)  # (B, V)
            p = drafting_law(self.method, p)  # the law the drafts come from (DraftLaw: greedy drafts)
        p_next = p
        if L == 0:
            return (
                torch.zeros((B, 0), dtype=torch.long, device=dev),
                torch.zeros((B, 0, V), dtype=torch.float64, device=dev),
                p_next,
                None,
                None,
            )
        if M > 1:
            self.draft.repeat(M)
            p = p.repeat_interleave(M, 0)
        head = self.head if M == 1 else None
        u_head = U[:, 2 + L :].cpu().numpy() if head is not None else None  # head_lane(i): one per slot, per prompt
        U = U[:, 2 : 2 + L * M].reshape(B, L, M).transpose(1, 2).reshape(B * M, L)  # each draft row's, slot by slot
        cut, predictions = None, None
        proposes = getattr(self.pair.draft, "proposes", None) if self.history and M == 1 else None
        if proposes is not None or head is not None:
            cut = lengths.copy()
            drafting = cut > 0
        if head is not None:
            predictions = [[] for _ in range(B)]
        xs, ps = [], []
        for i in range(L):
            if proposes is not None:  # a history draft, on the host: a block ends where it proposes nothing
                for j in np.flatnonzero(drafting):
                    if not proposes(tuple(self.draft.history[j])):
                        drafting[j], cut[j] = False, i
                drafting &= i + 1 < cut
            x = p.argmax(-1) if self.sampling.greedy else kernels.sample_index(p, U[:, i])  # no host synchronisation
            xs.append(x)
            ps.append(p)
            if i + 1 < L:
                present = torch.ones_like(x[:, None], dtype=torch.bool)
                if head is None:
                    logits = self.draft.feed(x[:, None], present, 1)
                else:
                    logits, hidden = self.draft.feed(x[:, None], present, 1, hidden=True)
                    self._read_head(head, hidden[:, -1], x, i, u_head, cut, drafting, predictions)
                p = drafting_law(self.method, self.sampling.probs(logits[:, -1].double(), check=False))
        return torch.stack(xs, 1), torch.stack(ps, 1), p_next, cut, predictions

    def _read_head(
        self, head, hidden, x, i: int, u_head: np.ndarray, cut: np.ndarray, drafting: np.ndarray, predictions: list
    ) -> None:
        """The head at slot ``i`` for every prompt still drafting past it (one read of the scores and drafts):
        each stores its value and, where the method says stop, its block is cut after slot ``i``."""
        if self.eos is not None:
            drafting &= x.cpu().numpy() != self.eos  # a block ends at its first drafted EOS: no head read there
        drafting &= i + 1 < cut  # and none at a prompt's last possible slot
        if not drafting.any():
            return
        scores = head(hidden).tolist()
        method = self.method
        for j in np.flatnonzero(drafting):
            predictions[j].append(method.read_head(scores[j], float(u_head[j, i])))
            if method.stop_drafting(predictions[j], int(self.remaining[j])):
                drafting[j], cut[j] = False, i + 1

    def _verify(self, X, L: int, M: int):
        """One target call on every row: the unseen tokens and the block; the target's laws ``(B M, L + 1, V)``."""
        ids, present = self.unseen_t
        if M > 1:
            self.target.repeat(M)
            ids, present = ids.repeat_interleave(M, 0), present.repeat_interleave(M, 0)
        logits = self.target.feed(
            torch.cat([ids, X], 1), torch.cat([present, torch.ones_like(X, dtype=torch.bool)], 1), L + 1
        )
        return self.sampling.probs(logits.double(), check=False)

    def _law(self, P, Q, X, length, bonus, lengths: np.ndarray, L: int, predictions=None) -> RoundLaw:
        """Each prompt's round law ``(B, M, L + 1)``, from laws ``(B, M, ·, V)``: a slotwise method's law of the
        whole block cut to each row's (the rows drafting nothing get the method's law of an empty block, by
        index: their count is known on the host); another method's law per block shape present (one read).
        A method with a head gets ``predictions=``, each prompt's stored values as an array shaped like its
        drafts (``NaN`` at the slots where the head was not read); the one-prompt loop passes one prompt's list."""
        method, dev = self.method, self.dev
        extra = {}
        if predictions is not None:
            stored = np.full((len(predictions), 1, L), np.nan)
            for j, values in enumerate(predictions):
                stored[j, 0, : len(values)] = values
            extra["predictions"] = torch.from_numpy(stored).to(dev)
        if L == 0:  # every row's block is empty
            return method.round_law(P, Q, X, bonus=True, **extra)
        empty = np.flatnonzero(lengths == 0)  # rows with nothing to draft (from the host's table)
        if has(method, Slotwise):
            law = cut_law(method.round_law(P, Q, X, bonus=True, **extra), Q, length.clamp(min=1), bonus)
            if empty.size:
                law = self._splice(law, torch.from_numpy(empty).to(dev), P, Q, X, 0, True, L, extra)
            return law
        # not slotwise: one law per (length, bonus) present; the rows of each found by sorting, not by a loop
        shape = length * 2 + bonus.long()
        keys, counts = torch.stack(torch.unique(shape, return_counts=True)).tolist()  # the round's one extra read
        order = torch.argsort(shape, stable=True)
        law, start = None, 0
        for k, n in zip(keys, counts):
            law = self._splice(law, order[start : start + n], P, Q, X, k // 2, bool(k % 2), L, extra)
            start += n
        return law

    def _splice(
        self, law: RoundLaw | None, rows, P, Q, X, ell: int, bonus: bool, L: int, extra: dict | None = None
    ) -> RoundLaw:
        """``law`` with the rows ``rows`` replaced by the method's law of their blocks of length ``ell``, widened to
        ``L`` drafts (``law=None``: a law of no mass elsewhere); ``extra``: a head's ``predictions`` (all rows)."""
        extra = {k: v[rows, :, :ell] for k, v in (extra or {}).items()}
        part = pad_law(
            self.method.round_law(P[rows, :, :ell], Q[rows, :, : ell + 1], X[rows, :, :ell], bonus=bonus, **extra),
            P.size(1),
            L + 1,
        )
        if law is None:
            law = RoundLaw(*(None if f is None else f.new_zeros((P.size(0), *f.shape[1:])) for f in part))
        return RoundLaw(*(None if f is None or g is None else f.index_put((rows,), g) for f, g in zip(law, part)))

    def _tell(self, P, Q, X, length, bonus, decision, predictions=None) -> None:
        """``on_round`` for each prompt, with its own block and the law of it (one read of the decisions); a
        method with a head gets the prompt's stored values as the one-prompt loop passes them."""
        row, tau, _ = decision
        values = torch.stack([length, bonus.long(), row, tau, self.run_ids]).T.tolist()
        for j, (ell, bon, r, t, run) in enumerate(values):
            p, q, x = P[j, :, :ell], Q[j, :, : ell + 1], X[j, :, :ell]
            extra = {} if predictions is None else {"predictions": predictions[j]}
            law = self.method.round_law(p[None], q[None], x[None], bonus=bool(bon), **extra)
            self.on_round(RoundInfo(self.first_index + run, p, q, x, law, r, t, *extra.values()))

    def _roll_back(self, out, row, tau, token, L: int, M: int) -> None:
        """Both caches back to what each prompt accepted; the tokens each model is fed next round."""
        B, dev = tau.size(0), self.dev
        if M > 1:  # every prompt goes on with the row it followed
            followed = torch.arange(B, device=dev) * M + row
            self.target.keep(followed)
            self.draft.keep(followed)
        # the caches hold x_1..x_L (target) and x_1..x_{L−1} (draft): keep the accepted ones
        self.target.drop_last(L - tau)
        present = torch.ones((B, 1), dtype=torch.bool, device=dev)
        self.unseen_t = token.clamp(min=0)[:, None], present  # the correction or bonus
        if self.draft is not None:
            if L:
                self.draft.drop_last((L - 1) - tau.clamp(max=L - 1))
            # after a whole block accepted the draft has not seen x_L either
            self.unseen_d = (
                torch.stack([out.last_draft, token.clamp(min=0)], 1),
                torch.stack([out.all_accepted, present[:, 0]], 1),
            )

    def _retire(self, keep: np.ndarray) -> None:
        """Finished prompts leave the batch (their rows dropped from both models)."""
        rows = torch.from_numpy(keep).to(self.dev)
        if keep.size:
            self.target.keep(rows)
            if self.draft is not None:
                self.draft.keep(rows)
        self.run_ids, self.keys = self.run_ids[rows], self.keys[rows]
        self.remaining, self.remaining_dev = self.remaining[keep], self.remaining_dev[rows]
        self.unseen_t = tuple(t[rows] for t in self.unseen_t)
        self.unseen_d = tuple(t[rows] for t in self.unseen_d)
