r"""Attention activations as reweighted softmaxes: the textbook form.

TanhMax (Eq. 5) writes a generic attention activation as

    phi(s)_i = g(s_i) / sum_k h(s_k).

Every activation here is evaluated in the equivalent, stable form (Eq. 01.R1 of
``derivations/01-reweighted-softmax.md``)

    phi(s) = rho(s) * softmax(ell(s)),     rho = g / h,   ell = log h,

and one hand-derived vector-Jacobian product serves them all (Eq. 01.R4):

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

One activation is one class: its ``g, h`` and derivatives, ``rho, ell`` and
derivatives, its singular points, its regularity and the closed form of its
score velocity (:meth:`Activation.delta_II`) are all written there. Speed
lives elsewhere: :mod:`refattn.fast` evaluates the same mathematics in
blocks, on threads, with fewer passes, and is tested equal to this module.

Conventions (each pinned by a test in ``tests/test_activations.py``):

* **Mask.** ``mask`` is boolean, broadcastable to ``s``, ``True`` = keep. A
  masked entry has ``h = 0`` (``ell = -inf``): it gets weight 0, takes no
  part in the normaliser, and receives gradient 0.
* **No normaliser.** A row whose ``h`` vanishes everywhere (fully masked; all
  expressive scores 0; all cosformer scores <= 0) has no normaliser. Its
  weights are defined to be 0 and its gradient 0.
* **Underflow.** For expressive and cosformer, ``h`` is a power of the score;
  a score below ``sqrt(tiny)`` of its dtype (1.5e-154 in float64, 1.1e-19 in
  float32), whose ``h`` would underflow, counts as 0. This keeps ``ell'``
  finite (at most ``2 / sqrt(tiny)``).
* **Singular points.** At a score of 0 signexp's ``rho = sign s`` jumps and
  relu and cosformer have a kink. There the library takes, and autograd
  computes: for signexp ``rho'(0) = 0`` and ``ell'(0) = sign(0) = 0`` (a
  convention, neither one-sided derivative); for relu the left derivative,
  ``rho'(0) = 0``; for cosformer the left derivative too, through
  ``ell(0) = -inf`` (so ``p = 0``) and ``ell'(0) = 0`` (its ``rho'`` is 0
  everywhere). Central differences see signexp's jump as a spike of size
  about ``u p / eps`` and each kink as the mean of its two one-sided slopes
  (``derivations/01-reweighted-softmax.md``, section 4).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .backend import (
    array_module,
    check_axis,
    check_float_array,
    check_mask,
    dtype_of,
    sigmoid,
    stop_gradient,
)

__all__ = ["Activation", "ACTIVATIONS", "activation", "register"]

_REGISTRY: dict = {}


def register(cls):
    """Class decorator: add an activation to the registry under ``cls.name``."""
    _REGISTRY[cls.name] = cls()
    return cls


def _quiet(method):
    """Run ``method`` with NumPy's overflow, underflow and divide warnings off.

    Every overflow in this module lands on +-inf where the next operation maps
    it to the correct finite limit: ``exp(-inf) = 0`` (a masked entry, or
    ``ell - max ell`` at the float limits), ``1 / inf = 0`` in expressive's
    ``ell'`` for huge ``|z|``. NaN (``invalid``) is *not* silenced; the tests
    check that every result is finite (``derivations/01-reweighted-softmax.md``,
    section 2).
    """

    @functools.wraps(method)
    def wrapped(*args, **kwargs):
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            return method(*args, **kwargs)

    return wrapped


def sqrt_tiny(s) -> float:
    """``sqrt`` of the smallest normal number of ``s``'s dtype: the underflow threshold."""
    return math.sqrt(float(np.finfo(dtype_of(s)).tiny))


class Activation:
    """One activation ``phi(s)_i = g(s_i) / sum_k h(s_k)`` (TanhMax, Eq. 5).

    A subclass writes the paper's form ``g, h, dg, dh`` and the reweighted
    form ``rho, ell, drho, dell`` (``derivations/01-reweighted-softmax.md``,
    section 3 checks every row); :meth:`forward` (Eq. 01.R1), :meth:`vjp`
    (Eq. 01.R4) and :meth:`jacobian` (Eq. 01.R3) are written once, here.

    Attributes
    ----------
    name : str
        The registry name.
    source : str
        Where the formula comes from.
    rho_is_one : bool
        ``rho = 1`` everywhere: ``phi = p`` is non-negative and sums to 1.
    shift_invariant : bool
        ``phi(s + c) = phi(s)`` for every constant ``c`` (softmax only).
    ell_scale : float
        ``c`` such that :meth:`scaled_ell` ``= ell / c`` is finite for every
        finite score (1, except sigsoftmax, whose ``ell ~ 2 s`` overflows for
        ``s`` below half the dtype's most negative number).
    singular : tuple of (str, str)
        ``(where, why)`` for each point where ``phi`` is not differentiable.
    singular_scores : tuple of float
        Score values at which an entry makes ``phi`` non-differentiable.
    regularity : {"smooth", "kink", "log"}
        How ``ell`` behaves near 0: smooth; ``rho`` or ``ell'`` jumps at 0 but
        is constant on each side; or ``ell`` is the log of a power of ``s``
        (``ell'' ~ 1/s^2``). Rank collapse's first-order expansion reads it
        (``derivations/16-rank-collapse.md``); ``"log"``, the most cautious,
        unless a class says otherwise.
    """

    name: str = ""
    #: formula strings for tables and plots
    g_text = h_text = rho_text = ell_text = ""
    source: str = ""
    rho_is_one = False
    shift_invariant = False
    ell_scale = 1.0
    singular: tuple = ()
    singular_scores: tuple = ()
    regularity = "log"  # the most cautious; each registered class says what it is

    # --- the paper's form: g, h and their derivatives (these may overflow) ---
    def g(self, s):
        raise NotImplementedError

    def h(self, s):
        raise NotImplementedError

    def dg(self, s):
        raise NotImplementedError

    def dh(self, s):
        raise NotImplementedError

    # --- the reweighted form: rho = g/h, ell = log h, and their derivatives ---
    def rho(self, s):
        return array_module(s).ones_like(s)

    def drho(self, s):
        return array_module(s).zeros_like(s)

    def ell(self, s):
        """``ell = log h``, finite or ``-inf`` (where ``h = 0``) for every finite ``s``."""
        raise NotImplementedError

    def scaled_ell(self, s):
        """``ell / ell_scale``: what :meth:`p` exponentiates (``ell`` itself but for sigsoftmax)."""
        return self.ell(s)

    def dell(self, s):
        """``ell' = h'/h``, finite (0 where ``h = 0``, by the underflow convention)."""
        raise NotImplementedError

    # --- Eq. 01.R1: phi = rho * softmax(ell) ------------------------------------
    def _check(self, s, axis, mask):
        check_float_array(s, "s")
        axis = check_axis(axis, len(np.shape(stop_gradient(s))))
        check_mask(mask, np.shape(stop_gradient(s)))
        return axis

    @_quiet
    def p(self, s, axis=-1, mask=None):
        """``p = softmax(ell(s))`` along ``axis``: the ``p`` of Eq. 01.R1, not the weights.

        Masked entries and rows with no normaliser get ``p = 0``
        (``derivations/01-reweighted-softmax.md``, appendix A).
        """
        xp = array_module(s, mask)
        l = self.scaled_ell(s)  # ell / c, finite or -inf
        if mask is not None:
            l = xp.where(mask, l, -np.inf)  # a masked entry has h = 0
        m = xp.max(stop_gradient(l), axis=axis, keepdims=True)  # log-sum-exp shift: no gradient
        m = xp.where(m > -np.inf, m, 0.0)  # a row with no normaliser: any finite shift
        e = xp.exp(self.ell_scale * (l - m))  # e^(ell - max ell) in [0, 1]: no overflow
        z = xp.sum(e, axis=axis, keepdims=True)  # >= 1, or 0 on a row with no normaliser
        return e / xp.where(z > 0, z, 1.0)  # no normaliser: e = 0, so p = 0

    def forward(self, s, axis=-1, mask=None):
        """Attention weights ``phi(s) = rho(s) * softmax(ell(s))`` along ``axis`` (Eq. 01.R1).

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
            ``phi(s)``, same shape, dtype and array type as ``s``; 0 at masked
            entries and on rows with no normaliser.
        """
        axis = self._check(s, axis, mask)
        return self.rho(s) * self.p(s, axis, mask)  # phi = rho(s) p

    __call__ = forward

    # --- Eq. 01.R4: the one VJP ----------------------------------------------------
    @_quiet
    def vjp(self, s, grad_out, axis=-1, mask=None):
        """Hand-derived vector-Jacobian product ``u^T d phi / d s`` (Eq. 01.R4).

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
            (``derivations/01-reweighted-softmax.md``, section 2), evaluated
            grouped by ``u_j`` and ``<u, phi>`` as Eq. 01.R5,
            ``ds_j = u_j (rho'_j + rho_j ell'_j) p_j - ell'_j p_j <u, phi>``, so
            that no difference of two large terms is formed; 0 at masked entries
            and on rows with no normaliser (every term carries ``p_j``).
        """
        axis = self._check(s, axis, mask)
        check_float_array(grad_out, "grad_out")
        if np.shape(grad_out) != np.shape(s):
            raise ValueError(
                f"grad_out: shape {np.shape(grad_out)} does not match the scores' shape {np.shape(s)}"
            )
        xp, u = array_module(s, grad_out, mask), grad_out
        p, rho = self.p(s, axis, mask), self.rho(s)
        pl = p * self.dell(s)  # p_j ell'_j
        c = xp.sum(u * rho * p, axis=axis, keepdims=True)  # <u, phi>
        return u * (self.drho(s) * p + rho * pl) - pl * c  # Eq. 01.R4, grouped as 01.R5

    @_quiet
    def jacobian(self, s):
        """The explicit Jacobian ``J[j, k] = d phi_j / d s_k`` of a 1-D row.

        ``J = diag(rho' p + phi ell') - phi (p ell')^T``
        (``derivations/01-reweighted-softmax.md``, Eq. 01.R3), for teaching;
        :meth:`vjp` never forms it.
        """
        check_float_array(s, "s", ndim=1)
        xp = array_module(s)
        p, rho = self.p(s), self.rho(s)
        phi, pl = rho * p, p * self.dell(s)
        return xp.diag(self.drho(s) * p + phi * self.dell(s)) - phi[:, None] * pl[None, :]

    # --- Proposition 1's context factor in closed form ---------------------------
    def delta_II(self, s, o, axis=-1):
        """``Delta_II,i = sum_j (d phi_j / d s_i) o_j`` in closed form (no mask).

        The context-dependent factor of TanhMax's Proposition 1 (Eq. 4),
        written out for this activation
        (``derivations/04-score-dynamics-closed-forms.md``, section 3); tested
        equal to :meth:`vjp` with cotangent ``o``.
        """
        raise NotImplementedError(f"activation {self.name!r} has no closed-form Delta_II")

    def __repr__(self):
        return f"activation({self.name!r})"


def _context(w, o, axis):
    """``o_bar = sum_j w_j o_j``, the attention-weighted context of ``o``."""
    return array_module(w, o).sum(w * o, axis=axis, keepdims=True)


# --------------------------------------------------------------------------
# The registry. Each class: the paper's g, h; then rho, ell and derivatives;
# then the closed form of Delta_II.
# --------------------------------------------------------------------------


@register
class Softmax(Activation):
    """Softmax, ``phi_i = e^{s_i} / sum_k e^{s_k}`` (g = h = exp).

    Source: Bridle (1989); the baseline of every paper. TanhMax Eq. 5 with
    g = h = exp. rho = 1, ell = s, ell' = 1.
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.1.
    """

    name = "softmax"
    g_text = h_text = "exp(s)"
    rho_text, ell_text = "1", "s"
    source = "Bridle (1989); TanhMax Eq. 5 with g = h = exp"
    rho_is_one = shift_invariant = True
    regularity = "smooth"

    def g(self, s):
        return array_module(s).exp(s)

    h = dg = dh = g

    def ell(self, s):
        return s

    def dell(self, s):
        return array_module(s).ones_like(s)

    def delta_II(self, s, o, axis=-1):
        w = self.forward(s, axis)
        return w * (o - _context(w, o, axis))  # w_i (o_i - o_bar)


@register
class TanhMax(Activation):
    """TanhMax, ``phi_i = sinh s_i / sum_k cosh s_k`` (TanhMax, Eq. 6).

    The paper writes g = e^s - e^-s and h = e^s + e^-s; the factor 2 cancels.
    rho = tanh s, rho' = 1 - tanh^2 s, ell = log cosh s, ell' = tanh s, with
    ``log cosh s = |s| + log(1 + e^{-2|s|}) - log 2`` (no overflow).
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.2.
    """

    name = "tanhmax"
    g_text, h_text = "sinh(s)", "cosh(s)"
    rho_text, ell_text = "tanh(s)", "log cosh(s)"
    source = "Huang, Yang & Wang (TanhMax), Eq. 6"
    regularity = "smooth"

    def g(self, s):
        return array_module(s).sinh(s)

    def h(self, s):
        return array_module(s).cosh(s)

    dg, dh = h, g  # sinh' = cosh, cosh' = sinh

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

    def delta_II(self, s, o, axis=-1):
        p, w = self.p(s, axis), self.forward(s, axis)
        return p * o - w * _context(w, o, axis)  # w~_i o_i - w_i o_bar,  w~ = cosh s / C


@register
class SignExp(Activation):
    """SignExp / Cog attention, ``phi_i = sign(s_i) e^{|s_i|} / sum_k e^{|s_k|}`` (Cog).

    Cog's displayed formula writes the denominator as a signed sum; its text
    and code (``sign(p) * softmax(|p|)``) use absolute values, as here.
    rho = sign s, ell = |s|. rho jumps at 0: the derivative there is a Dirac
    term ``2 delta(s) e^{|s|} / C`` that no pointwise gradient represents; the
    library takes rho'(0) = 0 and ell'(0) = sign(0) = 0, which is what
    autograd computes too. Consequence: a row of scores that are all exactly 0
    (e.g. zero-initialised queries) has weights 0 and gradient 0, so gradient
    descent cannot leave it -- unlike softmax.
    Derivation: ``derivations/01-reweighted-softmax.md`` sections 3.3 and 4.1,
    and ``derivations/09-signexp-at-zero.md``.
    """

    name = "signexp"
    g_text, h_text = "sign(s) exp|s|", "exp|s|"
    rho_text, ell_text = "sign(s)", "|s|"
    source = "Cog attention (Lv et al.), sign(p) * softmax(|p|)"
    singular = (("s = 0", "rho = sign(s) jumps: a Dirac term in the derivative; "
                 "analytic and autograd use rho'(0) = 0, differences see the jump"),)
    singular_scores = (0.0,)
    regularity = "kink"

    def g(self, s):
        xp = array_module(s)
        return xp.sign(s) * xp.exp(xp.abs(s))

    def h(self, s):
        xp = array_module(s)
        return xp.exp(xp.abs(s))

    dg = h  # away from 0 (plus 2 delta(s) at 0)

    def dh(self, s):
        return self.g(s)

    def rho(self, s):
        return array_module(s).sign(s)

    def ell(self, s):
        return array_module(s).abs(s)

    def dell(self, s):
        return array_module(s).sign(s)

    def delta_II(self, s, o, axis=-1):
        p, w = self.p(s, axis), self.forward(s, axis)
        return p * o - w * _context(w, o, axis)  # |w_i| o_i - w_i o_bar  (s_i != 0)


@register
class Expressive(Activation):
    """Expressive attention, ``phi_i = h(z_i) / sum_k h(z_k)``, ``h(z) = z^2/(1+z^2)`` (Expressive, Eq. 2).

    rho = 1 and ell = log(z^2/(1+z^2)) = -log(1 + (1/z)^2), which is -inf at
    z = 0; ``p ell'`` stays finite there (its limit is 0), so phi is smooth at
    an isolated zero. A score whose h would underflow (|z| < sqrt(tiny))
    counts as 0; a row of zeros has no normaliser (module docstring).
    ell' = 2 / (z (1 + z^2)).
    Derivation: ``derivations/01-reweighted-softmax.md`` sections 3.4 and 4.2.
    """

    name = "expressive"
    g_text = h_text = "s^2/(1+s^2)"
    rho_text, ell_text = "1", "log(s^2/(1+s^2))"
    source = "Gros (Expressive), Eq. 2"
    rho_is_one = True
    singular = (("all-zero row", "h = 0 everywhere: no normaliser; weights and gradient set to 0"),)
    regularity = "log"

    def g(self, s):
        return s * s / (1.0 + s * s)

    h = g

    def dg(self, s):
        return 2.0 * s / (1.0 + s * s) ** 2

    dh = dg

    def ell(self, s):
        xp = array_module(s)
        zero = xp.abs(s) < sqrt_tiny(s)  # h underflows: counts as 0
        w = 1.0 / xp.where(zero, 1.0, s)  # 1/z at a safe argument
        return xp.where(zero, -np.inf, -xp.log1p(w * w))  # log(z^2/(1+z^2)) = -log(1 + 1/z^2)

    @_quiet
    def dell(self, s):
        xp = array_module(s)
        zero = xp.abs(s) < sqrt_tiny(s)
        z = xp.where(zero, 1.0, s)
        return xp.where(zero, 0.0, 2.0 / (z * (1.0 + z * z)))  # (log h)' = 2 / (z (1 + z^2))

    def delta_II(self, s, o, axis=-1):
        xp = array_module(s, o)
        w = self.forward(s, axis)
        z = xp.where(xp.abs(s) >= sqrt_tiny(s), s, 1.0)  # w = 0 where z counts as 0
        return w * 2.0 / (z * (1.0 + z * z)) * (o - _context(w, o, axis))


@register
class SigSoftmax(Activation):
    """Sigsoftmax, ``phi_i = e^{s_i} sigmoid(s_i) / sum_k e^{s_k} sigmoid(s_k)`` (Kanai et al. 2018).

    rho = 1, ell = s + log sigmoid(s) = s + min(s, 0) - log(1 + e^{-|s|}),
    ell' = 1 + sigmoid(-s). For s < 0 the term s + min(s, 0) = 2s overflows
    once s is below half the dtype's most negative number, although s is
    finite; so :meth:`scaled_ell` returns ell / 2 (``ell_scale = 2``), whose
    halves are finite for every finite s.
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.5.
    """

    name = "sigsoftmax"
    g_text = h_text = "exp(s) sigmoid(s)"
    rho_text, ell_text = "1", "s - softplus(-s)"
    source = "Kanai et al. (2018), sigsoftmax; TanhMax Tables 3-4"
    rho_is_one = True
    ell_scale = 2.0
    regularity = "smooth"

    def g(self, s):
        xp = array_module(s)
        return xp.exp(s) * sigmoid(xp, s)

    h = g

    def dg(self, s):
        return self.g(s) * (1.0 + sigmoid(array_module(s), -s))

    dh = dg

    def scaled_ell(self, s):
        xp = array_module(s)
        return 0.5 * s + 0.5 * xp.minimum(s, 0.0) - 0.5 * xp.log1p(xp.exp(-xp.abs(s)))  # ell / 2

    def ell(self, s):
        return 2.0 * self.scaled_ell(s)  # s - softplus(-s); -inf for s below half the most negative float

    def dell(self, s):
        return 1.0 + sigmoid(array_module(s), -s)

    def delta_II(self, s, o, axis=-1):
        w = self.forward(s, axis)
        return w * (1.0 + sigmoid(array_module(s), -s)) * (o - _context(w, o, axis))


@register
class Sigmoid(Activation):
    """Normalised sigmoid, ``phi_i = sigmoid(s_i) / sum_k sigmoid(s_k)`` (Kanai et al. 2018).

    rho = 1, ell = log sigmoid(s) = min(s, 0) - log(1 + e^{-|s|}),
    ell' = sigmoid(-s).
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.5.
    """

    name = "sigmoid"
    g_text = h_text = "sigmoid(s)"
    rho_text, ell_text = "1", "-softplus(-s)"
    source = "Kanai et al. (2018), Sec. 4; TanhMax Sec. 5.3"
    rho_is_one = True
    regularity = "smooth"

    def g(self, s):
        return sigmoid(array_module(s), s)

    h = g

    def dg(self, s):
        xp = array_module(s)
        return sigmoid(xp, s) * sigmoid(xp, -s)

    dh = dg

    def ell(self, s):
        xp = array_module(s)
        return xp.minimum(s, 0.0) - xp.log1p(xp.exp(-xp.abs(s)))  # log sigmoid(s)

    def dell(self, s):
        return sigmoid(array_module(s), -s)

    def delta_II(self, s, o, axis=-1):
        w = self.forward(s, axis)
        return w * sigmoid(array_module(s), -s) * (o - _context(w, o, axis))


class _Unnormalised(Activation):
    """h = 1: the 'normaliser' is the number n of unmasked entries, so
    phi_i = g(s_i) / n, p = 1/n is uniform and ell = ell' = 0."""

    h_text, ell_text = "1", "0"

    def h(self, s):
        return array_module(s).ones_like(s)

    def dh(self, s):
        return array_module(s).zeros_like(s)

    def ell(self, s):
        return array_module(s).zeros_like(s)

    dell = ell

    def delta_II(self, s, o, axis=-1):
        return self.dg(s) * o / np.shape(s)[axis]  # g'(s_i) o_i / n


@register
class Linear(_Unnormalised):
    """The non-local "dot product" operation, ``phi_i = s_i / n`` (Wang et al. 2018).

    Wang et al.'s non-local block with f = theta(x_i)^T phi(x_j) normalises by
    C(x) = N, the number of positions; TanhMax (Tables 3-4) calls it
    "Dot product". rho = s, ell = 0.
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.6.
    """

    name = "linear"
    g_text = rho_text = "s"
    source = "Wang et al. (2018), non-local 'dot product', C(x) = N; TanhMax Tables 3-4"
    regularity = "smooth"

    def g(self, s):
        return s

    rho = g

    def dg(self, s):
        return array_module(s).ones_like(s)

    drho = dg


@register
class ReLU(_Unnormalised):
    """ReLU attention, ``phi_i = max(s_i, 0) / n`` (TanhMax, Tables 3-4).

    TanhMax lists ReLU as monotone and log-nonlinear but not normalised; we
    divide by the constant n (the number of unmasked entries), as the linear
    row does, so that the output scale does not grow with n. rho'(0) = 0
    (autograd's ``clip`` agrees).
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.6.
    """

    name = "relu"
    g_text = rho_text = "max(s, 0)"
    source = "TanhMax Tables 3-4 (ReLU), scaled by 1/n as the non-local form"
    singular = (("s = 0", "kink: rho'(0) = 0, the left slope; differences see 1/2, the mean of the two"),)
    singular_scores = (0.0,)
    regularity = "kink"

    def g(self, s):
        return array_module(s).clip(s, 0.0, None)

    rho = g

    def dg(self, s):
        return (s > 0).astype(dtype_of(s))

    drho = dg


@register
class CosFormerNorm(Activation):
    """cosFormer's normalisation, ``phi_i = relu(s_i) / sum_k relu(s_k)`` (Qin et al. 2022).

    cosFormer scores are non-negative kernels relu(q).relu(k) cos(...) (see
    :func:`refattn.core.scores.score` ``"cosformer"``), normalised by their row sum;
    with the relu, g = h = max(s, 0) is defined for every score. rho = 1,
    ell = log max(s, 0) (-inf for s <= 0), ell' = 1/s for s > 0. A score
    below sqrt(tiny) counts as 0 (keeps ell' finite).
    Derivation: ``derivations/01-reweighted-softmax.md`` section 3.7.
    """

    name = "cosformer"
    g_text = h_text = "max(s, 0)"
    rho_text, ell_text = "1", "log max(s, 0)"
    source = ("Qin et al. (2022; TanhMax cites it as 'Zhen et al.'), cosFormer row "
              "normalisation; TanhMax Tables 3-4")
    rho_is_one = True
    singular = (("s = 0", "kink: differences see the average of the two one-sided slopes"),
                ("row with no positive score", "no normaliser; weights and gradient set to 0"))
    singular_scores = (0.0,)
    regularity = "log"

    def g(self, s):
        return array_module(s).clip(s, 0.0, None)

    h = g

    def dg(self, s):
        return (s > 0).astype(dtype_of(s))

    dh = dg

    def ell(self, s):
        xp = array_module(s)
        pos = s >= sqrt_tiny(s)  # h > 0 (tiny scores count as 0)
        return xp.where(pos, xp.log(xp.where(pos, s, 1.0)), -np.inf)  # log max(s, 0)

    def dell(self, s):
        xp = array_module(s)
        pos = s >= sqrt_tiny(s)
        return xp.where(pos, 1.0 / xp.where(pos, s, 1.0), 0.0)  # 1/s where h > 0

    def delta_II(self, s, o, axis=-1):
        xp = array_module(s, o)
        w = self.forward(s, axis)
        return w * (s > 0) / xp.where(s > 0, s, 1.0) * (o - _context(w, o, axis))  # w_i / s_i (o_i - o_bar)


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
