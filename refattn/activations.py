r"""Attention activations as reweighted softmaxes.

Seed 001 (Eq. 5) writes a generic attention activation as

    phi(s)_i = g(s_i) / sum_k h(s_k).

Every activation here is evaluated in the equivalent, stable form

    phi(s) = rho(s) * softmax(ell(s)),     rho = g / h,   ell = log h,

and one hand-derived vector-Jacobian product serves them all
(``derivations/01-reweighted-softmax.md``, Eq. R4):

    ds_j = u_j rho'(s_j) p_j + p_j ell'(s_j) (u_j rho(s_j) - sum_i u_i phi_i),

with ``p = softmax(ell(s))`` and ``u`` the upstream gradient.

========== ==================== ============ =========== ========================
name       g(s)                 h(s)         rho = g/h   ell = log h
========== ==================== ============ =========== ========================
softmax    e^s                  e^s          1           s
tanhmax    sinh s               cosh s       tanh s      log cosh s
signexp    sign(s) e^|s|        e^|s|        sign s      |s|
expressive s^2/(1+s^2)          same         1           log(s^2/(1+s^2))
sigsoftmax e^s sigmoid(s)       same         1           s - softplus(-s)
sigmoid    sigmoid(s)           same         1           -softplus(-s)
linear     s                    1            s           0
relu       max(s, 0)            1            max(s, 0)   0
cosformer  max(s, 0)            max(s, 0)    1           log max(s, 0)
========== ==================== ============ =========== ========================

Conventions (each pinned by a test in ``tests/test_activations.py``):

* **Mask.** ``mask`` is boolean, broadcastable to ``s``, ``True`` = keep. A
  masked entry has ``h = 0``: it gets weight 0, takes no part in the
  normaliser, and receives gradient 0.
* **No normaliser.** A row whose ``h`` vanishes everywhere (fully masked; all
  expressive scores 0; all cosformer scores <= 0) has no normaliser. Its
  weights are defined to be 0 and its gradient 0.
* **Underflow.** For expressive and cosformer, ``h`` is a power of the score;
  a score below ``sqrt(tiny)`` of its dtype (1.5e-154 in float64, 1.1e-19 in
  float32), whose ``h`` would underflow, counts as 0. This keeps ``ell'``
  finite (at most ``2 / sqrt(tiny)``).
* **Singular points.** signexp's ``rho = sign s`` jumps at 0, relu and
  cosformer have a kink at 0: there the library uses the one-sided-free
  convention ``rho'(0) = 0`` (and ``ell'(0) = 0`` for signexp), which is also
  what autograd computes. Central differences see the jump instead.
"""

from __future__ import annotations

import numpy as np
import autograd.numpy as anp

from .backend import (
    array_module,
    check_axis,
    check_float_array,
    check_mask,
    dtype_of,
    sigmoid as _sigmoid,
    stop_gradient,
)

__all__ = ["Activation", "ACTIVATIONS", "activation", "register"]

_REGISTRY: dict = {}


def register(cls):
    """Class decorator: add an activation to the registry under ``cls.name``."""
    _REGISTRY[cls.name] = cls()
    return cls


def _sigmoid_of_abs(xp, r):
    """sigmoid(r) for r = |s| >= 0: 0.5 (1 + tanh(r/2)), accurate there (the value
    is at least 1/2) and cheaper than :func:`refattn.backend.sigmoid`."""
    return 0.5 + 0.5 * xp.tanh(0.5 * r)


def _quiet(method):
    """Run ``method`` with NumPy's overflow, underflow and divide warnings off.

    Overflow here lands on +-inf only where the next operation maps it to the
    correct finite value: ``exp(-inf) = 0`` after ``a - max(a)`` or ``-2|s|``
    at the float limits, ``2 / inf = 0`` in expressive's ell' for huge |z|.
    Invalid operations (NaN) are *not* silenced; the tests check that every
    result is finite.
    """

    def wrapped(*args, **kwargs):
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            return method(*args, **kwargs)

    wrapped.__name__, wrapped.__doc__ = method.__name__, method.__doc__
    wrapped.__wrapped__ = method
    return wrapped


def _rowdot(xp, u, v, axis):
    """``sum(u * v, axis, keepdims=True)`` without an (..., n) temporary on the last axis."""
    if axis in (-1, u.ndim - 1):
        return (u[..., None, :] @ v[..., :, None])[..., 0]  # (..., 1) batched dot products
    return xp.sum(u * v, axis=axis, keepdims=True)


def _tiny_sqrt(s):
    return float(np.sqrt(np.finfo(dtype_of(s)).tiny))


class Activation:
    """One activation ``phi(s)_i = g(s_i) / sum_k h(s_k)`` (seed 001, Eq. 5).

    Subclasses define the elementwise functions ``g, h, dg, dh`` (the paper's
    form, for teaching and for the score dynamics of Proposition 1),
    ``rho, drho, dell`` (the reweighted-softmax form) and ``split``, which
    writes ``h = exp(ell_factor * a) * b`` with a cheap, overflow-free
    exponent ``a`` and a bounded factor ``0 <= b <= 1``, so that

        ell = log h = ell_factor * a + log b

    and ``p = softmax(ell)`` is evaluated as ``exp(f (a - max a)) * b``,
    normalised, without ever taking the logarithm of ``b``
    (``derivations/01-reweighted-softmax.md`` section 2). The flags below let
    the shared forward and VJP skip terms that are identically 0 or 1; they do
    not change the mathematics.
    """

    name: str = ""
    #: formula strings for tables and plots
    g_text = h_text = rho_text = ell_text = ""
    #: where the formula comes from
    source: str = ""
    #: rho == 1 everywhere, so phi = p and rho' = 0
    rho_is_one = False
    #: rho' == 0 everywhere it is defined (signexp)
    drho_is_zero = False
    #: ell' is this constant everywhere (softmax: 1; linear, relu: 0)
    dell_const: float | None = None
    #: the VJP needs the scores s, not only p and phi (see ``_vjp_terms``)
    vjp_needs_s = True
    #: h = exp(ell_factor * a) * b (sigsoftmax: 2, so that a cannot overflow)
    ell_factor = 1.0
    #: b is not bounded by 1 and is rescaled by its row maximum (cosformer)
    b_unbounded = False
    #: where phi is not differentiable: (where, why) pairs
    singular: tuple = ()
    #: score values at which an entry makes phi non-differentiable
    singular_scores: tuple = ()

    # --- the paper's form: g, h and their derivatives (may overflow) -------
    def g(self, s):
        raise NotImplementedError

    def h(self, s):
        raise NotImplementedError

    def dg(self, s):
        raise NotImplementedError

    def dh(self, s):
        raise NotImplementedError

    # --- the reweighted-softmax form ---------------------------------------
    def split(self, s):
        """``(a, b)`` with ``h(s) = exp(ell_factor * a) * b``; ``None`` stands for 0 (a) or 1 (b)."""
        raise NotImplementedError

    def rho(self, s):
        """rho = g / h, finite for every finite s (1 where ``rho_is_one``)."""
        if self.rho_is_one:
            return array_module(s).ones_like(s)
        raise NotImplementedError

    def drho(self, s):
        """rho' (0 where ``rho_is_one`` or ``drho_is_zero``)."""
        if self.rho_is_one or self.drho_is_zero:
            return array_module(s).zeros_like(s)
        raise NotImplementedError

    @_quiet
    def ell(self, s):
        """ell = log h = ell_factor * a + log b; -inf where h = 0 (for teaching:
        the forward pass never takes this logarithm)."""
        xp = array_module(s)
        a, b = self.split(s)
        out = xp.zeros_like(s) if a is None else self.ell_factor * a
        return out if b is None else out + xp.log(b)

    def dell(self, s):
        """ell' = h'/h (finite; 0 where h = 0 by the underflow convention)."""
        raise NotImplementedError

    def _p_dell(self, s, p):
        """``p * ell'``, whose limit is 0 where ``p`` vanishes (Eq. R4)."""
        return p * self.dell(s)

    # --- shared forward ----------------------------------------------------
    def _check(self, s, axis, mask, name="s"):
        check_float_array(s, name)
        ax = check_axis(axis, len(np.shape(stop_gradient(s))))
        check_mask(mask, np.shape(stop_gradient(s)))
        return ax

    @_quiet
    def weights(self, s, axis=-1, mask=None):
        """``p = softmax(ell(s))`` along ``axis``, with masked entries at 0.

        Evaluated as ``H = exp(f (a - max a)) * b``, ``p = H / sum H``
        (``split``); rows with no normaliser (every ``h`` is 0) get ``p = 0``.
        """
        xp = array_module(s, mask)
        own = xp is not anp  # temporaries made here may be overwritten in place
        a, b = self.split(s)
        if a is None:
            H = xp.ones_like(s) if b is None else b
        else:
            if mask is not None:
                a = xp.where(mask, a, -np.inf)  # h = 0 where masked
            m = xp.max(stop_gradient(a), axis=axis, keepdims=True)  # log-sum-exp shift
            m = xp.where(m > -np.inf, m, 0.0)  # rows with no normaliser: any finite shift
            H = a - m  # (..., n) exponent <= 0: no overflow
            if self.ell_factor != 1.0:
                H = xp.multiply(H, self.ell_factor, out=H) if own else H * self.ell_factor
            H = xp.exp(H, out=H) if own else xp.exp(H)
            if b is not None:
                H = xp.multiply(H, b, out=H) if own else H * b
        if mask is not None and (a is None or b is not None):
            H = H * mask  # h = 0 where masked (H is finite, so no 0 * inf)
        if self.b_unbounded:  # rescale by the row maximum: b <= 1
            top = xp.max(stop_gradient(H), axis=axis, keepdims=True)
            H = H / xp.where(top > 0, top, 1.0)
        z = xp.sum(H, axis=axis, keepdims=True)
        z = xp.where(z > 0, z, 1.0)  # no normaliser: H = 0, so p = 0
        if own and H is not b and H is not s:
            return xp.divide(H, z, out=H)
        return H / z

    def forward(self, s, axis=-1, mask=None):
        """Attention weights ``phi(s)`` along ``axis``.

        Parameters
        ----------
        s : ndarray (NumPy, CuPy or traced by autograd), float32 or float64
            Scores, any shape.
        axis : int
            The axis that is normalised (the keys).
        mask : ndarray of bool, optional
            Broadcastable to ``s``; ``True`` keeps an entry.

        Returns
        -------
        ndarray
            ``phi(s) = rho(s) * softmax(ell(s))``, same shape, dtype and array
            type as ``s``; 0 at masked entries and on rows with no normaliser.
        """
        axis = self._check(s, axis, mask)
        p = self.weights(s, axis, mask)
        return p if self.rho_is_one else self.rho(s) * p

    __call__ = forward

    # --- shared VJP (never traced, so it reuses its temporaries in place) ---
    def _vjp_terms(self, s, p, phi):
        """``(a, b)`` with ``ds = u * a - b * <u, phi>`` (Eq. R5 of the derivation).

        ``a = (rho' + rho ell') p = kappa p`` with ``kappa = g'/h``, and
        ``b = ell' p``: Eq. R4 regrouped by ``u_j`` and ``<u, phi>``. ``b`` is
        ``None`` where ell' = 0, and ``a is b`` where the two coincide
        (``rho_is_one``). This default evaluates them from the scores;
        activations whose ``a`` and ``b`` follow from ``p`` and ``phi`` alone
        override it and set ``vjp_needs_s = False``, so that attention need
        not keep the scores for its backward pass.
        """
        b = self._p_dell(s, p)  # p_j ell'_j
        if self.rho_is_one:
            return b, b  # kappa = ell' when rho = 1
        return self.drho(s) * p + self.rho(s) * b, b  # (rho' + rho ell') p

    @_quiet
    def _vjp_from(self, xp, s, p, u, axis, phi=None, overwrite_u=False):
        """The VJP given ``p = softmax(ell(s))`` (Eqs. R4-R5 of the derivation).

        ``phi = rho * p`` may be passed in when the forward pass computed it
        (attention caches it); ``s`` may then be ``None`` for activations with
        ``vjp_needs_s = False``. With ``overwrite_u`` the upstream gradient
        ``u``, a temporary of the caller's, is reused as the output buffer.
        """
        if phi is None:
            phi = p if self.rho_is_one else self.rho(s) * p
        a, b = self._vjp_terms(s, p, phi)
        if b is None:  # ell' = 0 (linear, relu): ds = u a
            return xp.multiply(u, a, out=u) if overwrite_u else u * a
        c = _rowdot(xp, u, phi, axis)  # sum_i u_i phi_i, before u is overwritten
        if a is b:  # ds = a (u - c)
            t = xp.subtract(u, c, out=u) if overwrite_u else u - c
            t *= a
        else:  # ds = u a - b c
            t = xp.multiply(u, a, out=u) if overwrite_u else u * a
            t -= b * c
        return t

    def vjp(self, s, grad_out, axis=-1, mask=None):
        """Hand-derived vector-Jacobian product ``u^T d phi / d s``.

        Parameters
        ----------
        s : ndarray
            Scores, as given to :meth:`forward`.
        grad_out : ndarray
            Upstream gradient ``u``, the shape of ``s``.
        axis, mask
            As in :meth:`forward`.

        Returns
        -------
        ndarray
            ``ds_j = u_j rho'_j p_j + p_j ell'_j (u_j rho_j - sum_i u_i phi_i)``
            (``derivations/01-reweighted-softmax.md``, Eq. R4, evaluated in
            the regrouped form R5); 0 at masked entries and on rows with no
            normaliser.
        """
        axis = self._check(s, axis, mask)
        check_float_array(grad_out, "grad_out")
        if np.shape(grad_out) != np.shape(s):
            raise ValueError(
                f"grad_out: shape {np.shape(grad_out)} does not match the scores' shape {np.shape(s)}"
            )
        xp = array_module(s, grad_out, mask)
        p = self.weights(s, axis, mask)
        return self._vjp_from(xp, s, p, grad_out, axis)

    @_quiet
    def jacobian(self, s):
        """The explicit Jacobian ``J[j, k] = d phi_j / d s_k`` of a 1-D row.

        ``J = diag(rho' p + phi ell') - phi (p ell')^T``
        (``derivations/01-reweighted-softmax.md``, Eq. R3), for teaching;
        :meth:`vjp` never forms it.
        """
        check_float_array(s, "s", ndim=1)
        xp = array_module(s)
        p = self.weights(s)
        rho, drho = self.rho(s), self.drho(s)
        phi = rho * p
        pl = self._p_dell(s, p)
        return xp.diag(drho * p + rho * pl) - phi[:, None] * pl[None, :]

    def __repr__(self):
        return f"activation({self.name!r})"


# --------------------------------------------------------------------------
# The registry. Each class: the paper's g, h; then rho, ell and derivatives.
# --------------------------------------------------------------------------


@register
class Softmax(Activation):
    """Softmax, ``phi_i = e^{s_i} / sum_k e^{s_k}`` (g = h = exp).

    Source: Bridle (1989); the baseline of every seed. Seed 001 Eq. 5 with
    g = h = exp. rho = 1, ell = s. split: a = s, b = 1.
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.1.
    """

    name = "softmax"
    g_text = h_text = "exp(s)"
    rho_text, ell_text = "1", "s"
    source = "Bridle (1989); seed 001 Eq. 5 with g = h = exp"
    rho_is_one = True
    dell_const = 1.0

    def g(self, s):
        return array_module(s).exp(s)

    h = dg = dh = g

    def split(self, s):
        return s, None

    def dell(self, s):
        return array_module(s).ones_like(s)

    vjp_needs_s = False

    def _vjp_terms(self, s, p, phi):
        return p, p  # kappa = ell' = 1:  ds = p (u - <u, p>)


@register
class TanhMax(Activation):
    """TanhMax, ``phi_i = sinh s_i / sum_k cosh s_k`` (seed 001, Eq. 6).

    The paper writes g = e^s - e^-s and h = e^s + e^-s; the factor 2 cancels.
    rho = tanh s, ell = log cosh s = |s| + log((1 + e^{-2|s|}) / 2):
    split a = |s|, b = (1 + e^{-2|s|}) / 2 in (1/2, 1]. rho' = 1 - tanh^2 s,
    ell' = tanh s.
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.2.
    """

    name = "tanhmax"
    g_text, h_text = "sinh(s)", "cosh(s)"
    rho_text, ell_text = "tanh(s)", "log cosh(s)"
    source = "Huang, Yang & Wang (seed 001), Eq. 6"
    vjp_needs_s = False

    def g(self, s):
        return array_module(s).sinh(s)

    def h(self, s):
        return array_module(s).cosh(s)

    dg, dh = h, g  # sinh' = cosh, cosh' = sinh

    def split(self, s):
        xp = array_module(s)
        a = xp.abs(s)
        return a, 0.5 + 0.5 * xp.exp(-2.0 * a)  # cosh s = e^|s| (1 + e^{-2|s|}) / 2

    def rho(self, s):
        return array_module(s).tanh(s)

    def drho(self, s):
        t = array_module(s).tanh(s)
        return 1.0 - t * t  # sech^2 = 1 - tanh^2

    def dell(self, s):
        return array_module(s).tanh(s)  # (log cosh)' = tanh

    def _vjp_terms(self, s, p, phi):
        # kappa = sinh'/cosh = 1 and ell' p = tanh(s) p = phi:  ds = u p - phi <u, phi>
        return p, phi


@register
class SignExp(Activation):
    """SignExp / Cog attention, ``phi_i = sign(s_i) e^{|s_i|} / sum_k e^{|s_k|}`` (seed 002).

    Seed 002's displayed formula writes the denominator as a signed sum; its
    text and code (``sign(p) * softmax(|p|)``) use absolute values, as here.
    rho = sign s, ell = |s| (split a = |s|, b = 1). rho jumps at 0: the
    derivative there is a Dirac term ``2 delta(s) e^{|s|} / C`` that no
    pointwise gradient represents; the library takes rho'(0) = 0 and
    ell'(0) = sign(0) = 0, which is what autograd computes too (so the VJP at
    an exact 0 is the regular part with sign(0) = 0, neither one-sided limit
    nor their average). Consequence: a row of scores that are all exactly 0
    (e.g. zero-initialised queries) has weights 0 and gradient 0, so gradient
    descent cannot leave it -- unlike softmax.
    Derivation: ``derivations/01-reweighted-softmax.md`` sections 3.3 and 5.1,
    and ``derivations/09-signexp-at-zero.md``.
    """

    name = "signexp"
    g_text, h_text = "sign(s) exp|s|", "exp|s|"
    rho_text, ell_text = "sign(s)", "|s|"
    source = "Cog attention (seed 002), sign(p) * softmax(|p|)"
    drho_is_zero = True
    vjp_needs_s = False
    singular = (("s = 0", "rho = sign(s) jumps: a Dirac term in the derivative; "
                 "analytic and autograd use rho'(0) = 0, differences see the jump"),)
    singular_scores = (0.0,)

    def g(self, s):
        xp = array_module(s)
        return xp.sign(s) * xp.exp(xp.abs(s))

    def h(self, s):
        xp = array_module(s)
        return xp.exp(xp.abs(s))

    dg = h  # away from 0 (plus 2 delta(s) at 0)

    def dh(self, s):
        return self.g(s)

    def split(self, s):
        return array_module(s).abs(s), None

    def rho(self, s):
        return array_module(s).sign(s)

    def dell(self, s):
        return array_module(s).sign(s)

    def _vjp_terms(self, s, p, phi):
        # kappa = rho' + rho ell' = 0 + sign(s)^2 = |sign s|, so kappa p = |phi| (0 at s = 0, the
        # library's convention); ell' p = sign(s) p = phi:  ds = u |phi| - phi <u, phi>
        return array_module(phi).abs(phi), phi


@register
class Expressive(Activation):
    """Expressive attention, ``phi_i = h(z_i) / sum_k h(z_k)``, ``h(z) = z^2/(1+z^2)`` (seed 004, Eq. 2).

    rho = 1 and ell = log(z^2/(1+z^2)), which is -inf at z = 0; ``p ell'``
    stays finite there (its limit is 0), so phi is smooth at an isolated zero.
    h is bounded by 1, so split has a = 0 and b = h, evaluated as
    ``1 / (1 + (1/z)^2)`` (no overflow for large |z|). A score whose h would
    be subnormal (|z| < sqrt(tiny)) counts as 0; a row of zeros has no
    normaliser (module docstring). ell' = 2 / (z (1 + z^2)).
    Derivation: ``derivations/01-reweighted-softmax.md`` sections 3.4 and 5.2.
    """

    name = "expressive"
    g_text = h_text = "s^2/(1+s^2)"
    rho_text, ell_text = "1", "log(s^2/(1+s^2))"
    source = "Gros (seed 004), Eq. 2"
    rho_is_one = True
    singular = (("all-zero row", "h = 0 everywhere: no normaliser; weights and gradient set to 0"),)

    def g(self, s):
        return s * s / (1.0 + s * s)

    h = g

    def dg(self, s):
        return 2.0 * s / (1.0 + s * s) ** 2

    dh = dg

    def split(self, s):
        small = array_module(s).abs(s) < _tiny_sqrt(s)  # underflow convention: counts as 0
        w = 1.0 / self._safe(s, small)  # 1/z, at a safe argument (finite autograd at 0)
        return None, (~small) / (1.0 + w * w)  # z^2 / (1 + z^2), no overflow for large |z|

    def _safe(self, s, small=None):
        """s, with 1 added where |s| < sqrt(tiny) (where h counts as 0): never 0, and
        cheaper than ``where`` (one add instead of a select)."""
        if small is None:
            small = array_module(s).abs(s) < _tiny_sqrt(s)
        return s + small

    @_quiet
    def dell(self, s):
        small = array_module(s).abs(s) < _tiny_sqrt(s)
        z = self._safe(s, small)
        return 2.0 / (z * (1.0 + z * z)) * (~small)  # (log h)' = 2 / (z (1 + z^2)); 0 where h is

    def _p_dell(self, s, p):
        z = self._safe(s)  # p = 0 wherever z was shifted
        return (p + p) / (z * (1.0 + z * z))


@register
class SigSoftmax(Activation):
    """Sigsoftmax, ``phi_i = e^{s_i} sigmoid(s_i) / sum_k e^{s_k} sigmoid(s_k)`` (Kanai et al. 2018).

    rho = 1, ell = s + log sigmoid(s), ell' = 1 + sigmoid(-s). Since
    sigmoid(s) = e^{min(s, 0)} sigmoid(|s|), h = exp(s + min(s, 0)) sigmoid(|s|):
    split a = (s + min(s, 0)) / 2 with ``ell_factor = 2`` (the exponent itself,
    ~2s for s << 0, would overflow at the dtype's limit) and
    b = sigmoid(|s|) in [1/2, 1).
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.5.
    """

    name = "sigsoftmax"
    g_text = h_text = "exp(s) sigmoid(s)"
    rho_text, ell_text = "1", "s - softplus(-s)"
    source = "Kanai et al. (2018), sigsoftmax; seed 001 Tables 3-4"
    rho_is_one = True
    ell_factor = 2.0

    def g(self, s):
        xp = array_module(s)
        return xp.exp(s) * _sigmoid(xp, s)

    h = g

    def dg(self, s):
        xp = array_module(s)
        return self.g(s) * (1.0 + _sigmoid(xp, -s))

    dh = dg

    def split(self, s):
        r = array_module(s).abs(s)
        # a = (s + min(s, 0)) / 2 = 0.75 s - 0.25 |s|  (s/2 for s >= 0, s for s < 0)
        return 0.75 * s - 0.25 * r, _sigmoid_of_abs(array_module(s), r)

    def dell(self, s):
        return 1.5 - 0.5 * array_module(s).tanh(0.5 * s)  # 1 + sigmoid(-s)


@register
class Sigmoid(Activation):
    """Normalised sigmoid, ``phi_i = sigmoid(s_i) / sum_k sigmoid(s_k)`` (Kanai et al. 2018).

    rho = 1, ell = log sigmoid(s) = min(s, 0) + log sigmoid(|s|),
    ell' = sigmoid(-s). split: a = min(s, 0), b = sigmoid(|s|) in [1/2, 1).
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.5.
    """

    name = "sigmoid"
    g_text = h_text = "sigmoid(s)"
    rho_text, ell_text = "1", "-softplus(-s)"
    source = "Kanai et al. (2018), Sec. 4; seed 001 Sec. 5.3"
    rho_is_one = True

    def g(self, s):
        return _sigmoid(array_module(s), s)

    h = g

    def dg(self, s):
        xp = array_module(s)
        return _sigmoid(xp, s) * _sigmoid(xp, -s)

    dh = dg

    def split(self, s):
        r = array_module(s).abs(s)
        return 0.5 * s - 0.5 * r, _sigmoid_of_abs(array_module(s), r)  # min(s, 0); halves first: s - |s| may overflow

    def dell(self, s):
        # sigmoid(-s) by the tanh form: its relative precision fails for s >> 0 (see
        # backend.sigmoid), but its absolute error stays below about 2.2e-16, and ell'
        # only ever enters the VJP multiplied by p, so ds keeps rounding-level accuracy.
        return 0.5 - 0.5 * array_module(s).tanh(0.5 * s)


class _Unnormalised(Activation):
    """h = 1: the 'normaliser' is the number n of unmasked entries, so
    phi_i = g(s_i) / n, p = 1/n is uniform and ell' = 0."""

    dell_const = 0.0
    vjp_needs_s = False
    h_text, ell_text = "1", "0"

    def h(self, s):
        return array_module(s).ones_like(s)

    def dh(self, s):
        return array_module(s).zeros_like(s)

    def split(self, s):
        return None, None

    def dell(self, s):
        return array_module(s).zeros_like(s)


@register
class Linear(_Unnormalised):
    """The non-local "dot product" operation, ``phi_i = s_i / n`` (Wang et al. 2018).

    Wang et al.'s non-local block with f = theta(x_i)^T phi(x_j) normalises by
    C(x) = N, the number of positions; seed 001 (Tables 3-4) calls it
    "Dot product". rho = s, ell = 0.
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.6.
    """

    name = "linear"
    g_text = rho_text = "s"
    source = "Wang et al. (2018), non-local 'dot product', C(x) = N; seed 001 Tables 3-4"

    def g(self, s):
        return s

    rho = g

    def dg(self, s):
        return array_module(s).ones_like(s)

    drho = dg

    def _vjp_terms(self, s, p, phi):
        return p, None  # rho' = 1, ell' = 0:  ds = u p = u / n


@register
class ReLU(_Unnormalised):
    """ReLU attention, ``phi_i = max(s_i, 0) / n`` (seed 001, Tables 3-4).

    Seed 001 lists ReLU as monotone and log-nonlinear but not normalised; we
    divide by the constant n (the number of unmasked entries), as the linear
    row does, so that the output scale does not grow with n. rho'(0) = 0
    (autograd's ``clip`` agrees).
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.6.
    """

    name = "relu"
    g_text = rho_text = "max(s, 0)"
    source = "seed 001 Tables 3-4 (ReLU), scaled by 1/n as the non-local form"
    singular = (("s = 0", "kink: rho'(0) = 0 by convention; differences see 1/2"),)
    singular_scores = (0.0,)

    def g(self, s):
        return array_module(s).clip(s, 0.0, None)

    rho = g

    def dg(self, s):
        return (s > 0).astype(dtype_of(s))

    drho = dg

    def _vjp_terms(self, s, p, phi):
        # rho' = [s > 0] = [phi > 0] wherever p > 0, ell' = 0:  ds = u [s > 0] / n
        return p * (phi > 0), None


@register
class CosFormerNorm(Activation):
    """cosFormer's normalisation, ``phi_i = relu(s_i) / sum_k relu(s_k)`` (Qin et al. 2022).

    cosFormer scores are non-negative kernels relu(q).relu(k) cos(...) (see
    :func:`refattn.scores.score` ``"cosformer"``), normalised by their row sum;
    with the relu, g = h = max(s, 0) is defined for every score. rho = 1,
    ell = log max(s, 0), ell' = 1/s for s > 0. split: a = 0, b = max(s, 0),
    rescaled by its row maximum (``b_unbounded``). A score below sqrt(tiny)
    counts as 0 (keeps ell' finite).
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.7.
    """

    name = "cosformer"
    g_text = h_text = "max(s, 0)"
    rho_text, ell_text = "1", "log max(s, 0)"
    source = "Qin et al. (2022; seed 001 cites it as 'Zhen et al.'), cosFormer row normalisation; seed 001 Tables 3-4"
    rho_is_one = True
    b_unbounded = True
    singular = (("s = 0", "kink: differences see the average of the two one-sided slopes"),
                ("row with no positive score", "no normaliser; weights and gradient set to 0"))
    singular_scores = (0.0,)

    def g(self, s):
        return array_module(s).clip(s, 0.0, None)

    h = g

    def dg(self, s):
        return (s > 0).astype(dtype_of(s))

    dh = dg

    def split(self, s):
        return None, s * (s >= _tiny_sqrt(s))  # max(s, 0), tiny scores counting as 0

    def dell(self, s):
        xp = array_module(s)
        return (s >= _tiny_sqrt(s)) / xp.maximum(s, _tiny_sqrt(s))  # 1/s where h > 0

    def _p_dell(self, s, p):
        return p / array_module(s).maximum(s, _tiny_sqrt(s))  # p = 0 where s was clamped


#: The names of every registered activation, in registry order.
ACTIVATIONS = tuple(_REGISTRY)


def activation(name: str) -> Activation:
    """Return the registered activation called ``name``.

    Raises
    ------
    ValueError
        For an unknown name; the message lists the known ones.
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected a string, got {type(name).__name__}")
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"name: unknown activation {name!r}; expected one of {ACTIVATIONS}") from None
