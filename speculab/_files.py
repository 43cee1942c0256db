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
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "out_file", "write_text"]


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
