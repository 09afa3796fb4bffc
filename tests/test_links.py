"""Links that work in a clone of the repository.

The README and the pages of ``docs/`` are read in two places: in the
repository (a clone, or GitHub's rendering of it) and in the book, where
``docs/hooks.py`` maps every link to the page that renders its target. So
their links are written as they resolve in the repository
(``../derivations/00-overview.md``, ``../notebooks/01_activations_tour.py``,
``../README.md#the-papers``), and these tests check that every relative link
names a file of the repository. The only exceptions are what the book's
build makes from nothing in the repository, the problem sets and the PDFs of
``docs/teaching.py``, and the pages say so next to those links.
``tests/test_book.py`` checks the same links, anchors included, in the built
book.

The learning path's times are checked by ``tests/test_learning_path.py``.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from tests.exercises.teaching_checks import teaching

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: What the book's build makes and the repository does not hold: the problem sets, and the PDFs
#: of the problem sets and of the slide decks (``docs/teaching.py``).
BUILT = ({f"docs/problems/part-{n}.md" for n in teaching.DECKS}
         | {f"docs/problems/part-{n}.pdf" for n in teaching.DECKS}
         | {"docs/" + deck[:-3] + ".pdf" for deck in teaching.DECKS.values()})

_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(([^()\s]*)\)")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _links(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image outside fenced code blocks and code spans."""
    out, fence = [], None
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _FENCE.match(line)
        if m and (fence is None or m.group(1)[0] * 3 == fence):
            fence = None if fence else m.group(1)[0] * 3
            continue
        if fence is None:
            out += [(i, t) for t in _LINK.findall(re.sub(r"`[^`]*`", "", line))]
    return out


def _relative(target: str) -> bool:
    return bool(target) and not target.startswith("#") and not re.match(r"[a-z][a-z0-9+.-]*:", target)


def _in_repository(page: pathlib.Path, target: str) -> str:
    """The link's target as a path from the repository's root (absolute if it leaves the repository)."""
    resolved = (page.parent / target.split("#", 1)[0]).resolve()
    return resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)


def test_the_pages_have_links_to_check():
    assert len(PAGES) >= 9 and (ROOT / "docs" / "index.md") in PAGES
    assert sum(len(_links(p)) for p in PAGES) > 150
    assert all((ROOT / b).parent.relative_to(ROOT).as_posix() in ("docs/problems", "docs/slides") for b in BUILT)
    assert not any((ROOT / b).exists() for b in BUILT), "a built file is in the repository: drop it from BUILT"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves_in_the_repository(page):
    broken = []
    for line, target in _links(page):
        if not _relative(target):
            continue
        rel = _in_repository(page, target)
        resolved = ROOT / rel
        if rel in BUILT:
            continue
        if not resolved.is_file() and not (resolved.is_dir() and any(
                (resolved / n).is_file() for n in ("README.md", "index.md"))):
            broken.append(f"{page.relative_to(ROOT)}:{line}: ({target}) -> {rel}, not in the repository")
    assert not broken, "\n".join(broken)


def test_pages_that_link_what_the_build_makes_say_so():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        built = [t for _, t in _links(page) if _relative(t) and _in_repository(page, t) in BUILT]
        if built:
            assert "when the book is built" in " ".join(text.split()), (
                f"{page.relative_to(ROOT)} links {built}, made by the book's build, without saying so")
