// Printing a page of the refattn book to PDF (docs/teaching.py opens it with "?pdf"): a link to
// another page of the site would point at the build machine's files inside the PDF, so every
// link that leaves the page becomes its plain text; links within the page stay.
(function () {
  "use strict";
  if (!/[?&]pdf\b/.test(location.search)) return;
  function unlink() {
    for (const a of Array.from(document.querySelectorAll("a[href]"))) {
      if (a.getAttribute("href").startsWith("#")) continue;
      const span = document.createElement("span");
      span.className = a.className;
      while (a.firstChild) span.appendChild(a.firstChild);
      a.replaceWith(span);
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", unlink);
  else unlink();
})();
