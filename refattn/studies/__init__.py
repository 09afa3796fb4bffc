"""The papers' experiments: one module per study, each run the same way.

Every module here defines

* ``Settings``: a dataclass of the study's settings, each field with its
  default and its help text written once (:func:`option`); the first line of
  its docstring says what the study does;
* ``run(settings, ...)``: the study, returning a JSON-able dict. Besides
  ``settings`` it takes whichever of these keywords it uses: ``progress``
  (``None``: a progress line on a terminal; ``False``: silent), ``on_result``
  (called as ``on_result(key, piece)`` as each piece finishes, so a results
  file keeps it) and ``command`` (the command line, recorded in a results file
  that a rerun resumes);
* ``report(result) -> str``: the result as text;
* where the study has a figure, ``plot(result)`` returning a matplotlib
  ``Figure`` and ``FIGURE``, the PNG's name (a format string over the
  settings' fields, such as ``"nt_{figure}.png"``);
* optionally ``status(result) -> int``, the command's exit code (0 when absent).

:data:`STUDIES` lists them by command name; ``refattn <command>`` builds its
options from ``Settings`` (``refattn.cli``), so a default cannot differ
between the command line and the code. From Python::

    from refattn.studies import polarity
    result = polarity.run(polarity.Settings(seeds=3, epochs=4))
    print(polarity.report(result))
"""

from __future__ import annotations

import dataclasses
import importlib

__all__ = ["STUDIES", "study", "option", "max_memory"]

#: Command name -> module of :mod:`refattn.studies`, in the order ``refattn --help`` lists them
#: (the theory's numbers, TanhMax's experiments, Expressive's, NeuralAttn's and the language model).
STUDIES = {
    "prop1": "prop1",
    "properties": "four_properties",
    "prop2": "prop2",
    "signexp-at-zero": "signexp_zero",
    "dynamics": "score_dynamics",
    "polarity": "polarity",
    "interpret": "interpret",
    "sst2": "sst2",
    "sst2-sweep": "sst2_sweep",
    "rank-collapse": "rank_collapse",
    "geometry": "geometry",
    "nt-cycles": "nt_cycles",
    "nt": "nt_training",
    "nt-figure": "nt_figures",
    "nt-sensitivity": "nt_sensitivity",
    "neural-surface": "neural_surface",
    "neural-cost": "neural_cost",
    "lm": "lm",
    "lm-study": "lm_study",
}


def study(command):
    """The module of the study that ``refattn <command>`` runs (imported now)."""
    if command not in STUDIES:
        raise ValueError(f"command: expected one of {tuple(STUDIES)}, got {command!r}")
    return importlib.import_module(f"{__name__}.{STUDIES[command]}")


def option(default=dataclasses.MISSING, help="", **cli):  # noqa: A002  (the word the command line uses)
    """A field of a study's ``Settings``: its default and its help, written once.

    Parameters
    ----------
    default : object, optional
        The default; none makes the setting required (a positional argument
        with ``positional=True``). A tuple default is immutable, so it is safe
        to share.
    help : str
        One line for ``--help``; the command line appends ``(default ...)``
        unless the default is None or False, so a None default's help says
        what None means.
    **cli
        What the command line needs beyond the field's type: ``choices``,
        ``metavar``, ``positional=True``, ``positive=True`` (a list of numbers
        that must all be > 0).
    """
    return dataclasses.field(default=default, metadata={"help": help, **cli})


def max_memory():
    """The ``max_memory`` setting of the studies that check their memory estimate before any work."""
    return option(None, "GiB the run may use (default: the memory available now); a run estimated to need "
                        "more is refused before any work", metavar="GIB")
