"""Exercises on the derivations, each with a grader that checks an answer file against the library.

The statements are markdown files in the repository's ``exercises/`` folder
(``exercises/README.md`` lists them), the model solutions sit apart in
``exercises/solutions/``. An answer is a Python file that defines the
functions an exercise asks for (or a number ``ANSWER``); :func:`grade` imports
it from its path (it need not be inside the package or on ``sys.path``),
calls it on random inputs and compares with the library:

    refattn exercises                      list them
    refattn exercises --json               the same, as a strict JSON list
    refattn exercises check NAME FILE.py   grade a file: exit 0 correct, 1 wrong, 2 bad input

``NAME`` is an exercise's name (``softmax-vjp``), its number (``1`` or
``01``) or both (``01-softmax-vjp``).
"""

from __future__ import annotations

import json as _json
import os

from .core import Exercise, Report, StudentError, Verdict
from .graders import EXERCISES

__all__ = ["EXERCISES", "Exercise", "Verdict", "exercise", "grade", "list_exercises",
           "run_command", "add_arguments", "command_from_args", "main"]


def exercise(name) -> Exercise:
    """The exercise called ``name`` (``"softmax-vjp"``, ``"1"``, ``"01"`` or ``"01-softmax-vjp"``).

    Raises ``ValueError`` naming the known exercises for anything else.
    """
    if isinstance(name, str):
        for ex in EXERCISES:
            if name in (ex.name, ex.stem, str(ex.number), f"{ex.number:02d}"):
                return ex
    known = ", ".join(ex.name for ex in EXERCISES)
    raise ValueError(f"NAME: unknown exercise {name!r}; expected one of {known} (or its number)")


def list_exercises() -> list:
    """Every exercise as a dict: number, name, title, statement (path relative to the
    repository root), kind ("function" or "number") and what the answer defines."""
    return [ex.as_dict() for ex in EXERCISES]


def grade(name, path) -> Verdict:
    """Grade the answer file ``path`` for exercise ``name``.

    Raises
    ------
    ValueError
        One line for bad input: an unknown exercise, or no file at ``path``.

    Returns
    -------
    Verdict
        ``ok`` and one line per check. A file that cannot be imported, lacks a
        function the exercise asks for, or whose code raises is a wrong answer
        (a failed check saying so), not bad input.
    """
    from ..custom import load_module  # noqa: PLC0415

    ex = exercise(name)
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        raise ValueError(f"FILE: no such file {os.fspath(path) if isinstance(path, os.PathLike) else path!r}")
    path = os.fspath(path)
    report = Report()
    try:
        module = load_module(path, "FILE")
    except ValueError as exc:  # the student's file raised while imported: a wrong answer
        report.check(False, str(exc).replace("FILE: ", "", 1))
        return Verdict(ex.stem, path, False, report.checks)
    missing = [sig for sig in ex.defines if not hasattr(module, sig.split("(")[0])]
    if missing:
        what = "function" if ex.kind == "function" else "name"
        for sig in missing:
            report.check(False, f"{path} defines no {what} {sig}")
        return Verdict(ex.stem, path, False, report.checks)
    try:
        ex.grader(module, report)
    except StudentError:
        pass  # recorded by Report.call; the checks after it cannot run
    except Exception as exc:  # the student's code raised inside a library call (gradcheck, say)
        msg = str(exc).splitlines()[0] if str(exc) else ""
        report.check(False, f"grading stopped: your code raised {type(exc).__name__}: {msg}")
    if not report.checks:  # pragma: no cover - every grader records at least one check
        report.check(False, "the grader recorded no check")
    return Verdict(ex.stem, path, report.ok, report.checks)


def format_list(items) -> str:
    """The list of :func:`list_exercises` as a plain-text table."""
    w = max(len(d["name"]) for d in items)
    lines = [f"{'no':>2s}  {'name':{w}s}  {'answer':8s}  title", "-" * (w + 60)]
    for d in items:
        lines.append(f"{d['number']:2d}  {d['name']:{w}s}  {d['kind']:8s}  {d['title']}")
    lines += ["", "Statements: exercises/NN-name.md in the repository. Grade an answer with",
              "  refattn exercises check NAME FILE.py"]
    return "\n".join(lines)


def run_command(command, name=None, path=None, *, json=False, out=print) -> int:
    """What ``refattn exercises [check NAME FILE]`` does; returns the exit code.

    ``command`` is ``None`` (list) or ``"check"``; ``json`` prints strict JSON
    (a list of :func:`list_exercises`, or :meth:`Verdict.as_dict`). Bad input
    raises ``ValueError`` (the command line turns it into one line and exit 2).
    """
    if command is None:
        items = list_exercises()
        out(_json.dumps(items, indent=2, allow_nan=False) if json else format_list(items))
        return 0
    if command != "check":
        raise ValueError(f"command: expected 'check' or nothing, got {command!r}")
    verdict = grade(name, path)
    out(_json.dumps(verdict.as_dict(), indent=2, allow_nan=False) if json else str(verdict))
    return 0 if verdict.ok else 1


def add_arguments(parser):
    """The arguments of ``refattn exercises``: ``--json`` and the subcommand ``check NAME FILE``."""
    parser.add_argument("--json", action="store_true", help="print strict JSON")
    sub = parser.add_subparsers(dest="exercises_command", metavar="check")
    p = sub.add_parser("check", help="grade an answer file: exit 0 correct, 1 wrong, 2 bad input")
    p.add_argument("name", metavar="NAME", help="the exercise: its name (softmax-vjp) or number (1, 01)")
    p.add_argument("file", metavar="FILE.py", help="the answer file")
    p.add_argument("--json", dest="check_json", action="store_true", help="print the verdict as strict JSON")
    return parser


def command_from_args(args) -> int:
    """Run :func:`run_command` from parsed :func:`add_arguments` arguments."""
    command = getattr(args, "exercises_command", None)
    as_json = bool(args.json or getattr(args, "check_json", False))
    return run_command(command, getattr(args, "name", None), getattr(args, "file", None), json=as_json)


def main(argv=None) -> int:
    """``python -m refattn.exercises [--json] [check NAME FILE]``, as ``refattn exercises``:
    bad input is one line on stderr and exit code 2."""
    import argparse  # noqa: PLC0415
    import sys  # noqa: PLC0415

    parser = add_arguments(argparse.ArgumentParser(prog="refattn exercises",
                                                   description="exercises on the derivations, graded"))
    args = parser.parse_args(argv)
    try:
        return command_from_args(args)
    except ValueError as exc:
        print(f"refattn exercises: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
