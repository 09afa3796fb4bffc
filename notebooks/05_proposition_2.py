# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 05 — Proposition 2 of TanhMax, corrected
#
# TanhMax (Proposition 2, Eq. 10) states that when the scores range over a
# vector space $S$ containing $\mathbf 1$,
#
# $$\{\mathrm{softmax}(z) : z\in S\} \subset \{\mathrm{tanhmax}(z) : z\in S\},
# \qquad \mathrm{tanhmax}(z)_i = \frac{\sinh z_i}{\sum_k\cosh z_k}\ \text{(Eq. 6)}.$$
#
# As printed this is false: $\sum_i|\sinh z_i| < \sum_k\cosh z_k$, so every
# TanhMax output has $\ell_1$ norm below 1, and every softmax output sums
# to 1. The two ranges never meet. `derivations/05-proposition-2.md` proves
# what is true instead; this notebook draws it, using `refattn.theory.proposition2`:
#
# * (a) tanhmax maps $\mathbb R^n$ one-to-one onto the open $\ell_1$ ball
#   $B_1 = \{w : \sum_i|w_i| < 1\}$;
# * (b) $\mathrm{tanhmax}(s + c\mathbf 1)\to\mathrm{softmax}(s)$ as
#   $c\to\infty$, with an exact $\ell_1$ gap $\sim 2(B/A)e^{-2c}$, where
#   $A = \sum_k e^{s_k}$ and $B = \sum_k e^{-s_k}$: softmax's range lies in the
#   *closure* of TanhMax's;
# * (c) what survives of "breaking the softmax bottleneck": the matrix of
#   $\log|\phi(Ev)|$ (an output matrix $E$, many context vectors $v$) has
#   full rank for TanhMax, rank $d+1$ for softmax.
#
# `REFATTN_SMALL=1` makes the grids small; `REFATTN_FIGDIR` is where the
# figures go.

# %%
import os

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import LogLocator  # noqa: E402
import numpy as np  # noqa: E402

from refattn import activation  # noqa: E402
from refattn.plots import save, start  # noqa: E402
from refattn.theory.proposition2 import (  # noqa: E402
    closure_gap,
    closure_gap_closed_form,
    in_tanhmax_range,
    log_rank,
    tanhmax_l1_margin,
    tanhmax_l1_norm,
    tanhmax_preimage,
)

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script
np.set_printoptions(precision=6, linewidth=100)
tanhmax, softmax = activation("tanhmax"), activation("softmax")

# %% [markdown]
# ## The counterexample in one line
#
# $\cosh x - |\sinh x| = e^{-|x|} > 0$, so
# $1 - \sum_i|\mathrm{tanhmax}(s)_i| = \sum_i e^{-|s_i|}/\sum_k\cosh s_k > 0$
# (Eq. 05.P3 of the derivation). Take any $z\in S$, for instance $z = 0$:
# $\mathrm{softmax}(0) = \mathbf 1/n$ has $\ell_1$ norm 1 and is not a TanhMax
# output. `tanhmax_preimage` refuses it.

# %%
s = np.array([0.3, -1.2, 2.0, 0.0])
print("sum|tanhmax(s)|         =", tanhmax_l1_norm(s))
print("1 - sum|tanhmax(s)|     =", 1 - tanhmax_l1_norm(s))
print("margin, closed form 05.P3  =", tanhmax_l1_margin(s))

p0 = softmax(np.zeros(4))
print("softmax(0) =", p0, "in TanhMax's range:", bool(in_tanhmax_range(p0)))
try:
    tanhmax_preimage(p0)
except ValueError as err:
    print("tanhmax_preimage(softmax(0)) raised:", err)

# %% [markdown]
# ## (a) For n = 2: the image of a grid of scores fills the open diamond
#
# Every point of a grid of scores $(s_1, s_2)\in[-6, 6]^2$ is mapped through
# tanhmax. The images fill the open diamond $|w_1| + |w_2| < 1$, approaching
# but never touching its edges. Softmax's whole range, the open segment
# $w_1 + w_2 = 1$, $w > 0$, is the upper-right edge of the diamond, drawn in
# red: on the boundary, outside the range.

# %%
k = 41 if SMALL else 161
g1d = np.linspace(-6.0, 6.0, k)
S = np.stack(np.meshgrid(g1d, g1d), axis=-1).reshape(-1, 2)  # (k*k, 2) scores
W = tanhmax(S)  # (k*k, 2) weights
print("largest l1 norm on the grid:", np.max(np.sum(np.abs(W), axis=1)))
print("all inside the open ball (float64, with rounding slack):", bool(np.all(in_tanhmax_range(W))))

def diamond_axes():
    """A square figure with the l1 unit sphere (dashed) and softmax's range (red) drawn in."""
    fig, ax = plt.subplots(figsize=(4.4, 4.4))  # type sized for a slide: 12 pt
    diamond = np.array([[1, 0], [0, 1], [-1, 0], [0, -1], [1, 0]])
    ax.plot(diamond[:, 0], diamond[:, 1], "k--", lw=0.8, label="$|w_1| + |w_2| = 1$")
    t = np.linspace(0, 1, 50)
    ax.plot(t, 1 - t, "r-", lw=2.5, alpha=0.6, label="softmax's range")
    ax.set_aspect("equal")
    ax.set_xticks([-1, 0, 1])
    ax.set_yticks([-1, 0, 1])
    ax.set_xlabel("$w_1$", fontsize=12)
    ax.set_ylabel("$w_2$", fontsize=12)
    ax.tick_params(labelsize=12)
    return fig, ax


fig, ax = diamond_axes()
ax.scatter(W[:, 0], W[:, 1], s=2, c=np.sum(np.abs(W), axis=1), cmap="viridis", label="tanhmax(s)")
ax.set_title("n = 2: tanhmax fills the open $\\ell_1$ ball;\nsoftmax lies on its edge", fontsize=12)
ax.legend(fontsize=11, loc="upper left", markerscale=4)
fig.tight_layout()
save(fig, "05_tanhmax_image_n2")

# %% [markdown]
# ## (a) Every point of the ball has exactly one preimage
#
# `tanhmax_preimage` solves $G(x) = \sum_k\sqrt{x^2 + w_k^2} - 1 = 0$ for
# $x = 1/\sum_k\cosh s_k$ (Eqs. 05.P4-05.P6) and sets $s_i = \operatorname{asinh}(w_i/x)$.
# Near the boundary the scores grow, but only like $\tfrac12\log(1/(1 - \|w\|_1))$
# while every entry of $w$ is non-zero: each factor 1000 closer to the sphere
# adds about $\tfrac12\ln 1000 = 3.45$ to $\max|s|$. With an entry of $w$ equal
# to 0 they grow like $\log(1/(1 - \|w\|_1))$, $\ln 1000 = 6.91$ per factor
# 1000 (derivation 05, section 3, Step 4, works out both; each row below
# draws a new $w$, so the steps scatter around these values). The round trip
# stays exact to rounding either way.

# %%
def preimage_table(gaps, zeros):
    """For random w of six entries, `zeros` of them 0, at distance `gap` from the sphere:
    max |s| of the preimage and the largest relative error of the round trip (non-zero entries)."""
    print(f"{'1 - |w|_1':>10s} {'max |s|':>9s} {'max rel. error of tanhmax(preimage(w))':>40s}")
    for gap in gaps:
        w = rng.standard_normal(6)
        w[:zeros] = 0.0
        w = w / np.sum(np.abs(w)) * (1 - gap)
        z = tanhmax_preimage(w)
        err = np.max(np.abs(tanhmax(z) - w)[zeros:] / np.abs(w[zeros:]))
        print(f"{gap:10.0e} {np.max(np.abs(z)):9.3f} {err:40.2e}")


rng = np.random.default_rng(0)
print("every entry of w non-zero:")
preimage_table((0.5, 1e-3, 1e-6, 1e-9, 1e-12), zeros=0)
print("one entry of w equal to 0:")
preimage_table((1e-3, 1e-6, 1e-9, 1e-12), zeros=1)

# %% [markdown]
# ## (b) The closure path: tanhmax(s + c 1) walks to softmax(s)
#
# For $n = 2$ and three score vectors, the points $\mathrm{tanhmax}(s + c\mathbf 1)$
# for $c$ from $-3$ to $6$ trace a path through the diamond that ends on
# softmax's segment, at $\mathrm{softmax}(s)$ (the red dot), as $c\to\infty$.
# The path is straight: Eq. 05.P9 of the derivation writes it as
# $(1-\lambda)\,\mathrm{softmax}(s) - \lambda\,\mathrm{softmax}(-s)$ with
# $\lambda = q/(1+q)$, the open segment from $-\mathrm{softmax}(-s)$ (the
# black dot, $c\to-\infty$) to $\mathrm{softmax}(s)$. Every entry of
# $\mathrm{tanhmax}(s + c\mathbf 1) - \mathrm{softmax}(s)$ is negative.

# %%
cs = np.linspace(-3.0, 6.0, 60 if SMALL else 200)
fig, ax = diamond_axes()
for s2, color in zip(([0.5, -0.3], [-1.0, 0.4], [1.2, 0.9]), ("C0", "C1", "C2")):
    s2 = np.array(s2)
    path = tanhmax(s2 + cs[:, None])  # (len(cs), 2)
    ax.plot(path[:, 0], path[:, 1], "-", color=color, lw=1.6, label="s = (" + ", ".join(f"{v:g}" for v in s2) + ")")
    target = softmax(s2)
    ax.plot(*target, "o", color="red", ms=5)
    ax.plot(*(-softmax(-s2)), "o", color="black", ms=4)
    print(f"s = {s2}: softmax(s) = {target}, tanhmax(s + 6) = {path[-1]}, "
          f"l1 gap {closure_gap(s2, 6.0):.3e}")
ax.set_title("$c \\mapsto \\mathrm{tanhmax}(s + c\\mathbf{1})$, $c$ from $-3$ to 6", fontsize=13)
ax.legend(fontsize=13, loc="upper left", handlelength=1.2)
fig.tight_layout()
save(fig, "05_closure_paths")

# %% [markdown]
# ## (b) The gap against the closed form
#
# $\|\mathrm{tanhmax}(s + c\mathbf 1) - \mathrm{softmax}(s)\|_1 = 2q/(1+q)$,
# $q = e^{-2c}B/A$, $A = \sum_k e^{s_k}$, $B = \sum_k e^{-s_k}$ (Eq. 05.P10).
# `closure_gap` computes the left side from the two forward passes,
# `closure_gap_closed_form` the right side. On a log scale the gap is a
# line of slope $-2$; the numerical gap leaves the line only where it
# reaches float64's rounding floor (a few $10^{-16}$).

# %%
s6 = np.array([0.5, -1.0, 1.5, 0.2, -0.3, 0.8])
cs = np.linspace(0.0, 20.0, 41 if SMALL else 161)
num, cf = closure_gap(s6, cs), closure_gap_closed_form(s6, cs)
B_over_A = np.sum(np.exp(-s6)) / np.sum(np.exp(s6))
mid = (cs >= 0) & (cs <= 8)
print("max relative difference, c in [0, 8]:", np.max(np.abs(num[mid] - cf[mid]) / cf[mid]))
print("max absolute difference, c in [0, 20]:", np.max(np.abs(num - cf)))

fig, ax = plt.subplots(figsize=(5.0, 3.9))  # type sized for a slide: 13 pt
ax.semilogy(cs, num, "o", ms=4, label="forward passes")
ax.semilogy(cs, cf, "-", lw=1.2, label="closed form")
ax.semilogy(cs, 2 * B_over_A * np.exp(-2 * cs), ":", lw=1.2, label="$2\\,(B/A)\\,e^{-2c}$")
ax.axhline(np.finfo(float).eps, color="gray", lw=0.6)
ax.yaxis.set_major_locator(LogLocator(numticks=5))
ax.set_xlabel("shift $c$", fontsize=13)
ax.set_ylabel("$\\ell_1$ gap", fontsize=13)
ax.set_title("$\\mathrm{tanhmax}(s + c\\mathbf{1}) \\to \\mathrm{softmax}(s)$", fontsize=13)
ax.legend(fontsize=13, loc="upper right")
ax.tick_params(labelsize=13)
fig.tight_layout()
save(fig, "05_closure_gap")

# %% [markdown]
# ## (c) What survives: the log-rank
#
# With derivation 05's letters (section 5): an output matrix
# $E\in\mathbb R^{n\times d}$ and $T$ random context vectors
# $v_t\in\mathbb R^d$ (the code's `m`). Stack $\log|\phi(Ev_t)|$ into a
# $T\times n$ matrix. For softmax it equals $VE^T - \mathrm{lse}\,\mathbf 1^T$,
# with $V$ the $T\times d$ matrix of the $v_t$,
# so its rank is at most $d + 1$: the softmax bottleneck. For TanhMax (and
# signexp, sigsoftmax) the logarithm is nonlinear in the scores and the
# matrix has full rank $n$. This is the part of TanhMax's argument that
# holds; it says nothing about ranges being nested, and TanhMax outputs are
# still never probability distributions.

# %%
n, d, m = (10, 3, 60) if SMALL else (16, 4, 200)
fig, ax = plt.subplots(figsize=(5.0, 3.5))
for name in ("softmax", "tanhmax", "signexp", "sigsoftmax"):
    r = log_rank(name, n, d, m, seed=0)
    sv = r["singular_values"]
    print(f"{name:10s} rank {r['rank']:2d} of {n} (softmax bound d + 1 = {r['softmax_bound']}); "
          f"sigma_{d + 2}/sigma_1 = {sv[d + 1] / sv[0]:.2e}")
    ax.semilogy(np.arange(1, len(sv) + 1), sv / sv[0], "o-", ms=3, label=name)
ax.axvline(d + 1, color="gray", lw=0.6, ls="--")
ax.set_xlabel("index of the singular value", fontsize=8)
ax.set_ylabel("sigma_k / sigma_1", fontsize=8)
ax.set_title(f"log|phi(E v)|, n = {n}, d = {d}, T = {m}: softmax has rank d + 1", fontsize=8)
ax.legend(fontsize=7)
ax.tick_params(labelsize=7)
fig.tight_layout()
save(fig, "05_log_rank")

# %% [markdown]
# ## Summary
#
# * No softmax output is a TanhMax output: the ranges are disjoint, so
#   Eq. 10 fails for every $S$.
# * TanhMax is a bijection of $\mathbb R^n$ onto the open $\ell_1$ ball, and
#   softmax's range lies on that ball's boundary, in the closure of TanhMax's
#   range along $s + c\mathbf 1$, at distance $\sim 2(B/A)e^{-2c}$.
# * The rank argument survives: $\log|\mathrm{tanhmax}(Ev)|$ is not confined
#   to $d + 1$ dimensions.
