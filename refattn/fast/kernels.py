r"""Fewer passes for the built-in activations: the split evaluation of ``p`` and the VJP factors.

The reference (:meth:`refattn.core.activations.Activation.p` and ``backward``) computes
``ell = log h``, exponentiates it, and evaluates Eq. 01.R4 term by term. That is
the formula; it is not the cheapest way to get the same numbers. This module
is (``derivations/20-speed.md`` sections 2-3 measure each choice):

* **The split.** Each built-in activation writes ``h = exp(f a) * b`` with a
  cheap, overflow-free exponent ``a`` and a bounded factor ``0 <= b <= 1``,
  so ``p = exp(f (a - max a)) * b`` normalised, with no logarithm: one
  exponential for softmax and signexp, none at all for expressive, linear,
  relu and cosformer (``derivations/01-reweighted-softmax.md``, appendix A,
  shows the two forms agree).
* **The VJP factors (Eq. 01.R5).** ``ds = u * A - B * <u, phi>`` with
  ``A = (rho' + rho ell') p`` and ``B = ell' p``. For most activations
  ``A`` and ``B`` follow from ``p`` and ``phi`` alone (softmax: ``A = B = p``;
  tanhmax: ``A = p, B = phi``), so attention need not keep the scores.
* **In-place buffers.** Temporaries are reused with ``out=`` (never on
  values autograd traces: :mod:`refattn.fast` sends those to the reference).
* **Streaming forms.** Streaming attention and the causal strips of the
  fast path see a block of a row, not the row: ``exponent``, ``row_top`` and
  ``stream`` give ``H = h(s) e^(-f m)`` under a shift ``m`` set per row from
  the blocks seen, by each activation's cheapest stable formula
  (``derivations/23-streaming.md`` section 8).

A :class:`Kernel` is looked up by the activation's class (:data:`KERNELS`, :func:`kernel`);
each is named for the class it speeds up (``TanhMaxKernel`` for ``TanhMax``).
An activation written as the paper's ``g`` and ``h`` (from
:func:`refattn.define_activation`: it offers ``paper_values`` and
``paper_derivatives``) gets :class:`PaperForm`, which evaluates ``g`` and ``h``
once and normalises ``h`` directly. Any other activation without a kernel (a
user's own subclass) gets :class:`Generic`, which calls the reference's ``p``,
``rho``, ``drho`` and ``dell``: slower, never wrong.
"""

from __future__ import annotations

import math

import numpy as np

from ..core import activations as A
from ..core.activations import sqrt_tiny
from ..core.backend import array_module, to_numpy

__all__ = ["Kernel", "Generic", "PaperForm", "KERNELS", "kernel", "forward", "vjp_from", "rho_is_one"]


def rho_is_one(activation) -> bool:
    """True when ``activation`` keeps the base class's ``rho = 1`` (then ``phi = p``, no product needed)."""
    return type(activation).rho is A.Activation.rho


def _rowdot(xp, u, v, axis):
    """``sum(u * v, axis, keepdims=True)``; on the last axis as batched dot products (no temporary)."""
    if axis in (-1, u.ndim - 1):
        return (u[..., None, :] @ v[..., :, None])[..., 0]  # (..., 1)
    return xp.sum(u * v, axis=axis, keepdims=True)


class Generic:
    """The reference's own functions: for an activation this module does not know.

    A kernel has two methods. ``forward(s, axis, mask)`` returns ``(p, w, aux)``:
    ``p = softmax(ell(s))``, the weights ``w = rho(s) p``, and ``aux``, what
    ``factors`` needs besides ``p`` and ``w`` (the scores ``s``, something
    cheaper computed on the way, or ``None``). ``factors(aux, p, w)`` returns
    ``(A, B)`` of Eq. 01.R5, ``ds = u A - B <u, w>``; ``B`` is ``None`` where
    ``ell' = 0``, and ``A is B`` where the two coincide.
    """

    #: ``aux`` is the scores themselves (attention then keeps them for the backward pass)
    needs_s = True
    ell_factor = 1.0  # f in h = exp(f a) b
    b_unbounded = False  # b is rescaled by its row maximum (cosformer)

    def __init__(self, act):
        self.act = act
        if getattr(act, "half_ell", None) is not None:  # streams ell / 2 (sigsoftmax's overflow guard)
            self.ell_factor = 2.0

    def forward(self, s, axis=-1, mask=None, overwrite_s=False):
        p = self.act.p(s, axis, mask)
        return p, (p if rho_is_one(self.act) else self.act.rho(s) * p), s

    def parts(self, s):
        """``(a, b, rho, aux)``: ``h = exp(f a) b`` with ``f`` = :attr:`ell_factor`, the weights' factor
        ``rho`` and what :meth:`factors` needs besides ``p`` and ``phi``. ``None`` stands for
        ``a = 0``, ``b = 1``, ``rho = 1`` or no aux. Here ``a = ell / f``, ``b = 1``: the reference's
        functions, for an activation this module does not know (streaming in blocks needs ``h``
        per entry, not ``p`` per row)."""
        act = self.act
        a = act.ell(s) if self.ell_factor == 1.0 else act.half_ell(s)
        return a, None, (None if rho_is_one(act) else act.rho(s)), s

    def factors(self, s, p, phi):
        act = self.act
        b = p * act.dell(s)  # p ell'
        return act.drho(s) * p + act.rho(s) * b, b  # (rho' + rho ell') p

    # --- streaming: h per block, under a shift given per row (refattn.fast.streaming_fast) ---------
    #: ``h = e^(f a) b`` has an exponent ``a`` whose row maximum is the shift (else: no shift, or,
    #: with ``b_unbounded``, the row maximum of ``b`` is)
    has_exponent = True
    #: ``|rho| <= 1``, so ``|W| <= H``: sums of ``W v`` need no normalising first to stay finite
    bounded_rho = False
    #: :meth:`factors` of ``H <= 1`` (``p`` before normalising) are at most 2 in magnitude
    bounded_factors = False

    def exponent(self, s):
        """The exponent ``a`` of ``h = e^(f a) b`` (here ``ell / f``); may be ``s`` itself."""
        return self.act.ell(s) if self.ell_factor == 1.0 else self.act.half_ell(s)

    def row_top(self, s):
        """The row maximum of :meth:`exponent` (of ``b`` for an unbounded ``b``), ``(..., 1)``."""
        return array_module(s).max(self.exponent(s), axis=-1, keepdims=True)

    def stream(self, s, shift, backward=False):
        """``(H, W, aux)`` for a block of scores ``s`` (which may be overwritten) and a shift per row:
        ``H = h(s) e^(-f shift)`` (``h(s) / shift`` for an unbounded ``b``), the unnormalised weights
        ``W = rho(s) H`` (``None`` where ``rho = 1``) and, with ``backward``, what :meth:`factors`
        needs besides ``p`` and ``phi``. ``H`` and ``W`` are new arrays the caller may overwrite."""
        xp = array_module(s)
        H = xp.subtract(self.exponent(s), shift)
        if self.ell_factor != 1.0:
            H *= self.ell_factor
        H = xp.exp(H, out=H)
        return H, (None if rho_is_one(self.act) else self.act.rho(s) * H), (s if backward else None)


class PaperForm(Generic):
    """An activation given as the paper's ``g`` and ``h`` (TanhMax Eq. 5), by their values: one call each.

    Where ``h`` is finite and its row sums ``Z = sum_k h_k`` are finite and
    normal, ``p = h / Z`` and ``phi = g / Z`` directly: the reweighted form
    ``rho softmax(ell)`` with ``rho = g/h`` and ``ell = log h`` gives the same
    numbers (``softmax(log h) = h / sum h``; derivation 01, Eq. 01.R1) without a
    logarithm or an exponential. The VJP's factors (Eq. 01.R5) are
    ``A = (rho' + rho ell') p = g' p / h`` and ``B = ell' p = h' p / h``
    (``rho' + rho ell' = (g' - rho h')/h + rho h'/h = g'/h``), so the backward
    pass evaluates ``g'`` and ``h'`` once each and needs no ``rho'``. Where
    ``h = 0`` (a masked entry, or ``h`` itself 0) ``p = 0`` and so are both.
    The row is checked as the reference checks it (``h >= 0``, ``g = 0`` where
    ``h = 0``, every value finite); a call that fails any of it, or whose ``Z``
    overflows or is subnormal, is given to :class:`Generic`, which raises the
    activation's own error (or, inside training, makes the row NaN).
    """

    def forward(self, s, axis=-1, mask=None, overwrite_s=False):
        if not isinstance(s, np.ndarray) or (mask is not None and not isinstance(mask, np.ndarray)):
            return super().forward(s, axis, mask)
        act, xp = self.act, array_module(s)  # NumPy: the user's g and h are autograd.numpy functions
        with np.errstate(all="ignore"):
            g, h = act.paper_values(s)
            if mask is not None:
                h = h * mask  # h = 0 where masked (a finite h; inf * 0 below is NaN, and is refused)
                g = h if act.same_g_h else g * mask
            z = xp.sum(h, axis=axis, keepdims=True)  # (..., 1) the normaliser sum_k h(s_k)
            low = h.min()
            if not (xp.isfinite(z).all() and low >= 0 and xp.all((z == 0) | (z >= np.finfo(z.dtype).tiny))):
                return super().forward(s, axis, mask)  # overflow, NaN, h < 0 or a subnormal Z: the checked route
            inv = xp.divide(1.0, z, out=xp.zeros_like(z), where=z != 0)  # no normaliser: h = 0, so p = 0
            p = xp.multiply(h, inv, out=h if h is not s and h is not g else None)  # (..., n) p = h / Z
            if act.same_g_h:
                return p, p, s
            if low == 0 and xp.any(g[p == 0] != 0):
                return super().forward(s, axis, mask)  # g != 0 where h = 0: the reference names it
            w = xp.multiply(g, inv, out=g if g is not s else None)  # phi = g / Z
            if not xp.isfinite(xp.sum(w)):
                return super().forward(s, axis, mask)  # g overflows: the reference names it
            return p, w, s

    def factors(self, s, p, phi):
        if not isinstance(s, np.ndarray):
            return super().factors(s, p, phi)
        act, xp = self.act, array_module(s)
        with np.errstate(all="ignore"):
            h = act.paper_values(s, g=False)[1]
            dg, dh = act.paper_derivatives(s)
            for careful in (False, True):
                if careful:  # an h of 0 (or not finite) somewhere: p / h only where p > 0, else 0
                    q = xp.divide(p, h, out=xp.zeros_like(p), where=p > 0)
                else:
                    q = p / h  # p / h = 1 / Z on the row (0 where p = 0 and h > 0: masked entries)
                A = dg * q  # (rho' + rho ell') p = g' p / h
                B = A if act.same_g_h else dh * q  # ell' p = h' p / h
                if xp.isfinite(xp.sum(A) + (0.0 if B is A else xp.sum(B))):
                    return A, B
        return super().factors(s, p, phi)  # g' or h' not finite: the checked route names it


class Kernel(Generic):
    """A built-in activation: ``p`` by the split ``h = exp(f a) b`` (subclasses below, one per class).

    Each subclass is named for the activation class it speeds up, ``<Class>Kernel``, and says so
    in ``speeds_up``; :data:`KERNELS` maps the class to it.
    """

    speeds_up = None  #: the class of :mod:`refattn.core.activations` this kernel is a faster form of

    needs_s = False
    bounded_rho = True
    bounded_factors = True

    def split(self, s):
        """``(a, b)`` with ``h = exp(f a) b``; ``None`` stands for ``a = 0`` or ``b = 1``."""
        return None, None

    def parts(self, s):
        a, b = self.split(s)
        return a, b, (None if rho_is_one(self.act) else self.act.rho(s)), (s if self.needs_s else None)

    def forward(self, s, axis=-1, mask=None, overwrite_s=False):
        a, b, rho, aux = self.parts(s)  # rho before p: p may take the scores' memory
        p = _split_p(array_module(s, mask), s, a, b, self.ell_factor, self.b_unbounded, axis, mask,
                     overwrite_s)
        return p, (p if rho is None else rho * p), aux

    def exponent(self, s):
        a, b = self.split(s)
        return b if self.b_unbounded else a

    def row_top(self, s):
        return array_module(s).max(self.exponent(s), axis=-1, keepdims=True)

    def stream(self, s, shift, backward=False):
        xp = array_module(s)
        rho = None if rho_is_one(self.act) else self.act.rho(s)  # before s is overwritten
        aux = s if backward and self.needs_s else None
        a, b = self.split(s)
        if a is not None:
            H = xp.subtract(a, shift, out=a if a is not s or aux is None else None)
            if self.ell_factor != 1.0:
                H *= self.ell_factor
            H = xp.exp(H, out=H)
            if b is not None:
                H *= b
        elif b is None:
            H = xp.ones_like(s)  # h = 1: the normaliser counts the keys
        else:
            H = xp.divide(b, shift, out=b) if self.b_unbounded else b
        if rho is not None:
            rho = xp.multiply(rho, H, out=rho) if rho is not s or aux is None else rho * H
        return H, rho, aux


class SoftmaxKernel(Kernel):
    speeds_up = A.Softmax

    def split(self, s):
        return s, None  # h = e^s

    def row_top(self, s):
        return array_module(s).max(s, axis=-1, keepdims=True)

    def factors(self, aux, p, phi):
        return p, p  # A = B = p:  ds = p (u - <u, p>)


class TanhMaxKernel(Kernel):
    speeds_up = A.TanhMax

    def parts(self, s):
        xp = array_module(s)
        a = xp.abs(s)
        E = xp.multiply(a, -2.0)
        E = xp.exp(E, out=E)  # e^{-2|s|}, the one exponential both b and rho need
        b = E * 0.5
        b += 0.5  # cosh s = e^|s| (1 + e^{-2|s|}) / 2:  a = |s|, b = (1 + E) / 2
        rho = xp.subtract(1.0, E, out=E)
        rho /= b
        rho *= 0.5  # tanh|s| = (1 - E) / (1 + E), instead of a tanh (three times the cost of exp)
        rho = xp.copysign(rho, s, out=rho)  # tanh s (absolute error ~u: the cancellation in 1 - E)
        return a, b, rho, None

    def factors(self, aux, p, phi):
        return p, phi  # kappa = sinh'/cosh = 1, ell' p = tanh(s) p = phi

    def exponent(self, s):
        return array_module(s).abs(s)

    def row_top(self, s):
        xp = array_module(s)
        return xp.maximum(xp.max(s, axis=-1, keepdims=True), -xp.min(s, axis=-1, keepdims=True))  # max |s|

    def stream(self, s, shift, backward=False):
        """With ``m = shift >= |s|``: ``X = e^(s - m)``, ``Y = e^(-s - m)``, both in [0, 1], so
        ``2 cosh(s) e^-m = X + Y`` and ``2 sinh(s) e^-m = X - Y`` (the 2 cancels in ``p``): two
        exponentials, and no ``abs`` or sign (``X - Y`` has absolute error ~u of ``X + Y``)."""
        xp = array_module(s)
        X = xp.subtract(s, shift)
        X = xp.exp(X, out=X)  # e^(s - m)
        Y = xp.subtract(-shift, s, out=s)
        Y = xp.exp(Y, out=Y)  # e^(-s - m)
        H = X + Y
        return H, xp.subtract(X, Y, out=X), None


class SignExpKernel(Kernel):
    speeds_up = A.SignExp

    def split(self, s):
        return array_module(s).abs(s), None  # h = e^|s|

    def factors(self, aux, p, phi):
        return array_module(phi).abs(phi), phi  # kappa p = |sign s| p = |phi|, ell' p = phi

    def row_top(self, s):
        xp = array_module(s)
        return xp.maximum(xp.max(s, axis=-1, keepdims=True), -xp.min(s, axis=-1, keepdims=True))  # max |s|


class ExpressiveKernel(Kernel):
    speeds_up = A.Expressive

    needs_s = True
    has_exponent = False

    def split(self, s):
        small = array_module(s).abs(s) < sqrt_tiny(s)  # underflow convention: counts as 0
        w = 1.0 / (s + small)  # 1/z at a safe argument (one add, cheaper than where)
        return None, (~small) / (1.0 + w * w)  # z^2 / (1 + z^2), no overflow for large |z|

    def factors(self, s, p, phi):
        z = s + (array_module(s).abs(s) < sqrt_tiny(s))  # p = 0 wherever z was shifted
        b = (p + p) / (z * (1.0 + z * z))  # p ell' = 2 p / (z (1 + z^2))
        return b, b


class _Sigmoids(Kernel):
    """sigmoid and sigsoftmax: one exponential E = e^{-|s|} gives both b = sigmoid(|s|)
    and ell' - (1 for sigsoftmax) = sigmoid(-s), which the forward hands the
    backward as ``aux`` (instead of the scores, and instead of a tanh there)."""

    ell_factor = 1.0
    dell_offset = 0.0  # ell' = dell_offset + sigmoid(-s)

    def parts(self, s):
        xp = array_module(s)
        E = xp.abs(s)
        E = xp.negative(E, out=E)
        E = xp.exp(E, out=E)  # e^{-|s|}
        b = E + 1.0
        b = xp.divide(1.0, b, out=b)  # sigmoid(|s|) = 1 / (1 + E), in [1/2, 1)
        aux = xp.multiply(E, b, out=E)  # sigmoid(-|s|) = E / (1 + E)
        aux = xp.where(s < 0, b, aux)  # sigmoid(-s): sigmoid(|s|) where s < 0
        # a = min(s, 0) (sigmoid) or (s + min(s, 0)) / 2 with f = 2 (sigsoftmax), which cannot overflow
        a = xp.minimum(s, 0.0)
        if self.ell_factor != 1.0:
            a += s
            a *= 0.5
        return a, b, None, aux

    def factors(self, aux, p, phi):
        b = p * aux if self.dell_offset == 0.0 else p * (aux + self.dell_offset)  # p ell'
        return b, b

    def exponent(self, s):
        xp = array_module(s)
        if self.ell_factor == 1.0:
            return xp.minimum(s, 0.0)  # sigmoid: a = min(s, 0)
        return 0.5 * s + 0.5 * xp.minimum(s, 0.0)  # sigsoftmax: a = (s + min(s, 0)) / 2, halves first

    def row_top(self, s):
        """The exponent is increasing in ``s``: its row maximum is its value at the row's largest score."""
        return self.exponent(array_module(s).max(s, axis=-1, keepdims=True))


class SigSoftmaxKernel(_Sigmoids):
    speeds_up = A.SigSoftmax

    ell_factor = 2.0
    dell_offset = 1.0  # ell' = 1 + sigmoid(-s)

    def stream(self, s, shift, backward=False):
        """``H = e^(2 (a - m)) sigmoid(|s|)`` with ``a = s / 2 + min(s, 0) / 2`` and ``min(s, 0) =
        s / 2 - |s| / 2`` (exact, and halved before adding: no overflow) and ``E = e^-|s|``; with
        ``backward`` also ``sigmoid(-s)``: ``1 - sigmoid(|s|)`` for ``s >= 0``, ``sigmoid(|s|)`` for
        ``s < 0`` (an arithmetic select: a ``where`` on random signs costs more than an exponential)."""
        xp = array_module(s)
        E = xp.abs(s)
        H = xp.multiply(s, 0.5)
        t = xp.multiply(E, 0.5)
        t = xp.subtract(H, t, out=t)  # min(s, 0)
        t *= 0.5
        H += t  # a
        H -= shift
        H *= 2.0
        H = xp.exp(H, out=H)  # e^(2 (a - m))
        neg = s < 0 if backward else None
        E = xp.negative(E, out=E)
        E = xp.exp(E, out=E)
        E += 1.0
        b = xp.divide(1.0, E, out=E)  # sigmoid(|s|), in [1/2, 1)
        H *= b
        aux = None
        if backward:  # sigmoid(-s) = (1 - b) + [s < 0] (2 b - 1)
            aux = xp.multiply(b, 2.0, out=s)
            aux -= 1.0
            aux *= neg
            aux += 1.0
            aux -= b
        return H, None, aux


class SigmoidKernel(_Sigmoids):
    """ell' = sigmoid(-s). Where every row has a score above about -16.6, the
    normalised sigmoid needs no shift: ``p = sigmoid(s) / sum sigmoid(s)`` with
    ``sigmoid(s) = 1 / (1 + e^{-s})``, one exponential and no select. An entry
    whose sigmoid underflows then has ``p < 2^-1022 / 2^-24``, below 1e-300, as
    in the reference. Rows below that (or fully masked) take the shifted two-
    exponential route of :class:`_Sigmoids`."""

    speeds_up = A.Sigmoid

    #: the least row maximum of sigmoid(s) for which the unshifted route is exact to 1e-300
    LEAST_TOP = 2.0 ** -24

    def forward(self, s, axis=-1, mask=None, overwrite_s=False):
        xp = array_module(s, mask)
        X = xp.negative(s)
        X = xp.exp(X, out=X)  # e^{-s}; inf below -709.78, where sigmoid(s) = 0
        X += 1.0
        sig = xp.divide(1.0, X, out=X)  # sigmoid(s)
        H = sig if mask is None else xp.multiply(sig, mask, out=sig)
        top = xp.max(H, axis=axis, keepdims=True)
        if bool(to_numpy(xp.any(top < self.LEAST_TOP))):  # a deep or fully masked row (one bool to the host)
            return super().forward(s, axis, mask, overwrite_s)
        aux = xp.subtract(1.0, H, out=s if overwrite_s else None)  # sigmoid(-s) (absolute error ~u)
        z = xp.sum(H, axis=axis, keepdims=True)  # >= LEAST_TOP on every row
        p = xp.divide(H, z, out=H)
        return p, p, aux

    def stream(self, s, shift, backward=False):
        """With ``m = shift = min(max s, 0)``: ``H = sigmoid(s) e^-m = 1 / (e^m + e^(m - s))``, one
        exponential (``e^(m - s) = inf`` gives ``H = 0``, the limit); in ``[1/2, 1)`` where ``s`` is
        the row's largest. With ``backward`` also ``sigmoid(-s) = 1 - e^m H`` (absolute error ~u)."""
        xp = array_module(s)
        em = xp.exp(shift)  # (..., 1)
        H = xp.subtract(shift, s, out=s)
        H = xp.exp(H, out=H)  # e^(m - s)
        H += em
        H = xp.divide(1.0, H, out=H)
        aux = None
        if backward:
            aux = xp.multiply(H, em)
            aux = xp.subtract(1.0, aux, out=aux)
        return H, None, aux


class LinearKernel(Kernel):
    speeds_up = A.Linear

    has_exponent = False
    bounded_rho = False  # rho = s

    def factors(self, aux, p, phi):
        return p, None  # rho' = 1, ell' = 0:  ds = u / n


class ReLUKernel(Kernel):
    speeds_up = A.ReLU

    # rho' = [s > 0] needs s: [phi > 0] would differ where 0 < s < n * (smallest subnormal),
    # whose phi = s / n underflows to 0
    needs_s = True
    has_exponent = False
    bounded_rho = False  # rho = max(s, 0)

    def factors(self, s, p, phi):
        return p * (s > 0), None  # rho' = [s > 0], ell' = 0:  ds = u [s > 0] / n


class CosFormerNormKernel(Kernel):
    speeds_up = A.CosFormerNorm

    b_unbounded = True
    needs_s = True
    has_exponent = False
    bounded_factors = False  # p ell' = p / s

    def row_top(self, s):
        xp = array_module(s)
        top = xp.max(s, axis=-1, keepdims=True)
        return top * (top >= sqrt_tiny(s))  # the row maximum of b = s [s >= sqrt(tiny)]

    def split(self, s):
        return None, s * (s >= sqrt_tiny(s))  # max(s, 0), tiny scores counting as 0

    def factors(self, s, p, phi):
        b = p / array_module(s).maximum(s, sqrt_tiny(s))  # p / s; p = 0 where s was clamped
        return b, b


#: The kernel of each built-in activation class, under the class's own name (tested: one kernel per
#: registered activation, and no kernel without one).
KERNELS = {k.speeds_up: k for k in (SoftmaxKernel, TanhMaxKernel, SignExpKernel, ExpressiveKernel,
                                    SigSoftmaxKernel, SigmoidKernel, LinearKernel, ReLUKernel,
                                    CosFormerNormKernel)}


def kernel(activation) -> Generic:
    """The fast kernel of an activation instance: its class's (:data:`KERNELS`), :class:`PaperForm` for one
    given as ``g`` and ``h`` (it has ``paper_values``), :class:`Generic` for any other."""
    if type(activation) in KERNELS:
        return KERNELS[type(activation)](activation)
    return (PaperForm if hasattr(activation, "paper_values") else Generic)(activation)


def _split_p(xp, s, a, b, f, b_unbounded, axis, mask, overwrite_s=False):
    """``p = softmax(ell(s))`` from the split ``h = exp(f a) b`` (``a`` may be overwritten,
    and so may ``s`` where ``a is s`` and ``overwrite_s``).

    ``H = exp(f (a - max a)) * b``, ``p = H / sum H``; masked entries and rows
    with no normaliser get 0, as in the reference.
    """
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        if a is None:
            H = xp.ones_like(s) if b is None else b
        else:
            if mask is not None:
                a = xp.where(mask, a, -np.inf)  # h = 0 where masked
            m = xp.max(a, axis=axis, keepdims=True)  # log-sum-exp shift; NaN where the row has a NaN
            m = xp.where(m == -np.inf, 0.0, m)  # rows with no normaliser: any finite shift
            H = xp.subtract(a, m, out=a if a is not s or overwrite_s else None)  # (..., n) exponent <= 0
            if f != 1.0:
                H = xp.multiply(H, f, out=H)
            H = xp.exp(H, out=H)
            if b is not None:
                H = xp.multiply(H, b, out=H)
        if mask is not None and (a is None or b is not None):
            H = H * mask  # h = 0 where masked (H is finite, so no 0 * inf)
        if b_unbounded:  # rescale by the row maximum: b <= 1
            top = xp.max(H, axis=axis, keepdims=True)
            H = H / xp.where(top == 0, 1.0, top)
        z = xp.sum(H, axis=axis, keepdims=True)
        z = xp.where(z == 0, 1.0, z)  # no normaliser: H = 0, so p = 0 (a NaN z stays NaN)
        if H is b or (H is s and not overwrite_s):
            return H / z
        return xp.divide(H, z, out=H)


def forward(activation, s, axis=-1, mask=None, overwrite_s=False):
    """``(p, w, aux)`` for ``activation``: :meth:`Activation.p`, :meth:`Activation.forward`
    and what :func:`vjp_from` needs, by the activation's kernel. With ``overwrite_s``
    the scores, a temporary of the caller's, may become ``p``'s memory (only where
    the kernel does not need them: ``not kernel(activation).needs_s``)."""
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        k = kernel(activation)
        xp = array_module(s, mask)
        if not math.isfinite(float(to_numpy(xp.sum(s)))):  # rare: a score that is not finite (or a sum that overflows)
            s = xp.where(xp.isinf(s), np.nan, s)  # as the reference: +-inf counts as NaN, which fills its row
            s = s if mask is None else xp.where(mask, s, 0.0)  # and a masked entry is ignored
        return k.forward(s, axis, mask, overwrite_s and not k.needs_s)


def vjp_from(activation, xp, aux, p, u, axis, phi, overwrite_u=False, c=None):
    """Eq. 01.R5, ``ds = u A - B <u, phi>``, given ``p``, ``phi`` and ``aux`` from :func:`forward`.

    With ``overwrite_u`` the upstream gradient ``u``, a temporary of the
    caller's, becomes the output buffer. ``c``, if given, is ``<u, phi>``
    along ``axis`` (streaming attention knows it as ``dY . Y`` per row,
    ``derivations/23-streaming.md`` Eq. 23.S3, while its ``u`` and ``phi``
    are a block of the row). Equal to :meth:`Activation.backward`.
    """
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        A, B = kernel(activation).factors(aux, p, phi)
        if c is None:
            c = _rowdot(xp, u, phi, axis)  # <u, phi>, before u is overwritten
        if B is None:  # ell' = 0 (linear, relu): ds = u A
            t = xp.multiply(u, A, out=u) if overwrite_u else u * A
            if not bool(to_numpy(xp.isfinite(c).all())):  # as the reference's u A - (0 p) <u, phi>: a row whose
                t -= 0.0 * c  # <u, phi> is not finite is NaN (derivation 01, section 4.4)
            return t
        if A is B:  # ds = A (u - c)
            t = xp.subtract(u, c, out=u) if overwrite_u else u - c
            t *= A
        else:  # ds = u A - B c
            t = xp.multiply(u, A, out=u) if overwrite_u else u * A
            t -= B * c
        return t
