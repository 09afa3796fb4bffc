r"""Fewer passes for the built-in activations: the split evaluation of ``p`` and the VJP factors.

The reference (:meth:`refattn.activations.Activation.p` and ``vjp``) computes
``ell = log h``, exponentiates it, and evaluates Eq. R4 term by term. That is
the formula; it is not the cheapest way to get the same numbers. This module
is (``derivations/20-speed.md`` sections 2-3 measure each choice):

* **The split.** Each built-in activation writes ``h = exp(f a) * b`` with a
  cheap, overflow-free exponent ``a`` and a bounded factor ``0 <= b <= 1``,
  so ``p = exp(f (a - max a)) * b`` normalised, with no logarithm: one
  exponential for softmax and signexp, none at all for expressive, linear,
  relu and cosformer (``derivations/01-reweighted-softmax.md``, section 2,
  shows the two forms agree).
* **The VJP factors (Eq. R5).** ``ds = u * A - B * <u, phi>`` with
  ``A = (rho' + rho ell') p`` and ``B = ell' p``. For most activations
  ``A`` and ``B`` follow from ``p`` and ``phi`` alone (softmax: ``A = B = p``;
  tanhmax: ``A = p, B = phi``), so attention need not keep the scores.
* **In-place buffers.** Temporaries are reused with ``out=`` (never on
  values autograd traces: :mod:`refattn.fast` sends those to the reference).

A :class:`Kernel` is looked up by the activation's class (:func:`kernel`).
An activation without one (a user's own) gets :class:`Generic`, which calls
the reference's ``p``, ``rho``, ``drho`` and ``dell``: slower, never wrong.
"""

from __future__ import annotations

import numpy as np

from .. import activations as A
from ..activations import sqrt_tiny
from ..backend import array_module

__all__ = ["Kernel", "Generic", "kernel", "p_of", "vjp_from"]


def _sigmoid_of_abs(xp, r):
    """sigmoid(r) for r = |s| >= 0 as 0.5 (1 + tanh(r/2)): accurate there (the value
    is at least 1/2) and cheaper than :func:`refattn.backend.sigmoid`."""
    return 0.5 + 0.5 * xp.tanh(0.5 * r)


def _rowdot(xp, u, v, axis):
    """``sum(u * v, axis, keepdims=True)``; on the last axis as batched dot products (no temporary)."""
    if axis in (-1, u.ndim - 1):
        return (u[..., None, :] @ v[..., :, None])[..., 0]  # (..., 1)
    return xp.sum(u * v, axis=axis, keepdims=True)


class Generic:
    """The reference's own functions: for an activation this module does not know."""

    ell_factor = 1.0  # h = exp(f a) b
    b_unbounded = False  # b is rescaled by its row maximum (cosformer)
    needs_s = True  # the VJP factors need the scores, not only p and phi

    def __init__(self, act):
        self.act = act

    def split(self, s):
        """``(a, b)`` with ``h = exp(f a) b``; ``None`` stands for ``a = 0`` or ``b = 1``."""
        return None, None  # unused: :func:`p_of` calls the reference's p

    def factors(self, s, p, phi):
        """``(A, B)`` of Eq. R5; ``B`` is ``None`` where ``ell' = 0``, ``A is B`` where they coincide."""
        act = self.act
        b = p * act.dell(s)  # p ell'
        return act.drho(s) * p + act.rho(s) * b, b  # (rho' + rho ell') p


class Kernel(Generic):
    """A built-in activation's split and factors (subclasses below, one per class)."""

    needs_s = False


class _Softmax(Kernel):
    def split(self, s):
        return s, None  # h = e^s

    def factors(self, s, p, phi):
        return p, p  # A = B = p:  ds = p (u - <u, p>)


class _TanhMax(Kernel):
    def split(self, s):
        xp = array_module(s)
        a = xp.abs(s)
        return a, 0.5 + 0.5 * xp.exp(-2.0 * a)  # cosh s = e^|s| (1 + e^{-2|s|}) / 2

    def factors(self, s, p, phi):
        return p, phi  # kappa = sinh'/cosh = 1, ell' p = tanh(s) p = phi


class _SignExp(Kernel):
    def split(self, s):
        return array_module(s).abs(s), None  # h = e^|s|

    def factors(self, s, p, phi):
        return array_module(phi).abs(phi), phi  # kappa p = |sign s| p = |phi|, ell' p = phi


class _Expressive(Kernel):
    needs_s = True

    def split(self, s):
        small = array_module(s).abs(s) < sqrt_tiny(s)  # underflow convention: counts as 0
        w = 1.0 / (s + small)  # 1/z at a safe argument (one add, cheaper than where)
        return None, (~small) / (1.0 + w * w)  # z^2 / (1 + z^2), no overflow for large |z|

    def factors(self, s, p, phi):
        z = s + (array_module(s).abs(s) < sqrt_tiny(s))  # p = 0 wherever z was shifted
        b = (p + p) / (z * (1.0 + z * z))  # p ell' = 2 p / (z (1 + z^2))
        return b, b


class _SigSoftmax(Kernel):
    ell_factor = 2.0
    needs_s = True

    def split(self, s):
        r = array_module(s).abs(s)
        # a = (s + min(s, 0)) / 2 = 0.75 s - 0.25 |s|; b = sigmoid(|s|) in [1/2, 1)
        return 0.75 * s - 0.25 * r, _sigmoid_of_abs(array_module(s), r)

    def factors(self, s, p, phi):
        b = p * (1.5 - 0.5 * array_module(s).tanh(0.5 * s))  # p (1 + sigmoid(-s))
        return b, b


class _Sigmoid(Kernel):
    needs_s = True

    def split(self, s):
        r = array_module(s).abs(s)
        return 0.5 * s - 0.5 * r, _sigmoid_of_abs(array_module(s), r)  # min(s, 0); halves: no overflow

    def factors(self, s, p, phi):
        # sigmoid(-s) by the tanh form: absolute error below 2.2e-16, and it enters times p
        b = p * (0.5 - 0.5 * array_module(s).tanh(0.5 * s))
        return b, b


class _Linear(Kernel):
    def factors(self, s, p, phi):
        return p, None  # rho' = 1, ell' = 0:  ds = u / n


class _ReLU(Kernel):
    # rho' = [s > 0] needs s: [phi > 0] would differ where 0 < s < n * (smallest subnormal),
    # whose phi = s / n underflows to 0
    needs_s = True

    def factors(self, s, p, phi):
        return p * (s > 0), None  # rho' = [s > 0], ell' = 0:  ds = u [s > 0] / n


class _CosFormer(Kernel):
    b_unbounded = True
    needs_s = True

    def split(self, s):
        return None, s * (s >= sqrt_tiny(s))  # max(s, 0), tiny scores counting as 0

    def factors(self, s, p, phi):
        b = p / array_module(s).maximum(s, sqrt_tiny(s))  # p / s; p = 0 where s was clamped
        return b, b


_KERNELS = {A.Softmax: _Softmax, A.TanhMax: _TanhMax, A.SignExp: _SignExp,
            A.Expressive: _Expressive, A.SigSoftmax: _SigSoftmax, A.Sigmoid: _Sigmoid,
            A.Linear: _Linear, A.ReLU: _ReLU, A.CosFormerNorm: _CosFormer}


def kernel(act) -> Generic:
    """The fast kernel of an activation instance (:class:`Generic` for a class not listed)."""
    return _KERNELS.get(type(act), Generic)(act)


def p_of(act, s, axis=-1, mask=None):
    """``p = softmax(ell(s))`` along ``axis``, equal to :meth:`Activation.p` (split form, in place).

    ``H = exp(f (a - max a)) * b``, ``p = H / sum H``; masked entries and rows
    with no normaliser get 0, as in the reference.
    """
    k = kernel(act)
    if type(k) is Generic:
        return act.p(s, axis, mask)
    xp = array_module(s, mask)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        a, b = k.split(s)
        if a is None:
            H = xp.ones_like(s) if b is None else b
        else:
            if mask is not None:
                a = xp.where(mask, a, -np.inf)  # h = 0 where masked
            m = xp.max(a, axis=axis, keepdims=True)  # log-sum-exp shift
            m = xp.where(m > -np.inf, m, 0.0)  # rows with no normaliser: any finite shift
            H = xp.subtract(a, m, out=a if a is not s else None)  # (..., n) exponent <= 0
            if k.ell_factor != 1.0:
                H = xp.multiply(H, k.ell_factor, out=H)
            H = xp.exp(H, out=H)
            if b is not None:
                H = xp.multiply(H, b, out=H)
        if mask is not None and (a is None or b is not None):
            H = H * mask  # h = 0 where masked (H is finite, so no 0 * inf)
        if k.b_unbounded:  # rescale by the row maximum: b <= 1
            top = xp.max(H, axis=axis, keepdims=True)
            H = H / xp.where(top > 0, top, 1.0)
        z = xp.sum(H, axis=axis, keepdims=True)
        z = xp.where(z > 0, z, 1.0)  # no normaliser: H = 0, so p = 0
        if H is b or H is s:
            return H / z
        return xp.divide(H, z, out=H)


def vjp_from(act, xp, s, p, u, axis, phi, overwrite_u=False):
    """Eq. R5, ``ds = u A - B <u, phi>``, given ``p`` and ``phi`` (and ``s`` if the kernel needs it).

    With ``overwrite_u`` the upstream gradient ``u``, a temporary of the
    caller's, becomes the output buffer. Equal to :meth:`Activation.vjp`.
    """
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        a, b = kernel(act).factors(s, p, phi)
        if b is None:  # ell' = 0 (linear, relu): ds = u A
            return xp.multiply(u, a, out=u) if overwrite_u else u * a
        c = _rowdot(xp, u, phi, axis)  # <u, phi>, before u is overwritten
        if a is b:  # ds = A (u - c)
            t = xp.subtract(u, c, out=u) if overwrite_u else u - c
            t *= a
        else:  # ds = u A - B c
            t = xp.multiply(u, a, out=u) if overwrite_u else u * a
            t -= b * c
        return t
