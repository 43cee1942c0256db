"""Round probes: ``on_round`` callbacks whose observations an interrupted ``decode`` keeps.

What a :class:`~speculab.methods.capabilities.RoundProbing` method's ``round_probe`` returns, and what a
reproduction passes to :func:`speculab.backends.decode` to see every round (re-exported there); no torch needed
here.

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

import numpy as np

__all__ = ["RoundProbe"]


class RoundProbe:
    """An ``on_round`` callback that keeps one JSON value per round, per run (see the module docstring).

    Subclasses define :meth:`observe`; their public attributes (set in ``__init__``) and their source are part of
    what a journal is written for, so a probe with other settings or code does not resume another's journal. A
    probe passed to several calls keeps each run index's observations of every call, in call order; a call that
    raises leaves the probe as it found it. Everything a probe learns must be in what :meth:`observe` returns
    (summaries are computed from :meth:`values` or :meth:`items`): a replayed call does not run ``observe``, so a
    counter kept in an attribute would not be restored, and a public one, changing, makes the next call another
    call (a resume of it is refused).
    """

    def __init__(self) -> None:
        self._rounds: dict[int, list] = {}

    @property
    def _store(self) -> dict[int, list]:  # also for a subclass whose __init__ does not call RoundProbe's
        return self.__dict__.setdefault("_rounds", {})

    def observe(self, info) -> Any:
        """What to keep of one round (a :class:`~speculab.backends.RoundInfo`): a JSON value."""
        raise NotImplementedError(f"{type(self).__name__} must define observe(info)")

    def __call__(self, info) -> None:
        value = self.observe(info)
        try:  # kept as a journal gives it back (a tuple as a list), so a resumed call's probe is the same
            value = json.loads(json.dumps(value))
        except (TypeError, ValueError) as exc:
            kind = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
            raise ValueError(
                f"{type(self).__name__}.observe must return a JSON value (numbers, strings, booleans, "
                f"lists; numpy and torch values as float(x), int(x), bool(x) or x.tolist()); got {kind}: "
                f"{exc}"
            ) from exc
        self._store.setdefault(int(info.run), []).append(value)

    def rounds(self, run: int) -> list:
        """The observations of run ``run`` (its index in the decode call's prompts), in round order."""
        return list(self._store.get(_run_index(run), []))

    def restore(self, run: int, observations: list) -> None:
        """Put back run ``run``'s observations as a journal holds them (what ``decode`` does on resumption)."""
        self._store.setdefault(_run_index(run), []).extend(observations)

    def truncate(self, lengths: dict[int, int]) -> None:
        """Keep only the first ``lengths[run]`` observations of each run listed, none of runs not listed that were
        observed since (what ``decode`` does when a call fails: the probe as it found it)."""
        for run in list(self._store):
            kept = self._store[run][: lengths.get(run, 0)]
            if kept:
                self._store[run] = kept
            else:
                del self._store[run]

    def items(self) -> list[tuple[int, Any]]:
        """Every observation with its run, ``(run, value)``, in the order of :meth:`values`."""
        return [(run, v) for run in sorted(self._store) for v in self._store[run]]

    def values(self) -> list:
        """Every observation, run by run (in the order of the prompts), each run's in round order."""
        return [v for run in sorted(self._store) for v in self._store[run]]


def _run_index(run) -> int:
    if isinstance(run, bool) or not isinstance(run, (int, np.integer)) or run < 0:
        raise ValueError(
            f"run must be a run index (an int >= 0: the prompt's position in the decode call); got {run!r}"
        )
    return int(run)
