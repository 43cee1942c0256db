"""Writing files atomically: a reader (or a rerun after an interruption) sees the old file or the new one, never half.

Every file speculab writes as a result — reproduction JSON and figures, Markov instances,
trained heads — goes through :func:`atomic_path`: the content is written to a temporary
file beside the destination and moved over it with :func:`os.replace` (atomic on POSIX and
Windows within one file system). An interrupted run (Ctrl-C, ``kill``) therefore leaves the
previous run's files whole, each one consistent with the JSON written beside it by that run,
and no partial file under a result's name.

The temporary file is created exclusively (``O_CREAT | O_EXCL``, which fails on any existing path, a link
included) under an unpredictable name, so a symbolic link planted beside the destination in a shared folder is
never written through; it is created with mode ``0o666`` less the process's umask, as a plain ``open`` would; and
``os.replace`` replaces a link at the destination itself rather than the file it points to.

Files speculab appends to or cuts (checkpoints, decode journals) are opened with :func:`open_nofollow`, and a folder
it names itself is built beside and renamed into place (:func:`atomic_folder`): a symbolic link planted at a name
speculab chose is refused or replaced, never followed (:func:`refuse_link`).
"""

from __future__ import annotations

import errno
import math
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "atomic_folder", "open_nofollow", "refuse_link", "out_file", "write_text", "json_finite"]

#: ``O_NOFOLLOW`` where the system has it (POSIX): opening a link fails instead of opening what it points to.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write to; on success it replaces ``path``, on any exception
    (including ``KeyboardInterrupt``) it is removed and ``path`` is left as it was. Creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _exclusive(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _exclusive(path: Path) -> Path:
    """A new empty file beside ``path`` under a random name, made by this call alone (never an existing path)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp


def refuse_link(path: str | os.PathLike, what: str) -> None:
    """Refuse (``ValueError`` naming ``what`` and ``path``) a symbolic link at a path speculab names and writes
    itself: whatever it points to is not the user's request."""
    if Path(path).is_symlink():
        raise _linked(path, what)


def _linked(path, what: str) -> ValueError:
    return ValueError(
        f"{what} {path} is a symbolic link: speculab does not write through links at the files and folders it "
        f"makes; remove it or give another path"
    )


def open_nofollow(path: str | os.PathLike, flags: int, what: str) -> int:
    """``os.open(path, flags)`` (mode ``0o666`` less the umask when it creates the file), refused by
    :func:`refuse_link` when ``path`` is a symbolic link — by the system itself where it has ``O_NOFOLLOW``, so a
    link planted after a check is not followed either. Returns the file descriptor."""
    refuse_link(path, what)
    try:
        return os.open(path, flags | _NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link planted since the check above
            raise _linked(path, what) from None
        raise


@contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new empty folder beside ``path`` to fill (made by this call alone, under a random name); on success
    it takes ``path``'s place — a folder there is replaced whole, a link or file there is removed, not followed —
    and on any exception it is removed and ``path`` is left as it was. Creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            os.mkdir(tmp, 0o777)  # the umask applies, as to a plain mkdir; fails on any existing path, a link too
        except FileExistsError:
            continue
        break
    old = None
    try:
        yield tmp
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            old = path.with_name(f".{path.name}.{secrets.token_hex(8)}.old")
            os.rename(path, old)
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not path.exists():
            os.rename(old, path)  # the previous folder back in its place
        raise
    if old is not None:
        shutil.rmtree(old)


def out_file(path: str | None, flag: str = "--out") -> Path | None:
    """A result file the user named with ``flag``, checked before any work: ``None`` stays ``None``; a folder, or a
    file in a folder that does not exist, is refused in one line naming the flag."""
    if path is None:
        return None
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"{flag} {path}: a folder; give a file name")
    if not out.parent.is_dir():
        raise ValueError(f"{flag} {path}: no folder {out.parent}")
    return out


def write_text(path: Path, text: str) -> None:
    """``text`` written to ``path`` atomically (:func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def json_finite(x):
    """``x`` with every non-finite float (a NaN standard error, an infinite z) as ``None``, in dicts, lists and tuples
    at any depth (tuples become lists): plain JSON values for a file another tool reads."""
    if isinstance(x, dict):
        return {k: json_finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
