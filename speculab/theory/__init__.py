"""Closed forms of speculative decoding theory (numpy/scipy only, no sampling).

Convention everywhere: ``p`` = draft model, ``q`` = target model (as in [Yin]).
This package holds the mathematics; how each method runs (its rule, its laws and
exact expectations) is in :mod:`speculab.methods`.
"""

from speculab.theory.divergences import js, kl, residual, residual_mass, sd_acceptance, tv
from speculab.theory.instance import MarkovInstance, chain_marginals
from speculab.theory.rejections import (
    RejectionProfile,
    acceleration,
    expected_rejections,
    is_unbiased,
    output_law,
    sd_expected_rejections,
    unbiased_rejection_distribution,
)
from speculab.theory.batch import (
    BatchProfile,
    batch_expected_rejections,
    batch_improvement,
    batch_rejection_probability,
    bernoulli_batch_improvement,
    root_residual_chain,
    uniform_batch_improvement,
)
from speculab.theory.optimal import (
    OptimalBatchProfile,
    accepted_law_rank,
    algorithm4_accepted_law,
    best_accepted_law,
    optimal_acceptance,
    optimal_batch_rejections,
)
from speculab.theory.stopping import StoppingCounts, fixed_lookahead, optimal_stopping, stopping_counts
from speculab.theory.lookahead import (
    LookaheadChoice,
    LookaheadCounts,
    best_lookahead,
    iid_speedup,
    iid_tokens_per_round,
    latency_per_token,
    lookahead_counts,
)
from speculab.theory.sprinter import (
    SprinterDistribution,
    SprinterProfile,
    sd_flops,
    sprinter_acceptance_rate,
    sprinter_distribution,
    sprinter_expected_tokens,
    sprinter_flops,
    sprinter_output_law,
    sprinter_pass_probabilities,
    sprinter_profile,
    sprinter_stopping_time,
    sprinter_token_law,
    sprinter_tokens_pmf,
)
from speculab.theory.fuzzy import (
    FuzzyBoundCheck,
    FuzzyProfile,
    chain_kl,
    fuzzy_bound_check,
    fuzzy_divergence,
    fuzzy_output_law,
    fuzzy_profile,
    fuzzy_sequence_law,
    sequence_divergence,
    sequence_law,
)
from speculab.theory.biased import biased_acceptance, canonical_optimal_rejection
from speculab.theory.tradeoff import (
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

__all__ = [
    # distances (SPEC §0)
    "tv",
    "residual",
    "residual_mass",
    "sd_acceptance",
    "kl",
    "js",
    # Markov instances
    "MarkovInstance",
    "chain_marginals",
    # [Yin] Thm 1, 2
    "RejectionProfile",
    "sd_expected_rejections",
    "acceleration",
    "expected_rejections",
    "output_law",
    "unbiased_rejection_distribution",
    "is_unbiased",
    # [Yin] Thm 3, Prop. 1, Fig. 3
    "BatchProfile",
    "batch_expected_rejections",
    "batch_improvement",
    "batch_rejection_probability",
    "bernoulli_batch_improvement",
    "uniform_batch_improvement",
    "root_residual_chain",
    # optimal multi-draft verification (SPEC O)
    "OptimalBatchProfile",
    "optimal_acceptance",
    "optimal_batch_rejections",
    "best_accepted_law",
    "accepted_law_rank",
    "algorithm4_accepted_law",
    # stopping rules: exact counts on the draft tree, the optimal rule
    "StoppingCounts",
    "stopping_counts",
    "optimal_stopping",
    "fixed_lookahead",
    # lookahead (SPEC L) and the [SDpp] cost model (SPEC D)
    "LookaheadCounts",
    "LookaheadChoice",
    "lookahead_counts",
    "best_lookahead",
    "latency_per_token",
    "iid_tokens_per_round",
    "iid_speedup",
    # SPRINTER (SPEC S1–S4)
    "SprinterDistribution",
    "SprinterProfile",
    "sprinter_distribution",
    "sprinter_acceptance_rate",
    "sprinter_token_law",
    "sprinter_tokens_pmf",
    "sprinter_expected_tokens",
    "sprinter_stopping_time",
    "sd_flops",
    "sprinter_flops",
    "sprinter_pass_probabilities",
    "sprinter_output_law",
    "sprinter_profile",
    # FSD (SPEC F)
    "FuzzyBoundCheck",
    "FuzzyProfile",
    "chain_kl",
    "fuzzy_bound_check",
    "fuzzy_divergence",
    "fuzzy_output_law",
    "fuzzy_profile",
    "fuzzy_sequence_law",
    "sequence_divergence",
    "sequence_law",
    # biased decoding and the trade-off, [Yin] Thm 4, 5
    "biased_acceptance",
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
