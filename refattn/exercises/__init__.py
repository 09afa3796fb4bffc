"""Exercises on the derivations, each with a grader that an answer cannot fool.

The statements are markdown files in the repository's ``exercises/`` folder
(``exercises/README.md`` lists them by part, with difficulty and minutes);
each exercise's model solution, with its solution marked by ``### BEGIN
SOLUTION`` / ``### END SOLUTION``, is in ``instructor/solutions/`` of a
clone of the repository (never in the installed package) and the source of
the student's starter (:mod:`refattn.exercises.export`).

An answer is a Python file that defines the functions an exercise asks for
(or a number ``ANSWER``). The grader runs it in a separate process with a
time limit, under the exercises' rule (NumPy and the standard library; no
refattn, autograd, jax, torch, tensorflow or sympy; no reading the library's
files), sends it the inputs, and, once that process has ended, judges what it
returned against the library (:mod:`refattn.exercises.runner`,
:mod:`refattn.exercises.grading`, :mod:`refattn.exercises.judge`). Where the
grader runs as root (Gradescope, or ``check``/``try-gradescope`` started as
root) the answer runs as another user, alone and under limits
(:mod:`refattn.exercises.isolation`); elsewhere a guard written in Python
enforces the rule, a convenience and not a boundary:

    refattn exercises                      list them (--json: a strict JSON list)
    refattn exercises check NAME FILE.py   grade the public cases: exit 0 correct, 1 wrong, 2 bad input
        [--hidden] [--timeout S] [--json]  also the hidden cases (reported by kind only)
    refattn exercises export --student DIR       statements, starters, the checker and public cases
    refattn exercises export --gradescope FILE.zip   a Gradescope autograder
        [--exercises 01,03,...] [--points P | NAME=P,...]   a subset; points (default: the labels)
        [--force]                                  replace what a previous export wrote
    refattn exercises try-gradescope FILE.zip    run the zip as Gradescope would, here
        [--submission DIR] [--keep DIR] [--json]   (default: on the model solutions of a clone)
    refattn exercises similarity CLASS           near-copies among a class's answers, in a clone
        [--exercises 01,03,...] [--json]           (CLASS: a folder per student, or Gradescope's export zip)

``NAME`` is an exercise's name (``softmax-vjp``), its number (``1`` or
``01``) or both (``01-softmax-vjp``). Interrupting (Ctrl-C) prints one line
and exits with 130.
"""

from __future__ import annotations

import json as _json
import signal
import sys

from .judge import PARTS, Exercise, GraderError, Verdict
from .graders import DEFAULT_HIDDEN_SEED, EXERCISES
from .grading import exercise, grade, grade_many
from .runner import DEFAULT_TIMEOUT_S, RULE, Stopped, signals_as_interrupt

__all__ = ["EXERCISES", "PARTS", "RULE", "Exercise", "Verdict", "GraderError", "exercise", "grade", "grade_many",
           "list_exercises", "run_command", "add_arguments", "command_from_args", "main", "DEFAULT_TIMEOUT_S",
           "DEFAULT_HIDDEN_SEED"]


def list_exercises() -> list:
    """Every exercise as a dict: number, name, title, statement (path relative to the repository
    root), kind ("function" or "number"), what the answer defines, part (1-3) and its title,
    difficulty (1-3) and estimated minutes."""
    return [ex.as_dict() for ex in EXERCISES]


def format_list(items) -> str:
    """The list of :func:`list_exercises` as a plain-text table, grouped by part."""
    w = max(len(d["name"]) for d in items)
    lines = []
    for part, title in PARTS.items():
        rows = [d for d in items if d["part"] == part]
        minutes = sum(d["minutes"] for d in rows)
        lines += [f"Part {part}: {title} ({len(rows)} exercises, {minutes} minutes in all by their labels)",
                  f"  {'no':>2s}  {'name':{w}s}  diff  min  title"]
        lines += [f"  {d['number']:2d}  {d['name']:{w}s}  {d['difficulty']:>2d}/3  {d['minutes']:3d}  {d['title']}"
                  for d in rows]
        lines.append("")
    lines += ["Statements: exercises/NN-name.md in the repository; the learning path (the book's home page)",
              "asks a few of each part. Starters for all: refattn exercises export --student DIR, in a clone.",
              "Grade an answer with", "  refattn exercises check NAME FILE.py"]
    return "\n".join(lines)


def _timeout(value) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = float("nan")
    if not (t > 0 and t < float("inf")):
        raise ValueError(f"--timeout: expected a positive number of seconds, got {value!r}")
    return t


def run_command(command, name=None, path=None, *, json=False, hidden=False, timeout=DEFAULT_TIMEOUT_S,
                student=None, gradescope=None, hidden_seed=None, hidden_visibility="after_published",
                exercises=None, points=None, submission=None, keep=None, force=False, answer_key=None, course=None,
                due=None, hidden_weight=0.5, all_or_nothing=False, required_cases="zero", out=print,
                err=None) -> int:
    """What ``refattn exercises [check NAME FILE | export ...]`` does; returns the exit code.

    ``command`` is ``None`` (list), ``"check"``, ``"export"`` or
    ``"try-gradescope"`` (``path`` is the zip); ``json``
    prints strict JSON (a list of :func:`list_exercises`, or
    :meth:`Verdict.as_dict`). Bad input raises ``ValueError`` (the command
    line turns it into one line and exit 2); a grader error is one line on
    ``err`` and exit 2.
    """
    err = err or (lambda text: print(text, file=sys.stderr))
    if command is None:
        items = list_exercises()
        out(_json.dumps(items, indent=2, allow_nan=False) if json else format_list(items))
        return 0
    if command == "try-gradescope":
        from .gradescope import format_results, try_zip  # noqa: PLC0415

        results, kept, _ = try_zip(path, submission=submission, keep=keep)
        if json:
            out(_json.dumps(results, indent=2, allow_nan=False))
        else:
            where = f"kept in {keep}" if kept else "in a temporary folder, removed (--keep DIR keeps it)"
            out(f"{path} run as Gradescope runs it (source/, submission/, results/ {where}):\n"
                + format_results(results))
        return 0
    if command == "similarity":
        return _similarity(path, exercises, json, out)
    if command == "export":
        return _export(student, gradescope, answer_key, exercises, points, course, due, hidden_seed, timeout,
                       hidden_visibility, hidden_weight, all_or_nothing, required_cases, force, json, out)
    if command != "check":
        raise ValueError(f"command: expected 'check', 'export', 'try-gradescope', 'similarity' or nothing, "
                         f"got {command!r}")
    try:
        verdict = grade(name, path, hidden=hidden, timeout=timeout,
                        hidden_seed=None if hidden_seed is None else hidden_seed)
    except GraderError as exc:
        err(f"refattn exercises: grader error (not your answer's fault): {str(exc).splitlines()[0]}")
        return 2
    out(_json.dumps(verdict.as_dict(), indent=2, allow_nan=False) if json else str(verdict))
    if verdict.grader_error:
        err(f"refattn exercises: grader error (not your answer's fault): {verdict.grader_error}")
        return 2
    return 0 if verdict.ok else 1


def _export(student, gradescope, answer_key, exercises, points, course, due, hidden_seed, timeout,
            hidden_visibility, hidden_weight, all_or_nothing, required_cases, force, as_json, out) -> int:
    """``refattn exercises export``: the handout (with its problem set), the autograder, the answer key."""
    from .export import (PROBLEM_SET, export_answer_key, export_gradescope, export_student,  # noqa: PLC0415
                         select_exercises, select_points)

    if student is None and gradescope is None and answer_key is None:
        raise ValueError("export: expected --student DIR, --gradescope FILE.zip, --answer-key FILE.pdf, or several")
    chosen = select_exercises(exercises)
    per_exercise = select_points(points, chosen)
    if points is not None and gradescope is None and course is None:
        raise ValueError("--points: points are printed on the problem set (--student DIR --course NAME) and "
                         "scored by the autograder (--gradescope FILE.zip); add one of them")
    if course is not None and student is None and answer_key is None:
        raise ValueError("--course: the course's name heads the problem set (--student DIR) or the answer key "
                         "(--answer-key FILE.pdf); add one of them")
    done = {}
    if student is not None:
        done["student"] = [str(p) for p in export_student(student, chosen, force=force, points=per_exercise,
                                                          course=course if course is not None else None,
                                                          due=due)]
    if gradescope is not None:
        config = export_gradescope(gradescope, hidden_seed=hidden_seed,
                                   timeout=None if timeout == DEFAULT_TIMEOUT_S else timeout,
                                   hidden_visibility=hidden_visibility, exercises=chosen, points=per_exercise,
                                   force=force, hidden_weight=hidden_weight, all_or_nothing=all_or_nothing,
                                   required_cases=required_cases)
        done["gradescope"] = {"zip": str(gradescope), "timeout_s": config["timeout_s"],
                              "hidden_visibility": config["hidden_visibility"],
                              "hidden_seed": "per submission" if config["hidden_seed"] is None else "fixed",
                              "hidden_weight": config["hidden_weight"], "all_or_nothing": config["all_or_nothing"],
                              "required_cases": config["required_cases"],
                              "points_per_exercise": {e["stem"]: e["points"] for e in config["exercises"]},
                              "points": sum(e["points"] for e in config["exercises"])}
    if answer_key is not None:
        done["answer_key"] = str(export_answer_key(answer_key, chosen, course=course, force=force))
    if as_json:
        out(_json.dumps(done, indent=2, allow_nan=False))
        return 0
    if "student" in done:
        out(f"student handout: {len(done['student'])} files in {student} (statements, starters, the cited "
            f"derivations, README.md, check.py and the checker with the public cases"
            + (f", {PROBLEM_SET}" if course is not None else "") + ")")
    if "gradescope" in done:
        g = done["gradescope"]
        out(f"Gradescope autograder: {gradescope} ({g['points']:g} points, {g['timeout_s']:g} s per answer, "
            f"hidden tests {g['hidden_visibility']}, {g['hidden_weight']:g} of each exercise's points on them"
            + (", all or nothing per group" if g["all_or_nothing"] else "")
            + "); upload it as the assignment's autograder")
    if "answer_key" in done:
        out(f"answer key: {done['answer_key']} (for instructors only)")
    return 0


def _similarity(path, exercises, as_json, out) -> int:
    """``refattn exercises similarity CLASS``: near-copies across the class, and answers close to the
    library or the model solutions (:mod:`refattn.exercises.classroom`)."""
    from .classroom import class_report, format_class_report  # noqa: PLC0415
    from .export import select_exercises, solution_source, solutions_dir, starter  # noqa: PLC0415

    chosen = select_exercises(exercises)
    if solutions_dir() is None:
        raise ValueError("similarity: the starters and model solutions it compares with are in a clone of the "
                         "repository (instructor/solutions/); run it in a clone's root")
    report = class_report(path, chosen, lambda ex: (solution_source(ex), starter(solution_source(ex))))
    out(_json.dumps(report, indent=2, allow_nan=False) if as_json else format_class_report(report))
    return 0


def _weight(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"--hidden-weight: expected a number from 0 to 1, got {text!r}")
    return value


def add_arguments(parser):
    """The arguments of ``refattn exercises``: ``--json``, and the subcommands ``check`` and ``export``."""
    parser.add_argument("--json", action="store_true", help="print strict JSON")
    sub = parser.add_subparsers(dest="exercises_command", metavar="{check,export,try-gradescope,similarity}")
    p = sub.add_parser("check", help="grade an answer file: exit 0 correct, 1 wrong, 2 bad input")
    p.add_argument("name", metavar="NAME", help="the exercise: its name (softmax-vjp) or number (1, 01)")
    p.add_argument("file", metavar="FILE.py", help="the answer file")
    p.add_argument("--json", dest="check_json", action="store_true", help="print the verdict as strict JSON")
    p.add_argument("--hidden", action="store_true",
                   help="run the hidden cases too (other seeds, shapes and edge cases; reported by kind only)")
    p.add_argument("--hidden-seed", type=int, default=None,
                   help="draw the hidden cases from this seed (default: the library's, the same in every clone, so "
                        "passing them here says less than a course's grader, which draws new ones per submission)")
    p.add_argument("--timeout", default=DEFAULT_TIMEOUT_S,
                   help=f"seconds the answer has to return all its values (default {DEFAULT_TIMEOUT_S:g})")
    p = sub.add_parser("export", help="write a student handout and/or a Gradescope autograder")
    p.add_argument("--student", metavar="DIR", help="write statements, starters and an index into DIR")
    p.add_argument("--gradescope", metavar="FILE.zip", help="write a Gradescope autograder zip")
    p.add_argument("--hidden-seed", type=int, default=None,
                   help="one hidden seed for every submission (default: each submission draws its own). A fixed "
                        "seed gives away that every submission meets the same hidden inputs: what one student learns "
                        "of them, by resubmitting or from a classmate, holds for all; the visible cases are drawn per "
                        "submission either way")
    p.add_argument("--timeout", default=DEFAULT_TIMEOUT_S,
                   help=f"seconds per answer in the autograder (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--hidden-visibility", default="after_published",
                   help="Gradescope visibility of the hidden tests: hidden, after_due_date, after_published "
                        "(default) or visible")
    p.add_argument("--exercises", metavar="LIST", default=None,
                   help="only these exercises, names or numbers separated by commas (01,03,softmax-vjp; "
                        "default: all)")
    p.add_argument("--points", metavar="P|NAME=P,...", default=None,
                   help="the autograder's points: one number for every exercise, or NAME=P pairs "
                        "(default: the labels, twice each exercise's difficulty)")
    p.add_argument("--answer-key", metavar="FILE.pdf", help="write the worked solutions of the chosen exercises "
                                                           "(instructors only)")
    p.add_argument("--course", metavar="NAME", help="the course's name: with --student, also writes the problem set "
                                                   "(problem-set.pdf) with the points and room for written work")
    p.add_argument("--due", metavar="YYYY-MM-DD", help="the due date printed on the problem set")
    p.add_argument("--hidden-weight", metavar="W", default="0.5",
                   help="the share of each exercise's points on its hidden cases, 0 to 1 (default 0.5)")
    p.add_argument("--all-or-nothing", action="store_true",
                   help="a group of cases scores only when all of them pass (default: by the share passed)")
    p.add_argument("--required-cases", choices=("zero", "count"), default="zero",
                   help="a failed case the statement says the answer must pass: zero its group (default) or "
                        "count it as any other")
    p.add_argument("--force", action="store_true",
                   help="write into a folder that is not empty, or over an existing zip (only the files the "
                        "export writes are replaced)")
    p.add_argument("--json", dest="export_json", action="store_true", help="print what was written as JSON")
    _add_trials(sub)
    return parser


def _add_trials(sub):
    """The subcommands ``try-gradescope`` and ``similarity``: an instructor's checks of the autograder
    and of a class's answers."""
    p = sub.add_parser("try-gradescope", help="run an autograder zip as Gradescope would, in a temporary "
                                              "folder laid out like Gradescope's, and print the scores")
    p.add_argument("zip", metavar="FILE.zip", help="the zip that export --gradescope wrote")
    p.add_argument("--submission", metavar="DIR", default=None,
                   help="the folder of answer files to grade (default: the model solutions of this clone)")
    p.add_argument("--keep", metavar="DIR", default=None,
                   help="lay it out in DIR, a new folder, and keep it (default: a temporary folder)")
    p.add_argument("--json", dest="try_json", action="store_true", help="print results.json")
    p = sub.add_parser("similarity", help="near-copies among a class's answers, by structure, with the evidence "
                                          "side by side (in a clone of the repository)")
    p.add_argument("class_path", metavar="CLASS", help="a folder with one folder per student, or the zip of "
                                                       "Gradescope's Export Submissions (or that zip unpacked)")
    p.add_argument("--exercises", metavar="LIST", default=None,
                   help="only these exercises, names or numbers separated by commas (default: all)")
    p.add_argument("--json", dest="similarity_json", action="store_true", help="print the report as strict JSON")


def command_from_args(args) -> int:
    """Run :func:`run_command` from parsed :func:`add_arguments` arguments. Ctrl-C, SIGTERM, SIGHUP:
    one line, exit 128 + the signal's number (130 for Ctrl-C)."""
    command = getattr(args, "exercises_command", None)
    as_json = bool(args.json or getattr(args, "check_json", False) or getattr(args, "export_json", False)
                   or getattr(args, "try_json", False) or getattr(args, "similarity_json", False))
    try:
        with signals_as_interrupt():
            return _command(command, args, as_json)
    except Stopped as exc:
        print(f"refattn exercises: stopped by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("refattn exercises: interrupted", file=sys.stderr)
        return 130


def _command(command, args, as_json) -> int:
    timeout = _timeout(getattr(args, "timeout", DEFAULT_TIMEOUT_S))
    if getattr(args, "hidden_seed", None) is not None and args.hidden_seed < 0:
        raise ValueError(f"--hidden-seed: expected an integer >= 0, got {args.hidden_seed}")
    path = {"try-gradescope": getattr(args, "zip", None), "similarity": getattr(args, "class_path", None)}.get(
        command, getattr(args, "file", None))
    return run_command(command, getattr(args, "name", None), path, json=as_json,
                       hidden=getattr(args, "hidden", False), timeout=timeout,
                       student=getattr(args, "student", None), gradescope=getattr(args, "gradescope", None),
                       hidden_seed=getattr(args, "hidden_seed", None),
                       hidden_visibility=getattr(args, "hidden_visibility", "after_published"),
                       exercises=getattr(args, "exercises", None), points=getattr(args, "points", None),
                       submission=getattr(args, "submission", None), keep=getattr(args, "keep", None),
                       force=getattr(args, "force", False), answer_key=getattr(args, "answer_key", None),
                       course=getattr(args, "course", None), due=getattr(args, "due", None),
                       hidden_weight=_weight(getattr(args, "hidden_weight", "0.5")),
                       all_or_nothing=getattr(args, "all_or_nothing", False),
                       required_cases=getattr(args, "required_cases", "zero"))


def main(argv=None) -> int:
    """``python -m refattn.exercises [--json] [check NAME FILE | export ...]``, as ``refattn exercises``:
    bad input is one line on stderr and exit code 2."""
    import argparse  # noqa: PLC0415

    parser = add_arguments(argparse.ArgumentParser(prog="refattn exercises",
                                                   description="exercises on the derivations, graded"))
    args = parser.parse_args(argv)
    try:
        return command_from_args(args)
    except ValueError as exc:
        print(f"refattn exercises: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
