"""Checks that place a failure of vLLM in its rejection sampler or around it, and the outcomes that show it.

* :func:`sampler` — vLLM's rejection sampler called directly, a black box for :func:`speculab.certify.check_sampler`;
* :func:`check_expand` — vLLM's ``expand_batch_to_tokens``, which gives each draft slot its request's temperature,
  top-k and top-p before the target's law is formed;
* :func:`worst_cells` — where a refused law test's two laws differ most.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speculab.engines.vllm_env import run_worker

__all__ = ["sampler", "ExpandCheck", "check_expand", "worst_cells", "EXPAND_CU", "EXPAND_CASES"]


def sampler(python: Path, draft: str, *, log: Path | None = None):
    """vLLM's rejection sampler as a black box for :func:`~speculab.certify.check_sampler`: each call runs ``n``
    rounds of one draft on the laws given as logits (``draft``: ``"probabilistic"``, ``"greedy"`` or
    ``"misstated"``, the worker's ``run_sampler``) and returns each round's first output token."""

    def vllm_rejection_sampler(draft_logits, target_logits, n, rng):
        p, q = np.exp(draft_logits), np.exp(target_logits)
        job = {"p": p.tolist(), "q": q.tolist(), "n": int(n), "seed": int(rng.integers(2**31)), "draft": draft}
        return np.asarray(run_worker(python, job, log=log, mode="--sampler"), dtype=np.int64)

    vllm_rejection_sampler.__name__ = f"vLLM's rejection sampler, {draft} drafts"
    return vllm_rejection_sampler


#: The expand check's requests: three of 2, 3 and 1 draft slots, and per dtype the values spread over them.
EXPAND_CU = [2, 5, 6]
EXPAND_CASES = [
    {"dtype": "float32", "values": [0.7, 1.0, 1.3]},
    {"dtype": "int32", "values": [20, 30, 40]},
    {"dtype": "int64", "values": [20, 30, 40]},
]


@dataclass(frozen=True)
class ExpandCheck:
    """vLLM's ``expand_batch_to_tokens`` on one dtype: what it returned for :data:`EXPAND_CASES`, what it must."""

    dtype: str
    got: list
    want: list

    @property
    def ok(self) -> bool:
        return self.got == self.want


def check_expand(python: Path, *, log: Path | None = None) -> list[ExpandCheck]:
    """Call vLLM's ``expand_batch_to_tokens`` — the step that gives each draft slot its request's temperature,
    top-k and top-p before the target's law is formed — on a float32, an int32 and an int64 input."""
    got = run_worker(python, {"cu_num_tokens": EXPAND_CU, "cases": EXPAND_CASES}, log=log, mode="--expand")
    checks = []
    for case, values in zip(EXPAND_CASES, got):
        counts = np.diff([0, *EXPAND_CU])
        want = [float(v) for v, c in zip(case["values"], counts) for _ in range(c)]
        rounding = np.float32 if case["dtype"] == "float32" else float
        checks.append(
            ExpandCheck(case["dtype"], [float(rounding(v)) for v in values], [float(rounding(v)) for v in want])
        )
    return checks


def worst_cells(pair, cells: dict, tokens: list, k: int = 5) -> list[dict]:
    """The ``k`` outcomes of the first :data:`~speculab.stats.LAW_TOKENS` tokens whose observed frequency in
    ``tokens`` lies farthest, in standard errors (``z``), from the target's exact probability (``cells``: the target's
    law of them, :func:`speculab.backends.exact_law.target_cells` for ``len(tokens)`` runs): the two laws, side by
    side, where they differ most (a refused law test's reproducer)."""
    from speculab.stats import LAW_TOKENS

    n, eos = len(tokens), pair.eos_token_id
    seen: dict = {}
    for t in tokens:
        run = tuple(t[: t.index(eos) + 1]) if eos is not None and eos in t else tuple(t[:LAW_TOKENS])
        seen[run] = seen.get(run, 0) + 1
    rows = []
    for cell, p in cells.items():
        o, var = seen.get(cell, 0) / n, p * (1 - p) / n
        z = (o - p) / np.sqrt(var) if var > 0 else (0.0 if o == p else np.copysign(np.inf, o - p))
        rows.append((cell, p, o, float(z)))
    rows.sort(key=lambda r: -abs(r[3]))
    return [
        {"tokens": list(c), "text": pair.tokenizer.decode(list(c)), "target": p, "observed": o, "z": z}
        for c, p, o, z in rows[:k]
    ]
