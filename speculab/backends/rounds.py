"""One round of real-model decoding as tensor operations on every row at once: its law, its output, its records.

Convention: ``p`` = draft, ``q`` = target. Both decoding paths (the batch of
:mod:`speculab.backends.batched` and the one-prompt loop of :mod:`speculab.backends.decode`) end a round here:

* :func:`cut_law` gives every row the law of its own block from one evaluation of a slotwise method's round law
  on the batch's longest block (a row whose block ends earlier — at the horizon, after a drafted EOS — keeps
  the law's first slots and folds the rest into "all its drafts accepted");
* :func:`round_output` turns the decision drawn from the law into each row's output tokens, position records,
  round record and the tokens each model must still be fed, with no Python loop over rows or slots;
* :class:`Records` keeps the rounds' outputs on the models' device and copies them to the host once, when the
  caller collects them.

Counts follow the simulators (:class:`~speculab.counts.Counts`): a *rejection* is a token drawn from a correction
law (every token of autoregressive decoding), an *oracle call* is one target forward pass (a round), *draft calls*
are drafted tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from speculab import kernels
from speculab.counts import BONUS, CORRECTION, DRAFT, TARGET, rejected
from speculab.methods import RoundLaw

__all__ = [
    "RunRecord",
    "RoundRecord",
    "RoundInfo",
    "Chunk",
    "Records",
    "cut_law",
    "pad_law",
    "round_output",
    "cut_at_eos",
    "COUNTED",
]


@dataclass(frozen=True)
class RunRecord:
    """Per-position record of one decoded sequence (arrays of length = generated tokens).

    Attributes:
      tokens: generated token ids.
      kind: 0 accepted draft, 1 correction (a rejection), 2 bonus, 3 target sample (AR).
      tv: ``TV(p_n, q_n)`` at the position (NaN where ``p_n`` was not computed).
      reject_prob: conditional probability, given the prefix, that this position is a
        rejection (SD: ``TV``; batch root: ``Π r_m``; biased: ``Σ(1−b)p``; bonus: 0). A tree method conditions on
        the drafted tree too: ``P(the path ends at this position's node | it reached the node, the tree)`` — drawn
        at the round's start, so the paired sum is a martingale all the same.
      accept_prob: acceptance probability of the draft checked here (NaN if none).
      loss_tv: ``TV(P_A,n, q_n)`` of the algorithm's one-step output law to the target (0 if unbiased).
      loss_kl: ``KL(P_A,n ‖ q_n)`` likewise.
      target_logprob: ``log q_n(x_n)`` of the output token (``-inf`` where the warped target excludes it: a biased
        method under top-k / top-p can output such a token, and the sequence then has target likelihood 0).
    """

    tokens: np.ndarray
    kind: np.ndarray
    tv: np.ndarray
    reject_prob: np.ndarray
    accept_prob: np.ndarray
    loss_tv: np.ndarray
    loss_kl: np.ndarray
    target_logprob: np.ndarray


@dataclass(frozen=True)
class RoundRecord:
    """Per-round record of one decoded sequence (arrays of length = rounds).

    Attributes:
      drafted: tokens drafted per row.
      accepted: drafts accepted, as drawn from the round law (before any cut at EOS).
      expected_accepted: ``E[τ | drafted block]`` under the method's round law (a tree method: the drafted tree).
      var_accepted: ``Var[τ | drafted block]``.
    """

    drafted: np.ndarray
    accepted: np.ndarray
    expected_accepted: np.ndarray
    var_accepted: np.ndarray


@dataclass(frozen=True)
class RoundInfo:
    """What ``decode(..., on_round=f)`` passes to ``f`` after every round (torch tensors, float64).

    Attributes:
      run: index of the run (prompt) being decoded.
      p: ``(M, L, V)`` draft laws at the drafted slots (a tree method: ``(N + 1, V)``, the law at each node).
      q: ``(M, L + 1, V)`` target laws there and at the next position (a tree method: ``(N + 1, V)``).
      drafts: ``(M, L)`` drafted tokens (a tree method: ``(N + 1,)``, the nodes' tokens, ``-1`` absent).
      law: the method's :class:`~speculab.methods.RoundLaw` (batch axis of size 1; a tree method's
        :class:`~speculab.methods.tree.TreeLaw`).
      row, accepted: the decision drawn (a tree method: the end node and its depth).
      predictions: what the method's head gave at the drafted slots (SpecDec++'s predicted acceptances,
        SPRINTER's verdicts), or ``None`` for a method without a head.
    """

    run: int
    p: torch.Tensor
    q: torch.Tensor
    drafts: torch.Tensor
    law: RoundLaw
    row: int
    accepted: int
    predictions: list | None = None


#: The counts a run keeps as it decodes (``discarded`` and ``tokens`` follow from them and its tokens).
COUNTED = ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus")

#: The integer columns of the records (the others are float64).
_INTEGER = {"tokens", "kind", "drafted", "accepted"}
_POSITION = tuple(RunRecord.__dataclass_fields__)
_ROUND = tuple(RoundRecord.__dataclass_fields__)


def record(cls, cols: dict):
    """A :class:`RunRecord` or :class:`RoundRecord` from its columns (arrays, or a journal's JSON lists)."""
    return cls(**{k: np.asarray(v, dtype=np.int64 if k in _INTEGER else np.float64) for k, v in cols.items()})


# -- the law of each row's own block ---------------------------------------------------------------------------
def pad_law(law: RoundLaw, rows: int, width: int) -> RoundLaw:
    """``law`` of ``M`` rows of ``L`` drafts widened to ``rows`` rows of ``width − 1`` drafts: the extra rows and
    slots have no mass (nothing is ever decided there), so a draw from the wider law with the same uniforms decides
    as the law does (a method may give an empty block's law on fewer rows than it drafts: batch SD gives one)."""
    m, s = rows - law.outcome.shape[-2], width - law.outcome.shape[-1]
    if m == s == 0:
        return law
    return RoundLaw(
        F.pad(law.outcome, (0, s, 0, m)),
        F.pad(law.correction, (0, 0, 0, s, 0, m)),
        F.pad(law.reject_prob, (0, s, 0, m)),
        F.pad(law.accept_prob, (0, s, 0, m), value=math.nan),
        None if law.law is None else F.pad(law.law, (0, 0, 0, s, 0, m)),
    )


def cut_law(law: RoundLaw, q: torch.Tensor, length: torch.Tensor, bonus: torch.Tensor) -> RoundLaw:
    r"""Each row's law of its own block from a slotwise method's law of the longest block (drafts ``L``).

    A slotwise method (:class:`~speculab.methods.capabilities.Slotwise`) decides slot ``i`` from slot ``i``'s laws and
    draft alone, so the law of a block's first ``ℓ`` drafts is the law of the whole block with every outcome
    :math:`\tau \ge \ell` folded into :math:`\tau = \ell` (the first ``ℓ`` drafts accepted), followed there by
    the bonus law ``q_{ℓ+1}`` when a position follows (``bonus``) and by nothing otherwise.

    Args:
      law: the round law of the whole blocks, evaluated with ``bonus=True``, ``(B, M, L + 1)`` outcomes.
      q: ``(B, M, L + 1, V)`` the target's laws the law was evaluated on.
      length: ``(B,)`` each row's own block length ``ℓ``, ``1 ≤ ℓ ≤ L`` (an empty block is not a prefix: its law
        is the method's own, :meth:`~speculab.methods.Method.round_law` of no drafts).
      bonus: ``(B,)`` whether a position follows each row's block.
    """
    slot = torch.arange(law.outcome.shape[-1], device=q.device)  # (L + 1,)
    ell = length[:, None, None]  # (B, 1, 1)
    before, at = slot < ell, slot == ell  # (B, 1, L + 1)
    reached = torch.where(slot >= ell, law.outcome, 0.0).sum(-1, keepdim=True)  # P(row m, first ℓ accepted)
    outcome = torch.where(before, law.outcome, torch.where(at, reached, 0.0))
    follows = at & bonus[:, None, None]
    correction = torch.where(before[..., None], law.correction, torch.where(follows[..., None], q, 0.0))
    reject_prob = torch.where(before, law.reject_prob, 0.0)
    return RoundLaw(outcome, correction, reject_prob, law.accept_prob, law.law)


# -- what a round outputs ------------------------------------------------------------------------------------
class Chunk(NamedTuple):
    """One round's output for ``B`` rows, on the models' device: position fields ``(B, L + 1)`` (slot ``i`` of the
    followed row; ``valid`` marks the tokens output, cut after an EOS) and round fields ``(B,)``."""

    tokens: torch.Tensor
    kind: torch.Tensor
    tv: torch.Tensor
    reject_prob: torch.Tensor
    accept_prob: torch.Tensor
    loss_tv: torch.Tensor
    loss_kl: torch.Tensor
    target_logprob: torch.Tensor
    valid: torch.Tensor
    drafted: torch.Tensor
    accepted: torch.Tensor
    expected_accepted: torch.Tensor
    var_accepted: torch.Tensor
    oracle_calls: torch.Tensor
    draft_calls: torch.Tensor


class Output(NamedTuple):
    """:func:`round_output`'s result: the round's :class:`Chunk`, and per row ``(B,)`` the tokens output, whether
    an EOS was output, the token that ends the round (the correction or bonus, ``-1`` if none), the followed row's
    last draft and whether it was accepted with the whole block (both models are fed these next)."""

    chunk: Chunk
    produced: torch.Tensor
    eos: torch.Tensor
    token: torch.Tensor
    last_draft: torch.Tensor
    all_accepted: torch.Tensor


def round_output(
    law: RoundLaw, p, q, x, decision, length, *, rows: int, eos: int | None, tracked_tv=None, oracle_calls=None
) -> Output:
    """Every row's output of a round from its law and the decision drawn from it (no loop over rows or slots).

    Args:
      law: each row's round law, ``(B, M, L + 1)`` outcomes (widened with :func:`pad_law` or cut with
        :func:`cut_law` to the batch's ``L``).
      p, q, x: ``(B, M, L, V)`` draft laws, ``(B, M, L + 1, V)`` target laws, ``(B, M, L)`` drafts.
      decision: ``(row, accepted, token)`` from :func:`~speculab.methods.sample_round`, ``(B,)`` each.
      length: ``(B,)`` each row's own block length (``0``: nothing drafted, one target step).
      rows: the method's draft rows (draft calls are ``rows · length``).
      eos: the end-of-sequence token (the output is cut after it), or ``None``.
      tracked_tv: ``(B,)`` ``TV(p_1, q_1)`` for a round without drafts that ran the draft alongside, or ``None``.
      oracle_calls: ``(B,)`` target calls of the round (default one per row).
    """
    row, tau, token = decision
    B, _, L = x.shape
    dev = q.device
    if L == 0:  # every row one target step: its token from q_1 (autoregressive decoding, empty blocks)
        return _target_steps(q[:, 0, 0], token, eos, tracked_tv, oracle_calls)
    if x.size(1) == 1:  # one draft row (every method but batch SD's): views, no gathers over the vocabulary
        pf, qf, xf, reject_row, accept_row = p[:, 0], q[:, 0], x[:, 0], law.reject_prob[:, 0], law.accept_prob[:, 0]
        step = None if law.law is None else law.law[:, 0]
    else:
        b = torch.arange(B, device=dev)
        pf, qf, xf, reject_row, accept_row = (
            p[b, row],
            q[b, row],
            x[b, row],
            law.reject_prob[b, row],
            law.accept_prob[b, row],
        )  # (B, L, V), (B, L + 1, V), (B, L), (B, L + 1), (B, L): the followed row
        step = None if law.law is None else law.law[b, row]  # (B, L, V): the one-step output law at each slot
    slot = torch.arange(L + 1, device=dev)[None, :]  # (1, L + 1)
    t, ell = tau[:, None], length[:, None]
    output = slot < t + (token[:, None] >= 0)  # the accepted drafts, and the token after them if one follows
    tokens = torch.where(slot == t, token[:, None].clamp(min=0), F.pad(xf, (0, 1)))
    ends = torch.where(ell == 0, TARGET, torch.where(t < ell, CORRECTION, BONUS))  # the kind of the token after τ
    kind = torch.where(slot < t, DRAFT, ends)
    checked = slot < t + (t < ell)  # a draft was checked at the slot: the accepted ones and a corrected one
    valid, eos_out = cut_at_eos(output, tokens, eos)
    drafted = [kernels.tv(pf, qf[:, :L]), accept_row]  # (B, L) each: TV(p, q) and the acceptance at each slot
    tv, accept = torch.where(checked, F.pad(torch.stack(drafted), (0, 1)), math.nan).unbind(0)
    if tracked_tv is not None:
        tv = torch.where(kind == TARGET, tracked_tv[:, None], tv)
    reject = torch.where(checked, reject_row, (ell == 0).to(qf.dtype))  # a target step is a rejection for sure
    if step is None:
        loss_tv = loss_kl = torch.zeros_like(tv)
    else:
        losses = torch.stack([kernels.tv(step, qf[:, :L]), kernels.kl(step, qf[:, :L])])
        loss_tv, loss_kl = torch.where(checked, F.pad(losses, (0, 1)), 0.0).unbind(0)
    logq = torch.log(qf.gather(-1, tokens[..., None])[..., 0])  # -inf where the warped target excludes the token
    mean, var = law.expected_accepted()
    chunk = Chunk(
        tokens,
        kind,
        tv,
        reject,
        accept,
        loss_tv,
        loss_kl,
        logq,
        valid,
        length,
        tau,
        mean,
        var,
        torch.ones_like(tau) if oracle_calls is None else oracle_calls,
        rows * length,
    )
    return Output(chunk, valid.sum(-1), eos_out, token, xf[:, -1], (tau == L) & (length == L))


def cut_at_eos(output: torch.Tensor, tokens: torch.Tensor, eos: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The output slots ``(B, w)`` kept when nothing follows the first end-of-sequence token, and whether each row
    output one ``(B,)`` (``eos=None``: every output slot, and none)."""
    if eos is None:
        return output, torch.zeros(output.size(0), dtype=torch.bool, device=output.device)
    hit = output & (tokens == eos)
    valid = output & (hit.cumsum(-1) - hit.long() == 0)  # nothing after the first EOS
    return valid, (hit & valid).any(-1)


def _target_steps(q, token, eos, tracked_tv, oracle_calls) -> Output:
    """:func:`round_output` of a round in which no row drafted: one token from ``q`` ``(B, V)`` per row."""
    B, dev = token.size(0), q.device
    zero = torch.zeros((B, 1), dtype=q.dtype, device=dev)
    tokens = token.clamp(min=0)[:, None]  # (a law of NaN logits draws -1: refused once the round reads its flag)
    valid = torch.ones((B, 1), dtype=torch.bool, device=dev)
    tv = zero + math.nan if tracked_tv is None else tracked_tv[:, None].to(q.dtype)
    logq = torch.log(q.gather(-1, tokens))
    zeros = torch.zeros(B, dtype=torch.long, device=dev)
    chunk = Chunk(
        tokens,
        torch.full((B, 1), TARGET, dtype=torch.long, device=dev),
        tv,
        zero + 1.0,
        zero + math.nan,
        zero,
        zero,
        logq,
        valid,
        zeros,
        zeros,
        zero[:, 0],
        zero[:, 0],
        zeros + 1 if oracle_calls is None else oracle_calls,
        zeros,
    )
    eos_hit = tokens[:, 0] == eos if eos is not None else torch.zeros(B, dtype=torch.bool, device=dev)
    return Output(chunk, valid[:, 0].long(), eos_hit, token, zeros, torch.zeros(B, dtype=torch.bool, device=dev))


class Records:
    """The rounds' outputs of a batch of runs, kept on the device until :meth:`collect` copies them once."""

    def __init__(self, runs: int):
        self.runs = runs
        self.ids: list[torch.Tensor] = []
        self.chunks: list[Chunk] = []

    def add(self, ids: torch.Tensor, chunk: Chunk) -> None:
        """Keep a round's chunk; ``ids`` ``(B,)`` are its rows' run indices (``0 ≤ id < runs``)."""
        self.ids.append(ids)
        self.chunks.append(chunk)

    def collect(self) -> list[tuple[list[int], RunRecord, RoundRecord, dict]]:
        """Per run: its tokens, :class:`RunRecord`, :class:`RoundRecord` and counts (:data:`COUNTED`)."""
        if not self.chunks:
            raise ValueError("no rounds were recorded")
        width = max(c.tokens.size(1) for c in self.chunks)
        host = {}
        for name in Chunk._fields:
            parts = [getattr(c, name) for c in self.chunks]
            if parts[0].ndim == 2:
                parts = [F.pad(v, (0, width - v.size(1))) for v in parts]  # padding is never valid
            host[name] = torch.cat(parts).cpu().numpy()
        ids = torch.cat(self.ids).cpu().numpy()
        order = np.argsort(ids, kind="stable")  # each run's rounds, in order
        ids = ids[order]
        host = {k: v[order] for k, v in host.items()}
        valid = host["valid"]
        per_run = np.bincount(ids, weights=valid.sum(1), minlength=self.runs).astype(np.int64)
        rounds = np.bincount(ids, minlength=self.runs)
        positions = {k: np.split(host[k][valid], np.cumsum(per_run)[:-1]) for k in _POSITION}
        per_round = {k: np.split(host[k], np.cumsum(rounds)[:-1]) for k in (*_ROUND, "oracle_calls", "draft_calls")}
        out = []
        for r in range(self.runs):
            kind = positions["kind"][r]
            counts = {
                "rejections": int(np.sum(rejected(kind))),
                "oracle_calls": int(per_round["oracle_calls"][r].sum()),
                "draft_calls": int(per_round["draft_calls"][r].sum()),
                "accepted": int(np.sum(kind == DRAFT)),
                "bonus": int(np.sum(kind == BONUS)),
            }
            out.append(
                (
                    positions["tokens"][r].tolist(),
                    record(RunRecord, {k: positions[k][r] for k in _POSITION}),
                    record(RoundRecord, {k: per_round[k][r] for k in _ROUND}),
                    counts,
                )
            )
        return out
