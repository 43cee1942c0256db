"""Progress that deep loops report without being passed a display: the CLI opens one around a long call (real-model
decoding), each decode announces its work with :func:`expect` (runs × tokens) and advances it with :func:`advance`.
Outside such a block both do nothing. A command that decodes several times (``compare``: the method, then its
references) learns each decode's size only when it starts, so each is a part of its own: the count, the total and
the time left are the current part's, and the display says which part it is (of how many, when the command knows).
A command that counts its work in units of its own (``plan``: decodes, drafted blocks, trees) announces each part
itself and holds the decodes inside it (:func:`held`), so that they do not start parts of their own.

On a terminal the display is a tqdm bar with its total and time left; elsewhere (output piped, a log file) it is a
line on stderr when work is announced and then every few seconds, with the same numbers, so a long run is never
silent."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, TextIO


@dataclass
class _Open:
    """The open display: its bar, its description, the parts announced so far and how many there will be (``None``:
    not known)."""

    bar: Any  # a tqdm bar or :class:`Lines`: the members expect and advance use
    desc: str
    parts: int | None = None
    started: int = 0


_OPEN: ContextVar[_Open | None] = ContextVar("speculab_progress", default=None)


class Lines:
    """Progress as lines on a stream that is not a terminal: one when work is announced (:meth:`set_postfix_str`),
    then at most one every ``every`` seconds, and one at the end of each part; each gives the count done of the
    total, the time so far and the time left at the rate so far. The members tqdm's bar has that :func:`expect` and
    :func:`advance` use."""

    def __init__(self, desc: str, total: int | None, unit: str, stream: TextIO, every: float, clock: Callable):
        self.desc, self.total, self.unit, self.stream, self.every, self.clock = desc, total, unit, stream, every, clock
        self.n, self.what = 0, ""
        self.start = self.last = clock()
        self.printed = None  # the last line's (description, count, total): the same line is not printed twice

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
        shown = (self.desc, self.n, self.total)
        if shown != self.printed:
            self.printed = shown
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
    token = _OPEN.set(_Open(bar, desc))
    try:
        yield bar
    finally:
        _OPEN.reset(token)
        bar.close()


@contextmanager
def held():
    """Inside the block :func:`expect` and :func:`advance` do nothing: its work is counted by the caller, in units of
    its own (a plan's stage counts decodes; the decodes would otherwise each start a part of tokens)."""
    token = _OPEN.set(None)
    try:
        yield
    finally:
        _OPEN.reset(token)


def expect(n: int, what: str = "", unit: str | None = None, parts: int | None = None) -> None:
    """Start the next part of the open display's work: ``n`` units (of ``unit``, if given; else the previous part's),
    said what they are. The display names the part's number from the second part on, or from the first when the
    caller says how many ``parts`` the work has (remembered for the parts after). No display open: nothing."""
    shown = _OPEN.get()
    if shown is None or not n:
        return
    if parts is not None:
        shown.parts = parts
    if shown.bar.n:
        shown.bar.refresh()  # where the part before ended, and in how long
    shown.started += 1
    if shown.parts is not None and shown.started <= shown.parts:
        shown.bar.set_description(f"{shown.desc}, part {shown.started} of {shown.parts}")
    elif shown.started > 1:
        shown.bar.set_description(f"{shown.desc}, part {shown.started}")
    if unit is not None:
        shown.bar.unit = unit  # a plain attribute that tqdm's line, as Lines', reads
    shown.bar.reset(total=n)
    shown.bar.set_postfix_str(what)
    shown.bar.refresh()


def advance(n: int) -> None:
    """Advance the open display by ``n`` (no display open: nothing)."""
    shown = _OPEN.get()
    if shown is not None and n:
        shown.bar.update(n)
