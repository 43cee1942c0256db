"""The sizes an ``.npz`` archive claims, checked before numpy allocates them.

Each ``.npy`` member of an archive starts with a header that states its array's shape and dtype; numpy allocates
that many bytes and only then reads the data. A header edited to claim 800 GB therefore ends in an out-of-memory
error, whatever the file's real size. :func:`check_claims` reads every header first and refuses, naming the file
and the array, a member whose data is not as long as its header says (an edited or truncated file) and an archive
whose arrays together would not fit in this machine's memory.
"""

from __future__ import annotations

import math
import os
import zipfile

import numpy as np

__all__ = ["check_claims", "physical_memory"]

_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def physical_memory() -> int | None:
    """This machine's memory in bytes, or ``None`` where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 2**30 else f"{n / 2**30:,.1f} GiB"


def check_claims(path) -> None:
    """Refuse (``ValueError`` naming ``path``) an archive whose ``.npy`` headers claim more data than its members
    hold, or more memory than this machine has. Members this check cannot read (another header version, an object
    dtype, not a zip at all) are left to ``numpy.load``, which refuses them itself."""
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile):
        return
    total = 0
    with archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                continue
            try:
                with archive.open(info) as member:
                    reader = _READERS.get(np.lib.format.read_magic(member))
                    if reader is None:
                        continue
                    shape, _, dtype = reader(member)
                    header = member.tell()
            except (OSError, ValueError, EOFError, zipfile.BadZipFile):
                continue
            if dtype.hasobject:
                continue
            claimed = math.prod(shape) * dtype.itemsize
            held = info.file_size - header
            name = info.filename[: -len(".npy")]
            if claimed != held:
                raise ValueError(
                    f"{path}: its array {name} claims shape {tuple(shape)} of {dtype} ({_size(claimed)}) but the file "
                    f"holds {held:,} bytes of it (an edited or truncated file)"
                )
            total += claimed
    memory = physical_memory()
    if memory is not None and total > memory:
        raise ValueError(f"{path}: its arrays would take {_size(total)}, more than this machine's {_size(memory)}")
