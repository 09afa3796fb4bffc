# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 11 — A multi-layer decoder, Cog attention, and a toy language model
#
# Three seeds compare attention variants inside a multi-layer transformer LM:
# TanhMax swaps the activation (Table 4), Cog runs Cog attention
# (signexp, $\mathrm{sign}(s)\,\mathrm{softmax}(|s|)$) between two softmax
# layers, NeuralAttn puts Neural Attention in the first layer (Table 1). This
# notebook
#
# 1. runs Cog's Cog example through the library and looks at its
#    negative weights (`derivations/18-decoder-and-cog.md`, section 3);
# 2. checks the decoder's hand-derived gradient against autograd
#    (section 2 of the same derivation);
# 3. trains the toy LM of `refattn.studies.lm` on SST-2 sentences, or
#    on a small generated corpus when SST-2 is not found, and draws the
#    validation curves (`derivations/19-toy-lm.md`);
# 4. shows the signed attention weights of a trained Cog hybrid.
#
# Everything is imported from the package. `REFATTN_SMALL=1` (CI) trains a
# few steps at a tiny size; without it part 3 is the full comparison of
# derivation 19 (about a quarter of an hour on a 2-core CPU).
# `REFATTN_FIGDIR` names the folder figures are saved to.

# %%
import os
import time

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from autograd import grad  # noqa: E402

from refattn.core.attention import attention  # noqa: E402
from refattn.studies import lm  # noqa: E402
from refattn.studies.lm import DEFAULTS, load_corpus, run_lm, windows  # noqa: E402
from refattn.studies.helpers import resolve_data_dir  # noqa: E402
from refattn.training.models.decoder import DecoderLM, cog_hybrid, neural_first  # noqa: E402
from refattn.training.optim import Adam  # noqa: E402
from refattn.plots import save, start  # noqa: E402
from refattn.training.train import train  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script
np.set_printoptions(precision=3, suppress=True, linewidth=110)

# %% [markdown]
# ## 1. Cog's example: signed weights
#
# The example's attention is `sign(p) * softmax(|p|)` of unscaled dot
# products under a causal mask, at $b = 2$, $L = 4$, $d = 8$. In the library
# that is the `signexp` activation with the `"dot"` score. Its projections
# are written `einsum("bld,dd->bld", x, W)`, which takes the *diagonal* of
# `W` (a repeated index), so $q = x \odot \mathrm{diag}(W_q) + b_q$.

# %%
rng = np.random.default_rng(0)
b, L, d = 2, 4, 8
W = {k: rng.standard_normal((d, d)) / np.sqrt(d) for k in ("q", "k", "v", "o")}
bias = {k: rng.standard_normal(d) for k in ("q", "k", "v", "o")}
x = rng.standard_normal((b, L, d))
print("einsum 'bld,dd->bld' == x * diag(W):",
      np.array_equal(np.einsum("bld,dd->bld", x, W["q"]), x * np.diag(W["q"])))
q, k, v = (x * np.diag(W[n]) + bias[n] for n in ("q", "k", "v"))
out, cache = attention(q, k, v, score="dot", activation="signexp", causal=True)
w = cache["w"]
print("weights of example 0 (rows: queries, columns: keys):\n", w[0])
print("sum of |w| per row:", np.abs(w).sum(-1))
causal = np.tril(np.ones((L, L), bool))
print("fraction of negative weights among the causal ones:", float((w[:, causal] < 0).mean()))

# %% [markdown]
# The same weights through the decoder: one layer, one head, $\beta = 1$,
# the example's matrices as diagonal matrices. `attention_sublayer` is the
# layer's attention branch without its LN and skip connection, which is what
# `tr_forward` computes.

# %%
model = DecoderLM(5, L, width=d, n_layers=1, n_heads=1, activations="signexp", beta=1.0)
params = {name: np.zeros((1,) + shape) for name, shape in model.param_shapes().items()}
for lib, ex in (("Q", "q"), ("K", "k"), ("V", "v"), ("O", "o")):
    params[f"h0.W_{lib}"] = np.diag(np.diag(W[ex]))[None]
    params[f"h0.b_{lib}"] = bias[ex][None]
y_lib = model.attention_sublayer(params, 0, x[None])[0]
y_direct = (out * np.diag(W["o"])) + bias["o"]
print("max |decoder sublayer - (attention, then the example's output map)| =", np.abs(y_lib - y_direct).max())

fig, axes = plt.subplots(1, 2, figsize=(6.4, 2.8))
for ax, row in zip(axes, w):
    im = ax.imshow(row, cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
fig.colorbar(im, ax=axes, shrink=0.8, label="signexp weight")
fig.suptitle("Cog's example: causal Cog weights (red > 0, blue < 0)", fontsize=9)
save(fig, "11_cog_example_weights")

# %% [markdown]
# ## 2. The decoder's backward pass against autograd
#
# `DecoderLM.loss` is written against `array_module`, so autograd traces the
# very code that runs; `loss_and_grad` is the derivation's 18.G1-18.G12. A random
# cotangent over the seeds, random parameters, float64.

# %%
check_rng = np.random.default_rng(1)
for acts, scores in (("softmax", "dot"), ("tanhmax", "dot"), ("cog-hybrid", "dot"), ("softmax", "neural-first")):
    m = DecoderLM(7, 6, width=8, n_layers=3, n_heads=2, activations=acts, scores=scores)
    p = {n: a + 0.3 * check_rng.standard_normal(a.shape) for n, a in m.init_params([0, 1]).items()}
    batch = {"x": check_rng.integers(0, 7, (2, 3, 5)), "y": check_rng.integers(0, 7, (2, 3, 5))}
    u = check_rng.standard_normal(2)
    _, g, _ = m.loss_and_grad(p, batch)
    auto = grad(lambda pp: (m.loss(pp, batch) * u).sum())(p)
    top = max(np.abs(a).max() for a in auto.values())
    # softmax ignores a key bias (it shifts a whole row of scores): that gradient is exactly 0,
    # and both sides return rounding noise there; compare it absolutely, the others relatively
    vanish = [n for n in auto if np.abs(auto[n]).max() <= 1e-12 * top]
    ours = {n: g[n] * u.reshape((2,) + (1,) * (g[n].ndim - 1)) for n in auto}
    err = max(np.abs(ours[n] - auto[n]).max() / np.abs(auto[n]).max() for n in auto if n not in vanish)
    tiny = max([np.abs(ours[n]).max() / top for n in vanish], default=0.0)
    print(f"{m.label:<26} max relative error vs autograd: {err:.1e}; "
          f"{len(vanish)} zero gradients ({', '.join(vanish) or '-'}), at most {tiny:.0e} of the largest")
print("cog_hybrid(4) =", cog_hybrid(4), "  neural_first(3) =", neural_first(3))

# %% [markdown]
# ## 3. The toy LM
#
# Character level (derivation 19, section 1 says why), the same decoder and
# budget for each variant, all seeds in one batched program. SST-2 is read
# from `$REFATTN_SST2` or the project's shared data folder; without it a
# generated corpus of review-like sentences stands in, so the notebook still
# draws (its numbers then say nothing about the papers). With
# `REFATTN_SMALL=1` the run is a few steps long: its table shows the format,
# and its "direction" lines are noise, not findings.

# %%
try:
    data = str(resolve_data_dir())
except FileNotFoundError:
    data = "toy"
print("data:", data)
if SMALL:
    variants = ["softmax", "cog-hybrid", "neural-first"]
    settings = dict(seeds=2, steps=8, layers=3, width=16, heads=2, n_ctx=16, batch_size=8, eval_every=4,
                    eval_windows=8, final_windows=32)
else:
    variants = list(DEFAULTS["activations"])
    settings = {}
t0 = time.perf_counter()
result = run_lm(lm.Settings(activations=tuple(variants), data=data, **settings))
print(f"({time.perf_counter() - t0:.1f} s)")
print(lm.report(result))
fig = lm.plot(result)
save(fig, "11_lm_curves")

# %% [markdown]
# ## 4. Signed weights in a trained Cog hybrid
#
# Train a three-layer Cog hybrid (softmax | signexp | softmax) briefly and
# look at one head of its middle layer on the start of the first validation
# sentence: the weights are signed, and each row's absolute values sum to 1.

# %%
corpus = load_corpus(data)
n_ctx = 16 if SMALL else 48
cog = DecoderLM(len(corpus["vocab"]), n_ctx, width=16 if SMALL else 48, n_layers=3, n_heads=2,
                activations="cog-hybrid")
cp = cog.init_params([0])
opt = Adam(cp, lr=3e-3)
steps = 6 if SMALL else 400
hi = len(corpus["train"]) - n_ctx - 1


def batches(epoch):
    out = []
    for t in range(steps):
        s = np.random.default_rng([0, t, 5]).integers(0, hi + 1, (1, 8))
        xb, yb = windows(corpus["train"], n_ctx, starts=s)
        out.append({"x": xb, "y": yb})
    return out


train(cog, cp, opt, batches, epochs=1, progress=False)
xs = corpus["dev"][None, None, :n_ctx]
att = cog.outputs(cp, xs)["attention"][1][0, 0, 0]  # layer 1 (signexp), seed 0, example 0, head 0
chars = [corpus["vocab"][i] for i in xs[0, 0]]
print("negative weights:", int((att < 0).sum()), "of", int((att != 0).sum()), "nonzero;",
      "row sums of |w|:", np.round(np.abs(att).sum(-1)[:6], 12))
fig, ax = plt.subplots(figsize=(5.2, 4.6))
im = ax.imshow(att, cmap="RdBu_r", vmin=-np.abs(att).max(), vmax=np.abs(att).max())
ticks = [c if c != " " else "_" for c in chars]
ax.set_xticks(range(n_ctx))
ax.set_xticklabels(ticks, fontsize=5)
ax.set_yticks(range(n_ctx))
ax.set_yticklabels(ticks, fontsize=5)
ax.set_title(f"Cog hybrid, middle layer (signexp), head 0, after {steps} steps", fontsize=9)
fig.colorbar(im, ax=ax, shrink=0.8)
save(fig, "11_cog_trained_weights")
