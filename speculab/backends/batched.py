"""Decoding many prompts at once: every prompt a row of one batch, each with its own accepted length.

Convention: ``p`` = draft, ``q`` = target. The one-prompt loop of
:mod:`speculab.backends.decode` pays a forward call of each model per drafted token
*per prompt*; here a round makes those calls once for all prompts still running, and
the rows advance by their own accepted lengths:

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
  ``L = method.draft_length(remaining)`` tokens, cut after its first drafted EOS or
  where the draft proposes nothing (as the one-prompt path stops drafting there); rows draft the batch's longest block together
  and the extra drafts are masked out. The method's :meth:`~speculab.methods.Method.round_law`
  is evaluated once per group of rows with the same block length and bonus flag (array
  API, the batch axis is the rows), and the decision is drawn with
  :func:`~speculab.methods.sample_round`. So the output law of every row is the
  one-prompt path's, and its counts mean the same (``draft_calls`` counts a row's own
  block, not the padding drafts).
* **The same random draws.** Each prompt has its own random stream and consumes it as
  the one-prompt path does — one uniform per own draft (inverse CDF), two per round —
  so for the same key both paths give the same tokens and counts prompt by prompt
  (``tests/test_batched.py``), up to a draw within float round-off of a boundary
  (the batched logits differ from one row's in the last bits).
* **No host synchronisation per token, a few per round**: each prompt's uniforms for its
  block are drawn up front (as on the one-prompt path), a block's cut at a drafted EOS is
  found after drafting, NaN logits are checked once per round, and the drafted blocks and
  the decisions come to the host after the round's target call (reading each prompt's
  decision and records costs a few transfers per prompt and round; none while drafting).
  (A draft computed on the host from the token history — n-gram, prompt lookup — is on
  the host anyway.) Only the logits a round reads are computed (``logits_to_keep``).

Every method with a round law: autoregressive decoding, SD with any ``K``, biased,
fuzzy, rejection-rule and block verification, and batch SD, whose ``M`` draft rows per
prompt are ``M`` consecutive rows of the batch while it drafts (both caches repeated,
then reduced to the followed row). Adapters: Hugging Face causal LMs (:class:`~speculab.backends.models.HFModel`)
and drafts computed from the token history (:class:`~speculab.backends.models.HistoryModel`:
n-gram, prompt lookup).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from speculab import kernels
from speculab._progress import advance
from speculab.backends.models import HFModel, HistoryModel, cache_argument
from speculab.backends.pair import ModelPair
from speculab.backends.warp import Sampling, check_laws
from speculab.methods import Method, RoundLaw, sample_round

__all__ = ["decode_batched", "batchable"]


def batchable(method: Method, pair: ModelPair) -> bool:
    """Whether :func:`decode_batched` runs ``method`` on ``pair``: adapters it knows, and Hugging Face models whose
    attention reads positions from ``position_ids`` over the whole cache (not a sliding window, not ALiBi), so a
    masked hole in a row changes nothing (tested on GPT-2; others fall back to one prompt at a time)."""
    models = [m for m in (pair.draft, pair.target) if isinstance(m, HFModel)]
    return (isinstance(pair.target, HFModel) and isinstance(pair.draft, (HFModel, HistoryModel))
            and all(_holes_are_exact(m.model.config) for m in models))


def _holes_are_exact(config) -> bool:
    return (not getattr(config, "sliding_window", None) and not getattr(config, "alibi", False)
            and getattr(config, "model_type", "") not in ("bloom", "mpt", "falcon"))


# -- the models as batches of ragged rows ---------------------------------------------------------------------
class _HFRows:
    """A Hugging Face causal LM over ``B`` rows: one cache, a mask over its columns, per-row valid lengths."""

    def __init__(self, adapter: HFModel, prompts: list[list[int]]):
        from transformers import DynamicCache

        self.adapter, self.model, self.V = adapter, adapter.model, adapter.vocab_size
        self.dev = adapter.device
        self.cache = DynamicCache()
        self.mask = torch.zeros((len(prompts), 0), dtype=torch.long, device=self.dev)
        self.valid = torch.zeros(len(prompts), dtype=torch.long, device=self.dev)
        self.logits_to_keep = True

    @torch.inference_mode()
    def feed(self, ids: torch.Tensor, present: torch.Tensor, keep: int) -> torch.Tensor:
        """Feed ``ids`` ``(B, w)`` where ``present`` (bool) and padding elsewhere; logits of the last ``keep``
        columns ``(B, keep, V)`` (float32; the others are not computed when the model supports it)."""
        present = present.long()
        # padding drafts of a row past its own block may run past the context: any valid position will do
        # for them (they are dropped unseen); a row's own tokens stay within it (decode checks the prompts)
        top = (self.adapter.max_length or 1 << 62) - 1
        pos = (self.valid[:, None] + present.cumsum(-1) - 1).clamp(0, top)
        self.mask = torch.cat([self.mask, present], 1)
        self.adapter.forward_calls += 1
        kwargs = dict(input_ids=ids, attention_mask=self.mask, position_ids=pos, use_cache=True,
                      **cache_argument(self.model, self.cache))
        if self.logits_to_keep:
            try:
                logits = self.model(**kwargs, logits_to_keep=keep).logits
            except TypeError:  # an older model without logits_to_keep
                self.logits_to_keep = False
                logits = self.model(**kwargs).logits
        else:
            logits = self.model(**kwargs).logits
        self.valid += present.sum(-1)
        return logits[:, -keep:, : self.V].float()

    def drop_last(self, counts: torch.Tensor) -> None:
        """Forget the last ``counts[r]`` columns of each row (all fed as present, this round's drafts)."""
        C = self.mask.size(1)
        cols = torch.arange(C, device=self.dev)
        self.mask = self.mask * (cols[None, :] < C - counts[:, None]).long()
        self.valid -= counts
        self.compact()

    def keep(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.mask, self.valid = self.mask[rows], self.valid[rows]
        self.compact()

    def repeat(self, M: int) -> None:
        """Each row ``M`` times, consecutively (a prompt's draft rows)."""
        self.cache.batch_repeat_interleave(M)
        self.mask, self.valid = self.mask.repeat_interleave(M, 0), self.valid.repeat_interleave(M, 0)

    def compact(self) -> None:
        """Drop the masked columns once they outnumber a row's valid ones: each row's valid entries move, in
        order, to the right end of a cache as long as the longest row (left padding). Keys and values keep
        the positions they were computed at, and attention is over the mask, so nothing else changes."""
        C, W = self.mask.size(1), int(self.valid.max()) if self.valid.numel() else 0
        if C <= 2 * W:
            return
        order = torch.argsort(self.mask, dim=1, stable=True)  # masked columns first, each group in order
        idx = order[:, C - W:]  # (B, W): every valid column of the row, right-aligned

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
    """A history draft (n-gram, prompt lookup) over ``B`` rows: one token history per row (padding never stored)."""

    def __init__(self, adapter: HistoryModel, prompts: list[list[int]]):
        self.adapter, self.V = adapter, adapter.vocab_size
        self.history: list[list[int]] = [[] for _ in prompts]

    def feed(self, ids: torch.Tensor, present: torch.Tensor, keep: int) -> torch.Tensor:
        self.adapter.forward_calls += 1
        B, w = ids.shape
        out = torch.zeros(B, keep, self.V)
        for r, (row, here) in enumerate(zip(ids.tolist(), present.tolist())):
            for j, (t, h) in enumerate(zip(row, here)):
                if h:
                    self.history[r].append(t)
                    if j >= w - keep:  # only the laws the caller reads
                        out[r, j - (w - keep)] = self.adapter.logits(tuple(self.history[r]))
        return out.to(ids.device)

    def drop_last(self, counts: torch.Tensor) -> None:
        for hist, n in zip(self.history, counts.tolist()):
            del hist[len(hist) - n:]

    def keep(self, rows: torch.Tensor) -> None:
        self.history = [list(self.history[r]) for r in rows.tolist()]

    def repeat(self, M: int) -> None:
        self.history = [list(h) for h in self.history for _ in range(M)]


def _rows(adapter, prompts):
    return _HFRows(adapter, prompts) if isinstance(adapter, HFModel) else _HistoryRows(adapter, prompts)


def _right_aligned(tokens: list[list[int]], dev) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row token lists as ``(B, w)`` ids right-aligned (left padding) and the mask of the real ones."""
    w = max(len(t) for t in tokens)
    ids = torch.zeros((len(tokens), w), dtype=torch.long)
    present = torch.zeros((len(tokens), w), dtype=torch.bool)
    for r, t in enumerate(tokens):
        if t:
            ids[r, w - len(t):] = torch.tensor(t)
            present[r, w - len(t):] = True
    return ids.to(dev), present.to(dev)


# -- decoding -------------------------------------------------------------------------------------------------------
def decode_batched(pair: ModelPair, encoded: list[list[int]], method: Method, *, max_new_tokens: int,
                   sampling: Sampling, generators: list, track_draft: bool = False,
                   on_round: Callable | None = None, batch_size: int | None = None, first_index: int = 0) -> list:
    """Decode the prompts ``encoded`` (token ids, checked by the caller) in batches of ``batch_size`` rows.

    Returns one ``(tokens, builder)`` per prompt (:class:`speculab.backends.decode._Builder`); the
    caller (:func:`speculab.backends.decode`) assembles the result. ``batch_size=None``: all at once.
    ``first_index``: the run index of ``encoded[0]`` in the caller's prompts (what ``on_round`` is told).
    """
    size = len(encoded) if batch_size is None else batch_size
    out = []
    for start in range(0, len(encoded), size):
        out.extend(_Batch(pair, encoded[start:start + size], first_index + start, method, max_new_tokens, sampling,
                          generators[start:start + size],
                          track_draft, on_round).run())
    return out


class _Decision(NamedTuple):
    """A prompt's round as drawn: its group's law and its index there, the followed row, accepted drafts, the
    final token (-1: none), and ``E[τ | block]``, ``Var[τ | block]``."""

    law: RoundLaw
    at: int
    row: int
    tau: int
    token: int
    mean: float
    var: float


class _Batch:
    """One batch of prompts decoded together (module docstring)."""

    def __init__(self, pair, prompts, first_index, method, max_new, sampling, generators, track_draft, on_round):
        from speculab.backends.decode import _Builder

        self.pair, self.method, self.sampling, self.g = pair, method, sampling, list(generators)  # one per live row
        self.max_new, self.eos, self.dev = max_new, pair.eos_token_id, pair.device
        self.on_round = on_round
        self.index = list(range(first_index, first_index + len(prompts)))  # run index of each live row
        self.ids = [list(p) for p in prompts]
        self.n_prompt = [len(p) for p in prompts]
        self.builders = [_Builder() for _ in prompts]
        self.track_draft = track_draft
        self.track = track_draft or method.drafting
        self.target = _rows(pair.target, prompts)
        self.draft = _rows(pair.draft, prompts) if self.track else None
        # tokens each model has not seen yet, per live row: the prompt at first
        self.unseen_t = [list(p) for p in prompts]
        self.unseen_d = [list(p) for p in prompts]
        self.live = list(range(len(prompts)))  # positions in self.ids of the rows still running

    def remaining(self, r: int) -> int:
        return self.max_new - (len(self.ids[r]) - self.n_prompt[r])

    def run(self) -> list:
        while self.live:
            produced = sum(map(len, self.ids))
            self.round()
            advance(sum(map(len, self.ids)) - produced)
        return [(ids[n:], b) for ids, n, b in zip(self.ids, self.n_prompt, self.builders)]

    def round(self) -> None:
        """One round for every live prompt: draft, one target call, each prompt's decision, records, rollback."""
        lengths = [self.method.draft_length(self.remaining(r)) for r in self.live]
        L = max(lengths)
        # draft rows per prompt (expanded row e belongs to prompt e // M); nothing drafted: one row per prompt
        M = self.method.rows if L else 1
        X, P, cut, p_next = self._draft(lengths, M)
        Q = self._verify(X, P, L, M, p_next)
        u = torch.stack([torch.rand(2, generator=g, dtype=torch.float64, device=self.dev) for g in self.g])
        X_host = X.tolist()  # one synchronisation per round
        blocks = self._blocks(X_host, cut, M)
        decided = self._decide(blocks, P, Q, X, u, M)
        finished = self._apply(decided, blocks, P, Q, X, X_host, L, M, p_next)
        self._retire(finished)

    def _draft(self, lengths: list[int], M: int):
        """Draft each prompt's block on its ``M`` rows, all rows at once, with no host synchronisation.

        Returns the drafts ``X`` ``(B M, L)``, their laws ``P`` ``(B M, L, V)`` float64 (``None`` if ``L = 0``),
        each prompt's block length cut where a history draft proposes nothing, and the draft's law at each
        prompt's next position (``None`` without a draft).
        """
        from speculab.backends.decode import draft_uniforms

        B, L = len(self.live), max(lengths)
        p = None
        if self.draft is not None:  # catch the draft up: the last column is each row's newest token
            ids, present = _right_aligned(self.unseen_d, self.dev)
            p = self.sampling.probs(self.draft.feed(ids, present, 1)[:, -1].double(), check=False)  # (B, V)
            self.unseen_d = [[] for _ in self.live]
        p_next = p
        if M > 1:  # (only when something is drafted)
            self.draft.repeat(M)
            p = p.repeat_interleave(M, 0)
        U = None
        if L and not self.sampling.greedy:  # each prompt's uniforms for its own block, drawn up front (padding: ½)
            U = torch.full((B * M, L), 0.5, dtype=torch.float64, device=self.dev)
            for j, Lj in enumerate(lengths):
                if Lj:
                    U[j * M:(j + 1) * M, :Lj] = draft_uniforms(self.g[j], Lj, M, self.dev)
        drafting = [Lr > 0 for Lr in lengths]  # prompts still drafting (only a history draft is watched: on the host)
        cut = list(lengths)  # a block ends early where the draft proposes nothing (one draft row, as on one prompt)
        proposes = getattr(self.pair.draft, "proposes", None) if self.draft is not None and M == 1 else None
        xs, ps = [], []
        for i in range(L):
            if proposes is not None:
                for j in range(B):
                    if drafting[j] and not proposes(tuple(self.draft.history[j])):
                        drafting[j], cut[j] = False, i
            x = p.argmax(-1) if U is None else kernels.sample_index(p, U[:, i])  # no host synchronisation
            drafting = [d and i + 1 < Lj for d, Lj in zip(drafting, lengths)]
            xs.append(x)
            ps.append(p)
            if i + 1 < L:
                logits = self.draft.feed(x[:, None], torch.ones_like(x[:, None], dtype=torch.bool), 1)
                p = self.sampling.probs(logits[:, -1].double(), check=False)
        X = torch.stack(xs, 1) if L else torch.zeros((B * M, 0), dtype=torch.long, device=self.dev)
        P = torch.stack(ps, 1) if L else None  # float64, as every law here
        return X, P, cut, p_next

    def _verify(self, X, P, L: int, M: int, p_next):
        """One target call on every row: the unseen tokens and the block; the target's laws ``(B M, L + 1, V)``.
        NaN logits are refused here, the target's and the draft's (``P``, and ``p_next``: a tracked draft's law
        when nothing is drafted)."""
        ids, present = _right_aligned(self.unseen_t, self.dev)
        if M > 1:
            self.target.repeat(M)
            ids, present = ids.repeat_interleave(M, 0), present.repeat_interleave(M, 0)
        logits = self.target.feed(torch.cat([ids, X], 1), torch.cat([present, torch.ones_like(X, dtype=torch.bool)], 1),
                                  L + 1)
        Q = self.sampling.probs(logits.double(), check=False)
        check_laws(Q, *(law for law in (P, p_next) if law is not None))  # one synchronisation per round
        self.unseen_t = [[] for _ in self.live]
        return Q

    def _blocks(self, X_host: list, cut: list[int], M: int) -> list[tuple[int, bool]]:
        """Per prompt: its own block length (cut after a drafted EOS) and whether a bonus may follow."""
        from speculab.backends.decode import bonus_possible

        blocks = []
        for j, r in enumerate(self.live):
            Lr = cut[j]
            if M == 1 and self.eos is not None and self.eos in X_host[j][:Lr]:
                Lr = X_host[j].index(self.eos) + 1
            last = X_host[j * M][Lr - 1] if Lr else None  # row 0 of the prompt (only one row counts)
            blocks.append((Lr, bonus_possible(Lr, self.remaining(r), M, last, self.eos)))
        return blocks

    def _decide(self, blocks, P, Q, X, u, M: int) -> list[_Decision]:
        """Each prompt's decision, drawn from its method's round law; prompts with equal blocks share one call."""
        decided = [None] * len(blocks)
        V, R = Q.size(-1), self.method.rows  # the law sees all R draft rows, as on one prompt: in a round drafting
        # nothing (M = 1) a prompt's one row stands for its R rows, which would all be equal (views, no copies)
        for key in sorted(set(blocks)):
            group = [j for j, b in enumerate(blocks) if b == key]
            Lr, bonus = key
            G = len(group)
            at = torch.tensor([j * M + m for j in group for m in range(M)], device=self.dev)
            Pg = P[at, :Lr].reshape(G, M, Lr, V) if Lr else torch.zeros((G, R, 0, V), dtype=Q.dtype, device=self.dev)
            law = self.method.round_law(Pg, Q[at, :Lr + 1].reshape(G, M, Lr + 1, V).expand(G, R, -1, -1),
                                        X[at, :Lr].reshape(G, M, Lr).expand(G, R, -1), bonus=bonus)
            pick = torch.tensor(group, device=self.dev)
            row, tau, token = sample_round(law, u[pick, 0], u[pick, 1])
            mean, var = law.expected_accepted()
            for gi, j in enumerate(group):
                decided[j] = _Decision(law, gi, int(row[gi]), int(tau[gi]), int(token[gi]), float(mean[gi]),
                                       float(var[gi]))
        return decided

    def _apply(self, decided, blocks, P, Q, X, X_host, L: int, M: int, p_next) -> list[bool]:
        """Record each prompt's round, extend its output and roll both caches back to what it accepted; returns
        which prompts have finished."""
        from speculab.backends.decode import RoundInfo, record_round

        V = Q.size(-1)
        drop_d, drop_t, finished, followed = [], [], [], []
        for j, r in enumerate(self.live):
            law, gi, row, tau, token, mean, var = decided[j]
            Lr, e = blocks[j][0], j * M + (row if M > 1 else 0)  # with M = 1 every row of the law is the prompt's one
            followed.append(e)
            out = self.builders[r]
            out.counts["oracle_calls"] += 1
            out.counts["draft_calls"] += M * Lr
            out.add_round(Lr, tau, mean, var)
            Pr = P[e, :Lr] if Lr else torch.zeros((0, V), dtype=Q.dtype, device=self.dev)
            if self.on_round is not None:  # every draft row, as on one prompt (a round drafting nothing has M = 1)
                R, mine = self.method.rows, slice(j * M, (j + 1) * M)
                Pb = P[mine, :Lr] if Lr else torch.zeros((R, 0, V), dtype=Q.dtype, device=self.dev)
                self.on_round(RoundInfo(self.index[j], Pb, Q[mine, :Lr + 1].expand(R, -1, -1),
                                        X[mine, :Lr].expand(R, -1),
                                        type(law)(*(None if f is None else f[gi:gi + 1] for f in law)), row, tau))
            tracked = None
            if Lr == 0 and self.track_draft and p_next is not None:  # autoregressive, the draft alongside
                tracked = lambda q, j=j: float(kernels.tv(p_next[j], q))  # noqa: E731
            new = record_round(out, law, gi, Pr, Q[e, :Lr + 1], X_host[e][:Lr], row, tau, token, Lr, self.eos, tracked)
            self.ids[r].extend(new)
            # the caches hold x_1..x_{L−1} (draft) and x_1..x_L (target): keep the accepted ones
            kept = min(tau, Lr)
            drop_d.append(max(L - 1, 0) - min(kept, max(L - 1, 0)))
            drop_t.append(L - kept)
            self.unseen_t[j] = new[kept:]  # the correction or bonus (and, after a full block, x_L for the draft)
            self.unseen_d[j] = new[min(kept, max(L - 1, 0)):] if L else new
            finished.append((self.eos is not None and self.eos in new) or self.remaining(r) <= 0)
        if M > 1:  # every prompt goes on with the row it followed
            rows = torch.tensor(followed, dtype=torch.long, device=self.dev)
            self.target.keep(rows)
            self.draft.keep(rows)
        self.target.drop_last(torch.tensor(drop_t, device=self.dev))
        if self.draft is not None:
            self.draft.drop_last(torch.tensor(drop_d, device=self.dev))
        return finished

    def _retire(self, finished: list[bool]) -> None:
        """Finished prompts leave the batch (their rows dropped from both models)."""
        if any(finished):
            keep = [j for j, f in enumerate(finished) if not f]
            rows = torch.tensor(keep, dtype=torch.long, device=self.dev)
            if keep:
                self.target.keep(rows)
                if self.draft is not None:
                    self.draft.keep(rows)
            self.live = [self.live[j] for j in keep]
            self.index = [self.index[j] for j in keep]
            self.g = [self.g[j] for j in keep]
            self.unseen_t = [self.unseen_t[j] for j in keep]
            self.unseen_d = [self.unseen_d[j] for j in keep]
