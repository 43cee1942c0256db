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
