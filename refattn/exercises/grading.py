"""Grading answer files: draw the cases, run the answers apart, judge here.

:func:`grade_many` builds every case of every exercise asked for (public,
and hidden with ``hidden=True``), runs all the answers in one child process
(:func:`refattn.exercises.sandbox.run_jobs`; a new one after an answer that
hangs or ends the process), and judges each case's values in this process.
An answer that could not run at all (it did not load, lacks a function,
exited, timed out, crashed or was refused by the rule) gets one line saying
so; otherwise each case's checks, the hints for common mistakes, and what
the answer printed.
"""

from __future__ import annotations

import os

from .core import Check, Exercise, GraderError, Report, Results, StudentError, Verdict, fold
from .graders import DEFAULT_HIDDEN_SEED, EXERCISES
from .sandbox import DEFAULT_TIMEOUT_S, Job, run_jobs

__all__ = ["exercise", "grade", "grade_many"]


def exercise(name) -> Exercise:
    """The exercise called ``name`` (``"softmax-vjp"``, ``"1"``, ``1``, ``"01"`` or ``"01-softmax-vjp"``).

    Raises ``ValueError`` naming the known exercises for anything else.
    """
    if isinstance(name, Exercise):
        return name
    if isinstance(name, int) and not isinstance(name, bool):
        name = str(name)
    if isinstance(name, str):
        for ex in EXERCISES:
            if name in (ex.name, ex.stem, str(ex.number), f"{ex.number:02d}"):
                return ex
    known = ", ".join(ex.name for ex in EXERCISES)
    raise ValueError(f"NAME: unknown exercise {name!r}; expected one of {known} (or its number)")


def _read(path) -> str:
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        shown = os.fspath(path) if isinstance(path, os.PathLike) else path
        raise ValueError(f"FILE: no such file {shown!r}")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as exc:
        raise ValueError(f"FILE: {os.fspath(path)!r} is not UTF-8 text ({exc.reason})") from None


def _labels(ex, calls):
    sigs = {sig.split("(")[0]: sig for sig in ex.defines}
    return [c.fn if c.attr else sigs.get(c.fn, f"{c.fn}(...)") for c in calls]


def _fatal_line(fatal, path) -> str:
    where = fatal.get("where", "import")
    if fatal["what"] == "exit":
        during = "your file, while imported," if where == "import" else where
        return (f"{during} called sys.exit({fatal.get('code', '')}): an answer must return its values, "
                f"not end the program")
    if fatal["what"] == "refused":
        return fatal.get("message", "refused")
    # raised while imported
    msg = fatal.get("message", "")
    return f"importing {path} raised {fatal.get('type', 'an exception')}" + (f": {msg}" if msg else "")


def _judge(ex, path, cases, run, hidden_run) -> Verdict:
    printed = dict(run.printed)
    if run.status != "done":
        return Verdict(ex.stem, path, False, [Check(False, fold(run.message))], printed=printed, hidden_run=hidden_run)
    fatal = run.manifest.get("fatal")
    if fatal:
        return Verdict(ex.stem, path, False, [Check(False, fold(_fatal_line(fatal, path)))], printed=printed,
                       hidden_run=hidden_run)
    defined = set(run.manifest.get("defined", []))
    callable_ = set(run.manifest.get("callable", []))
    missing = [sig for sig in ex.defines if sig.split("(")[0] not in (callable_ if ex.kind == "function" else defined)]
    if missing:
        what = "function" if ex.kind == "function" else "name"
        return Verdict(ex.stem, path, False, [Check(False, f"{path} defines no {what} {sig}") for sig in missing],
                       printed=printed, hidden_run=hidden_run)
    report, results, grader_error = Report(), [], None
    offsets = {"public": 0, "hidden": 0}
    for case in cases:
        group = "hidden" if case.hidden else "public"
        start = offsets[group]
        offsets[group] += len(case.calls)
        outputs = run.outputs.get(group, [])[start:start + len(case.calls)]
        report.begin(case)
        n_before = len(report.checks)
        try:
            if len(outputs) != len(case.calls):  # pragma: no cover - the child stops only on a fatal event
                raise GraderError("the answer's process returned fewer values than calls")
            case.check(Results(outputs, _labels(ex, case.calls), report), report)
        except StudentError:
            pass  # recorded; the checks after it cannot run
        except Exception as exc:  # noqa: BLE001 - the grader's own computation failed: never the answer's fault
            first = str(exc).splitlines()[0] if str(exc) else ""
            grader_error = grader_error or fold(f"case {case.kind!r}: {type(exc).__name__}: {first}", 300)
            report.hidden = False
            report.check(False, f"grader error (not your answer's fault): {type(exc).__name__}: {first}")
        if len(report.checks) == n_before:  # pragma: no cover - every check records at least one line
            report.check(False, "grader error: the case recorded no check")
            grader_error = grader_error or f"case {case.kind!r} recorded no check"
        results.append({"kind": case.kind, "hidden": case.hidden,
                        "ok": all(c.ok for c in report.checks[n_before:])})
    one_d = [r["ok"] for r, c in zip(results, cases) if c.ndim == 1]
    n_d = [r["ok"] for r, c in zip(results, cases) if c.ndim is not None and c.ndim > 1]
    overflowed = any(h.startswith("NaN or inf") for h in report.hints)  # the failure has another cause
    if one_d and all(one_d) and n_d and not all(n_d) and not overflowed:
        report.hint("right for a single row (1-D), wrong for more axes: reduce along the last axis only "
                    "(axis=-1, keepdims=True), so that each row is normalised by its own entries")
    return Verdict(ex.stem, path, report.ok and grader_error is None, report.checks, cases=results,
                   hints=report.hints, printed=printed, hidden_run=hidden_run, grader_error=grader_error)


def grade_many(items, *, hidden=False, hidden_seed=None, timeout=DEFAULT_TIMEOUT_S, forbidden_dirs=()):
    """Grade several answer files in one run; one :class:`Verdict` per item, in order.

    Parameters
    ----------
    items : sequence of (name, path)
        The exercise (name, number or :class:`Exercise`) and the answer file.
    hidden : bool
        Run the hidden cases too (reported by kind only).
    hidden_seed : int, optional
        The hidden cases' seed (default :data:`DEFAULT_HIDDEN_SEED`).
    timeout : float
        Seconds each answer has, from being loaded to returning its last value.
    forbidden_dirs : sequence of str
        Further folders the answers may not read.

    Raises
    ------
    ValueError
        One line for bad input: an unknown exercise, no file at a path.
    GraderError
        The grader could not run at all, or the library failed while drawing
        a case: never the answers' fault.
    """
    seed = DEFAULT_HIDDEN_SEED if hidden_seed is None else int(hidden_seed)
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"--timeout: expected a positive number of seconds, got {timeout!r}")
    prepared, jobs = [], []
    for k, (name, path) in enumerate(items):
        ex = exercise(name)
        source = _read(path)
        try:
            cases = [c for c in ex.cases(seed) if hidden or not c.hidden]
        except Exception as exc:  # noqa: BLE001 - the library failed while the grader drew inputs
            raise GraderError(f"{ex.stem}: drawing the cases failed: {type(exc).__name__}: {exc}") from exc
        groups = [(g, [c for case in cases if case.hidden == (g == "hidden") for c in case.calls])
                  for g in ("public", "hidden")]
        path = os.fspath(path)
        prepared.append((ex, path, cases))
        jobs.append(Job(f"{k}:{ex.stem}", os.path.abspath(path), source, groups))
    runs = run_jobs(jobs, timeout=float(timeout), extra_forbidden_dirs=forbidden_dirs) if jobs else []
    return [_judge(ex, path, cases, run, hidden) for (ex, path, cases), run in zip(prepared, runs)]


def grade(name, path, **options) -> Verdict:
    """Grade the answer file ``path`` for exercise ``name``: :func:`grade_many` for one file.

    Returns
    -------
    Verdict
        ``ok`` and one line per check. A file that cannot be imported, lacks a
        function, raises, exits, hangs past the time limit or breaks the
        exercises' rule is a wrong answer (one line saying what happened),
        not bad input.
    """
    return grade_many([(name, path)], **options)[0]
