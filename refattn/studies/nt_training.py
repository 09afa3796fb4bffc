r"""Training Expressive's NT transformer as in its section 4, all seeds in one batched program.

Protocol (Expressive, section 4, "Training" and "Readout & Testing"):

* every epoch draws a fresh random series of the task (seed ``k`` draws from
  ``np.random.default_rng([k, epoch])``, so a seed's data do not depend on
  which other seeds run beside it), loads ``N_con`` symbols as context and
  predicts the next ``N_batch = 40`` symbols one by one: 40 windows sliding by
  one symbol (:func:`refattn.training.tasks.nt.windows`), one gradient step on their
  mean squared error (our reading of "an epoch consisting of N_batch
  predictions");
* SGD with momentum 0.8 and learning rate 0.02;
* evaluation: for ``N_test`` fresh random series, the model continues the
  first ``N_con`` true symbols greedily for ``N_g = 50`` symbols, feeding its
  own predictions back (:meth:`refattn.training.models.nt.NTModel.generate`); the
  accuracy is the fraction of the 50 symbols that match the true series;
* "epochs to 100 %": the first evaluation epoch at which a seed's accuracy is
  exactly 1.

Beyond one task (``derivations/15-nt-experiments.md``):

* a *mixture* of tasks (Expressive, Fig. 6: N16T2 and N16T2-S, 50/50): each
  epoch's series comes from task ``k`` with probability ``w_k``
  (:func:`refattn.training.tasks.nt.generate_mixture`), unlabelled; each task is
  evaluated on its own test series (:func:`parse_mixture`, :func:`evaluate_tasks`);
* NT-R (Eq. 9, Fig. 7) by name, e.g. ``"N16T2-R"``;
* a learning-rate drop (Fig. 6: "after 2500 epochs ... learning speed is
  reduced by a factor four"): ``lr_drop=(2500, 4)``;
* attention snapshots for one fixed test context at chosen epochs (Fig. 4,
  bottom): ``snapshot_epochs=(0, 100, ...)``;
* ``device="gpu"``: the same program on CuPy (the parameters live on the GPU;
  the data are made on the host and copied explicitly).

The runner is :func:`run_nt`; the command is ``refattn nt`` (:class:`Settings`, :func:`run`). :func:`compare_layouts`
trains EA and DPA under several placements of the model's two bias vectors
and :func:`format_layout_table` tabulates them (derivation 11, section 7).
The derivation is ``derivations/11-nt-model.md`` (model) and
``derivations/10-nt-tasks.md`` (tasks).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from ..core import backend as _backend
from ..core.backend import to_numpy
from ..training.models.nt import CANDIDATE_LAYOUTS, DEFAULT_LAYOUT, LAYOUTS, NTModel, count_params, ea_symbol_dependence
from ..training.optim import SGD
from ..training.runs import check_memory
from ..training.tasks.nt import generate, generate_mixture, parse_mixture, parse_task, windows
from ..training.train import train
from ..custom import activation_label, activation_record
from . import StudySettings, activation_option, max_memory, option, resolve_activation

__all__ = ["PAPER", "DEVICES", "Settings", "parse_mixture", "array_module_for", "make_batches", "evaluate",
           "evaluate_tasks", "snapshot_context", "memory_estimate", "run_nt", "run", "batched_speedup",
           "seed_scaling", "format_seed_scaling", "profile_loss_and_grad", "report", "plot", "compare_layouts",
           "format_layout_table"]

#: Expressive's training and testing constants (section 4).
PAPER = {"n_batch": 40, "lr": 0.02, "momentum": 0.8, "n_g": 50, "n_test": 100, "runs": 16}

#: Where :func:`run_nt` can run: NumPy on the host, or CuPy on a GPU.
DEVICES = ("cpu", "gpu")

#: The figure ``refattn nt --out DIR`` writes.
FIGURE = "nt_{task}_{context}_{activation}_{layout}.png"


@dataclass
class Settings(StudySettings):
    """Train Expressive's one-bilayer transformer on an NT task, all seeds batched.

    Every setting of :func:`run_nt`, each written once. Beyond the help of each
    field: ``task`` is one task (:func:`refattn.training.tasks.nt.parse_task`;
    NT-R is Expressive's Eq. 9) or a mixture (:func:`parse_mixture`:
    ``"N16T2+N16T2-S"`` is Fig. 6's 50/50 mixture, evaluated task by task);
    ``activation`` ``"softmax"`` is Expressive's DPA (Eq. 1) and
    ``"expressive"`` its EA (Eq. 2). ``layout`` places the model's two bias
    vectors (:data:`refattn.training.models.nt.LAYOUTS`): the default
    ``"b_Q+b_r"`` is the candidate under which EA learns N2T5 faster than DPA,
    ``"b_2+b_r"`` the first inferred one, under which EA is content-blind at
    N = 2 (``derivations/11-nt-model.md``, sections 6-7); EA's lead grows as
    ``init_scale`` shrinks. ``beta`` scales the scores, ``s = beta Q . K``
    (Expressive's Eq. 1; the paper's 1, derivation 15, section 11.6 checks
    ``1/sqrt(N_con)``). ``lr_drop = (E, f)`` divides the learning rate by ``f``
    after ``E`` epochs (Fig. 6: ``(2500, 4)``). ``snapshot_epochs`` records the
    attention weights of every seed for one fixed test context
    (:func:`snapshot_context`, Fig. 4 bottom) after those epochs (0: the
    initial model). ``dtype="float32"`` halves a CPU step's time
    (``benchmarks/bench_nt.py``; the initial values are float64's, rounded);
    ``device="gpu"`` runs the same program on CuPy (:func:`array_module_for`):
    the parameters are copied to the GPU once after initialisation, the data
    made on the host and copied explicitly, and everything returned is on the
    host; a checkpoint is resumed on the CPU only.
    """

    task: str = option("N2T5", "task name, e.g. N2T5, N16T2, N16T2-S, or a mixture such as N16T2+N16T2-S",
                       check=lambda task: parse_mixture(task))
    context: int = option(16, "context length N_con", low=1)
    activation: str = activation_option("expressive", "the activation: softmax (DPA, Eq. 1), expressive (EA, Eq. 2), "
                                                      "...", old_names=("--attention",))
    seeds: int = option(16, "number of independent runs", low=1)
    first_seed: int = option(0, "the first seed: the runs use seeds FIRST_SEED, FIRST_SEED + 1, ...", low=0)
    epochs: int = option(200, "epochs", low=1)
    eval_every: int = option(10, "evaluate every this many epochs", low=1)
    n_test: int = option(PAPER["n_test"], "test series per evaluation", low=1)
    n_g: int = option(PAPER["n_g"], "symbols each test series is continued greedily", low=1)
    lr: float = option(PAPER["lr"], "SGD's learning rate", positive=True)
    momentum: float = option(PAPER["momentum"], "SGD's momentum", low=0)
    checkpoint: str | None = option(None, "a .npz file to resume from and save to", output="checkpoint")
    layout: str = option(DEFAULT_LAYOUT, "where the two bias vectors sit; derivation 11, section 7",
                         choices=tuple(LAYOUTS))
    init_scale: float = option(1.0, "multiplies 1/sqrt(fan_in), the half-width of the uniform initialisation",
                               positive=True)
    bias_init: str = option("zeros", "bias initialisation", choices=("zeros", "uniform"))
    beta: float = option(1.0, "the score scale beta of Expressive's Eq. 1", positive=True)
    lr_drop: tuple[int, float] | None = option(None, "divide the learning rate by FACTOR from EPOCH on "
                                                     "(Expressive's mixture run)", metavar=("EPOCH", "FACTOR"),
                                                     items=({"low": 1}, {"positive": True}))
    snapshot_epochs: tuple[int, ...] | None = option(None, "comma-separated epochs after which the attention "
                                                           "weights of one fixed test context are recorded "
                                                           "(0: the initial model)", low=0)
    snapshot_index: int = option(0, "which fixed test context the snapshots use", low=0)
    grad: str = option("analytic", "the gradient: the hand-derived backward pass or autograd's",
                       choices=("analytic", "autograd"))
    stop_after: int | None = option(None, "stop after this epoch index, as an interruption would (resume with "
                                          "the same settings and --checkpoint)", low=0)
    device: str = option("cpu", "NumPy on the CPU or CuPy on the GPU", choices=DEVICES, device=True)
    dtype: str = option("float64", "precision of the parameters and activations; float32 is about 2x faster",
                        choices=("float64", "float32"))
    count_params: bool = option(False, "print only the parameter count")
    max_memory: float | None = max_memory()

    def check(self):
        """Snapshots within the run; a checkpoint resumed on the CPU only (the optimiser's buffers are host arrays)."""
        if self.snapshot_epochs is not None and max(self.snapshot_epochs) > self.epochs:
            raise ValueError(f"snapshot_epochs: expected epochs in 0..epochs = 0..{self.epochs}, "
                             f"got {max(self.snapshot_epochs)}")
        if self.device == "gpu" and self.checkpoint is not None:
            raise ValueError("checkpoint: resuming is supported on device='cpu' only (the optimiser's saved "
                             "buffers are host arrays); drop checkpoint or use device='cpu'")

    def memory_estimate(self):
        """Bytes :func:`run_nt` needs at its peak with these settings (:func:`memory_estimate`)."""
        return memory_estimate(self.context, self.seeds, n_test=self.n_test, itemsize=np.dtype(self.dtype).itemsize)


def array_module_for(device):
    """The array module of a device: ``numpy`` for ``"cpu"``, CuPy for ``"gpu"`` (the one
    :func:`refattn.core.backend.array_module` hands out for device arrays)."""
    return np if device == "cpu" else _backend.cupy_module()


def _series(task, n_seeds_rows, length, seeds, epoch, salt):
    """``(S, rows, length)`` series of one task; seed ``s`` draws from ``default_rng([s, epoch, *salt])``.

    Each seed draws its ``rows`` initial conditions from its own stream, exactly
    as ``generate(task, length=length, batch=rows, rng=stream)`` would; the
    series of all seeds are then run forward in one call (one loop over time,
    not one per seed): the same arrays, bit for bit, as a call per seed.
    """
    variant, N, tau = parse_task(task)
    salt = (salt,) if isinstance(salt, (int, np.integer)) else tuple(salt)
    init = np.concatenate([np.random.default_rng([int(s), int(epoch), *salt])
                           .integers(0, N, size=(n_seeds_rows, tau + 1)) for s in seeds])  # (S rows, tau + 1)
    x = generate(variant, N, tau, length=length, init=init)  # (S * rows, length)
    return x.reshape(len(seeds), n_seeds_rows, length)  # (S, rows, length)


def make_batches(task, n_con, seeds, n_predict=PAPER["n_batch"]):
    """``epoch -> [batch]``: one fresh series per seed, its ``n_predict`` windows.

    For a mixture (:func:`parse_mixture`) each seed's series of the epoch comes
    from task ``k`` with probability ``w_k`` (:func:`refattn.training.tasks.nt.generate_mixture`,
    drawn from ``default_rng([seed, epoch, 0])``), and the batch also holds
    ``task_index`` (S,), which the model never reads (Fig. 6: the tasks are
    "presented as such, viz without further information").
    """
    _, tasks, weights = parse_mixture(task)

    def batches(epoch):
        if len(tasks) == 1:
            series = _series(tasks[0], 1, n_con + n_predict, seeds, epoch, salt=0)[:, 0]  # (S, length)
            which = None
        else:
            rows = [generate_mixture(tasks, weights, length=n_con + n_predict, batch=1,
                                     rng=np.random.default_rng([int(s), int(epoch), 0])) for s in seeds]
            series = np.stack([r[0][0] for r in rows])  # (S, length)
            which = np.array([int(r[1][0]) for r in rows])  # (S,)
        context, target = windows(series, n_con, n_predict)  # (S, n_predict, n_con), (S, n_predict)
        batch = {"context": context, "target": target}
        if which is not None:
            batch["task_index"] = which
        return [batch]
    return batches


def evaluate_tasks(model, params, task, seeds, *, epoch, n_test=PAPER["n_test"], n_g=PAPER["n_g"]):
    """Greedy continuation accuracy per seed for each task of a mixture: ``{task: (S,)}``.

    For each task, ``n_test`` fresh series per seed; the model continues the
    first ``N_con`` true symbols greedily for ``n_g`` symbols, feeding its own
    predictions back, and the accuracy is the fraction of matching symbols
    (Expressive, "Readout & Testing"). Test series come from another stream than
    the training series: ``default_rng([seed, epoch, 1])`` for a single task
    (as :func:`evaluate` always did), ``default_rng([seed, epoch, 1, k])`` for
    task ``k`` of a mixture.
    """
    _, tasks, _ = parse_mixture(task)
    out = {}
    for k, name in enumerate(tasks):
        salt = 1 if len(tasks) == 1 else (1, k)
        series = _series(name, n_test, model.n_con + n_g, seeds, epoch, salt=salt)  # (S, n_test, n_con + n_g)
        pred = model.generate(params, series[..., :model.n_con], n_g)  # (S, n_test, n_g), on the host
        out[name] = np.mean(pred == series[..., model.n_con:], axis=(1, 2))  # (S,)
    return out


def evaluate(model, params, task, seeds, *, epoch, n_test=PAPER["n_test"], n_g=PAPER["n_g"]):
    """Greedy continuation accuracy per seed, ``(S,)``, on fresh test series.

    For a mixture, the mean of :func:`evaluate_tasks` weighted by the mixture's
    weights (the accuracy on the training distribution).
    """
    _, tasks, weights = parse_mixture(task)
    per_task = evaluate_tasks(model, params, task, seeds, epoch=epoch, n_test=n_test, n_g=n_g)
    return sum(w * per_task[t] for t, w in zip(tasks, weights))


def snapshot_context(task, n_con, index=0):
    """One fixed test context for attention snapshots (Expressive, Fig. 4, bottom): ``(n_con,)`` int.

    The first ``n_con`` symbols of a series of ``task`` (the first task of a
    mixture) drawn from ``default_rng([index, 3])``: a stream of its own, so
    the same context for every seed, attention and layout.
    """
    _, tasks, _ = parse_mixture(task)
    variant, N, tau = parse_task(tasks[0])
    return generate(variant, N, tau, length=n_con, batch=1, rng=np.random.default_rng([int(index), 3]))[0]


def memory_estimate(n_con, seeds, *, n_test=PAPER["n_test"], n_predict=PAPER["n_batch"], itemsize=8):
    """Bytes :func:`run_nt` needs at its peak (on the CPU; ``itemsize`` 8 for float64), estimated before any work.

    The largest arrays are the attention arrays of one step, ``(S, B, N_con,
    N_con)`` for ``B = max(n_test, n_predict)`` rows per seed (a training batch
    or an evaluation), a few of them alive at once, and the ``(S, B, N_con, d)``
    activations. The constants bound the peaks tracemalloc measures
    (``tests/training/test_runs.py::test_memory_estimates_bound_the_measured_peaks``):
    4.2 to 4.6 attention arrays' worth at N_con >= 128, more at small N_con,
    where the ``N_con * d`` terms and a fixed part dominate.
    """
    seeds = seeds if isinstance(seeds, (int, np.integer)) else len(tuple(seeds))
    rows = int(seeds) * max(int(n_test), int(n_predict))
    return 5 * rows * n_con**2 * itemsize + 100 * rows * n_con * itemsize + 2 * 2**20


def run_nt(settings, *, progress=None):
    """Train ``settings.seeds`` runs of the NT model together and evaluate them (:class:`Settings`;
    ``derivations/15-nt-experiments.md``): the result is :func:`_result`'s, with ``snapshots``
    (``epochs``, ``context``, ``attention`` snapshots x seeds x n_con x n_con) where asked."""
    s = settings
    check_memory(s.memory_estimate(), f"{s.seeds} seeds at context {s.context}", s.max_memory)
    seeds = tuple(range(s.first_seed, s.first_seed + s.seeds))
    lr_drop = None if s.lr_drop is None else (int(s.lr_drop[0]), float(s.lr_drop[1]))
    snaps = tuple(sorted(set(s.snapshot_epochs or ())))
    name, tasks, weights = parse_mixture(s.task)
    xp = array_module_for(s.device)  # chosen once; every array of the run follows it
    model = NTModel(parse_task(tasks[0])[1], s.context, activation=resolve_activation(s.activation, training=True),
                    beta=s.beta, layout=s.layout, init_scale=s.init_scale, bias_init=s.bias_init)
    params = {k: xp.asarray(v) for k, v in model.init_params(seeds, dtype=np.dtype(s.dtype)).items()}  # a copy
    ctx = None if not snaps else np.broadcast_to(snapshot_context(name, s.context, s.snapshot_index),
                                                 (len(seeds), 1, s.context))

    def snapshot(p):
        return to_numpy(model.outputs(p, ctx)["attention"][:, 0])  # (S, n, n), copied to the host

    first_snapshot = snapshot(params) if 0 in snaps else None
    eval_seconds = [0.0]  # wall time spent evaluating in this call

    def on_epoch(epoch, p):
        rec = {}
        if (epoch + 1) % s.eval_every == 0 or epoch == s.epochs - 1:
            t0 = time.perf_counter()
            per_task = evaluate_tasks(model, p, name, seeds, epoch=epoch, n_test=s.n_test, n_g=s.n_g)
            eval_seconds[0] += time.perf_counter() - t0
            rec["accuracy"] = sum(w * per_task[t] for t, w in zip(tasks, weights))
            if len(tasks) > 1:
                rec["accuracy_by_task"] = per_task
        if epoch + 1 in snaps:
            rec["attention_snapshot"] = snapshot(p)
        return rec

    def schedule(epoch):  # the learning rate after ``epoch``: divided by the factor from the drop's epoch on
        return {"lr": s.lr / lr_drop[1] if epoch + 1 >= lr_drop[0] else s.lr}

    out = train(model, params, SGD(params, lr=s.lr, momentum=s.momentum), make_batches(name, s.context, seeds),
                epochs=s.epochs, grad=s.grad, callbacks=[on_epoch], checkpoint=s.checkpoint, progress=progress,
                label=f"{name} {activation_label(s.activation)} {s.layout}", stop_after=s.stop_after,
                fingerprint=_fingerprint(s, model, name, seeds, weights, lr_drop, snaps),
                schedule=None if lr_drop is None else schedule)
    result = _result(s, model, out, (name, tasks, weights), seeds, lr_drop, eval_seconds[0])
    if snaps:
        got = {h["epoch"] + 1: h["attention_snapshot"] for h in out["history"] if "attention_snapshot" in h}
        if first_snapshot is not None:
            got[0] = first_snapshot.tolist()
        have = [e for e in snaps if e in got]
        result["snapshots"] = {"epochs": have, "context": ctx[0, 0].tolist(), "attention": [got[e] for e in have]}
    return result


def _fingerprint(settings, model, name, seeds, weights, lr_drop, snaps):
    """What a checkpoint records of the run, and a resumed run must match."""
    s = settings
    fingerprint = {"task": name, "n_con": s.context, "attention": activation_record(s.activation),
                   "seeds": list(seeds), "lr": s.lr,
                   "momentum": s.momentum, "eval_every": s.eval_every, "n_test": s.n_test, "n_g": s.n_g,
                   "grad": s.grad, "layout": s.layout, "init_scale": model.init_scale, "bias_init": s.bias_init}
    if s.dtype != "float64":  # float64 runs keep the fingerprint they always had: their checkpoints resume
        fingerprint["dtype"] = s.dtype
    if len(weights) > 1:
        fingerprint["weights"] = list(weights)
    if lr_drop is not None:
        fingerprint["lr_drop"] = list(lr_drop)
    if snaps:
        fingerprint["snapshot"] = {"epochs": list(snaps), "index": int(s.snapshot_index)}
    return fingerprint


def _result(settings, model, out, mixture, seeds, lr_drop, eval_seconds):
    """:func:`run_nt`'s result from the trainer's output ``out``; ``mixture`` is :func:`parse_mixture`'s."""
    s = settings
    name, tasks, weights = mixture
    variant, N, tau = parse_task(tasks[0])
    hist = out["history"]
    evals = [h for h in hist if "accuracy" in h]
    acc = np.array([h["accuracy"] for h in evals]).T if evals else np.zeros((len(seeds), 0))  # (S, n_eval)
    eval_epochs = [h["epoch"] + 1 for h in evals]  # epochs completed at each evaluation
    to100 = []
    for row in acc:
        hit = np.flatnonzero(row >= 1.0)
        to100.append(int(eval_epochs[hit[0]]) if hit.size else None)
    done = len(hist) - (0 if out["resumed_from"] is None else out["resumed_from"] + 1)
    result = {
        "task": name, "N": N, "tau": tau, "variant": variant, "n_con": s.context,
        "attention": activation_label(s.activation),
        "tasks": list(tasks), "weights": list(weights),
        "seeds": list(seeds), "epochs": s.epochs, "eval_every": s.eval_every, "n_test": s.n_test, "n_g": s.n_g,
        "lr": s.lr, "momentum": s.momentum, "lr_drop": None if lr_drop is None else list(lr_drop),
        "layout": s.layout, "init_scale": model.init_scale, "bias_init": s.bias_init, "device": s.device,
        "dtype": s.dtype, "n_params": model.n_params,
        "epochs_to_100": to100,
        "reached_100": int(sum(e is not None for e in to100)),
        "median_epochs_to_100": (float(np.median([e for e in to100 if e is not None]))
                                 if any(e is not None for e in to100) else None),
        "final_accuracy": acc[:, -1].tolist() if acc.size else [],
        "mean_final_accuracy": float(acc[:, -1].mean()) if acc.size else None,
        "eval_epochs": eval_epochs,
        "accuracy": acc.tolist(),
        "loss": [float(np.mean(h["loss"])) for h in hist],
        "final_loss": [float(v) for v in np.asarray(hist[-1]["loss"])] if hist else [],
        "diverged": [not np.isfinite(v) for v in np.asarray(hist[-1]["loss"])] if hist else [],
        "resumed_from": out["resumed_from"],
        "seconds": out["seconds"],
        "seconds_per_epoch": out["seconds"] / max(done, 1),
        "eval_seconds": eval_seconds,
        "train_seconds_per_epoch": (out["seconds"] - eval_seconds) / max(done, 1),
    }
    record = activation_record(s.activation)
    if isinstance(record, dict):  # an activation of yours: which file, with which content
        result["activation_file"] = record
    if len(tasks) > 1:
        by = {t: np.array([h["accuracy_by_task"][t] for h in evals]).T.tolist() for t in tasks}
        result["accuracy_by_task"] = by
        result["final_accuracy_by_task"] = {t: float(np.mean([row[-1] for row in by[t]])) if evals else None
                                            for t in tasks}
    return result


def batched_speedup(settings):
    """Wall time of ``settings.seeds`` runs trained as one batched program vs one after another.

    Both train the same seeds for the same epochs with :func:`run_nt` (no
    evaluation but one greedy step at the end; the settings' other fields as given). The per-seed cost of each part
    of an epoch, and why batching gains little here, is measured by
    :func:`seed_scaling` (``derivations/15-nt-experiments.md``, section 6).
    Measure with ``OMP_NUM_THREADS=1`` on an otherwise idle machine.

    Returns
    -------
    dict
        ``batched_s``, ``one_after_another_s`` and ``speedup`` (their ratio).
    """
    quick = dataclasses.replace(settings, eval_every=10 ** 9, n_test=1, n_g=1)
    t0 = time.perf_counter()
    run_nt(quick)
    batched = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in range(settings.first_seed, settings.first_seed + settings.seeds):
        run_nt(dataclasses.replace(quick, seeds=1, first_seed=s))
    serial = time.perf_counter() - t0
    return {"task": settings.task, "n_con": settings.context, "attention": activation_label(settings.activation),
            "seeds": settings.seeds, "epochs": settings.epochs,
            "batched_s": batched, "one_after_another_s": serial, "speedup": serial / batched}


def seed_scaling(task="N2T5", n_con=16, activation="softmax", *, sizes=(1, 2, 4, 8, 16), epochs=10, repeats=3,
                 layout=DEFAULT_LAYOUT, n_predict=PAPER["n_batch"]):
    """Milliseconds per epoch of each part of a training epoch, for ``S`` seeds batched.

    For each ``S`` in ``sizes``, ``epochs`` epochs are timed part by part:
    drawing the batch (:func:`make_batches`, one series per seed), the
    forward and hand-derived backward pass (:meth:`NTModel.loss_and_grad`)
    and the SGD step; the median over ``repeats`` rounds is kept. If a part's
    ``ms_per_seed`` stays flat as ``S`` grows, its cost is work proportional
    to the seeds (array arithmetic) and batching cannot save anything there; if it
    falls, a fixed per-call cost (Python, NumPy dispatch) is being shared.
    The best batched speed-up is ``ms_per_seed(S=1) / ms_per_seed(S=max)``.
    ``n_predict=1`` (one example per seed instead of 40) leaves almost only
    the fixed cost of a call.

    Returns
    -------
    dict
        ``rows``: one per ``S`` with ``batches_ms``, ``loss_and_grad_ms``,
        ``step_ms``, ``total_ms`` (per epoch, all seeds) and ``ms_per_seed``;
        ``ideal_speedup``.
    """
    if not sizes or any(isinstance(S, (bool, np.bool_)) or not isinstance(S, (int, np.integer)) or S < 1
                        for S in sizes):
        raise ValueError(f"sizes: expected positive ints, got {sizes!r}")
    _, tasks, _ = parse_mixture(task)
    N = parse_task(tasks[0])[1]
    rows = []
    for S in sizes:
        seeds = tuple(range(S))
        model = NTModel(N, n_con, activation=activation, layout=layout)
        init = model.init_params(seeds)
        mk = make_batches(task, n_con, seeds, n_predict=n_predict)
        rounds = []
        for _ in range(repeats):  # every round trains the same epochs from the initial model
            params = {k: v.copy() for k, v in init.items()}
            opt = SGD(params, lr=PAPER["lr"], momentum=PAPER["momentum"])
            t = np.zeros(3)
            for e in range(epochs):
                t0 = time.perf_counter()
                batch = mk(e)[0]
                t1 = time.perf_counter()
                _, grads, _ = model.loss_and_grad(params, batch)
                t2 = time.perf_counter()
                opt.step(grads)
                t3 = time.perf_counter()
                t += (t1 - t0, t2 - t1, t3 - t2)
            rounds.append(1000.0 * t / epochs)
        b, lg, st = np.median(np.array(rounds), axis=0)
        rows.append({"S": int(S), "batches_ms": float(b), "loss_and_grad_ms": float(lg), "step_ms": float(st),
                     "total_ms": float(b + lg + st), "ms_per_seed": float((b + lg + st) / S)})
    return {"task": task, "n_con": n_con, "attention": activation, "epochs": epochs, "repeats": repeats,
            "n_predict": n_predict, "rows": rows, "ideal_speedup": rows[0]["ms_per_seed"] / rows[-1]["ms_per_seed"]}


def profile_loss_and_grad(task="N2T5", n_con=16, activation="expressive", *, seeds=16, calls=200, top=12,
                          layout=DEFAULT_LAYOUT):
    """Where the time of :meth:`NTModel.loss_and_grad` goes, by :mod:`cProfile`.

    One batch of :func:`make_batches` for ``seeds`` seeds, ``calls`` calls
    under the profiler; the ``top`` functions by own time ("tottime": time in
    the function itself, not in what it calls).

    Returns
    -------
    dict
        ``ms_per_call`` (under the profiler, which inflates it) and ``rows``:
        ``function`` (file:line(name)), ``calls_per_call``, ``own_ms_per_call``
        and ``share`` (of the total).
    """
    import cProfile  # noqa: PLC0415
    import os  # noqa: PLC0415
    import pstats  # noqa: PLC0415

    seeds = tuple(range(seeds)) if isinstance(seeds, (int, np.integer)) else tuple(seeds)
    N = parse_task(parse_mixture(task)[1][0])[1]
    model = NTModel(N, n_con, activation=activation, layout=layout)
    params = model.init_params(seeds)
    batch = make_batches(task, n_con, seeds)(0)[0]
    model.loss_and_grad(params, batch)  # warm up
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        model.loss_and_grad(params, batch)
    prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, callers) in stats.stats.items():
        where = f"{os.path.basename(file)}:{line}({fn})" if line else fn
        rows.append({"function": where, "calls_per_call": nc / calls, "own_ms_per_call": 1000.0 * tt / calls,
                     "share": tt / total})
    rows.sort(key=lambda r: -r["share"])
    return {"task": task, "n_con": n_con, "attention": activation, "seeds": len(seeds), "calls": calls,
            "ms_per_call": 1000.0 * total / calls, "rows": rows[:top]}


def format_seed_scaling(result):
    """:func:`seed_scaling`'s rows as a Markdown table."""
    lines = [f"{result['task']} N_con={result['n_con']} {result['attention']}, {result['n_predict']} examples "
             f"per seed: ms per epoch (median of {result['repeats']} rounds of {result['epochs']} epochs)",
             "| S | batches | loss_and_grad | SGD step | total | per seed |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['S']} | {r['batches_ms']:.2f} | {r['loss_and_grad_ms']:.2f} | {r['step_ms']:.2f} | "
                     f"{r['total_ms']:.2f} | {r['ms_per_seed']:.3f} |")
    lines.append(f"best batched speed-up (per-seed cost at S=1 / at S={result['rows'][-1]['S']}): "
                 f"{result['ideal_speedup']:.2f}x")
    return "\n".join(lines)


def run(settings, *, progress=None):
    """:func:`run_nt`; with ``count_params`` only ``{"count_params": n}``, the model's parameter count
    (:func:`refattn.training.models.nt.count_params`)."""
    if settings.count_params:
        _, N, _ = parse_task(settings.task)
        return {"count_params": count_params(N, settings.context, layout=settings.layout)}
    return run_nt(settings, progress=progress)


def report(result):
    """:func:`run_nt`'s result in a few lines (the parameter count alone for ``count_params``); a seed whose
    loss ended non-finite is named as diverged, and no final accuracy of a diverged model is quoted."""
    if "count_params" in result:
        return str(result["count_params"])
    r = result
    hit = [e for e in r["epochs_to_100"] if e is not None]
    trained = [not d for d in r["diverged"]] if len(r["diverged"]) == len(r["seeds"]) else [True] * len(r["seeds"])
    lines = [
        f"{r['task']} N_con={r['n_con']} attention={r['attention']} layout={r['layout']}: "
        f"{r['n_params']} parameters, "
        f"{len(r['seeds'])} seeds, {r['epochs']} epochs ({r['seconds']:.1f} s, "
        f"{1000 * r['seconds_per_epoch']:.1f} ms per epoch for all seeds)",
    ]
    if not all(trained):
        first = next((e for e, v in enumerate(r["loss"], 1) if not np.isfinite(v)), None)
        lines.append(f"  DIVERGED: seeds {[s for s, ok in zip(r['seeds'], trained) if not ok]} of {len(r['seeds'])} "
                     f"(their training loss is not finite"
                     + ("" if first is None else f"; the mean loss first at epoch {first}")
                     + "); their accuracy is not a trained model's and is left out below")
    lines += [
        f"  reached 100%: {r['reached_100']}/{len(r['seeds'])} seeds; epochs to 100%: {r['epochs_to_100']}",
        f"  median epochs to 100% (of those that reached it): {np.median(hit) if hit else 'n/a'}",
        "  final accuracy: " + _final(r["final_accuracy"], trained),
    ]
    for t, acc in r.get("accuracy_by_task", {}).items():
        lines.append(f"  final accuracy on {t}: " + _final([row[-1] for row in acc] if acc and acc[0] else [],
                                                           trained))
    return "\n".join(lines)


def _final(finals, trained):
    """"mean M, per seed [...]" over the seeds that trained (a diverged one reads "diverged")."""
    kept = [a for a, ok in zip(finals, trained) if ok]
    if not kept:
        return "n/a (every seed diverged)" if finals else "n/a (no evaluation)"
    per_seed = [round(a, 3) if ok else "diverged" for a, ok in zip(finals, trained)]
    return f"mean {np.mean(kept):.4f}{'' if len(kept) == len(finals) else ' of the seeds that trained'}, per seed {per_seed}"


def compare_layouts(settings, layouts=CANDIDATE_LAYOUTS, activations=("expressive", "softmax"), *, progress=None):
    """:func:`run_nt` for every layout and activation, in that order (layouts outer), the other settings as given.

    Expressive's Fig. 4 claim (N2T5, N_con = 16, 802 parameters: EA converges
    markedly faster than DPA) is tested under each placement of the two
    bias vectors (``derivations/11-nt-model.md``, sections 6-7). The same
    seeds, and so the same initial matrices, are used for every layout and
    attention.

    Parameters
    ----------
    settings : Settings
        The run's settings (task, context, seeds, epochs, ...); its layout and activation are replaced.
    layouts : sequence of str
        Names of :data:`refattn.training.models.nt.LAYOUTS`.
    activations : sequence of str
        ``"expressive"`` (EA) and ``"softmax"`` (DPA) by default.

    Returns
    -------
    list of dict
        :func:`run_nt`'s results.
    """
    if isinstance(layouts, str) or isinstance(activations, str):
        raise TypeError("layouts, activations: expected sequences of names, e.g. ('b_Q+b_r',), not a str")
    return [run_nt(dataclasses.replace(settings, layout=layout, activation=act), progress=progress)
            for layout in layouts for act in activations]


def _label(attention):
    return {"expressive": "EA", "softmax": "DPA"}.get(attention, attention)


def format_layout_table(results):
    """:func:`compare_layouts`'s results as a Markdown table, one row per run.

    Columns: layout; attention; on an EA row at N = 2, which symbols its
    weights can see (:func:`refattn.training.models.nt.ea_symbol_dependence`: "blind",
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


def plot(result):
    """Accuracy per evaluation (every seed thin, the mean thick) and the training loss
    of one :func:`run_nt` result."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    if "count_params" in result:
        raise ValueError("a parameter count has no curves to draw")
    fig = Figure(figsize=(9, 3.4))
    ax, bx = fig.subplots(1, 2)
    acc = np.asarray(result["accuracy"])
    for row in acc:
        ax.plot(result["eval_epochs"], row, color="0.75", lw=0.7)
    if acc.size:
        ax.plot(result["eval_epochs"], acc.mean(axis=0), color="k", lw=2, label="mean over seeds")
    ax.axhline(1.0 / result["N"], color="r", ls=":", lw=1, label="chance 1/N")
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"accuracy ({result['n_g']} greedy symbols)")
    ax.set_title(f"{result['task']}, N_con = {result['n_con']}, {result['attention']}", fontsize=9)
    ax.legend(fontsize=7)
    bx.semilogy(np.arange(1, len(result["loss"]) + 1), result["loss"])
    bx.set_xlabel("epoch")
    bx.set_ylabel("training loss (mean over seeds)")
    fig.tight_layout()
    return fig
