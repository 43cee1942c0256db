"""The power machinery of the statistical tests (conftest's ``agrees``, ``power``): it refuses what it should,
and the power it reports is the chance it refuses (checked against a sampled rate). Its checks here record
nowhere: they are not rows of benchmarks/power.py's table. Then benchmarks/power.py's ``--out`` files, from
synthetic records: power.md states only numbers of power.json, and power.json's summary counts them right."""

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import POWER, Z_BOUND, make_agrees, power
from speculab.counts import Estimate

_spec = importlib.util.spec_from_file_location("power_tool", Path(__file__).parents[1] / "benchmarks" / "power.py")
power_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(power_tool)


def test_power_is_the_two_sided_refusal_rate_of_a_normal_estimate():
    assert power(0.0) == pytest.approx(2 * 2.866515718791939e-07, rel=1e-9)  # the level of |z| < 5
    assert power(5.0) == pytest.approx(0.5, abs=1e-6) and power(-7.33) == power(7.33) > POWER
    rng = np.random.default_rng(0)
    z = rng.normal(6.0, 1.0, 200_000)
    rate = np.mean(np.abs(z) >= Z_BOUND)
    assert abs(rate - power(6.0)) < 5 * np.sqrt(power(6.0) * (1 - power(6.0)) / z.size)


def test_agrees_refuses_a_disagreement_and_a_check_without_power():
    agrees = make_agrees(lambda name, value: None)
    agrees(Estimate(10.0, 0.1, 100), 10.3, "a count")  # 3 s.e. off; a 10 % error is 10 s.e.: power ≈ 1
    with pytest.raises(AssertionError, match="a count"):
        agrees(Estimate(10.0, 0.1, 100), 10.6, "a count")  # 6 s.e. off
    with pytest.raises(AssertionError, match="10% off"):
        agrees(Estimate(10.0, 0.2, 100), 10.0, "a noisy count")  # a 10 % error is 5 s.e.: power 0.5
    agrees(Estimate(10.0, 0.2, 100), 10.0, "a noisy count", wrong=5.0, alternative="half the count")


def test_agrees_checks_exact_entries_exactly_and_arrays_by_their_best_entry():
    agrees = make_agrees(lambda name, value: None)
    agrees(np.array([0.0, 0.5, 0.5]), np.array([0.0, 0.5, 0.5]), "a law", se=np.array([0.0, 0.01, 0.01]))
    with pytest.raises(AssertionError, match="a law"):  # an impossible token appears
        agrees(np.array([1e-3, 0.499, 0.5]), np.array([0.0, 0.5, 0.5]), "a law", se=np.array([0.0, 0.01, 0.01]))
    with pytest.raises(AssertionError, match="se="):
        agrees(0.5, 0.5, "no standard error")
    for bad in (
        dict(measured=np.nan, expected=1.0, se=0.01),
        dict(measured=0.0, expected=np.nan, se=0.0),
        dict(measured=np.array([0.5, np.nan]), expected=np.array([0.5, 0.5]), se=0.01),
        dict(measured=np.array([0.5, 0.5]), expected=np.full((3, 2), 0.5), se=0.01),
    ):
        with pytest.raises(AssertionError, match="not finite|shapes"):  # the old |z| < 5 failed on NaN too
            agrees(what="a bad input", **bad)
    with pytest.raises(AssertionError, match="wrong_se"):
        agrees(0.5, 0.5, "a share", se=0.01, wrong=0.4, wrong_se=-1.0)
    with pytest.raises(AssertionError, match="an expected value of 0 has no 10 % error"):
        agrees(Estimate(0.01, 0.01, 100), 0.0, "a difference")
    # a deterministic wrong answer (spread 0) is refused for certain once it lies 5 s.e. away, never before
    agrees(0.5, 0.5, "a share", se=0.01, wrong=0.44, wrong_se=0)
    with pytest.raises(AssertionError, match="a share"):
        agrees(0.5, 0.5, "a share", se=0.01, wrong=0.46, wrong_se=0)


def test_records_name_the_alternative_and_what_carries_an_unasserted_power():
    """The records benchmarks/power.py parses: ``power | alternative`` and, for a power carried elsewhere,
    ``… [not asserted: carried by …]``; an exact check is named as refusing any other value."""
    seen = []
    agrees = make_agrees(lambda name, value: seen.append((name, value)))
    agrees(Estimate(10.0, 1.0, 10), 10.0, "a small run", carried_by="another test")
    agrees(Estimate(0.0, 0.0, 10), 0.0, "a count that is always 0")
    agrees(Estimate(10.0, 0.1, 100), 10.0, "a count")
    assert seen == [
        ("power", "0.000032 | a small run: 10% off [not asserted: carried by another test]"),
        ("power", "1.000000 | a count that is always 0: any other value (an exact check)"),
        ("power", "1.000000 | a count: 10% off"),
    ]


#: Bounds unlike conftest's (0.99, 5, 10 %): a number power.md typed by hand instead of reading it would show.
BOUNDS = {"threshold": 0.95, "z_bound": 4.0, "rel_error": 0.2}
RUN = {
    "commit": "c0ffeeabcdef" * 3 + "c0ff",
    "changed": ["benchmarks/power.py"],
    "date": "2031-07-09",
    "cpus": 3,
    "wall_s": 1234.6,
}


def synthetic_rows() -> list[dict]:
    """Rows as ``collect`` makes them, from the records ``agrees`` and ``assert_power`` make (their wording is what
    ``power_tool.kind`` reads): 4 checks against a 10 % error in 3 tests (one with an id too long to show whole),
    2 exact, 2 against named bugs (one in a test that also checks a 10 % error) and 2 recorded only, in one test."""
    records = []
    for test, calls in [
        (
            "tests.test_a::test_counts",
            [
                dict(measured=Estimate(10.0, 0.1, 100), expected=10.0, what="a count"),
                dict(measured=Estimate(20.0, 0.27, 100), expected=20.0, what="a mean"),
                dict(measured=Estimate(0.0, 0.0, 10), expected=0.0, what="always 0"),
            ],
        ),
        (
            "tests.test_b::test_law[SD(K=None)]",
            [
                dict(measured=Estimate(5.0, 0.066, 100), expected=5.0, what="a law at N = 70,000"),
                dict(
                    measured=Estimate(0.5, 0.01, 100),
                    expected=0.5,
                    what="a share",
                    wrong=0.42,
                    alternative="a share: the correction drawn from q where {q > p}",
                ),
                dict(measured=Estimate(3.0, 0.0, 10), expected=3.0, what="a sum of 3 counts"),
            ],
        ),
        (
            "tests.test_c::test_models",
            [
                dict(
                    measured=Estimate(2.0, 0.3, 8),
                    expected=2.0,
                    what="a compare row",
                    carried_by="tests/test_b.py::test_law",
                ),
                dict(
                    measured=Estimate(0.5, 0.1, 8),
                    expected=0.5,
                    what="a pass rate",
                    wrong=0.25,
                    alternative="a pass rate: the score read the wrong way round (1 − c)",
                    carried_by="tests/test_a.py::test_counts",
                ),
            ],
        ),
    ]:
        made = []
        agrees = make_agrees(lambda name, value: made.append(value))
        for call in calls:
            agrees(**call)
        records += [power_tool.row(test, value) for value in made]
    records.append(power_tool.row("tests.test_d::test_k", f"{power(7.35):.6f} | SD(K=4) calls: K off by one"))
    array = repr(np.linspace(0.123456789, 0.987654321, 60).reshape(3, 4, 5)).replace("\n", "\\n")
    records.append(power_tool.row(f"tests.test_d::test_long[{'x' * 100} {array}]", "1.000000 | a long id: 10% off"))
    return records


def _numbers(text: str) -> list[str]:
    return re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w])", text)


def test_power_md_states_only_numbers_power_json_holds(tmp_path):
    rows = synthetic_rows()
    power_tool.write(tmp_path, power_tool.result(rows, BOUNDS, RUN))
    data = json.loads((tmp_path / "power.json").read_text())
    md = (tmp_path / "power.md").read_text()
    assert md == power_tool.markdown(data)  # from the file's content alone
    held = []  # every number of power.json: its values and the numbers inside its strings

    def walk(value):
        if isinstance(value, dict):
            [walk(v) for v in value.values()]
        elif isinstance(value, list):
            [walk(v) for v in value]
        elif isinstance(value, str):
            held.extend(float(n.replace(",", "")) for n in _numbers(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            held.append(float(value))

    walk(data)
    # written in other units: the relative error in percent, the wall time in minutes and seconds
    held += [BOUNDS["rel_error"] * 100, *divmod(round(RUN["wall_s"]), 60)]
    stated = _numbers(md)
    assert len(stated) > 20
    for number in stated:
        places = len(number.partition(".")[2])
        value = float(number.replace(",", ""))
        assert any(round(h, places) == value for h in held), number
    for typed in ("above 0.99 ", "10 % error", "|z| < 5`"):  # conftest's bounds, not this run's
        assert typed not in md
    assert "above 0.95" in md and "`|z| < 4`" in md and "20 % error" in md and "20 min 35 s" in md
    assert "`c0ffeea`" in md and "2031-07-09" in md and "3 CPUs" in md and "`benchmarks/power.py` changed" in md
    assert max(map(len, md.splitlines())) <= power_tool.WIDTH
    # both tables, lowest power first, every check once, its text escaped for HTML
    flat = " ".join(md.split())
    asserted, _, carried = flat.partition("Recorded, not asserted")
    at = lambda rows, text: [text.index(f"<td>{r['power']:.6f}</td>") for r in rows]  # noqa: E731
    mine = [r for r in data["rows"] if r["carried_by"] is None]
    assert at(mine, asserted) == sorted(at(mine, asserted)) and len(set(at(mine, asserted))) >= 3
    assert asserted.count("<tr> <td>") == 8 and carried.count("<tr> <td>") == 2
    assert "<code>test_d::test_long[xxxxxxxx" in asserted and "xx… array([[[0.12345679," in asserted
    assert "0.98765432" not in md and md.count("…</code>") == 1  # cut to power_tool.TEST_ID, between numbers
    assert "the correction drawn from q where {q &gt; p}" in asserted and "{q > p}" not in md
    assert "<code>test_b::test_law[SD(K=None)]</code>" in asserted and "tests/test_a.py::test_counts" in carried


def test_power_json_summary_counts_the_checks_by_kind():
    rows = synthetic_rows()
    data = power_tool.result(rows, BOUNDS, RUN)
    s = data["summary"]
    assert {k: s[k] for k in BOUNDS} == BOUNDS and data["run"] == RUN
    assert (s["checks"], s["tests"]) == (8, 4)
    assert s["recorded_only"] == {"checks": 2, "tests": 1}
    assert {k: v["checks"] for k, v in s["kinds"].items()} == {"relative": 4, "exact": 2, "named": 2}
    # the lowest asserted power: K off by one at 7.35 s.e., not a recorded-only one (lower still)
    assert s["lowest"]["alternative"] == "SD(K=4) calls: K off by one" and s["lowest"]["power"] == round(power(7.35), 6)
    assert s["kinds"]["named"]["lowest"] == s["lowest"]["power"] and s["kinds"]["exact"]["lowest"] == 1.0
    assert s["kinds"]["relative"]["lowest"] == min(
        r["power"] for r in rows if r["alternative"].endswith(": 10% off") and r["carried_by"] is None
    )
    assert [r["power"] for r in data["rows"]] == sorted(r["power"] for r in rows)
    assert [r["kind"] for r in data["rows"] if r["alternative"].startswith("a law")] == ["relative"]
    assert sum(r["carried_by"] is not None for r in data["rows"]) == 2
    empty = power_tool.result([], BOUNDS, RUN)
    assert empty["summary"]["checks"] == 0 and empty["summary"]["lowest"] is None
    assert "No power check was asserted." in power_tool.markdown(empty)


def test_out_writes_both_files_and_keeps_the_table_on_stdout(tmp_path, monkeypatch, capsys):
    rows = synthetic_rows()
    monkeypatch.setattr(power_tool, "collect", lambda: sorted(rows, key=lambda r: r["power"]))
    monkeypatch.setattr(power_tool, "settings", lambda: BOUNDS)
    assert power_tool.main(["--out", str(tmp_path / "new" / "tables")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("| power | check: wrong answer | test |\n") and "8 checks in 4 tests asserted" in printed
    data = json.loads((tmp_path / "new" / "tables" / "power.json").read_text())
    checkout = (power_tool.ROOT / ".git").exists()  # the mutation tool's copies of the repository leave it out
    assert re.fullmatch(r"[0-9a-f]{40}", data["run"]["commit"]) if checkout else data["run"]["commit"] is None
    assert data["run"]["wall_s"] >= 0
    assert data["summary"]["checks"] == 8 and len(data["rows"]) == len(rows)
    assert (tmp_path / "new" / "tables" / "power.md").read_text() == power_tool.markdown(data)


@pytest.mark.parametrize("where", ["a file", "under a file", "not writable"])
def test_a_bad_out_is_refused_in_one_line_naming_it_before_the_tests_run(tmp_path, monkeypatch, capsys, where):
    """A file, a folder under a file, a folder without write permission (faked: the tests may run as root)."""
    (tmp_path / "f").write_text("")
    bad = {"a file": tmp_path / "f", "under a file": tmp_path / "f" / "tables", "not writable": tmp_path / "ro"}[where]
    if where == "not writable":
        monkeypatch.setattr(power_tool.os, "access", lambda path, mode: Path(path) != bad)
    monkeypatch.setattr(power_tool, "collect", lambda: pytest.fail("the power tests ran"))
    with pytest.raises(SystemExit) as stop:
        power_tool.main(["--out", str(bad)])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert stop.value.code == 2 and len(errors) == 1 and "Traceback" not in err
    assert errors[0].startswith("power.py: error: --out: ") or "error: --out: " in errors[0]
    assert repr(str(bad)) in errors[0] and not (tmp_path / "f").is_dir()


def test_outside_a_git_checkout_the_run_has_no_commit_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(power_tool, "ROOT", tmp_path)  # no .git here (an unpacked archive, the mutants' copies)
    run = power_tool.run_info(1.0)
    assert run["commit"] is None and run["changed"] is None
    data = power_tool.result(synthetic_rows(), BOUNDS, run)
    assert "Run outside a git checkout on " in power_tool.markdown(data).replace("\n", " ")
