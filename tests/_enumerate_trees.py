"""Independent brute-force references for token-tree decoding (SPEC TR), numpy and the standard library only.

A tree is given by ``parents`` (``parents[j - 1]`` the parent of node ``j``; node 0 the root). Every round drafts
every possible tree literally — children of a node from the draft at its prefix, i.i.d. or without replacement
(sequentially, the earlier siblings' tokens removed and renormalised; a child with nothing left to draw is absent)
— and runs a verifier written as the paper states it, as a branching procedure (``rrs_verify``), over every branch
of its coins. It deliberately does not import ``speculab``.
"""

from __future__ import annotations

import numpy as np

from _enumerate import _Tally


def depths(parents):
    d = [0]
    for u in parents:
        d.append(d[u] + 1)
    return d


def children_of(parents):
    out = [[] for _ in range(len(parents) + 1)]
    for j, u in enumerate(parents, start=1):
        out[u].append(j)
    return out


def truncate(parents, L):
    """The nodes of depth <= L, renumbered in order."""
    d = depths(parents)
    keep = [j for j in range(1, len(parents) + 1) if d[j] <= L]
    new = {0: 0, **{j: i for i, j in enumerate(keep, start=1)}}
    return [new[parents[j - 1]] for j in keep]


def drafted_trees(parents, law_at, draws):
    """Every drafted tree: ``(tokens, probability)``, ``tokens[0] = None`` (the root), ``-1`` for an absent node.

    ``law_at(node, tokens)`` is the draft's law at that node's prefix (the law its children come from).
    """
    kids = children_of(parents)
    out = []

    def grow(tokens, w, j):
        if j > len(parents):
            out.append((list(tokens), w))
            return
        u = parents[j - 1]
        if u != 0 and tokens[u] == -1:  # the parent is absent: so is the child
            grow(tokens + [-1], w, j + 1)
            return
        law = np.array(law_at(u, tokens), dtype=float)
        if draws == "distinct":
            for sib in kids[u]:
                if sib >= j:
                    break
                if tokens[sib] >= 0:
                    law[tokens[sib]] = 0.0
            if law.sum() <= 0:
                grow(tokens + [-1], w, j + 1)
                return
            law = law / law.sum()
        for y, py in enumerate(law):
            if py > 0:
                grow(tokens + [y], w * py, j + 1)

    grow([None], 1.0, 1)
    return out


def rrs_verify(parents, tokens, p_at, q_at, draws):
    """Recursive rejection sampling, literally (SPEC TR): every branch ``(probability, end node, next-token law)``.

    ``p_at(j)``, ``q_at(j)``: the draft's and target's laws at node ``j``'s prefix. At a node, children are tried
    in order: accept child i with probability min(1, r(x)/p'(x)), else r <- norm((r - p')_+) and (without
    replacement) p' <- p' without x, renormalised; all refused: the next token from r. An accepted leaf: the next
    token from q at the leaf (``None`` when nothing follows is decided by the caller).
    """
    kids = children_of(parents)
    out = []

    def at(u, w):
        if not kids[u]:
            out.append((w, u, np.array(q_at(u), dtype=float)))
            return
        r = np.array(q_at(u), dtype=float)
        base = np.array(p_at(u), dtype=float)
        stay = w
        for c in kids[u]:
            x = tokens[c]
            if x < 0:
                continue
            if base[x] > 0:
                a = min(1.0, r[x] / base[x])
            else:
                a = 1.0 if r[x] > 0 else 0.0
            if a > 0:
                at(c, stay * a)
            stay *= 1.0 - a
            if stay <= 0:
                return
            ex = np.maximum(r - base, 0.0)
            r = ex / ex.sum() if ex.sum() > 0 else ex
            if draws == "distinct":
                base = base.copy()
                base[x] = 0.0
                base = base / base.sum() if base.sum() > 0 else base
        out.append((stay, u, r))

    at(0, 1.0)
    return out


def enumerate_tree_rounds(P, Q, rho, parents, draws, verify=rrs_verify):
    """Every branch of a tree method over the horizon: the law of (x_0..x_T) and the counters' expectations.

    A round at position index t (remaining = T - t tokens) drafts the tree truncated to depth min(height,
    remaining); a leaf at depth = remaining ends the run without a bonus. Marks: 'a' accepted draft, 'r' a
    correction (the end node has children), 'b' a bonus (the end node is a leaf).
    """
    P, Q, rho = (np.asarray(a, dtype=float) for a in (P, Q, rho))
    T, V, _ = P.shape
    tally = _Tally(T)
    height = max(depths(parents))

    def round_(prefix, marks, w, oracle, draft):
        n = len(prefix)
        if n > T:
            return tally.leaf(prefix, marks, w, oracle, draft)
        t, remaining = n - 1, T - n + 1
        L = min(height, remaining)
        tree = truncate(parents, L)
        d = depths(tree)
        kids = children_of(tree)

        def token_at(tokens, j):
            return prefix[-1] if j == 0 else tokens[j]

        for tokens, wt in drafted_trees(tree, lambda u, tk: P[t + d[u], token_at(tk, u)], draws):
            drafted = sum(1 for x in tokens[1:] if x >= 0)

            def p_at(j, tokens=tokens):
                return P[min(t + d[j], T - 1), token_at(tokens, j)]

            def q_at(j, tokens=tokens):
                return Q[t + d[j], token_at(tokens, j)] if t + d[j] < T else np.full(V, 1.0 / V)

            for pr, end, nxt in verify(tree, tokens, p_at, q_at, draws):
                if pr <= 0:
                    continue
                path, j = [], end
                while j != 0:
                    path.append(tokens[j])
                    j = tree[j - 1]
                path = tuple(reversed(path))
                weight = w * wt * pr
                if t + d[end] >= T:  # a leaf at the horizon: nothing follows
                    round_(prefix + path, marks + "a" * len(path), weight, oracle + 1, draft + drafted)
                    continue
                kind = "r" if kids[end] else "b"
                for y in range(V):
                    if nxt[y] > 0:
                        py = weight * nxt[y] / nxt.sum()
                        round_(prefix + path + (y,), marks + "a" * len(path) + kind, py, oracle + 1, draft + drafted)

    for x0 in range(V):
        if rho[x0] > 0:
            round_((x0,), "", float(rho[x0]), 0, 0)
    return tally.result()


def traversal_verify(parents, tokens, p_at, q_at, draws):
    """Traversal verification (Weng et al. 2025, Algorithm 3), literally: every branch ``(probability, end node,
    next-token law)``.

    Keeps the remaining tree explicitly; each step finds the first leaf (from the root, the first remaining child
    until none), tests it with its rate, and on a rejection deletes it, updates its parent's target law, rate and
    (without replacement) draft law, and recomputes every remaining rate top-down.
    """
    n = len(parents) + 1
    kids = children_of(parents)
    alive = {0} | {j for j in range(1, n) if tokens[j] >= 0}
    qn = {j: np.array(q_at(j), dtype=float) for j in alive}
    pn = {j: np.array(p_at(j), dtype=float) for j in alive}
    rate = {0: 1.0}

    def recompute(v):
        for c in kids[v]:
            if c in alive:
                t = tokens[c]
                num, den = rate[v] * qn[v][t], pn[v][t]
                rate[c] = min(1.0, num / den) if den > 0 else (1.0 if num > 0 else 0.0)
                recompute(c)

    recompute(0)
    out, w = [], 1.0
    while True:
        u = 0
        while any(c in alive for c in kids[u]):
            u = next(c for c in kids[u] if c in alive)
        if u == 0:
            out.append((w, 0, qn[0]))
            return out
        if rate[u] > 0:
            out.append((w * rate[u], u, qn[u]))
        w *= 1.0 - rate[u]
        if w <= 0:
            return out
        v = parents[u - 1]
        alive.discard(u)
        ex = np.maximum(rate[v] * qn[v] - pn[v], 0.0)
        S = ex.sum()
        qn[v] = ex / S if S > 0 else ex
        rate[v] = S / (S + 1.0 - rate[v]) if S + 1.0 - rate[v] > 0 else 0.0
        if draws == "distinct":
            pn[v] = pn[v].copy()
            pn[v][tokens[u]] = 0.0
            pn[v] = pn[v] / pn[v].sum() if pn[v].sum() > 0 else pn[v]
        recompute(v)
