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
  loader: { load: [] },
  startup: {
    pageReady() {
      return MathJax.startup.defaultPageReady().then(fitDisplays);
    }
  }
};

// A display equation wider than the text column is scaled down to fit, so
// that its tag (01.R1, ...) stays visible instead of hiding behind a
// scrollbar. SVG output is sized in ex units, so a smaller font-size scales
// the whole equation. Runs after typesetting and again when the window
// changes width.
function fitDisplays() {
  for (const box of document.querySelectorAll('mjx-container[display="true"]')) {
    box.style.fontSize = "";
    const avail = box.parentElement.clientWidth;
    if (avail <= 0 || box.scrollWidth <= avail) continue;
    // a tag's spacing does not scale exactly with the font: shrink until it fits
    let pct = Math.floor(100 * avail / box.scrollWidth);
    box.style.fontSize = pct + "%";
    while (box.scrollWidth > avail && pct > 40) {
      pct -= 2;
      box.style.fontSize = pct + "%";
    }
  }
}
window.addEventListener("resize", () => { if (window.MathJax && MathJax.startup) fitDisplays(); });
