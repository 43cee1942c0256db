"""speculab.counts as a reader sees it printed: an estimate reads as a number ± its standard error over ``n`` runs, a
single run says in words that it has no standard error, and ``print(counts.summary())`` is one count a line."""

from __future__ import annotations

import numpy as np

from speculab.counts import Counts, Estimate


def _counts(*rejections: int) -> Counts:
    rej = np.asarray(rejections)
    n = rej.size
    ones = np.ones(n, dtype=np.int64)
    return Counts(
        rejections=rej,
        oracle_calls=rej + 2,
        draft_calls=4 * ones,
        accepted=3 * ones,
        discarded=ones,
        bonus=ones,
        tokens=16 * ones,
    )


def test_an_estimate_prints_as_a_number_plus_minus_its_se_and_says_when_one_run_has_none():
    assert str(Estimate.of([1.0, 3.0])) == "2.0000 ± 1.0000 (n = 2)"
    assert str(Estimate.of([8.0])) == "8.0000 (n = 1: one run has no standard error)"


def test_a_summary_of_one_run_prints_its_counts_without_nan_or_the_tuples_repr():
    """README's ``print(out.texts[0], out.counts.summary())`` on one prompt: a table, no ``Estimate(…, se=nan)``."""
    text = str(_counts(8).summary())
    lines = text.splitlines()
    assert lines[0] == "per run, over 1 run (one run has no standard error):"
    assert lines[1] == "  rejections        8.0000" and lines[-1] == "  tokens_per_round  1.6000"
    assert "nan" not in text and "Estimate(" not in text and "±" not in text
    assert len(lines) == 1 + len(Counts.FIELDS) + 1  # every count and tokens per round, one a line


def test_a_summary_of_several_runs_prints_mean_plus_minus_se():
    summary = _counts(2, 4, 6, 8).summary()
    lines = str(summary).splitlines()
    assert lines[0] == "per run, mean ± standard error over 4 runs:"
    assert lines[1] == f"  rejections        5.0000 ± {np.std([2, 4, 6, 8], ddof=1) / 2:.4f}"
    assert summary["rejections"] == Estimate.of([2, 4, 6, 8])  # still the dict of estimates
