"""MkDocs hooks (``mkdocs.yml``: ``hooks:``): the docstrings' Sphinx roles rendered on the site.

speculab's docstrings cross-reference with Sphinx roles (``:func:`x```, ``:class:`~a.b.C```, ``:math:`…```), which
read well in ``help()`` and which mkdocstrings leaves as text. After the site is built this turns every role into
what it means: a reference becomes its name in code, linked to the object's entry in the API reference when one
has that anchor (``~`` shows the last component only); ``:math:`` becomes inline TeX that MathJax renders
(``docs/js/mathjax.js``). ``tests/test_docs.py`` builds the site and checks that no role is left.

The pages' own TeX (``$…$``, docs/mathematics.md) is pymdownx.arithmatex's (``mkdocs.yml``), which makes the same
``<span class="arithmatex">``; here the tables of formulas (columns result, statement, computed by, checked by) are
given the class ``formulas``, which ``docs/css/extra.css`` fits to the page width.

Two more of the docstrings' reStructuredText habits are read before mkdocstrings renders them
(:class:`SphinxDocstrings`, a griffe extension that ``mkdocs.yml`` names): a ``.. math::`` directive becomes a
display formula (arithmatex's ``$$`` block, so its TeX reaches MathJax untouched by Markdown), and an ``Example:``
section is read as griffe's ``Examples:``, whose ``>>>`` lines are shown as code, prompts and line breaks kept. A
code name in a table cell may break after a ``.``, ``_``, ``/`` or ``::`` (a ``<wbr>`` there), never inside a word
(``docs/css/extra.css``).

MathJax itself is part of the site: the docs extra (pyproject.toml) installs MathJax 3's files from PyPI
(django-static-mathjax, Apache 2.0, no dependencies) and :func:`on_files` adds the ones the pages use under
``js/mathjax/``, so the formulas render with no network (``tests/test_docs.py`` opens the built pages with the
network off).
"""

from __future__ import annotations

import json
import os
import re
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from griffe import Extension
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROLE = re.compile(r":(?:py:)?(func|class|meth|data|mod|attr|obj|exc):<code>(~?)([^<]+)</code>")
MATH = re.compile(r":math:<code>([^<]*)</code>")
TEXT_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|data|mod|attr|obj|exc|math):")
ID = re.compile(r'\bid="([A-Za-z_][\w.]*)"')
#: A ``.. math::`` directive: its indentation and what follows it on the line.
MATH_DIRECTIVE = re.compile(r"^([ \t]*)\.\. math::[ \t]*(.*)$")
LIST_ITEM = re.compile(r"^([ \t]*)(?:[*+-]|\d+\.)[ \t]+")
EXAMPLE = re.compile(r"^([ \t]*)Example:[ \t]*$", flags=re.M)
#: A table cell, and a code span in it with text only (a name, a path, a test id).
CELL = re.compile(r"(<t[dh][^>]*>)(.*?)(</t[dh]>)", flags=re.S)
CELL_CODE = re.compile(r"<code>([^<]*)</code>")
BREAK_AFTER = re.compile(r"(::|[./_])(?=\w)")
#: The distribution that ships MathJax 3's files, and those of them the site uses (``tex-chtml.js`` loads the rest
#: on demand: TeX extensions, fonts, the menu's accessibility tools).
MATHJAX = "django-static-mathjax"
MATHJAX_ROOT = "mathjax/static/mathjax/es5"
MATHJAX_PARTS = ("tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "a11y", "sre", "ui")
FORMULAS = re.compile(
    r"<table>(?=\s*<thead>\s*<tr>\s*<th>result</th>\s*<th>statement</th>\s*<th>computed by</th>"
    r"\s*<th>checked by</th>\s*</tr>)"
)


def _anchors(site: Path) -> dict[str, Path]:
    """Every dotted id a page of the site defines (mkdocstrings gives each object its full path), by page."""
    found: dict[str, Path] = {}
    for page in sorted(site.rglob("*.html")):
        for anchor in ID.findall(page.read_text(encoding="utf-8")):
            found.setdefault(anchor, page)
    return found


def _resolve(target: str, anchors: dict[str, Path], suffixes: dict[str, list[str]]) -> str | None:
    """The anchor a role's target names: itself, or the one object whose path ends with it."""
    target = target.removesuffix("()")
    if target in anchors:
        return target
    matches = suffixes.get(target.rsplit(".", 1)[-1], [])
    matches = [a for a in matches if a == target or a.endswith("." + target)]
    return matches[0] if len(matches) == 1 else None


def render_roles(html: str, page: Path, anchors: dict[str, Path], suffixes: dict[str, list[str]]) -> str:
    """``html`` (of ``page``) with its roles rendered (module docstring)."""

    def reference(match: re.Match) -> str:
        _, short, target = match.groups()
        shown = target.rsplit(".", 1)[-1] if short else target
        anchor = _resolve(target, anchors, suffixes)
        if anchor is None:
            return f"<code>{shown}</code>"
        href = os.path.relpath(anchors[anchor], page.parent).replace(os.sep, "/")
        return f'<a href="{href}#{anchor}"><code>{shown}</code></a>'

    html = MATH.sub(lambda m: f'<span class="arithmatex">\\({m.group(1)}\\)</span>', html)
    return ROLE.sub(reference, html)


def mark_formula_tables(html: str) -> str:
    """``html`` with each table of formulas (result, statement, computed by, checked by) of class ``formulas``."""
    return FORMULAS.sub('<table class="formulas">', html)


def math_directives(text: str) -> str:
    """``text`` (a docstring) with each ``.. math::`` directive as a ``$$`` block: the TeX that follows the directive
    on its line and on the more indented lines after it (or after one blank line), at the directive's indentation
    (or its list item's: :func:`_list_indent`)."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        match = MATH_DIRECTIVE.match(lines[i])
        i += 1
        if not match:
            out.append(lines[i - 1])
            continue
        indent, first = match.groups()
        body = [first] if first.strip() else []
        if not body and i + 1 < len(lines) and not lines[i].strip():
            i += 1
        while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > len(indent):
            body.append(lines[i].strip())
            i += 1
        indent = _list_indent(out, indent)
        out += [indent + "$$", *(indent + line for line in body), indent + "$$"]
    return "\n".join(out)


def _list_indent(before: list[str], indent: str) -> str:
    """The indentation a block at ``indent`` needs to stay in the list item whose paragraph ends just before it
    (Markdown's continuation is 4 spaces past the item's marker; reStructuredText's, the item's text column):
    ``indent`` itself after anything else."""
    end = len(before)
    while end > 0 and not before[end - 1].strip():
        end -= 1
    start = end
    while start > 0 and before[start - 1].strip():
        start -= 1
    item = LIST_ITEM.match(before[start]) if start < end else None
    return " " * (len(item.group(1)) + 4) if item and len(item.group(1)) < len(indent) else indent


def docstring_markdown(text: str) -> str:
    """``text`` (a docstring) as mkdocstrings should read it: ``.. math::`` as display maths, ``Example:`` as
    ``Examples:`` (module docstring)."""
    return EXAMPLE.sub(r"\1Examples:", math_directives(text))


class SphinxDocstrings(Extension):
    """The griffe extension that hands mkdocstrings each docstring as :func:`docstring_markdown` reads it."""

    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = docstring_markdown(obj.docstring.value)


def break_names(html: str) -> str:
    """``html`` with a ``<wbr>`` after each ``.``, ``_``, ``/`` and ``::`` inside a word of a table cell's code span:
    a long name may break there, and only there (extra.css breaks no word)."""

    def code(match: re.Match) -> str:
        return "<code>" + BREAK_AFTER.sub(r"\1<wbr>", match.group(1)) + "</code>"

    def cell(match: re.Match) -> str:
        return match.group(1) + CELL_CODE.sub(code, match.group(2)) + match.group(3)

    return CELL.sub(cell, html)


def _mathjax_files() -> list[tuple[str, Path]]:
    """(path in MathJax's folder, file) of every file the site uses of MathJax, its licence with them."""
    try:
        dist = distribution(MATHJAX)
    except PackageNotFoundError:
        raise PluginError(f"the site's MathJax comes from {MATHJAX}: pip install -e '.[docs]' (./dev docs)") from None
    root = Path(dist.locate_file(MATHJAX_ROOT))
    found = [("LICENSE", root.parent / "LICENSE")]  # MathJax's own (Apache 2.0)
    for part in MATHJAX_PARTS:
        files = [root / part] if (root / part).is_file() else sorted(p for p in (root / part).rglob("*") if p.is_file())
        if not files:
            raise PluginError(f"{MATHJAX} {dist.version} has no {part} in {root}")
        found += [(p.relative_to(root).as_posix(), p) for p in files]
    return found


def on_files(files, config, **kwargs):
    for name, path in _mathjax_files():
        files.append(File.generated(config, f"js/mathjax/{name}", abs_src_path=str(path)))
    return files


def on_page_content(html, **kwargs) -> str:
    return mark_formula_tables(html)


def on_post_build(config, **kwargs) -> None:
    site = Path(config["site_dir"])
    anchors = _anchors(site)
    suffixes: dict[str, list[str]] = {}
    for anchor in anchors:
        suffixes.setdefault(anchor.rsplit(".", 1)[-1], []).append(anchor)
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        rendered = break_names(render_roles(text, page, anchors, suffixes))
        if rendered != text:
            page.write_text(rendered, encoding="utf-8")
    index = site / "search" / "search_index.json"
    if index.exists():  # the search results show the text without the role markers
        data = json.loads(index.read_text(encoding="utf-8"))
        for doc in data.get("docs", []):
            doc["text"] = TEXT_ROLE.sub("", doc.get("text", ""))
        index.write_text(json.dumps(data), encoding="utf-8")
