"""Grading answer files: draw the cases, run the answers apart, then judge here.

:func:`grade_many` draws every case of every exercise asked for (public, and
hidden with ``hidden=True``: their inputs only), prepares the run's isolation
(:func:`refattn.exercises.isolation.prepare`: another user and a folder tree
of its own where the grader is root), runs each answer's public cases in a
child of its own (:func:`refattn.exercises.runner.run_jobs`), then its hidden
cases in another, and only when every child has ended computes the expected
values and judges each case's values in this process
(:func:`refattn.exercises.judge.judge_case`). An answer that could not run
its public cases (it did not load, lacks a function, exited, timed out,
crashed or was refused by the rule) gets one line saying so; otherwise each
case's checks, the hints for common mistakes (found per group), and what the
answer printed (per run). A hidden run that fails as a whole fails every
hidden case, with one line saying why. A failure of the grader itself is
reported in the group of cases it happened in, and never changes the other
group's result.
"""

from __future__ import annotations

import importlib.util
import os

from . import isolation as _isolation
from .graders import DEFAULT_HIDDEN_SEED, EXERCISES
from .judge import Check, Exercise, GraderError, Verdict, judge_answer
from .paths import solutions_dir
from .runner import DEFAULT_TIMEOUT_S, FORBIDDEN_MODULES, guard_settings, read_answer, run_groups

__all__ = ["exercise", "grade", "grade_many", "forbidden_places"]


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


def forbidden_places(extra_dirs=()):
    """The Python guard's settings (:func:`refattn.exercises.runner.guard_settings`): the folders an
    answer may not read (the refattn package, a clone's model solutions and history, the libraries
    of the rule, ``extra_dirs``) and the package's files by inode."""
    import refattn  # noqa: PLC0415

    package = [os.path.realpath(p) for p in refattn.__path__]
    dirs, files = list(package), []
    for name in FORBIDDEN_MODULES[1:]:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # pragma: no cover - a broken installation
            spec = None
        if spec is None:
            continue
        if spec.submodule_search_locations:
            dirs += [os.path.realpath(p) for p in spec.submodule_search_locations]
        elif spec.origin and os.path.isfile(spec.origin):
            files.append(os.path.realpath(spec.origin))
    for p in package:  # a clone's model solutions, and its history, which holds every version of them
        for name in (".git", os.path.join("instructor", "solutions")):
            folder = os.path.join(os.path.dirname(p), name)
            if os.path.exists(folder):
                dirs.append(os.path.realpath(folder))
    if solutions_dir() is not None:  # also a clone in the current folder, its package installed apart
        dirs.append(os.path.realpath(solutions_dir()))
    dirs += [os.path.realpath(d) for d in extra_dirs]
    return guard_settings(dirs=dirs, walk=package, files=files)


def _python_level_sys_path(extra_dirs=()):
    """The answer's ``sys.path`` where it runs as the grader's user: this one's absolute entries, less
    the folders that hold refattn (and an autograder's source), which an answer may not read and does
    not need (NumPy comes from its own folder, kept)."""
    import sys  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415
    import refattn  # noqa: PLC0415

    numpy_home = os.path.realpath(os.path.dirname(os.path.dirname(np.__file__)))
    drop = {os.path.realpath(os.path.dirname(p)) for p in refattn.__path__}
    drop |= {os.path.realpath(d) for d in extra_dirs}
    drop.discard(numpy_home)
    return list(dict.fromkeys(p for p in sys.path if p and os.path.isabs(p) and os.path.realpath(p) not in drop))


def _judge_alone(ex, path, cases, runs, hidden):
    """:func:`judge_answer`, whose own failure on one answer is a grader error of that answer only."""
    try:
        return judge_answer(ex, path, cases, runs, hidden)
    except Exception as exc:  # noqa: BLE001 - never let one answer's judging end the others'
        why = f"judging this answer failed: {type(exc).__name__}"
        return Verdict(ex.stem, path, False, [Check(False, f"grader error (not your answer's fault): {why}")],
                       hidden_run=hidden, grader_error=why, group_errors={"public": why})


def _prepare(items, hidden, seed, public_seed, unreadable):
    """``(prepared, unread)``: ``(exercise, path, source, cases, index)`` per readable item, and the
    verdicts of the files that cannot be graded (``unreadable="wrong"``) by index."""
    prepared, unread = [], {}
    for k, (name, path) in enumerate(items):
        ex = exercise(name)
        try:
            source = read_answer(path)
        except ValueError as exc:
            if unreadable == "raise":
                raise
            unread[k] = Verdict(ex.stem, os.fspath(path), False, [Check(False, str(exc).split(": ", 1)[-1])])
            continue
        try:
            cases = [c for c in ex.cases(seed, public_seed) if hidden or not c.hidden]
        except Exception as exc:  # noqa: BLE001 - the library failed while the grader drew inputs
            raise GraderError(f"{ex.stem}: drawing the cases failed: {type(exc).__name__}: {exc}") from exc
        prepared.append((ex, os.fspath(path), source, cases, k))
    return prepared, unread


def _run_apart(prepared, timeout, level, forbidden_dirs, describe, python_guard):
    """Every answer's runs (:func:`refattn.exercises.runner.run_groups`) under the isolation of ``level``."""
    try:
        iso = _isolation.prepare(timeout, level=level)
    except RuntimeError as exc:
        raise GraderError(str(exc)) from None
    if iso.level == "python":
        iso.sys_path = _python_level_sys_path(forbidden_dirs)
    if describe is not None:
        describe(iso.describe())
    try:
        guard = forbidden_places(forbidden_dirs) if python_guard else {"off": True}
        return run_groups(prepared, iso=iso, guard=guard, timeout=timeout)
    finally:
        iso.close()


def grade_many(items, *, hidden=False, hidden_seed=None, timeout=DEFAULT_TIMEOUT_S, forbidden_dirs=(),
               isolation="auto", describe=None, python_guard=True, unreadable="raise", public_seed=None):
    """Grade several answer files in one run; one :class:`Verdict` per item, in order.

    Every answer's public cases run in a child of its own; then, with ``hidden``, the hidden
    cases of the answers whose public run went through run in another, which never holds a
    public input and whose printing is kept apart
    (:data:`~refattn.exercises.judge.PRINTED_KEYS`): what an answer prints while its public cases
    run cannot hold a hidden input. Expected values are computed after the last child has ended.

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
    isolation : {"auto", "os", "python"}
        :func:`refattn.exercises.isolation.prepare`'s ``level`` (``"auto"``: the operating
        system's boundary where the grader is root).
    describe : callable, optional
        Called with the run's isolation (:meth:`~refattn.exercises.isolation.Isolation.describe`).
    python_guard : bool
        Arm the Python guard in the answer's process (``False``: the tests of the operating
        system's boundary alone, as an answer that switched the guard off would meet it).
    public_seed : int, optional
        Draw the public cases' inputs from this seed (an autograder: per submission) instead of the
        fixed ones a student can run.
    unreadable : {"raise", "wrong"}
        A file that cannot be graded (not UTF-8 text, over
        :data:`~refattn.exercises.runner.MAX_ANSWER_BYTES`, refused by its size before it is
        read): bad input (``ValueError``), or a wrong answer of its own exercise (an autograder,
        where one file must not stop the others' grading).

    Raises
    ------
    ValueError
        One line for bad input: an unknown exercise, no file at a path.
    GraderError
        The grader could not run at all (no isolation, no interpreter): never the answers' fault.
    """
    seed = DEFAULT_HIDDEN_SEED if hidden_seed is None else int(hidden_seed)
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"--timeout: expected a positive number of seconds, got {timeout!r}")
    prepared, unread = _prepare(items, hidden, seed, public_seed, unreadable)
    runs = _run_apart([p[:4] for p in prepared], float(timeout), isolation, forbidden_dirs, describe, python_guard)
    # every answer's process has ended: only now are expected values computed
    judged = {k: _judge_alone(ex, path, cases, run, hidden) for (ex, path, _, cases, k), run in zip(prepared, runs)}
    return [judged.get(k) or unread[k] for k in range(len(items))]


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
