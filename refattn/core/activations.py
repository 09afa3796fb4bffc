r"""Attention activations as reweighted softmaxes (``derivations/01-reweighted-softmax.md``).

TanhMax (Eq. 5) writes an attention activation as

    phi(s)_i = g(s_i) / sum_k h(s_k).

Every activation here is evaluated in the equivalent, stable form (Eq. 01.R1)

    phi(s) = rho(s) * softmax(ell(s)),     rho = g / h,   ell = log h,

and one hand-derived vector-Jacobian product serves them all (Eq. 01.R4):

    ds_j = u_j rho'(s_j) p_j + p_j ell'(s_j) (u_j rho(s_j) - sum_i u_i phi_i),

with ``p = softmax(ell(s))`` and ``u`` the upstream gradient. Each class below
writes ``rho, ell`` and their derivatives; the paper's ``g, h`` follow
(``h = e^ell``, ``g = rho h``).

========== ==================== ============ =========== ========================
name       g(s)                 h(s)         rho = g/h   ell = log h
========== ==================== ============ =========== ========================
softmax    e^s                  e^s          1           s
tanhmax    sinh s               cosh s       tanh s      log cosh s
signexp    sign(s) e^|s|        e^|s|        sign s      |s|
expressive s^2/(1+s^2)          same         1           log(s^2/(1+s^2))
sigsoftmax e^s sigmoid(s)       same         1           s + log sigmoid(s)
sigmoid    sigmoid(s)           same         1           log sigmoid(s)
linear     s                    1            s           0
relu       max(s, 0)            1            max(s, 0)   0
cosformer  max(s, 0)            max(s, 0)    1           log max(s, 0)
softmax1   e^s                  e^s          1           s                          (c = 1)
softpick   max(e^s - 1, 0)      |e^s - 1|    [s > 0]     log|e^s - 1|               (c = 1e-8)
stablemax  s+1, 1/(1-s) below 0 same         1           sign(s) log(1 + |s|)
taylor     1 + s + s^2/2        same         1           log(1 + s + s^2/2)
========== ==================== ============ =========== ========================

The last four are normalisers of 2023-2025 (``derivations/25-normalisers.md``); c is a denominator
**offset**, ``phi_i = g(s_i) / (c + sum_k h(s_k))``: a phantom key with ``ell = log c`` and no value,
in ``p``'s normaliser only, which leaves the VJP as it is (Eq. 25.O3).

Conventions (each pinned by a test in ``tests/core/test_activations.py``): a
**mask** is boolean, ``True`` = keep, and a masked entry has ``h = 0``
(``ell = -inf``): no weight, no part in the normaliser, no gradient. A row
whose ``h`` is 0 everywhere has **no normaliser**: weights and gradient 0.
**Underflow**: expressive's and cosFormer's ``h`` is a power of the score, and
a score below ``sqrt(tiny)`` of its dtype (1.5e-154 in float64) counts as 0.
At the **singular points** (signexp's jump at 0, the relu and cosformer kinks)
the library takes what autograd computes: ``rho'(0) = ell'(0) = 0`` for
signexp, the left slope for the kinks (``derivations/09-signexp-at-zero.md``).
**NaN propagates**: a NaN or infinite score makes its row NaN (its entry alone
for linear and relu, normalised by the count), a masked one is ignored
(derivation 01, section 4.4).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import checks
from .backend import array_module, dtype_of, quiet, stop_gradient

__all__ = ["Activation", "ACTIVATIONS", "NORMALISERS", "Formula", "activation", "register", "softmax", "sigmoid", "sqrt_tiny"]

_REGISTRY: dict = {}  # name -> a constructor (the class, for the built-ins)


def register(cls):
    """Class decorator: ``activation(cls.name)`` returns ``cls()``."""
    _REGISTRY[cls.name] = cls
    return cls


def softmax(l, axis=-1, mask=None, scale=1.0, offset=0.0):
    """``e^{scale l_i} / (offset + sum_k e^{scale l_k})`` along ``axis``, 0 where masked, stable for every finite ``l``.

    ``l`` may hold ``-inf`` (``h = 0``). The row maximum is subtracted first
    (the log-sum-exp shift; it cancels, so it carries no gradient); a row with
    no finite entry has no normaliser and gets 0 (derivation 01, Appendix A).
    An ``offset`` c > 0 is one more entry of the row, a phantom key with
    ``scale l = log c`` whose weight is dropped (derivation 25, section 1):
    the shift is the larger of the row maximum and ``log c``, and every row has a normaliser.
    """
    xp = array_module(l, mask)
    if mask is not None:
        l = xp.where(mask, l, -np.inf)  # a masked entry has h = 0
    lc = math.log(offset) / scale if offset > 0 else -math.inf  # the phantom key's l
    m = xp.max(stop_gradient(l), axis=axis, keepdims=True)  # the shift; NaN if the row has a NaN
    m = xp.where(m < lc, lc, m)  # the phantom key counts (False for NaN, which stays NaN)
    m = xp.where(m == -np.inf, 0.0, m)  # a row with no normaliser: any finite shift
    e = xp.exp(scale * (l - m))  # in [0, 1]: no overflow
    z = xp.sum(e, axis=axis, keepdims=True)  # >= 1, or 0 on a row with no normaliser
    if offset > 0:
        z = z + xp.exp(scale * (lc - m))  # the phantom key's e^{log c - m}, in (0, 1]
    return e / xp.where(z == 0, 1.0, z)  # no normaliser: e = 0, so p = 0


def sigmoid(xp, x):
    """``1 / (1 + e^-x)`` without overflow, keeping relative precision for ``x << 0``."""
    e = xp.exp(-xp.abs(x))  # e^{-|x|} in (0, 1]
    return xp.where(x >= 0, 1.0, e) / (1.0 + e)


def sqrt_tiny(s) -> float:
    """``sqrt`` of the smallest normal number of ``s``'s dtype: below it, ``s^2`` underflows."""
    tiny = np.finfo(dtype_of(s)).tiny
    root = math.sqrt(float(tiny))
    return root if root > 0 else tiny**0.5  # longdouble's tiny rounds to 0 as a float: its own sqrt


class Formula(NamedTuple):
    """``g``, ``h``, ``rho = g / h`` and ``ell = log h`` of an activation as text: a row of the table above."""

    g: str
    h: str
    rho: str
    ell: str


class Activation:
    """``phi(s)_i = g(s_i) / sum_k h(s_k)`` (TanhMax Eq. 5), as ``rho(s) softmax(ell(s))``.

    A subclass writes ``rho, ell, drho, dell`` (default ``rho = 1``);
    :meth:`forward` (Eq. 01.R1), :meth:`backward` (Eq. 01.R4) and
    :meth:`jacobian` (Eq. 01.R3) are written once, here:
    ``phi, cache = act.forward(s)``, ``ds = act.backward(dphi, cache)``, and
    ``act(s)`` is the weights alone.

    Each class also holds its facts, which tables, ``refattn check``, the
    studies and the tests read from here: ``formula`` (its row of the table),
    ``source`` (where it comes from in the papers), ``singular`` (each point
    where phi is not differentiable, and why), ``singular_scores`` (the score
    values that make an entry so), ``regularity`` near 0 and ``shift_invariant``.
    """

    name: str = ""
    source: str = ""  #: where the formula comes from in the papers
    formula = Formula("g(s)", "h(s)", "g/h", "log h")  #: its row of the table, as text
    singular: tuple = ()  #: ``(where, why)`` for each point where phi is not differentiable
    singular_scores: tuple = ()  #: the score values at which an entry makes phi non-differentiable
    #: near 0: "smooth"; "kink" (rho or ell' jumps at 0, constant on each side); "log" (ell is the log of a power
    #: of s; the most cautious). Rank collapse's first-order expansion reads it (derivation 16).
    regularity: str = "log"
    shift_invariant: bool = False  #: ``phi(s + c) = phi(s)`` for every constant ``c`` (softmax only)
    offset: float = 0.0  #: c >= 0 in ``phi_i = g(s_i) / (c + sum_k h(s_k))``: a phantom key (derivation 25)

    # --- what each activation writes: rho = g / h, ell = log h, and derivatives --
    def rho(self, s):
        return array_module(s).ones_like(s)

    def drho(self, s):
        return array_module(s).zeros_like(s)

    def ell(self, s):
        """``log h``: finite, or ``-inf`` where ``h = 0``, for every finite ``s``."""
        raise NotImplementedError

    def dell(self, s):
        """``ell' = h' / h``, finite (0 where ``h = 0``)."""
        raise NotImplementedError

    # --- the paper's g and h follow: h = e^ell, g = rho h (these may overflow) --
    def h(self, s):
        return array_module(s).exp(self.ell(s))

    def g(self, s):
        return self.rho(s) * self.h(s)

    def dh(self, s):
        return self.dell(s) * self.h(s)  # h' = ell' h

    def dg(self, s):
        return (self.drho(s) + self.rho(s) * self.dell(s)) * self.h(s)  # g' = (rho h)' = (rho' + rho ell') h

    # --- Eq. 01.R1: phi = rho softmax(ell) -----------------------------------------
    @quiet
    def p(self, s, axis=-1, mask=None):
        """``p = softmax(ell(s))`` along ``axis``: the ``p`` of Eq. 01.R1 (not the weights), the offset's
        phantom key in its normaliser (Eq. 25.O1)."""
        return softmax(self.ell(s), axis, mask, offset=self.offset)

    @checks.activation_forward
    def forward(self, s, axis=-1, mask=None):
        """The weights ``phi(s) = rho(s) softmax(ell(s))`` along ``axis`` (Eq. 01.R1), and a cache.

        Parameters
        ----------
        s : ndarray (NumPy, CuPy or traced by autograd), float32 or float64, any shape
        axis : int, the axis normalised over (the keys)
        mask : ndarray of bool broadcastable to ``s``, optional; ``True`` keeps an entry

        Returns
        -------
        phi : ndarray like ``s``, 0 where masked and on rows with no normaliser
        cache : dict, ``s``, ``p``, ``axis``, ``mask`` and ``made_by`` (this activation's class and name) for
            :meth:`backward`, which refuses another activation's cache; its ``s`` is forward's own
            array (the first line makes it), so changing the caller's ``s`` in place before backward changes
            no gradient, and backward does not read ``mask``
        """
        xp = array_module(s, mask)
        s = xp.where(xp.isinf(s), np.nan, s)  # +-inf has no defined weight: it counts as NaN, and NaN propagates
        s = s if mask is None else xp.where(mask, s, 0.0)  # a masked entry is ignored, whatever its score
        p = self.p(s, axis, mask)
        phi = self.rho(s) * p  # Eq. 01.R1
        return phi, {"kind": "activation", "s": s, "p": p, "axis": axis, "mask": mask,
                     "made_by": (type(self), self.name)}

    def __call__(self, s, axis=-1, mask=None):
        """The weights ``phi(s)`` alone: ``forward(s, axis, mask)[0]``."""
        return self.forward(s, axis, mask)[0]

    # --- Eq. 01.R4: the one VJP ----------------------------------------------------
    @checks.activation_backward
    @quiet
    def backward(self, grad_phi, cache):
        """``ds = u^T dphi/ds`` for the upstream gradient ``u = grad_phi`` (Eq. 01.R4).

        Grouped by ``u_j`` and ``<u, phi>`` (Eq. 01.R5),
        ``ds_j = u_j (rho'_j + rho_j ell'_j) p_j - ell'_j p_j <u, phi>``, so no
        difference of two large terms is formed; 0 where masked and on rows
        with no normaliser (every term carries ``p_j``).
        """
        s, p, axis, u = cache["s"], cache["p"], cache["axis"], grad_phi
        rho, pl = self.rho(s), p * self.dell(s)  # rho_j, p_j ell'_j
        c = array_module(s, u).sum(u * rho * p, axis=axis, keepdims=True)  # <u, phi>
        return u * (self.drho(s) * p + rho * pl) - pl * c  # Eq. 01.R4, grouped as 01.R5

    @quiet
    def jacobian(self, s):
        """``J[j, k] = dphi_j / ds_k = diag(rho' p + phi ell') - phi (p ell')^T`` of one row (Eq. 01.R3), for
        teaching: :meth:`backward` never forms it."""
        checks.check_float_array(s, "s", ndim=1)
        p, rho, dell = self.p(s), self.rho(s), self.dell(s)
        phi = rho * p
        return array_module(s).diag(self.drho(s) * p + phi * dell) - phi[:, None] * (p * dell)[None, :]

    def __repr__(self):
        return f"activation({self.name!r})"


# --- The built-ins: rho and ell, and their derivatives --------------------------------------------
@register
class Softmax(Activation):
    """Softmax, ``e^{s_i} / sum_k e^{s_k}``: g = h = exp, rho = 1, ell = s (Bridle 1989; derivation 01, 3.1)."""

    name, source = "softmax", "Bridle (1989); TanhMax Eq. 5 with g = h = exp"
    formula, regularity, shift_invariant = Formula("exp(s)", "exp(s)", "1", "s"), "smooth", True

    def ell(self, s):
        return s

    def dell(self, s):
        return array_module(s).ones_like(s)

    @checks.activation_backward
    def backward(self, grad_phi, cache):
        """The familiar ``ds = p (u - <u, p>)``: Eq. 01.R4 with rho = 1, ell' = 1 (tested equal to it)."""
        p, u = cache["p"], grad_phi
        return p * (u - array_module(p, u).sum(u * p, axis=cache["axis"], keepdims=True))


@register
class TanhMax(Activation):
    """TanhMax, ``sinh s_i / sum_k cosh s_k`` (TanhMax Eq. 6, its e^s -+ e^-s halved; derivation 01, 3.2):
    rho = tanh s, ell = log cosh s = |s| + log(1 + e^{-2|s|}) - log 2 (no overflow), ell' = tanh s."""

    name, source = "tanhmax", "Huang, Yang & Wang (TanhMax), Eq. 6"
    formula, regularity = Formula("sinh(s)", "cosh(s)", "tanh(s)", "log cosh(s)"), "smooth"

    def rho(self, s):
        return array_module(s).tanh(s)

    def drho(self, s):
        t = array_module(s).tanh(s)
        return 1.0 - t * t  # sech^2 = 1 - tanh^2

    def ell(self, s):
        xp = array_module(s)
        a = xp.abs(s)
        return a + xp.log1p(xp.exp(-2.0 * a)) - math.log(2.0)  # log cosh s

    def dell(self, s):
        return array_module(s).tanh(s)  # (log cosh)' = tanh


@register
class SignExp(Activation):
    """SignExp (Cog), ``sign(s_i) e^{|s_i|} / sum_k e^{|s_k|}``: rho = sign s, ell = |s| (derivation 01, 3.3).

    Cog's displayed formula has a signed denominator; its text and code use
    absolute values, as here. At s = 0 rho jumps (a Dirac term no pointwise
    derivative holds); rho'(0) = ell'(0) = sign 0 = 0, as autograd computes.
    """

    name, source = "signexp", "Cog attention (Lv et al.), sign(p) * softmax(|p|)"
    formula, regularity = Formula("sign(s) exp|s|", "exp|s|", "sign(s)", "|s|"), "kink"
    singular = (("s = 0", "rho = sign(s) jumps: a Dirac term in the derivative; analytic and autograd use "
                          "rho'(0) = 0, differences see the jump"),)
    singular_scores = (0.0,)

    def rho(self, s):
        return array_module(s).sign(s)

    def ell(self, s):
        return array_module(s).abs(s)

    def dell(self, s):
        return array_module(s).sign(s)


@register
class Expressive(Activation):
    """Expressive attention, ``h(z) = z^2 / (1 + z^2)``, rho = 1 (Expressive Eq. 2; derivation 01, 3.4):
    ell = -log(1 + 1/z^2), -inf at 0 where ``p ell'`` -> 0 (phi is smooth there), ell' = 2 / (z (1 + z^2))."""

    name, source = "expressive", "Gros (Expressive), Eq. 2"
    formula = Formula("s^2/(1+s^2)", "s^2/(1+s^2)", "1", "log(s^2/(1+s^2))")
    singular = (("all-zero row", "h = 0 everywhere: no normaliser; weights and gradient set to 0"),)

    def ell(self, s):
        xp = array_module(s)
        zero = xp.abs(s) < sqrt_tiny(s)  # h underflows: counts as 0
        w = 1.0 / xp.where(zero, 1.0, s)  # 1/z at a safe argument
        return xp.where(zero, -np.inf, -xp.log1p(w * w))  # log(z^2/(1+z^2)) = -log(1 + 1/z^2)

    @quiet
    def dell(self, s):
        xp = array_module(s)
        zero = xp.abs(s) < sqrt_tiny(s)
        z = xp.where(zero, 1.0, s)
        return xp.where(zero, 0.0, 2.0 / (z * (1.0 + z * z)))  # (log h)' = 2 / (z (1 + z^2))


@register
class SigSoftmax(Activation):
    """Sigsoftmax, ``h = e^s sigmoid(s)``, rho = 1 (Kanai et al. 2018; derivation 01, 3.5 and A.3).

    ell = s + min(s, 0) - log(1 + e^{-|s|}), ell' = 1 + sigmoid(-s). For s
    below half the most negative float, ell ~ 2s overflows although s is
    finite, so :meth:`p` exponentiates 2 (ell / 2), whose half is always finite.
    """

    name, source = "sigsoftmax", "Kanai et al. (2018), sigsoftmax; TanhMax Tables 3-4"
    formula = Formula("exp(s) sigmoid(s)", "exp(s) sigmoid(s)", "1", "s - softplus(-s)")
    regularity = "smooth"

    def half_ell(self, s):
        xp = array_module(s)
        return 0.5 * s + 0.5 * xp.minimum(s, 0.0) - 0.5 * xp.log1p(xp.exp(-xp.abs(s)))  # ell / 2

    def ell(self, s):
        return 2.0 * self.half_ell(s)

    def dell(self, s):
        return 1.0 + sigmoid(array_module(s), -s)

    @quiet
    def p(self, s, axis=-1, mask=None):
        return softmax(self.half_ell(s), axis, mask, scale=2.0, offset=self.offset)  # softmax(2 (ell / 2))


@register
class Sigmoid(Activation):
    """Normalised sigmoid, ``h = sigmoid(s)``, rho = 1 (Kanai et al. 2018; derivation 01, 3.5):
    ell = log sigmoid(s) = min(s, 0) - log(1 + e^{-|s|}), ell' = sigmoid(-s)."""

    name, source = "sigmoid", "Kanai et al. (2018), Sec. 4; TanhMax Sec. 5.3"
    formula, regularity = Formula("sigmoid(s)", "sigmoid(s)", "1", "-softplus(-s)"), "smooth"

    def ell(self, s):
        xp = array_module(s)
        return xp.minimum(s, 0.0) - xp.log1p(xp.exp(-xp.abs(s)))  # log sigmoid(s)

    def dell(self, s):
        return sigmoid(array_module(s), -s)


class Unnormalised(Activation):
    """h = 1: the normaliser is the number n of unmasked entries, p = 1/n, ell = ell' = 0."""

    def ell(self, s):
        return array_module(s).zeros_like(s)

    dell = ell


@register
class Linear(Unnormalised):
    """The non-local "dot product", ``phi_i = s_i / n``: rho = s (Wang et al. 2018; derivation 01, 3.6)."""

    name, source = "linear", "Wang et al. (2018), non-local 'dot product', C(x) = N; TanhMax Tables 3-4"
    formula, regularity = Formula("s", "1", "s", "0"), "smooth"

    def rho(self, s):
        return s

    def drho(self, s):
        return array_module(s).ones_like(s)


@register
class ReLU(Unnormalised):
    """ReLU attention, ``phi_i = max(s_i, 0) / n``: rho = max(s, 0), rho'(0) = 0 (derivation 01, 3.6)."""

    name, source = "relu", "TanhMax Tables 3-4 (ReLU), scaled by 1/n as the non-local form"
    formula, regularity = Formula("max(s, 0)", "1", "max(s, 0)", "0"), "kink"
    singular = (("s = 0", "kink: rho'(0) = 0, the left slope; differences see 1/2, the mean of the two"),)
    singular_scores = (0.0,)

    def rho(self, s):
        return array_module(s).clip(s, 0.0, None)

    def drho(self, s):
        xp = array_module(s)
        return xp.where(s > 0, 1.0, xp.zeros_like(s))  # rho' = [s > 0]


@register
class CosFormerNorm(Activation):
    """cosFormer's row normalisation, ``relu(s_i) / sum_k relu(s_k)`` (Qin et al. 2022; derivation 01, 3.7):
    rho = 1, ell = log max(s, 0) (-inf for s <= 0, and below sqrt(tiny)), ell' = 1/s where h > 0."""

    name = "cosformer"
    source = "Qin et al. (2022; TanhMax cites it as 'Zhen et al.'), cosFormer row normalisation"
    formula = Formula("max(s, 0)", "max(s, 0)", "1", "log max(s, 0)")
    singular = (("s = 0", "kink: differences see the average of the two one-sided slopes"),
                ("row with no positive score", "no normaliser; weights and gradient set to 0"))
    singular_scores = (0.0,)

    def ell(self, s):
        xp = array_module(s)
        small = s < sqrt_tiny(s)  # h = 0 (tiny scores count as 0); False for NaN, which stays NaN
        return xp.where(small, -np.inf, xp.log(xp.where(small, 1.0, s)))  # log max(s, 0)

    def dell(self, s):
        xp = array_module(s)
        small = s < sqrt_tiny(s)
        return xp.where(small, 0.0, 1.0 / xp.where(small, 1.0, s))  # 1/s where h > 0


#: The built-in activations of the four papers and their baselines, in registry order.
ACTIVATIONS = tuple(_REGISTRY)


# --- Beyond the four papers: normalisers of 2023-2025 in the same form (derivations/25-normalisers.md) ----
@register
class SoftmaxOne(Softmax):
    """Softmax-1, ``e^{s_i} / (1 + sum_k e^{s_k})`` (Miller 2023; derivation 25, 2.1): softmax with the
    offset c = 1, a phantom key of score 0 and no value; softmax's own VJP holds unchanged (Eq. 25.O3)."""

    name, source = "softmax1", "Miller (2023), 'Attention Is Off By One' (blog post); softmax with offset c = 1"
    formula, shift_invariant, offset = Formula("exp(s)", "exp(s)", "1", "s"), False, 1.0


@register
class Softpick(Activation):
    """Softpick, ``relu(e^{s_i} - 1) / (eps + sum_k |e^{s_k} - 1|)`` (Zuhri et al. 2025; derivation 25, 2.2):
    rho = [s > 0], ell = log|e^s - 1| = max(s, 0) + log(1 - e^{-|s|}) (-inf at 0, and below sqrt(tiny)),
    ell' = e^s / (e^s - 1), and eps = 1e-8 as the offset. h(0) = 0 hides rho's step in phi."""

    name = "softpick"
    source = ("Zuhri, Fuadi & Aji (2025), 'Softpick: No Attention Sink, No Massive Activations with Rectified "
              "Softmax', arXiv:2504.20966; eps = 1e-8 as in the authors' code")
    formula = Formula("max(exp(s) - 1, 0)", "|exp(s) - 1|", "[s > 0]", "log|exp(s) - 1|")
    singular = (("s = 0", "kink of g and h where h = 0, so rho's step meets p = 0: analytic and autograd take "
                          "the left slope, differences the mean"),
                ("all-zero row", "only the offset normalises: weights and gradient 0"))
    singular_scores, offset = (0.0,), 1e-8

    def parts(self, s):
        xp = array_module(s)
        zero = xp.abs(s) < sqrt_tiny(s)  # h ~ |s| below sqrt(tiny) counts as 0, as cosformer's
        return xp, zero, xp.abs(xp.where(zero, 1.0, s))  # |s| at a safe argument

    def rho(self, s):
        return array_module(s).where(s > 0, 1.0, array_module(s).zeros_like(s))  # g/h = [s > 0]

    def ell(self, s):
        xp, zero, a = self.parts(s)
        return xp.where(zero, -np.inf, xp.maximum(s, 0.0) + xp.log(-xp.expm1(-a)))  # log|e^s - 1|

    def dell(self, s):
        xp, zero, a = self.parts(s)
        return xp.where(zero, 0.0, xp.where(s > 0, 1.0, -xp.exp(-a)) / -xp.expm1(-a))  # e^s / (e^s - 1)


@register
class StableMax(Activation):
    """StableMax, ``h = s + 1`` for s >= 0 and ``1 / (1 - s)`` below, rho = 1 (Prieto et al. 2025;
    derivation 25, 2.3): ell = sign(s) log(1 + |s|), ell' = 1 / (1 + |s|), continuous at 0 (phi is C^1)."""

    name = "stablemax"
    source = ("Prieto, Barsbey, Mediano & Birdal (2025), 'Grokking at the Edge of Numerical Stability', "
              "arXiv:2501.04697, s(x) of StableMax")
    formula = Formula("s + 1 (s >= 0), 1/(1 - s) (s < 0)", "same", "1", "sign(s) log(1 + |s|)")
    regularity = "smooth"

    def ell(self, s):
        xp = array_module(s)
        l = xp.log1p(xp.where(s >= 0, s, -s))  # log(1 + |s|), with slope +1 at s = 0, as h'(0) = 1
        return xp.where(s >= 0, l, -l)  # log(1 + s), or log(1 / (1 - s))

    def dell(self, s):
        return 1.0 / (1.0 + array_module(s).abs(s))  # 1/(1 + s) above 0, 1/(1 - s) below


@register
class Taylor(Activation):
    """The second-order Taylor map of Based, ``h = 1 + s + s^2/2 = (1 + t^2) / 2`` with t = 1 + s, rho = 1
    (Arora et al. 2024; derivation 25, 2.4): ell = log(1 + t^2) - log 2, ell' = 2t / (1 + t^2); h >= 1/2."""

    name = "taylor"
    source = ("Arora, Eyuboglu, Zhang, Timalsina, Alberti, Zinsley, Zou, Rudra & Re (2024), 'Simple linear "
              "attention language models balance the recall-throughput tradeoff' (Based), arXiv:2402.18668, "
              "its TaylorExp feature map")
    formula, regularity = Formula("1 + s + s^2/2", "1 + s + s^2/2", "1", "log(1 + s + s^2/2)"), "smooth"

    def parts(self, s):
        xp, t = array_module(s), 1.0 + s
        big = xp.abs(t) > 1.0
        a = xp.where(big, xp.abs(t), 1.0)  # max(|t|, 1), and r = min(|t|, 1/|t|), at safe arguments
        return xp, t, a, xp.where(big, 1.0 / a, xp.abs(t))

    def ell(self, s):
        xp, _, a, r = self.parts(s)
        return 2.0 * xp.log(a) + xp.log1p(r * r) - math.log(2.0)  # log((1 + t^2) / 2), t^2 never formed

    def dell(self, s):
        xp, t, _, r = self.parts(s)
        return 2.0 * xp.sign(t) * r / (1.0 + r * r)  # 2t / (1 + t^2)


#: The normalisers beyond the four papers (derivation 25), registered after :data:`ACTIVATIONS`.
NORMALISERS = tuple(n for n in _REGISTRY if n not in ACTIVATIONS)
#: Every built-in name: what a user's activation may not be called or unregister.
BUILT_INS = ACTIVATIONS + NORMALISERS


def activation(name: str) -> Activation:
    """The activation called ``name`` (a built-in, or one registered by ``define_activation``)."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a string, got {type(name).__name__}")
    if name not in _REGISTRY:
        raise ValueError(f"name: unknown activation {name!r}; expected one of {tuple(_REGISTRY)}")
    return _REGISTRY[name]()
