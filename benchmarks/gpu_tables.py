"""The GPU run's page: what ``benchmarks/gpu_check.sh`` wrote on a machine with CUDA, rendered for the docs.

A GPU run's folder (the device machine's ``OUT``, copied under ``benchmarks/tables/gpu/``) holds ``log.txt`` (the
script's log: each step's command, time limit, exit status and seconds), ``validation.json`` (float32) and
``bf16/validation.json``, ``float32/`` and ``bf16/bench_batched.{json,md}`` (included by the docs as they are),
``plan.json`` (``speculab plan --device cuda --out``; a plan of another pair in a folder of its own, e.g.
``ngram/plan.json``); the tests step's log holds the real-model tests' slow tier
(``slow_log.txt`` where it ran apart), and ``slow_rerun_log.txt`` the failed tests again where a failure was mended.
This renders ``gpu.md`` from them and the plan's figure from ``plan.json``; each file is checked first as ``speculab
report`` checks it (a validation's digest and the sense of its rows, a plan's rates), so nothing on the page is typed
by hand, and ``tests/test_bench_tables.py`` holds ``gpu.md`` to this rendering.

    python benchmarks/gpu_tables.py benchmarks/tables/gpu
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402

FIGURE = _tables.ROOT / "docs" / "figures" / "plan_gpu.png"
#: A step of gpu_check.sh: ``== NAME (limit L s): COMMAND`` when it starts, ``== NAME: exit RC after S s`` at its end.
_START = re.compile(r"^== (?P<name>[\w-]+) \(limit (?P<limit>\d+) s\): (?P<command>.*)$")
_END = re.compile(r"^== (?P<name>[\w-]+): exit (?P<rc>\d+) after (?P<seconds>\d+) s$")
#: pytest's last line: ``1 failed, 259 passed in 79.11s (0:01:19)``.
_PYTEST = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+, )*\d+ \w+) in (?P<seconds>[\d.]+)s\b")


def _read(folder: Path, name: str) -> str:
    path = folder / name
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"gpu_tables: {path}: cannot be read ({exc})") from None


def steps(log: str) -> list[dict]:
    """The steps of a ``gpu_check.sh`` log: name, command, limit (s), exit status and seconds, in their order."""
    started, done = {}, []
    for line in log.splitlines():
        if m := _START.match(line):
            started[m["name"]] = m
        elif (m := _END.match(line)) and m["name"] in started:
            s = started.pop(m["name"])
            done.append(
                {
                    "name": m["name"],
                    "command": s["command"],
                    "limit": int(s["limit"]),
                    "rc": int(m["rc"]),
                    "seconds": int(m["seconds"]),
                }
            )
    return done


def pytest_summary(log: str) -> tuple[str, list[str]]:
    """pytest's closing counts (``259 passed, 1 failed in 79.11 s``) and the tests it names as failed."""
    counts = [m for line in log.splitlines() if (m := _PYTEST.match(line))]
    if not counts:
        raise ValueError("no pytest summary line (`N passed in S s`) in the log")
    failed = [line.split()[1] for line in log.splitlines() if line.startswith("FAILED ")]
    return f"{counts[-1]['counts']} in {float(counts[-1]['seconds']):.0f} s", failed


def _table(header: list[str], rows: list[list]) -> str:
    return "\n".join(_tables.markdown_table(header, rows))


def _laws(v: dict) -> str:
    rows = [
        [
            f"`{r['method']}`",
            f"{r['first'][0]:.1f} ({r['first'][1]})",
            f"{r['first'][2]:.2g}",
            f"{r['joint'][0]:.1f} ({r['joint'][1]})",
            f"{r['joint'][2]:.2g}",
            "yes" if r["refused"] else "no",
            f"{r['detectable'][0]:.3f}",
            "✓" if r["ok"] else "✗",
        ]
        for r in v["laws"]
    ]
    return _table(["method", "G₁ (df)", "p₁", "G₁₂₃ (df)", "p₁₂₃", "refused", "TV refused at 0.99", "ok"], rows)


def _compare(v: dict) -> str:
    rows = [
        [
            f"`{r['method']}`",
            r["quantity"],
            _tables.sig(r["predicted"]),
            _tables.sig(r["measured"]),
            f"{r['z']:+.2f}" if math.isfinite(r["z"]) else ("holds" if r["holds"] else "fails"),
            "yes" if r["gates"] else "no (a model check)",
        ]
        for r in v["compare"]
    ]
    return _table(["method", "quantity", "predicted", "measured", "z", "gates the verdict"], rows)


def _speed(v: dict) -> str:
    rows = [
        [r["what"], f"{r['tokens_per_second']:,.0f}", f"{r['tokens']:,}", f"{r['seconds']:.2f}"] for r in v["speed"]
    ]
    return _table(["decoding", "tokens/s", "tokens", "seconds"], rows)


def _plan(p: dict) -> str:
    from speculab.planning.command import label

    ranked = [r for r in p["ranked"] if r["allowed"]][:8]
    top = _table(
        ["rank", "method", "tokens/round", "tokens/call", "tokens/s predicted"],
        [
            [i, f"`{label(r['method'])}`", f"{r['tokens_per_round']:.3f} ± {r['tokens_per_round_se']:.3f}",
             f"{r['tokens_per_call']:.3f}", f"{r['tokens_per_second']:.1f}"]
            for i, r in enumerate(ranked, 1)
        ],
    )  # fmt: skip
    confirmed = _table(
        ["confirmed", "tokens/s predicted", "measured", "error", "× AR predicted / measured", "tokens/call (z)"],
        [
            [
                f"`{label(r['method'])}`",
                f"{r['predicted']:.1f}",
                f"{r['measured']:.1f} ± {r['measured_se']:.1f}",
                f"{r['error']:+.1%}",
                f"{r['predicted_speedup']:.3f} / {r['measured_speedup']:.3f}",
                f"{r['predicted_per_call']:.3f} / {r['measured_per_call']:.3f}"
                + (f" ({r['per_call_z']:+.1f})" if r["per_call_z"] is not None else " (exact)"),
            ]
            for r in p["confirmed"]
        ],
    )
    return f"{top}\n\n{confirmed}\n\nVerdict: {p['verdict']}."


def plans(folder: Path) -> list[tuple[dict, bool]]:
    """The run's plans (``plan.json``, then any ``*/plan.json``), each checked for sense as ``speculab report``
    checks it, with whether it is signed: a plan written before plans carried a digest is shown and said to be
    unsigned; a signed one whose digest does not match is refused."""
    from speculab.repro.report import _plan_digest_problem, plan_problem

    out = []
    for path in [folder / "plan.json", *sorted(folder.glob("*/plan.json"))]:
        if not path.exists():
            continue
        data = json.loads(_read(path.parent, path.name))
        problem = plan_problem(data) or ("digest" in data and _plan_digest_problem(data))
        if problem:
            raise ValueError(f"{path}: {problem}")
        out.append((data, "digest" in data))
    return out


def markdown(folder: Path) -> str:
    """``gpu.md`` of a GPU run's folder, every file checked as ``speculab report`` checks it."""
    from speculab.repro.report import _validation as checked_validation

    f32, bf16 = checked_validation(folder), checked_validation(folder / "bf16")
    planned = plans(folder)
    if f32 is None or bf16 is None or not planned:
        raise SystemExit(f"gpu_tables: {folder} lacks validation.json, bf16/validation.json or plan.json")
    s = f32["settings"]
    bench = json.loads(_read(folder / "float32", "bench_batched.json"))["provenance"]
    # the tests step's slow tier: in log.txt since the step runs it, in slow_log.txt where it ran apart (2026-12-05)
    tests, failed = pytest_summary(_read(folder, "slow_log.txt" if (folder / "slow_log.txt").exists() else "log.txt"))
    rerun = (folder / "slow_rerun_log.txt").exists() and pytest_summary(_read(folder, "slow_rerun_log.txt"))[0]
    lat = f32["latency"]
    ran = steps(_read(folder, "log.txt"))
    limit = next((t["limit"] for t in ran if t["name"] == "validate"), "?")  # the script's STEP_LIMIT
    parts = [
        f"On {s['device_name']} (`{s['device']}`), torch {s['torch']}, transformers "
        f"{bench['libraries'].get('transformers')}, numpy {bench['libraries'].get('numpy')}, Python {bench['python']}; "
        f"{bench['machine']['cpus']} CPUs; `benchmarks/gpu_check.sh` at commit `{bench['commit'][:7]}` on "
        f"{bench['date'][:10]}.",
        "",
        f"Its steps (`OUT=… STEP_LIMIT={limit} bash benchmarks/gpu_check.sh`, each under its own time limit):",
        "",
        _table(
            ["step", "command", "limit (s)", "exit", "seconds"],
            [[t["name"], f"`{t['command']}`", t["limit"], t["rc"], t["seconds"]] for t in ran],
        ),
        "",
        f"The real-model tests' slow tier on the GPU (`pytest --runslow --device cuda`, the same files): {tests}"
        + (f"; failed: {', '.join(f'`{n}`' for n in failed)}." if failed else ".")
        + (f" After the fix, the failed tests and their regression test again on the GPU: {rerun}." if rerun else ""),
        "",
        f"### Validation, float32 ({s['runs']:,} runs per law test; {'PASSED' if f32['passed'] else 'FAILED'})",
        "",
        _laws(f32),
        "",
        _compare(f32),
        "",
        _speed(f32),
        "",
        f"Latency model (fitted on {lat['fit_prompts']} prompts, tested on {lat['test_prompts']}): SD's speed-up over "
        f"autoregressive decoding predicted {lat['predicted']:.3f}, measured {lat['measured']:.3f} "
        f"(error {lat['error']:+.1%}).",
        "",
        f"### Validation, bfloat16 ({bf16['settings']['runs']:,} runs per law test; "
        f"{'PASSED' if bf16['passed'] else 'FAILED'})",
        "",
        _laws(bf16),
    ]
    for plan, signed in planned:
        ps = plan["settings"]
        parts += [
            "",
            f"### `speculab plan --pair {ps['pair']} --device cuda`",
            "",
            f"Runs of {ps['max_new_tokens']} tokens, rounds along {ps['contexts']} contexts of {ps['prompts']} "
            f"prompts, confirmed on {ps['held_out']} held-out prompts × {ps['confirm_runs']} runs"
            + ("" if signed else " (its plan.json unsigned: written before plans carried a digest)")
            + "; the best candidates within the budget, then the confirmations:",
            "",
            _plan(plan),
        ]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="a GPU run's folder (benchmarks/tables/gpu)")
    ap.add_argument("--no-figure", action="store_true", help="write gpu.md only")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    text = markdown(folder)
    (folder / "gpu.md").write_text(text, encoding="utf-8")
    if not args.no_figure:
        from speculab.planning.figure import save

        save(json.loads(_read(folder, "plan.json")), FIGURE)
        FIGURE.with_suffix(".pdf").unlink(missing_ok=True)  # the docs show the PNG
    print(f"wrote {folder / 'gpu.md'}" + ("" if args.no_figure else f" and {FIGURE}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
