"""benchmarks/mutation.py: the mutants it makes and the tests it picks for each."""

import ast
import importlib.util
from pathlib import Path

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


def test_every_listed_equivalent_mutant_exists_in_the_current_source():
    """An entry whose line moved (or whose mutant was killed by a change of the code) must be updated, not left to
    match nothing."""
    listed = mutation.equivalents()
    assert listed, "benchmarks/mutation_equivalent.txt is empty or missing"
    for module in {m for m, _, _ in listed}:
        names = {(at, what) for at, what, _ in mutation.named_mutants((mutation.ROOT / module).read_text())}
        stale = [(at, what) for m, at, what in listed if m == module and (at, what) not in names]
        assert not stale, (module, stale)
