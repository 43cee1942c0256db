"""The JAX engine for tree methods (:class:`~speculab.methods.capabilities.TreeDrafting`): one round at a time,
each run's tree drafted node by node inside the scan, decided by the method's own round law in the node layout,
then emitted one position at a time — :mod:`speculab.sim.jax_engine`'s round-by-round reading with a tree for a
block.

Positions are grouped into segments where a round starting there drafts the same truncated tree with the same
bonus availability, so every shape is static. Each position draws ``N + 2`` uniforms per run (``N`` the largest
tree's nodes: one per drafted node, one for the end node, one for the token after it).
"""

from __future__ import annotations

import numpy as np

from speculab.counts import BONUS, CORRECTION, DRAFT
from speculab.methods.tree import Tree, draft_children, sample_tree_round
from speculab.sim.jax_common import _jax, _Tables

__all__ = ["tree_segments", "tree_position", "tree_width"]


def tree_segments(method, T: int) -> list[tuple[int, int, Tree, bool]]:
    """Positions grouped by the round a round starting there has: ``(start, stop, tree, bonus)``."""
    out = []
    for t in range(T):
        tree = method.round_tree(T - t)
        shape = (tree, t + tree.height < T)
        if out and out[-1][2:] == shape:
            out[-1] = (out[-1][0], t + 1, *shape)
        else:
            out.append((t, t + 1, *shape))
    return out


def tree_width(method, T: int) -> int:
    """Uniforms per position and run: the largest round tree's nodes, plus two."""
    return max(method.round_tree(T - t).size for t in range(T)) + 2


def tree_position(method, tree: Tree, bonus: bool, T: int, H_max: int, P, Q, t, state, u):
    """One position of one run of a tree method; ``u`` holds at least ``N + 2`` uniforms.

    ``state = (prev, tokens, kinds, at, size)``: the round in progress emits ``tokens[at]`` (buffers of the
    highest tree's size ``H_max + 1``); a new round starts when ``at == size``.
    """
    jax, jnp = _jax()
    prev, buf_tokens, buf_kinds, at, size = state
    N1, H = tree.size + 1, tree.height
    x = [prev] + [None] * tree.size
    ps, qs = [], []
    for v in range(N1):  # parents come before their children: x[v] is drafted by now
        s = jnp.minimum(t + tree.depth[v], T - 1)  # past the horizon: unused (a leaf drafts nothing, no bonus)
        token = jnp.maximum(x[v], 0)
        p = _Tables.row(P, s, token)
        ps.append(p)
        qs.append(_Tables.row(Q, s, token))
        children = tree.children[v]
        if children:
            law = jnp.where(x[v] >= 0, p, 0.0)
            drafted = draft_children(law, u[np.asarray(children) - 1], method.draws).astype(jnp.int32)
            for i, c in enumerate(children):
                x[c] = drafted[i]
    x = jnp.stack(x)
    law = method.round_law(jnp.stack(ps), jnp.stack(qs), x, bonus=bonus)
    end, token = sample_tree_round(law, u[tree.size], u[tree.size + 1])
    depth = jnp.asarray(tree.depth)[end]
    inner = jnp.asarray([bool(c) for c in tree.children])[end]
    path = jnp.asarray(tree.ancestors)[end]  # (H,): the node at each depth 1..H on the way to ``end``
    slots = jnp.arange(H_max + 1)
    drafts = jnp.concatenate([x[path], jnp.zeros(H_max + 1 - H, dtype=jnp.int32)])
    out = jnp.where(slots == depth, jnp.maximum(token, 0), drafts)
    kinds = jnp.where(slots < depth, DRAFT, jnp.where(inner, CORRECTION, BONUS))
    fresh = at >= size
    buf_tokens = jnp.where(fresh, out.astype(jnp.int32), buf_tokens)
    buf_kinds = jnp.where(fresh, kinds.astype(jnp.int8), buf_kinds)
    size = jnp.where(fresh, depth + (token >= 0), size)
    at = jnp.where(fresh, 0, at)
    drafted = jnp.sum(x[1:] >= 0).astype(jnp.int32)
    x_t, kind_t = buf_tokens[at], buf_kinds[at]
    return (x_t, buf_tokens, buf_kinds, at + 1, size), (x_t, kind_t, fresh, jnp.where(fresh, drafted, 0))
