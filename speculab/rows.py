"""Rows that put a predicted value beside a measured one (value, standard errors, z), and the two paired rows every
real-model method gets (:mod:`speculab.compare` explains them).

They sit on the ground floor of the package, below the methods: a method's
:meth:`~speculab.methods.Method.compare_rows` builds its own rows from here without importing
:mod:`speculab.compare`, which runs the methods on real models (``speculab.compare`` re-exports them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Row", "Comparison", "paired_rejections", "paired_accepted", "POWER_SHIFT"]

#: The wrong answer a row's power is stated against: off the prediction by 10 % of it (the size the Monte-Carlo
#: checks of the tests state their power against).
POWER_SHIFT = 0.1
#: A row is refused at ``|z| >= Z_LIMIT``.
Z_LIMIT = 5.0


@dataclass(frozen=True)
class Row:
    """One line of a comparison: a predicted and a measured value with standard errors and z."""

    quantity: str
    predicted: float
    measured: float
    predicted_se: float = 0.0
    measured_se: float = 0.0
    note: str = ""
    tolerance: float | None = None  # an exact identity: checked to this tolerance, no z
    upper_bound: bool = False  # a one-sided prediction (measured ≤ predicted): checked within 5 s.e., no z

    @property
    def holds(self) -> bool | None:
        """For exact identities (``tolerance`` set): whether ``|measured − predicted| <= tolerance``; for an
        upper bound: whether ``measured <= predicted + 5 s.e.``; otherwise ``None`` (read ``z``)."""
        if self.upper_bound:
            return self.measured <= self.predicted + 5.0 * math.hypot(self.predicted_se, self.measured_se)
        if self.tolerance is None:
            return None
        return abs(self.measured - self.predicted) <= self.tolerance

    @property
    def z(self) -> float:
        if (
            self.tolerance is not None
            or self.upper_bound
            or not (math.isfinite(self.predicted) and math.isfinite(self.measured))
        ):
            return float("nan")
        se = math.hypot(self.predicted_se, self.measured_se)
        if math.isnan(se):
            return float("nan")
        diff = self.measured - self.predicted
        if se > 0:
            return diff / se
        return 0.0 if abs(diff) < 1e-12 else math.copysign(math.inf, diff)

    def power(self, shift: float = POWER_SHIFT) -> float:
        """The chance that the row is refused (``|z| >= 5``) if the truth were off the prediction by ``shift`` of it:
        ``Φ(d − 5) + Φ(−d − 5)`` with ``d = shift · |predicted| / s.e.`` (normal; the s.e. of ``z``). NaN for a row
        without a z (exact identities, bounds, measured-only rows) and for a prediction of 0, which no error
        relative to it can miss; 1 for a z without noise (s.e. 0)."""
        if math.isnan(self.z) or self.predicted == 0:
            return float("nan")
        se = math.hypot(self.predicted_se, self.measured_se)
        if se == 0:
            return 1.0
        d = shift * abs(self.predicted) / se
        return 0.5 * math.erfc((Z_LIMIT - d) / math.sqrt(2)) + 0.5 * math.erfc((Z_LIMIT + d) / math.sqrt(2))


@dataclass
class Comparison:
    """The rows of a comparison plus its settings; ``str()`` gives the table."""

    title: str
    rows: list[Row] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "title": self.title,
            "settings": self.settings,
            "rows": [
                dict(
                    quantity=r.quantity,
                    predicted=r.predicted,
                    predicted_se=r.predicted_se,
                    measured=r.measured,
                    measured_se=r.measured_se,
                    z=r.z,
                    power=r.power(),
                    holds=r.holds,
                    note=r.note,
                )
                for r in self.rows
            ],
        }

    def __str__(self) -> str:
        head = ["quantity", "theory / prediction", "measured", "z", f"power ({POWER_SHIFT:.0%})", "note"]
        body = [
            [
                r.quantity,
                _pm(r.predicted, r.predicted_se),
                _pm(r.measured, r.measured_se),
                _zcell(r),
                "" if math.isnan(r.power()) else f"{r.power():.3f}",
                r.note,
            ]
            for r in self.rows
        ]
        widths = [max(len(str(x[i])) for x in body + [head]) for i in range(len(head))]
        line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        settings = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        return "\n".join([self.title, settings, line(head), line(["-" * w for w in widths])] + [line(r) for r in body])


def _zcell(r: Row) -> str:
    if r.upper_bound:
        return "≤ ✓" if r.holds else "≤ ✗"
    if r.holds is not None:
        return "exact ✓" if r.holds else "exact ✗"
    return f"{r.z:+.2f}" if math.isfinite(r.z) else ("" if math.isnan(r.z) else str(r.z))


def _pm(value: float, se: float) -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value:.4f}" if se == 0 or not math.isfinite(se) else f"{value:.4f} ± {se:.4f}"


# -- rows every method gets on real models ------------------------------------------------------------------
def paired_rejections(result, per: str = "run") -> Row:
    """Counted rejections vs the sum of conditional rejection probabilities along the same runs.

    ``per="run"`` divides by the number of runs, ``"token"`` by the number of generated tokens.
    """
    r = np.concatenate([rec.reject_prob for rec in result.records])  # a target step (a round without drafts): r = 1
    counted = float(result.counts.rejections.sum())
    predicted = float(r.sum())
    sd = math.sqrt(float(np.clip(r * (1 - r), 0.0, None).sum()))  # r can exceed 1 by round-off (FSD: r = Σ p = 1)
    n = result.counts.n_runs if per == "run" else float(result.counts.tokens.sum())
    return Row(
        f"rejections per {per} (paired: Σ r_n)",
        predicted / n,
        counted / n,
        predicted_se=sd / n,
        note="martingale z; r_n = P(rejection at n | past)",
    )


def paired_accepted(result) -> Row | None:
    """Accepted drafts per round vs ``E[τ | drafted block]`` from the method's round law (``None`` without drafts)."""
    rounds = [r for r in result.rounds if r.drafted.size and r.drafted.max() > 0]
    if not rounds:
        return None
    tau = np.concatenate([r.accepted for r in rounds]).astype(float)
    mean = np.concatenate([r.expected_accepted for r in rounds])
    var = np.concatenate([r.var_accepted for r in rounds])
    n = tau.size
    return Row(
        "accepted drafts per round (paired: E[τ | block])",
        float(mean.mean()),
        float(tau.mean()),
        predicted_se=math.sqrt(max(float(var.sum()), 0.0)) / n,
        note=f"{n} rounds; τ drawn from the round law",
    )
