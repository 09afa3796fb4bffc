# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 02 — Proposition 1, numerically
#
# TanhMax's Proposition 1 (Eq. 4) says how the score $s_i$ of token $i$
# moves while a one-attention-layer classifier trains by gradient flow (time
# $\tau$). The model: token $j$ has a query $Q_j$, a key $K_j$ and a value
# $V_j$; its score is $s_j = f(Q_j, K_j)$; the attention weights are
# $w = \phi(s)$, $w_j = g(s_j)/C$ with $C = \sum_k h(s_k)$ (TanhMax's Eq. 5);
# the logit is $a = \sum_j w_j\,o_j$, where $o_j = V_j^\top W$ is token $j$'s
# *polarity score* (what it alone adds to the logit); the output is
# $y = \sigma(a)$. The proposition reads
#
# $$\frac{ds_i}{d\tau} = -\,\Delta_{I,i}\;\Delta_{II,i}\;c, \qquad
# \Delta_{II,i} = \sum_j \pi_{ij}\,o_j, \qquad
# \pi_{ij} = \frac{\partial w_j}{\partial s_i} = [j = i]\,\frac{g'(s_i)}{C} - w_j\,\frac{h'(s_i)}{C},$$
#
# with $\Delta_{I,i} = |\partial s_i/\partial Q_i|^2 + |\partial s_i/\partial K_i|^2 \ge 0$
# (how fast token $i$'s own query and key can move its score) and
# $c = \sigma'(a)\,\partial R/\partial y$, one number per instance, from the
# risk $R$. So $\pi$ is the activation's Jacobian, transposed, and
# $\Delta_{II}$ says how the context pushes $s_i$.
#
# `derivations/03-proposition-1.md` proves it step by step (03.P1–03.P7) and
# `derivations/04-score-dynamics-closed-forms.md` works out $\Delta_{II}$ for
# every activation. This notebook steps through the same chain with numbers:
#
# 1. one instance, the matrix $\pi$, and $\Delta_{II}$ as a VJP;
# 2. the formula against autograd's exact velocity $-G\,\nabla R$, with tokens
#    shared across instances;
# 3. TanhMax's Eq. 7 as printed and corrected;
# 4. which scores rise and which fall, for every activation;
# 5. shared projections, where the proposition is only an approximation.
#
# Everything is imported from `refattn`; nothing is redefined.
# `REFATTN_FIGDIR` (save figures there) and `REFATTN_SMALL=1` (smaller grids)
# change its behaviour.

# %%
import os

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import BoundaryNorm, ListedColormap  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

from refattn.plots import save, start  # noqa: E402
from refattn import ACTIVATIONS, activation  # noqa: E402
from refattn.studies import prop1  # noqa: E402
from refattn.theory import proposition1 as dyn  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script


np.set_printoptions(precision=4, suppress=False, linewidth=100)

# %% [markdown]
# ## 1. One instance, step by step
#
# A model under the proposition's assumption: every vocabulary token has its
# own free $Q_t, K_t, V_t$ (`OneLayerModel("free")`), the score is
# $s_t = Q_t\cdot K_t/\lambda$, the output a sigmoid and the loss binary
# cross-entropy. We look at instance 0.

# %%
rng = np.random.default_rng(0)
model = dyn.OneLayerModel("free", "tanhmax", "sigmoid", "bce", scale=2.0)
params = model.init_params(T=12, d=4, dv=3, rng=rng)
tokens = rng.integers(0, 12, size=(6, 5))  # 6 instances of 5 tokens from a vocabulary of 12
target = rng.integers(0, 2, size=6).astype(float)

s = model.vocab_scores(params)[tokens[0]]  # scores of instance 0, (5,)
o = model.polarity(params)[tokens[0]]  # polarity scores o_j = V_j . W, (5,)
print("tokens of instance 0:", tokens[0])
print("scores s:", s)
print("polarity o:", o)

# %% [markdown]
# **Step 03.P5**: the paper's $\pi_{ij} = [j=i]\,g'(s_i)/C - w_j h'(s_i)/C$,
# straight from $g = \sinh$, $h = \cosh$. It is the transposed Jacobian of
# the activation, $\pi = J^\top$ with $J_{ji} = \partial w_j/\partial s_i$.
# Tanhmax's $J = \mathrm{diag}(\cosh(s)/C) - ww^\top$ is symmetric, though
# (as are softmax's and signexp's: their $h'/C$ is $w$ itself), so here
# $\pi = J$ as well and the check cannot tell $J$ from $J^\top$. Sigmoid
# ($g = h = \sigma$, $h' = \sigma(s)\sigma(-s)$, not a multiple of $w$) has
# a Jacobian that is not symmetric, and there $\pi$ is $J^\top$, not $J$.

# %%
pi = dyn.pi_matrix("tanhmax", s)
print(pi)
print("tanhmax: max |pi - J^T| =", np.max(np.abs(pi - activation("tanhmax").jacobian(s).T)),
      "  max |pi - J| =", np.max(np.abs(pi - activation("tanhmax").jacobian(s))))
J_sig = activation("sigmoid").jacobian(s)
pi_sig = dyn.pi_matrix("sigmoid", s)
print("sigmoid: max |pi - J^T| =", np.max(np.abs(pi_sig - J_sig.T)), "  max |pi - J| =", np.max(np.abs(pi_sig - J_sig)))

# %% [markdown]
# **Step 03.P6**: $\Delta_{II} = \pi\,o$, which is the activation's VJP with
# cotangent $o$; and $\sum_j w_j o_j$ is the logit $a$ itself.

# %%
d2 = dyn.delta_II("tanhmax", s, o)
print("pi @ o      :", pi @ o)
print("VJP(s, o)   :", d2)
w = activation("tanhmax")(s)
print("sum_j w_j o_j =", w @ o, "  logit a =", model.logits(params, tokens[:1])[0])

# %% [markdown]
# ## 2. The formula against the exact velocity
#
# Step 03.P1: under gradient flow the exact velocity of every score is
# $-G\,\nabla_\vartheta R$ with $G = \partial s/\partial\vartheta$ (called $G$,
# not $J$, because $J$ is the activation's Jacobian above).
# `velocity_decomposition` computes it with autograd, independently of the
# formula. Tokens repeat across instances here, so the formula is (03.P'): a sum
# over every occurrence of the token. A vocabulary token that occurs in no
# instance gets no gradient, so both velocities are exactly 0 there (the
# crosses in the figure).

# %%
r = dyn.velocity_decomposition(model, params, tokens, target)
present = r["present"]
err = np.max(np.abs(r["formula"] - r["exact"])) / np.max(np.abs(r["exact"]))
print("relative error of Proposition 1 (all tokens):", err)

fig, ax = plt.subplots(figsize=(5.2, 3.9))  # type sized for a slide: 13 pt
idx = np.arange(len(present))
ax.bar(idx - 0.2, r["exact"], width=0.4, label="exact, $-G\\,\\nabla R$ (autograd)")
ax.bar(idx + 0.2, r["formula"], width=0.4, label="Proposition 1 (03.P')")
absent = idx[~present]  # tokens that occur in no instance: no gradient reaches their scores
ax.plot(absent, np.zeros(len(absent)), "x", color="0.4", ms=7, ls="none",
        label="token not in the batch: 0")
ax.axhline(0, color="k", lw=0.5)
ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
ax.tick_params(labelsize=13)
ax.set_xlabel("vocabulary token t", fontsize=13)
ax.set_ylabel("$ds_t/d\\tau$", fontsize=13)
ax.set_title(f"tanhmax, free Q, K: relative error {err:.1e}", fontsize=13)
ax.legend(fontsize=13, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
fig.tight_layout()
save(fig, "02_prop1_formula_vs_exact")

# %% [markdown]
# Every activation, every (output, loss) pair: `refattn.studies.prop1` (the
# `refattn prop1` command) reports the worst relative error.

# %%
res = prop1.run(prop1.Settings(seed=0))
print(prop1.report(res))

# %% [markdown]
# ## 3. TanhMax: Eq. 7 as printed and corrected
#
# TanhMax writes $\Delta_{II}$ for its own activation with two weights
# (Eqs. 8–9, their printed denominators corrected to $\sum_k\cosh s_k$, see
# derivation 04, section 2): $\tilde w_i = \cosh s_i/\sum_k\cosh s_k$ and
# $\hat w_i = \sinh s_i/\sum_k\cosh s_k$, which is the attention weight $w_i$
# itself. With every token occurring once, $ds_i/d\tau = -\Delta_I\,\Delta'_{II}\,c$
# with $\Delta'_{II} = \tilde w_i o_i - \hat w_i\sum_j \hat w_j o_j$ (Eq. 7). The printed Eq. 7 has no minus sign: the "as
# printed" points below take that sign, with the corrected weights.

# %%
N, n = 4, 6
free = dyn.OneLayerModel("free", "tanhmax", "sigmoid", "bce", scale=2.0)
p2 = free.init_params(T=N * n, d=4, dv=3, rng=rng)
tok = rng.permutation(N * n).reshape(N, n)  # every token once
tgt = rng.integers(0, 2, N).astype(float)
S, O = free.vocab_scores(p2)[tok], free.polarity(p2)[tok]
c = dyn.output_factor(free.logits(p2, tok), tgt)
dI = free.delta_I(p2)[tok]
exact = dyn.velocity_decomposition(free, p2, tok, tgt)["exact"][tok]
fixed = dyn.tanhmax_velocity(S, O, c, dI)
printed = dyn.tanhmax_velocity_as_printed(S, O, c, dI)

fig, ax = plt.subplots(figsize=(4.3, 4.4))  # type sized for a slide: 13.5 pt, few ticks
lim = np.max(np.abs(exact)) * 1.1
ax.plot([-lim, lim], [-lim, lim], color="0.7", lw=0.8)
ax.scatter(exact.ravel(), fixed.ravel(), s=22, label="with $-$ (corrected)")
ax.scatter(exact.ravel(), printed.ravel(), s=22, marker="x", label="with the printed sign")
ax.xaxis.set_major_locator(MaxNLocator(nbins=4, symmetric=True))
ax.yaxis.set_major_locator(MaxNLocator(nbins=4, symmetric=True))
ax.tick_params(labelsize=13.5)
ax.set_xlabel("exact velocity (autograd)", fontsize=13.5)
ax.set_ylabel("Eq. 7", fontsize=13.5)
ax.legend(fontsize=13.5, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, handletextpad=0.2)
fig.tight_layout()
save(fig, "02_tanhmax_eq7_sign")
print("corrected: max rel error", np.max(np.abs(fixed - exact)) / np.max(np.abs(exact)))
print("printed:   fraction of tokens with the wrong sign",
      np.mean(np.sign(printed) != np.sign(exact)))

# %% [markdown]
# ## 4. Which scores rise, which fall
#
# Take one instance of 8 tokens, an under-predicted positive instance
# ($c < 0$), and vary the score $s_0$ and polarity $o_0$ of token 0 while the
# other seven stay fixed. The colour is the sign of $ds_0/d\tau$; the
# boundary between the colours is the threshold of `derivations/04-score-dynamics-closed-forms.md`, section 4,
# ($o_0 = a$ for the $g = h$ family, $o_0 = \tanh(s_0)\,a$ for tanhmax, ...),
# with $a$ the logit, which itself depends on $(s_0, o_0)$. (For softmax,
# $o_0 = a$ solves to $o_0 = \sum_{j\ne 0} w_j o_j / (1 - w_0)$, the weighted
# mean polarity of the *other* tokens, which does not depend on $s_0$: the
# boundary is flat.)

# %%
m = 60 if SMALL else 160  # even: s_0 = 0 (signexp's jump, expressive's zero) is not on the grid
s_grid = np.linspace(-3, 3, m)
o_grid = np.linspace(-2, 2, m)
SS, OO = np.meshgrid(s_grid, o_grid)
ctx_s = np.array([0.8, -0.3, 1.1, -1.2, 0.1, 0.4, -0.6])
ctx_o = np.array([0.9, -0.7, 0.2, -0.1, 0.5, -0.4, 0.3])
rows_s = np.concatenate([SS.reshape(-1, 1), np.broadcast_to(ctx_s, (SS.size, 7))], axis=1)
rows_o = np.concatenate([OO.reshape(-1, 1), np.broadcast_to(ctx_o, (OO.size, 7))], axis=1)
c_pos = -np.ones(SS.size)  # -c > 0: a positive instance, under-predicted

sign_cmap = ListedColormap(["#d6604d", "#f7f7f7", "#4393c3"])  # falls, exactly 0, rises
sign_norm = BoundaryNorm([-1.5, -0.5, 0.5, 1.5], sign_cmap.N)
# two rows of five panels (type sized for a slide: 14 pt on a figure 10.5 inches wide)
fig, axes = plt.subplots(2, 5, figsize=(10.5, 4.9), sharex=True, sharey=True)
for ax, name in zip(axes.ravel(), ACTIVATIONS):
    v = dyn.score_velocity(name, rows_s, rows_o, c_pos, np.ones_like(rows_s))[:, 0].reshape(SS.shape)
    ax.pcolormesh(SS, OO, np.sign(v), cmap=sign_cmap, norm=sign_norm, shading="nearest")
    # the boundary itself: the zero level of the velocity, interpolated (not of its sign);
    # where the velocity is exactly 0 on a whole region (relu, cosformer for s_0 < 0) there is none
    ax.contour(SS, OO, np.ma.masked_equal(v, 0.0), levels=[0.0], colors="k", linewidths=0.9)
    ax.set_title(name, fontsize=14)
    ax.axhline(0, color="k", lw=0.4)
    ax.axvline(0, color="k", lw=0.4)
    ax.tick_params(labelsize=14)
for ax in axes.ravel()[len(ACTIVATIONS):]:
    ax.axis("off")
axes[0, 0].set_xticks([-2, 0, 2])
axes[0, 0].set_yticks([-2, 0, 2])
for ax in axes[-1]:
    ax.set_xlabel("score $s_0$", fontsize=14)
axes[0, -1].xaxis.set_tick_params(labelbottom=True)  # the panel above the empty one keeps its scale
axes[0, -1].set_xlabel("score $s_0$", fontsize=14)
for ax in axes[:, 0]:
    ax.set_ylabel("polarity $o_0$", fontsize=14)
fig.suptitle("sign of $ds_0/d\\tau$: blue rises, red falls, white: exactly 0 (does not move); "
             "black: $ds_0/d\\tau = 0$", fontsize=14)
fig.tight_layout()
save(fig, "02_which_scores_rise")

# %% [markdown]
# Read the panels with `derivations/04-score-dynamics-closed-forms.md`, section 4,: softmax, sigsoftmax and
# sigmoid split the plane by a horizontal line (the score does not decide
# the direction); tanhmax's boundary bends with $\tanh(s_0)$,
# signexp's jumps at $s_0 = 0$; expressive's direction flips with the sign of
# $s_0$ (it is $|s_0|$ that follows $o_0 - a$); linear and relu ignore the
# context (the boundary is $o_0 = 0$; relu's left half never moves);
# cosformer's tokens with $s_0 \le 0$ are dead.

# %% [markdown]
# ## 5. Shared projections: an approximation
#
# TanhMax's public code builds $Q_t = W_q E_t$, $K_t = W_k E_t$ with shared
# $W_q, W_k$; Sun & Lu use one global query $q$. Then (03.P7):
# exact $=$ diagonal $+$ cross-token $+$ other-path terms, and Proposition 1
# keeps only the first (with its own $\Delta_I$). The panel titles give the
# two neglected terms together, exact $-$ diagonal; the next figure shows them
# one by one.

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.8))
for ax, kind in zip(axes, ["shared", "global"]):
    mdl = dyn.OneLayerModel(kind, "tanhmax", "sigmoid", "bce", scale=2.0 if kind == "shared" else 1.0)
    prm = mdl.init_params(T=12, d=4, dv=4, rng=np.random.default_rng(5))
    rr = dyn.velocity_decomposition(mdl, prm, tokens, target)
    lim = np.max(np.abs(rr["exact"])) * 1.1
    ax.plot([-lim, lim], [-lim, lim], color="0.7", lw=0.8)
    ax.scatter(rr["exact"], rr["formula"], s=18, label="Proposition 1 (paper's $\\Delta_I$)")
    ax.scatter(rr["exact"], rr["diagonal"], s=18, marker="x", label="diagonal term of (03.P7)")
    ax.set_xlabel("exact velocity")
    neglected = np.max(np.abs(rr["exact"] - rr["diagonal"])) / np.max(np.abs(rr["exact"]))
    ax.set_title(f"{kind}: neglected (cross-token + other path)\nup to {neglected:.2f} of max|exact|",
                 fontsize=9)
    ax.legend(fontsize=7)
axes[0].set_ylabel("approximation")
fig.tight_layout()
save(fig, "02_shared_projections")

# %% [markdown]
# How large are the neglected terms as the embedding dimension grows? For
# the global query, the cross-token kernel is $E_t\cdot E_m/\lambda^2$: random
# embeddings become nearly orthogonal in high dimension, so we expect the
# cross terms to shrink relative to the diagonal ones. The medians over
# random initialisations (ten at full size, three at the small size) are
# printed below the figure. Over so few initialisations a median is noisy,
# and it need not fall at every step of the dimension: read the trend from
# the smallest dimension to the largest. For both kinds of model both
# neglected terms are smaller at the largest dimension than at the smallest,
# and the other-path term is the smaller of the two throughout; the
# cross-token term of the global query falls most slowly (all tokens share
# the one query $q$, so every pair stays coupled through it).

# %%
dims = [2, 4, 8, 16] if SMALL else [2, 4, 8, 16, 32, 64]
seeds = range(3 if SMALL else 10)
table = {kind: {"cross": [], "other": []} for kind in ("shared", "global")}
for kind in table:
    for d in dims:
        cr, ot = [], []
        for sd in seeds:
            mdl = dyn.OneLayerModel(kind, "tanhmax", "sigmoid", "bce",
                                    scale=np.sqrt(d) if kind == "shared" else 1.0)
            prm = mdl.init_params(T=12, d=d, dv=4, rng=np.random.default_rng(100 + sd))
            rr = dyn.velocity_decomposition(mdl, prm, tokens, target)
            top = np.max(np.abs(rr["exact"]))
            cr.append(np.max(np.abs(rr["cross"])) / top)
            ot.append(np.max(np.abs(rr["other"])) / top)
        table[kind]["cross"].append(np.median(cr))
        table[kind]["other"].append(np.median(ot))

fig, ax = plt.subplots(figsize=(5.5, 3.6))
for kind, mk in (("shared", "o"), ("global", "s")):
    ax.plot(dims, table[kind]["cross"], marker=mk, label=f"{kind}: cross-token")
    ax.plot(dims, table[kind]["other"], marker=mk, ls="--", label=f"{kind}: other path")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("embedding dimension")
ax.set_ylabel("max|term| / max|exact| (median)")
ax.set_title("neglected terms of Proposition 1 (tanhmax)")
ax.legend(fontsize=8)
save(fig, "02_cross_terms_vs_dim")
for kind in table:
    print(kind, "cross:", np.round(table[kind]["cross"], 3), " other:", np.round(table[kind]["other"], 3))
    cross, other = np.array(table[kind]["cross"]), np.array(table[kind]["other"])
    assert cross[-1] < cross[0] and other[-1] < other[0] and np.all(other < cross), kind  # what the text says
