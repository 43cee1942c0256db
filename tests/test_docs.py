"""The documentation site: it builds with warnings as errors, and what it names exists.

The examples on its pages run as doctests (``pytest`` collects ``docs/*.md``, see pyproject.toml).
Here: the mathematics page's functions import and its tests exist, every parameter a public
docstring documents is in the signature (the check griffe's parser cannot make on "p, q: …"
lines), and the command line page lists the JSON keys each command prints.
"""

import ast
import importlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from speculab.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MKDOCS = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")

#: The modules the API reference renders (docs/api.md's ::: lines).
API = re.findall(r"^::: (\S+)$", (DOCS / "api.md").read_text(), flags=re.M)


@pytest.mark.skipif(MKDOCS is None and os.environ.get("CI") != "true", reason="needs mkdocs (pip install -e '.[docs]')")
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    assert MKDOCS is not None, "CI installs the docs extra (./dev)"
    done = subprocess.run([MKDOCS, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("sd_expected_rejections", "simulate", "decode", "assert_preserves_target_law", "build_report"):
        assert f'id="{name}' in api or f".{name}" in api, name  # rendered from the docstrings
    # the docstrings' Sphinx roles are rendered (mkdocs_hooks.py): none is left as text on any page, references
    # link to anchors that exist, and :math: is TeX for MathJax
    for page in (tmp_path / "site").rglob("*.html"):
        text = page.read_text()
        assert not re.search(r":(func|class|meth|data|mod|attr|math):<", text), page
    links = re.findall(r'<a href="index.html#([\w.]+)"><code>', api)
    assert len(links) > 100 and all(f'id="{a}"' in api for a in links)
    assert api.count('class="arithmatex"') > 30 and "\\(" in api


def _table_cells(page: str):
    """The cells of every table row of a Markdown page (header and rule rows skipped)."""
    for line in page.splitlines():
        if line.startswith("|") and not set(line) <= set("|- :"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] not in ("result", "page", "strategy", "check"):
                yield cells


def _test_ids(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_mathematics_page_names_what_exists():
    rows = list(_table_cells((DOCS / "mathematics.md").read_text()))
    assert len(rows) >= 40
    for cells in rows:
        assert len(cells) == 4, cells
        names = re.findall(r"`(speculab\.[\w.]+)`", cells[2])
        tests = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", cells[3])
        assert names and tests, cells
        for name in names:
            module, _, attr = name.rpartition(".")
            try:
                obj = importlib.import_module(name)
            except ImportError:
                obj = getattr(importlib.import_module(module), attr)
            assert obj is not None
        for file, test in tests:
            assert test in _test_ids(ROOT / file), f"{file}::{test} (named for {cells[0]}) does not exist"


def _public(module):
    names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
    for name in names:
        obj = getattr(module, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"{module.__name__}.{name}", obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if inspect.isfunction(member) and not attr.startswith("_"):
                        yield f"{module.__name__}.{name}.{attr}", member


def _documented(doc: str) -> list[str]:
    """The parameter names of a Google-style ``Args:`` section (``p, q:`` names two)."""
    match = re.search(r"^([ \t]*)Args:\n((?:\1[ \t]+.*\n?|[ \t]*\n)+)", doc, flags=re.M)
    if not match:
        return []
    indent = min(len(line) - len(line.lstrip()) for line in match.group(2).splitlines() if line.strip())
    names = []
    for line in match.group(2).splitlines():
        if line.strip() and len(line) - len(line.lstrip()) == indent:
            head = re.match(r"\s*([\w*][\w, *]*?)\s*(\(.*\))?:", line)
            if head:
                names += [n.strip().lstrip("*") for n in head.group(1).split(",")]
    return names


def test_every_documented_parameter_is_in_the_signature():
    stale = []
    checked = 0
    for module_name in API:
        module = importlib.import_module(module_name)
        for qualified, obj in _public(module):
            doc = inspect.getdoc(obj) or ""
            target = obj.__init__ if inspect.isclass(obj) else obj
            try:
                params = set(inspect.signature(target).parameters)
            except (TypeError, ValueError):
                continue
            if inspect.isclass(obj) and {"args", "kwargs"} >= params - {"self"}:
                continue
            for name in _documented(doc):
                checked += 1
                if name not in params:
                    stale.append(f"{qualified}: {name}")
    assert checked > 100
    assert not stale, f"documented but not in the signature: {stale}"


def _json_keys(page: str) -> dict[str, list[str]]:
    """Each command section's ``JSON:`` list."""
    keys, command = {}, None
    for line in page.splitlines():
        if line.startswith("## speculab "):
            command = line[len("## speculab "):]
        elif line.startswith("JSON: `") and command is not None:
            keys[command] = re.findall(r"`(\w+)`", line)
        elif line.startswith("`speculab repro all` — JSON: "):
            keys["repro all"] = re.findall(r"`(\w+)`", line.split("JSON:")[1]
                                           + "".join(page.split(line)[1].split("\n\n")[0]))
    return keys


def test_the_cli_page_lists_the_json_keys_each_command_prints(tmp_path, capsys):
    documented = _json_keys((DOCS / "cli.md").read_text())
    out = str(tmp_path / "out")
    argv = {
        "theory rejections": ["theory", "rejections", "--T", "4", "--V", "3"],
        "theory batch": ["theory", "batch", "--T", "4", "--V", "3", "--M", "1", "2"],
        "sim": ["sim", "--T", "4", "--V", "3", "--n-runs", "50"],
        "instance": ["instance", "--T", "3", "--V", "3", "--out", str(tmp_path / "i.npz")],
        "run": ["run", "--pair", "tiny", "--max-new-tokens", "2"],
        "compare": ["compare", "--pair", "tiny", "--prompt", "a", "--runs-per-prompt", "2", "--max-new-tokens", "2"],
        "validate": ["validate", "--device", "cpu", "--runs", "300", "--methods", "sd", "--compare-runs", "0",
                     "--no-speed"],
        "repro all": ["repro", "all", "--only", "yin-fig3", "--out", out],
        "report": ["report", "--out", out],
    }
    assert set(argv) <= set(documented), set(argv) - set(documented)
    for command, args in argv.items():
        assert main([*args, "--json"]) == 0, command
        printed = json.loads(capsys.readouterr().out)
        assert list(printed) == documented[command], command


def test_roles_become_code_links_and_tex():
    """The hook alone, on a page that defines two anchors: a full path links to its anchor, ``~`` shows the last
    component, a name that ends one anchor only links to it, an unknown or ambiguous one stays plain code."""
    sys.path.insert(0, str(ROOT))
    try:
        import mkdocs_hooks as hooks
    finally:
        sys.path.remove(str(ROOT))
    page = Path("site/api/index.html")
    anchors = {"speculab.sim.simulate": page, "speculab.theory.tv": page, "speculab.kernels.tv": page}
    suffixes = {"simulate": ["speculab.sim.simulate"], "tv": ["speculab.theory.tv", "speculab.kernels.tv"]}
    html = ("see :func:<code>speculab.sim.simulate</code>, :func:<code>~speculab.sim.simulate</code>, "
            ":func:<code>simulate</code>, :func:<code>tv</code>, :class:<code>Nowhere</code> and "
            ":math:<code>a &lt; b</code>")
    assert hooks.render_roles(html, page, anchors, suffixes) == (
        'see <a href="index.html#speculab.sim.simulate"><code>speculab.sim.simulate</code></a>, '
        '<a href="index.html#speculab.sim.simulate"><code>simulate</code></a>, '
        '<a href="index.html#speculab.sim.simulate"><code>simulate</code></a>, <code>tv</code>, '
        '<code>Nowhere</code> and <span class="arithmatex">\\(a &lt; b\\)</span>')
