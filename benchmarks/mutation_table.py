"""The mutation scores of docs/measurements.md, from the tool's own output: nothing typed by hand.

Reads every log ``benchmarks/mutation.py`` wrote into ``benchmarks/mutation_logs/`` (its outcome lines and the
sha256 digest of each module's source it printed), ``benchmarks/mutation_equivalent.txt`` and the git history, and
writes ``mutation.json`` and ``mutation.md`` (the table the docs include):

    python benchmarks/mutation_table.py --out benchmarks/tables

For each module and tier (fast: ``./dev test``'s tests; full: CI's) the logs' outcomes are taken in the order of
the sources they were measured on (each digest is looked up in the module's git history): a later log's outcome
replaces an earlier one's for the same mutant (``--rerun`` of survivors after new tests), and outcomes carry from
one source to the next only when the second is the first renamed, reworded or laid out anew — the same syntax
tree, docstrings aside, up to a one-to-one renaming of identifiers and strings to fresh names (builtins, the names
the tool swaps and the attributes of imported modules kept; :func:`same_program`); the mutants are then the same
changes in the same order and are matched by their index. Any other change of a module's source ends the row there:
it then gives the counts on the newest source a log measured and the commit that changed the module since, until
the module is measured again.

A mutant is killed when a log says killed or timeout; equivalent when the list names it; every other mutant of the
current source is a survivor (survived, unexecuted, error, not run) or not measured. A survivor killed by hand
(the mutated line put in and a test run against it) is not in any log, so it counts as a survivor here until a
run of the tool (``--rerun``) records it.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import functools
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import EQUIVALENT, ROOT, _docstrings, digest, equivalents, log_tier, mutant_names, read_log  # noqa: E402
from remap_equivalents import remap  # noqa: E402

LOGS = ROOT / "benchmarks" / "mutation_logs"
WIDTH = 120
KILLED = ("killed", "timeout")


IDENTIFIERS = ("id", "arg", "attr", "name", "asname", "module")
#: Names whose exchange is a mutation (the tool's ``min``/``max`` swaps) or a builtin: a rename never maps them.
FIXED = set(dir(builtins)) | {"minimum", "maximum"}


def _modules(tree: ast.AST) -> set[str]:
    """The names a module binds to imported modules (``import numpy as np`` binds ``np``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.asname or a.name.split(".")[0] for a in node.names}
    return out


def _tokens(tree: ast.AST):
    """``(node type, other fields, tokens)`` per node in walk order: tokens are its identifiers and string constants
    (docstrings aside), each with whether it may be renamed (not a builtin, not a swapped name, not an attribute of
    an imported module)."""
    fixed_modules, docstrings = _modules(tree), _docstrings(tree)
    for node in ast.walk(tree):
        tokens = []
        for name in IDENTIFIERS:
            value = getattr(node, name, None)
            if isinstance(value, str):
                external = (
                    name == "attr" and isinstance(node.value, ast.Name) and node.value.id in fixed_modules
                ) or name == "module"
                tokens.append((value, value not in FIXED and not external))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            tokens.append(("'" + node.value, True))
        other = tuple(
            (k, repr(v))
            for k, v in ast.iter_fields(node)
            if not isinstance(v, (ast.AST, list)) and k not in IDENTIFIERS and not isinstance(v, str)
        )
        yield type(node).__name__, other, tokens


@functools.lru_cache(maxsize=64)  # each version is compared with the one before it and the one after
def _program(source: str) -> tuple:
    return tuple(_tokens(ast.parse(source)))


def same_program(before: str, after: str) -> bool:
    """Whether ``after`` is ``before`` renamed, reworded or laid out anew: the same syntax tree, docstrings aside, up
    to one renaming of identifiers and strings across the module that is one-to-one, renames only to names the
    other source does not use, and keeps builtins, the names the tool swaps (``min``/``max``) and the attributes of
    imported modules (``np.exp`` stays ``np.exp``). Then the two have the same mutants, the same changes in the same
    order. A swap (``p - q`` for ``q - p``), another keyword, another string used elsewhere, another function of an
    imported module, another constant or operator: not the same program."""
    if before == after:
        return True
    a, b = _program(before), _program(after)
    if len(a) != len(b):
        return False
    used_a = {t for _, _, tokens in a for t, _ in tokens}
    used_b = {t for _, _, tokens in b for t, _ in tokens}
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}
    for (ta, oa, xa), (tb, ob, xb) in zip(a, b):
        if ta != tb or oa != ob or len(xa) != len(xb):
            return False
        for (x, free), (y, _) in zip(xa, xb):
            if x == y:
                continue
            if not free or x in used_b or y in used_a:  # fixed, or a swap with a name the other source uses
                return False
            if forward.setdefault(x, y) != y or backward.setdefault(y, x) != x:
                return False
    return True


def _git(*args: str, repo: Path) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else ""


def history(module: str, repo: Path) -> list[tuple[str, str]]:
    """``[(commit, source)]`` of every version of ``module`` in the git history, oldest first."""
    commits = _git("log", "--format=%H", "--", module, repo=repo).split()
    return [(c, _git("show", f"{c}:{module}", repo=repo)) for c in reversed(commits)]


def log_order(log: Path, repo: Path) -> tuple[int, str]:
    """Logs are read in the order they were committed (uncommitted ones last), then by name."""
    when = _git("log", "-1", "--format=%ct", "--", str(log.relative_to(repo)), repo=repo).strip()
    return (int(when) if when else 1 << 62, log.name)


@dataclass
class Row:
    module: str
    tier: str
    mutants: int
    killed: int = 0
    equivalent: int | None = 0  # None: the measured source is not the current one (the list names current mutants)
    survived: int = 0
    unmeasured: int = 0
    logs: list[str] = field(default_factory=list)
    measured_on: str = "working tree"  # the commit of the newest source a log measured
    changed_by: str | None = None  # the first commit after it that changed the program (None: current)

    @property
    def score(self) -> float:
        return self.killed / self.mutants if self.mutants else 1.0

    @property
    def without_equivalents(self) -> float | None:
        if self.equivalent is None:
            return None
        rest = self.mutants - self.equivalent
        return self.killed / rest if rest else 1.0


def rows(repo: Path = ROOT, logs: list[Path] | None = None, listed: dict | None = None) -> list[Row]:
    """One row per (module, tier) some log measured: the counts on the current source when the newest measured
    source is the current program (renamed, reworded or laid out anew at most), else on that source, with the commit
    that changed the program since — unless the module's current source is measured in the other tier: a row of an
    older program then says nothing the current one does not, and is left out."""
    logs = sorted(logs if logs is not None else LOGS.glob("*.log"), key=lambda p: log_order(p, repo))
    listed = equivalents(EQUIVALENT) if listed is None else listed
    measured: dict[tuple[str, str], list[tuple[Path, str, dict]]] = {}  # (module, tier) -> [(log, digest, outcomes)]
    for log in logs:
        outcomes, digests = read_log(log)
        tier = log_tier(log.read_text())
        for module, dig in digests.items():
            mine = {(at, what): o for (m, at, what), o in outcomes.items() if m == module}
            if mine:
                measured.setdefault((module, tier), []).append((log, dig, mine))
    out = []
    for (module, tier), runs in sorted(measured.items()):
        path = repo / module
        if not path.exists():
            continue
        versions = [*history(module, repo), ("working tree", path.read_text())]
        index = {digest(src): k for k, (_, src) in enumerate(versions)}
        runs = sorted((r for r in runs if r[1] in index), key=lambda r: index[r[1]])  # stable: log order kept
        if not runs:
            continue  # measured only on sources no commit holds
        state: dict[tuple[str, str], str] = {}  # outcomes at the source `at`, keyed by (line:column, change)
        at, used = None, []
        for log, dig, mine in runs:
            k = index[dig]
            if at is not None and k != at:
                state = _carried(state, versions[at][1], versions[k][1])
                used = used if state else []
            at = k
            state.update(mine)
            used += [log.name] if log.name not in used else []
        changed = (j for j in range(at, len(versions) - 1) if not same_program(versions[j][1], versions[j + 1][1]))
        later = next(changed, None)  # the version before the first change since the logs' source, if any
        source = versions[-1][1] if later is None else versions[at][1]
        if later is None:
            state = _carried(state, versions[at][1], source)
        names = mutant_names(source)
        row = Row(module, tier, len(names), logs=used, measured_on=versions[at][0])
        if later is not None:
            row.equivalent, row.changed_by = None, versions[later + 1][0]
        for key in names:
            outcome = state.get(key)
            if outcome in KILLED:
                row.killed += 1
            elif later is None and (module, key[0], key[1]) in listed:
                row.equivalent += 1
            elif outcome is None:
                row.unmeasured += 1
            else:
                row.survived += 1
        out.append(row)
    current = {r.module for r in out if r.changed_by is None}
    return [r for r in out if r.changed_by is None or r.module not in current]


def _carried(state: dict, before: str, after: str) -> dict:
    """``state``'s outcomes moved from source ``before`` to ``after``: by index when they are the same program
    (and so the same mutants in the same order), else none."""
    if before == after:
        return state
    if not same_program(before, after):
        return {}
    moved = remap(before, after)  # the same program: the same mutants, matched by index
    return {(moved[at], what): o for (at, what), o in state.items() if at in moved}


def to_json(found: list[Row], repo: Path = ROOT) -> dict:
    commit = _git("rev-parse", "HEAD", repo=repo).strip()
    keys = (
        "module",
        "tier",
        "mutants",
        "killed",
        "equivalent",
        "survived",
        "unmeasured",
        "logs",
        "measured_on",
        "changed_by",
    )
    return {
        "commit": commit,
        "rows": [
            {**{k: getattr(r, k) for k in keys}, "score": r.score, "without_equivalents": r.without_equivalents}
            for r in found
        ],
    }


def _percent(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def markdown(data: dict) -> str:
    """mutation.md from mutation.json's content alone: the rows measured on the current source, then those measured
    on an earlier one (their counts on that source; the equivalents list names the current mutants, so "—")."""
    head = (
        "Generated by `python benchmarks/mutation_table.py --out benchmarks/tables` at commit "
        f"`{data['commit'][:7]}` from the logs in `benchmarks/mutation_logs/`. Killed: a test failed (or timed out); "
        "equivalent: listed in `benchmarks/mutation_equivalent.txt`; survived: survived, unexecuted, an error or not "
        "run; not measured: no log has an outcome for the mutant."
    )
    lines = textwrap.wrap(head, WIDTH, break_long_words=False, break_on_hyphens=False) + [""]
    current = [r for r in data["rows"] if r["changed_by"] is None]
    earlier = [r for r in data["rows"] if r["changed_by"] is not None]
    columns = "| module | tier | mutants | killed | equivalent | survived | not measured | score | "
    columns += "without equivalents |"
    if current:
        lines += ["Measured on the current source (or the same program renamed, reworded or laid out anew):", ""]
        lines += [columns, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        lines += [_line(r) for r in current] + [""]
    if earlier:
        lines += ["Measured on an earlier source, changed since (to be measured again):", ""]
        lines += [columns + " measured on | changed by |", "| --- " * 11 + "|"]
        lines += [_line(r) + f" `{r['measured_on'][:7]}` | `{r['changed_by'][:7]}` |" for r in earlier] + [""]
    return "\n".join(lines)


def _line(r: dict) -> str:
    equivalent = "—" if r["equivalent"] is None else r["equivalent"]
    return (
        f"| {r['module'].removeprefix('speculab/')} | {r['tier']} | {r['mutants']} | {r['killed']} | {equivalent} | "
        f"{r['survived']} | {r['unmeasured']} | {_percent(r['score'])} | {_percent(r['without_equivalents'])} |"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for mutation.json and mutation.md")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        ap.error(f"--out: {args.out} is not a folder")
    data = to_json(rows())
    out.mkdir(parents=True, exist_ok=True)
    (out / "mutation.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "mutation.md").write_text(markdown(data))
    print(markdown(data), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
