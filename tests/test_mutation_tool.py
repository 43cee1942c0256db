"""benchmarks/mutation.py: the mutants it makes and the tests it picks for each."""

import argparse
import ast
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("mutation", Path(__file__).parents[1] / "benchmarks" / "mutation.py")
mutation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutation)

SOURCE = '''"""A module docstring is never mutated."""
LIMIT = 0.5


def f(x, scale=2):
    """Neither is a function's."""
    if x < LIMIT and not x == 0:
        return min(x * scale, -1)
    return x
'''


def test_every_mutant_changes_one_site_and_nothing_else():
    found = mutation.mutants(SOURCE)
    described = sorted((line, what) for line, _, what, _ in found)
    assert described == sorted(
        [
            (2, "0.5 → 1.0"),
            (5, "2 → 3"),
            (7, "Lt → LtE"),
            (7, "And → Or"),
            (7, "drop Not"),
            (7, "Eq → NotEq"),
            (7, "0 → 1"),
            (8, "min → max"),
            (8, "Mult → Div"),
            (8, "drop USub"),
            (8, "1 → 2"),
        ]
    )
    original = ast.dump(ast.parse(SOURCE))
    for line, col, what, text in found:
        assert ast.dump(ast.parse(text)) != original, what
        assert '"""A module docstring is never mutated."""' in text and "Neither is a function's." in text


def test_a_mutant_behaves_as_described():
    """Run the ``min → max`` mutant: it must change ``f``'s value (the mutation is real, not a no-op)."""
    (text,) = [t for _, _, what, t in mutation.mutants(SOURCE) if what == "min → max"]
    original, mutated = {}, {}
    exec(SOURCE, original)
    exec(text, mutated)
    assert original["f"](0.25) == -1 and mutated["f"](0.25) == 0.5


def test_statement_span_is_the_innermost_statement():
    tree = ast.parse(SOURCE)
    assert mutation.statement_span(tree, 8, 19) == (8, 8)  # inside the return
    assert mutation.statement_span(tree, 7, 9) == (7, 8)  # the if's test: the if with its body
    assert mutation.statement_span(tree, 5, 14) == (5, 9)  # a default: the def
    assert mutation.statement_span(tree, 2, 8) == (2, 2)  # a module constant


def test_tests_are_selected_by_the_lines_they_ran_fastest_first():
    every = ["t_fast", "t_mid", "t_slow", "t_other"]
    contexts = {2: {""}, 5: {""}, 7: {"t_slow", "t_mid"}, 8: {"t_slow"}, 9: {"t_mid"}, 12: {"t_other"}}
    assert mutation.select_tests((8, 8), contexts, every) == ["t_slow"]
    assert mutation.select_tests((7, 8), contexts, every) == ["t_mid", "t_slow"]
    assert mutation.select_tests((10, 11), contexts, every) == []  # never executed: nothing to run
    # code run at collection (a constant, a default) reaches every test that runs the module
    assert mutation.select_tests((2, 2), contexts, every) == ["t_mid", "t_slow", "t_other"]
    # and so does code run at import when the module was first imported inside a test (recorded for that test)
    late = {5: {"t_fast"}, 7: {"t_mid"}, 12: {"t_other"}}
    assert mutation.select_tests((5, 9), late, every) == ["t_fast", "t_mid"]
    assert mutation.select_tests((5, 9), late, every, at_import=True) == every  # t_slow read only a signature


def test_import_time_code_is_told_from_function_bodies():
    tree = ast.parse(SOURCE)
    assert mutation.runs_at_import(tree, 5, 14)  # a default
    assert mutation.runs_at_import(tree, 2, 8)  # a module constant
    assert not mutation.runs_at_import(tree, 7, 9) and not mutation.runs_at_import(tree, 8, 19)  # in the body
    assert mutation.runs_at_import(ast.parse("f = sorted([2, 1], key=lambda x: x + 1)\n"), 1, 35)  # run at import
    assert not mutation.runs_at_import(ast.parse("def g():\n    return sorted(key=lambda x: -x)\n"), 2, 33)


def test_nested_operators_that_share_a_start_get_distinct_names():
    names = [(at, what) for at, what, _ in mutation.named_mutants("x = a + b + c\n")]
    assert names == [("1:4", "Add → Sub"), ("1:4#2", "Add → Sub")]


def test_the_names_alone_are_the_mutants_names():
    """``mutant_names`` (no mutant written out) names the mutants as ``named_mutants`` does, in the same order."""
    for module in ("speculab/backends/warp.py", "speculab/kernels.py"):
        source = (mutation.ROOT / module).read_text()
        assert mutation.mutant_names(source) == [(at, what) for at, what, _ in mutation.named_mutants(source)]
    assert mutation.mutant_names("x = a + b + c\n") == [("1:4", "Add → Sub"), ("1:4#2", "Add → Sub")]


def test_every_listed_equivalent_mutant_exists_in_the_current_source():
    """An entry whose line moved (or whose mutant was killed by a change of the code) must be updated, not left to
    match nothing."""
    listed = mutation.equivalents()
    assert listed, "benchmarks/mutation_equivalent.txt is empty or missing"
    for module in {m for m, _, _ in listed}:
        names = set(mutation.mutant_names((mutation.ROOT / module).read_text()))
        stale = [(at, what) for m, at, what in listed if m == module and (at, what) not in names]
        assert not stale, (module, stale)


def test_an_interrupted_runs_outcomes_are_kept_only_for_the_same_source(tmp_path):
    """``--resume LOG``: a log's outcomes are reused for the source it printed the digest of, and for a log from
    before digests were printed only while every mutant it names is one of the source's; otherwise refused."""
    module = "speculab/toy.py"
    names = {what: at for at, what, _ in mutation.named_mutants(SOURCE)}
    (at, what), (at2, what2) = (names["Mult → Div"], "Mult → Div"), (names["min → max"], "min → max")
    lines = [
        f"  {module}:{at}  {what:28s} killed (3 tests, 2 s)",
        f"  {module}:{at2}  {what2:28s} survived (7 tests)",
        "  elsewhere.py:1:0  Add → Sub                   timeout (1 tests, 40 s)",
    ]
    log = tmp_path / "run.log"
    log.write_text("\n".join([f"source {module} sha256 {mutation.digest(SOURCE)}", *lines]) + "\n")
    outcomes, digests = mutation.read_log(log)
    assert outcomes == {
        (module, at, what): "killed",
        (module, at2, what2): "survived",
        ("elsewhere.py", "1:0", "Add → Sub"): "timeout",
    }
    assert digests == {module: mutation.digest(SOURCE)}
    kept = {(module, at, what): "killed", (module, at2, what2): "survived"}
    assert mutation.resumed([log], {module: SOURCE}) == kept  # other modules' outcomes are not taken
    edited = SOURCE.replace("scale=2", "scale=3")  # the same positions, another source
    with pytest.raises(SystemExit, match="another version of speculab/toy.py"):
        mutation.resumed([log], {module: edited})
    legacy = tmp_path / "legacy.log"  # no digest: the names decide
    legacy.write_text("\n".join(lines) + "\n")
    assert mutation.resumed([legacy], {module: SOURCE}) == kept
    with pytest.raises(SystemExit, match="another version"):
        mutation.resumed([legacy], {module: SOURCE.replace("min(", "abs(")})  # "min → max" is gone
    rerun = {(module, at2.split(":")[0], what2), ("elsewhere.py", "1", "Add → Sub")}  # survivors and timeouts
    assert mutation._survivors(log) == (rerun, {module, "elsewhere.py"})


def test_every_run_includes_the_slow_tests_and_its_baseline_says_so(monkeypatch):
    """The tests marked slow are CI's and hold many of the strongest checks: every run passes ``--runslow``, and a
    baseline saved under other pytest arguments is not reused (its digest differs)."""
    assert "--runslow" in mutation.PYTEST_ARGS and "-x" in mutation.PYTEST_ARGS
    before = mutation._fingerprint(["speculab/backends/warp.py"], ["tests/test_backends.py"])
    monkeypatch.setattr(mutation, "PYTEST_ARGS", [a for a in mutation.PYTEST_ARGS if a != "--runslow"])
    assert mutation._fingerprint(["speculab/backends/warp.py"], ["tests/test_backends.py"]) != before


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--jobs", "0"], "--jobs: at least 1"),
        (["--slowdown", "0.5"], "--slowdown: at least 1"),
        (["--slowdown", "nan"], "--slowdown: at least 1"),
        (["--slowdown", "inf"], "--slowdown: at least 1 and finite"),
        (["--tests", "tests/no_such_test.py"], "--tests: no test file or folder 'tests/no_such_test.py'"),
        (["--tests", "tests/test_rejections.py", "/etc::x"], "--tests: no test file or folder '/etc'"),
        (["--tests", ""], "--tests: '' names no test file or folder"),
        (["--tests", "::x"], "--tests: '::x' names no test file or folder"),
        (["--tests", ".git"], "--tests: '.git' is in a folder the mutants' copies of the repository leave out"),
        (["--shard", "0/2"], "--shard: i/n with 1 <= i <= n"),
        (["--shard", "3/2"], "--shard: i/n"),
        (["--shard", "1/0"], "--shard: i/n"),
        (["--shard", "abc"], "--shard: i/n"),
        (["--resume", "no-such.log"], "no such log 'no-such.log'"),
        (["--rerun", "no-such.log"], "no such log 'no-such.log'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(argv, message, capsys):
    """Each refused with a message naming the argument, before a copy or a baseline is made: a slowdown below 1
    would time survivors out (counted as killed) and an infinite one never stop a mutant that loops, a shard past
    its count would test nothing and score 0/0, and a missing test file only made pytest exit 4 in the baseline."""
    with pytest.raises(SystemExit) as stop:
        mutation.main(["speculab/theory/biased.py", *argv])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_modules_and_tests_are_paths_of_the_repository_named_from_here_or_the_root(capsys, monkeypatch, tmp_path):
    """Any spelling of a package module becomes its path in the repository (coverage is keyed by it: another
    spelling matched nothing, and every mutant was 'unexecuted'), and so does a ``--tests`` argument, node id kept
    (the tests run in copies of the repository); a missing file, a module outside the package or tests outside the
    repository are refused by name."""
    ap = argparse.ArgumentParser()
    here, test = "speculab/theory/biased.py", "tests/test_rejections.py::test_t1_matches_enumeration"
    monkeypatch.chdir(tmp_path)  # not the repository: the root is tried next
    assert mutation._module(ap, here) == here and mutation._test_path(ap, test) == test
    assert mutation._module(ap, str(mutation.ROOT / here)) == here
    assert mutation._test_path(ap, str(mutation.ROOT / test)) == test
    monkeypatch.chdir(mutation.ROOT / "speculab")
    assert mutation._module(ap, "./theory/biased.py") == here and mutation._test_path(ap, "../tests") == "tests"
    assert mutation._module(ap, "../speculab/theory/../theory/biased.py") == here
    monkeypatch.chdir(mutation.ROOT)
    for check, name, message in [
        (mutation._module, "speculab/theory/nope.py", "no such file 'speculab/theory/nope.py'"),
        (mutation._module, "benchmarks/mutation.py", "'benchmarks/mutation.py' is not a Python module of the package"),
        (mutation._module, "README.md", "'README.md' is not a Python module"),
        (mutation._test_path, str(tmp_path), f"--tests: no test file or folder {str(tmp_path)!r}"),
    ]:
        with pytest.raises(SystemExit):
            check(ap, name)
        assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "code, outcome",
    [
        (0, "survived"),
        (1, "killed"),  # a test failed
        (2, "killed"),  # the tests could not be collected: the mutant broke an import
        (3, "error"),  # pytest's internal error (also a job that raised: _fork exits 3)
        (4, "error"),  # a usage error: a selected test id no longer exists
        (5, "error"),  # no tests collected
        (-9, "killed"),  # dead of a signal: a crash
    ],
)
def test_only_a_failing_test_or_a_crash_kills_a_mutant(code, outcome):
    """An exit of pytest that says nothing about the mutant (internal or usage error, nothing collected) is an
    error, counted as not killed and listed with the survivors, not a kill. (Wait statuses are built here, not
    forked: the suite has JAX's threads running by now.)"""
    status = -code if code < 0 else code << 8  # POSIX: a signal in the low bits, an exit code above them
    assert os.waitstatus_to_exitcode(status) == code
    assert mutation._outcome(status) == outcome


@pytest.mark.slow
def test_a_test_id_pytest_cannot_find_is_an_error_not_a_kill():
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *mutation.PYTEST_ARGS, "tests/test_mutation_tool.py::test_no_such_test"],
        cwd=mutation.ROOT,
        capture_output=True,
    )
    assert run.returncode == 4 and mutation._outcome(run.returncode << 8) == "error"


def test_a_baseline_pytest_cannot_run_is_not_called_failing():
    """The baseline's message says what happened: tests that fail, or pytest unable to run them (exit 4, a test id
    not found — it said 'the tests fail' for both)."""
    assert mutation._baseline_failed(1 << 8, Path("b.log")).startswith("the tests fail on the unmutated modules")
    assert mutation._baseline_failed(4 << 8, Path("b.log")).startswith("pytest could not run the tests (exit 4")


@pytest.mark.slow  # a real run of the tool: its imports, a copy of the repository, then SIGTERM (about 20 s)
@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="reads /proc")
def test_a_run_stopped_with_sigterm_stops_its_tests_and_removes_its_copies(tmp_path):
    """SIGTERM (what a session's end or ``kill`` sends) unwinds like Ctrl-C: the baseline's tests are stopped and
    the private copies removed (before, each stopped run left a copy of the repository in /tmp)."""
    run = subprocess.Popen(
        [
            sys.executable,
            str(mutation.ROOT / "benchmarks" / "mutation.py"),
            "speculab/theory/biased.py",
            "--tests",
            "tests/test_methods.py",
            "--jobs",
            "1",
        ],
        cwd=mutation.ROOT,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("speculab-mutants-*/repo0/speculab")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run.poll() is None, run.stderr.read()
    time.sleep(3)  # copying, or into the baseline (test_methods.py under coverage, minutes long): either way
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []
    inside = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            inside += [cwd] if str(tmp_path) in os.readlink(cwd) else []
        except OSError:  # gone meanwhile, or not ours
            pass
    assert inside == []


def test_a_log_is_resumed_only_by_a_run_of_its_own_tier(tmp_path, capsys):
    """An outcome measured with the slow tests says nothing of the fast tier alone, and the other way round."""
    assert mutation.log_tier("tier fast\nbaseline: 3 tests in 1 s\n") == "fast"
    assert mutation.log_tier("…\n12 s; tests: tests; fast tier\n") == "fast"
    assert mutation.log_tier("baseline: 3 tests in 1 s\n") == "full"  # written before the tiers: all ran --runslow
    log = tmp_path / "full.log"
    log.write_text("tier full\n")
    with pytest.raises(SystemExit):
        mutation.main(["speculab/theory/rejections.py", "--tier", "fast", "--resume", str(log)])
    assert "is a run of the full tier, this one of the fast tier" in capsys.readouterr().err


def _remap_tool():
    sys.modules.setdefault("mutation", mutation)  # the tool imports the module this file loaded
    spec = importlib.util.spec_from_file_location(
        "remap_equivalents", Path(__file__).parents[1] / "benchmarks" / "remap_equivalents.py"
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_remap_carries_equivalents_across_a_rename_and_a_reformat():
    """A rename and a new layout move every mutant but change none: each entry follows its mutant (found by index
    in the syntax tree's order), and the moved entry names the same change at its new place."""
    tool = _remap_tool()
    before = "def f(gamma):\n    return min(gamma, 3) + 1\n"
    after = "def f(\n    K,\n):\n    return (\n        min(K, 3)\n        + 1\n    )\n"
    old, new = mutation.mutant_names(before), mutation.mutant_names(after)
    mapping = tool.remap(before, after)
    assert mapping == {a: b for (a, _), (b, _) in zip(old, new)} and mapping != {a: a for a in mapping}
    lines = ["# a comment", "", f"m.py:{old[1][0]} | {old[1][1]} | why"]
    out, moved, left = tool.remap_lines(lines, lambda module: (before, after))
    assert out[:2] == lines[:2] and out[2] == f"m.py:{new[1][0]} | {new[1][1]} | why" and not left
    assert moved == [f"m.py:{old[1][0]} -> {new[1][0]}"]


def test_remap_leaves_a_module_whose_mutants_changed_and_says_so():
    """A mutant more (a new constant), or another change at the same index: no entry can be carried by its index,
    so the module's entries stay as they are and the module is named; an entry naming no mutant is named too."""
    tool = _remap_tool()
    before = "def f(x):\n    return x + 1\n"
    for after in ("def f(x):\n    return x + 1 + 2\n", "def f(x):\n    return x - 1\n"):
        assert tool.remap(before, after) is None
        lines = ["m.py:2:11 | Add → Sub | why"]
        out, moved, left = tool.remap_lines(lines, lambda module: (before, after))
        assert (
            out == lines
            and not moved
            and left == ["m.py: its mutants differ before and after (remap its entries by hand)"]
        )
    out, moved, left = tool.remap_lines(["m.py:9:9 | Add → Sub | why"], lambda module: (before, before))
    assert out == ["m.py:9:9 | Add → Sub | why"] and left == ["m.py:9:9: no such mutant before"]


def _table_tool():
    sys.modules.setdefault("mutation", mutation)
    spec = importlib.util.spec_from_file_location(
        "mutation_table", Path(__file__).parents[1] / "benchmarks" / "mutation_table.py"
    )
    tool = importlib.util.module_from_spec(spec)
    sys.modules["mutation_table"] = tool  # its dataclass resolves its annotations through sys.modules
    spec.loader.exec_module(tool)
    return tool


def _commit(repo: Path, source: str, message: str) -> str:
    (repo / "m.py").write_text(source)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run([*git, "commit", "-qm", message], cwd=repo, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()


def _log(path: Path, tier: str, source: str, outcomes: dict) -> Path:
    lines = [f"tier {tier}", f"source m.py sha256 {mutation.digest(source)}"]
    lines += [f"  m.py:{at}  {what:28s} {o} (3 tests, 1 s)" for (at, what), o in outcomes.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_table_counts_a_modules_mutants_from_its_logs_across_a_rename(tmp_path):
    """Outcomes measured on one source carry to a renamed, reformatted one (same shape: the same mutants in the same
    order); a later log's outcome (a rerun) replaces an earlier one's; a listed equivalent counts as such; a mutant
    no log names is "not measured"; the markdown's numbers are the json's."""
    tool = _table_tool()
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    v1 = "def f(x, y):\n    return min(x + 1, y * 2)\n"
    _commit(tmp_path, v1, "v1")
    names = mutation.mutant_names(v1)
    assert len(names) >= 4
    first = {names[0]: "killed", names[1]: "survived", names[2]: "survived"}
    logs = [_log(tmp_path / "a.log", "fast", v1, first)]
    v2 = "def f(\n    a,\n    b,\n):\n    return min(a + 1, b * 2)\n"
    _commit(tmp_path, v2, "rename")
    logs.append(_log(tmp_path / "b.log", "fast", v2, {mutation.mutant_names(v2)[1]: "timeout"}))
    now = mutation.mutant_names(v2)
    listed = {("m.py", now[2][0], now[2][1]): "why"}
    (row,) = tool.rows(tmp_path, logs, listed)
    assert (row.mutants, row.killed, row.equivalent, row.survived, row.unmeasured) == (len(now), 2, 1, 0, len(now) - 3)
    assert row.changed_by is None and row.logs == ["a.log", "b.log"]
    data = tool.to_json([row], tmp_path)
    md = tool.markdown(data)
    assert f"| m.py | fast | {len(now)} | 2 | 1 | 0 | {len(now) - 3} | {100 * 2 / len(now):.1f} % |" in md


def test_the_table_says_when_a_module_changed_since_it_was_measured(tmp_path):
    """A change of the program (not a rename) drops nothing silently: the row gives the counts on the source that was
    measured, no equivalents (the list names the current mutants), and the commit that changed the module."""
    tool = _table_tool()
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    v1 = "def f(x):\n    return x + 1\n"
    measured = _commit(tmp_path, v1, "v1")
    logs = [_log(tmp_path / "a.log", "full", v1, {n: "killed" for n in mutation.mutant_names(v1)})]
    changed = _commit(tmp_path, "def f(x):\n    return x - 1 if x else 2\n", "v2")
    (row,) = tool.rows(tmp_path, logs, {})
    assert (row.mutants, row.killed, row.equivalent) == (len(mutation.mutant_names(v1)), row.mutants, None)
    assert (row.measured_on, row.changed_by) == (measured, changed) and row.without_equivalents is None
    md = tool.markdown(tool.to_json([row], tmp_path))
    assert "Measured on an earlier source" in md and f"`{measured[:7]}` | `{changed[:7]}` |" in md
    assert "Measured on the current source" not in md


def test_a_row_of_an_older_program_gives_way_to_the_current_one_in_the_other_tier(tmp_path):
    """A module measured in the full tier, changed, then measured in the fast tier on its current source: one row,
    the fast tier's; without the fast log the full tier's older row stays (it is all there is)."""
    tool = _table_tool()
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    v1 = "def f(x):\n    return x + 1\n"
    _commit(tmp_path, v1, "v1")
    full = _log(tmp_path / "a.log", "full", v1, {n: "killed" for n in mutation.mutant_names(v1)})
    v2 = "def f(x):\n    return x - 1 if x else 2\n"
    _commit(tmp_path, v2, "v2")
    fast = _log(tmp_path / "b.log", "fast", v2, {mutation.mutant_names(v2)[0]: "survived"})
    (row,) = tool.rows(tmp_path, [full, fast], {})
    assert (row.tier, row.changed_by, row.survived) == ("fast", None, 1)
    (row,) = tool.rows(tmp_path, [full], {})
    assert row.tier == "full" and row.changed_by is not None


def test_the_committed_mutation_table_is_the_logs_table():
    """benchmarks/tables/mutation.json (which the docs' table is written from) is what the tool computes now from the
    committed logs and sources: a change to a measured module, or a new log, shows here until the table is
    written again. Skipped in a copy without the git history (the mutants' copies leave ``.git`` out), where no
    log's source can be looked up."""
    if not (mutation.ROOT / ".git").exists():
        pytest.skip("no git history here: the logs' sources cannot be looked up")
    tool = _table_tool()
    committed = json.loads((mutation.ROOT / "benchmarks" / "tables" / "mutation.json").read_text())
    assert committed["rows"] == tool.to_json(tool.rows())["rows"]
    assert (mutation.ROOT / "benchmarks" / "tables" / "mutation.md").read_text() == tool.markdown(committed)


def test_the_same_program_is_a_rename_or_a_new_layout_not_another_call():
    """What carries outcomes: a rename, a reworded string, a new layout — not another builtin, not the name the tool
    swaps (``min`` for ``max`` is a mutant, not a rename), not another constant or operator."""
    tool = _table_tool()
    same = tool.same_program
    assert same("def f(gamma):\n    return g(gamma, 'a')\n", "def f(\n    K,\n):\n    return g(K, 'b')\n")
    assert not same("x = min(a, b)\n", "x = max(a, b)\n")
    assert not same("x = np.minimum(a, b)\n", "x = np.maximum(a, b)\n")
    assert not same("x = a + 1\n", "x = a + 2\n") and not same("x = a + 1\n", "x = a - 1\n")
    assert not same("x = len(a)\n", "x = abs(a)\n")
    # found by review: a swap, another function of an imported module, another keyword or an existing string
    assert not same("def f(p, q):\n    return p - q\n", "def f(p, q):\n    return q - p\n")
    assert not same("import numpy as np\nx = np.exp(a)\n", "import numpy as np\nx = np.log(a)\n")
    assert not same("x = f(a, axis=1, keepdims=2)\n", "x = f(a, keepdims=1, axis=2)\n")
    assert not same("x = f(a, axis=1)\ny = f(b, keepdims=1)\n", "x = f(a, keepdims=1)\ny = f(b, keepdims=1)\n")
    assert not same("m = 'opt' if a else 'uno'\n", "m = 'uno' if a else 'opt'\n")
    assert not same("x = r(q, p)\ny = q\n", "x = r(p, q)\ny = q\n")
    # a docstring is text, not program: reworded into a string the code uses, it is still the same program
    assert same("def f():\n    'x'\n    return 'y'\n", "def f():\n    'y'\n    return 'y'\n")


#: Runs the three cases of the test below in a process of its own: ``_run`` forks, and a fork of a test worker
#: whose JAX threads are running can deadlock.
VANISHED = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import mutation
root = Path(sys.argv[2])
mutation.PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider"]  # no --runslow in the small repository
gone = ["tests/test_m.py::test_x[renamed]"]
out = []
for mutated, fallback in (("X = 2\\n", True), ("X = 1\\n", True), ("X = 2\\n", False)):
    task = ("m.py", mutated, gone, 60.0, (mutation.test_files(gone), 60.0) if fallback else None)
    [(index, outcome, _)] = list(mutation._run([task], [root], {"m.py": "X = 1\\n"}))
    out.append([index, outcome, (root / "m.py").read_text()])
print(json.dumps(out))
"""


@pytest.mark.slow  # pytest run three times in a process of its own, as the file's other runs of pytest are
def test_a_mutant_whose_selected_test_ids_vanished_runs_their_files(tmp_path):
    """A selected test id that pytest cannot find (a mutated parametrization renamed it: exit 4) is no outcome; the
    mutant runs again against the files of its tests, and that run's outcome is the mutant's: killed when the
    renamed test fails on it, survived when it passes; without that fallback, an error. Each time the module is
    restored."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "m.py").write_text("X = 1\n")
    (tmp_path / "tests" / "test_m.py").write_text("def test_x():\n    import m\n\n    assert m.X == 1\n")
    gone = ["tests/test_m.py::test_x[renamed]"]
    assert mutation.test_files([*gone, "tests/test_m.py::test_y", "tests/b.py::t"]) == ["tests/test_m.py", "tests/b.py"]
    run = subprocess.run(
        [sys.executable, "-c", VANISHED, str(mutation.ROOT / "benchmarks"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    restored = "X = 1\n"
    assert json.loads(run.stdout.splitlines()[-1]) == [
        [0, "killed", restored],
        [0, "survived", restored],
        [0, "error", restored],
    ]


def test_each_baseline_test_starts_without_the_packages_memos_or_jaxs_compiled_code(monkeypatch):
    """The baseline forgets the package's ``functools`` caches (and JAX's compiled code, when JAX is loaded) before
    each test: a body served from a cache runs no line, and its mutants would be given too few tests. Caches of
    modules outside the package are left alone."""
    import functools
    import types

    calls = []
    inside, outside = types.ModuleType("speculab._cached_for_test"), types.ModuleType("elsewhere_cached_for_test")
    for module in (inside, outside):
        module.twice = functools.lru_cache(maxsize=None)(lambda x: calls.append(x) or 2 * x)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    cleared = []
    monkeypatch.setitem(sys.modules, "jax", types.SimpleNamespace(clear_caches=lambda: cleared.append(1)))
    for module in (inside, outside):
        module.twice(3)
        module.twice(3)
    assert calls == [3, 3]
    mutation.fresh_traces()
    assert inside.twice.cache_info().currsize == 0 and outside.twice.cache_info().currsize == 1 and cleared == [1]
    inside.twice(3)
    assert calls == [3, 3, 3]
