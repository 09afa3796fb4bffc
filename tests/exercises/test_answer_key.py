"""The instructor's answer key (``instructor/answer-key/``): one page per exercise, in shape, and
every grader output it quotes is what the grader prints.

* every exercise has ``instructor/answer-key/NN-name.md``, whose title is the statement's and whose
  sections are, in order, "The derivation", "What a full answer contains" and "Common wrong
  answers"; the folder has a ``README.md``;
* "Common wrong answers" holds 2-4 wrong answers, each a fenced block ``python wrong`` (the
  answer's code) followed by a fenced block ``grader NAME`` (what the grader prints for it, NAME the
  exercise's name; ``grader NAME --hidden`` where the quote includes the hidden cases), and quotes
  grader output nowhere else (no ``>`` quotation there, no other fenced block);
* each ``python wrong`` block, written to a file and graded (``refattn.exercises.grade``, with
  ``isolation="python"``: the Python guard, as on a student's own machine), is graded wrong, and
  every line of the ``grader`` block after it, stripped, is in the verdict's text, where ``...``
  stands for any text within the line;
* the key holds no model solution (no solution block of ``instructor/solutions/`` is in it), no
  work-item number, and the student handout holds none of it.

All answers are graded in one call of ``grade_many`` (about 15 s on a 2-core machine).
"""

from __future__ import annotations

import pathlib
import re

import pytest

from refattn.exercises import EXERCISES, grade_many
from refattn.exercises.export import export_student

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
KEY = ROOT / "instructor" / "answer-key"
SOLUTIONS = ROOT / "instructor" / "solutions"
SECTIONS = ["## The derivation", "## What a full answer contains", "## Common wrong answers"]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
WORK_ITEM = re.compile(r"issues? ?#?[0-9]|issue-[0-9]", re.I)


def _key(ex) -> pathlib.Path:
    return KEY / f"{ex.stem}.md"


def _headings(text) -> list:
    """The level-1 and level-2 headings outside fenced blocks, in order."""
    return [line for line in FENCE.sub("", text).splitlines() if re.match(r"#{1,2} ", line)]


def _wrong_section(text) -> str:
    return text.split(SECTIONS[2], 1)[1]


def _wrong_answers(ex) -> list:
    """``(code, info string of the grader block, its lines)`` for each wrong answer of ``ex``'s key."""
    blocks = FENCE.findall(_wrong_section(_key(ex).read_text(encoding="utf-8")))
    infos = [info.strip() for info, _ in blocks]
    assert all(i == "python wrong" or i.startswith("grader ") for i in infos), (ex.stem, infos)
    assert infos[0::2] == ["python wrong"] * ((len(infos) + 1) // 2) and len(infos) % 2 == 0, \
        f"{ex.stem}: each 'python wrong' block must be followed by one 'grader' block: {infos}"
    out = []
    for (_, code), (info, quoted) in zip(blocks[0::2], blocks[1::2]):
        out.append((code, info.strip(), [line.strip() for line in quoted.splitlines() if line.strip()]))
    return out


def _pattern(line) -> re.Pattern:
    """``line`` with each ``...`` standing for any text within one line."""
    return re.compile("[^\n]*?".join(re.escape(part) for part in line.split("...")))


@pytest.mark.parametrize("ex", EXERCISES, ids=[ex.stem for ex in EXERCISES])
def test_each_exercise_has_a_key_with_its_title_and_the_three_sections_in_order(ex):
    path = _key(ex)
    assert path.is_file(), f"no answer key {path.relative_to(ROOT)}"
    text = path.read_text(encoding="utf-8")
    statement = (ROOT / "exercises" / f"{ex.stem}.md").read_text(encoding="utf-8").splitlines()[0]
    assert text.splitlines()[0] == statement, f"{path.name}: the title must be the statement's: {statement!r}"
    assert _headings(text) == [statement, *SECTIONS], f"{path.name}: headings {_headings(text)}"
    wrong = _wrong_section(text)
    assert not re.search(r"^>", FENCE.sub("", wrong), re.M), f"{path.name}: quote grader output in a 'grader' block"
    assert 2 <= len(_wrong_answers(ex)) <= 4, f"{path.name}: 2-4 wrong answers"
    assert all(info.split()[1] == ex.name and info.split()[2:] in ([], ["--hidden"])
               for _, info, _ in _wrong_answers(ex)), f"{path.name}: grader blocks must name {ex.name}"
    assert not WORK_ITEM.search(text), f"{path.name} names a work item"


def test_the_folder_has_a_readme_that_says_it_is_for_instructors_only():
    text = (KEY / "README.md").read_text(encoding="utf-8")
    assert "instructor" in text.lower() and "never part of a student handout" in text
    assert not WORK_ITEM.search(text)


def _solution_blocks(ex) -> list:
    source = (SOLUTIONS / f"{ex.stem}.py").read_text(encoding="utf-8")
    blocks = re.findall(r"### BEGIN SOLUTION\n(.*?)\n[ \t]*### END SOLUTION", source, re.S)
    return [b for b in blocks if len([ln for ln in b.splitlines() if ln.strip() and not ln.strip().startswith("#")])
            >= 2]


@pytest.mark.parametrize("ex", EXERCISES, ids=[ex.stem for ex in EXERCISES])
def test_the_key_does_not_paste_the_model_solution(ex):
    squash = lambda t: re.sub(r"\s+", " ", t).strip()  # noqa: E731 - indentation does not hide a copy
    text = squash(_key(ex).read_text(encoding="utf-8"))
    for block in _solution_blocks(ex):
        assert squash(block) not in text, f"{ex.stem}: the key holds a solution block of the model solution"


def test_the_student_handout_holds_no_page_of_the_key(tmp_path):
    export_student(tmp_path / "handout", list(EXERCISES))
    files = [p for p in (tmp_path / "handout").rglob("*") if p.is_file()]
    assert files and not any("answer-key" in str(p) for p in files)
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files if p.suffix in (".md", ".py", ".json")]
    assert not any(SECTIONS[2] in t or "```python wrong" in t for t in texts)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every wrong answer of every key, graded: ``[(exercise, index, quoted lines, verdict)]``."""
    folder = tmp_path_factory.mktemp("wrong")
    runs = {False: [], True: []}
    for ex in EXERCISES:
        for i, (code, info, quoted) in enumerate(_wrong_answers(ex)):
            path = folder / f"{ex.stem}-wrong{i + 1}.py"
            path.write_text(code, encoding="utf-8")
            runs["--hidden" in info].append((ex, i + 1, quoted, path))
    out = []
    for hidden, items in runs.items():
        if items:
            verdicts = grade_many([(ex, path) for ex, _, _, path in items], hidden=hidden, isolation="python")
            out += [(ex, i, quoted, v) for (ex, i, quoted, _), v in zip(items, verdicts)]
    return out


def test_every_wrong_answer_is_graded_wrong_and_every_quoted_line_is_printed(graded):
    assert len(graded) >= 2 * len(EXERCISES)
    problems = []
    for ex, i, quoted, verdict in graded:
        text = str(verdict)
        if verdict.ok or verdict.grader_error:
            problems.append(f"{ex.stem}, wrong answer {i}: graded {'right' if verdict.ok else 'with a grader error'}")
        problems += [f"{ex.stem}, wrong answer {i}: the grader does not print {line!r}\nit printed:\n{text}"
                     for line in quoted if line != "..." and not _pattern(line).search(text)]
    assert not problems, "\n\n".join(problems)
