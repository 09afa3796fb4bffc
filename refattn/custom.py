r"""Bring your own activation: :func:`define_activation` from a user's ``g`` and ``h`` (TanhMax Eq. 5).

``phi(s)_i = g(s_i) / sum_k h(s_k)``, written with ``autograd.numpy``, becomes the
reweighted form of every built-in activation (``derivations/01-reweighted-softmax.md``,
Eq. 01.R1),

    rho = g / h,   ell = log h,   rho' = (g' - rho h') / h,   ell' = h' / h,

with the same forward pass, VJP (Eq. 01.R4) and Jacobian (Eq. 01.R3), so it works
wherever a built-in does. Derivatives not given are autograd's; those given are
compared with autograd's, point by point, when the activation is defined
(:func:`compare_derivative`). ``FILE.py:NAME`` names an activation defined in a
file (:func:`load_activation`), recorded with the file's SHA-256
(:func:`activation_record`). What is checked and refused, the conventions where
``h = 0``, kinks, values that are not finite and registration: ``docs/verify.md``.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import hashlib
import importlib.util
import inspect
import math
import os
import sys
import uuid
import warnings

import numpy as np
from autograd import elementwise_grad

from .core import activations as _activations
from .core.activations import Activation, Formula
from .core.backend import is_cupy as _is_cupy_array, is_torch, array_module, stop_gradient
from .core.checks import check_int

__all__ = ["define_activation", "unregister", "UserActivation", "NonFiniteError", "derivative_points",
           "compare_derivative", "derivative_message", "singular_slopes", "evaluation_checks", "load_activation",
           "load_file", "load_module", "parse_spec", "is_spec", "file_sha256", "activation_record", "activation_label",
           "divergence_as_data",
           "DERIVATIVE_RTOL", "DEFAULT_RANGE", "KINKS"]

#: Relative error allowed between a hand-given derivative and autograd's (see
#: :func:`compare_derivative`: both evaluate the same derivative at the same point, so they agree
#: to rounding; 1e-7 leaves room for a formula that cancels).
DERIVATIVE_RTOL = 1e-7

#: Where derivatives are compared when nothing else is asked for (``check_range``, ``refattn check --range``).
DEFAULT_RANGE = (-10.0, 10.0)

#: Evenly spaced and random points of :func:`derivative_points`.
GRID_POINTS, RANDOM_POINTS = 801, 400

#: Distances from a declared singular score at which derivatives are compared too (a derivative
#: wrong only near a kink is caught).
NEAR_SINGULAR = tuple(10.0 ** -k for k in range(1, 9))

#: Where the Verify page explains kinks, one-sided slopes and autograd's convention.
KINKS = "docs/verify.md, section 'Kinks and jumps'"

_REGULARITIES = ("smooth", "kink", "log")

#: While a file is imported by :func:`load_file`, a definition that fails its checks returns an
#: activation that carries the refusal instead of raising, so one wrong activation does not hide
#: the others of its file.
_DEFER_REFUSALS = contextvars.ContextVar("refattn_defer_refusals", default=False)


def _num(x) -> str:
    """A number for a message: ``1e+200``, ``-0.5``, ``inf`` (no ``np.float64(...)``)."""
    return repr(float(x))


class NonFiniteError(ValueError):
    """A user activation produced NaN or an infinity where a finite number is needed."""


def _range(check_range, name="check_range"):
    """``(lo, hi)`` as floats with ``lo < hi``, both finite, or one line naming ``name``."""
    try:
        lo, hi = (float(v) for v in check_range)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected two numbers LO, HI, got {check_range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"{name}: expected finite LO < HI, got {check_range!r}")
    return lo, hi


def derivative_points(singular_scores=(), seed=0, check_range=DEFAULT_RANGE):
    """The scores at which hand-given derivatives are compared with autograd's: :data:`GRID_POINTS` evenly
    spaced in ``check_range = (lo, hi)``, :data:`RANDOM_POINTS` uniform ones from ``default_rng(seed)``, and
    each declared singular score ``c`` inside it with ``c -+ 10^-k``, ``k = 1..8`` (:data:`NEAR_SINGULAR`)."""
    lo, hi = check_range
    rng = np.random.default_rng(seed)
    parts = [np.linspace(lo, hi, GRID_POINTS), rng.uniform(lo, hi, RANDOM_POINTS)]
    near = np.array(NEAR_SINGULAR)
    for c in singular_scores:
        if lo <= c <= hi:
            parts.append(np.clip(np.concatenate([[c], c - near, c + near]), lo, hi))
    return np.concatenate(parts)


def _label(f, role):
    """``role`` and the user's function name, for messages: ``"dh (my_dh)"``."""
    name = getattr(f, "__name__", "")
    return role if not name or name == "<lambda>" or name == role else f"{role} ({name})"


def _first_bad(bad, s):
    """Index and score value of the first True entry of ``bad`` (the shape of ``s``)."""
    flat = int(np.argmax(np.asarray(bad).reshape(-1)))
    where = tuple(int(i) for i in np.unravel_index(flat, np.shape(bad)))
    return where, float(np.broadcast_to(np.asarray(stop_gradient(s)), np.shape(bad)).reshape(-1)[flat])


def _shaped(r, s):
    """A user function's value at ``s`` with ``s``'s shape and dtype (a constant broadcast, a
    float64 result of float32 scores rounded): what the fast kernel multiplies."""
    if np.shape(r) != np.shape(s):
        r = r + np.zeros_like(s)
    if isinstance(r, np.ndarray) and r.dtype != s.dtype:
        r = r.astype(s.dtype)
    return r


def takes_namespace(f) -> bool:
    """True for a function of the scores and their array namespace, ``f(s, xp)`` (its second parameter is
    named ``xp``): it runs on every array library; False for a function of the scores alone, written with
    ``autograd.numpy``, which runs on NumPy only (``docs/frameworks.md``, "Your own activation")."""
    try:
        names = list(inspect.signature(f).parameters)
    except (TypeError, ValueError):  # a ufunc or another built-in: a function of the scores alone
        return False
    return names[1:2] == ["xp"]


def on_numpy(f):
    """``f`` as a function of the scores alone on NumPy arrays: ``f(s, xp)`` is given ``numpy``, or
    ``autograd.numpy`` while autograd traces ``s`` (the derivative checks); ``f(s)`` is ``f``."""
    if not takes_namespace(f):
        return f

    @functools.wraps(f)
    def of_the_scores(s):
        return f(s, array_module(s))

    return of_the_scores


def on_host(s) -> bool:
    """True for scores on NumPy (traced by autograd or not), where an activation of yours is checked as it
    runs; False for CuPy, PyTorch and JAX arrays, where it runs natively (``docs/frameworks.md``)."""
    return isinstance(stop_gradient(s), np.ndarray)


def library_derivative(f, s, xp):
    """``f'(s)`` of an elementwise ``f(s, xp)`` on PyTorch or JAX arrays by the library's own forward mode,
    the JVP with a tangent of ones (``f`` acts entry by entry, so its Jacobian is diagonal); itself
    differentiable, as second derivatives need (``docs/frameworks.md``, "Second derivatives")."""
    if is_torch(s):
        import torch  # noqa: PLC0415  (only reached with a tensor in hand)

        return torch.func.jvp(lambda x: f(x, xp), (s,), (torch.ones_like(s),))[1]
    import jax  # noqa: PLC0415  (CuPy is refused before: it has no automatic differentiation)

    return jax.jvp(lambda x: f(x, xp), (s,), (xp.ones_like(s),))[1]


_LIBRARIES = {"cupy": "CuPy", "torch": "PyTorch", "jax": "JAX"}


class UserActivation(Activation):
    """An activation from a user's ``g, h`` (and ``dg, dh``, else autograd's): see :func:`define_activation`.

    Beyond :class:`~refattn.core.activations.Activation`'s attributes: ``functions`` (as given; ``None``
    for autograd's), ``given`` (the derivatives given by hand), ``native`` (all of them are written
    against an array namespace, ``f(s, xp)``, and so run on PyTorch, JAX and CuPy arrays too),
    ``check_range`` and ``seed`` (where they were compared with autograd's), ``on_non_finite``
    (``"raise"``, or ``"nan"`` inside training: :func:`divergence_as_data`), ``refused`` and ``refused_at``
    (the check a definition failed while :func:`load_file` ran, else ``None``), and ``file``, ``sha256``
    when it was loaded from a file.

    Its forward pass and VJP are core's (Eqs. 01.R1 and 01.R4) with ``g`` and ``h`` evaluated once in the
    forward pass and ``g'``, ``h'`` once in the backward pass (:meth:`_values`, :meth:`_slopes`).
    """

    def __init__(self, name, g, h, dg, dh, *, source, singular_scores, regularity, check_range, seed,
                 refused=None, refused_at=None):
        self.name, self.source, self.regularity = name, source, regularity
        self.functions = {"g": g, "h": h, "dg": dg, "dh": dh}
        self.given = tuple(d for d in ("dg", "dh") if self.functions[d] is not None)
        self.native = all(takes_namespace(f) for f in self.functions.values() if f is not None)
        self._host = {role: on_numpy(f) for role, f in self.functions.items() if f is not None}
        for d in ("dg", "dh"):  # on NumPy, a derivative not given is autograd's
            self._host.setdefault(d, elementwise_grad(self._host[d[1:]]))
        self._labels = {"g": _label(g, "g"), "h": _label(h, "h"),
                        "dg": _label(dg, "dg") if dg is not None else "dg (autograd)",
                        "dh": _label(dh, "dh") if dh is not None else "dh (autograd)"}
        self.same_g_h = g is h  # then rho = 1 exactly
        # its facts, as a built-in class holds them (refattn.core.activations.Activation)
        self.formula = Formula(self._labels["g"], self._labels["h"], "1" if self.same_g_h else "g/h", "log h")
        self.singular_scores = singular_scores
        self.singular = tuple((f"s = {c:g}", "declared singular by the user") for c in singular_scores)
        self.check_range, self.seed, self.refused, self.refused_at = check_range, seed, refused, refused_at
        self.on_non_finite = "raise"
        self.file = self.sha256 = None

    def _usable(self):
        if self.refused is not None:
            raise ValueError(f"activation {self.name!r} was refused when it was defined: {self.refused}")

    # --- evaluating the user's functions --------------------------------------
    def _call(self, role, s):
        """The user's ``role`` function (``g``, ``h``, ``dg``, ``dh``) at ``s``, with ``s``'s shape and dtype:
        on NumPy checked for NaN; on CuPy, PyTorch or JAX natively (a derivative not given by the library's
        own differentiation, :func:`library_derivative`), unchecked: what it gives there is data."""
        self._usable()
        xp = array_module(s)
        if not on_host(s):
            return self._native(role, s, xp)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Output seems independent of input")
            with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
                r = self._host[role](s)
        if np.shape(r) != np.shape(s):
            r = r + xp.zeros_like(s)  # a constant (h = 1, say) broadcast to the scores
        value = stop_gradient(r)
        if isinstance(value, np.ndarray) and value.dtype != np.asarray(stop_gradient(s)).dtype:
            r = r.astype(np.asarray(stop_gradient(s)).dtype) if r is value else r
        self._require(~np.isnan(np.asarray(stop_gradient(r))), s, f"{self._labels[role]} is NaN", r)
        return r

    def numpy_only(self, library):
        """Why this activation, unless :attr:`native`, does not run on ``library``'s arrays, and what to write."""
        return (f"activation {self.name!r} is written with autograd.numpy, which runs on NumPy arrays only; to run "
                f"it on {library}'s own arrays, write g and h (and dg, dh) as functions of the scores and their "
                f"array namespace, def g(s, xp): ... (docs/frameworks.md, section 'Your own activation')")

    def _native(self, role, s, xp):
        """:meth:`_call` on the arrays of CuPy, PyTorch or JAX, which only functions ``f(s, xp)`` run on."""
        library = _LIBRARIES[next(k for k in _LIBRARIES if type(s).__module__.startswith(k))]
        if not self.native:
            raise TypeError(f"s: {self.numpy_only(library)}")
        f = self.functions[role]
        if f is None and _is_cupy_array(s):
            raise TypeError(f"s: activation {self.name!r} has no {role} given, and CuPy has no automatic "
                            f"differentiation to make one; pass {role}= to define_activation to run it on CuPy")
        r = library_derivative(self.functions[role[1:]], s, xp) if f is None else f(s, xp)
        if tuple(getattr(r, "shape", ())) != tuple(s.shape):
            r = r + xp.zeros_like(s)  # a constant broadcast to the scores
        return r if r.dtype == s.dtype else xp.astype(r, s.dtype)

    def _require(self, ok, s, what, values=None, error=NonFiniteError):
        """Raise ``error`` (:class:`NonFiniteError`: a value that is not finite; ``ValueError``:
        a broken convention) unless ``ok`` holds everywhere, naming the activation, what went
        wrong, the first score where it did, and whose fault it is: a score that is not finite
        is the input's, a finite score where ``g`` or ``h`` is not finite the formula's. Inside
        training (``on_non_finite == "nan"``) a value that is not finite is data: nothing is raised."""
        ok = np.asarray(ok)
        if ok.all() or (error is NonFiniteError and self.on_non_finite == "nan"):
            return
        finite = np.broadcast_to(np.isfinite(np.asarray(stop_gradient(s))), ok.shape)
        if error is NonFiniteError and (~ok & ~finite).any():
            where, value = _first_bad(~ok & ~finite, s)
            raise NonFiniteError(
                f"activation {self.name!r}: the score at index {where} is {_num(value)}: the input is not finite "
                f"(the scores come from the queries, keys and score function, not from g or h); a built-in "
                f"activation gives NaN on that row, and so does this one inside training")
        where, value = _first_bad(~ok & finite if error is NonFiniteError else ~ok, s)
        got = ""
        if values is not None:
            flat = int(np.argmax((~ok & finite if error is NonFiniteError else ~ok).reshape(-1)))
            got = f" (value {_num(np.broadcast_to(np.asarray(stop_gradient(values)), ok.shape).reshape(-1)[flat])})"
        hint = ("; rewrite g, h so that they stay finite for such scores, or keep the scores smaller"
                if error is NonFiniteError else "")
        raise error(f"activation {self.name!r}: {what} at s = {_num(value)} (index {where}){got}{hint}")

    def _as_data(self, r, xp, keep=None):
        """Inside training, a value that is not finite as NaN (``keep``: values left as they are, the
        ``-inf`` of ``ell`` where ``h = 0``), so that the row it reaches is NaN without an infinity
        meeting another on the way; outside training ``r`` itself (:meth:`_require` raised already)."""
        if self.on_non_finite != "nan":
            return r
        bad = ~np.isfinite(np.asarray(stop_gradient(r)))
        if keep is not None:
            bad &= ~keep
        return xp.where(bad, np.nan, r) if bad.any() else r

    def _check_conventions(self, s, g, h):
        """On NumPy: ``h >= 0`` and ``g = 0`` where ``h = 0``, else one line naming the first score (NaN,
        which only the input or training lets through, breaks no convention)."""
        hv = np.asarray(stop_gradient(h))
        self._require((hv >= 0) | np.isnan(hv), s, f"{self._labels['h']} is negative (h must be >= 0)", h,
                      ValueError)
        self._require((hv > 0) | (np.asarray(stop_gradient(g)) == 0) | np.isnan(hv), s,
                      f"{self._labels['h']} is 0 but {self._labels['g']} is not (rho = g/h needs "
                      f"g = 0 where h = 0)", g, ValueError)

    # --- the reweighted form, from one evaluation ----------------------------------
    def _values(self, s):
        """``(rho, ell, h')`` at ``s`` from one evaluation of ``g`` and one of ``h`` (Eq. 01.R1's
        ``rho = g/h``, ``ell = log h``), with ``h' = h`` where ``h > 0`` and ``+inf`` where ``h = 0``: there
        ``rho = g/h' = 0`` and ``ell = -inf``, and ``1/h' = 0`` makes ``rho'`` and ``ell'`` 0 (:meth:`_slopes`).

        On NumPy a broken convention or an overflow raises (:meth:`_require`); on other arrays, where
        nothing is read back to the host, ``ell`` is NaN wherever ``h < 0``, ``h`` is NaN or ``g != 0``
        where ``h = 0``, so the row that entry is in is NaN, as a NaN score makes it.
        """
        xp, host = array_module(s), on_host(s)
        h = self._call("h", s)
        g = h if self.same_g_h else self._call("g", s)
        if host:
            self._check_conventions(s, g, h)
        pos = h > 0
        hs = xp.where(pos, h, np.inf)  # no 0 reaches log h or 1/h, nor their derivatives
        # where h > 0 is false: -inf where h = 0 (and g = 0), NaN where the convention breaks (h < 0, h NaN,
        # or g != 0 where h = 0), which only arrays off the host let through; all in the scores' dtype
        zero = (h == 0) if self.same_g_h or host else (h == 0) & (g == 0)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            ell = xp.where(pos, xp.log(hs), xp.where(zero, -np.inf, xp.zeros_like(s) + np.nan))
        if host:
            hv = np.asarray(stop_gradient(h))
            self._require((np.asarray(stop_gradient(ell)) < np.inf) | np.isnan(hv), s,
                          "ell = log h is +inf (h overflows)", h)
            ell = self._as_data(ell, xp, keep=(hv == 0))  # +inf or NaN: NaN (training); -inf where h = 0 stays
        if self.same_g_h:
            return xp.ones_like(s), ell, hs
        with np.errstate(over="ignore", invalid="ignore"):
            rho = g / hs
        if host:
            self._require(np.isfinite(np.asarray(stop_gradient(rho))), s,
                          "rho = g/h is not finite (g or h overflows)", rho)
            rho = self._as_data(rho, xp)
        return rho, ell, hs

    def _slopes(self, s, rho, hs):
        """``(rho', ell')`` at ``s`` from one evaluation of ``g'`` and one of ``h'``, given ``rho`` and ``h``
        there (``hs``, +inf where ``h = 0``: :meth:`_values`): ``rho' = (g' - rho h')/h``, ``ell' = h'/h``,
        both 0 where ``h = 0``."""
        xp, host = array_module(s), on_host(s)
        dh = self._call("dh", s)
        with np.errstate(over="ignore", invalid="ignore"):
            dell = dh / hs  # (log h)' = h'/h
            drho = xp.zeros_like(s) if self.same_g_h else (self._call("dg", s) - rho * dh) / hs  # (g/h)'
        if host:
            self._require(np.isfinite(np.asarray(stop_gradient(drho))), s, "rho' = (g' - rho h')/h is not finite",
                          drho)
            self._require(np.isfinite(np.asarray(stop_gradient(dell))), s,
                          "ell' = h'/h is not finite (h or h' overflows)", dell)
            drho, dell = self._as_data(drho, xp), self._as_data(dell, xp)
        return drho, dell

    # --- the paper's form ------------------------------------------------------
    def g(self, s):
        return self._call("g", s)

    def h(self, s):
        return self._call("h", s)

    def dg(self, s):
        return self._call("dg", s)

    def dh(self, s):
        return self._call("dh", s)

    def paper_values(self, s, g=True):
        """``(g(s), h(s))`` by the user's functions, on a NumPy array, unchecked: for the fast kernel
        (:class:`refattn.fast.kernels.PaperForm`), which checks what it makes of them and otherwise
        takes the checked route. ``h`` is ``g`` itself when they are one function; with ``g=False``
        the first is None (``h`` alone is evaluated)."""
        self._usable()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Output seems independent of input")
            with np.errstate(all="ignore"):
                gv = _shaped(self._host["g"](s), s) if g or self.same_g_h else None
                return gv, (gv if self.same_g_h else _shaped(self._host["h"](s), s))

    def paper_derivatives(self, s):
        """``(g'(s), h'(s))``, given by hand or autograd's, unchecked (as :meth:`paper_values`)."""
        self._usable()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Output seems independent of input")
            with np.errstate(all="ignore"):
                dg = _shaped(self._host["dg"](s), s)
                return dg, (dg if self.same_g_h else _shaped(self._host["dh"](s), s))

    # --- the reweighted form, one quantity at a time (tables, plots, theory) ---------
    def rho(self, s):
        """``rho = g / h`` (0 where ``h = 0``; exactly 1 when ``g is h``)."""
        if self.same_g_h:
            self._usable()
            return array_module(s).ones_like(s)
        return self._values(s)[0]

    def drho(self, s):
        """``rho' = (g' - rho h') / h`` (0 where ``h = 0``; exactly 0 when ``g is h``)."""
        if self.same_g_h:
            self._usable()
            return array_module(s).zeros_like(s)
        rho, _, hs = self._values(s)
        return self._slopes(s, rho, hs)[0]

    def ell(self, s):
        """``ell = log h``: finite, or ``-inf`` exactly where ``h = 0``."""
        return self._values(s)[1]

    def dell(self, s):
        """``ell' = h' / h`` (0 where ``h = 0``)."""
        rho, _, hs = self._values(s)
        return self._slopes(s, rho, hs)[1]

    # --- results, checked ----------------------------------------------------------
    def forward(self, s, axis=-1, mask=None):
        """Core's forward (Eq. 01.R1) with ``g`` and ``h`` evaluated once (:class:`_Once`); the cache also
        holds ``rho`` and ``h`` (``+inf`` where ``h = 0``), which the backward pass reads instead of evaluating
        them again."""
        if self.on_non_finite == "raise" and isinstance(stop_gradient(s), np.ndarray):
            raw = np.asarray(stop_gradient(s))
            kept = np.ones(raw.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), raw.shape)
            self._require(np.isfinite(raw) | ~kept, s, "the score is not finite")  # the input's fault
        once = _Once(self)
        w, cache = Activation.forward(once, s, axis, mask)
        cache["rho"], cache["h"] = once.known["rho"], once.known["h"]
        if on_host(s):
            self._require(np.isfinite(np.asarray(stop_gradient(w))), s, "the weights phi are not finite", w)
        return w, cache

    def backward(self, grad_phi, cache):
        """Core's VJP (Eq. 01.R4) with ``g'`` and ``h'`` evaluated once and ``rho``, ``h`` read from the
        cache (made again from the scores for a cache that lacks them)."""
        u = np.asarray(stop_gradient(grad_phi)) if isinstance(stop_gradient(grad_phi), np.ndarray) else None
        if self.on_non_finite == "raise" and u is not None and not np.isfinite(u).all():
            where = tuple(int(i) for i in np.unravel_index(int(np.argmax(~np.isfinite(u))), u.shape))
            raise NonFiniteError(f"activation {self.name!r}: grad_phi is {_num(u[where])} at index {where}: the "
                                 f"upstream gradient is not finite, the input is at fault (not g or h)")
        s = cache["s"]
        rho, hs = (cache["rho"], cache["h"]) if "h" in cache else self._values(s)[0::2]
        drho, dell = self._slopes(s, rho, hs)
        ds = Activation.backward(_Once(self, rho=rho, drho=drho, dell=dell), grad_phi, cache)
        if on_host(s):
            self._require(np.isfinite(np.asarray(stop_gradient(ds))), s, "the backward pass is not finite", ds)
        return ds

    def training_copy(self):
        """This activation with ``on_non_finite = "nan"``: what :func:`divergence_as_data` returns."""
        twin = copy.copy(self)
        twin.on_non_finite = "nan"
        return twin

    def __repr__(self):
        return f"define_activation({self.name!r}, ...)"


class _Once(Activation):
    """A user's activation for one call of core's forward (Eq. 01.R1) or VJP (Eq. 01.R4): ``rho`` and
    ``ell`` from one evaluation of ``g`` and ``h`` at the scores core hands over (or ``rho``, ``rho'``,
    ``ell'`` already known), read from here by every term that needs them."""

    def __init__(self, act, **known):
        self.act, self.name, self.known = act, act.name, known

    def _get(self, key, s):
        if key not in self.known:
            self.known.update(zip(("rho", "ell", "h"), self.act._values(s)))
        return self.known[key]

    def rho(self, s):
        return self._get("rho", s)

    def ell(self, s):
        return self._get("ell", s)

    def drho(self, s):
        return self.known["drho"]

    def dell(self, s):
        return self.known["dell"]


def divergence_as_data(act):
    """The activation a model trains with: for a :class:`UserActivation`, its copy on which a value
    that is not finite is NaN instead of an error (a diverging seed is recorded as diverged, as
    for the built-ins, and the run goes on); any other activation (a name too) as it is."""
    return act.training_copy() if isinstance(act, UserActivation) else act


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
                         f"real numbers (write it with the functions of its namespace xp, def {role.split()[0]}(s, xp), "
                         f"or of autograd.numpy)")
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
                             f"it with operations that act entry by entry")
    return a


# ------------------------------------------------------------------------------
# Derivatives against autograd, point by point
# ------------------------------------------------------------------------------


def singular_slopes(f, c, role):
    """The one-sided slopes of ``f`` at ``c``: ``(f(c) - f(c - d)) / d`` and ``(f(c + d) - f(c)) / d``
    with ``d = 1e-7 max(1, |c|)`` (a kink shows as two different slopes, a jump as two huge ones)."""
    d = 1e-7 * np.maximum(1.0, np.abs(c))
    x = np.concatenate([np.atleast_1d(c) - d, np.atleast_1d(c), np.atleast_1d(c) + d])
    v = _evaluate(f, x, role).reshape(3, -1)
    with np.errstate(all="ignore"):  # an f that overflows has no finite slope there: inf or NaN, compared as such
        return (v[1] - v[0]) / d, (v[2] - v[1]) / d


def compare_derivative(given, f, x, *, singular_scores=(), role="dg", frole="g", rtol=DERIVATIVE_RTOL, traced=None):
    """A derivative of ``f`` (``given``, or autograd's where ``given`` is None) against autograd's, at ``x``.

    The error at each point is ``|given - autograd| / (|autograd| + 1e-6 max|autograd|)``; it must be at
    most ``rtol`` everywhere, the declared singular scores included (``docs/verify.md``, sections 2 and 4).
    The worst point is reported where ``f`` is smooth; points where ``f`` has a kink nobody declared (its
    one-sided slopes, :func:`singular_slopes`, differ by more than 1e-3 of their size) are set apart.

    Returns
    -------
    dict (JSON-able)
        ``derivative`` (``role``), ``of`` (``frole``), ``given``, ``points`` and ``range`` (away from the
        declared points), ``max_rel_error``, ``worst`` (``s``, ``given``, ``autograd``, ``rel_error``),
        ``kinks`` (undeclared, with both slopes), ``singular`` (per declared score: ``s``, ``given``,
        ``autograd``, ``left_slope``, ``right_slope``, ``rel_error``, ``ok``), ``not_compared`` (the points
        where autograd's derivative is not finite, so that nothing is compared there), ``tolerance`` and ``ok``. A
        ``ValueError`` names ``traced`` (default ``"<frole> (autograd)"``) or ``role`` where autograd or
        ``given`` cannot be evaluated.
    """
    given, f = None if given is None else on_numpy(given), on_numpy(f)
    ref = _evaluate(elementwise_grad(f), x, traced or f"{frole} (autograd)")
    got = ref if given is None else _check_elementwise(given, x, role)
    fin = np.isfinite(ref)
    if not fin.any():
        raise ValueError(f"{role}: autograd's derivative of {frole} is not finite at any check point")
    scale = float(np.max(np.abs(ref[fin])))
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(fin, np.abs(got - ref) / (np.abs(ref) + 1e-6 * scale + 1e-300), 0.0)
    err = np.where(fin & ~np.isfinite(got), np.inf, err)  # a given value that is not finite where autograd's is
    at = np.isin(x, np.asarray(singular_scores, dtype=float)) if len(singular_scores) else np.zeros(x.shape, bool)
    left, right = singular_slopes(f, x, frole)
    with np.errstate(invalid="ignore", over="ignore"):
        kink = ~(np.abs(left - right) <= 1e-3 * (np.maximum(np.abs(left), np.abs(right)) + 1e-6 * scale))
    bad = err > rtol
    smooth = ~at & ~(bad & kink)
    i = int(np.argmax(np.where(smooth, err, -1.0))) if smooth.any() else 0
    report = {"derivative": role, "of": frole, "given": given is not None, "tolerance": rtol,
              "points": int((~at).sum()), "range": [float(x[~at].min()), float(x[~at].max())],
              "max_rel_error": float(err[smooth].max()) if smooth.any() else 0.0,
              "worst": {"s": float(x[i]), "given": float(got[i]), "autograd": float(ref[i]),
                        "rel_error": float(err[i])},
              "kinks": [{"s": float(x[j]), "given": float(got[j]), "autograd": float(ref[j]),
                         "left_slope": float(left[j]), "right_slope": float(right[j]), "rel_error": float(err[j])}
                        for j in np.flatnonzero(bad & kink & ~at)[:5]],
              "singular": [],
              "not_compared": [float(v) for v in x[~fin & ~at]]}  # autograd's reference is not finite there
    for c in dict.fromkeys(float(v) for v in x[at]):
        j = int(np.flatnonzero(x == c)[0])
        report["singular"].append({"s": c, "given": float(got[j]), "autograd": float(ref[j]),
                                   "left_slope": float(left[j]), "right_slope": float(right[j]),
                                   "rel_error": float(err[j]), "ok": bool(err[j] <= rtol)})
    report["ok"] = bool(not (bad & ~at).any() and all(e["ok"] for e in report["singular"]))
    return report


def derivative_message(report, label=None):
    """The one line that refuses a derivative :func:`compare_derivative` found wrong (None if it is not):
    the worst point where ``f`` is smooth first, then a declared singular score, then a kink nobody
    declared, each with what was given, what autograd gives, and for a kink its two slopes."""
    if report["ok"]:
        return None
    role, f, tol = label or report["derivative"], report["of"], report["tolerance"]
    w = report["worst"]
    lo, hi = report["range"]
    if w["rel_error"] > tol:
        return (f"{role}: does not match autograd's derivative of {f}: worst at s = {_num(w['s'])}, given "
                f"{_num(w['given'])}, autograd {_num(w['autograd'])} (relative error {w['rel_error']:.3g} > {tol:g}; "
                f"checked at {report['points']} points in [{lo:.3g}, {hi:.3g}])")
    for e in report["singular"]:
        if not e["ok"]:
            return (f"{role}: at the declared singular score s = {_num(e['s'])} it gives {_num(e['given'])}, but "
                    f"autograd's derivative of {f} there is {_num(e['autograd'])} (one-sided slopes "
                    f"{e['left_slope']:.6g} left, {e['right_slope']:.6g} right): a declared point excuses "
                    f"central differences only, so give autograd's value there ({KINKS})")
    k = report["kinks"][0]
    return (f"{role}: differs from autograd's derivative of {f} only at s = {_num(k['s'])}, where {f} has a kink "
            f"or jump (slope {k['left_slope']:.6g} on the left, {k['right_slope']:.6g} on the right; given "
            f"{_num(k['given'])}, autograd {_num(k['autograd'])}): declare it with singular_scores=[{_num(k['s'])}] "
            f"and give autograd's value there ({KINKS})")


def evaluation_checks(g, h, x):
    """``g`` and ``h`` at the points ``x``: elementwise, real, no NaN, ``h >= 0``, ``h > 0`` somewhere,
    ``g = 0`` where ``h = 0``; ``ValueError`` naming the function and the first point otherwise."""
    g, h = on_numpy(g), on_numpy(h)
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


def derivative_reports(g, h, dg, dh, x, singular_scores=()):
    """:func:`compare_derivative` for ``dg`` and ``dh`` (given or autograd's) at ``x``: two reports.
    A function autograd is to differentiate at every use must let it (``ValueError`` otherwise)."""
    reports = []
    for d, f, role in ((dg, g, "g"), (dh, h, "h")):
        of = _label(f, role)
        spelling = "the functions of its namespace xp" if takes_namespace(f) else "autograd.numpy"
        traced = (f"{of} (autograd)" if d is not None else
                  f"{of} (differentiated by autograd; write it with {spelling}, or pass d{role})")
        reports.append(compare_derivative(d, f, x, singular_scores=singular_scores, role=_label(d, "d" + role)
                                          if d is not None else "d" + role, frole=of, traced=traced))
    return reports


def _define_args(name, g, h, dg, dh, register, source, singular_scores, regularity, seed, check_range):
    """:func:`define_activation`'s arguments checked before any evaluation; the singular scores as floats."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name: expected a non-empty string, got {name!r}")
    if name in _activations.BUILT_INS:
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
    check_int(seed, "seed", 0)
    return singular_scores, _range(check_range)


def define_activation(name, g, h, dg=None, dh=None, *, register=False, source=None,
                      singular_scores=(), regularity="log", seed=0, check_range=DEFAULT_RANGE) -> UserActivation:
    """An activation ``phi(s)_i = g(s_i) / sum_k h(s_k)`` (TanhMax Eq. 5) from your own ``g`` and ``h``.

    Parameters
    ----------
    name : str
        Its name in reports (and the registry, with ``register``); not a built-in's.
    g, h : callable
        Elementwise, ``h >= 0``, ``g = 0`` wherever ``h = 0``; ``g(s, xp)`` against the namespace handed
        over runs on every array library (``docs/frameworks.md``), ``g(s)`` with ``autograd.numpy`` on
        NumPy only. The same function twice gives ``rho = 1`` exactly.
    dg, dh : callable, optional
        Their derivatives; those not given are autograd's, those given are compared with autograd's at
        :func:`derivative_points` (relative error at most :data:`DERIVATIVE_RTOL`).
    register : bool
        Also make ``refattn.activation(name)`` return it (never added to ``refattn.ACTIVATIONS``).
    source : str, optional
        Where the formula comes from (``refattn check`` shows it).
    singular_scores : sequence of float
        Scores where ``g`` or ``h`` has a kink or a jump: central differences are excused there, a wrong
        derivative is not (``docs/verify.md``, "Kinks and jumps").
    regularity : {"log", "smooth", "kink"}
        How ``ell`` behaves near 0 (``Activation.regularity``); ``"log"``, the most cautious, by default.
    seed, check_range
        The random check points' seed, and where derivatives are compared (default [-10, 10]).

    Returns an :class:`UserActivation`. What is refused (a ``ValueError`` or ``TypeError`` naming the
    argument or the function and the first bad point): ``docs/verify.md``, section 8.

    Examples
    --------
    >>> import autograd.numpy as anp
    >>> softplus = lambda s: anp.logaddexp(0.0, s)
    >>> act = define_activation("softplus-max", softplus, softplus)
    >>> float(act(np.array([0.0, 1.0])).sum())  # rho = 1: the weights sum to 1
    1.0
    """
    singular_scores, check_range = _define_args(name, g, h, dg, dh, register, source, singular_scores, regularity,
                                                seed, check_range)
    refused = refused_at = None
    try:
        x = derivative_points(singular_scores, seed, check_range)
        evaluation_checks(g, h, x)
        reports = derivative_reports(g, h, dg, dh, x, singular_scores)
    except ValueError as exc:
        if not _DEFER_REFUSALS.get():
            raise
        refused, refused_at = (str(exc).splitlines() or [type(exc).__name__])[0], "evaluation"
    else:
        refused = next((m for m in map(derivative_message, reports) if m is not None), None)
        if refused is not None and not _DEFER_REFUSALS.get():
            raise ValueError(refused)
        refused_at = None if refused is None else "derivative"
    act = UserActivation(name, g, h, dg, dh, source=source or "user-defined (refattn.define_activation)",
                         singular_scores=singular_scores, regularity=regularity, check_range=check_range,
                         seed=seed, refused=refused, refused_at=refused_at)
    if register and refused is None:
        _activations._REGISTRY[name] = lambda: act  # activation(name) returns this very object
    return act


def unregister(name):
    """Remove an activation registered by ``define_activation(..., register=True)``.

    Raises ``ValueError`` for a built-in name or a name that is not registered.
    """
    if name in _activations.BUILT_INS:
        raise ValueError(f"name: {name!r} is a built-in activation and cannot be unregistered")
    if name not in _activations._REGISTRY:
        raise ValueError(f"name: no user activation called {name!r} is registered")
    del _activations._REGISTRY[name]


# ------------------------------------------------------------------------------
# FILE.py:NAME: activations defined in a file
# ------------------------------------------------------------------------------

#: Files imported in this process, by real path and content hash: a file is run once however many
#: options and checks name it (and a file that registers its activation is not run twice).
_MODULES: dict = {}

_DICT_KEYS = frozenset({"g", "h", "dg", "dh", "source", "singular_scores", "regularity", "seed", "check_range"})


def parse_spec(spec, option="--activation", file_alone=False):
    """``(path, name)`` of ``"FILE.py:NAME"`` (``name`` None for ``"FILE.py"`` where ``file_alone``);
    one line naming ``option`` for anything else."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{option}: expected FILE.py:NAME, got {spec!r}")
    if file_alone and spec.endswith(".py"):
        return spec, None
    if ":" not in spec:
        raise ValueError(f"{option}: expected FILE.py:NAME{' or FILE.py' if file_alone else ''}, got {spec!r}")
    path, _, name = spec.rpartition(":")
    if not path or not name.isidentifier():
        raise ValueError(f"{option}: expected FILE.py:NAME with NAME a Python name, got {spec!r}")
    return path, name


def is_spec(value) -> bool:
    """True for text that names a file's activation (``FILE.py:NAME``), not a registered name."""
    return isinstance(value, str) and ":" in value and value.rpartition(":")[0].endswith(".py")


def file_sha256(path) -> str:
    """The SHA-256 of the file's bytes, in hex."""
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def load_module(path, option):
    """Import the Python file ``path`` as a fresh module (not left in ``sys.modules``): ``(module, sha256)``.

    While it runs, a :func:`define_activation` whose checks fail returns an
    activation carrying the refusal (``refused``) instead of raising, so one
    wrong activation leaves the file's others usable. A file already imported
    with the same content is not run again. A missing file, or a file that
    raises while it is imported, is one ``ValueError`` naming ``option`` and
    the file.
    """
    if not os.path.isfile(path):
        what = ("is a folder" if os.path.isdir(path) else "is not a regular file (a device or pipe)"
                if os.path.exists(path) else "no such file")
        raise ValueError(f"{option}: {path!r} {what}; expected a Python file" if what != "no such file"
                         else f"{option}: no such file {path!r}")
    try:
        sha = file_sha256(path)
    except OSError as exc:
        raise ValueError(f"{option}: cannot read {path!r} ({exc.strerror or exc})") from None
    key = (os.path.realpath(path), sha)
    if key in _MODULES:
        return _MODULES[key], sha
    mod_name = f"_refattn_user_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{option}: cannot import {path!r} as Python (does it end in .py?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look the module up while it runs
    token = _DEFER_REFUSALS.set(True)
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:  # sys.exit() in the user's file: not the end of refattn's command
        raise ValueError(f"{option}: importing {path} called sys.exit({exc.code!r}); a file of activations "
                         f"must define them, not end the program") from None
    except Exception as exc:  # the user's code: report any error in one line
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(f"{option}: importing {path} raised {type(exc).__name__}: {msg}") from exc
    finally:
        _DEFER_REFUSALS.reset(token)
        sys.modules.pop(mod_name, None)
    _MODULES[key] = module
    return module, sha


def _from_object(obj, name, path, option):
    """What ``NAME`` in the file is, as an activation: an Activation as it is, an Activation subclass
    instantiated, a dict of :func:`define_activation`'s arguments defined (a refusal kept on it)."""
    if isinstance(obj, Activation):
        return obj
    if isinstance(obj, type) and issubclass(obj, Activation):
        try:
            return obj()
        except Exception as exc:  # the user's class: report any error in one line
            raise ValueError(f"{option}: {name} in {path} cannot be made with no arguments "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if isinstance(obj, dict):
        extra = sorted(set(obj) - _DICT_KEYS)
        if extra:
            raise ValueError(f"{option}: {name} in {path} has unknown key(s) {extra}; expected "
                             f"some of {sorted(_DICT_KEYS)}")
        if "g" not in obj or "h" not in obj:
            raise ValueError(f"{option}: {name} in {path} needs the keys 'g' and 'h'")
        token = _DEFER_REFUSALS.set(True)
        try:
            return define_activation(name, **obj)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{option}: {name} in {path}: {str(exc).splitlines()[0]}") from None
        finally:
            _DEFER_REFUSALS.reset(token)
    raise ValueError(f"{option}: {name} in {path} is a {type(obj).__name__}; expected an Activation "
                     f"(e.g. from refattn.define_activation) or a dict with keys 'g' and 'h'")


def _mark(act, path, sha):
    act.file, act.sha256 = path, sha  # what activation_record keeps of it
    return act


def load_activation(spec, option="--activation", allow_refused=False) -> Activation:
    """The activation ``NAME`` defined in ``FILE.py``, from ``spec = "FILE.py:NAME"``, with ``file`` and
    ``sha256`` set (:func:`activation_record`). ``NAME`` may be an Activation, an Activation subclass (made
    with no arguments) or a dict of :func:`define_activation`'s arguments (``docs/verify.md``, section 1).
    Anything unusable is one ``ValueError`` naming ``option``, a definition that failed its checks too
    unless ``allow_refused`` (``refattn check`` reports it)."""
    path, name = parse_spec(spec, option)
    module, sha = load_module(path, option)
    if not hasattr(module, name):
        raise ValueError(f"{option}: {path} defines no {name!r}")
    act = _mark(_from_object(getattr(module, name), name, path, option), path, sha)
    if getattr(act, "refused", None) is not None and not allow_refused:
        raise ValueError(f"{option}: {name} in {path} was refused when it was defined: {act.refused} "
                         f"(refattn check --activation {path}:{name} says more)")
    return act


def load_file(path, option="--activation"):
    """Every activation ``FILE.py`` defines, each on its own: ``{NAME: activation or error message}`` in
    the file's order. Counted: Activation instances, Activation subclasses defined in the file, and
    dicts with keys ``g`` and ``h``; a failed definition is kept (``refused``), a name that cannot
    be made into an activation is its one-line error, so one does not hide the others."""
    module, sha = load_module(path, option)
    found = {}
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        is_class = isinstance(obj, type) and issubclass(obj, Activation) and obj.__module__ == module.__name__
        if not (isinstance(obj, Activation) or is_class or (isinstance(obj, dict) and {"g", "h"} <= set(obj))):
            continue
        try:
            found[name] = _mark(_from_object(obj, name, path, option), path, sha)
        except ValueError as exc:
            found[name] = str(exc)
    if not found:
        raise ValueError(f"{option}: {path} defines no activation (an Activation, an Activation subclass, or a "
                         f"dict with keys 'g' and 'h')")
    return found


# ------------------------------------------------------------------------------
# What a results file keeps of an activation
# ------------------------------------------------------------------------------


def _source_sha256(act):
    """SHA-256 of the code that defines ``act`` (its functions' or its class's source), or None."""
    parts = []
    things = ([f for f in act.functions.values() if f is not None] if isinstance(act, UserActivation)
              else [type(act)])
    for f in things:
        try:
            parts.append(inspect.getsource(f))
        except (OSError, TypeError):
            code = getattr(f, "__code__", None)
            if code is None:
                return None
            parts.append(repr((code.co_code, code.co_consts)))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def activation_label(act) -> str:
    """The name of an activation, a registered name or a ``FILE.py:NAME`` as text (``NAME``)."""
    if isinstance(act, Activation):
        return act.name
    if is_spec(act):
        return act.rpartition(":")[2]
    return str(act)


def activation_record(act):
    """What a results file or checkpoint records of an activation, JSON-able: a built-in (or
    registered) one by its name, as always; another as ``{"name", "file", "sha256"}``, the
    SHA-256 of its file (or, defined in Python, of its source), so that a run resumed with a
    changed formula is refused (its record differs)."""
    if is_spec(act):
        act = load_activation(act)
    if isinstance(act, str):
        return act
    if type(act) in {type(_activations.activation(n)) for n in _activations.BUILT_INS} \
            and act.name in _activations.BUILT_INS:
        return act.name
    file = getattr(act, "file", None)
    return {"name": act.name, "file": None if file is None else os.path.basename(file),
            "sha256": getattr(act, "sha256", None) or _source_sha256(act)}
