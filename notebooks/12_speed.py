# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 12 — Speed without new mathematics
#
# `derivations/20-speed.md` explains how refattn's fast path
# (`refattn.fast`) makes attention on NumPy about as fast as PyTorch's eager
# softmax attention on the CPU, while the reference (`refattn.attention`)
# stays the textbook formula. Every step keeps the numbers the reference
# computes; this notebook checks that, one step at a time, and then times
# the result:
#
# 1. the fast path's blocked, threaded route and its whole-batch route
#    against the reference, for every activation;
# 2. the VJP in the factored form 01.R5, $ds = u\odot A - B\,\langle u,\phi\rangle$,
#    against its definition, and what it lets the cache leave out;
# 3. linear attention's backward pass by associativity, against the general
#    route, and its cost as $n$ grows, with the slopes measured;
# 4. the benchmark of the fast path's speed targets as a figure (the one long
#    step: it says how long before it starts, and prints its progress).
#
# The symbols are those of the learning path's notation table
# (`derivations/00-overview.md`, section 8). Environment: `REFATTN_SMALL=1`
# runs everything at a small size (CI); `REFATTN_FIGDIR` saves the figures.

# %%
import json
import os
import subprocess
import sys
import tempfile
import time

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from refattn import ACTIVATIONS, activation, fast  # noqa: E402
from refattn.core import attention as reference  # noqa: E402
from refattn.fast import attention, attention_backward, threads  # noqa: E402
from refattn.fast.kernels import Generic, forward as kernel_forward, kernel  # noqa: E402
from refattn.plots import save, start  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script
rng = np.random.default_rng(0)
print("threads:", fast.num_threads(), "| BLAS control:", threads.blas_control() is not None)

# %% [markdown]
# ## 1. The fast path gives the reference's numbers
#
# `fast.attention` splits the (batch, head) slices into blocks of about
# 512 KiB of scores and runs the same per-batch code on each, on a thread
# pool; `fast.set_blocking(False)` turns that off. The largest relative
# difference of the output and of the three gradients from the reference
# `refattn.attention`, for both routes:

# %%
shape = (2, 2, 128, 16) if SMALL else (4, 4, 256, 64)
Q, K, V, G = (rng.standard_normal(shape) for _ in range(4))


def run(impl, act, blocking=True):
    fast.set_blocking(blocking)
    try:
        out, cache = impl.attention(Q, K, V, activation=act, causal=True)
        dQ, dK, dV, _ = impl.attention_backward(G, cache)
    finally:
        fast.set_blocking(True)
    return [out, dQ, dK, dV]


def rel(xs, ys):
    return max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(xs, ys))


for act in ACTIVATIONS:
    ref = run(reference, act)
    print(f"{act:11s} whole batch {rel(run(fast, act, False), ref):.1e}   "
          f"blocked {rel(run(fast, act, True), ref):.1e}")

# %% [markdown]
# ## 2. The VJP in two factors
#
# Regrouping Eq. 01.R4 by $u$ and by $\langle u,\phi\rangle$ gives (derivation
# 01, section 2, Step 8)
#
# $$ds = u\odot A - B\,\langle u,\phi\rangle,\qquad A = (\rho' + \rho\ell')\,p,\quad B = \ell' p.$$
#
# `refattn.fast.kernels` gives each built-in activation a kernel whose
# `factors(s, p, phi)` returns $(A, B)$; `Generic` evaluates the definitions
# from $s$ with the reference's $\rho, \rho', \ell'$, the kernels use
# shortcuts. Below, each shortcut against the definition on one row, and which
# activations need the scores at all (those that do not have them recomputed
# on demand by the fast path's cache).

# %%
s = rng.standard_normal(12) * 2
print(f"{'activation':11s} {'needs s':>8s} {'|A - A_def|':>12s} {'|B - B_def|':>12s}")
for name in ACTIVATIONS:
    act = activation(name)
    k = kernel(act)
    p, phi, aux = kernel_forward(act, s)
    A, B = k.factors(aux, p, phi)
    A0, B0 = Generic(act).factors(s, p, phi)
    dB = float(np.abs(B0).max()) if B is None else float(np.abs(B - B0).max())
    print(f"{name:11s} {str(k.needs_s):>8s} {float(np.abs(A - A0).max()):12.1e} {dB:12.1e}")

# %% [markdown]
# For tanhmax, $A = p$ and $B = \phi$: its Jacobian is
# $\mathrm{diag}(p) - \phi\phi^T$, softmax's with the signed weights in the
# outer product, because $\sinh' = \cosh$.

# %%
t = activation("tanhmax")
J = t.jacobian(s)
print("tanhmax: max |J - (diag(p) - phi phi^T)| =",
      float(np.abs(J - (np.diag(t.p(s)) - np.outer(t(s), t(s)))).max()))

# %% [markdown]
# ## 3. Linear attention by associativity
#
# With $\phi = s/n$, no mask and a dot score, $Y = \frac{\beta}{n}Q(K^TV)$,
# so the backward pass needs four $n\times d$ by $d\times d_v$ products
# instead of four $n\times n$ by $n\times d$ ones (derivation 20, section 4).
# The gradients agree with the reference. The general route (forced here with
# a mask of all True) does $O(n^2)$ work, the associative one $O(n)$: on the
# log-log plot the dotted guide lines grow like $n$ and $n^2$, and the cell
# prints each route's measured slope, the least-squares slope of log time
# against log $n$. Expect the general route's slope near 2 or above (its
# $n \times n$ arrays outgrow the caches as $n$ grows) and the associative
# one's at most 1 (below 1 where the fixed cost of a call still counts).

# %%
def linear_backward_time(n, masked, d=16, repeats=3):
    Qn, Kn, Vn, Gn = (rng.standard_normal((2, 2, n, d)) for _ in range(4))
    mask = np.ones((1, n), bool) if masked else None
    _, cache = attention(Qn, Kn, Vn, activation="linear", mask=mask)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        attention_backward(Gn, cache)
        ts.append(time.perf_counter() - t0)
    return min(ts)


Qn, Kn, Vn, Gn = (rng.standard_normal((2, 2, 64, 16)) for _ in range(4))
ga = attention_backward(Gn, attention(Qn, Kn, Vn, activation="linear")[1])
gg = reference.attention_backward(Gn, reference.attention(Qn, Kn, Vn, activation="linear")[1])
print("max relative difference, associative vs the reference:",
      max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(ga[:3], gg[:3])))

ns = [64, 128, 256] if SMALL else [128, 256, 512, 1024, 2048]
t_assoc = [linear_backward_time(n, False) * 1e3 for n in ns]
t_general = [linear_backward_time(n, True) * 1e3 for n in ns]
slopes = {route: float(np.polyfit(np.log(ns), np.log(ts), 1)[0])  # d log t / d log n, least squares
          for route, ts in (("general", t_general), ("associative", t_assoc))}
fig, ax = plt.subplots(figsize=(4.4, 3.9))  # type sized for a slide: 13 pt
ax.loglog(ns, t_general, "o-", label=f"general ($n \\times n$ weights), slope {slopes['general']:.2f}")
ax.loglog(ns, t_assoc, "s-", label=f"by associativity, $Q\\,(K^TV)$, slope {slopes['associative']:.2f}")
guide = np.array(ns, dtype=float) / ns[0]  # guide lines through each route's first point, named at their end
for start, power, text in ((t_general[0], 2, "$\\propto n^2$"), (t_assoc[0], 1, "$\\propto n$")):
    ax.loglog(ns, start * guide**power, "k:", lw=1)
    ax.text(ns[-1], start * guide[-1] ** power, " " + text, fontsize=13, va="center")
ax.set_xticks(ns, [str(n) for n in ns])
ax.minorticks_off()
ax.tick_params(labelsize=13)
ax.set_xlabel("sequence length n", fontsize=13)
ax.set_ylabel("backward pass (ms)", fontsize=13)
ax.set_title("linear attention, (2, 2, n, 16)", fontsize=13)
ax.legend(fontsize=13, loc="lower center", bbox_to_anchor=(0.5, 1.1), frameon=False)
fig.tight_layout()
save(fig, "12_linear_associativity")
for n, a, b in zip(ns, t_assoc, t_general):
    print(f"n = {n:5d}: general {b:8.2f} ms, associative {a:6.2f} ms")
print(f"over {ns[-1] // ns[0]}x in n: general {t_general[-1] / t_general[0]:.0f}x the time, slope "
      f"{slopes['general']:.2f}; associative {t_assoc[-1] / t_assoc[0]:.1f}x, slope {slopes['associative']:.2f}")

# %% [markdown]
# ## 4. The benchmark
#
# `benchmarks/bench_cpu_attention.py` times forward + backward for every
# activation: the blocked route, the whole-batch route, autograd, and
# PyTorch's eager softmax attention (when PyTorch is installed; it is a
# benchmark-only dependency). At the small size this is a smoke run whose
# times mean little. The full run is the one long step of this notebook.
# Its time is set by its timing protocol, passes of every candidate after a
# pause and a warm-up (the script's docstring), and by how fast each run
# goes, which other work on the machine slows down. So the cell first says
# how long the same command took when its committed run
# (`benchmarks/results/cpu_attention-avx2.json`, which records the machine
# and its load) was measured, then prints the benchmark's progress, one line
# per pass, and at the end how long it took here.

# %%
recorded = json.load(open(os.path.join("benchmarks", "results", "cpu_attention-avx2.json"), encoding="utf-8"))
print(f"the benchmark: {recorded['candidates']} candidates x {recorded['passes']} passes, each after a "
      f"{recorded['pause_s']} s pause and {recorded['warmup_s']} s of warm-up, {recorded['repeats']} timed runs")
print(f"recorded: {recorded['seconds'] / 60:.1f} minutes on {recorded['cores']} cores ({recorded['machine']['cpu']}) "
      f"at a load average of {recorded['load_average'][0]:g} to {recorded['load_average'][1]:g}; "
      "longer where other work loads the machine" + ("" if not SMALL else " (this is the smoke run: seconds)"))
cmd = [sys.executable, "-u", os.path.join("benchmarks", "bench_cpu_attention.py")] + (["--quick"] if SMALL else [])
t0 = time.perf_counter()
with tempfile.TemporaryDirectory() as tmp:
    out_file = os.path.join(tmp, "cpu_attention.json")
    with subprocess.Popen(cmd + ["--out", out_file], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()}) as proc:
        for char in iter(lambda: proc.stdout.read(1), ""):  # its progress and its table, as they come
            print(char, end="", flush=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode})")
    res = json.load(open(out_file, encoding="utf-8"))
print(f"\nthis run took {(time.perf_counter() - t0) / 60:.1f} minutes")
rows = res["rows"]
x = np.arange(len(rows))
fig, ax = plt.subplots(figsize=(7.5, 3.4))
for i, (key, label) in enumerate((("refattn_total_s", "refattn (blocked)"),
                                  ("unblocked_total_s", "refattn, whole batch"),
                                  ("autograd_total_s", "autograd (same forward)"))):
    ax.bar(x + (i - 1) * 0.27, [1e3 * r[key] for r in rows.values()], 0.27, label=label)
if res["torch"]:
    ax.axhline(1e3 * res["torch"]["total"], color="k", ls="--", lw=1,
               label=f"PyTorch softmax ({res['torch']['threads']} threads)")
ax.set_xticks(x, list(rows), rotation=30)
ax.set_ylabel("forward + backward (ms)")
ax.set_title(f"(B, H, n, d) = {tuple(res['shape'])}, float64")
ax.legend(fontsize=7)
save(fig, "12_benchmark")
print(json.dumps(res["verdict"], indent=1))
