"""Independent brute-force references for rejection-based (speculative) decoding.

Exactly enumerates every branch of [Yin] Algorithm 2 on a tiny Markov instance
(P = draft, Q = target, both shape (T, V, V); rho shape (V,)), run literally:
each round drafts the whole chain of L tokens, then scans it.  ``enumerate_batch``
does the same for batch speculative decoding with M independent draft chains
([Yin] Algorithm 4, corrected description).  Uses only numpy and the standard
library; it deliberately does not import ``speculab``.
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


class _Tally:
    """Accumulates the exact law of (x_0..x_T) and the moments of the counters over the leaves of an enumeration.

    A leaf carries its probability, the per-position marks ('a' accepted draft, 'r' rejection
    sample, 'b' bonus token) and the numbers of oracle calls and drafted tokens.
    """

    def __init__(self, T: int):
        self.law: dict = {}
        self.rej_pos, self.bonus_pos = np.zeros(T), np.zeros(T)
        self.mom = dict.fromkeys(["rej", "orc", "drf", "acc", "bon", "rej2", "orc2"], 0.0)

    def leaf(self, prefix, marks, w, oracle, draft):
        self.law[prefix] = self.law.get(prefix, 0.0) + w
        nr, na, nb = marks.count("r"), marks.count("a"), marks.count("b")
        for i, m in enumerate(marks):
            if m == "r":
                self.rej_pos[i] += w
            elif m == "b":
                self.bonus_pos[i] += w
        for key, val in (
            ("rej", nr),
            ("orc", oracle),
            ("drf", draft),
            ("acc", na),
            ("bon", nb),
            ("rej2", nr * nr),
            ("orc2", oracle * oracle),
        ):
            self.mom[key] += w * val

    def result(self) -> "Enumeration":
        m = self.mom
        return Enumeration(
            law=self.law,
            rejections_per_position=self.rej_pos,
            bonus_per_position=self.bonus_pos,
            rejections=m["rej"],
            oracle_calls=m["orc"],
            draft_calls=m["drf"],
            accepted=m["acc"],
            discarded=m["drf"] - m["acc"],
            bonus=m["bon"],
            rejections_sq=m["rej2"],
            oracle_calls_sq=m["orc2"],
        )


def enumerate_decoding(P, Q, rho, B, R, K=None) -> Enumeration:
    """Enumerate all branches of rejection-based decoding with lookahead K (None = unlimited).

    Per-position marks: 'a' accepted draft, 'r' rejection sample, 'b' bonus token.
    """
    P, Q, B, R = (np.asarray(A, dtype=float) for A in (P, Q, B, R))
    rho = np.asarray(rho, dtype=float)
    T, V, _ = P.shape
    tally = _Tally(T)
    leaf = tally.leaf

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
    return tally.result()


def sequence_law(P, rho, *, keep_underflow: bool = False) -> dict:
    """Exact law of (x_0..x_T) for the Markov chain x_0 ~ rho, x_n ~ P[n-1, x_{n-1}].

    ``keep_underflow=True`` also keeps, with weight 0.0, the sequences whose factors are
    all positive but whose product underflows (so a caller can tell them from impossible ones).
    """
    P, rho = np.asarray(P, dtype=float), np.asarray(rho, dtype=float)
    T, V, _ = P.shape
    law = {}
    for seq in itertools.product(range(V), repeat=T + 1):
        factors = [rho[seq[0]]] + [P[n - 1, seq[n - 1], seq[n]] for n in range(1, T + 1)]
        w = float(np.prod(factors))
        if w > 0 or (keep_underflow and all(f > 0 for f in factors)):
            law[seq] = w
    return law


def sd_arrays(P, Q):
    """Speculative decoding: B = min(1, Q/P) (1 where P == 0), R = normalised (Q - P)^+ rows."""
    P, Q = np.asarray(P, dtype=float), np.asarray(Q, dtype=float)
    B = np.divide(Q, P, out=np.ones_like(P), where=P > Q)  # ratio < 1 there: no overflow
    res = np.maximum(Q - P, 0.0)
    tot = res.sum(axis=-1, keepdims=True)
    R = np.divide(res, tot, out=np.zeros_like(res), where=tot > 0)
    return B, R


def enumerate_batch(P, Q, rho, M, K=None) -> Enumeration:
    """Enumerate all branches of batch speculative decoding with M drafts, lookahead K (None = unlimited).

    Each round (one oracle call) drafts M independent chains of length L from x_{n-1}
    (M*L draft calls), enumerated jointly: every combination of the M chains is an explicit
    branch.  The first tokens are tried in order m = 1..M against the recursive residuals
    q^1 = Q[n-1, a], q^{m+1} = normalised [q^m - p]^+ (accept w.p. min(1, q^m/p)); a rejected
    first token just moves on to chain m+1.  The first accepted chain m is continued alone with
    ordinary speculative decoding (min(1, Q/P), residual normalised [Q - P]^+ on rejection, bonus
    token ~ Q if L == K and n <= T after a fully accepted chain).  If all M first tokens are
    rejected, x_n ~ q^{M+1} is a rejection sample.  Per-position marks as in
    ``enumerate_decoding``: 'a' accepted draft, 'r' rejection sample, 'b' bonus token.

    Each round's outcomes (emitted tokens, marks) are summed over the joint drafts before the
    next round starts; this only regroups the sum over branches (counters of a round do not
    depend on which joint draft produced its outcome), so the result is still exact.
    """
    P, Q = np.asarray(P, dtype=float), np.asarray(Q, dtype=float)
    rho = np.asarray(rho, dtype=float)
    T, V, _ = P.shape
    M = int(M)
    assert M >= 1
    tally = _Tally(T)
    leaf = tally.leaf

    def accept_prob(q, p):
        """min(1, q/p) elementwise; the ratio is only formed where q < p (so < 1, no overflow)."""
        return np.divide(q, p, out=np.ones_like(p), where=p > q)

    def residual(q, p):
        """Normalised [q - p]^+; all zeros if its mass is 0 (then it is never used)."""
        res = np.maximum(q - p, 0.0)
        tot = res.sum()
        return res / tot if tot > 0 else np.zeros_like(res)

    def round_outcomes(n, a):
        """Exact law of one round started at position n with x_{n-1} = a.

        Returns (L, {(emitted tokens, their marks): probability}).
        """
        L = T - n + 1 if K is None else min(K, T - n + 1)
        p = P[n - 1, a]
        qs = [Q[n - 1, a]]  # qs[m] = q^{m+1} (0-based chain index m)
        for _ in range(M):
            qs.append(residual(qs[-1], p))
        first_acc = [accept_prob(qs[m], p) for m in range(M)]
        out: dict = {}

        def emit(tokens, marks, w):
            out[(tokens, marks)] = out.get((tokens, marks), 0.0) + w

        def continue_chain(chain, tokens, marks, w):
            """tokens = x_n..x_{t-1} already output (all accepted drafts of chain); decide chain[len(tokens)]."""
            i = len(tokens)
            t, prev = n + i, tokens[-1]
            if i == L:  # whole chain accepted; t = n + L
                if K is not None and L == K and t <= T:
                    for y in range(V):
                        pb = w * Q[t - 1, prev, y]
                        if pb > 0:
                            emit(tokens + (y,), marks + "b", pb)
                    return
                return emit(tokens, marks, w)
            x = chain[i]
            acc = accept_prob(Q[t - 1, prev], P[t - 1, prev])[x]
            if acc > 0:
                continue_chain(chain, tokens + (x,), marks + "a", w * acc)
            if acc < 1:
                res = residual(Q[t - 1, prev], P[t - 1, prev])
                for y in range(V):
                    pr = w * (1.0 - acc) * res[y]
                    if pr > 0:
                        emit(tokens + (y,), marks + "r", pr)

        def try_first(chains, m, w):
            """Decide the first token of chain m (0-based) against q^{m+1}."""
            if m == M:  # all M first tokens rejected
                for y in range(V):
                    pr = w * qs[M][y]
                    if pr > 0:
                        emit((y,), "r", pr)
                return
            x = chains[m][0]
            acc = first_acc[m][x]
            if acc > 0:
                continue_chain(chains[m], (x,), "a", w * acc)
            if acc < 1:
                try_first(chains, m + 1, w * (1.0 - acc))

        single = []  # every single chain of length L from a, with its probability
        for chain in itertools.product(range(V), repeat=L):
            pc, prev = 1.0, a
            for t, x in enumerate(chain, start=n):
                pc *= P[t - 1, prev, x]
                prev = x
            if pc > 0:
                single.append((chain, pc))
        for joint in itertools.product(single, repeat=M):  # all M chains jointly
            w = 1.0
            for _, pc in joint:
                w *= pc
            if w > 0:
                try_first(tuple(c for c, _ in joint), 0, w)
        return L, out

    def round_(prefix, marks, w, oracle, draft):
        """Start a round at position n = len(prefix) (prefix holds x_0..x_{n-1})."""
        n = len(prefix)
        if n > T:
            return leaf(prefix, marks, w, oracle, draft)
        L, outcomes = round_outcomes(n, prefix[-1])
        for (tokens, tmarks), pr in outcomes.items():
            round_(prefix + tokens, marks + tmarks, w * pr, oracle + 1, draft + M * L)

    for x0 in range(V):
        if rho[x0] > 0:
            round_((x0,), "", float(rho[x0]), 0, 0)
    return tally.result()


def enumerate_rounds(P, Q, rho, round_law, draft_length, rows: int = 1) -> Enumeration:
    """Enumerate every branch of a round-based method, given only its round law.

    The method is described as in the method protocol: ``draft_length(remaining)``
    drafts per row, ``rows`` independent draft rows, and ``round_law(p, q, x, bonus=...)``
    returning the probabilities ``outcome[m, tau]`` of following row ``m`` and accepting
    ``tau`` drafts, and the weights ``correction[m, tau]`` of the token that follows
    (numpy arrays with a leading batch axis of 1). Every joint block of drafts is an
    explicit branch (V^(rows*L) of them), so this is for tiny instances only. Marks as in
    ``enumerate_decoding``; a round without drafts outputs one target token, counted as a
    rejection ([Yin]'s convention for autoregressive decoding).
    """
    P, Q = np.asarray(P, dtype=float), np.asarray(Q, dtype=float)
    rho = np.asarray(rho, dtype=float)
    T, V, _ = P.shape
    tally = _Tally(T)
    leaf = tally.leaf

    def chains(t, a, L):
        """Every draft chain of length L from token a at position index t, with its probability and laws."""
        for chain in itertools.product(range(V), repeat=L):
            w, prev, p_rows, q_rows = 1.0, a, [], []
            for i, x in enumerate(chain):
                p_rows.append(P[t + i, prev])
                q_rows.append(Q[t + i, prev])
                w *= P[t + i, prev, x]
                prev = x
            q_rows.append(Q[t + L, prev] if t + L < T else np.full(V, 1.0 / V))  # unused without a bonus
            if w > 0:
                yield chain, w, np.array(p_rows).reshape(L, V), np.array(q_rows)

    def round_(prefix, marks, w, oracle, draft):
        n = len(prefix)  # the round produces position n first; array index t = n - 1
        if n > T:
            return leaf(prefix, marks, w, oracle, draft)
        t, remaining = n - 1, T - n + 1
        L = draft_length(remaining)
        bonus = L < remaining
        singles = list(chains(t, prefix[-1], L))
        joints = list(itertools.product(singles, repeat=rows))
        # every joint block of this round start in one call (the law's leading batch axis)
        x = np.array([[c[0] for c in j] for j in joints], dtype=np.int64).reshape(len(joints), rows, L)
        p = np.array([[c[2] for c in j] for j in joints]).reshape(len(joints), rows, L, V)
        q = np.array([[c[3] for c in j] for j in joints])  # (n, rows, L + 1, V)
        res = round_law(p, q, x, bonus=bonus)
        outcomes, corrections = np.asarray(res.outcome), np.asarray(res.correction)
        for b, joint in enumerate(joints):
            wj = w * np.prod([c[1] for c in joint])
            outcome, correction = outcomes[b], corrections[b]
            assert abs(outcome.sum() - 1.0) < 1e-9, outcome
            for m in range(rows):
                for tau in range(L + 1):
                    pr = outcome[m, tau]
                    if pr <= 0:
                        continue
                    toks = tuple(int(v) for v in x[b, m, :tau])
                    wt = correction[m, tau]
                    if wt.sum() == 0:  # nothing follows: all drafts accepted at the horizon
                        round_(prefix + toks, marks + "a" * tau, wj * pr, oracle + 1, draft + rows * L)
                        continue
                    kind = "r" if (L == 0 or tau < L) else "b"
                    for y in range(V):
                        py = wj * pr * wt[y] / wt.sum()
                        if py > 0:
                            round_(prefix + toks + (y,), marks + "a" * tau + kind, py, oracle + 1, draft + rows * L)

    for x0 in range(V):
        if rho[x0] > 0:
            round_((x0,), "", float(rho[x0]), 0, 0)
    return tally.result()


def enumerate_sprinter(P, Q, rho, v) -> Enumeration:
    """Enumerate SPRINTER ([SPR] Alg. 1/2) literally, with verifier pass probabilities ``v[t, a, x]``.

    At each position: draft x ~ P; the verifier passes it w.p. v (no target call, x kept);
    otherwise one target call: keep x w.p. min(1, Q/P), else draw from normalised (Q - P)^+.
    """
    P, Q, v = (np.asarray(A, dtype=float) for A in (P, Q, v))
    rho = np.asarray(rho, dtype=float)
    T, V, _ = P.shape
    B, R = sd_arrays(P, Q)
    law: dict = {}
    rej_pos = np.zeros(T)
    mom = dict.fromkeys(["rej", "orc", "acc", "rej2", "orc2"], 0.0)

    def step(prefix, w, nrej, ncall, nacc):
        t = len(prefix) - 1
        if t == T:
            law[prefix] = law.get(prefix, 0.0) + w
            for key, val in (
                ("rej", nrej),
                ("orc", ncall),
                ("acc", nacc),
                ("rej2", nrej * nrej),
                ("orc2", ncall * ncall),
            ):
                mom[key] += w * val
            return
        a = prefix[-1]
        for x in range(V):
            wx = w * P[t, a, x]
            if wx == 0:
                continue
            if v[t, a, x] > 0:
                step(prefix + (x,), wx * v[t, a, x], nrej, ncall, nacc + 1)
            checked = wx * (1.0 - v[t, a, x])
            if checked > 0 and B[t, a, x] > 0:
                step(prefix + (x,), checked * B[t, a, x], nrej, ncall + 1, nacc + 1)
            if checked > 0 and B[t, a, x] < 1:
                for y in range(V):
                    wy = checked * (1.0 - B[t, a, x]) * R[t, a, y]
                    if wy > 0:
                        rej_pos[t] += wy
                        step(prefix + (y,), wy, nrej + 1, ncall + 1, nacc)

    for x0 in range(V):
        if rho[x0] > 0:
            step((x0,), float(rho[x0]), 0, 0, 0)
    return Enumeration(
        law=law,
        rejections_per_position=rej_pos,
        bonus_per_position=np.zeros(T),
        rejections=mom["rej"],
        oracle_calls=mom["orc"],
        draft_calls=float(T),
        accepted=mom["acc"],
        discarded=float(T) - mom["acc"],
        bonus=0.0,
        rejections_sq=mom["rej2"],
        oracle_calls_sq=mom["orc2"],
    )


def enumerate_specdecpp(P, Q, rho, A, h, max_K) -> dict:
    """Exact law and expected counts of SpecDec++ with head table ``A[t, prev, x]``, run literally.

    Each round (from prefix ``x_0..x_s``) drafts ``y_1, y_2, …`` one at a time from P,
    multiplies the predictions ``A``, stops when ``1 − Π > h``, at ``max_K`` drafts or at
    the horizon; then scans the drafts with ``min(1, Q/P)``, draws ``[Q − P]_+`` at the
    first rejection, or a bonus from Q after all drafts if a position is left.
    """
    T, V, _ = P.shape
    B = np.divide(Q, P, out=np.ones_like(P), where=P > Q)
    res = np.maximum(Q - P, 0.0)
    R = np.divide(res, res.sum(-1, keepdims=True), out=np.zeros_like(res), where=res.sum(-1, keepdims=True) > 0)
    out = {
        "law": {},
        "rej_pos": np.zeros(T),
        **dict.fromkeys(("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus"), 0.0),
    }

    def leaf(seq, w, c):
        out["law"][seq] = out["law"].get(seq, 0.0) + w
        for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
            out[name] += w * c[name]
        for t in c["rej_at"]:
            out["rej_pos"][t] += w

    def start(seq, w, c):
        s = len(seq) - 1  # position index of the next token
        if s == T:
            return leaf(seq, w, c)
        draft(seq, (), 1.0, w, {**c, "oracle_calls": c["oracle_calls"] + 1})

    def draft(seq, chain, prod, w, c):
        s = len(seq) - 1 + len(chain)
        prev = chain[-1] if chain else seq[-1]
        for y in range(V):
            wy = w * P[s, prev, y]
            if wy == 0:
                continue
            pr = prod * A[s, prev, y]
            grown = chain + (y,)
            if 1.0 - pr > h or len(grown) >= max_K or s + 1 >= T:
                scan(seq, grown, wy, {**c, "draft_calls": c["draft_calls"] + len(grown)})
            else:
                draft(seq, grown, pr, wy, c)

    def scan(seq, chain, w, c):
        if not chain:  # all drafts accepted
            t = len(seq) - 1
            if t == T:
                return start(seq, w, c)
            for y in range(V):
                if w * Q[t, seq[-1], y] > 0:
                    start(seq + (y,), w * Q[t, seq[-1], y], {**c, "bonus": c["bonus"] + 1})
            return
        t, x = len(seq) - 1, chain[0]
        a = B[t, seq[-1], x]
        if a > 0:
            scan(seq + (x,), chain[1:], w * a, {**c, "accepted": c["accepted"] + 1})
        if a < 1:
            for y in range(V):
                wr = w * (1 - a) * R[t, seq[-1], y]
                if wr > 0:
                    start(seq + (y,), wr, {**c, "rejections": c["rejections"] + 1, "rej_at": c["rej_at"] + (t,)})

    zero = {"rejections": 0, "oracle_calls": 0, "draft_calls": 0, "accepted": 0, "bonus": 0, "rej_at": ()}
    for x0 in range(V):
        if rho[x0] > 0:
            start((x0,), float(rho[x0]), zero)
    out["discarded"] = out["draft_calls"] - out["accepted"]
    return out


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

    # Batch speculative decoding ([Yin] Algorithm 4) with M drafts.
    import time

    def _enum_gap(a: Enumeration, b: Enumeration) -> float:
        gaps = [
            _law_gap(a.law, b.law),
            float(np.abs(a.rejections_per_position - b.rejections_per_position).max()),
            float(np.abs(a.bonus_per_position - b.bonus_per_position).max()),
        ]
        for f in (
            "rejections",
            "oracle_calls",
            "draft_calls",
            "accepted",
            "discarded",
            "bonus",
            "rejections_sq",
            "oracle_calls_sq",
        ):
            gaps.append(abs(getattr(a, f) - getattr(b, f)))
        return max(gaps)

    def _check_batch(name, P, Q, rho):
        target = sequence_law(Q, rho)
        B, R = sd_arrays(P, Q)
        for K in (None, 1, 2):
            prev_rej = np.inf
            for M in (1, 2, 3):
                t0 = time.perf_counter()
                e = enumerate_batch(P, Q, rho, M, K)
                dt = time.perf_counter() - t0
                gap = _law_gap(e.law, target)
                assert gap < 1e-12, (name, M, K, gap)
                assert abs(sum(e.law.values()) - 1.0) < 1e-12, (name, M, K)
                assert abs(e.discarded - (e.draft_calls - e.accepted)) < 1e-12
                if M == 1:
                    sd_gap = _enum_gap(e, enumerate_decoding(P, Q, rho, B, R, K))
                    assert sd_gap < 1e-12, (name, K, sd_gap)
                if K is None:
                    assert e.rejections <= prev_rej + 1e-12, (name, M, e.rejections, prev_rej)
                    prev_rej = e.rejections
                extra = f", M=1 vs enumerate_decoding max gap {sd_gap:.1e}" if M == 1 else ""
                print(
                    f"[{name}] M={M} K={K}: law gap {gap:.1e}, E[rej]={e.rejections:.6f}, "
                    f"E[calls]={e.oracle_calls:.6f}, E[acc]={e.accepted:.6f}, "
                    f"E[bonus]={e.bonus:.6f}, {dt:.2f}s{extra}"
                )

    _check_batch("dirichlet", P, Q, rho)
    p0, q0 = np.array([0.5, 0.5, 0.0]), np.array([0.2, 0.3, 0.5])
    Pz, Qz = np.broadcast_to(p0, (T, V, V)).copy(), np.broadcast_to(q0, (T, V, V)).copy()
    rho_z = np.full(V, 1.0 / V)
    _check_batch("zeros p=(.5,.5,0) q=(.2,.3,.5)", Pz, Qz, rho_z)
    _check_batch("zeros swapped p=(.2,.3,.5) q=(.5,.5,0)", Qz, Pz, rho_z)
    print("batch SD: unbiased, M=1 == enumerate_decoding, E[rej] non-increasing in M (K=None); OK")
