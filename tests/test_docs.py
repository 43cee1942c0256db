"""The documentation site: it builds with warnings as errors, what it names exists, and its mathematics renders.

The examples on its pages run as doctests (``pytest`` collects ``docs/*.md``, see pyproject.toml).
Here: the mathematics page's functions import and its tests exist, its formulas are TeX that the build hands to
MathJax and that parses (matplotlib's mathtext, no browser); the site as built, opened in a headless Chromium
1,400 px wide with the network off, renders every formula with the MathJax it ships (no CDN) and leaves no TeX as
text, on the mathematics page (where every table also fits the page), the API reference (where the docstrings'
``.. math::`` is displayed, each example is code with its ``>>>`` prompts, and no word of a table cell breaks in two)
and every other page with formulas; the home page's table lists every page; every parameter a public docstring
documents is in the signature (the check griffe's parser cannot make on "p, q: …" lines), and the command line page
lists the JSON keys each command prints. Each browser check is also run on a page broken on purpose, and must fail
there.
"""

import ast
import html
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
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CI = os.environ.get("CI") == "true"
needs_mkdocs = pytest.mark.skipif(MKDOCS is None and not CI, reason="needs mkdocs (pip install -e '.[docs]')")

#: The modules the API reference renders (docs/api.md's ::: lines).
API = re.findall(r"^::: (\S+)$", (DOCS / "api.md").read_text(), flags=re.M)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once for the module with ``mkdocs build --strict``."""
    assert MKDOCS is not None, "CI installs the docs extra (./dev)"
    folder = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [MKDOCS, "build", "--strict", "--site-dir", str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


@needs_mkdocs
def test_the_site_builds_with_warnings_as_errors(site):
    api = (site / "api" / "index.html").read_text()
    for name in ("sd_expected_rejections", "simulate", "decode", "assert_preserves_target_law", "build_report"):
        assert f'id="{name}' in api or f".{name}" in api, name  # rendered from the docstrings
    # the docstrings' Sphinx roles are rendered (mkdocs_hooks.py): none is left as text on any page, references
    # link to anchors that exist, and :math: is TeX for MathJax
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r":(func|class|meth|data|mod|attr|math):<", text), page
    links = re.findall(r'<a href="index.html#([\w.]+)"><code>', api)
    assert len(links) > 100 and all(f'id="{a}"' in api for a in links)
    assert api.count('class="arithmatex"') > 30 and "\\(" in api
    # the docstrings' .. math:: are display formulas and their examples code with the prompts (mkdocs_hooks.py);
    # the site carries its MathJax (from the docs extra) and the pages load it from there, not from a CDN
    assert ".. math::" not in api and api.count('<div class="arithmatex">') >= 40
    assert '<details class="example"' not in api and api.count('<span class="gp">&gt;&gt;&gt; </span>') >= 40
    assert (site / "js" / "mathjax" / "tex-chtml.js").is_file() and (site / "js" / "mathjax" / "LICENSE").is_file()
    assert '<script src="../js/mathjax/tex-chtml.js"></script>' in api and "cdn.jsdelivr" not in api


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


# -- the mathematics page's formulas: TeX in the source, MathJax's spans in the built page ------------------------
#: A formula as the build hands it to MathJax (pymdownx.arithmatex, and mkdocs_hooks.py for the docstrings).
SPAN = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', flags=re.S)
#: What a formula left as text would show: a TeX delimiter or command, or a Sphinx role.
RAW = re.compile(r"\$|\\[()\[\]]|\\[A-Za-z]+|:math:")
#: The characters of a formula written in Unicode, as the page's code spans once did, instead of TeX.
UNICODE_MATHS = set("ΣΠ½≤≥−∼‖⊆⊂⊄∖∞⊙≈√ρμηαβγτθεΔ²ᶜ′̃")
CODE = re.compile(r"<code>(.*?)</code>", flags=re.S)
#: The results whose statement is words only, no formula.
WORDS_ONLY = {"Exact counts over the horizon"}


def _main(page: str) -> str:
    """The built page's own content, without the theme's navigation, dialogs and scripts."""
    match = re.search(r'role="main">(.*?)<div class="modal"', page, flags=re.S)
    assert match, "the mkdocs theme's layout changed: find the page content anew"
    return match.group(1)


def _statements(page: str) -> list[tuple[str, str]]:
    """(result, statement) of every row of the built page's tables."""
    rows = []
    for table in re.findall(r"<table[^>]*>(.*?)</table>", _main(page), flags=re.S):
        for row in re.findall(r"<tr>(.*?)</tr>", table.split("</thead>")[-1], flags=re.S):
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)
            rows.append((cells[0], cells[1]))
    return rows


def _rendering_problems(page: str, source: str) -> list[str]:
    """What of the built mathematics page is not maths for MathJax: a statement without a formula, a raw delimiter,
    role or TeX command outside a formula, a formula left in a code span, a formula of the source missing."""
    problems = []
    main = _main(page)
    statements = _statements(page)
    if len(statements) != len(list(_table_cells(source))):
        problems.append(f"{len(statements)} table rows built, {len(list(_table_cells(source)))} in the source")
    for result, statement in statements:
        rest = SPAN.sub("", statement)
        if not SPAN.search(statement) and (result not in WORDS_ONLY or set(statement) & (UNICODE_MATHS | set("_^="))):
            problems.append(f"{result}: no formula")
        if RAW.search(CODE.sub("", rest)):
            problems.append(f"{result}: raw TeX outside a formula: {rest}")
        problems += [f"{result}: a formula in code: {c}" for c in CODE.findall(rest) if set(c) & UNICODE_MATHS]
    prose = re.sub(r"<table.*?</table>", "", main, flags=re.S)
    problems += [f"a formula in code: {c}" for c in CODE.findall(SPAN.sub("", prose)) if set(c) & UNICODE_MATHS]
    rest = CODE.sub("", SPAN.sub("", main))
    problems += [
        f"raw TeX outside a formula: …{rest[max(m.start() - 40, 0) : m.end() + 40]}…" for m in RAW.finditer(rest)
    ]
    formulas = re.findall(r"\$[^$]+\$", re.sub(r"`[^`\n]*`", "", source))
    if len(SPAN.findall(main)) != len(formulas):
        problems.append(f"{len(SPAN.findall(main))} formulas built, {len(formulas)} in the source")
    return problems


def _tex_problems(page: str) -> list[str]:
    """Every formula of the built page that matplotlib's mathtext (a subset of TeX) cannot parse, with its error."""
    from matplotlib.mathtext import MathTextParser

    parser = MathTextParser("path")
    problems = []
    for tex in SPAN.findall(_main(page)):
        try:
            parser.parse(f"${html.unescape(tex)}$")
        except ValueError as error:
            problems.append(f"{html.unescape(tex)}: {str(error).splitlines()[-1]}")
    return problems


@needs_mkdocs
def test_every_statement_of_the_mathematics_page_is_maths_for_mathjax(site):
    page = (site / "mathematics" / "index.html").read_text()
    source = (DOCS / "mathematics.md").read_text()
    assert len(_statements(page)) >= 40 and len(SPAN.findall(_main(page))) > 200
    assert _rendering_problems(page, source) == []

    # The check fails on a page whose statement is a code span again, keeps a raw delimiter or role, or lost one.
    first = SPAN.search(page.split("<tbody>")[1]).group(0)
    for broken in ("<code>TV(p, q) = ½ Σ abs(p − q)</code>", "$\\mathrm{TV}(p, q)$", ":math:<code>x</code>", ""):
        assert _rendering_problems(page.replace(first, broken), source), broken


@needs_mkdocs
def test_every_formula_of_the_mathematics_page_parses_as_tex(site):
    page = (site / "mathematics" / "index.html").read_text()
    assert _tex_problems(page) == []

    # A typo fails it: an unclosed brace in the first formula, an unknown command in the last.
    spans = SPAN.findall(_main(page))
    broken = page.replace(f"\\({spans[0]}\\)", f"\\({spans[0]} \\frac{{1}}{{2\\)", 1)
    broken = broken.replace(f"\\({spans[-1]}\\)", f"\\({spans[-1]} \\mathrn{{x}}\\)", 1)
    assert len(_tex_problems(broken)) == 2


#: What the probe reads in a page once its MathJax has typeset (or failed to load): the formulas and how many
#: MathJax rendered, raw TeX left as text, MathJax's errors, the examples' prompts in <pre> and outside it, the words
#: of a table cell laid out on two lines, and each table's fit. Chromium runs it at the end of a copy of the built
#: page, written beside it: the page's own scripts, MathJax the site ships included, run as they are.
PROBE = r"""<script>
window.addEventListener("load", function () {
  var mathjax = window.MathJax && window.MathJax.startup && window.MathJax.startup.promise;
  (mathjax || Promise.resolve()).then(function () { report(null); }, function (e) { report(String(e)); });
});
function textNodes(root, skip) {
  var found = [], walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (var n = walker.nextNode(); n; n = walker.nextNode()) if (!n.parentElement.closest(skip)) found.push(n);
  return found;
}
function report(failure) {
  var main = document.querySelector("[role=main]"), page = document.documentElement;
  var r = {window: window.innerWidth, page: [page.scrollWidth, page.clientWidth], failure: failure,
           mathjax: window.MathJax && window.MathJax.version || null, maths: 0, rendered: 0, raw: [], errors: [],
           prompts: 0, stray: [], blockquotes: main.querySelectorAll("blockquote").length, broken: [], tables: []};
  main.querySelectorAll(".arithmatex").forEach(function (m) {
    r.maths++;
    if (m.querySelector("mjx-container")) r.rendered++; else r.raw.push(m.textContent.slice(0, 100));
  });
  main.querySelectorAll("mjx-merror").forEach(function (e) {
    r.errors.push(e.getAttribute("data-mjx-error") || e.textContent);
  });
  textNodes(main, "mjx-container, code, pre, .arithmatex").forEach(function (n) {
    if (/\\[()\[\]]|\$\$|\$[^\s$][^$]*\$|\.\. math::|:math:/.test(n.data)) r.raw.push(n.data.trim().slice(0, 100));
    if (n.data.indexOf(">>>") >= 0) r.stray.push(n.data.trim().slice(0, 100));
  });
  main.querySelectorAll("pre").forEach(function (p) {
    r.prompts += p.textContent.split("\n").filter(function (l) { return /^>>>( |$)/.test(l); }).length;
  });
  var word = /[\p{L}\p{N}]+/gu;
  main.querySelectorAll("td, th").forEach(function (cell) {
    textNodes(cell, "mjx-container").forEach(function (n) {
      for (var m = word.exec(n.data); m; m = word.exec(n.data)) {
        var range = document.createRange();
        range.setStart(n, m.index);
        range.setEnd(n, m.index + m[0].length);
        var tops = new Set(Array.from(range.getClientRects(), function (b) { return Math.round(b.top); }));
        if (tops.size > 1) r.broken.push(m[0] + " in: " + cell.textContent.trim().slice(0, 80));
      }
      word.lastIndex = 0;
    });
  });
  main.querySelectorAll("table").forEach(function (t) {
    var box = t.getBoundingClientRect(), parent = t.parentElement, style = getComputedStyle(parent);
    var cells = Array.prototype.map.call(t.querySelectorAll("th, td"),
                                         function (c) { return c.scrollWidth - c.clientWidth; });
    r.tables.push({right: box.right, room: parent.getBoundingClientRect().right - parseFloat(style.paddingRight),
                   scroll: t.scrollWidth, client: t.clientWidth, cell: Math.max.apply(null, cells)});
  });
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(r);
  document.body.appendChild(pre);
}
</script>"""


def _no_network() -> list[str]:
    """The command prefix that runs a program with no network: a network namespace of its own (``unshare``, as root
    in CI), else nothing (Chromium's flags then resolve no host name)."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "--net", "true"], capture_output=True).returncode == 0:
        return [unshare, "--net"]
    return []


def _probe(folder: Path, tmp_path: Path, width: int = 1400, page: str | None = None) -> dict:
    """What :data:`PROBE` found in the built page of ``folder`` (or in ``page``, a changed copy of it) opened in
    headless Chromium with the network off, ``width`` CSS pixels wide, once MathJax has typeset."""
    built = page if page is not None else (folder / "index.html").read_text()
    assert built.count("</body>") == 1
    copy = folder / "probe.html"
    copy.write_text(built.replace("</body>", PROBE + "\n</body>"))
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--force-device-scale-factor=1",
        f"--window-size={width},1000",
        "--allow-file-access-from-files",
        "--virtual-time-budget=60000",
        "--dump-dom",
    ]
    try:
        done = subprocess.run(
            [*_no_network(), CHROMIUM, *flags, copy.as_uri()], timeout=300, capture_output=True, text=True
        )
    finally:
        copy.unlink()
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, flags=re.S)
    assert found, f"the page did not finish loading: {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def _overflows(probe: dict) -> list[dict]:
    """The tables wider than the page content, scrolling, or with a cell whose content sticks out."""
    return [t for t in probe["tables"] if t["right"] > t["room"] + 1 or t["scroll"] > t["client"] + 1 or t["cell"] > 1]


def _formulas(page: str) -> int:
    """The formulas of a built page that the build hands to MathJax: arithmatex's spans and blocks."""
    return len(re.findall(r'<(?:span|div) class="arithmatex">', _main(page)))


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not CI, reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)"
)


@pytest.mark.slow
@needs_mkdocs
@needs_chromium
def test_chromium_typesets_the_mathematics_page_offline_and_its_tables_fit_1400_px(site, tmp_path):
    assert CHROMIUM is not None, "CI must install chromium (.ci/run)"
    folder = site / "mathematics"
    built = (folder / "index.html").read_text()
    assert "https://" not in "".join(re.findall(r'<script src="([^"]*mathjax[^"]*)"', built)), "MathJax from a CDN"
    spans = len(SPAN.findall(_main(built)))
    tables = len(re.findall(r"<table", _main(built)))
    probe = _probe(folder, tmp_path)
    written = len(re.findall(r"^\| result \| statement \|", (DOCS / "mathematics.md").read_text(), re.M))
    assert probe["window"] == 1400 and tables == written >= 9 and len(probe["tables"]) == tables, probe
    assert probe["mathjax"] and probe["mathjax"].startswith("3."), probe  # the site's own MathJax, offline
    assert probe["failure"] is None and probe["errors"] == [] and probe["raw"] == [], probe
    assert probe["rendered"] == probe["maths"] == _formulas(built) == spans > 200, probe  # every formula
    assert _overflows(probe) == [] and probe["page"][0] <= probe["page"][1], probe
    assert probe["broken"] == [], probe["broken"]  # a name breaks at its dots, no word in two

    # Each check fails on a broken page: a TeX typo, and the tables without the site's CSS (extra.css).
    broken = built.replace("\\frac{1}{2}", "\\frac{1}{2}\\foo", 1).replace('<link href="../css/extra.css"', "<link ")
    probe = _probe(folder, tmp_path, page=broken)
    assert len(probe["errors"]) == 1 and "foo" in probe["errors"][0], probe["errors"]
    assert _overflows(probe), "without extra.css's column widths a table of formulas sticks out"


def _docstring_prompts() -> int:
    """The ``>>>`` lines of the docstrings the API reference renders — modules, their public names and the public
    members of their classes (their own docstrings: ``Estimate.ratio``'s example counts) — a name re-exported by a
    module that docs/api.md also renders counted once for each."""
    count = 0
    for module_name in API:
        module = importlib.import_module(module_name)
        docs = [module.__doc__ or ""] + [inspect.getdoc(obj) or "" for _, obj in _public(module)]
        docs += [
            getattr(member, "__doc__", None) or ""
            for _, obj in _public(module)
            if inspect.isclass(obj)
            for name, member in vars(obj).items()
            if not name.startswith("_")
            and isinstance(member, (property, classmethod, staticmethod, type(len), type(_public)))
        ]
        count += sum(len(re.findall(r"^\s*>>>", doc, flags=re.M)) for doc in docs)
    return count


@pytest.mark.slow
@needs_mkdocs
@needs_chromium
def test_chromium_shows_the_api_reference_offline_with_its_maths_and_examples(site, tmp_path):
    """The API page at 1,400 px with the network off: every formula rendered (the docstrings' ``:math:`` and
    ``.. math::``), none left as TeX; every example a block of code with its ``>>>`` prompts; no word of a table
    cell split over two lines. Each check fails on a page that has the fault."""
    assert CHROMIUM is not None, "CI must install chromium (.ci/run)"
    folder = site / "api"
    built = (folder / "index.html").read_text()
    directives = built.count('<div class="arithmatex">')
    probe = _probe(folder, tmp_path)
    assert probe["mathjax"] and probe["mathjax"].startswith("3.") and probe["failure"] is None, probe
    assert probe["errors"] == [] and probe["raw"] == [], probe
    assert probe["rendered"] == probe["maths"] == _formulas(built) > 100 and directives >= 40, probe
    assert probe["stray"] == [] and probe["blockquotes"] == 0, probe
    assert probe["prompts"] >= _docstring_prompts() > 40, probe
    assert probe["broken"] == [] and probe["page"][0] <= probe["page"][1], probe["broken"]

    # The faults of a page built without mkdocs_hooks.py's work, put back: a directive as text, an example as
    # nested quotes, a name that breaks anywhere.
    first_block = re.search(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', built, flags=re.S)
    faulty = built.replace(first_block.group(0), f"<p>.. math:: {first_block.group(1)}</p>", 1)
    example = re.search(r'<div class="highlight"><pre><span></span><code><span class="gp">.*?</pre></div>', built, re.S)
    lines = re.sub(r"<[^>]+>|&gt;&gt;&gt; ", "", example.group(0))
    quoted = f"<blockquote><blockquote><blockquote><p>{lines}</p></blockquote></blockquote></blockquote>"
    faulty = faulty.replace(example.group(0), quoted, 1)
    faulty = faulty.replace("</head>", "<style>td code { overflow-wrap: anywhere; }</style></head>", 1)
    probe = _probe(folder, tmp_path, page=faulty)
    assert len(probe["raw"]) == 1 and probe["rendered"] == probe["maths"] == _formulas(built) - 1, probe["raw"]
    assert probe["blockquotes"] == 3 and probe["prompts"] < _docstring_prompts(), probe
    assert probe["broken"], "a narrow column's code may break anywhere: the check must see it"


@pytest.mark.slow
@needs_mkdocs
@needs_chromium
def test_chromium_renders_every_formula_of_the_other_pages_offline(site, tmp_path):
    """The pages with formulas besides the mathematics page and the API reference (tested above)."""
    assert CHROMIUM is not None, "CI must install chromium (.ci/run)"
    folders = [p.parent for p in sorted(site.rglob("index.html")) if _formulas(p.read_text())]
    others = [f for f in folders if f.name not in ("mathematics", "api")]
    assert {"mathematics", "api"} < {f.name for f in folders} and others
    for folder in others:
        probe = _probe(folder, tmp_path)
        assert probe["mathjax"] and probe["failure"] is None and probe["errors"] == [] and probe["raw"] == [], probe
        assert probe["rendered"] == probe["maths"] == _formulas((folder / "index.html").read_text()) > 0, folder


@needs_mkdocs
def test_the_home_page_table_lists_every_page_of_the_site(site):
    import yaml  # mkdocs's

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages = [next(iter(entry.values())) for entry in nav]
    home = (site / "index.html").read_text()
    table = re.search(r'<h2 id="where-to-go">.*?<table>(.*?)</table>', home, flags=re.S)
    assert table, "the home page's table of pages (## Where to go) is gone"
    linked = re.findall(r'<td><a href="([^"#]+)/">', table.group(1))
    assert linked == [page.removesuffix(".md") for page in pages if page != "index.md"]


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
            command = line[len("## speculab ") :]
        elif line.startswith("JSON: `") and command is not None:
            keys[command] = re.findall(r"`(\w+)`", line)
        elif line.startswith("`speculab repro all` — JSON: "):
            keys["repro all"] = re.findall(
                r"`(\w+)`", line.split("JSON:")[1] + "".join(page.split(line)[1].split("\n\n")[0])
            )
    return keys


def test_the_cli_page_lists_the_json_keys_each_command_prints(tmp_path, capsys):
    documented = _json_keys((DOCS / "cli.md").read_text())
    out = str(tmp_path / "out")
    argv = {
        "theory rejections": ["theory", "rejections", "--T", "4", "--V", "3"],
        "theory batch": ["theory", "batch", "--T", "4", "--V", "3", "--M", "1", "2"],
        "sim": ["sim", "--T", "4", "--V", "3", "--n-runs", "50"],
        "instance": ["instance", "--T", "3", "--V", "3", "--out", str(tmp_path / "i.npz")],
        "certify": ["certify", "--method", "sd", "--K", "1", "--V", "2", "--no-search"],
        "run": ["run", "--pair", "tiny", "--max-new-tokens", "2"],
        "compare": ["compare", "--pair", "tiny", "--prompt", "a", "--runs-per-prompt", "2", "--max-new-tokens", "2"],
        "validate": [
            "validate",
            "--device",
            "cpu",
            "--runs",
            "300",
            "--methods",
            "sd",
            "--compare-runs",
            "0",
            "--no-speed",
        ],
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
    html = (
        "see :func:<code>speculab.sim.simulate</code>, :func:<code>~speculab.sim.simulate</code>, "
        ":func:<code>simulate</code>, :func:<code>tv</code>, :class:<code>Nowhere</code> and "
        ":math:<code>a &lt; b</code>"
    )
    assert hooks.render_roles(html, page, anchors, suffixes) == (
        'see <a href="index.html#speculab.sim.simulate"><code>speculab.sim.simulate</code></a>, '
        '<a href="index.html#speculab.sim.simulate"><code>simulate</code></a>, '
        '<a href="index.html#speculab.sim.simulate"><code>simulate</code></a>, <code>tv</code>, '
        '<code>Nowhere</code> and <span class="arithmatex">\\(a &lt; b\\)</span>'
    )


def _hooks():
    sys.path.insert(0, str(ROOT))
    try:
        import mkdocs_hooks
    finally:
        sys.path.remove(str(ROOT))
    return mkdocs_hooks


def test_docstrings_math_directives_become_display_maths_and_examples_code():
    """The griffe extension's reading of a docstring: a ``.. math::`` directive (TeX on its line, on more indented
    lines after it, or after a blank line; in a list item too) becomes a ``$$`` block, ``Example:`` ``Examples:``."""
    hooks = _hooks()
    doc = "\n".join(
        [
            "Intro.",
            "",
            r".. math:: a \| b,",
            r"          c_{d},",
            "",
            "* **item** text,",
            "",
            r"  .. math:: x \leftarrow y",
            "",
            "  after.",
            "",
            ".. math::",
            "",
            "    z = 1",
            "",
            "Example:",
            "  >>> 1 + 1",
            "  2",
        ]
    )
    assert hooks.docstring_markdown(doc).splitlines() == [
        "Intro.",
        "",
        "$$",
        r"a \| b,",
        r"c_{d},",
        "$$",
        "",
        "* **item** text,",
        "",
        "    $$",
        r"    x \leftarrow y",
        "    $$",
        "",
        "  after.",
        "",
        "$$",
        "z = 1",
        "$$",
        "",
        "Examples:",
        "  >>> 1 + 1",
        "  2",
    ]


def test_code_names_in_table_cells_break_after_dots_only():
    hooks = _hooks()
    page = "<p><code>a.b</code></p><table><tr><td><code>speculab.sim.run_x</code> and <code>t.py::test_a</code></td>"
    assert hooks.break_names(page) == (
        "<p><code>a.b</code></p><table><tr><td><code>speculab.<wbr>sim.<wbr>run_<wbr>x</code> and "
        "<code>t.<wbr>py::<wbr>test_<wbr>a</code></td>"
    )


def test_the_hook_marks_the_tables_of_formulas_only():
    """extra.css sizes the columns of the tables the hook marks: those headed result, statement, computed by,
    checked by."""
    sys.path.insert(0, str(ROOT))
    try:
        import mkdocs_hooks as hooks
    finally:
        sys.path.remove(str(ROOT))
    head = "<table>\n<thead>\n<tr>\n<th>{}</th>\n<th>statement</th>\n<th>computed by</th>\n<th>checked by</th>\n</tr>"
    page = head.format("result") + "\n" + head.format("page")
    assert hooks.mark_formula_tables(page) == page.replace("<table>", '<table class="formulas">', 1)
