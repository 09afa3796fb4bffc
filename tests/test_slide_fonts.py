"""No text on a slide is smaller than 20 pixels: every slide of every deck, as the book builds it,
rendered at 1280 x 720 in headless Chromium.

On each slide (shown as the deck shows it, one at a time, after MathJax typeset it) the test
reads the computed font size of every visible text: each text node with a box on the page
(headings, lists, tables, captions, printed output, code), each typeset formula
(``mjx-container``; MathJax's hidden copy for screen readers aside) and the generated text of
``::before`` and ``::after`` (the deck's title and the slide number). The smallest must be at
least ``SMALLEST_PX``, the size below which text is not read from the back of a lecture hall
(``docs/assets/slides.css``, ``--smallest``). The test prints the smallest size of each deck.

It reads the book that ``tests/test_book.py`` reads (the ``site`` fixture of ``tests/conftest.py``:
``mkdocs build --strict`` once per test run), and skips, saying why, where mkdocs, Playwright or a
Chromium executable is missing, unless ``REFATTN_EXTRAS_REQUIRED=1`` (set by ``.ci/run``), where that
is a failure. Figures are pictures: the size of their labels is the
notebooks' to set, not measured here.
"""

from __future__ import annotations

import pathlib

import pytest

from refattn.exercises.pdf import find_chromium

ROOT = pathlib.Path(__file__).resolve().parents[1]
DECKS = sorted((ROOT / "docs" / "slides").glob("*.md"))
pytestmark = [pytest.mark.slow, pytest.mark.extra]
#: The smallest font size, in CSS pixels on a 1280 x 720 slide, that any text may have.
SMALLEST_PX = 20

#: For each slide: the smallest font size of any visible text on it, and what that text is.
_SMALLEST_TEXT = r"""() => refattnDeck.slides.map((slide, i) => {
  refattnDeck.go(i);
  let px = Infinity, what = '';
  const note = (size, el, text) => {
    if (size < px) { px = size; what = `<${el.tagName.toLowerCase()}> ${text.trim().slice(0, 60)}`; }
  };
  const walk = document.createTreeWalker(slide, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const node = walk.currentNode, el = node.parentElement;
    if (!node.textContent.trim() || el.closest('mjx-assistive-mml, script, style')) continue;
    const style = getComputedStyle(el);
    if (style.visibility !== 'visible') continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const box = range.getBoundingClientRect();
    if (box.width && box.height) note(parseFloat(style.fontSize), el, node.textContent);
  }
  for (const math of slide.querySelectorAll('mjx-container')) {
    const box = math.getBoundingClientRect();
    if (box.width && box.height) note(parseFloat(getComputedStyle(math).fontSize), math, 'formula');
  }
  for (const el of [slide, ...slide.querySelectorAll('*')]) {
    for (const pseudo of ['::before', '::after']) {
      const style = getComputedStyle(el, pseudo);
      if (style.display !== 'none' && /^["a-z]/.test(style.content) && !/^(none|normal|"")$/.test(style.content))
        note(parseFloat(style.fontSize), el, `${pseudo} ${style.content}`);
    }
  }
  return {slide: i + 1, px, what};
})"""


def test_no_text_on_any_slide_is_smaller_than_20_px(site):  # noqa: F811
    from playwright.sync_api import sync_playwright

    small, smallest = [], {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        for deck in DECKS:
            page.goto((site / "slides" / f"{deck.stem}.html").as_uri(), wait_until="load")
            page.evaluate("() => MathJax.startup.promise")
            slides = page.evaluate(_SMALLEST_TEXT)
            assert slides and all(s["px"] < float("inf") for s in slides), f"{deck.stem}: a slide with no text"
            smallest[deck.stem] = min(s["px"] for s in slides)
            small += [f"slides/{deck.stem}.html, slide {s['slide']}: {s['px']:g} px: {s['what']}"
                      for s in slides if s["px"] < SMALLEST_PX]
        browser.close()
    print("\nslides: smallest font size per deck (px at 1280 x 720): "
          + ", ".join(f"{d} {px:g}" for d, px in smallest.items()))
    assert sorted(smallest) == [d.stem for d in DECKS]
    assert not small, f"text under {SMALLEST_PX} px on {len(small)} slides:\n" + "\n".join(small)
