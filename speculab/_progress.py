"""A progress bar that deep loops advance without being passed it: the CLI opens one around a long call
(real-model decoding), the loops call :func:`advance` with the tokens they produced. Outside such a block
:func:`advance` does nothing."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

_BAR: ContextVar = ContextVar("speculab_progress_bar", default=None)


@contextmanager
def progress(desc: str, *, total: int | None = None, unit: str = "token", enabled: bool = True):
    """A tqdm bar for the ``with`` block (shown on a terminal only; nothing when not ``enabled``)."""
    if not enabled:
        yield None
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=desc, unit=unit, leave=False, disable=None) as bar:
        token = _BAR.set(bar)
        try:
            yield bar
        finally:
            _BAR.reset(token)


def advance(n: int) -> None:
    """Advance the open bar by ``n`` (no bar open: nothing)."""
    bar = _BAR.get()
    if bar is not None and n:
        bar.update(n)
