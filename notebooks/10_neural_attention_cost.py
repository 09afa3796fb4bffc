# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 10 — What Neural Attention's scores cost
#
# NeuralAttn (DiGiugno & Mahmood) computes the Neural Attention score matrix
# by concatenating every query with every key into a tensor
# $\mathbf C \in \mathbb R^{n\times n\times 2d'}$ (its Eq. 7) and running a
# small MLP on each pair (Eq. 8). Its section 3.2 calls the memory of
# $\mathbf C$ "much worse" than dot-product attention's, and its Tables 6-8
# report whole-model training memory and time for $d' = 2, 16$ and no
# down-projection ($d = 64$).
#
# Because $W_h[q';k'] = W_{hq}q' + W_{hk}k'$, $\mathbf C$ never has to exist.
# This notebook measures three evaluations of the same scores, and
# dot-product scores $QK^\top/\sqrt d$ as the reference:
#
# * **(a)** `neural_scores_concat`: $\mathbf C$ built, as in the paper;
# * **(b)** `neural_scores_decomposed`: per-token halves, one $n\times n\times h$ array;
# * **(c)** `neural_scores_chunked`: (b) for `chunk` query rows at a time;
# * and `scores.Neural.forward`, the library's autograd-traceable forward.
#
# The argument, line by line, is `derivations/17-neural-attention-cost.md`;
# the code is `refattn/studies/neural_cost.py`. Peak memory is measured
# with `tracemalloc` (NumPy reports its buffers to it), time as the best of a
# few `time.perf_counter` runs. Timings depend on the machine and its load.
# Environment variables: `REFATTN_FIGDIR` (figures go there) and
# `REFATTN_SMALL=1` (small sizes, as in CI).

# %%
import os

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from refattn import score  # noqa: E402
from refattn.studies import neural_cost as nc  # noqa: E402
from refattn.plots import save, start  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script
MiB = 2 ** 20
np.set_printoptions(precision=4, linewidth=100)

# %% [markdown]
# ## 1. Three evaluations, one matrix
#
# Random queries and keys of shape (batch, heads, n, d) and shared weights
# from `score("neural").init_params`. The three evaluations, and the
# library's forward, agree to rounding; (c) does for a chunk size that does
# not divide $n$ too.

# %%
rng = np.random.default_rng(0)
B, H, n, d, d_prime, h = 2, 4, 37, 64, 16, 16
q = rng.standard_normal((B, H, n, d))  # (B, H, n, d)
k = rng.standard_normal((B, H, n, d))  # (B, H, n, d)
P = score("neural").init_params(d, rng, d_prime=d_prime, hidden_size=h)
S_a = nc.neural_scores_concat(q, k, P)  # (B, H, n, n)
for name, S in (("(b) decomposed", nc.neural_scores_decomposed(q, k, P)),
                ("(c) chunked, chunk=10", nc.neural_scores_chunked(q, k, P, chunk=10)),
                ("scores.Neural.forward", score("neural")(q, k, P))):
    print(f"{name:24s} max |S - S_a| = {np.max(np.abs(S - S_a)):.1e}")
print("S shape", S_a.shape)

# %% [markdown]
# ## 2. The byte count, checked
#
# `peak_bytes` counts the arrays alive at each method's high-water mark
# (derivation 17, Eqs. 17.M0-17.M4). Per batch element, in entries:
# dot $n^2 + nd$; (a) $n^2(2d' + h) + 2nd'$; (b) $n^2(h+1) + 2n(d'+h)$;
# (c) $n^2 + c\,n(h+1) + 2n(d'+h)$; library $(2h+1)n^2 + 2n(d'+h) + nh$.
# `measure_peak` gives what `tracemalloc` saw during one call.

# %%
chunk = 8
for method in nc.METHODS:
    peak, _ = nc.measure_peak(nc._call, method, q, k, P, chunk)
    ana = nc.peak_bytes(method, n_q=n, d=d, d_prime=d_prime, hidden=h, chunk=chunk, batch=B * H)
    print(f"{nc.LABELS[method]:26s} measured {peak / MiB:7.3f} MiB   analytic {ana / MiB:7.3f} MiB   "
          f"ratio {peak / ana:.4f}")

# %% [markdown]
# ## 3. Memory and time against $n$ (NeuralAttn Tables 6-8, score only)
#
# `run_neural_cost` sweeps $n$ and $d'$ and reports every method as a ratio to
# dot-product scores. The full size ($n$ up to 1024, the paper's WikiText-103
# length, and 785, its CIFAR length) takes under a minute on one core;
# `REFATTN_SMALL=1` runs a small sweep. Dashed lines in the figure are the
# analytic counts; the measured points lie on them.

# %%
if SMALL:
    result = nc.run_neural_cost(nc.Settings(ns=(32, 64, 128), d_primes=(2, 16), hidden=16, chunk=16,
                                            budget_mib=(4,), repeats=1))
else:
    result = nc.run_neural_cost(nc.Settings())
print(nc.report(result))
fig = nc.plot(result)
save(fig, "10_neural_cost_vs_n")

# %% [markdown]
# Reading the figure: (a)'s memory rises with $d'$ because $\mathbf C$ has
# $2d'$ entries per pair; (b)'s does not change with $d'$ at all (its one
# pair array has $h$ entries per pair); (c) sits a small factor above
# dot-product attention, because what it keeps of size $n^2$ is only the
# score matrix that every attention needs. The time ratios are large
# because the dot product is one BLAS matrix product ($n^2 d$ multiply-adds
# at full speed) while the MLP evaluates $n^2 h$ hidden units, each with a
# `tanh`, over arrays that no longer fit in cache.

# %% [markdown]
# ## 4. The longest sequence a memory budget allows
#
# Solving the byte counts for $n$ (`max_length`), for $B\times H = 8$
# (the paper's 8 heads, one sample), $d = 64$, $h = 16$, chunk 64:
# chunking reaches lengths about ten times longer than the concatenation at
# $d' = 64$, and close to what the dot product itself reaches.

# %%
budgets = 2.0 ** np.arange(4, 13)  # 16 MiB .. 4 GiB
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
for ax, dp in zip(axes, (2, 64)):
    sizes = {"d": 64, "d_prime": dp, "hidden": 16, "chunk": 64, "batch": 8}
    for i, method in enumerate(nc.METHODS):
        reach = [nc.max_length(method, int(b * MiB), **sizes) for b in budgets]
        ax.loglog(budgets, reach, "o-", ms=3, color=f"C{i}", label=nc.LABELS[method])
    ax.set_xlabel("memory budget (MiB)")
    ax.set_title(f"d' = {dp}, h = 16, B x H = 8, float64", fontsize=9)
axes[0].set_ylabel("longest n (analytic)")
axes[0].legend(fontsize=7)
fig.tight_layout()
save(fig, "10_max_n_vs_budget")
for dp in (2, 64):
    sizes = {"d": 64, "d_prime": dp, "hidden": 16, "chunk": 64, "batch": 8}
    print(f"d' = {dp:2d}, 1 GiB: " + ", ".join(f"{m} {nc.max_length(m, 2 ** 30, **sizes)}" for m in nc.METHODS))

# %% [markdown]
# ## 5. What the chunk size trades
#
# A smaller chunk means a smaller temporary ($c\,n\,h$ entries) but more
# Python-level iterations; a chunk as large as $n$ is (b) again. The time
# is flat over a wide middle range, and on this machine a chunk whose
# buffer fits in the CPU cache is faster than (b) itself.

# %%
n_c = 128 if SMALL else 1024
chunks = (1, 4, 16, 64, n_c) if SMALL else (1, 4, 16, 64, 256, n_c)
qc = rng.standard_normal((1, 1, n_c, 64))
kc = rng.standard_normal((1, 1, n_c, 64))
Pc = score("neural").init_params(64, rng, d_prime=2, hidden_size=16)
peaks, times = [], []
for c in chunks:
    peaks.append(nc.measure_peak(nc.neural_scores_chunked, qc, kc, Pc, chunk=c)[0] / MiB)
    times.append(nc.measure_time(nc.neural_scores_chunked, qc, kc, Pc, chunk=c, repeats=1 if SMALL else 3) * 1e3)
    print(f"chunk {c:5d}: peak {peaks[-1]:8.2f} MiB, time {times[-1]:8.2f} ms")
fig, ax = plt.subplots(figsize=(5, 3.4))
ax.loglog(chunks, peaks, "o-", label="peak memory (MiB)")
ax.loglog(chunks, times, "s--", label="best time (ms)")
ax.set_xlabel("chunk (query rows per block)")
ax.set_title(f"(c) at n = {n_c}, d' = 2, h = 16", fontsize=9)
ax.legend(fontsize=8)
fig.tight_layout()
save(fig, "10_chunk_size")

# %% [markdown]
# ## 6. The backward pass, chunked
#
# In training the hidden activations are needed again for the gradient.
# `neural_vjp_chunked` recomputes them block by block instead of storing
# $n^2 h$ of them, at the price of one more pass of the pair MLP. Its
# gradients equal the library's hand-derived `Neural.backward` (which autograd
# checks in `tests/core/test_scores.py`).

# %%
G = rng.standard_normal(S_a.shape)  # a random cotangent
dq, dk, dP = nc.neural_vjp_chunked(G, q, k, P, chunk=10)
rq, rk, rP = score("neural").backward(G, score("neural").forward(q, k, P)[1])
print("max |dq - dq_lib| =", f"{np.max(np.abs(dq - rq)):.1e}",
      " max over params:", f"{max(np.max(np.abs(dP[p] - rP[p])) for p in P):.1e}")
