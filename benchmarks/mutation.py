"""Mutation testing: change one operator or constant of a module at a time and see whether its tests notice.

For each mutant — ``+``↔``-``, ``*``↔``/``, ``**``→``*``, a comparison flipped or
loosened (``<``↔``<=``, ``>``↔``>=``, ``==``↔``!=``), ``and``↔``or``, a unary minus or
``not`` dropped, ``True``↔``False``, an integer ``n``→``n + 1`` or a float ``x``→``2x``
(``0.0``→``1.0``), ``min``↔``max`` and ``minimum``↔``maximum`` — the module is rewritten
(``ast.unparse``) in a private copy of the repository and the given test files run there
with ``pytest -x`` (stopping at the first failure). A mutant is *killed* when a test fails,
*survives* when all pass, and *times out* past ``--timeout`` seconds (counted as killed:
the tests noticed something). The score is killed / all. Docstrings are not mutated.

    python benchmarks/mutation.py speculab/theory/rejections.py tests/test_rejections.py [--shard 1/2]

One module and its own tests per command keeps a run within minutes on two cores; shard
a long one with ``--shard i/n`` across processes. The last lines list the survivors
(line, change) to kill with a test or to record as equivalent with the reason.
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BINOPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Pow: ast.Mult,
          ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv}
CMPOPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
          ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
NAMES = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum"}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (left alone)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _drop_unary(node: ast.UnaryOp) -> None:
    """``-x`` → ``+x``; ``not x`` → ``not not x`` (that is, ``bool(x)``: the ``not`` dropped)."""
    if isinstance(node.op, ast.USub):
        node.op = ast.UAdd()
    else:
        node.operand = ast.UnaryOp(ast.Not(), node.operand)


def _sites(tree: ast.AST):
    """Yield ``(node, description, apply)`` for every mutation of ``tree`` (``apply`` mutates ``node`` in place)."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
            new = BINOPS[type(node.op)]
            yield node, f"{type(node.op).__name__} → {new.__name__}", lambda n, new=new: setattr(n, "op", new())
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in CMPOPS:
                    new = CMPOPS[type(op)]

                    def flip(n, i=i, new=new):
                        n.ops[i] = new()
                    yield node, f"{type(op).__name__} → {new.__name__}", flip
        elif isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            yield node, f"{type(node.op).__name__} → {new.__name__}", lambda n, new=new: setattr(n, "op", new())
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            yield node, f"drop {type(node.op).__name__}", _drop_unary
        elif isinstance(node, ast.Constant) and id(node) not in skip:
            v = node.value
            if isinstance(v, bool):
                yield node, f"{v} → {not v}", lambda n: setattr(n, "value", not n.value)
            elif isinstance(v, int):
                yield node, f"{v} → {v + 1}", lambda n: setattr(n, "value", n.value + 1)
            elif isinstance(v, float):
                new = 1.0 if v == 0 else 2 * v
                yield node, f"{v!r} → {new!r}", lambda n, new=new: setattr(n, "value", new)
        elif isinstance(node, ast.Name) and node.id in NAMES:
            yield node, f"{node.id} → {NAMES[node.id]}", lambda n: setattr(n, "id", NAMES[n.id])
        elif isinstance(node, ast.Attribute) and node.attr in NAMES:
            yield node, f".{node.attr} → .{NAMES[node.attr]}", lambda n: setattr(n, "attr", NAMES[n.attr])


def mutants(source: str) -> list[tuple[int, str, str]]:
    """Every mutant of ``source``: ``(line, description, mutated source)``."""
    tree = ast.parse(source)
    count = sum(1 for _ in _sites(tree))
    out = []
    for k in range(count):
        t = copy.deepcopy(tree)
        node, what, apply = next(s for i, s in enumerate(_sites(t)) if i == k)
        apply(node)
        out.append((node.lineno, what, ast.unparse(ast.fix_missing_locations(t))))
    return out


def _run_tests(workdir: Path, tests: list[str], timeout: float) -> str:
    env = dict(os.environ, PYTHONPATH=str(workdir), PYTHONDONTWRITEBYTECODE="1")
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=workdir,
                           env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if r.returncode == 0 else "killed"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("module", help="the module to mutate, e.g. speculab/theory/rejections.py")
    ap.add_argument("tests", nargs="+", help="the test files (or node ids) that should catch its mutants")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's test run (default 300)")
    ap.add_argument("--shard", default="1/1", help="i/n: run every n-th mutant from the i-th (default 1/1)")
    args = ap.parse_args(argv)
    i, n = (int(v) for v in args.shard.split("/"))
    source = (ROOT / args.module).read_text()
    found = mutants(source)
    chosen = [(k, m) for k, m in enumerate(found) if k % n == i - 1]
    with tempfile.TemporaryDirectory(prefix="speculab-mutants-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(".venv", ".git", "results", "*.egg-info",
                                                                  "__pycache__"))
        target = work / args.module
        check = subprocess.run([sys.executable, "-c", "import speculab; print(speculab.__file__)"], cwd=work,
                               env=dict(os.environ, PYTHONPATH=str(work)), capture_output=True, text=True)
        if not check.stdout.strip().startswith(str(work)):
            raise SystemExit(f"the copy's speculab is not the one imported ({check.stdout.strip()})")
        target.write_text(ast.unparse(ast.parse(source)))  # the unmutated module, rewritten the same way
        t0 = time.perf_counter()
        if _run_tests(work, args.tests, args.timeout) != "survived":
            raise SystemExit("the tests fail on the unmutated (rewritten) module: nothing to measure")
        print(f"{args.module}: {len(found)} mutants, running {len(chosen)} (shard {args.shard}); baseline "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        results = []
        for k, (line, what, mutated) in chosen:
            target.write_text(mutated)
            outcome = _run_tests(work, args.tests, args.timeout)
            results.append((line, what, outcome))
            print(f"  #{k:3d} line {line:4d}  {what:28s} {outcome}", flush=True)
    killed = sum(o != "survived" for *_, o in results)
    print(f"\nscore {killed}/{len(results)} = {killed / max(len(results), 1):.1%} ({args.module}; tests: "
          f"{' '.join(args.tests)})")
    for line, what, outcome in results:
        if outcome == "survived":
            print(f"  survived: line {line}: {what}")


if __name__ == "__main__":
    main()
