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

from speculab.theory.lookahead import (  # noqa: E402
    LookaheadChoice,
    LookaheadCounts,
    best_lookahead,
    iid_speedup,
    iid_tokens_per_round,
    latency_per_token,
    lookahead_counts,
)

__all__ += [
    "LookaheadChoice",
    "LookaheadCounts",
    "best_lookahead",
    "iid_speedup",
    "iid_tokens_per_round",
    "latency_per_token",
    "lookahead_counts",
]

from speculab.theory.sprinter import (  # noqa: E402
    SprinterDistribution,
    SprinterProfile,
    sd_flops,
    sprinter_acceptance_rate,
    sprinter_arrays,
    sprinter_distribution,
    sprinter_expected_tokens,
    sprinter_flops,
    sprinter_output_law,
    sprinter_profile,
    sprinter_stopping_time,
    sprinter_token_law,
    sprinter_tokens_pmf,
    sprinter_verifier_array,
)
from speculab.theory.fuzzy import (  # noqa: E402
    FuzzyBoundCheck,
    FuzzyProfile,
    chain_kl,
    fuzzy_arrays,
    fuzzy_bound_check,
    fuzzy_divergence,
    fuzzy_output_law,
    fuzzy_profile,
    fuzzy_sequence_law,
    sequence_divergence,
    sequence_law,
)

__all__ += [
    "SprinterDistribution",
    "SprinterProfile",
    "sd_flops",
    "sprinter_acceptance_rate",
    "sprinter_arrays",
    "sprinter_distribution",
    "sprinter_expected_tokens",
    "sprinter_flops",
    "sprinter_output_law",
    "sprinter_profile",
    "sprinter_stopping_time",
    "sprinter_token_law",
    "sprinter_tokens_pmf",
    "sprinter_verifier_array",
    "FuzzyBoundCheck",
    "FuzzyProfile",
    "chain_kl",
    "fuzzy_arrays",
    "fuzzy_bound_check",
    "fuzzy_divergence",
    "fuzzy_output_law",
    "fuzzy_profile",
    "fuzzy_sequence_law",
    "sequence_divergence",
    "sequence_law",
]

from speculab.theory.biased import biased_acceptance, biased_arrays, canonical_optimal_rejection  # noqa: E402
from speculab.theory.tradeoff import (  # noqa: E402
    OptimalRejection,
    SequenceBias,
    TradeoffProfile,
    is_optimal_rejection,
    log_likelihood_ratio,
    markov_kl,
    markov_tv,
    optimal_loss,
    optimal_loss_lp,
    optimal_rejection,
    pareto_acceptance,
    pareto_gap,
    pareto_loss,
    rejection_loss,
    rejection_probability,
    sequence_bias,
    tradeoff_profile,
)

__all__ += [
    "biased_acceptance",
    "biased_arrays",
    "canonical_optimal_rejection",
    "OptimalRejection",
    "SequenceBias",
    "TradeoffProfile",
    "is_optimal_rejection",
    "log_likelihood_ratio",
    "markov_kl",
    "markov_tv",
    "optimal_loss",
    "optimal_loss_lp",
    "optimal_rejection",
    "pareto_acceptance",
    "pareto_gap",
    "pareto_loss",
    "rejection_loss",
    "rejection_probability",
    "sequence_bias",
    "tradeoff_profile",
]
