# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 06 — signexp at a score of 0
#
# SignExp / Cog attention is
# $\phi_i = \mathrm{sign}(s_i)\,e^{|s_i|}/\sum_k e^{|s_k|}$. Its numerator
# $g(s) = \mathrm{sign}(s)\,e^{|s|}$ jumps from $-1$ to $+1$ at $s = 0$, so in
# the sense of distributions $g'(s) = e^{|s|} + 2\delta(s)$. Three ways of
# computing a gradient see three different things there:
#
# * the hand-derived VJP (`activation("signexp").backward`) and
# * autograd's VJP of the same forward code both use the pointwise
#   convention $\rho'(0) = 0$, $\mathrm{sign}(0) = 0$: no Dirac term;
# * central differences with step $\varepsilon$, at a score $s_j = \Delta$
#   (the offset from 0; $\delta$ is kept for the Dirac delta), see the jump
#   as a spike of height $\approx J/(2\varepsilon)$ whenever their window
#   $[\Delta-\varepsilon, \Delta+\varepsilon]$ contains 0.
#
# `refattn.theory.signexp_at_zero.signexp_near_zero` moves one entry $s_j = \Delta$ of a
# random row through 0 and records all three, with the closed-form
# predictions of `derivations/09-signexp-at-zero.md` (Eqs. 09.Z3-09.Z8).
# `REFATTN_SMALL=1` makes the sweeps short; `REFATTN_FIGDIR` is where the
# figures go.

# %%
import os

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.text import Text  # noqa: E402
import numpy as np  # noqa: E402

from refattn.plots import save, start  # noqa: E402
from refattn.studies import signexp_zero  # noqa: E402
from refattn.theory.signexp_at_zero import signexp_near_zero  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script

# %% [markdown]
# ## The side-by-side table
#
# The default offsets are $0$, $\pm10^{-8}, \dots, \pm10^{-1}$ with
# $\varepsilon = 10^{-6}$. "straddles" means $|\Delta| < \varepsilon$ (the
# window contains 0), "touches" means $|\Delta| = \varepsilon$ (one end of
# the window is exactly 0, where $\mathrm{sign}(0) = 0$ puts $F$ at the
# midpoint of the jump: half a spike), "one side" means the window misses 0.

# %%
res = signexp_near_zero()
print(signexp_zero.report(res))

# %% [markdown]
# Reading the table:
#
# * analytic and autograd agree in every row, to the last digit;
# * at $\Delta = 0$ both are exactly 0 (the library's convention); an
#   infinitesimal step to either side gives the one-sided limits $L_\pm$,
#   which differ from each other because the normaliser $C$ has a kink;
# * central differences agree with them once $|\Delta| > \varepsilon$, and
#   are $\approx J/(2\varepsilon)$ inside the window, exactly as predicted.

# %% [markdown]
# ## The three estimates against |delta|, both signs
#
# A log-spaced sweep of $|\Delta|$ from $10^{-10}$ to $10^{-1}$ on each side of 0,
# at $\varepsilon = 10^{-6}$. The vertical axis is $|\text{estimate}|$ on a
# log scale, because the spike is five orders of magnitude above the rest.
# The sweep contains $|\Delta| = 10^{-6} = \varepsilon$ exactly; that one
# point sits at half height (the window touches 0). Left of the dashed line
# the analytic VJP and autograd already sit at the one-sided limits
# $L_+$ (left panel) and $L_-$ (right panel), which differ because the
# normaliser has a kink at 0.

# %%
eps = 1e-6
study = signexp_zero.run(signexp_zero.Settings(eps=eps))  # the table above and this sweep: refattn signexp-at-zero
fig = signexp_zero.plot(study)
for text in fig.findobj(Text):  # type sized for a slide: 13 pt on the 9-inch figure
    text.set_fontsize(max(text.get_fontsize(), 13))
fig.axes[0].legend(fontsize=13, loc="center left")  # clear of the spike and of the plateau
fig.set_size_inches(9.0, 4.0)
fig.tight_layout()
save(fig, "06_three_estimates")

print(f"jump J = {res['jump']:.6g}, J/(2 eps) = {res['jump'] / (2 * eps):.6g}")
print(f"one-sided limits: L+ = {res['limit_plus']:.6g}, L- = {res['limit_minus']:.6g}; "
      f"library value at exactly 0: {res['at_zero']}")

# %% [markdown]
# ## The spike ~ 1/(2 eps), for three steps
#
# For each step $\varepsilon$, the central difference against $\Delta/\varepsilon$.
# Inside the window ($|\Delta| < \varepsilon$) it sits on a plateau of
# height $J/(2\varepsilon)$ plus an $O(1)$ term (Eq. 09.Z8); outside it drops to the
# ordinary derivative. Multiplying the plateau by $2\varepsilon$ recovers the
# jump $J$ for every step: the spike is the finite-difference image of the
# Dirac mass $J\,\delta(s_j)$, spread over a window of width $2\varepsilon$.

# %%
t = np.linspace(-3.0, 3.0, 40 if SMALL else 240)  # delta / eps; even count, so never exactly +-1
fig, ax = plt.subplots(figsize=(5.2, 3.6))
for eps_k in (1e-2, 1e-4, 1e-6):
    r = signexp_near_zero(t * eps_k, eps=eps_k)
    ax.semilogy(t, np.abs(r["central"]), "-", lw=1.2, label=f"eps = {eps_k:g}")
    ax.axhline(abs(r["jump"]) / (2 * eps_k), color="gray", lw=0.5, ls=":",
               label="J/(2 eps), each step" if eps_k == 1e-6 else None)
    inside = np.abs(t) < 1
    print(f"eps = {eps_k:g}: 2 eps * central inside the window: "
          f"{np.min(2 * eps_k * r['central'][inside]):.6f} .. {np.max(2 * eps_k * r['central'][inside]):.6f}"
          f"  (J = {r['jump']:.6f})")
ax.set_xlabel("delta / eps", fontsize=8)
ax.set_ylabel("|central difference|", fontsize=8)
ax.set_title("signexp: central differences spike to about J/(2 eps) for |delta| < eps", fontsize=9)
ax.legend(fontsize=7)
ax.tick_params(labelsize=7)
fig.tight_layout()
save(fig, "06_spike_vs_eps")

# %% [markdown]
# ## Summary
#
# * The library's gradient at an exact 0 is 0 in the moved entry (the
#   regular formula with $\mathrm{sign}(0) = 0$), not either one-sided limit
#   and not their average; autograd computes the same number.
# * Central differences are not wrong: they measure the jump, and their
#   spike $J/(2\varepsilon)$ grows without bound as $\varepsilon\to0$. A
#   pointwise gradient cannot carry that Dirac mass.
# * Away from 0 by more than the step, all three agree to rounding.
