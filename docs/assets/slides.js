// The refattn slide decks: one slide at a time, scaled to fit the window.
// Keys: right, down, space, page down: next; left, up, page up: previous;
// home, end: first, last. The address ends in #N for slide N, so a slide can
// be linked to and reloaded. Printing (Ctrl+P) gives one slide per page
// (assets/slides.css). Works opened from disk, with no network.
(function () {
  "use strict";
  const slides = Array.from(document.querySelectorAll("section.slide"));
  if (!slides.length) return;
  const deck = document.querySelector(".deck");
  let current = 0;

  function fromHash() {
    const n = parseInt((location.hash || "").replace(/^#(slide-)?/, ""), 10);
    return Number.isFinite(n) ? Math.min(Math.max(n, 1), slides.length) - 1 : 0;
  }

  function fit() {
    const scale = Math.min(window.innerWidth / 1280, window.innerHeight / 720);
    const left = Math.max(0, (window.innerWidth - 1280 * scale) / 2);
    const top = Math.max(0, (window.innerHeight - 720 * scale) / 2);
    deck.style.transform = `translate(${left}px, ${top}px) scale(${scale})`;
  }

  function go(i) {
    current = Math.min(Math.max(i, 0), slides.length - 1);
    slides.forEach((s, k) => s.classList.toggle("current", k === current));
    const hash = `#${current + 1}`;
    if (location.hash !== hash) history.replaceState(null, "", hash);
  }

  document.body.classList.add("deck-js");
  fit();
  go(fromHash());
  window.addEventListener("resize", fit);
  window.addEventListener("hashchange", () => go(fromHash()));
  document.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const next = ["ArrowRight", "ArrowDown", "PageDown", " "], prev = ["ArrowLeft", "ArrowUp", "PageUp"];
    if (next.includes(e.key)) go(current + 1);
    else if (prev.includes(e.key)) go(current - 1);
    else if (e.key === "Home") go(0);
    else if (e.key === "End") go(slides.length - 1);
    else return;
    e.preventDefault();
  });
  document.querySelector(".deck-next")?.addEventListener("click", () => go(current + 1));
  document.querySelector(".deck-prev")?.addEventListener("click", () => go(current - 1));
  // for scripts (and the book's browser test): the slides, and a way to show one
  window.refattnDeck = { slides, go, current: () => current };
})();
