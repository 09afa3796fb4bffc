"""Small helpers that every notebook shares: where figures go, and how large a run is.

Notebooks (``notebooks/*.py``) read two environment variables:

* ``REFATTN_FIGDIR``: when set, :func:`save` writes each figure there as a PNG
  (the test suite sets it to a temporary folder and checks that figures appear);
* ``REFATTN_SMALL=1``: :func:`small` is true, and notebooks use small grids and
  short runs (the test suite runs every notebook this way).
"""

from __future__ import annotations

import os

__all__ = ["small", "figdir", "save", "plot_score_dynamics", "plot_nt_run", "plot_polarity", "plot_interpret"]


def small() -> bool:
    """True when ``REFATTN_SMALL=1``: run at the small size the test suite uses.

    ``REFATTN_SMALL`` may be unset, empty, ``0`` or ``1``; anything else is an
    error naming the variable (``yes`` would otherwise silently mean "not small").
    """
    value = os.environ.get("REFATTN_SMALL", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"REFATTN_SMALL: expected 0 or 1, got {value!r}")
    return value == "1"


def figdir():
    """The folder named by ``REFATTN_FIGDIR`` (created if needed), or ``None``."""
    path = os.environ.get("REFATTN_FIGDIR")
    if path:
        os.makedirs(path, exist_ok=True)
    return path or None


def save(fig, name: str, dpi: int = 110):
    """Save ``fig`` as ``REFATTN_FIGDIR/name.png`` when that variable is set.

    Returns the path written, or ``None`` when no folder is set.
    """
    if not isinstance(name, str) or not name or os.sep in name:
        raise ValueError(f"name: expected a file name without a folder, got {name!r}")
    folder = figdir()
    if not folder:
        return None
    path = os.path.join(folder, name + ".png")
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


# --------------------------------------------------------------------------
# Figures from experiment data (refattn.studies)
# --------------------------------------------------------------------------

_GROUP_COLOURS = {"positive": "#b2182b", "negative": "#2166ac", "neutral": "#7f7f7f"}


def plot_score_dynamics(raw):
    """Predicted (Proposition 1, integrated) vs measured mean score per token group,
    one panel per (activation, parameterisation), and the step-size check.

    ``raw`` is the second value of
    ``refattn.studies.score_dynamics.run_dynamics(return_raw=True)``.
    """
    import matplotlib.pyplot as plt  # noqa: PLC0415

    n = len(raw)
    fig, axes = plt.subplots(2, n, figsize=(3.4 * n, 6.2), squeeze=False)
    for j, item in enumerate(raw):
        tr, sc = item["trajectories"], item["step_check"]
        ax = axes[0, j]
        for g, colour in _GROUP_COLOURS.items():
            ax.plot(tr["step"], tr[f"measured_{g}"], color=colour, label=f"{g}: measured")
            ax.plot(tr["step"], tr[f"predicted_{g}"], color=colour, ls="--", label=f"{g}: Prop. 1")
        ax.set_title(f"{tr['activation']}, {tr['kind']} Q, K", fontsize=9)
        ax.set_xlabel("gradient step")
        ax = axes[1, j]
        ax.loglog(sc["etas"], sc["vs_prop1"], "o-", label="vs Proposition 1")
        ax.loglog(sc["etas"], sc["vs_exact"], "s--", label="vs $-J\\nabla R$")
        ax.set_xlabel("step size $\\eta$")
    axes[0, 0].set_ylabel("mean token score")
    axes[1, 0].set_ylabel("rel. error of $\\Delta s/\\eta$")
    axes[0, 0].legend(fontsize=6)
    axes[1, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_nt_run(result):
    """Accuracy per evaluation (every seed thin, the mean thick) and the training loss
    of one ``refattn.studies.nt_training.run_nt`` result."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.4))
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


def plot_polarity(result):
    """TanhMax Fig. 2 style: each token's score against its mean weight, coloured by
    its gamma_e group, one panel per activation (first seed); from
    ``refattn.studies.polarity.run_polarity``."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    acts = list(result["activations"])
    groups = np.asarray(result["groups"])
    fig, axes = plt.subplots(1, len(acts), figsize=(3.3 * len(acts), 3.2), squeeze=False)
    codes = {"neutral": 0, "positive": 1, "negative": 2}
    for ax, act in zip(axes[0], acts):
        tok = result["activations"][act]["tokens_first_seed"]
        s, w, seen = np.asarray(tok["score"]), np.asarray(tok["weight"]), np.asarray(tok["seen"])
        for name in ("neutral", "positive", "negative"):
            sel = seen & (groups == codes[name])
            ax.scatter(s[sel], w[sel], s=6, color=_GROUP_COLOURS[name], label=name, alpha=0.7)
        r = result["activations"][act]
        ax.set_title(f"{act}: seed {r['per_seed'][0]['seed']}, {r['per_seed'][0]['pattern']}", fontsize=9)
        ax.set_xlabel("token score")
    axes[0, 0].set_ylabel("mean attention weight")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_interpret(result, paper=None):
    """TanhMax Table 1 as bars: mean Kendall tau (signed gradient x input and signed
    leave-one-out) per activation and true class, ours with their std, the paper's SST
    values as black markers; from ``refattn.studies.interpret.run_interpret``."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    if paper is None:
        from .studies.interpret import PAPER_TABLE1 as paper  # noqa: PLC0415
    acts = list(result["activations"])
    measures = (("tau_g", "tau_g: w vs gradient x input"), ("tau_loo", "tau_loo: w vs leave-one-out"))
    classes = sorted({c for a in acts for c in result["activations"][a]["classes"]})
    fig, axes = plt.subplots(1, len(measures), figsize=(4.2 * len(measures), 3.2), squeeze=False, sharey=True)
    width = 0.8 / max(len(classes), 1)
    for ax, (key, title) in zip(axes[0], measures):
        for j, c in enumerate(classes):
            x = np.arange(len(acts)) + (j - (len(classes) - 1) / 2) * width
            rows = [result["activations"][a]["classes"].get(c, {}).get(key, {}) for a in acts]
            mean = [r.get("mean", np.nan) if r.get("mean") is not None else np.nan for r in rows]
            std = [r.get("std", 0.0) or 0.0 for r in rows]
            ax.bar(x, mean, width, yerr=std, capsize=3, label=f"ours, class {c}", alpha=0.8)
            ref = [paper.get(c, {}).get(a, {}).get(key, (np.nan,))[0] for a in acts]
            ax.plot(x, ref, "k_", markersize=14, mew=2, label="TanhMax Table 1 (SST)" if j == 0 else None)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xticks(np.arange(len(acts)), acts)
        ax.set_title(title, fontsize=9)
    axes[0, 0].set_ylabel("mean Kendall tau")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{result['settings']['data']['data']}: {result['settings']['n_instances']} test instances", fontsize=9)
    fig.tight_layout()
    return fig
