"""speculab.rows: a row's checks at their boundaries, its table's layout and the paired rows' selection of rounds.

Each test pins a behaviour the mutation tool showed unguarded in this module's own tests (benchmarks/mutation.py on
rows.py): an exact identity at its tolerance, an upper bound at five standard errors, a z without noise, the cells
printed without ``±``, the column widths, rounds without drafts.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

from speculab.rows import Comparison, Row, paired_accepted, paired_rejections


def test_a_row_is_frozen():
    row = Row("x", 1.0, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.measured = 2.0


def test_an_exact_identity_holds_up_to_its_tolerance_included():
    assert Row("x", 1.0, 1.0, tolerance=0.1).holds  # |measured − predicted| = 0, not |measured + predicted|
    assert Row("x", 0.5, 0.75, tolerance=0.25).holds  # exactly at the tolerance (binary fractions: no round-off)
    assert not Row("x", 0.5, 0.875, tolerance=0.25).holds
    assert Row("x", 0.75, 0.5, tolerance=0.25).holds and not Row("x", 0.875, 0.5, tolerance=0.25).holds


def test_an_upper_bound_holds_within_five_standard_errors_included():
    se = 0.25
    assert Row("x", 1.0, 1.0 + 5 * se, predicted_se=se, upper_bound=True).holds  # exactly 5 s.e.: holds
    assert not Row("x", 1.0, 1.0 + 5.5 * se, predicted_se=se, upper_bound=True).holds
    assert not Row("x", 1.0, 1.0 + 7 * se, predicted_se=se, upper_bound=True).holds
    assert Row("x", 1.0, 0.0, upper_bound=True).holds
    assert Row("x", 0.0, 0.75, predicted_se=0.0, measured_se=0.25, upper_bound=True).holds  # 3 s.e. past it: holds


def test_a_z_without_noise_is_zero_only_within_round_off_of_the_prediction():
    """A standard error up to ``1e-9 · max(1, |predicted|)`` is round-off: the row compares exactly, as
    ``Estimate.z`` does, and ``z`` is 0 within that round-off (included), else ``±inf``."""
    assert Row("x", 0.0, 0.5e-9).z == 0.0 and Row("x", 0.0, 1e-9).z == 0.0  # at the round-off: included
    assert Row("x", 0.0, 1.5e-9).z == math.inf and Row("x", 0.0, -1.5e-9).z == -math.inf
    assert Row("x", 100.0, 100.0 + 1e-7).z == 0.0 and Row("x", 100.0, 100.0 + 1.5e-7).z == math.inf  # relative
    assert Row("x", 1.0, 1.0, predicted_se=1e-9).noiseless and Row("x", 1.0, 1.0, predicted_se=1e-9).z == 0.0
    assert not Row("x", 1.0, 1.0 + 4e-9, predicted_se=2e-9).noiseless
    assert Row("x", 1.0, 1.0 + 4e-9, predicted_se=2e-9).z == pytest.approx(2.0)  # past round-off: a z
    assert not Row("x", 1.0, 1.0, tolerance=0.1).noiseless and not Row("x", 1.0, 1.0, upper_bound=True).noiseless


def _lines(comp: Comparison) -> list[str]:
    lines = str(comp).splitlines()[2:]  # the header row, the rule, the rows, then a blank line and the legend
    return lines[: lines.index("")] if "" in lines else lines


def test_the_table_prints_a_value_without_plus_minus_where_its_se_is_zero_or_not_finite():
    comp = Comparison(
        "t",
        [
            Row("a", 0.5, 0.25),
            Row("b", 0.5, 0.25, predicted_se=float("nan"), measured_se=float("inf")),
            Row("c", 0.5, 0.25, predicted_se=1.0, measured_se=0.125),
        ],
    )
    rows = _lines(comp)[2:]
    assert "±" not in rows[0] and "±" not in rows[1]
    assert "0.5000 ± 1.0000" in rows[2] and "0.2500 ± 0.1250" in rows[2]


def test_the_tables_columns_are_as_wide_as_their_widest_cell():
    """Each column is as wide as its widest cell, header included: every row's cells start under the header's."""
    comp = Comparison("t", [Row("a short one", 1.0, 2.0), Row("a much longer quantity name", 1.0, 2.0, 0.5, 0.5)])
    header, rule, *rows = _lines(comp)
    starts = [0] + [i for i in range(1, len(rule)) if rule[i] == "-" and rule[i - 1] == " "]
    assert [header.index(h) for h in ("quantity", "theory", "measured", "z ", "power", "note")] == starts
    widths = [b - a - 2 for a, b in zip(starts, starts[1:])]
    assert widths[0] == len("a much longer quantity name") and widths[2] == len("2.0000 ± 0.5000")
    for line in rows:
        assert line[starts[1] : starts[1] + 6] == "1.0000" and line[starts[2] : starts[2] + 6] == "2.0000", line


def _legend(comp: Comparison) -> list[str]:
    lines = str(comp).splitlines()
    return lines[lines.index("", 2) + 1 :] if "" in lines[2:] else []


def test_the_table_explains_each_kind_of_cell_it_prints_below_itself():
    """Every kind of cell printed (value ± s.e., z, power, an exact or one-sided check, a row without noise or
    without a prediction) gets one line below the table saying what it is; a kind not printed gets none."""
    rows = [
        Row("noisy", 10.0, 10.5, 0.0, 0.5),
        Row("identity", 1.0, 1.0, tolerance=1e-9),
        Row("bound", 2.0, 1.0, 0.1, upper_bound=True),
        Row("always the same", 0.75, 0.75, predicted_se=1e-12),
        Row("measured", float("nan"), 0.25, note="measured"),
    ]
    legend = _legend(Comparison("t", rows))
    starts = ["a ± s: a value and its standard error", "z: (measured − prediction) / combined standard error"]
    starts += ["power (10%): the chance of |z| ≥ 5 were the truth 10% off the prediction", "= (no noise): each step"]
    starts += ["exact ✓ / ✗: an identity", "≤ ✓ / ✗: a one-sided prediction", "—: no prediction (measured only)"]
    assert [line.strip()[: len(start)] for line, start in zip(legend, starts)] == starts and len(legend) == 7
    only_measured = Comparison("t", [Row("measured", float("nan"), 0.25)])
    assert _legend(only_measured) == ["  —: no prediction (measured only)"]
    assert [line.strip()[:15] for line in _legend(Comparison("t", [rows[3]]))] == ["= (no noise): e"]  # no z, power
    bound_only, identity_only = _legend(Comparison("t", [rows[2]])), _legend(Comparison("t", [rows[1]]))
    assert any("≤ ✓ / ✗" in line for line in bound_only) and not any("exact ✓" in line for line in bound_only)
    assert any("exact ✓ / ✗" in line for line in identity_only) and not any("≤ ✓" in line for line in identity_only)


def test_a_row_without_noise_prints_as_an_exact_equality_or_inequality_not_a_z():
    """A row whose standard error is round-off (a fuzzy acceptance decided every step with probability 0 or 1)
    prints its two values without ``± 0.0000`` and ``= (no noise)`` where a z would be, or ``≠`` if they differ."""
    comp = Comparison("t", [Row("same", 0.75, 0.75, predicted_se=2e-10), Row("differs", 0.75, 0.8125)])
    same, differs = _lines(comp)[2:]
    assert "±" not in same and "0.7500" in same and "= (no noise)" in same and "+0.00" not in same
    assert "≠ (no noise)" in differs and "inf" not in differs
    assert comp.rows[0].z == 0.0 and comp.rows[1].z == math.inf


def test_paired_rejections_along_steps_decided_up_to_round_off_have_no_noise():
    """``r_n`` within round-off of 0 or 1 (FSD's ``r = Σ p``, 1 ± 1e-16) adds no variance: the row is exact."""
    r = np.array([1 - 2**-52, 1e-17, 1.0, 0.0])
    counts = SimpleNamespace(rejections=np.array([2]), n_runs=1, tokens=np.array([4]))
    row = paired_rejections(SimpleNamespace(records=[SimpleNamespace(reject_prob=r)], counts=counts))
    assert row.predicted_se == 0.0 and row.noiseless and row.z == 0.0
    r = np.array([0.5, 1.0])
    row = paired_rejections(SimpleNamespace(records=[SimpleNamespace(reject_prob=r)], counts=counts))
    assert row.predicted_se == 0.5 and not row.noiseless


def _round(drafted, accepted, mean, var):
    return SimpleNamespace(
        drafted=np.asarray(drafted),
        accepted=np.asarray(accepted),
        expected_accepted=np.asarray(mean, float),
        var_accepted=np.asarray(var, float),
    )


def test_paired_accepted_keeps_every_round_that_drafted_and_only_those():
    """A run whose rounds drafted nothing is left out; a run with a round that drafted (one token, or a round
    beside one that drafted nothing) is in, all its rounds."""
    with_one = _round([1, 1], [1, 0], [0.75, 0.5], [0.1875, 0.25])
    without = _round([0, 0], [0, 0], [0.0, 0.0], [0.0, 0.0])
    row = paired_accepted(SimpleNamespace(rounds=[with_one, without]))
    assert row.predicted == pytest.approx(0.625) and row.measured == pytest.approx(0.5)
    assert row.predicted_se == pytest.approx(math.sqrt(0.4375) / 2) and "2 rounds" in row.note
    assert paired_accepted(SimpleNamespace(rounds=[without])) is None
    mixed = _round([2, 0], [1, 0], [1.25, 0.0], [0.5, 0.0])  # a run whose last round drafted nothing: kept whole
    row = paired_accepted(SimpleNamespace(rounds=[mixed, without]))
    assert row.predicted == pytest.approx(0.625) and row.measured == pytest.approx(0.5) and "2 rounds" in row.note


def test_a_rows_power_counts_both_tails():
    """With the truth barely off the prediction (d ≈ 0) each tail of |z| >= 5 weighs Φ(−5): the power is their sum,
    2 Φ(−5) (found by mutation testing: one tail dropped left every test green, the other tail being ~1e-30 at the
    powers tested elsewhere)."""
    tail = 0.5 * math.erfc(5 / math.sqrt(2))
    assert Row("x", 10.0, 10.0, 0.0, 1e6).power() == pytest.approx(2 * tail, rel=1e-5)
