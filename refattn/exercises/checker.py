"""The student handout's checker: the public cases as data, run and judged as the course's grader does.

The handout (:func:`refattn.exercises.export.export_student`) carries no
library: its ``checker/`` folder holds this module (as ``checker/__main__.py``),
the judge, the runner, the child and the isolation module of
:mod:`refattn.exercises`, copied unchanged, and one pair of files per
exercise, ``cases/NN-name.json`` and ``.npz``: each public case's inputs and
its expectations (expected values, tolerances, the hints of common wrong
answers), computed by the library when the handout was made. Nothing here can
compute an expected value, and no hidden case or seed is in the handout: the
course's grader draws the hidden cases for each submission.

    python -m checker                 list the exercises
    python -m checker NAME FILE.py    check an answer: exit 0 right, 1 wrong, 2 bad input
        [--timeout S] [--json]

Run from the handout's folder (``python check.py ...`` works from anywhere).
The answer runs in another process, as your own user, under the exercises'
rule (a guard written in Python: on your own machine it guards your practice,
nothing more) and a time limit. Started as root, the checker runs the answer
as the course's grader does, as another user, alone and under limits
(:mod:`refattn.exercises.isolation`), and says so; where that cannot be set
up it refuses to run the answer at all, rather than as root.

This module imports NumPy and the standard library only, and its siblings by
relative imports, so that the same text works inside refattn (where
:func:`encode_case` writes the data) and as the handout's ``checker``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from pathlib import Path

import numpy as np

from . import _child
from .isolation import prepare
from .isolation import ANSWER_USER
from .judge import Call, Case, Drawn, Exercise, Expect, GraderError, Table, drawn_inputs, judge_answer
from .runner import DEFAULT_TIMEOUT_S, Stopped, guard_settings, read_answer, run_groups, signals_as_interrupt

__all__ = ["encode_case", "decode_case", "write_cases", "load", "check", "main", "CASES"]

#: The folder of the case files, beside this module (the handout's ``checker/cases``).
CASES = Path(__file__).resolve().parent / "cases"
#: The exercises' labels, beside this module.
INDEX = Path(__file__).resolve().parent / "exercises.json"

#: What a secret case (its expected value is the answer) checks in the handout: the form only.
FORM_ONLY = "{label} is a finite real number; its value is checked by your course's grader, not here"


# ------------------------------------------------------------------------------
# Cases as data
# ------------------------------------------------------------------------------


def _encode(x, arrays):
    if isinstance(x, Drawn):
        return {"drawn": x.spec()}
    if isinstance(x, dict) and any(isinstance(v, Drawn) for v in x.values()):
        return {"d": {str(k): _encode(v, arrays) for k, v in x.items()}}
    if isinstance(x, Table):
        return {"table": {"name": x.name, "s": _child.encode(np.asarray(x.s), arrays),
                          "values": {k: _child.encode(np.asarray(v), arrays) for k, v in x.values.items()}}}
    return _child.encode(x, arrays)


def _decode(node, arrays):
    if isinstance(node, dict) and "drawn" in node:
        d = node["drawn"]
        return Drawn(tuple(d["seed"]), tuple(d["shape"]), float(d["scale"]), int(d.get("zero_every", 0)))
    if isinstance(node, dict) and isinstance(node.get("d"), dict) and any(
            isinstance(v, dict) and "drawn" in v for v in node["d"].values()):
        return {str(k): _decode(v, arrays) for k, v in node["d"].items()}
    if isinstance(node, dict) and "table" in node:
        t = node["table"]
        return Table(str(t["name"]), _child.decode(t["s"], arrays),
                     {str(k): _child.decode(v, arrays) for k, v in t["values"].items()})
    return _child.decode(node, arrays)


def encode_case(case, arrays) -> dict:
    """``case`` (its expectations computed) as a JSON-able dict, its arrays put in ``arrays``.

    A :attr:`~refattn.exercises.judge.Case.secret` case is written with a form check in place of
    its expectations (its expected value is the answer), and so is a case whose inputs the
    answer's process draws (:class:`~refattn.exercises.judge.Drawn`: the checker's NumPy may draw
    other numbers than the one that made the handout): its :attr:`~refattn.exercises.judge.Case.form`.
    """
    calls = [{"fn": c.fn, "attr": c.attr, "args": [_encode(a, arrays) for a in c.args],
              "kwargs": {k: _encode(v, arrays) for k, v in c.kwargs.items()}} for c in case.calls]
    if case.secret:
        label = case.calls[0].fn
        expect = [Expect("range", label, (0,), np.array([-np.inf, np.inf]), low="", high="",
                         passed=FORM_ONLY.format(label=label))]
    elif drawn_inputs(case):
        expect = list(case.form)
    else:
        expect = case.expect() if callable(case.expect) else list(case.expect)
    return {"kind": case.kind, "ndim": case.ndim, "required": case.required, "calls": calls,
            "expect": [_child.encode(x.as_dict(), arrays, depth=-10, max_text=None) for x in expect]}


def decode_case(node, arrays) -> Case:
    """The :class:`~refattn.exercises.judge.Case` of :func:`encode_case`."""
    calls = tuple(Call(str(c["fn"]), tuple(_decode(a, arrays) for a in c["args"]),
                       {str(k): _decode(v, arrays) for k, v in c["kwargs"].items()}, bool(c["attr"]))
                  for c in node["calls"])
    expect = [Expect.from_dict(_child.decode(x, arrays, depth=-10)) for x in node["expect"]]
    return Case(str(node["kind"]), calls, expect, False, node.get("ndim"), required=bool(node.get("required")))


def write_cases(folder, ex, cases):
    """Write the public ``cases`` of ``ex`` to ``folder/NN-name.json`` and ``.npz``; return the paths."""
    arrays = {}
    data = {"exercise": ex.stem, "cases": [encode_case(c, arrays) for c in cases if not c.hidden]}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{ex.stem}.json").write_text(json.dumps(data, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    (folder / f"{ex.stem}.npz").write_bytes(buf.getvalue())
    return [folder / f"{ex.stem}.json", folder / f"{ex.stem}.npz"]


# ------------------------------------------------------------------------------
# Checking an answer
# ------------------------------------------------------------------------------


def _exercises():
    return [Exercise.from_dict(d) for d in json.loads(INDEX.read_text(encoding="utf-8"))]


def _find(name, exercises):
    for ex in exercises:
        if str(name) in (ex.name, ex.stem, str(ex.number), f"{ex.number:02d}"):
            return ex
    known = ", ".join(ex.name for ex in exercises)
    raise ValueError(f"NAME: unknown exercise {name!r}; expected one of {known} (or its number)")


def load(name):
    """``(exercise, public cases)`` of the exercise called ``name``, read from the case files."""
    ex = _find(name, _exercises())
    data = json.loads((CASES / f"{ex.stem}.json").read_text(encoding="utf-8"))
    with np.load(CASES / f"{ex.stem}.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return ex, [decode_case(c, arrays) for c in data["cases"]]


def check(name, path, *, timeout=DEFAULT_TIMEOUT_S):
    """Run the public cases of ``name`` on the answer file ``path``; its verdict."""
    ex, cases = load(name)
    p = Path(path)
    source = read_answer(p)
    iso = _isolation(timeout)
    try:
        runs = run_groups([(ex, str(p), source, cases)], iso=iso, guard=guard_settings(), timeout=float(timeout))
    finally:
        iso.close()
    return judge_answer(ex, str(p), cases, runs[0], False)


def _isolation(timeout):
    """Where the answer runs: as your own user under the Python guard; started as root, as another
    user under the operating system's layer (one line on stderr says so), or not at all."""
    if os.geteuid() != 0:
        return prepare(timeout, level="python")
    try:
        iso = prepare(timeout, level="os")
    except RuntimeError as exc:
        raise ValueError(f"refusing to run an answer as root: {str(exc).splitlines()[0]}; run check.py as your "
                         f"own user") from None
    print(f"check: started as root: the answer runs as the user {ANSWER_USER}, alone and under limits, as "
          f"your course's grader runs it", file=sys.stderr)
    return iso


def main(argv=None) -> int:
    """``python -m checker [NAME FILE.py]``: exit 0 right, 1 wrong, 2 bad input (one line)."""
    ap = argparse.ArgumentParser(prog="python -m checker", description="check an answer on the public cases")
    ap.add_argument("name", nargs="?", metavar="NAME", help="the exercise: its name or number")
    ap.add_argument("file", nargs="?", metavar="FILE.py", help="your answer file")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds the answer has")
    ap.add_argument("--json", action="store_true", help="print the verdict as JSON")
    args = ap.parse_args(argv)
    if args.name is None:
        for ex in _exercises():
            print(f"{ex.number:2d}  {ex.name:24s} part {ex.part}, difficulty {ex.difficulty} of 3, "
                  f"about {ex.minutes} minutes: {ex.title}")
        return 0
    try:
        if args.file is None:
            raise ValueError("FILE.py: expected the answer file after the exercise's name")
        if not (args.timeout > 0 and args.timeout < float("inf")):
            raise ValueError(f"--timeout: expected a positive number of seconds, got {args.timeout!r}")
        with signals_as_interrupt():  # SIGTERM, SIGHUP as Ctrl-C: the answer's process and folder cleaned up
            verdict = check(args.name, args.file, timeout=args.timeout)
    except ValueError as exc:
        print(f"check: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    except GraderError as exc:
        print(f"check: the checker could not run (not your answer's fault): {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 2
    except Stopped as exc:
        print(f"check: stopped by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("check: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(verdict.as_dict(), indent=2, allow_nan=False) if args.json else str(verdict))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
