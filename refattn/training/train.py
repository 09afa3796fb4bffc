r"""The trainer of the NT, SST-2, polarity and LM studies: one loop, per-epoch callbacks, checkpoints, resume.

The loop is the whole of it::

    for epoch in range(start, epochs):
        for batch in make_batches(epoch):
            loss, grads = gradient(model, params, batch)   # hand-derived, or autograd
            optimizer.step(grads)                           # in place
        record = callbacks(epoch, params)                   # what to remember
        save_checkpoint(...)                                # every checkpoint_every epochs

What it adds to plain gradient descent is what a long study needs: a
checkpoint to resume from (bit for bit), a lock so that a second run on the
checkpoint is refused, a progress bar, and one BLAS thread.

**The model protocol.** A model has ``init_params(seeds, dtype)`` (every array
has a leading axis ``S``: one independent model per seed, all trained by one
batched array program), ``loss(params, batch) -> (S,)`` written against
:func:`refattn.core.backend.array_module` (so autograd can trace it) and
``loss_and_grad(params, batch) -> (loss, grads, aux)`` with the hand-derived
gradient of ``loss.sum()``; each seed's loss depends only on its own slice of
the parameters, so that gradient is every seed's own. Randomness (data order,
dropout masks) lives in the batches, drawn by ``make_batches(epoch)`` from the
epoch number and a seed, so a run is a pure function of its inputs
(``tests/training/test_train.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time

import numpy as np
from autograd import value_and_grad
from threadpoolctl import threadpool_limits

from ..core.backend import array_module, to_numpy
from ..core.checks import check_int
from .optim import Optimizer
from .runs import atomic_write, check_writable, claim, jsonable, locked, make_folder_for, studies_extra

__all__ = ["GRADS", "gradient", "train", "batch_iterator", "save_checkpoint", "load_checkpoint",
           "check_checkpoint", "check_resumable", "checkpoint_paths"]

#: How gradients are computed: the model's hand-derived backward, or autograd.
GRADS = ("analytic", "autograd")
_FORMAT = "refattn-checkpoint-5"


def gradient(model, params, batch, grad="analytic"):
    """``(loss (S,), grads)`` for one batch, by the model's own backward or by autograd on ``model.loss``
    (the same trajectory to rounding: the end-to-end check of a model's backward pass)."""
    if grad == "analytic":
        loss, grads, _ = model.loss_and_grad(params, batch)
        return loss, grads
    if grad != "autograd":
        raise ValueError(f"grad: expected one of {GRADS}, got {grad!r}")
    per_seed = {}

    def total(p):
        per_seed["loss"] = model.loss(p, batch)
        return per_seed["loss"].sum()

    _, grads = value_and_grad(total)(dict(params))
    return getattr(per_seed["loss"], "_value", per_seed["loss"]), grads


# --------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------


def _digest(arrays):
    """SHA-256 of a checkpoint's entries: each one's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_checkpoint(path, params, optimizer, history, *, epoch, fingerprint=None):
    """Write a checkpoint, atomically (:func:`refattn.training.runs.atomic_write`).

    One ``.npz``: the parameters (``param/<name>``), the optimiser's buffers
    (``opt/<buffer>/<name>``), ``meta`` (JSON: the format, ``epoch``, the run's
    ``fingerprint``, the optimiser's step count and hyperparameters, the
    ``history``) and ``digest``, the SHA-256 of all of them.
    """
    state = optimizer.state_dict()
    arrays = {f"param/{k}": to_numpy(v) for k, v in params.items()}
    for buf, values in state.pop("state").items():
        arrays.update({f"opt/{buf}/{k}": to_numpy(v) for k, v in values.items()})
    meta = {"format": _FORMAT, "epoch": int(epoch), "fingerprint": jsonable(fingerprint),
            "optimizer": jsonable(state), "history": jsonable(history)}
    arrays["meta"] = np.array(json.dumps(meta))
    arrays["digest"] = np.array(_digest(arrays))
    atomic_write(path, lambda fh: np.savez(fh, **arrays))


def load_checkpoint(path):
    """Read a checkpoint of :func:`save_checkpoint`.

    Returns ``{"params", "optimizer", "history", "epoch", "fingerprint"}``
    (``optimizer`` a state for :meth:`refattn.training.optim.Optimizer.load_state_dict`).
    A file that is not a checkpoint of this format, or whose digest differs
    from its contents (edited or damaged after it was saved), is one
    ``ValueError`` naming it; the file is left as it is.
    """
    path = os.fspath(path)
    leave = "it is left as it is: move it away or pass another path"
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays["meta"]))
        if meta.get("format") != _FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, expected {_FORMAT!r}")
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - a truncated zip, a pickle, bad JSON: one message naming the file
        raise ValueError(f"checkpoint {path!r}: not a readable refattn checkpoint ({type(exc).__name__}: "
                         f"{exc}); {leave}") from None
    if str(arrays.pop("digest", "")) != _digest(arrays):
        raise ValueError(f"checkpoint {path!r}: its contents differ from its digest: it was edited or damaged "
                         f"after it was saved, and {leave}")
    state = {**meta["optimizer"], "state": {}}
    for key, value in arrays.items():
        if key.startswith("opt/"):
            _, buf, name = key.split("/", 2)
            state["state"].setdefault(buf, {})[name] = value
    params = {k[len("param/"):]: v for k, v in arrays.items() if k.startswith("param/")}
    return {"params": params, "optimizer": state, "history": meta["history"], "epoch": meta["epoch"],
            "fingerprint": meta["fingerprint"]}


def _checkpoint_path(path, option):
    """A ``.npz`` name, not a folder, device or pipe, not read-only, in a folder that exists or can be made."""
    name = os.fspath(path)
    if not name.endswith(".npz") or not os.path.basename(name)[:-4]:
        raise ValueError(f"{option}: a checkpoint is a .npz file, got {name!r}")
    if os.path.lexists(name) and not os.path.isfile(name):
        raise ValueError(f"{option}: {name!r} is not a regular file (a folder, device or pipe); it is left as it "
                         f"is: pass another path")
    check_writable(name, option)
    make_folder_for(name, option)


def check_checkpoint(path, option="checkpoint"):
    """Check, before any work, that ``path`` (``None``: no checkpoint) can be a checkpoint, claim it for this
    run (:func:`refattn.training.runs.claim`) and, if it exists, read it (:func:`load_checkpoint`); one line
    naming ``option`` otherwise."""
    if path is None:
        return
    _checkpoint_path(path, option)
    claim(path, option)
    if os.path.exists(path):
        try:
            load_checkpoint(path)
        except ValueError as exc:
            raise ValueError(f"{option}: {str(exc).removeprefix('checkpoint ')}") from None


def check_resumable(path, fingerprint, epochs, option="checkpoint"):
    """Refuse, before any work, a checkpoint ``path`` (checked by :func:`check_checkpoint`) that a run with
    this ``fingerprint`` and ``epochs`` could not resume: a study of several pieces compares every
    piece's checkpoint before the first piece trains."""
    if path is not None and os.path.exists(path):
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
    """``{name: <folder>/<prefix>_<name>.npz}`` for a run's pieces (every path ``None`` without a folder),
    each checked by :func:`check_checkpoint` before the first piece trains."""
    paths = {name: None if folder is None else os.path.join(os.fspath(folder), f"{prefix}_{name}.npz")
             for name in names}
    for path in paths.values():
        check_checkpoint(path, option)
    return paths


def _resume(checkpoint, params, optimizer, epochs, fp):
    """Load ``checkpoint`` into ``params`` and ``optimizer``; return ``(history, first epoch to train)``."""
    name = os.fspath(checkpoint)
    ck = load_checkpoint(checkpoint)
    _check_same_run(ck, name, fp, epochs)
    layout = {k: (np.dtype(v.dtype).name, tuple(v.shape)) for k, v in params.items()}
    saved = {k: (v.dtype.name, v.shape) for k, v in ck["params"].items()}
    if saved != layout:  # nothing is converted: another model, or another dtype, is refused
        raise ValueError(f"checkpoint: {name!r} holds parameters {saved}, this run's are {layout}")
    try:
        optimizer.load_state_dict(ck["optimizer"])
    except (KeyError, ValueError) as exc:
        raise ValueError(f"checkpoint: {name!r}: its optimiser state does not fit this run ({exc})") from None
    for k, v in params.items():
        v[...] = array_module(v).asarray(ck["params"][k])
    return list(ck["history"]), ck["epoch"] + 1


# --------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------


def _progress_bar(progress, label, epochs, start):
    """A tqdm bar of epochs on stderr; ``progress=None`` shows it only on a terminal."""
    tqdm = studies_extra("tqdm")
    return tqdm.tqdm(total=epochs, initial=start, desc=label, unit="epoch", file=sys.stderr,
                     disable=None if progress is None else not progress)


def train(model, params, optimizer, make_batches, *, epochs, grad="analytic", callbacks=(), checkpoint=None,
          checkpoint_every=1, resume=True, fingerprint=None, progress=None, label="train", stop_after=None,
          blas_threads=1, schedule=None):
    r"""Train ``model`` (the model protocol, module docstring) for ``epochs`` epochs, updating ``params`` in place.

    Parameters
    ----------
    make_batches : callable ``epoch -> iterable of batch dicts``
        Deterministic in ``epoch``, so that a resumed run sees the same batches.
    callbacks : sequence of callables ``(epoch, params) -> dict``
        Merged into the epoch's record, which holds ``epoch`` and ``loss`` (each
        seed's mean over the epoch's batches).
    checkpoint : str or path, optional
        A ``.npz`` (:func:`save_checkpoint`), locked for the call, written every
        ``checkpoint_every`` epochs and after the last; with ``resume`` an
        existing one with this run's ``fingerprint`` (JSON-able) is resumed.
    schedule : callable ``epoch -> dict``, optional
        Hyperparameters set on the optimiser after each epoch (a learning-rate drop).
    progress, label, stop_after
        A progress bar (default: on a terminal only), its label; the epoch to stop after.
    blas_threads : int or None
        BLAS threads while training (``None``: as they are); one sums in the
        same order on every machine.

    Returns ``{"history", "resumed_from", "seconds"}``: the records, the epoch a
    checkpoint was loaded at (or ``None``), the wall time.
    """
    callbacks = tuple(callbacks)
    epochs, blas_threads = _check_train(params, optimizer, make_batches, epochs, callbacks, checkpoint,
                                        checkpoint_every, blas_threads, schedule)
    fp = jsonable(fingerprint)
    last = epochs - 1 if stop_after is None else min(epochs - 1, stop_after)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        history, start = [], 0
        if checkpoint is not None:
            stack.enter_context(locked(checkpoint, "checkpoint"))
            if resume and os.path.exists(checkpoint):
                history, start = _resume(checkpoint, params, optimizer, epochs, fp)
        if blas_threads is not None:
            stack.enter_context(threadpool_limits(limits=blas_threads, user_api="blas"))
        bar = stack.enter_context(_progress_bar(progress, label, epochs, start))
        for epoch in range(start, last + 1):
            losses = []
            for batch in make_batches(epoch):
                loss, grads = gradient(model, params, batch, grad)
                optimizer.step(grads)
                losses.append(loss)
            record = {"epoch": epoch, "loss": jsonable(sum(losses) / len(losses)) if losses else None}
            for callback in callbacks:
                record.update(jsonable(callback(epoch, params) or {}))
            history.append(record)
            for name, value in (schedule(epoch) if schedule is not None else {}).items():
                setattr(optimizer, name, value)  # the hyperparameters from the next epoch on
            if checkpoint is not None and ((epoch + 1) % checkpoint_every == 0 or epoch in (epochs - 1, last)):
                save_checkpoint(checkpoint, params, optimizer, history, epoch=epoch, fingerprint=fp)
            bar.set_postfix(loss=f"{np.mean(record['loss']):.4g}" if losses else None, refresh=False)
            bar.update()
    return {"history": history, "resumed_from": start - 1 if start else None, "seconds": time.perf_counter() - t0}


def _check_train(params, optimizer, make_batches, epochs, callbacks, checkpoint, checkpoint_every, blas_threads,
                 schedule):
    """:func:`train`'s arguments, checked before any work: ``(epochs, blas_threads)``."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"optimizer: expected a refattn.training.optim.Optimizer, got {type(optimizer).__name__}")
    if optimizer.params is not params:
        raise ValueError("params: must be the very dict the optimizer was built on (it updates it in place)")
    named = [("make_batches", make_batches)] + [("callbacks", c) for c in callbacks]
    for name, f in named + ([("schedule", schedule)] if schedule is not None else []):
        if not callable(f):
            raise TypeError(f"{name}: expected a callable, got {f!r}")
    if checkpoint is not None:
        _checkpoint_path(checkpoint, "checkpoint")
    check_int(checkpoint_every, "checkpoint_every", 1)
    return check_int(epochs, "epochs", 0), None if blas_threads is None else check_int(blas_threads, "blas_threads", 1)


def batch_iterator(n_examples, batch_size, *, seeds, epoch, shuffle=True, drop_last=False):
    """Index batches for every seed: a list of ``(S, B)`` integer arrays.

    Seed ``k`` shuffles with ``np.random.default_rng([seeds[k], epoch])``, so the
    order depends only on (seed, epoch): the same with one seed or ten, the
    same after a resume.
    """
    n_examples = check_int(n_examples, "n_examples", 1)
    batch_size = check_int(batch_size, "batch_size", 1)
    order = np.stack([np.random.default_rng([int(s), int(epoch)]).permutation(n_examples) if shuffle
                      else np.arange(n_examples) for s in seeds])  # (S, n)
    stop = n_examples - n_examples % batch_size if drop_last else n_examples
    return [order[:, a:a + batch_size] for a in range(0, stop, batch_size)]
