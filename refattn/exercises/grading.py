"""Grading answer files: draw the cases, run the answers apart, judge here.

:func:`grade_many` builds every case of every exercise asked for (public,
and hidden with ``hidden=True``), runs the public cases of all the answers
in one child process (:func:`refattn.exercises.sandbox.run_jobs`; a new one
after an answer that hangs or ends the process), then their hidden cases in
another, and judges each case's values in this process. An answer that
could not run its public cases (it did not load, lacks a function, exited,
timed out, crashed or was refused by the rule) gets one line saying so;
otherwise each case's checks, the hints for common mistakes (found per
group), and what the answer printed (per run). A hidden run that fails as a
whole fails every hidden case, with one line saying why.
"""

from __future__ import annotations

import os

from .core import PRINTED_KEYS, Check, Exercise, GraderError, Report, Results, StudentError, Verdict, fold
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


def _cannot_run(ex, path, run):
    """The lines saying why the answer could not run its calls in ``run``, or ``None`` if it did."""
    if run.status != "done":
        return [fold(run.message)]
    fatal = run.manifest.get("fatal")
    if fatal:
        return [fold(_fatal_line(fatal, path))]
    defined = set(run.manifest.get("defined", []))
    callable_ = set(run.manifest.get("callable", []))
    missing = [sig for sig in ex.defines if sig.split("(")[0] not in (callable_ if ex.kind == "function" else defined)]
    what = "function" if ex.kind == "function" else "name"
    return [f"{path} defines no {what} {sig}" for sig in missing] or None


def _judge_group(ex, cases, outputs, report):
    """Run the checks of ``cases`` (one group) on ``outputs`` (the values of their calls, in order);
    return ``(results per case, grader error or None)``. The hints go to ``report``."""
    results, grader_error, start = [], None, 0
    for case in cases:
        got = outputs[start:start + len(case.calls)]
        start += len(case.calls)
        report.begin(case)
        n_before = len(report.checks)
        try:
            if len(got) != len(case.calls):  # pragma: no cover - the child stops only on a fatal event
                raise GraderError("the answer's process returned fewer values than calls")
            case.check(Results(got, _labels(ex, case.calls), report), report)
        except StudentError:
            pass  # recorded; the checks after it cannot run
        except Exception as exc:  # noqa: BLE001 - the grader's own computation failed: never the answer's fault
            first = str(exc).splitlines()[0] if str(exc) else ""
            grader_error = grader_error or fold(f"case {case.kind!r}: {type(exc).__name__}"
                                                + ("" if case.hidden else f": {first}"), 300)
            hidden, report.hidden = report.hidden, False  # a hidden case's: the type only (its message may hold inputs)
            report.check(False, f"grader error (not your answer's fault): {type(exc).__name__}"
                                + ("" if hidden else f": {first}"))
            report.hidden = hidden
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
    return results, grader_error


def _hidden_run_failed(run) -> list:
    """Why the hidden run failed as a whole, by kind only: the answer chose the messages of its
    exceptions, its exit code and what it printed while it held the hidden inputs, so none of
    them is repeated (the public run, which never held one, says more)."""
    if run.status == "timeout":
        why = run.message.split(":")[0].split(" while ")[0]  # "timed out after N s" (the grader's limit)
    elif run.status != "done":
        why = "the process running your answer ended early or sent something unreadable"
    else:
        fatal = run.manifest.get("fatal") or {}
        why = {"exit": "your file called sys.exit", "refused": "the exercises' rule refused something your file did",
               "raised": f"your file raised {str(fatal.get('type', 'an exception'))[:80]} while imported"
               }.get(fatal.get("what"), "your file does not define what the exercise asks for")
    return [f"the hidden cases could not run: {why}"]


def _judge(ex, path, cases, runs, hidden_run) -> Verdict:
    """The verdict on one answer from its runs, ``{"public": Run, "hidden": Run}`` (the hidden one
    only where hidden cases were asked for and the public run went through). What the answer
    printed in the hidden run is not kept, only how many lines: it may hold hidden inputs."""
    printed = {PRINTED_KEYS["public"].get(k, k): v for k, v in runs["public"].printed.items()}
    n_hidden = sum(len(v.splitlines()) for v in runs["hidden"].printed.values()) if "hidden" in runs else 0
    if n_hidden:
        printed[PRINTED_KEYS["hidden"]["hidden"]] = (f"[{n_hidden} lines printed while the hidden cases ran: "
                                                     "not shown, since they may hold hidden inputs]\n")
    why = _cannot_run(ex, path, runs["public"])
    if why:
        return Verdict(ex.stem, path, False, [Check(False, line) for line in why], printed=printed,
                       hidden_run=hidden_run)
    checks, results, hints, errors = [], [], {}, []
    for group in ("public", "hidden"):
        mine = [c for c in cases if c.hidden == (group == "hidden")]
        if not mine:
            continue
        report = Report()
        report.quiet_factors = group == "hidden"
        if group not in runs:
            why = ["the hidden run did not take place"]
        elif group == "hidden":
            why = _cannot_run(ex, path, runs[group]) and _hidden_run_failed(runs[group])
        else:
            why = _cannot_run(ex, path, runs[group])
        if why:  # the hidden run failed as a whole (a hang, an exit): every hidden case fails, one line says why
            report.checks += [Check(False, line, "every hidden case", True) for line in why]
            group_results = [{"kind": c.kind, "hidden": True, "ok": False} for c in mine]
        else:
            group_results, error = _judge_group(ex, mine, runs[group].outputs.get(group, []), report)
            errors.append(error)
        checks += report.checks
        results += group_results
        hints[group] = report.hints
    grader_error = next((e for e in errors if e), None)
    ok = all(c.ok for c in checks) and grader_error is None
    return Verdict(ex.stem, path, ok, checks, cases=results,
                   hints=list(dict.fromkeys(h for hs in hints.values() for h in hs)), group_hints=hints,
                   printed=printed, hidden_run=hidden_run, grader_error=grader_error)


def grade_many(items, *, hidden=False, hidden_seed=None, timeout=DEFAULT_TIMEOUT_S, forbidden_dirs=()):
    """Grade several answer files in one run; one :class:`Verdict` per item, in order.

    The public cases of every answer run in one child process (a new one
    after an answer that hangs or ends it); then, with ``hidden``, the hidden
    cases of the answers whose public run went through run in another, which
    never holds a public input and whose printing is kept apart
    (:data:`~refattn.exercises.core.PRINTED_KEYS`): what an answer prints while its public cases
    run cannot hold a hidden input.

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
    prepared = []
    for name, path in items:
        ex = exercise(name)
        source = _read(path)
        try:
            cases = [c for c in ex.cases(seed) if hidden or not c.hidden]
        except Exception as exc:  # noqa: BLE001 - the library failed while the grader drew inputs
            raise GraderError(f"{ex.stem}: drawing the cases failed: {type(exc).__name__}: {exc}") from exc
        prepared.append((ex, os.fspath(path), source, cases))
    runs = [{} for _ in prepared]
    for group in ("public", "hidden"):
        jobs, whose = [], []
        for k, (ex, path, source, cases) in enumerate(prepared):
            calls = [c for case in cases if case.hidden == (group == "hidden") for c in case.calls]
            if not calls or (group == "hidden" and _cannot_run(ex, path, runs[k]["public"])):
                continue  # an answer that could not run its public cases is not run again
            jobs.append(Job(f"{k}:{ex.stem}", os.path.abspath(path), source, [(group, calls)]))
            whose.append(k)
        done = run_jobs(jobs, timeout=float(timeout), extra_forbidden_dirs=forbidden_dirs) if jobs else []
        for k, run in zip(whose, done):
            runs[k][group] = run
    return [_judge(ex, path, cases, run, hidden) for (ex, path, _, cases), run in zip(prepared, runs)]


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
