r"""Batch speculative decoding with ``M`` drafts, [Yin] Algorithm 4 (SPEC §1, corrected).

Each round draws ``M`` independent draft continuations from the round's first
position (the *root*). The root token of draft ``m`` is checked against the
recursive residual ``q^m`` (``q^1 = q``, ``q^{m+1} = [q^m − p]_+``) — accepted with
probability ``min(1, q^m(x)/p(x))``; the first accepted draft is followed alone
with ordinary SD checks. A root rejection (all ``M`` refused) outputs
``x ~ q^{M+1}``. Unbiased; one oracle call per round; ``M = 1`` is SD.

The residuals are never normalised: with ``u_0 = q``, ``R_0 = 1``,
``u_m = (u_{m−1} − R_{m−1} p)_+ = R_m q^{m+1}`` (:func:`speculab.kernels.drain`), so
``min(1, q^m/p) = min(1, u_{m−1}/(R_{m−1} p))`` and ``r_m = 0`` needs no care.
Exact counts: [Yin] Thm 3 for ``K = ∞`` and the lookahead chain with a batch root
for any ``K`` (:func:`speculab.theory.lookahead_counts` with ``M``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
from array_api_compat import array_namespace

from speculab import kernels
from speculab._validate import as_positive_int
from speculab.counts import BONUS, CORRECTION, Estimate, Expected
from speculab.methods.base import RoundLaw, check_lookahead, param, register
from speculab.methods.chain import ChainMethod, Rule
from speculab.methods.sd import SD, sd_rule
from speculab.rows import Row
from speculab.theory.batch import MAX_M, root_residual_chain
from speculab.theory._checks import takes_instance

__all__ = ["BatchSD", "MultiDraft", "batch_root_law", "Root", "rooted_round_law", "paired_improvement"]


def batch_root_law(p, q, x):
    r"""The root of a round of [Yin] Algorithm 4 given its ``M`` first draft tokens (array API).

    Args:
      p, q: ``(..., V)`` draft and target laws at the root.
      x: ``(..., M)`` the first token of each draft.

    Returns:
      ``(accept, u, R)``: ``accept[..., m] = min(1, q^{m+1}(x_m)/p(x_m))`` ``(..., M)``; the
      unnormalised residual ``u_M = R_M q^{M+1}`` ``(..., V)`` a root rejection samples;
      its mass ``R_M = Π_m TV(q^m, p)``, the root rejection probability before drafting.
    """
    xp = array_namespace(p, q)
    u, R = q, xp.ones_like(q[..., 0])
    accept = []
    for m in range(x.shape[-1]):
        accept.append(kernels.gather(kernels.root_acceptance(u, R, p), x[..., m]))  # R_{m−1} = 0 ⇒ never reached
        u, R = kernels.drain(u, R, p)
    return xp.stack(accept, axis=-1), u, R


class Root(NamedTuple):
    """A round's root decision given its ``M`` first draft tokens (array API; leading axes ``...``).

    Attributes:
      follow: ``(..., M)`` probability that the root accepts row ``m``'s token and follows that row.
      refused: ``(...)`` probability that the root refuses every row (``1 − Σ follow``).
      weights: ``(..., V)`` unnormalised weights of the token a refusal outputs.
      reject_prob: ``(...)`` probability of a refusal before the drafts are seen (the paired prediction).
      accept_prob: ``(..., M)`` probability that row ``m``'s token is accepted given the drafts.
    """

    follow: Any
    refused: Any
    weights: Any
    reject_prob: Any
    accept_prob: Any


def rooted_round_law(root: Root, p, q, x, *, K: int | None, bonus: bool) -> RoundLaw:
    """The law of a round whose root is decided by ``root`` over the ``M`` rows and whose followed row goes on as
    speculative decoding (slots ``1..L``); shapes as in :meth:`speculab.methods.Method.round_law`."""
    xp = array_namespace(p, q)
    tail = SD(K=K).round_law(p[..., 1:, :], q[..., 1:, :], x[..., 1:], bonus=bonus)  # slots 1..L
    M = x.shape[-2]
    first = xp.concat([root.refused[..., None], xp.zeros_like(root.follow[..., 1:])], axis=-1)  # τ = 0: row 0
    outcome = xp.concat([first[..., None], root.follow[..., None] * tail.outcome], axis=-1)  # (..., M, L+1)
    root_w = xp.stack([root.weights] + [xp.zeros_like(root.weights)] * (M - 1), axis=-2)[..., None, :]  # (..., M, 1, V)
    R_rows = xp.broadcast_to(root.reject_prob[..., None, None], (*root.reject_prob.shape, M, 1))
    return RoundLaw(
        outcome=outcome,
        correction=xp.concat([root_w, tail.correction], axis=-2),
        reject_prob=xp.concat([R_rows, tail.reject_prob], axis=-1),
        accept_prob=xp.concat([root.accept_prob[..., None], tail.accept_prob], axis=-1),
    )


@dataclass(frozen=True)
class MultiDraft(ChainMethod):
    """What methods drafting ``M`` continuations per round share: ``M``, ``K``, their checks, SD past the root."""

    M: int = param(help="number of drafts per round", type=int)
    K: int | None = param(None, help="lookahead: drafts per round (default ∞)", type=int)

    def __post_init__(self):
        as_positive_int(self.M, "M", maximum=MAX_M)  # float64 counts hold every integer up to MAX_M = 2^53
        check_lookahead(self.K)

    @property
    def unbiased(self) -> bool:
        return True

    @property
    def rows(self) -> int:
        return self.M

    def rule(self, p, q) -> Rule:
        """Past the root a round is speculative decoding on the followed draft."""
        return sd_rule(p, q)


@register
@dataclass(frozen=True)
class BatchSD(MultiDraft):
    """Batch speculative decoding with ``M`` drafts, [Yin] Algorithm 4 (module docstring).

    Args:
      M: number of drafts (>= 1).
      K: draft length per round (``None`` = to the end, as in [Yin]); with finite
        ``K`` an all-accepted draft earns a bonus token as in :class:`~speculab.methods.SD`.

    Example:
      >>> from speculab.theory import MarkovInstance
      >>> inst = MarkovInstance.context_free([0.5, 0.5, 0.0], [0.2, 0.3, 0.5], T=50)
      >>> round(BatchSD(8).expected(inst).rejections, 12)   # q(supp(p)^c) = 0.5 per token for every M
      25.0
    """

    name: ClassVar[str] = "batch"

    @takes_instance
    def expected(self, inst) -> Expected:
        from speculab.theory.lookahead import lookahead_counts

        source = "[Yin] Thm 3" if self.K is None or self.K >= inst.T else "exact lookahead counts with a batch root"
        return Expected.from_counts(lookahead_counts(inst, self.K, M=self.M), source=source)

    def root_outcome(self, p, q):
        """Algorithm 4's root as one table: ``q − u_M`` (a draft equal to ``x`` accepted), then ``u_M = R_M
        q^{M+1}``."""
        xp = array_namespace(p, q)
        u, _ = root_residual_chain(q, p, self.M)
        return xp.concat([q - u, u], axis=-1)

    def round_law(self, p, q, x, *, bonus: bool) -> RoundLaw:
        """Root over the ``M`` rows (:func:`batch_root_law`), then SD along the followed row.

        An empty block (drafts that proposed nothing, e.g. prompt lookup without a match) has no root to
        verify: it is SD's empty round, one token from ``q_1`` of the first row, whatever the number of rows.
        """
        if x.shape[-1] == 0:
            return SD(K=self.K).round_law(p[..., :1, :, :], q[..., :1, :, :], x[..., :1, :], bonus=bonus)
        xp = array_namespace(p, q)
        accept, u, R = batch_root_law(p[..., 0, 0, :], q[..., 0, 0, :], x[..., :, 0])  # (..., M), (..., V), (...)
        refused = xp.cumulative_prod(1.0 - accept, axis=-1)  # all of the first m+1 refused
        before = xp.concat([xp.ones_like(refused[..., :1]), refused[..., :-1]], axis=-1)
        root = Root(follow=before * accept, refused=refused[..., -1], weights=u, reject_prob=R, accept_prob=accept)
        return rooted_round_law(root, p, q, x, K=self.K, bonus=bonus)

    def compare_rows(self, ctx) -> list:
        """The batch improvement of [Yin] Thm 3 along the batch runs vs plain SD runs (K = ∞), or measured only."""

        sd = ctx.decode(SD(K=self.K), slot=3)
        sd_rej = Estimate.of(sd.counts.rejections)
        rej = Estimate.of(ctx.result.counts.rejections)
        if self.K is not None:
            return [
                Row(
                    f"batch improvement, M={self.M}, K={self.K}",
                    float("nan"),
                    sd_rej.mean - rej.mean,
                    0.0,
                    math.hypot(sd_rej.se, rej.se),
                    note="finite K: Thm 3 is for K = ∞ (bonus positions shift); measured only",
                )
            ]
        improvement = np.asarray(_root_improvement(ctx.result.records))
        # SD runs vs batch runs + their own path improvement: both estimate T1 (K = ∞), so
        # z = (SD − batch − BI) / sqrt(se(SD)² + se(batch + BI)²), BI paired with its batch run.
        paired = Estimate.of(ctx.result.counts.rejections + improvement)
        within, noise = paired_improvement(ctx.result)
        t1 = ctx.t1
        return [
            Row(
                f"batch improvement, M={self.M} (Thm 3: E_f[Σ TV − Π r_m])",
                float(improvement.mean()),
                sd_rej.mean - rej.mean,
                0.0,
                math.hypot(sd_rej.se, paired.se),
                note="measured: SD runs − batch runs",
            ),
            Row(
                f"batch improvement, M={self.M}, paired on the batch runs",
                float(improvement.mean()),
                float(within.mean()),
                0.0,
                Estimate.of(noise).se,
                note="measured: Σ TV − rejections along each batch run",
            ),
            Row("E[N_rej] of SD (Thm 1)", t1.mean, sd_rej.mean, t1.se, sd_rej.se),
        ]


def paired_improvement(result) -> tuple[np.ndarray, np.ndarray]:
    """The batch improvement measured on the batch runs alone, per run: ``Σ_n TV(p_n, q_n) − N_rej``, and its
    noise, that minus the run's own path improvement (:func:`_root_improvement`).

    Batch SD outputs the target's law, so ``Σ_n TV(p_n, q_n)`` along a batch run is an unbiased estimate of
    [Yin] Thm 1's SD term ``T1`` (``K = ∞``), and its mean minus the batch runs' rejections estimates the batch
    improvement. Paired with the path improvement on the same run, what is left is ``Σ_n r_n − N_rej``, the
    Bernoulli noise of the rejections given their path — no path-to-path spread, and no SD runs. Not in [Yin]:
    the paper has no estimator of BI from measured runs.
    """
    tv = np.array([float(np.nansum(rec.tv)) for rec in result.records])
    within = tv - result.counts.rejections
    return within, within - np.asarray(_root_improvement(result.records))


def _root_improvement(records) -> list[float]:
    """Per run, Σ over round-start positions of ``TV(p_n, q_n) − Π_m r_m`` (the T3 improvement on that path)."""
    out = []
    for rec in records:
        root = np.ones(rec.kind.size, dtype=bool)
        root[1:] = (rec.kind[:-1] == CORRECTION) | (
            rec.kind[:-1] == BONUS
        )  # a round starts after a correction or a bonus
        out.append(float((rec.tv[root] - rec.reject_prob[root]).sum()))
    return out
