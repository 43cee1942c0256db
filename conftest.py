"""The test run's options, for every test path (``tests/``, the doctests in ``speculab/`` and ``docs/``).

Here rather than in ``tests/conftest.py`` so that ``--runslow`` exists whichever paths a run names: the mutation
tool (``benchmarks/mutation.py``) passes it to every run, and its runs may name only doctests.
"""

import os
import re

import pytest


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")
    parser.addoption(
        "--device",
        default="cpu",
        help="where the real-model tests put the models (default cpu; e.g. cuda): tests/conftest.py's "
        "model_device() (tests/test_device.py keeps the CPU: its check needs the models there)",
    )


def pytest_configure(config):
    os.environ["SPECULAB_TEST_DEVICE"] = config.getoption("--device")


def pytest_collection_modifyitems(config, items):
    # Test ids are the same in every process (pytest-xdist's workers compare them): no memory address in one.
    moving = [item.nodeid for item in items if re.search(r" at 0x[0-9a-f]+", item.nodeid)]
    if moving:
        raise pytest.UsageError(f"test ids with a memory address (use tests/conftest.py's method_id): {moving[:3]}")
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
