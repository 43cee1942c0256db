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

.. math:: c(L) = L\, t_p(1) + \pi_L(L)\,[n > L + 1]\,(t_p(2) - t_p(1)) + c_{round} + L\, c_{draft}
          + E_{\pi_L}[\min(\tau + 1, n)]\, c_{token},

and a run of ``N`` tokens takes ``c_{run} + [L_N > 0]\, c_{drafting} + T(N) - t_q(L_N + 1)`` (its first target call
is the prefill, priced per run). Exact in its counts, given the rounds' laws (expected target calls are the round
laws'); fitted in its times (``t_p``, ``t_q`` and the ``c`` terms, measured on this machine). The rounds' laws are
taken the same at every position (their mean over the contexts); rounds of several draft rows or of a tree are not
priced by the latency model.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["RunCost", "run_cost"]


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


def run_cost(model, method, outcome: np.ndarray, drafted: np.ndarray, N: int) -> RunCost:
    """The expected cost of one run of ``N`` tokens of ``method`` (module docstring).

    Args:
      model: a fitted :class:`~speculab.backends.latency.LatencyModel`.
      method: the candidate (its ``draft_length`` gives each round's drafts).
      outcome: ``(K + 1, K + 1)`` the law of ``τ`` in a round of ``L`` drafts, row ``L``
        (:attr:`Yield.outcome <speculab.planning.yields.Yield.outcome>` averaged over the contexts).
      drafted: ``(K + 1,)`` the drafts a round of ``L`` makes.
      N: the run's tokens.
    """
    K = outcome.shape[-1] - 1
    t_p1, t_p2 = float(model.draft(1)), float(model.draft(2))
    T, C = np.zeros(N + 1), np.zeros(N + 1)
    for n in range(1, N + 1):
        L = min(method.draft_length(n), K)
        pi = outcome[L, : L + 1]
        out = np.minimum(np.arange(L + 1) + 1, n)  # tokens output after τ = t
        made = drafted[L]
        follows = made and n - out[L] > 0  # a fully kept block's bonus is caught up on by the next round's draft
        cost = made * t_p1 + (pi[L] * (t_p2 - t_p1) if follows else 0.0)
        cost += model.per_round + made * model.per_draft + float(pi @ out) * model.per_token
        T[n] = cost + float(model.target(made + 1)) + float(pi @ T[n - out])
        C[n] = 1.0 + float(pi @ C[n - out])
    first = min(method.draft_length(N), K)
    seconds = model.per_run + (model.per_drafting_run if drafted[first] else 0.0) + T[N]
    seconds -= float(model.target(drafted[first] + 1))
    return RunCost(N, float(seconds), float(C[N]))
