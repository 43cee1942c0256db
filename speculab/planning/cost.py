r"""What a run costs on the clock: the latency model's fitted times applied to a candidate's rounds, horizon included.

Convention: ``p`` = draft, ``q`` = target. One sequence is decoded at a time (the setting of
:mod:`speculab.backends.latency`, whose fitted :class:`~speculab.backends.latency.LatencyModel` this prices with).
With ``n`` tokens left, a round drafts ``L_n`` = ``method.draft_length(n)`` tokens (``min(K, n)`` for a chain),
makes ``L_n`` draft calls of one token — the first catches up on the previous round's output, two tokens after a
fully kept block that another round follows — and one target call of ``L_n + 1`` tokens, and outputs
``min(τ + 1, n)`` tokens, ``τ`` with the law ``π_{L_n}`` of :class:`~speculab.planning.yields.Yield` (a block of
``n`` drafts kept whole has no bonus). The expected time ``T(n)`` and target calls ``C(n)`` to finish follow by
dynamic programming over ``n``:

.. math:: T(n) = c(L_n) + t_q(L_n + 1) + \sum_t \pi_{L_n}(t)\, T(n - \min(t + 1, n)), \qquad T(0) = 0,

.. math:: c(L) = L\, t_p(1) + \pi_L(L)\,[n > L + 1]\,(t_p(2) - t_p(1)) + c_{round} + [\text{drafts}]\,
          c_{drafting\ round} + L\, c_{draft} + E_{\pi_L}[\min(\tau + 1, n)]\, c_{token},

([drafts]: the method drafts, every round of its run then paying for verifying drafts) and a run of ``N`` tokens
takes ``c_{run} + [\text{drafts}]\, c_{drafting} + T(N) - t_q(L_N + 1)`` (its first target call
is the prefill, priced per run). Exact in its counts, given the rounds' laws (expected target calls are the round
laws'); fitted in its times (``t_p``, ``t_q`` and the ``c`` terms, measured on this machine). The rounds' laws are
taken the same at every position (their mean over the contexts). A tree round of ``L`` levels (the tree cut to them)
feeds the draft level by level — a call that catches up, then one call of ``n_d`` tokens per level ``d < L`` — and the
target its ``N_L`` nodes and one more token in one call (tree attention), priced by the same fitted ``t_p``, ``t_q``
(which do not tell a tree's attention mask from a causal one: an assumption the confirmation checks), plus the
tree's own cost per round, node, level and node drawn without replacement (:class:`TreeOverhead`); rounds of several
draft rows are not priced.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["RunCost", "run_cost", "TreeOverhead", "fit_tree_overhead"]


class RunCost(NamedTuple):
    """A run of ``tokens`` tokens: its expected seconds and target calls."""

    tokens: int
    seconds: float
    calls: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds

    @property
    def tokens_per_call(self) -> float:
        return self.tokens / self.calls


class TreeOverhead(NamedTuple):
    """What a tree round costs beyond the chain's fitted model (:func:`fit_tree_overhead`): seconds per tree round,
    per drafted node and per level drafted — the tree's own bookkeeping, its attention mask, its round law over the
    nodes, its level-by-level drafting — and per node drafted without replacement (siblings drawn distinct: each
    sibling's law is the residual of those drawn before it, which drafting i.i.d. siblings does not compute)."""

    per_round: float = 0.0
    per_node: float = 0.0
    per_level: float = 0.0
    per_distinct_node: float = 0.0

    def of_round(self, method, made: float, levels: int) -> float:
        """The overhead of a round of ``method`` drafting ``made`` nodes in ``levels`` levels (0 without drafts)."""
        return float(np.dot(self, _overhead_features(method, made, levels)))


def _overhead_features(method, made: float, levels: int) -> list:
    """What a round's tree overhead is linear in, in :class:`TreeOverhead`'s order — the round, its nodes, its
    levels, its nodes drawn without replacement — all 0 for a round without drafts; :meth:`TreeOverhead.of_round`
    prices them and :func:`fit_tree_overhead` fits on them."""
    drafts = bool(made)
    distinct = getattr(method, "draws", None) == "distinct"
    return [float(drafts), float(made), levels * drafts, made * distinct]


def _round_forward_seconds(model, method, L: int, made: float, caught_up: float) -> float:
    """The forward passes of one round of ``L`` levels drafting ``made`` tokens: the draft's (:func:`_draft_seconds`),
    one target call of ``made + 1`` tokens, and — with probability ``caught_up``, the chance that the round keeps
    every level and another round follows — the next round's catch-up fed two tokens instead of one. What
    :func:`run_cost` prices a round at, and what :func:`fit_tree_overhead` takes off a timed round."""
    catch_up = caught_up * (float(model.draft(2)) - float(model.draft(1))) if made else 0.0
    return _draft_seconds(model, method, L, made) + catch_up + float(model.target(made + 1))


def _levels(tree, made: int) -> int:
    """The levels of ``tree`` a round drafting ``made`` of its nodes was cut to."""
    return next(L for L in range(1, tree.height + 1) if tree.truncated(L).size >= made)


def fit_tree_overhead(model, timed: list) -> TreeOverhead:
    """The tree rounds' cost beyond ``model`` (a chain-fitted :class:`~speculab.backends.latency.LatencyModel`),
    fitted on timed runs of tree methods (pairs ``(method, TimedRuns)``): each run's clock less what ``model`` prices
    — its rounds' forward passes (the first target call, the prefill, in the run's cost) and the loop's terms — by
    non-negative least squares on its rounds, drafted nodes, levels drafted and nodes drafted without replacement
    (trees of several shapes, drawn both ways: a star of one level, trees of two and three)."""
    from scipy.optimize import nnls

    from speculab.backends.latency import LOOP_TERMS, _loop_features

    loop = np.array([getattr(model, name) for name in LOOP_TERMS])
    rest, X = [], []
    for method, runs in timed:
        counts = runs.result.counts
        for i, rounds in enumerate(runs.result.rounds):
            made = [int(d) for d in rounds.drafted]
            levels = [_levels(method.tree, m) for m in made]
            # a round that kept every level and is followed by another: the next one's draft catches up on two
            full = [float(a == L) for a, L in zip(rounds.accepted, levels)][:-1] + [0.0]
            forward = sum(_round_forward_seconds(model, method, L, m, f) for L, m, f in zip(levels, made, full))
            forward -= float(model.target(made[0] + 1))  # the first target call is the prefill, a cost of the run
            rest.append(float(runs.seconds[i]) - forward - float(_loop_features(counts)[i] @ loop))
            X.append(np.sum([_overhead_features(method, m, L) for L, m in zip(levels, made)], axis=0))
    if not X:
        return TreeOverhead()
    coef, _ = nnls(np.asarray(X, dtype=float), np.asarray(rest))
    return TreeOverhead(*(float(c) for c in coef))


def _draft_seconds(model, method, L: int, made: float) -> float:
    """The draft's forward time in a round of ``L`` levels drafting ``made`` tokens: a chain makes ``made`` calls of
    one token (the first catches up on the last round's output); a tree (a method with a ``tree``) one call that
    catches up, then one per level ``d = 1..L − 1`` feeding its ``n_d`` nodes together — for a chain, the same."""
    tree = getattr(method, "tree", None)
    if tree is None or not made:
        return made * float(model.draft(1))
    depth = np.asarray(tree.truncated(L).depth)
    return float(model.draft(1)) + sum(float(model.draft(int((depth == d).sum()))) for d in range(1, L))


def run_cost(
    model, method, outcome: np.ndarray, drafted: np.ndarray, N: int, tree: TreeOverhead = TreeOverhead()
) -> RunCost:
    """The expected cost of one run of ``N`` tokens of ``method`` (module docstring).

    Args:
      model: a fitted :class:`~speculab.backends.latency.LatencyModel`.
      method: the candidate (its ``draft_length`` gives each round's drafts).
      outcome: ``(K + 1, K + 1)`` the law of ``τ`` in a round of ``L`` drafts, row ``L``
        (:attr:`Yield.outcome <speculab.planning.yields.Yield.outcome>` averaged over the contexts).
      drafted: ``(K + 1,)`` the drafts a round of ``L`` makes (``L``: levels of a tree, ``K`` its height).
      N: the run's tokens.
      tree: a tree round's cost beyond the chain's model (:func:`fit_tree_overhead`), for a tree method.
    """
    extra = tree if getattr(method, "tree", None) is not None else TreeOverhead()
    K = outcome.shape[-1] - 1
    drafts = bool(drafted[min(method.draft_length(N), K)])  # as the fit reads a run: it drafts, or it does not
    T, C = np.zeros(N + 1), np.zeros(N + 1)
    for n in range(1, N + 1):
        L = min(method.draft_length(n), K)
        pi = outcome[L, : L + 1]
        out = np.minimum(np.arange(L + 1) + 1, n)  # tokens output after τ = t
        made = drafted[L]
        follows = n - out[L] > 0  # a fully kept block's bonus is caught up on by the next round's draft
        cost = _round_forward_seconds(model, method, L, made, pi[L] if follows else 0.0)
        cost += model.per_round + (model.per_drafting_round if drafts else 0.0) + made * model.per_draft
        cost += float(pi @ out) * model.per_token
        cost += extra.of_round(method, made, L)
        T[n] = cost + float(pi @ T[n - out])
        C[n] = 1.0 + float(pi @ C[n - out])
    first = min(method.draft_length(N), K)
    seconds = model.per_run + (model.per_drafting_run if drafts else 0.0) + T[N]
    seconds -= float(model.target(drafted[first] + 1))
    return RunCost(N, float(seconds), float(C[N]))
