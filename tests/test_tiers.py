"""The two test tiers: ``full_tier_only`` moves named cases of a parametrization to the full tier, and only those."""

import pytest
from conftest import full_tier_only


def test_only_the_named_cases_are_marked_slow_and_the_others_keep_their_marks():
    cases = full_tier_only([pytest.param(1, id="a"), pytest.param(2, id="b", marks=pytest.mark.power)], "b")
    assert [(c.id, c.values, [m.name for m in c.marks]) for c in cases] == [
        ("a", (1,), []),
        ("b", (2,), ["power", "slow"]),
    ]


def test_a_name_that_no_case_has_is_refused():
    with pytest.raises(ValueError, match=r"no case has the id\(s\) \['c'\]"):
        full_tier_only([pytest.param(1, id="a"), pytest.param(2, id="b")], "b", "c")
