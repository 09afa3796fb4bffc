# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 04 — Expressive's NT tasks, and expressive vs dot-product attention on them
#
# Expressive (Gros) compares dot-product attention (DPA, its Eq. 1,
# $a_{mk} \propto e^{Q_m\cdot K_k}$) with expressive attention (EA, Eq. 2,
# $a_{mk} \propto z^2/(1+z^2)$ with $z = Q_m\cdot K_k$) on a family of
# synthetic prediction tasks, the *NT tasks*:
#
# $$\text{NT (Eq. 4):}\quad x(t) = [x(t-\tau) + x(t-1-\tau)] \,\%\, N,$$
# $$\text{NT-S (Eq. 8):}\quad x(t) = \Big[\textstyle\sum_{\Delta t=1}^{\tau+1} x(t-\Delta t)\Big] \,\%\, N,$$
# $$\text{NT-R (Eq. 9):}\quad \text{NT-S if } x(t-\tau-1) = 0, \text{ NT otherwise.}$$
#
# This notebook
#
# 1. draws series of each variant and shows their cycle structure (Expressive
#    Eqs. 5-7; `refattn.training.tasks.nt`, `derivations/10-nt-tasks.md`);
# 2. trains the paper's 802-parameter model (`refattn.training.models.nt.NTModel`,
#    `derivations/11-nt-model.md`) on N2T5 with EA and with DPA, all seeds
#    in one batched program, and plots accuracy over epochs (Fig. 4, top);
# 3. shows the attention matrices at a few epochs on a log10 colour scale
#    (Fig. 4, bottom) and measures their dynamic range.
#
# The full figures (Figs. 3, 6, 7) take minutes to hours; they are run by
# `refattn.studies.nt_figures` and recorded in
# `derivations/15-nt-experiments.md`. `REFATTN_SMALL=1` runs this notebook
# at a tiny size (as the test suite does); `REFATTN_FIGDIR` saves the figures.

# %%
import os

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from refattn.studies import nt_figures  # noqa: E402
from refattn.studies.nt_figures import LOG_FLOOR, plot_attention_snapshots, run_fig4  # noqa: E402
from refattn.training.models.nt import count_params  # noqa: E402
from refattn.plots import save, start  # noqa: E402
from refattn.training.tasks.nt import cycle_structure, generate, mean_cycle_length, state_cycles  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script

# %% [markdown]
# ## 1. The task family
#
# XOR is N2T1: from the initial condition 1, 1 the series is the cycle
# 011 (Eq. 5).

# %%
print("N2T1 (XOR) from 1,1:", generate("N2T1", length=12, init=[1, 1])[0].tolist())
rng = np.random.default_rng(0)
series = {name: generate(name, length=60, batch=1, rng=np.random.default_rng(1))[0]
          for name in ("N16T2", "N16T2-S", "N16T2-R")}
for name, x in series.items():
    print(f"{name:8s}", " ".join(f"{v:2d}" for v in x[:24]), "...")

# %% [markdown]
# All three start from the same three random symbols (the same generator
# seed), and part after them: NT adds the two oldest symbols of the window,
# NT-S all three, NT-R switches to NT-S whenever the oldest one is 0.
# Every rule reads only the last $\tau+1$ symbols, so the *window* is the
# state of a finite deterministic map with $N^{\tau+1}$ states, and every
# series ends on a cycle.

# %%
fig, ax = plt.subplots(figsize=(9, 2.2))
ax.imshow(np.stack(list(series.values())), aspect="auto", cmap="tab20", interpolation="nearest")
ax.set_yticks(range(len(series)), list(series))
ax.set_xlabel("t")
ax.set_title("one series of each variant, colour = symbol (N = 16, tau = 2)", fontsize=9)
fig.tight_layout()
save(fig, "04_nt_series")

# %% [markdown]
# The cycle structure is computed exactly (pointer doubling over all states,
# `state_cycles`). Expressive Eq. 7 for N16T2 reads
# $64\cdot 56 + 16\cdot 28 + 4\cdot 14 + 1\cdot 7 + 1\cdot 1 = 4096 = 16^3$;
# section 5 quotes mean cycle lengths 47.6 (N16T2) and 23.8 (N16T2-S), which
# are the mean over *cycles* (derivation 10, section 7). NT-R's map is not
# invertible: some states are transient and lead onto a cycle.

# %%
for name in ("N2T1", "N2T5", "N16T2", "N16T2-S", "N16T2-R"):
    sc = state_cycles(name)
    s = sc.structure
    terms = " + ".join(f"{c}*{L}" for L, c in s.items())
    extra = "" if sc.invertible else f"   ({int((~sc.on_cycle).sum())} transient states)"
    print(f"{name:8s} {terms} = {sum(L * c for L, c in s.items())}; "
          f"mean cycle length {mean_cycle_length(s):.1f}{extra}")
assert cycle_structure("N16T2") == {56: 64, 28: 16, 14: 4, 7: 1, 1: 1}  # Expressive Eq. 7

# %%
fig, ax = plt.subplots(figsize=(6, 3))
for name, colour in (("N16T2", "#1f5fbf"), ("N16T2-S", "#800000")):
    s = cycle_structure(name)
    L = np.array(list(s))
    ax.bar(np.arange(len(L)) + (0 if name == "N16T2" else 0.4), [L_ * s[L_] for L_ in L], width=0.4,
           color=colour, label=name)
    for i, L_ in enumerate(L):
        ax.text(i + (0 if name == "N16T2" else 0.4), L_ * s[L_], str(L_), ha="center", va="bottom", fontsize=6)
ax.set_xlabel("cycles, longest first (bar label: cycle length)")
ax.set_ylabel("states on cycles of that length")
ax.legend(fontsize=7)
fig.tight_layout()
save(fig, "04_nt_cycles")

# %% [markdown]
# ## 2. EA vs DPA on N2T5 (Expressive, Fig. 4)
#
# N2T5 has just two cycles (the default state and one of length 63), yet
# the model is small: with $d = N = 2$ and $N_\text{con} = 16$ it has 802
# parameters, "one attention head per token". Expressive reports that DPA
# needs substantially longer than EA to reach 100 %.

# %%
print("parameters at N = 2, N_con = 16:", count_params(2, 16))
result = run_fig4(nt_figures.Settings("fig4", seeds=4 if SMALL else 16, epochs=150 if SMALL else 2000,
                                      eval_every=25 if SMALL else 20, n_test=20 if SMALL else 100,
                                      snapshot_epochs=(0, 150) if SMALL else (0, 200, 2000)))
print(nt_figures.report(result))

# %% [markdown]
# Each seed's accuracy (thin) and the mean (thick), EA blue and DPA maroon
# as in the paper, the training loss times 0.75 as circles; below, the
# attention matrices of the first seed for one fixed test context.
# Accuracy is the fraction of 50 symbols continued greedily that are right
# (the model reads its own predictions), on fresh test series.

# %%
fig = nt_figures.plot(result)
save(fig, "04_nt_fig4")

# %% [markdown]
# ## 3. Attention on a log10 scale
#
# Expressive weights are $\ge 0$ and can be very small: $z^2/(1+z^2)$ goes to 0
# quadratically as $Q_m \perp K_k$, while a softmax weight is at least
# $e^{-(\max s - \min s)}/n$. On the log10 scale weights below
# `LOG_FLOOR` are drawn at the floor (never reached here); the masked entries
# above the diagonal are blank. The "dynamic range" is the number of decades
# between the largest and the smallest causal weight of a matrix (row 1,
# which holds a single weight 1, left out).

# %%
print(f"floor on the log10 scale: {LOG_FLOOR:g}")
for att, by_epoch in result["dynamic_range"].items():
    print(att, {e: round(float(np.median(v)), 2) for e, v in by_epoch.items()}, "(median over seeds, decades)")
last = -1
snap = {"epochs": [result["runs"][0]["snapshots"]["epochs"][last]],
        "attention": {r["attention"]: [r["snapshots"]["attention"][last][s] for s in range(min(3, len(r["seeds"])))]
                      for r in result["runs"]}}
snap["epochs"] = [f"{snap['epochs'][0]}, seed {s}" for s in range(len(next(iter(snap["attention"].values()))))]
fig = plot_attention_snapshots(snap)
save(fig, "04_nt_attention_log10")

# %% [markdown]
# The larger range of EA is visible from the first epoch: it is a property of
# $z^2/(1+z^2)$ at small $z$, present at initialisation, not something
# training creates. Whether it explains EA's faster escape from the 50 %
# plateau is not settled by these pictures (derivation 15, section 4).
