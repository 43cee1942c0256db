"""What every engine reports: per-run ``Counts`` (simulation, real models) and exact ``Expected`` values (theory).

Both use the same field names, so theory and measurement are paired by name
(:func:`speculab.compare.side_by_side`) without knowing the method.

**Counting conventions** ([Yin]): a *rejection* is a token drawn from a
rejection (correction) distribution — autoregressive decoding, [Yin]'s
Algorithm 2 with ``b ≡ 0``, counts every token; an *oracle call* is one target
forward pass (one round); *draft calls* are drafted tokens; a *bonus* token is
drawn from the target after all of a round's drafts were accepted. Every output
token is an accepted draft, a rejection or a bonus.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

import numpy as np

__all__ = [
    "Counts",
    "Estimate",
    "Summary",
    "Expected",
    "COUNT_FIELDS",
    "KIND_NAMES",
    "DRAFT",
    "CORRECTION",
    "BONUS",
    "TARGET",
    "rejected",
]

#: The per-run count fields, in display order (shared by Counts and Expected).
COUNT_FIELDS = ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus", "tokens")

#: What produced an output token: an accepted draft, a correction (a rejection), a
#: bonus token from the target, or a plain target sample (autoregressive decoding).
DRAFT, CORRECTION, BONUS, TARGET = 0, 1, 2, 3


def rejected(kinds):
    """Whether each token counts as a rejection: a correction or a target sample (any array library)."""
    return (kinds == CORRECTION) | (kinds == TARGET)


KIND_NAMES = ("draft", "correction", "bonus", "target")


class Estimate(NamedTuple):
    """A Monte-Carlo mean with its standard error over ``n`` independent runs."""

    mean: float
    se: float
    n: int

    @classmethod
    def ratio(cls, num, den) -> "Estimate":
        """``Σ num / Σ den`` over clusters (a prompt's runs summed: its runs are not independent of each other) and
        its standard error by the delta method, ``√(k/(k − 1) · Σ (num_i − R den_i)²) / Σ den`` (``nan`` for a
        single cluster). A rate such as tokens per second is this ratio of sums, not the mean of each run's rate.

        Example:
          >>> Estimate.ratio([10.0, 30.0], [2.0, 4.0])
          Estimate(mean=6.666666666666667, se=1.111111111111111, n=2)
        """
        num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
        if num.shape != den.shape or num.ndim != 1 or num.size == 0:
            raise ValueError(f"num and den must be 1-d of one non-zero length; got shapes {num.shape}, {den.shape}")
        k, mean = num.size, float(num.sum() / den.sum())
        resid = num - mean * den
        se = float(np.sqrt(k / (k - 1) * (resid @ resid)) / den.sum()) if k > 1 else float("nan")
        return cls(mean, se, k)

    @classmethod
    def of(cls, x) -> "Estimate":
        """Mean and standard error (``ddof = 1``; ``nan`` for a single run) of the values ``x``."""
        x = np.asarray(x, dtype=np.float64)
        n = x.shape[0]
        se = float(x.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
        return cls(float(x.mean()), se, n)

    def z(self, expected: float) -> float:
        """``(mean − expected) / se``; with ``se = 0`` (every run gave the same count): ``0`` if they agree to the
        round-off of the exact value (``1e-9`` relative — a theory sums floats, a count is an integer), else
        ``±inf``."""
        diff = self.mean - expected
        if self.se > 0:
            return diff / self.se
        return 0.0 if abs(diff) <= 1e-9 * max(1.0, abs(expected)) else float(np.copysign(np.inf, diff))

    def __str__(self) -> str:
        """``mean ± se (n = …)``; a single run has no standard error, and says so.

        Example:
          >>> print(Estimate(2.5, 0.125, 8), Estimate(3.0, float("nan"), 1), sep="; ")
          2.5000 ± 0.1250 (n = 8); 3.0000 (n = 1: one run has no standard error)
        """
        if self.n == 1:
            return f"{self.mean:.4f} (n = 1: one run has no standard error)"
        return f"{self.mean:.4f} ± {self.se:.4f} (n = {self.n})"


class Summary(dict):
    """``{name: Estimate}`` of :meth:`Counts.summary`; ``str()`` prints one count a line, as mean ± standard error.

    Example:
      >>> print(Summary(rejections=Estimate(3.0, float("nan"), 1), tokens=Estimate(16.0, float("nan"), 1)))
      per run, over 1 run (one run has no standard error):
        rejections  3.0000
        tokens      16.0000
    """

    def __str__(self) -> str:
        n = max((e.n for e in self.values()), default=0)
        width = max((len(k) for k in self), default=0)
        if n == 1:
            head, cell = "per run, over 1 run (one run has no standard error):", lambda e: f"{e.mean:.4f}"
        else:
            head, cell = f"per run, mean ± standard error over {n:,} runs:", lambda e: f"{e.mean:.4f} ± {e.se:.4f}"
        return "\n".join([head] + [f"  {k:<{width}}  {cell(e)}" for k, e in self.items()])


@dataclass(frozen=True)
class Counts:
    """Per-run counts of a decoding algorithm; every array has shape ``(n_runs,)``.

    Attributes:
      rejections: tokens produced by the rejection distribution.
      oracle_calls: target forward passes (= rounds).
      draft_calls: draft tokens sampled.
      accepted: drafted tokens accepted into the output.
      discarded: drafted tokens not used (``draft_calls − accepted``).
      bonus: tokens drawn from the target after ``K`` accepted drafts.
      tokens: output tokens.
      rejections_per_position: ``(T,)`` fraction of runs whose position ``n`` was a rejection.
      sequences: optional ``(n_runs, T + 1)`` sampled tokens ``x_0..x_T``.
      extra: further per-run counts of a method (e.g. SPRINTER's ``verifier_calls``),
        also readable as attributes (``counts.verifier_calls``).
    """

    rejections: np.ndarray
    oracle_calls: np.ndarray
    draft_calls: np.ndarray
    accepted: np.ndarray
    discarded: np.ndarray
    bonus: np.ndarray
    tokens: np.ndarray
    rejections_per_position: np.ndarray | None = None
    sequences: np.ndarray | None = None
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)

    #: The per-run count fields, in display order.
    FIELDS = COUNT_FIELDS

    def __getattr__(self, name: str):
        extra = self.__dict__.get("extra", {})
        if name in extra:
            return extra[name]
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    @property
    def n_runs(self) -> int:
        return int(self.rejections.shape[0])

    @property
    def names(self) -> tuple[str, ...]:
        """Every per-run field: :data:`COUNT_FIELDS`, then the method's extra counts."""
        return self.FIELDS + tuple(self.extra)

    @property
    def tokens_per_round(self) -> np.ndarray:
        """Per-run output tokens per oracle call; a run that never calls the target (SPRINTER) counts one round."""
        return self.tokens / np.maximum(self.oracle_calls, 1)

    def estimate(self, name: str) -> Estimate:
        """Mean and standard error of a per-run field (or ``"tokens_per_round"``)."""
        if name not in self.names and name != "tokens_per_round":
            raise ValueError(f"name must be one of {self.names + ('tokens_per_round',)}; got {name!r}")
        return Estimate.of(getattr(self, name))

    def summary(self) -> Summary:
        """All per-run fields as ``{name: Estimate}`` (a :class:`Summary`: ``print`` shows a table)."""
        return Summary((name, self.estimate(name)) for name in self.names + ("tokens_per_round",))

    def to_dict(self) -> dict:
        """JSON-ready summary: ``{name: {"mean", "se"}}`` plus ``n_runs``."""
        out = {name: {"mean": e.mean, "se": e.se} for name, e in self.summary().items()}
        out["n_runs"] = self.n_runs
        if self.rejections_per_position is not None:
            out["rejections_per_position"] = self.rejections_per_position.tolist()
        return out

    @classmethod
    def of_runs(
        cls,
        *,
        rejections,
        oracle_calls,
        draft_calls,
        accepted,
        bonus,
        T: int,
        rejected_per_position,
        sequences=None,
        extra=None,
    ) -> "Counts":
        """The counts of ``n`` simulated runs of ``T`` tokens from their per-run totals (what every engine has).

        ``discarded = draft_calls − accepted``, ``tokens = T`` and the per-position rate
        ``rejected_per_position / n`` follow.
        """
        n = rejections.shape[0]
        return cls(
            rejections=rejections,
            oracle_calls=oracle_calls,
            draft_calls=draft_calls,
            accepted=accepted,
            discarded=draft_calls - accepted,
            bonus=bonus,
            tokens=np.full(n, T, dtype=np.int64),
            rejections_per_position=rejected_per_position / n,
            sequences=sequences,
            extra=extra or {},
        )

    @classmethod
    def concatenate(cls, parts: list["Counts"]) -> "Counts":
        """Join the runs of several ``Counts`` (e.g. chunks of one simulation)."""
        if not parts:
            raise ValueError("parts must contain at least one Counts")
        kwargs = {name: np.concatenate([getattr(c, name) for c in parts]) for name in cls.FIELDS}
        rates = [c.rejections_per_position for c in parts]
        if all(r is not None for r in rates):
            w = np.array([c.n_runs for c in parts], dtype=np.float64)
            kwargs["rejections_per_position"] = np.average(np.stack(rates), axis=0, weights=w)
        seqs = [c.sequences for c in parts]
        if all(s is not None for s in seqs):
            kwargs["sequences"] = np.concatenate(seqs)
        kwargs["extra"] = {k: np.concatenate([c.extra[k] for c in parts]) for k in parts[0].extra}
        return cls(**kwargs)


@dataclass(frozen=True)
class Expected:
    """Exact expectations of a method's counts on an instance, named as the fields of :class:`Counts`.

    ``None`` marks a count the theory does not give. ``source`` names the result
    (e.g. ``"[Yin] Thm 1"``) for tables.

    Example:
      >>> e = Expected(rejections=3.0, oracle_calls=4.0, source="T1")
      >>> dict(e.items())
      {'rejections': 3.0, 'oracle_calls': 4.0}
    """

    rejections: float | None = None
    oracle_calls: float | None = None
    draft_calls: float | None = None
    accepted: float | None = None
    discarded: float | None = None
    bonus: float | None = None
    tokens: float | None = None
    rejections_per_position: np.ndarray | None = None
    extra: Mapping[str, float] = field(default_factory=dict)
    source: str = ""

    def items(self):
        """``(name, value)`` for every count the theory gives, in :data:`COUNT_FIELDS` order, then extras."""
        for name in COUNT_FIELDS:
            value = getattr(self, name)
            if value is not None:
                yield name, float(value)
        yield from ((k, float(v)) for k, v in self.extra.items())

    def get(self, name: str) -> float | None:
        """The expectation of ``name`` (a count field or an extra), or ``None``."""
        return dict(self.items()).get(name)

    @classmethod
    def from_counts(cls, exact, *, source: str, extra: Mapping[str, float] | None = None) -> "Expected":
        """Read every count field off an exact result that names them as :class:`Counts` does
        (e.g. :class:`~speculab.theory.LookaheadCounts`)."""
        values = {name: float(getattr(exact, name)) for name in COUNT_FIELDS}
        return cls(
            **values,
            rejections_per_position=np.asarray(exact.rejections_per_position),
            extra=dict(extra or {}),
            source=source,
        )
