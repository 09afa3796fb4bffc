# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 01 — A tour of the activations
#
# Every attention activation in `refattn` has the form of TanhMax, Eq. 5,
#
# $$\phi(s)_i = \frac{g(s_i)}{\sum_k h(s_k)},$$
#
# and is evaluated as a *reweighted softmax* (Eq. 01.R1 of
# `derivations/01-reweighted-softmax.md`):
#
# $$\phi(s) = \rho(s)\odot\mathrm{softmax}(\ell(s)), \qquad \rho = g/h,\quad \ell = \log h.$$
#
# This notebook looks at each registered activation: its four elementwise
# functions, the weights it gives one row of scores, the Jacobian of
# tanhmax, one VJP checked by hand, the gradient check of every activation,
# and the one place where the checks disagree on purpose (signexp at 0).
#
# It imports everything from the package and redefines nothing. After the
# README's set-up, run it as a script from the repository root,
# `.venv/bin/python notebooks/01_activations_tour.py` (it prints where its
# figures went), or make a Jupyter notebook of it with
# `.venv/bin/jupytext --to notebook notebooks/01_activations_tour.py`
# (jupytext comes with the test extra, the README's second set-up line).
# Two environment variables change its behaviour:
#
# * `REFATTN_FIGDIR`: the folder for its figures (run as a script without it:
#   `figures/`; in Jupyter they are shown instead);
# * `REFATTN_SMALL=1`: smaller grids and arrays (used in CI).

# %%
import os

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from autograd import make_vjp  # noqa: E402

from refattn.plots import save, start  # noqa: E402
from refattn import ACTIVATIONS, activation  # noqa: E402
from refattn.core.gradcheck import gradcheck  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script


np.set_printoptions(precision=4, suppress=False, linewidth=100)
print("registered activations:", ", ".join(ACTIVATIONS))

# %% [markdown]
# ## The registry as a table
#
# Each activation's class holds its formulas as text (`Activation.formula`)
# and its source (`Activation.source`). Compare with the table in
# section 3 of the derivation.

# %%
header = f"{'name':11s} {'g(s)':18s} {'h(s)':18s} {'rho':10s} {'ell':18s} source"
print(header)
print("-" * len(header))
for name in ACTIVATIONS:
    a = activation(name)
    f = a.formula
    print(f"{name:11s} {f.g:18s} {f.h:18s} {f.rho:10s} {f.ell:18s} {a.source}")

# %% [markdown]
# ## g, h and rho, ell side by side
#
# One row of small panels per activation: the paper's pair $(g, h)$ on the
# left, the reweighted pair $(\rho, \ell)$ on the right. The grid has an even
# number of points, so it does not contain $s = 0$ exactly; the jumps and
# kinks there (signexp's $\rho$, relu, cosformer) show up as steep segments.
# Expressive's $\ell$ plunges towards $-\infty$ near $s = 0$ (where it is
# $-\infty$ exactly, off the grid). Cosformer's $\ell$ is $-\infty$ for every
# $s \le 0$: no curve can be drawn there, so its panel leaves a gap, marked
# $-\infty$ at the bottom edge.

# %%
n_grid = 80 if SMALL else 400
grid = np.linspace(-4.0, 4.0, n_grid)  # (n_grid,)
columns = [("g", "g"), ("h", "h"), ("rho", "rho = g/h"), ("ell", "ell = log h")]

fig, axes = plt.subplots(len(ACTIVATIONS), 4, figsize=(11, 1.55 * len(ACTIVATIONS)),
                         sharex=True, squeeze=False)
for r, name in enumerate(ACTIVATIONS):
    a = activation(name)
    for c, (method, title) in enumerate(columns):
        ax = axes[r, c]
        with np.errstate(divide="ignore"):
            y = getattr(a, method)(grid)  # (n_grid,)
        minus_inf = np.isneginf(y)  # ell = log h = -inf where h = 0
        ax.plot(grid, np.where(minus_inf, np.nan, y), color=f"C{c}", lw=1.5)  # a gap where -inf
        if minus_inf.any():
            x_inf = grid[minus_inf]
            marks = x_inf[:: max(1, len(x_inf) // 6)]  # a few arrows along the gap, at the bottom edge
            ax.plot(marks, np.full(len(marks), 0.04), "v", color=f"C{c}", ms=4,
                    transform=ax.get_xaxis_transform())
            ax.text(x_inf.mean(), 0.14, "$-\\infty$", color=f"C{c}", fontsize=9, ha="center",
                    transform=ax.get_xaxis_transform())
        ax.axhline(0.0, color="0.8", lw=0.6, zorder=0)
        ax.axvline(0.0, color="0.8", lw=0.6, zorder=0)
        ax.tick_params(labelsize=7)
        if r == 0:
            ax.set_title(title, fontsize=9)
        if c == 0:
            ax.set_ylabel(name, fontsize=9)
for ax in axes[-1]:
    ax.set_xlabel("s", fontsize=8)
fig.suptitle("g, h (the paper's form) and rho, ell (the reweighted form)", fontsize=10)
fig.tight_layout()
save(fig, "01_g_h_rho_ell")

# %% [markdown]
# Things to notice:
#
# * tanhmax's $g = \sinh$ and $h = \cosh$ grow like $e^{|s|}$ and overflow
#   near $|s| \approx 710$, but $\rho = \tanh$ is bounded and
#   $\ell = \log\cosh s \approx |s| - \log 2$ grows only linearly (section 3.2);
# * signexp's $\rho = \mathrm{sign}\,s$ jumps at 0 (section 4.1);
# * sigsoftmax's $\ell$ has slope 2 on the left and 1 on the right, which is
#   why `SigSoftmax.half_ell` stores $\ell/2$, which the softmax exponentiates
#   with a factor $\gamma = 2$ (derivation 01, appendix A, Step E);
# * linear and relu have $h = 1$, $\ell = 0$: all the work is in $\rho$.

# %% [markdown]
# ## The weights on one row
#
# The same eight scores through every activation. The titles give
# $\sum_i \phi_i$ and $\sum_i |\phi_i|$: the normalised activations sum to
# 1; tanhmax's absolute sum is strictly below 1 (section 3.2), while
# signexp's is exactly 1 (its $|\phi|$ is $\mathrm{softmax}(|s|)$, as long as
# no score is exactly 0); linear and relu are divided by $n$ instead of a
# normaliser.

# %%
s_row = np.array([-2.0, -1.1, -0.3, 0.2, 0.6, 1.0, 1.7, 2.4])  # (8,)
ncol = 5
nrow = -(-len(ACTIVATIONS) // ncol)
# type sized for a slide: 15 pt on a figure 12 inches wide
fig, axes = plt.subplots(nrow, ncol, figsize=(12.0, 2.5 * nrow), sharex=True, sharey=True, squeeze=False)
for ax, name in zip(axes.flat, ACTIVATIONS):
    phi = activation(name)(s_row)  # (8,)
    ax.bar(np.arange(len(s_row)), phi, color=np.where(phi >= 0, "C0", "C3"))
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_title(f"{name}\n{phi.sum():.2f}, {np.abs(phi).sum():.2f}", fontsize=15)
    ax.tick_params(labelsize=15)
for ax in axes.flat[len(ACTIVATIONS):]:
    ax.axis("off")
for ax in axes[:, 0]:
    ax.set_ylabel("$\\phi_i$", fontsize=15)
labelled = [0, 3, len(s_row) - 1]  # the lowest, a middle and the highest score: more labels would touch
axes[0, 0].set_xticks(labelled)
axes[0, 0].set_xticklabels([f"{s_row[i]:g}" for i in labelled])
for ax in axes.flat[len(ACTIVATIONS) - ncol:]:  # the lowest panel of each column shows the scores
    ax.xaxis.set_tick_params(labelbottom=True)
    ax.set_xlabel("score $s_i$", fontsize=15)
fig.tight_layout()
save(fig, "01_weights_bars")

# %% [markdown]
# ## The Jacobian of tanhmax
#
# Eq. 01.R3 of the derivation: $J = \mathrm{diag}(\rho'\odot p + \phi\odot\ell') - \phi\,(p\odot\ell')^T$,
# a diagonal plus a rank-one matrix. `Activation.jacobian` builds it for a
# 1-D row (only for teaching: the VJP never forms it). We compare it with
# autograd's Jacobian, built row by row from VJPs of the forward code: the
# VJP of the unit cotangent $e_j$ (1 at entry $j$, 0 elsewhere) is
# $e_j^T J$, row $j$ of $J$.

# %%
tanhmax = activation("tanhmax")
J = tanhmax.jacobian(s_row)  # (8, 8): J[j, k] = d phi_j / d s_k

vjp_fn, _ = make_vjp(tanhmax)(s_row)
J_autograd = np.stack([vjp_fn(e) for e in np.eye(len(s_row))])  # row j = e_j^T J
print("max |J - J_autograd| =", np.max(np.abs(J - J_autograd)))

lim = np.max(np.abs(J))
fig, ax = plt.subplots(figsize=(4.3, 4.0))  # type sized for a slide: labels of 13 pt
im = ax.imshow(J, cmap="RdBu_r", vmin=-lim, vmax=lim)
ax.set_xticks(np.arange(len(s_row)))
ax.set_yticks(np.arange(len(s_row)))
ax.set_xticklabels([f"{v:g}" for v in s_row], fontsize=13, rotation=90)
ax.set_yticklabels([f"{v:g}" for v in s_row], fontsize=13)
ax.set_xlabel("input score $s_k$", fontsize=13)
ax.set_ylabel("output $\\phi_j$", fontsize=13)
ax.set_title("tanhmax: $J_{jk} = \\partial\\phi_j / \\partial s_k$", fontsize=13)
bar = fig.colorbar(im, ax=ax, shrink=0.85)
bar.ax.tick_params(labelsize=13)
fig.tight_layout()
save(fig, "01_tanhmax_jacobian")

# %% [markdown]
# The diagonal dominates where $|s|$ is largest (there $p$ is largest). The
# off-diagonal part $-\phi_j\,p_k\ell'_k = -\tanh(s_j)\tanh(s_k)\,p_j p_k$
# is negative between two scores of the same sign and positive between
# scores of opposite signs. Either way it moves the other weights towards 0:
# raising $|s_k|$ enlarges the normaliser $\sum_i \cosh s_i$, which shrinks
# every other $|\phi_j|$, whatever its sign.

# %% [markdown]
# ## One VJP by hand
#
# Eq. 01.R4: $ds_j = u_j\rho'_j p_j + p_j\ell'_j\,(u_j\rho_j - \sum_i u_i\phi_i)$.
# Below, each ingredient comes from the activation's own elementwise
# functions, the formula is assembled in plain NumPy, and the result is
# compared with `Activation.backward` and with `jacobian(s).T @ u`.

# %%
rng = np.random.default_rng(0)
u = rng.standard_normal(len(s_row))  # (8,) a random cotangent, never all ones

p = tanhmax.p(s_row)  # softmax(ell(s))
rho, drho, dell = tanhmax.rho(s_row), tanhmax.drho(s_row), tanhmax.dell(s_row)
phi = rho * p
c = np.sum(u * phi)  # sum_i u_i phi_i
ds_by_hand = u * drho * p + p * dell * (u * rho - c)  # Eq. 01.R4

ds_library = tanhmax.backward(u, tanhmax.forward(s_row)[1])
ds_jacobian = J.T @ u
print("ds by hand (01.R4):", ds_by_hand)
print("Activation.backward   :", ds_library)
print("jacobian(s).T @ u:", ds_jacobian)
print("max |hand - vjp|      =", np.max(np.abs(ds_by_hand - ds_library)))
print("max |hand - J^T u|    =", np.max(np.abs(ds_by_hand - ds_jacobian)))

# %% [markdown]
# ### Why the cotangent is random
#
# For a normalised activation ($\rho = 1$) the weights sum to 1 for every
# $s$, so every column of $J$ sums to zero and the VJP of the all-ones
# cotangent is exactly 0 (section 2 of the derivation). A *wrong* backward
# pass that forgets the chain-rule factor $\ell'$ (it uses the plain softmax
# backward $p\,(u - \langle u,p\rangle)$ for sigsoftmax) also returns 0
# there, so an all-ones test cannot tell them apart. A random $u$ can.

# %%
sig = activation("sigsoftmax")
p_sig = sig.p(s_row)


def wrong_vjp(u_):
    """A deliberately wrong sigsoftmax VJP: the softmax backward without ell'."""
    return p_sig * (u_ - np.sum(u_ * p_sig))


ones = np.ones_like(s_row)
print("all-ones cotangent: max |right - wrong| =",
      np.max(np.abs(sig.backward(ones, sig.forward(s_row)[1]) - wrong_vjp(ones))))
print("random cotangent  : max |right - wrong| =",
      np.max(np.abs(sig.backward(u, sig.forward(s_row)[1]) - wrong_vjp(u))))
print("column sums of sigsoftmax's J:", sig.jacobian(s_row).sum(axis=0))
print("row sums of sigsoftmax's J   :", sig.jacobian(s_row).sum(axis=1))

# %% [markdown]
# ## The gradient check of every activation
#
# `refattn.core.gradcheck.gradcheck` compares the analytic VJP with autograd
# (which traces the same forward code) and with central differences, in
# float64, with a random cotangent (section 5 of the derivation). The
# columns are the norm-wise relative errors
# $\max_i|a_i - r_i| / \max_i|r_i|$. Each activation is checked on a batch
# of rows (normalised along the last axis), once without a mask and once
# with a random mask that also masks one whole row out.

# %%
shape = (3, 5) if SMALL else (6, 12)
s_batch = rng.standard_normal(shape)  # (rows, n) random scores: no exact zeros
mask = rng.random(shape) > 0.3  # (rows, n) True = keep
mask[0] = False  # one fully masked row: no normaliser


def check(name, m):
    a = activation(name)
    return gradcheck(lambda s: a(s, mask=m), {"s": s_batch},
                     lambda u_, s: {"s": a.backward(u_, a.forward(s, mask=m)[1])}, name=name, seed=1)


print(f"{'activation':11s} {'mask':6s} {'rel. err. vs autograd':>22s} {'rel. err. vs central':>21s}  ok")
for name in ACTIVATIONS:
    for label, m in (("none", None), ("random", mask)):
        res = check(name, m)
        print(f"{name:11s} {label:6s} {res.max_rel('autograd'):22.2e} "
              f"{res.max_rel('central'):21.2e}  {res.ok}")

# %% [markdown]
# Autograd agrees to rounding error (the two compute the same derivative by
# different arithmetic); central differences agree to the accuracy of the
# difference quotient, whose error is dominated by rounding,
# about $u_\mathrm{r}/\varepsilon$ relative ($u_\mathrm{r} = 2^{-53}$, the unit
# roundoff of float64; $u$ is the cotangent).

# %% [markdown]
# ## signexp at 0: the Dirac spike
#
# signexp's $\rho = \mathrm{sign}\,s$ jumps from $-1$ to $+1$ at $s = 0$.
# The analytic VJP and autograd both use $\rho'(0) = 0$, $\ell'(0) = 0$ and
# agree with each other. Central differences see the jump of $\phi_k$,
# $2p_k$ spread over a window $2\varepsilon$: section 4.1 derives
# $ds_k^{\mathrm{FD}} = u_k\,p_k(s+\varepsilon e_k)/\varepsilon \approx u_k p_k/\varepsilon$
# at the zero entry $k$ ($e_k$ is the unit vector that moves $s_k$ alone). At every other entry the difference quotient agrees with
# the analytic VJP as it does anywhere else: up to its truncation error
# $O(\varepsilon^2)$ and its rounding error $O(u_\mathrm{r}/\varepsilon)$
# (the last column below).

# %%
signexp = activation("signexp")
s0 = np.array([0.0, 0.7, -1.2, 0.3, 1.5])  # (5,) the first score is exactly 0
u0 = rng.standard_normal(len(s0))  # (5,)
p0 = signexp.p(s0)
eps_list = [1e-2, 1e-6] if SMALL else [1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6]

print("analytic VJP:", signexp.backward(u0, signexp.forward(s0)[1]))
vjp_fn, _ = make_vjp(signexp)(s0)
print("autograd    :", vjp_fn(u0))
print()
print(f"{'eps':>8s} {'central ds_0':>14s} {'u_0 p_0(s+eps e_0)/eps':>24s} {'u_0 p_0/eps':>13s} "
      f"{'max |diff| at other entries':>28s}")
spikes = []
for eps in eps_list:
    res = gradcheck(signexp, {"s": s0}, lambda u_, s: {"s": signexp.backward(u_, signexp.forward(s)[1])},
                    cotangent=u0, eps=eps, checks=("central",), name="signexp at 0")
    # rebuild the difference quotient itself (gradcheck reports only the error)
    ds_fd = np.array([np.sum(u0 * (signexp(s0 + eps * e) - signexp(s0 - eps * e)))
                      / (2 * eps) for e in np.eye(len(s0))])
    p_shift = signexp.p(s0 + eps * np.eye(len(s0))[0])[0]
    other = np.max(np.abs(ds_fd[1:] - signexp.backward(u0, signexp.forward(s0)[1])[1:]))
    spikes.append(ds_fd[0])
    print(f"{eps:8.0e} {ds_fd[0]:14.6e} {u0[0] * p_shift / eps:24.6e} {u0[0] * p0[0] / eps:13.6e} "
          f"{other:28.2e}")
print()
print("gradcheck's verdict at eps = 1e-6:")
print(res)

# %%
fig, ax = plt.subplots(figsize=(4.8, 3.4))
eps_arr = np.array(eps_list)
ax.loglog(eps_arr, np.abs(spikes), "o", label="central differences, |ds_0|")
ax.loglog(eps_arr, np.abs(u0[0]) * p0[0] / eps_arr, "-", lw=1, label="|u_0| p_0 / eps (section 4.1)")
ax.set_xlabel("step eps", fontsize=8)
ax.set_ylabel("|ds_0|", fontsize=8)
ax.set_title("signexp at s_0 = 0: central differences grow like 1/eps", fontsize=9)
ax.text(0.03, 0.05, f"analytic VJP: ds_0 = {signexp.backward(u0, signexp.forward(s0)[1])[0] + 0.0:g}; autograd: ds_0 = {vjp_fn(u0)[0] + 0.0:g}\n"
        "(no step involved; 0 has no place on a log axis)", transform=ax.transAxes, fontsize=7)
ax.legend(fontsize=7)
ax.tick_params(labelsize=7)
fig.tight_layout()
save(fig, "01_signexp_spike")

# %% [markdown]
# The spike grows like $1/\varepsilon$ and sits on the predicted line; the
# other entries agree to the usual central-difference accuracy. The kinks
# of relu and cosformer (section 4.3) are milder: differences there see the
# average of the two one-sided slopes, a finite number, not a spike.

# %%
for name in ("relu", "cosformer"):
    a = activation(name)
    eps = 1e-6
    ds_fd0 = np.sum(u0 * (a(s0 + eps * np.eye(len(s0))[0])
                          - a(s0 - eps * np.eye(len(s0))[0]))) / (2 * eps)
    print(f"{name:9s} at s_0 = 0: analytic ds_0 = {a.backward(u0, a.forward(s0)[1])[0]: .4f}, "
          f"central ds_0 = {ds_fd0: .4f}")
n = len(s0)
C = np.sum(np.maximum(s0, 0.0))
print(f"predicted (section 4.3): relu u_0/(2n) = {u0[0] / (2 * n): .4f}, "
      f"cosformer (u_0 - <u, phi>)/(2C) = {(u0[0] - u0 @ activation('cosformer')(s0)) / (2 * C): .4f}")

# %% [markdown]
# ## Summary
#
# * Every activation is $\rho\odot\mathrm{softmax}(\ell)$; the plots show
#   that $\rho$ and $\ell$ stay tame where $g$ and $h$ do not.
# * One VJP (Eq. 01.R4) serves all of them; it matches `jacobian(s).T @ u`,
#   autograd, and central differences, with a random cotangent.
# * At singular points the checks disagree in the way the derivation
#   predicts: a $1/\varepsilon$ spike for signexp's jump, half-slopes for the
#   kinks of relu and cosformer.
