"""Independent brute-force reference for rejection-based (speculative) decoding.

Exactly enumerates every branch of [Yin] Algorithm 2 on a tiny Markov instance
(P = draft, Q = target, both shape (T, V, V); rho shape (V,)), run literally:
each round drafts the whole chain of L tokens, then scans it.  Uses only numpy
and the standard library; it deliberately does not import ``speculab``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Enumeration:
    """Exact law of (x_0..x_T) plus exact expectations of the decoding counters."""
    law: dict
    rejections_per_position: np.ndarray  # (T,) P(position n produced by a rejection)
    bonus_per_position: np.ndarray  # (T,) P(position n is a bonus token)
    rejections: float
    oracle_calls: float
    draft_calls: float
    accepted: float
    discarded: float
    bonus: float
    rejections_sq: float
    oracle_calls_sq: float


def enumerate_decoding(P, Q, rho, B, R, K=None) -> Enumeration:
    """Enumerate all branches of rejection-based decoding with lookahead K (None = unlimited).

    Per-position marks: 'a' accepted draft, 'r' rejection sample, 'b' bonus token.
    """
    P, Q, B, R = (np.asarray(A, dtype=float) for A in (P, Q, B, R))
    rho = np.asarray(rho, dtype=float)
    T, V, _ = P.shape
    law: dict = {}
    rej_pos, bonus_pos = np.zeros(T), np.zeros(T)
    mom = dict.fromkeys(["rej", "orc", "drf", "acc", "bon", "rej2", "orc2"], 0.0)

    def leaf(prefix, marks, w, oracle, draft):
        law[prefix] = law.get(prefix, 0.0) + w
        nr, na, nb = marks.count("r"), marks.count("a"), marks.count("b")
        for i, m in enumerate(marks):
            if m == "r":
                rej_pos[i] += w
            elif m == "b":
                bonus_pos[i] += w
        for key, val in (("rej", nr), ("orc", oracle), ("drf", draft), ("acc", na),
                         ("bon", nb), ("rej2", nr * nr), ("orc2", oracle * oracle)):
            mom[key] += w * val

    def round_(prefix, marks, w, oracle, draft):
        """Start a round at position n = len(prefix) (prefix holds x_0..x_{n-1})."""
        n = len(prefix)
        if n > T:
            return leaf(prefix, marks, w, oracle, draft)
        L = T - n + 1 if K is None else min(K, T - n + 1)
        for chain in itertools.product(range(V), repeat=L):
            pc, prev = w, prefix[-1]
            for t, x in enumerate(chain, start=n):
                pc *= P[t - 1, prev, x]
                prev = x
            if pc > 0:
                scan(prefix, marks, chain, 0, pc, oracle + 1, draft + L)

    def scan(prefix, marks, chain, i, w, oracle, draft):
        """Decide on draft chain[i] for position n = len(prefix)."""
        n, prev, L = len(prefix), prefix[-1], len(chain)
        if i == L:  # all drafts accepted
            if K is not None and L == K and n <= T:
                for y in range(V):
                    pb = w * Q[n - 1, prev, y]
                    if pb > 0:
                        round_(prefix + (y,), marks + "b", pb, oracle, draft)
                return
            return round_(prefix, marks, w, oracle, draft)
        x = chain[i]
        a = B[n - 1, prev, x]
        if a > 0:
            scan(prefix + (x,), marks + "a", chain, i + 1, w * a, oracle, draft)
        if a < 1:
            for y in range(V):
                pr = w * (1.0 - a) * R[n - 1, prev, y]
                if pr > 0:
                    round_(prefix + (y,), marks + "r", pr, oracle, draft)

    for x0 in range(V):
        if rho[x0] > 0:
            round_((x0,), "", float(rho[x0]), 0, 0)
    return Enumeration(law=law, rejections_per_position=rej_pos, bonus_per_position=bonus_pos,
                       rejections=mom["rej"], oracle_calls=mom["orc"], draft_calls=mom["drf"],
                       accepted=mom["acc"], discarded=mom["drf"] - mom["acc"], bonus=mom["bon"],
                       rejections_sq=mom["rej2"], oracle_calls_sq=mom["orc2"])


def sequence_law(P, rho) -> dict:
    """Exact law of (x_0..x_T) for the Markov chain x_0 ~ rho, x_n ~ P[n-1, x_{n-1}]."""
    P, rho = np.asarray(P, dtype=float), np.asarray(rho, dtype=float)
    T, V, _ = P.shape
    law = {}
    for seq in itertools.product(range(V), repeat=T + 1):
        w = rho[seq[0]] * np.prod([P[n - 1, seq[n - 1], seq[n]] for n in range(1, T + 1)])
        if w > 0:
            law[seq] = float(w)
    return law


def sd_arrays(P, Q):
    """Speculative decoding: B = min(1, Q/P) (1 where P == 0), R = normalised (Q - P)^+ rows."""
    P, Q = np.asarray(P, dtype=float), np.asarray(Q, dtype=float)
    B = np.divide(Q, P, out=np.ones_like(P), where=P > Q)  # ratio < 1 there: no overflow
    res = np.maximum(Q - P, 0.0)
    tot = res.sum(axis=-1, keepdims=True)
    R = np.divide(res, tot, out=np.zeros_like(res), where=tot > 0)
    return B, R


def _law_gap(a: dict, b: dict) -> float:
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    T, V = 3, 3
    P = rng.dirichlet(np.ones(V), size=(T, V))
    Q = rng.dirichlet(np.ones(V), size=(T, V))
    rho = rng.dirichlet(np.ones(V))
    B, R = sd_arrays(P, Q)
    target = sequence_law(Q, rho)
    for K in (None, 1, 2):
        e = enumerate_decoding(P, Q, rho, B, R, K)
        gap = _law_gap(e.law, target)
        assert gap < 1e-12, (K, gap)
        assert abs(sum(e.law.values()) - 1.0) < 1e-12
        print(f"K={K}: law gap {gap:.2e}, E[rej]={e.rejections:.6f}, E[calls]={e.oracle_calls:.6f}")
    e = enumerate_decoding(P, Q, rho, B, R, None)
    mu, expected = rho, 0.0
    for n in range(T):
        expected += mu @ (0.5 * np.abs(P[n] - Q[n]).sum(axis=1))
        mu = mu @ Q[n]
    assert abs(e.rejections - expected) < 1e-12, (e.rejections, expected)
    print(f"K=None rejections {e.rejections:.12f} == sum mu*TV {expected:.12f}; OK")
