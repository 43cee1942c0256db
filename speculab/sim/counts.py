"""``Counts``: what every engine (simulation, real models) reports for a decoding run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = ["Counts", "Estimate"]


class Estimate(NamedTuple):
    """A Monte-Carlo mean with its standard error over ``n`` independent runs."""

    mean: float
    se: float
    n: int

    def z(self, expected: float) -> float:
        """``(mean − expected) / se``; ``0`` if both agree exactly, ``±inf`` if ``se = 0`` and they differ."""
        diff = self.mean - expected
        if self.se > 0:
            return diff / self.se
        return 0.0 if diff == 0 else float(np.copysign(np.inf, diff))

    def __str__(self) -> str:
        return f"{self.mean:.4f} ± {self.se:.4f}"


def _estimate(x: np.ndarray) -> Estimate:
    n = x.shape[0]
    se = float(x.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return Estimate(float(x.mean()), se, n)


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
      rejection_rate: ``(T,)`` fraction of runs whose position ``n`` was a rejection.
      sequences: optional ``(n_runs, T + 1)`` sampled tokens ``x_0..x_T``.
    """

    rejections: np.ndarray
    oracle_calls: np.ndarray
    draft_calls: np.ndarray
    accepted: np.ndarray
    discarded: np.ndarray
    bonus: np.ndarray
    tokens: np.ndarray
    rejection_rate: np.ndarray | None = None
    sequences: np.ndarray | None = None

    #: The per-run count fields, in display order.
    FIELDS = ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus", "tokens")

    @property
    def n_runs(self) -> int:
        return int(self.rejections.shape[0])

    @property
    def tokens_per_round(self) -> np.ndarray:
        """Per-run output tokens per oracle call (``inf`` for a run that made no oracle call)."""
        calls = self.oracle_calls
        return np.divide(self.tokens, calls, out=np.full(calls.shape, np.inf), where=calls > 0)

    def estimate(self, name: str) -> Estimate:
        """Mean and standard error of a per-run field (or ``"tokens_per_round"``)."""
        if name not in self.FIELDS and name != "tokens_per_round":
            raise ValueError(f"name must be one of {self.FIELDS + ('tokens_per_round',)}; got {name!r}")
        return _estimate(np.asarray(getattr(self, name), dtype=np.float64))

    def summary(self) -> dict[str, Estimate]:
        """All per-run fields as ``{name: Estimate}``."""
        return {name: self.estimate(name) for name in self.FIELDS + ("tokens_per_round",)}

    def to_dict(self) -> dict:
        """JSON-ready summary: ``{name: {"mean", "se"}}`` plus ``n_runs``."""
        out = {name: {"mean": e.mean, "se": e.se} for name, e in self.summary().items()}
        out["n_runs"] = self.n_runs
        if self.rejection_rate is not None:
            out["rejection_rate_per_position"] = self.rejection_rate.tolist()
        return out

    @classmethod
    def concatenate(cls, parts: list["Counts"]) -> "Counts":
        """Join the runs of several ``Counts`` (e.g. chunks of one simulation)."""
        if not parts:
            raise ValueError("parts must contain at least one Counts")
        kwargs = {name: np.concatenate([getattr(c, name) for c in parts]) for name in cls.FIELDS}
        rates = [c.rejection_rate for c in parts]
        if all(r is not None for r in rates):
            w = np.array([c.n_runs for c in parts], dtype=np.float64)
            kwargs["rejection_rate"] = np.average(np.stack(rates), axis=0, weights=w)
        seqs = [c.sequences for c in parts]
        if all(s is not None for s in seqs):
            kwargs["sequences"] = np.concatenate(seqs)
        return cls(**kwargs)
