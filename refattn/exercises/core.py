"""What every grader shares: exercises, cases, the report of checks, the verdict.

An exercise's grader is a function ``cases(hidden_seed)`` returning
:class:`Case` objects. A case names its *kind* (what it is about: "3-D
scores", "scores just below sqrt(tiny)"), the calls of the student's
functions it needs (:func:`call`, with inputs the grader drew) and a
``check(results, report)`` that judges what those calls returned. The calls
run in another process (:mod:`refattn.exercises.sandbox`); the checks run
here, in the grader's process, against the library and the derivations'
closed forms.

Public cases (fixed inputs) are what a student runs; hidden cases (drawn
from ``hidden_seed``: other seeds, shapes and edge cases) are reported by
kind only, never by input. :class:`Report` compares results (saying where the
worst entry is, expected against got, and the inputs there, for public
cases), recognises common mistakes (a flipped sign, a constant factor, a
transpose, an overflow) and collects them as hints.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["Exercise", "Case", "Call", "Table", "Report", "Results", "Verdict", "StudentError", "GraderError",
           "PARTS", "ALLOWED", "call", "value", "is_real_number", "MAX_LINE", "PRINTED_KEYS"]

#: The learning path's three parts (the landing page's lectures), by number.
PARTS = {
    1: "the reweighted softmax and its one VJP",
    2: "Proposition 1 and signed weights",
    3: "numerics and checking gradients",
}

#: What every statement says an answer may use (tested verbatim).
ALLOWED = ("**Allowed:** NumPy and Python's standard library. The grader runs your file in a separate "
           "process with a time limit and refuses refattn, autograd, jax, torch, tensorflow and sympy, and "
           "reading the library's files: the point is to derive it.")

#: No feedback line is longer than this (characters); longer ones are folded.
MAX_LINE = 400

#: Where what an answer printed is kept in :attr:`Verdict.printed`: the public run's by where it
#: was printed (``import``, the calls, the process's own stdout and stderr); of the hidden run's
#: only a count of lines, under ``hidden run`` (it may hold hidden inputs).
PRINTED_KEYS = {"public": {"import": "import", "public": "public", "process": "process"},
                "hidden": {"hidden": "hidden run"}}


class StudentError(Exception):
    """The student's answer failed a case in a way that stops the case (already recorded)."""


class GraderError(Exception):
    """The grader itself failed (a bug or the library's error): never the student's fault."""


@dataclass(frozen=True)
class Call:
    """One call of the student's code: ``fn(*args, **kwargs)``, or reading ``fn`` (``attr``)."""

    fn: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    attr: bool = False


def call(fn, *args, **kwargs) -> Call:
    """The call ``fn(*args, **kwargs)`` of the student's function ``fn``."""
    return Call(fn, tuple(args), dict(kwargs))


def value(name) -> Call:
    """Reading the student's module attribute ``name`` (a number ``ANSWER``)."""
    return Call(name, attr=True)


@dataclass(frozen=True)
class Table:
    """An object handed to the student whose methods return values the grader computed.

    ``values[method]`` is the method's value at the scores ``s``; the student's
    process offers ``act.method(s)`` for exactly those scores (exercise 04).
    """

    name: str
    s: np.ndarray
    values: dict


@dataclass
class Case:
    """One case of a grader: what it is about, the calls it needs, how it is judged.

    Attributes
    ----------
    kind : str
        What the case is about, shown for public and hidden cases alike
        (never the inputs themselves).
    calls : tuple of Call
    check : callable
        ``check(results, report)``: reads ``results[i]`` (the value of
        ``calls[i]``) and records checks on ``report``.
    hidden : bool
        Drawn from the hidden seed; its failures say the kind only.
    ndim : int, optional
        The number of axes of the case's scores, for the hint "right in
        1-D, wrong in N-D".
    """

    kind: str
    calls: tuple
    check: Callable = field(repr=False)
    hidden: bool = False
    ndim: int | None = None


@dataclass(frozen=True)
class Exercise:
    """One exercise: its statement, what the answer defines, its grader and its labels.

    Attributes
    ----------
    number : int
        The statement is ``exercises/NN-name.md``; the model solution
        ``instructor/solutions/NN-name.py`` in a clone of the repository
        (never in the package: :func:`refattn.exercises.export.solutions_dir`).
    name : str
        The name ``refattn exercises check`` takes.
    title : str
    kind : {"function", "number"}
        What the answer file defines: functions or a number ``ANSWER``.
    defines : tuple of str
        The signatures the answer must define, e.g. ``"softmax_vjp(s, u)"``.
    cases : callable
        ``cases(hidden_seed) -> list of Case``.
    part : int
        The part of the learning path (:data:`PARTS`).
    difficulty : int
        1 (a direct computation), 2 (a derivation with a numerical twist) or
        3 (several steps, or an edge that takes thought).
    minutes : int
        Estimated time for a student who has read the derivation.
    """

    number: int
    name: str
    title: str
    kind: str
    defines: tuple
    cases: Callable = field(repr=False, compare=False)
    part: int = 1
    difficulty: int = 1
    minutes: int = 20

    @property
    def stem(self) -> str:
        """``NN-name``: the file name of the statement, the model solution and the starter."""
        return f"{self.number:02d}-{self.name}"

    @property
    def statement(self) -> str:
        """The statement's path, relative to the repository root."""
        return f"exercises/{self.stem}.md"

    @property
    def solution(self) -> str:
        """The model solution's path, relative to the repository's root (a clone's, not the package's)."""
        return f"instructor/solutions/{self.stem}.py"

    @property
    def functions(self) -> tuple:
        """The names the answer must define (``softmax_vjp``, ``ANSWER``)."""
        return tuple(sig.split("(")[0] for sig in self.defines)

    @property
    def points(self) -> int:
        """Points in an exported autograder: twice the difficulty."""
        return 2 * self.difficulty

    @property
    def label_line(self) -> str:
        """The labels as each statement states them (tested equal)."""
        return (f"**Part {self.part}** ({PARTS[self.part]}) · difficulty {self.difficulty} of 3 · "
                f"about {self.minutes} minutes")

    def as_dict(self) -> dict:
        return {"number": self.number, "name": self.name, "title": self.title, "statement": self.statement,
                "kind": self.kind, "defines": list(self.defines), "part": self.part,
                "part_title": PARTS[self.part], "difficulty": self.difficulty, "minutes": self.minutes}


# ------------------------------------------------------------------------------
# Reading the student's results
# ------------------------------------------------------------------------------


def _short(x) -> str:
    """What a returned value is, in a few words."""
    if isinstance(x, np.ndarray):
        return f"an array of shape {x.shape} and dtype {x.dtype}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}"
    return f"a {type(x).__name__}" if x is not None else "None"


class Results:
    """The values of one case's calls, read through checks that say what is wrong with them.

    ``results[i]`` is the value of the case's ``calls[i]``; if that call
    raised, the failure is recorded on the report and :class:`StudentError`
    stops the case. :meth:`array`, :meth:`number`, :meth:`pair` and
    :meth:`grads` also check the type and shape, so that the grader's own
    computations never see a malformed value.
    """

    def __init__(self, outputs, labels, report):
        self._outputs, self._labels, self._report = outputs, labels, report

    def label(self, i) -> str:
        """How call ``i`` is named in messages (its signature, ``softmax_vjp(s, u)``)."""
        return self._labels[i]

    def __getitem__(self, i):
        kind, v = self._outputs[i]
        if kind == "error":
            self._report.check(False, f"{self._labels[i]} raised {v['type']}: {v['message']}".rstrip(": "),
                               brief=f"{self._labels[i]} raised {v['type']}")
            raise StudentError(self._labels[i])
        return v

    def fail(self, i, what):
        """Record that the value of call ``i`` is unusable (``what``) and stop the case."""
        self._report.check(False, f"{self._labels[i]}: {what}")
        raise StudentError(self._labels[i])

    def array(self, i, shape=None, *, x=None, label=None):
        """The value (or ``x``, a part of it) as a float64 array of ``shape``."""
        x = self[i] if x is None else x
        label = label or self._labels[i]
        if isinstance(x, (bool, str)) or x is None or not _numeric(x):
            self._report.check(False, f"{label}: expected an array of real numbers, got {_short(x)}")
            raise StudentError(label)
        a = np.asarray(x)
        if a.dtype.kind == "c":
            self._report.check(False, f"{label}: expected real numbers, got complex ones")
            raise StudentError(label)
        a = a.astype(np.float64)
        if shape is not None and a.shape != tuple(shape):
            self._report.check(False, f"{label}: expected shape {tuple(shape)}, got shape {a.shape}")
            raise StudentError(label)
        return a

    def number(self, i, *, x=None, label=None) -> float:
        """The value as one real number (a Python or NumPy scalar, or a 0-d array)."""
        a = self.array(i, x=x, label=label)
        if a.size != 1:
            label = label or self._labels[i]
            self._report.check(False, f"{label}: expected one number, got an array of shape {a.shape}")
            raise StudentError(label)
        return float(a.reshape(()))

    def pair(self, i):
        """The value as a tuple (or list) of two numbers."""
        x = self[i]
        if not isinstance(x, (tuple, list)) or len(x) != 2:
            self.fail(i, f"expected a tuple of two numbers, got {_short(x)}")
        return tuple(self.number(i, x=v, label=f"{self._labels[i]}[{k}]") for k, v in enumerate(x))

    def grads(self, i, shapes: dict, *, nested=None):
        """A dict of arrays with exactly the keys and shapes of ``shapes``."""
        x = self[i] if nested is None else nested
        label = self._labels[i]
        if not isinstance(x, dict):
            self.fail(i, f"expected a dict of gradients, got {_short(x)}")
        missing = [k for k in shapes if k not in x]
        if missing:
            self.fail(i, f"the dict has no entry {', '.join(repr(k) for k in missing)}")
        return {k: self.array(i, s, x=x[k], label=f"{label}[{k!r}]") for k, s in shapes.items()}


def _numeric(x) -> bool:
    if isinstance(x, (numbers.Number, np.ndarray, np.generic)):
        return True
    if isinstance(x, (list, tuple)):
        return all(_numeric(v) for v in x)
    return False


# ------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------


def _fmt(x) -> str:
    """A number or a short array for a message."""
    a = np.asarray(x)
    if a.ndim == 0:
        try:
            return f"{float(a):.10g}"
        except (TypeError, ValueError):
            return repr(x)
    return np.array2string(a, precision=6, threshold=12, max_line_width=10_000, separator=", ")


def fold(text, width=MAX_LINE) -> str:
    """``text`` on one line of at most ``width`` characters (the middle cut out)."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    half = (width - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


@dataclass
class Check:
    """One line of feedback: passed or not, the message, and the case it belongs to."""

    ok: bool
    message: str
    case: str = ""
    hidden: bool = False

    def as_dict(self) -> dict:
        return {"ok": self.ok, "message": self.message, "case": self.case, "hidden": self.hidden}


def _mistake(g, e, tol):
    """A hint when ``g`` is ``e`` up to a common mistake, else ``None`` (shapes equal, ``e`` finite)."""
    bad = ~np.isfinite(g) & np.isfinite(e)
    if np.any(bad):
        return ("NaN or inf where the true value is finite: an intermediate overflows or divides 0 by 0; "
                "rewrite it so that no step leaves float64's range (the derivation's stable form)")
    if not np.all(np.isfinite(e)) or not np.any(e):
        return None
    if g.ndim >= 2 and g.shape[-1] == g.shape[-2] and np.max(np.abs(np.swapaxes(g, -1, -2) - e)) <= tol:
        return "your matrix is the transpose of the right one: rows index the output, columns the input"
    c = float(np.vdot(g, e) / np.vdot(e, e))
    if np.max(np.abs(g - c * e)) <= max(tol, 1e-9 * np.max(np.abs(e))):
        if abs(c + 1.0) <= FACTOR_MIN_GAP:
            return "the sign is flipped: your result is minus the right one"
        if abs(c - 1.0) <= FACTOR_MIN_GAP or abs(c) <= FACTOR_MIN_GAP:
            return None  # "1 times" (off by a hair, not a factor) or "0 times" (nothing returned) says nothing
        return c  # a factor: the report says them all in one hint
    return None


#: A ratio within this of 1 (or -1, or 0) is no constant-factor mistake: an answer 1.0001 times the
#: right one is off by a rounding-sized slip, which "your result is 1 times the right one" would hide.
FACTOR_MIN_GAP = 1e-3


def _factor(c) -> str:
    """A constant factor as the hint says it (six significant digits)."""
    return f"{c:.6g}"


class Report:
    """The checks of one grading run, in order, tagged with the case they belong to."""

    def __init__(self):
        self.checks = []
        self._hints, self._factors = [], []
        self.case, self.hidden = "", False
        self.quiet_factors = False  # the hidden group's report: factors named, not said

    @property
    def hints(self) -> list:
        """The common mistakes recognised, each once (constant factors in one line; in a report of
        hidden cases without their values, which can follow from a hidden shape)."""
        if not self._factors:
            return list(self._hints)
        if self.quiet_factors:
            return self._hints + ["off by a constant factor in the hidden cases: your result is a fixed "
                                  "multiple of the right one"]
        factors = ", ".join(_factor(c) for c in self._factors)
        return self._hints + [f"off by a constant factor: your result is {factors} times the right one"
                              + (" (in different cases)" if len(self._factors) > 1 else "")]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def begin(self, case: Case):
        """The checks that follow belong to ``case`` (hidden cases: reported by kind only)."""
        self.case, self.hidden = case.kind, case.hidden

    def hint(self, text):
        """Add a hint (a text), or a constant factor (a number) to the factor hint."""
        if isinstance(text, float):
            if not any(abs(text - c) <= 1e-6 * abs(c) for c in self._factors):
                self._factors.append(text)
        elif text and text not in self._hints:
            self._hints.append(text)

    def check(self, ok, message, *, brief=None) -> bool:
        """Record one check. ``message`` says what was checked and, if it failed, why; in a
        hidden case a failure shows ``brief`` instead (no inputs), or just "wrong"."""
        ok = bool(ok)
        if self.hidden:
            message = "passes" if ok else (brief or "wrong")
        self.checks.append(Check(ok, fold(message), self.case, self.hidden))
        return ok

    def close(self, label, got, expected, *, rtol=1e-10, atol=0.0, inputs=None, elementwise=False) -> bool:
        """Compare ``got`` (a float64 array of ``expected``'s shape) with ``expected``; record one check.

        Norm-wise by default, as :func:`refattn.core.gradcheck.compare`: passes
        when ``max|got - expected| <= atol + rtol * max|expected|``. With
        ``elementwise`` every entry must satisfy ``|got - expected| <= atol +
        rtol * |expected|`` (for functions checked over many magnitudes). A
        failure gives the worst index, expected and got there, and the
        entries of ``inputs`` (a dict of arrays of the same shape, or whose
        leading axes select the row) at that index; in a hidden case only
        the size of the error. A common mistake found becomes a hint.
        """
        g = np.asarray(got, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        if g.shape != e.shape:
            return self.check(False, f"{label}: expected shape {e.shape}, got shape {g.shape}",
                              brief=f"{label}: wrong shape")
        with np.errstate(all="ignore"):
            both_inf = np.isinf(e) & (g == e)
            diff = np.where(both_inf, 0.0, np.abs(g - e))
            diff = np.where(np.isnan(diff), np.inf, diff)
            if elementwise:
                allowed = atol + rtol * np.where(np.isfinite(e), np.abs(e), 0.0)
                score = np.where(diff <= allowed, 0.0, diff / np.maximum(allowed, 1e-300))
                flat = int(np.argmax(score)) if score.size else 0
                passed = bool(np.all(diff <= allowed))
                bound = float(np.asarray(allowed).reshape(-1)[flat]) if e.size else 0.0
            else:
                flat = int(np.argmax(diff)) if diff.size else 0
                scale = float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0))
                bound = atol + rtol * scale
                passed = bool(diff.size == 0 or np.max(diff) <= bound)
            if passed:
                return self.check(True, f"{label}: matches (max abs error "
                                        f"{float(np.max(diff, initial=0.0)):.2e} <= {bound:.2e})")
            self.hint(_mistake(g, e, bound))
        where = tuple(int(i) for i in np.unravel_index(flat, e.shape)) if e.ndim else ()
        err = float(diff[where]) if e.ndim else float(diff)
        at = f" at index {where}" if where else ""
        msg = (f"{label}: wrong{at}: expected {_fmt(e[where])}, got {_fmt(g[where])} "
               f"(error {err:.3g} > tolerance {bound:.3g})")
        for name, x in (inputs or {}).items():
            x = np.asarray(x)
            if x.shape == e.shape and where:
                msg += f"; {name}{list(where)} = {_fmt(x[where])}"
            elif x.ndim and where and x.shape[:-1] == e.shape[:-1] and len(where) > 1:
                msg += f"; {name}{list(where[:-1])} = {_fmt(x[where[:-1]])}"
            elif x.ndim <= 1 and x.size <= 12:
                msg += f"; {name} = {_fmt(x)}"
        return self.check(False, msg, brief=f"{label}: wrong")  # the error's size and tolerance follow from the hidden values


    def close_all(self, items, **tol) -> bool:
        """:meth:`close` for each ``(label, got, expected)`` of ``items``; in a hidden case one line
        naming the labels that fail (a case with many outputs stays one line)."""
        if not self.hidden:
            return all([self.close(label, got, expected, **tol) for label, got, expected in items])
        quiet = Report()
        quiet.hidden = True
        bad = [label for label, got, expected in items if not quiet.close(label, got, expected, **tol)]
        for h in quiet._hints + quiet._factors:
            self.hint(h)
        if not bad:
            return self.check(True, "passes")
        named = ", ".join(bad[:6]) + (f" and {len(bad) - 6} more" if len(bad) > 6 else "")
        return self.check(False, f"{named} wrong", brief=f"{named} wrong")


def is_real_number(x) -> bool:
    """A finite real number (not a bool)."""
    return (isinstance(x, numbers.Real) and not isinstance(x, bool)
            and math.isfinite(float(x)))


# ------------------------------------------------------------------------------
# The verdict
# ------------------------------------------------------------------------------


@dataclass
class Verdict:
    """The result of grading one answer file.

    ``ok``: every check passed. ``checks``: one :class:`Check` per line of
    feedback. ``cases``: ``{"kind", "hidden", "ok"}`` per case (empty when
    the answer never ran: it did not load, timed out, exited or was
    refused; then ``checks`` holds the one line saying so). ``hints``:
    common mistakes recognised; ``group_hints``: the same, by the group of
    cases they were found in (``public``, ``hidden``; the hidden ones name
    no value). ``printed``: what the answer printed in the public run, by
    place (``import``, ``public``, ``process``), and under ``hidden run``
    only how many lines it printed in the hidden one. ``hidden_run``: whether
    hidden cases were run. ``grader_error``: a failure of the grader itself,
    never the answer's fault.
    """

    exercise: str
    file: str
    ok: bool
    checks: list
    cases: list = field(default_factory=list)
    hints: list = field(default_factory=list)
    printed: dict = field(default_factory=dict)
    hidden_run: bool = False
    grader_error: str | None = None
    group_hints: dict = field(default_factory=dict)

    def printed_in(self, hidden: bool) -> dict:
        """What the answer printed in the run of one group (public or hidden), by place."""
        keys = PRINTED_KEYS["hidden" if hidden else "public"].values()
        return {k: v for k, v in self.printed.items() if k in keys}

    def group(self, hidden: bool) -> tuple:
        """``(passed, total)`` cases of one group."""
        cs = [c for c in self.cases if c["hidden"] == hidden]
        return sum(c["ok"] for c in cs), len(cs)

    def as_dict(self) -> dict:
        return {"exercise": self.exercise, "file": self.file, "ok": self.ok,
                "checks": [c.as_dict() for c in self.checks], "cases": self.cases, "hints": self.hints,
                "printed": self.printed, "hidden_run": self.hidden_run, "grader_error": self.grader_error}

    def summary(self) -> str:
        """One line: the verdict and the cases passed per group."""
        if self.grader_error:
            return f"{self.exercise}: GRADER ERROR (not your answer's fault): {self.grader_error}"
        parts = []
        for hidden in (False, True):
            passed, total = self.group(hidden)
            if total:
                parts.append(f"{'hidden' if hidden else 'public'} {passed}/{total} cases")
        if not self.hidden_run and self.cases:
            parts.append("hidden cases not run (--hidden)")
        tail = f" ({', '.join(parts)})" if parts else ""
        return f"{self.exercise}: {'CORRECT' if self.ok else 'WRONG'}{tail}"

    def lines(self, hidden=None) -> list:
        """One line per case that passed and one per check that failed (of one group, or of
        both, the hidden ones marked)."""
        out, groups = [], {}
        for c in self.checks:
            if hidden is None or c.hidden == hidden:
                groups.setdefault((c.case, c.hidden), []).append(c)
        for (case, is_hidden), checks in groups.items():
            where = f"{'hidden: ' if is_hidden and hidden is None else ''}{case}: " if case else ""
            if case and all(c.ok for c in checks):
                out.append(f"ok   {where}{checks[-1].message}" if not is_hidden else f"ok   {where.rstrip(': ')}")
                continue
            out += [f"{'ok  ' if c.ok else 'FAIL'} {where}{c.message}" for c in checks if not c.ok or not case]
        return out

    def __str__(self):
        """The summary, :meth:`lines`, the hints and what the answer printed."""
        lines = [self.summary()] + [f"  {ln}" for ln in self.lines()]
        lines += [f"  hint: {h}" for h in self.hints]
        for group, text in self.printed.items():
            shown = text.rstrip("\n").splitlines()
            lines.append(f"  your answer printed ({group}; not graded):")
            lines += [f"    | {ln[:200]}" for ln in shown[:20]]
            if len(shown) > 20:
                lines.append(f"    | [... {len(shown) - 20} more lines]")
        return "\n".join(lines)
