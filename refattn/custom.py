r"""Bring your own activation: :func:`define_activation` from a user's ``g`` and ``h``.

A user writes the two elementwise functions of TanhMax's Eq. 5,

    phi(s)_i = g(s_i) / sum_k h(s_k),

with ``autograd.numpy`` (so autograd can differentiate them), and
:func:`define_activation` turns them into an
:class:`~refattn.core.activations.Activation`: the same reweighted form
(``derivations/01-reweighted-softmax.md``, Eq. 01.R1)

    rho = g / h,   ell = log h,
    rho' = (g' - rho h') / h,   ell' = h' / h,

the same forward pass, backward pass (Eq. 01.R4) and Jacobian (Eq. 01.R3) as
every built-in activation, so that it works
wherever one does: :func:`refattn.core.attention.attention` and
``attention_backward``, :mod:`refattn.fast` (through its generic kernel),
:func:`refattn.core.gradcheck.gradcheck`, the four properties
(:func:`refattn.theory.properties.measure`), Proposition 1
(:func:`refattn.theory.proposition1.score_velocity`), and ``refattn check --activation
FILE.py:NAME`` (:func:`run_check_file`).

Derivatives. ``dg`` and ``dh`` may be given by hand; those not given are
autograd's ``elementwise_grad`` of ``g`` and ``h``. A hand-given derivative
is checked against autograd when the activation is defined, on a grid of 801
points in [-10, 10] and at 400 random points (N(0, 3^2), fixed seed): a
derivative that is wrong anywhere there is refused with a ``ValueError``
naming the function and the worst point.

What the library does *not* do for you. ``rho = g/h`` and ``ell = log h`` are
computed from your ``g`` and ``h`` as written, so where your ``h`` overflows
(``exp(s)`` above ``s = 709.78`` in float64, ``1 + s**2`` above
``1.3e154``) the reweighted form cannot be evaluated: that is a property of
how you wrote ``h``, and the cure (write ``h`` so that it does not overflow
on the scores you use, or keep the scores smaller) is yours. What the
library does is say so: every ``rho, rho', ell, ell'`` it computes, and every
forward and backward result, is checked, and anything not finite raises
:class:`NonFiniteError` naming the activation, the quantity and the first
score where it happened. It never returns NaN silently.

Conventions, those of the built-ins (``refattn.core.activations``):

* ``h >= 0`` is required; where ``h(s) = 0`` the entry has no weight
  (``ell = -inf``, ``rho = rho' = ell' = 0``), and ``g`` must be 0 there too
  (the reweighted form cannot carry ``g / 0``);
* a row whose ``h`` vanishes everywhere has no normaliser: weights and
  gradient 0;
* when ``g`` and ``h`` are the same function object
  (``define_activation(name, f, f)``), ``rho = 1`` and ``rho' = 0`` exactly.

Array types. User functions are written with ``autograd.numpy``, which runs
on NumPy arrays (and on the values autograd traces); a user activation
given CuPy arrays raises ``TypeError``.

Registration. ``define_activation(..., register=True)`` adds the activation
to the name registry, so that :func:`refattn.activation` (and every function
that takes an activation by name, ``attention(..., activation="name")``)
finds it. It is *not* added to :data:`refattn.ACTIVATIONS`: that tuple is
fixed when the package is imported and lists the built-in activations, which
the test suite, ``refattn check`` and the tables iterate over. The default is
``register=False``: the returned object is passed wherever an activation is
expected. :func:`unregister` removes a registered one again.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import uuid
import warnings

import numpy as np
from autograd import elementwise_grad

from .core import activations as _activations
from .core.activations import Activation, Formula
from .core.backend import is_cupy as _is_cupy_array, array_module, stop_gradient

__all__ = ["define_activation", "unregister", "UserActivation", "NonFiniteError",
           "load_activation", "run_check_activation", "run_check_file", "derivative_points"]

#: Relative error allowed between a hand-given derivative and autograd's (see
#: :func:`_check_derivative`: both evaluate the same derivative, so they agree
#: to rounding; 1e-7 leaves room for a formula that cancels).
DERIVATIVE_RTOL = 1e-7

_REGULARITIES = ("smooth", "kink", "log")


def _num(x) -> str:
    """A number for a message: ``1e+200``, ``-0.5``, ``inf`` (no ``np.float64(...)``)."""
    return repr(float(x))


class NonFiniteError(ValueError):
    """A user activation produced NaN or an infinity where a finite number is needed."""


def derivative_points(singular_scores=(), seed=0, margin=1e-2):
    """The scores at which hand-given derivatives are checked against autograd.

    801 points evenly spaced in [-10, 10] and 400 random points N(0, 3^2)
    (``numpy.random.default_rng(seed)``), with the points within ``margin`` of
    a declared singular score left out.
    """
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.linspace(-10.0, 10.0, 801), 3.0 * rng.standard_normal(400)])
    for c in singular_scores:
        x = x[np.abs(x - c) >= margin]
    return x


def _label(f, role):
    """``role`` and the user's function name, for messages: ``"dh (my_dh)"``."""
    name = getattr(f, "__name__", "")
    return role if not name or name == "<lambda>" or name == role else f"{role} ({name})"


def _first_bad(bad, s):
    """Index and score value of the first True entry of ``bad`` (the shape of ``s``)."""
    flat = int(np.argmax(np.asarray(bad).reshape(-1)))
    where = tuple(int(i) for i in np.unravel_index(flat, np.shape(bad)))
    return where, float(np.asarray(stop_gradient(s)).reshape(-1)[flat])


class UserActivation(Activation):
    """An activation from a user's ``g, h`` (and optionally ``dg, dh``); see :func:`define_activation`.

    Attributes beyond :class:`~refattn.core.activations.Activation`'s: ``given``, the
    tuple of derivatives given by hand (``"dg"``, ``"dh"``); the rest come from
    autograd.
    """

    def __init__(self, name, g, h, dg, dh, *, given, source, singular_scores, regularity):
        self.name = name
        self._g, self._h = g, h
        self._dg = dg if dg is not None else elementwise_grad(g)
        self._dh = dh if dh is not None else elementwise_grad(h)
        self._labels = {"g": _label(g, "g"), "h": _label(h, "h"),
                        "dg": _label(dg, "dg") if dg is not None else "dg (autograd)",
                        "dh": _label(dh, "dh") if dh is not None else "dh (autograd)"}
        self.given = tuple(given)
        self.same_g_h = g is h  # then rho = 1 exactly
        self.source = source
        singular_scores = tuple(float(c) for c in singular_scores)
        # its facts, as a built-in class holds them (refattn.core.activations.Activation)
        self.formula = Formula(self._labels["g"], self._labels["h"], "1" if self.same_g_h else "g/h", "log h")
        self.singular = tuple((f"s = {c:g}", "declared singular by the user") for c in singular_scores)
        self.singular_scores, self.regularity = singular_scores, regularity

    # --- evaluating the user's functions --------------------------------------
    def _call(self, role, s):
        """The user's ``role`` function at ``s``: shape and dtype of ``s``, no NaN."""
        if _is_cupy_array(s):
            raise TypeError(f"s: activation {self.name!r} is defined with autograd.numpy and runs "
                            f"on NumPy arrays only, got a CuPy array")
        f = {"g": self._g, "h": self._h, "dg": self._dg, "dh": self._dh}[role]
        xp = array_module(s)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Output seems independent of input")
            with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
                r = f(s)
        if np.shape(r) != np.shape(s):
            r = r + xp.zeros_like(s)  # a constant (h = 1, say) broadcast to the scores
        value = stop_gradient(r)
        if isinstance(value, np.ndarray) and value.dtype != np.asarray(stop_gradient(s)).dtype:
            r = r.astype(np.asarray(stop_gradient(s)).dtype) if r is value else r
        self._require(~np.isnan(np.asarray(stop_gradient(r))), s, f"{self._labels[role]} is NaN",
                      r)
        return r

    def _require(self, ok, s, what, values=None, error=NonFiniteError):
        """Raise ``error`` (:class:`NonFiniteError`: a value that is not finite; ``ValueError``:
        a broken convention) unless ``ok`` holds everywhere, naming the activation, what went
        wrong, and the first score where it did."""
        ok = np.asarray(ok)
        if ok.all():
            return
        where, value = _first_bad(~ok, s)
        got = ""
        if values is not None:
            got = f" (value {_num(np.asarray(stop_gradient(values)).reshape(-1)[int(np.argmax(~ok.reshape(-1)))])})"
        hint = ("; rewrite g, h so that they stay finite for such scores, or keep the scores smaller"
                if error is NonFiniteError else "")
        raise error(f"activation {self.name!r}: {what} at s = {_num(value)} (index {where}){got}{hint}")

    def _gh(self, s):
        """``g(s), h(s)`` and ``pos = h > 0``, with ``h >= 0`` and ``g = 0`` where ``h = 0`` checked."""
        g, h = self._call("g", s), self._call("h", s)
        hv = np.asarray(stop_gradient(h))
        self._require(hv >= 0, s, f"{self._labels['h']} is negative (h must be >= 0)", h, ValueError)
        pos = hv > 0
        self._require(pos | (np.asarray(stop_gradient(g)) == 0), s,
                      f"{self._labels['h']} is 0 but {self._labels['g']} is not (rho = g/h needs "
                      f"g = 0 where h = 0)", g, ValueError)
        return g, h, pos

    # --- the paper's form ------------------------------------------------------
    def g(self, s):
        return self._call("g", s)

    def h(self, s):
        return self._call("h", s)

    def dg(self, s):
        return self._call("dg", s)

    def dh(self, s):
        return self._call("dh", s)

    # --- the reweighted form -----------------------------------------------------
    def rho(self, s):
        """``rho = g / h`` (0 where ``h = 0``; exactly 1 when ``g is h``)."""
        xp = array_module(s)
        if self.same_g_h:
            return xp.ones_like(s)
        g, h, pos = self._gh(s)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            r = xp.where(pos, g / xp.where(pos, h, 1.0), 0.0)
        self._require(np.isfinite(np.asarray(stop_gradient(r))), s,
                      "rho = g/h is not finite (g or h overflows)", r)
        return r

    def drho(self, s):
        """``rho' = (g' - rho h') / h`` (0 where ``h = 0``; exactly 0 when ``g is h``)."""
        xp = array_module(s)
        if self.same_g_h:
            return xp.zeros_like(s)
        g, h, pos = self._gh(s)
        dg, dh = self._call("dg", s), self._call("dh", s)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            hs = xp.where(pos, h, 1.0)
            r = xp.where(pos, (dg - (g / hs) * dh) / hs, 0.0)  # (g/h)' = (g' - rho h') / h
        self._require(np.isfinite(np.asarray(stop_gradient(r))), s,
                      "rho' = (g' - rho h')/h is not finite", r)
        return r

    def ell(self, s):
        """``ell = log h``: finite, or ``-inf`` exactly where ``h = 0``."""
        xp = array_module(s)
        _, h, pos = self._gh(s)
        with np.errstate(over="ignore", divide="ignore"):
            r = xp.where(pos, xp.log(xp.where(pos, h, 1.0)), -np.inf)
        self._require(np.asarray(stop_gradient(r)) < np.inf, s, "ell = log h is +inf (h overflows)", h)
        return r

    def dell(self, s):
        """``ell' = h' / h`` (0 where ``h = 0``)."""
        xp = array_module(s)
        _, h, pos = self._gh(s)
        dh = self._call("dh", s)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            r = xp.where(pos, dh / xp.where(pos, h, 1.0), 0.0)  # (log h)' = h'/h
        self._require(np.isfinite(np.asarray(stop_gradient(r))), s,
                      "ell' = h'/h is not finite (h or h' overflows)", r)
        return r

    # --- results, checked ----------------------------------------------------------
    def forward(self, s, axis=-1, mask=None):
        w, cache = super().forward(s, axis, mask)
        self._require(np.isfinite(np.asarray(stop_gradient(w))), s, "the weights phi are not finite", w)
        return w, cache

    def backward(self, grad_phi, cache):
        ds = super().backward(grad_phi, cache)
        self._require(np.isfinite(np.asarray(stop_gradient(ds))), cache["s"],
                      "the backward pass is not finite (is grad_phi finite?)", ds)
        return ds

    def __repr__(self):
        return f"define_activation({self.name!r}, ...)"


# ------------------------------------------------------------------------------
# Checks run when an activation is defined
# ------------------------------------------------------------------------------


def _check_function(f, role):
    if not callable(f):
        raise TypeError(f"{role}: expected a function of the scores, got {type(f).__name__}")


def _evaluate(f, x, role):
    """``f(x)`` as a float64 array of ``x``'s shape, or a clear error naming ``role``."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Output seems independent of input")
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            with np.errstate(all="ignore"):
                r = f(x)
    except SystemExit as exc:  # the user's code must not end the program
        raise ValueError(f"{role}: called sys.exit({exc.code!r}) on an array of scores") from None
    except Exception as exc:  # the user's code: any error is reported, naming the function
        raise ValueError(f"{role}: raised {type(exc).__name__} on an array of scores: {exc}".splitlines()[0]) from exc
    r = _real_values(r, x, role)
    if r.shape != x.shape:
        if r.ndim == 0:
            r = np.full(x.shape, float(r))
        else:
            raise ValueError(f"{role}: returned shape {r.shape} for scores of shape {x.shape}; "
                             f"it must act elementwise")
    return r


def _real_values(r, x, role):
    """``r`` (what a user's function returned for the float64 scores ``x``) as a float64 array,
    refusing what autograd cannot differentiate or the reweighted form cannot use: nothing
    returned, a list or another object, complex, integer or boolean values, less precision."""
    if r is None:
        raise ValueError(f"{role}: returned None for an array of scores; expected an array of real numbers "
                         f"(does it end with return?)")
    if not isinstance(r, (np.ndarray, np.generic, float, int)) or isinstance(r, (bool, np.bool_)):
        raise ValueError(f"{role}: returned a {type(r).__name__} for an array of scores; expected an array of "
                         f"real numbers (write it with autograd.numpy operations)")
    dtype = np.asarray(r).dtype
    if dtype.kind == "c":
        raise ValueError(f"{role}: returned complex values ({dtype}); g and h must be real")
    if dtype.kind in "biu" or isinstance(r, int):
        what = "boolean" if dtype.kind == "b" else "integer"
        raise ValueError(f"{role}: returned {what} values ({dtype}), which autograd cannot differentiate; "
                         f"return floats (multiply by 1.0, or write 1.0 for a constant 1)")
    if dtype.kind != "f":
        raise ValueError(f"{role}: returned values of dtype {dtype}; expected real numbers")
    if dtype != x.dtype and np.ndim(r) > 0:
        raise ValueError(f"{role}: returned {dtype} values for {x.dtype} scores; keep the scores' precision "
                         f"(drop the .astype)")
    return np.asarray(r, dtype=np.float64)


def _check_elementwise(f, x, role):
    """``f`` must act entry by entry: reversing the scores reverses the result, and
    splitting them in two halves gives the two halves of the result."""
    a = _evaluate(f, x, role)
    half = len(x) // 2
    for b in (_evaluate(f, x[::-1].copy(), role)[::-1],
              np.concatenate([_evaluate(f, x[:half].copy(), role), _evaluate(f, x[half:].copy(), role)])):
        same = np.isclose(a, b, rtol=1e-12, atol=0.0) | (np.isnan(a) & np.isnan(b))
        if not same.all():
            i = int(np.argmax(~same))
            raise ValueError(f"{role}: is not elementwise: its value at s = {_num(x[i])} depends on the "
                             f"other scores ({_num(a[i])} in one call, {_num(b[i])} in another); write "
                             f"it with autograd.numpy operations that act entry by entry")
    return a


def _check_derivative(given, f, x, role, frole, rtol=DERIVATIVE_RTOL):
    """Compare a hand-given derivative with autograd's on the points ``x``.

    Error at each point: ``|given - autograd| / (|autograd| + 1e-6 max|autograd|)``
    (relative, with a floor so that a derivative passing through 0 is judged
    against the derivative's size). Raises ``ValueError`` naming ``role`` and
    the worst point when it exceeds ``rtol``, or where the given derivative is
    not finite and autograd's is.
    """
    ref = _evaluate(elementwise_grad(f), x, f"{frole} (autograd)")
    got = _check_elementwise(given, x, role)
    fin = np.isfinite(ref)
    if not fin.any():
        raise ValueError(f"{role}: autograd's derivative of {frole} is not finite at any check point")
    bad = fin & ~np.isfinite(got)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{role}: is not finite at s = {_num(x[i])} (got {_num(got[i])}, autograd "
                         f"{_num(ref[i])})")
    scale = np.max(np.abs(ref[fin]))
    err = np.where(fin, np.abs(got - ref) / (np.abs(ref) + 1e-6 * scale + 1e-300), 0.0)
    i = int(np.argmax(err))
    if err[i] > rtol:
        raise ValueError(
            f"{role}: does not match autograd's derivative of {frole}: worst at s = {_num(x[i])}, given "
            f"{_num(got[i])}, autograd {_num(ref[i])} (relative error {err[i]:.3g} > {rtol:g}; checked at "
            f"{int(fin.sum())} points in [{x.min():.3g}, {x.max():.3g}])")


def _define_args(name, g, h, dg, dh, register, source, singular_scores, regularity):
    """:func:`define_activation`'s arguments checked before any evaluation; the singular scores as floats."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name: expected a non-empty string, got {name!r}")
    if name in _activations.ACTIVATIONS:
        raise ValueError(f"name: {name!r} is a built-in activation; choose another name")
    if register and name in _activations._REGISTRY:
        raise ValueError(f"name: an activation called {name!r} is already registered "
                         f"(refattn.custom.unregister({name!r}) removes it)")
    for f, role in ((g, "g"), (h, "h")):
        _check_function(f, role)
    for f, role in ((dg, "dg"), (dh, "dh")):
        if f is not None:
            _check_function(f, role)
    if not isinstance(register, (bool, np.bool_)):
        raise TypeError(f"register: expected True or False, got {type(register).__name__}")
    if regularity not in _REGULARITIES:
        raise ValueError(f"regularity: expected one of {_REGULARITIES}, got {regularity!r}")
    try:
        singular_scores = tuple(float(c) for c in singular_scores)
    except (TypeError, ValueError):
        raise ValueError(f"singular_scores: expected a sequence of numbers, got {singular_scores!r}") from None
    if not all(math.isfinite(c) for c in singular_scores):
        raise ValueError(f"singular_scores: expected finite numbers, got {singular_scores!r}")
    if source is not None and not isinstance(source, str):
        raise TypeError(f"source: expected a string, got {type(source).__name__}")
    return singular_scores


def define_activation(name, g, h, dg=None, dh=None, *, register=False, source=None,
                      singular_scores=(), regularity="log", seed=0) -> UserActivation:
    """An activation ``phi(s)_i = g(s_i) / sum_k h(s_k)`` from your own ``g`` and ``h``.

    Parameters
    ----------
    name : str
        The activation's name (reports, ``repr``, and the registry if
        ``register``); not the name of a built-in activation.
    g, h : callable
        Elementwise functions of an array of scores, written with
        ``autograd.numpy``; ``h >= 0``, and ``g = 0`` wherever ``h = 0``. A
        constant may be returned as a scalar (``h = lambda s: 1.0``). Pass the
        same function twice for ``g = h`` (then ``rho = 1`` exactly).
    dg, dh : callable, optional
        Their derivatives, elementwise. Those not given are
        ``autograd.elementwise_grad(g)`` (resp. ``h``). Those given are checked
        against autograd at :func:`derivative_points` (relative error at most
        :data:`DERIVATIVE_RTOL`).
    register : bool
        Also make ``refattn.activation(name)`` return it (default False). It is
        never added to :data:`refattn.ACTIVATIONS` (module docstring).
    source : str, optional
        Where the formula comes from (shown by ``refattn check``).
    singular_scores : sequence of float
        Scores where ``g`` or ``h`` is not differentiable (a kink, a jump):
        left out of the derivative check, avoided by ``refattn check``'s
        random points and checked *at* by it (flagged, not failed).
    regularity : {"log", "smooth", "kink"}
        How ``ell`` behaves near 0 (:attr:`refattn.core.activations.Activation.regularity`);
        default ``"log"``, the most cautious.
    seed : int
        Seed of the random check points.

    Returns
    -------
    UserActivation
        An :class:`~refattn.core.activations.Activation`.

    Raises
    ------
    ValueError
        One line naming the argument: a bad name; ``g`` or ``h`` raising, not
        elementwise, NaN, ``h < 0``, or ``h = 0`` where ``g != 0`` on the
        check points; a hand-given derivative that does not match autograd
        (naming the function and the worst point).
    TypeError
        An argument of the wrong type.

    Examples
    --------
    >>> import autograd.numpy as anp
    >>> softplus = lambda s: anp.logaddexp(0.0, s)
    >>> act = define_activation("softplus-max", softplus, softplus)
    >>> float(act(np.array([0.0, 1.0])).sum())  # rho = 1: the weights sum to 1
    1.0
    """
    singular_scores = _define_args(name, g, h, dg, dh, register, source, singular_scores, regularity)
    x = derivative_points(singular_scores, seed)
    gx, hx = _check_elementwise(g, x, _label(g, "g")), _check_elementwise(h, x, _label(h, "h"))
    for vals, f, role in ((gx, g, "g"), (hx, h, "h")):
        if np.isnan(vals).any():
            i = int(np.argmax(np.isnan(vals)))
            raise ValueError(f"{_label(f, role)}: is NaN at s = {_num(x[i])}")
    if (hx < 0).any():
        i = int(np.argmax(hx < 0))
        raise ValueError(f"{_label(h, 'h')}: must be >= 0, got {_num(hx[i])} at s = {_num(x[i])}")
    if not (hx > 0).any():
        raise ValueError(f"{_label(h, 'h')}: is 0 at every check point; no row would have a normaliser")
    bad = (hx == 0) & (gx != 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{_label(g, 'g')}: is {_num(gx[i])} at s = {_num(x[i])} where h = 0; the reweighted "
                         f"form rho = g/h needs g = 0 wherever h = 0")
    given = []
    for d, f, role in ((dg, g, "g"), (dh, h, "h")):
        if d is not None:
            _check_derivative(d, f, x, _label(d, "d" + role), _label(f, role))
            given.append("d" + role)
        elif role == "g" or h is not g:  # autograd will differentiate it at every use: it must be able to
            _evaluate(elementwise_grad(f), x, f"{_label(f, role)} (differentiated by autograd; write it with "
                                              f"autograd.numpy, or pass d{role})")
    act = UserActivation(name, g, h, dg, dh, given=given,
                         source=source or "user-defined (refattn.define_activation)",
                         singular_scores=singular_scores, regularity=regularity)
    if register:
        _activations._REGISTRY[name] = lambda: act  # activation(name) returns this very object
    return act


def unregister(name):
    """Remove an activation registered by ``define_activation(..., register=True)``.

    Raises ``ValueError`` for a built-in name or a name that is not registered.
    """
    if name in _activations.ACTIVATIONS:
        raise ValueError(f"name: {name!r} is a built-in activation and cannot be unregistered")
    if name not in _activations._REGISTRY:
        raise ValueError(f"name: no user activation called {name!r} is registered")
    del _activations._REGISTRY[name]


# ------------------------------------------------------------------------------
# refattn check --activation FILE.py:NAME
# ------------------------------------------------------------------------------


def load_activation(spec, option="--activation") -> Activation:
    """The activation ``NAME`` defined in ``FILE.py``, from ``spec = "FILE.py:NAME"``.

    ``NAME`` in the file may be

    * an :class:`~refattn.core.activations.Activation` instance (for example the
      result of :func:`define_activation`), used as it is;
    * an :class:`~refattn.core.activations.Activation` subclass, instantiated with
      no arguments;
    * a dict of :func:`define_activation`'s arguments (``{"g": ..., "h": ...}``
      and optionally ``dg``, ``dh``, ``source``, ``singular_scores``,
      ``regularity``), passed to it with ``name=NAME``.

    Errors are one line naming ``option``: a spec without ``:NAME``, a
    missing file, a file that raises on import, a file without ``NAME``, or
    ``NAME`` of another kind.
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"{option}: expected FILE.py:NAME, got {spec!r}")
    path, _, name = spec.rpartition(":")
    if not path or not name.isidentifier():
        raise ValueError(f"{option}: expected FILE.py:NAME with NAME a Python name, got {spec!r}")
    module = load_module(path, option)
    if not hasattr(module, name):
        raise ValueError(f"{option}: {path} defines no {name!r}")
    obj = getattr(module, name)
    if isinstance(obj, Activation):
        return obj
    if isinstance(obj, type) and issubclass(obj, Activation):
        return obj()
    if isinstance(obj, dict):
        allowed = {"g", "h", "dg", "dh", "source", "singular_scores", "regularity", "seed"}
        extra = sorted(set(obj) - allowed)
        if extra:
            raise ValueError(f"{option}: {name} in {path} has unknown key(s) {extra}; expected "
                             f"some of {sorted(allowed)}")
        if "g" not in obj or "h" not in obj:
            raise ValueError(f"{option}: {name} in {path} needs the keys 'g' and 'h'")
        return define_activation(name, **obj)
    raise ValueError(f"{option}: {name} in {path} is a {type(obj).__name__}; expected an Activation "
                     f"(e.g. from refattn.define_activation) or a dict with keys 'g' and 'h'")


def load_module(path, option):
    """Import the Python file ``path`` as a fresh module (not added to ``sys.modules``).

    A missing file, or a file that raises while it is imported, is one
    ``ValueError`` naming ``option`` and the file.
    """
    if not os.path.isfile(path):
        what = ("is a folder" if os.path.isdir(path) else "is not a regular file (a device or pipe)"
                if os.path.exists(path) else "no such file")
        raise ValueError(f"{option}: {path!r} {what}; expected a Python file" if what != "no such file"
                         else f"{option}: no such file {path!r}")
    mod_name = f"_refattn_user_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{option}: cannot import {path!r} as Python (does it end in .py?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look the module up while it runs
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:  # sys.exit() in the user's file: not the end of refattn's command
        raise ValueError(f"{option}: importing {path} called sys.exit({exc.code!r}); a file of activations "
                         f"must define them, not end the program") from None
    except Exception as exc:  # the user's code: report any error in one line
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(f"{option}: importing {path} raised {type(exc).__name__}: {msg}") from exc
    finally:
        sys.modules.pop(mod_name, None)
    return module


def run_check_activation(activation, seed=0) -> dict:
    """``refattn check`` for one activation object: the result dict of
    :func:`refattn.check.run_check`, with the rows of ``activation`` only.

    The same checks as for a built-in: the analytic VJP against autograd and
    central differences at random (3, 7) scores, with and without a random
    mask, away from the declared singular scores; then, for each declared
    singular score ``c``, at a row containing ``c`` exactly (flagged, not
    failed). A :class:`NonFiniteError` during the check is a failed row with
    the message as its note.
    """
    from .check import EPS, TOLERANCE, _row, activation_gradcheck, away_from_singular  # noqa: PLC0415

    if not isinstance(activation, Activation):
        raise TypeError(f"activation: expected an Activation, got {type(activation).__name__}")
    rng = np.random.default_rng(seed)
    rows = []
    try:
        results = []
        for use_mask in (False, True):
            s = away_from_singular(activation, 2.0 * rng.standard_normal((3, 7)))
            mask = (rng.random((3, 7)) < 0.8) if use_mask else None
            results.append(activation_gradcheck(activation, s, mask, name=activation.name,
                                                seed=int(rng.integers(2**31)), eps=EPS, rtol=TOLERANCE, atol=0.0))
        rows.append(_row("activation", activation.name, results, note=activation.source))
    except NonFiniteError as exc:
        rows.append(_failed_row(activation.name, str(exc)))
    for c in activation.singular_scores:
        s = c + np.array([0.0, 0.8, -1.1, 1.9, -0.4])
        label = f"{activation.name} @ s = {c:g}"
        try:
            res = activation_gradcheck(activation, s, name=activation.name, seed=1, eps=EPS, rtol=TOLERANCE,
                                       atol=0.0)
            rows.append(_row("activation", label, [res], note="declared singular", singular=True))
        except NonFiniteError as exc:
            rows.append(_failed_row(label, str(exc), singular=True))
    ok = all(r["ok"] for r in rows if not r["singular"])
    return {"dtype": "float64", "eps": EPS, "tolerance": TOLERANCE, "seed": seed,
            "activation": activation.name, "rows": rows, "ok": ok}


def _failed_row(name, note, singular=False):
    nan = float("nan")
    return {"kind": "activation", "name": name, "autograd_max_rel": nan, "central_max_rel": nan,
            "autograd_max_abs": nan, "central_max_abs": nan, "central_worst_arg": "s",
            "central_worst_index": [], "ok": False, "singular": singular,
            "status": "FAIL: not finite" if not singular else "singular: not finite", "note": note}


def run_check_file(spec, seed=0) -> dict:
    """``refattn check --activation FILE.py:NAME``: :func:`load_activation`, then
    :func:`run_check_activation`."""
    return run_check_activation(load_activation(spec), seed=seed)
