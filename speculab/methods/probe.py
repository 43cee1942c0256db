"""Round probes: ``on_round`` callbacks whose observations an interrupted ``decode`` keeps.

What :meth:`speculab.methods.Method.round_probe` returns, and what a reproduction passes to
:func:`speculab.backends.decode` to see every round (re-exported there); no torch needed here.

A plain function passed as ``decode(..., on_round=f)`` has side effects that cannot be
replayed, so inside :func:`speculab.sim.checkpoint.resumable` such a call is not journaled
and runs again in full. A :class:`RoundProbe` says what it keeps: one JSON value per
round (:meth:`RoundProbe.observe`), held per run. ``decode`` then journals each finished
block's observations with its runs and, on resumption, puts them back without decoding, so
a resumed call's probe holds what an uninterrupted call's would, run for run::

    class Gaps(RoundProbe):
        def observe(self, info):
            return float(info.law.expected_accepted()[0][0])

    gaps = Gaps()
    decode(pair, prompts, SD(K=4), key=0, on_round=gaps)
    gaps.values()  # every round's value, run by run, in round order

An observation must be a JSON value — numbers, strings, booleans, lists — and is kept as
JSON gives it back (a tuple as a list; a float bit for bit), on every path alike.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["RoundProbe"]


class RoundProbe:
    """An ``on_round`` callback that keeps one JSON value per round, per run (see the module docstring).

    Subclasses define :meth:`observe`; their public attributes (set in ``__init__``) are part of what a journal
    is written for, so a probe with other settings does not resume another's journal.
    """

    def __init__(self) -> None:
        self._rounds: dict[int, list] = {}

    def observe(self, info) -> Any:
        """What to keep of one round (a :class:`~speculab.backends.RoundInfo`): a JSON value."""
        raise NotImplementedError(f"{type(self).__name__} must define observe(info)")

    def __call__(self, info) -> None:
        value = self.observe(info)
        try:  # kept as a journal gives it back (a tuple as a list), so a resumed call's probe is the same
            value = json.loads(json.dumps(value))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{type(self).__name__}.observe must return a JSON value (numbers, strings, booleans, "
                             f"lists); got {type(value).__name__}: {exc}") from exc
        self._rounds.setdefault(int(info.run), []).append(value)

    def rounds(self, run: int) -> list:
        """The observations of run ``run`` (its index in the decode call's prompts), in round order."""
        return list(self._rounds.get(int(run), []))

    def restore(self, run: int, observations: list) -> None:
        """Put back run ``run``'s observations as a journal holds them (what ``decode`` does on resumption)."""
        self._rounds.setdefault(int(run), []).extend(observations)

    def items(self) -> list[tuple[int, Any]]:
        """Every observation with its run, ``(run, value)``, in the order of :meth:`values`."""
        return [(run, v) for run in sorted(self._rounds) for v in self._rounds[run]]

    def values(self) -> list:
        """Every observation, run by run (in the order of the prompts), each run's in round order."""
        return [v for run in sorted(self._rounds) for v in self._rounds[run]]
