import os

import pytest
from hypothesis import HealthCheck, settings

# Property tests: fixed derandomised profile in CI so a run never flakes;
# locally the same profile unless HYPOTHESIS_PROFILE says otherwise.
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: Monte-Carlo agreement bound in standard errors (SPEC/STYLE: |z| < 5).
Z_BOUND = 5.0


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def assert_frozen(obj) -> None:
    """``obj`` is a frozen dataclass: results are values and methods hashable configurations (STYLE 5, 6)."""
    import dataclasses

    assert dataclasses.is_dataclass(obj), type(obj)
    fields = dataclasses.fields(obj)
    field = fields[0].name if fields else "anything"  # a frozen dataclass refuses any attribute
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, field, getattr(obj, field, None))


#: A power check asserts that its check refuses a named wrong answer with at least this probability.
POWER = 0.99


def power(shift: float) -> float:
    """The chance that a ``|z| < Z_BOUND`` check refuses when the truth lies ``shift`` standard errors from the value
    it checks: ``P(|N(shift, 1)| >= Z_BOUND)`` (normal approximation of the estimate)."""
    from scipy.stats import norm

    return float(norm.sf(Z_BOUND - abs(shift)) + norm.cdf(-Z_BOUND - abs(shift)))


def assert_power(record_property, alternative: str, value: float) -> None:
    """Assert that a check refuses ``alternative`` with probability ``value > POWER``, and record it for
    ``benchmarks/power.py`` (the table of every statistical test's power; a JUnit property ``power: …``)."""
    record_property("power", f"{value:.6f} | {alternative}")
    assert value > POWER, (alternative, value)
