"""Token trees on real models: each round drafts a tree and verifies it with one target call (tree attention).

Convention: ``p`` = draft, ``q`` = target, after the same sampling warp. Prompts are the rows of one batch, as on
the chain path (:mod:`speculab.backends.batched`), and a round for every live row is:

* **drafting, level by level.** The draft catches up on the tokens it has not seen (its law at the root), then
  feeds the nodes of each depth ``d < H`` together in one forward call with a mask of their own — each node
  attends the row's valid tokens and its own ancestors in the tree — and reads its law at each of them. A node's
  children are drawn from its law with :func:`~speculab.methods.tree.draft_children` (i.i.d. or distinct, as the
  method says), each child with its own uniform of the prompt's stream (lane ``1 + j`` for node ``j``: a chain
  draws SD's), and an end-of-sequence node has none (the output ends there, as a chain's block does). Every row
  drafts the batch's largest round tree; a row nearer its last token reads only the nodes of its own cut tree
  (:meth:`~speculab.methods.tree.TreeMethod.round_tree`), the others are computed and ignored.
* **one target call**: the tokens the target has not seen and every node of the tree, in one forward pass whose
  4-D mask lets each node attend the row's tokens and its ancestors only, at position ids counted along its path:
  the target's law at the root and at every node.
* **the decision**: the method's round law in the node layout (:meth:`~speculab.methods.tree.TreeMethod.round_law`,
  the simulators' code), evaluated once per round tree present (rows grouped by their cut), drawn with
  :func:`~speculab.methods.tree.sample_tree_round` from the prompt's two uniforms.
* **the caches keep the accepted path only**: a node's column is fed as not yet one of the row's tokens and made
  one when the path through it is accepted (:meth:`~speculab.backends.batched.HFRows.validate`); the rest stay
  masked and are dropped when the cache is compacted, as refused drafts are on the chain path.

A round's records are the chain path's (:class:`~speculab.backends.rounds.Chunk`): per output position the draft's
and target's TV at the node it was decided at, the conditional probability of a correction there
(``P(end = v | reached v)``), ``log q`` of the token; per round the drafted nodes, the accepted depth and its exact
mean and variance given the drafted tree. Hugging Face draft and target models whose attention takes a 4-D mask and
position ids (``sdpa`` or ``eager`` attention, no sliding window).
"""

from __future__ import annotations

import math
import weakref

import numpy as np
import torch
import torch.nn.functional as F

from speculab import kernels
from speculab.backends.batched import HFRows, RoundLoop, batchable, right_aligned
from speculab.backends.models import HFModel
from speculab.backends.rounds import Chunk, Records, RoundInfo, cut_at_eos
from speculab.backends.streams import OUTCOME, TOKEN, key_words, uniforms
from speculab.backends.warp import nan_flag
from speculab.counts import BONUS, CORRECTION, DRAFT
from speculab.methods.tree import Tree, draft_children, sample_tree_round

__all__ = ["decode_trees", "check_tree_pair"]


def check_tree_pair(method, pair) -> None:
    """Refuse, naming what is missing, a pair on which tree rounds cannot run: Hugging Face draft and target whose
    attention takes a 4-D mask (``sdpa`` or ``eager``) and reads positions from ``position_ids``."""
    name = type(method).__name__
    if not (isinstance(pair.draft, HFModel) and isinstance(pair.target, HFModel)):
        raise ValueError(
            f"{name} on real models needs Hugging Face draft and target models (tree attention); got "
            f"{type(pair.draft).__name__} and {type(pair.target).__name__}"
        )
    if not batchable(method, pair):
        raise ValueError(
            f"{name} needs models whose attention reads position ids over the whole cache (no sliding window, no ALiBi)"
        )
    for role, m in (("draft", pair.draft), ("target", pair.target)):
        kind = getattr(m.model.config, "_attn_implementation", "eager")
        if kind not in ("sdpa", "eager"):
            raise ValueError(f"{name}'s tree attention needs sdpa or eager attention; the {role} uses {kind!r}")
        if not _takes_tree_masks(m):
            import transformers

            raise ValueError(
                f"{name}'s tree attention needs a model that reads a 4-D attention mask; the {role} "
                f"({type(m.model).__name__}, transformers {transformers.__version__}) does not: upgrade transformers"
            )


_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # by the model itself: an id is reused once freed


def _takes_tree_masks(adapter) -> bool:
    """Whether the model reads a 4-D additive mask as given (older transformers flatten it): two tokens at position
    0 that may not see each other must each get the logits of a lone token (checked once per model). NaN logits
    count as equal here: a broken model is refused by the round's NaN check, not called an old transformers."""
    key = adapter.model
    if key not in _PROBED:
        model, dev = adapter.model, adapter.device
        ids = torch.tensor([[1, 2]], device=dev)
        dtype = model.dtype
        mask = torch.full((1, 1, 2, 2), torch.finfo(dtype).min, dtype=dtype, device=dev)
        mask[0, 0].fill_diagonal_(0.0)
        try:
            with torch.inference_mode():
                both = model(input_ids=ids, attention_mask=mask, position_ids=torch.zeros_like(ids)).logits[0, 1]
                alone = model(input_ids=ids[:, 1:], position_ids=torch.zeros_like(ids[:, 1:])).logits[0, 0]
            _PROBED[key] = bool(torch.allclose(both.float(), alone.float(), atol=1e-3, rtol=1e-3, equal_nan=True))
        except (RuntimeError, ValueError, TypeError):
            _PROBED[key] = False
    return _PROBED[key]


def decode_trees(
    pair, encoded, method, *, max_new_tokens: int, sampling, seeds, on_round=None, batch_size=None, first_index=0
):
    """Decode the prompts ``encoded`` with a tree method in batches of ``batch_size`` rows (module docstring); one
    ``(tokens, RunRecord, RoundRecord, counts)`` per prompt, as :func:`~speculab.backends.batched.decode_batched`.
    ``on_round`` gets a :class:`~speculab.backends.rounds.RoundInfo` per prompt and round in the node layout: ``p``,
    ``q`` ``(N + 1, V)`` and ``drafts`` ``(N + 1,)`` over the prompt's round tree, its
    :class:`~speculab.methods.tree.TreeLaw`, the end node as ``row`` and its depth as ``accepted``."""
    size = len(encoded) if batch_size is None else batch_size
    out = []
    for start in range(0, len(encoded), size):
        rows = slice(start, start + size)
        batch = _TreeBatch(pair, encoded[rows], method, max_new_tokens, sampling, seeds[rows], on_round)
        batch.first_index = first_index + start
        out.extend(batch.run())
    return out


class _Layout:
    """A round tree's static structure as device tensors: depths, ancestors, descendants, the draft's levels."""

    def __init__(self, tree: Tree, dev):
        N1, H = tree.size + 1, tree.height
        self.tree, self.N1, self.H = tree, N1, H
        self.depth = torch.tensor(tree.depth, device=dev)
        self.inner = torch.tensor([bool(c) for c in tree.children], device=dev)
        self.anc = torch.from_numpy(tree.ancestors).to(dev)  # (N + 1, H): j's node at each depth 1..H
        self.over = torch.from_numpy(tree.above).to(dev)  # over[a, j]: a is j or an ancestor of j
        # the draft feeds the nodes of depth 1..H-1, level by level: their order is its columns' order
        self.levels = [[j for j in range(1, N1) if tree.depth[j] == d] for d in range(1, H)]
        # the nodes of the tree cut to L levels, for every L (a row nearer its last token reads only those)
        self.keep = {L: torch.tensor([j for j in range(N1) if tree.depth[j] <= L], device=dev) for L in range(1, H + 1)}
        self.fed = torch.tensor([j for level in self.levels for j in level], dtype=torch.long, device=dev)


class _TreeBatch(RoundLoop):
    """One batch of prompts decoded with a tree method (module docstring)."""

    def __init__(self, pair, prompts, method, max_new, sampling, seeds, on_round=None):
        self.pair, self.method, self.sampling, self.on_round = pair, method, sampling, on_round
        self.first_index = 0
        self.max_new, self.eos, self.dev = max_new, pair.eos_token_id, pair.device
        B = len(prompts)
        self.records = Records(B)
        self.run_ids = torch.arange(B, device=self.dev)
        self.keys = key_words(seeds, self.dev)
        self.round_index = 0
        self.remaining = np.full(B, max_new, dtype=np.int64)
        self.remaining_dev = torch.full((B,), max_new, dtype=torch.long, device=self.dev)
        # round lengths by tokens to go, tabulated once (the method's draft_length is a Python function)
        self.table = np.array([0] + [method.draft_length(r) for r in range(1, max_new + 1)], dtype=np.int64)
        self.table_dev = torch.from_numpy(self.table).to(self.dev)
        self.target, self.draft = HFRows(pair.target, B), HFRows(pair.draft, B)
        self.unseen_t = self.unseen_d = right_aligned(prompts, self.dev)
        self.layouts: dict[Tree, _Layout] = {}

    def layout(self, tree: Tree) -> _Layout:
        if tree not in self.layouts:
            self.layouts[tree] = _Layout(tree, self.dev)
        return self.layouts[tree]

    def round(self) -> None:
        method, dev = self.method, self.dev
        big = self.layout(method.round_tree(int(self.remaining.max())))  # every row drafts the largest round tree
        N1 = big.N1
        U = uniforms(self.keys, self.round_index, torch.arange(1 + N1, device=dev))  # (B, N + 2): node j at 1 + j
        x, P = self._draft(big, U)
        Q = self._verify(big, x)
        nan = nan_flag(P, Q)
        self.refuse_nan_before_telling(nan)
        end, token, mean, var, drafted, ends = self._decide(big, P, Q, x, U)
        chunk, produced, eos_hit, path_region = self._output(big, P, Q, x, end, token, mean, var, drafted, ends)
        self.records.add(self.run_ids, chunk)
        self._keep_path(big, x, end, token, path_region)
        self.remaining_dev = self.remaining_dev - produced
        self.finish_round(self.remaining_dev, eos_hit | (self.remaining_dev <= 0), nan)

    # -- the steps of a round ---------------------------------------------------------------------------------
    def _draft(self, big: _Layout, U):
        """Every node's token ``(B, N + 1)`` (``x[:, 0]`` unused, ``-1`` absent) and the draft's law at every
        node's prefix ``(B, N + 1, V)`` float64 (zeros at the leaves of depth ``H``, where nothing is drafted)."""
        tree, B = big.tree, self.remaining.size
        ids, present = self.unseen_d
        p_root = self.sampling.probs(self.draft.feed(ids, present, 1)[:, -1].double(), check=False)  # (B, V)
        V = p_root.size(-1)
        P = p_root.new_zeros((B, big.N1, V))
        P[:, 0] = p_root
        x = torch.full((B, big.N1), -1, dtype=torch.long, device=self.dev)
        base = self.draft.valid.clone()  # each row's tokens: the nodes of depth d sit at position base + d - 1
        fed = 0
        for d in range(big.H):
            parents = [0] if d == 0 else big.levels[d - 1]
            for u in parents:  # draw the children of the level's nodes
                kids = list(tree.children[u])
                if kids:  # an absent node has no children, nor has an end of sequence (as a chain stops drafting)
                    alive = (x[:, u] >= 0) & (x[:, u] != (-1 if self.eos is None else self.eos))
                    law = P[:, 0] if u == 0 else torch.where(alive[:, None], P[:, u], 0.0)
                    x[:, kids] = draft_children(law, U[:, [1 + k for k in kids]], self.method.draws)
            if d + 1 < big.H:  # feed the next level's nodes: their laws
                level = big.levels[d]
                cols = big.fed[: fed + len(level)]  # the round's draft columns so far, this level's last
                allow = big.over[cols][:, level].T  # (n_d, R): a node sees its ancestors and itself
                pos = base[:, None] + d  # depth d + 1 nodes
                logits = self.draft.feed_masked(
                    x[:, level].clamp(min=0),
                    pos.expand(-1, len(level)),
                    allow[None].expand(B, -1, -1),
                    torch.zeros((B, len(level)), dtype=torch.bool, device=self.dev),
                    len(level),
                )
                P[:, level] = self.sampling.probs(logits.double(), check=False)
                fed += len(level)
        self.draft_region = (self.draft.mask.size(1) - fed, fed)
        return x, P

    def _verify(self, big: _Layout, x):
        """One target call: the unseen tokens and every node; the target's law at the root and every node
        ``(B, N + 1, V)``."""
        ids, present = self.unseen_t
        B, w = ids.shape
        N = big.N1 - 1
        base = self.target.valid
        causal = torch.ones((w, w), dtype=torch.bool, device=self.dev).tril()
        top = causal[None] & present[:, None, :]  # (B, w, w): the unseen tokens, causally, where present
        nodes = torch.cat(
            [present[:, None, :].expand(-1, N, -1), big.over[1:, 1:].T[None].expand(B, -1, -1)], 2
        )  # (B, N, w + N): every present unseen token, the node's ancestors and itself
        allow = torch.cat([F.pad(top, (0, N)), nodes], 1)  # (B, w + N, w + N)
        seen = present.long().sum(-1)
        pos = torch.cat([base[:, None] + present.long().cumsum(-1) - 1, (base + seen)[:, None] + big.depth[1:] - 1], 1)
        valid = torch.cat([present, torch.zeros((B, N), dtype=torch.bool, device=self.dev)], 1)
        logits = self.target.feed_masked(torch.cat([ids, x[:, 1:].clamp(min=0)], 1), pos, allow, valid, N + 1)
        self.target_region = (self.target.mask.size(1) - N, N)
        return self.sampling.probs(logits.double(), check=False)

    def _decide(self, big: _Layout, P, Q, x, U):
        """Each row's end node (in the largest tree's numbering) and token, from the law of its own round tree;
        ``E[τ]``, ``Var[τ]``, its drafted nodes and ``P(end = j)`` of every node for the records."""
        B, dev = self.remaining.size, self.dev
        end = torch.zeros(B, dtype=torch.long, device=dev)
        token = torch.zeros(B, dtype=torch.long, device=dev)
        mean, var = (torch.zeros(B, dtype=P.dtype, device=dev) for _ in range(2))
        drafted = torch.zeros(B, dtype=torch.long, device=dev)
        ends = P.new_zeros((B, big.N1))
        lengths = self.table[self.remaining]  # each row's round: its tree cut to L levels, a bonus iff L < remaining
        for L in np.unique(lengths).tolist():
            for bonus in (True, False):
                rows_np = np.flatnonzero((lengths == L) & ((self.remaining > L) == bonus))
                if rows_np.size == 0:
                    continue
                rows = torch.from_numpy(rows_np).to(dev)
                own, keep = big.tree.truncated(L), big.keep[L]
                p, q, xs = P[rows][:, keep], Q[rows][:, keep], x[rows][:, keep]
                law = self.method.round_law(p, q, xs, bonus=bonus)
                j, y = sample_tree_round(law, U[rows, OUTCOME], U[rows, TOKEN])
                depth = torch.tensor(own.depth, dtype=P.dtype, device=dev)
                m = law.end @ depth
                end[rows], token[rows] = keep[j], y
                mean[rows], var[rows] = m, law.end @ depth**2 - m * m
                drafted[rows] = (xs[:, 1:] >= 0).sum(-1)
                ends[rows[:, None], keep[None, :]] = law.end
                if self.on_round is not None:  # one read of the group's decisions, then each prompt's own round
                    for i, (r, e) in enumerate(zip(rows_np.tolist(), j.tolist())):
                        one = type(law)(*(f[i : i + 1] for f in law))
                        run = self.first_index + int(self.run_ids[r])
                        self.on_round(RoundInfo(run, p[i], q[i], xs[i], one, e, own.depth[e]))
        return end, token, mean, var, drafted, ends

    def _output(self, big: _Layout, P, Q, x, end, token, mean, var, drafted, ends):
        """The round's :class:`~speculab.backends.rounds.Chunk` (positions along the accepted path), tokens output
        per row, whether an EOS was output, and each row's accepted path as a ``(B, N)`` mask over the nodes."""
        B, H, dev = end.size(0), big.H, self.dev
        own = self.table_dev[self.remaining_dev]  # each row's L
        depth = big.depth[end]  # (B,)
        path = big.anc[end]  # (B, H): the node at each depth 1..H (0 past the end)
        slot = torch.arange(H + 1, device=dev)[None, :]
        t = depth[:, None]
        prefix = torch.cat([torch.zeros((B, 1), dtype=torch.long, device=dev), path], 1)[:, : H + 1]  # node before
        b = torch.arange(B, device=dev)[:, None]
        drafts = F.pad(x[b, path].clamp(min=0), (0, 1))  # (B, H + 1)
        tokens = torch.where(slot == t, token[:, None].clamp(min=0), drafts)
        has_children = big.inner[None, :] & (big.depth[None, :] < own[:, None])  # (B, N + 1) in each row's own tree
        inner = has_children.gather(1, end[:, None])
        output = slot < t + (token[:, None] >= 0)
        kind = torch.where(slot < t, DRAFT, torch.where(inner, CORRECTION, BONUS))
        checked = slot < t + inner.long()
        p_at, q_at = P[b, prefix], Q[b, prefix]  # (B, H + 1, V): the laws at each position's node
        reach = ends @ big.over.T.to(ends.dtype)  # (B, N + 1): P(the path reaches j) = Σ over j's subtree
        at_end = ends.gather(1, prefix)
        here = reach.gather(1, prefix)
        stop = torch.where(here > 0, at_end / torch.where(here > 0, here, 1.0), 0.0)
        stop = torch.where(has_children.gather(1, prefix), stop, 0.0)  # a leaf: nothing is refused there
        reject = torch.where(checked, stop, 0.0)
        accept = torch.where(checked, 1.0 - stop, math.nan)
        tv = torch.where(checked, kernels.tv(p_at, q_at), math.nan)
        logq = torch.log(q_at.gather(-1, tokens[..., None])[..., 0])
        valid, eos_hit = cut_at_eos(output, tokens, self.eos)
        zeros = torch.zeros_like(tv)
        chunk = Chunk(
            tokens,
            kind,
            tv,
            reject,
            accept,
            zeros,
            zeros,
            logq,
            valid,
            drafted,
            depth,
            mean,
            var,
            torch.ones_like(depth),
            drafted,
        )
        on_path = big.over[1:][:, end].T  # (B, N): node j is on the path to the end node
        return chunk, valid.sum(-1), eos_hit, on_path

    def _keep_path(self, big: _Layout, x, end, token, on_path) -> None:
        """Both caches keep the accepted path's columns; the tokens each model is fed next round."""
        start, n = self.target_region
        self.target.validate(start, on_path)
        start, n = self.draft_region
        if n:
            self.draft.validate(start, on_path[:, big.fed - 1])
        B, dev = end.size(0), self.dev
        follows = token >= 0
        self.unseen_t = token.clamp(min=0)[:, None], follows[:, None]
        unfed = big.depth[end] == big.H  # a path to the deepest level ends at a node the draft never fed
        self.unseen_d = (
            torch.stack([x[torch.arange(B, device=dev), end].clamp(min=0), token.clamp(min=0)], 1),
            torch.stack([unfed & (end > 0), follows], 1),
        )

    def _retire(self, keep: np.ndarray) -> None:
        rows = torch.from_numpy(keep).to(self.dev)
        if keep.size:
            self.target.keep(rows)
            self.draft.keep(rows)
        self.run_ids, self.keys = self.run_ids[rows], self.keys[rows]
        self.remaining, self.remaining_dev = self.remaining[keep], self.remaining_dev[rows]
        self.unseen_t = tuple(t[rows] for t in self.unseen_t)
        self.unseen_d = tuple(t[rows] for t in self.unseen_d)
