"""What :func:`speculab.sim.simulate` checks of a method's laws on an instance before either engine runs them.

Each engine also checks what it reads as it reads it (the numpy engine a rule's values, a root table, each round
law); these checks are the ones both engines need and neither could make well inside its loop: a round's length,
a rejection law with weight wherever a draft can be refused, and a position law that is a law. A failure is one
line naming the method and its member.
"""

from __future__ import annotations

import numbers

import numpy as np

from speculab.methods.capabilities import reading
from speculab.theory.instance import compact

__all__ = ["check_laws"]


def _draft_lengths(method, T: int) -> None:
    name = type(method).__name__
    for left in range(1, T + 1):
        L = method.draft_length(left)
        if isinstance(L, bool) or not isinstance(L, numbers.Integral) or not 0 <= L <= left:
            raise ValueError(
                f"{name}.draft_length({left}) gave {L!r}; a round that may output {left} more "
                f"tokens drafts 0 to {left} per row"
            )


def _rule(method, inst) -> None:
    """A refusal must have a token to output: ``P`` has weight wherever ``Σ (1 − b) p > 0`` (a ``P`` with negative or
    non-finite weights is the numpy engine's to refuse, by name, as it reads the rule)."""
    b, R = method.instance_rule(inst)
    P, b, R = np.broadcast_arrays(compact(inst.P), compact(b), compact(R))
    refusable = np.sum((1.0 - b) * P, axis=-1) > 0
    empty = np.all(R == 0, axis=-1)
    if np.any(refusable & empty):
        raise ValueError(
            f"{type(method).__name__}'s rule gives a rejection law P without weight at a context where "
            f"a draft can be refused"
        )


def _position_law(method, inst) -> None:
    name = type(method).__name__
    free, called, correction, _ = method.position_law(inst)
    P, free, called, correction = np.broadcast_arrays(
        compact(inst.P), compact(free), compact(called), compact(correction)
    )
    ok = (free >= 0) & (called >= 0) & (free + called <= 1 + 1e-12)  # NaN fails
    if not np.all(ok):
        raise ValueError(
            f"{name}.position_law gave probabilities of keeping a draft that are negative, NaN or sum past 1"
        )
    if not np.all((correction >= 0) & (correction < np.inf)):
        raise ValueError(f"{name}.position_law gave correction weights that are negative, infinite or NaN")
    corrected = np.any((P > 0) & (free + called < 1 - 1e-12), axis=-1)
    if np.any(corrected & ~(np.sum(correction, axis=-1) > 0)):
        raise ValueError(f"{name}.position_law gives no correction weight at a context where a draft is corrected")


def check_laws(method, inst) -> None:
    """Refuse, naming the method and its member, a method whose laws on ``inst`` no engine can run (module
    docstring)."""
    _draft_lengths(method, inst.T)
    how = reading(method)
    if how == "slots":
        _rule(method, inst)
    elif how == "positions":
        _position_law(method, inst)
