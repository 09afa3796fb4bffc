r"""Expressive's NT figures (Figs. 3, 4, 6, 7), short runs beside the paper's numbers.

Expressive (Gros, "Reorganizing attention-space geometry with expressive
attention", section 5) trains its one-bilayer transformer
(:class:`refattn.training.models.nt.NTModel`) with dot-product attention (DPA, Eq. 1)
and expressive attention (EA, Eq. 2) on the NT tasks
(:mod:`refattn.training.tasks.nt`) and reports:

* **Fig. 3** -- N16T2. At ``N_con = 32`` both reach a plateau near 0.55; DPA
  stays there, EA escapes slowly. DPA needs ``N_con = 56`` for 100 %, EA
  manages with 52; at 56 both solve the task "within 100 epochs".
* **Fig. 4** -- N2T5 at ``N_con = 16`` (802 parameters): DPA needs
  "substantially longer" than EA; the attention matrices of EA cover a larger
  dynamic range (log10 colour scale).
* **Fig. 6** -- a 50/50 mixture of N16T2 and N16T2-S at ``N_con = 32``, the
  learning rate divided by 4 after 2500 epochs: both reach > 99 % on
  N16T2-S; on N16T2 DPA stays near 0.34, EA reaches about 0.99.
* **Fig. 7** -- NT-R (Eq. 9) at ``N_con = 64 / 128``: DPA about 0.36 / 0.72,
  EA 0.988 / 0.999 (averages over 16 runs).

Each ``run_figN`` takes the :class:`Settings` of ``refattn nt-figure`` (a
setting left at None is the figure's own, :data:`DEFAULTS`) and trains both
activations with :func:`refattn.studies.nt_training.run_nt` (all seeds batched),
at a size that fits a few minutes of one CPU core by default; the docstrings
give the call for the paper's length.
:func:`report` prints our numbers beside the paper's and
:func:`plot` draws the figure; ``refattn nt-figure`` runs them (:class:`Settings`). ``derivations/15-nt-experiments.md``
records the runs and what did and did not reproduce.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..training.runs import check_memory
from ..training.tasks.nt import parse_mixture
from . import StudySettings, max_memory, option
from . import grid, nt_training
from .nt_training import DEVICES, PAPER, run_nt

__all__ = ["PAPER_FIGURES", "FIGURES", "DEFAULTS", "LOG_FLOOR", "COLOURS", "Settings", "run_fig3", "run_fig4",
           "run_mixture",
           "run_ntr", "run_nt_figure", "run", "attention_snapshots", "dynamic_range", "report", "plot",
           "plot_attention_snapshots"]

#: The figures :func:`run_nt_figure` knows.
FIGURES = ("fig3", "fig4", "fig6", "fig7")

#: The figure ``refattn nt-figure --out DIR`` writes.
FIGURE = "nt_{figure}.png"


#: Each figure's own settings, where :class:`Settings` leaves one at None: its task, context lengths,
#: seeds, epochs and evaluations (a function of the context length: one value per length) and, for
#: Fig. 6, its learning-rate drop.
DEFAULTS = {
    "fig3": {"task": "N16T2", "n_cons": (32, 52, 56), "seeds": 4, "epochs": lambda n: 12000 if n <= 32 else 600,
             "eval_every": lambda n: 500 if n <= 32 else 25},
    "fig4": {"task": "N2T5", "n_cons": (16,), "seeds": 16, "epochs": 2000, "eval_every": 20},
    "fig6": {"task": "N16T2+N16T2-S", "n_cons": (32,), "seeds": 4, "epochs": 4000, "eval_every": 250,
             "lr_drop": (2500, 4)},
    "fig7": {"task": "N16T2-R", "n_cons": (64,), "seeds": 4, "epochs": 1500, "eval_every": 100},
}


@dataclass
class Settings(StudySettings):
    """Expressive's figures, short runs, ours beside the paper's numbers.

    A setting left at None is the figure's own (:data:`DEFAULTS`). From Python,
    ``epochs`` and ``eval_every`` may also be dicts ``{N_con: value}``, one per
    context length, and the settings the command line leaves at their default
    (``task``, ``n_cons``, ...) may be given.
    """

    figure: str = option(help="fig3 (N16T2), fig4 (N2T5), fig6 (mixture), fig7 (NT-R)", choices=FIGURES,
                         positional=True)
    seeds: int | None = option(None, "number of seeds (default: the figure's)", low=1)
    epochs: int | dict | None = option(None, "epochs of every run (default: the figure's)", low=1)
    lr: float | None = option(None, f"learning rate (default Expressive's {PAPER['lr']:g})", positive=True)
    device: str = option("cpu", "NumPy on the CPU or CuPy on the GPU", choices=DEVICES, device=True)
    max_memory: float | None = max_memory()
    task: str | None = option(None, "the task (default: the figure's)", cli=False)
    n_cons: tuple[int, ...] | None = option(None, "the context lengths (default: the figure's)", low=1, cli=False)
    eval_every: int | dict | None = option(None, "epochs between evaluations (default: the figure's)", low=1,
                                           cli=False)
    n_test: int = option(PAPER["n_test"], "test series per evaluation", low=1, cli=False)
    lr_drop: tuple[int, float] | None = option(None, "(EPOCH, FACTOR): the learning rate divided by FACTOR from "
                                                     "EPOCH on (default: Fig. 6's (2500, 4), none elsewhere)",
                                               items=({"low": 1}, {"positive": True}), cli=False)
    snapshot_epochs: tuple[int, ...] | None = option(None, "Fig. 4's snapshot epochs (default 0, a tenth of the "
                                                           "epochs and the last)", low=0, cli=False)
    activations: tuple[str, ...] = option(("expressive", "softmax"), "the activations compared (EA, DPA)",
                                          cli=False)
    dtype: str = option("float64", "precision", choices=("float64", "float32"), cli=False)
    layout: str | None = option(None, "the bias layout (default: refattn nt's)", cli=False)
    init_scale: float = option(1.0, "the initialisation's scale", positive=True, cli=False)
    workers: int | None = grid.workers_option()
    scheduler: str | None = grid.scheduler_option()
    quiet: bool = grid.quiet_option()
    allow_mixed_versions: bool = grid.mixed_versions_option()

#: Expressive's numbers and statements, typed in from section 5 and the captions:
#: ``{figure: {"setting": ..., "claims": {(N_con, attention[, task]): (value or None, text)}}}``.
PAPER_FIGURES = {
    "fig3": {
        "setting": "N16T2, N_con = 32 (left) and 52/56 (right), 16 runs",
        "claims": {
            (32, "softmax"): (0.55, "plateau of about 55 %; the loss stops improving (stuck)"),
            (32, "expressive"): (None, "the same plateau, then escapes it slowly (the figure's EA curve rises)"),
            (52, "expressive"): (1.0, "100 %"),
            (52, "softmax"): (0.55, "about 55 %: DPA jumps to 100 % only between N_con = 52 and 56"),
            (56, "softmax"): (1.0, "100 %, 'within 100 epochs'; nearly identical to EA"),
            (56, "expressive"): (1.0, "100 %, 'within 100 epochs'"),
            (16, "expressive"): (1.0, "100 % after about 2000 epochs (text, not in the figure)"),
        },
    },
    "fig4": {
        "setting": "N2T5, N_con = 16, 802 parameters, 16 runs",
        "claims": {
            (16, "softmax"): (None, "needs substantially longer to converge; long spans near the 50 % baseline"),
            (16, "expressive"): (None, "converges substantially faster; attention covers a larger dynamic range"),
        },
    },
    "fig6": {
        "setting": "50/50 mixture N16T2 + N16T2-S, N_con = 32, learning rate / 4 after 2500 epochs",
        "claims": {
            (32, "softmax", "N16T2"): (0.34, "about 0.34 (down from 0.55 when trained alone)"),
            (32, "softmax", "N16T2-S"): (0.99, "above 99 %"),
            (32, "expressive", "N16T2"): (0.99, "about 99 % (slower than alone); +0.5 % after the lr drop"),
            (32, "expressive", "N16T2-S"): (0.99, "above 99 %"),
        },
    },
    "fig7": {
        "setting": "N16T2-R (Eq. 9), N_con = 64 and 128, 16 runs",
        "claims": {
            (64, "softmax"): (0.36, "about 0.36"),
            (128, "softmax"): (0.72, "about 0.72"),
            (64, "expressive"): (0.988, "0.988 on average (most runs perfect); training slow"),
            (128, "expressive"): (0.999, "0.999 on average"),
        },
    },
}

#: Expressive's colours: EA blue, DPA maroon.
COLOURS = {"expressive": "#1f5fbf", "softmax": "#800000"}

#: Attention weights below this are drawn (and counted) as this on the log10 scale.
#: Expressive weights are exactly 0 only where ``|z| < sqrt(tiny)`` (never seen in
#: training); the masked entries above the diagonal are left blank, not floored.
LOG_FLOOR = 1e-12

_ATT = ("expressive", "softmax")
_LABEL = {"expressive": "EA", "softmax": "DPA"}


def _per(value, key, name):
    """``value[key]`` for a dict, else ``value`` itself (one setting for every N_con)."""
    if isinstance(value, dict):
        if key not in value:
            raise ValueError(f"{name}: no entry for N_con = {key} in {value!r}")
        return value[key]
    return value


def _own(settings, figure):
    """The settings of ``figure``, each None replaced by the figure's own (:data:`DEFAULTS`)."""
    if settings.figure != figure:
        raise ValueError(f"figure: this runner draws {figure!r}, got settings for {settings.figure!r}")
    given = {k: v for k, v in DEFAULTS[figure].items() if getattr(settings, k) is None}
    own = dataclasses.replace(settings, **{k: v for k, v in given.items() if not callable(v)})
    return dataclasses.replace(own, **{k: {n: v(n) for n in own.n_cons} for k, v in given.items() if callable(v)})


def _runs(settings, progress, **extra):
    """EA and DPA (``settings.activations``) at every context length of the ``settings`` (:func:`_own`'s)."""
    s = settings
    n_max = max(int(n) for n in s.n_cons)
    base = nt_training.Settings(task=s.task, seeds=s.seeds, n_test=s.n_test, lr=PAPER["lr"] if s.lr is None else s.lr,
                                epochs=max(_per(s.epochs, n, "epochs") for n in s.n_cons),
                                lr_drop=s.lr_drop, device=s.device, dtype=s.dtype, init_scale=s.init_scale,
                                max_memory=s.max_memory, **({} if s.layout is None else {"layout": s.layout}), **extra)
    per_cell = dataclasses.replace(base, context=n_max).memory_estimate()
    check_memory(per_cell, f"--seeds {s.seeds} at N_con = {n_max}", s.max_memory)
    cells = [grid.Cell(f"N_con={int(n)} {act}", _cell, (dataclasses.replace(
                 base, context=int(n), activation=act, epochs=_per(s.epochs, n, "epochs"),
                 eval_every=_per(s.eval_every, n, "eval_every")),))
             for n in s.n_cons for act in s.activations]
    done, ran_on = {}, {}
    with grid.Runner(s, progress=progress, memory=per_cell, label=f"nt-figure {s.figure}") as runner:
        runner.run(cells, into=done, ran_on=ran_on)
    runs = [done[c.key] for c in cells]
    return {"figure": s.figure, "task": runs[0]["task"], "n_cons": [int(n) for n in s.n_cons],
            "attentions": list(s.activations), "runs": runs, "paper": _paper(s.figure), "ran_on": ran_on}


def _cell(settings):
    """One run of a figure (:class:`refattn.studies.grid.Cell`): :func:`run_nt`, here or on a Dask worker."""
    return run_nt(settings, progress=False)


def _paper(figure):
    """:data:`PAPER_FIGURES` entry as JSON (keys joined by '/')."""
    p = PAPER_FIGURES[figure]
    return {"setting": p["setting"],
            "claims": {"/".join(str(k) for k in key): {"value": v, "text": t} for key, (v, t) in p["claims"].items()}}


def run_fig3(settings, *, progress=None):
    """Expressive Fig. 3: N16T2 with EA and DPA at several context lengths.

    Default size (4 seeds; about 5 minutes of one core per activation at
    ``N_con = 32``, about 30 s at 52 and 56 on an idle machine): 12,000 epochs at ``N_con = 32``
    (evaluated every 500), 600 at 52 and 56 (every 25). The paper's 16 runs:
    ``run_fig3(Settings("fig3", seeds=16, epochs={32: 20000, 52: 3000, 56: 1000}))`` (its epoch
    axis is not stated; 20,000 is our guess at "long enough to see EA escape").

    Returns
    -------
    dict
        ``figure``, ``task``, ``n_cons``, ``attentions``, ``runs`` (:func:`run_nt`
        results, N_con outer, activation inner) and ``paper``.
    """
    return _runs(_own(settings, "fig3"), progress)


def run_mixture(settings, *, progress=None):
    """Expressive Fig. 6: the 50/50 mixture of N16T2 and N16T2-S, each task evaluated on its own.

    Default: 4 seeds, 4000 epochs with the paper's learning-rate drop (/4
    after 2500 epochs), about 2 minutes per activation. The paper's figure runs
    longer (its axis is not stated in the text); e.g.
    ``run_mixture(Settings("fig6", seeds=16, epochs=10000))``.

    Returns
    -------
    dict
        As :func:`run_fig3`; each run has ``accuracy_by_task``.
    """
    s = _own(settings, "fig6")
    if len(parse_mixture(s.task)[1]) < 2:
        raise ValueError(f"task: expected a mixture of at least two tasks such as 'N16T2+N16T2-S', got {s.task!r}")
    return _runs(s, progress)


def run_ntr(settings, *, progress=None):
    """Expressive Fig. 7: NT-R (Eq. 9, "N16T2 switching conditionally to N16T2-S").

    Default: ``N_con = 64`` only, 4 seeds, 1500 epochs (a few minutes per
    activation). The paper's setting: ``run_ntr(Settings("fig7", n_cons=(64, 128), seeds=16,
    epochs=...))``, with many thousands of epochs ("training progress is
    slow"; the axis is not stated in the text).

    Returns
    -------
    dict
        As :func:`run_fig3`.
    """
    s = _own(settings, "fig7")
    if not all(t.endswith("-R") for t in parse_mixture(s.task)[1]):
        raise ValueError(f"task: Fig. 7 is an NT-R task such as 'N16T2-R', got {s.task!r}")
    return _runs(s, progress)


def dynamic_range(A, floor=LOG_FLOOR):
    """Decades spanned by the causal attention weights of one matrix.

    ``log10(max A_mk) - log10(max(min A_mk, floor))`` over the entries
    ``k <= m`` of the rows ``m >= 2`` (row 1 has one key and weight 1):
    Expressive's Fig. 4 "dynamical range" made a number.

    Parameters
    ----------
    A : array_like, shape (n, n)
        Attention weights, 0 above the diagonal.
    floor : float > 0

    Returns
    -------
    float
    """
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 2:
        raise ValueError(f"A: expected a square matrix of size >= 2, got shape {A.shape}")
    if not floor > 0:
        raise ValueError(f"floor: expected a number > 0, got {floor!r}")
    w = A[np.tril_indices(A.shape[0])][1:]  # causal entries, row 1 left out
    return float(np.log10(w.max()) - np.log10(max(w.min(), floor)))


def run_fig4(settings, *, progress=None):
    """Expressive Fig. 4: N2T5 (802 parameters), accuracy of EA and DPA and attention snapshots.

    The paper's full setting (16 seeds, 2000 epochs; about 1-2 minutes per
    activation), with the attention weights of every seed for one fixed test
    context (:func:`refattn.studies.nt_training.snapshot_context`) after
    ``snapshot_epochs`` epochs, and their :func:`dynamic_range`.

    Returns
    -------
    dict
        As :func:`run_fig3`, plus ``dynamic_range``: ``{attention: {epoch:
        [decades per seed]}}``.
    """
    s = _own(settings, "fig4")
    snapshot_epochs = s.snapshot_epochs
    if snapshot_epochs is None:
        snapshot_epochs = tuple(sorted({0, int(s.epochs) // 10, int(s.epochs)}))
    out = _runs(s, progress, snapshot_epochs=tuple(snapshot_epochs))
    out["dynamic_range"] = {
        r["attention"]: {str(e): [dynamic_range(A) for A in mats]
                         for e, mats in zip(r["snapshots"]["epochs"], r["snapshots"]["attention"])}
        for r in out["runs"]}
    out["log_floor"] = LOG_FLOOR
    return out


def attention_snapshots(settings, *, epochs=(0, 200, 2000), activations=("expressive", "softmax"), progress=None):
    """The attention weights of the trained model for one test context, at chosen epochs.

    Trains seed ``settings.first_seed`` (:class:`refattn.studies.nt_training.Settings`; its
    ``seeds``, ``activation``, ``epochs`` and ``snapshot_epochs`` replaced) once per activation for
    ``max(epochs)`` epochs and returns ``A_mk`` for the fixed context of
    :func:`refattn.studies.nt_training.snapshot_context` (``settings.snapshot_index``) after each of
    ``epochs`` epochs (0: at initialisation). Expressive, Fig. 4, bottom.

    Returns
    -------
    dict
        ``epochs``, ``context`` (n_con symbols), ``attention``: ``{activation:
        [n_con x n_con per epoch]}`` (0 above the diagonal), ``accuracy``:
        ``{activation: final accuracy}``.
    """
    epochs = tuple(int(e) for e in epochs)
    if not epochs:
        raise ValueError("epochs: expected at least one epoch")
    out = {"task": settings.task, "n_con": settings.context, "seed": int(settings.first_seed), "attention": {},
           "accuracy": {}}
    for act in activations:
        r = run_nt(dataclasses.replace(settings, seeds=1, activation=act, epochs=max(max(epochs), 1),
                                       snapshot_epochs=epochs), progress=progress)
        out["epochs"] = r["snapshots"]["epochs"]
        out["context"] = r["snapshots"]["context"]
        out["attention"][act] = [mats[0] for mats in r["snapshots"]["attention"]]
        out["accuracy"][act] = r["final_accuracy"][0]
    return out


_RUNNERS = {"fig3": run_fig3, "fig4": run_fig4, "fig6": run_mixture, "fig7": run_ntr}


def run_nt_figure(settings, *, progress=None):
    """Run one of Expressive's figures, ``settings.figure``: ``"fig3"``, ``"fig4"``, ``"fig6"`` (mixture)
    or ``"fig7"`` (NT-R), by :func:`run_fig3`, :func:`run_fig4`, :func:`run_mixture` or :func:`run_ntr`."""
    return _RUNNERS[settings.figure](settings, progress=progress)


run = run_nt_figure


# --------------------------------------------------------------------------
# the table: ours beside the paper's
# --------------------------------------------------------------------------


def _curve(r, acc, points=6):
    """``"e1: a1, e2: a2, ..."`` of the mean accuracy at about ``points`` evaluations."""
    acc = np.asarray(acc)
    if not acc.size:
        return "-"
    ep = r["eval_epochs"]
    idx = sorted(set(np.linspace(0, len(ep) - 1, min(points, len(ep))).round().astype(int).tolist()))
    return ", ".join(f"{ep[i]}: {acc[:, i].mean():.3f}" for i in idx)


def report(result):
    """A figure's runs as a Markdown table, our numbers beside Expressive's.

    One row per run (and per task of a mixture): context length, attention,
    epochs and seeds run, mean accuracy over seeds at a few evaluations (the
    curve), final mean accuracy with the range over the seeds that did not diverge (those that did are
    counted, their accuracy left out), seeds that reached
    100 % and their median epoch, training time per epoch for all seeds
    (evaluations left out), and the paper's value and statement.
    """
    paper = result["paper"]["claims"]
    lines = [f"Expressive {result['figure']}: {result['paper']['setting']}",
             f"ours: {result['task']}, seeds {result['runs'][0]['seeds']}, layout {result['runs'][0]['layout']}",
             "| N_con | attention | task | epochs | mean accuracy over epochs (epoch: acc) | final: mean [min, max] "
             "| reached 100 % (median epoch) | ms/epoch (train) | paper |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        parts = ([(t, r["accuracy_by_task"][t]) for t in r["tasks"]] if "accuracy_by_task" in r
                 else [(r["task"], r["accuracy"])])
        for t, acc in parts:
            acc = np.asarray(acc)
            key = f"{r['n_con']}/{r['attention']}" + (f"/{t}" if "accuracy_by_task" in r else "")
            claim = paper.get(key)
            ptxt = "-" if claim is None else (("" if claim["value"] is None else f"{claim['value']:g}: ")
                                              + claim["text"])
            if "accuracy_by_task" in r:
                reach = "-"
            else:
                med = r["median_epochs_to_100"]
                reach = f"{r['reached_100']}/{len(r['seeds'])}" + ("" if med is None else f" ({med:g})")
            trained = ~np.asarray(r.get("diverged") or [False] * len(acc), dtype=bool)  # a diverged seed's
            last = acc[trained, -1] if acc.size else acc  # accuracy is not a trained model's: left out
            fin = "-" if not acc.size else "diverged" if not last.size else (
                f"{last.mean():.3f} [{last.min():.3f}, {last.max():.3f}]")
            if acc.size and not trained.all():
                fin += f" ({int((~trained).sum())}/{len(trained)} seeds diverged)"
            lines.append(f"| {r['n_con']} | {_LABEL.get(r['attention'], r['attention'])} | {t} | {r['epochs']} | "
                         f"{_curve(r, acc)} | {fin} | {reach} | {1000 * r['train_seconds_per_epoch']:.1f} | "
                         f"{ptxt} |")
    if "dynamic_range" in result:
        lines.append("")
        lines.append(f"attention snapshots: decades between the largest and smallest causal weight "
                     f"(floor {result['log_floor']:g}), median [min, max] over seeds")
        for att, by_epoch in result["dynamic_range"].items():
            cells = ", ".join(f"epoch {e}: {np.median(v):.2f} [{min(v):.2f}, {max(v):.2f}]"
                              for e, v in by_epoch.items())
            lines.append(f"  {_LABEL.get(att, att)}: {cells}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------


def _accuracy_panel(ax, r, acc, style="-", label_task=None):
    acc = np.asarray(acc)
    colour = COLOURS.get(r["attention"], "k")
    for row in acc:
        ax.plot(r["eval_epochs"], row, color=colour, lw=0.5, alpha=0.3, ls=style)
    label = _LABEL.get(r["attention"], r["attention"]) + (f" {label_task}" if label_task else "")
    if acc.size:
        ax.plot(r["eval_epochs"], acc.mean(axis=0), color=colour, lw=2, ls=style, label=label)


def _loss_points(ax, r):
    """The training loss (mean over seeds) rescaled by 0.75, as circles at the evaluations (Expressive's style)."""
    loss = np.asarray(r["loss"])
    ep = np.asarray(r["eval_epochs"])
    if ep.size:
        ax.plot(ep, 0.75 * loss[np.minimum(ep, loss.size) - 1], "o", ms=2.5, mfc="none",
                color=COLOURS.get(r["attention"], "k"))


def plot_attention_snapshots(snapshots, *, axes=None, floor=LOG_FLOOR, vmin=None):
    """Attention matrices on a log10 colour scale, one row per attention, one column per epoch.

    Parameters
    ----------
    snapshots : dict
        :func:`attention_snapshots`' result (``epochs``, ``attention``:
        {attention: [matrices]}).
    axes : 2-D array of Axes, optional
        Rows = attentions, columns = epochs; a new figure when None.
    floor : float
        Weights below it are drawn as ``log10(floor)``; entries above the
        diagonal (masked, no weight) are blank.
    vmin : float, optional
        The lower end of the colour scale; by default the smallest log10
        weight shown, rounded down, and not below ``log10(floor)``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt  # noqa: PLC0415

    atts = list(snapshots["attention"])
    epochs = snapshots["epochs"]
    if axes is None:
        fig, axes = plt.subplots(len(atts), len(epochs), figsize=(2.3 * len(epochs) + 1, 2.3 * len(atts)),
                                 squeeze=False)
    else:
        fig = np.asarray(axes).flat[0].figure
    if vmin is None:
        low = min(float(np.min(np.asarray(m, dtype=np.float64)[np.tril_indices(np.shape(m)[0])]))
                  for mats in snapshots["attention"].values() for m in mats)
        vmin = max(np.floor(np.log10(max(low, floor))), np.log10(floor))
    lo = vmin
    im = None
    for i, att in enumerate(atts):
        for j, e in enumerate(epochs):
            A = np.asarray(snapshots["attention"][att][j], dtype=np.float64)
            n = A.shape[0]
            L = np.log10(np.maximum(A, floor))
            L[np.triu_indices(n, 1)] = np.nan  # masked: no weight at all
            ax = axes[i][j]
            im = ax.imshow(L, vmin=lo, vmax=0.0, cmap="viridis", interpolation="nearest")
            ax.set_title(f"{_LABEL.get(att, att)}, epoch {e}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel("query m", fontsize=7)
            if i == len(atts) - 1:
                ax.set_xlabel("key k", fontsize=7)
    if im is not None:
        fig.colorbar(im, ax=np.asarray(axes).ravel().tolist(), shrink=0.8, label="log10 A_mk")
    return fig


def plot(result, seed_index=0):
    """A :func:`run_nt_figure` result drawn as Expressive's figure: every seed's accuracy (thin) and the mean
    (thick), EA blue and DPA maroon, the training loss x 0.75 as circles; Figs. 3 and 7 one panel per
    context length, Fig. 6 one panel per task (the learning-rate drop marked), Fig. 4 :func:`_plot_fig4`."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig_name, runs = result["figure"], result["runs"]
    if fig_name == "fig4":
        return _plot_fig4(result, seed_index)
    if fig_name == "fig6":
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        for r in runs:
            for t, style in zip(r["tasks"], ("-", "--", ":", "-.")):
                _accuracy_panel(ax, r, r["accuracy_by_task"][t], style=style, label_task=t)
            _loss_points(ax, r)
        drop = runs[0].get("lr_drop")
        if drop and drop[0] <= runs[0]["epochs"]:
            ax.axvline(drop[0], color="0.6", lw=6, alpha=0.3, label=f"lr / {drop[1]:g}")
        ax.set_title(f"{result['task']}, N_con = {runs[0]['n_con']}", fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylabel("accuracy; loss x 0.75 (o)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        return fig
    n_cons = result["n_cons"]
    fig, axes = plt.subplots(1, len(n_cons), figsize=(4.2 * len(n_cons), 3.4), squeeze=False)
    for ax, n in zip(axes[0], n_cons):
        for r in runs:
            if r["n_con"] == n:
                _accuracy_panel(ax, r, r["accuracy"])
                _loss_points(ax, r)
        ax.axhline(1.0 / runs[0]["N"], color="0.5", ls=":", lw=1)
        ax.set_title(f"{result['task']}, N_con = {n}", fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 1.02)
    axes[0, 0].set_ylabel("accuracy; loss x 0.75 (o)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _plot_fig4(result, seed_index):
    """Expressive's Fig. 4: the accuracy curves above the attention snapshots of seed ``seed_index``
    (:func:`plot_attention_snapshots`)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    runs = result["runs"]
    snaps = runs[0]["snapshots"]
    n_snap = len(snaps["epochs"])
    fig = plt.figure(figsize=(max(7.0, 2.3 * n_snap + 1), 2.8 + 2.3 * len(runs)), layout="constrained")
    grid = fig.add_gridspec(1 + len(runs), n_snap, height_ratios=[1.3] + [1.0] * len(runs))
    ax = fig.add_subplot(grid[0, :])
    for r in runs:
        _accuracy_panel(ax, r, r["accuracy"])
        _loss_points(ax, r)
    ax.set_title(f"{result['task']}, N_con = {runs[0]['n_con']}, {runs[0]['n_params']} parameters", fontsize=9)
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy; loss x 0.75 (o)")
    ax.legend(fontsize=7)
    snapshots = {"epochs": snaps["epochs"],
                 "attention": {r["attention"]: [m[seed_index] for m in r["snapshots"]["attention"]]
                               for r in runs}}
    axes = [[fig.add_subplot(grid[1 + i, j]) for j in range(n_snap)] for i in range(len(runs))]
    plot_attention_snapshots(snapshots, axes=axes, floor=result.get("log_floor", LOG_FLOOR))
    return fig
