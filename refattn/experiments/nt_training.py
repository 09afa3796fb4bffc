r"""Training seed 004's NT transformer as in its section 4, all seeds in one batched program.

Protocol (seed 004, section 4, "Training" and "Readout & Testing"):

* every epoch draws a fresh random series of the task (seed ``k`` draws from
  ``np.random.default_rng([k, epoch])``, so a seed's data do not depend on
  which other seeds run beside it), loads ``N_con`` symbols as context and
  predicts the next ``N_batch = 40`` symbols one by one: 40 windows sliding by
  one symbol (:func:`refattn.tasks.nt.windows`), one gradient step on their
  mean squared error (our reading of "an epoch consisting of N_batch
  predictions");
* SGD with momentum 0.8 and learning rate 0.02;
* evaluation: for ``N_test`` fresh random series, the model continues the
  first ``N_con`` true symbols greedily for ``N_g = 50`` symbols, feeding its
  own predictions back (:meth:`refattn.models.nt.NTModel.generate`); the
  accuracy is the fraction of the 50 symbols that match the true series;
* "epochs to 100 %": the first evaluation epoch at which a seed's accuracy is
  exactly 1.

The runner is :func:`run_nt`; the command is ``refattn nt``. :func:`compare_layouts`
trains EA and DPA under several placements of the model's two bias vectors
and :func:`format_layout_table` tabulates them (derivation 11, section 7).
The derivation is ``derivations/11-nt-model.md`` (model) and
``derivations/10-nt-tasks.md`` (tasks).
"""

from __future__ import annotations

import time

import numpy as np

from ..models.nt import CANDIDATE_LAYOUTS, DEFAULT_LAYOUT, NTModel, ea_symbol_dependence
from ..optim import SGD
from ..tasks.nt import generate, parse_task, windows
from ..train import Progress, train

__all__ = ["PAPER", "make_batches", "evaluate", "run_nt", "batched_speedup", "format_nt", "compare_layouts",
           "format_layout_table"]

#: Seed 004's training and testing constants (section 4).
PAPER = {"n_batch": 40, "lr": 0.02, "momentum": 0.8, "n_g": 50, "n_test": 100, "runs": 16}


def _series(task, n_seeds_rows, length, seeds, epoch, salt):
    variant, N, tau = parse_task(task)
    rows = []
    for s in seeds:
        rng = np.random.default_rng([int(s), int(epoch), salt])
        rows.append(generate(variant, N, tau, length=length, batch=n_seeds_rows, rng=rng))
    return np.stack(rows)  # (S, rows, length)


def make_batches(task, n_con, seeds, n_predict=PAPER["n_batch"]):
    """``epoch -> [batch]``: one fresh series per seed, its ``n_predict`` windows."""
    def batches(epoch):
        series = _series(task, 1, n_con + n_predict, seeds, epoch, salt=0)[:, 0]  # (S, length)
        context, target = windows(series, n_con, n_predict)  # (S, n_predict, n_con), (S, n_predict)
        return [{"context": context, "target": target}]
    return batches


def evaluate(model, params, task, seeds, *, epoch, n_test=PAPER["n_test"], n_g=PAPER["n_g"]):
    """Greedy continuation accuracy per seed, ``(S,)``, on fresh test series.

    Test series are drawn with a different stream (salt 1) from the training
    series, from ``(seed, epoch)``.
    """
    series = _series(task, n_test, model.n_con + n_g, seeds, epoch, salt=1)  # (S, n_test, n_con + n_g)
    pred = model.generate(params, series[..., :model.n_con], n_g)  # (S, n_test, n_g)
    return np.mean(pred == series[..., model.n_con:], axis=(1, 2))


def run_nt(task="N2T5", n_con=16, attention="expressive", *, seeds=16, epochs=200, eval_every=10,
           n_test=PAPER["n_test"], n_g=PAPER["n_g"], lr=PAPER["lr"], momentum=PAPER["momentum"],
           checkpoint=None, progress=None, grad="analytic", stop_after=None, layout=DEFAULT_LAYOUT,
           init_scale=1.0, bias_init="zeros"):
    """Train ``seeds`` runs of the NT model together and evaluate them.

    Parameters
    ----------
    task : str
        E.g. ``"N2T5"``, ``"N16T2"``, ``"N16T2-S"`` (:func:`refattn.tasks.nt.parse_task`).
    n_con : int
        Context length N_con.
    attention : str
        A registered activation: ``"softmax"`` is seed 004's DPA (Eq. 1, beta = 1),
        ``"expressive"`` its EA (Eq. 2).
    seeds : int or sequence of int
        ``16`` means seeds ``0..15``.
    layout : str
        Where the model's two bias vectors sit (:data:`refattn.models.nt.LAYOUTS`).
        The default ``"b_Q+b_r"`` (query bias per position, readout bias) is
        the candidate under which EA learns N2T5 faster than DPA;
        ``"b_2+b_r"`` is the first inferred layout, under which expressive
        attention is content-blind at N = 2 (``derivations/11-nt-model.md``,
        sections 6-7).
    init_scale, bias_init :
        The initialisation (:class:`refattn.models.nt.NTModel`); seed 004
        gives none. EA's lead over DPA on N2T5 grows as ``init_scale``
        shrinks (derivation 11, section 7).
    checkpoint : path, optional
        Resume from / save to this ``.npz`` (:func:`refattn.train.train`).
    stop_after : int, optional
        Stop after this epoch index, as an interruption would (resume later
        with the same arguments and ``checkpoint``).

    Returns
    -------
    dict (JSON-able)
        ``n_params``, per-seed ``epochs_to_100`` (``None`` if never reached),
        ``final_accuracy``, the evaluation curve ``eval_epochs`` /
        ``accuracy`` (seeds x evaluations), ``loss`` per epoch (mean over seeds),
        ``seconds`` and ``seconds_per_epoch``.
    """
    seeds = tuple(range(seeds)) if isinstance(seeds, (int, np.integer)) else tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds: expected at least one seed")
    if not (isinstance(eval_every, (int, np.integer)) and eval_every >= 1):
        raise ValueError(f"eval_every: expected a positive integer, got {eval_every!r}")
    variant, N, tau = parse_task(task)
    model = NTModel(N, n_con, activation=attention, layout=layout, init_scale=init_scale, bias_init=bias_init)
    params = model.init_params(seeds)
    optimizer = SGD(params, lr=lr, momentum=momentum)

    def on_epoch(epoch, p):
        if (epoch + 1) % eval_every == 0 or epoch == epochs - 1:
            return {"accuracy": evaluate(model, p, task, seeds, epoch=epoch, n_test=n_test, n_g=n_g)}
        return {}

    fingerprint = {"task": task, "n_con": n_con, "attention": attention, "seeds": list(seeds), "lr": lr,
                   "momentum": momentum, "eval_every": eval_every, "n_test": n_test, "n_g": n_g, "grad": grad,
                   "layout": layout, "init_scale": model.init_scale, "bias_init": bias_init}
    bar = Progress(epochs, enabled=progress, label=f"{task} {attention} {layout}")
    out = train(model, params, optimizer, make_batches(task, n_con, seeds), epochs=epochs, grad=grad,
                callbacks=[on_epoch], checkpoint=checkpoint, fingerprint=fingerprint, progress=bar,
                stop_after=stop_after)
    hist = out["history"]
    evals = [h for h in hist if "accuracy" in h]
    acc = np.array([h["accuracy"] for h in evals]).T if evals else np.zeros((len(seeds), 0))  # (S, n_eval)
    eval_epochs = [h["epoch"] + 1 for h in evals]  # epochs completed at each evaluation
    to100 = []
    for row in acc:
        hit = np.flatnonzero(row >= 1.0)
        to100.append(int(eval_epochs[hit[0]]) if hit.size else None)
    done = len(hist) - (0 if out["resumed_from"] is None else out["resumed_from"] + 1)
    return {
        "task": task, "N": N, "tau": tau, "variant": variant, "n_con": n_con, "attention": attention,
        "seeds": list(seeds), "epochs": epochs, "eval_every": eval_every, "n_test": n_test, "n_g": n_g,
        "lr": lr, "momentum": momentum, "layout": layout, "init_scale": model.init_scale, "bias_init": bias_init,
        "n_params": model.n_params,
        "epochs_to_100": to100,
        "reached_100": int(sum(e is not None for e in to100)),
        "median_epochs_to_100": (float(np.median([e for e in to100 if e is not None]))
                                 if any(e is not None for e in to100) else None),
        "final_accuracy": acc[:, -1].tolist() if acc.size else [],
        "mean_final_accuracy": float(acc[:, -1].mean()) if acc.size else None,
        "eval_epochs": eval_epochs,
        "accuracy": acc.tolist(),
        "loss": [float(np.mean(h["loss"])) for h in hist],
        "resumed_from": out["resumed_from"],
        "seconds": out["seconds"],
        "seconds_per_epoch": out["seconds"] / max(done, 1),
    }


def batched_speedup(task="N2T5", n_con=16, attention="softmax", *, seeds=16, epochs=20):
    """Wall time of ``seeds`` runs trained as one batched program vs one after another
    (no evaluation, same epochs). Returns seconds for both and their ratio."""
    seeds = tuple(range(seeds)) if isinstance(seeds, (int, np.integer)) else tuple(seeds)
    t0 = time.perf_counter()
    run_nt(task, n_con, attention, seeds=seeds, epochs=epochs, eval_every=10 ** 9, n_test=1, n_g=1)
    batched = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in seeds:
        run_nt(task, n_con, attention, seeds=(s,), epochs=epochs, eval_every=10 ** 9, n_test=1, n_g=1)
    serial = time.perf_counter() - t0
    return {"seeds": len(seeds), "epochs": epochs, "batched_s": batched, "one_after_another_s": serial,
            "speedup": serial / batched}


def format_nt(result):
    """``run_nt``'s result in a few lines."""
    r = result
    hit = [e for e in r["epochs_to_100"] if e is not None]
    return "\n".join([
        f"{r['task']} N_con={r['n_con']} attention={r['attention']} layout={r['layout']}: "
        f"{r['n_params']} parameters, "
        f"{len(r['seeds'])} seeds, {r['epochs']} epochs ({r['seconds']:.1f} s, "
        f"{1000 * r['seconds_per_epoch']:.1f} ms per epoch for all seeds)",
        f"  reached 100%: {r['reached_100']}/{len(r['seeds'])} seeds; epochs to 100%: {r['epochs_to_100']}",
        f"  median epochs to 100% (of those that reached it): {np.median(hit) if hit else 'n/a'}",
        f"  final accuracy: mean {r['mean_final_accuracy']:.4f}, per seed "
        f"{[round(a, 3) for a in r['final_accuracy']]}",
    ])


def compare_layouts(task="N2T5", n_con=16, layouts=CANDIDATE_LAYOUTS, attentions=("expressive", "softmax"),
                    **run_options):
    """:func:`run_nt` for every layout and attention, in that order (layouts outer).

    Seed 004's Fig. 4 claim (N2T5, N_con = 16, 802 parameters: EA converges
    markedly faster than DPA) is tested under each placement of the two
    bias vectors (``derivations/11-nt-model.md``, sections 6-7). The same
    seeds, and so the same initial matrices, are used for every layout and
    attention.

    Parameters
    ----------
    task, n_con :
        As :func:`run_nt`.
    layouts : sequence of str
        Names of :data:`refattn.models.nt.LAYOUTS`.
    attentions : sequence of str
        Activations; ``"expressive"`` (EA) and ``"softmax"`` (DPA) by default.
    **run_options
        Passed to :func:`run_nt` (``seeds``, ``epochs``, ``eval_every``, ``init_scale``, ...).

    Returns
    -------
    list of dict
        :func:`run_nt`'s results.
    """
    if isinstance(layouts, str) or isinstance(attentions, str):
        raise TypeError("layouts, attentions: expected sequences of names, e.g. ('b_Q+b_r',), not a str")
    return [run_nt(task, n_con, att, layout=layout, **run_options) for layout in layouts for att in attentions]


def _label(attention):
    return {"expressive": "EA", "softmax": "DPA"}.get(attention, attention)


def format_layout_table(results):
    """:func:`compare_layouts`'s results as a Markdown table, one row per run.

    Columns: layout; attention; on an EA row at N = 2, which symbols its
    weights can see (:func:`refattn.models.nt.ea_symbol_dependence`: "blind",
    "key", "query" or "both"; DPA's always see them); seeds that reached 100 %; median epochs to 100 %
    over those; mean final accuracy; epochs to 100 % per seed ("-": never);
    and, on the DPA row of a layout run with both, on how many seeds EA
    reached 100 % strictly earlier than DPA (a seed that never does counts as
    later), with the number of ties.
    """
    lines = ["| layout | attention | EA weights see (N = 2) | reached 100 % | median epochs | "
             "mean final accuracy | epochs to 100 % per seed | EA earlier than DPA |",
             "|---|---|---|---|---|---|---|---|"]
    by = {(r["layout"], r["attention"]): r for r in results}
    for r in results:
        sees = ""
        if r["attention"] == "expressive" and r["N"] == 2:
            dep = ea_symbol_dependence(r["layout"])
            sees = {(False, False): "blind", (False, True): "key", (True, False): "query",
                    (True, True): "both"}[(dep["query"], dep["key"])]
        med = r["median_epochs_to_100"]
        per_seed = " ".join("-" if e is None else str(e) for e in r["epochs_to_100"])
        versus = ""
        ea = by.get((r["layout"], "expressive"))
        if r["attention"] == "softmax" and ea is not None and ea["seeds"] == r["seeds"]:
            inf = float("inf")
            pairs = [(inf if a is None else a, inf if b is None else b)
                     for a, b in zip(ea["epochs_to_100"], r["epochs_to_100"])]
            versus = (f"{sum(a < b for a, b in pairs)}/{len(pairs)} "
                      f"(ties {sum(a == b for a, b in pairs)})")
        lines.append(f"| {r['layout']} | {_label(r['attention'])} | {sees} | {r['reached_100']}/{len(r['seeds'])} | "
                     f"{'-' if med is None else f'{med:g}'} | {r['mean_final_accuracy']:.3f} | {per_seed} | {versus} |")
    return "\n".join(lines)
