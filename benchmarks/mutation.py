"""Mutation testing: change one operator or constant of a module at a time and see whether its tests notice.

For each mutant — ``+``↔``-``, ``*``↔``/``, ``**``→``*``, a comparison flipped or
loosened (``<``↔``<=``, ``>``↔``>=``, ``==``↔``!=``), ``and``↔``or``, a unary minus or
``not`` dropped, ``True``↔``False``, an integer ``n``→``n + 1`` or a float ``x``→``2x``
(``0.0``→``1.0``), ``min``↔``max`` and ``minimum``↔``maximum`` — the module is rewritten
(``ast.unparse``) in a private copy of the repository and the tests that execute the mutated
statement run there with ``pytest -x --runslow``, fastest first (stopping at the first failure). A
mutant is *killed* when a test fails or the tests cannot be collected (pytest's exit 1 or 2, or the run
crashing on a signal), *survives* when all pass, is *unexecuted* (a survivor) when no test runs its
statement, *times out* past ``--slowdown`` times its tests' baseline seconds (counted as killed: the tests
noticed something; ``--rerun`` runs them again, as a loaded machine can make a survivor time out), and is
an *error* when pytest itself could not run the selected tests (exit 3–5: an internal or usage error, e.g. a
selected test id that a mutated parametrization no longer produces, or no tests collected). Such a mutant runs
again against the whole files of its selected tests (a renamed test id is then collected under its new name);
only if that fails the same way is it an error: it says nothing about the mutant, so it counts as not killed
and is listed with the survivors, to be checked by hand. The
score is killed / all. Docstrings are not mutated. A run stopped with Ctrl-C or SIGTERM stops its tests and
removes its copies.

Which tests execute which line comes from one run of the given tests on the unmutated module
under ``coverage`` with one context per test; code run while the tests are collected
(imports, module constants, ``def`` lines) is taken to concern every test. Each run is a
child forked from this process after numpy, scipy, pytest and hypothesis are imported, so a
mutant costs its tests, not an interpreter start. Code the tests run in another process (the
CLI tests' ``speculab`` subprocesses) is not traced: a mutant only they would kill counts as
a survivor, so the score errs low.

    python benchmarks/mutation.py speculab/theory/rejections.py --tests tests/test_rejections.py
    python benchmarks/mutation.py speculab/methods/sd.py speculab/methods/chain.py  # against all of tests/

Several modules share one baseline run; ``--jobs`` mutants run at once (one private copy
each), and ``--shard i/n`` takes every n-th mutant from the i-th to split a long run across
sessions; ``--resume LOG`` continues an interrupted run from its output (the outcomes it records
for the same source, checked by the digest it printed, are kept and only the other mutants run).
The last lines give the score per module and list the survivors (line:column, change) to kill
with a test or to record in ``benchmarks/mutation_equivalent.txt`` with the reason no test can
tell them from the original; the score is given with and without those. Needs
``coverage`` (in the ``test`` extra).
"""

from __future__ import annotations

import argparse
import ast
import collections
import fnmatch
import hashlib
import importlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hypothesis
import numpy
import pytest
import scipy.stats

PRELOADED = (numpy, scipy.stats, hypothesis, pytest)  # imported once here, before the children fork
for _name in ("torch", "transformers"):  # the real-model tests' imports (seconds a child), once here too if installed
    try:
        importlib.import_module(_name)
    except ImportError:
        pass

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".mutation-cache"  # baselines, one per (package, tests, command) digest
EQUIVALENT = Path(__file__).with_name("mutation_equivalent.txt")  # survivors no test can kill, with the reason


def equivalents(path: Path = EQUIVALENT) -> dict[tuple[str, str, str], str]:
    """``{(module, "line:column", change): reason}`` from the list of equivalent mutants (``#`` starts a comment).

    One line per mutant: ``module:line:column | change | why no test can tell it from the original``.
    """
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where, change, reason = (part.strip() for part in line.split("|", 2))
        module, at = where.split(":", 1)
        out[(module, at, change)] = reason
    return out


BINOPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.Pow: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
CMPOPS = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
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


def mutants(source: str) -> list[tuple[int, int, str, str]]:
    """Every mutant of ``source``: ``(line, column, description, mutated source)``.

    Each site is changed in place, the tree unparsed and the node put back as it was (one
    parse for all mutants).
    """
    tree = ast.parse(source)
    out = []
    for node, what, apply in list(_sites(tree)):
        saved = {k: list(v) if isinstance(v, list) else v for k, v in vars(node).items()}
        apply(node)
        out.append((node.lineno, node.col_offset, what, ast.unparse(ast.fix_missing_locations(tree))))
        vars(node).clear()
        vars(node).update(saved)
    return out


def _named(found) -> list[tuple[str, str, object]]:
    """``(line, column, change, x)`` named ``("line:column", change, x)``, with ``#k`` for the k-th mutant of the same
    change at the same start (nested operators)."""
    seen = collections.Counter()
    out = []
    for line, col, what, x in found:
        seen[line, col, what] += 1
        out.append((f"{line}:{col}" + (f"#{seen[line, col, what]}" if seen[line, col, what] > 1 else ""), what, x))
    return out


def named_mutants(source: str) -> list[tuple[str, str, str]]:
    """:func:`mutants` named as the output and ``mutation_equivalent.txt`` name them: ``("line:column", change,
    mutated source)``."""
    return _named(mutants(source))


def mutant_names(source: str) -> list[tuple[str, str]]:
    """The names of :func:`named_mutants` alone, ``("line:column", change)``, without writing any mutant out."""
    sites = _sites(ast.parse(source))
    return [(at, what) for at, what, _ in _named((node.lineno, node.col_offset, what, None) for node, what, _ in sites)]


def _position(at: str) -> tuple[int, int]:
    """``(line, column)`` of a mutant's name ``"line:column"`` or ``"line:column#k"``."""
    line, col = at.split("#")[0].split(":")
    return int(line), int(col)


def statement_span(tree: ast.AST, lineno: int, col: int) -> tuple[int, int]:
    """Lines ``(first, last)`` of the innermost statement holding the node at ``(lineno, col)``.

    A test that executes none of those lines cannot evaluate the node, so only the tests that
    executed one of them need to run (a compound statement's span includes its body: a superset).
    """
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and (node.lineno, node.col_offset) <= (lineno, col) and lineno <= node.end_lineno:
            if best is None or (node.lineno, node.col_offset) >= (best.lineno, best.col_offset):
                best = node
    return (best.lineno, best.end_lineno) if best is not None else (lineno, lineno)


def runs_at_import(tree: ast.AST, lineno: int, col: int) -> bool:
    """Whether the node at ``(lineno, col)`` may run when its module is imported: outside every ``def``'s body (its
    decorators, defaults and annotations run with the ``def``; a lambda's body counts as import time, since a
    module-level call such as ``sorted(key=lambda …)`` runs it then)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body[0].lineno, body[0].col_offset) <= (lineno, col) <= (body[-1].end_lineno, body[-1].end_col_offset):
                return False
    return True


def select_tests(
    span: tuple[int, int], contexts: dict[int, set[str]], every: list[str], at_import: bool = False
) -> list[str]:
    """The tests to run against a mutant in ``span``: those that executed one of its lines.

    ``contexts`` maps a line to the test node ids that executed it, with ``""`` for code run
    while the tests were being collected (imports, module constants, ``def`` lines and their
    defaults). A mutant there can reach any test that runs the module, so the tests that
    executed any of its lines are chosen then. A mutant that ``at_import`` says runs when the module
    is imported (:func:`runs_at_import`) runs against every test: a module first imported inside a
    test has its import-time lines recorded for that test alone, and a test that reads a default
    from a signature executes no line of the module at all. ``every`` is ordered fastest first and the
    selection keeps that order (with ``-x`` a killed mutant stops at its first failure).
    """
    if at_import:
        return list(every)
    ran = set().union(*(contexts.get(line, set()) for line in range(span[0], span[1] + 1)))
    if "" in ran:
        ran = set().union(*contexts.values())
    return [t for t in every if t in ran]


def fresh_traces() -> None:
    """Forget what JAX compiled and what the package memoised (its ``functools`` caches), so that the next test runs
    — and coverage records it running — every line it reaches. A function that an earlier test traced and a cache
    now serves runs no line of its Python body: its lines were given to that earlier test alone, and a mutant there
    was run against too few tests (the JAX engines' survivors that their own tests kill)."""
    for name, module in list(sys.modules.items()):
        if name == "speculab" or name.startswith("speculab."):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()


class _Recorder:
    """pytest plugin: a coverage context and a wall time per test (node id), each test starting without the
    compiled or memoised code of the ones before it (:func:`fresh_traces`)."""

    def __init__(self, cov):
        self.cov, self.seconds = cov, {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        fresh_traces()
        self.cov.switch_context(item.nodeid)
        t0 = time.perf_counter()
        yield
        self.seconds[item.nodeid] = time.perf_counter() - t0
        self.cov.switch_context("")


def _fork(workdir: Path, job, log: str = os.devnull) -> int:
    """Start ``job()`` (returning an exit code) in a forked child inside ``workdir``, output to ``log``; its pid."""
    pid = os.fork()
    if pid == 0:  # the child: quiet, no bytecode written (mutants of one size share an mtime second)
        code = 3
        try:
            os.chdir(workdir)
            sys.path.insert(0, str(workdir))
            sys.dont_write_bytecode = True
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(out, 1)
            os.dup2(out, 2)
            code = int(job())
        finally:
            os._exit(code)
    return pid


#: pytest's exit codes that mean the tests noticed the mutant: 1, a test failed; 2, the tests could not be collected
#: (a mutant that breaks an import) or were interrupted. Exits 3 (internal error), 4 (usage error, e.g. a test id
#: not found) and 5 (no tests collected) say nothing about the mutant.
NOTICED = (1, 2)


def _outcome(status: int) -> str:
    """``survived`` (exit 0), ``killed`` (a code in ``NOTICED``, or the child dead of a signal: a crash) or
    ``error`` (pytest could not run the tests)."""
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return "survived"
    return "killed" if code in NOTICED or code < 0 else "error"


#: Every run of the tests: the first failure ends it, and the tests marked slow run too (they are CI's, and many
#: are the statistical checks with the most power).
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "--runslow"]


def _pytest(tests: list[str], *extra: str, plugins=()) -> int:
    return pytest.main([*PYTEST_ARGS, *extra, *tests], plugins=list(plugins))


def _fingerprint(modules: list[str], tests: list[str]) -> str:
    """A digest of the package, the tests (with their data and the root ``conftest.py``, which holds ``--runslow``),
    this tool and the command: a saved baseline is reused only while it is equal."""
    h = hashlib.sha256(json.dumps([modules, tests, PYTEST_ARGS]).encode())
    h.update(Path(__file__).read_bytes())  # how the baseline is recorded
    tested = [p for p in ROOT.glob("tests/**/*") if p.is_file() and "__pycache__" not in p.parts]
    for path in sorted([*ROOT.glob("speculab/**/*.py"), *tested, ROOT / "pyproject.toml", ROOT / "conftest.py"]):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _baseline(workdir: Path, modules: list[str], tests: list[str]):
    """Run the tests once on the unmutated modules under coverage (or reuse the run saved for this very tree).

    Returns ``({module: {line: test ids}}, {test id: seconds})``.
    """
    out = CACHE / f"baseline-{_fingerprint(modules, tests)}.json"

    def job():
        import coverage

        cov = coverage.Coverage(data_file=None, include=[str(workdir / m) for m in modules])
        rec = _Recorder(cov)
        cov.start()
        code = _pytest(tests, plugins=[rec])
        cov.stop()
        data = cov.get_data()
        lines = {m: data.contexts_by_lineno(str(workdir / m)) for m in modules}
        # renamed whole: a run stopped while writing leaves no baseline, and one beside it keeps its own file
        partial = out.with_suffix(f".partial.{os.getpid()}")
        partial.write_text(json.dumps({"lines": lines, "seconds": rec.seconds}))
        partial.replace(out)
        return code

    if not out.exists():
        CACHE.mkdir(exist_ok=True)
        log = CACHE / "baseline.log"
        pid = _fork(workdir, job, str(log))
        try:
            _, status = os.waitpid(pid, 0)
        except BaseException:  # stopped (Ctrl-C, SIGTERM): the baseline's tests stop too
            _kill(pid)
            raise
        if _outcome(status) != "survived":
            out.unlink(missing_ok=True)
            raise SystemExit(_baseline_failed(status, log))
    found = json.loads(out.read_text())
    contexts = {m: {int(line): set(ids) for line, ids in by_line.items()} for m, by_line in found["lines"].items()}
    return contexts, found["seconds"]


def _baseline_failed(status: int, log: Path) -> str:
    """Why there is nothing to measure when the baseline's tests did not pass: they failed (or crashed), or pytest
    could not run them (an ``error`` outcome: e.g. a test id that does not exist)."""
    if _outcome(status) == "error":
        return (
            f"pytest could not run the tests (exit {os.waitstatus_to_exitcode(status)}: an internal or usage "
            f"error, or no tests collected): nothing to measure (see {log})"
        )
    return f"the tests fail on the unmutated modules: nothing to measure (see {log})"


LEFT_OUT = (".venv", ".git", "results", "*.egg-info", "__pycache__", ".hypothesis", ".mutation-cache")  # of copies


def _copy(root: Path, dest: Path) -> Path:
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns(*LEFT_OUT))
    check = subprocess.run(
        [sys.executable, "-c", "import speculab; print(speculab.__file__)"],
        cwd=dest,
        env=dict(os.environ, PYTHONPATH=str(dest)),
        capture_output=True,
        text=True,
    )
    if not check.stdout.strip().startswith(str(dest)):
        raise SystemExit(f"the copy's speculab is not the one imported ({check.stdout.strip()})")
    return dest


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def test_files(tests: list[str]) -> list[str]:
    """The files of the test node ids ``tests``, in their first order: what a mutant runs when pytest cannot run
    the ids themselves (a mutated parametrization renamed one)."""
    return list(dict.fromkeys(t.split("::")[0] for t in tests))


def _run(tasks, copies: list[Path], originals: dict[str, str]):
    """Run ``(module, mutated source, tests, timeout, fallback)`` tasks on ``len(copies)`` copies at once; a task
    whose tests end in an ``error`` runs its ``fallback`` (``(tests, timeout)``, or ``None``) on the same mutant.

    Yields ``(index, outcome, seconds)`` as they finish; each copy gets its module's ``originals`` text back. Closed
    early (the run stopped), it stops the tests still running.
    """
    running = {}  # pid -> (index, copy, module, start, timeout, fallback)
    try:
        free = list(range(len(copies)))
        pending = iter(enumerate(tasks))
        exhausted = False
        while running or not exhausted:
            while free and not exhausted:
                nxt = next(pending, None)
                if nxt is None:
                    exhausted = True
                    break
                idx, (module, mutated, tests, timeout, fallback) = nxt
                if not tests:
                    yield idx, "unexecuted", 0.0  # no test runs this statement: it survives without a run
                    continue
                c = free.pop()
                (copies[c] / module).write_text(mutated)
                pid = _fork(copies[c], lambda t=tests: _pytest(t))
                running[pid] = (idx, c, module, time.monotonic(), timeout, fallback)
            if not running:
                continue
            pid, status = os.waitpid(-1, os.WNOHANG)
            outcome = _outcome(status) if pid else None
            if not pid:
                late = [q for q, (*_, start, timeout, _) in running.items() if time.monotonic() > start + timeout]
                if not late:
                    time.sleep(0.02)
                    continue
                pid, outcome = late[0], "timeout"
                _kill(pid)
            idx, c, module, start, _, fallback = running.pop(pid)
            if outcome == "error" and fallback is not None:  # the same mutant, against the tests' whole files
                tests, timeout = fallback
                again = _fork(copies[c], lambda t=tests: _pytest(t))
                running[again] = (idx, c, module, start, time.monotonic() - start + timeout, None)  # time: both runs
                continue
            (copies[c] / module).write_text(originals[module])  # the copy is clean again
            free.append(c)
            yield idx, outcome, time.monotonic() - start
    finally:
        for pid in running:
            _kill(pid)


#: A mutant's line in the output: ``  module:line:column  change  outcome (N tests[, S s])``.
OUTCOME_LINE = re.compile(
    r"^\s+(?P<module>[^\s:]+):(?P<at>\d+:\d+(?:#\d+)?)\s+(?P<what>.+?)\s+"
    r"(?P<outcome>killed|timeout|survived|unexecuted|error) \(\d+ tests(?:, [\d.]+ s)?\)$"
)
#: The line naming the source a run mutated: ``source module sha256 digest``.
SOURCE_LINE = re.compile(r"^source (?P<module>\S+) sha256 (?P<digest>[0-9a-f]+)$")


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def read_log(log: Path) -> tuple[dict[tuple[str, str, str], str], dict[str, str]]:
    """An earlier run's output: ``{(module, "line:column", change): outcome}`` and ``{module: source digest}`` (runs
    from before the digest was printed have none)."""
    outcomes, digests = {}, {}
    for line in log.read_text().splitlines():
        if m := OUTCOME_LINE.match(line):
            outcomes[m["module"], m["at"], m["what"]] = m["outcome"]
        elif m := SOURCE_LINE.match(line):
            digests[m["module"]] = m["digest"]
    return outcomes, digests


def _survivors(log: Path) -> tuple[set[tuple[str, str, str]], set[str]]:
    """``(module, line, change)`` of every mutant an earlier run's output lists as survived, unexecuted, timed out
    (on a loaded machine a survivor's tests can outlast the budget) or in error, and the modules it lists (the others
    are run whole)."""
    outcomes, _ = read_log(log)
    again = ("survived", "unexecuted", "timeout", "error")
    alive = {(m, at.split(":")[0], what) for (m, at, what), o in outcomes.items() if o in again}
    return alive, {m for m, _, _ in outcomes}


def resumed(logs: list[Path], sources: dict[str, str]) -> dict[tuple[str, str, str], str]:
    """The outcomes earlier (perhaps interrupted) runs' outputs ``logs`` record for the modules ``{module: source}``,
    refused unless each was made from the same source: the digest it printed, or — for a log from before digests
    were printed — every mutant it names (position and change) being one of the source's now."""
    out = {}
    for log in logs:
        outcomes, digests = read_log(log)
        for module in {m for m, _, _ in outcomes} & set(sources):
            mine = {k: o for k, o in outcomes.items() if k[0] == module}
            if module in digests:
                same = digests[module] == digest(sources[module])
            else:
                names = {(at, what) for at, what, _ in named_mutants(sources[module])}
                same = all((at, what) in names for _, at, what in mine)
            if not same:
                raise SystemExit(f"{log} was made from another version of {module}: its outcomes cannot be reused")
            out.update(mine)
    return out


def _module(ap: argparse.ArgumentParser, name: str) -> str:
    """A module argument as its path in the repository (``speculab/…/x.py``), from the working directory or the
    repository's root; anything else is refused, naming it (coverage would match nothing: every mutant unexecuted)."""
    for base in (Path.cwd(), ROOT):
        path = (base / name).resolve()
        if path.is_file():
            break
    else:
        ap.error(f"modules: no such file {name!r}")
    if path.suffix != ".py" or not path.is_relative_to(ROOT / "speculab"):
        ap.error(f"modules: {name!r} is not a Python module of the package (under {ROOT / 'speculab'})")
    return path.relative_to(ROOT).as_posix()


def _test_path(ap: argparse.ArgumentParser, name: str) -> str:
    """A ``--tests`` argument — a file, a folder or a node id ``file::test`` — with its path from the repository's
    root (the tests run in copies of it), found from the working directory or the root; a missing one, or one in a
    folder the copies leave out (``LEFT_OUT``), is refused, naming it, before the baseline (where pytest would only
    exit 4)."""
    path, sep, node = name.partition("::")
    if not path:
        ap.error(f"--tests: {name!r} names no test file or folder")
    for base in (Path.cwd(), ROOT):
        found = (base / path).resolve()
        if not found.is_relative_to(ROOT):
            continue
        found = found.relative_to(ROOT)  # refused there whether or not it exists here (a copy has no .git)
        if any(fnmatch.fnmatch(part, pattern) for part in found.parts for pattern in LEFT_OUT):
            ap.error(
                f"--tests: {path!r} is in a folder the mutants' copies of the repository leave out "
                f"({', '.join(LEFT_OUT)})"
            )
        if (ROOT / found).exists():
            return found.as_posix() + sep + node
    ap.error(f"--tests: no test file or folder {path!r} in the repository ({ROOT})")


def log_tier(text: str) -> str:
    """The test tier a run's output was made with: its first line ``tier NAME``, or the end of its summary line
    (``…; NAME tier``); ``full`` for the logs written before the tiers (they all ran the slow tests)."""
    found = re.search(r"^tier (full|fast)$", text, re.M) or re.search(r"; (full|fast) tier$", text, re.M)
    return found.group(1) if found else "full"


def _stop(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="+", help="the modules to mutate, e.g. speculab/theory/rejections.py")
    ap.add_argument(
        "--tests",
        nargs="+",
        default=["tests"],
        help="the test files, folders or node ids that should catch the mutants (default: tests)",
    )
    ap.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    ap.add_argument(
        "--slowdown",
        type=float,
        default=3.0,
        help="a mutant's tests time out past this many times their baseline seconds, plus 10 s (default 3)",
    )
    ap.add_argument("--shard", default="1/1", help="i/n: run every n-th mutant from the i-th (default 1/1)")
    ap.add_argument(
        "--rerun",
        default=None,
        metavar="LOG",
        help="of the modules an earlier run's output LOG lists, only the mutants it lists as survived, "
        "unexecuted or timed out (after new tests: which of them are killed now); other modules whole",
    )
    ap.add_argument(
        "--resume",
        nargs="+",
        default=[],
        metavar="LOG",
        help="reuse the outcomes earlier (e.g. interrupted) runs' outputs LOG record for the same source "
        "of a module and test only its other mutants; the score counts both",
    )
    ap.add_argument(
        "--plan",
        action="store_true",
        help="run the baseline, print each module's mutants and worst-case minutes, and stop",
    )
    ap.add_argument(
        "--tier",
        choices=("full", "fast"),
        default="full",
        help="full (default): the tests marked slow run too, as in CI; fast: without them, as "
        "`./dev test` runs — to measure what the fast tier alone kills",
    )
    ap.add_argument(
        "--skip-equivalent",
        action="store_true",
        help="do not test the mutants listed in benchmarks/mutation_equivalent.txt (no test can kill "
        "them; they count as survivors, as when they are tested)",
    )
    args = ap.parse_args(argv)
    if args.tier == "fast":
        global PYTEST_ARGS
        PYTEST_ARGS = [a for a in PYTEST_ARGS if a != "--runslow"]  # also a baseline of its own (the digest)
    if args.jobs < 1:
        ap.error(f"--jobs: at least 1 mutant at a time, not {args.jobs}")
    if not 1 <= args.slowdown < math.inf:  # below 1, survivors time out (counted as killed); at ∞ a loop never ends
        ap.error(f"--slowdown: at least 1 and finite (times a mutant's tests' baseline seconds), not {args.slowdown}")
    shard = re.fullmatch(r"(\d+)/(\d+)", args.shard)
    if not shard or not 1 <= int(shard[1]) <= int(shard[2]):
        ap.error(f"--shard: i/n with 1 <= i <= n, not {args.shard!r}")
    i, n = int(shard[1]), int(shard[2])
    args.modules = [_module(ap, m) for m in args.modules]
    args.tests = [_test_path(ap, t) for t in args.tests]
    for log in [*args.resume, *([args.rerun] if args.rerun else [])]:
        if not Path(log).is_file():
            ap.error(f"--resume/--rerun: no such log {log!r}")
        tier = log_tier(Path(log).read_text())
        if tier != args.tier:
            ap.error(f"--resume/--rerun: {log} is a run of the {tier} tier, this one of the {args.tier} tier")
    signal.signal(signal.SIGTERM, _stop)  # SIGTERM unwinds like Ctrl-C: the tests stop and the copies go
    known = equivalents()
    again, logged = _survivors(Path(args.rerun)) if args.rerun else (None, set())
    done = resumed([Path(log) for log in args.resume], {m: (ROOT / m).read_text() for m in args.modules})
    t0 = time.perf_counter()
    print(f"tier {args.tier}", flush=True)
    with tempfile.TemporaryDirectory(prefix="speculab-mutants-") as tmp:
        copies = [_copy(ROOT, Path(tmp) / f"repo{j}") for j in range(max(args.jobs, 1))]
        contexts, seconds = _baseline(copies[0], args.modules, args.tests)
        every = sorted(seconds, key=seconds.get)
        print(f"baseline: {len(every)} tests in {time.perf_counter() - t0:.0f} s", flush=True)
        found = []  # (module, "line:column", what, mutated source, selected tests)
        originals = {m: (copies[0] / m).read_text() for m in args.modules}
        outcomes = {}  # index in found -> outcome
        for module in args.modules:
            source = originals[module]
            print(f"source {module} sha256 {digest(source)}", flush=True)
            tree = ast.parse(source)
            for k, (at, what, mutated) in enumerate(named_mutants(source)):
                line, col = _position(at)
                if module in logged and (module, str(line), what) not in again:
                    continue
                if k % n == i - 1:
                    span, early = statement_span(tree, line, col), runs_at_import(tree, line, col)
                    tests = select_tests(span, contexts[module], every, early)
                    if (module, at, what) in done:
                        outcomes[len(found)] = done[module, at, what]
                    elif args.skip_equivalent and (module, at, what) in known:
                        outcomes[len(found)] = "not run"
                    found.append((module, at, what, mutated, tests))
        todo = [k for k in range(len(found)) if k not in outcomes]
        budget = {k: sum(seconds[t] for t in found[k][4]) for k in todo}
        if args.plan:
            for module in args.modules:
                mine = [b for k, b in budget.items() if found[k][0] == module]
                print(f"  {module}: {len(mine)} mutants to test, at most {sum(mine) / 60:.1f} min of tests")
            return
        print(
            f"{len(found)} mutants of {len(args.modules)} modules (shard {args.shard}), {len(outcomes)} of them "
            f"tested before (--resume); {args.jobs} at a time; at most "
            f"{sum(budget.values()) / max(args.jobs, 1) / 60:.0f} min if every mutant survived",
            flush=True,
        )
        in_file: dict = {}  # a test file's baseline seconds
        for t, took in seconds.items():
            in_file[t.split("::")[0]] = in_file.get(t.split("::")[0], 0.0) + took
        tasks = [
            (
                found[k][0],
                found[k][3],
                found[k][4],
                args.slowdown * budget[k] + 10,
                (
                    test_files(found[k][4]),
                    args.slowdown * sum(in_file.get(f, 0.0) for f in test_files(found[k][4])) + 10,
                ),
            )
            for k in todo
        ]
        for j, outcome, took in _run(tasks, copies, originals):
            k = todo[j]
            outcomes[k] = outcome
            module, at, what, _, tests = found[k]
            print(f"  {module}:{at}  {what:28s} {outcome} ({len(tests)} tests, {took:.0f} s)", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s; tests: {' '.join(args.tests)}; {args.tier} tier")
    for module in args.modules:
        mine = [(found[k][1], found[k][2], o) for k, o in sorted(outcomes.items()) if found[k][0] == module]
        killed = sum(o in ("killed", "timeout") for *_, o in mine)
        alive = [(at, what, o) for at, what, o in mine if o in ("survived", "unexecuted", "error", "not run")]
        same = [m for m in alive if (module, m[0], m[1]) in known]
        print(
            f"score {killed}/{len(mine)} = {killed / max(len(mine), 1):.1%}; without the {len(same)} equivalent: "
            f"{killed}/{len(mine) - len(same)} = {killed / max(len(mine) - len(same), 1):.1%}  {module}"
        )
        for at, what, outcome in sorted(alive, key=lambda m: _position(m[0])):
            reason = known.get((module, at, what))
            print(
                f"  {'equivalent' if reason else outcome}: {module}:{at}: {what}" + (f" ({reason})" if reason else "")
            )


if __name__ == "__main__":
    main()
