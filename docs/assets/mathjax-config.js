// MathJax 3 configuration for the refattn book. MathJax itself is copied at
// build time from the django-static-mathjax wheel (docs/hooks.py), so pages
// typeset their math offline. pymdownx.arithmatex wraps every $...$ and
// $$...$$ in <span class="arithmatex">\(...\)</span> or \[...\].
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
    tags: "none"
  },
  options: {
    ignoreHtmlClass: ".*|",
    // the math in headings shows in the navigation, the table of contents and the header
    processHtmlClass: "arithmatex|md-ellipsis"
  },
  svg: { fontCache: "global" },
  loader: { load: [] }
};
