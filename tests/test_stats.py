"""The statistical tests of :mod:`speculab.stats` against independent references: scipy's G-test on hand-merged
cells, simulated experiments for the stated power, and the least favourable law at the detectable TV; and the law
test of decoded runs (:func:`~speculab.stats.law_row`) on runs whose cells are known."""

import math

import numpy as np
import pytest
from scipy.stats import power_divergence

from conftest import Z_BOUND
from speculab.stats import ALPHA, POWER, detectable_tv, g_test, g_test_power, law_row


def test_the_g_test_of_one_merged_cell_is_zero_and_never_below():
    """Found by review: with every cell merged into one (few runs), G was ``−2 n log Σ law`` ≈ −6e-15 (the law's
    round-off), which the report rightly refuses. One cell is G = 0, p = 1 exactly; and G ≥ 0 on any counts."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 10):
        law = rng.dirichlet(np.full(400, 0.5)) * (1 + 1e-15)  # a law above 1 by a round-off, as exact laws come
        assert law.sum() > 1.0
        observed = np.bincount(rng.choice(400, size=n, p=law / law.sum()), minlength=400)
        assert g_test(observed, law) == (0.0, 1, 1.0)
    for _ in range(200):
        law = rng.dirichlet(np.full(30, 1.0))
        n = int(rng.integers(1, 400))
        g, _, p = g_test(np.bincount(rng.choice(30, size=n, p=law), minlength=30), law)
        assert g >= 0.0 and 0.0 <= p <= 1.0


def _merged(observed, law, n):
    """The cells of the G-test written out by hand: expected counts below 5 pooled into one cell."""
    big = law * n >= 5
    return np.append(observed[big], observed[~big].sum()), np.append(law[big], law[~big].sum()) * n


def test_the_g_test_is_scipys_on_the_merged_cells():
    rng = np.random.default_rng(0)
    law = rng.dirichlet(np.full(40, 0.3))
    n = 500
    observed = np.bincount(rng.choice(40, size=n, p=law), minlength=40).astype(float)
    o, e = _merged(observed, law, n)
    keep = e > 0
    ref = power_divergence(o[keep], e[keep], lambda_="log-likelihood")
    g, df, p = g_test(observed, law)
    assert g == pytest.approx(ref.statistic, rel=1e-12) and df == keep.sum() - 1 and p == pytest.approx(ref.pvalue)
    impossible = observed.copy()
    impossible[np.argmin(law)] += 1  # one draw of a token the law cannot draw (its cell would be merged)
    zero = np.where(np.arange(40) == np.argmin(law), 0.0, law / (1 - law.min()))
    assert g_test(impossible, zero)[2] == 0.0
    assert g_test_power(law, zero, n, 1e-4) >= -math.expm1(n * math.log1p(-law.min()))


def test_the_stated_power_is_what_the_test_does():
    """The power :func:`g_test_power` states against a wrong law is the rate at which the G-test refuses samples of
    it (2,000 simulated experiments of 300 draws; |z| < 5), at two effect sizes; and samples of the right law are
    refused at most at about the level."""
    rng = np.random.default_rng(1)
    law = rng.dirichlet(np.full(12, 2.0))
    n, alpha, experiments = 300, 0.01, 2000
    for shift in (0.04, 0.08):
        wrong = np.clip(law + shift * (np.arange(12) < 6) - shift * (np.arange(12) >= 6), 1e-9, None)
        wrong /= wrong.sum()
        stated = g_test_power(wrong, law, n, alpha)
        refused = np.mean(
            [
                g_test(np.bincount(rng.choice(12, size=n, p=wrong), minlength=12), law)[2] < alpha
                for _ in range(experiments)
            ]
        )
        se = math.sqrt(stated * (1 - stated) / experiments)
        assert abs(refused - stated) < Z_BOUND * se + 0.03, (shift, stated, refused)  # + the χ² approximation's error
    right = np.mean(
        [g_test(np.bincount(rng.choice(12, size=n, p=law), minlength=12), law)[2] < alpha for _ in range(experiments)]
    )
    assert right < alpha + Z_BOUND * math.sqrt(alpha / experiments)


def test_the_detectable_tv_bounds_the_power_against_every_law_at_that_tv():
    """At the stated TV ``δ``, the least favourable law for the χ² approximation — ``q (1 ± 2δ)`` on two halves
    of the mass, where ``χ² = 4 TV²`` exactly — is refused with the stated power (computed), other laws at that
    TV with more, and simulated G-tests refuse the least favourable one at least that often (|z| < 5)."""
    rng = np.random.default_rng(2)
    q = np.full(10, 0.1)
    n, alpha = 2000, ALPHA / 2
    delta = detectable_tv(9, n, alpha)
    worst = q * np.where(np.arange(10) < 5, 1 + 2 * delta, 1 - 2 * delta)
    assert 0.5 * np.abs(worst - q).sum() == pytest.approx(delta)
    assert g_test_power(worst, q, n, alpha) == pytest.approx(POWER, abs=1e-6)
    for _ in range(20):  # other laws at the same TV: at least as much power
        shift = rng.dirichlet(np.ones(10)) - q
        other = q + delta * shift / (0.5 * np.abs(shift).sum())
        if other.min() > 0:
            assert g_test_power(other, q, n, alpha) >= POWER - 1e-9
    experiments = 3000
    refused = np.mean(
        [g_test(np.bincount(rng.choice(10, size=n, p=worst), minlength=10), q)[2] < alpha for _ in range(experiments)]
    )
    assert refused > POWER - Z_BOUND * math.sqrt(POWER * (1 - POWER) / experiments) - 0.01  # + the approximation's


def test_the_law_test_of_runs_reads_each_run_as_its_cell():
    """``law_row`` on runs of two tokens from a known law (token 2 is EOS, so a run that starts with it is the cell
    ``(2,)`` whatever follows, and the outcome ``(1, 1)`` is left to the rest cell): runs of that law pass both
    tests; runs whose second token is drawn from another law pass the first-token test and fail the joint one."""
    rng = np.random.default_rng(4)
    q, eos, n = np.array([0.5, 0.3, 0.2]), 2, 4000
    cells = {(a, b): q[a] * q[b] for a in (0, 1) for b in range(3) if (a, b) != (1, 1)} | {(eos,): q[eos]}
    wrong = np.array([0.3, 0.5, 0.2])
    first = rng.choice(3, size=n, p=q)
    right = law_row("right", [[a, b] for a, b in zip(first, rng.choice(3, size=n, p=q))], q, cells, eos, wrong, True)
    assert not right.refused and right.ok and right.first[1] == 2 and right.joint[1] == len(cells)
    assert right.power == g_test_power(wrong, q, n, ALPHA / 2) and right.runs == n
    assert right.detectable == (detectable_tv(2, n, ALPHA / 2), detectable_tv(len(cells), n, ALPHA / 2))
    shifted = law_row("bonus", [[a, b] for a, b in zip(first, rng.choice(3, size=n, p=wrong))], q, cells, eos, q, True)
    assert shifted.refused and not shifted.ok and shifted.joint[2] < ALPHA / 2 < shifted.first[2]
