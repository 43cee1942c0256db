"""Files of signed JSON lines, and the folder a resumable computation keeps them in.

Simulation checkpoints (:mod:`speculab.sim.checkpoint`) and real-model decode journals
(:mod:`speculab.backends.journal`) share one format: a header line that says what the file was written for, then one
line per finished piece of work. Each line is written, flushed and synced before the next piece starts
(:func:`append_line`), so an interruption loses at most the piece under way, and a line it cut short is dropped on
reading (:func:`read_lines`). Each line after the header carries a ``digest``: SHA-256 of the header and of the
line's own content (:func:`line_digest`, JSON with sorted keys), checked before the line is replayed
(:func:`signed_by`), so a line edited by hand or copied from another run is refused.

The digest is unkeyed: it catches an edited or foreign line, not a forger who signs an edit with
:func:`line_digest` itself; what a line may hold is for each user to check (the simulators' invariants, a decoded
run's).

:func:`resumable` is the folder those files live in: each call of a longer computation names its own file there by
the digest of what it computes (:func:`call_file`), so a rerun with ``resume=True`` finds them again; the files of
a block that finished are removed. Those names are predictable, so a symbolic link at one (planted to send the
writes elsewhere) is refused, naming it, never followed (:func:`speculab._files.open_nofollow`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from speculab._files import open_nofollow

__all__ = [
    "line_digest",
    "sign",
    "signed_by",
    "read_lines",
    "append_line",
    "ours",
    "resumable",
    "active_folder",
    "call_file",
]

#: The files :func:`resumable` owns in its folder: simulation checkpoints and recorded calls (``sim-*``), and the
#: journals of real-model decoding (``decode-*``, :mod:`speculab.backends.journal`).
PATTERNS = ("sim-*.jsonl", "decode-*.jsonl")


def line_digest(header: dict, entry: dict) -> str:
    """SHA-256 of a line's content (but its own ``digest``) with the header of the file it belongs to."""
    body = {k: v for k, v in entry.items() if k != "digest"}
    text = json.dumps(header, sort_keys=True) + "\n" + json.dumps(body, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def sign(header: dict, entry: dict) -> dict:
    """``entry`` with its ``digest`` under ``header`` (:func:`line_digest`), as :func:`append_line` should write it."""
    return {**entry, "digest": line_digest(header, entry)}


def signed_by(header: dict, entry: dict) -> bool:
    """Whether ``entry`` (a line read back) carries the digest of its content under ``header``."""
    return isinstance(entry, dict) and entry.get("digest") == line_digest(header, entry)


def read_lines(path: Path) -> list[dict]:
    """The entries of a JSON-lines file up to the first line an interruption cut short; that line (and anything
    after it) is cut off the file, so the next :func:`append_line` starts cleanly. A finished line that is not
    UTF-8 text (speculab writes ASCII) is no line of ours: refused, naming the file and the line. A symbolic link
    is refused (:func:`~speculab._files.open_nofollow`): the file it points to is not cut."""
    with open(open_nofollow(path, os.O_RDONLY, "checkpoint"), "rb") as f:
        raw = f.read()
    lines, kept = [], 0
    for k, line in enumerate(raw.split(b"\n"), start=1):
        if not line.endswith(b"}"):  # the line an interruption cut short (or the end of the file)
            break
        try:
            lines.append(json.loads(line))
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{path}, line {k}: not UTF-8 text (byte 0x{line[exc.start]:02x} at {exc.start}), not a line "
                f"speculab wrote; remove the file"
            ) from None
        except json.JSONDecodeError:
            break
        kept += len(line) + 1
    if kept < len(raw):
        with open(open_nofollow(path, os.O_RDWR, "checkpoint"), "r+b") as f:
            f.truncate(kept)
    return lines


def append_line(path: Path, entry: dict) -> None:
    """Append ``entry`` as one JSON line, flushed and synced before returning (what an interruption cannot undo); the
    file is created if missing, and a symbolic link there is refused, not followed."""
    fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "checkpoint")
    with open(fd, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


class _Session:
    """The state of one :func:`resumable` block: its folder, whether it resumes, the files of ours it found there
    and the files its calls have named (found or new)."""

    def __init__(self, folder: Path, resume: bool, found: list[Path]):
        self.folder, self.resume, self.found, self.named = folder, resume, set(found), set()

    def name(self, path: Path) -> None:
        """A call's file: when resuming, a call with no file of its own while files found there are still unclaimed
        means those were written by a run with other arguments (the calls of a deterministic computation come
        in the same order, so an honest resume claims every file it found before it makes a new one)."""
        if self.resume and path not in self.found and self.found - self.named:
            left = len(self.found - self.named)
            raise ValueError(
                f"nothing to resume for this call: {self.folder} holds {left} checkpoint file(s) that no "
                f"call of this run has matched, so they were written with other arguments (a seed, "
                f"method, model, batch size or torch thread count differs); rerun with the interrupted "
                f"run's arguments, or start over without --resume (in an emptied or another folder)"
            )
        self.named.add(path)


_SESSION: ContextVar[_Session | None] = ContextVar("speculab_resumable_session", default=None)


@contextmanager
def resumable(folder: str | os.PathLike, *, resume: bool = False, stale: str = "remove"):
    """Checkpoint every numpy simulation run inside the ``with`` block, each in its own file in ``folder``.

    A simulation's file is named by the digest of its instance, its method (pickled), its
    number of runs and the generator's state when it starts, so the calls of a deterministic
    computation find their own files again. With ``resume=True`` a finished simulation is read
    back whole (the generator set to its state after it), an interrupted one continues from its
    last chunk, and the rest run: the computation's results equal an uninterrupted run's. A
    resumed computation whose calls match none of the files left (other arguments) is refused at
    its first call that has no file, and the files are kept. JAX simulations and sweeps
    are recorded whole when they finish (:func:`speculab.sim.checkpoint.recorded`; a JAX key is a
    value, so the call is its own key). Real-model ``decode`` calls journal each finished batch or
    prompt (:mod:`speculab.backends.journal`). Simulations that keep their sequences or use a method
    that cannot be pickled (one holding a lambda) are not checkpointed: they rerun. When the block
    ends without an exception the files its calls used are removed, and the folder if nothing else
    is left in it.

    Args:
      folder: where the checkpoints go (made if missing). Only files of ours are touched: ``sim-*.jsonl`` and
        ``decode-*.jsonl`` whose first line is a speculab header (or that are empty: cut while it was written).
      resume: continue the checkpoints an interrupted run left in ``folder``.
      stale: without ``resume``, what to do with files of ours an earlier run left there: ``"remove"`` them
        (a folder speculab named, e.g. ``speculab repro``'s) or ``"refuse"`` to start (a folder the user named:
        their interrupted run is not thrown away unasked).
    """
    if not isinstance(folder, (str, os.PathLike)) or str(folder) == "":
        raise ValueError(f"folder must be a path (a str or os.PathLike, not empty); got {folder!r}")
    if not isinstance(resume, bool):
        raise ValueError(f"resume must be True or False; got {resume!r}")
    folder = Path(folder)
    if stale not in ("remove", "refuse"):
        raise ValueError(f"stale must be 'remove' or 'refuse'; got {stale!r}")
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"the checkpoint folder {folder} is a file")
    found = _owned(folder)
    if resume and not found:
        raise ValueError(f"nothing to resume: no checkpoints in {folder} (the last run finished or never started)")
    if not resume and found:
        if stale == "refuse":
            raise ValueError(
                f"{folder} holds {len(found)} checkpoint file(s) of an interrupted run: add --resume to "
                f"continue it, or remove them (or give another folder) to start over"
            )
        for old in found:
            old.unlink()
        found = []
    folder.mkdir(parents=True, exist_ok=True)
    session = _Session(folder, resume, found)
    token = _SESSION.set(session)
    try:
        yield folder
        for done in _owned(folder):  # reached only when the block finished: the files its calls used
            if done in session.named:
                done.unlink()
    finally:
        _SESSION.reset(token)
        try:
            folder.rmdir()  # only if empty: nothing to resume and nothing of the user's
        except OSError:
            pass


def ours(path: Path) -> bool:
    """A checkpoint file speculab wrote: empty (cut while its header was written) or starting with its header; never
    a symbolic link (speculab writes none)."""
    try:
        with open(open_nofollow(path, os.O_RDONLY, "checkpoint"), "rb") as f:
            head = f.read(21)
    except (OSError, ValueError):
        return False
    return head == b"" or head == b'{"format": "speculab-'[: len(head)]


def _owned(folder: Path) -> list[Path]:
    """The checkpoint and journal files of ours in ``folder`` (``PATTERNS``, with a speculab header)."""
    return [f for pattern in PATTERNS for f in sorted(folder.glob(pattern)) if f.is_file() and ours(f)]


def active_folder() -> Path | None:
    """Inside :func:`resumable`: its folder; else ``None``."""
    session = _SESSION.get()
    return None if session is None else session.folder


def call_file(folder: Path, what, prefix: str = "sim") -> Path | None:
    """The file in ``folder`` of the call ``what`` describes (``PREFIX-`` and the digest of ``what`` pickled, with
    speculab's version), or ``None`` when ``what`` cannot be pickled (a method holding a lambda or a live object: not
    checkpointed). Inside :func:`resumable`, the call is named to it (a resume whose calls match none of the files
    left is refused)."""
    from speculab import __version__

    try:
        blob = pickle.dumps((__version__, what))
    except Exception:
        return None
    path = folder / f"{prefix}-{hashlib.sha256(blob).hexdigest()[:32]}.jsonl"
    session = _SESSION.get()
    if session is not None and session.folder == folder:
        session.name(path)
    return path
