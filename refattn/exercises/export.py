"""A student handout and a Gradescope autograder, made from a clone of the repository.

Each exercise has one source, ``instructor/solutions/NN-name.py`` in a
clone of the repository (not in the installed package, which a student may
have): the model solution, with every piece of solution between the
nbgrader-style lines ``### BEGIN SOLUTION`` and ``### END SOLUTION``
(comments, so the file runs as it is). :func:`starter` removes those pieces:
a piece inside a function becomes ``# YOUR CODE HERE`` and ``raise
NotImplementedError()`` at its indentation; a piece at module level (notes,
helpers, the computation of ``ANSWER``) disappears. Signatures, docstrings and
anything outside the markers stay.

* :func:`export_student` writes the statements, the derivations they cite
  (their prose and mathematics; the book's code blocks left out), one starter
  per exercise, an index, and a checker (:mod:`refattn.exercises.checker`)
  with the public cases as data: their inputs and expected values, computed
  here. No library, no model solution, no hidden case or seed.
* :func:`export_gradescope` writes a zip that Gradescope unpacks into
  ``/autograder/source``: ``setup.sh`` (installs the runtime dependencies
  into a virtual environment and creates the user answers run as),
  ``run_autograder`` (grades ``/autograder/submission`` into
  ``/autograder/results/results.json``), a copy of the package (the graders;
  no solutions) and ``refattn_autograder.json``, the settings: a secret from
  which each submission's hidden seed is drawn, the time limit, the points,
  and the similarity report's fingerprints (hashes, no code).

Neither overwrites what it did not write: an existing zip, a folder that is
not empty, or a file in the way is refused unless ``force`` is given, and
``force`` replaces only the files the export writes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from .. import __version__
from .graders import EXERCISES
from .judge import PARTS
from .paths import PACKAGE, derivations_dir, solutions_dir, statements_dir
from .credit import credit
from .runner import DEFAULT_TIMEOUT_S, RULE

__all__ = ["BEGIN", "END", "solutions_dir", "solution_path", "solution_source", "starter", "solution_blocks",
           "check_command", "select_exercises", "select_points", "export_student", "export_gradescope",
           "VISIBILITIES", "CONFIG_NAME", "CHECKER_MODULES", "cited_derivations", "problem_set_markdown",
           "answer_key_markdown", "export_answer_key", "check_due", "PROBLEM_SET", "ANSWER_KEYS"]

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
#: Gradescope's visibility settings for a test.
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
#: The settings file inside the autograder zip.
CONFIG_NAME = "refattn_autograder.json"
#: The modules of :mod:`refattn.exercises` the handout's checker is made of (NumPy and the
#: standard library only; ``checker`` becomes its ``__main__``).
CHECKER_MODULES = ("judge", "runner", "_child", "isolation", "checker")
#: The command the handout's README and statements give for checking an answer.
HANDOUT_CHECK = ".venv/bin/python check.py"
#: The same in a clone of the repository (the statements' own words).
CLONE_CHECK = ".venv/bin/refattn exercises check"
#: The problem set's file name at the handout's top level (written with ``--course``).
PROBLEM_SET = "problem-set.pdf"
#: The worked solutions, one Markdown file per exercise, in a clone (never in a handout).
ANSWER_KEYS = Path("instructor") / "answer-key"


def solution_path(ex) -> Path:
    """The model solution of exercise ``ex``; ``ValueError`` (one line) where there are none."""
    folder = solutions_dir()
    if folder is None:
        raise ValueError("the model solutions (instructor/solutions/ in a clone of the repository) are not "
                         "installed with the package: run this in the root of a clone")
    return folder / f"{ex.stem}.py"


def solution_source(ex) -> str:
    """The text of exercise ``ex``'s single source (model solution with markers)."""
    return solution_path(ex).read_text(encoding="utf-8")


def _split(source, name="source"):
    """``[(inside, lines)]``: the source cut at the markers; ``ValueError`` if they do not pair up."""
    pieces, inside, current, indent = [], False, [], ""
    for n, line in enumerate(source.splitlines(keepends=True), 1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError(f"{name}:{n}: {BEGIN} inside another solution block")
            pieces.append((False, current, ""))
            current, inside, indent = [], True, line[:len(line) - len(line.lstrip())]
        elif stripped == END:
            if not inside:
                raise ValueError(f"{name}:{n}: {END} without {BEGIN}")
            pieces.append((True, current, indent))
            current, inside = [], False
        else:
            current.append(line)
    if inside:
        raise ValueError(f"{name}: {BEGIN} without {END}")
    pieces.append((False, current, ""))
    return pieces


def solution_blocks(source) -> list:
    """The text of every solution block of ``source`` (what a starter must not contain)."""
    return ["".join(lines) for inside, lines, _ in _split(source) if inside]


def starter(source, name="source") -> str:
    """The student's starter: ``source`` with every solution block replaced (module docstring)."""
    out = []
    for inside, lines, indent in _split(source, name):
        if not inside:
            out += lines
        elif indent:
            out += [f"{indent}# YOUR CODE HERE\n", f"{indent}raise NotImplementedError()\n"]
    text = re.sub(r"\n{4,}", "\n\n\n", "".join(out))  # a removed helper leaves no hole
    return text.strip("\n") + "\n"


def check_command(ex) -> str:
    """The command that checks the answer to ``ex`` in the handout's folder, as its README gives it."""
    return f"{HANDOUT_CHECK} {ex.name} {ex.stem}.py"


def _for_handout(text) -> str:
    """A statement or starter as the handout gives it: its check command the handout's checker."""
    return text.replace(CLONE_CHECK, HANDOUT_CHECK)


def select_exercises(text=None) -> list:
    """The exercises named by ``--exercises`` (``"01,03,softmax-vjp"``), in order; all for ``None``.

    Raises ``ValueError`` (one line naming ``--exercises``) for an empty item, an unknown name or
    number, or one named twice.
    """
    from .grading import exercise  # noqa: PLC0415

    if text is None:
        return list(EXERCISES)
    items = [t.strip() for t in str(text).split(",")]
    if not all(items):
        raise ValueError(f"--exercises: expected exercise names or numbers separated by commas "
                         f"(such as 01,03,softmax-vjp), got {text!r}")
    chosen = []
    for item in items:
        try:
            ex = exercise(item)
        except ValueError:
            raise ValueError(f"--exercises: unknown exercise {item!r}; expected names or numbers of "
                             f"{', '.join(f'{e.number:02d} {e.name}' for e in EXERCISES)}") from None
        if ex in chosen:
            raise ValueError(f"--exercises: exercise {ex.number:02d} ({ex.name}) is named twice")
        chosen.append(ex)
    return sorted(chosen, key=lambda e: e.number)


def _positive(text, where) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not (0 < value < float("inf")):
        raise ValueError(f"--points: expected a positive number {where}, got {text!r}")
    return value


def select_points(text, exercises) -> dict:
    """Points per exercise stem from ``--points``: ``None`` (the labels: twice the difficulty), one
    number for every exercise, or ``NAME=P`` pairs separated by commas (the rest from the labels).

    Raises ``ValueError`` (one line naming ``--points``) for anything else, or for a name that is
    not among ``exercises``.
    """
    from .grading import exercise  # noqa: PLC0415

    points = {ex.stem: float(ex.points) for ex in exercises}
    if text is None:
        return points
    text = str(text).strip()
    if "=" not in text:
        value = _positive(text, "(for every exercise) or NAME=P pairs")
        return {stem: value for stem in points}
    for item in text.split(","):
        name, eq, value = item.partition("=")
        try:
            ex = exercise(name.strip()) if eq and name.strip() else None
        except ValueError:
            ex = None
        if ex is None or ex.stem not in points:
            raise ValueError(f"--points: expected NAME=P pairs naming exported exercises (such as 01=4,03=6), "
                             f"got {item.strip()!r}")
        points[ex.stem] = _positive(value.strip(), f"for {ex.name}")
    return points


def _index(exercises, derivations) -> str:
    """The handout's README: what to do, how to set up and check an answer, then the exercises by part."""
    first = exercises[0]
    lines = ["# Exercises on attention beyond softmax", "",
             "Each exercise has a statement (`NN-name.md`) and a starter (`NN-name.py`): keep the",
             "signatures, fill in the bodies. The derivations the statements cite are in `derivations/`",
             "(their prose and mathematics; the book's code blocks are left out).", "",
             "**What to submit:** your starter files, filled in, under their own names (`NN-name.py`).", "",
             "## Set up once", "",
             "In this folder, make a virtual environment named `.venv` and install NumPy into it:", "",
             "    python3 -m venv .venv",
             "    .venv/bin/pip install numpy", "",
             "## Check an answer", "",
             "In this folder, with the exercise's name and your file (each exercise's command is in",
             "the tables below):", "",
             f"    {check_command(first)}", "",
             "It runs the exercise's public cases: exit status 0 when your answer is right, 1 when it is",
             "wrong, with one line per failing check saying what and where; add `--json` for the same",
             "as JSON. `.venv/bin/python check.py` alone lists the exercises. Your file runs in a",
             "separate process, with a time limit. " + RULE, "",
             "The public cases here are fixed inputs and the values they must give, computed by the",
             "course's library. Your course's grader runs cases of the same kinds on other inputs, drawn",
             "for your submission, and **hidden cases**: other shapes and edge cases, drawn anew for each",
             "submission, so they differ from any you could see here. Hidden cases are reported by kind",
             "only. An answer that passes the public cases can still fail hidden ones: test the edges",
             "the statement names.", ""]
    for part, title in PARTS.items():
        mine = [ex for ex in exercises if ex.part == part]
        if not mine:
            continue
        lines += [f"## Part {part}: {title}", "", "| no | difficulty | minutes | statement | starter | check it |",
                  "|---:|:---:|---:|---|---|---|"]
        for ex in mine:
            lines.append(f"| {ex.number} | {ex.difficulty} of 3 | {ex.minutes} | [{ex.title}]({ex.stem}.md) | "
                         f"[`{ex.stem}.py`]({ex.stem}.py) | `{check_command(ex)}` |")
        lines.append("")
    if derivations:
        lines += ["## The derivations cited", ""] + [f"* [`derivations/{name}`](derivations/{name})"
                                                    for name in derivations] + [""]
    lines += ["## Credit and licence", "", credit("text", "code"), "The licences' terms are in `LICENSE`: "
              "share and adapt this handout, crediting refattn and saying what you changed.", ""]
    return "\n".join(lines)


_CITED = re.compile(r"derivations/(\d\d-[a-z0-9-]+\.md)")
_FENCE = re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)


def cited_derivations(exercises) -> list:
    """The derivation files the statements of ``exercises`` cite (``NN-name.md``), in order."""
    folder = statements_dir()
    names = []
    for ex in exercises:
        names += _CITED.findall((folder / f"{ex.stem}.md").read_text(encoding="utf-8"))
    return sorted(set(names))


def _derivation_for_handout(text) -> str:
    """A derivation's prose and mathematics: its fenced code blocks (the book's, which import the library)
    replaced by one line."""
    return _FENCE.sub("*(A code block of the book, left out of the handout.)*", text)


#: What a clone of the repository holds, relative to its root, that no export writes into or over.
SOURCES = ("refattn", "exercises", "instructor", "derivations", "docs", "notebooks", "tests", "benchmarks", ".git",
           ".ci", "README.md", "LICENSE", "CITATION.cff", "pyproject.toml", "mkdocs.yml")


def _clone_roots() -> set:
    """The roots of the clones the statements, derivations and model solutions are read from."""
    roots = {Path(os.path.realpath(d.parent)) for d in (statements_dir(), derivations_dir()) if d is not None}
    return roots | ({Path(os.path.realpath(solutions_dir().parents[1]))} if solutions_dir() is not None else set())


def _check_target(target, option, force, kind="folder") -> Path:
    """``target`` as a ``Path`` when an export may write it: a ``kind`` (folder or file) outside the
    repository's own sources (:data:`SOURCES`, the package; a folder: not a clone's root), not a link,
    absent or (with ``force``) of its kind, a folder empty unless ``force``; else one line naming ``option``."""
    if not str(target).strip():
        raise ValueError(f"{option}: expected a {kind}, got an empty path")
    target, real = Path(target), Path(os.path.realpath(target))
    roots = _clone_roots()
    sources = [Path(os.path.realpath(PACKAGE))] + [root / name for root in roots for name in SOURCES]
    inside = next((src for src in sources if real == src or src in real.parents), None)
    if inside is not None or (kind == "folder" and real in roots):
        what = f"in the repository's own {inside.name}{'/' * inside.is_dir()}" if inside is not None else \
            "the root of the repository"
        raise ValueError(f"{option}: {os.fspath(target)!r} is {what}: an export never writes into the "
                         f"repository's sources, --force or not; choose a folder outside them")
    if target.is_symlink():
        raise ValueError(f"{option}: {os.fspath(target)!r} is a symbolic link; name the {kind} itself")
    if kind == "file" and not target.parent.is_dir():
        raise ValueError(f"{option}: no folder {os.fspath(target.parent)!r}")
    if target.exists() and target.is_dir() != (kind == "folder"):
        raise ValueError(f"{option}: {os.fspath(target)!r} exists and is not a {kind}")
    if not force and target.exists() and (kind == "file" or any(target.iterdir())):
        raise ValueError(f"{option}: {os.fspath(target)!r} {'exists' if kind == 'file' else 'is not empty'}; "
                         f"choose another, or add --force to replace what the export writes there (nothing else)")
    return target


def _check_paths(directory, names, option):
    """One line naming ``option`` if a file of ``names`` (relative paths) cannot be written inside
    ``directory`` as a plain file: a link, or a folder, in its way (nothing is followed through a link)."""
    for name in names:
        path = directory
        for i, part in enumerate(Path(name).parts):
            path = path / part
            last = i == len(Path(name).parts) - 1
            if path.is_symlink() or (path.exists() and path.is_dir() == last):
                what = "a symbolic link" if path.is_symlink() else "a folder" if last else "a file"
                raise ValueError(f"{option}: {os.fspath(path)!r} is {what} where the export writes a "
                                 f"{'file' if last else 'folder'}; nothing was written")


def write_atomic(path, data):
    """``data`` (bytes) as the file ``path``, whole or not at all: a fresh temporary file beside it,
    moved over it (a link there is replaced, never followed); nothing is left behind on failure."""
    fd, tmp = tempfile.mkstemp(prefix=f".{Path(path).name}.", suffix=".part", dir=Path(path).parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_all(directory, files) -> list:
    """Write ``files`` (``{relative path: bytes}``) inside ``directory``; the paths written."""
    written = []
    for name, data in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
        written.append(path)
    return written


def check_due(text):
    """``--due``: a date written ``YYYY-MM-DD``; one line naming the option otherwise."""
    import datetime  # noqa: PLC0415

    try:
        return datetime.date.fromisoformat(str(text)).isoformat()
    except ValueError:
        raise ValueError(f"--due: expected a date written YYYY-MM-DD, got {text!r}") from None


def _statement_body(ex, statements):
    """A statement without its title and label line, as the handout gives it."""
    text = _for_handout((statements / f"{ex.stem}.md").read_text(encoding="utf-8"))
    body = text.split("\n", 1)[1] if text.startswith("# ") else text
    return body.replace(ex.label_line, "", 1).strip()


def problem_set_markdown(exercises, points, course, due=None) -> str:
    """The problem set of a handout: a header with the course, the due date and the total, then each
    chosen exercise (its points, difficulty, time and statement) and room for its written part."""
    statements = statements_dir()
    total = sum(points[ex.stem] for ex in exercises)
    minutes = sum(ex.minutes for ex in exercises)
    out = ['<div class="header" markdown>', "", f"# {course}: problem set", "",
           f"**Due:** {due or 'as announced by your course'} · **Total:** {total:g} points · "
           f"{len(exercises)} exercise{'s' * (len(exercises) != 1)}, about {minutes} minutes", "",
           "Submit, for each exercise, your answer file under its starter's name (`NN-name.py`) and your "
           "written derivation (in the box after the statement, or as your course says).", "",
           f'<p class="credit">{credit("text")}</p>', "", "</div>", "",
           "| no | exercise | points | difficulty | minutes |", "|---:|---|---:|:---:|---:|"]
    out += [f"| {ex.number} | {ex.title} | {points[ex.stem]:g} | {ex.difficulty} of 3 | {ex.minutes} |"
            for ex in exercises]
    for ex in exercises:
        out += ["", '<section class="problem" markdown>', "",
                f"## Exercise {ex.number}: {ex.title} ({points[ex.stem]:g} points)", "",
                f'<p class="labels">Difficulty {ex.difficulty} of 3 · about {ex.minutes} minutes · '
                f"part {ex.part} of the learning path</p>", "", _statement_body(ex, statements), "",
                '<div class="written" markdown>', "", "**Your derivation** (the steps the statement asks for):",
                "", "</div>", "", "</section>"]
    return "\n".join(out) + "\n"


def _handout_files(exercises) -> dict:
    """The handout's files, ``{relative path: bytes}``: statements, starters, the derivations they cite,
    the checker with the public cases, ``check.py``, ``README.md`` and ``LICENSE``, each with its credit."""
    from .checker import write_cases  # noqa: PLC0415

    statements, derivations, cited = statements_dir(), derivations_dir(), cited_derivations(exercises)
    text, code = f"\n\n---\n\n*{credit('text')}*\n", f"# {credit('code')}\n"
    files = {}
    for ex in exercises:
        files[f"{ex.stem}.md"] = _for_handout((statements / f"{ex.stem}.md").read_text(encoding="utf-8")) + text
        files[f"{ex.stem}.py"] = code + _for_handout(starter(solution_source(ex), ex.solution))
    for name in cited:
        files[f"derivations/{name}"] = _derivation_for_handout((derivations / name).read_text(encoding="utf-8")) + text
    for name in CHECKER_MODULES:
        files[f"checker/{'__main__' if name == 'checker' else name}.py"] = \
            code + (PACKAGE / "exercises" / f"{name}.py").read_text(encoding="utf-8")
    files["checker/__init__.py"] = code + '"""The exercises\' checker (run it as python -m checker)."""\n'
    files["checker/exercises.json"] = json.dumps([ex.as_dict() for ex in exercises], indent=1) + "\n"
    with tempfile.TemporaryDirectory(prefix="refattn-cases-") as tmp:
        for ex in exercises:
            for path in write_cases(tmp, ex, ex.cases(0)):
                files[f"checker/cases/{path.name}"] = path.read_bytes()
    files["check.py"] = code + _CHECK_PY
    files["README.md"] = _index(exercises, cited)
    files["LICENSE"] = licence_text()
    return {name: data if isinstance(data, bytes) else data.encode("utf-8") for name, data in files.items()}


def licence_text() -> str:
    """The repository's ``LICENSE`` (the MIT licence of the code, CC BY 4.0 of the text), which a handout
    and an autograder ship: a clone's, else the copy installed with the package; ``ValueError`` if neither."""
    for root in sorted(_clone_roots()) or [PACKAGE.parent]:
        if (root / "LICENSE").is_file():
            return (root / "LICENSE").read_text(encoding="utf-8")
    with contextlib.suppress(metadata.PackageNotFoundError):
        dist = metadata.distribution("refattn")
        for name in dist.files or ():  # a wheel's .dist-info/licenses/LICENSE, an egg-info's source tree's
            if name.name == "LICENSE" and Path(dist.locate_file(name)).is_file():
                return Path(dist.locate_file(name)).read_text(encoding="utf-8")
    raise ValueError("the repository's LICENSE is not here: export from the root of a clone")


def _check_course(course, due):
    """``due`` as ``YYYY-MM-DD``; one line naming ``--course`` or ``--due`` for either missing its pair."""
    if course is not None and not str(course).strip():
        raise ValueError("--course: expected the course's name, got an empty text")
    if due is not None and course is None:
        raise ValueError("--due: the due date is printed on the problem set; add --course NAME")
    return None if due is None else check_due(due)


def export_student(directory, exercises=None, *, force=False, points=None, course=None, due=None) -> list:
    """Write the handout (:func:`_handout_files`) into ``directory``; return the paths written.

    ``exercises``: the exercises to include (:func:`select_exercises`; all by default). With
    ``course`` (and ``due``, ``YYYY-MM-DD``, and ``points``, :func:`select_points`), also the problem
    set :data:`PROBLEM_SET` (:func:`problem_set_markdown`, printed by :mod:`refattn.exercises.pdf`).
    Before the first byte is written, raises ``ValueError`` (one line) for a ``directory`` that
    :func:`_check_target` refuses (inside the repository's sources; not empty, unless ``force``:
    then only the files written here are replaced), a link or folder in the way of a file, the
    statements or model solutions not found (export from a clone), missing PDF tools, a failed print.
    """
    from . import pdf  # noqa: PLC0415

    exercises = list(EXERCISES) if exercises is None else list(exercises)
    due = _check_course(course, due)
    if course is not None:
        pdf.check_tools("--course")
    if statements_dir() is None or derivations_dir() is None or solutions_dir() is None:
        raise ValueError(f"--student: the statements (exercises/*.md), derivations and model solutions "
                         f"(instructor/solutions/) are neither beside the package at {PACKAGE.parent} nor in "
                         f"./exercises; run it in the root of a clone of the repository")
    directory = _check_target(directory, "--student", force)
    files = _handout_files(exercises)
    _check_paths(directory, [*files, *([PROBLEM_SET] if course is not None else [])], "--student")
    if course is not None:
        points = select_points(None, exercises) if points is None else points
        files[PROBLEM_SET] = pdf.render(problem_set_markdown(exercises, points, course, due),
                                        title=f"{course}: problem set", option="--course")
    return _write_all(directory, files)


#: The answer keys' fences, ```` ```python wrong ```` and ```` ```grader NAME ````, as Markdown knows them.
_KEY_FENCE = re.compile(r"^```(python|grader)\b[^\n]*$", re.M)


def answer_key_markdown(exercises, course=None) -> str:
    """The answer key: for each exercise its worked solution (``instructor/answer-key/NN-name.md``:
    the derivation, what a full answer contains, the common wrong answers and what the grader tells
    them) and the model solution's code."""
    keys = solutions_dir().parent / "answer-key" if solutions_dir() is not None else None
    missing = [ex.stem for ex in exercises if keys is None or not (keys / f"{ex.stem}.md").is_file()]
    if missing:
        raise ValueError(f"--answer-key: no worked solution for {', '.join(missing)} "
                         f"({ANSWER_KEYS.as_posix()}/NN-name.md in a clone of the repository)")
    out = ['<div class="header" markdown>', "", f"# {course + ': ' if course else ''}answer key", "",
           "For instructors and teaching assistants only: never hand it out. "
           f"{len(exercises)} exercise{'s' * (len(exercises) != 1)}: "
           + ", ".join(f"{ex.number:02d} {ex.name}" for ex in exercises) + ".", "",
           f'<p class="credit">{credit("text", "code")}</p>', "", "</div>"]
    for ex in exercises:
        text = (keys / f"{ex.stem}.md").read_text(encoding="utf-8").strip()
        text = re.sub(r"^# ", "## ", text, count=1, flags=re.M)
        text = re.sub(r"^## (?!Exercise)", "### ", text, flags=re.M)
        text = _KEY_FENCE.sub(lambda m: "```" + ("python" if m.group(1) == "python" else "text"), text)
        out += ["", '<section class="answer" markdown>', "", text, "", "### The model solution", "",
                "```python", solution_source(ex).rstrip("\n"), "```", "", "</section>"]
    return "\n".join(out) + "\n"


def export_answer_key(path, exercises=None, *, course=None, force=False):
    """Write the answer key (:func:`answer_key_markdown`) as the PDF ``path`` (a file :func:`_check_target`
    accepts, named ``.pdf``); return the path."""
    from . import pdf  # noqa: PLC0415

    exercises = list(EXERCISES) if exercises is None else list(exercises)
    if Path(path).suffix != ".pdf":
        raise ValueError(f"--answer-key: expected a file name ending in .pdf, got {os.fspath(path)!r}")
    if solutions_dir() is None:
        raise ValueError("--answer-key: the worked solutions are in a clone of the repository "
                         "(instructor/); run it in a clone's root")
    path = _check_target(path, "--answer-key", force, "file")
    text = answer_key_markdown(exercises, course)
    pdf.check_tools("--answer-key")
    write_atomic(path, pdf.render(text, title="answer key", option="--answer-key"))
    return path


_CHECK_PY = '''"""Check an answer on the public cases: python check.py NAME FILE.py (see README.md)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checker.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
'''


# ------------------------------------------------------------------------------
# Gradescope
# ------------------------------------------------------------------------------

_SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image. refattn's runtime
# dependencies go into a virtual environment, VENV (/autograder/venv, or REFATTN_AUTOGRADER_VENV):
# Debian and Ubuntu images refuse pip installs into their system Python (PEP 668). The package
# itself is in this folder; run_autograder uses the environment's Python.
set -euo pipefail
cd "$(dirname "$0")"
VENV="${REFATTN_AUTOGRADER_VENV:-/autograder/venv}"
if ! command -v python3 >/dev/null; then
    apt-get update
    apt-get install -y python3 python3-venv
fi
if ! python3 -m venv "$VENV"; then  # Debian's python3 lacks venv's pip until python3-venv is installed
    apt-get update
    apt-get install -y python3-venv
    rm -rf "$VENV"
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --upgrade pip
"$VENV/bin/python" -m pip install -r requirements.txt
# The user answers run as (refattn/exercises/isolation.py): unprivileged, no home, no login.
id -u refattn-answer >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin \
    --user-group refattn-answer
"""

_RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission: it grades the files in $ROOT/submission and writes
# $ROOT/results/results.json, always: when the grader cannot start (set-up failed, no Python)
# the file says so, with a score of 0. ROOT is /autograder, or REFATTN_AUTOGRADER_ROOT (to run it
# elsewhere); the Python is set-up's virtual environment's (REFATTN_AUTOGRADER_VENV, default
# /autograder/venv), or REFATTN_AUTOGRADER_PYTHON, or else python3.
set -u
ROOT="${REFATTN_AUTOGRADER_ROOT:-/autograder}"
VENV="${REFATTN_AUTOGRADER_VENV:-/autograder/venv}"
if [ -n "${REFATTN_AUTOGRADER_PYTHON:-}" ]; then
    PYTHON="$REFATTN_AUTOGRADER_PYTHON"
elif [ -x "$VENV/bin/python" ]; then
    PYTHON="$VENV/bin/python"
else
    PYTHON=python3
fi
mkdir -p "$ROOT/results"
(cd "$ROOT/source" && PYTHONPATH="$ROOT/source" "$PYTHON" -m refattn.exercises.gradescope --root "$ROOT")
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
    printf '%s\\n' "{\\"score\\": 0.0, \\"tests\\": [], \\"output\\": \\"The autograder could not start (exit status $status): its set-up failed or is incomplete. This is not your submission's fault: tell your instructor.\\"}" > "$ROOT/results/results.json"
    echo "refattn autograder: the grader did not start (exit status $status); wrote a results file saying so" >&2
fi
exit 0
"""


def _requirements() -> list:
    """refattn's runtime dependencies, as pip requirement lines (the installed metadata's)."""
    try:
        reqs = metadata.requires("refattn") or []
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        reqs = []
    out = [r for r in reqs if "extra ==" not in r]
    return out or ["numpy>=1.24", "autograd>=1.6", "matplotlib>=3.6", "threadpoolctl>=3.1"]


def _package_files():
    for base, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for f in sorted(files):
            if f.endswith((".pyc", ".pyo")):
                continue
            path = Path(base) / f
            yield path, Path("refattn") / path.relative_to(PACKAGE)


def export_gradescope(path, *, hidden_seed=None, timeout=None, hidden_visibility="after_published",
                      exercises=None, points=None, force=False, hidden_weight=0.5, all_or_nothing=False,
                      required_cases="zero") -> dict:
    """Write the Gradescope autograder zip to ``path`` (a file :func:`_check_target` accepts, named
    ``.zip``); return its settings (:func:`gradescope_settings`: the parameters are its). The zip is
    made whole in memory before a byte of it is written."""
    exercises = list(EXERCISES) if exercises is None else list(exercises)
    points = select_points(None, exercises) if points is None else points
    config = gradescope_settings(exercises, points, hidden_seed, timeout, hidden_visibility, hidden_weight,
                                 all_or_nothing, required_cases)
    if Path(path).suffix != ".zip":
        raise ValueError(f"--gradescope: expected a file name ending in .zip, got {os.fspath(path)!r}")
    path = _check_target(path, "--gradescope", force, "file")
    from .similarity import fingerprints  # noqa: PLC0415

    sources = (lambda ex: (solution_source(ex), starter(solution_source(ex)))) if solutions_dir() else None
    config["similarity"] = fingerprints(exercises, sources)
    files = {"setup.sh": (_SETUP_SH, 0o755), "run_autograder": (_RUN_AUTOGRADER, 0o755),
             "requirements.txt": ("\n".join(_requirements()) + "\n", 0o644),
             CONFIG_NAME: (json.dumps(config, indent=2) + "\n", 0o644), "LICENSE": (licence_text(), 0o644)}
    files.update({arc.as_posix(): (src.read_bytes(), 0o644) for src, arc in _package_files()})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr, info.compress_type = (0o100000 | mode) << 16, zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    write_atomic(path, buf.getvalue())
    return config


def gradescope_settings(exercises, points, hidden_seed=None, timeout=None, hidden_visibility="after_published",
                        hidden_weight=0.5, all_or_nothing=False, required_cases="zero") -> dict:
    """The autograder's settings (one line naming the option for a bad one).

    Parameters
    ----------
    exercises, points : list of Exercise, dict
        The exercises graded (:func:`select_exercises`) and their points by stem (:func:`select_points`).
    hidden_seed : int, optional
        One hidden seed for every submission. By default each submission draws its own, from a secret
        stored in the zip (which students never see) and the submitted files.
    timeout : float, optional
        Seconds per answer (default: the grader's).
    hidden_visibility : str
        Gradescope's visibility of the hidden tests: one of :data:`VISIBILITIES`.
    hidden_weight : float
        The share of each exercise's points on its hidden cases, in [0, 1].
    all_or_nothing : bool
        A group of cases scores only when all its cases pass (else by the share passed).
    required_cases : {"zero", "count"}
        A failed case the statement says the answer must pass zeroes its group, or counts as any
        other (:func:`refattn.exercises.gradescope.group_score`).
    """
    if hidden_visibility not in VISIBILITIES:
        raise ValueError(f"--hidden-visibility: expected one of {', '.join(VISIBILITIES)}, "
                         f"got {hidden_visibility!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"--timeout: expected a positive number of seconds, got {timeout!r}")
    if isinstance(hidden_weight, bool) or not isinstance(hidden_weight, (int, float)) or \
            not 0.0 <= hidden_weight <= 1.0:
        raise ValueError(f"--hidden-weight: expected a number from 0 to 1, got {hidden_weight!r}")
    if required_cases not in ("zero", "count"):
        raise ValueError(f"--required-cases: expected zero or count, got {required_cases!r}")
    return {"secret": secrets.token_hex(32), "hidden_seed": None if hidden_seed is None else int(hidden_seed),
            "timeout_s": float(timeout or DEFAULT_TIMEOUT_S), "hidden_visibility": hidden_visibility,
            "hidden_weight": float(hidden_weight), "all_or_nothing": bool(all_or_nothing),
            "required_cases": required_cases,
            "exercises": [{"stem": ex.stem, "points": points[ex.stem]} for ex in exercises]}
