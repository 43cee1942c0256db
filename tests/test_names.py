"""The table of names (docs/names.md) holds across the code: one name per quantity.

Exact checks on the package's syntax trees and signatures: no parameter or field carries a retired name, a
parameter ``P`` (the draft's transitions) always comes with its ``Q``, the renamed signatures and flags are
the table's, and the retired flags are refused on the command line.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "speculab"

#: Names no parameter or field may carry anywhere in the package (docs/names.md's last column).
RETIRED = {"gamma", "cap", "K_max", "generator", "g", "seed"}
#: The stored records that keep a ``seed`` field (docs/names.md says why): (module, class).
STORED_SEEDS = {("speculab/backends/heads.py", "HeadConfig"), ("speculab/backends/tiny/build.py", "BuildConfig")}
RETIRED_FLAGS = {"--gamma": "--K", "--cap": "--max-K", "--rows": "--row-law"}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _names(tree):
    """``(kind, owner, name, line)`` of every parameter and every class-level annotated field."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None:
                    yield "parameter", getattr(node, "name", "<lambda>"), arg.arg, arg.lineno
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    yield "field", node.name, stmt.target.id, stmt.lineno


def test_no_parameter_or_field_carries_a_retired_name():
    found = [
        f"{module}:{line}: {kind} {name} of {owner}"
        for module, tree in _modules()
        for kind, owner, name, line in _names(tree)
        if name in RETIRED and not (kind == "field" and name == "seed" and (module, owner) in STORED_SEEDS)
    ]
    assert not found, found


def test_the_stored_seed_fields_still_exist():
    """The exception is for fields that exist (a stale exception would hide a new ``seed``)."""
    fields = {
        (module, owner)
        for module, tree in _modules()
        for kind, owner, name, _ in _names(tree)
        if kind == "field" and name == "seed"
    }
    assert fields == STORED_SEEDS


def test_a_parameter_P_comes_with_its_Q():
    """``P`` is the draft's transitions, next to the target's ``Q``; a rejection law is ``rejection``."""
    lonely = []
    for module, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = {arg.arg for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
                if "P" in names and "Q" not in names:
                    lonely.append(f"{module}:{node.lineno}: {node.name}")
    assert not lonely, lonely


def _params(f) -> list[str]:
    return list(inspect.signature(f).parameters)


def test_the_renamed_signatures_are_the_tables():
    from speculab import theory
    from speculab.backends.heads import make_head
    from speculab.methods import BlockVerification, RejectionDecoding, SpecDecPP, Sprinter
    from speculab.theory import MarkovInstance

    fields = lambda cls: [f.name for f in dataclasses.fields(cls)]  # noqa: E731
    assert "K" in fields(BlockVerification) and "max_K" in fields(SpecDecPP)
    assert "rejection" in fields(RejectionDecoding) and "P" not in fields(RejectionDecoding)
    assert "threshold" in fields(Sprinter) and "tau" not in fields(Sprinter)
    assert theory.OptimalRejection._fields == ("rejection", "loss", "rejection_prob", "A")
    for f in (theory.expected_rejections, theory.output_law, theory.tradeoff_profile, theory.sequence_bias):
        assert _params(f)[:3] == ["inst", "b", "rejection"], f.__name__
    assert _params(theory.rejection_loss) == ["p", "q", "b", "rejection"]
    assert _params(theory.is_optimal_rejection)[:4] == ["p", "q", "b", "rejection"]
    assert _params(theory.pareto_loss) == ["p", "q", "rejection_prob"]
    assert "rejection" in _params(theory.lookahead_counts) and "max_K" in _params(theory.best_lookahead)
    assert _params(theory.optimal_stopping)[-1] == "max_K"
    assert _params(theory.markov_kl) == ["rho", "chain", "reference"]
    assert _params(theory.markov_tv)[:3] == ["rho", "chain", "reference"]
    assert _params(theory.log_likelihood_ratio) == ["chain", "reference", "sequences"]
    assert _params(theory.sd_flops)[0] == "K" and _params(theory.sprinter_flops)[0] == "K"
    assert "row_law" in _params(MarkovInstance.random) and _params(make_head) == ["config", "key"]


@pytest.mark.parametrize("old, new", sorted(RETIRED_FLAGS.items()))
def test_a_retired_flag_is_refused_and_its_new_name_parses(old, new, capsys):
    from speculab.cli import build_parser

    value = {"--gamma": "3", "--cap": "3", "--rows": "uniform"}[old]
    argv = ["sim", "--T", "5", "--V", "3"]
    with pytest.raises(SystemExit) as err:
        build_parser().parse_args([*argv, old, value])
    assert err.value.code == 2 and f"unrecognized arguments: {old}" in capsys.readouterr().err
    args = build_parser().parse_args([*argv, new, value])
    assert str(getattr(args, new[2:].replace("-", "_"))) == value


def test_the_names_page_retires_what_these_tests_check():
    page = (ROOT / "docs" / "names.md").read_text()
    rows = [line.split("|")[1:-1] for line in page.splitlines() if line.startswith("| `")]
    retired = " ".join(cells[3] for cells in rows)
    assert set(re.findall(r"`(--[\w-]+)`", retired)) == set(RETIRED_FLAGS)
    assert RETIRED <= set(re.findall(r"`([A-Za-z_]\w*)`", retired))
    for old, new in RETIRED_FLAGS.items():
        assert f"`{new}`" in page, new


def test_h_is_only_specdecpps_threshold():
    """``h`` is SpecDec++'s stopping threshold; hidden states are ``hidden``, a history ``history``."""
    found = [
        f"{module}:{line}: {owner}"
        for module, tree in _modules()
        for kind, owner, name, line in _names(tree)
        if name == "h" and module != "speculab/methods/specdecpp.py"
    ]
    assert not found, found


def test_the_pages_use_the_names_too():
    """Found by review: the retired names lingered in the docs after the code moved on."""
    retired = [
        r"--gamma\b",
        r"--cap\b",
        r"--rows\b",
        r"\bgamma=",
        r"\bcap=",
        r"\btau=",
        r"\bK_max\b",
        r"\(gamma\)",
        r"RejectionDecoding\([^)]*\bP=",
    ]
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [
        f"{page.name}: {m.group(0)}"
        for page in pages
        for pattern in retired
        for m in re.finditer(pattern, page.read_text())
        if not page.name == "names.md"
    ]
    assert not found, found
