"""How much of the library's implementation, or of the model solution, an answer holds: for the instructor.

A student who copies the library's code for a formula (or a model solution
passed around) under other names still holds its *structure*. This module
compares structures: each file becomes a sequence of Python tokens with every
local name replaced by one placeholder, numbers and strings by one each,
comments and layout dropped, while keywords, operators and attribute names
after a dot (``np.sum``, ``.T``) stay; each run of :data:`K` consecutive tokens
is hashed. The score of an answer against a reference is the share of the
reference's runs that the answer contains (containment: renaming,
reformatting or adding code around it does not lower it).

The references are fingerprints, sets of hashes, computed when the autograder
zip is made (:func:`fingerprints`): the library's functions that implement
each exercise (:attr:`refattn.exercises.judge.Exercise.library`) and the model
solution's solution blocks. The zip carries the hashes only, never a line of
the code. An answer whose score against either reaches :data:`THRESHOLD` is
listed in the instructor-only part of ``results.json``; the student never
sees the report. A high score is a reason to look, not a verdict: a short
formula written the natural way can resemble the library's.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import keyword
import textwrap
import tokenize

__all__ = ["K", "THRESHOLD", "tokens", "shingles", "containment", "fingerprints", "similarity_report"]

#: Tokens per hashed run (shorter runs match any NumPy code; longer ones miss rewrites of a line).
K = 8
#: The score (share of a reference's runs found in the answer) at which an answer is listed.
THRESHOLD = 0.6
#: Fewer runs than this in a reference: too short to say anything (listed as not compared).
MIN_SHINGLES = 12

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
         tokenize.ENDMARKER}


def tokens(source) -> list:
    """The normalised tokens of Python ``source`` (names, numbers and strings as placeholders;
    keywords, operators and attribute names kept); ``[]`` for text that does not tokenize."""
    out, after_dot = [], False
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in _SKIP:
                continue
            if tok.type == tokenize.NAME:
                if keyword.iskeyword(tok.string) or after_dot:
                    out.append(tok.string)
                else:
                    out.append("N")
            elif tok.type == tokenize.NUMBER:
                out.append("0")
            elif tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_START", -1):
                out.append("S")
            else:
                out.append(tok.string)
            after_dot = tok.type == tokenize.OP and tok.string == "."
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return out


def _strip_docstrings(source) -> str:
    """``source`` with its docstrings and comments left out (they are prose, not structure)."""
    import ast  # noqa: PLC0415

    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    try:
        return ast.unparse(tree)
    except (RecursionError, ValueError):  # an expression nested too deep to print back: its tokens as they are
        return source


def shingles(source) -> set:
    """The hashes of every run of :data:`K` consecutive normalised tokens of ``source``."""
    toks = tokens(_strip_docstrings(source))
    return {hashlib.sha1(" ".join(toks[i:i + K]).encode()).hexdigest()[:16] for i in range(len(toks) - K + 1)}


def containment(answer: set, reference: set) -> float | None:
    """The share of ``reference``'s runs found in ``answer`` (``None``: the reference is too short)."""
    if len(reference) < MIN_SHINGLES:
        return None
    return len(answer & reference) / len(reference)


def _library_source(name) -> str:
    module, _, qualname = name.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.getsource(obj)


def fingerprints(exercises, solution_blocks=None) -> dict:
    """The references of each exercise, as hashes: ``{stem: {"library": [...], "solution": [...]}}``.

    ``solution_blocks(ex)``: the text of the model solution's solution blocks (``None``: none).
    """
    out = {}
    for ex in exercises:
        lib = set()
        for name in ex.library:
            lib |= shingles(_library_source(name))
        sol = set()
        if solution_blocks is not None:
            for block in solution_blocks(ex):
                sol |= shingles(block)
        out[ex.stem] = {"library": sorted(lib), "solution": sorted(sol)}
    return out


def similarity_report(items, references) -> list:
    """One row per graded answer: its scores against the library and the model solution, and whether
    either reaches :data:`THRESHOLD` (``flagged``).

    ``items``: ``(exercise, path)`` pairs; ``references``: :func:`fingerprints`' dict (an exercise
    without references is reported as not compared).
    """
    rows = []
    for ex, path in items:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                answer = shingles(f.read())
        except (OSError, RecursionError, MemoryError, ValueError, SyntaxError):  # one answer never stops the report
            rows.append({"exercise": ex.stem, "library_score": None, "solution_score": None, "flagged": False,
                         "threshold": THRESHOLD, "note": "not compared: the file could not be read as Python"})
            continue
        ref = references.get(ex.stem, {})
        scores = {kind: containment(answer, set(ref.get(kind, []))) for kind in ("library", "solution")}
        flagged = any(v is not None and v >= THRESHOLD for v in scores.values())
        rows.append({"exercise": ex.stem, **{f"{k}_score": None if v is None else round(v, 3)
                                             for k, v in scores.items()},
                     "flagged": flagged, "threshold": THRESHOLD})
    return rows
