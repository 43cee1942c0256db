"""Work budgets: the scale, the refusal with its estimate, the progress bar (speculab._budget)."""

import pytest

from speculab import work_budget
from speculab._budget import budget_scale, budgeted, limit, progress_bar
from speculab._validate import TooLarge


def test_a_work_budget_scales_every_budget_inside_its_block_only():
    """``work_budget(k)`` scales the budgets inside the block (the innermost block's scale when nested), restores them
    after it — an error included — and refuses a scale that is not a finite number > 0, naming it; ``budgeted``
    refuses before its first item, with the estimate, and otherwise yields every item in order."""
    with work_budget(2.5):
        assert limit(10) == 25.0
        with work_budget(0.5):
            assert budget_scale() == 0.5
        assert budget_scale() == 2.5
    with pytest.raises(RuntimeError), work_budget(3):
        raise RuntimeError
    assert budget_scale() == 1.0 and limit(7) == 7
    for bad in (0, -1.0, float("nan"), float("inf"), 10**400, True, "2", None):
        with pytest.raises(ValueError, match=r"the work budget's scale must be a finite number > 0; got"):
            with work_budget(bad):
                pass
    seen = []
    kw = dict(base=10, what="the toy", unit="steps", name="TOY", advice="smaller", desc="toy")
    assert list(budgeted(["a", "b"], [4, 6], **kw)) == ["a", "b"]
    with pytest.raises(
        TooLarge,
        match=r"^the toy would take 11 steps, over the budget of 10 steps \(TOY\): smaller, "
        r"or raise the budget",
    ):
        for item in budgeted(["a", "b"], [5, 6], **kw):
            seen.append(item)
    assert seen == []
    assert list(progress_bar(range(4), "toy", "step")) == [0, 1, 2, 3]  # a bar on a terminal only, items unchanged


def test_a_size_past_every_budget_is_compared_and_told_without_building_it():
    """``certify --method batch --M 100000`` crashed in the refusal's own message (Python prints no integer of more
    than 4,300 digits), and ``V ** (M · L)`` for ``M = 10**8`` took minutes to build: :func:`power` is exact up to
    :data:`EXACT_BITS` bits and infinite past them, and a refusal tells either size in one line."""
    from speculab._budget import EXACT_BITS, power, refuse

    assert power(7, 12) == 7**12 and power(1, 10**12) == 1 and power(0, 5) == 0 and power(5, 0) == 1
    assert power(2, EXACT_BITS) == 2**EXACT_BITS and power(2, EXACT_BITS + 1) == float("inf")
    assert power(3, 10**12) == float("inf")  # at once: never built
    kw = dict(base=10, unit="values", name="TOY", advice="smaller")
    assert "would take about 1e4999 values" in str(refuse("the toy", 10**4999 + 1, **kw))
    assert "would take about 3e400 values" in str(refuse("the toy", 3 * 10**400, **kw))
    assert "would take more than 1e3010 values" in str(refuse("the toy", power(3, 10**6), **kw))
    assert "would take 12,345 values" in str(refuse("the toy", 12_345, **kw))
    # no digit a float does not hold (10**24 was printed through a float as 999,999,999,999,999,983,222,784), no
    # amount cut to its power of ten (9.9e15 was "about 1e15"), no budget below 1 told as 0 (found by reviews)
    told = [(2**53 - 1, "9,007,199,254,740,991"), (2.0**53 - 1, "9,007,199,254,740,991"), (2**53, "about 9.01e15")]
    told += [(10**24, "about 1e24"), (9.99e40, "about 9.99e40"), (9.996e20, "about 1e21"), (10**30 - 1, "about 1e30")]
    told += [(4e-5, "4e-05"), (9 * 10**15 + 10**14, "about 9.1e15"), (0, "0"), (0.5, "0.5"), (1, "1"), (1.0, "1")]
    told += [
        (1.5, "1.5"),
        (1.234, "1.2"),  # at least 1: to a tenth, as 999.5 is
        (999.5, "999.5"),
        (624.6, "624.6"),
        (1234.0, "1,234"),
        (1 / 3, "0.333"),
        (1e15, "1" + ",000" * 5),
    ]
    told += [
        ((1 << 20) * 0.1, "104,857.6"),
        ((1 << 26) * 0.2, "13,421,772.8"),
        (2**51 + 0.5, "2,251,799,813,685,248.5"),
    ]
    for big, amount in told:
        assert f"would take {amount} values" in str(refuse("the toy", big, **kw)), big
    assert "over the budget of about 4e20 values" in str(refuse("the toy", 10**30, **{**kw, "base": 4e20}))
    # a scaled budget just under the work is told apart from it (reviews: "625 values, over the budget of 625")
    for work, budget, told in ((625, 624.6, "624"), (625_000, 624_999.6, "624,999"), (1, 0.5, "0"), (3, 2.0, "2")):
        message = f"would take {work:,} values, over the budget of {told} values"  # the whole units it allows
        assert message in str(refuse("the toy", work, **{**kw, "base": budget}))
