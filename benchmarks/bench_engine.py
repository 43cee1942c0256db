"""The numpy engine's speed per method, against another checkout of speculab, measured in one run.

Each registered method (at typical parameters) is simulated on the [Yin] Fig. 2(a) instance (T = 50, V = 7) and
on a wider one (T = 20, V = 256); the time of one call of ``simulate`` is taken after a warm-up call (tables,
linear programs and imports are cached then). With ``--against DIR`` the same timings are taken with the
speculab of ``DIR`` (e.g. a ``git worktree`` of the previous commit), the two alternating in fresh processes, and
the ratio of the medians (this checkout / the other) is printed per method; timings on shared CPUs are noisy, the
ratio measured in one run is what to read.

    python benchmarks/bench_engine.py [--runs 20000] [--repeats 5] [--against DIR] [--threads N]
                                      [--out benchmarks/tables]

``--threads N`` runs the timed processes' thread pools (OpenMP, OpenBLAS) on ``N`` threads.

With ``--out DIR`` it writes ``DIR/bench_engine.json`` (every timing) and ``DIR/bench_engine.md`` (the table the
documentation includes: docs/measurements.md reads ``benchmarks/tables/bench_engine.md``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402


def cases():
    """``(label, instance, method)`` for every timed case (built by the speculab on ``sys.path``)."""
    from speculab.sim import SD, Autoregressive, BatchSD, Biased, BlockVerification, Fuzzy, SpecDecPP, Sprinter
    from speculab.methods import OptimalMultiDraft
    from speculab.theory import MarkovInstance

    narrow = MarkovInstance.random(T=50, V=7, key=10, row_law="uniform")
    wide = MarkovInstance.random(T=20, V=256, key=10)
    methods = [
        Autoregressive(),
        SD(),
        SD(K=4),
        BatchSD(4),
        Biased(0.1),
        Fuzzy(0.3),
        BlockVerification(4),
        Sprinter(0.9, 0.1),
        SpecDecPP(0.5, max_K=4),
        OptimalMultiDraft(2, K=4),
    ]
    out = [(f"{m!r} T=50 V=7", narrow, m) for m in methods]
    out += [(f"{m!r} T=20 V=256", wide, m) for m in methods if not isinstance(m, OptimalMultiDraft)]
    return out


def one_repeat(runs: int) -> dict[str, float]:
    """Seconds of one ``simulate`` call per case, after a warm-up call."""
    from speculab.sim import simulate

    out = {}
    for label, inst, method in cases():
        simulate(inst, method, min(runs, 2000), key=1)  # warm-up
        t0 = time.perf_counter()
        simulate(inst, method, runs, key=2)
        out[label] = time.perf_counter() - t0
    return out


def _use_root(root: str) -> None:
    """Import speculab from ``root``: ahead of the path, and past an editable install's finder (which would win)."""
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__name__.lower()]
    sys.path.insert(0, root)


def _timed_in_subprocess(root: str, runs: int) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--runs", str(runs), "--one", str(Path(root).resolve())]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--against", help="another checkout's root (its speculab is timed in the same run)")
    ap.add_argument("--out", help="write bench_engine.json and bench_engine.md into this folder")
    ap.add_argument("--label", default="this checkout", help="what this checkout is, for the table")
    ap.add_argument("--other-label", default="the other", help="what --against is, for the table")
    _tables.add_threads(ap)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # time the speculab of this root, once, in this process
    args = ap.parse_args(argv)
    if args.one:
        _use_root(args.one)
        import speculab

        if Path(speculab.__file__).resolve().parents[1] != Path(args.one):
            raise SystemExit(f"imported {speculab.__file__}, not the speculab of {args.one}")
        print(json.dumps(one_repeat(args.runs)))
        return
    _tables.use_threads(args.threads)  # the timed processes inherit it
    here = str(Path(__file__).resolve().parents[1])
    times = {"this": [], "other": []}
    for _ in range(args.repeats):  # alternate, so drifts of the machine's speed hit both alike
        times["this"].append(_timed_in_subprocess(here, args.runs))
        if args.against:
            times["other"].append(_timed_in_subprocess(args.against, args.runs))
    labels = list(times["this"][0])
    result = {"runs": args.runs, "repeats": args.repeats, "against": args.against, "threads": args.threads}
    result["cases"] = {}
    print(f"{'case':<58} {'this (s)':>9} {'other (s)':>9} {'ratio':>6}")
    for label in labels:
        mine = statistics.median(r[label] for r in times["this"])
        row = {"this_s": mine}
        line = f"{label:<58} {mine:>9.3f}"
        if args.against:
            theirs = statistics.median(r[label] for r in times["other"])
            row.update(other_s=theirs, ratio=mine / theirs)
            line += f" {theirs:>9.3f} {mine / theirs:>6.2f}"
        result["cases"][label] = row
        print(line)
    if args.against:
        ratios = [r["ratio"] for r in result["cases"].values()]
        result["median_ratio"] = statistics.median(ratios)
        print(
            f"median ratio this/other over {len(ratios)} cases: {result['median_ratio']:.2f} "
            f"(medians of {args.repeats} alternating runs of {args.runs:,} runs each)"
        )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        result.update(label=args.label, other_label=args.other_label, python=sys.version.split()[0], timings=times)
        (out / "bench_engine.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "bench_engine.md").write_text(markdown(result))


def markdown(result: dict) -> str:
    """The documentation's table of a run's medians (and ratios, with ``--against``)."""
    other = result["against"] is not None
    head = f"| case | {result['label']} (s) |" + (f" {result['other_label']} (s) | ratio |" if other else "")
    lines = [head, "|---|---|" + ("---|---|" if other else "")]
    for label, row in result["cases"].items():
        line = f"| `{label}` | {row['this_s']:.3f} |"
        if other:
            line += f" {row['other_s']:.3f} | {row['ratio']:.2f} |"
        lines.append(line)
    labels = f' --label "{result["label"]}"' + (f' --other-label "{result["other_label"]}"' if other else "")
    note = (
        f"Medians of {result['repeats']} alternating runs of {result['runs']:,} simulated runs per case "
        f"(`python benchmarks/bench_engine.py --runs {result['runs']} --repeats {result['repeats']}"
        + (" --against DIR" if other else "")
        + labels
        + "`)"
    )
    if other:
        note += f"; median ratio over the {len(result['cases'])} cases: {result['median_ratio']:.2f}"
    return "\n".join(lines) + "\n\n" + note + ".\n"


if __name__ == "__main__":
    main()
