"""Peak memory of the public functions on their largest cases, each in a fresh process.

For each case a new interpreter imports speculab, builds the inputs, resets its peak resident
size (Linux: ``/proc/self/clear_refs``) and runs the call once: the table gives the call's peak
resident memory beyond what the process held before it (MB), the process's peak resident size
over its whole life (``ru_maxrss``, MB, imports and inputs included) and the call's seconds. "Largest" is the size
the function is
built for: the stationary T = V = 1000 and context-free V = 50,000 instances (their (T, V, V)
stacks would be 8 GB and 2·10¹³ bytes), batch SD at M = 10⁶, the enumerations at their caps,
the simulator at V = 5000, the tiny model pair on a batch of prompts.

    python benchmarks/bench_memory.py [--only NAME...] [--threads N] [--out benchmarks/tables]

Memory does not depend on the machine's load; the seconds do (one run, no repeats), and on ``--threads``: each
case's process runs its thread pools (OpenMP, OpenBLAS, torch) on that many threads. With ``--out DIR`` it writes
``DIR/bench_memory.json`` (every case's peaks and seconds, and where and how they were measured) and
``DIR/bench_memory.md`` (the table docs/measurements.md includes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402
from _tables import sig  # noqa: E402

STATIONARY = """
rng = np.random.default_rng(0)
inst = MarkovInstance.stationary(rng.dirichlet(np.ones(1000), size=1000), rng.dirichlet(np.ones(1000), size=1000),
                                 T=1000)
"""
CONTEXT_FREE = """
rng = np.random.default_rng(0)
inst = MarkovInstance.context_free(rng.dirichlet(np.ones(50_000)), rng.dirichlet(np.ones(50_000)), T=1000)
"""

#: name -> (inputs, call): both Python source run after ``import numpy as np`` and speculab's imports
CASES = {
    "sd_expected_rejections, stationary T=V=1000": (STATIONARY, "sd_expected_rejections(inst)"),
    "sd_expected_rejections, context-free V=50,000": (CONTEXT_FREE, "sd_expected_rejections(inst)"),
    "expected_rejections (biased ε=0.1), stationary T=V=1000": (
        STATIONARY,
        "expected_rejections(inst, lambda p, q: biased_acceptance(p, q, 0.1), canonical_optimal_rejection)",
    ),
    "batch_expected_rejections M=8, stationary T=V=1000": (STATIONARY, "batch_expected_rejections(inst, 8)"),
    "batch_expected_rejections M=8, context-free V=50,000": (CONTEXT_FREE, "batch_expected_rejections(inst, 8)"),
    "batch_expected_rejections M=10^6, [Yin] T=50 V=7": (
        "inst = MarkovInstance.random(50, 7, 0)",
        "batch_expected_rejections(inst, 10**6)",
    ),
    "lookahead_counts K=4, stationary T=V=1000": (STATIONARY, "lookahead_counts(inst, 4)"),
    "lookahead_counts K=4, context-free V=50,000": (CONTEXT_FREE, "lookahead_counts(inst, 4)"),
    "best_lookahead K≤20, context-free V=50,000": (CONTEXT_FREE, "best_lookahead(inst, 0.1, 1.0)"),
    "fuzzy_profile θ=0.1 js, stationary T=V=1000": (STATIONARY, "fuzzy_profile(inst, 0.1, 'js')"),
    "sprinter_profile η=(0.9, 0.2), stationary T=V=1000": (
        STATIONARY,
        "sprinter_profile(inst, sprinter_pass_probabilities(inst, 0.9, 0.2))",
    ),
    "tradeoff_profile (biased ε=0.1), stationary T=V=1000": (
        STATIONARY,
        "tradeoff_profile(inst, lambda p, q: biased_acceptance(p, q, 0.1), canonical_optimal_rejection)",
    ),
    "optimal_stopping, at NODE_BUDGET (V=2, max_K=19)": (
        "inst = MarkovInstance.random(30, 2, 0)",
        "optimal_stopping(inst, 0.1, 1.0, max_K=19)",
    ),
    "markov_tv, at MAX_SEQUENCES (2^20)": (
        "inst = MarkovInstance.random(19, 2, 0)",
        "markov_tv(inst.rho, inst.P, inst.Q)",
    ),
    "fuzzy_sequence_law, at MAX_ENUMERATION (2^22)": (
        "inst = MarkovInstance.random(21, 2, 0)",
        "fuzzy_sequence_law(inst, 0.1, 'js', K=3)",
    ),
    "simulate SD, V=5000 T=2, 40,000 runs": (
        "rng = np.random.default_rng(0)\n"
        "inst = MarkovInstance.stationary(rng.dirichlet(np.ones(5000), size=5000), "
        "rng.dirichlet(np.ones(5000), size=5000), T=2)",
        "simulate(inst, SD(), 40_000, key=0)",
    ),
    "simulate SD, context-free V=50,000 T=100, 20,000 runs": (
        CONTEXT_FREE.replace("T=1000", "T=100"),
        "simulate(inst, SD(), 20_000, key=0)",
    ),
    "decode SD K=4, tiny pair, 16 prompts × 64 tokens (batched)": (
        "from speculab.backends import decode, load_pair\npair = load_pair('tiny', device='cpu')\n"
        "prompts = [f'Once upon a time there was a {w}' for w in 'cat dog fox owl bee ant elk yak'.split()] * 2",
        "decode(pair, prompts, SD(K=4), key=0, max_new_tokens=64, batch_size=16)",
    ),
}

_CHILD = """
import json, resource, time
import numpy as np
from speculab.theory import *
from speculab.theory import biased_acceptance, canonical_optimal_rejection
from speculab.sim import SD, simulate


def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024  # kB -> MB


{inputs}
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak resident size (VmHWM) to the current one
before = status("VmRSS")
t0 = time.perf_counter()
{call}
seconds = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"call_mb": status("VmHWM") - before, "rss_mb": rss, "seconds": seconds}}))
"""


def measure(inputs: str, call: str, timeout: float = 1800) -> dict:
    """Run one case in a fresh interpreter; its peaks and seconds (or the error it ended with)."""
    code = _CHILD.format(inputs=textwrap.dedent(inputs).strip(), call=call)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["exit " + str(r.returncode)])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", default=None, help="cases whose name contains one of these")
    ap.add_argument("--out", help="write bench_memory.json and bench_memory.md into this folder, for the documentation")
    _tables.add_threads(ap)
    args = ap.parse_args(argv)
    _tables.use_threads(args.threads)  # the cases' processes inherit it
    env = _tables.environment()
    chosen = [name for name in CASES if not args.only or any(o in name for o in args.only)]
    if not chosen:
        ap.error(f"--only {' '.join(args.only)}: no case's name contains these; the cases: {list(CASES)}")
    result = {"only": args.only, "threads": args.threads, "cases": {}}
    print(f"{'case':64s} {'call MB':>9s} {'peak RSS MB':>12s} {'seconds':>8s}")
    for name in chosen:
        result["cases"][name] = r = measure(*CASES[name])
        if "error" in r:
            print(f"{name:64s} error: {r['error']}", flush=True)
        else:
            print(f"{name:64s} {r['call_mb']:9.1f} {r['rss_mb']:12.0f} {r['seconds']:8.2f}", flush=True)
    failed = [name for name, r in result["cases"].items() if "error" in r]
    if failed:
        raise SystemExit(f"{len(failed)} case(s) failed, {failed}: nothing written")
    if args.out:
        _tables.write(args.out, "bench_memory", result, markdown, env, _tables.argv(argv))


def markdown(result: dict) -> str:
    """The documentation's table of a run: each case's peaks and seconds (or the error it ended with)."""
    lines = ["| case | call's peak (MB) | process's peak RSS (MB) | seconds |", "| --- | --- | --- | --- |"]
    for name, r in result["cases"].items():
        if "error" in r:
            error = r["error"].replace("|", "\\|")
            lines.append(f"| {name} | error: {error} | | |")
        else:
            lines.append(f"| {name} | {sig(r['call_mb'])} | {sig(r['rss_mb'])} | {sig(r['seconds'])} |")
    note = (
        "One run of each case, each in a fresh process: the call's peak is its peak resident memory beyond what the "
        "process held before it; the process's peak (`ru_maxrss`) includes the imports and the inputs."
    )
    return "\n".join(lines) + "\n\n" + note + "\n"


if __name__ == "__main__":
    main()
