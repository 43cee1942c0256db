"""The power of every statistical test against its named wrong answer, as a table.

Runs the tests marked ``power`` (``pytest -m power``: the dedicated power tests and every
test whose Monte-Carlo checks go through conftest's ``agrees``); each asserts through
``conftest.assert_power`` that its check refuses a wrong answer — a 10 % error of the value
checked, or a named bug or neighbouring parameter — with probability above ``conftest.POWER``
at the test's own sample size, and records that probability. A few checks whose sample size
is set by cost (real-model ``compare`` rows) record their power without asserting it and name
the test that carries it; they are listed apart. This collects the records into one table,
lowest power first:

    python benchmarks/power.py            # markdown table on stdout
    python benchmarks/power.py --json     # the same rows as JSON

The powers are computed, not sampled: from the exact laws of the right and the wrong
method (binomial or noncentral χ² where the check is a law test, normal where it is a
mean) and, where a simulation's spread enters, its standard error from the test's run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collect(extra: list[str] = ()) -> list[dict]:
    """Run the power tests and return ``{"test", "power", "alternative", "carried_by"}`` per recorded check
    (``carried_by``: ``None`` for an asserted power, else what the record names as carrying it)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "power.xml"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "power", "--runslow",
                               "-p", "no:cacheprovider", f"--junitxml={report}", *extra, "tests"],
                              cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-2000:])
            raise SystemExit(f"the power tests failed (exit {done.returncode})")
        rows = []
        for case in ET.parse(report).iter("testcase"):
            for prop in case.iter("property"):
                if prop.get("name") == "power":
                    value, alternative = prop.get("value").split(" | ", 1)
                    alternative, _, carried = alternative.partition(" [not asserted: carried by ")
                    rows.append({"test": f"{case.get('classname')}::{case.get('name')}", "power": float(value),
                                 "alternative": alternative, "carried_by": carried.removesuffix("]") or None})
    return sorted(rows, key=lambda r: r["power"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = collect()
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
    print(f"\n{len(asserted)} checks in {tests} tests asserted, lowest power {asserted[0]['power']:.6f}; "
          f"{len(carried)} recorded only" if asserted else "no power checks recorded")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
