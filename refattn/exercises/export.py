"""A student handout and a Gradescope autograder, made from a clone of the repository.

Each exercise has one source, ``instructor/solutions/NN-name.py`` in a
clone of the repository (not in the installed package, which a student may
have):
the model solution, with every piece of solution between the nbgrader-style
lines ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (comments, so the file
runs as it is). :func:`starter` removes those pieces: a piece inside a
function becomes ``# YOUR CODE HERE`` and ``raise NotImplementedError()`` at
its indentation; a piece at module level (notes, helpers, the computation
of ``ANSWER``) disappears. Signatures, docstrings and anything outside the
markers stay.

* :func:`export_student` writes the statements (``exercises/*.md`` of the
  repository), an index and one starter per exercise: no solution text and
  no grader (the hidden cases live in the grader).
* :func:`export_gradescope` writes a zip that Gradescope unpacks into
  ``/autograder/source``: ``setup.sh`` (installs the runtime dependencies
  from PyPI), ``run_autograder`` (grades ``/autograder/submission`` into
  ``/autograder/results/results.json``), a copy of the package (the
  graders; no solutions) and ``refattn_autograder.json``, the settings: the hidden
  cases' seed (drawn at export unless given, so the hidden inputs are not
  those of the public source), the time limit and the points.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import zipfile
from importlib import metadata
from pathlib import Path

from .. import __version__
from .core import PARTS
from .graders import EXERCISES
from .sandbox import DEFAULT_TIMEOUT_S, RULE

__all__ = ["BEGIN", "END", "solutions_dir", "solution_path", "solution_source", "starter", "solution_blocks",
           "check_command", "select_exercises", "select_points", "export_student", "export_gradescope",
           "VISIBILITIES", "CONFIG_NAME"]

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
#: Gradescope's visibility settings for a test.
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
#: The settings file inside the autograder zip.
CONFIG_NAME = "refattn_autograder.json"

PACKAGE = Path(__file__).resolve().parents[1]  # refattn/
STATEMENTS = PACKAGE.parent / "exercises"  # the repository's exercises/ (absent from an installed wheel)


def statements_dir():
    """The folder of the statements: beside the package (a clone, or an editable install), else
    ``exercises/`` in the current folder (a clone whose package was installed with ``pip install .``)."""
    for folder in (STATEMENTS, Path.cwd() / "exercises"):
        if (folder / "01-softmax-vjp.md").is_file():
            return folder
    return None


SOLUTIONS = PACKAGE.parent / "instructor" / "solutions"  # a clone's model solutions (absent from a wheel)


def solutions_dir():
    """The folder of the model solutions: ``instructor/solutions`` beside the package (a clone, or
    an editable install), else in the current folder (a clone whose package was installed with
    ``pip install .``); ``None`` where neither holds them (an installed wheel alone)."""
    for folder in (SOLUTIONS, Path.cwd() / "instructor" / "solutions"):
        if (folder / "01-softmax-vjp.py").is_file():
            return folder
    return None


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
    return f".venv/bin/refattn exercises check {ex.name} {ex.stem}.py"


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


def _index(title_note, exercises) -> str:
    """The handout's README: how to set up and check an answer, then the exercises by part."""
    first = exercises[0]
    lines = ["# Exercises on attention beyond softmax", "",
             title_note, "",
             "Each exercise has a statement (`NN-name.md`) and a starter (`NN-name.py`): keep the",
             "signatures, fill in the bodies.", "",
             "## Set up once", "",
             "In this folder, make a virtual environment named `.venv`:", "",
             "    python3 -m venv .venv", "",
             "and install refattn into it from this folder's `package/` (the library and its graders;",
             "no solutions):", "",
             "    .venv/bin/pip install ./package", "",
             "## Check an answer", "",
             "In this folder, with the exercise's name and your file (each exercise's command is in",
             "the tables below):", "",
             f"    {check_command(first)}", "",
             "It runs the public cases: exit status 0 when your answer is right, 1 when it is wrong,",
             "with one line per failing check saying what and where; add `--json` for the same as",
             "JSON. Your file runs in a separate process, with a time limit. " + RULE, ""]
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
    return "\n".join(lines)


def export_student(directory, exercises=None) -> list:
    """Write the handout into ``directory``: statements, starters and an index; return the paths.

    ``exercises``: the exercises to include (:func:`select_exercises`; all by default). Raises
    ``ValueError`` (one line) when the statements or the model solutions cannot be found (an
    installed wheel carries the graders only: export from a clone of the repository).
    """
    exercises = list(EXERCISES) if exercises is None else list(exercises)
    directory = Path(directory)
    statements = statements_dir()
    if statements is None:
        raise ValueError(f"--student: the statements (exercises/*.md) are neither beside the package at "
                         f"{PACKAGE.parent} nor in ./exercises; run it in the root of a clone of the repository")
    if solutions_dir() is None:
        raise ValueError("--student: the starters are made from the model solutions (instructor/solutions/), "
                         "which a clone of the repository has and the package does not; run it in a clone's root")
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--student: {os.fspath(directory)!r} exists and is not a folder")
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for ex in exercises:
        text = (statements / f"{ex.stem}.md").read_text(encoding="utf-8")
        (directory / f"{ex.stem}.md").write_text(text, encoding="utf-8")
        (directory / f"{ex.stem}.py").write_text(starter(solution_source(ex), ex.solution), encoding="utf-8")
        written += [directory / f"{ex.stem}.md", directory / f"{ex.stem}.py"]
    written += _write_package(directory / "package")
    note = ("The derivations the statements cite (`derivations/NN-*.md`) are in the refattn book and "
            "repository.")
    (directory / "README.md").write_text(_index(note, exercises), encoding="utf-8")
    return [directory / "README.md", *written]


def _write_package(folder) -> list:
    """The refattn package (the library and the graders, which hold no solution) and a minimal
    ``pyproject.toml``, for a student to install without a clone of the repository, whose
    ``instructor/solutions/`` (and history) hold every model solution."""
    written = []
    for src, arc in _package_files():
        dst = folder / arc
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
        written.append(dst)
    deps = ", ".join(json.dumps(r) for r in _requirements())
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "refattn"\nversion = "{__version__}"\nrequires-python = ">=3.10"\n'
        f'dependencies = [{deps}]\n\n[project.scripts]\nrefattn = "refattn.cli:main"\n\n'
        '[tool.setuptools.packages.find]\ninclude = ["refattn", "refattn.*"]\n', encoding="utf-8")
    return [*written, folder / "pyproject.toml"]


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
rm -f "$ROOT/results/results.json"
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
                      exercises=None, points=None) -> dict:
    """Write the Gradescope autograder zip to ``path``; return its settings.

    Parameters
    ----------
    path : str or PathLike
        The zip to write (replaced if it exists).
    hidden_seed : int, optional
        The hidden cases' seed; drawn at random when omitted (it is stored in
        the zip, which students never see).
    timeout : float, optional
        Seconds per answer (default: the grader's).
    hidden_visibility : str
        Gradescope's visibility of the hidden tests: one of
        :data:`VISIBILITIES` (``after_published`` by default).
    exercises : list of Exercise, optional
        The exercises graded (:func:`select_exercises`; all by default).
    points : dict, optional
        Points per exercise stem (:func:`select_points`; the labels', twice
        the difficulty, by default).
    """
    exercises = list(EXERCISES) if exercises is None else list(exercises)
    points = select_points(None, exercises) if points is None else points
    if hidden_visibility not in VISIBILITIES:
        raise ValueError(f"--hidden-visibility: expected one of {', '.join(VISIBILITIES)}, "
                         f"got {hidden_visibility!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"--timeout: expected a positive number of seconds, got {timeout!r}")
    path = Path(path)
    if path.suffix != ".zip":
        raise ValueError(f"--gradescope: expected a file name ending in .zip, got {os.fspath(path)!r}")
    if path.parent and not path.parent.is_dir():
        raise ValueError(f"--gradescope: no folder {os.fspath(path.parent)!r}")
    config = {
        "hidden_seed": secrets.randbelow(2 ** 31) if hidden_seed is None else int(hidden_seed),
        "timeout_s": float(timeout or DEFAULT_TIMEOUT_S),
        "hidden_visibility": hidden_visibility,
        "exercises": [{"stem": ex.stem, "points": points[ex.stem]} for ex in exercises],
    }
    tmp = path.with_name(path.name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        def add_text(name, text, mode=0o644):
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, text)

        add_text("setup.sh", _SETUP_SH, 0o755)
        add_text("run_autograder", _RUN_AUTOGRADER, 0o755)
        add_text("requirements.txt", "\n".join(_requirements()) + "\n")
        add_text(CONFIG_NAME, json.dumps(config, indent=2) + "\n")
        for src, arc in _package_files():
            add_text(arc.as_posix(), src.read_bytes())
    os.replace(tmp, path)
    return config
