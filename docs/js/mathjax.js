// MathJax reads the inline TeX that mkdocs_hooks.py makes of the docstrings' :math: roles.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true },
  options: { processHtmlClass: "arithmatex", ignoreHtmlClass: ".*" },
};
