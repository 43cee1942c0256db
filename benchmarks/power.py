"""The power of every statistical test against its named wrong answer, as a table.

Runs the tests marked ``power`` (``pytest -m power``: the dedicated power tests and every
test whose Monte-Carlo checks go through conftest's ``agrees``); each asserts through
``conftest.assert_power`` that its check refuses a wrong answer — a 10 % error of the value
checked, or a named bug or neighbouring parameter — with probability above ``conftest.POWER``
at the test's own sample size, and records that probability. A few checks whose sample size
is set by cost (real-model ``compare`` rows) record their power without asserting it and name
the test that carries it; they are listed apart. This collects the records into one table,
lowest power first:

    python benchmarks/power.py                          # markdown table on stdout
    python benchmarks/power.py --json                   # the same rows as JSON
    python benchmarks/power.py --out benchmarks/tables  # also power.json and power.md, for the documentation

With ``--out DIR`` it writes ``DIR/power.json`` (the rows, their summary — checks and tests asserted, the lowest
power and its check, the checks of each kind, those recorded only — and the run: commit, wall time) and
``DIR/power.md`` (that summary in words, then the tables; every number in it from power.json: docs/measurements.md
includes ``benchmarks/tables/power.md``).

The powers are computed, not sampled: from the exact laws of the right and the wrong
method (binomial or noncentral χ² where the check is a law test, normal where it is a
mean) and, where a simulation's spread enters, its standard error from the test's run.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The kinds of wrong answer a check is held against, as ``agrees`` names them (see ``kind``), in the summary's order.
KINDS = ("relative", "exact", "named")

#: The longest line ``markdown`` writes (the documentation's sources keep to it), and the longest word and test id
#: it shows (longer ones are cut, at the start of a word or number, and end in "…"; power.json keeps them whole).
WIDTH, WORD, TEST_ID = 120, 96, 150


def collect(extra: list[str] = ()) -> list[dict]:
    """Run the power tests and return ``{"test", "power", "alternative", "carried_by"}`` per recorded check
    (``carried_by``: ``None`` for an asserted power, else what the record names as carrying it)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "power.xml"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-m",
                "power",
                "--runslow",
                "-p",
                "no:cacheprovider",
                f"--junitxml={report}",
                *extra,
                "tests",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-2000:])
            raise SystemExit(f"the power tests failed (exit {done.returncode})")
        rows = [
            row(f"{case.get('classname')}::{case.get('name')}", prop.get("value"))
            for case in ET.parse(report).iter("testcase")
            for prop in case.iter("property")
            if prop.get("name") == "power"
        ]
    return sorted(rows, key=lambda r: r["power"])


def row(test: str, record: str) -> dict:
    """One check's row from the record ``conftest.assert_power`` or ``agrees`` makes in ``test``:
    ``power | alternative``, with `` [not asserted: carried by …]`` after a power that is not asserted."""
    value, alternative = record.split(" | ", 1)
    alternative, _, carried = alternative.partition(" [not asserted: carried by ")
    return {
        "test": test,
        "power": float(value),
        "alternative": alternative,
        "carried_by": carried.removesuffix("]") or None,
    }


def kind(alternative: str) -> str:
    """What a check's wrong answer is, from the name ``agrees`` gives it: ``relative`` (``…: 10% off``, a 10 % error
    of the value checked), ``exact`` (``…: any other value (an exact check)``: every run gave the same count) or
    ``named`` (a named bug or neighbouring parameter, as the test words it)."""
    if re.search(r": \d+(\.\d+)?% off$", alternative):
        return "relative"
    return "exact" if alternative.endswith(": any other value (an exact check)") else "named"


def settings() -> dict:
    """The bounds the records are made with, read from ``tests/conftest.py``: ``threshold`` (``POWER``, the power
    every asserted check exceeds), ``z_bound`` (``Z_BOUND``: ``agrees`` asserts ``|z| < z_bound``) and ``rel_error``
    (``REL_ERROR``, the relative error a check of the ``relative`` kind refuses)."""
    spec = importlib.util.spec_from_file_location("_power_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    return {"threshold": conftest.POWER, "z_bound": conftest.Z_BOUND, "rel_error": conftest.REL_ERROR}


def run_info(wall_s: float) -> dict:
    """The run: the commit the tests ran at, the tracked files changed from it (``git status``), the date (UTC), the
    machine's CPUs and the wall time of the tests, in seconds. Outside a git checkout (an unpacked archive) the
    commit is ``None`` and the changed files are not known (``None``)."""

    def git(*args):
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    commit = git("rev-parse", "HEAD")
    return {
        "commit": commit.strip() if commit is not None else None,
        "changed": [line[3:] for line in status.splitlines()] if status is not None else None,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "wall_s": wall_s,
    }


def summary(rows: list[dict], bounds: dict) -> dict:
    """The numbers power.md states, from the rows: the asserted checks and the tests they are in, the lowest power
    (its row), per kind the checks and their lowest power, and the checks recorded without an assertion apart."""
    asserted = [r for r in rows if r["carried_by"] is None]
    carried = [r for r in rows if r["carried_by"] is not None]
    lowest = min(asserted, key=lambda r: r["power"], default=None)
    kinds = {}
    for name in KINDS:
        of = [r["power"] for r in asserted if kind(r["alternative"]) == name]
        kinds[name] = {"checks": len(of), "lowest": min(of, default=None)}
    return {
        **bounds,
        "checks": len(asserted),
        "tests": len({r["test"] for r in asserted}),
        "lowest": lowest,
        "kinds": kinds,
        "recorded_only": {"checks": len(carried), "tests": len({r["test"] for r in carried})},
    }


def result(rows: list[dict], bounds: dict, run: dict) -> dict:
    """power.json's content: the summary, the run and the rows (lowest power first, each with its ``kind``)."""
    rows = sorted(rows, key=lambda r: r["power"])
    return {"summary": summary(rows, bounds), "run": run, "rows": [{**r, "kind": kind(r["alternative"])} for r in rows]}


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _minutes(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def _shown(text: str, limit: int | None = None) -> str:
    """``text`` as power.md shows it, escaped for HTML: cut to ``limit`` characters and each word to ``WORD`` (a
    parametrized test's id can hold an array's repr), never inside a number or an HTML entity, ending in "…"."""
    cut = lambda s, n: s if len(s) <= n else re.sub(r"(&[#\w]*|[\d.,]*)$", "", s[: n - 1]) + "…"  # noqa: E731
    text = html.escape(text, quote=False)
    return " ".join(cut(word, WORD) for word in cut(text, limit or len(text)).split(" "))


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    """An HTML table (a Markdown pipe table cannot wrap a row: these are long), a cell a line, wrapped at spaces to
    ``WIDTH`` (where HTML shows a space); the cells are HTML already."""
    lines = ["<table>", "<thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead>", "<tbody>"]
    for row in rows:
        lines.append("<tr>")
        for cell in row:
            lines += textwrap.wrap(f"<td>{cell}</td>", WIDTH, break_long_words=False, break_on_hyphens=False)
        lines.append("</tr>")
    return lines + ["</tbody>", "</table>"]


def markdown(data: dict) -> str:
    """power.md: the summary in words, then the asserted checks' table and the recorded-only checks' table, lowest
    power first — all from power.json's content ``data`` (nothing else), no line over ``WIDTH`` characters."""
    s, run = data["summary"], data["run"]
    test = lambda r: f"<code>{_shown(r['test'].removeprefix('tests.'), TEST_ID)}</code>"  # noqa: E731
    text = _shown
    if s["lowest"] is None:
        words = "No power check was asserted."
    else:
        low, by = s["lowest"], s["kinds"]
        least = lambda k: f" (lowest {by[k]['lowest']:.6f})" if by[k]["checks"] else ""  # noqa: E731
        words = (
            f"{_n(s['checks'], 'check')} in {_n(s['tests'], 'test')} assert that they refuse their wrong answer "
            f"with a probability above {s['threshold']:g} at their own sample size, each check asserting "
            f"`|z| < {s['z_bound']:g}`: {_n(by['relative']['checks'], 'check')} against a "
            f"{s['rel_error'] * 100:g} % error of the value checked{least('relative')}; "
            f"{_n(by['exact']['checks'], 'exact check')}{least('exact')}, which refuse any other value (every "
            f"run gave the same count); {_n(by['named']['checks'], 'check')} against a named bug or neighbouring "
            f"parameter{least('named')}. The lowest power is {low['power']:.6f}: {text(low['alternative'])} "
            f"({test(low)})."
        )
    only = s["recorded_only"]
    if only["checks"]:
        words += (
            f" {_n(only['checks'], 'more check')} in {_n(only['tests'], 'test')} record their power without "
            f"asserting it (their sample size is set by cost; another test carries the power), listed "
            f"apart below."
        )
    changed = run["changed"]
    where = (
        (
            f" with {', '.join(f'`{c}`' for c in changed)} changed"
            if len(changed) <= 3
            else f" with {len(changed):,} files changed"
        )
        if changed
        else ""
    )
    at = f"at commit `{run['commit'][:7]}`{where}" if run["commit"] else "outside a git checkout"
    words += (
        f" Run {at} on {run['date']}, in {_minutes(run['wall_s'])} on "
        f"{run['cpus']} CPUs: `python benchmarks/power.py --out benchmarks/tables`."
    )
    lines = textwrap.wrap(words, WIDTH, break_long_words=False, break_on_hyphens=False) + [""]
    asserted = [r for r in data["rows"] if r["carried_by"] is None]
    carried = [r for r in data["rows"] if r["carried_by"] is not None]
    if asserted:
        lines += _table(
            ["power", "check: wrong answer", "test"],
            [[f"{r['power']:.6f}", text(r["alternative"]), test(r)] for r in asserted],
        ) + [""]
    if carried:
        lines += ["Recorded, not asserted (sample size set by cost; the power is carried by another test):", ""]
        lines += _table(
            ["power", "check: wrong answer", "carried by", "test"],
            [[f"{r['power']:.6f}", text(r["alternative"]), text(r["carried_by"]), test(r)] for r in carried],
        ) + [""]
    return "\n".join(lines)


def write(out: Path, data: dict) -> None:
    """``out/power.json`` (``data``) and ``out/power.md`` (``markdown(data)``)."""
    (out / "power.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    (out / "power.md").write_text(markdown(data))


def _out_dir(ap: argparse.ArgumentParser, name: str) -> Path:
    """The ``--out`` folder, made if missing and refused, naming it, if it cannot be written — before the tests'
    minutes, not after."""
    out = Path(name)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        ap.error(f"--out: cannot make the folder {name!r} ({err.strerror})")
    if not os.access(out, os.W_OK | os.X_OK):
        ap.error(f"--out: cannot write into the folder {name!r}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="also write DIR/power.json (rows, summary, run) and DIR/power.md (for the documentation)",
    )
    args = parser.parse_args(argv)
    out = _out_dir(parser, args.out) if args.out is not None else None
    bounds = settings() if out is not None else None
    start = time.perf_counter()
    rows = collect()
    if out is not None:
        write(out, result(rows, bounds, run_info(time.perf_counter() - start)))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731  (a quantity such as "E[τ | block]")
    asserted = [r for r in rows if r["carried_by"] is None]
    carried = [r for r in rows if r["carried_by"] is not None]
    print("| power | check: wrong answer | test |\n|---|---|---|")
    for r in asserted:
        print(f"| {r['power']:.6f} | {cell(r['alternative'])} | `{r['test'].removeprefix('tests.')}` |")
    if carried:
        print("\nRecorded, not asserted (sample size set by cost; the power is carried by another test):\n")
        print("| power | check: wrong answer | carried by | test |\n|---|---|---|---|")
        for r in carried:
            test = r["test"].removeprefix("tests.")
            print(f"| {r['power']:.6f} | {cell(r['alternative'])} | {cell(r['carried_by'])} | `{test}` |")
    tests = len({r["test"] for r in asserted})
    print(
        f"\n{len(asserted)} checks in {tests} tests asserted, lowest power {asserted[0]['power']:.6f}; "
        f"{len(carried)} recorded only"
        if asserted
        else "no power checks recorded"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
