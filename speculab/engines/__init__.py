"""Clients of the serving engines people deploy, measured as installed, never re-implemented (DESIGN: Engines).

:mod:`speculab.engines.vllm` runs vLLM's own speculative decoding in vLLM's environment, sets its counters beside the
exact prediction for the rule it runs (:mod:`speculab.engines.paired`) and tests its output law against the target's.
"""
