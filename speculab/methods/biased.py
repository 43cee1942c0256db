"""Biased (over-accepting) decoding, [Yin] §4.2 and App. G: Decoding-OPT and Decoding-UNO.

Acceptance ``b = min(1, (q + ε)/p)``; after a rejection the token is drawn from
``P* = [A]_+`` (Decoding-OPT, [Yin] Thm 4 — for this ``b`` it is the residual
``[q − p]_+``) or from ``q`` itself (Decoding-UNO). Per position, OPT lies on the
Pareto line ``P(reject) + Loss*_TV = TV(p, q)`` of [Yin] Thm 5; UNO lies above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from speculab import kernels
from speculab.counts import BONUS
from speculab.methods.base import check_lookahead, param, register
from speculab.methods.chain import ChainMethod, Rule
from speculab.rows import Row, paired_rejections
from speculab.theory.biased import check_eps

__all__ = ["Biased"]


@register
@dataclass(frozen=True)
class Biased(ChainMethod):
    """Biased decoding, [Yin] §4.2: ``b = min(1, (q + ε)/p)``, rejection ``P*`` (``"opt"``) or ``q`` (``"uno"``).

    Args:
      eps: over-acceptance ``ε >= 0`` (``ε = 0`` with ``"opt"`` is SD; ``ε >= 1`` is allowed and
        gives ``b ≡ 1``: every draft accepted, the output is the draft's own law).
      rejection: ``"opt"`` or ``"uno"``.
      K: lookahead, as in :class:`~speculab.methods.SD`.

    Example:
      >>> b, P = Biased(0.1).rule(np.array([0.6, 0.4]), np.array([0.3, 0.7]))
      >>> b.round(3).tolist(), P.tolist()   # P* = [q − p]_+ for this b ([Yin] App. G)
      ([0.667, 1.0], [0.0, 1.0])
    """

    name: ClassVar[str] = "biased"
    eps: float = param(help="over-acceptance ε >= 0", type=float)
    rejection: str = param(
        "opt", help="rejection distribution: opt (Decoding-OPT) or uno (Decoding-UNO)", type=str, choices=("opt", "uno")
    )
    K: int | None = param(None, help="lookahead: drafts per round (default ∞)", type=int)

    def __post_init__(self):
        check_eps(self.eps)
        if self.rejection not in ("opt", "uno"):
            raise ValueError(f"rejection must be 'opt' or 'uno'; got {self.rejection!r}")
        check_lookahead(self.K)

    @property
    def unbiased(self) -> bool:
        return self.eps == 0 and self.rejection == "opt"

    def rule(self, p, q) -> Rule:
        b = kernels.over_acceptance(p, q, float(self.eps))
        return Rule(b, kernels.optimal_rejection(p, q, b) if self.rejection == "opt" else q)

    def compare_rows(self, ctx) -> list:
        """[Yin] Thm 5 per step (exact for OPT), the per-token bias, and the paired rejection rate per token."""

        rec = ctx.result.records
        verified = np.concatenate([r.kind != BONUS for r in rec])
        cat = lambda f: np.concatenate([getattr(r, f) for r in rec])[verified]  # noqa: E731
        tv, loss = cat("tv"), cat("loss_tv")
        gap = cat("reject_prob") + loss - tv
        rows = []
        if self.rejection == "opt":
            rows.append(
                Row(
                    "max per-step |P(reject) + Loss*_TV − TV(p,q)|  (Thm 5)",
                    0.0,
                    float(np.abs(gap).max()),
                    note="OPT lies on the Pareto line",
                    tolerance=1e-5,
                )
            )
        else:
            rows.append(
                Row(
                    "mean per-step P(reject) + Loss_TV − TV(p,q)  (Thm 5)",
                    float("nan"),
                    float(gap.mean()),
                    note="UNO lies above the line (≥ 0; 0 for OPT)",
                )
            )
        rows.append(Row("mean per-token TV(P_A, q)  (loss)", float("nan"), float(loss.mean()), note="exact per step"))
        rows.append(
            Row("mean per-token KL(P_A ‖ q)", float("nan"), float(cat("loss_kl").mean()), note="exact per step")
        )
        rows.append(paired_rejections(ctx.result, per="token"))
        return rows
