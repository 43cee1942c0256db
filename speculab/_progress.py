"""Progress that deep loops report without being passed a display: the CLI opens one around a long call (real-model
decoding), each decode announces its work with :func:`expect` (runs × tokens) and advances it with :func:`advance`.
Outside such a block both do nothing. A command that decodes several times (``compare``: the method, then its
references) learns each decode's size only when it starts, so each is a part of its own: the count, the total and
the time left are the current part's, and the display says which part it is.

On a terminal the display is a tqdm bar with its total and time left; elsewhere (output piped, a log file) it is a
line on stderr when work is announced and then every few seconds, with the same numbers, so a long run is never
silent."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, TextIO

_BAR: ContextVar = ContextVar("speculab_progress_bar", default=None)


class Lines:
    """Progress as lines on a stream that is not a terminal: one when work is announced (:meth:`set_postfix_str`),
    then at most one every ``every`` seconds, and one at the end; each gives the count done of the total, the
    time so far and the time left at the rate so far. The members tqdm's bar has that :func:`expect` and
    :func:`advance` use."""

    def __init__(self, desc: str, total: int | None, unit: str, stream: TextIO, every: float, clock: Callable):
        self.desc, self.total, self.unit, self.stream, self.every, self.clock = desc, total, unit, stream, every, clock
        self.n, self.what = 0, ""
        self.start = self.last = clock()

    def reset(self, total: int | None = None) -> None:
        """Start a part: its count from 0 and its clock from now (what tqdm's ``reset`` does)."""
        self.n, self.total = 0, total
        self.start = self.last = self.clock()

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def update(self, n: int) -> None:
        self.n += n
        if self.clock() - self.last >= self.every:
            self.refresh()

    def set_postfix_str(self, what: str) -> None:
        self.what = what

    def refresh(self) -> None:
        self.last = self.clock()
        print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        """``DESC: N of TOTAL UNITs (P%), T so far, about T left — WHAT``."""
        elapsed = self.clock() - self.start
        done = f"{self.n:,} of {self.total:,} {self.unit}s" if self.total else f"{self.n:,} {self.unit}s"
        if self.total:
            done += f" ({self.n / self.total:.0%})"
        left = ""
        if self.total and self.n:
            left = f", about {_duration(elapsed * max(self.total - self.n, 0) / self.n)} left"
        elif self.total:
            left = ", time left not known yet"
        return f"{self.desc}: {done}, {_duration(elapsed)} so far{left}" + (f" — {self.what}" if self.what else "")

    def close(self) -> None:
        if self.n:
            self.refresh()


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60} s"


def _terminal(stream) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


@contextmanager
def progress(
    desc: str,
    *,
    total: int | None = None,
    unit: str = "token",
    enabled: bool = True,
    stream: TextIO | None = None,
    every: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
):
    """A progress display for the ``with`` block on ``stream`` (default stderr): a tqdm bar on a terminal, else
    :class:`Lines` every ``every`` seconds; nothing when not ``enabled``. ``total`` is the work known at the start;
    each :func:`expect` starts a part of its own size."""
    if not enabled:
        yield None
        return
    stream = sys.stderr if stream is None else stream
    if _terminal(stream):
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=desc, unit=unit, leave=False, file=stream)
    else:
        bar = Lines(desc, total, unit, stream, every, clock)
    bar.speculab_desc, bar.speculab_parts = desc, 0
    token = _BAR.set(bar)
    try:
        yield bar
    finally:
        _BAR.reset(token)
        bar.close()


def expect(n: int, what: str = "") -> None:
    """Start the next part of the open display's work: ``n`` units, said what they are; from the second part on the
    display names its number (no display open: nothing)."""
    bar = _BAR.get()
    if bar is not None and n:
        bar.speculab_parts += 1
        if bar.speculab_parts > 1:
            bar.set_description(f"{bar.speculab_desc}, part {bar.speculab_parts}")
        bar.reset(total=n)
        bar.set_postfix_str(what)
        bar.refresh()


def advance(n: int) -> None:
    """Advance the open display by ``n`` (no display open: nothing)."""
    bar = _BAR.get()
    if bar is not None and n:
        bar.update(n)
