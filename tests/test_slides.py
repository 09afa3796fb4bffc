"""The slide decks and problem sets, as far as they can be checked without building the book
(``tests/test_book.py`` builds it, opens the decks in Chromium and reads the PDFs).

* one deck per part of the learning path, ``docs/slides/part-N.md``;
* every figure a deck cites is one that a notebook draws (``save(fig, "NAME")``), every
  equation label it cites is the tag of exactly one display of ``derivations/``, and every
  printed line it quotes from a derivation is printed by that derivation's step blocks;
* slides split at ``---`` lines, not at ``---`` inside a code fence;
* a printed block can join pieces of what a source printed (a table's header and some of its
  rows) and round long numbers to the digits asked; a figure's caption, a printed block and
  ``{{ size }}`` say "(small size)" exactly where their notebook ran small;
* ``REFATTN_BOOK_SMALL=slides`` runs at full size every notebook a deck cites, and
  ``docs/teach.md`` says so with a command of that form;
* a problem set holds every statement of its part, labels from ``refattn.exercises``, and no
  line of any model solution;
* every deck's title slide and every problem set carry the credit line, and they give the
  handout's command for checking an answer (the handout has ``check.py``, not the library).

(``tests/test_slide_fonts.py`` measures the smallest text on every slide in Chromium.)
"""

from __future__ import annotations

import pathlib
import re
import shlex

import pytest
from tests.exercises.teaching_checks import leaked, teaching

from refattn.exercises import EXERCISES, PARTS

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
DECKS = sorted((ROOT / "docs" / "slides").glob("*.md"))


def directives(kind):
    """``(deck, arguments)`` of every ``{{ kind ... }}`` in the decks."""
    return [(d.name, shlex.split(m.group(1))) for d in DECKS
            for m in re.finditer(r"\{\{\s*" + kind + r"\s+(.*?)\s*\}\}", d.read_text(encoding="utf-8"))]


def test_one_deck_per_part_of_the_learning_path():
    assert [d.relative_to(ROOT / "docs").as_posix() for d in DECKS] == sorted(teaching.DECKS.values())
    assert sorted(teaching.DECKS) == sorted(PARTS)
    for n, uri in teaching.DECKS.items():
        text = (ROOT / "docs" / uri).read_text(encoding="utf-8")
        assert text.startswith("# "), f"{uri}: a deck starts with its title slide"
        assert f"{{{{ exercises {n} }}}}" in text, f"{uri}: the deck ends with part {n}'s exercises"
        assert len(teaching.split_slides(text)) >= 8, uri


def test_decks_cite_only_figures_that_notebooks_draw():
    drawn = {m for p in (ROOT / "notebooks").glob("[0-9]*.py")
             for m in re.findall(r"""save\(\w+,\s*["']([\w-]+)["']""", p.read_text(encoding="utf-8"))}
    cited = {(d.name, name) for d in DECKS for name in re.findall(r"\]\(figure:([\w-]+)\)", d.read_text())}
    assert len({d for d, _ in cited}) == len(DECKS), "every deck shows figures that notebooks draw"
    missing = sorted((d, name) for d, name in cited if name not in drawn)
    assert not missing, f"figures that no notebook draws: {missing}"


def test_every_equation_label_is_one_display_of_the_derivations():
    labels = directives("eq")
    assert len(labels) >= 15, labels
    for deck, (label,) in labels:
        display = teaching.equation(label)
        assert display.startswith("$$") and f"\\tag{{{label}}}" in display, (deck, label)
    with pytest.raises(Exception, match="expected exactly one display"):
        teaching.equation("99.NOPE")


def test_quoted_output_of_derivations_is_what_their_step_blocks_print():
    printed = teaching.Printed(runs={}, small=set())
    quoted = [(deck, args) for deck, args in directives("output") + directives("value")
              if args[0].startswith("derivations/")]
    assert quoted, "the decks quote the derivations' step blocks"
    for deck, args in quoted:
        assert printed.find(args[0], args[1]), (deck, args)
    # every source named at all exists in the repository
    for deck, args in directives("output") + directives("value"):
        assert (ROOT / args[0]).is_file(), (deck, args[0])
    with pytest.raises(Exception, match="no line that"):
        printed.find("derivations/00-overview.md", "a line that no block prints")


def test_numbers_are_printed_as_the_source_printed_them_or_in_the_format_asked():
    assert teaching.number("0.105457", None) == "0.105457"
    assert teaching.number("5.735744996765771e-16", ".2g") == "$5.7\\times 10^{-16}$"
    assert teaching.number("3e+05", None) == "$3\\times 10^{5}$"
    assert teaching.number("False", ".2g") == "False"


def test_long_printed_numbers_are_rounded_to_the_digits_asked():
    assert teaching.round_numbers("max |J - J_autograd| = 5.551115123125783e-17", ".2g") == \
        "max |J - J_autograd| = 5.6e-17"
    assert teaching.round_numbers("margin, closed form 05.P3  = 0.2858090676186284", ".4g") == \
        "margin, closed form 05.P3  = 0.2858"
    assert teaching.round_numbers("random cotangent: 0.030221213118864623, -1.5e+300", ".2g") == \
        "random cotangent: 0.03, -1.5e+300"
    # numbers as short as asked, integers, labels (05.P3, b_0) and words stay as printed
    line = "softmax(0) = [0.25 0.25 0.25] in range: False; n = 800, b_0 1.0, 1e-07 05.P3"
    assert teaching.round_numbers(line, ".2g") == line


def _run(printed: str) -> dict:
    """A notebook's run as the build keeps it, one cell that printed ``printed``."""
    return {"cells": [{"type": "code", "source": "", "output": printed, "figures": []}]}


def test_a_printed_block_joins_pieces_and_says_where_it_ran_small():
    runs = {"01_demo": _run("header  a  b\nrow 1  0.1234567890123  x\nrow 2  2  y\nrow 3  3  z\n")}
    md = '{{ output notebooks/01_demo.py "header" 1 "row 3" 1 .3g }}'
    small = teaching.resolve(md, "slides/part-9.md", {}, teaching.Printed(runs, small={"01_demo"}), pdf=False)
    assert "<code>header  a  b\nrow 3  3  z</code>" in small and "(small size)" in small
    full = teaching.resolve(md.replace('"row 3" 1', '"row 1" 2'), "slides/part-9.md", {},
                            teaching.Printed(runs, small=set()), pdf=False)
    assert "<code>header  a  b\nrow 1  0.123  x\nrow 2  2  y</code>" in full and "small size" not in full
    with pytest.raises(Exception, match="no line that"):
        teaching.resolve('{{ output notebooks/01_demo.py "header" 1 "row 9" }}', "slides/part-9.md", {},
                         teaching.Printed(runs, small=set()), pdf=False)


def test_figure_captions_and_the_size_follow_the_notebooks_that_ran_small():
    runs = {"01_demo": _run("err = 0.5\n"), "02_demo": _run("gap = 0.25\n")}
    figures = {"02_fig": ("02_demo", "a section")}
    md = ("{{ size }}\n\n![a figure](figure:02_fig)\n\n{{ value notebooks/01_demo.py \"err = \" }}")
    words = {}
    for small in (set(), {"01_demo"}, {"02_demo"}, {"01_demo", "02_demo"}):
        out = teaching.resolve(md, "slides/part-9.md", figures, teaching.Printed(runs, small=small), pdf=False)
        assert ("(small size)" in out) == ("02_demo" in small), small  # the figure's notebook
        words[frozenset(small)] = out.split("\n", 1)[0]
    # {{ size }}: the size of the notebooks the slides cite (01 and 02 here)
    assert words[frozenset()] == teaching.size_words(False)
    assert words[frozenset({"01_demo"})] == "at full size, except notebook 01: at the small size the tests use"
    assert words[frozenset({"01_demo", "02_demo"})].startswith("at the small size the tests use")
    assert "REFATTN_BOOK_SMALL=slides" in words[frozenset({"01_demo", "02_demo"})]


def test_the_book_runs_the_notebooks_the_decks_cite_at_full_size_on_request():
    stems = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9]*.py"))
    cited = teaching.deck_notebooks()
    quoted = {args[0][10:-3] for _, args in directives("output") + directives("value")
              if args[0].startswith("notebooks/")}
    drawn = {name: p.stem for p in (ROOT / "notebooks").glob("[0-9]*.py")
             for name in re.findall(r"""save\(\w+,\s*["']([\w-]+)["']""", p.read_text(encoding="utf-8"))}
    shown = {drawn[name] for d in DECKS for name in re.findall(r"\]\(figure:([\w-]+)\)", d.read_text())}
    assert cited == quoted | shown and cited < set(stems), (cited, quoted, shown)
    assert teaching.small_notebooks("1", stems) == set(stems)
    assert teaching.small_notebooks("0", stems) == set()
    assert teaching.small_notebooks("slides", stems) == set(stems) - cited
    with pytest.raises(Exception, match="REFATTN_BOOK_SMALL: expected one of 1, 0, slides, got 'yes'"):
        teaching.small_notebooks("yes", stems)
    # the page for teachers gives the command, with a value the build accepts
    text = (ROOT / "docs" / "teach.md").read_text(encoding="utf-8")
    section = text.split("## Building the slides and the problem sets", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"`REFATTN_BOOK_SMALL=(\w+) \.venv/bin/mkdocs build --strict`", section)
    assert command and command.group(1) == "slides", "docs/teach.md: no command that builds the decks at full size"
    hooks = (ROOT / "docs" / "hooks.py").read_text(encoding="utf-8")
    assert 'teaching.small_notebooks(setting' in hooks and 'os.environ.get("REFATTN_BOOK_SMALL", "1")' in hooks


def test_slides_split_at_dashes_outside_code_fences():
    text = "# Title\n\nintro\n\n--- wide two\n\n## A\n\n```text\n---\n```\n\n---\n\n## B\n"
    slides = teaching.split_slides(text)
    assert [c for c, _ in slides] == [["title"], ["wide", "two"], []]
    assert "```text\n---\n```" in slides[1][1] and "## B" in slides[2][1]
    html = teaching.deck_markdown("# T\n\n---\n\n## A\n\nleft\n\n+++\n\nright\n")
    assert html.count('<section class="slide') == 2 and 'class="columns"' in html
    assert 'data-number="2 / 2"' in html and 'data-deck="T"' in html


@pytest.mark.parametrize("part", sorted(PARTS))
def test_problem_set_holds_its_statements_and_no_solution(part):
    text = teaching.problem_set(part, pdf=True)
    mine = [ex for ex in EXERCISES if ex.part == part]
    assert mine
    for ex in EXERCISES:
        heading = f"## Exercise {ex.number}: "
        assert (heading in text) == (ex in mine), (part, ex.name)
    for ex in mine:
        body = (ROOT / ex.statement).read_text(encoding="utf-8").split(ex.label_line, 1)[1].strip()
        assert body in text, f"part {part}: the statement of {ex.name} is not in the problem set whole"
        assert f"Difficulty {ex.difficulty} of 3 · about {ex.minutes} minutes" in text
    assert f"about {sum(ex.minutes for ex in mine)} minutes in all" in text
    assert not leaked(text), "solution text in the problem set"
    assert "(part-%d.pdf)" % part in text and "(part-%d.pdf)" % part not in teaching.problem_set(part, pdf=False)


def test_a_build_without_pdfs_links_to_none():
    text = "[slides](slides/part-1.md) ([PDF](slides/part-1.pdf)); [set](problems/part-1.md)\n  ([PDF](a.pdf)).\n"
    assert teaching.drop_pdf_links(text) == "[slides](slides/part-1.md); [set](problems/part-1.md).\n"
    for page in ("index.md", "teach.md"):
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        assert ".pdf)" in text and ".pdf)" not in teaching.drop_pdf_links(text), page


def test_credit_on_every_deck_and_problem_set_and_the_handouts_check_command():
    from refattn.exercises.credit import credit
    from refattn.exercises.export import HANDOUT_CHECK

    line = teaching.credit_line("text")
    assert credit("text").split(";")[0] in line and "MIT" not in credit("text")
    for deck in DECKS:
        text = deck.read_text(encoding="utf-8")
        assert "refattn exercises check" not in text, f"{deck.name}: the handout checks with check.py"
        assert "{{ check }}" in text, f"{deck.name}: no slide says how to check an answer"
        html = teaching.deck_markdown(text)
        first, rest = html.split("</section>", 1)
        assert line in first and line not in rest, f"{deck.name}: the credit line belongs on the title slide"
    resolved = teaching.resolve("Check it: {{ check }}.", "slides/part-1.md", {}, teaching.Printed({}, set()), False)
    assert resolved == f"Check it: `{HANDOUT_CHECK} NAME FILE.py`."
    for part in PARTS:
        text = teaching.problem_set(part, pdf=False)
        assert line in text and f"`{HANDOUT_CHECK} NAME FILE.py` checks it in the student handout" in text
