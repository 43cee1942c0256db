"""MkDocs hooks (``mkdocs.yml``: ``hooks:``): the docstrings' Sphinx roles rendered on the site.

speculab's docstrings cross-reference with Sphinx roles (``:func:`x```, ``:class:`~a.b.C```, ``:math:`…```), which
read well in ``help()`` and which mkdocstrings leaves as text. After the site is built this turns every role into
what it means: a reference becomes its name in code, linked to the object's entry in the API reference when one
has that anchor (``~`` shows the last component only); ``:math:`` becomes inline TeX that MathJax renders
(``docs/js/mathjax.js``). ``tests/test_docs.py`` builds the site and checks that no role is left.

The pages' own TeX (``$…$``, docs/mathematics.md) is pymdownx.arithmatex's (``mkdocs.yml``), which makes the same
``<span class="arithmatex">``; here the tables of formulas (columns result, statement, computed by, checked by) are
given the class ``formulas``, which ``docs/css/extra.css`` fits to the page width.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

ROLE = re.compile(r":(?:py:)?(func|class|meth|data|mod|attr|obj|exc):<code>(~?)([^<]+)</code>")
MATH = re.compile(r":math:<code>([^<]*)</code>")
TEXT_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|data|mod|attr|obj|exc|math):")
ID = re.compile(r'\bid="([A-Za-z_][\w.]*)"')
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
        rendered = render_roles(text, page, anchors, suffixes)
        if rendered != text:
            page.write_text(rendered, encoding="utf-8")
    index = site / "search" / "search_index.json"
    if index.exists():  # the search results show the text without the role markers
        data = json.loads(index.read_text(encoding="utf-8"))
        for doc in data.get("docs", []):
            doc["text"] = TEXT_ROLE.sub("", doc.get("text", ""))
        index.write_text(json.dumps(data), encoding="utf-8")
