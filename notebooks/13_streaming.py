# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 13 — Streaming attention for every activation
#
# `derivations/23-streaming.md` shows that the online-softmax trick of
# FlashAttention — a running maximum and a running sum per query, never the
# $n\times n$ scores — works for every activation of this library, because
# each one is a reweighted softmax $\phi = \rho(s)\,\mathrm{softmax}(\ell(s))$:
# when a new block of keys raises the running maximum of $\ell$, everything
# summed so far is multiplied by $e^{m_\text{old} - m_\text{new}}$, and
# $\rho(s_{ij})$, a fixed coefficient of each term, comes along untouched.
# `refattn.fast.streaming` implements it; this notebook
#
# 1. checks that streaming gives the dense reference's numbers, forward and
#    backward, for every activation;
# 2. steps through one query row block by block: the running maximum, and the
#    partial outputs converging to the dense result;
# 3. checks the backward pass's shortcut $\langle u_i, \phi_i\rangle = dY_i\cdot Y_i$;
# 4. plots peak memory and time against $n$ for dense and streaming attention.
#
# The symbols are those of the learning path's notation table
# (`derivations/00-overview.md`, section 8). Environment: `REFATTN_SMALL=1`
# runs everything at a small size (CI); `REFATTN_FIGDIR` saves the figures.

# %%
import json
import os
import subprocess
import sys

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

from refattn import ACTIVATIONS, activation  # noqa: E402
from refattn.core.attention import attention, attention_backward  # noqa: E402
from refattn.plots import save, start  # noqa: E402
from refattn.fast.streaming import streaming_attention, streaming_attention_backward  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. Streaming gives the dense numbers
#
# For each activation: causal attention on $(B, H, n, d)$ inputs with a block
# size that does not divide $n$, forward and backward, against
# `refattn.attention`. The columns are the largest relative differences of
# the output and of the three gradients (float64; the tests require
# $10^{-12}$).

# %%
n, d, block = (50, 8, 16) if SMALL else (300, 32, 64)
Q, K, V, G = (rng.standard_normal((2, 2, n, d)) for _ in range(4))


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


print(f"{'activation':11s} {'out':>8s} {'dQ':>8s} {'dK':>8s} {'dV':>8s}")
for act in ACTIVATIONS:
    out0, c0 = attention(Q, K, V, activation=act, causal=True)
    out1, c1 = streaming_attention(Q, K, V, activation=act, causal=True, block_size=block)
    g0, g1 = attention_backward(G, c0), streaming_attention_backward(G, c1)
    print(f"{act:11s} {rel(out1, out0):8.1e} " + " ".join(f"{rel(a, b):8.1e}" for a, b in zip(g1[:3], g0[:3])))

# %% [markdown]
# What the streaming cache keeps instead of the scores: per query row the
# final maximum `m` of $\ell$ and the normaliser `z`, and the output.

# %%
print({k: getattr(v, "shape", v) for k, v in c1.items() if k not in ("score", "activation", "params")})

# %% [markdown]
# ## 2. One query row, block by block
#
# Take one query and $n_k$ keys in blocks of $b$. After block $t$ the stream
# holds $m_t$ (the largest $\ell_{ij}$ seen), $z_t = \sum e^{\ell_{ij} - m_t}$
# and $y_t$, which by the derivation (section 2) is *the attention output over
# the keys seen so far*. The state after block $t$ is the final state of a
# stream over the first $t$ blocks, so we read each one off
# `streaming_attention` on that prefix of the keys, and check it against the
# dense reference on the same prefix. `reading=True` runs the loop the
# derivation walks line by line, whose cache holds $m_t$ as the maximum of
# $\ell$ itself (the fast route's strips keep the maximum of the kernels'
# cheaper exponent instead: the same $p$, another shift):

# %%
n_k, b, d = (96, 16, 8) if SMALL else (512, 32, 16)
q = rng.standard_normal((1, d)) * 1.5
Kr = rng.standard_normal((n_k, d))
Vr = rng.standard_normal((n_k, 2))  # two value dimensions: the output is a point in the plane
keys_seen = np.arange(b, n_k + b, b).clip(max=n_k)


def states(act):
    """(m_t, z_t, y_t) after each block, and the largest gap to the dense output on that prefix."""
    ms, zs, ys, gap = [], [], [], 0.0
    for t in keys_seen:
        y, cache = streaming_attention(q, Kr[:t], Vr[:t], activation=act, block_size=b, reading=True)
        ms.append(float(cache["m"][0]) * (2.0 if act == "sigsoftmax" else 1.0))  # the maximum of ell itself (sigsoftmax streams ell / 2)
        zs.append(float(cache["z"][0]))
        ys.append(y[0])
        gap = max(gap, float(np.abs(y - attention(q, Kr[:t], Vr[:t], activation=act)[0]).max()))
    return np.array(ms), np.array(zs), np.array(ys), gap


shown = ["softmax", "tanhmax", "signexp", "expressive", "linear"]
runs = {act: states(act) for act in shown}
for act, (ms, zs, ys, gap) in runs.items():
    print(f"{act:11s} prefix outputs vs dense: max gap {gap:.1e};  m: {ms[0]:.3f} -> {ms[-1]:.3f};"
          f"  z: {zs[0]:.2f} -> {zs[-1]:.2f}")

# %% [markdown]
# Left: the running maximum of $\ell$ (dots: each key's $\ell_{ij}$ for
# TanhMax, $\ell = \log\cosh s$). It only moves up, and only when a block
# holds a larger $\ell$; each move rescales what was summed by
# $e^{m_\text{old} - m_\text{new}}$. Linear's $\ell \equiv 0$: its maximum
# never moves and nothing is ever rescaled (derivation, section 5); softmax's
# line lies under signexp's ($\ell = s$ and $\ell = |s|$ share their largest
# value here). Middle: the distance of the partial output $y_t$ from the
# dense output over all keys; it is rounding ($10^{-16}$, printed above) at
# the last block. Right: TanhMax's partial outputs
# as points in the plane (two value dimensions), walking to the dense output
# (star).

# %%
s_row = (q @ Kr.T)[0] / np.sqrt(d)  # the scaled dot-product scores of the row
# type sized for a slide: 14 pt on a figure 11 inches wide; one legend for the two left panels
fig, axes = plt.subplots(1, 3, figsize=(11, 4.4))
ax = axes[0]
ax.plot(np.arange(1, n_k + 1), activation("tanhmax").ell(s_row), ".", ms=4, color="0.6",
        label="tanhmax, each key's $\\ell$")
for act, (ms, _, _, _) in runs.items():
    ax.step(keys_seen, ms, where="post", lw=1.8, label=act)
ax.set_xlabel("keys seen", fontsize=14)
ax.set_ylabel("running max of $\\ell$", fontsize=14)
ax = axes[1]
for act, (_, _, ys, _) in runs.items():
    final = attention(q, Kr, Vr, activation=act)[0][0]
    ax.plot(keys_seen, np.abs(ys - final).max(axis=1), "o-", ms=4, label=act)
ax.set_xlabel("keys seen", fontsize=14)
ax.set_ylabel("max $|y_t - y|$, $y$ dense", fontsize=14)
ax.set_title(f"one query row, blocks of {b}", fontsize=14)
ax = axes[2]
ys = runs["tanhmax"][2]
final = attention(q, Kr, Vr, activation="tanhmax")[0][0]
ax.plot(ys[:, 0], ys[:, 1], "o-", ms=5, color="C1")
right, top = ys[0] > np.mean([ax.get_xlim(), ax.get_ylim()], axis=1)  # the label goes towards the middle
ax.annotate(f"{keys_seen[0]} keys", ys[0], fontsize=14, xytext=(-8 if right else 8, -4 if top else 4),
            textcoords="offset points", ha="right" if right else "left",
            va="top" if top else "bottom")  # the first block; the path goes on to the star
ax.plot(*final, "k*", ms=14)
ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
ax.set_xlabel("output, value dim 0", fontsize=14)
ax.set_ylabel("value dim 1", fontsize=14)
ax.set_title("tanhmax: $y_t$ walks to the dense output ($\\bigstar$)", fontsize=14)
for ax in axes:
    ax.tick_params(labelsize=14)
fig.tight_layout(rect=(0, 0, 1, 0.9))
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles, labels, fontsize=14, loc="upper center", ncol=len(labels), frameon=False,
           bbox_to_anchor=(0.5, 1.0), columnspacing=1.0, handlelength=1.5)
save(fig, "13_one_row_block_by_block")

# %% [markdown]
# ## 3. The backward pass's shortcut
#
# The backward pass (Eq. 01.R5) needs $\langle u_i, \phi_i\rangle = \sum_j u_{ij}\phi_{ij}$
# with $u_{ij} = dY_i\cdot v_j$: a sum over a whole row of weights, which the
# stream never holds. Since $Y_i = \sum_j \phi_{ij} v_j$ is linear in the
# values, it is $dY_i\cdot Y_i$, one dot product per row (derivation,
# Step 7). Checked against the dense weights:

# %%
for act in ACTIVATIONS:
    out, cache = attention(Q, K, V, activation=act, causal=True)
    u = G @ np.swapaxes(V, -1, -2)  # (B, H, n, n)  u_ij = dY_i . v_j
    lhs = np.sum(u * cache["w"], axis=-1)  # <u_i, phi_i>
    rhs = np.sum(G * out, axis=-1)  # dY_i . Y_i
    print(f"{act:11s} max |<u, phi> - dY . Y| = {np.abs(lhs - rhs).max():.1e}")

# %% [markdown]
# ## 4. Memory and time against n
#
# `benchmarks/bench_streaming.py` measures one forward + backward (one head,
# $d = 64$, float64, TanhMax, causal, the fast route's own blocks): the peak of `tracemalloc`
# and the time, for streaming, the dense reference and the dense fast path
# (while $n \le 8192$), and PyTorch's CPU `scaled_dot_product_attention`
# (softmax; resident-memory growth in a fresh process). At the small size
# this runs the script's `--quick` smoke test, whose numbers mean little;
# otherwise it plots the recorded full run, `benchmarks/results/streaming.json`
# (the full run takes about 3 minutes on a 2-core machine).

# %%
if SMALL:
    cmd = [sys.executable, os.path.join("benchmarks", "bench_streaming.py"), "--quick", "--no-torch", "--json"]
    res = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                    env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout)
else:
    with open(os.path.join("benchmarks", "results", "streaming.json")) as f:
        res = json.load(f)
ns = sorted(int(k) for k in res["rows"])
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
for key, style in (("streaming", "o-"), ("reference", "s--"), ("fast", "^--"), ("torch", "x:")):
    pts = [(n, res["rows"][str(n)][key]) for n in ns if "skipped" not in res["rows"][str(n)].get(key, {"skipped": 1})]
    if not pts:
        continue
    label = {"torch": "PyTorch SDPA (softmax)", "reference": "dense reference",
             "fast": "dense fast path"}.get(key, key)
    axes[0].loglog([p[0] for p in pts], [p[1]["peak_mib"] for p in pts], style, label=label)
    axes[1].loglog([p[0] for p in pts], [p[1]["time_s"] for p in pts], style, label=label)
axes[0].loglog(ns, [n * n * 8 / 2**20 for n in ns], "k:", lw=0.8, label="one n x n float64 array")
axes[0].set_ylabel("peak memory (MiB)")
axes[1].set_ylabel("forward + backward (s)")
for ax in axes:
    ax.set_xlabel("sequence length n")
    ax.set_xticks(ns, [f"{n // 1024}k" if n >= 1024 else str(n) for n in ns])
    ax.minorticks_off()
axes[0].legend(fontsize=7)
fig.suptitle(f"{res['activation']}, causal, one head, d = {res['shape'][-1]}, "
             f"blocks {res['block_size'] or 'chosen for the cache'}", fontsize=9)
fig.tight_layout()
save(fig, "13_memory_and_time")
for n in ns:
    r = res["rows"][str(n)]["streaming"]
    print(f"n = {n:6d}: streaming {r['time_s']:8.3g} s, peak {r['peak_mib']:7.1f} MiB")
print(json.dumps(res["verdict"], indent=1, default=str)[:600])

# %% [markdown]
# ## 5. Beside PyTorch's fused attention
#
# `benchmarks/bench_sdpa.py` times streaming (its fast route), the dense fast
# path and PyTorch's `scaled_dot_product_attention` with autograd in one
# process, forward + backward at shape (1, 4, n, 64), softmax, on two threads
# each. Its full run needs PyTorch and about 7 minutes per BLAS kernel, so
# this cell plots the two recorded runs, `benchmarks/results/sdpa-haswell.json`
# and `sdpa-skylakex.json` (the same machine, OpenBLAS's two kernels): each
# bar is the median of the per-pass ratios, its whisker the smallest and
# largest pass; the dotted lines are the targets the fast route was built to.

# %%
runs = {}
for kernel in ("haswell", "skylakex"):
    with open(os.path.join("benchmarks", "results", f"sdpa-{kernel}.json")) as f:
        runs[kernel] = json.load(f)
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
for ax, (kernel, run) in zip(axes, runs.items()):
    rows = run["rows"]
    labels = [f"{r['dtype'][-2:]} {'c' if r['causal'] else 'f'} {r['n'] // 1024}k" for r in rows]
    x = np.arange(len(rows))
    for shift, key, name in ((-0.2, "streaming_over_sdpa", "streaming"), (0.2, "dense_over_sdpa", "dense fast path")):
        ratio = np.array([r[key]["ratio"] for r in rows])
        lo, hi = (np.array([r[key]["spread"][i] for r in rows]) for i in (0, 1))
        ax.bar(x + shift, ratio, 0.4, yerr=[ratio - lo, hi - ratio], capsize=2, label=name)
    for n, target in run["targets"]["streaming_over_sdpa"].items():
        ax.axhline(target, color="k", ls=":", lw=0.8)
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.set_xticks(x, labels, rotation=60, fontsize=7)
    ax.set_title(f"OpenBLAS kernel {run['machine']['blas_kernel']}", fontsize=9)
axes[0].set_ylabel("time / PyTorch SDPA time")
axes[0].legend(fontsize=7)
fig.suptitle("forward + backward, softmax, (1, 4, n, 64); 32/64 = float32/float64, c = causal, f = full", fontsize=9)
fig.tight_layout()
save(fig, "13_beside_sdpa")
for kernel, run in runs.items():
    worst = max(r["streaming_over_sdpa"]["ratio"] for r in run["rows"])
    act = max(v["ratio"] for r in run["rows"] for v in r["activation_over_softmax"].values())
    print(f"{run['machine']['blas_kernel']}: streaming / SDPA at most {worst:.2f}; "
          f"every activation within {act:.2f} of softmax's streaming time")
