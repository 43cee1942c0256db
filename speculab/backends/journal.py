"""Journals of real-model decoding: inside :func:`speculab.sim.checkpoint.resumable`, an interrupted ``decode`` resumes.

A :func:`~speculab.backends.decode` call made inside ``resumable(folder)`` writes its
finished work to a JSON-lines file in ``folder``, named by the digest of the call (the
models' identities, the prompts' token ids, the method, the sampling, the per-prompt
seeds, the length, the batching and the torch thread count). The first line describes
the call; each further line is one finished *block* of prompts — one prompt in the
one-prompt loop, one batch of ``batch_size`` prompts (all of them when ``None``) in the
batched path — with every run's tokens, position and round records and counts. A line
is written, flushed and synced before the next block starts, so an interruption loses at
most the block under way; a line cut short by it is dropped on resumption.

With ``resumable(folder, resume=True)`` the same call reads its finished blocks back and
decodes only the others. Each prompt has its own random stream and the blocks are the
uninterrupted run's blocks, so the result equals an uninterrupted run's, run for run.
A :class:`~speculab.backends.RoundProbe` passed as ``on_round`` is journaled with
the runs: each run's observations are on its line and are put back on resumption. Not
journaled (they run again in full): calls with a plain ``on_round`` function (its side
effects cannot be replayed), calls whose method cannot be pickled, calls under
:func:`unrecorded` (timed runs: a replayed call took no time), and calls outside
``resumable``. A replayed call's ``DecodeResult.seconds`` is the wall time it took when
it ran.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import numpy as np
import torch

from speculab.backends.rounds import COUNTED, RoundRecord, RunRecord
from speculab.sim.checkpoint import active_folder, append_line, call_file, line_digest, ours, read_lines

__all__ = ["DecodeJournal", "open_journal", "unrecorded", "FORMAT"]

FORMAT = "speculab-decode-journal/2"  # /2: a digest per line, checked before replay

_UNRECORDED: ContextVar[bool] = ContextVar("speculab_unrecorded_decode", default=False)


@contextmanager
def unrecorded():
    """Decode calls inside the ``with`` block always run (never journaled nor replayed): for timings."""
    token = _UNRECORDED.set(True)
    try:
        yield
    finally:
        _UNRECORDED.reset(token)


#: An adapter's attributes that change with use, not with what it computes (a call counter, where it runs).
_USE = ("forward_calls", "device")


def model_identity(model) -> list:
    """What a journal must have been written by: a Hugging Face model's name, size and the sums of its first
    and last parameter tensors (cheap, and different for different weights); another adapter (n-gram, prompt
    lookup) by the digest of its public state — its memos (``_``-attributes) and call counter left out, so a
    draft that has decoded before keeps its identity."""
    inner = getattr(model, "model", None)
    if isinstance(inner, torch.nn.Module):
        params = [p for p in inner.parameters()]
        sums = [float(params[i].detach().double().sum()) for i in (0, -1)] if params else []
        name = getattr(getattr(inner, "config", None), "_name_or_path", "")
        return [type(model).__name__, str(name), sum(p.numel() for p in params), sums]
    if model is None or isinstance(model, (int, float, str, bool)):
        return [model]
    state = {
        k: (model_identity(v) if hasattr(v, "__dict__") and not isinstance(v, (torch.Tensor, np.ndarray)) else v)
        for k, v in sorted(vars(model).items())
        if not k.startswith("_") and k not in _USE
    }
    return [type(model).__name__, hashlib.sha256(pickle.dumps(state)).hexdigest()]


def _source(cls) -> str:
    """The digest of a class's source (its ``observe`` may change between runs), or of its method's bytecode."""
    import inspect

    try:
        text = inspect.getsource(cls).encode()
    except (OSError, TypeError):
        text = cls.observe.__code__.co_code
    return hashlib.sha256(text).hexdigest()


class DecodeJournal:
    """The journal file of one decode call (see the module docstring): finished blocks read back, new ones
    appended.

    Args:
      path: the JSON-lines file.
      header: what the call is (written first; a file must carry the same to be resumed).
    """

    def __init__(self, path: Path, header: dict):
        self.path = Path(path)
        self.header = json.loads(json.dumps({"format": FORMAT, **header}))  # as the file holds it
        self.done: dict[int, list[dict]] = {}
        if self.path.exists() and not ours(self.path):  # not read, so not cut either: someone else's file
            raise ValueError(f"{self.path} is not a speculab decode journal; remove it or use another folder")
        lines = read_lines(self.path) if self.path.exists() else []  # a line cut short is dropped
        if not lines:  # new, or cut short while its header was written: nothing finished, start again
            append_line(self.path, self.header)
            return
        if lines[0] != self.header:
            raise ValueError(f"decode journal {self.path} was written for another call; remove it")
        for k, entry in enumerate(lines[1:], start=2):
            block = entry.get("block") if isinstance(entry, dict) else None
            if type(block) is not int or block < 0 or not isinstance(entry.get("runs"), list) or block in self.done:
                raise ValueError(
                    f"decode journal {self.path}, line {k}: not a finished block (a 'block' index, once, "
                    f"and its 'runs'); remove the file to decode again"
                )
            if entry.get("digest") != line_digest(self.header, entry):
                raise ValueError(
                    f"decode journal {self.path}, line {k}: its digest does not match its content and "
                    f"this call (edited, or copied from another run); remove the file to decode again"
                )
            self.done[block] = entry["runs"]

    def replay(self, block: int, size: int, vocab_size: int, probe: bool) -> list[dict]:
        """The runs of finished block ``block``, checked to be what this call writes: ``size`` runs, each with its
        tokens (ids below ``vocab_size``), records of one length, integer counts and a time (and its probe's
        observations when ``probe``). Anything else is refused, naming the file and the block."""
        runs = self.done[block]
        where = f"decode journal {self.path}, block {block}"
        if len(runs) != size:
            raise ValueError(f"{where}: {len(runs)} runs where the call has {size}; remove the file to decode again")
        fields = tuple({f.name for f in dataclasses.fields(cls)} for cls in (RunRecord, RoundRecord)) + (set(COUNTED),)
        for run in runs:
            problem = _run_problem(run, vocab_size, probe, *fields)
            if problem:
                raise ValueError(f"{where}: {problem}; remove the file to decode again")
        return runs

    def append(self, block: int, runs: list[dict]) -> None:
        """Record a finished block's runs (``encode_run`` each)."""
        entry = json.loads(json.dumps({"block": int(block), "runs": runs}))  # as the file will hold it
        append_line(self.path, {**entry, "digest": line_digest(self.header, entry)})
        self.done[int(block)] = entry["runs"]


def _run_problem(
    run, vocab_size: int, probe: bool, record_fields: set, round_fields: set, count_fields: set
) -> str | None:
    """What is wrong with a journaled run (``encode_run``'s output), or ``None``; ``*_fields``: what a
    :class:`RunRecord`, a :class:`RoundRecord` and the loop's counts hold."""
    keys = {"tokens", "record", "rounds", "counts", "seconds"} | ({"probe"} if probe else set())
    if not isinstance(run, dict) or not keys <= set(run):
        return f"a run without its {', '.join(sorted(keys))}"
    tokens = run["tokens"]
    if not isinstance(tokens, list) or not all(type(t) is int and 0 <= t < vocab_size for t in tokens):
        return f"tokens that are not token ids below the vocabulary size {vocab_size}"
    record, rounds, counts = run["record"], run["rounds"], run["counts"]
    if not (
        isinstance(record, dict)
        and isinstance(rounds, dict)
        and set(record) == record_fields
        and set(rounds) == round_fields
    ):
        return f"records without exactly the fields {sorted(record_fields)} and {sorted(round_fields)}"
    columns = (*record.values(), *rounds.values())
    if not all(isinstance(v, list) and all(type(x) in (int, float) for x in v) for v in columns):
        return "records that are not lists of numbers"
    if record["tokens"] != tokens or any(len(v) != len(tokens) for v in record.values()):
        return "a position record that does not match its tokens"
    if not all(k in (0, 1, 2, 3) for k in record["kind"]) or len({len(v) for v in rounds.values()}) > 1:
        return "position kinds other than 0–3, or round records of different lengths"
    if not (isinstance(counts, dict) and set(counts) == count_fields and all(type(v) is int for v in counts.values())):
        return f"counts that are not the integers {sorted(count_fields)}"
    kinds = record["kind"]  # 0 accepted draft, 1 correction, 2 bonus, 3 target sample: what the counts count
    implied = {"rejections": kinds.count(1) + kinds.count(3), "accepted": kinds.count(0), "bonus": kinds.count(2)}
    n_rounds = len(next(iter(rounds.values()), []))  # a round calls the target at most once
    if (
        any(counts[k] != v for k, v in implied.items())
        or not 0 <= counts["accepted"] <= counts["draft_calls"]
        or not 0 <= counts["oracle_calls"] <= n_rounds
    ):
        return (
            "counts that do not match the position record (rejections, accepted drafts, bonus tokens) or its "
            "rounds (more target calls than rounds), negative calls or more accepted drafts than drafts"
        )
    if type(run["seconds"]) not in (int, float):
        return "a time that is not a number"
    if probe and not isinstance(run["probe"], list):
        return "probe observations that are not a list"
    return None


def encode_run(tokens: list[int], record, rounds, counts: dict, seconds: float) -> dict:
    """One run as JSON: its tokens, :class:`RunRecord` and :class:`RoundRecord` fields, counts and time."""
    return {
        "tokens": [int(t) for t in tokens],
        "record": {k: np.asarray(v).tolist() for k, v in vars(record).items()},
        "rounds": {k: np.asarray(v).tolist() for k, v in vars(rounds).items()},
        "counts": {k: int(v) for k, v in counts.items()},
        "seconds": float(seconds),
    }


def open_journal(
    pair,
    encoded: list[list[int]],
    method,
    sampling,
    seeds: list[int],
    *,
    max_new_tokens: int,
    track_draft: bool,
    block_size: int,
    batched: bool,
    probe=None,
) -> DecodeJournal | None:
    """The journal of this decode call inside :func:`~speculab.sim.checkpoint.resumable`, or ``None`` when the
    call is not journaled (outside it, under :func:`unrecorded`, or a method that cannot be pickled). ``probe``:
    the call's :class:`~speculab.backends.RoundProbe`, if any (its type and settings are part of the call)."""
    folder = active_folder()
    if folder is None or _UNRECORDED.get():
        return None
    try:  # a probe by its type, its code and its settings (public attributes; its observations are ``_``-attributes)
        probed = (
            None
            if probe is None
            else [
                type(probe).__module__,
                type(probe).__qualname__,
                _source(type(probe)),
                hashlib.sha256(
                    pickle.dumps({k: v for k, v in sorted(vars(probe).items()) if not k.startswith("_")})
                ).hexdigest(),
            ]
        )
    except (pickle.PicklingError, TypeError, AttributeError):  # a probe holding a lambda or a live object
        return None
    path = call_file(
        Path(folder),
        (
            model_identity(pair.draft),
            model_identity(pair.target),
            int(pair.vocab_size),
            encoded,
            method,
            repr(sampling),
            seeds,
            int(max_new_tokens),
            bool(track_draft),
            int(block_size),
            bool(batched),
            torch.get_num_threads(),
            pair.device.type,
            probed,
        ),
        prefix="decode",
    )
    if path is None:  # a method holding a lambda or a live object: not journaled, it reruns
        return None
    return DecodeJournal(
        path,
        {
            "call": path.stem,
            "prompts": len(encoded),
            "method": repr(method),
            "block_size": block_size,
            "probe": None if probe is None else type(probe).__name__,
        },
    )
