# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 08 — Geometry of attention: expressive attention and Neural Attention
#
# Two seeds argue about *which query-key configurations* an attention score
# can single out.
#
# * **Expressive (Gros), Fig. 1.** Dot-product attention (DPA, Eq. 1) weighs a
#   key by $e^{\beta\,Q\cdot K}$: large for the parallel key, small for the
#   antiparallel one. Expressive attention (EA, Eq. 2) weighs it by
#   $z^2/(1+z^2)$ with $z = Q\cdot K$: large for parallel *and* antiparallel
#   keys, zero for orthogonal ones.
# * **NeuralAttn (DiGiugno & Mahmood), Fig. 1.** On the diagonal $q = k = (x, y)$
#   the dot product is the paraboloid $x^2 + y^2$, while a score MLP
#   $w_a^\top\sigma(W_h[q;k] + b_h) + b_a$ can draw other surfaces.
#
# The first half follows `derivations/07-expressive-geometry.md`, the second
# `derivations/08-neural-attention-expressivity.md`. Everything is computed
# by `refattn.studies.geometry` and `refattn.studies.neural_surface`;
# this notebook only plots. Environment variables: `REFATTN_FIGDIR` (if set,
# the PNGs go there) and `REFATTN_SMALL=1` (small sizes, as in CI).

# %%
import math
import os

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from refattn import score  # noqa: E402
from refattn.studies import geometry as geo  # noqa: E402
from refattn.studies import neural_surface as ns  # noqa: E402
from refattn.plots import save, start  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script

np.set_printoptions(precision=4, linewidth=100)

# %% [markdown]
# ## 1. Weight against angle, DPA and EA
#
# One query $q = |q|\,e_1$ and `n_keys` keys of norm $|k|$ spread evenly on
# the circle. The score is $z_j = \beta\,q\cdot k_j = c\cos\theta_j$ with
# $c = \beta|q||k|$, and the weights are the registered `softmax` (DPA) and
# `expressive` (EA) activations of that row. We sweep $c$ through the norms.

# %%
n_keys = 72 if SMALL else 360
study = geo.run(geo.Settings(n_keys=n_keys, n_random=300 if SMALL else 2000))  # refattn geometry
for name in ("softmax", "expressive"):
    for curve in study["circle"][name]:
        deg, w = np.round(curve["degrees"]).astype(int), np.asarray(curve["n_weight"]) / n_keys
        top = sorted({int(d) for d in deg[np.isclose(w, w.max(), rtol=1e-12)]})
        low = sorted({int(d) for d in deg[w == w.min()]})
        print(f"{name:10s} c = {curve['c']:5.2f}: max at {top} deg, "
              f"min at {low} deg, min weight {w.min():.3e}")
fig = geo.plot(study)
save(fig, "08_weight_vs_angle")

# %% [markdown]
# DPA: maximum at 0°, minimum at ±180° for every $c$; the larger $c$, the
# sharper the peak. EA: maxima at 0° and ±180° (equal), a zero at ±90°
# (an orthogonal key has $z = 0$ exactly, so weight 0: the log axis cannot
# show it). As $c$ grows, EA does *not* sharpen a peak: it narrows the notch
# around 90° and flattens everything else.
#
# The same curves in polar form, in the spirit of Expressive's Fig. 1 (radius =
# weight relative to the largest weight, so the shapes are comparable):

# %%
fig, axes = plt.subplots(1, 2, figsize=(8, 4), subplot_kw={"projection": "polar"})
for ax, name, title in ((axes[0], "softmax", "DPA"), (axes[1], "expressive", "EA")):
    for i, curve in enumerate(study["circle"][name]):
        angles, w = np.radians(curve["degrees"]), np.asarray(curve["n_weight"])
        ax.plot(np.append(angles, angles[0]), np.append(w, w[0]) / w.max(), color=f"C{i}",
                label=f"c = {curve['c']:g}")
    ax.plot([0.0, 0.0], [0.0, 1.0], "k-", lw=3)  # the query direction
    ax.set_title(f"{title}: weight / max weight\n(black: query direction)", fontsize=9)
    ax.set_rticks([0.5, 1.0])
    ax.tick_params(labelsize=7)
axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.1, 0.5))
fig.tight_layout()
save(fig, "08_polar")

# %% [markdown]
# ## 2. How the contrast depends on $c = \beta|q||k|$
#
# The closed forms of the derivation (Eqs. 07.EG3-07.EG6), next to the same numbers
# measured on the circle of keys (which go through the activations' forward
# code):
#
# * DPA, 0° vs 180°: $e^{2c}$, unbounded; DPA's peak half-width
#   $\arccos(1 - \ln 2/c)$, shrinking like $\sqrt{2\ln 2/c}$;
# * EA, 0° vs 180°: exactly 1; 0° vs 90°: infinite (weight 0 at 90°);
#   0° vs 45°: $(2 + c^2)/(1 + c^2)$, which *falls* from 2 to 1;
#   EA's notch half-width $\arcsin(1/\sqrt{2 + c^2})$, from 45° down to about $1/c$.

# %%
print(geo.report(study).split("\n\n")[0])  # the contrast table of refattn geometry

# %%
cs = np.logspace(-1, 2, 200)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
axes[0].semilogx(cs, np.degrees(geo.dpa_half_width(cs)), label="DPA peak around 0 deg")
axes[0].semilogx(cs, np.degrees(geo.ea_notch_half_width(cs)), label="EA notch around 90 deg")
axes[0].set_xlabel("c = beta |q| |k|")
axes[0].set_ylabel("half-width (degrees)")
axes[0].set_title("where the weight is half the top weight (Eqs. 07.EG5, 07.EG6)", fontsize=9)
axes[0].legend(fontsize=8)
for cos_b, style in ((math.cos(math.radians(45)), "-"), (math.cos(math.radians(80)), "--")):
    deg_b = round(math.degrees(math.acos(cos_b)))
    axes[1].loglog(cs, geo.weight_ratio("softmax", 1.0, cos_b, c=cs), "C0" + style,
                   label=f"DPA a(0)/a({deg_b})")
    axes[1].loglog(cs, geo.weight_ratio("expressive", 1.0, cos_b, c=cs), "C1" + style,
                   label=f"EA a(0)/a({deg_b})")
axes[1].set_xlabel("c = beta |q| |k|")
axes[1].set_title("contrast against a fixed angle (Eqs. 07.EG3, 07.EG4)", fontsize=9)
axes[1].legend(fontsize=7)
fig.tight_layout()
save(fig, "08_contrast")

# %% [markdown]
# ## 3. High dimension: random keys are nearly orthogonal
#
# In $\mathbb{R}^d$ the cosine between a fixed direction and a random one has
# mean 0 and variance exactly $1/d$ (Eq. 07.EG7), so for $d = 64$ a typical random
# key sits within a few degrees of 90°. EA puts its low weights exactly
# there; DPA gives such keys a middling weight $\approx e^{0}$.

# %%
rng = np.random.default_rng(0)
n_random = 2000 if SMALL else 20000
fig, ax = plt.subplots(figsize=(5, 3.2))
for d in (2, 8, 64, 512):
    cos = geo.random_unit_vectors(n_random, d, rng)[:, 0]
    print(f"d = {d:3d}: mean cos = {cos.mean():+.4f}, var cos = {cos.var():.5f}, 1/d = {1 / d:.5f}")
    ax.hist(cos, bins=60, range=(-1, 1), density=True, histtype="step", lw=1.5, label=f"d = {d}")
ax.set_xlabel("cos(angle) between a random key and the query")
ax.set_ylabel("density")
ax.legend(fontsize=8)
fig.tight_layout()
save(fig, "08_cosine_histograms")

# %%
planted = (1.0, -1.0, 0.7, -0.7, 0.4, -0.4)
n_keys_hd = 300 if SMALL else 2000
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for ax, name, title in ((axes[0], "softmax", "DPA"), (axes[1], "expressive", "EA")):
    cos, w = geo.weight_vs_cosine(name, dim=64, n_keys=n_keys_hd, norm_q=1.0, norm_k=1.0,
                                  planted=planted, seed=1)
    p = len(planted)
    ax.scatter(cos[p:], w[p:] / w.max(), s=4, alpha=0.4, label=f"{n_keys_hd} random keys")
    ax.scatter(cos[:p], w[:p] / w.max(), s=40, color="C3", marker="*", label="planted keys")
    ax.set_title(f"{title}, d = 64, c = 1: mean random-key weight = "
                 f"{np.mean(w[p:]) / w[0]:.3f} x aligned", fontsize=9)
    ax.set_xlabel("cos(angle) to the query")
    ax.set_xlim(-1.05, 1.05)
    ax.legend(fontsize=7)
axes[0].set_ylabel("weight / max weight")
fig.tight_layout()
save(fig, "08_high_dim_scatter")

# %% [markdown]
# How much weight does a random key get relative to the aligned key? For a
# random key $\cos^2\theta$ averages $1/d$, and for $c^2/d \ll 1$ the
# derivation (section 4) gives
#
# * EA: $\approx (1 + c^2)/d$ (the $\cos^2$ regime of Eq. 07.EG4);
# * DPA: $\approx e^{-c}\,(1 + c^2/(2d))$.
#
# So EA's suppression of random keys holds while $c \ll \sqrt{d}$; DPA's
# improves exponentially with $c$, and the two cross between $c = 2$ and
# $c = 4$ for $d = 64$. The table measures both on random keys and prints the
# approximations.

# %%
d_hd = 64
print(f"{'c':>5s} | {'EA measured':>11s} {'(1+c^2)/d':>10s} | {'DPA measured':>12s} {'e^-c(1+c^2/2d)':>14s}")
for c in (0.5, 1.0, 2.0, 4.0, 8.0):
    rel = {}
    for name in ("expressive", "softmax"):
        cos, w = geo.weight_vs_cosine(name, dim=d_hd, n_keys=n_keys_hd, norm_q=c, planted=(1.0,), seed=2)
        rel[name] = np.mean(w[1:]) / w[0]
    print(f"{c:5.1f} | {rel['expressive']:11.4f} {(1 + c * c) / d_hd:10.4f} | "
          f"{rel['softmax']:12.4f} {math.exp(-c) * (1 + c * c / (2 * d_hd)):14.4f}")

# %% [markdown]
# With EA at moderate $c$ the random (nearly orthogonal) keys get little
# weight each, and the aligned and anti-aligned planted keys stand out
# equally. With DPA only the aligned direction stands out. At large $c$
# ($c^2 \gtrsim d$) EA's notch becomes narrower than the spread of random
# cosines and the approximation (and the suppression) fails: the norm of
# queries and keys, which training controls, decides which regime a head is in.
#
# ## 4. NeuralAttn, Fig. 1: the score surface on the diagonal q = k
#
# `diagonal_surface` evaluates a registered score at $q = k = (x, y)$ for
# every grid point. The dot product gives the paraboloid $x^2 + y^2$; the
# neural score (NeuralAttn Eq. 4, tanh hidden layer, $W_q = W_k = I$) at its
# random initialisation gives some other smooth surface, and after training
# on a relation it gives the surface that relation needs.

# %%
if SMALL:
    fit_kw = dict(n_train=200, n_test=200, hidden_size=16, steps=300, lr=0.03)
else:
    fit_kw = dict()  # the defaults of fit_relation: the run reported in derivation 08
fit = ns.fit_relation("rbf", seed=0, **fit_kw)
print(fit.summary())
floor = ns.bilinear_floor_rbf()
print(f"population optimum of any bilinear score (quadrature): RMSE {floor['rmse']:.4f}, "
      f"constant: {floor['rmse_constant']:.4f}, A* = {floor['a']:.4f} I, b* = {floor['b']:.4f}")

grid = np.linspace(-2.0, 2.0, 25 if SMALL else 61)
random_mlp = ns.init_mlp(fit_kw.get("hidden_size", 32), np.random.default_rng(1))
surfaces = [
    ("dot product: x^2 + y^2", ns.diagonal_surface(score("dot"), None, grid)),
    ("neural score, random init", ns.diagonal_surface(ns.NEURAL, random_mlp, grid)),
    ("neural score trained on RBF", ns.diagonal_surface(ns.NEURAL, fit.mlp_params, grid)),
]
fig = plt.figure(figsize=(12, 3.8))
for i, (title, (X, Y, Z)) in enumerate(surfaces):
    ax = fig.add_subplot(1, 3, i + 1, projection="3d")
    ax.plot_surface(X, Y, Z, cmap="viridis", linewidth=0, antialiased=True)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(f"{title}\nz from {Z.min():.3g} to {Z.max():.3g}", fontsize=9)
    ax.tick_params(labelsize=6)
fig.suptitle("score z(x, y) on the diagonal q = k = (x, y)", fontsize=10)
fig.tight_layout()
save(fig, "08_diagonal_surfaces")

# %% [markdown]
# On the diagonal the RBF target is the constant 1 ($q = k$ means
# $|q-k| = 0$): the trained MLP is nearly flat there, while any bilinear
# score restricted to the diagonal is a quadratic form $x^\top A x + b$ (the
# paraboloid is $A = I$). The best bilinear fit, $A^* \approx 0.106\,I$,
# is a shallow paraboloid; it cannot be flat and still vary off the diagonal.
#
# Off the diagonal: fix a query and look at the score over all keys. The
# target is a bump centred at the query; a bilinear score is *linear* in the
# key for a fixed query, $k \mapsto (A^\top q)\cdot k + b$, a tilted plane.

# %%
q0 = np.array([0.8, -0.6])
Xk, Yk = np.meshgrid(grid, grid)
keys = np.stack([Xk.ravel(), Yk.ravel()], axis=1)  # (m, 2)
queries = np.broadcast_to(q0, keys.shape).copy()  # (m, 2)
panels = [
    ("target exp(-|q - k|^2 / 2)", ns.rbf_similarity(queries, keys)),
    ("best bilinear q^T A k + b", ns.bilinear_predict(fit.bilinear_A, fit.bilinear_b, queries, keys)),
    ("trained neural score", ns.mlp_predict(fit.mlp_params, queries, keys)),
]
fig, axes = plt.subplots(1, 3, figsize=(12, 3.5), sharey=True)
vmin = min(p[1].min() for p in panels)
vmax = max(p[1].max() for p in panels)
for ax, (title, zz) in zip(axes, panels):
    cs_ = ax.contourf(Xk, Yk, zz.reshape(Xk.shape), levels=20, vmin=vmin, vmax=vmax, cmap="viridis")
    ax.plot(*q0, "r*", ms=10)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("k_1")
axes[0].set_ylabel("k_2")
fig.colorbar(cs_, ax=axes, shrink=0.85)
fig.suptitle(f"score over keys k for the fixed query q = {q0} (red star)", fontsize=10)
save(fig, "08_fixed_query_slices")

# %% [markdown]
# ## 5. The fit: predicted against target
#
# Test pairs only. The bilinear fit is the exact least-squares optimum over
# every $q^\top A k + b$ (which includes every $(W_q q)\cdot(W_k k)$); the MLP
# is the library's `neural` score trained with its own VJP and
# `refattn.training.optim.Adam`.

# %%
fig = ns.plot(ns.result_of(fit))  # as refattn neural-surface draws it
save(fig, "08_fit_scatter")

# %% [markdown]
# ## Summary
#
# * DPA ranks keys by $\cos\theta$: one best direction, contrast $e^{2c}$
#   between parallel and antiparallel.
# * EA ranks keys by $|\cos\theta|$: parallel and antiparallel tie, orthogonal
#   keys get exactly zero weight, and the norm sets the width of that notch,
#   not the height of a peak. In high dimension random keys are nearly
#   orthogonal, so EA leaves them little weight.
# * On the diagonal $q = k$ a dot product is a quadratic form; in general it
#   is bilinear. A relation like the RBF similarity is neither, and the best
#   bilinear score explains well under half its variance, while the score MLP
#   of NeuralAttn fits it closely.
