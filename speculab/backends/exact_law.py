"""The target model's exact law of its first tokens after a prompt: what the law tests hold decoded runs to.

Convention: ``p`` = draft, ``q`` = target. Laws are float64 from the model's float32 logits, after the sampling warp
(:class:`~speculab.backends.warp.Sampling`) the decoding used. :func:`next_law` is one position's law;
:func:`target_cells` is the law of the first tokens as the cells of a G-test (:func:`speculab.stats.law_row`),
for every prefix likely enough to be seen.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["next_law", "target_cells"]


def target_cells(pair, ids: list[int], sampling, n: int, depth: int) -> dict[tuple, float]:
    """The target's exact law of its first ``depth`` tokens after ``ids``, as the G-test's cells for ``n`` runs:
    every outcome (``depth`` tokens, or fewer ending at EOS) whose every prefix and itself have expected counts of
    at least 5, with its probability; the rest of the mass is one further cell (the caller's). Only the likely
    prefixes are expanded (one forward pass of the target per prefix, batched), and of each law only its likely
    children are kept (never a ``(prefixes, V)`` table on the host)."""
    eos = pair.eos_token_id
    cells, frontier = {}, [((), 1.0)]
    for d in range(depth):
        nxt = []
        for start in range(0, len(frontier), 256):
            chunk = frontier[start : start + 256]
            with torch.inference_mode():
                x = torch.tensor([ids + list(prefix) for prefix, _ in chunk], dtype=torch.long, device=pair.device)
                logits = pair.target.model(input_ids=x).logits[:, -1, : pair.vocab_size].float()
                law = sampling.probs(logits.double())  # (chunk, V)
                mass = torch.tensor([m for _, m in chunk], dtype=law.dtype, device=law.device)[:, None] * law
                rows, tokens = torch.nonzero(mass * n >= 5, as_tuple=True)  # the likely children
                values = mass[rows, tokens]
            for r, t, v in zip(rows.tolist(), tokens.tolist(), values.tolist()):
                child = chunk[r][0] + (t,)
                if d + 1 == depth or t == eos:
                    cells[child] = v
                else:
                    nxt.append((child, v))
        frontier = nxt
    return cells


def next_law(model, ids: list[int], sampling, device, vocab: int) -> np.ndarray:
    """The warped next-token law after ``ids``, float64 ``(V,)`` on the host."""
    with torch.inference_mode():
        x = torch.tensor([ids], dtype=torch.long, device=device)
        return sampling.probs(model(input_ids=x).logits[0, -1, :vocab].float().double()).cpu().numpy()
