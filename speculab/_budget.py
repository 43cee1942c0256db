"""Work budgets of the exact computations whose size explodes with the instance.

Block verification's exact counts enumerate ``V^(K+2)`` block prefixes (``MAX_PATHS``), SpecDec++'s
recursion walks a draft tree of ``V · V^min(max_K, T)`` leaves (``NODE_BUDGET``), and optimal multi-draft
verification solves one linear program of ``Σ_S |S|`` variables per pair of rows (``LP_BUDGET``). Each is
estimated before any work starts and refused past its budget with a :class:`~speculab._validate.TooLarge`
that gives the estimate (sizes such as ``V^(K+2)`` are computed by :func:`power`: exact, or infinite when past
every budget, so no size is ever too large to compare or to print); :func:`work_budget` scales every budget
for a block of code (``--budget`` on the command line), and :func:`budgeted` and :func:`progress_bar` show a
bar over work that does run for more than a few seconds.
"""

from __future__ import annotations

import math
import numbers
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Iterator, Sequence, TypeVar

from speculab._validate import TooLarge

__all__ = [
    "work_budget",
    "budget_scale",
    "check_scale",
    "limit",
    "power",
    "refuse",
    "budgeted",
    "progress_bar",
    "RAISE",
    "EXACT_BITS",
]

_SCALE: ContextVar[float] = ContextVar("speculab_work_budget", default=1.0)

#: How every refusal says the budget can be raised.
RAISE = "or raise the budget: speculab.work_budget(k) in Python, --budget k on the command line (sim, certify)"

#: Bits past which :func:`power` stops computing a size exactly (every budget is far below ``2**EXACT_BITS``).
EXACT_BITS = 10_000

#: Seconds of work before :func:`budgeted` shows its bar (on a terminal only).
BAR_DELAY = 3.0

Item = TypeVar("Item")


def check_scale(scale) -> float:
    """A work budget's scale as a float: a finite number > 0 (booleans, NaN and overflowing integers refused)."""
    try:
        value = float(scale) if isinstance(scale, numbers.Real) and not isinstance(scale, bool) else math.nan
    except OverflowError:  # an integer past float64's range
        value = math.inf
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"the work budget's scale must be a finite number > 0; got {scale!r}")
    return value


@contextmanager
def work_budget(scale: float):
    """Multiply the budget of every exact computation by ``scale`` inside the ``with`` block (nested blocks: the
    innermost scale).

    Example:
      >>> from speculab import work_budget
      >>> from speculab._budget import limit
      >>> with work_budget(4):
      ...     limit(1000)
      4000.0
      >>> limit(1000)
      1000.0
    """
    token = _SCALE.set(check_scale(scale))
    try:
        yield
    finally:
        _SCALE.reset(token)


def budget_scale() -> float:
    """The scale in force (1 outside :func:`work_budget`)."""
    return _SCALE.get()


def limit(base: float) -> float:
    """A budget of ``base`` units of work, scaled by the :func:`work_budget` in force."""
    return base * _SCALE.get()


def power(base: int, exponent: int) -> int | float:
    """``base ** exponent`` as an exact integer (no float overflow), or ``math.inf`` past :data:`EXACT_BITS` bits: a
    size past every budget is compared without building an integer of millions of digits (``V ** (M · L)`` for
    ``M = 10**8`` drafts would take minutes)."""
    base, exponent = int(base), int(exponent)
    if base > 1 and exponent * math.log2(base) > EXACT_BITS:
        return math.inf
    return base**exponent


def refuse(what: str, work: float, base: float, unit: str, name: str, advice: str) -> TooLarge:
    """The refusal of ``work`` units past the budget ``base`` (scaled; the constant ``name``), naming both and how
    to get below it. A scaled budget is told in the whole units it allows (``work`` is a count: 1,006,632.96
    allows 1,006,632, and rounding it up told a work of 1,006,633 as over a budget of 1,006,633)."""
    scale = _SCALE.get()
    allowed = base * scale
    budget = f"{_amount(math.floor(allowed) if allowed < 2**53 else allowed)} {unit} ({name}" + (
        ")" if scale == 1 else f", times {scale:g})"
    )
    return TooLarge(f"{what} would take {_amount(work)} {unit}, over the budget of {budget}: {advice}, {RAISE}")


def _amount(work) -> str:
    """``work`` as a refusal tells it: below 2⁵³ (digits a float holds exactly) a whole number exactly, with
    thousands separators, another to a tenth (a scaled budget: 624,999.6 is not told as 625,000, the work it
    refuses) or, below 1, to three significant digits; larger, to three significant digits times a power of ten
    read off its logarithm (Python prints no integer of more than 4,300 digits, nor makes a float of one past
    1e308); past :func:`power`'s range, a bound."""
    if work == math.inf:
        return f"more than 1e{math.floor(EXACT_BITS * math.log10(2))}"
    if work < 2**53:
        return f"{work:,.0f}" if work == int(work) else f"{work:,.1f}" if work >= 1 else f"{work:.3g}"
    exponent = math.floor(math.log10(work))
    mantissa = round(work / 10**exponent, 2)  # in [1, 10]: 9.996… rounds up to 10
    if mantissa >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"about {mantissa:g}e{exponent}"


def budgeted(
    items: Sequence[Item],
    costs: Iterable[float],
    *,
    base: float,
    what: str,
    unit: str,
    name: str,
    advice: str,
    desc: str,
) -> Iterator[Item]:
    """``items`` one by one, after checking that their ``costs`` sum to at most the budget ``base`` (scaled).

    Raises :class:`~speculab._validate.TooLarge` with the estimate before the first item when they do not; while
    they run, a progress bar counts them once :data:`BAR_DELAY` seconds have passed (on a terminal only).
    """
    work = float(sum(costs))
    if work > limit(base):
        raise refuse(what, work, base, unit, name, advice)
    yield from progress_bar(items, desc)


def progress_bar(items: Iterable[Item], desc: str, unit: str = "") -> Iterable[Item]:
    """``items`` under a progress bar that shows once :data:`BAR_DELAY` seconds have passed, on a terminal only
    (the exact computations within their budget that can still take a while)."""
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit=unit, leave=False, disable=None, delay=BAR_DELAY)
