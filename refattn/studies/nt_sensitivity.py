r"""How Expressive's NT claims depend on settings the paper does not give: a grid, not one point.

Expressive (section 5) compares expressive attention (EA, Eq. 2) with
dot-product attention (DPA, Eq. 1) on the NT tasks but states neither the
initialisation of its model nor, for every figure, how long it trained. A
single run of ours at one initialisation scale could show either outcome
(at N16T2, N_con = 32 and the paper's lr 0.02, DPA is trapped in 14 of 16
seeds at 3000 epochs at init x0.5, and ahead of EA at x1; docs/results.md).
So each figure's claim is rerun over a grid

* initialisation scale ``init_scale`` in {0.5, 1, 2} (the half-width of the
  uniform initialisation in units of ``1/sqrt(fan_in)``,
  :class:`refattn.training.models.nt.NTModel`);
* learning rate ``lr`` in {0.02 (the paper's), 0.32};

with 16 seeds per cell, EA and DPA on the same seeds and data, and every
cell summarised by the medians of the claim's measure with their
interquartile range and a two-sided rank test of the difference
(:func:`rank_test`). The measure follows the claim (:data:`MEASURES`): the
final greedy accuracy for Figs. 3 and 7, the final accuracy on the N16T2
half of the mixture for Fig. 6 (where the paper says DPA fails), and the
epochs to 100 % for Fig. 4 (a claim about speed; a seed that never reaches
100 % counts as slower than every seed that does).

Whether a run has *settled* is read off its own curve: the change of the
mean accuracy over its last third (:func:`late_change`); a cell whose
change exceeds :data:`SETTLED` (0.02) in either attention is marked "still
moving" and its verdict read as provisional.

Every finished cell is written at once to the results file, which a rerun
with the same settings resumes (finished cells are kept, not recomputed);
the file records the command, the settings, the code's commit and, per
cell, the thinned curves. ``derivations/15-nt-experiments.md`` discusses the
results, ``notebooks/14_settling_the_claims.py`` draws them from the committed
files in ``derivations/data/``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..training.runs import CellStore, check_memory, session
from . import StudySettings, max_memory, option
from . import grid, nt_training
from .helpers import cell_key, check_cells, code_commit, number_name
from .nt_training import PAPER, run_nt
from .statistics import rank_shift, rank_test

__all__ = ["SETTINGS", "GRID", "MEASURES", "MEASURE_DIRECTIONS", "SETTLED", "CURVE_POINTS", "Settings", "cell_key",
           "late_change", "thin_record", "check_cells", "run_sensitivity", "run", "summarise",
           "compare_results", "report", "plot", "plot_verdict_map"]

#: The grid: initialisation scales and learning rates.
GRID = {"init_scale": (0.5, 1.0, 2.0), "lr": (0.02, 0.32)}

#: Each figure's task and the length we run it (the paper's axes are mostly unstated; derivation 15 says why).
SETTINGS = {
    "fig3": {"task": "N16T2", "n_con": 32, "epochs": 3000, "eval_every": 100, "lr_drop": None},
    "fig3-16": {"task": "N16T2", "n_con": 16, "epochs": 4000, "eval_every": 100, "lr_drop": None},
    "fig3-52": {"task": "N16T2", "n_con": 52, "epochs": 3000, "eval_every": 100, "lr_drop": None},
    # the right panel's 56, where the paper has both attentions at 100 % "within 100 epochs"
    "fig3-56": {"task": "N16T2", "n_con": 56, "epochs": 1000, "eval_every": 50, "lr_drop": None},
    "fig4": {"task": "N2T5", "n_con": 16, "epochs": 2000, "eval_every": 20, "lr_drop": None},
    "fig5": {"task": "N16T5", "n_con": 128, "epochs": 2000, "eval_every": 250, "lr_drop": None},
    "fig5-256": {"task": "N16T5", "n_con": 256, "epochs": 2000, "eval_every": 250, "lr_drop": None},
    # the text's "training [...] becomes unstable" at 512: defined, not run (8 GiB and ~110 min per attention and cell)
    "fig5-512": {"task": "N16T5", "n_con": 512, "epochs": 2000, "eval_every": 250, "lr_drop": None},
    "fig6": {"task": "N16T2+N16T2-S", "n_con": 32, "epochs": 3000, "eval_every": 150, "lr_drop": (2500, 4)},
    "fig7": {"task": "N16T2-R", "n_con": 64, "epochs": 1000, "eval_every": 100, "lr_drop": None},
    "fig7-128": {"task": "N16T2-R", "n_con": 128, "epochs": 2000, "eval_every": 250, "lr_drop": None},
    # the text's "we tested that the value of beta does not affect results", at its named 1/sqrt(N_con)
    "fig3-beta": {"task": "N16T2", "n_con": 32, "epochs": 3000, "eval_every": 100, "lr_drop": None,
                  "beta": 1 / math.sqrt(32)},
}

#: What each figure claims about EA against DPA, as ``(measure, better)``: the
#: measure compared and whether "higher" or "lower" is better.
MEASURES = {
    "fig3": ("final_accuracy", "higher"),
    "fig3-16": ("final_accuracy", "higher"),
    "fig3-52": ("final_accuracy", "higher"),
    "fig3-56": ("final_accuracy", "higher"),
    "fig4": ("epochs_to_100", "lower"),
    "fig5": ("final_accuracy", "higher"),
    "fig5-256": ("final_accuracy", "higher"),
    "fig5-512": ("final_accuracy", "higher"),
    "fig3-beta": ("final_accuracy", "higher"),
    "fig6": ("final_accuracy_N16T2", "higher"),
    "fig7": ("final_accuracy", "higher"),
    "fig7-128": ("final_accuracy", "higher"),
}

#: A run whose mean accuracy moved more than this over its last third has not settled.
SETTLED = 0.02

ATTENTIONS = ("expressive", "softmax")


#: The figure ``refattn nt-sensitivity --out DIR`` writes.
FIGURE = "nt_sensitivity_{figure}.png"


@dataclass
class Settings(StudySettings):
    """EA against DPA over initialisation scale x learning rate (Expressive Figs. 3-7), each finished cell
    saved and resumed."""

    needs = ("scipy",)  # the rank test

    figure: str = option(help="the figure's task and length (refattn.studies.nt_sensitivity.SETTINGS)",
                         choices=tuple(SETTINGS), positional=True)
    seeds: int = option(16, "seeds per cell", low=1)
    epochs: int | None = option(None, "epochs (default: the figure's)", low=1)
    eval_every: int | None = option(None, "epochs between evaluations (default: the figure's)", low=1)
    init_scales: tuple[float, ...] = option(GRID["init_scale"], "comma-separated initialisation scales",
                                            positive=True)
    lrs: tuple[float, ...] = option(GRID["lr"], "comma-separated learning rates", positive=True)
    n_test: int = option(PAPER["n_test"], "test series per seed", low=1)
    dtype: str = option("float32", "precision", choices=("float32", "float64"))
    results: str | None = option(None, "JSON file written after every cell and resumed if it exists", output="results")
    max_memory: float | None = max_memory()
    workers: int | None = grid.workers_option()
    scheduler: str | None = grid.scheduler_option()
    quiet: bool = grid.quiet_option()
    allow_mixed_versions: bool = grid.mixed_versions_option()


def late_change(accuracy, fraction=1 / 3):
    """The change of the mean (over seeds) accuracy over the last ``fraction`` of the evaluations.

    ``accuracy`` is seeds x evaluations; the change is ``mean[-1] - mean[k]``
    with ``k`` the evaluation a ``fraction`` of the way back from the end.
    """
    acc = np.asarray(accuracy, dtype=float)
    if acc.ndim != 2 or acc.shape[1] < 2:
        return None
    mean = acc.mean(axis=0)
    k = max(0, int(round((1 - fraction) * (mean.size - 1))))
    return float(mean[-1] - mean[k])


def _thin(values, points=60):
    """About ``points`` values of a long curve, evenly spaced, the last one kept: ``(indices, values)``."""
    values = np.asarray(values, dtype=float)
    idx = np.unique(np.linspace(0, values.size - 1, min(points, values.size)).round().astype(int))
    return idx.tolist(), values[idx].round(6).tolist()


#: The most evaluations a stored accuracy curve keeps (the last one always; the summaries are computed first).
CURVE_POINTS = 40


def thin_record(rec, points=CURVE_POINTS):
    """A cell record with its accuracy curves thinned to about ``points`` evaluations (idempotent).

    The per-seed summaries (``epochs_to_100``, ``final_accuracy``,
    ``late_change``) are computed from the full curve before this, so
    thinning changes no number in a table, only the curves drawn.
    """
    if len(rec["eval_epochs"]) <= points:
        return rec
    idx, _ = _thin(np.arange(len(rec["eval_epochs"])), points)
    out = dict(rec, eval_epochs=[rec["eval_epochs"][i] for i in idx],
               accuracy=[[row[i] for i in idx] for row in rec["accuracy"]])
    if "accuracy_by_task" in rec:
        out["accuracy_by_task"] = {t: [[row[i] for i in idx] for row in a] for t, a in rec["accuracy_by_task"].items()}
    return out


#: The keys of every cell's record (:func:`_cell_record`), which a results file is checked for before use.
RECORD_KEYS = ("epochs_to_100", "final_accuracy", "eval_epochs", "accuracy", "loss_epochs", "loss", "late_change")


def _cell_record(r):
    """What the results file keeps of one :func:`run_nt` result: settings, per-seed numbers, thinned curves."""
    loss_epochs, loss = _thin(r["loss"])
    rec = {
        "epochs_to_100": r["epochs_to_100"],
        "final_accuracy": np.round(r["final_accuracy"], 4).tolist(),
        "eval_epochs": r["eval_epochs"],
        "accuracy": np.round(r["accuracy"], 4).tolist(),
        "loss_epochs": [e + 1 for e in loss_epochs], "loss": loss,
        "diverged": r["diverged"],
        "late_change": late_change(r["accuracy"]),
        "seconds": round(r["seconds"], 1),
    }
    if "accuracy_by_task" in r:
        rec["accuracy_by_task"] = {t: np.round(a, 4).tolist() for t, a in r["accuracy_by_task"].items()}
        rec["final_accuracy_by_task"] = {t: np.round(np.asarray(a)[:, -1], 4).tolist()
                                         for t, a in r["accuracy_by_task"].items()}
        rec["late_change_by_task"] = {t: late_change(a) for t, a in r["accuracy_by_task"].items()}
    return thin_record(rec)


def _own(settings):
    """The figure's :data:`SETTINGS`, with ``epochs`` and ``eval_every`` overridden where given."""
    return {**SETTINGS[settings.figure],
            **{k: getattr(settings, k) for k in ("epochs", "eval_every") if getattr(settings, k) is not None}}


def _recorded(settings):
    """What the results file records of the grid's settings (and a resumed file must match): :func:`_own`'s,
    the seeds listed and the grid's axes."""
    recorded = _own(settings)
    recorded["lr_drop"] = None if recorded["lr_drop"] is None else list(recorded["lr_drop"])
    recorded.update(figure=settings.figure, seeds=list(range(settings.seeds)),
                    init_scales=[float(v) for v in settings.init_scales], lrs=[float(v) for v in settings.lrs],
                    n_test=settings.n_test, dtype=settings.dtype, attentions=list(ATTENTIONS),
                    momentum=PAPER["momentum"], layout="b_Q+b_r", bias_init="zeros")
    return recorded


@session()  # the results file stays locked while the grid runs
def run_sensitivity(settings, *, command=None, progress=None):
    """Train EA and DPA over the grid of one figure of :data:`SETTINGS` (:class:`Settings`;
    ``derivations/15-nt-experiments.md``, section 11), each finished cell saved at once in the results file
    (resumed where its settings are these; the grid may grow); the cells run through
    :class:`refattn.studies.grid.Runner`. Returns ``settings`` (as the file records them, :func:`_recorded`),
    ``commit``, ``command``, ``cells`` ({:func:`cell_key`: record}), ``ran_on``, ``runs`` and ``summary``
    (:func:`summarise`)."""
    own = _own(settings)
    cell_settings = {"task": own["task"], "context": own["n_con"], "seeds": settings.seeds,
                     "epochs": own["epochs"], "eval_every": own["eval_every"], "n_test": settings.n_test,
                     "lr_drop": own["lr_drop"], "beta": own.get("beta", 1.0), "dtype": settings.dtype,
                     "max_memory": settings.max_memory}
    per_cell = nt_training.Settings(**cell_settings).memory_estimate()
    check_memory(per_cell, f"--seeds {settings.seeds}", settings.max_memory)
    recorded = _recorded(settings)  # the seeds are listed only now, after the memory check
    runner = grid.Runner(settings, progress=progress, label=f"nt-sensitivity {settings.figure}", memory=per_cell)
    store = CellStore(settings.results, recorded, grow=("init_scales", "lrs"), what="run_sensitivity",
                      record_keys=RECORD_KEYS)
    cells = store.cells
    out = {"command": command, "settings": recorded, "commit": code_commit(), "cells": cells,
           "ran_on": dict(store.previous.get("ran_on", {}))}
    store.read(lambda: _read_cells(out, "ran_on" in store.previous))  # what the file holds is read (thinned), and reported, before any work
    out["runs"] = store.runs(command, out["commit"])  # every command that added cells to the file

    def save():
        out["summary"] = summarise(out)
        store.save(out)

    todo = [grid.Cell(cell_key(init, lr, att), _cell, (nt_training.Settings(**cell_settings, activation=att, lr=lr,
                                                                            init_scale=init),))
            for init in recorded["init_scales"] for lr in recorded["lrs"] for att in ATTENTIONS]
    with runner:
        runner.run(todo, into=cells, ran_on=out["ran_on"], then=save)
    save()
    return out


def _read_cells(out, placed):
    """The cells found in a results file, thinned (cells saved before the curves were), each checked against
    its own curves (:func:`check_cells`) and, where the file records ``placed`` cells, against its place
    (:func:`refattn.studies.grid.check_places`), then summarised and reported, as the run will after its
    first new cell."""
    for key, rec in out["cells"].items():
        out["cells"][key] = thin_record(rec)
    check_cells(out)
    grid.check_places(out["cells"], out["ran_on"], placed)
    report({**out, "summary": summarise(out)})


def _cell(cell):
    """One cell of the grid (:class:`refattn.studies.grid.Cell`): :func:`run_nt` on ``cell`` (its
    ``nt_training.Settings``), recorded as the results file keeps it; here or on a Dask worker."""
    with np.errstate(all="ignore"):  # a diverging seed is recorded ("diverged"), not warned about
        return _cell_record(run_nt(cell, progress=False))


#: Every measure a cell record supports, and which direction is better.
MEASURE_DIRECTIONS = {"final_accuracy": "higher", "final_accuracy_N16T2": "higher", "epochs_to_100": "lower"}


def _measure_of(figure, measure):
    """``(name, better)``: the figure's own measure (:data:`MEASURES`), or ``measure`` if given."""
    if measure is None:
        return MEASURES[figure]
    if measure not in MEASURE_DIRECTIONS:
        raise ValueError(f"measure: expected one of {tuple(MEASURE_DIRECTIONS)}, got {measure!r}")
    return measure, MEASURE_DIRECTIONS[measure]


def _measure(rec, name, epochs, eval_every):
    """The per-seed values of the measure ``name`` in one cell record."""
    if name == "epochs_to_100":  # never reached: later than every seed that did (a tie at the top)
        return np.array([epochs + eval_every if e is None else e for e in rec["epochs_to_100"]], dtype=float)
    if name == "final_accuracy_N16T2":
        return np.asarray(rec["final_accuracy_by_task"]["N16T2"], dtype=float)
    return np.asarray(rec["final_accuracy"], dtype=float)


def _quartiles(x):
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3)}


def summarise(result, measure=None):
    """One row per grid cell with both attentions finished: medians, spread, difference and test.

    ``measure`` replaces the figure's own (:data:`MEASURES`) by another of
    :data:`MEASURE_DIRECTIONS`: ``"epochs_to_100"`` compares speed in cells
    where both attentions end at 100 % and the final accuracy cannot tell
    them apart.

    Each row: ``init_scale``, ``lr``, the measure's ``expressive`` and
    ``softmax`` quartiles, ``difference`` (EA median minus DPA median),
    ``p`` (:func:`rank_test`), ``winner`` ("EA", "DPA" or "neither" at
    p >= 0.05), ``reached_100`` per attention, and ``settled`` (every
    ``late_change`` within :data:`SETTLED`, or every seed at 100 %).
    """
    s = result["settings"]
    name, better = _measure_of(s["figure"], measure)
    rows = []
    for init in s["init_scales"]:
        for lr in s["lrs"]:
            recs = {att: result["cells"].get(cell_key(init, lr, att)) for att in ATTENTIONS}
            if any(r is None for r in recs.values()):
                continue
            vals = {att: _measure(recs[att], name, s["epochs"], s["eval_every"]) for att in ATTENTIONS}
            q = {att: _quartiles(vals[att]) for att in ATTENTIONS}
            diff = q["expressive"]["median"] - q["softmax"]["median"]
            p = rank_test(vals["expressive"], vals["softmax"])
            shift = rank_shift(vals["expressive"], vals["softmax"])  # the direction the rank test tests
            ea_ahead = shift > 0 if better == "higher" else shift < 0
            winner = "neither" if p >= 0.05 else ("EA" if ea_ahead else "DPA")
            changes = []
            for r in recs.values():
                changes += [r["late_change"]] + list((r.get("late_change_by_task") or {}).values())
            all_solved = all(e is not None for r in recs.values() for e in r["epochs_to_100"])
            settled = all_solved or all(c is not None and abs(c) <= SETTLED for c in changes)
            rows.append({"init_scale": init, "lr": lr, "measure": name, "better": better,
                         "expressive": q["expressive"], "softmax": q["softmax"], "difference": diff, "p": p,
                         "winner": winner,
                         "reached_100": {att: sum(e is not None for e in recs[att]["epochs_to_100"])
                                         for att in ATTENTIONS},
                         "diverged": {att: int(sum(recs[att].get("diverged", ()))) for att in ATTENTIONS},
                         "late_change": {att: recs[att]["late_change"] for att in ATTENTIONS},
                         "settled": bool(settled)})
    return rows


def compare_results(rerun, committed):
    """How closely a rerun of a study matches a committed file, cell by cell.

    Float32 training is chaotic: two machines whose BLAS kernels round one
    product differently follow the same curve for a while and then drift
    apart, seed by seed (derivation 15, section 11). This says where.

    Parameters
    ----------
    rerun, committed : dict
        :func:`run_sensitivity` results (or loaded files) with the same settings.

    Returns
    -------
    list of dict
        One per cell present in both: ``cell``, ``identical`` (every stored
        number of the two records equal), ``first_loss_difference`` (the
        first stored epoch at which the mean loss differs, None if none),
        ``same_epochs_to_100`` (seeds reaching 100 % at the same evaluation,
        or never in both), ``seeds``, ``largest_final_difference`` (over seeds)
        and, per record, the ``median`` of the figure's measure.
    """
    figure = committed["settings"]["figure"]
    if rerun["settings"]["figure"] != figure:
        raise ValueError(f"rerun: expected a result of {figure!r}, got {rerun['settings']['figure']!r}")
    name, _ = MEASURES[figure]
    s = committed["settings"]
    rows = []
    for key, old in committed["cells"].items():
        new = rerun["cells"].get(key)
        if new is None:
            continue
        a, b = np.asarray(new["loss"], dtype=float), np.asarray(old["loss"], dtype=float)
        differ = [e for e, x, y in zip(old["loss_epochs"], a, b) if not (x == y or (np.isnan(x) and np.isnan(y)))]
        fa, fb = (np.asarray(_measure(r, "final_accuracy", s["epochs"], s["eval_every"])) for r in (new, old))
        rows.append({"cell": key,
                     "identical": all(new.get(k) == old.get(k) for k in old if k != "seconds"),
                     "first_loss_difference": differ[0] if differ else None,
                     "same_epochs_to_100": sum(x == y for x, y in zip(new["epochs_to_100"], old["epochs_to_100"])),
                     "seeds": len(old["epochs_to_100"]),
                     "largest_final_difference": float(np.max(np.abs(fa - fb))),
                     "median": {"rerun": float(np.median(_measure(new, name, s["epochs"], s["eval_every"]))),
                                "committed": float(np.median(_measure(old, name, s["epochs"], s["eval_every"])))}})
    return rows


def _p(p):
    """A p-value for a table: three decimals, or "< 0.001" below (the permutation test's floor is 1/20001)."""
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


#: ``refattn nt-sensitivity``: ``command`` (the command line) goes into the results file, so that the file
#: says how to resume it.
run = run_sensitivity


def report(result, measure=None):
    """:func:`summarise`'s rows as a Markdown table (``measure`` as there)."""
    s = result["settings"]
    name, better = _measure_of(s["figure"], measure)
    beta = f", beta = {s['beta']:.4g}" if "beta" in s else ""
    lines = [f"{s['figure']}: {s['task']}, N_con = {s['n_con']}{beta}, {len(s['seeds'])} seeds, {s['epochs']} "
             f"epochs, {s['dtype']}; measure: {name} ({better} is better); median [IQR]",
             "| init | lr | EA | DPA | EA - DPA | p | winner | 100 % (EA/DPA) | diverged (EA/DPA) | settled |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    fmt = "{:.0f}" if name == "epochs_to_100" else "{:.3f}"
    for r in summarise(result, measure):
        cell = {att: f"{fmt.format(r[att]['median'])} [{fmt.format(r[att]['q1'])}, {fmt.format(r[att]['q3'])}]"
                for att in ATTENTIONS}
        lines.append(f"| x{number_name(r['init_scale'])} | {number_name(r['lr'])} | {cell['expressive']} | "
                     f"{cell['softmax']} | "
                     f"{fmt.format(r['difference'])} | {_p(r['p'])} | {r['winner']} | "
                     f"{r['reached_100']['expressive']}/{r['reached_100']['softmax']} | "
                     f"{r['diverged']['expressive']}/{r['diverged']['softmax']} | "
                     f"{'yes' if r['settled'] else 'still moving'} |")
    return "\n".join(lines)


def plot(result, *, axes=None):
    """Two panels: the measure per seed and its median for EA and DPA over the grid; mean curves per cell.

    Left: for every (init, lr) cell, the per-seed values of the figure's
    measure (dots) and their medians (bars), EA beside DPA. Right: the mean
    accuracy (over seeds) against epochs for every cell, EA solid, DPA
    dashed, one colour per cell.
    """
    import matplotlib.pyplot as plt  # noqa: PLC0415

    s = result["settings"]
    figure = s["figure"]
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    else:
        fig = axes[0].figure
    ax, ax2 = axes
    colours = {"expressive": "tab:red", "softmax": "tab:blue"}
    labels, x = [], 0
    rng = np.random.default_rng(0)  # horizontal jitter of the dots only
    cmap = plt.get_cmap("viridis")
    ncells = len(s["init_scales"]) * len(s["lrs"])
    for ci, (init, lr) in enumerate((i, l) for i in s["init_scales"] for l in s["lrs"]):
        for j, att in enumerate(ATTENTIONS):
            rec = result["cells"].get(cell_key(init, lr, att))
            if rec is None:
                continue
            v = _measure(rec, MEASURES[figure][0], s["epochs"], s["eval_every"])
            pos = x + 0.35 * (j - 0.5)
            ax.scatter(pos + rng.uniform(-0.08, 0.08, v.size), v, s=9, color=colours[att], alpha=0.6,
                       label=("EA" if att == "expressive" else "DPA") if ci == 0 else None)
            ax.hlines(np.median(v), pos - 0.15, pos + 0.15, color="k", lw=2)
            acc = np.asarray(rec["accuracy_by_task"]["N16T2"] if MEASURES[figure][0] == "final_accuracy_N16T2"
                             else rec["accuracy"])
            ax2.plot(rec["eval_epochs"], acc.mean(axis=0), "-" if att == "expressive" else "--",
                     color=cmap(ci / max(1, ncells - 1)),
                     label=f"x{number_name(init)}, lr {number_name(lr)}" if att == "expressive" else None)
        labels.append(f"x{number_name(init)}\nlr {number_name(lr)}")
        x += 1
    ax.set_xticks(range(len(labels)), labels)
    name, better = MEASURES[figure]
    ax.set_ylabel(name.replace("_", " ") + f" ({better} is better)")
    ax.set_title(f"{s['task']}, N_con = {s['n_con']}: per seed (dots), median (bar)")
    ax.legend(fontsize=8)
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("mean accuracy" + (" on N16T2" if name == "final_accuracy_N16T2" else ""))
    ax2.set_title("EA solid, DPA dashed")
    ax2.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot_verdict_map(results, *, measures=None, titles=None, axes=None):
    """One panel per result: which attention wins each grid cell, and by how much.

    Each panel is the (initialisation scale x learning rate) grid of one
    figure's study. A cell with a winner (:func:`summarise`, p < 0.05) is
    coloured by the difference of the medians, red where EA is ahead and
    blue where DPA is (accuracy in points; epochs to 100 % as a fraction of
    the run's length); a cell without one stays white. The text gives the
    winner, the difference and the p-value; "~" marks a cell that had not
    settled.

    Parameters
    ----------
    results : sequence of dict
        :func:`run_sensitivity` results (the committed files, loaded).
    measures : sequence of str or None, optional
        One per result: the measure to compare (:func:`summarise`), None for
        the figure's own.
    titles : sequence of str, optional
        One per result (default: the figure's task, context and length).
    """
    import matplotlib.pyplot as plt  # noqa: PLC0415

    results = list(results)
    if not results:
        raise ValueError("results: expected at least one run_sensitivity result")
    measures = list(measures) if measures is not None else [None] * len(results)
    titles = list(titles) if titles is not None else [None] * len(results)
    for arg, values in (("measures", measures), ("titles", titles)):
        if len(values) != len(results):
            raise ValueError(f"{arg}: expected one per result ({len(results)}), got {len(values)}")
    if axes is None:
        fig, axes = plt.subplots(1, len(results), figsize=(3.3 * len(results), 3.2), squeeze=False)
        axes = axes[0]
    else:
        fig = axes[0].figure
    for ax, result, measure, title in zip(axes, results, measures, titles):
        s = result["settings"]
        name, better = _measure_of(s["figure"], measure)
        inits, lrs = s["init_scales"], s["lrs"]
        grid = np.full((len(inits), len(lrs)), np.nan)
        for r in summarise(result, measure):
            i, j = inits.index(r["init_scale"]), lrs.index(r["lr"])
            ea_lead = r["difference"] if better == "higher" else -r["difference"] / s["epochs"]
            grid[i, j] = 0.0 if r["winner"] == "neither" else ea_lead
            unit = f"{r['difference']:+.0f} ep" if name == "epochs_to_100" else f"{100 * r['difference']:+.0f} pts"
            ax.text(j, i, f"{r['winner']}\n{unit}\np {_p(r['p'])}" + ("" if r["settled"] else " ~"),
                    ha="center", va="center", fontsize=7)
        ax.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
        ax.set_xticks(range(len(lrs)), [f"lr {number_name(v)}" for v in lrs])
        ax.set_yticks(range(len(inits)), [f"x{number_name(v)}" for v in inits])
        what = "epochs to 100 %" if name == "epochs_to_100" else name.replace("_", " ")
        ax.set_title(title or f"{s['task']}, N_con {s['n_con']}, {s['epochs']} ep: {what}", fontsize=8)
    axes[0].set_ylabel("initialisation scale")
    fig.suptitle("EA ahead (red) or DPA ahead (blue), p < 0.05; white: neither; ~ still moving", fontsize=9)
    fig.tight_layout()
    return fig
