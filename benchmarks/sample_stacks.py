"""Where a command spends its time, by sampling its main thread's Python stack: a profiler that survives a time limit.

    python benchmarks/sample_stacks.py OUT.txt -m speculab.cli validate --device cuda
    python benchmarks/sample_stacks.py OUT.txt benchmarks/bench_batched.py --device cuda

A thread reads the main thread's stack every ``SAMPLE_MS`` milliseconds (default 10) and counts each stack. OUT.txt
gets, every ten seconds and at exit (a SIGTERM from ``timeout`` included), the samples' total, the hottest lines
(the innermost frame of each sample) and the hottest stacks through this project's code, most frequent first. A
sample is taken only when the sampler holds the GIL, so time inside C code that keeps the GIL (a CUDA synchronise
from Python, say) is charged to the Python line that called it — which is the line to look at.
"""

from __future__ import annotations

import atexit
import collections
import os
import runpy
import signal
import sys
import threading
import time

INTERVAL = float(os.environ.get("SAMPLE_MS", "10")) / 1000
TOP = 40


def _where(frame) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("site-packages/", "/speculab/", "/benchmarks/"):
        if marker in path:
            path = (
                path.split(marker, 1)[1]
                if marker == "site-packages/"
                else marker.strip("/") + "/" + path.split(marker, 1)[1]
            )
            break
    return f"{path}:{frame.f_lineno}({code.co_name})"


def _own(frame) -> bool:
    path = frame.f_code.co_filename
    return ("/speculab/" in path or "/benchmarks/" in path) and "sample_stacks" not in path


class Sampler:
    def __init__(self, out: str):
        self.out, self.main = out, threading.main_thread().ident
        self.leaves, self.stacks, self.total = collections.Counter(), collections.Counter(), 0
        self.lock, self.stop = threading.Lock(), threading.Event()

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(INTERVAL):
            frame = sys._current_frames().get(self.main)
            if frame is None:
                continue
            own, leaf = [], _where(frame)
            f = frame
            while f is not None:
                if _own(f):
                    own.append(_where(f))
                f = f.f_back
            with self.lock:
                self.total += 1
                self.leaves[leaf] += 1
                self.stacks[" <- ".join(own[:6]) + f"  [leaf {leaf}]"] += 1
            if time.monotonic() - last > 10:
                self.write()
                last = time.monotonic()

    def write(self) -> None:
        with self.lock:
            lines = [f"{self.total} samples, one every {INTERVAL * 1000:g} ms", "", "hottest lines:"]
            lines += [f"{n:7d} {100 * n / max(self.total, 1):5.1f}%  {k}" for k, n in self.leaves.most_common(TOP)]
            lines += ["", "hottest stacks through this project (innermost first):"]
            lines += [f"{n:7d} {100 * n / max(self.total, 1):5.1f}%  {k}" for k, n in self.stacks.most_common(TOP)]
        with open(self.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: sample_stacks.py OUT.txt (-m MODULE | SCRIPT) [ARGS...]")
    sampler = Sampler(sys.argv[1])
    thread = threading.Thread(target=sampler.run, daemon=True)

    def finish() -> None:
        sampler.stop.set()
        thread.join(1.0)
        sampler.write()

    atexit.register(finish)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    thread.start()
    if sys.argv[2] == "-m":
        sys.argv = [sys.argv[3], *sys.argv[4:]]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[2:]
        runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
