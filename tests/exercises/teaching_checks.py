"""What the tests of the slide decks and problem sets share (``tests/test_slides.py``,
``tests/test_book.py``): ``docs/teaching.py``, which the book's build uses, loaded as a
module, and the model solutions' text that no page or PDF of the book may hold."""

from __future__ import annotations

import importlib.util
import pathlib

from refattn.exercises import EXERCISES
from refattn.exercises.export import solution_blocks, solution_source

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load_teaching():
    spec = importlib.util.spec_from_file_location("refattn_book_teaching", ROOT / "docs" / "teaching.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


teaching = _load_teaching()


def solution_lines() -> set:
    """Every line of every model solution's solution blocks (between ``### BEGIN SOLUTION`` and
    ``### END SOLUTION``) that is long enough to be telling, its spaces collapsed."""
    return {" ".join(ln.split()) for ex in EXERCISES for block in solution_blocks(solution_source(ex))
            for ln in block.splitlines() if len(ln.strip()) >= 8}


def library_lines() -> set:
    """Every code line of the library's implementations of the exercises' formulas
    (:attr:`~refattn.exercises.judge.Exercise.library`) long enough to be telling, spaces collapsed;
    docstrings and comments left out."""
    import ast
    import importlib
    import inspect
    import textwrap

    def _strip_docstrings(source):
        tree = ast.parse(textwrap.dedent(source))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                    isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        return ast.unparse(tree)

    lines = set()
    for ex in EXERCISES:
        for name in ex.library:
            module, _, qualname = name.partition(":")
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
            code = _strip_docstrings(inspect.getsource(obj))
            lines |= {" ".join(ln.split()) for ln in code.splitlines()
                      if len(ln.strip()) >= 20 and not ln.strip().startswith(("def ", "#", "return ("))}
    return lines


def leaked_library(text: str) -> list:
    """The lines of :func:`library_lines` found in ``text`` (spaces collapsed in both)."""
    lines = library_lines()
    assert len(lines) > 30, "the library's implementations were not found"
    flat = " ".join(text.split())
    return sorted(ln for ln in lines if ln in flat)


def leaked(text: str) -> list:
    """The solution lines found in ``text`` (spaces collapsed in both); asserts there are lines
    to look for, so that an empty list means something."""
    lines = solution_lines()
    assert len(lines) > 50, "the model solutions' blocks were not found"
    flat = " ".join(text.split())
    return sorted(ln for ln in lines if ln in flat)
