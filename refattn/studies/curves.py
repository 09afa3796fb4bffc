r"""Words about accuracy curves, defined once: plateau, escape, trap, divergence, time to 100 %.

Expressive (section 5) describes its curves in words: both attentions
reach "a plateau", DPA "remains stuck" or "in a local trap", EA
"escapes". The reruns of derivation 15 use the same words, and a word about
a curve is only as good as its definition. This module holds the
definitions, with their thresholds as named constants, and computes them
from the curves a study stored (``refattn nt-sensitivity``, one accuracy
curve per seed and cell); ``refattn curves FILE --results TABLE`` writes the
table of a results file, and every sentence of the results page, the
equation index and derivation 15 that uses one of these words quotes it.

The definitions (each a function below; the constants are in its name):

* **smoothed accuracy**: at each evaluation, the median of the seed's
  accuracy there and at the evaluations either side (:data:`SMOOTHING` = 3
  evaluations; at the first and last evaluation the mean of the two
  there are). One evaluation is 100 test series of 50 greedy predictions,
  so single evaluations scatter by about 0.01-0.02 around a flat level;
  the median keeps one such outlier from ending a plateau.
* **plateau**: a stretch of consecutive evaluations, at least
  :data:`PLATEAU_MIN_EPOCHS` (500) epochs and :data:`PLATEAU_MIN_EVALUATIONS`
  (3) evaluations long, over which the smoothed accuracy stays within a
  band of width :data:`PLATEAU_BAND` (0.05: highest minus lowest) and the
  accuracy's least-squares straight line rises or falls by at most
  :data:`PLATEAU_DRIFT` (0.025, half the band: a steady climb that fits
  the band is not flat), at a level (the median of the accuracy over the
  stretch) below :data:`PLATEAU_CEILING` (0.9; a flat stretch above it is
  a solved or nearly solved task, not a plateau). From each start the
  stretch is extended as far as the band allows, then shortened from its
  end until its drift is small enough; the search starts at the first
  evaluation, moves on by one evaluation where no plateau starts, and after
  a plateau goes on from the evaluation after its end (:func:`plateaus`).
* **escape**: leaving a plateau upward: after the plateau's last
  evaluation the smoothed accuracy reaches the plateau's level plus
  :data:`ESCAPE_RISE` (0.1, twice the band); the escape's epoch is the
  first evaluation where it does (:func:`escape`).
* **trap**: a plateau that lasts to the run's end: its last evaluation is
  the run's last (:func:`trap`). A trap is a statement about a run of a
  given length; a longer run may see it end.
* **divergence**: the seed's training loss is no longer finite at the end
  of the run (``run_nt``'s ``diverged``); a diverged seed's curve is read
  for nothing else (its accuracy sits at the frequency of one symbol).
* **time to 100 %**: the first evaluation at which every greedy prediction
  of every test series is right (:func:`time_to_100`; for a mixture, of
  every task), the rule of ``run_nt``'s ``epochs_to_100``; a study stores
  it from the full curve, so the table takes it from the study's file.

A cell's *mean curve* is the mean over the seeds that did not diverge;
the same definitions read it, for the sentences that describe a cell as a
whole.

Derivation 15 (section 11, "Words about curves") states the definitions for the reader and
quotes the tables; ``tests/studies/test_curves.py`` checks each definition on
curves made by hand and that every committed table is what this module
computes from its study's file today.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from ..training.runs import atomic_write, check_memory, dumps
from . import StudySettings, max_memory, option
from .helpers import check_cells

__all__ = ["PLATEAU_BAND", "PLATEAU_MIN_EPOCHS", "PLATEAU_MIN_EVALUATIONS", "PLATEAU_DRIFT", "PLATEAU_CEILING",
           "ESCAPE_RISE", "SMOOTHING", "DEFINITIONS", "smooth", "drift", "plateaus", "escape", "trap", "time_to_100", "read_curve",
           "read_cell", "summarise_cell", "curve_table", "Settings", "run", "report"]

#: A plateau's band: its smoothed accuracy varies by at most this much (highest minus lowest).
PLATEAU_BAND = 0.05

#: A plateau lasts at least this many epochs (from its first evaluation to its last) ...
PLATEAU_MIN_EPOCHS = 500

#: ... and spans at least this many evaluations.
PLATEAU_MIN_EVALUATIONS = 3

#: ... and does not climb or fall: its least-squares line moves by at most this much over the stretch.
PLATEAU_DRIFT = 0.025

#: A plateau's level is below this; a flat stretch at or above it is a task (nearly) solved.
PLATEAU_CEILING = 0.9

#: An escape: after the plateau, the smoothed accuracy reaches the plateau's level plus this.
ESCAPE_RISE = 0.1

#: The smoothed accuracy is the running median over this many evaluations (odd).
SMOOTHING = 3

#: The definitions in words, with their thresholds: what every table records and the results page quotes.
DEFINITIONS = {
    "smoothed accuracy": f"the median of a seed's accuracy over {SMOOTHING} consecutive evaluations (the mean of "
                         f"the two there are at the first and last evaluation)",
    "plateau": f"at least {PLATEAU_MIN_EPOCHS} epochs and {PLATEAU_MIN_EVALUATIONS} evaluations over which the "
               f"smoothed accuracy stays within a band of {PLATEAU_BAND:g} and the accuracy's least-squares line "
               f"rises or falls by at most {PLATEAU_DRIFT:g}, at a level (the median accuracy over the stretch) "
               f"below {PLATEAU_CEILING:g}; from each start extended as far as the band allows, then shortened "
               f"until the drift is small enough; plateaus do not overlap",
    "escape": f"after a plateau, the smoothed accuracy reaches its level plus {ESCAPE_RISE:g}; the escape's epoch is "
              f"the first evaluation where it does",
    "trap": "a plateau that lasts to the run's last evaluation",
    "divergence": "the seed's training loss is not finite at the end of the run",
    "time to 100 %": "the first evaluation at which every greedy prediction of every test series is right "
                     "(every task of a mixture)",
}


def smooth(accuracy):
    """The smoothed accuracy: a running median over :data:`SMOOTHING` evaluations.

    Parameters
    ----------
    accuracy : array_like, shape (n,)
        One seed's accuracy at its evaluations.

    Returns
    -------
    numpy.ndarray, shape (n,)
        At evaluation ``k``, the median of ``accuracy[k - 1 : k + 2]`` (for
        ``SMOOTHING = 3``); at the first and last evaluation the window is cut
        at the run's ends, so the median of two values, their mean. NaN
        propagates (a NaN in the window gives NaN).
    """
    acc = np.asarray(accuracy, dtype=float)
    if acc.ndim != 1:
        raise ValueError(f"accuracy: expected one curve (1-D), got shape {acc.shape}")
    half = SMOOTHING // 2
    return np.array([np.median(acc[max(0, k - half):k + half + 1]) for k in range(acc.size)])


def _check_curve(epochs, accuracy):
    e, a = np.asarray(epochs, dtype=float), np.asarray(accuracy, dtype=float)
    if e.ndim != 1 or a.shape != e.shape:
        raise ValueError(f"epochs, accuracy: expected two 1-D arrays of one length, got shapes {e.shape}, {a.shape}")
    if e.size > 1 and not np.all(np.diff(e) > 0):
        raise ValueError("epochs: expected increasing evaluation epochs")
    return e, a


def drift(epochs, accuracy):
    """How much a stretch of a curve climbs (or falls, negative) along its least-squares straight line.

    The slope of the line fitted to ``(epochs, accuracy)`` times the
    stretch's length in epochs: a steady climb of 0.05 every 500 epochs
    stays within a band of 0.05 over 500 epochs but drifts by 0.05, which a
    plateau may not (:data:`PLATEAU_DRIFT`).
    """
    e, a = _check_curve(epochs, accuracy)
    if e.size < 2:
        return 0.0
    slope = np.polyfit(e - e[0], a, 1)[0]
    return float(slope * (e[-1] - e[0]))


def plateaus(epochs, accuracy):
    """Every plateau of one curve, first to last.

    A plateau is a stretch of consecutive evaluations ``i..j`` whose
    smoothed accuracy (:func:`smooth`) has ``max - min <= PLATEAU_BAND``
    and whose accuracy drifts (:func:`drift`) by at most ``PLATEAU_DRIFT``,
    lasting ``epochs[j] - epochs[i] >= PLATEAU_MIN_EPOCHS`` over
    ``j - i + 1 >= PLATEAU_MIN_EVALUATIONS`` evaluations, at a level (the
    median of the accuracy over ``i..j``) below ``PLATEAU_CEILING``. From
    each start ``i`` the stretch is extended as far as the band allows and
    then shortened from its end until it drifts little enough (the longest
    flat stretch from ``i``); the search starts at the first evaluation,
    moves one evaluation on where no plateau starts, and after a plateau
    goes on from the evaluation after its end, so plateaus never overlap.

    Parameters
    ----------
    epochs : array_like, shape (n,)
        Increasing epochs of the evaluations.
    accuracy : array_like, shape (n,)
        The accuracy at each.

    Returns
    -------
    list of dict
        ``start``, ``end`` (epochs of the first and last evaluation),
        ``level`` (median accuracy), ``low`` and ``high`` (the smoothed
        accuracy's band), ``first`` and ``last`` (their indices). A NaN ends
        a stretch (it is never within a band).
    """
    e, a = _check_curve(epochs, accuracy)
    s = smooth(a) if a.size else a
    out, i, n = [], 0, a.size
    while i < n:
        if np.isnan(s[i]):
            i += 1
            continue
        j, lo, hi = i, s[i], s[i]
        while j + 1 < n and not np.isnan(s[j + 1]) and max(hi, s[j + 1]) - min(lo, s[j + 1]) <= PLATEAU_BAND + 1e-12:
            j += 1
            lo, hi = min(lo, s[j]), max(hi, s[j])
        found = None
        for end in range(j, i + PLATEAU_MIN_EVALUATIONS - 2, -1):  # the longest stretch from i that is flat
            if e[end] - e[i] < PLATEAU_MIN_EPOCHS:
                break
            level = float(np.median(a[i:end + 1]))
            if level < PLATEAU_CEILING and abs(drift(e[i:end + 1], a[i:end + 1])) <= PLATEAU_DRIFT + 1e-12:
                found = end
                break
        if found is None:
            i += 1
            continue
        part = s[i:found + 1]
        out.append({"start": int(e[i]), "end": int(e[found]), "level": float(np.median(a[i:found + 1])),
                    "low": float(part.min()), "high": float(part.max()), "first": i, "last": found})
        i = found + 1
    return out


def escape(epochs, accuracy, plateau):
    """The epoch at which a curve escapes ``plateau`` (one of :func:`plateaus`), or None.

    The escape is the first evaluation after the plateau's last whose
    smoothed accuracy is at least ``plateau["level"] + ESCAPE_RISE``: the
    curve has left the plateau upward, by twice the band.
    """
    e, a = _check_curve(epochs, accuracy)
    s = smooth(a)
    after = np.flatnonzero(s[plateau["last"] + 1:] >= plateau["level"] + ESCAPE_RISE - 1e-12)
    return int(e[plateau["last"] + 1 + after[0]]) if after.size else None


def trap(epochs, accuracy, found=None):
    """The plateau that lasts to the run's end (its last evaluation is the run's last), or None.

    ``found`` is :func:`plateaus` of the curve, if computed already.
    """
    e, a = _check_curve(epochs, accuracy)
    found = plateaus(e, a) if found is None else found
    return found[-1] if found and found[-1]["last"] == a.size - 1 else None


def time_to_100(epochs, accuracy):
    """The first epoch at which the accuracy is 1 (every prediction right), or None: ``run_nt``'s rule."""
    e, a = _check_curve(epochs, accuracy)
    hit = np.flatnonzero(a >= 1.0)
    return int(e[hit[0]]) if hit.size else None


# --------------------------------------------------------------------------
# A study's cells
# --------------------------------------------------------------------------


def read_curve(settings):
    """``(name, path)`` of the curve a study's claim is about: the N16T2 half of a mixture (Fig. 6,
    where the paper has DPA near 0.34), the accuracy otherwise."""
    from .nt_sensitivity import MEASURES  # noqa: PLC0415

    if MEASURES.get(settings.get("figure"), ("final_accuracy",))[0] == "final_accuracy_N16T2":
        return "N16T2", ("accuracy_by_task", "N16T2")
    return "accuracy", ("accuracy",)


def _r(x, digits=4):
    return None if x is None else round(float(x), digits)


def _plateau_row(p):
    """A plateau as the table stores it: ``[start, end, level, low, high]``."""
    return [p["start"], p["end"], _r(p["level"]), _r(p["low"]), _r(p["high"])]


def _words(epochs, acc):
    """Plateaus (with escapes) and the trap of one curve, as the table stores them."""
    found = plateaus(epochs, acc)
    caught = trap(epochs, acc, found)
    return {"plateaus": [_plateau_row(p) + [escape(epochs, acc, p)] for p in found],
            "trap": None if caught is None else _plateau_row(caught)}


def read_cell(record, settings):
    """The words of every seed of one cell record of a study's results file.

    Returns
    -------
    dict
        Per seed (lists over the seeds): ``plateaus`` (each ``[start, end,
        level, low, high, escape]``, ``escape`` the epoch or None), ``trap``
        (``[start, end, level, low, high]`` or None), ``diverged`` and
        ``epochs_to_100`` (the record's, from the full curve); and
        ``mean_curve``: the same words for the mean over the seeds that did
        not diverge (None if all did).
    """
    _, path = read_curve(settings)
    acc = record
    for key in path:
        acc = acc[key]
    acc = np.asarray(acc, dtype=float)  # (S, n_eval)
    epochs = record["eval_epochs"]
    diverged = [bool(d) for d in record.get("diverged", [False] * acc.shape[0])]
    seeds = [_words(epochs, row) for row in acc]
    kept = acc[[not d for d in diverged]]
    mean = _words(epochs, kept.mean(axis=0)) if kept.size else None
    return {"plateaus": [w["plateaus"] for w in seeds], "trap": [w["trap"] for w in seeds],
            "diverged": diverged, "epochs_to_100": list(record["epochs_to_100"]), "mean_curve": mean}


def _spread(values, digits=4):
    if not values:
        return None
    v = np.asarray(values, dtype=float)
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return {"min": _r(v.min(), digits), "q1": _r(q1, digits), "median": _r(med, digits), "q3": _r(q3, digits),
            "max": _r(v.max(), digits)}


def summarise_cell(words):
    """Counts and spreads of one cell's words (:func:`read_cell`), over the seeds that did not diverge.

    Returns
    -------
    dict
        ``seeds``, ``diverged``, ``plateau`` (seeds with at least one),
        ``escaped`` and ``trapped`` (seeds whose first plateau was escaped;
        seeds with a trap), ``reached_100`` (every seed, as the study counts
        it); the spreads (``min``, quartiles, ``max``) over those seeds of the
        first plateau's ``level``, ``start`` and ``end``, of the first
        ``escape`` epoch, of the trap's ``trap_level`` and ``trap_start``, and
        of ``epochs_to_100`` over the seeds that reached it.
    """
    live = [k for k, d in enumerate(words["diverged"]) if not d]
    first = [words["plateaus"][k][0] for k in live if words["plateaus"][k]]
    traps = [words["trap"][k] for k in live if words["trap"][k] is not None]
    escapes = [p[5] for p in first if p[5] is not None]
    hit = [e for e in words["epochs_to_100"] if e is not None]
    return {"seeds": len(words["diverged"]), "diverged": len(words["diverged"]) - len(live),
            "plateau": len(first), "escaped": len(escapes), "trapped": len(traps), "reached_100": len(hit),
            "level": _spread([p[2] for p in first]), "start": _spread([p[0] for p in first], 0),
            "end": _spread([p[1] for p in first], 0), "escape": _spread(escapes, 0),
            "trap_level": _spread([t[2] for t in traps]), "trap_start": _spread([t[0] for t in traps], 0),
            "epochs_to_100": _spread(hit, 0)}


def curve_table(result, source=None, command=None):
    """The table of a study's results file: every cell's words per seed, its summary, its mean curve.

    Parameters
    ----------
    result : dict
        A ``refattn nt-sensitivity`` results file, loaded.
    source : str, optional
        Its path, recorded in the table.
    command : str, optional
        The command that makes the table, recorded in it.

    Returns
    -------
    dict
        ``command``, ``source``, ``definitions`` (:data:`DEFINITIONS` and the
        thresholds), ``settings`` (the study's figure, task, context, epochs
        and the curve read) and ``cells``: per cell key, ``seeds``
        (:func:`read_cell` without the mean), ``summary``
        (:func:`summarise_cell`) and ``mean_curve``.
    """
    s = result["settings"]
    curve, _ = read_curve(s)
    cells = {}
    for key, record in result["cells"].items():
        words = read_cell(record, s)
        mean = words.pop("mean_curve")
        cells[key] = {"summary": summarise_cell(words), "mean_curve": mean, "seeds": words}
    return {"command": command, "source": source,
            "definitions": {**DEFINITIONS, "thresholds": {
                "PLATEAU_BAND": PLATEAU_BAND, "PLATEAU_MIN_EPOCHS": PLATEAU_MIN_EPOCHS,
                "PLATEAU_MIN_EVALUATIONS": PLATEAU_MIN_EVALUATIONS, "PLATEAU_DRIFT": PLATEAU_DRIFT,
                "PLATEAU_CEILING": PLATEAU_CEILING,
                "ESCAPE_RISE": ESCAPE_RISE, "SMOOTHING": SMOOTHING}},
            "settings": {"figure": s["figure"], "task": s["task"], "n_con": s["n_con"], "epochs": s["epochs"],
                         "eval_every": s["eval_every"], "seeds": len(s["seeds"]), "curve": curve},
            "cells": cells}


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------

#: What marks a file as a table of this module (a results file that is not one is never overwritten).
KIND = "refattn curves table"


def _load_source(path):
    """A ``refattn nt-sensitivity`` results file, or ValueError naming ``source``."""
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise ValueError(f"source: {name!r} is not a file; expected a results file of refattn nt-sensitivity")
    try:
        with open(name, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"source: cannot read {name!r} as JSON ({exc})") from None
    s = data.get("settings") if isinstance(data, dict) else None
    if not isinstance(s, dict) or not isinstance(data.get("cells"), dict) or not {"figure", "task"} <= set(s):
        raise ValueError(f"source: {name!r} is not a results file of refattn nt-sensitivity")
    numbers = {"n_con": int, "epochs": int, "eval_every": int, "seeds": list}
    wrong = [k for k, kind in numbers.items() if not isinstance(s.get(k), kind) or isinstance(s.get(k), bool)]
    if wrong:
        raise ValueError(f"source: {name!r} is not a results file of refattn nt-sensitivity (its setting {wrong[0]!r} "
                         f"is missing or not {'a list' if numbers[wrong[0]] is list else 'a whole number'})")
    _, path = read_curve(s)
    for key, rec in data["cells"].items():
        if not isinstance(rec, dict) or not {"eval_epochs", "accuracy", "epochs_to_100"} <= set(rec):
            raise ValueError(f"source: {name!r}: cell {key!r} has no accuracy curves")
        if not _curves_fit(rec, path):
            raise ValueError(f"source: {name!r}: cell {key!r} holds curves of another shape (one row of numbers per "
                             f"seed, one number per evaluation epoch, and one epochs_to_100 per seed)")
    try:  # the numbers the table quotes agree with the curves they come from, the cells are the grid's
        check_cells(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"source: {name!r} is not a results file of refattn nt-sensitivity as it wrote it "
                         f"({type(exc).__name__}: {exc}); it is left as it is") from None
    return data


def _curves_fit(rec, path):
    """A cell record's curve (at ``path``) is seeds x evaluations of numbers (or null: a NaN), with a number
    per evaluation epoch, and an ``epochs_to_100`` (and a ``diverged``, if any) per seed."""
    acc = rec
    for key in path:
        acc = acc.get(key) if isinstance(acc, dict) else None
    epochs, hit = rec["eval_epochs"], rec["epochs_to_100"]
    if not (isinstance(acc, list) and isinstance(epochs, list) and isinstance(hit, list) and len(hit) == len(acc)):
        return False
    if "diverged" in rec and not (isinstance(rec["diverged"], list) and len(rec["diverged"]) == len(acc)):
        return False
    plain = all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in epochs)
    return plain and all(isinstance(row, list) and len(row) == len(epochs) and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in row) for row in acc)


@dataclass
class Settings(StudySettings):
    """Plateaus, escapes, traps, divergence and the epochs to an error-free evaluation of every seed and cell
    of a results file of refattn nt-sensitivity, by the definitions of refattn.studies.curves."""

    source: str = option(help="a results file of refattn nt-sensitivity (derivations/data/15-sensitivity-*.json)",
                         positional=True)
    results: str | None = option(None, "JSON file to write the table into (a table made by this command is "
                                       "replaced; any other file is refused)", output="results")
    max_memory: float | None = max_memory()

    def check(self):
        """The source is a study's results file, and an existing results file is a table of this command."""
        _load_source(self.source)
        check_memory(40 * os.path.getsize(self.source) + 2**24, "source " + repr(self.source), self.max_memory)
        if self.results is not None and os.path.isfile(self.results) and os.path.getsize(self.results):
            try:
                with open(self.results, encoding="utf-8") as fh:
                    old = json.load(fh)
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                old = None
            if not isinstance(old, dict) or old.get("kind") != KIND:
                raise ValueError(f"--results: {self.results!r} exists and is not a table of refattn curves; "
                                 f"it is left as it is (give another file)")


def run(settings, *, command=None):
    """The table of ``settings.source`` (:func:`curve_table`), written to ``settings.results`` if given."""
    data = _load_source(settings.source)
    table = {"kind": KIND, **curve_table(data, source=settings.source, command=command)}
    if settings.results is not None:
        from ..training.runs import _flat_lists  # noqa: PLC0415

        text = (_flat_lists(dumps(table, indent=1)) + "\n").encode("utf-8")
        atomic_write(settings.results, lambda fh: fh.write(text))
    return table


def _range(spread, fmt="{:.2f}"):
    if spread is None:
        return "-"
    lo, hi = fmt.format(spread["min"]), fmt.format(spread["max"])
    return lo if lo == hi else f"{lo}-{hi}"


def _mean_words(mean):
    if mean is None:
        return "all diverged"
    parts = []
    for p in mean["plateaus"]:
        text = f"{p[2]:.2f} at {p[0]}-{p[1]}"
        parts.append(text + (f", escape {p[5]}" if p[5] is not None else ""))
    out = "; ".join(parts) or "none"
    return out + (" (trap)" if mean["trap"] is not None else "")


def report(table):
    """The table as Markdown: one row per cell and attention."""
    s = table["settings"]
    lines = [f"{s['figure']}: {s['task']}, N_con = {s['n_con']}, {s['epochs']} epochs, {s['seeds']} seeds; "
             f"curve: {s['curve']}; source {table['source']}",
             "| cell | diverged | plateau | first level | first start / end (median) | escaped (median epoch) "
             "| trapped (level) | 100 % (median) | mean curve: plateau level at epochs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, cell in table["cells"].items():
        m = cell["summary"]
        live = m["seeds"] - m["diverged"]
        start_end = "-" if m["start"] is None else f"{m['start']['median']:.0f} / {m['end']['median']:.0f}"
        esc = f"{m['escaped']}/{live}" + ("" if m["escape"] is None else f" ({m['escape']['median']:.0f})")
        trapped = f"{m['trapped']}/{live}" + ("" if m["trap_level"] is None else f" ({_range(m['trap_level'])})")
        hit = f"{m['reached_100']}/{m['seeds']}" + (
            "" if m["epochs_to_100"] is None else f" ({m['epochs_to_100']['median']:.0f})")
        lines.append(f"| {key} | {m['diverged']}/{m['seeds']} | {m['plateau']}/{live} | {_range(m['level'])} | "
                     f"{start_end} | {esc} | {trapped} | {hit} | {_mean_words(cell['mean_curve'])} |")
    return "\n".join(lines)
