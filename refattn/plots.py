"""Small helpers that every notebook shares: where figures go, and how large a run is.

(Each study draws its own figure: ``plot`` in its module of :mod:`refattn.studies`.)

Notebooks (``notebooks/*.py``) begin with :func:`start` and read two environment variables:

* ``REFATTN_FIGDIR``: when set, :func:`save` writes each figure there as a PNG
  (the test suite sets it to a temporary folder and checks that figures appear);
* ``REFATTN_SMALL=1``: :func:`small` is true, and notebooks use small grids and
  short runs (the test suite runs every notebook this way).
"""

from __future__ import annotations

import os
import sys

__all__ = ["small", "start", "figdir", "save", "GROUP_COLOURS"]


def small() -> bool:
    """True when ``REFATTN_SMALL=1``: run at the small size the test suite uses.

    ``REFATTN_SMALL`` may be unset, empty, ``0`` or ``1``; anything else is an
    error naming the variable (``yes`` would otherwise silently mean "not small").
    """
    value = os.environ.get("REFATTN_SMALL", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"REFATTN_SMALL: expected 0 or 1, got {value!r}")
    return value == "1"


def start() -> bool:
    """What every notebook does first; returns :func:`small`.

    Run as a script (not in Jupyter, which shows figures inline) with no
    ``REFATTN_FIGDIR`` set, the figures go to ``figures/``, and the notebook
    says so on its first line of output.
    """
    is_small = small()
    if not os.environ.get("REFATTN_FIGDIR") and "ipykernel" not in sys.modules:
        os.environ["REFATTN_FIGDIR"] = "figures"
        print("figures are saved in", os.path.abspath("figures"), "(REFATTN_FIGDIR names another folder)")
    return is_small


def figdir():
    """The folder named by ``REFATTN_FIGDIR`` (created if needed), or ``None``."""
    path = os.environ.get("REFATTN_FIGDIR")
    if path:
        os.makedirs(path, exist_ok=True)
    return path or None


def save(fig, name: str, dpi: int = 110):
    """Save ``fig`` as ``REFATTN_FIGDIR/name.png`` when that variable is set.

    Returns the path written, or ``None`` when no folder is set.
    """
    if not isinstance(name, str) or not name or os.sep in name:
        raise ValueError(f"name: expected a file name without a folder, got {name!r}")
    folder = figdir()
    if not folder:
        return None
    path = os.path.join(folder, name + ".png")
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


#: Token-group colours shared by the polarity studies' figures (``refattn dynamics``, ``refattn polarity``).
GROUP_COLOURS = {"positive": "#b2182b", "negative": "#2166ac", "neutral": "#7f7f7f"}
