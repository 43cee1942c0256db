// MathJax reads the inline TeX of the pages ($…$, which pymdownx.arithmatex turns into <span class="arithmatex">)
// and what mkdocs_hooks.py makes of the docstrings' :math: roles; it touches nothing else. tests/test_docs.py
// typesets the mathematics page with the same settings in MathJax 2 (MATHJAX_PROBE): keep the two alike.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true },
  options: { processHtmlClass: "arithmatex", ignoreHtmlClass: ".*" },
};
