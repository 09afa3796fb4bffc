# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 15 — The papers' formulations beside refattn in PyTorch and JAX
#
# A formula verified here next goes into a model, in the framework the model
# trains with. `refattn.torch` and `refattn.jax` carry the textbook's stable
# forward (the reweighted softmax, `derivations/01-reweighted-softmax.md`) and
# its hand-derived backward into `torch.autograd.Function` and
# `jax.custom_vjp`. The papers' own formulations, written as they are
# published, compute the same weights on ordinary scores and something else
# where they overflow or mask the wrong way. This notebook puts the two side
# by side on such inputs, forward and gradient, on every array library
# installed:
#
# | case | the papers' formulation | where it fails |
# |---|---|---|
# | A | TanhMax Eq. 6, $(e^{s_i} - e^{-s_i}) / \sum_k (e^{s_k} + e^{-s_k})$ | $\lvert s\rvert > 710$ (float64), $> 89$ (float32): $\infty/\infty$ |
# | B | Cog's displayed SignExp, $A = \mathrm{SignExp}(p) / \sum \mathrm{SignExp}(p)$, a signed denominator | a row whose signed sum nearly cancels |
# | C | Cog's JAX example, `sign(p) * softmax(where(mask, abs(p), -inf))` | a query row with every key masked: $0/0$ |
# | D | dot-product attention with the mask applied after the exponential, `exp(s - max s) * mask / sum` | a masked score far above the kept ones: every kept $e^{s - \max}$ underflows, $0/0$ |
# | E | Expressive Eq. 2, $z^2/(1+z^2) / N_m$ | a row of zero scores (a zero query): $N_m = 0$, $0/0$ |
#
# Each formulation is written once against the library's array namespace
# `xp` (the Python array API's spelling: `autograd.numpy`, PyTorch's through
# `array_api_compat`, `jax.numpy`) and run on NumPy (its gradient by autograd), PyTorch (autograd) and
# JAX (`jax.vjp`), whichever are installed (`pip install ".[torch,jax]"`);
# refattn's side is `refattn.activation` with its hand-derived VJP on NumPy,
# `refattn.torch.activation` and `refattn.jax.activation`. Scores are
# float64 unless a row says float32. `REFATTN_SMALL=1` shortens the sweep;
# `REFATTN_FIGDIR` saves the figure.

# %%
import importlib.util
import os

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import autograd  # noqa: E402
import autograd.numpy as anp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import refattn  # noqa: E402
from refattn.plots import save, start  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script


def installed(*names):
    return all(importlib.util.find_spec(n) is not None for n in names)


class NumPyLib:
    """NumPy: the papers' code traced by autograd; refattn's forward and hand-derived VJP."""

    name, xp = "NumPy", anp

    def array(self, x, dtype=np.float64):
        return np.asarray(x, dtype=dtype)

    def value_and_vjp(self, f, x, u):
        vjp, y = autograd.make_vjp(f)(x)
        return np.asarray(y), np.asarray(vjp(u))

    def refattn(self, name):
        act = refattn.activation(name)

        def f(s, mask=None):
            return act.forward(s, -1, mask)

        return f

    def refattn_value_and_vjp(self, name, s, u, mask=None):
        act = refattn.activation(name)
        w, cache = act.forward(s, -1, mask)
        return w, act.backward(u, cache)


LIBS = [NumPyLib()]

if installed("torch", "array_api_compat"):
    import array_api_compat.torch as torch_xp  # noqa: E402  (PyTorch's functions as the array API spells them)
    import torch  # noqa: E402

    import refattn.torch as rt  # noqa: E402

    class TorchLib:
        """PyTorch: the papers' code through autograd; refattn.torch's Function."""

        name, xp = "PyTorch", torch_xp

        def array(self, x, dtype=np.float64):
            return torch.tensor(np.asarray(x, dtype=dtype))

        def value_and_vjp(self, f, x, u):
            x = x.clone().requires_grad_(True)
            y = f(x)
            (g,) = torch.autograd.grad(y, x, torch.as_tensor(u, dtype=y.dtype))
            return y.detach().numpy(), g.numpy()

        def refattn_value_and_vjp(self, name, s, u, mask=None):
            phi = rt.activation(name)
            m = None if mask is None else torch.as_tensor(mask)
            return self.value_and_vjp(lambda x: phi(x, mask=m), s, u)

    LIBS.append(TorchLib())

if installed("jax", "array_api_compat"):
    import jax  # noqa: E402

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp  # noqa: E402

    import refattn.jax as rj  # noqa: E402

    class JaxLib:
        """JAX: the papers' code through jax.vjp; refattn.jax's custom_vjp."""

        name, xp = "JAX", jnp

        def array(self, x, dtype=np.float64):
            return jnp.asarray(np.asarray(x, dtype=dtype))

        def value_and_vjp(self, f, x, u):
            y, vjp = jax.vjp(f, x)
            return np.asarray(y), np.asarray(vjp(jnp.asarray(u, dtype=y.dtype))[0])

        def refattn_value_and_vjp(self, name, s, u, mask=None):
            phi = rj.activation(name)
            return self.value_and_vjp(lambda x: phi(x, mask=None if mask is None else jnp.asarray(mask)), s, u)

    LIBS.append(JaxLib())

print("libraries:", ", ".join(lib.name for lib in LIBS))


def row(label, lib, w, g):
    fin = lambda a: "finite" if np.all(np.isfinite(a)) else f"{int(np.sum(~np.isfinite(a)))} not finite"  # noqa: E731
    with np.errstate(invalid="ignore"):
        return (f"{label:<22} {lib:<8} weights {np.array2string(np.asarray(w).ravel()[:8], precision=3):<60} "
                f"({fin(w)}); gradient {fin(g)}")


def side_by_side(paper, name, s, u, mask=None, dtype=np.float64):
    """The paper's formulation (``paper(xp, s)``) and refattn's activation ``name`` on every library."""
    for lib in LIBS:
        x = lib.array(s, dtype)
        with np.errstate(all="ignore"):
            w, g = lib.value_and_vjp(lambda t: paper(lib.xp, t), x, np.asarray(u, dtype))
        print(row("the paper's", lib.name, w, g))
        w, g = lib.refattn_value_and_vjp(name, x, np.asarray(u, dtype), mask)
        print(row("refattn", lib.name, w, g))


# %% [markdown]
# ## A. TanhMax's Eq. 6 as written
#
# $\phi_i = (e^{s_i} - e^{-s_i}) / \sum_k (e^{s_k} + e^{-s_k})$. Every term
# overflows once $|s| > 709.78$ (float64), and the quotient is
# $\infty/\infty = $ NaN, in the forward pass and, through it, in the
# gradient. refattn evaluates $\tanh s \cdot \mathrm{softmax}(\log\cosh s)$
# with $\log\cosh s = |s| + \log(1 + e^{-2|s|}) - \log 2$, finite for every
# finite score; scores near $\pm 1000$ are ordinary there.


# %%
def tanhmax_eq6(xp, s):
    return (xp.exp(s) - xp.exp(-s)) / xp.sum(xp.exp(s) + xp.exp(-s), axis=-1, keepdims=True)


s_a = np.array([1000.0, 999.0, -1000.0, 0.5])
u_a = np.array([1.0, -0.5, 0.25, 2.0])
side_by_side(tanhmax_eq6, "tanhmax", s_a, u_a)
print("float32, scores / 10 (past 89):")
side_by_side(tanhmax_eq6, "tanhmax", s_a / 10, u_a, dtype=np.float32)

# %% [markdown]
# Where the scores are ordinary the two agree to rounding: the formulation is
# the same function, evaluated differently.

# %%
s_ok = np.array([1.5, -0.3, 0.2, -2.0])
paper_w = tanhmax_eq6(np, s_ok)
print("largest difference on ordinary scores:", float(np.max(np.abs(paper_w - refattn.activation("tanhmax")(s_ok)))))

# %% [markdown]
# The sweep below scales one row of scores by $c$: the paper's weights stop
# (NaN) past $c \approx 710 / \max|s|$ in float64 and $89 / \max|s|$ in
# float32; refattn's continue to their limit ($\pm 1/2$ for the two largest,
# which tie in $|s|$ and have opposite signs).

# %%
base = np.array([1.0, -1.0, 0.6, -0.2])
scales = np.geomspace(1.0, 2000.0, 40 if SMALL else 200)
fig, ax = plt.subplots(figsize=(7, 4))
for dtype, style in ((np.float64, "-"), (np.float32, "--")):
    with np.errstate(all="ignore"):
        paper = [tanhmax_eq6(np, (c * base).astype(dtype))[0] for c in scales]
    ours = [refattn.activation("tanhmax")((c * base).astype(dtype))[0] for c in scales]
    name = np.dtype(dtype).name
    ax.plot(scales, ours, style, color="#2166ac", label=f"refattn, {name}", alpha=0.7)
    ax.plot(scales, paper, style, color="#b2182b", label=f"TanhMax Eq. 6 as written, {name}", lw=2.5, alpha=0.6)
    first_nan = next((c for c, w in zip(scales, paper) if not np.isfinite(w)), None)
    ax.axvline(first_nan, color="#b2182b", ls=style, lw=0.8)
    ax.text(first_nan, 0.05, f" Eq. 6 NaN from here ({name})", color="#b2182b", fontsize=8, rotation=90, va="bottom")
    print(f"{name}: the paper's weight is NaN from c = {first_nan:.0f} on; refattn's at c = 2000: {ours[-1]:.4f}")
ax.set_xscale("log")
ax.set_xlabel("scale c of the scores c * (1, -1, 0.6, -0.2)")
ax.set_ylabel("weight of the first entry")
ax.set_title("TanhMax: Eq. 6 as written against the reweighted form")
ax.legend(fontsize=8)
save(fig, "15_tanhmax_overflow")

# %% [markdown]
# ## B. Cog's displayed formula: a signed denominator
#
# Cog displays $A = \mathrm{SignExp}(QK^\top) / \sum \mathrm{SignExp}(QK^\top)$
# with $\mathrm{SignExp}(p_{ij}) = s_{ij} \exp(s_{ij} p_{ij} - \hat m_i)$,
# $s = \mathrm{sign}\,p$, $\hat m_i = \max_j |p_{ij}|$. The numerator is
# $\mathrm{sign}(p)\,e^{|p| - \hat m}$; the denominator as displayed sums it
# *with its signs*, so it can vanish or turn negative. Cog's text and code sum
# the absolute values, as refattn's signexp does (derivation 18, section 3).


# %%
def cog_displayed(xp, p):
    sign = xp.sign(p)
    m = xp.max(xp.abs(p), axis=-1, keepdims=True)
    signexp = sign * xp.exp(sign * p - m)
    return signexp / xp.sum(signexp, axis=-1, keepdims=True)


s_b = np.array([1.0, -1.0 + 1e-9, 0.5, -0.5])
side_by_side(cog_displayed, "signexp", s_b, np.array([1.0, 0.0, 0.0, 0.0]))
print("largest |weight|, displayed formula:", float(np.max(np.abs(cog_displayed(np, s_b)))),
      "| refattn:", float(np.max(np.abs(refattn.activation("signexp")(s_b)))))

# %% [markdown]
# The gradient is finite in both, but the displayed formula's weights are of
# size $10^9$ and its gradient of size $10^{18}$: finite, and wrong for an
# attention layer.
#
# ## C. Cog's JAX example: a row with every key masked
#
# The example's `cog_attn` masks correctly, before the exponential:
# `abs_p = jnp.where(mask, jnp.abs(p), -jnp.inf)` and
# `sign(p) * jax.nn.softmax(abs_p, -1)`. A query row that may see no key
# (padding, or a causal mask shifted by one) has the shift $\max = -\infty$
# and softmax returns $(-\infty) - (-\infty) = $ NaN weights. (The scores'
# own gradient stays finite here, as `where` passes none to a masked entry;
# the row's output, NaN times the values, carries NaN into every layer after
# it and into the gradients of all that comes before.) refattn's convention:
# a row with no normaliser has weights 0 and gradient 0 (derivation 01,
# Appendix A).


# %%
def softmax(xp, x):
    e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))  # the shift of jax.nn.softmax
    return e / xp.sum(e, axis=-1, keepdims=True)


mask_c = np.array([[True, True, False, True], [False, False, False, False]])


def cog_example(xp, p):
    keep = mask_c if xp is anp else xp.asarray(mask_c)
    return xp.sign(p) * softmax(xp, xp.where(keep, xp.abs(p), -np.inf))


s_c = np.array([[0.5, -1.5, 2.0, 0.3], [0.5, -1.5, 2.0, 0.3]])
side_by_side(cog_example, "signexp", s_c, np.ones_like(s_c) * [1.0, -2.0, 0.5, 1.0], mask=mask_c)

# %% [markdown]
# ## D. The mask applied after the exponential
#
# A common way to write masked attention shifts by the row maximum over *all*
# scores, exponentiates, and multiplies by the mask afterwards:
# `e = exp(s - max(s)) * mask; e / sum(e)`. A masked score far above the kept
# ones (a future token in causal attention, a padding position) sets the
# shift, every kept $e^{s - \max}$ underflows to 0, and the row is $0/0$.
# refattn gives a masked entry $h = 0$ ($\ell = -\infty$) *before* the
# shift: it never takes part in the maximum.

# %%
mask_d = np.array([True, True, False, True])


def masked_after_exp(xp, s):
    keep = mask_d if xp is anp else xp.asarray(mask_d)
    e = xp.exp(s - xp.max(s, axis=-1, keepdims=True)) * keep
    return e / xp.sum(e, axis=-1, keepdims=True)


s_d = np.array([0.5, -1.0, 800.0, 1.5])
side_by_side(masked_after_exp, "softmax", s_d, np.array([1.0, -1.0, 0.5, 2.0]), mask=mask_d)

# %% [markdown]
# ## E. Expressive's Eq. 2 on a row of zero scores
#
# $a_{mk} = z_{mk}^2 / (1 + z_{mk}^2) / N_m$ with $N_m = \sum_k
# z_{mk}^2/(1 + z_{mk}^2)$. A zero query (or one orthogonal to every key it may
# see: the first row of causal attention has a single key) gives $N_m = 0$ and
# $0/0$. refattn: no normaliser, weights and gradient 0, as for a fully
# masked row (derivation 01, section 3.4).


# %%
def expressive_eq2(xp, z):
    h = z * z / (1 + z * z)
    return h / xp.sum(h, axis=-1, keepdims=True)


s_e = np.array([[0.0, 0.0, 0.0, 0.0], [0.5, -2.0, 0.0, 1.0]])
side_by_side(expressive_eq2, "expressive", s_e, np.array([[1.0, -1.0, 0.5, 2.0], [1.0, -1.0, 0.5, 2.0]]))

# %% [markdown]
# ## What this shows
#
# On ordinary scores the papers' formulations and refattn's compute the same
# weights. Where they differ, the papers' code returns NaN (A, C, D, E) or
# weights of size $10^9$ (B), and a NaN forward takes the gradient with it;
# refattn's forward stays finite for every finite score and its gradient is
# the hand-derived VJP checked against autograd and central differences. In
# PyTorch and JAX the same lines of `refattn/core` run on the framework's own
# arrays: `refattn.torch.activation("tanhmax")(s)` on a tensor, and
# `refattn.jax.activation("tanhmax")` under `jax.jit` and `jax.vmap`.
