"""The power machinery of the statistical tests (conftest's ``agrees``, ``power``): it refuses what it should,
and the power it reports is the chance it refuses (checked against a sampled rate). Its checks here record
nowhere: they are not rows of benchmarks/power.py's table."""

import numpy as np
import pytest

from conftest import POWER, Z_BOUND, make_agrees, power
from speculab.counts import Estimate


def test_power_is_the_two_sided_refusal_rate_of_a_normal_estimate():
    assert power(0.0) == pytest.approx(2 * 2.866515718791939e-07, rel=1e-9)  # the level of |z| < 5
    assert power(5.0) == pytest.approx(0.5, abs=1e-6) and power(-7.33) == power(7.33) > POWER
    rng = np.random.default_rng(0)
    z = rng.normal(6.0, 1.0, 200_000)
    rate = np.mean(np.abs(z) >= Z_BOUND)
    assert abs(rate - power(6.0)) < 5 * np.sqrt(power(6.0) * (1 - power(6.0)) / z.size)


def test_agrees_refuses_a_disagreement_and_a_check_without_power():
    agrees = make_agrees(lambda name, value: None)
    agrees(Estimate(10.0, 0.1, 100), 10.3, "a count")  # 3 s.e. off; a 10 % error is 10 s.e.: power ≈ 1
    with pytest.raises(AssertionError, match="a count"):
        agrees(Estimate(10.0, 0.1, 100), 10.6, "a count")  # 6 s.e. off
    with pytest.raises(AssertionError, match="10% off"):
        agrees(Estimate(10.0, 0.2, 100), 10.0, "a noisy count")  # a 10 % error is 5 s.e.: power 0.5
    agrees(Estimate(10.0, 0.2, 100), 10.0, "a noisy count", wrong=5.0, alternative="half the count")


def test_agrees_checks_exact_entries_exactly_and_arrays_by_their_best_entry():
    agrees = make_agrees(lambda name, value: None)
    agrees(np.array([0.0, 0.5, 0.5]), np.array([0.0, 0.5, 0.5]), "a law", se=np.array([0.0, 0.01, 0.01]))
    with pytest.raises(AssertionError, match="a law"):  # an impossible token appears
        agrees(np.array([1e-3, 0.499, 0.5]), np.array([0.0, 0.5, 0.5]), "a law", se=np.array([0.0, 0.01, 0.01]))
    with pytest.raises(AssertionError, match="se="):
        agrees(0.5, 0.5, "no standard error")
    for bad in (dict(measured=np.nan, expected=1.0, se=0.01), dict(measured=0.0, expected=np.nan, se=0.0),
                dict(measured=np.array([0.5, np.nan]), expected=np.array([0.5, 0.5]), se=0.01),
                dict(measured=np.array([0.5, 0.5]), expected=np.full((3, 2), 0.5), se=0.01)):
        with pytest.raises(AssertionError, match="not finite|shapes"):  # the old |z| < 5 failed on NaN too
            agrees(what="a bad input", **bad)
    with pytest.raises(AssertionError, match="wrong_se"):
        agrees(0.5, 0.5, "a share", se=0.01, wrong=0.4, wrong_se=-1.0)
    with pytest.raises(AssertionError, match="an expected value of 0 has no 10 % error"):
        agrees(Estimate(0.01, 0.01, 100), 0.0, "a difference")
    # a deterministic wrong answer (spread 0) is refused for certain once it lies 5 s.e. away, never before
    agrees(0.5, 0.5, "a share", se=0.01, wrong=0.44, wrong_se=0)
    with pytest.raises(AssertionError, match="a share"):
        agrees(0.5, 0.5, "a share", se=0.01, wrong=0.46, wrong_se=0)


def test_records_name_the_alternative_and_what_carries_an_unasserted_power():
    """The records benchmarks/power.py parses: ``power | alternative`` and, for a power carried elsewhere,
    ``… [not asserted: carried by …]``; an exact check is named as refusing any other value."""
    seen = []
    agrees = make_agrees(lambda name, value: seen.append((name, value)))
    agrees(Estimate(10.0, 1.0, 10), 10.0, "a small run", carried_by="another test")
    agrees(Estimate(0.0, 0.0, 10), 0.0, "a count that is always 0")
    agrees(Estimate(10.0, 0.1, 100), 10.0, "a count")
    assert seen == [("power", "0.000032 | a small run: 10% off [not asserted: carried by another test]"),
                    ("power", "1.000000 | a count that is always 0: any other value (an exact check)"),
                    ("power", "1.000000 | a count: 10% off")]
