"""Links that work in a clone of the repository, and a learning path whose times add up.

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

The landing page's learning path gives a time for each step; an exercise's
time is the one its statement gives (``refattn exercises --json``), so the
exercises of each part take the sum of their labels, and a part's hours are
the sum of its steps, to the nearest hour.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from teaching_checks import teaching

from refattn.exercises import EXERCISES

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


# --------------------------------------------------------------------------
# the learning path's times
# --------------------------------------------------------------------------

LANDING = ROOT / "docs" / "index.md"
MINUTES = {ex.number: ex.minutes for ex in EXERCISES}


def _parts(text: str) -> dict[int, tuple[int, str]]:
    """Part number -> (its stated hours, its text), from the ``### Part N: ... (about H hours)`` headings."""
    heads = list(re.finditer(r"^### Part (\d): .*\(about (\d+) hours?\)$", text, re.M))
    return {int(m.group(1)): (int(m.group(2)), text[m.end():heads[i + 1].start() if i + 1 < len(heads) else None])
            for i, m in enumerate(heads)}


def _steps(body: str) -> list[str]:
    """The numbered items of a part, each as one string."""
    return [" ".join(s.split()) for s in re.split(r"^\d+\. ", body.split("\n\nFor a class", 1)[0], flags=re.M)[1:]]


def test_each_parts_exercises_take_the_minutes_of_their_labels():
    parts = _parts(LANDING.read_text(encoding="utf-8"))
    assert sorted(parts) == [1, 2, 3]
    for part, (_, body) in parts.items():
        items = [s for s in _steps(body) if s.startswith("Exercises")]
        assert len(items) == 1, f"part {part}: one step lists the exercises"
        numbers = [int(n) for n in re.findall(r"\]\(\.\./exercises/(\d\d)-[\w-]+\.md\)", items[0])]
        assert numbers, items[0]
        stated = re.search(r"\((\d+) minutes\)", items[0])
        assert stated, f"part {part}: no time for its exercises: {items[0]}"
        labels = [MINUTES[n] for n in numbers]
        assert int(stated.group(1)) == sum(labels), (
            f"part {part}: exercises {numbers} take {' + '.join(map(str, labels))} = {sum(labels)} minutes "
            f"by their labels, not {stated.group(1)}")


def test_each_parts_hours_are_the_sum_of_its_steps():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for part, (hours, body) in _parts(LANDING.read_text(encoding="utf-8")).items():
        minutes = [int(m) for s in _steps(body) for m in re.findall(r"\((?:[^()]*\s)?(\d+) minutes\)", s)[:1]]
        assert len(minutes) == len(_steps(body)), f"part {part}: a step without its time"
        assert hours == round(sum(minutes) / 60), f"part {part}: {sum(minutes)} minutes in all, not about {hours} hours"
        m = re.search(rf"^{part}\. \*\*[^*]+\*\* \(about (\d+) hours?\)", readme, re.M)
        assert m and int(m.group(1)) == hours, f"README: part {part} should say about {hours} hours, as docs/index.md"
