"""Sampling warps applied identically to the draft's and the target's logits.

``p`` (draft) and ``q`` (target) at every step are the distributions *after*
the same temperature / top-k / top-p warp, and ``p`` is exactly the law the
draft token was sampled from, so speculative decoding stays unbiased for the
warped target. Temperature 0 is a real argmax path (see :attr:`Sampling.greedy`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

__all__ = ["Sampling", "check_laws", "nan_flag", "NAN_LOGITS"]

#: What a law computed from NaN logits is refused with.
NAN_LOGITS = "logits contain NaN; the model produced invalid output"


@dataclass(frozen=True)
class Sampling:
    """How next-token distributions are formed from logits.

    Args:
      temperature: ``> 0`` divides the logits; ``0`` means greedy (argmax), where
        ``p`` and ``q`` are the one-hot argmax distributions.
      top_k: keep the ``k`` most likely tokens (ties at the boundary are kept).
      top_p: keep the smallest set of most likely tokens whose probability reaches
        ``top_p`` (the token crossing the threshold is kept), ``0 < top_p <= 1``.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0; got {t!r}")
        if 0 < t < 1e-4:
            raise ValueError(f"temperature {t!r} would overflow the logits; use 0 for greedy decoding")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, numbers.Integral) or self.top_k < 1
        ):
            raise ValueError(f"top_k must be an integer >= 1 or None; got {self.top_k!r}")
        if self.top_k is not None:
            object.__setattr__(self, "top_k", int(self.top_k))  # numpy integers stored as Python's
        object.__setattr__(self, "temperature", float(t))
        top_p = self.top_p
        if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1):
            raise ValueError(f"top_p must be a number in (0, 1] or None; got {self.top_p!r}")
        if top_p is not None:
            object.__setattr__(self, "top_p", float(top_p))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor, *, check: bool = True) -> torch.Tensor:
        """Warped next-token distributions, float32/64 as the logits, shape ``(..., V)``.

        Raises ``ValueError`` if the logits contain NaN (a broken model must not
        be sampled from silently). ``check=False`` skips that test (a host synchronisation
        on a GPU): the caller then checks the laws it keeps with :func:`check_laws`.
        """
        if check and torch.isnan(logits).any():
            raise ValueError(NAN_LOGITS)
        if self.greedy:  # one-hot at the argmax; a row with NaN logits gets a NaN there, for check_laws to see
            top, at = logits.max(-1, keepdim=True)
            return torch.zeros_like(logits).scatter_(-1, at, torch.where(torch.isnan(top), top, 1.0))
        x = logits / self.temperature if self.temperature != 1 else logits  # x / 1 is x: one pass fewer
        if self.top_k is not None and self.top_k < x.size(-1):
            kth = torch.topk(x, self.top_k, dim=-1).values[..., -1:]
            x = x.masked_fill(x < kth, -math.inf)
        if self.top_p is not None and self.top_p < 1:
            sorted_x, order = torch.sort(x, dim=-1, descending=True)
            cum = torch.softmax(sorted_x, dim=-1).cumsum(-1)
            drop_sorted = (cum - torch.softmax(sorted_x, dim=-1)) >= self.top_p  # mass before this token already enough
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            x = x.masked_fill(drop, -math.inf)
        return torch.softmax(x, dim=-1)


def nan_flag(*laws: torch.Tensor) -> torch.Tensor:
    """Whether any of ``laws`` was computed from NaN logits: a 0-d bool tensor on their device (no host
    synchronisation; a caller reads it with the round's other values)."""
    total = sum(law.sum() for law in laws)  # NaN anywhere makes the sum NaN (laws are finite otherwise)
    return torch.isnan(total)


def check_laws(*laws: torch.Tensor) -> None:
    """Refuse laws computed from NaN logits (one host synchronisation for all of them)."""
    if bool(nan_flag(*laws)):
        raise ValueError(NAN_LOGITS)
