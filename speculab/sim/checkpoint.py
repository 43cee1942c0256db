"""Checkpoints of a numpy simulation: every finished chunk appended to a JSON-lines file, so an interrupted run resumes.

A checkpoint file holds one header line (the instance's digest, the method, the number of
runs, the chunk size and the generator's state at the start) and then one line per finished
chunk: its per-run counts and the generator's state after it. Each line is written, flushed
and synced before the next chunk starts, so an interruption (Ctrl-C, ``kill``, a crash)
loses at most the chunk under way; a line cut short by it is dropped on resumption.
Resuming restores the generator's state after the last finished chunk and runs the rest,
so the result equals an uninterrupted run's with the same key, run for run.

The file's format — a header, then lines signed with a SHA-256 digest over the header and their own content,
written flushed and synced — is :mod:`speculab._lines`'s, shared with real-model decode journals.
A line is data, not trusted: it is checked before it is replayed — the digest, then every invariant a
simulator's counts satisfy (:mod:`speculab.sim.sense`: the runs the chunk must hold, counts that are
non-negative integers adding up to the horizon's tokens, no more target calls or drafts than the rounds
allow, per-position rates that are counts of the runs summing to the mean rejections), and a generator
state of the simulation's own kind. An edited, foreign or impossible line is refused, naming the file
and the line: the simulation stops rather than publish a number it did not compute.

The digest is unkeyed: it catches a line edited by hand or copied from another run, not a forger who
runs speculab's own :func:`~speculab._lines.line_digest` after editing. The invariants catch what such a forger can
write that no simulation writes; a line consistent in every respect — other counts a simulation could
have drawn, or a file fabricated whole — cannot be told from a real one without a secret key.

:func:`resumable` checkpoints every simulation of a longer computation (a reproduction)
this way, each in its own file named by what it simulates, so a rerun with ``resume=True``
reads back the finished simulations, continues the one under way and runs the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from speculab._files import atomic_path, refuse_link
from speculab._lines import active_folder, append_line, call_file, ours, read_lines, resumable, sign, signed_by
from speculab.counts import Counts
from speculab.sim.sense import Limits, counts_problem
from speculab.theory.instance import compact

__all__ = ["Journal", "FORMAT", "resumable", "recorded"]

FORMAT = "speculab-sim-checkpoint/3"  # /2: a digest per line; /3: every method run from its laws (new draws)


def instance_digest(inst) -> str:
    """SHA-256 of an instance's kernels (their compact parts, as stored: a stationary instance's ``(T, V, V)`` is
    never materialised), prompt law and horizon — what a checkpoint must have been written for."""
    h = hashlib.sha256()
    for a in (compact(inst.P), compact(inst.Q), inst.rho):
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    h.update(str(inst.T).encode())
    return h.hexdigest()


def _encode(counts: Counts) -> dict:
    return {
        "fields": {name: getattr(counts, name).tolist() for name in Counts.FIELDS},
        "rejections_per_position": counts.rejections_per_position.tolist(),
        "extra": {k: v.tolist() for k, v in counts.extra.items()},
    }


def _decode(data: dict, lim: Limits, runs: int) -> Counts:
    """A chunk's counts from their JSON, checked to be what ``runs`` runs under ``lim`` can count
    (:func:`speculab.sim.sense.counts_problem`); ``ValueError`` says what is wrong."""
    if not isinstance(data, dict) or set(data) != {"fields", "rejections_per_position", "extra"}:
        raise ValueError("not a chunk's counts")
    fields, extra = data["fields"], data["extra"]
    if not isinstance(fields, dict) or set(fields) != set(Counts.FIELDS) or not isinstance(extra, dict):
        raise ValueError(f"its count fields are not {', '.join(Counts.FIELDS)}")
    arrays = {name: _integers(v, name) for name, v in (*fields.items(), *extra.items())}
    if len({a.shape for a in arrays.values()}) != 1 or next(iter(arrays.values())).size == 0:
        raise ValueError("its count fields have different lengths (or none)")
    rates = data["rejections_per_position"]
    if not isinstance(rates, list) or not all(type(r) in (int, float) for r in rates):
        raise ValueError("its rejection rates per position are not a list of numbers")
    counts = Counts(
        **{n: arrays[n] for n in Counts.FIELDS},
        rejections_per_position=np.asarray(rates, dtype=np.float64),
        extra={k: arrays[k] for k in extra},
    )
    problem = counts_problem(counts, lim, runs)
    if problem:
        raise ValueError(problem)
    return counts


def _integers(values, name: str) -> np.ndarray:
    if not isinstance(values, list) or not all(type(v) is int and 0 <= v < 2**63 for v in values):
        raise ValueError(f"{name} is not a list of non-negative integers")
    return np.asarray(values, dtype=np.int64).reshape(len(values))


def _check_state(state, kind: str) -> None:
    """A generator state to restore: a dict numpy's ``kind`` bit generator accepts (checked on a scratch one)."""
    scratch = getattr(np.random, kind)()
    try:
        scratch.state = state
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"rng_state is not a {kind} state ({type(exc).__name__})") from None


class Journal:
    """The checkpoint file of one simulation (see the module docstring).

    Args:
      path: the JSON-lines file.
      header: what the simulation is (written first; a resumed file must carry the same).
      resume: continue the file's finished chunks; without it an existing file is refused (not overwritten).
      limits: what a run of the simulation can count (:func:`speculab.sim.sense.limits`); a finished chunk is
        replayed only when its counts are within them, and it holds the runs the header's ``n_runs`` and
        ``chunk`` give it.
    """

    def __init__(self, path: str | os.PathLike, header: dict, *, resume: bool, limits: Limits):
        self.path = Path(path)
        self.limits = limits
        self.header = json.loads(json.dumps({"format": FORMAT, **header}))  # as the file holds it (tuples as lists)
        self.parts: list[Counts] = []
        self.state = None  # the generator's state after the last finished chunk
        refuse_link(self.path, "checkpoint")
        if self.path.is_dir():
            raise ValueError(f"checkpoint must name a file; {self.path} is a folder")
        if self.path.exists() and self.path.stat().st_size > 0:
            if not resume:
                raise ValueError(f"checkpoint {self.path} exists: resume it (resume=True, --resume) or remove it")
            self._read()
        elif resume and not self.path.exists():
            raise ValueError(f"nothing to resume: no checkpoint at {self.path}")
        else:  # new, or (resuming) empty: cut while its header was written, nothing finished
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._append(self.header)

    def _read(self) -> None:
        if not ours(self.path):  # not read, so not cut either: someone else's file
            raise ValueError(f"{self.path} is not a speculab simulation checkpoint")
        lines = read_lines(self.path)  # a cut last line is dropped (and cut off the file)
        if not lines and self.path.stat().st_size == 0:  # cut while its header was written: nothing finished
            self._append(self.header)
            return
        if not lines or not isinstance(lines[0], dict) or lines[0].get("format") != FORMAT:
            raise ValueError(f"{self.path} is not a speculab simulation checkpoint")
        if lines[0] != self.header:
            differ = sorted(k for k in self.header if lines[0].get(k) != self.header[k])
            raise ValueError(
                f"checkpoint {self.path} was written for another simulation (its {', '.join(differ)} "
                f"differ); remove it or give another path"
            )
        kind = self.header["rng_state"]["bit_generator"] if isinstance(self.header.get("rng_state"), dict) else None
        for k, entry in enumerate(lines[1:], start=2):
            try:
                if not isinstance(entry, dict) or entry.get("chunk") != k - 2:
                    raise ValueError("not the next finished chunk")
                if not signed_by(self.header, entry):
                    raise ValueError(
                        "its digest does not match its content and this simulation (edited, or from another run)"
                    )
                counts = _decode(entry["counts"], self.limits, self._runs(k - 2))
                if kind is not None:
                    _check_state(entry["rng_state"], kind)
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(
                    f"checkpoint {self.path}, line {k}: {exc}; remove the file to simulate again"
                ) from None
            self.parts.append(counts)
            self.state = entry["rng_state"]

    def _runs(self, chunk: int) -> int:
        """The runs of finished chunk ``chunk``: ``chunk`` runs each (the header's), the last one the rest."""
        n, size = self.header.get("n_runs"), self.header.get("chunk")
        if type(n) is not int or type(size) is not int or n < 1 or size < 1:
            raise ValueError("its header has no whole n_runs and chunk ≥ 1")
        runs = min(size, n - chunk * size)
        if runs < 1:
            raise ValueError(f"a chunk past the {-(-n // size)} chunks of {n} runs")
        return runs

    def _append(self, entry: dict) -> None:
        append_line(self.path, entry)

    def add(self, part: Counts, rng: np.random.Generator) -> None:
        """Record a finished chunk and the generator's state after it."""
        self.parts.append(part)
        entry = {"chunk": len(self.parts) - 1, "counts": _encode(part), "rng_state": rng.bit_generator.state}
        self._append(sign(self.header, entry))  # JSON text, so the digest is the same as of the line read back


def active_checkpoint(inst, method, n_runs: int, rng: np.random.Generator) -> tuple[Path, bool] | None:
    """Inside :func:`resumable`: this simulation's checkpoint file and whether it exists; else ``None``."""
    folder = active_folder()
    path = (
        None
        if folder is None
        else call_file(folder, (instance_digest(inst), method, int(n_runs), rng.bit_generator.state))
    )
    return None if path is None else (path, path.exists())


def recorded(what, compute, expect: list[tuple[Limits, int]]):
    """Inside :func:`resumable`: ``compute()`` (a list of :class:`Counts`) once per ``what``, kept until the end.

    ``what`` describes the call completely (pickled, its digest names the file); a call found
    in the folder is read back instead of computed, only when it holds one :class:`Counts` per entry
    ``(limits, runs)`` of ``expect``, each of ``runs`` runs within ``limits`` (:mod:`speculab.sim.sense`).
    Outside :func:`resumable`, or when ``what`` cannot be pickled, it is just ``compute()``.
    """
    folder = active_folder()
    path = None if folder is None else call_file(folder, what)
    if path is None:
        return compute()
    header = {"format": FORMAT, "call": "recorded"}
    refuse_link(path, "recorded call")
    if path.exists():
        try:
            lines = [json.loads(line) for line in path.read_text().splitlines()]
            if len(lines) != 2 or lines[0] != header:
                raise ValueError("not a recorded call of this speculab")
            if not signed_by(header, lines[1]):
                raise ValueError("its digest does not match its content (edited, or from another run)")
            counts = lines[1]["counts"]
            if not isinstance(counts, list) or len(counts) != len(expect):
                raise ValueError(f"it does not hold the {len(expect)} results of the call")
            return [_decode(c, lim, runs) for c, (lim, runs) in zip(counts, expect)]
        except (
            OSError,
            UnicodeDecodeError,
            json.JSONDecodeError,
            AttributeError,
            KeyError,
            TypeError,
            ValueError,
        ) as exc:
            raise ValueError(f"recorded call {path}: {exc}; remove the file to compute it again") from None
    result = compute()
    body = sign(header, {"counts": [_encode(c) for c in result]})
    with atomic_path(path) as tmp:  # whole or not at all
        tmp.write_text(json.dumps(header) + "\n" + json.dumps(body) + "\n")
    return result
