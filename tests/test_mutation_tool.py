"""benchmarks/mutation.py: the mutants it makes and the tests it picks for each."""

import ast
import importlib.util
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
    assert described == sorted([
        (2, "0.5 → 1.0"), (5, "2 → 3"), (7, "Lt → LtE"), (7, "And → Or"), (7, "drop Not"), (7, "Eq → NotEq"),
        (7, "0 → 1"), (8, "min → max"), (8, "Mult → Div"), (8, "drop USub"), (8, "1 → 2")])
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
    lines = [f"  {module}:{at}  {what:28s} killed (3 tests, 2 s)", f"  {module}:{at2}  {what2:28s} survived (7 tests)",
             "  elsewhere.py:1:0  Add → Sub                   timeout (1 tests, 40 s)"]
    log = tmp_path / "run.log"
    log.write_text("\n".join([f"source {module} sha256 {mutation.digest(SOURCE)}", *lines]) + "\n")
    outcomes, digests = mutation.read_log(log)
    assert outcomes == {(module, at, what): "killed", (module, at2, what2): "survived",
                        ("elsewhere.py", "1:0", "Add → Sub"): "timeout"}
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
