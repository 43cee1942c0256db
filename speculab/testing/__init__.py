"""Hypothesis strategies and ready-made property checks for speculative decoding code.

Importable by users for their own tests::

    from speculab.testing import (distributions, distribution_pairs, nasty_distribution_pairs, markov_instances,
                                  acceptance_rules, assert_preserves_target_law, assert_counts_match_theory)

See :mod:`speculab.testing.properties` for an example test.
"""

from speculab.testing.properties import (
    MethodEnumeration,
    assert_counts_match_theory,
    assert_preserves_target_law,
    enumerate_method,
)
from speculab.testing.strategies import (
    OverAcceptance,
    PoweredAcceptance,
    ScaledAcceptance,
    acceptance_rules,
    distribution_pairs,
    distributions,
    markov_instances,
    nasty_distribution_pairs,
    nasty_markov_instances,
)

__all__ = [
    "distributions",
    "distribution_pairs",
    "nasty_distribution_pairs",
    "markov_instances",
    "nasty_markov_instances",
    "acceptance_rules",
    "ScaledAcceptance",
    "PoweredAcceptance",
    "OverAcceptance",
    "MethodEnumeration",
    "enumerate_method",
    "assert_preserves_target_law",
    "assert_counts_match_theory",
]
