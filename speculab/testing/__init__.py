"""Hypothesis strategies for property tests of speculative decoding code.

Importable by users for their own tests::

    from speculab.testing import distributions, distribution_pairs, markov_instances
"""

from speculab.testing.strategies import distribution_pairs, distributions, markov_instances

__all__ = ["distributions", "distribution_pairs", "markov_instances"]
