"""Rerun cells of a committed results file from their record, and compare them with what the file holds.

    python derivations/data/rerun.py FILE [--cell KEY]... [--epochs N] [--record]

FILE is a results file of ``refattn nt-sensitivity``, ``refattn sst2-sweep`` or ``refattn lm-study`` (the
``derivations/data/*.json`` files with ``settings`` and ``cells``). Each cell named by ``--cell`` (default:
every cell of the file) is rerun from what the file records: the file's settings and the settings the
cell's key names (initialisation, learning rate and attention; embedding, optimiser, units and
activation; phase, variant, rate and length), through the study's own training function, for its first
``N`` epochs (steps for lm-study; default: the whole run). Every number the file stores for those epochs
is then compared with the rerun's, rounded as the study rounds it when it writes the file: per seed the
accuracy at each stored evaluation (and per task, for a mixture), the mean training loss at each stored
epoch and the epochs to 100 % (nt-sensitivity); the dev accuracy after each epoch (sst2-sweep); the dev
loss, dev accuracy and training loss at each evaluation (lm-study). Derivation 15, section 10 says why a
prefix suffices: a run's first N epochs do not depend on how many follow.

``--record`` appends the check to the file's ``runs`` (its command, commit and machine, and under
``reproduced`` the cells, the epochs compared, how many numbers, whether every one is equal and the largest
difference) and, if every number is equal, makes that commit the file's ``commit``; refused unless the
package is at a commit without local changes. Checks of parts of a file (``--cell``) add up: a file made
from a tree with local changes counts as made by committed code once its checks cover every cell
(``tests/test_results_page.py``, ``provenance_problems``). Reruns are exact only with the BLAS kernel the file was made with (``runs[i]["machine"]``;
``OPENBLAS_CORETYPE=Haswell`` for every file here). Bad arguments are one line naming the argument, exit 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("nt-sensitivity", "sst2-sweep", "lm-study")


def kind_of(data):
    """Which study made a results file (``None`` if none of :data:`KINDS`), from its recorded command."""
    command = data.get("command") if isinstance(data, dict) else None
    if not isinstance(command, str) or not isinstance(data.get("cells"), dict) or not isinstance(
            data.get("settings"), dict):
        return None
    argv = shlex.split(command)
    return argv[1] if len(argv) > 1 and argv[0] == "refattn" and argv[1] in KINDS else None


def length_of(data, key):
    """The length of a cell's run: epochs (nt-sensitivity, sst2-sweep) or steps (lm-study)."""
    kind, s, rec = kind_of(data), data["settings"], data["cells"][key]
    if kind == "nt-sensitivity":
        return int(s["epochs"])
    if kind == "sst2-sweep":
        return len(rec["dev_accuracy"][0])
    return int(rec["curve"]["step"][-1])


# --------------------------------------------------------------------------
# One cell, rerun by its study's own code
# --------------------------------------------------------------------------


def rerun_nt(data, key, epochs):
    """``{name: (epochs, values)}`` of an nt-sensitivity cell rerun for ``epochs`` epochs: ``run_nt`` with the
    settings ``run_sensitivity`` gives the cell, under ``grid.execute`` (BLAS at one thread), rounded as
    ``_cell_record`` rounds (accuracy 4 decimals, loss 6)."""
    from refattn.studies import grid, nt_training  # noqa: PLC0415

    s = data["settings"]
    init, lr, attention = re.fullmatch(r"init=(\S+) lr=(\S+) (\S+)", key).groups()
    settings = nt_training.Settings(
        task=s["task"], context=s["n_con"], seeds=len(s["seeds"]), epochs=epochs, eval_every=s["eval_every"],
        n_test=s["n_test"], lr_drop=None if s["lr_drop"] is None else tuple(s["lr_drop"]), beta=s.get("beta", 1.0),
        dtype=s["dtype"], activation=attention, lr=float(lr), init_scale=float(init))
    with np.errstate(all="ignore"):  # a diverging seed is data, as in the study
        r, _ = grid.execute(functools.partial(nt_training.run_nt, progress=False), settings)
    out = {"accuracy": (r["eval_epochs"], np.round(r["accuracy"], 4)),
           "loss": (list(range(1, len(r["loss"]) + 1)), np.round(r["loss"], 6)),
           "epochs_to_100": r["epochs_to_100"]}
    for task, acc in r.get("accuracy_by_task", {}).items():
        out[f"accuracy {task}"] = (r["eval_epochs"], np.round(acc, 4))
    return out


def stored_nt(rec):
    """The same names as :func:`rerun_nt`, from the file's record."""
    out = {"accuracy": (rec["eval_epochs"], np.asarray(rec["accuracy"], dtype=float)),
           "loss": (rec["loss_epochs"], np.asarray(rec["loss"], dtype=float)),
           "epochs_to_100": rec["epochs_to_100"]}
    for task, acc in rec.get("accuracy_by_task", {}).items():
        out[f"accuracy {task}"] = (rec["eval_epochs"], np.asarray(acc, dtype=float))
    return out


def rerun_sst2(data, key, epochs):
    """``{"dev_accuracy": (epochs, values)}`` of an sst2-sweep cell rerun for ``epochs`` epochs:
    ``run_sst2_sweep`` on that one (embedding, optimiser, units, activation), in memory."""
    from refattn.studies import sst2_sweep  # noqa: PLC0415

    embed, optimizer, units, act = re.fullmatch(r"embed=(\d+) (\S+) (\S+) (\S+)", key).groups()
    training = f"{optimizer}/{units}"
    result = sst2_sweep.run_sst2_sweep(sst2_sweep.Settings(
        activations=(act,), seeds=len(data["settings"]["seeds"]), embed_dims=(int(embed),), trainings=(training,),
        epochs={training: epochs}, quiet=True), progress=False)
    acc = np.asarray(result["cells"][key]["dev_accuracy"], dtype=float)  # (S, epochs), 6 decimals
    return {"dev_accuracy": (list(range(1, acc.shape[1] + 1)), acc)}


def stored_sst2(rec):
    acc = np.asarray(rec["dev_accuracy"], dtype=float)
    return {"dev_accuracy": (list(range(1, acc.shape[1] + 1)), acc)}


def rerun_lm(data, key, steps):
    """The curves of an lm-study cell rerun for ``steps`` steps: ``run_lm`` of the cell's variant at its rate,
    evaluated as often as the record was."""
    from refattn.studies import grid, lm  # noqa: PLC0415

    s, rec = data["settings"], data["cells"][key]
    _, variant, lr = re.fullmatch(r"(table|tune|long) (\S+) lr=(\S+)(?: steps=\d+)?", key).groups()
    settings = lm.Settings(activations=(variant,), data=s["data"], seeds=s["seeds"], steps=steps, lr=float(lr),
                           eval_every=int(rec["curve"]["step"][0]), ngram_orders=None)
    r, _ = grid.execute(functools.partial(lm.run_lm, progress=False), settings)
    return stored_lm(r["variants"][variant])


def stored_lm(rec):
    c = rec["curve"]
    return {name: (c["step"], np.asarray(c[name], dtype=float)) for name in ("dev_loss", "dev_accuracy", "train_loss")
            if name in c}


RERUN = {"nt-sensitivity": (rerun_nt, stored_nt), "sst2-sweep": (rerun_sst2, stored_sst2),
         "lm-study": (rerun_lm, stored_lm)}


# --------------------------------------------------------------------------
# The comparison
# --------------------------------------------------------------------------


def compare(new, old, epochs):
    """Every stored number at an epoch <= ``epochs`` against the rerun's.

    Returns ``{"numbers", "identical", "max_difference", "first_difference"}``: how many numbers were
    compared, whether all are equal (NaN equal to NaN), the largest absolute difference and the first
    (epoch, name) where one differs. Epochs to 100 %: a seed's stored epoch within the prefix must be the
    rerun's; one beyond it (or never) must not be reached within the prefix.
    """
    numbers, worst, first = 0, 0.0, None
    for name, stored in old.items():
        if name == "epochs_to_100":
            for e_old, e_new in zip(stored, new[name]):
                want = e_old if e_old is not None and e_old <= epochs else None
                numbers += 1
                if e_new != want:
                    worst, first = max(worst, float("inf")), first or (want, name)
            continue
        at_old, values_old = stored
        at_new, values_new = new[name]
        where = {e: i for i, e in enumerate(at_new)}
        for j, e in enumerate(at_old):
            if e > epochs:
                continue
            a, b = values_old[..., j], values_new[..., where[e]]
            numbers += a.size
            both_nan = np.isnan(a) & np.isnan(b)
            diff = np.where(both_nan, 0.0, np.abs(a - b))
            if np.any(diff != 0) or np.any(np.isnan(diff)):
                worst = max(worst, float(np.nanmax(diff)) if np.any(~np.isnan(diff)) else float("inf"))
                first = first or (e, name)
    return {"numbers": numbers, "identical": first is None, "max_difference": worst,
            "first_difference": None if first is None else {"epoch": first[0], "what": first[1]}}


def check_cells(data, keys, epochs):
    """``{key: compare(...)}`` for the cells ``keys`` rerun for ``epochs`` (None: each cell's own length)."""
    rerun, stored = RERUN[kind_of(data)]
    out = {}
    for key in keys:
        n = length_of(data, key) if epochs is None else epochs
        out[key] = {"epochs": n, **compare(rerun(data, key, n), stored(data["cells"][key]), n)}
        print(f"{key}: {n} epochs, {out[key]['numbers']} numbers, "
              f"{'identical' if out[key]['identical'] else 'max difference %g' % out[key]['max_difference']}",
              flush=True)
    return out


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------


def _refuse(message):
    print(f"rerun.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse(argv):
    """The arguments, each checked before any work (one line naming it, exit 2)."""
    p = argparse.ArgumentParser(prog="python derivations/data/rerun.py", description=__doc__.split("\n\n")[0])
    p.add_argument("file", help="a results file of refattn nt-sensitivity, sst2-sweep or lm-study")
    p.add_argument("--cell", action="append", help="a cell's key, as the file names it (repeatable; default: all)")
    p.add_argument("--epochs", type=int, help="rerun the first N epochs (lm-study: steps) only")
    p.add_argument("--record", action="store_true", help="append the check to the file's runs and commit")
    args = p.parse_args(argv)
    path = Path(args.file)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _refuse(f"file: cannot read {args.file!r} as JSON ({exc})")
    if kind_of(data) is None:
        _refuse(f"file: {args.file!r} is not a results file of refattn {', '.join(KINDS)}")
    keys = args.cell or list(data["cells"])
    missing = [k for k in keys if k not in data["cells"]]
    if missing:
        _refuse(f"--cell: {missing[0]!r} is not a cell of {args.file} (its cells: {', '.join(data['cells'])})")
    if args.epochs is not None and not 1 <= args.epochs <= min(length_of(data, k) for k in keys):
        _refuse(f"--epochs: expected 1 to {min(length_of(data, k) for k in keys)} (the cells' length), "
                f"got {args.epochs}")
    return args, path, data, keys


def record(path, data, argv, checks):
    """Append the check to the file's ``runs`` (and make its commit the file's if every number is equal),
    written atomically under the file's lock; refused from a tree with local changes."""
    from refattn.studies.helpers import code_commit  # noqa: PLC0415
    from refattn.training.runs import _flat_lists, atomic_write, dumps, locked, machine_info  # noqa: PLC0415

    commit = code_commit()
    if commit is None or commit.endswith("-dirty"):
        _refuse(f"--record: the package is not at a commit without local changes ({commit}); commit first")
    identical = all(c["identical"] for c in checks.values())
    entry = {"command": " ".join(["python", "derivations/data/rerun.py", *map(shlex.quote, argv)]), "commit": commit,
             "machine": machine_info(),
             "reproduced": {"replaces": data.get("commit"), "epochs": sorted({c["epochs"] for c in checks.values()}),
                            "cells": sorted(checks), "numbers": sum(c["numbers"] for c in checks.values()),
                            "identical": identical,
                            "max_difference": max(c["max_difference"] for c in checks.values())}}
    with locked(path, "file"):
        data = json.loads(path.read_text(encoding="utf-8"))  # as it is now, under the lock
        data["runs"] = list(data.get("runs", [])) + [entry]
        if identical:
            data["commit"] = commit
        text = (_flat_lists(dumps(data, indent=1)) + "\n").encode("utf-8")
        atomic_write(path, lambda fh: fh.write(text))
    return entry


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args, path, data, keys = parse(argv)
    checks = check_cells(data, keys, args.epochs)
    if args.record:
        entry = record(path, data, argv, checks)
        print(f"recorded in {path}: {json.dumps(entry['reproduced'])}")
    return 0 if all(c["identical"] for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
