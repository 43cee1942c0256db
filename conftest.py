"""The test run's options, for every test path (``tests/``, the doctests in ``speculab/`` and ``docs/``).

Here rather than in ``tests/conftest.py`` so that ``--runslow`` exists whichever paths a run names: the mutation
tool (``benchmarks/mutation.py``) passes it to every run, and its runs may name only doctests.
"""

import pytest


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
