"""The package's import graph: no cycle, and nothing imports upward.

Every ``import`` of a ``speculab`` module counts, at module level or inside a function (a function-local import
that only dodges a cycle is still a cycle). ``from speculab.x import y`` depends on ``speculab.x.y`` when that
is a module, else on ``speculab.x`` (for a package, its ``__init__``: importing a package's facade from below
depends on everything the facade gathers). The layers, from the ground up:

0. ``speculab``'s own helpers (the signed JSON lines that checkpoints and journals are written in among them), the
   kernels, the counts, the rows that put theory beside measurement, and the statistical tests (``stats``);
1. ``speculab.theory``: the mathematics;
2. ``speculab.methods``: each method's rule, law and expectations (on the theory);
3. ``speculab.sim``: the simulators (of the methods);
4. ``speculab.backends``: real models (the methods' laws on torch);
5. ``speculab.compare``: theory against real-model measurement;
6. what the user drives: ``validate``, ``testing``, ``repro``, ``certify``, ``cli``.

A module may import from its own layer or below, never above; and a few edges between layers are forbidden outright
(:data:`FORBIDDEN`): what two rooms share lives on a floor below both, not in either.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "speculab"
GROUND = {
    "speculab",
    "speculab._validate",
    "speculab._budget",
    "speculab._files",
    "speculab._npz",
    "speculab._progress",
    "speculab.kernels",
    "speculab.counts",
    "speculab.rows",
    "speculab.stats",
    "speculab._lines",
}
LAYERS = [
    ("speculab.theory", 1),
    ("speculab.methods", 2),
    ("speculab.sim", 3),
    ("speculab.backends", 4),
    ("speculab.compare", 5),
    ("speculab.validate", 6),
    ("speculab.testing", 6),
    ("speculab.repro", 6),
    ("speculab.certify", 6),
    ("speculab.engines", 6),
    ("speculab.planning", 6),
    ("speculab.cli", 6),
    ("speculab.__main__", 6),
]

#: Edges the layers alone allow but the design does not, with the reason: an importer (a module or a package) may
#: not import a module of the imported prefix.
FORBIDDEN = [
    ("speculab.certify", "speculab.validate", "the statistical tests certify shares with validate live in stats"),
    ("speculab.backends", "speculab.sim", "the journals' line format is speculab._lines, not the checkpoints'"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _target(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str) -> set[str]:
    """The speculab modules that module ``name`` imports (anywhere in it)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {_target(a.name) for a in node.names if a.name.startswith("speculab")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.startswith("speculab"):
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else _target(base) for a in node.names}
    return {m for m in found if m and m != name}


GRAPH = {name: imports(name) for name in MODULES}


def layer(name: str) -> int:
    if name in GROUND:
        return 0
    for prefix, level in LAYERS:
        if name == prefix or name.startswith(prefix + "."):
            return level
    raise AssertionError(f"{name} has no layer: add it to tests/test_imports.py")


def _cycles() -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    for root in sorted(GRAPH):
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_has_a_layer():
    for name in MODULES:
        layer(name)


def test_the_import_graph_has_no_cycle():
    cycles = _cycles()
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_nothing_imports_upward():
    upward = sorted(
        f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
        for a, targets in GRAPH.items()
        for b in targets
        if layer(b) > layer(a)
    )
    assert upward == [], "\n".join(upward)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def forbidden(graph: dict[str, set[str]]) -> list[str]:
    """The edges of ``graph`` that :data:`FORBIDDEN` forbids, with the reason."""
    return sorted(
        f"{a} imports {b}: {why}"
        for a, targets in graph.items()
        for b in targets
        for importer, imported, why in FORBIDDEN
        if _under(a, importer) and _under(b, imported)
    )


def test_no_forbidden_edge():
    found = forbidden(GRAPH)
    assert found == [], "\n".join(found)


def test_the_forbidden_edges_are_found():
    """The check itself, on a graph with today's edges removed and the old ones put back."""
    old = {"speculab.certify": {"speculab.validate"}, "speculab.backends.journal": {"speculab.sim.checkpoint"}}
    assert [line.split(":")[0] for line in forbidden(old)] == [
        "speculab.backends.journal imports speculab.sim.checkpoint",
        "speculab.certify imports speculab.validate",
    ]
    assert forbidden({"speculab.validate": {"speculab.certify"}, "speculab.sim": {"speculab.backends"}}) == []


@pytest.mark.parametrize(
    "source, want",
    [
        ("from speculab.methods import SD", {"speculab.methods"}),
        ("from speculab.methods.sprinter import Sprinter", {"speculab.methods.sprinter"}),
        ("from speculab.sim import jax_engine", {"speculab.sim.jax_engine"}),
        ("import speculab.theory.batch", {"speculab.theory.batch"}),
        ("def f():\n    from speculab.compare import Row", {"speculab.compare"}),
        ("from .base import Method", {"speculab.methods.base"}),
    ],
)
def test_the_graph_reads_every_kind_of_import(source, want, tmp_path, monkeypatch):
    """The reader itself: module-level, function-local, relative and package imports (``speculab.methods.sd``
    reads a new source here)."""
    path = tmp_path / "sd.py"
    path.write_text(source)
    monkeypatch.setitem(MODULES, "speculab.methods.sd", path)
    assert imports("speculab.methods.sd") == want - {"speculab.methods.sd"}


def test_the_cycle_finder_finds_cycles_and_only_them(monkeypatch):
    fake = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": set(), "f": {"f2"}, "f2": {"f"}}
    monkeypatch.setitem(globals(), "GRAPH", fake)
    assert sorted(_cycles()) == [["a", "b", "c"], ["f", "f2"]]


def _imported_names():
    """Every ``from speculab.x import name`` in the package, at module level or inside a function: (file, line,
    module, name)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("speculab"):
                for alias in node.names:
                    if alias.name != "*":
                        yield path.relative_to(PACKAGE.parent).as_posix(), node.lineno, node.module, alias.name


def test_every_name_imported_from_the_package_exists():
    """A function-local import runs only when its function does: a name moved to another module (the statistical
    tests to ``stats``, the exact laws to ``backends.exact_law``) left one importing it from its old room, found only
    by the slow tier. Each imported name must be an attribute or a submodule of its module."""
    import importlib

    missing = []
    for where, line, module, name in _imported_names():
        mod = importlib.import_module(module)
        if not hasattr(mod, name) and importlib.util.find_spec(f"{module}.{name}") is None:
            missing.append(f"{where}:{line}: from {module} import {name}")
    assert missing == []
