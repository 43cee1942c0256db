"""Which configuration to run: every candidate's speed predicted exactly from its round law along the pair's own
contexts and the machine's fitted latency, ranked, then confirmed by decoding (``speculab plan``)."""

from speculab.planning.cost import RunCost, run_cost
from speculab.planning.plan import Candidate, Confirmation, Plan, candidates, plan
from speculab.planning.yields import Yield, contexts, exact_yield, round_yields

__all__ = [
    "Candidate",
    "Confirmation",
    "Plan",
    "RunCost",
    "Yield",
    "candidates",
    "contexts",
    "exact_yield",
    "plan",
    "round_yields",
    "run_cost",
]
