r"""What a chain verifier outputs per round along a pair's real contexts: its exact round law, averaged over drafts.

Convention: ``p`` = draft, ``q`` = target (both after the sampling's warp). A round of ``K`` drafts started at
context ``c`` outputs ``τ + 1`` tokens (``τ`` drafts kept, then a correction or the bonus) for one target call. At a
real vocabulary ``E[τ | c]`` cannot be enumerated over every drafted block, but given the block ``x`` the method's
round law (:meth:`~speculab.methods.Method.round_law`) gives ``E[τ | c, x]`` exactly, so

.. math:: \widehat{E}[\tau + 1] = 1 + \frac{1}{n} \sum_{j=1}^{n} E[\tau \mid c_j, x_j],
          \qquad x_j \sim \text{the method's drafting law at } c_j,

is unbiased for the mean over the contexts' law, with a variance no larger than that of the measured ``τ`` (a
conditional expectation: Rao–Blackwell). The contexts ``c_j`` are the prompts followed by a prefix of the target's
own continuation — the law of a lossless method's output — at uniformly drawn lengths; a round of a lossless method
starts at one of them. A method that drafts from ``p`` itself shares one block with every such method and every
``K ≤ L`` (the first ``K`` drafts of a block of ``L`` are a block of ``K``; a rule's round law does not depend on
its ``K`` beyond the drafts it is given, so a round of ``L`` drafts is computed once per rule); a method with its
own drafting law (:class:`~speculab.methods.capabilities.DraftLaw`, e.g. greedy drafts) gets its own block. A
biased method's per-token bias is ``Σ_i P(τ ≥ i − 1) TV(ℓ_i, q_i) / E[τ + 1]``, ``ℓ_i`` its one-step output law at
slot ``i`` (:attr:`~speculab.methods.RoundLaw.law`; the bonus token is ``q``'s own). :func:`exact_yield` gives the
same quantities exactly on an i.i.d. instance by enumerating every block: the tests hold the estimator to it.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import torch

from speculab._progress import advance, expect
from speculab.counts import Estimate
from speculab.methods.capabilities import DraftLaw, drafting_law, has

__all__ = ["Yield", "contexts", "round_yields", "exact_yield"]


@dataclass(frozen=True, eq=False)
class Yield:
    """One candidate's rounds along the contexts (module docstring), per context ``j`` and per number of drafts
    ``L = 0..K`` (a run's last rounds draft fewer than ``K``: the first ``L`` slots of the same block).

    Attributes:
      outcome: ``(n, K + 1, K + 1)`` ``P(τ = t | c_j, x_j)`` of a round of ``L`` drafts (row ``L``, ``t ≤ L``).
      drafted: ``(n, K + 1)`` drafts made in a round of ``L`` (fewer where the draft stops proposing).
      biased: ``(n,)`` ``Σ_i P(τ ≥ i − 1) TV(ℓ_i, q_i)`` of a round of ``K`` drafts (0 for a lossless rule).
    """

    outcome: np.ndarray
    drafted: np.ndarray
    biased: np.ndarray

    @property
    def K(self) -> int:
        return self.outcome.shape[-1] - 1

    @property
    def contexts(self) -> int:
        return self.outcome.shape[0]

    def _tokens(self) -> np.ndarray:
        """``E[τ + 1 | c_j, x_j]`` of a round of ``K`` drafts, per context."""
        return 1.0 + self.outcome[:, self.K] @ np.arange(self.K + 1)

    @property
    def tokens(self) -> float:
        """``E[τ + 1]`` of a round of ``K`` drafts: tokens per target call away from the horizon."""
        return float(self._tokens().mean())

    @property
    def se(self) -> float:
        """The standard error of :attr:`tokens` over the contexts."""
        return Estimate.of(self._tokens()).se

    @property
    def full(self) -> float:
        """``P(τ = K)``: every draft kept."""
        return float(self.outcome[:, self.K, self.K].mean())

    @property
    def bias(self) -> float:
        """Per-token TV of the output from the target's law (0 for a lossless rule)."""
        return float(self.biased.sum() / self._tokens().sum())

    def subset(self, rows) -> "Yield":
        """The yield over the contexts ``rows`` only."""
        return Yield(self.outcome[rows], self.drafted[rows], self.biased[rows])


def contexts(pair, prompts: list[list[int]], *, sampling, length: int, per_prompt: int, key) -> list[list[int]]:
    """``per_prompt`` contexts per prompt: the prompt's token ids followed by the first ``n`` tokens of the target's
    own continuation (``length`` tokens drawn with ``sampling``), ``n`` uniform on ``0..length − 1``."""
    from speculab._validate import spawn_seeds
    from speculab.backends import decode
    from speculab.methods import Autoregressive

    seeds = spawn_seeds(key, 2)
    run = decode(pair, prompts, Autoregressive(), max_new_tokens=length, sampling=sampling, key=seeds[0])
    rng = np.random.default_rng(seeds[1])
    out = []
    for ids, tokens in zip(prompts, run.tokens):
        for n in rng.integers(0, max(len(tokens), 1), size=per_prompt):
            out.append(list(ids) + list(tokens[:n]))
    return out


def _block(pair, ctx: list[int], L: int, sampling, method, rng: torch.Generator):
    """A block of up to ``L`` drafts at ``ctx`` from ``method``'s drafting law, with the laws the round law needs:
    ``P`` ``(L', V)`` (the drafting law at each slot), ``Q`` ``(L' + 1, V)``, ``x`` ``(L',)``; ``L' < L`` where the
    draft stops proposing."""
    dev = pair.device
    draft, target = pair.draft, pair.target
    state = draft.start()
    logits = draft.extend(state, torch.tensor([ctx], device=dev), last=True)[0, -1]
    rows, xs, history = [], [], list(ctx)
    for _ in range(L):
        if not getattr(draft, "proposes", lambda history: True)(tuple(history)):
            break
        law = drafting_law(method, sampling.probs(logits.double()))  # (V,)
        x = int(torch.multinomial(law.cpu(), 1, generator=rng))
        rows.append(law)
        xs.append(x)
        history.append(x)
        logits = draft.extend(state, torch.tensor([[x]], device=dev), last=True)[0, -1]
    t_state = target.start()
    t_logits = target.extend(t_state, torch.tensor([ctx + xs], device=dev))[0]  # (len(ctx) + L', V)
    Q = sampling.probs(t_logits[len(ctx) - 1 :].double())  # (L' + 1, V)
    V = Q.shape[-1]
    P = torch.stack(rows) if rows else torch.zeros((0, V), dtype=Q.dtype, device=Q.device)
    return P, Q, torch.tensor(xs, dtype=torch.long, device=Q.device)


def _round(method, P, Q, x) -> tuple[np.ndarray, float]:
    """``P(τ = t | block)``, ``t = 0..L``, and ``Σ_i P(τ ≥ i − 1) TV(ℓ_i, q_i)`` of one block (module docstring)."""
    L = int(x.shape[-1])
    if L == 0:
        return np.ones(1), 0.0
    law = method.round_law(P[None], Q[None], x[None], bonus=True)  # M = 1 row
    outcome = law.outcome[0]  # (L + 1,)
    bias = 0.0
    if law.law is not None:
        tv = 0.5 * (law.law[0] - Q[:L]).abs().sum(-1)  # (L,)
        reach = torch.flip(torch.cumsum(torch.flip(outcome, [0]), 0), [0])[:L]  # P(τ ≥ i − 1), i = 1..L
        bias = float((reach * tv).sum())
    return outcome.cpu().numpy(), bias


def round_yields(pair, methods: list, ctxs: list[list[int]], *, sampling, key) -> list[Yield]:
    """Each method's :class:`Yield` along ``ctxs`` (module docstring); ``methods`` are chain methods of one draft
    row with a finite ``K`` (drafts per round) or autoregressive decoding (``K = 0``)."""
    from speculab._validate import spawn_seeds

    groups: dict = {}
    for i, m in enumerate(methods):
        groups.setdefault(type(m) if has(m, DraftLaw) else None, []).append(i)
    n = len(ctxs)
    out: list = [None] * len(methods)
    for i, m in enumerate(methods):
        K = _lookahead(m)
        outcome = np.zeros((n, K + 1, K + 1))
        outcome[:, 0, 0] = 1.0
        out[i] = (outcome, np.zeros((n, K + 1)), np.zeros(n))
    longest = [max(_lookahead(methods[i]) for i in members) for members in groups.values()]  # L = 0: no drafts
    what = f"exact rounds of {len(methods)} chain rules along {n} contexts"
    expect(n * sum(L > 0 for L in longest), what, unit="drafted block")
    for seed, members, L in zip(spawn_seeds(key, len(groups)), groups.values(), longest):
        rng = torch.Generator().manual_seed(int(seed))
        if L == 0:
            continue
        for j, ctx in enumerate(ctxs):
            P, Q, x = _block(pair, ctx, L, sampling, methods[members[0]], rng)
            memo: dict = {}  # a round of `made` drafts is the same for every K of one rule: computed once
            for i in members:
                outcome, drafted, biased = out[i]
                K = _lookahead(methods[i])
                for ell in range(1, K + 1):
                    made = min(ell, int(x.shape[-1]))
                    key = dataclasses.replace(methods[i], K=made)
                    if key not in memo:
                        memo[key] = _round(methods[i], P[:made], Q[: made + 1], x[:made])
                    law, bias = memo[key]
                    outcome[j, ell, : made + 1] = law
                    drafted[j, ell] = made
                    if ell == K:
                        biased[j] = bias
            advance(1)
    return [Yield(*o) for o in out]


def _lookahead(method) -> int:
    if not method.drafting:
        return 0
    K = getattr(method, "K", None)
    if not isinstance(K, int) or K < 1:
        raise ValueError(f"a planned method drafts a finite K >= 1 per round; got {method!r}")
    return K


def exact_yield(method, p: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """``(E[τ + 1], bias)`` of one round of ``method`` whose every slot has the draft law ``p`` and the target law
    ``q`` (an i.i.d. instance: the laws do not depend on the context), by enumerating every drafted block — the
    reference the estimator is tested against on small vocabularies."""
    K = _lookahead(method)
    V = len(p)
    P = drafting_law(method, torch.as_tensor(np.tile(p, (K, 1)), dtype=torch.float64))  # (K, V): what is drafted
    Q = torch.as_tensor(np.tile(q, (K + 1, 1)), dtype=torch.float64)
    draws = P[0].numpy()
    tau = bias = 0.0
    for block in itertools.product(range(V), repeat=K):
        w = float(np.prod(draws[list(block)]))
        if w == 0.0:
            continue
        outcome, b = _round(method, P, Q, torch.tensor(block))
        tau += w * float(outcome @ np.arange(K + 1))
        bias += w * b
    return 1.0 + tau, bias / (1.0 + tau)
