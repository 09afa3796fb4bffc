"""What every grader shares: exercises, cases, expectations, the report of checks, the verdict.

This module is the judge, and the only place where an answer's values are
compared with what they should be. It imports NumPy and the standard library
only, never the rest of refattn, so that it travels unchanged in the student
handout's checker (:func:`refattn.exercises.export.export_student`), where
the public cases arrive as data.

An exercise's grader (:mod:`refattn.exercises.graders`) is a function
``cases(hidden_seed)`` returning :class:`Case` objects. A case names its
*kind* (what it is about: "3-D scores", "scores just below sqrt(tiny)"), the
calls of the student's functions it needs (:func:`call`, with inputs the
grader drew) and its *expectations* (:class:`Expect`): what each returned
value must be close to, or must not be, and the hints for the common wrong
answers. Expectations are made by a function the grader calls only after
the answer's process has ended (:func:`expectations`), so no expected value
exists anywhere while an answer runs; the handout's checker reads the public
cases' expectations from files, computed when the handout was made.

Public cases (fixed inputs) are what a student runs; hidden cases (drawn
from ``hidden_seed``: other seeds, shapes and edge cases) are reported by
kind only, never by input. :class:`Report` compares results (saying where the
worst entry is, expected against got, and the inputs there, for public
cases), recognises common mistakes (a flipped sign, a constant factor, a
transpose, an overflow, a known wrong formula) and collects them as hints.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import _child

__all__ = ["Exercise", "Case", "Call", "Table", "Drawn", "Expect", "Report", "Results", "Verdict", "StudentError",
           "GraderError", "PARTS", "ALLOWED", "call", "value", "is_real_number", "expectations", "judge_case",
           "MAX_LINE", "PRINTED_KEYS", "BRIEF_RAISED", "judge_answer", "cannot_run", "tolerance", "ROUNDINGS"]

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

#: How a hidden case names an exception the answer raised: one fixed word, never the exception's
#: type or message, which the answer chose (a class named after the inputs would carry them out).
BRIEF_RAISED = "raised an exception"

#: Where what an answer printed is kept in :attr:`Verdict.printed`: the public run's by where it
#: was printed (``import``, the calls, the process's own stdout and stderr); of the hidden run's
#: only a count of lines, under ``hidden run`` (it may hold hidden inputs).
PRINTED_KEYS = {"public": {"import": "import", "public": "public", "process": "process"},
                "hidden": {"hidden": "hidden run"}}


class StudentError(Exception):
    """The student's answer failed a case in a way that stops the case (already recorded)."""


class GraderError(Exception):
    """The grader itself failed (a bug or the library's error): never the student's fault."""


# ------------------------------------------------------------------------------
# How close a correct answer comes: the rounding bound
# ------------------------------------------------------------------------------

#: Roundings of one entry's evaluation that :func:`tolerance` allows beyond the sums and the
#: exponentials' arguments it counts: products, quotients, exp, log, tanh (NumPy's are within a few
#: units of roundoff each), in whatever order and form a correct answer takes them.
ROUNDINGS = 32


def tolerance(size, *, terms=1, argument=0.0, dtype=np.float64):
    """How far a correct answer's value can lie from the reference's, entry by entry.

    Derivation 22's floating-point model (section 3, Eq. 22.C4, and section 6.2): a value made by
    ``k`` roundings from terms whose magnitudes add up to ``size`` is within ``k u_r size`` of the
    exact value, ``u_r`` the unit roundoff of ``dtype``; a sum of ``terms`` numbers takes up to
    ``terms`` roundings; and an exponential (or log-sum-exp) whose argument ``z`` was formed and
    shifted with rounding turns that absolute error, up to ``2 u_r |z|``, into a relative one
    (``argument`` is the largest ``|z|``). The answer and the reference each round, so two correct
    evaluations differ by at most

        2 u_r (ROUNDINGS + terms + 2 argument) size + 2 (ROUNDINGS + terms) eta,

    ``eta`` the smallest subnormal number (the absolute error of an underflow). ``size`` and
    ``argument`` are numbers or arrays broadcast against the value: one size per entry, so that an
    entry much smaller than its terms (a cancellation) gets the tolerance its terms give it.
    """
    info = np.finfo(dtype)
    with np.errstate(all="ignore"):
        k = ROUNDINGS + terms + 2.0 * np.abs(np.asarray(argument, dtype=np.float64))
        out = (float(info.eps) * k * np.abs(np.asarray(size, dtype=np.float64))
               + 2.0 * (ROUNDINGS + terms) * float(info.smallest_subnormal))
    return out if np.ndim(out) else float(out)


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


@dataclass(frozen=True)
class Drawn:
    """An array the answer's process draws itself, from a seed: ``scale`` times standard normal
    numbers of ``shape`` (every ``zero_every``-th entry of the last axis set to 0 when given).

    A long row (300,000 scores) travels as these few numbers, never as megabytes on the pipe
    or in the handout; grader and answer draw it with the same NumPy (:func:`_child.draw`).
    """

    seed: tuple
    shape: tuple
    scale: float = 1.0
    zero_every: int = 0

    def spec(self) -> dict:
        return {"seed": [int(v) for v in self.seed], "shape": [int(n) for n in self.shape],
                "scale": float(self.scale), "zero_every": int(self.zero_every)}

    def array(self) -> np.ndarray:
        """The array itself (in the grader, to compute what the answer's value must be)."""
        return _child.draw(self.spec())


def drawn_inputs(case) -> bool:
    """Whether a case's calls take an array the answer's process draws (:class:`Drawn`)."""
    def has(x):
        if isinstance(x, Drawn):
            return True
        if isinstance(x, dict):
            return any(has(v) for v in x.values())
        return isinstance(x, (tuple, list)) and any(has(v) for v in x)
    return any(has(a) for c in case.calls for a in (*c.args, *c.kwargs.values()))


@dataclass
class Case:
    """One case of a grader: what it is about, the calls it needs, what their values must be.

    Attributes
    ----------
    kind : str
        What the case is about, shown for public and hidden cases alike
        (never the inputs themselves).
    calls : tuple of Call
    expect : callable or list of Expect
        What the calls' values are judged against: a function the grader
        calls after the answer's process has ended (:func:`expectations`),
        or, in the handout's checker, the list it returned when the handout
        was made.
    hidden : bool
        Drawn from the hidden seed; its failures say the kind only.
    ndim : int, optional
        The number of axes of the case's scores, for the hint "right in
        1-D, wrong in N-D".
    secret : bool
        Its expected values are the answer itself (a number to find): never
        written into the student handout, whose checker then checks only
        the answer's form.
    required : bool
        A property the statement says the answer *must* have (finite where
        an exponential overflows, say), and only that property: its kind and
        its check name it, so that a wrong sign or factor fails the other
        cases, with its hint, never this one. An autograder can zero the
        group of cases when it fails
        (:func:`refattn.exercises.gradescope.group_score`).
    form : list of Expect, optional
        What the handout's checker checks in place of ``expect`` where it
        cannot hold the expected values (inputs drawn by the answer's
        process: :class:`Drawn`): the form of the values only.
    """

    kind: str
    calls: tuple
    expect: object = field(repr=False)
    hidden: bool = False
    ndim: int | None = None
    secret: bool = False
    required: bool = False
    form: list | None = field(default=None, repr=False)


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
    cases : callable or None
        ``cases(hidden_seed) -> list of Case`` (``None`` in the handout's
        checker, which reads its public cases from files).
    part : int
        The part of the learning path (:data:`PARTS`).
    difficulty : int
        1 (a direct computation), 2 (a derivation with a numerical twist) or
        3 (several steps, or an edge that takes thought).
    minutes : int
        Estimated time for a student who has read the derivation.
    library : tuple of str
        The library's functions that implement what the exercise asks for
        (``module:qualname``): never shipped to students, and compared with
        each answer in the instructor's similarity report.
    """

    number: int
    name: str
    title: str
    kind: str
    defines: tuple
    cases: Callable | None = field(default=None, repr=False, compare=False)
    part: int = 1
    difficulty: int = 1
    minutes: int = 20
    library: tuple = field(default=(), repr=False, compare=False)

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

    @classmethod
    def from_dict(cls, d) -> "Exercise":
        """The exercise of :meth:`as_dict` (without its grader: the handout's checker)."""
        return cls(int(d["number"]), str(d["name"]), str(d["title"]), str(d["kind"]), tuple(d["defines"]),
                   part=int(d["part"]), difficulty=int(d["difficulty"]), minutes=int(d["minutes"]))


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
    stops the case. :meth:`array`, :meth:`number`, :meth:`pair`, :meth:`grads`
    and :meth:`at` also check the type and shape, so that the judge never
    computes on a malformed value: anything that cannot be read as an array
    of real numbers is the answer's fault, recorded as such.
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
                               brief=f"{self._labels[i]} {BRIEF_RAISED}")
            raise StudentError(self._labels[i])
        return v

    def fail(self, i, what, label=None):
        """Record that the value of call ``i`` is unusable (``what``) and stop the case."""
        label = label or self._labels[i]
        self._report.check(False, f"{label}: {what}", brief=f"{label}: {_brief(what)}")
        raise StudentError(label)

    def array(self, i, shape=None, *, x=None, label=None):
        """The value (or ``x``, a part of it) as a float64 array of ``shape``."""
        x = self[i] if x is None else x
        label = label or self._labels[i]
        if isinstance(x, (bool, str)) or x is None or not _numeric(x):
            self.fail(i, f"expected an array of real numbers, got {_short(x)}", label)
        try:
            with np.errstate(all="ignore"):
                a = np.asarray(x)
                if a.dtype.kind == "c":
                    self.fail(i, "expected real numbers, got complex ones", label)
                a = a.astype(np.float64)
        except StudentError:
            raise
        except Exception:  # noqa: BLE001 - ragged lists, numbers too large: the answer's value, not the grader
            self.fail(i, f"expected an array of real numbers, got {_short(x)} that is not one", label)
        if shape is not None and a.shape != tuple(shape):
            self.fail(i, f"expected shape {tuple(shape)}, got shape {a.shape}", label)
        return a

    def number(self, i, *, x=None, label=None) -> float:
        """The value as one real number (a Python or NumPy scalar, or a 0-d array)."""
        a = self.array(i, x=x, label=label)
        if a.size != 1:
            self.fail(i, f"expected one number, got an array of shape {a.shape}", label)
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

    def at(self, where, shape=None, label=None):
        """The value an expectation names, as a float64 array of ``shape`` (``None``: any shape).

        ``where`` is ``(i, key, ...)``: call ``i``'s value, then its item
        ``key`` (a position in a tuple or list, a key of a dict) and so on;
        or ``("stack", i, j, ...)``: the numbers returned by calls ``i, j,
        ...``, as one array.
        """
        if where and where[0] == "stack":
            return np.array([self.number(i) for i in where[1:]])
        i, *keys = where
        x, name = self[i], label or self._labels[i]
        for key in keys:
            if isinstance(key, int) and isinstance(x, (tuple, list)) and len(x) > key:
                x = x[key]
            elif isinstance(key, str) and isinstance(x, dict) and key in x:
                x = x[key]
            else:
                what = (f"a tuple or list of at least {key + 1} items" if isinstance(key, int)
                        else f"a dict with the entry {key!r}")
                self.fail(i, f"expected {what}, got {_short(x)}", name)
        return self.array(i, shape, x=x, label=name)


def _brief(what) -> str:
    """A failure's words without numbers that could come from a hidden input (for hidden cases)."""
    return what.split(",")[0] if "got shape" not in what else "wrong shape"


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
    if g.size < 2:  # one number is a multiple of any other: a factor says nothing there
        return None
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

    def close(self, label, got, expected, *, rtol=0.0, atol=0.0, inputs=None, elementwise=False) -> bool:
        """Compare ``got`` (a float64 array of ``expected``'s shape) with ``expected``; record one check.

        ``atol`` is the tolerance of each entry (a number, or an array broadcast against
        ``expected``: :func:`tolerance` of the entry's size), and ``rtol`` a relative one on
        top. Entry by entry when ``atol`` is an array or ``elementwise``: every entry must
        satisfy ``|got - expected| <= atol + rtol * |expected|``; else norm-wise, as
        :func:`refattn.core.gradcheck.compare`: ``max|got - expected| <= atol + rtol *
        max|expected|``. A failure gives the entry furthest beyond its tolerance, expected
        against got there, and the entries of ``inputs`` (a dict of arrays of the same shape, or
        whose leading axes select the row) at that index; in a hidden case only the label. A
        common mistake found becomes a hint.
        """
        g = np.asarray(got, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        if g.shape != e.shape:
            return self.check(False, f"{label}: expected shape {e.shape}, got shape {g.shape}",
                              brief=f"{label}: wrong shape")
        with np.errstate(all="ignore"):
            diff = np.where(np.isinf(e) & (g == e), 0.0, np.abs(g - e))
            diff = np.where(np.isnan(diff), np.inf, diff)
            if elementwise or np.ndim(atol):
                allowed = np.broadcast_to(atol + rtol * np.where(np.isfinite(e), np.abs(e), 0.0), e.shape)
            else:
                allowed = np.broadcast_to(atol + rtol * float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0)),
                                          e.shape)
            allowed = np.where(np.isfinite(allowed), allowed, 0.0)  # a tolerance is a number, never inf
            score = np.where(diff <= allowed, 0.0, diff / np.maximum(allowed, 1e-300))
            flat = int(np.argmax(score if np.any(score) else diff)) if diff.size else 0
            bound = float(allowed.reshape(-1)[flat]) if e.size else 0.0
            if not np.any(score):
                worst = float(diff.reshape(-1)[flat]) if e.size else 0.0
                return self.check(True, f"{label}: matches (max abs error {worst:.2e} <= {bound:.2e})")
            self.hint(_mistake(g, e, float(np.max(allowed))))
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


# ------------------------------------------------------------------------------
# Expectations: what a case's values must be, as data
# ------------------------------------------------------------------------------


@dataclass
class Expect:
    """One thing a case's values must satisfy, as data (the handout's checker reads it from a file).

    ``op`` says what is checked, on the value at ``where`` (:meth:`Results.at`):

    * ``"close"``: close to ``expected`` (:meth:`Report.close`: ``atol``, usually an array from
      :func:`tolerance`, ``rtol``, ``elementwise``; ``inputs`` shown at the worst index in a
      public case). When it is not, each ``(array, message)`` of ``hints`` that the value is
      close to becomes a hint (a known wrong formula), and ``low``/``high`` a hint when every
      entry is below/above the expected one;
    * ``"proportional"``: a nonzero multiple ``c expected`` of the expected value, within
      ``|c| atol`` (a property that a wrong sign or factor keeps, judged by the other cases);
    * ``"finite"``: every entry finite; ``message`` names the failure and ``hint``
      follows it (``hint`` follows a failed ``"close"`` too); a failure stops the case;
    * ``"far"``: *not* close to ``expected`` (norm-wise ``rtol``, a detection threshold, not a
      rounding tolerance): ``message`` on failure;
    * ``"nonzero"``: ``max |value| > rtol * max |expected|``: ``message`` on failure;
    * ``"same_factor"``: the value ``f(x)`` and the value ``f(y)`` at ``terms[0][1]`` are one
      factor ``a`` times ``expected[0]`` and ``expected[1]`` (``f(x) = a r(x)``, ``f(y) = a r(y)``,
      entry by entry), to the :func:`tolerance` of their size (``expected[2]`` and ``expected[3]``
      bound ``|r(x)|``, ``|r(y)|``; ``bound`` is ``(terms, argument)``);
    * ``"differs"``: *not* close to the value at ``terms[0][1]`` (``rtol``, relative to the
      larger): a function that must depend on an argument the two calls differ in;
    * ``"range"``: one number with ``expected[0] <= value <= expected[1]``;
      ``low``/``high`` say what is wrong below/above.

    ``shape`` is the value's shape (default ``expected``'s for ``close``, ``proportional``,
    ``far`` and ``nonzero``). ``passed`` is the line of a passing check where the default says
    too little.
    """

    op: str
    label: str
    where: tuple = (0,)
    expected: object = None
    shape: tuple | None = None
    rtol: float = 0.0
    atol: object = 0.0
    elementwise: bool = False
    inputs: dict | None = None
    hints: tuple = ()
    low: str | None = None
    high: str | None = None
    message: str | None = None
    hint: str | None = None
    passed: str | None = None
    terms: tuple = ()
    bound: tuple = (1, 0.0)

    OPS = ("close", "proportional", "finite", "far", "nonzero", "same_factor", "range", "differs")

    def __post_init__(self):
        if self.op not in self.OPS:
            raise ValueError(f"op: expected one of {self.OPS}, got {self.op!r}")
        self.where = tuple(self.where)

    def as_dict(self) -> dict:
        """The expectation as a dict of plain values and arrays (:func:`refattn.exercises._child.encode` writes it)."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["where"], d["hints"] = list(self.where), [list(h) for h in self.hints]
        d["terms"] = [[c, list(w)] for c, w in self.terms]
        d["shape"] = None if self.shape is None else list(self.shape)
        d["bound"] = [float(b) for b in self.bound]
        return d

    @classmethod
    def from_dict(cls, d) -> "Expect":
        d = dict(d)
        d["where"] = tuple(d["where"])
        d["hints"] = tuple((np.asarray(a, dtype=np.float64), str(m)) for a, m in d.get("hints") or ())
        d["terms"] = tuple((float(c), tuple(w)) for c, w in d.get("terms") or ())
        d["shape"] = None if d.get("shape") is None else tuple(d["shape"])
        d["bound"] = tuple(float(b) for b in d.get("bound") or (1, 0.0))
        if d.get("expected") is not None:
            d["expected"] = np.asarray(d["expected"], dtype=np.float64)
        if isinstance(d.get("atol"), np.ndarray):
            d["atol"] = d["atol"].astype(np.float64)
        if d.get("inputs") is not None:
            d["inputs"] = {k: np.asarray(v) for k, v in d["inputs"].items()}
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def expectations(case) -> list:
    """The expectations of ``case``: its ``expect`` called (the library computes them; only after
    the answer's process has ended), or the list it already is (read from a file)."""
    out = case.expect() if callable(case.expect) else case.expect
    return list(out)


def _close_to(g, a, rtol=1e-10) -> bool:
    """Whether ``g`` is ``a`` (a known wrong formula) to within a relative ``rtol`` of ``a``'s size."""
    a = np.asarray(a, dtype=np.float64)
    if g.shape != a.shape or not np.all(np.isfinite(a)):
        return False
    with np.errstate(all="ignore"):
        return bool(np.max(np.abs(g - a), initial=0.0) <= rtol * max(np.max(np.abs(a), initial=0.0), 1e-300))


def _judge_close(x, got, r, report, hidden):
    expected = np.asarray(x.expected, dtype=np.float64)
    if report.close(x.label, got, expected, rtol=x.rtol, atol=x.atol, elementwise=x.elementwise,
                    inputs=None if hidden else x.inputs):
        return
    report.hint(x.hint)  # the case's own advice on a failure (exercise 05: where it must vanish)
    for alt, message in x.hints:
        if _close_to(got, alt) and not _close_to(expected, alt):
            report.hint(message)
    finite = np.isfinite(got) & np.isfinite(expected)
    if np.any(finite) and x.low and np.all(got[finite] < expected[finite]):
        report.hint(x.low)
    if np.any(finite) and x.high and np.all(got[finite] > expected[finite]):
        report.hint(x.high)


def _judge_proportional(x, got, r, report, hidden):
    e = np.asarray(x.expected, dtype=np.float64)
    with np.errstate(all="ignore"):
        c = float(np.vdot(got, e) / np.vdot(e, e)) if np.any(e) else float("nan")
        allowed = np.abs(c) * np.broadcast_to(np.asarray(x.atol, dtype=np.float64), e.shape)
        ok = bool(np.isfinite(c) and FACTOR_MIN_GAP <= abs(c) <= 1.0 / FACTOR_MIN_GAP
                  and np.all(np.abs(got - c * e) <= allowed))
    report.check(ok, (x.passed or f"{x.label}: right") if ok else (x.message or f"{x.label}: wrong"),
                 brief=None if ok else x.message)


def _judge_finite(x, got, r, report, hidden):
    bad = ~np.isfinite(got)
    if not np.any(bad):
        report.check(True, x.passed or f"{x.label}: every entry finite")
        return
    where = sorted(set(np.argwhere(bad)[:, 0].tolist())) if got.ndim else []
    report.check(False, x.message or f"{x.label}: NaN or inf in {'rows' if got.ndim > 1 else 'entries'} {where}",
                 brief=x.message or f"{x.label}: NaN or inf")
    report.hint(x.hint)
    raise StudentError(x.label)


def _judge_far_or_nonzero(x, got, r, report, hidden):
    expected = np.asarray(x.expected, dtype=np.float64)
    scale = max(float(np.max(np.abs(expected), initial=0.0)), 1e-300)
    with np.errstate(all="ignore"):
        size = float(np.max(np.abs(got - expected) if x.op == "far" else np.abs(got), initial=0.0))
    ok = bool(np.isfinite(size) and size > x.rtol * scale)
    report.check(ok, x.passed if ok else x.message, brief=None if ok else x.message)


def _judge_same_factor(x, got, r, report, hidden):
    other = r.at(x.terms[0][1], got.shape)
    r_x, r_y, m_x, m_y = np.asarray(x.expected, dtype=np.float64)
    with np.errstate(all="ignore"):
        residual = np.abs(got * r_y - other * r_x)
        allowed = tolerance((np.abs(got) + np.abs(other)) * (m_x + m_y), terms=x.bound[0], argument=x.bound[1])
        ok = bool(np.all(np.isfinite(residual)) and np.all(residual <= allowed))
    report.check(ok, (x.passed or f"{x.label}: right") if ok else (x.message or f"{x.label}: wrong"),
                 brief=None if ok else x.message)


def _judge_differs(x, got, r, report, hidden):
    other = r.at(x.terms[0][1], got.shape)
    with np.errstate(all="ignore"):
        size = float(np.max(np.abs(got - other), initial=0.0))
        scale = max(float(np.max(np.abs(got), initial=0.0)), float(np.max(np.abs(other), initial=0.0)), 1e-300)
    ok = bool(np.isfinite(size) and size > x.rtol * scale)
    report.check(ok, x.passed if ok else x.message, brief=None if ok else x.message)


def _judge_range(x, got, r, report, hidden):
    lo, hi = (float(v) for v in np.asarray(x.expected, dtype=np.float64).reshape(2))
    c = float(got.reshape(-1)[0]) if got.size == 1 else float("nan")
    if not np.isfinite(c):
        report.check(False, f"{x.label}: expected a finite real number")
    elif c < lo:
        report.check(False, f"{x.label}: {x.low}", brief=f"{x.label}: {x.low}")
    elif c > hi:
        report.check(False, f"{x.label}: {x.high}", brief=f"{x.label}: {x.high}")
    else:
        report.check(True, x.passed or f"{x.label}: right")


_JUDGES = {"close": _judge_close, "proportional": _judge_proportional, "finite": _judge_finite,
           "far": _judge_far_or_nonzero, "nonzero": _judge_far_or_nonzero, "same_factor": _judge_same_factor,
           "differs": _judge_differs, "range": _judge_range}


def _judge_one(x, r, report, hidden):
    """Record the checks of one :class:`Expect` ``x`` on the results ``r``."""
    if x.op == "range":  # one number: say so for anything else, before reading it as an array
        raw = r[x.where[0]]
        if not (is_real_number(raw) or (isinstance(raw, np.ndarray) and raw.size == 1 and raw.dtype.kind in "iuf")):
            r.fail(x.where[0], f"expected a finite real number, got {_short(raw)}", x.label)
    sized = x.op in ("close", "proportional", "far", "nonzero")
    shape = x.shape if x.shape is not None or not sized else np.shape(x.expected)
    if x.op == "same_factor" and x.shape is None:
        shape = np.shape(x.expected)[1:]  # the value's shape is each of r(x), r(y), |r(x)|, |r(y)|
    got = r.at(x.where, shape, x.label if len(x.where) > 1 or x.where[0] == "stack" else None)
    _JUDGES[x.op](x, got, r, report, hidden)


def judge_case(case, outputs, labels, report):
    """Judge one case's returned ``outputs`` (``("value", v)`` or ``("error", {...})`` per call) on
    ``report``: every expectation in order, until one stops the case. ``labels`` names the calls.

    Raises whatever the judge itself raises on a bug (the caller reports a grader error); a
    failure of the answer is recorded on ``report``, never raised.
    """
    r = Results(outputs, labels, report)
    try:
        for x in expectations(case):
            _judge_one(x, r, report, case.hidden)
    except StudentError:
        pass  # recorded; the checks after it cannot run


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
    never the answer's fault; ``group_errors``: the same by group (``public``,
    ``hidden``), so that a failure in one group never changes the other's.
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
    group_errors: dict = field(default_factory=dict)

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
            parts.append("hidden cases not run here")
        tail = f" ({', '.join(parts)})" if parts else ""
        return f"{self.exercise}: {'CORRECT' if self.ok else 'WRONG'}{tail}"

    def lines(self, hidden=None) -> list:
        """The feedback of one group (or of both, the hidden ones marked): a public case that
        passed with its evidence, each of its checks (one line when it has one check, else a
        line naming the case and one indented line per check); a hidden case that passed, one
        line naming it; and one line per check that failed."""
        out, groups = [], {}
        for c in self.checks:
            if hidden is None or c.hidden == hidden:
                groups.setdefault((c.case, c.hidden), []).append(c)
        for (case, is_hidden), checks in groups.items():
            where = f"{'hidden: ' if is_hidden and hidden is None else ''}{case}: " if case else ""
            if case and all(c.ok for c in checks):
                if is_hidden:  # by kind only: what a hidden check compared may name its inputs
                    out.append(f"ok   {where.rstrip(': ')}")
                elif len(checks) == 1:
                    out.append(f"ok   {where}{checks[0].message}")
                else:
                    out.append(f"ok   {where}{len(checks)} checks passed:")
                    out += [f"       - {c.message}" for c in checks]
                continue
            if is_hidden and case:  # one line per hidden case: what failed, by name
                out.append(f"FAIL {where}{fold('; '.join(c.message for c in checks if not c.ok))}")
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


# ------------------------------------------------------------------------------
# An answer's verdict from its runs
# ------------------------------------------------------------------------------


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


def cannot_run(ex, path, run):
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
    """Judge ``cases`` (one group) on ``outputs`` (the values of their calls, in order); return
    ``(results per case, grader error or None)``. The hints go to ``report``."""
    results, grader_error, start = [], None, 0
    for case in cases:
        got = outputs[start:start + len(case.calls)]
        start += len(case.calls)
        report.begin(case)
        n_before = len(report.checks)
        try:
            if len(got) != len(case.calls):  # pragma: no cover - the child stops only on a fatal event
                raise GraderError("the answer's process returned fewer values than calls")
            judge_case(case, got, _labels(ex, case.calls), report)
        except Exception as exc:  # noqa: BLE001 - the grader's own computation failed: never the answer's fault
            first = str(exc).splitlines()[0] if str(exc) else ""
            grader_error = grader_error or fold(f"case {case.kind!r}: {type(exc).__name__}"
                                                + ("" if case.hidden else f": {first}"), 300)
            # a hidden case's: the type only (its message may hold inputs); in its own group
            report.checks.append(Check(False, fold(f"grader error (not your answer's fault): {type(exc).__name__}"
                                                   + ("" if case.hidden else f": {first}")), case.kind, case.hidden))
        if len(report.checks) == n_before:  # pragma: no cover - every expectation records at least one line
            report.check(False, "grader error: the case recorded no check")
            grader_error = grader_error or f"case {case.kind!r} recorded no check"
        results.append({"kind": case.kind, "hidden": case.hidden, "required": case.required,
                        "ok": all(c.ok for c in report.checks[n_before:])})
    one_d = [r["ok"] for r, c in zip(results, cases) if c.ndim == 1]
    n_d = [r["ok"] for r, c in zip(results, cases) if c.ndim is not None and c.ndim > 1]
    overflowed = any(h.startswith("NaN or inf") for h in report.hints)  # the failure has another cause
    # every case of more axes wrong, every 1-D one right: one that fails for another cause keeps its own message
    if one_d and all(one_d) and n_d and not any(n_d) and not overflowed and grader_error is None:
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
               "raised": f"your file {BRIEF_RAISED} while imported"
               }.get(fatal.get("what"), "your file does not define what the exercise asks for")
    return [f"the hidden cases could not run: {why}"]


def judge_answer(ex, path, cases, runs, hidden_run) -> Verdict:
    """The verdict on one answer from its runs, ``{"public": Run, "hidden": Run}`` (the hidden one
    only where hidden cases were asked for and the public run went through). What the answer
    printed in the hidden run is not kept, only how many lines: it may hold hidden inputs."""
    printed = {PRINTED_KEYS["public"].get(k, k): v for k, v in runs["public"].printed.items()}
    n_hidden = sum(len(v.splitlines()) for v in runs["hidden"].printed.values()) if "hidden" in runs else 0
    if n_hidden:
        printed[PRINTED_KEYS["hidden"]["hidden"]] = (f"[{n_hidden} lines printed while the hidden cases ran: "
                                                     "not shown, since they may hold hidden inputs]\n")
    why = cannot_run(ex, path, runs["public"])
    if why:
        return Verdict(ex.stem, path, False, [Check(False, line) for line in why], printed=printed,
                       hidden_run=hidden_run)
    checks, results, hints, errors = [], [], {}, {}
    for group in ("public", "hidden"):
        mine = [c for c in cases if c.hidden == (group == "hidden")]
        if not mine:
            continue
        report = Report()
        report.quiet_factors = group == "hidden"
        if group not in runs:
            why = ["the hidden run did not take place"]
        elif group == "hidden":
            why = cannot_run(ex, path, runs[group]) and _hidden_run_failed(runs[group])
        else:
            why = cannot_run(ex, path, runs[group])
        if why:  # the hidden run failed as a whole (a hang, an exit): every hidden case fails, one line says why
            report.checks += [Check(False, line, "every hidden case", True) for line in why]
            group_results = [{"kind": c.kind, "hidden": True, "required": c.required, "ok": False} for c in mine]
        else:
            group_results, error = _judge_group(ex, mine, runs[group].outputs.get(group, []), report)
            if error:
                errors[group] = error
        checks += report.checks
        results += group_results
        hints[group] = report.hints
    grader_error = errors.get("public") or errors.get("hidden")
    ok = all(c.ok for c in checks) and grader_error is None
    return Verdict(ex.stem, path, ok, checks, cases=results,
                   hints=list(dict.fromkeys(h for hs in hints.values() for h in hs)), group_hints=hints,
                   printed=printed, hidden_run=hidden_run, grader_error=grader_error, group_errors=errors)
