"""Where a clone of the repository keeps what the package does not: the statements and the model solutions.

Both live beside the package in a clone (``exercises/`` and
``instructor/solutions/``), or in the current folder when the package was
installed apart from a clone (``pip install .``); an installed wheel alone has
neither, and the functions here say so by returning ``None``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PACKAGE", "statements_dir", "solutions_dir", "derivations_dir"]

PACKAGE = Path(__file__).resolve().parents[1]  # refattn/


def _first(candidates, probe):
    for folder in candidates:
        if (folder / probe).is_file():
            return folder
    return None


def statements_dir():
    """The folder of the statements (``exercises/*.md``), or ``None``."""
    return _first((PACKAGE.parent / "exercises", Path.cwd() / "exercises"), "01-softmax-vjp.md")


def solutions_dir():
    """The folder of the model solutions (``instructor/solutions/*.py``), or ``None``."""
    return _first((PACKAGE.parent / "instructor" / "solutions", Path.cwd() / "instructor" / "solutions"),
                  "01-softmax-vjp.py")


def derivations_dir():
    """The folder of the derivations the statements cite (``derivations/*.md``), or ``None``."""
    return _first((PACKAGE.parent / "derivations", Path.cwd() / "derivations"), "01-reweighted-softmax.md")
