"""Writing files atomically: a reader (or a rerun after an interruption) sees the old file or the new one, never half.

Every file speculab writes as a result — reproduction JSON and figures, Markov instances,
trained heads — goes through :func:`atomic_path`: the content is written to a temporary
file beside the destination and moved over it with :func:`os.replace` (atomic on POSIX and
Windows within one file system). An interrupted run (Ctrl-C, ``kill``) therefore leaves the
previous run's files whole, each one consistent with the JSON written beside it by that run,
and no partial file under a result's name.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path"]


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write to; on success it replaces ``path``, on any exception
    (including ``KeyboardInterrupt``) it is removed and ``path`` is left as it was. Creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
