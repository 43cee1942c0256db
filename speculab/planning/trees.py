r"""Token trees along a pair's real contexts: each tree verifier's round law, averaged over drafted trees, and the
shapes worth drafting.

Convention: ``p`` = draft, ``q`` = target (both after the sampling's warp). A round of a tree method drafts a tree
``x`` at context ``c`` and outputs the path to its end node and one more token (:mod:`speculab.methods.tree`). At a
real vocabulary the law of the end's depth cannot be enumerated over every drafted tree, but given the tree the
verifier's own round law (:meth:`~speculab.methods.tree.TreeMethod.round_law`) gives it exactly, so its mean over
trees drafted at the contexts ``c_j`` is unbiased for the contexts' mean and no noisier than the measured depth
(Rao–Blackwell), exactly as for a chain (:mod:`speculab.planning.yields`, whose :class:`Yield` it fills: row ``L``
is the tree cut to ``L`` levels, as a round near the horizon drafts it). The tests hold it to the exact enumeration
of every drafted tree on small vocabularies.

**Shapes.** Sequoia's dynamic program (:func:`~speculab.methods.tree_shapes.sequoia_tree`) picks the tree of at
most ``n`` nodes under a positional acceptance ``a_i`` — the chance that RRS accepts a node's ``i``-th child —
estimated here along the contexts the same way: the star's round law given ``k`` children drafted at each context,
averaged (:func:`rank_acceptance_along`). Where the shapes of ``n`` nodes are few, every one is evaluated with the
estimator above and the best kept (:func:`best_shapes`): the program's pick is then compared with the exact best
along the same contexts.

Convention for the node layout (``P``, ``Q`` ``(N + 1, V)``, ``x`` ``(N + 1,)``): :mod:`speculab.methods.tree`.
"""

from __future__ import annotations

import numpy as np
import torch

from speculab._progress import advance, expect, held
from speculab.methods.tree import Tree, draft_children
from speculab.planning.yields import Yield

__all__ = [
    "tree_laws",
    "tree_yield",
    "tree_yields",
    "exact_tree_tokens",
    "rank_acceptance_along",
    "best_shapes",
    "EXACT_NODES",
]

#: Node budgets up to which every ordered tree is evaluated (Catalan(4) = 14 shapes) beside Sequoia's pick.
EXACT_NODES = 4


def _next_laws(model, seqs: list[list[int]], sampling, device) -> torch.Tensor:
    """The warped next-token law after each sequence (all of one length): ``(len(seqs), V)`` float64."""
    logits = model.extend(model.start(), torch.tensor(seqs, dtype=torch.long, device=device), last=True)
    return sampling.probs(logits[:, -1].double())


def tree_laws(pair, ctx: list[int], tree: Tree, sampling, draws: str, rng: torch.Generator):
    """A tree drafted at ``ctx`` level by level from the draft's law at each node's prefix, with the target's law
    there: ``P``, ``Q`` ``(N + 1, V)`` and ``x`` ``(N + 1,)`` in the node layout (``x[0] = -1``; ``-1`` for an absent
    node, whose laws are zero). Each level's prefixes are of one length: one forward call per model and level."""
    N1, V = tree.size + 1, pair.vocab_size
    P = torch.zeros((N1, V), dtype=torch.float64)
    Q = torch.zeros((N1, V), dtype=torch.float64)
    x = torch.full((N1,), -1, dtype=torch.long)
    path = {0: list(ctx)}
    for depth in range(tree.height + 1):
        nodes = [j for j in range(N1) if tree.depth[j] == depth and j in path]
        if not nodes:
            break
        seqs = [path[j] for j in nodes]
        Q[nodes] = _next_laws(pair.target, seqs, sampling, pair.device).cpu()
        inner = [j for j in nodes if tree.children[j]]
        if not inner:
            continue
        P[inner] = _next_laws(pair.draft, [path[j] for j in inner], sampling, pair.device).cpu()
        for j in inner:
            kids = tree.children[j]
            u = torch.rand(len(kids), dtype=torch.float64, generator=rng)
            for c, token in zip(kids, draft_children(P[j], u, draws).tolist()):
                x[c] = token
                if token >= 0:
                    path[c] = path[j] + [token]
    return P, Q, x


def tree_yield(pair, method, ctxs: list[list[int]], *, sampling, rng: torch.Generator) -> Yield:
    """``method``'s :class:`~speculab.planning.yields.Yield` along ``ctxs`` (module docstring): per context and per
    cut ``L = 0..H``, the law of the end node's depth ``P(τ = t)``, and the nodes a round drafts. Not a part of
    the progress display: its caller counts it (:func:`best_shapes`, one tree each)."""
    with held():
        return tree_yields(pair, [method], ctxs, sampling=sampling, rng=rng)[0]


def tree_yields(pair, methods: list, ctxs: list[list[int]], *, sampling, rng: torch.Generator) -> list[Yield]:
    """:func:`tree_yield` of each of ``methods``; verifiers of one tree drafted alike (the same tree and draws) are
    evaluated on the same drafted trees, drafted once per context, and so is a tree that is the first levels of a
    taller one drafted alike (batch SD's ``M`` chains at ``K`` and at ``K' > K``): its rounds read the taller trees
    cut, as a round near the horizon does."""
    groups: dict = {}
    for i, m in enumerate(methods):
        groups.setdefault((m.tree, m.draws), []).append(i)
    out: list = [None] * len(methods)
    order = sorted(groups, key=lambda shape: -shape[0].height)  # the taller first: a shorter cut reads its trees
    source = {}
    for i, (tree, draws) in enumerate(order):
        source[(tree, draws)] = next(
            (t for t in order[:i] if t[1] == draws and source[t] is None and t[0].truncated(tree.height) == tree), None
        )
    readers = {shape: sum(1 for read in source.values() if read == shape) for shape in order}
    expect(len(order), f"exact rounds of {len(methods)} tree verifiers along {len(ctxs)} contexts", unit="tree")
    drawn_for: dict = {}  # a shape's drafted trees, kept while a shorter cut of it is still to read them
    for tree, draws in order:
        members, taller = groups[(tree, draws)], source[(tree, draws)]
        H, n = tree.height, len(ctxs)
        cuts = {L: [j for j in range(tree.size + 1) if tree.depth[j] <= L] for L in range(1, H + 1)}
        depth = torch.tensor(tree.depth)
        outcome = np.zeros((len(members), n, H + 1, H + 1))
        outcome[:, :, 0, 0] = 1.0
        drafted = np.zeros((n, H + 1))
        for L, keep in cuts.items():
            drafted[:, L] = len(keep) - 1
        if taller is not None:  # this shape is a taller one's first H levels: the same drafted trees, cut
            nodes = [j for j in range(taller[0].size + 1) if taller[0].depth[j] <= H]
            P, Q, x = (a[:, nodes] for a in drawn_for[taller])
            readers[taller] -= 1
            if not readers[taller]:
                del drawn_for[taller]
        else:
            drawn = [tree_laws(pair, ctx, tree, sampling, draws, rng) for ctx in ctxs]
            P, Q, x = (torch.stack(a) for a in zip(*drawn))  # (n, N + 1, V) twice, (n, N + 1): every context at once
            if readers[(tree, draws)]:
                drawn_for[(tree, draws)] = (P, Q, x)
        for k, member in enumerate(members):
            for L, keep in cuts.items():
                end = methods[member].round_law(P[:, keep], Q[:, keep], x[:, keep], bonus=True).end  # (n, N_L + 1)
                law = torch.zeros((n, L + 1), dtype=end.dtype).index_add_(1, depth[keep], end)
                outcome[k, :, L, : L + 1] = law.numpy()
        for k, member in enumerate(members):
            out[member] = Yield(outcome[k], drafted.copy(), np.zeros(n))
        advance(1)
    return out


def exact_tree_tokens(method, p: np.ndarray, q: np.ndarray) -> float:
    """``E[τ + 1]`` of one round of the tree ``method`` whose every node has the draft law ``p`` and the target law
    ``q`` (an i.i.d. instance), by enumerating every drafted tree (:func:`~speculab.methods.tree.tree_kernel`) — the
    reference the estimator is tested against on small vocabularies."""
    from speculab.methods.tree import tree_kernel
    from speculab.theory import MarkovInstance

    inst = MarkovInstance.context_free(p, q, method.tree.height + 2)  # past the tree: every leaf has its bonus
    return 1.0 + float(tree_kernel(inst, method, 0).accepted()[0])


def rank_acceptance_along(pair, ctxs: list[list[int]], k: int, *, sampling, draws: str, rng) -> np.ndarray:
    """Sequoia's positional acceptance ``a_1..a_k`` along ``ctxs``: the chance that RRS accepts a node's ``i``-th of
    ``k`` children, from the star's round law given the children drafted at each context, averaged."""
    from speculab.methods import RRS

    star = RRS(Tree((0,) * k), draws=draws)
    P, Q, x = (torch.stack(a) for a in zip(*(tree_laws(pair, c, star.tree, sampling, draws, rng) for c in ctxs)))
    return star.round_law(P, Q, x, bonus=True).end[:, 1:].mean(0).numpy()  # (k,): over the contexts


def search_size(budgets) -> int:
    """The trees :func:`best_shapes` evaluates at ``budgets``: at each budget of at most :data:`EXACT_NODES`
    nodes every ordered shape (Catalan(n)), then the fresh estimates (counted as one)."""
    from speculab.methods.tree_shapes import ordered_trees

    return sum(len(ordered_trees(n)) + 1 for n in budgets if n <= EXACT_NODES)


def best_shapes(pair, rule, ctxs, budgets, acceptance, *, sampling, rng) -> list[dict]:
    """For each node budget ``n`` of ``budgets``: Sequoia's tree under ``acceptance`` and, where ``n ≤``
    :data:`EXACT_NODES`, the best of every ordered tree of ``n`` nodes by tokens per round along ``ctxs`` (each
    shape's own drafted trees; ``rule(tree)`` builds the verifier), with both trees' tokens per round there — both
    evaluated again on freshly drafted trees (with their standard errors over the contexts): the largest of many
    noisy estimates is biased up (the winner's curse), a fresh estimate of the winner is not. Advances the open
    progress display by :func:`search_size` (:mod:`speculab._progress`)."""
    from speculab.methods.tree_shapes import ordered_trees, sequoia_tree

    out = []
    for n in budgets:
        sequoia = sequoia_tree(acceptance, n).tree
        row = {"nodes": n, "sequoia": sequoia, "exact": None, "sequoia_tokens": None, "exact_tokens": None}
        if n <= EXACT_NODES:
            values = {}
            for t in ordered_trees(n):
                values[t] = tree_yield(pair, rule(t), ctxs, sampling=sampling, rng=rng).tokens
                advance(1)
            best = max(values, key=values.get)
            fresh = {t: tree_yield(pair, rule(t), ctxs, sampling=sampling, rng=rng) for t in {best, sequoia}}
            advance(1)
            row.update(
                exact=best,
                exact_tokens=fresh[best].tokens,
                exact_se=fresh[best].se,
                sequoia_tokens=fresh[sequoia].tokens,
                sequoia_se=fresh[sequoia].se,
            )
        out.append(row)
    return out
