"""What every run a real-model decode journals satisfies: the checks a journal's run passes before it is replayed
(:mod:`speculab.backends.journal`).

A line's digest proves that speculab's function signed it, not that a decode wrote it: whoever edits a line can
sign it again. So a run is replayed only when it is a run this call can produce. With ``N`` the call's
``max_new_tokens`` and ``V`` the vocabulary, a journaled run (``encode_run``'s output) satisfies:

* its tokens are ids in ``[0, V)``, at least one and at most ``N``; fewer than ``N`` only when the last one is the
  end-of-sequence token, which appears nowhere before it (a run stops at its first EOS);
* its position record (:class:`~speculab.backends.rounds.RunRecord`) has one entry a token, its tokens the run's,
  kinds in 0–3; ``tv``, ``reject_prob``, ``accept_prob`` and ``loss_tv`` in ``[0, 1]`` (``tv`` and
  ``accept_prob`` NaN where nothing was drafted or checked), ``loss_kl ≥ 0`` and ``target_logprob ≤ 0`` (``−∞``
  where the warped target excludes the token), never NaN; a bonus token is a rejection with probability 0 and a
  target sample (autoregressive step) with probability 1, and neither checks a draft;
* its round record (:class:`~speculab.backends.rounds.RoundRecord`) has one entry a round, at least one round and
  no more than its tokens (a round outputs at least one); each round drafts whole tokens, at most what a round
  of the method may draft in ``N`` tokens, accepts ``0 ≤ accepted ≤ drafted`` of them, and its expected accepted
  drafts lie in ``[0, drafted]`` with a variance in ``[0, drafted² / 4]``;
* its counts are integers ``≥ 0``: rejections, accepted drafts and bonus tokens those of its position kinds
  (correction or target sample, accepted draft, bonus), ``draft_calls = rows · Σ drafted`` (a tree method:
  ``Σ`` its nodes), ``accepted ≤`` the drafts its rounds accepted (EOS cuts the rest), ``rejections + bonus ≤``
  its rounds (each ends at one at most), ``oracle_calls ≤`` its rounds (one target call a round at most);
* its time is a finite number ``≥ 0``; with a probe, its observations are a list.

Float checks allow ``1e-9`` of round-off. What no check can see is a run that satisfies all of this and was never
decoded (other tokens with their records worked out consistently, signed): the digest is unkeyed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from speculab.backends.rounds import COUNTED, RoundRecord, RunRecord
from speculab.counts import BONUS, CORRECTION, DRAFT, TARGET
from speculab.methods.capabilities import TreeDrafting, has

__all__ = ["RunLimits", "run_limits", "run_problem"]

TOL = 1e-9  # round-off allowed on the float columns


class RunLimits(NamedTuple):
    """What a journaled run of one decode call can hold.

    Attributes:
      vocab_size: token ids lie below it.
      max_new_tokens: the call's length.
      eos: the end-of-sequence id, or ``None``.
      rows: drafts counted per drafted slot (batch SD's ``M``; a tree method counts its nodes: 1).
      drafts: the most a round drafts (per row; a tree method: nodes).
      probe: whether each run carries its probe's observations.
    """

    vocab_size: int
    max_new_tokens: int
    eos: int | None
    rows: int
    drafts: int
    probe: bool


def run_limits(pair, method, max_new_tokens: int, probe: bool) -> RunLimits:
    """The :class:`RunLimits` of a decode call of ``method`` on ``pair``."""
    lengths = {int(method.draft_length(r)): r for r in range(max_new_tokens, 0, -1)}  # length -> the least r
    if has(method, TreeDrafting):
        rows, drafts = 1, max(int(method.round_tree(r).size) for r in lengths.values())
    else:
        rows, drafts = int(method.rows), max(lengths)
    eos = pair.eos_token_id
    return RunLimits(int(pair.vocab_size), int(max_new_tokens), None if eos is None else int(eos), rows, drafts, probe)


_RECORD = tuple(f.name for f in dataclasses.fields(RunRecord))
_ROUND = tuple(f.name for f in dataclasses.fields(RoundRecord))


def _within(x, low: float, high: float, nan: bool = False) -> bool:
    return (nan and math.isnan(x)) or low - TOL <= x <= high + TOL


def run_problem(run, lim: RunLimits) -> str | None:
    """What is wrong with a journaled run under ``lim`` (module docstring), or ``None``."""
    keys = {"tokens", "record", "rounds", "counts", "seconds"} | ({"probe"} if lim.probe else set())
    if not isinstance(run, dict) or not keys <= set(run):
        return f"a run without its {', '.join(sorted(keys))}"
    return (
        _tokens_problem(run["tokens"], lim)
        or _records_problem(run["record"], run["rounds"], run["tokens"], lim)
        or _counts_problem(run["counts"], run["record"], run["rounds"], lim)
        or _rest_problem(run, lim)
    )


def _tokens_problem(tokens, lim: RunLimits) -> str | None:
    if not isinstance(tokens, list) or not all(type(t) is int and 0 <= t < lim.vocab_size for t in tokens):
        return f"tokens that are not token ids below the vocabulary size {lim.vocab_size}"
    N, eos = lim.max_new_tokens, lim.eos
    stopped = eos is not None and bool(tokens) and tokens[-1] == eos
    if not 1 <= len(tokens) <= N or (len(tokens) < N and not stopped) or (eos is not None and eos in tokens[:-1]):
        return (
            f"{len(tokens)} tokens where the call decodes {N}, fewer only when they end at the end-of-sequence "
            f"token (and at its first)"
        )
    return None


def _records_problem(record, rounds, tokens, lim: RunLimits) -> str | None:
    if not (isinstance(record, dict) and isinstance(rounds, dict) and set(record) == set(_RECORD)) or set(
        rounds
    ) != set(_ROUND):
        return f"records without exactly the fields {sorted(_RECORD)} and {sorted(_ROUND)}"
    columns = (*record.values(), *rounds.values())
    if not all(isinstance(v, list) and all(type(x) in (int, float) for x in v) for v in columns):
        return "records that are not lists of numbers"
    if record["tokens"] != tokens or any(len(v) != len(tokens) for v in record.values()):
        return "a position record that does not match its tokens"
    if not all(type(k) is int and k in (DRAFT, CORRECTION, BONUS, TARGET) for k in record["kind"]) or (
        len({len(v) for v in rounds.values()}) > 1
    ):
        return "position kinds other than 0–3, or round records of different lengths"
    problem = _positions_problem(record)
    if problem:
        return problem
    drafted, accepted = rounds["drafted"], rounds["accepted"]
    if not 1 <= len(drafted) <= len(tokens):
        return f"{len(drafted)} rounds for {len(tokens)} tokens (a run has a round, and a round outputs a token)"
    if not all(type(d) is int and type(a) is int and 0 <= a <= d <= lim.drafts for d, a in zip(drafted, accepted)):
        return f"rounds that do not draft whole tokens up to {lim.drafts} and accept 0 to their drafts"
    for d, mean, var in zip(drafted, rounds["expected_accepted"], rounds["var_accepted"]):
        if not (_within(mean, 0, d) and _within(var, 0, d * d / 4)):
            return "a round's expected accepted drafts outside [0, drafted] or variance outside [0, drafted² / 4]"
    return None


def _positions_problem(record) -> str | None:
    columns = zip(*(record[k] for k in ("kind", "tv", "reject_prob", "accept_prob", "loss_tv", "loss_kl")))
    for kind, tv, reject, accept, loss_tv, loss_kl in columns:
        if not (
            _within(tv, 0, 1, nan=True)
            and _within(reject, 0, 1)
            and _within(accept, 0, 1, nan=True)
            and _within(loss_tv, 0, 1)
            and _within(loss_kl, 0, math.inf)
        ):
            return (
                "probabilities outside [0, 1] or NaN where a number is due (tv, reject_prob, accept_prob, loss_tv), "
                "or a KL loss below 0"
            )
        if kind in (BONUS, TARGET) and not (reject == (kind == TARGET) and math.isnan(accept)):
            return "a bonus token or target sample that is not a rejection with probability 0 or 1, or checks a draft"
    if not all(x <= TOL for x in record["target_logprob"]):  # NaN fails too
        return "target log-probabilities above 0 or NaN"
    return None


def _counts_problem(counts, record, rounds, lim: RunLimits) -> str | None:
    if not (
        isinstance(counts, dict)
        and set(counts) == set(COUNTED)
        and all(type(v) is int and v >= 0 for v in counts.values())
    ):
        return f"counts that are not the integers ≥ 0 {sorted(COUNTED)}"
    kinds = record["kind"]
    implied = {
        "rejections": kinds.count(CORRECTION) + kinds.count(TARGET),
        "accepted": kinds.count(DRAFT),
        "bonus": kinds.count(BONUS),
    }
    n_rounds = len(rounds["drafted"])
    if any(counts[k] != v for k, v in implied.items()) or counts["rejections"] + counts["bonus"] > n_rounds:
        return (
            "counts that do not match the position record (rejections, accepted drafts, bonus tokens), or more "
            "rejections and bonus tokens than rounds"
        )
    if counts["draft_calls"] != lim.rows * sum(rounds["drafted"]) or counts["accepted"] > sum(rounds["accepted"]):
        return (
            f"draft calls that are not {lim.rows} × the rounds' drafts, or more accepted drafts than the rounds "
            f"accepted"
        )
    if counts["oracle_calls"] > n_rounds:
        return "more target calls than rounds"
    return None


def _rest_problem(run, lim: RunLimits) -> str | None:
    seconds = run["seconds"]
    if type(seconds) not in (int, float) or not 0 <= seconds < math.inf:
        return "a time that is not a finite number ≥ 0"
    if lim.probe and not isinstance(run["probe"], list):
        return "probe observations that are not a list"
    return None
