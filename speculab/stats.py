r"""The statistical tests of a sampler's law: the G-test, its power, and the least TV it detects.

Convention: ``p`` = draft, ``q`` = target. Samples are held to the law they should follow by a G-test, cells whose
expected count is below 5 merged into one (:func:`g_test`). Each test's **power is stated against any law at a
given TV** from the one tested, on its cells: since :math:`\chi^2(w \| q) \ge 4\,\mathrm{TV}(w, q)^2`
(Cauchy–Schwarz), a law at TV ``δ`` gives the G-test a noncentrality of at least :math:`4 n \delta^2` (noncentral
:math:`\chi^2`, Pearson's approximation): :func:`least_power` is the power that bound gives, :func:`detectable_tv`
the smallest ``δ`` refused with probability :data:`POWER`, and :func:`g_test_power` the power against one given
wrong law.

:func:`law_row` is the law test of decoded runs that ``speculab validate``, :func:`speculab.certify.check_decoder`
and the engine clients run: the first token and the first :data:`LAW_TOKENS` tokens, each G-tested at level
:data:`ALPHA` ``/ 2`` against the target's exact law (:mod:`speculab.backends.exact_law` computes it from a model).
SciPy is imported when a test runs, not with the module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ALPHA",
    "POWER",
    "LAW_TOKENS",
    "LawRow",
    "law_row",
    "g_test",
    "g_test_power",
    "least_power",
    "detectable_tv",
]

#: The level of the law test (split over its two G-tests).
ALPHA = 1e-4
#: The power at which the law tests' detectable TV is stated.
POWER = 0.99
#: Tokens whose joint law is tested.
LAW_TOKENS = 3


@dataclass(frozen=True)
class LawRow:
    """One method's law test: ``(G, df, p)`` of the first token and of the first :data:`LAW_TOKENS`, whether the
    test refused the method, whether it should have (``lossless``: it should not), the first-token test's power
    against the biased control, and the smallest TV each test refuses with probability :data:`POWER`
    (``detectable``: first token, first tokens)."""

    method: str
    runs: int
    lossless: bool
    first: tuple[float, int, float]
    joint: tuple[float, int, float]
    refused: bool
    power: float
    detectable: tuple[float, float]

    @property
    def ok(self) -> bool:
        return self.refused != self.lossless


def _cells(law: np.ndarray, n: int) -> np.ndarray:
    """Cell of each entry of ``law``: its own where ``n · law ≥ 5``, else one shared last cell."""
    big = law * n >= 5
    cell = np.full(law.size, int(big.sum()), dtype=np.int64)
    cell[big] = np.arange(int(big.sum()))
    return cell


def g_test(observed: np.ndarray, law: np.ndarray) -> tuple[float, int, float]:
    """G-test of counts ``observed`` against probabilities ``law`` (same shape, flattened): ``(G, df, p)``.

    Cells whose expected count is below 5 are merged into one; ``G = 2 Σ o log(o / e)`` over the cells with
    ``e > 0``, ``df`` = their number − 1. A count where ``law`` is 0 makes ``G`` infinite (``p = 0``): the target
    cannot draw that token, so one such draw refutes it, merged cell or not.

    The expected counts are ``law``'s cells scaled to sum to ``n`` exactly (``law``'s own round-off is no deviation),
    and ``G`` is summed as ``2 Σ (o log(o / e) − o + e)``, whose every term is ≥ 0: one cell gives ``G = 0`` exactly,
    not ``−2 n log Σ law ≈ −1e-15``. A sum of round-offs below 0 (counts within an ulp of their expectation) is 0.
    """
    from scipy.stats import chi2

    observed, law = np.asarray(observed, float).ravel(), np.asarray(law, float).ravel()
    n = int(observed.sum())
    if np.any((law <= 0) & (observed > 0)):  # a draw the law cannot make: refused whatever the rest
        return math.inf, max(int((law * n >= 5).sum()), 1), 0.0
    cell = _cells(law, n)
    o = np.bincount(cell, weights=observed, minlength=cell.max() + 1)
    e = np.bincount(cell, weights=law, minlength=cell.max() + 1) * n
    if np.any((e <= 0) & (o > 0)):
        return math.inf, int((e > 0).sum()) - 1, 0.0
    keep = e > 0
    o, e = o[keep], e[keep] / e[keep].sum() * n
    with np.errstate(divide="ignore", invalid="ignore"):
        g = max(2.0 * float(np.sum(np.where(o > 0, o * np.log(o / e), 0.0) - o + e)), 0.0)
    df = max(int(keep.sum()) - 1, 1)
    return g, df, float(chi2.sf(g, df))


def g_test_power(wrong: np.ndarray, law: np.ndarray, n: int, alpha: float) -> float:
    """The chance that :func:`g_test` at level ``alpha`` refuses ``n`` samples drawn from ``wrong`` as samples of
    ``law``: noncentral χ² on the same merged cells, noncentrality ``n Σ (w − q)² / q``, or the chance of a draw
    where ``law`` is 0 (a certain refusal) if that is larger."""
    from scipy.stats import chi2, ncx2

    wrong, law = np.asarray(wrong, float).ravel(), np.asarray(law, float).ravel()
    impossible = -math.expm1(n * math.log1p(-min(float(wrong[law <= 0].sum()), 1.0)))  # P(a draw where law = 0)
    cell = _cells(law, n)
    q = np.bincount(cell, weights=law, minlength=cell.max() + 1)
    w = np.bincount(cell, weights=wrong, minlength=cell.max() + 1)
    keep = q > 0
    df = max(int(keep.sum()) - 1, 1)
    lam = n * float(np.sum((w[keep] - q[keep]) ** 2 / q[keep]))
    return max(float(ncx2.sf(chi2.isf(alpha, df), df, lam)), impossible)


def least_power(df: int, n: int, alpha: float, tv: float) -> float:
    """The least chance that a G-test of ``n`` samples with ``df`` degrees of freedom at level ``alpha`` refuses a law
    at total variation ``tv`` from the one tested: ``χ² ≥ 4 TV²`` bounds the noncentrality below by ``4 n tv²``, and
    the noncentral χ² power grows with it (:func:`detectable_tv` is its inverse)."""
    from scipy.stats import chi2, ncx2

    return float(ncx2.sf(chi2.isf(alpha, df), df, 4 * n * tv * tv))


def detectable_tv(df: int, n: int, alpha: float, power: float = POWER) -> float:
    """The smallest TV ``δ`` (between laws on the test's cells) at which a G-test of ``n`` samples with ``df`` degrees
    of freedom at level ``alpha`` refuses *any* law with probability at least ``power``: ``χ² ≥ 4 TV²`` bounds the
    noncentrality below by ``4 n δ²``, and the noncentral χ² power grows with it."""
    from scipy.optimize import brentq

    at = lambda lam: math.sqrt(lam / (4 * n))  # noqa: E731  (the TV whose least noncentrality is lam)
    return at(brentq(lambda lam: least_power(df, n, alpha, at(lam)) - power, 1e-9, 1e7))


def law_row(
    name: str, tokens: list[list[int]], q1: np.ndarray, cells: dict, eos, control: np.ndarray, lossless: bool
) -> LawRow:
    """The law test of runs ``tokens`` against the target's first-token law ``q1`` and its cells of the first
    tokens (:func:`speculab.backends.exact_law.target_cells`), at level :data:`ALPHA` ``/ 2`` each; ``control``: a
    wrong first-token law the first test's power is stated against."""
    n = len(tokens)
    first = np.array([t[0] for t in tokens])
    g1 = g_test(np.bincount(first, minlength=q1.size), q1)
    index = {cell: i for i, cell in enumerate(cells)}
    law = np.append(np.fromiter(cells.values(), float, len(cells)), 0.0)
    law[-1] = max(1.0 - float(law[:-1].sum()), 0.0)  # every other outcome: one cell
    observed = np.zeros(law.size)
    for t in tokens:
        run = tuple(t[: t.index(eos) + 1]) if eos is not None and eos in t else tuple(t)
        observed[index.get(run, law.size - 1)] += 1
    gj = g_test(observed, law)
    refused = min(g1[2], gj[2]) < ALPHA / 2
    return LawRow(
        name,
        n,
        lossless,
        g1,
        gj,
        refused,
        g_test_power(control, q1, n, ALPHA / 2),
        (detectable_tv(g1[1], n, ALPHA / 2), detectable_tv(gj[1], n, ALPHA / 2)),
    )
