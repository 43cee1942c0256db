r"""Is a verifier lossless? An exact certificate, or its exact bias and the pair that shows it.

A verifier is any rule that, given a drafted block, gives the law of a round's decision: a registered method
(its :meth:`~speculab.methods.Method.round_law`) or a function with the same signature, ``f(p, q, x, *, bonus)``
returning a :class:`~speculab.methods.RoundLaw` or the pair ``(outcome, correction)`` (array API; shapes as
``round_law``'s). On a context-free pair ``(p, q)`` — the same draft and target law at every position — a round
drafts ``M`` rows of ``L`` tokens i.i.d. from ``p``, accepts ``τ`` tokens of one row and outputs one more token
(a correction, or the bonus from ``q`` after a whole row); the rounds repeat, independently. The verifier is
lossless on the pair iff the token stream is i.i.d. ``q``.

:func:`stream_law` computes the law of the stream's first ``n`` tokens exactly, by enumerating every drafted block
(``V^(M L)`` of them): with ``R_k(o)`` the probability that a round outputs exactly ``o`` (``|o| = k``),

.. math:: G_n(s) = \sum_{k < n} R_k(s_{1:k})\, G_{n-k}(s_{k+1:n}) + \sum_{k \ge n} \sum_{o:\, o_{1:n} = s} R_k(o).

:func:`certify` takes the worst total variation ``TV(G_n, q^{\otimes n})`` over a battery of pairs — random,
and the ones that break verifiers: disjoint and nested supports, masses of ``1e-300``, ties, point masses — and
then searches for a worse pair from the worst ones (Nelder–Mead on the pair's logits), returning the worst TV and
KL with the pair that attains them. A lossless verifier's worst TV is 0 to float precision; a biased one's is
its bias (for Decoding-OPT with one draft, the first token's TV is [Yin] Thm 4's ``Σ (b p − q)_+``).

The first ``L + 1`` tokens suffice: if they follow ``q^{⊗(L+1)}``, every later prefix does too (by induction over
rounds, each of which starts afresh). Context-free pairs cannot tell a verifier that reads another position's laws
(an off-by-one) from a right one — the laws are the same at every position — so the battery also holds pairs of
transition matrices ``(V, V)``, the laws after each token, on which the stream is compared with the target's
Markov chain from every start token. A method that decides each position on its own (SPRINTER's position law)
outputs one token a position: its stream is the Markov chain of that one-step law (:func:`position_outputs`).
What is not checked: the length of a round is taken as given — a rule that
decides it while drafting keeps the law if it reads only the drafts, as SpecDec++'s head does
(:mod:`speculab.methods.specdecpp`), which is not checked here.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from speculab import kernels
from speculab._budget import limit, power, refuse
from speculab._validate import as_generator, as_pair, as_positive_int, check_text
from speculab.methods.capabilities import PositionLaw, TreeDrafting, drafting_law, has
from speculab.methods.chain import Rule, one_step_law
from speculab.methods.tree import check_enumeration, drafted_trees
from speculab.sim._laws import check_laws
from speculab.theory.instance import MarkovInstance
from speculab.stats import LAW_TOKENS, POWER, detectable_tv, g_test, law_row, least_power

__all__ = ["Certificate", "SamplerCheck", "certify", "check_decoder", "check_sampler", "nasty_pairs", "stream_law"]

#: Largest number of values one exact law holds: the round law's corrections over every drafted block,
#: ``V^(M L) · M (L + 1) V``, and the stream's law of ``n`` tokens, ``V^n``.
MAX_VALUES = 4_000_000
#: Most evaluations of the stream law the search for a worse pair makes, from each of its three starts.
MAX_EVALUATIONS = 2_000
#: A worst TV at most this is "lossless": float round-off of sums of ``V^n`` products.
TOLERANCE = 1e-12


def _round_law(verifier):
    law = getattr(verifier, "round_law", verifier)
    if not callable(law):
        raise ValueError(f"verifier must be a method or a function f(p, q, x, *, bonus); got {verifier!r}")
    return law


def _outcome_and_correction(out, shape: tuple, V: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(out, "outcome"):
        outcome, correction = out.outcome, out.correction
    elif isinstance(out, (tuple, list)) and len(out) == 2:
        outcome, correction = out
    else:
        raise ValueError(f"{name} must return a RoundLaw or a pair (outcome, correction); got {type(out).__name__}")
    outcome, correction = np.asarray(outcome, dtype=float), np.asarray(correction, dtype=float)
    if outcome.shape != shape or correction.shape != (*shape, V):
        raise ValueError(
            f"{name} gave an outcome of shape {outcome.shape} and corrections of {correction.shape}; "
            f"for these blocks they are {shape} and {(*shape, V)}"
        )
    if not (np.all(outcome >= 0) and np.all(correction >= 0) and np.all(np.isfinite(correction))):
        raise ValueError(f"{name} gave negative, infinite or NaN probabilities")
    sums = outcome.reshape(shape[0], -1).sum(axis=1)
    if np.abs(sums - 1).max() > 1e-9:
        raise ValueError(f"{name} gave outcome probabilities that do not sum to 1 over rows and accepted drafts")
    return outcome, correction


def _laws_pair(p, q) -> tuple[np.ndarray, np.ndarray]:
    """``(p, q)`` checked: single laws ``(V,)`` (context-free) or transition matrices ``(V, V)`` whose row ``a`` is the
    law after token ``a``."""
    p, q = as_pair(p, q)
    if p.ndim not in (1, 2) or (p.ndim == 2 and p.shape[0] != p.shape[1]):
        raise ValueError(f"p and q must be single laws of shape (V,) or transition matrices (V, V); got {p.shape}")
    return p, q


def round_outputs(verifier, p, q, L: int, M: int = 1, warp=None) -> list[np.ndarray]:
    """``[R_1, …, R_{L+1}]``: ``R_k[a, o]`` is the probability that one round started after token ``a`` outputs
    exactly the tokens ``o`` (``k`` of them: ``k − 1`` accepted drafts, then a correction or the bonus), shape
    ``(A,) + (V,) * k`` — ``A = 1`` for a context-free pair (single laws), ``A = V`` for transition matrices. A tree
    method (:class:`~speculab.methods.capabilities.TreeDrafting`) drafts its tree cut to ``L`` levels
    (:func:`tree_round_outputs`). With ``warp`` the drafts are drawn from ``warp(p)`` while the verifier is handed
    the raw laws (an engine's sampling warp: :func:`certify`)."""
    p, q = _laws_pair(p, q)
    L, M = as_positive_int(L, "L", minimum=0), as_positive_int(M, "M")
    if has(verifier, PositionLaw):
        if warp is not None:
            raise ValueError("warp: a method with a position law is certified on the raw laws only")
        return [position_outputs(verifier, p, q)]
    drafting = drafting_law(verifier, p if warp is None else _warped(warp, p))  # DraftLaw: e.g. greedy drafts
    if has(verifier, TreeDrafting):
        return tree_round_outputs(verifier, p, q, L, drafting)
    V = p.shape[-1]
    P, Q = (p, q) if p.ndim == 2 else (p[None], q[None])
    A = P.shape[0]
    values = A * power(V, M * L) * M * (L + 1) * V
    if values > limit(MAX_VALUES):
        raise refuse(
            f"the exact output law ({A} × {V}^{M * L} drafted blocks, their corrections)",
            values,
            MAX_VALUES,
            "values",
            "MAX_VALUES",
            "use a smaller vocabulary V or fewer drafts",
        )
    combos = np.array(list(itertools.product(range(V), repeat=M * L)), dtype=np.int64).reshape(V ** (M * L), M, L)
    start = np.repeat(np.arange(A), combos.shape[0])
    x = np.tile(combos, (A, 1, 1))
    # the context of each slot: the start, then the row's own drafts (for a context-free pair, always row 0)
    prev = np.concatenate([np.broadcast_to(start[:, None, None], (x.shape[0], M, 1)), x], axis=2)  # (B, M, L + 1)
    ctx = prev if A > 1 else np.zeros_like(prev)
    slot_p, slot_q = P[ctx[:, :, :L]], Q[ctx]  # (B, M, L, V), (B, M, L + 1, V)
    W = drafting if drafting.ndim == 2 else drafting[None]
    weight = np.prod(np.take_along_axis(W[ctx[:, :, :L]], x[..., None], axis=-1)[..., 0], axis=(1, 2))  # P(block)
    keep = weight > 0  # a block that is never drafted is not asked about
    x, start, weight, slot_p, slot_q = x[keep], start[keep], weight[keep], slot_p[keep], slot_q[keep]
    B = x.shape[0]
    law = _round_law(verifier)
    name = f"{type(verifier).__name__}.round_law" if law is not verifier else getattr(verifier, "__name__", "verifier")
    try:
        out = law(slot_p, slot_q, x, bonus=True)
    except TypeError as err:
        raise ValueError(f"verifier {name} must take (p, q, x, *, bonus) as round_law does: {err}") from None
    outcome, correction = _outcome_and_correction(out, (B, M, L + 1), V, name)
    mass = correction.sum(axis=-1, keepdims=True)
    token = np.divide(correction, mass, out=np.zeros_like(correction), where=mass > 0)  # the output token's law
    if np.any((outcome > 0) & (mass[..., 0] <= 0)):
        raise ValueError(f"{name} gave an outcome without a token to output (no correction weights, or no bonus law)")
    R = []
    for tau in range(L + 1):
        w = weight[:, None] * outcome[:, :, tau]  # (B, M): this row accepts exactly τ drafts
        lead = np.broadcast_to(start[:, None], (B, M)) * V**tau
        if tau:
            lead = lead + np.ravel_multi_index(tuple(x[:, :, i] for i in range(tau)), (V,) * tau)
        flat = np.zeros((A * V**tau, V))
        np.add.at(flat, lead.ravel(), (w[..., None] * token[:, :, tau]).reshape(-1, V))
        R.append(flat.reshape((A,) + (V,) * (tau + 1)))
    return R


def position_kernels(method, p, q, n: int) -> list[np.ndarray]:
    """The one-step laws of a method that decides each position on its own
    (:class:`~speculab.methods.capabilities.PositionLaw`, e.g. SPRINTER) at positions ``0..n−1``: ``(V, V)`` each,
    row ``a`` the law of the token after context ``a``. A drafted ``x ~ p`` is kept with probability ``free +
    called`` (without or after a target call); otherwise a token of the correction weights is output. Read from an
    ``n``-position instance of the pair, so a verifier that depends on the position is seen at each."""
    inst = MarkovInstance.stationary(p, q, n) if p.ndim == 2 else MarkovInstance.context_free(p, q, n)
    check_laws(method, inst)
    free, called, correction, _ = method.position_law(inst)
    out = []
    for t in range(n):
        P, keep, weights = inst.P[t], np.asarray(free[t] + called[t], dtype=float), np.asarray(correction[t], float)
        mass = weights.sum(axis=-1, keepdims=True)
        token = np.divide(weights, mass, out=np.zeros_like(weights), where=mass > 0)
        out.append(one_step_law(Rule(keep, token), P))  # P_A = b p + P Σ (1 − b) p with b = free + called
    return out


def position_outputs(method, p, q) -> np.ndarray:
    """``R_1`` of a method with a position law: the law of the token its first position outputs after each start
    token, shape ``(A, V)`` (:func:`position_kernels`)."""
    return position_kernels(method, p, q, 1)[0][: (p.shape[0] if p.ndim == 2 else 1)]


def _position_stream(method, p, q, n: int) -> np.ndarray:
    """:func:`stream_law` of a method with a position law: the chain of its one-step laws, position by position."""
    kernels = position_kernels(method, p, q, n)
    V, A = p.shape[-1], (p.shape[0] if p.ndim == 2 else 1)
    law = kernels[0][:A]
    for t in range(1, n):
        law = np.einsum("auc,cd->aucd", law.reshape(A, -1, V), kernels[t]).reshape((A,) + (V,) * (t + 1))
    return law[0] if p.ndim == 1 else law


def tree_round_outputs(method, p, q, L: int, drafting=None) -> list[np.ndarray]:
    """:func:`round_outputs` of a tree method: every tree it drafts (its tree cut to ``L`` levels, children i.i.d. or
    distinct from ``drafting`` — default ``p`` — at each node's token) through its round law in the node layout, each
    end node's path and the token after it (a correction, or the bonus at a leaf) adding to ``R_{depth + 1}``."""
    V = p.shape[-1]
    P, Q = (p, q) if p.ndim == 2 else (np.broadcast_to(p, (V, V)), np.broadcast_to(q, (V, V)))
    D = P if drafting is None else np.broadcast_to(drafting, (V, V))
    A = V if p.ndim == 2 else 1
    tree = method.tree.truncated(L)
    H = tree.height
    check_enumeration(tree, V, "the exact output law of a tree round")
    x, weight, start = drafted_trees(np.broadcast_to(D, (H + 1, V, V)), 0, tree, method.draws)
    keep = start < A  # a context-free pair: the drafts after token 0 stand for every start
    x, weight, start = x[keep], weight[keep], start[keep]
    token_at = np.where(x >= 0, x, 0)  # the node's token (the root's: the start); an absent node's law is unread
    law = method.round_law(P[token_at], Q[token_at], x, bonus=True)
    end, correction = np.asarray(law.end, dtype=float), np.asarray(law.correction, dtype=float)
    name = f"{type(method).__name__}.round_law"
    if not (np.all(end >= 0) and np.abs(end.sum(axis=-1) - 1).max() <= 1e-9):
        raise ValueError(f"{name} gave end probabilities that are not a law (negative, NaN, or not summing to 1)")
    mass = correction.sum(axis=-1, keepdims=True)
    if np.any((end > 0) & (mass[..., 0] <= 0)) or not np.all(np.isfinite(correction) & (correction >= 0)):
        raise ValueError(f"{name} gave an end without a token to output, or weights negative, infinite or NaN")
    token = np.divide(correction, mass, out=np.zeros_like(correction), where=mass > 0)
    R = [np.zeros((A,) + (V,) * (d + 1)) for d in range(H + 1)]
    for j in range(tree.size + 1):
        path, v = [], j
        while v:
            path.append(np.maximum(x[:, v], 0))  # an absent node ends nothing (its end probability is 0)
            v = tree.parents[v - 1]
        d = len(path)
        lead = start * V**d + (np.ravel_multi_index(tuple(reversed(path)), (V,) * d) if d else 0)
        flat = R[d].reshape(A * V**d, V)
        np.add.at(flat, lead, (weight * end[:, j])[:, None] * token[:, j])
    return R


def _check_stream(V: int, n: int, starts: int) -> None:
    """Refuse (:class:`~speculab._validate.TooLarge`) a stream law of ``starts`` start tokens over ``V^n`` streams past
    :data:`MAX_VALUES`, before anything is allocated."""
    values = starts * power(V, n)
    if values > limit(MAX_VALUES):
        raise refuse(
            f"the law of the stream's first {n} tokens ({starts} × {V}^{n} of them)",
            values,
            MAX_VALUES,
            "values",
            "MAX_VALUES",
            "compare fewer tokens n (a smaller remaining) or use a smaller vocabulary V",
        )


def _check_search(dim: int) -> None:
    """Refuse (:class:`~speculab._validate.TooLarge`) a Nelder–Mead search over ``dim`` logits — its simplex holds
    ``(dim + 1) · dim`` values — past :data:`MAX_VALUES`, before the pairs are scored."""
    values = (dim + 1) * dim
    if values > limit(MAX_VALUES):
        raise refuse(
            f"the search for a worse pair (a simplex of {dim + 1} points over {dim} logits)",
            values,
            MAX_VALUES,
            "values",
            "MAX_VALUES",
            "use a smaller vocabulary V or no search (search=False, --no-search)",
        )


def stream_law(verifier, p, q, L: int, n: int | None = None, M: int = 1, warp=None) -> np.ndarray:
    """The exact law of the first ``n`` tokens (default ``L + 1``) the verifier's rounds output, ``M`` rows of ``L``
    drafts each round: on a context-free pair (single laws ``(V,)``), shape ``(V,) * n``; on transition matrices
    ``(V, V)``, one law per start token, shape ``(V,) + (V,) * n``. Each sums to 1. ``warp``: drafts from
    ``warp(p)`` (:func:`round_outputs`)."""
    n = L + 1 if n is None else as_positive_int(n, "n")
    V = np.shape(p)[-1]
    _check_stream(V, n, V if np.ndim(p) == 2 else 1)
    if has(verifier, PositionLaw):
        p, q = _laws_pair(p, q)
        if warp is not None:
            raise ValueError("warp: a method with a position law is certified on the raw laws only")
        return _position_stream(verifier, p, q, n)
    R = round_outputs(verifier, p, q, L, M, warp)
    A = R[0].shape[0]
    G: dict[int, np.ndarray] = {0: np.ones((A,))}
    for m in range(1, n + 1):
        law = np.zeros((A,) + (V,) * m)
        for k, Rk in enumerate(R, start=1):
            if k < m:  # a round of k tokens, then the stream from its last token
                rest = G[m - k].reshape(A, -1)
                if A == 1:
                    law += np.multiply.outer(Rk[0], rest[0].reshape((V,) * (m - k)))[None]
                else:
                    both = np.einsum("auc,cw->aucw", Rk.reshape(A, -1, V), rest)
                    law += both.reshape(law.shape)
            else:
                law += Rk.sum(axis=tuple(range(m + 1, k + 1))) if k > m else Rk
        G[m] = law
    return G[n][0] if np.ndim(p) == 1 else G[n]


def _warped(warp, law: np.ndarray) -> np.ndarray:
    """``warp(law)``, checked: laws of the same shape (rows along the last axis)."""
    out = np.asarray(warp(law), dtype=float)
    if out.shape != law.shape:
        raise ValueError(f"warp must map laws of shape {law.shape} to laws of the same shape; got {out.shape}")
    if not (np.all(out >= 0) and np.allclose(out.sum(axis=-1), 1.0)):
        raise ValueError("warp must return laws: non-negative, each row summing to 1 (got negative, NaN or other sums)")
    return out


def _target(q: np.ndarray, n: int) -> np.ndarray:
    """The target's law of ``n`` tokens: ``q^{⊗n}``, or per start token the Markov chain's ``Π Q[s_{i-1}, s_i]``."""
    if q.ndim == 1:
        out = q
        for _ in range(n - 1):
            out = np.multiply.outer(out, q)
        return out
    V = q.shape[0]
    out = q  # (V, V): start, first token
    for m in range(2, n + 1):
        out = np.einsum("aul,lt->ault", out.reshape(V, -1, V), q).reshape((V,) + (V,) * m)
    return out


def _divergences(law: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """TV and KL of a stream law to the target's; with transition matrices, the worst over start tokens."""
    n = law.ndim - (q.ndim - 1)
    target = _target(q, n)
    if q.ndim == 1:
        law, target = law[None], target[None]
    law, target = law.reshape(law.shape[0], -1), target.reshape(target.shape[0], -1)
    return float(kernels.tv(law, target).max()), float(kernels.kl(law, target).max())


def nasty_pairs(V: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The pairs that break verifiers, on ``V >= 2`` tokens: disjoint and nested supports, masses of ``1e-300``,
    ties, point masses."""
    V = as_positive_int(V, "V", minimum=2)
    half = max(V // 2, 1)
    e = {i: np.eye(1, V, i)[0] for i in (0, 1, V - 1)}  # the point masses used: V values each, not V²
    uniform = np.full(V, 1 / V)
    low = np.r_[np.full(half, 1 / half), np.zeros(V - half)]
    high = np.r_[np.zeros(half), np.full(V - half, 1 / (V - half))]
    ramp = np.arange(1, V + 1, dtype=float) / (V * (V + 1) / 2)
    tiny = np.r_[1e-300, np.full(V - 1, (1 - 1e-300) / (V - 1))]
    return [
        ("disjoint supports", low, high),
        ("draft support inside the target's", low, uniform),
        ("target support inside the draft's", uniform, low),
        ("a draft mass of 1e-300", tiny, ramp),
        ("a target mass of 1e-300", ramp, tiny),
        ("equal laws", ramp, ramp),
        ("point masses, the same token", e[0], e[0]),
        ("point masses, other tokens", e[0], e[1]),
        ("a point-mass draft", e[0], ramp),
        ("a point-mass target", ramp, e[V - 1]),
        ("reversed ramps", ramp, ramp[::-1]),
    ]


@dataclass(frozen=True)
class Certificate:
    """What :func:`certify` found.

    Attributes:
      verifier: its name. lossless: the worst TV is at most ``tolerance``.
      tv: the worst ``TV(G_n, q^{⊗n})`` over the pairs tried; p, q: the pair that attains it; case: which pair of
        the battery (or the search) it is.
      kl, kl_case: the worst ``KL(G_n ‖ q^{⊗n})`` over the pairs tried (``inf``: the stream outputs a token the
        target never does), and which pair attains it.
      first_token_tv: TV of the first token's law to ``q`` at that pair.
      V, L, M, n: vocabulary, drafts per row, rows, tokens of the stream compared. pairs: how many pairs were tried.
    """

    verifier: str
    lossless: bool
    tv: float
    kl: float
    p: np.ndarray
    q: np.ndarray
    case: str
    kl_case: str
    first_token_tv: float
    V: int
    L: int
    M: int
    n: int
    pairs: int
    tolerance: float = TOLERANCE
    drafting: str = ""  # how the verifier drafts, in words (for the text)

    def __str__(self) -> str:
        verdict = "lossless" if self.lossless else "BIASED"
        fmt = lambda a: np.array2string(np.asarray(a), precision=4, separator=", ").replace("\n", "")  # noqa: E731
        tokens = "the first token" if self.n == 1 else f"the first {self.n} tokens"
        drafting = self.drafting or f"{self.M} × {self.L} drafts a round"
        return (
            f"{self.verifier}: {verdict} — worst TV {self.tv:.3g} over {tokens} "
            f"(first token {self.first_token_tv:.3g}) over {self.pairs} pairs on {self.V} tokens ({drafting}); "
            f"worst pair ({self.case}): p = {fmt(self.p)}, q = {fmt(self.q)}; worst KL {self.kl:.3g} ({self.kl_case})"
        )

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["p"], out["q"] = self.p.tolist(), self.q.tolist()
        return out


def _laws(theta: np.ndarray, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Two laws (or transition matrices) of ``shape`` from logits: a softmax along the last axis."""
    z = theta.reshape((2,) + shape)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    z = z / z.sum(axis=-1, keepdims=True)
    return z[0], z[1]


def certify(
    verifier,
    *,
    V: int = 3,
    remaining: int = 2,
    n: int | None = None,
    key=0,
    random_pairs: int = 20,
    markov_pairs: int = 10,
    search: bool = True,
    tolerance: float = TOLERANCE,
    warp=None,
) -> Certificate:
    """Certify ``verifier`` lossless on ``V`` tokens, or find its worst bias.

    Args:
      verifier: a method (any registered one, or your own) or a function ``f(p, q, x, *, bonus)`` as
        :meth:`~speculab.methods.Method.round_law`.
      V: vocabulary size of the pairs (``>= 2``).
      remaining: the tokens a round may output; a method drafts ``method.draft_length(remaining)`` per row (a
        function: ``remaining`` drafts), in ``method.rows`` rows (a function: one). A method with a position law
        drafts one token a position, whatever ``remaining``.
      n: tokens of the stream compared (default: a whole round's, drafts plus one).
      key: randomness of the random pairs and the search's starts.
      random_pairs: context-free pairs drawn from Dirichlet laws (half with concentration 1, half 0.3: peaked).
      markov_pairs: pairs of transition matrices ``(V, V)`` with Dirichlet rows (the laws depend on the previous
        token, so a verifier that reads another position's laws is caught), compared per start token.
      search: search for a worse pair from the three worst (Nelder–Mead on the pair's logits).
      tolerance: the largest worst TV still called lossless.
      warp: an engine's sampling warp (a function of laws ``(..., V)``, e.g. top-k): the drafts are drawn from
        ``warp(p)`` and the stream must follow ``warp(q)``, while the verifier is handed the raw laws and applies
        the warp itself (:func:`speculab.methods.engine_rules.warped_sd`). ``p`` and ``q`` in the certificate are
        the raw laws.
    """
    V = as_positive_int(V, "V", minimum=2)
    remaining = as_positive_int(remaining, "remaining")
    random_pairs = as_positive_int(random_pairs, "random_pairs", minimum=0)
    markov_pairs = as_positive_int(markov_pairs, "markov_pairs", minimum=0)
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 1):
        raise ValueError(f"tolerance must be a number in [0, 1); got {tolerance!r}")
    is_method = hasattr(verifier, "round_law") and hasattr(verifier, "draft_length")
    if is_method and has(verifier, PositionLaw):
        L = M = 1  # one draft per position, decided there
        drafting = f"one draft a position, whatever remaining={remaining}"
    else:
        L = verifier.draft_length(remaining) if is_method else remaining  # 0: a round outputs one token from q
        M = getattr(verifier, "rows", 1) if is_method else 1
        drafting = "no drafts: one token from the target a round" if L == 0 else f"{M} × {L} drafts a round"
    n = L + 1 if n is None else as_positive_int(n, "n")
    name = repr(verifier) if is_method else getattr(verifier, "__name__", repr(verifier))
    rng = as_generator(key)
    _check_stream(V, n, V if markov_pairs else 1)  # before the pairs: V² values per transition matrix
    if search:
        _check_search(2 * V * (V if markov_pairs else 1))
    pairs = nasty_pairs(V)
    for i in range(random_pairs):
        c = 1.0 if i % 2 == 0 else 0.3
        pairs.append((f"random (Dirichlet {c:g})", rng.dirichlet(np.full(V, c)), rng.dirichlet(np.full(V, c))))
    for i in range(markov_pairs):
        c = 1.0 if i % 2 == 0 else 0.3
        rows = [rng.dirichlet(np.full(V, c), size=V) for _ in range(2)]
        pairs.append((f"Markov (Dirichlet {c:g} rows)", *rows))

    if warp is not None and not callable(warp):
        raise ValueError(f"warp must be a function of laws (..., V); got {warp!r}")
    if warp is not None:
        name = f"{name} under {getattr(warp, '__name__', 'a warp')}"

    def score(p, q):
        law = stream_law(verifier, p, q, L, n, M, warp)
        sums = law.reshape(-1 if p.ndim == 1 else V, V**n).sum(axis=-1)
        worst = np.abs(sums - 1).argmax()  # the sum farthest from 1, checked and shown
        if abs(sums[worst] - 1) > 1e-9:
            raise ValueError(f"{name}'s stream law sums to {sums[worst]:.12g}, not 1")
        return _divergences(law, q if warp is None else _warped(warp, q))

    results = [(case, p, q, *score(p, q)) for case, p, q in pairs]
    tried = len(results)
    if search:
        starts = sorted(results, key=lambda r: -r[3])[:3]
        for case, p, q, tv, _ in starts:
            theta = np.log(np.clip(np.concatenate([p, q]), 1e-12, None)).ravel()
            best = minimize(
                lambda t: -score(*_laws(t, p.shape))[0],
                theta,
                method="Nelder-Mead",
                options={"maxfev": int(limit(MAX_EVALUATIONS)), "xatol": 1e-6, "fatol": 1e-12},
            )
            tried += best.nfev
            if -best.fun > tv:
                bp, bq = _laws(best.x, p.shape)
                results.append((f"search from {case}", bp, bq, *score(bp, bq)))
    case, p, q, tv, _ = max(results, key=lambda r: r[3])
    kl_case, *_, kl = max(results, key=lambda r: r[4])
    first = _divergences(stream_law(verifier, p, q, L, 1, M, warp), q if warp is None else _warped(warp, q))[0]
    return Certificate(
        name, tv <= tolerance, tv, kl, p, q, case, kl_case, first, V, L, M, n, tried, tolerance, drafting
    )


# -- black-box samplers: a test with stated power ------------------------------------------------------------------
@dataclass(frozen=True)
class SamplerCheck:
    """What :func:`check_sampler` measured.

    Attributes:
      sampler: its name. n, V: draws and vocabulary. statistic, df, p_value: the G-test of the draws against ``q``.
      alpha: the test's level; refused: ``p_value < alpha`` (the sampler is not lossless on this pair).
      tv_observed: TV of the draws' empirical law to ``q`` (descriptive: it is positive by chance alone).
      tv, power: the stated TV and the test's least power against any law at that TV from ``q``.
      detectable_tv: the least TV every law of which the test refuses with probability ``POWER``.
    """

    sampler: str
    n: int
    V: int
    statistic: float
    df: int
    p_value: float
    alpha: float
    refused: bool
    tv_observed: float
    tv: float
    power: float
    detectable_tv: float  # > 1: no law is refused with that power at this n

    def __str__(self) -> str:
        verdict = "REFUSED: not the target's law" if self.refused else "consistent with the target's law"
        return (
            f"{self.sampler}: {verdict} (G = {self.statistic:.4g}, df = {self.df}, p = {self.p_value:.3g} at level "
            f"{self.alpha:g}; {self.n:,} draws on {self.V} tokens, empirical TV {self.tv_observed:.3g}); power "
            f"{self.power:.4f} against any law at TV {self.tv:g} from the target; "
            + (
                f"power {POWER:g} from TV {self.detectable_tv:.3g}"
                if self.detectable_tv <= 1
                else f"no TV reaches power {POWER:g} with {self.n:,} draws"
            )
        )


def _law_like(law, q: np.ndarray, name: str) -> np.ndarray:
    """``law`` checked as a probability vector of ``q``'s shape, named ``name`` in the error."""
    law = np.asarray(law, dtype=float)
    if law.shape != q.shape:
        raise ValueError(f"{name} must be a law of shape {q.shape}, as q; got shape {law.shape}")
    if not (np.all(law >= 0) and abs(float(law.sum()) - 1) <= 1e-9):
        raise ValueError(f"{name} must be a law: non-negative, summing to 1")
    return law


def check_sampler(
    sampler, p, q, *, n: int = 1_000_000, key=0, alpha: float = 1e-6, tv: float = 0.01, law=None
) -> SamplerCheck:
    """A statistical test of a black-box speculative sampler on one pair, with its power stated.

    ``sampler(draft_logits, target_logits, n, rng)`` returns ``n`` tokens, each the first token one round of the
    sampler outputs (it drafts from ``draft_logits``, verifies against ``target_logits``, and draws its randomness
    from the numpy ``rng`` it is given, or from a generator seeded from it). Lossless means the tokens follow ``q``:
    the G-test of their counts against ``q`` (cells with fewer than 5 expected draws merged) at level ``alpha``.
    Its power against any law at total variation ``tv`` from ``q`` (on the test's cells) is at least the noncentral
    χ² tail at noncentrality ``4 n tv²`` (``χ²(r, q) ≥ 4 TV(r, q)²`` by Cauchy–Schwarz, with equality where
    ``|r − q| ∝ q``), computed here, not sampled — within the noncentral χ² approximation of the G statistic, which
    ``tests/test_certify.py`` checks by sampling at the least favourable law. ``law``: test the tokens against
    this law instead of ``q`` (a biased sampler's own law, e.g. to confirm a computed bias).
    """
    p, q = as_pair(p, q)
    if p.ndim != 1:
        raise ValueError(f"p and q must be single laws of shape (V,); got {p.shape}")
    expected = q if law is None else _law_like(law, q, "law")
    n = as_positive_int(n, "n")
    if not (isinstance(alpha, float) and 0 < alpha < 1):
        raise ValueError(f"alpha must be a float in (0, 1); got {alpha!r}")
    if not (isinstance(tv, (int, float)) and 0 < tv <= 1):
        raise ValueError(f"tv must be a number in (0, 1]; got {tv!r}")
    if not callable(sampler):
        raise ValueError(f"sampler must be a function sampler(draft_logits, target_logits, n, rng); got {sampler!r}")
    V = p.shape[-1]
    with np.errstate(divide="ignore"):
        draft_logits, target_logits = np.log(p), np.log(q)
    tokens = np.asarray(sampler(draft_logits, target_logits, n, as_generator(key)))
    name = getattr(sampler, "__name__", repr(sampler))
    if tokens.shape != (n,) or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"{name} must return {n} integer tokens; got {tokens.dtype} of shape {tokens.shape}")
    if tokens.min() < 0 or tokens.max() >= V:
        raise ValueError(f"{name} returned a token outside 0..{V - 1}")
    counts = np.bincount(tokens, minlength=V).astype(float)
    g, df, p_value = g_test(counts, expected)
    power = least_power(df, n, alpha, tv)
    observed = 0.5 * float(np.abs(counts / n - expected).sum())
    return SamplerCheck(
        name, n, V, g, df, p_value, alpha, p_value < alpha, observed, float(tv), power, detectable_tv(df, n, alpha)
    )


def check_decoder(decoder, pair, prompt: str, *, runs: int, key, sampling=None, control=None, name: str = "decoder"):
    """A statistical test of a black-box decoder on real models, against the target's exact law of its first tokens.

    ``decoder(ids, runs, key)`` decodes the prompt's token ids ``runs`` times and returns each run's tokens (at least
    :data:`~speculab.stats.LAW_TOKENS`, or fewer ending at EOS). The law of the first token and of the first
    :data:`~speculab.stats.LAW_TOKENS` is computed from the target model's logits after ``sampling``'s warp (the
    default: temperature 1), and each is G-tested as ``speculab validate`` tests the project's own methods (level
    ``ALPHA / 2`` each). Returns a :class:`~speculab.stats.LawRow`: the tests, the least TV each refuses with
    probability 0.99 and, with ``control`` (a biased first-token law), the first-token test's power against it
    (else NaN).
    """
    from dataclasses import replace

    from speculab.backends import Sampling
    from speculab.backends.pair import check_pair
    from speculab.backends.exact_law import next_law, target_cells

    check_pair(pair)
    sampling = Sampling() if sampling is None else sampling
    if sampling.greedy:
        raise ValueError("sampling: the law test needs sampling (temperature > 0)")
    if not hasattr(pair.target, "model"):
        raise ValueError("pair: check_decoder needs a Hugging Face target (its logits give the exact law)")
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt must be a non-empty string; got {prompt!r}")
    check_text(prompt, "prompt")
    runs = as_positive_int(runs, "runs")
    ids = pair.tokenizer.encode(prompt)
    q1 = next_law(pair.target.model, ids, sampling, pair.device, pair.vocab_size)
    cells = target_cells(pair, ids, sampling, runs, LAW_TOKENS)
    if control is not None:
        control = _law_like(control, q1, "control")
    tokens = [[int(x) for x in t] for t in decoder(ids, runs, key)]
    eos, V = pair.eos_token_id, q1.size
    if len(tokens) != runs:
        raise ValueError(f"{name} must return {runs} runs; got {len(tokens)}")
    for t in tokens:
        if not (len(t) >= LAW_TOKENS or (t and t[-1] == eos)):
            raise ValueError(f"{name} must return runs of at least {LAW_TOKENS} tokens, or ending at EOS; got {t}")
        if min(t) < 0 or max(t) >= V:
            raise ValueError(f"{name} returned a token outside 0..{V - 1}: {t}")
    tokens = [t[:LAW_TOKENS] for t in tokens]  # the law tested is of the first LAW_TOKENS tokens
    row = law_row(name, tokens, q1, cells, eos, q1 if control is None else control, True)
    return row if control is not None else replace(row, power=float("nan"))
