"""What a benchmark writes for the documentation: ``NAME.json`` (every number it measured, and where and how) and
``NAME.md`` (the table the docs include with ``--8<-- "NAME.md"``), never typed by hand.

Each benchmark run with ``--out DIR`` calls :func:`write` with its result and its ``markdown`` function. The JSON
records the command that measured it, the commit (and whether the tree had uncommitted changes), the date, the
libraries, the machine and its load average at the start and the end of the run — timings on a shared machine are
read with that load in mind. The Markdown is ``markdown(result)`` followed by one line saying the same;
``tests/test_bench_tables.py`` checks that each committed ``NAME.md`` is its ``NAME.json`` rendered by its
benchmark's ``markdown``.

A benchmark that times anything takes ``--threads N`` (:func:`add_threads`, then :func:`use_threads`): with other
processes on the cores, threads that spin waiting for each other make a run many times slower (on two busy cores,
torch's default two threads decoded about 27 times slower than on idle ones), so the count is chosen, and recorded
beside the load average.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("numpy", "scipy", "torch", "transformers", "jax")
#: The environment variables that size the thread pools of OpenMP, OpenBLAS and MKL in the processes a run starts
#: (and in torch, read when it loads).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict:
    """Where and when a run measured: call it at the start of the run (its load average is the start's)."""
    commit = _git("rev-parse", "HEAD")
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "modified": bool(
            _git("status", "--porcelain", "--", "speculab", "benchmarks", ":(exclude)benchmarks/tables")
        ),  # the code's changes (tracked or new), not the tables the tools write
        "python": platform.python_version(),
        "libraries": {name: _version(name) for name in LIBRARIES if _version(name)},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "processor": _processor()},
        "load_at_start": list(os.getloadavg()),
    }


def _processor() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def write(
    out: str | os.PathLike, name: str, result: dict, markdown: Callable[[dict], str], env: dict, argv: list[str]
) -> Path:
    """Write ``out/NAME.json`` (``result`` with ``env``, the load at the end and the command) and ``out/NAME.md``
    (``markdown(result)`` and its provenance line); returns the JSON's path."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    data = dict(result)
    data["provenance"] = dict(
        env,
        load_at_end=list(os.getloadavg()),
        command=shlex.join(["python", f"benchmarks/{name}.py", *argv]),
        threads=torch_threads(),
    )
    text = render(data, markdown)  # before writing anything: a table that cannot be rendered leaves no data behind
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    (folder / f"{name}.md").write_text(text)
    return path


def render(data: dict, markdown: Callable[[dict], str]) -> str:
    """The Markdown of a written result: its table, then where, when and how it was measured."""
    p = data["provenance"]
    commit = f"`{p['commit'][:7]}`" + (" with uncommitted changes" if p["modified"] else "") if p["commit"] else "?"
    libs = ", ".join(f"{k} {v}" for k, v in p["libraries"].items())
    m = p["machine"]
    load = f"load average {p['load_at_start'][0]:.1f} at the start, {p['load_at_end'][0]:.1f} at the end"
    if p.get("threads") is not None:  # (tables written before the thread count was recorded do not say it)
        load = f"torch on {p['threads']} thread{'s' if p['threads'] != 1 else ''}, " + load
    return (
        markdown(data).rstrip("\n")
        + f"\n\nWritten by `{p['command']}` at commit {commit} on {p['date'][:10]}: Python {p['python']}, {libs}; "
        + f"{m['processor'] or m['platform']}, {m['cpus']} CPUs, {load}.\n"
    )


def argv(given: list[str] | None = None) -> list[str]:
    """The arguments a benchmark's ``main(argv)`` was given, else the command line's, for the record."""
    return sys.argv[1:] if given is None else list(given)


def at_least_one(ap, args, *flags: str) -> None:
    """Refuse, in argparse's one line naming the flag, any of ``flags`` (e.g. ``"--repeats"``) below 1."""
    for flag in flags:
        if getattr(args, flag.lstrip("-").replace("-", "_")) < 1:
            ap.error(f"argument {flag}: must be an integer >= 1")


def _thread_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be an integer >= 1")
    return value


def add_threads(ap: argparse.ArgumentParser, default: int | None = None) -> None:
    """Give ``ap`` the flag ``--threads N`` (default ``default``; ``None``: torch's own count), refused below 1 in
    argparse's one line (``argument --threads: must be an integer >= 1``); :func:`use_threads` applies it."""
    own = "torch's own" if default is None else str(default)
    ap.add_argument(
        "--threads",
        type=_thread_count,
        default=default,
        help=f"threads of torch and of the processes the run starts (default {own}): on a shared machine, fewer "
        "threads than idle cores",
    )


def use_threads(threads: int | None) -> int | None:
    """Run on ``threads`` threads: torch's (``torch.set_num_threads``) and, through :data:`THREAD_VARIABLES`, the
    thread pools of the processes the run starts; ``None`` changes nothing. Returns torch's thread count (what the
    JSON records), ``None`` without torch."""
    if threads is not None:
        os.environ.update({name: str(threads) for name in THREAD_VARIABLES})
        try:
            import torch
        except ImportError:
            return None
        torch.set_num_threads(threads)
    return torch_threads()


def torch_threads() -> int | None:
    """torch's thread count when the run has loaded torch, else ``None``."""
    torch = sys.modules.get("torch")
    return None if torch is None else torch.get_num_threads()


def markdown_table(head: list[str], rows: list[list]) -> list[str]:
    """A Markdown pipe table's lines; a ``|`` inside a cell is escaped (``E[τ | block]`` stays one cell)."""
    cell = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    return [
        "| " + " | ".join(map(cell, head)) + " |",
        "| " + " | ".join("---" for _ in head) + " |",
        *("| " + " | ".join(map(cell, row)) + " |" for row in rows),
    ]


def sig(x: float) -> str:
    """``x`` to 3 significant digits, without an exponent (whole numbers from 100 on)."""
    if not math.isfinite(x):
        return "—"
    x = float(f"{x:.3g}")
    if x == 0 or abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{max(0, 2 - math.floor(math.log10(abs(x))))}f}"
