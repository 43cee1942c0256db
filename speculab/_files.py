"""Writing files atomically: a reader (or a rerun after an interruption) sees the old file or the new one, never half.

Every file speculab writes as a result — reproduction JSON and figures, Markov instances,
trained heads — goes through :func:`atomic_path`: the content is written to a temporary
file beside the destination and moved over it with :func:`os.replace` (atomic on POSIX and
Windows within one file system). An interrupted run (Ctrl-C, ``kill``) therefore leaves the
previous run's files whole, each one consistent with the JSON written beside it by that run,
and no partial file under a result's name.

The temporary file is created by :func:`tempfile.mkstemp` (exclusively, ``O_EXCL``, under an unpredictable
name), so a symbolic link planted beside the destination in a shared folder is never written through; and
``os.replace`` replaces a link at the destination itself rather than the file it points to.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path"]

_UMASK = os.umask(0)  # read once, at import (umask can only be read by setting it)
os.umask(_UMASK)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write to; on success it replaces ``path``, on any exception
    (including ``KeyboardInterrupt``) it is removed and ``path`` is left as it was. Creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 -> what a plain open() would have given
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
