"""Small helpers that every notebook shares: where figures go, and how large a run is.

Notebooks (``notebooks/*.py``) read two environment variables:

* ``REFATTN_FIGDIR``: when set, :func:`save` writes each figure there as a PNG
  (the test suite sets it to a temporary folder and checks that figures appear);
* ``REFATTN_SMALL=1``: :func:`small` is true, and notebooks use small grids and
  short runs (the test suite runs every notebook this way).
"""

from __future__ import annotations

import os

__all__ = ["small", "figdir", "save"]


def small() -> bool:
    """True when ``REFATTN_SMALL=1``: run at the small size the test suite uses."""
    return os.environ.get("REFATTN_SMALL", "") == "1"


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
