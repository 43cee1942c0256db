"""speculab — theory, simulation and measurement of speculative decoding.

Convention everywhere: ``p`` is the draft model, ``q`` the target model.
"""

__version__ = "0.1.0"
