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
    field = dataclasses.fields(obj)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, field, getattr(obj, field))
