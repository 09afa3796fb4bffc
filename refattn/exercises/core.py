"""The machinery every grader shares: loading a student's file, recording checks, the verdict.

A grader receives the student's module and a :class:`Report`. It calls the
student's functions through :meth:`Report.call` (so that an exception in the
student's code is reported, not raised), compares results with
:meth:`Report.close` (norm-wise, like :func:`refattn.core.gradcheck.compare`, and
saying where the worst entry is, what was expected and what came back, and
the inputs there), and adds anything else with :meth:`Report.check`. The
verdict is correct when every check passed.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["Exercise", "Report", "Verdict", "StudentError", "is_real_number"]


class StudentError(Exception):
    """The student's code raised; the grader records it and moves on."""


@dataclass(frozen=True)
class Exercise:
    """One exercise: its statement (a markdown file) and its grader.

    Attributes
    ----------
    number : int
        Position in the list; the statement is ``exercises/NN-name.md``.
    name : str
        The name ``refattn exercises check`` takes.
    title : str
        One line.
    kind : {"function", "number"}
        What the answer file defines: functions (``defines`` lists them, with
        their signatures) or a number ``ANSWER``.
    defines : tuple of str
        The signatures the answer file must define, e.g. ``"softmax_vjp(s, u)"``.
    grader : callable
        ``grader(module, report)``.
    """

    number: int
    name: str
    title: str
    kind: str
    defines: tuple
    grader: Callable = field(repr=False, compare=False)

    @property
    def stem(self) -> str:
        """``NN-name``: the file name of the statement and of the model solution."""
        return f"{self.number:02d}-{self.name}"

    @property
    def statement(self) -> str:
        """The statement's path, relative to the repository root."""
        return f"exercises/{self.stem}.md"

    @property
    def solution(self) -> str:
        """The model solution's path, relative to the repository root."""
        return f"exercises/solutions/{self.stem}.py"

    def as_dict(self) -> dict:
        return {"number": self.number, "name": self.name, "title": self.title,
                "statement": self.statement, "kind": self.kind, "defines": list(self.defines)}


@dataclass
class Verdict:
    """The result of grading one file: ``ok`` and one line per check."""

    exercise: str
    file: str
    ok: bool
    checks: list  # of (ok, message)

    def as_dict(self) -> dict:
        return {"exercise": self.exercise, "file": self.file, "ok": self.ok,
                "checks": [{"ok": ok, "message": msg} for ok, msg in self.checks]}

    def __str__(self):
        n_bad = sum(1 for ok, _ in self.checks if not ok)
        head = (f"{self.exercise}: CORRECT ({len(self.checks)} checks passed)" if self.ok else
                f"{self.exercise}: WRONG ({n_bad} of {len(self.checks)} checks failed)")
        lines = [head]
        for ok, msg in self.checks:
            lines.append(f"  {'ok  ' if ok else 'FAIL'} {msg}")
        return "\n".join(lines)


def _fmt(x) -> str:
    """A number or a short array for a message."""
    a = np.asarray(x)
    if a.ndim == 0:
        try:
            return f"{float(a):.10g}"
        except (TypeError, ValueError):
            return repr(x)
    return np.array2string(a, precision=6, threshold=12, max_line_width=200, separator=", ")


class Report:
    """The checks of one grading run, in order."""

    def __init__(self):
        self.checks = []

    @property
    def ok(self) -> bool:
        return all(ok for ok, _ in self.checks)

    def check(self, ok, message) -> bool:
        """Record one check: ``message`` says what was checked (and, if it failed, why)."""
        self.checks.append((bool(ok), message))
        return bool(ok)

    def call(self, label, fn, *args, **kwargs):
        """``fn(*args, **kwargs)``; an exception in it is recorded as a failed check
        (naming ``label`` and the exception) and re-raised as :class:`StudentError`."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # the student's code: any error is a wrong answer
            msg = str(exc).splitlines()[0] if str(exc) else ""
            self.check(False, f"{label} raised {type(exc).__name__}: {msg}")
            raise StudentError(label) from exc

    def close(self, label, got, expected, *, rtol=1e-10, atol=0.0, inputs=None, elementwise=False) -> bool:
        """Compare ``got`` with ``expected``; record one check.

        Norm-wise by default, as :func:`refattn.core.gradcheck.compare`: passes when
        ``max|got - expected| <= atol + rtol * max|expected|``. With
        ``elementwise`` every entry must satisfy ``|got - expected| <= atol +
        rtol * |expected|`` (for functions checked over many magnitudes). The
        message gives the worst index, expected and got there, and the entries
        of ``inputs`` (a dict of arrays of the same shape, or of which the
        worst index's leading part selects a row) at that index.
        """
        try:
            g = np.asarray(got, dtype=np.float64)
        except (TypeError, ValueError):
            return self.check(False, f"{label}: expected an array of numbers, got {type(got).__name__}")
        e = np.asarray(expected, dtype=np.float64)
        if g.shape != e.shape:
            return self.check(False, f"{label}: expected shape {e.shape}, got shape {g.shape}")
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
        where = tuple(int(i) for i in np.unravel_index(flat, e.shape)) if e.ndim else ()
        at = f" at index {where}" if where else ""
        msg = (f"{label}: wrong{at}: expected {_fmt(e[where])}, got {_fmt(g[where])} "
               f"(error {float(diff[where]):.3g} > tolerance {bound:.3g})")
        for name, x in (inputs or {}).items():
            x = np.asarray(x)
            if x.shape == e.shape and where:
                msg += f"; {name}{list(where)} = {_fmt(x[where])}"
            elif x.ndim and where and x.shape[:-1] == e.shape[:-1] and len(where) > 1:
                msg += f"; {name}{list(where[:-1])} = {_fmt(x[where[:-1]])}"
            elif x.ndim <= 1 and x.size <= 12:
                msg += f"; {name} = {_fmt(x)}"
        return self.check(False, msg)


def is_real_number(x) -> bool:
    """A finite real number (not a bool)."""
    return (isinstance(x, numbers.Real) and not isinstance(x, bool)
            and math.isfinite(float(x)))
