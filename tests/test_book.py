"""The book (mkdocs.yml, docs/hooks.py) builds with ``mkdocs build --strict``
and every page works in a real browser opened from disk with no network.

Headless Chromium (Debian's ``chromium``, driven by Playwright's Python
client) opens each page of the built site and the test fails on: a
JavaScript error or a console error, a request for anything but a local
file, math that MathJax left as raw TeX or could not typeset, an image that
does not load, an internal link to a missing file or to a missing anchor, a
display equation wider than the page at 1280 pixels (its tag would hide
behind a scrollbar); and it checks that the learning path's derivations show
their step blocks executed, each with its output (derivation 01: all 13).
It saves a screenshot of derivation 01 and of notebook 01 and prints where.
At 1280 x 800 the landing page's first screen shows where to start (the
"start here" box with its link to the overview, and the set-up commands),
and no code block of the page scrolls sideways; a screenshot of that screen
is saved too.

The slide decks (``docs/slides/``) are pages like the others, and more: at
1280 x 720 every slide of every deck holds its content inside its margins
(nothing cut off, no scrollbar, no code block that scrolls), the arrow keys
page through the slides and the address follows, every figure a deck cites
is one the build drew, and each deck's PDF has one page per slide. Each
problem set's PDF (``problems/part-N.pdf``, printed by headless Chromium
during the build) has a page per exercise, each exercise title of its part,
typeset math, and no line of any model solution
(``instructor/solutions/``, between the solution markers).

It skips, saying why, when mkdocs (``pip install ".[docs]"``), Playwright or
pypdf (``".[browser]"``) or a Chromium executable is missing, unless
``REFATTN_EXTRAS_REQUIRED=1`` (set by ``.ci/run``), where a missing piece is a
failure (the ``site`` fixture, ``tests/conftest.py``). ``REFATTN_BOOK_SITE=DIR`` checks a site already built there instead
of building one; ``REFATTN_BOOK_SHOTS=DIR`` says where the screenshots go
(default: a temporary folder); ``REFATTN_CHROMIUM`` names the browser.
"""

from __future__ import annotations

import html
import os
import pathlib
import re
import time
from urllib.parse import unquote, urlsplit

import pytest

from tests.exercises.teaching_checks import leaked

from refattn.exercises import EXERCISES, PARTS
from refattn.exercises.pdf import find_chromium

ROOT = pathlib.Path(__file__).resolve().parents[1]
DECKS = sorted((ROOT / "docs" / "slides").glob("*.md"))
pytestmark = [pytest.mark.slow, pytest.mark.extra]


_IDS = re.compile(r"""\bid=["']([^"']+)["']""")


def _ids(path: pathlib.Path, cache: dict) -> set[str]:
    if path not in cache:
        cache[path] = {html.unescape(i) for i in _IDS.findall(path.read_text(encoding="utf-8"))}
    return cache[path]


_CHECK_PAGE = r"""() => {
  const out = {unrendered: [], errors: [], raw: [], images: [], broken: [], links: []};
  for (const el of document.querySelectorAll('.arithmatex'))
    if (!el.querySelector('mjx-container')) out.unrendered.push(el.textContent.slice(0, 80));
  for (const el of document.querySelectorAll('[data-mjx-error], mjx-merror'))
    out.errors.push(el.getAttribute('data-mjx-error') || el.textContent.slice(0, 80));
  const root = document.querySelector('article') || document.body;
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const n = walk.currentNode;
    if (n.parentElement.closest('pre, code, mjx-container, script, style, .arithmatex')) continue;
    const t = n.textContent;
    if (/\\[a-zA-Z]{2,}|\$\$|\\\(|\\\[|\$[^$\s][^$]*\$/.test(t)) out.raw.push(t.trim().slice(0, 100));
  }
  for (const img of root.querySelectorAll('img')) {
    out.images.push(img.getAttribute('src'));
    if (!img.complete || img.naturalWidth === 0) out.broken.push(img.getAttribute('src'));
  }
  for (const a of document.querySelectorAll('a[href]')) out.links.push(a.href);
  // step blocks: the source, then a non-empty output
  out.steps = 0;
  for (const b of root.querySelectorAll('.step-block')) {
    const parts = b.querySelectorAll(':scope > .highlight');
    if (parts.length === 2 && parts[1].textContent.trim()) out.steps += 1;
  }
  // a display equation wider than its column would hide its tag behind a scrollbar
  out.wide = [];
  for (const box of root.querySelectorAll('mjx-container[display="true"]')) {
    const col = box.closest('.arithmatex') || box.parentElement;
    if (col.scrollWidth > col.clientWidth + 1) out.wide.push(box.textContent.slice(0, 60) || col.textContent.slice(0, 60));
  }
  return out;
}"""


def test_book_pages_in_chromium(site, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    # 404.html is for a web server (absolute URLs from the site root); not a page of the book
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")
    rel = {p.relative_to(site).as_posix() for p in pages}
    # every derivation, notebook, exercise statement and slide deck has its page; no solution does
    for src, page in ([(p, f"derivations/{p.stem}.html") for p in (ROOT / "derivations").glob("*.md")]
                      + [(p, f"notebooks/{p.stem}.html") for p in (ROOT / "notebooks").glob("[0-9]*.py")]
                      + [(p, f"exercises/{p.stem}.html") for p in (ROOT / "exercises").glob("[0-9]*.md")]
                      + [(p, f"slides/{p.stem}.html") for p in DECKS]):
        assert page in rel, f"{src.relative_to(ROOT)} has no page {page} in the book"
    assert {f"problems/part-{n}.html" for n in PARTS} <= rel, "a problem set per part"
    assert not any("solution" in r for r in rel), "exercise solutions must stay out of the book"

    shots = pathlib.Path(os.environ.get("REFATTN_BOOK_SHOTS") or tmp_path_factory.mktemp("book-shots"))
    shots.mkdir(parents=True, exist_ok=True)
    problems, figures, steps, ids_cache = [], {}, {}, {}
    t0 = time.perf_counter()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 1000}, offline=True)
        network = []

        def route(r):
            url = r.request.url
            if url.startswith(("file://", "data:", "blob:", "about:")):
                r.continue_()
            else:
                network.append(url)
                r.abort()

        context.route("**/*", route)
        page = context.new_page()
        events = []
        page.on("pageerror", lambda e: events.append(f"JavaScript error: {e}"))
        page.on("console", lambda m: events.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        # ERR_ABORTED: a load cut short by the next navigation (the favicon), not a missing file
        page.on("requestfailed", lambda q: None if "ERR_ABORTED" in (q.failure or "")
                else events.append(f"request failed: {q.url} ({q.failure})"))
        for path in pages:
            name = path.relative_to(site).as_posix()
            events.clear()
            network.clear()
            page.goto(path.as_uri(), wait_until="load")
            if page.evaluate("() => !!(window.MathJax && MathJax.startup)"):
                page.evaluate("() => MathJax.startup.promise")
            got = page.evaluate(_CHECK_PAGE)
            here = [*events, *(f"network request: {u}" for u in network)]
            here += [f"math not typeset: {t!r}" for t in got["unrendered"]]
            here += [f"TeX error: {t!r}" for t in got["errors"]]
            here += [f"raw TeX in the text: {t!r}" for t in got["raw"]]
            here += [f"image does not load: {s}" for s in got["broken"]]
            here += [f"display equation wider than the page at 1280 px: {s!r}" for s in got["wide"]]
            for url in got["links"]:
                parts = urlsplit(url)
                if parts.scheme != "file":
                    continue
                target = pathlib.Path(unquote(parts.path))
                if target.is_dir():
                    target = target / "index.html"
                if not target.exists():
                    here.append(f"broken link: {url}")
                elif parts.fragment and target.suffix == ".html" \
                        and unquote(parts.fragment) not in _ids(target, ids_cache):
                    here.append(f"broken anchor: {url}")
            if name.startswith("notebooks/"):
                figures[name] = len(got["images"])
            if name.startswith("derivations/"):
                steps[name] = got["steps"]
            if name == "derivations/01-reweighted-softmax.html":
                page.screenshot(path=str(shots / "derivation-01.png"))
            if name == "notebooks/01_activations_tour.html":
                page.locator("article img").nth(0).scroll_into_view_if_needed()
                page.evaluate("() => window.scrollBy(0, -120)")
                page.screenshot(path=str(shots / "notebook-01.png"))
            problems += [f"{name}: {p}" for p in here]
        # search runs from file:// through docs/assets/iframe-worker/worker.js, offline
        events.clear()
        page.goto((site / "index.html").as_uri(), wait_until="load")
        try:
            page.fill("input.md-search__input", "tanhmax", timeout=15000)
            page.wait_for_selector(".md-search-result__item", timeout=15000)
        except Exception:  # noqa: BLE001 - a timeout is the failure reported below
            problems.append("search: no result for 'tanhmax' within 15 s, offline from file://")
        problems += [f"search: {e}" for e in events]
        browser.close()
    print(f"\nbook: {len(pages)} pages checked in Chromium in {time.perf_counter() - t0:.1f} s; "
          f"{sum(figures.values())} figures on {len(figures)} notebook pages")
    print(f"book: screenshots in {shots}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:60])
    assert all(n > 0 for n in figures.values()), f"a notebook page shows no figure: {figures}"
    assert sum(figures.values()) >= 20, figures
    # the learning path's derivations show their step blocks executed, each with its output
    for page in ("00-overview", "01-reweighted-softmax", "02-scores", "03-proposition-1", "22-central-differences"):
        assert steps.get(f"derivations/{page}.html", 0) >= 5, f"derivations/{page}: {steps.get(f'derivations/{page}.html')} executed step blocks with output"
    assert steps["derivations/01-reweighted-softmax.html"] >= 13, steps


# --------------------------------------------------------------------------
# The slide decks and the problem sets
# --------------------------------------------------------------------------

#: Each slide's content inside the slide's padding (MathJax's hidden MathML for screen readers
#: aside), no code block or table that scrolls, and the page without scrollbars.
_CHECK_DECK = r"""() => {
  const out = {slides: refattnDeck.slides.length, spill: [], scroll: [], images: []};
  refattnDeck.slides.forEach((s, i) => {
    const box = s.getBoundingClientRect(), st = getComputedStyle(s);
    const left = box.left + parseFloat(st.paddingLeft), right = box.right - parseFloat(st.paddingRight);
    const top = box.top + parseFloat(st.paddingTop), bottom = box.bottom - parseFloat(st.paddingBottom);
    const spilt = [];
    for (const el of s.querySelectorAll('*')) {
      if (el.closest('mjx-assistive-mml') || spilt.some(p => p.contains(el))) continue;
      const r = el.getBoundingClientRect();
      if (!r.width && !r.height) continue;
      if (r.left < left - 1 || r.right > right + 1 || r.top < top - 1 || r.bottom > bottom + 1) {
        spilt.push(el);  // its descendants are not reported again
        out.spill.push(`slide ${i + 1}: <${el.tagName.toLowerCase()} class="${el.getAttribute('class') || ''}"> ` +
                       `${(el.textContent || '').trim().slice(0, 40)}... ends ${Math.round(r.right - right)} px ` +
                       `right of the margin, ${Math.round(r.bottom - bottom)} px below it`);
      }
    }
    for (const el of s.querySelectorAll('pre, table, .arithmatex, .column'))
      if (el.scrollWidth > el.clientWidth + 1)
        out.scroll.push(`slide ${i + 1}: <${el.tagName.toLowerCase()}> ${el.scrollWidth} px wide in ${el.clientWidth}`);
    for (const img of s.querySelectorAll('img')) out.images.push(img.getAttribute('src'));
  });
  const doc = document.documentElement;
  out.page = [doc.scrollWidth, window.innerWidth, doc.scrollHeight, window.innerHeight];
  return out;
}"""


def _pdf_text(path):
    from pypdf import PdfReader

    reader = PdfReader(str(path))
    _no_links_off_the_page(reader, path)
    return len(reader.pages), " ".join(page.extract_text() for page in reader.pages)


def _no_links_off_the_page(reader, path):
    """A PDF carries no link to a file of the build machine (or anywhere else off the document)."""
    for number, page in enumerate(reader.pages, 1):
        for annot in page.get("/Annots") or []:
            action = annot.get_object().get("/A") or {}
            uri = action.get("/URI")
            assert uri is None, f"{path.name}, page {number}: a link to {uri}"


def test_slide_decks_fit_page_and_print(site):
    from playwright.sync_api import sync_playwright

    problems, counts = [], {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        errors = []
        page.on("pageerror", lambda e: errors.append(f"JavaScript error: {e}"))
        page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        for deck in DECKS:
            name = f"slides/{deck.stem}.html"
            page.goto((site / name).as_uri(), wait_until="load")
            page.evaluate("() => MathJax.startup.promise")
            got = page.evaluate(_CHECK_DECK)
            counts[deck.stem] = got["slides"]
            problems += [f"{name}: {p}" for p in got["spill"] + got["scroll"]]
            width, inner_w, height, inner_h = got["page"]
            if width > inner_w or height > inner_h:
                problems.append(f"{name}: the page is {width} x {height} px in a {inner_w} x {inner_h} window")
            # every figure the source cites is one the build drew, and the deck shows it
            for fig in re.findall(r"\]\(figure:([\w-]+)\)", deck.read_text(encoding="utf-8")):
                if not list(site.glob(f"notebooks/*/{fig}.png")):
                    problems.append(f"{name}: cites figure:{fig}, which the build did not draw")
                if not any(src.endswith(f"/{fig}.png") for src in got["images"]):
                    problems.append(f"{name}: does not show figure:{fig}")
            # one slide at a time, paged by the keys, the address following
            shown = "() => refattnDeck.slides.map(s => getComputedStyle(s).visibility === 'visible')"
            page.keyboard.press("ArrowRight")
            if page.evaluate("() => [refattnDeck.current(), location.hash]") != [1, "#2"]:
                problems.append(f"{name}: the right arrow did not show slide 2 at #2")
            if page.evaluate(shown) != [k == 1 for k in range(got["slides"])]:
                problems.append(f"{name}: not exactly slide 2 visible after the right arrow")
            page.keyboard.press("End")
            if page.evaluate("() => refattnDeck.current()") != got["slides"] - 1:
                problems.append(f"{name}: End did not show the last slide")
            page.goto((site / name).as_uri() + "#3", wait_until="load")
            if page.evaluate("() => refattnDeck.current()") != 2:
                problems.append(f"{name}: #3 in the address did not open slide 3")
            problems += [f"{name}: {e}" for e in errors]
            errors.clear()
        browser.close()
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])
    assert all(n >= 8 for n in counts.values()), counts
    # the deck's PDF, printed by the build: one page per slide, math typeset
    for deck in DECKS:
        pdf = site / "slides" / f"{deck.stem}.pdf"
        assert pdf.is_file(), f"no slides/{pdf.name}: the build prints it with headless Chromium"
        pages, text = _pdf_text(pdf)
        assert pages == counts[deck.stem], f"slides/{deck.stem}.pdf: {pages} pages for {counts[deck.stem]} slides"
        assert not re.search(r"\\\(|\\\[|\\frac|\$\$", text), f"slides/{deck.stem}.pdf has raw TeX"
        # the test build runs the notebooks small, and the deck says so beside its numbers
        assert "small size the tests use" in " ".join(text.split()), f"slides/{deck.stem}.pdf: no word of the size"
        assert _credited(text), f"slides/{deck.stem}.pdf: no credit line"


@pytest.mark.parametrize("part", sorted(PARTS))
def test_problem_set_pdf_has_its_exercises_and_no_solution(site, part):
    pdf = site / "problems" / f"part-{part}.pdf"
    assert pdf.is_file(), f"no {pdf.relative_to(site)}: the build prints it with headless Chromium"
    pages, text = _pdf_text(pdf)
    mine = [ex for ex in EXERCISES if ex.part == part]
    assert pages >= 1 + len(mine), f"{pdf.name}: {pages} pages; each of its {len(mine)} exercises starts a page"
    squeezed = "".join(text.split())
    for ex in EXERCISES:
        found = "".join(f"Exercise {ex.number}: {ex.title}".split()) in squeezed
        assert found == (ex.part == part), f"{pdf.name}: exercise {ex.number} ({ex.title}) {'missing' if not found else 'is of part ' + str(ex.part)}"
    assert f"Difficulty {mine[0].difficulty} of 3" in text
    assert not re.search(r"\\\(|\\\[|\\frac|\$\$", text), f"{pdf.name} has raw TeX: MathJax had not typeset it"
    found = leaked(text)
    assert not found, f"{pdf.name} holds solution text: {found[:3]}"
    assert _credited(text), f"{pdf.name}: no credit line"


def _credited(text):
    """Whether the printed ``text`` holds the credit line (its spaces as the PDF has them)."""
    from refattn.exercises.credit import credit

    return "".join(credit("text").split()) in "".join(text.split())


# --------------------------------------------------------------------------
# The landing page's first screen
# --------------------------------------------------------------------------

#: Where the first screen's pieces are: the "start here" box, its link to the overview, the set-up
#: commands and every code block of the page, and whether one scrolls sideways.
_FIRST_SCREEN = r"""() => {
  const box = document.querySelector('article .start-here');
  const out = {box: null, overview: null, pres: []};
  if (box) {
    const r = box.getBoundingClientRect();
    out.box = [r.top, r.bottom, box.textContent.replace(/\s+/g, ' ').trim()];
    const a = [...box.querySelectorAll('a')].find(a => /derivations\/00-overview\.html$/.test(a.getAttribute('href')));
    if (a) { const ra = a.getBoundingClientRect(); out.overview = [ra.top, ra.bottom]; }
  }
  for (const pre of document.querySelectorAll('article pre')) {
    const r = pre.getBoundingClientRect();
    out.pres.push([r.top, r.bottom, pre.scrollWidth, pre.clientWidth, pre.textContent.trim().slice(0, 60)]);
  }
  out.setup = [...document.querySelectorAll('article h2')].map(h => [h.textContent.trim(), h.getBoundingClientRect().top]);
  return out;
}"""


def test_the_landing_pages_first_screen_shows_where_to_start(site, tmp_path_factory):
    """At 1280 x 800 the landing page's first screen, before any scrolling, holds the "start
    here" box with its link to the overview (the first step of part 1) and the set-up commands,
    and no code block of the page scrolls sideways. A screenshot of that screen is saved."""
    from playwright.sync_api import sync_playwright

    shots = pathlib.Path(os.environ.get("REFATTN_BOOK_SHOTS") or tmp_path_factory.mktemp("book-shots"))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto((site / "index.html").as_uri(), wait_until="load")
        page.evaluate("() => MathJax.startup.promise")
        got = page.evaluate(_FIRST_SCREEN)
        page.screenshot(path=str(shots / "landing-first-screen.png"))
        browser.close()
    print(f"\nbook: the landing page's first screen is {shots / 'landing-first-screen.png'}")
    assert got["box"], "the landing page has no start-here box"
    top, bottom, words = got["box"]
    assert 0 <= top and bottom <= 800, f"the start-here box is at {top:.0f}-{bottom:.0f} px, not on the first screen"
    assert "Start here" in words and "part 1" in words, words
    assert got["overview"] and got["overview"][1] <= 800, "the start-here box links no overview on the first screen"
    setup = [p for p in got["pres"] if p[4].startswith("python3 -m venv .venv")]
    assert setup, f"no set-up commands on the landing page: {[p[4] for p in got['pres']]}"
    assert setup[0][1] <= 800, f"the set-up commands end {setup[0][1]:.0f} px down, below the first screen"
    wide = [f"{p[4]!r}: {p[2]} px wide in {p[3]}" for p in got["pres"] if p[2] > p[3] + 1]
    assert not wide, f"code blocks that scroll sideways at 1280 px: {wide}"
