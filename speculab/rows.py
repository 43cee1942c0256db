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
#: A standard error at most this fraction of ``max(1, |predicted|)`` is round-off, not noise: the row is an exact
#: comparison (as :meth:`speculab.counts.Estimate.z` treats a count whose every run agrees).
ROUND_OFF = 1e-9


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
    def _scale(self) -> float:
        return ROUND_OFF * max(1.0, abs(self.predicted))

    @property
    def noiseless(self) -> bool:
        """Whether the row would have a z but its standard error is round-off (``<= ROUND_OFF · max(1, |predicted|)``):
        every step it sums was decided with probability 0 or 1, so it is an exact comparison (:attr:`z` is 0 if the
        two agree to that round-off, else ``±inf``)."""
        if (
            self.tolerance is not None
            or self.upper_bound
            or not (math.isfinite(self.predicted) and math.isfinite(self.measured))
        ):
            return False
        return math.hypot(self.predicted_se, self.measured_se) <= self._scale

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
        if not self.noiseless:
            return diff / se
        return 0.0 if abs(diff) <= self._scale else math.copysign(math.inf, diff)

    def power(self, shift: float = POWER_SHIFT) -> float:
        """The chance that the row is refused (``|z| >= 5``) if the truth were off the prediction by ``shift`` of it:
        ``Φ(d − 5) + Φ(−d − 5)`` with ``d = shift · |predicted| / s.e.`` (normal; the s.e. of ``z``). NaN for a row
        without a z (exact identities, bounds, measured-only rows) and for a prediction of 0, which no error
        relative to it can miss; 1 for a z without noise (:attr:`noiseless`)."""
        if math.isnan(self.z) or self.predicted == 0:
            return float("nan")
        if self.noiseless:
            return 1.0
        se = math.hypot(self.predicted_se, self.measured_se)
        d = shift * abs(self.predicted) / se
        return 0.5 * math.erfc((Z_LIMIT - d) / math.sqrt(2)) + 0.5 * math.erfc((Z_LIMIT + d) / math.sqrt(2))


@dataclass
class Comparison:
    """The rows of a comparison plus its settings; ``str()`` gives the table, with a legend of what its cells mean.

    A setting that is not a plain value (a method) is written by ``to_dict`` as its ``repr`` (the constructor) and
    printed by ``str()`` as its ``str`` (for people: a method's ``K = ∞``)."""

    title: str
    rows: list[Row] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "title": self.title,
            "settings": {
                k: v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)
                for k, v in self.settings.items()
            },
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
                _pm(r.predicted, r.predicted_se, r.noiseless),
                _pm(r.measured, r.measured_se, r.noiseless),
                _zcell(r),
                "" if math.isnan(r.power()) else f"{r.power():.3f}",
                r.note,
            ]
            for r in self.rows
        ]
        widths = [max(len(str(x[i])) for x in body + [head]) for i in range(len(head))]
        line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        settings = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        table = [self.title, settings, line(head), line(["-" * w for w in widths])] + [line(r) for r in body]
        notes = legend(self.rows)
        return "\n".join(table + ([""] + notes if notes else []))


def legend(rows: list[Row]) -> list[str]:
    """One line for each kind of cell the rows print (a value ± s.e., a z, a power, an exact or one-sided check, a
    comparison without noise, a quantity without theory), so the table reads without the source."""
    z_rows = [r for r in rows if math.isfinite(r.z) and not r.noiseless]
    kinds = [
        (
            any(
                "±" in _pm(r.predicted, r.predicted_se, r.noiseless) + _pm(r.measured, r.measured_se, r.noiseless)
                for r in rows
            ),
            "a ± s: a value and its standard error (no ±: its noise is in the other column, or it has none)",
        ),
        (
            bool(z_rows),
            f"z: (measured − prediction) / combined standard error; |z| ≥ {Z_LIMIT:g} refutes the prediction",
        ),
        (
            any(not math.isnan(r.power()) for r in z_rows),
            f"power ({POWER_SHIFT:.0%}): the chance of |z| ≥ {Z_LIMIT:g} were the truth {POWER_SHIFT:.0%} off the "
            "prediction; near 0: the row cannot see an error that size",
        ),
        (
            any(r.noiseless for r in rows),
            "= (no noise): each step decided with probability 0 or 1, nothing to weigh: measured equals the prediction "
            "(≠: it does not)",
        ),
        (
            any(r.holds is not None and not r.upper_bound for r in rows),
            "exact ✓ / ✗: an identity, checked to its tolerance",
        ),
        (
            any(r.upper_bound for r in rows),
            f"≤ ✓ / ✗: a one-sided prediction, measured ≤ it + {Z_LIMIT:g} standard errors",
        ),
        (any(not math.isfinite(r.predicted) for r in rows), "—: no prediction (measured only)"),
    ]
    return [f"  {text}" for shown, text in kinds if shown]


def _zcell(r: Row) -> str:
    if r.upper_bound:
        return "≤ ✓" if r.holds else "≤ ✗"
    if r.holds is not None:
        return "exact ✓" if r.holds else "exact ✗"
    if r.noiseless:
        return "= (no noise)" if r.z == 0 else "≠ (no noise)"
    return f"{r.z:+.2f}" if math.isfinite(r.z) else ("" if math.isnan(r.z) else str(r.z))


def _pm(value: float, se: float, noiseless: bool = False) -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value:.4f}" if noiseless or se == 0 or not math.isfinite(se) else f"{value:.4f} ± {se:.4f}"


# -- rows every method gets on real models ------------------------------------------------------------------
def paired_rejections(result, per: str = "run") -> Row:
    """Counted rejections vs the sum of conditional rejection probabilities along the same runs.

    ``per="run"`` divides by the number of runs, ``"token"`` by the number of generated tokens.
    """
    r = np.concatenate([rec.reject_prob for rec in result.records])  # a target step (a round without drafts): r = 1
    counted = float(result.counts.rejections.sum())
    predicted = float(r.sum())
    # a step whose r is within round-off (1e-12) of 0 or 1 (FSD: r = Σ p = 1, maybe 1 ± 1e-16) adds no variance
    var = r * (1 - r)
    sd = math.sqrt(float(np.where(var > 1e-12, var, 0.0).sum()))
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
