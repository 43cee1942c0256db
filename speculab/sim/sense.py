"""What every run a simulator counts satisfies: the checks a checkpoint's or a recorded call's counts pass before
they are replayed (:mod:`speculab.sim.checkpoint`).

A line's digest proves that speculab's function signed it, not that a simulator wrote it: anyone can edit a line
and sign it again. So a line is replayed only when its counts are counts a simulation of this method on this
instance can produce. With ``T`` the horizon and ``n`` the runs of the line, both engines' counts satisfy
(:class:`~speculab.counts.Counts`, [Yin] Alg. 2 and the counting conventions of :mod:`speculab.counts`):

* ``n`` runs of non-negative integers per field, each run ``tokens = T``;
* every output token is an accepted draft, a rejection or a bonus: ``accepted + rejections + bonus = tokens``;
* ``discarded = draft_calls − accepted`` (so no run accepts more drafts than it drafted);
* a rejection or a bonus is drawn from the target, once per target call: ``rejections + bonus ≤ oracle_calls ≤ T``;
* a method of rounds (every reading but a position law) makes one target call a round and every round but the
  last ends at a rejection or a bonus: ``oracle_calls ≤ rejections + bonus + 1``; a round that may output ``r``
  more tokens drafts ``rows · draft_length(r)`` tokens (a tree method: its round tree's nodes), and the rounds of
  a run start at distinct positions, so ``draft_calls ≤ Σ_{r=1}^{T} drafts(r)``;
* a position law (SPRINTER: no rounds) drafts one token a position and draws no bonus: ``draft_calls = T``,
  ``bonus = 0``;
* a method's extra counts (``verifier_calls``) grow by one at every position: each equals ``T``;
* ``rejections_per_position`` has ``T`` rates in ``[0, 1]``, each a count of runs over ``n``, and they sum to
  the mean rejections: ``Σ_t rate_t · n = Σ_runs rejections``.

What no check can see is a line that satisfies all of this and was never simulated (other draws of the same
method, fabricated whole and signed): the digest is unkeyed, so it proves no origin against someone who can run
speculab.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from speculab.counts import Counts
from speculab.methods.capabilities import TreeDrafting, has, reading

__all__ = ["Limits", "limits", "counts_problem"]


class Limits(NamedTuple):
    """What a run of one method on one instance can count.

    Attributes:
      T: the horizon (tokens of every run).
      drafts: the most draft calls a run can make.
      rounds: whether the method runs in rounds of one target call each (else a position law).
    """

    T: int
    drafts: int
    rounds: bool


def _max_drafts(method, T: int) -> int:
    """``Σ_{r=1}^{T} drafts(r)``: a round that may output at most ``r`` tokens drafts ``rows · draft_length(r)``
    tokens, a tree method's its round tree's nodes (worked out once per draft length)."""
    first: dict[int, int] = {}  # draft length -> the first r that has it
    times: dict[int, int] = {}
    for r in range(1, T + 1):
        length = int(method.draft_length(r))
        first.setdefault(length, r)
        times[length] = times.get(length, 0) + 1
    if has(method, TreeDrafting):
        return sum(n * int(method.round_tree(first[length]).size) for length, n in times.items())
    return int(method.rows) * sum(n * length for length, n in times.items())


def limits(method, T: int) -> Limits:
    """The :class:`Limits` of ``method`` at horizon ``T`` (module docstring)."""
    rounds = reading(method) != "positions"
    return Limits(int(T), _max_drafts(method, T) if rounds else int(T), rounds)


def counts_problem(c: Counts, lim: Limits, runs: int) -> str | None:
    """What makes ``c`` other than the counts of ``runs`` runs under ``lim`` (module docstring), or ``None``."""
    if c.n_runs != runs:
        return f"it has {c.n_runs} runs where the simulation has {runs} there"
    T = lim.T
    if np.any(c.tokens != T):
        return f"a run has {int(c.tokens[c.tokens != T][0])} tokens, not the horizon's {T}"
    if np.any(c.accepted + c.rejections + c.bonus != c.tokens):
        return "a run's accepted drafts, rejections and bonus tokens do not add up to its tokens"
    if np.any(c.discarded != c.draft_calls - c.accepted):
        return "a run's discarded drafts are not its draft calls less its accepted drafts"
    if np.any(c.rejections + c.bonus > c.oracle_calls) or np.any(c.oracle_calls > T):
        return f"a run has fewer target calls than rejections and bonus tokens, or more than its {T} tokens"
    if lim.rounds and np.any(c.oracle_calls > c.rejections + c.bonus + 1):
        return "a run has more rounds (target calls) than its rejections and bonus tokens end, plus the last"
    if lim.rounds and np.any(c.draft_calls > lim.drafts):
        return f"a run drafts more than the {lim.drafts} tokens its rounds can draft in {T} positions"
    if not lim.rounds and (np.any(c.draft_calls != T) or np.any(c.bonus != 0)):
        return f"a run of a position law that does not draft once at each of its {T} positions, or draws a bonus"
    wrong = [k for k, v in c.extra.items() if np.any(v != T)]
    if wrong:
        return f"{wrong[0]} is not {T} (one a position) in every run"
    return _rates_problem(c.rejections_per_position, c.rejections, T, runs)


def _rates_problem(rates: np.ndarray, rejections: np.ndarray, T: int, runs: int) -> str | None:
    if rates is None or rates.shape != (T,) or not np.all((rates >= 0) & (rates <= 1)):
        return f"its rejection rates per position are not {T} numbers in [0, 1]"
    counted = rates * runs
    whole = np.round(counted)
    if np.any(np.abs(counted - whole) > 1e-6) or whole.sum() != rejections.sum():
        return "its rejection rates per position are not counts of its runs summing to its rejections"
    return None
