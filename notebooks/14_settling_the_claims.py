# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 14 — Settling the papers' training claims: grids, long runs, verdicts with their uncertainty
#
# A verdict on a training claim should say how sure it is. The runs behind
# the verdicts take hours, so they are kept in the repository as small JSON files
# under `derivations/data/`, each with the command that made it, and this
# notebook draws them without retraining:
#
# 1. the speed that made the grids affordable (`benchmarks/results/nt_epoch.json`);
# 2. Expressive's Figs. 3-7 over initialisation scale × learning rate, EA
#    against DPA, 16 seeds per cell, and the long runs where a verdict
#    hinged (`refattn.studies.nt_sensitivity`;
#    `derivations/15-nt-experiments.md`, section 11);
# 3. the toy language model with a tuned learning rate and longer runs
#    (`refattn.studies.lm_study`; `derivations/19-toy-lm.md`, section 8);
# 4. TanhMax's Table 2 over a small sweep (`refattn.studies.sst2_sweep`;
#    `derivations/14-sst2.md`, section 9).
#
# `REFATTN_SMALL=1` (CI) also reruns one tiny grid cell live, to show the
# code path the committed files came from; `REFATTN_FIGDIR` saves the figures.

# %%
import json
import os
from pathlib import Path

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from refattn.studies import lm_study, nt_sensitivity, sst2_sweep  # noqa: E402
from refattn.plots import save, start  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script
ROOT = Path.cwd() if (Path.cwd() / "derivations").is_dir() else Path.cwd().parent
DATA = ROOT / "derivations" / "data"


def load(name):
    """A committed results file, or None (with the command that makes it) if it is not there."""
    path = DATA / name
    if not path.exists():
        print(f"{path} is not in this checkout")
        return None
    return json.loads(path.read_text())


# %% [markdown]
# ## 1. The speed that made the grids affordable
#
# `benchmarks/bench_nt.py` times `refattn nt` in Fig. 3's setting (N16T2,
# $N_\text{con}=32$, 16 seeds batched) with the code of commit 0b5003d, before
# the step was made faster (float64), and with this checkout in float64 and
# float32, interleaved in one run, so the ratios share one machine load; each
# program's time per epoch is its median at steady state (the first 30 epochs
# and the last left out), for each OpenBLAS kernel of the run.

# %%
bench = json.loads((ROOT / "benchmarks" / "results" / "nt_epoch.json").read_text())
names = ["baseline", "float64", "float32"]
fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
width = 0.8 / len(bench["kernels"])
for k, run in enumerate(bench["kernels"]):
    train = [run["times"][n]["median_ms"] for n in names]
    evals = [sorted(run["times"][n]["eval_seconds"])[1] for n in names]  # the median of three
    x = np.arange(len(names)) + (k - (len(bench["kernels"]) - 1) / 2) * width
    # the epoch's speed-up as the benchmark reports it (the median of per-pass ratios); the
    # evaluation's, as the ratio of the medians
    ups = [1.0] + [run["speedup_over_baseline"][n]["ratio"] for n in names[1:]]
    for ax, vals, ratios in zip(axes, (train, evals), (ups, [evals[0] / v for v in evals])):
        ax.bar(x, vals, width, label=run["kernel_asked"])
        for xi, v, r in zip(x, vals, ratios):
            ax.text(xi, v, f"{r:.1f}x", ha="center", va="bottom", fontsize=7)
for ax, label in zip(axes, ("ms per training epoch", "s per evaluation")):
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel(label)
axes[0].legend(title="BLAS kernel", fontsize=7)
fig.suptitle(f"NT training, Fig. 3 setting, against commit {bench['baseline_commit'][:7]} "
             f"({bench['machine']['cpu']}, {bench['machine']['cores']} cores)", fontsize=9)
fig.tight_layout()
save(fig, "14_nt_speed")
for v in bench["verdicts"]:
    print(v["setting"]["task"], "float32 vs float64: epochs to 100 % identical per seed:",
          v["epochs_to_100_identical"], "; largest final-accuracy difference:", v["largest_final_accuracy_difference"])

# %% [markdown]
# ## 2. Expressive's figures over the grid
#
# For each figure: the table of medians with their interquartile range, the
# difference of medians, the rank test's p-value (a permutation test of
# Mann–Whitney's statistic, 20,000 splits) and whether each run had settled
# (its mean accuracy moved less than 0.02 over its last third); then the
# per-seed values and the mean curves. Beside the grids (`fig3`, `fig4`,
# `fig6`, `fig7`): the cells where the verdict hinged, run longer
# (`fig3-long` 12,000 epochs, `fig3-30k` 30,000, `fig6-long` 15,000,
# `fig7-long` 3,000); the text's other context lengths (`fig3-16`,
# `fig3-52`, `fig7-128`); Fig. 5 (`fig5`, N16T5 at the paper's 2,000
# epochs; `fig5-256` and `fig5-256-lr0.32` the text's $N_\text{con} = 256$,
# one learning rate each); the score scale
# $\beta = 1/\sqrt{N_\text{con}}$ (`fig3-beta`); and Fig. 3's ×0.5 cells
# in float64 (`fig3-float64`), to show float32 changes no verdict.
# Derivation 15, section 11, reads them.

# %%
FILES = ("fig4", "fig3", "fig3-long", "fig3-30k", "fig3-52", "fig3-16", "fig3-beta", "fig3-float64", "fig5",
         "fig5-256", "fig5-256-lr0.32", "fig6", "fig6-long", "fig7", "fig7-long", "fig7-128")
studies = {}
for fig_name in FILES:
    result = load(f"15-sensitivity-{fig_name}.json")
    if result is None:
        continue
    studies[fig_name] = result
    print(result["runs"][-1]["command"])
    print(nt_sensitivity.report(result))
    print()
    save(nt_sensitivity.plot(result), "14_sensitivity_" + fig_name.replace("-", "_").replace(".", ""))

# %% [markdown]
# Where both attentions end at 100 %, the final accuracy cannot separate
# them; the epochs to 100 % can (Fig. 3's learning rate 0.32, and the long
# runs):

# %%
for fig_name in ("fig3", "fig3-long", "fig3-52", "fig6-long"):
    if fig_name in studies:
        print(nt_sensitivity.report(studies[fig_name], measure="epochs_to_100"))
        print()

# %% [markdown]
# ### The verdicts at a glance
#
# One panel per claim: each grid cell red where EA is significantly ahead
# (p < 0.05), blue where DPA is, white where neither; "~" marks a cell whose
# curves were still moving at the end of the run.

# %%
PANELS = (("fig3", None, "Fig. 3: final accuracy"), ("fig3", "epochs_to_100", "Fig. 3: epochs to 100 %"),
          ("fig3-beta", None, "Fig. 3 at beta = 1/sqrt(32): final acc."),
          ("fig4", None, "Fig. 4: epochs to 100 %"), ("fig5", None, "Fig. 5: final accuracy"),
          ("fig6", None, "Fig. 6: final accuracy on N16T2"), ("fig7", None, "Fig. 7: final accuracy"))
panels = [p for p in PANELS if p[0] in studies]
if panels:
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, grid_axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 3.0 * rows), squeeze=False)
    for ax in grid_axes.flat[len(panels):]:
        ax.axis("off")
    nt_sensitivity.plot_verdict_map([studies[name] for name, _, _ in panels],
                                    measures=[measure for _, measure, _ in panels],
                                    titles=[title for _, _, title in panels], axes=list(grid_axes.flat[:len(panels)]))
    save(fig, "14_verdict_map")

# %% [markdown]
# The same code path, live and tiny (2 seeds, 20 epochs; in CI this checks
# that the committed files' producer still runs):

# %%
if SMALL:
    tiny = nt_sensitivity.run_sensitivity(nt_sensitivity.Settings("fig4", seeds=2, epochs=20, eval_every=10,
                                                                  init_scales=(1.0,), lrs=(0.32,), n_test=5),
                                          progress=False)
    print(nt_sensitivity.report(tiny))

# %% [markdown]
# ## 3. The language model: tuned, longer, paired gaps
#
# Left: dev loss against learning rate for the four variants whose verdicts
# the papers state (same budget for all). Right: the long runs' gap to
# softmax (dev accuracy, percentage points, paired over seeds ± one standard
# error) against steps: a gap that still moves at the end is not a verdict.

# %%
lm = load("19-lm-study.json")
if lm is not None:
    print(lm["command"])
    print(lm_study.report(lm))
    fig = lm_study.plot(lm)
    save(fig, "14_lm_gaps")

# %% [markdown]
# ## 4. TanhMax's Table 2 over a sweep
#
# Dev accuracy (mean over 5 seeds) after every epoch, one panel per setting;
# the best (setting, epoch) of each activation is its Table 2 number.

# %%
sst = load("14-sst2-sweep.json")
if sst is not None:
    print(sst["command"])
    print(sst2_sweep.report(sst))
    fig = sst2_sweep.plot(sst)
    save(fig, "14_sst2_sweep")
