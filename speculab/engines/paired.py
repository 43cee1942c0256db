r"""An engine's accepted drafts, slot by slot, beside the exact prediction for its rule along its own sequences.

An engine that reports each request's rounds — how many tokens it drafted and how many it kept, round by round
(vLLM: ``per_request_spec_decode_metrics="detailed"``) — has told us where every round started: the first output
token comes from the target alone (the prefill), and round ``j`` starts at output position
``s_j = 2 + Σ_{i<j} (A_i + 1)``. Slot ``i`` of round ``j`` is *reached* when the first ``i − 1`` drafts were kept; its
context is then the request's own output ``y_{<s_j+i−1}``, so the draft's and the target's laws there are computed
here, by speculab, from the same models. The rule's probability of keeping the slot's draft *before it is drawn* is
``1 − r``, ``r`` = the round law's ``reject_prob`` at the slot (SD: ``r = TV(p, q)``; greedy drafts:
``r = 1 − q(argmax p)``). So, with ``R`` the set of reached slots,

.. math:: \text{kept} = \sum_{(j, i) \in R} 1\{A_j \ge i\}, \qquad
          \mathbb{E}[\text{kept} \mid \text{contexts}] = \sum_{(j, i) \in R} (1 - r_{j,i}),

a sum of Bernoulli variables each with a probability known before it is drawn (a martingale), whose variance is
``Σ r(1 − r)``: the z-score ``(kept − predicted) / √Σ r(1 − r)`` is standard normal for large sums when the engine
runs the rule. A slot whose context runs past the observed output (the last round, cut at ``max_tokens``) is left
out of both sums — a rule fixed before the slot is drawn, so no selection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

__all__ = [
    "Request",
    "SlotRow",
    "round_starts",
    "slot_rows",
    "target_calls",
    "refused_repeats",
    "Repeats",
    "Z_BOUND",
    "RELATIVE_ERROR",
]

#: The z-score beyond which a slot's measured kept drafts refuse the rule's prediction.
Z_BOUND = 5.0
#: The error of a prediction the stated power is computed against: the kept drafts off by 10 % of the prediction.
RELATIVE_ERROR = 0.10


@dataclass(frozen=True)
class Request:
    """One request as an engine reports it: its prompt's token ids, its output tokens, and per round the tokens
    drafted and kept."""

    prompt: list
    tokens: list
    drafted: list
    accepted: list


@dataclass(frozen=True)
class SlotRow:
    """Slot ``slot`` of the rounds (``0``: every slot together): reached slots, drafts kept (measured) and the
    rule's prediction with its standard deviation, the z-score, and the power of ``|z| ≥ Z_BOUND`` against kept
    drafts off by :data:`RELATIVE_ERROR` of the prediction."""

    slot: int
    reached: int
    measured: int
    predicted: float
    se: float
    z: float
    power: float

    @property
    def ok(self) -> bool:
        return not abs(self.z) >= Z_BOUND  # NaN (nothing reached) is not a refusal


def round_starts(request: Request) -> list[int]:
    """The 1-based output position at which each round started (module docstring); checked against the output."""
    if len(request.drafted) != len(request.accepted):
        raise ValueError(
            f"a request reports {len(request.drafted)} rounds drafted but {len(request.accepted)} rounds kept"
        )
    starts, s = [], 2
    for d, a in zip(request.drafted, request.accepted):
        if not 0 <= a <= d:
            raise ValueError(f"a round kept {a} of {d} drafts: not a count of kept drafts")
        if s > len(request.tokens):
            raise ValueError(f"a round starts at output position {s}, past the request's {len(request.tokens)} tokens")
        starts.append(s)
        s += a + 1
    if request.drafted and s - 1 < len(request.tokens):
        raise ValueError(
            f"the rounds output {s - 2} tokens after the first, fewer than the request's {len(request.tokens) - 1}"
        )
    return starts


def slot_rows(requests: list[Request], reject_prob) -> list[SlotRow]:
    """Per-slot rows and a total (slot 0) of kept drafts against the prediction (module docstring).

    Args:
      requests: the engine's requests.
      reject_prob: ``reject_prob(request, start, L)`` → ``(L,)`` the rule's refusal probabilities at the ``L``
        slots of a round started at output position ``start`` whose contexts are all observed.
    """
    K = max((d for r in requests for d in r.drafted), default=0)
    kept, reached = np.zeros(K + 1), np.zeros(K + 1)
    mean, var = np.zeros(K + 1), np.zeros(K + 1)
    for req in requests:
        T = len(req.tokens)
        for s, d, a in zip(round_starts(req), req.drafted, req.accepted):
            L = min(d, T + 1 - (s - 1))  # slots whose context y_{<s+i-1} lies within the output: s + i - 1 <= T + 1
            if L <= 0:
                continue
            r = np.asarray(reject_prob(req, s, L), dtype=float)
            if r.shape != (L,) or not np.all((r >= 0) & (r <= 1)):  # NaN fails too
                raise ValueError(f"reject_prob gave {r!r} for {L} slots: not {L} probabilities in [0, 1]")
            for i in range(1, L + 1):
                if a < i - 1:
                    break  # not reached
                reached[i] += 1
                kept[i] += a >= i
                mean[i] += 1 - r[i - 1]
                var[i] += r[i - 1] * (1 - r[i - 1])
    rows = []
    for slot in [*range(1, K + 1), 0]:
        sl = slice(1, None) if slot == 0 else slice(slot, slot + 1)
        m, v, k, n = mean[sl].sum(), var[sl].sum(), kept[sl].sum(), reached[sl].sum()
        se = math.sqrt(v)
        z = (k - m) / se if se > 0 else (0.0 if k == m else math.copysign(math.inf, k - m)) if n else math.nan
        shift = RELATIVE_ERROR * m / se if se > 0 else math.inf
        power = float(norm.sf(Z_BOUND - shift) + norm.cdf(-Z_BOUND - shift)) if n else math.nan
        rows.append(SlotRow(slot, int(n), int(k), float(m), se, float(z), power))
    return rows


def target_calls(request: Request) -> int:
    """The target's forward calls for one request: the prefill (the first token), one per round (its kept drafts
    and one more token), and one per step that drafted nothing — the output left after the rounds. Exact even when
    the last round is cut at ``max_tokens`` (its kept drafts then outnumber the tokens it output)."""
    T = len(request.tokens)
    if T == 0:
        return 0
    rounds_out = sum(a + 1 for a in request.accepted)
    return 1 + len(request.accepted) + max(0, T - 1 - rounds_out)


@dataclass(frozen=True)
class Repeats:
    """Greedy drafts' exact check (:func:`refused_repeats`): of the ``seen`` refused slots, ``same`` output the
    draft itself — 0 for the rule."""

    same: int
    seen: int


def refused_repeats(requests: list[Request], drafts) -> Repeats:
    """Greedy drafts' exact check, no statistics: at a refused slot the rule outputs a token of the target's law
    *without* the draft ``x`` (the residual ``(q − δ_x)^+`` has no mass at ``x``), so the token output there is never
    the draft. ``drafts(request, start, L)`` → the drafted tokens at the ``L`` slots of a round started at output
    position ``start``."""
    same = seen = 0
    for req in requests:
        T = len(req.tokens)
        for s, d, a in zip(round_starts(req), req.drafted, req.accepted):
            if a >= d or s + a > T:
                continue  # every draft kept, or the refused slot's output cut at max_tokens
            x = drafts(req, s, a + 1)[a]
            seen += 1
            same += int(req.tokens[s + a - 1] == x)
    return Repeats(same, seen)
