"""Closed forms of speculative decoding theory (numpy/scipy only, no sampling).

Convention everywhere: ``p`` = draft model, ``q`` = target model (as in [Yin]).
"""

from speculab.theory.divergences import js, kl, residual, residual_mass, sd_acceptance, tv
from speculab.theory.instance import MarkovInstance, chain_marginals
from speculab.theory.rejections import (
    RejectionProfile,
    acceleration,
    acceptance_array,
    expected_rejections,
    is_unbiased,
    output_law,
    rejection_array,
    sd_arrays,
    sd_expected_rejections,
    unbiased_rejection_distribution,
)

__all__ = [
    "MarkovInstance",
    "RejectionProfile",
    "acceleration",
    "acceptance_array",
    "chain_marginals",
    "expected_rejections",
    "is_unbiased",
    "js",
    "kl",
    "output_law",
    "rejection_array",
    "residual",
    "residual_mass",
    "sd_acceptance",
    "sd_arrays",
    "sd_expected_rejections",
    "tv",
    "unbiased_rejection_distribution",
]

from speculab.theory.batch import (  # noqa: E402
    BatchProfile,
    batch_expected_rejections,
    batch_improvement,
    batch_rejection_probability,
    bernoulli_batch_improvement,
    root_residual_chain,
    uniform_batch_improvement,
)

__all__ += [
    "BatchProfile",
    "batch_expected_rejections",
    "batch_improvement",
    "batch_rejection_probability",
    "bernoulli_batch_improvement",
    "root_residual_chain",
    "uniform_batch_improvement",
]
