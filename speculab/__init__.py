"""speculab — theory, simulation and measurement of speculative decoding.

Convention everywhere: ``p`` is the draft model, ``q`` the target model.
"""

__version__ = "0.1.0"

from speculab._budget import work_budget  # noqa: E402  (the one entry point at the top level)

__all__ = ["work_budget"]
