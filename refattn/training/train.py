r"""The tiny trainer: one loop, per-epoch callbacks, durable and locked checkpoints, resume.

The loop is the whole of it::

    for epoch in range(start, epochs):
        for batch in make_batches(epoch):
            loss, grads = gradient(model, params, batch)   # hand-derived, or autograd
            optimizer.step(grads)                           # in place
        record = callbacks(epoch, params)                   # what to remember
        checkpoint(params, optimizer, history)              # atomically

**The model protocol.** A model has ``init_params(seeds, dtype)`` (every array
has a leading axis ``S``: one independent model per seed, all trained by one
batched array program), ``loss(params, batch) -> (S,)`` written against
:func:`refattn.core.backend.array_module` (so autograd can trace it) and
``loss_and_grad(params, batch) -> (loss, grads, aux)`` with the hand-derived
gradient of ``loss.sum()``. Each seed's loss depends only on its own slice of
the parameters, so the gradient of the sum is every seed's own gradient.
Randomness (data order, dropout masks) lives in the batches, drawn by
``make_batches(epoch)`` from the epoch number and a seed, so a run is a pure
function of its inputs: the same seeds give the same result bit for bit, and
a run resumed from a checkpoint ends exactly where an uninterrupted one does
(``tests/training/test_train.py``).

``grad="autograd"`` differentiates ``model.loss`` with autograd instead of
calling the hand-derived backward: the two give the same trajectory to
rounding, which is the end-to-end check of a model's backward pass.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
import uuid

import numpy as np
from autograd import value_and_grad
from threadpoolctl import threadpool_limits

from ..core.backend import array_module, to_numpy

from ..core.checks import check_int
from .optim import Optimizer
from .runs import atomic_write, check_writable, claim, jsonable, locked, make_folder_for

__all__ = ["GRADS", "gradient", "train", "batch_iterator", "save_checkpoint", "load_checkpoint",
           "check_checkpoint", "check_resumable", "checkpoint_paths", "history_path", "Progress"]

#: How gradients are computed: the model's hand-derived backward, or autograd.
GRADS = ("analytic", "autograd")
_FORMAT = "refattn-checkpoint-4"
# 1 kept the history inside the .npz; 2 kept all of it in the history file, written before the .npz; 3 had no
# digests (its files are checked for their structure only)
_READABLE = ("refattn-checkpoint-1", "refattn-checkpoint-2", "refattn-checkpoint-3", _FORMAT)


def gradient(model, params, batch, grad="analytic"):
    """``(loss (S,), grads)`` for one batch, by the model's own backward or by autograd."""
    if grad == "analytic":
        loss, grads, _ = model.loss_and_grad(params, batch)
        return loss, grads
    if grad == "autograd":
        per_seed = {}

        def total(p):
            loss = model.loss(p, batch)
            per_seed["loss"] = loss
            return loss.sum()

        _, grads = value_and_grad(total)(dict(params))
        loss = per_seed["loss"]
        return getattr(loss, "_value", loss), grads
    raise ValueError(f"grad: expected one of {GRADS}, got {grad!r}")


# --------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------


class Progress:
    """A one-line text progress bar on ``stream`` (stderr): epoch, batches, loss, time.

    ``enabled=None`` shows it only when ``stream`` is a terminal.
    """

    def __init__(self, total_epochs, *, stream=None, enabled=None, width=24, label="train"):
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = isatty if enabled is None else bool(enabled)
        self.total = total_epochs
        self.width = width
        self.label = label
        self.t0 = time.perf_counter()

    def update(self, epoch, batch_index, n_batches, loss):
        if not self.enabled:
            return
        done = (epoch + (batch_index + 1) / max(n_batches, 1)) / max(self.total, 1)
        fill = int(round(self.width * min(done, 1.0)))
        bar = "#" * fill + "." * (self.width - fill)
        msg = (f"\r{self.label} epoch {epoch + 1}/{self.total} [{bar}] "
               f"loss {float(np.mean(to_numpy(loss))):.4g}  {time.perf_counter() - self.t0:.1f}s")
        self.stream.write(msg)
        self.stream.flush()

    def close(self):
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


# --------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------


def history_path(path):
    """The history file beside a checkpoint: ``run.npz`` -> ``run.history.jsonl``."""
    return os.fspath(path)[:-4] + ".history.jsonl"


def _history_lines(records, run):
    return "".join(json.dumps({"run": run, "record": jsonable(r)}) + "\n" for r in records).encode()


def _digests(arrays, meta, history):
    """SHA-256 digests of what a checkpoint holds: its arrays (name, dtype, shape and bytes), its
    metadata (epoch, fingerprint, optimiser's hyperparameters, ...) and its whole history, so that a
    file edited or damaged after it was saved is refused, never resumed."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    plain = {k: v for k, v in meta.items() if k != "digest"}
    return {"arrays": h.hexdigest(),
            "meta": hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest(),
            "history": hashlib.sha256("".join(json.dumps(r) + "\n" for r in history).encode()).hexdigest()}


def save_checkpoint(path, params, optimizer, history, *, epoch, fingerprint=None, saved=0, run=None):
    """Write a checkpoint: params, optimizer state, the epoch and the history, durably.

    Two files: ``path`` (.npz) holds the parameters, the optimiser's state and
    the epoch; :func:`history_path` beside it holds the history, one JSON
    record per line, each carrying the id ``run`` of the run that wrote it
    (lines of another run sharing the path are never read as this run's). The
    .npz names how many leading records of its run the history file holds
    (``saved``) and carries the records after them itself, so the order of
    the writes keeps the checkpoint readable at every instant:

    1. the .npz is written to a temporary file, flushed to disk and renamed
       over ``path`` (:func:`refattn.training.runs.atomic_write`): until the
       rename the previous checkpoint is the one on disk, whole;
    2. only then are the new records appended to the history file (``saved=0``:
       the file is written anew, atomically), and flushed.

    A save that fails (a full disk) or is killed at any point leaves a
    checkpoint that loads: the previous one before step 1's rename, the new
    one after it (the history file then holds at least the ``saved`` records
    it names). The history file is only appended to, so a long run does not
    rewrite its history every epoch, and the .npz holds only the records since
    the last save.

    Parameters
    ----------
    saved : int
        How many leading records of ``history`` the history file already holds
        under ``run`` (what the previous call returned). ``0``: none; the
        history file is written anew after the .npz.
    run : str, optional
        An id of the writing run (default: a fresh one, which needs ``saved=0``).

    Returns
    -------
    (int, str)
        ``len(history)`` and ``run``: pass them as ``saved`` and ``run`` next time.
    """
    path = os.fspath(path)
    if not path.endswith(".npz"):
        raise ValueError(f"path: a checkpoint is a .npz file, got {path!r}")
    if run is None:
        if saved:
            raise ValueError("saved: records can only be appended for a named run; pass run= as well")
        run = uuid.uuid4().hex
    if not (isinstance(saved, (int, np.integer)) and 0 <= saved <= len(history)):
        raise ValueError(f"saved: expected an integer in [0, {len(history)}], got {saved!r}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    state = optimizer.state_dict()
    arrays = {f"param/{k}": to_numpy(v) for k, v in params.items()}
    for buf, values in state["state"].items():
        arrays.update({f"opt/{buf}/{k}": to_numpy(v) for k, v in values.items()})
    meta = {
        "format": _FORMAT,
        "epoch": int(epoch),
        "fingerprint": jsonable(fingerprint),
        "history_records": len(history),
        "history_in_file": int(saved),
        "history_tail": jsonable(history[saved:]),
        "run": run,
        "optimizer": {k: jsonable(v) for k, v in state.items() if k != "state"},
    }
    meta["digest"] = _digests(arrays, meta, jsonable(history))
    arrays["meta"] = np.array(json.dumps(meta))
    atomic_write(path, lambda fh: np.savez(fh, **arrays))  # durable before any history line names it
    lines = _history_lines(history[saved:], run)
    hpath = history_path(path)
    if saved == 0:
        atomic_write(hpath, lambda fh: fh.write(lines))
    elif lines:
        try:
            with open(hpath, "ab") as fh:  # append only: the records of the epochs since the last save
                fh.write(lines)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror or str(exc), hpath) from None
    return len(history), run


def _read_history(path, meta):
    """``(history, in_file, clean)`` of a checkpoint whose .npz holds ``meta``.

    The history is the first ``meta["history_in_file"]`` records of run
    ``meta["run"]`` in the history file (format 2: all of them) and then the
    records the .npz carries itself. ``in_file`` is how many records of the
    history the file holds (the .npz's records too, once the save that wrote
    them has appended them), and ``clean`` whether it holds nothing else:
    no line of a killed save, of another run, or cut short."""
    hpath = history_path(path)
    base, run = meta.get("history_in_file", meta["history_records"]), meta["run"]
    tail = meta.get("history_tail", [])
    want = base + len(tail)
    records, clean = [], True
    if base == 0 and not os.path.exists(hpath):
        return list(tail), 0, True
    with open(hpath, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                clean = False  # a line cut by an interrupted append
                break
            entry = json.loads(line)
            if entry.get("run") != run or len(records) == want:
                clean = False  # another run's line, or a line past this checkpoint's
                continue
            records.append(entry["record"])
    if len(records) < base:
        raise ValueError(f"history file {hpath!r} holds {len(records)} records of this checkpoint's run, "
                         f"expected {base}")
    in_file = base
    if len(records) > base:  # the .npz's own records, appended after it: the same, or a killed append's
        same = len(records) == want and all(json.dumps(a) == json.dumps(b) for a, b in zip(records[base:], tail))
        in_file, clean = (want, clean) if same else (base, False)
    return records[:base] + list(tail), in_file, clean


class _Edited(ValueError):
    """A checkpoint whose parts disagree with each other or with its digests: edited or damaged."""


def load_checkpoint(path):
    """Read a checkpoint written by :func:`save_checkpoint`, checked as strictly as it was written.

    The history must be epochs 0, 1, ..., n - 1 in order, the .npz's epoch its
    last (a line of the history file deleted, duplicated, swapped or
    renumbered is refused), and a checkpoint of the current format must match
    the digests it was saved with: of its arrays (every parameter's and
    buffer's bytes, dtype and shape), of its metadata (the epoch, the
    fingerprint, the optimiser's hyperparameters such as the learning rate)
    and of its history. A checkpoint edited or damaged after it was saved is
    never resumed.

    Returns
    -------
    dict
        ``params`` (NumPy arrays), ``optimizer`` (a ``state_dict`` for
        :meth:`refattn.training.optim.Optimizer.load_state_dict`), ``history``, ``epoch``
        (the last completed epoch), ``fingerprint``, and what a resumed run needs
        to go on appending: ``run`` (the id its history lines carry),
        ``history_in_file`` (how many of the records the history file holds, the
        rest being in the .npz) and ``history_clean`` (whether the file holds
        nothing else).

    Raises
    ------
    ValueError
        Naming the file, for anything that is not a complete refattn
        checkpoint (a truncated zip, a pickle, another format, a missing or
        short history file) or that was edited or damaged after it was saved.
        The file is left as it is.
    """
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            if "meta" not in data.files:
                raise ValueError("no 'meta' entry")
            meta = json.loads(str(data["meta"]))
            if not isinstance(meta, dict) or meta.get("format") not in _READABLE:
                raise ValueError(f"format {meta.get('format') if isinstance(meta, dict) else None!r}, "
                                 f"expected {_FORMAT!r}")
            arrays = {k: data[k] for k in data.files if k != "meta"}
        params = {k[len("param/"):]: v for k, v in arrays.items() if k.startswith("param/")}
        bufs: dict = {}
        for k, v in arrays.items():
            if k.startswith("opt/"):
                _, buf, name = k.split("/", 2)
                bufs.setdefault(buf, {})[name] = v
        if "history" in meta:  # format 1 kept it inline
            history, in_file, clean = meta["history"], 0, True
        else:
            history, in_file, clean = _read_history(path, meta)
            if len(history) != meta["history_records"]:
                raise ValueError(f"it names {meta['history_records']} history records, holds {len(history)}")
        _check_history(meta, history)
        if meta["format"] == _FORMAT:
            _check_digests(arrays, meta, history)
        opt = dict(meta["optimizer"])
        out = {"params": params, "optimizer": opt, "history": history, "epoch": meta["epoch"],
               "fingerprint": meta["fingerprint"], "run": meta.get("run"), "history_in_file": in_file,
               "history_clean": clean}
    except FileNotFoundError as exc:
        if exc.filename is not None and os.fspath(exc.filename) == path:
            raise
        raise ValueError(f"checkpoint {path!r}: its history file {history_path(path)!r} is missing; "
                         f"the checkpoint is left as it is: move it away or pass another path") from None
    except _Edited as exc:
        raise ValueError(f"checkpoint {path!r}: {exc}: it was edited or damaged after it was saved, and is left "
                         f"as it is: move it away or pass another path") from None
    except Exception as exc:  # noqa: BLE001 - a truncated zip, a pickle, bad JSON: one message naming the file
        raise ValueError(f"checkpoint {path!r}: not a readable refattn checkpoint ({type(exc).__name__}: "
                         f"{exc}); it is left as it is: move it away or pass another path") from None
    opt["state"] = bufs
    for key in ("betas",):  # tuples were stored as JSON lists
        if isinstance(opt.get(key), list):
            opt[key] = tuple(opt[key])
    return out


def _check_history(meta, history):
    """The trainer's history is one record per epoch, epochs 0, 1, ..., n - 1 in order, the .npz's
    epoch the last of them (records without an ``epoch``, from a caller of :func:`save_checkpoint`
    that keeps other records, are not numbered)."""
    numbered = [isinstance(r, dict) and "epoch" in r for r in history]
    if not any(numbered):
        return
    for i, r in enumerate(history):
        e = r.get("epoch") if isinstance(r, dict) else None
        if type(e) is not int or e != i:
            raise _Edited(f"record {i + 1} of its history is epoch {e!r}, expected {i} (the records must be the "
                          f"epochs 0 to {len(history) - 1} in order)")
    if meta["epoch"] != len(history) - 1:
        raise _Edited(f"its .npz says epoch {meta['epoch']!r}, its history ends at epoch {len(history) - 1}")


def _check_digests(arrays, meta, history):
    """The digests :func:`save_checkpoint` wrote, recomputed from what was read (:func:`_digests`)."""
    want = meta.get("digest")
    if not isinstance(want, dict):
        raise _Edited("it has no digest of its contents")
    got = _digests(arrays, meta, history)
    for part, what in (("arrays", "its arrays (the parameters or the optimiser's state)"),
                       ("meta", "its metadata (the epoch, the fingerprint or the optimiser's hyperparameters)"),
                       ("history", "its history records")):
        if want.get(part) != got[part]:
            raise _Edited(f"{what} differ from those it was saved with")


def _trim_history(path, records, run):
    """Rewrite the history file beside ``path`` as exactly ``records`` of ``run``, atomically: what
    a resumed run appends to, without the lines of a killed save or of another run. The checkpoint
    reads the same records from the file before and after."""
    lines = _history_lines(records, run)
    atomic_write(history_path(path), lambda fh: fh.write(lines))


def check_checkpoint(path, option="checkpoint"):
    """Check, before any work, that ``path`` can be a checkpoint: a ``.npz`` name in a folder
    that can be written, no other run writing it (it is claimed for this run,
    :func:`refattn.training.runs.claim`), neither it nor its history file read-only
    (:func:`refattn.training.runs.read_only`: refused, never replaced) nor anything but a
    regular file, and, if the file exists, a readable refattn checkpoint that was not edited
    (:func:`load_checkpoint`; else one line naming it and ``option``)."""
    if path is None:
        return
    name = os.fspath(path)
    if not name.endswith(".npz") or not os.path.basename(name)[:-4]:
        raise ValueError(f"{option}: a checkpoint is a .npz file, got {name!r}")
    if os.path.isdir(name):
        raise ValueError(f"{option}: {name!r} is a folder; a checkpoint is a .npz file")
    for part in (name, history_path(name)):
        if os.path.exists(part) and not os.path.isfile(part):
            raise ValueError(f"{option}: {part!r} is not a regular file (a folder, device or pipe); it is left as "
                             f"it is: pass another path")
        check_writable(part, option)
    make_folder_for(name, option)
    claim(name, option, clean=(history_path(name),))
    if os.path.exists(name):
        try:
            load_checkpoint(name)
        except ValueError as exc:
            raise ValueError(f"{option}: {_without_prefix(exc)}") from None


def _without_prefix(exc):
    message = str(exc)
    return message[len("checkpoint "):] if message.startswith("checkpoint ") else message


def check_resumable(path, fingerprint, epochs, option="checkpoint"):
    """Check, before any work, that the checkpoint ``path`` (if it exists) can be resumed by a run
    with this ``fingerprint`` and ``epochs``, as :func:`train` will when it gets there: a run of
    several pieces (one checkpoint each) compares every piece's checkpoint before the first piece
    trains, so a refusal never comes after an earlier piece's work. One line naming ``option``
    and the file otherwise."""
    if path is None or not os.path.exists(path):
        return
    check_checkpoint(path, option)
    _check_same_run(load_checkpoint(path), os.fspath(path), jsonable(fingerprint), epochs, option)


def _check_same_run(ck, name, fp, epochs, option="checkpoint"):
    """The refusals of a checkpoint made by another run, or holding more epochs than are asked."""
    if ck["fingerprint"] != fp:
        raise ValueError(f"{option}: {name!r} belongs to another run ({_difference(ck['fingerprint'], fp)}); move "
                         f"it away or use another checkpoint path")
    if ck["epoch"] + 1 > epochs:
        raise ValueError(f"epochs: the checkpoint {name!r} already holds {ck['epoch'] + 1} epochs, more than "
                         f"the {epochs} asked; ask for at least {ck['epoch'] + 1} (a run may extend a "
                         f"checkpoint, never report fewer epochs than it trained)")


def _difference(saved, this):
    """Where two fingerprints differ, briefly: ``lr 0.02 in the checkpoint, 0.01 in this run``."""
    if not (isinstance(saved, dict) and isinstance(this, dict)):
        return f"fingerprint {saved!r}, this run {this!r}"
    keys = [k for k in list(saved) + [k for k in this if k not in saved] if saved.get(k) != this.get(k)]
    return "; ".join(f"{k} {saved.get(k)!r} in the checkpoint, {this.get(k)!r} in this run" for k in keys)


def checkpoint_paths(folder, prefix, names, option="--checkpoint-dir"):
    """``{name: <folder>/<prefix>_<name>.npz}`` for a run's pieces (every path ``None``
    without a folder), each existing file checked by :func:`check_checkpoint` now,
    before the first piece trains (:func:`check_resumable` compares them with their runs)."""
    paths = {name: None if folder is None else os.path.join(os.fspath(folder), f"{prefix}_{name}.npz")
             for name in names}
    for path in paths.values():
        check_checkpoint(path, option)
    return paths


# --------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------


def train(model, params, optimizer, make_batches, *, epochs, grad="analytic", callbacks=(),
          checkpoint=None, checkpoint_every=1, resume=True, fingerprint=None, progress=None,
          stop_after=None, blas_threads=1, schedule=None):
    r"""Train ``model`` for ``epochs`` epochs, updating ``params`` in place.

    Parameters
    ----------
    model
        An object following the model protocol (module docstring).
    params : dict of str to ndarray
        The parameters, each with the leading seed axis; updated in place
        (they are the dict ``optimizer`` was built on).
    optimizer : refattn.training.optim.Optimizer
    make_batches : callable ``epoch -> iterable of batch dicts``
        Must be deterministic in ``epoch`` (draw from a generator seeded by the
        epoch number) so that a resumed run sees the same batches.
    epochs : int
        The total number of epochs (a resumed run continues up to it).
    grad : {"analytic", "autograd"}
        The model's hand-derived backward, or autograd on ``model.loss``.
    callbacks : sequence of callables ``(epoch, params) -> dict``
        Called after each epoch; their dicts are merged into the epoch's record
        (arrays are stored as lists). The record always has ``epoch`` and
        ``loss`` (the mean training loss of each seed over the epoch's batches).
    checkpoint : str or path, optional
        A ``.npz`` file written durably (:func:`save_checkpoint`) every
        ``checkpoint_every`` epochs and after the last; with ``resume=True`` an
        existing one is loaded and training continues after its last epoch.
        It is locked for the whole call (:func:`refattn.training.runs.locked`):
        another process training on it is refused at once.
    fingerprint : JSON-able, optional
        A description of the run (model, data, hyperparameters). Resuming from a
        checkpoint with another fingerprint is an error, not a silent mix; so is
        one whose parameters have other dtypes, or whose optimiser holds other
        hyperparameters than this run's at its epoch (:func:`_resume`).
    schedule : callable ``epoch -> dict``, optional
        The optimiser's hyperparameters that change during the run: after each
        epoch's callbacks, ``schedule(epoch)`` (such as ``{"lr": 0.005}``) is
        set on the optimiser, before the checkpoint is saved. The one home of a
        learning-rate drop, so that a resumed run can check the checkpoint's
        hyperparameters against what they must be at its epoch.
    progress : bool or Progress, optional
        Show a progress bar (default: only on a terminal).
    stop_after : int, optional
        Stop after this epoch index (as if interrupted), for tests and demos.
    blas_threads : int or None
        BLAS threads while training (default 1, through threadpoolctl; ``None``
        leaves BLAS as it is). The models here are small: a BLAS call on a
        16 x 16 matrix gains nothing from threads, and the idle workers of a
        threaded BLAS spin and slow everything else on a loaded machine. One
        thread also makes every reduction's order the same on every machine.

    Returns
    -------
    dict
        ``history`` (a list of per-epoch records), ``resumed_from`` (the epoch a
        checkpoint was loaded at, or ``None``), ``seconds`` (wall time of this
        call).
    """
    epochs, blas_threads, callbacks = _train_args(params, optimizer, make_batches, epochs, grad, callbacks,
                                                  checkpoint, checkpoint_every, blas_threads, schedule)
    fp = jsonable(fingerprint)
    with contextlib.ExitStack() as stack:
        if checkpoint is not None:  # one writer: a second run on this checkpoint is refused at once
            stack.enter_context(locked(checkpoint, "checkpoint", clean=(history_path(checkpoint),)))
        history, start, resumed_from, saved, run = [], 0, None, 0, None
        if checkpoint is not None and resume and os.path.exists(checkpoint):
            history, start, saved, run = _resume(checkpoint, params, optimizer, epochs, fp, schedule)
            resumed_from = start - 1
        bar = progress if isinstance(progress, Progress) else Progress(epochs, enabled=progress)
        t0 = time.perf_counter()
        last = epochs - 1 if stop_after is None else min(epochs - 1, stop_after)
        if blas_threads is not None:
            stack.enter_context(threadpool_limits(limits=blas_threads, user_api="blas"))
        stack.callback(bar.close)
        for epoch in range(start, last + 1):
            batches = make_batches(epoch)
            batches = list(batches) if not isinstance(batches, list) else batches
            total = None
            for b, batch in enumerate(batches):
                loss, grads = gradient(model, params, batch, grad)
                optimizer.step(grads)
                total = loss if total is None else total + loss
                bar.update(epoch, b, len(batches), loss)
            mean = total / len(batches) if batches else None
            record = {"epoch": epoch, "loss": jsonable(mean)}
            for cb in callbacks:
                out = cb(epoch, params)
                if out:
                    record.update(jsonable(out))
            history.append(record)
            for h, value in (schedule(epoch) if schedule is not None else {}).items():
                setattr(optimizer, h, value)  # the hyperparameters from the next epoch on
            if checkpoint is not None and ((epoch + 1) % checkpoint_every == 0 or epoch == epochs - 1
                                           or epoch == last):
                saved, run = save_checkpoint(checkpoint, params, optimizer, history, epoch=epoch,
                                             fingerprint=fp, saved=saved, run=run)
    return {"history": history, "resumed_from": resumed_from, "seconds": time.perf_counter() - t0}


def _train_args(params, optimizer, make_batches, epochs, grad, callbacks, checkpoint, checkpoint_every,
                blas_threads, schedule):
    """:func:`train`'s arguments checked before any work: ``(epochs, blas_threads, callbacks)``."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"optimizer: expected a refattn.training.optim.Optimizer, got {type(optimizer).__name__}")
    if optimizer.params is not params:
        raise ValueError("params: must be the very dict the optimizer was built on (it updates it in place)")
    if not (isinstance(epochs, (int, np.integer)) and epochs >= 0):
        raise ValueError(f"epochs: expected a non-negative integer, got {epochs!r}")
    if grad not in GRADS:
        raise ValueError(f"grad: expected one of {GRADS}, got {grad!r}")
    if not callable(make_batches):
        raise TypeError("make_batches: expected a callable epoch -> iterable of batches")
    if not (isinstance(checkpoint_every, (int, np.integer)) and checkpoint_every >= 1):
        raise ValueError(f"checkpoint_every: expected a positive integer, got {checkpoint_every!r}")
    epochs = check_int(epochs, "epochs", 0)  # 0: no training (the initial parameters, evaluated)
    if checkpoint is not None and not os.fspath(checkpoint).endswith(".npz"):
        raise ValueError(f"checkpoint: a checkpoint is a .npz file, got {os.fspath(checkpoint)!r}")
    if blas_threads is not None:
        blas_threads = check_int(blas_threads, "blas_threads", 1)
    if schedule is not None and not callable(schedule):
        raise TypeError("schedule: expected a callable epoch -> dict of the optimiser's hyperparameters")
    callbacks = tuple(callbacks)
    for cb in callbacks:
        if not callable(cb):
            raise TypeError(f"callbacks: expected callables (epoch, params) -> dict, got {cb!r}")
    return epochs, blas_threads, callbacks


def _resume(checkpoint, params, optimizer, epochs, fp, schedule):
    """Load ``checkpoint`` into ``params`` and ``optimizer`` (checked against this run); return
    ``(history, first epoch to train, saved, run)``, the last two for :func:`save_checkpoint`: the
    run goes on under the checkpoint's run id, appending after the records its history file holds
    (the file is first trimmed to exactly those, if a killed save or another run left more).

    Nothing is converted: a parameter of another dtype or shape, or optimiser hyperparameters
    other than this run's at the checkpoint's epoch (the optimiser's own, or ``schedule``'s: a
    learning rate edited in the file, say), are refused, naming the file."""
    name = os.fspath(checkpoint)
    hyper = {h: getattr(optimizer, h) for h in optimizer.hyper_names}  # this run's, before anything is loaded
    ck = load_checkpoint(checkpoint)
    _check_same_run(ck, name, fp, epochs)
    if set(ck["params"]) != set(params):
        raise ValueError(f"checkpoint: {name!r} holds parameters {sorted(ck['params'])}, this model has "
                         f"{sorted(params)}")
    for k, v in params.items():
        saved = ck["params"][k]
        if saved.shape != v.shape or saved.dtype != np.dtype(v.dtype):
            raise ValueError(f"checkpoint: {name!r} holds parameter {k!r} as {saved.dtype} {saved.shape}, this "
                             f"run's is {np.dtype(v.dtype)} {v.shape}")
    for h, want in {**hyper, **(schedule(ck["epoch"]) if schedule is not None else {})}.items():
        got = ck["optimizer"].get(h)
        if jsonable(got) != jsonable(want):
            raise ValueError(f"checkpoint: {name!r} holds the optimiser's {h} {got!r} after epoch {ck['epoch']}, "
                             f"this run's is {want!r}; it was edited, or belongs to another run")
    for buf, values in ck["optimizer"]["state"].items():
        for k, v in values.items():
            if k in params and v.dtype != np.dtype(params[k].dtype):
                raise ValueError(f"checkpoint: {name!r} holds the optimiser's {buf} of {k!r} as {v.dtype}, this "
                                 f"run's parameter is {np.dtype(params[k].dtype)}")
    try:
        optimizer.load_state_dict(ck["optimizer"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint: {name!r}: its optimiser state does not fit this run ({exc})") from None
    for k, v in params.items():
        v[...] = array_module(v).asarray(ck["params"][k])
    history, saved, run = list(ck["history"]), ck["history_in_file"], ck["run"]
    if run is None:  # format 1: no history file; the first save writes one
        saved = 0
    elif not ck["history_clean"]:
        _trim_history(checkpoint, history[:saved], run)
    return history, ck["epoch"] + 1, saved, run


def batch_iterator(n_examples, batch_size, *, seeds, epoch, shuffle=True, drop_last=False):
    """Index batches for every seed: a list of ``(S, B)`` integer arrays.

    Seed ``k`` shuffles with ``np.random.default_rng([seeds[k], epoch])``, so the
    order depends only on (seed, epoch): the same with one seed or ten, the
    same after a resume.
    """
    if not (isinstance(n_examples, (int, np.integer)) and n_examples >= 1):
        raise ValueError(f"n_examples: expected a positive integer, got {n_examples!r}")
    if not (isinstance(batch_size, (int, np.integer)) and batch_size >= 1):
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
    orders = []
    for s in seeds:
        idx = np.arange(n_examples)
        if shuffle:
            idx = np.random.default_rng([int(s), int(epoch)]).permutation(n_examples)
        orders.append(idx)
    order = np.stack(orders)  # (S, n)
    n_full = n_examples // batch_size
    stops = [(i * batch_size, (i + 1) * batch_size) for i in range(n_full)]
    if not drop_last and n_examples % batch_size:
        stops.append((n_full * batch_size, n_examples))
    return [order[:, a:b] for a, b in stops]
