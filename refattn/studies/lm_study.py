r"""The toy language model's verdicts with a tuned learning rate and a run long enough to settle the gaps.

:func:`refattn.studies.lm.run_lm` trains every variant with one
learning rate (Adam, 3e-3) for 600 steps, less than one pass over the
training text; a variant that wants another learning rate or more steps is
handicapped, so its gap to softmax says little. This study,
``derivations/19-toy-lm.md`` section 8, does three things with the same
model, data and seeds:

1. **Table** (``phase="table"``): every variant of
   :data:`refattn.studies.lm.VARIANTS` at the default settings, the
   current code's numbers for the table of derivation 19.
2. **Tuning** (``phase="tune"``): each focus variant (softmax, tanhmax, the
   Cog hybrid, neural-first) at every learning rate of a small grid, the same
   budget for all; the best rate is the one with the lowest mean dev loss
   (there is no third split: the rate is chosen on the text the verdict is
   read on, which favours every variant alike).
3. **Long runs** (``phase="long"``): each focus variant at its best rate for
   ``long_steps`` steps; the gap to softmax at every evaluation, per seed
   (the seeds see the same windows and the same initial embeddings, so the
   differences are paired) with its standard error. A gap has *settled* when
   its change over the last quarter of the run is within two standard errors
   (:func:`gap_curve`).
4. **Control** (``phase="control"``): each focus variant whose best rate is
   not softmax's also runs long at softmax's best rate, so that a gap can be
   read at one shared rate too: a rate chosen after a short run need not be
   the best one for a long run (``gaps["<variant> lr=<rate>"]``).

Every finished run goes into the results file at once (:class:`refattn.training.runs.CellStore`);
a rerun with the same settings resumes. ``notebooks/14_settling_the_claims.py``
draws the committed file ``derivations/data/19-lm-study.json``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..custom import activation_label, activation_record, is_spec
from ..training.runs import CellStore, session
from . import StudySettings, activation_option, grid, lm, max_memory, option, resolve_activation
from .helpers import DATA_HELP, code_commit, data_digests, number_name, resolve_data_dir
from .lm import DEFAULTS, SPECIAL, VARIANTS, run_lm
from .statistics import mean_std

__all__ = ["FOCUS", "LRS", "PHASES", "Settings", "run_lm_study", "run", "best_lrs", "gap_curve", "report", "plot"]

#: The variants whose verdicts the papers state: TanhMax Table 4, Cog, NeuralAttn Table 1.
FOCUS = ("softmax", "tanhmax", "cog-hybrid", "neural-first")

#: The learning-rate grid (Adam): the default 3e-3 and a factor of about 3 either side.
LRS = (1e-3, 3e-3, 1e-2)

#: The study's phases, in the order they run.
PHASES = ("table", "tune", "long", "control")

#: The figure ``refattn lm-study --out DIR`` writes.
FIGURE = "lm_study.png"


@dataclass
class Settings(StudySettings):
    """The toy LM's verdicts: the table, the learning rate tuned per variant (same budget), long runs with the
    gap to softmax against steps; each finished run saved and resumed."""

    data: str | None = option(None, DATA_HELP + "; or 'toy' for generated sentences")
    activations: tuple[str, ...] = activation_option(FOCUS, "comma-separated focus variants, tuned and run long "
                                                            "(softmax among them)", also=SPECIAL,
                                                     old_names=("--variants",))
    lrs: tuple[float, ...] = option(LRS, "comma-separated learning rates of the tuning grid", positive=True)
    seeds: int = option(DEFAULTS["seeds"], "seeds of every run", low=1)
    steps: int = option(DEFAULTS["steps"], "steps of the table's and the tuning's runs", low=1)
    long_steps: int = option(1200, "length of the long runs", low=1)
    long_evals: int = option(12, "evaluations along a long run", low=1)
    phases: tuple[str, ...] = option(PHASES, "comma-separated phases, run in this order", one_of=PHASES)
    results: str | None = option(None, "JSON file written after every run and resumed if it exists", output="results")
    max_memory: float | None = max_memory()
    workers: int | None = grid.workers_option()
    scheduler: str | None = grid.scheduler_option()
    quiet: bool = grid.quiet_option()
    allow_mixed_versions: bool = grid.mixed_versions_option()

    def check(self):
        """The gaps are measured to softmax: it is one of the variants."""
        if "softmax" not in self.activations:
            raise ValueError(f"activations: expected softmax among them (the gaps are to softmax), got "
                             f"{','.join(self.activations)}")


def _key(phase, variant, lr, steps=None):
    """A cell's name; a long run's names its length, so runs of several lengths can share a file. Two
    distinct rates never share a name (:func:`refattn.studies.helpers.number_name`)."""
    return f"{phase} {variant} lr={number_name(lr)}" + ("" if steps is None else f" steps={steps}")


#: What the study keeps of one variant's run (:func:`_record`), and what a results file is checked for.
RECORD_KEYS = ("n_params", "per_seed", "dev_loss_mean", "dev_loss_std", "dev_perplexity_mean", "dev_perplexity_std",
               "dev_accuracy_mean", "dev_accuracy_std", "finite", "curve", "train_seconds")


def _record(entry):
    """What the study keeps of one variant's run: per-seed finals and the curves (already thin)."""
    return {k: entry[k] for k in RECORD_KEYS}


def best_lrs(cells, activations, lrs):
    """Per variant, the learning rate of the tuning phase with the lowest mean dev loss (finite runs only)."""
    out = {}
    for v in activations:
        scores = {}
        for lr in lrs:
            rec = cells.get(_key("tune", v, lr))
            if rec is not None and rec["finite"]:
                scores[lr] = rec["dev_loss_mean"]
        if scores:
            out[v] = min(scores, key=scores.get)
    return out


def gap_curve(rec, ref, key="dev_loss"):
    """The paired gap ``rec - ref`` of ``key`` (per seed) at every evaluation: mean, standard error, settled.

    Returns
    -------
    dict
        ``step``, ``mean`` and ``se`` (standard error over seeds, ``ddof=1``)
        per evaluation, ``change`` (last minus the evaluation three quarters
        of the way) and ``settled`` (``|change| <= 2 sqrt(se_last^2 + se_then^2)``; ``None`` with one
        seed, where there is no standard error to compare with).
    """
    a, b = np.asarray(rec["curve"][key], dtype=float), np.asarray(ref["curve"][key], dtype=float)
    d = a - b  # (seeds, evals)
    S = d.shape[0]
    mean = d.mean(axis=0)
    se = d.std(axis=0, ddof=1) / np.sqrt(S) if S > 1 else np.full(mean.shape, np.nan)
    k = int(round(0.75 * (mean.size - 1)))
    change = float(mean[-1] - mean[k])
    settled = bool(abs(change) <= 2 * np.hypot(se[-1], se[k])) if S > 1 else None
    return {"step": rec["curve"]["step"], "mean": mean.tolist(), "se": se.tolist(), "change": change,
            "settled": settled}


@session()  # the results file stays locked while the study runs
def run_lm_study(settings, *, command=None, progress=None):
    """Run the study's phases (module docstring; :class:`Settings`), each finished run saved at once in the
    results file (:class:`refattn.training.runs.CellStore`); the runs are the cells of
    :class:`refattn.studies.grid.Runner`, the table's and the tuning's first, then the long runs at the best
    rates. Returns ``settings`` (as the file records them), ``commit``, ``command``, ``cells``, ``ran_on``,
    ``runs``, ``best_lr`` and ``gaps`` (:func:`gap_curve` against softmax, per variant, of the long runs)."""
    given, corpus, recorded = _read_once(settings)
    variants, lrs, long_steps = list(given), [float(v) for v in settings.lrs], settings.long_steps
    per_cell = lm.Settings(seeds=settings.seeds, ngram_orders=None, corpus=corpus).memory_estimate()
    runner = grid.Runner(settings, progress=progress, label="lm-study", memory=per_cell)
    store = CellStore(settings.results, recorded, what="run_lm_study", free=("long_steps", "long_evals"),
                      record_keys=RECORD_KEYS, added=("data_sha256",))
    cells = store.cells
    out = {"command": command, "settings": recorded, "commit": code_commit(), "cells": cells,
           "ran_on": dict(store.previous.get("ran_on", {}))}
    out["runs"] = store.runs(command, out["commit"])  # every command that added cells to the file

    shared = grid.Shared(corpus)  # sent to a cluster once

    def cell(key, variant, lr, n_steps, eval_every):
        return grid.Cell(key, _cell, (lm.Settings(activations=(given.get(variant, variant),), data=settings.data,
                                                  seeds=settings.seeds, steps=n_steps, lr=lr, eval_every=eval_every,
                                                  ngram_orders=None, max_memory=settings.max_memory), variant,
                                      shared))

    def finish():
        out["best_lr"] = best_lrs(cells, variants, lrs)
        out["gaps"] = {}
        ref = cells.get(_key("long", "softmax", out["best_lr"].get("softmax", -1), long_steps))
        for name, v, lr in _long_runs(out["best_lr"]):
            rec = cells.get(_key("long", v, lr, long_steps))
            if v != "softmax" and rec is not None and ref is not None:
                out["gaps"][name] = {"dev_loss": gap_curve(rec, ref, "dev_loss"),
                                     "dev_accuracy": gap_curve(rec, ref, "dev_accuracy")}

    store.read(lambda: (_read_records(cells, recorded, out["ran_on"], "ran_on" in store.previous), finish(),
                        report(out)))  # read and reported before any work
    first, order, aliases = _first_cells(settings, variants, lrs, cells, cell)
    with runner:
        runner.run(first, into=cells, ran_on=out["ran_on"], then=lambda: (finish(), store.save(out)))
        for key, table in aliases:
            cells[key] = cells[table]
            if table in out["ran_on"]:
                out["ran_on"][key] = out["ran_on"][table]
        grid.reorder(cells, order)
        grid.reorder(out["ran_on"], order)
        runner.run([cell(_key("long", v, lr, long_steps), v, lr, long_steps, max(1, long_steps // settings.long_evals))
                    for name, v, lr in _long_runs(best_lrs(cells, variants, lrs))
                    if ("control" if " lr=" in name else "long") in settings.phases],
                   into=cells, ran_on=out["ran_on"], then=lambda: (finish(), store.save(out)))
    finish()
    store.save(out)
    return out


def _read_once(settings):
    """``(given, corpus, recorded)``: what every cell reads, read here once and sent with the cells
    (docs/cluster.md): each variant as :func:`_loaded` makes it (a file's formula recorded with its SHA-256),
    the corpus as :meth:`refattn.studies.lm.Settings.read_corpus` reads it (its files' SHA-256s recorded), and the
    settings the results file records. An edit of either while the grid runs changes no cell, and a worker
    reads no file."""
    given = {activation_label(v): _loaded(v) for v in settings.activations}
    corpus = lm.Settings(data=settings.data, ngram_orders=None).read_corpus()
    recorded = {"variants": list(given), "lrs": [float(v) for v in settings.lrs], "seeds": settings.seeds,
                "steps": settings.steps, "long_steps": settings.long_steps, "long_evals": settings.long_evals,
                "data": None if settings.data is None else str(settings.data),
                "model": {k: DEFAULTS[k] for k in ("layers", "width", "heads", "n_ctx", "batch_size", "dtype")}}
    if settings.data != "toy":
        recorded["data_sha256"] = data_digests(resolve_data_dir(settings.data))
    records = {v: activation_record(x) for v, x in given.items() if v not in SPECIAL}
    if any(isinstance(r, dict) for r in records.values()):  # a changed formula is another study: refused
        recorded["activation_files"] = {v: r for v, r in records.items() if isinstance(r, dict)}
    return given, corpus, recorded


def _first_cells(settings, variants, lrs, cells, cell):
    """The table's and the tuning's cells, the tuning's keys in order, and ``(tune key, table key)`` for a
    tuning run that is the table's own (the default rate): one run, recorded under both names."""
    first, order, aliases = [], [], []
    if "table" in settings.phases:
        first += [cell(_key("table", v, DEFAULTS["lr"]), v, DEFAULTS["lr"], settings.steps, DEFAULTS["eval_every"])
                  for v in VARIANTS]
    if "tune" in settings.phases:
        for v in variants:
            for lr in lrs:
                key, table = _key("tune", v, lr), _key("table", v, lr)
                if lr == DEFAULTS["lr"] and key not in cells and (table in cells or table in {c.key for c in first}):
                    aliases.append((key, table))  # the same run: the table's default rate
                else:
                    first.append(cell(key, v, lr, settings.steps, DEFAULTS["eval_every"]))
                order.append(key)
    return first, order, aliases


def _read_records(cells, settings, ran_on, placed):
    """Every record found in a results file read as the study reads it (its numbers, its curves), so that
    a value of another kind is found before any work, not after the next run: each cell is one of the grid
    of ``settings`` (the results file's), its means, spreads and ``finite`` are those of its seeds' numbers
    (:func:`refattn.studies.lm.run_lm`'s rule; a hand edit is refused, not reported as measured), and it has
    its place (:func:`refattn.studies.grid.check_places`)."""
    allowed = {_key("table", v, DEFAULTS["lr"]) for v in VARIANTS} | {
        _key("tune", v, lr) for v in settings["variants"] for lr in settings["lrs"]}
    runs = {f"{_key('long', v, lr)} steps=" for v in settings["variants"] for lr in settings["lrs"]}
    for key, rec in cells.items():
        head, _, steps = key.rpartition(" steps=")
        if key not in allowed and not (f"{head} steps=" in runs and steps.isdigit()):
            raise ValueError(f"cell {key!r} is not a run of its grid (variants {settings['variants']}, lrs "
                             f"{settings['lrs']})")
        _check_record(key, rec, settings["seeds"])
    grid.check_places(cells, ran_on, placed)


def _check_record(key, rec, seeds):
    """One record's numbers against its seeds' (:func:`_read_records`)."""
    if not (isinstance(rec["per_seed"], list) and len(rec["per_seed"]) == seeds
            and all(isinstance(p, dict) for p in rec["per_seed"])):
        raise ValueError(f"cell {key!r}: its per_seed is not one record for each of its {seeds} seeds")
    values = {}
    for name in ("dev_loss", "dev_perplexity", "dev_accuracy"):
        values[name] = v = np.asarray([p[name] for p in rec["per_seed"]], dtype=float)  # null: not finite
        derived = mean_std(v)
        for stored, ours, what in zip((rec[name + "_mean"], rec[name + "_std"]), derived, ("mean", "std")):
            a, b = (np.nan if x is None else float(x) for x in (stored, ours))
            if not (a == b or np.isnan(a) and np.isnan(b) or np.isclose(a, b, rtol=1e-9, atol=0)):
                raise ValueError(f"cell {key!r}: its {name}_{what} {stored} is not its seeds' ({ours})")
    acc = values["dev_accuracy"]
    if not np.all((acc >= 0) & (acc <= 1) | np.isnan(acc)):
        raise ValueError(f"cell {key!r}: its dev_accuracy {acc.tolist()} is not an accuracy")
    finite = bool(np.all(np.isfinite(values["dev_loss"])) and np.all(np.isfinite(values["dev_perplexity"])))
    if rec["finite"] is not finite:
        raise ValueError(f"cell {key!r}: its finite {rec['finite']!r} contradicts its seeds' numbers")
    for name in ("dev_loss", "dev_accuracy"):
        if np.asarray(rec["curve"][name], dtype=float).ndim != 2:
            raise ValueError(f"cell {key!r}: its curve {name!r} is not seeds x evaluations")


def _loaded(variant):
    """A variant as a cell takes it: ``FILE.py:NAME`` (or an Activation) as the activation it defines, loaded
    now, so that the cell runs the formula recorded (whatever happens to the file later, wherever the cell
    runs); a registered name or a study's own variant as it is."""
    return variant if isinstance(variant, str) and not is_spec(variant) else resolve_activation(variant, "activations")


def _cell(settings, variant, corpus):
    """One run of the study (:class:`refattn.studies.grid.Cell`): :func:`run_lm` of one variant on the corpus
    read by the command, as the results file keeps it; here or on a Dask worker."""
    return _record(run_lm(dataclasses.replace(settings, corpus=corpus), progress=False)["variants"][variant])


#: ``refattn lm-study``: ``command`` (the command line) goes into the results file, so that the file says
#: how to resume it.
run = run_lm_study


def _long_runs(best):
    """``(name, variant, lr)`` of every long run: each variant at its best rate (named by the variant), then
    the control runs at softmax's best rate of those whose best rate differs (named ``"<variant> lr=<rate>"``)."""
    runs = [(v, v, lr) for v, lr in best.items()]
    shared = best.get("softmax")
    if shared is not None:
        runs += [(f"{v} lr={number_name(shared)}", v, shared) for v, lr in best.items()
                 if v != "softmax" and lr != shared]
    return runs


def report(result):
    """The table, the tuning grid and the long runs' gaps, as Markdown."""
    cells, s = result["cells"], result["settings"]
    lines = [f"Table (default settings, {s['steps']} steps): dev accuracy % and dev loss, mean ± std over seeds",
             "| variant | accuracy % | loss |", "|---|---|---|"]
    for v in VARIANTS:
        rec = cells.get(_key("table", v, DEFAULTS["lr"]))
        if rec is not None:
            lines.append(f"| {v} | {_num(rec['dev_accuracy_mean'], '.2f', 100)} ± "
                         f"{_num(rec['dev_accuracy_std'], '.2f', 100)} | {_num(rec['dev_loss_mean'], '.4f')} ± "
                         f"{_num(rec['dev_loss_std'], '.4f')} |")
    lines += ["", "Tuning: dev loss (mean over seeds, all dev windows) per learning rate",
              "| variant | " + " | ".join(f"lr {number_name(lr)}" for lr in s["lrs"]) + " | best |",
              "|---|" + "---|" * (len(s["lrs"]) + 1)]
    for v in s["variants"]:
        row = [_num(cells[_key("tune", v, lr)]["dev_loss_mean"], ".4f") if _key("tune", v, lr) in cells else "-"
               for lr in s["lrs"]]
        best = result.get("best_lr", {}).get(v)
        lines.append(f"| {v} | " + " | ".join(row) + f" | {'-' if best is None else number_name(best)} |")
    lines += ["", f"Long runs ({s['long_steps']} steps at the best rate, then the controls at softmax's): final "
                  f"accuracy and loss; gap to softmax (paired over seeds, ± standard error) and whether it settled",
              "| variant | lr | accuracy % | loss | gap accuracy pp | gap loss | settled |",
              "|---|---|---|---|---|---|---|"]
    for name, v, lr in _long_runs(result.get("best_lr", {})):
        rec = cells.get(_key("long", v, lr, s["long_steps"]))
        if rec is None:
            continue
        g = result.get("gaps", {}).get(name)
        gap = ("-", "-", "-") if g is None else (
            f"{_num(g['dev_accuracy']['mean'][-1], '+.2f', 100)} ± {_num(g['dev_accuracy']['se'][-1], '.2f', 100)}",
            f"{_num(g['dev_loss']['mean'][-1], '+.4f')} ± {_num(g['dev_loss']['se'][-1], '.4f')}",
            _settled(g["dev_loss"]["settled"], g["dev_accuracy"]["settled"]))
        lines.append(f"| {v} | {number_name(lr)} | {_num(rec['dev_accuracy_mean'], '.2f', 100)} | "
                     f"{_num(rec['dev_loss_mean'], '.4f')} | " + " | ".join(gap) + " |")
    if s["seeds"] < 2:
        lines.append("(n/a: a spread, a standard error and whether a gap settled need at least two seeds)")
    return "\n".join(lines)


def _settled(*verdicts):
    """"yes" where every gap settled, "n/a" where one cannot tell (one seed: ``None``), else "still moving"."""
    if any(v is None for v in verdicts):
        return "n/a"
    return "yes" if all(verdicts) else "still moving"


def _num(value, spec, scale=1):
    """``value * scale`` formatted with ``spec``; "n/a" where there is no number (a spread of one seed,
    null in the JSON) or it is not finite: the report is total, so it never fails after the work."""
    if value is None or not np.isfinite(value):
        return "n/a"
    return format(scale * value, spec)


def plot(result):
    """Left: dev loss against the learning rate for the focus variants (the same budget for all). Right: the
    long runs' gap to softmax in dev accuracy (percentage points, paired over seeds, +- one standard error)
    against steps: a gap that still moves at the end is not a verdict."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(11, 3.6))
    ax, bx = fig.subplots(1, 2)
    s = result["settings"]
    for v in s["variants"]:
        xs, ys = [], []
        for lr in s["lrs"]:
            rec = result["cells"].get(_key("tune", v, lr))
            if rec is not None and rec["finite"]:
                xs.append(lr)
                ys.append(rec["dev_loss_mean"])
        ax.plot(xs, ys, "o-", label=v)
    ax.set_xscale("log")
    ax.set_xlabel("Adam learning rate")
    ax.set_ylabel(f"dev loss after {s['steps']} steps")
    ax.legend(fontsize=8)
    for v, g in result.get("gaps", {}).items():
        acc = g["dev_accuracy"]
        m, se = 100 * np.asarray(acc["mean"]), 100 * np.asarray(acc["se"])
        bx.plot(acc["step"], m, "o-", label=v)
        bx.fill_between(acc["step"], m - se, m + se, alpha=0.2)
    bx.axhline(0, color="k", lw=0.8)
    bx.set_xlabel("step")
    bx.set_ylabel("dev accuracy minus softmax's (pp)")
    if result.get("gaps"):
        bx.legend(fontsize=8)
    fig.tight_layout()
    return fig
