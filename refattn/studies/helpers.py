"""What several studies share: where the SST-2 data is, which commit ran, the maximal phrases of a corpus.

A study takes from another study only its ``run_*`` function, its constants and
its ``Settings``; the helpers those studies need besides live here (and the rank
test in :mod:`refattn.studies.statistics`). No mathematics here: these read
folders, files and git.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import numpy as np

import refattn

from ..training.tasks.sst2 import ENV_VAR

__all__ = ["DATA_HELP", "sibling_data_dir", "resolve_data_dir", "data_digests", "nonempty", "maximal_phrases",
           "code_commit", "number_name", "cell_key", "check_cells"]

#: The help of every command's SST-2 folder option.
DATA_HELP = ("SST-2 folder holding train.tsv and dev.tsv, never downloaded (default $REFATTN_SST2, else the "
             "shared data folder beside the repository)")


def number_name(x) -> str:
    """``x`` as a cell's name and a report write it: the short form (``0.02``, ``1``), unless that form
    reads back as another number, then every digit that tells it apart (``0.020000001``), so that two
    distinct values never share a name (and a resumed file never takes one for the other)."""
    x = float(x)
    short = f"{x:g}"
    return short if float(short) == x else repr(x)


def sibling_data_dir():
    """``<parent of the repository>/shared/data/sst2``: the project's data lives beside the repository."""
    return Path(refattn.__file__).resolve().parents[2] / "shared" / "data" / "sst2"


def resolve_data_dir(path=None, option="--data"):
    """The SST-2 folder holding ``train.tsv`` and ``dev.tsv``: ``path`` (given by ``option``), else
    ``$REFATTN_SST2``, else :func:`sibling_data_dir`; never downloaded (docs/cli.md, environment variables)."""
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"data: expected a folder path (str or os.PathLike), got {type(path).__name__}")
        folder, source = Path(path).expanduser(), option
    elif os.environ.get(ENV_VAR):
        folder, source = Path(os.environ[ENV_VAR]).expanduser(), f"${ENV_VAR}"
    else:
        folder, source = sibling_data_dir(), "the default location"
        if not folder.is_dir():
            raise FileNotFoundError(f"data: no SST-2 folder found; pass --data DIR (or data=DIR) or set "
                                    f"${ENV_VAR} to the folder holding GLUE's train.tsv and dev.tsv "
                                    f"(looked in {str(folder)!r}; nothing is downloaded)")
    if not folder.is_dir():
        raise FileNotFoundError(f"{source}: {str(folder)!r} is not a folder; pass {option} DIR or set "
                                f"${ENV_VAR} to the folder holding SST-2's train.tsv and dev.tsv")
    missing = [f for f in ("train.tsv", "dev.tsv") if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{source}: {str(folder)!r} has no {' or '.join(missing)}; pass {option} DIR "
                                f"or set ${ENV_VAR} to the folder holding SST-2's train.tsv and dev.tsv")
    return folder


def data_digests(folder):
    """The SHA-256 of the SST-2 folder's ``train.tsv`` and ``dev.tsv``: what a results file records of the
    data its cells were trained on, so that a resume on other data is refused (docs/cli.md, "Results files")."""
    out = {}
    for name in ("train.tsv", "dev.tsv"):
        h = hashlib.sha256()
        with open(Path(folder) / name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        out[name] = h.hexdigest()
    return out


def nonempty(sentences, labels):
    """Drop sentences with no token (an all-padding attention row has no normaliser)."""
    keep = np.array([bool(s.split()) for s in sentences], dtype=bool)
    return [s for s, k in zip(sentences, keep) if k], labels[keep], int((~keep).sum())


def maximal_phrases(phrases):
    """The phrases that are not a (token-aligned) substring of another phrase.

    GLUE's SST-2 training split lists every phrase of the treebank's training
    sentences, so most lines are pieces of longer lines. Keeping only the
    maximal ones recovers (close to) the sentences: phrases are visited
    longest first, and each is kept unless it occurs, between spaces, inside
    a phrase already kept. The candidates are found through an index of the
    kept phrases' word 1-, 2- and 3-grams (a phrase of at most three words is
    contained exactly when its n-gram is in the index), so the pass takes
    about a second on GLUE's 67k lines. No maths here; it reads data.

    Parameters
    ----------
    phrases : sequence of str
        White-space tokenised phrases.

    Returns
    -------
    list of str
        The maximal phrases (stripped, duplicates removed), in their original order.
    """
    order = {}
    for i, p in enumerate(phrases):
        if not isinstance(p, str):
            raise TypeError(f"phrases: expected str items, got {type(p).__name__} at index {i}")
        p = " ".join(p.split())
        if p and p not in order:
            order[p] = i
    index = ({}, {}, {})  # n-gram (n = 1, 2, 3) -> ids of kept phrases containing it
    kept = []  # " phrase " with spaces around, for token-aligned `in`
    for p in sorted(order, key=lambda s: (-len(s), s)):
        toks = p.split()
        k = min(3, len(toks))
        cands = index[k - 1].get(tuple(toks[:k]), ())
        if len(toks) <= 3:
            inside = bool(cands)
        else:
            padded = f" {p} "
            inside = any(padded in kept[j] for j in cands)
        if inside:
            continue
        j = len(kept)
        kept.append(f" {p} ")
        for n in (1, 2, 3):
            for a in range(len(toks) - n + 1):
                ids = index[n - 1].setdefault(tuple(toks[a:a + n]), [])
                if not ids or ids[-1] != j:
                    ids.append(j)
    return sorted((s.strip() for s in kept), key=lambda s: order[s])


def code_commit():
    """The git commit of the code that runs, or None outside a checkout.

    ``"<hash>-dirty"`` when the package itself (``refattn/``) differs from
    that commit; changed documents and result files (a study rewrites its
    own file in ``derivations/data/`` as it runs) do not count.
    """
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # refattn/
    try:
        head = subprocess.run(["git", "-C", package, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", package, "status", "--porcelain", "--untracked-files=no", "--", "."],
                               capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def cell_key(init_scale, lr, activation):
    """The results file's name for one cell and activation, e.g. ``"init=0.5 lr=0.02 expressive"``; two
    distinct values never share a name (:func:`refattn.studies.helpers.number_name`)."""
    return f"init={number_name(init_scale)} lr={number_name(lr)} {activation}"


def check_cells(result):
    """Every cell of ``result`` (a results file of ``refattn nt-sensitivity``, loaded; read by it and by
    ``refattn curves``) is a cell of its grid, and every number a table
    reads agrees with the curves it was derived from (a file edited by hand is refused, not reported as
    measured): per seed, ``final_accuracy`` is the accuracy curve's last value, ``epochs_to_100`` is the
    first evaluation at 100 % that the stored curve allows (an evaluation's epoch, none at an earlier stored
    evaluation, 100 % at its own if stored; None only if no stored evaluation is at 100 %), every
    accuracy lies in [0, 1], ``diverged`` is true or false, ``late_change`` a change of an accuracy; the
    same for each task of a mixture. ValueError naming the cell otherwise."""
    s = result["settings"]
    keys = {cell_key(i, lr, a) for i in s["init_scales"] for lr in s["lrs"] for a in s["attentions"]}
    for key, rec in result["cells"].items():
        if key not in keys:
            raise ValueError(f"cell {key!r} is not a cell of its grid (init_scales {s['init_scales']}, lrs "
                             f"{s['lrs']})")
        try:
            _check_record(rec, s)
        except ValueError as exc:
            raise ValueError(f"cell {key!r}: {exc}") from None


def _check_record(rec, s):
    """One cell record against its curves (:func:`check_cells`)."""
    seeds = len(s["seeds"])
    per_seed = {k: len(rec[k]) for k in ("epochs_to_100", "final_accuracy", "diverged") if k in rec}
    if set(per_seed.values()) != {seeds}:
        raise ValueError(f"it holds {per_seed} values per seed, for {seeds} seeds")
    epochs = rec["eval_epochs"]
    curves = {"accuracy": (rec["accuracy"], rec["final_accuracy"])}
    for t, a in (rec.get("accuracy_by_task") or {}).items():
        curves[f"accuracy_by_task {t}"] = (a, (rec.get("final_accuracy_by_task") or {}).get(t))
    for name, (curve, finals) in curves.items():
        acc = np.asarray(curve, dtype=float)  # (seeds, evaluations), as the plot reads it
        if acc.shape != (seeds, len(epochs)):
            raise ValueError(f"its curve {name!r} does not fit its seeds and evaluations")
        if not np.all((acc >= 0) & (acc <= 1)):
            raise ValueError(f"its curve {name!r} holds {acc[~((acc >= 0) & (acc <= 1))][0]!r}, not an accuracy")
        last = np.asarray(finals if finals is not None else [None] * seeds, dtype=float)
        if last.shape != (seeds,) or not np.all(np.abs(last - acc[:, -1]) <= 1e-4):
            raise ValueError(f"its final {name} {finals} is not its curve's last value {acc[:, -1].tolist()}")
    for seed, (e, row) in enumerate(zip(rec["epochs_to_100"], np.asarray(rec["accuracy"], dtype=float))):
        hits = [x for x, v in zip(epochs, row) if v >= 1.0]
        if e is None:
            ok = not hits
        else:
            ok = isinstance(e, int) and not isinstance(e, bool) and 1 <= e <= s["epochs"] \
                 and (e % s["eval_every"] == 0 or e == s["epochs"])  \
                 and not any(x < e for x in hits) and (e not in epochs or e in hits)
        if not ok:
            if e in epochs and e not in hits:
                said = f"{row[epochs.index(e)]:g} at epoch {e}"
            else:
                said = f"100 % first at epoch {hits[0]}" if hits else "never 100 %"
            raise ValueError(f"epochs_to_100 {e!r} of seed {seed} contradicts its accuracy curve ({said})")
    if not all(isinstance(d, bool) for d in rec.get("diverged", ())):
        raise ValueError(f"its diverged {rec['diverged']} is not true or false per seed")
    changes = [rec["late_change"], *(rec.get("late_change_by_task") or {}).values()]
    if not all(c is None or isinstance(c, (int, float)) and not isinstance(c, bool) and abs(c) <= 1 for c in changes):
        raise ValueError(f"its late_change {changes} is not a change of an accuracy")
