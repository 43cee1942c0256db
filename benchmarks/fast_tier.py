"""The fast tier's time: ``./dev test`` run as a user runs it, first with JAX's compilation cache empty, then warm.

The fast tier promises to finish in under five minutes on a 2-core machine that other work shares. Each run here
is ``./dev test -q -p no:cacheprovider`` (the fast tier, CI's variable unset), its JAX cache a fresh folder of its
own: the first run is a fresh clone's (every program compiled), the second a user's next one (loaded from the
cache). Beside both runs a process keeps ``--background`` of a core busy (busy that share of each 0.1 s, asleep the
rest), standing for the other work on a shared machine; the table gives each run's seconds, the tests it ran and
the machine's 1-minute load average during the run (its mean and maximum over samples every 5 s, our own workers
included).

    python benchmarks/fast_tier.py [--background 0.5] [--threads 1] [--out benchmarks/tables]

A run whose tests fail writes nothing: its time is not the tier's. With ``--out DIR`` it writes ``DIR/fast_tier.json``
and ``DIR/fast_tier.md`` (the table docs/measurements.md includes).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402
from _tables import sig  # noqa: E402

ROOT = _tables.ROOT
PROMISE_SECONDS = 300  # the README's and the docs' promise for the fast tier on 2 cores
COMMAND = ["./dev", "test", "-q", "-p", "no:cacheprovider"]
LOAD_EVERY = 5.0  # seconds between samples of the load average
#: The busy loop of ``--background``: busy ``share`` of each 0.1 s, asleep the rest.
BUSY = """
import sys, time
share = float(sys.argv[1])
while True:
    end = time.perf_counter() + 0.1 * share
    while time.perf_counter() < end:
        pass
    time.sleep(0.1 * (1 - share))
"""


def summary(output: str) -> dict:
    """The counts and seconds of pytest's last line, ``== 3,001 passed, 12 skipped in 290.1s (0:04:50) ==``."""
    lines = [line for line in output.splitlines() if re.search(r"\b(passed|failed|errors?)\b.* in [\d.]+s", line)]
    if not lines:
        raise ValueError("no pytest summary line in the output")
    line = lines[-1]
    counts = {kind: int(n.replace(",", "")) for n, kind in re.findall(r"(\d[\d,]*) (\w+)", line.split(" in ")[0])}
    return {"counts": counts, "pytest_seconds": float(re.search(r" in ([\d.]+)s", line)[1])}


def run(cache: str, background: float) -> dict:
    """One ``./dev test`` with JAX's cache in ``cache``, beside the busy loop; its seconds, counts and load."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # CI=true would run the full tier
    env["JAX_COMPILATION_CACHE_DIR"] = cache
    loads: list[float] = []
    done = threading.Event()

    def sample():
        while not done.wait(LOAD_EVERY):
            loads.append(os.getloadavg()[0])

    busy = subprocess.Popen([sys.executable, "-c", BUSY, str(background)]) if background > 0 else None
    sampler = threading.Thread(target=sample, daemon=True)
    try:
        sampler.start()
        start = time.perf_counter()
        finished = subprocess.run(COMMAND, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    finally:
        done.set()
        if busy is not None:
            busy.kill()
            busy.wait()
    output = finished.stdout + finished.stderr
    if finished.returncode != 0:
        raise SystemExit(f"./dev test exited {finished.returncode}: nothing written\n{output[-3000:]}")
    return dict(
        summary(output),
        seconds=seconds,
        load_mean=sum(loads) / len(loads) if loads else None,
        load_max=max(loads) if loads else None,
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--background",
        type=float,
        default=0.5,
        help="share of a core a second process keeps busy during the runs, in [0, 1] (default 0.5)",
    )
    ap.add_argument("--out", help="write fast_tier.json and fast_tier.md into this folder, for the documentation")
    _tables.add_threads(ap, default=1)  # each worker's, as ./dev test sets them
    args = ap.parse_args(argv)
    if not 0 <= args.background <= 1:
        ap.error(f"argument --background: a share of one core in [0, 1], not {args.background}")
    _tables.use_threads(args.threads)  # ./dev test keeps the variables it is given
    env = _tables.environment()
    result = {"background": args.background, "threads": args.threads, "promise_seconds": PROMISE_SECONDS, "runs": []}
    with tempfile.TemporaryDirectory(prefix="speculab-jax-cache-") as cache:
        for state in ("cold", "warm"):
            r = dict(run(cache, args.background), cache=state)
            result["runs"].append(r)
            print(f"{state}: {r['seconds']:.0f} s, {r['counts']}, load {r['load_mean']}", flush=True)
    if args.out:
        _tables.write(args.out, "fast_tier", result, markdown, env, _tables.argv(argv))


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60):02d} s"


def markdown(result: dict) -> str:
    """The table of the two runs, and whether each kept the promise."""
    rows = []
    for r in result["runs"]:
        counts = ", ".join(f"{n:,} {kind}" for kind, n in r["counts"].items())
        load = "—" if r["load_mean"] is None else f"{sig(r['load_mean'])} / {sig(r['load_max'])}"
        kept = "yes" if r["seconds"] < result["promise_seconds"] else "**no**"
        rows.append([f"JAX cache {r['cache']}", _minutes(r["seconds"]), counts, load, kept])
    head = [
        "run",
        "time (wall)",
        "tests",
        "load average, mean / max",
        f"under {_minutes(result['promise_seconds'])}",
    ]
    note = (
        f"`./dev test` (the fast tier: one pytest-xdist worker per core, each on {result['threads']} thread"
        f"{'s' if result['threads'] != 1 else ''}), beside a process busy "
        f"{result['background']:.0%} of each 0.1 s; the first run with JAX's compilation cache empty (a fresh "
        "clone's), the second with it filled by the first. The load average is the machine's 1-minute one, sampled "
        f"every {LOAD_EVERY:.0f} s during the run, the workers included."
    )
    return "\n".join(_tables.markdown_table(head, rows)) + "\n\n" + note + "\n"


if __name__ == "__main__":
    main()
