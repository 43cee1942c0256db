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

A line is data, not trusted: each carries a SHA-256 digest over the call's header and its
own content (the signed JSON lines of :mod:`speculab._lines`, as simulation checkpoints), and
a finished block is replayed only when it holds the call's runs and each run is one this call
can decode (:mod:`speculab.backends.journal_sense`: tokens up to the
length asked, ended early only at EOS; probabilities in ``[0, 1]``, log-probabilities ``≤ 0``;
counts that follow from the position and round records). The digest is unkeyed: it catches
an edited or foreign line, not a forger who signs an edit with speculab's own
:func:`~speculab._lines.line_digest`; the checks catch every value no decode writes,
but a run consistent in every respect (other tokens with records worked out to match, or a
journal fabricated whole) cannot be told from a real one without a secret key.

A :class:`~speculab.backends.RoundProbe` passed as ``on_round`` is journaled with
the runs: each run's observations are on its line and are put back on resumption. Not
journaled (they run again in full): calls with a plain ``on_round`` function (its side
effects cannot be replayed), calls whose method cannot be pickled, calls under
:func:`unrecorded` (timed runs: a replayed call took no time), and calls outside
``resumable``. A replayed call's ``DecodeResult.seconds`` is the wall time it took when
it ran.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import numpy as np
import torch

from speculab._files import refuse_link
from speculab.backends.journal_sense import RunLimits, run_problem
from speculab._lines import active_folder, append_line, call_file, ours, read_lines, sign, signed_by

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
        refuse_link(self.path, "decode journal")
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
            if not signed_by(self.header, entry):
                raise ValueError(
                    f"decode journal {self.path}, line {k}: its digest does not match its content and "
                    f"this call (edited, or copied from another run); remove the file to decode again"
                )
            self.done[block] = entry["runs"]

    def replay(self, block: int, size: int, limits: RunLimits) -> list[dict]:
        """The runs of finished block ``block``, checked to be what this call writes: ``size`` runs, each one this
        call can decode (:func:`speculab.backends.journal_sense.run_problem` under ``limits``). Anything else is
        refused, naming the file and the block."""
        runs = self.done[block]
        where = f"decode journal {self.path}, block {block}"
        if len(runs) != size:
            raise ValueError(f"{where}: {len(runs)} runs where the call has {size}; remove the file to decode again")
        for run in runs:
            problem = run_problem(run, limits)
            if problem:
                raise ValueError(f"{where}: {problem}; remove the file to decode again")
        return runs

    def append(self, block: int, runs: list[dict]) -> None:
        """Record a finished block's runs (``encode_run`` each)."""
        entry = json.loads(json.dumps({"block": int(block), "runs": runs}))  # as the file will hold it
        append_line(self.path, sign(self.header, entry))
        self.done[int(block)] = entry["runs"]


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
