// MathJax (3, the site's own copy under js/mathjax/, which mkdocs_hooks.py adds from the docs extra) reads the
// inline TeX of the pages ($…$, which pymdownx.arithmatex turns into <span class="arithmatex">), the display
// formulas ($$…$$ and the docstrings' .. math::, <div class="arithmatex">) and what mkdocs_hooks.py makes of the
// docstrings' :math: roles; it touches nothing else. An undefined command is an error (no noundefined package), which
// tests/test_docs.py counts when it opens the built pages in Chromium with the network off.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    packages: { "[-]": ["noundefined"] },
  },
  options: { processHtmlClass: "arithmatex", ignoreHtmlClass: ".*" },
};
