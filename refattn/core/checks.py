"""The argument checks, in one place, so the formulas elsewhere read clean.

Every public entry point of ``refattn/core`` checks its arguments here before
any arithmetic; bad input gets one line naming the argument and what was
expected (``TypeError`` for a wrong kind, ``ValueError`` for a wrong value).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping

import numpy as np

from . import backend
from .backend import dtype_of, is_traced, shape_of, stop_gradient, to_numpy

__all__ = ["check_not_subclass", "check_float_array", "check_int", "check_real", "check_axis", "check_mask", "check_grad",
           "activation_forward", "activation_backward", "score_forward", "score_backward", "score_inputs",
           "check_cache", "check_params", "init_args", "gradcheck_args", "check_cotangent", "owned",
           "scores_in_domain"]


# --- Values ----------------------------------------------------------------------------------------
def check_not_subclass(x, name: str):
    """Refuse the NumPy subclasses whose arithmetic is not an array's: ``numpy.matrix`` (``*`` is a
    matrix product, every result 2-D) and masked arrays (every formula here would ignore the mask)."""
    if isinstance(x, np.matrix):
        raise TypeError(f"{name}: numpy.matrix is not supported (its * is a matrix product and it stays 2-D); "
                        f"pass numpy.asarray({name})")
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{name}: a masked array's mask would be ignored; pass its data ({name}.filled(0.0)) "
                        f"and, for attention, the keys to keep as mask=")


def check_float_array(x, name: str, *, min_ndim: int = 1, ndim: int | None = None):
    """Raise unless ``x`` is a non-empty float array (NumPy, CuPy, traced, PyTorch or JAX; a NumPy scalar
    is 0-d); ``numpy.matrix`` and masked arrays are refused (:func:`check_not_subclass`)."""
    if not backend.is_array(x):
        raise TypeError(f"{name}: expected a floating-point array (numpy.ndarray, cupy.ndarray, torch.Tensor, "
                        f"jax.Array), got {type(x).__name__}")
    check_not_subclass(x, name)
    if dtype_of(x).kind != "f":
        raise TypeError(f"{name}: expected a real floating dtype (float32 or float64), got {dtype_of(x)}; "
                        f"convert with .astype(numpy.float64)")
    shape = shape_of(x)
    if ndim is not None and len(shape) != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {shape}")
    if len(shape) < min_ndim:
        raise ValueError(f"{name}: expected at least {min_ndim} dimension(s), got shape {shape}")
    if 0 in shape:
        raise ValueError(f"{name}: expected a non-empty array, got shape {shape}")


def check_int(value, name: str, least: int = 1) -> int:
    """``value`` as an int after checking it is an integer (not a bool) ``>= least``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int >= {least}, got {type(value).__name__}")
    if value < least:
        raise ValueError(f"{name}: expected an int >= {least}, got {value}")
    return int(value)


def check_real(value, name: str, *, positive: bool = False, nonnegative: bool = False,
               allow_none: bool = False, finite: bool = True) -> float | None:
    """``value`` as a float after checking it is a real number, never NaN (and finite, > 0, >= 0 if asked)."""
    if value is None and allow_none:
        return None
    want = ("a positive" if positive else "a non-negative" if nonnegative else "a")
    want += (" finite" if finite else "") + " real number" + (" or None" if allow_none else "")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected {want}, got {type(value).__name__}")
    v = float(value)
    if math.isnan(v) or (finite and math.isinf(v)) or (positive and v <= 0) or (nonnegative and v < 0):
        raise ValueError(f"{name}: expected {want}, got {value!r}")
    return v


def check_axis(axis, ndim: int, name: str = "axis") -> int:
    """``axis`` normalised to ``0 <= axis < ndim``."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: {axis} is out of range for an array of {ndim} dimension(s)")
    return int(axis) % ndim


def check_mask(mask, shape, name: str = "mask"):
    """``mask`` (or ``None``) after checking it is boolean (``True`` = keep) and broadcasts to ``shape``."""
    if mask is None:
        return None
    if not (backend.is_array(mask) and not is_traced(mask) and not isinstance(mask, np.generic)):
        raise TypeError(f"{name}: expected a boolean array (True = keep), got {type(mask).__name__}")
    check_not_subclass(mask, name)
    if dtype_of(mask) != np.bool_:
        raise TypeError(f"{name}: expected dtype bool (True = keep), got {dtype_of(mask)}")
    try:
        ok = np.broadcast_shapes(shape_of(mask), tuple(shape)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name}: shape {shape_of(mask)} does not broadcast to the scores' shape {tuple(shape)}")
    return mask


def check_grad(grad, name: str, want):
    """Raise unless the upstream gradient ``grad`` is a float array of shape ``want``."""
    check_float_array(grad, name, min_ndim=0)
    if shape_of(grad) != tuple(want):
        raise ValueError(f"{name}: shape {shape_of(grad)} does not match the output's shape {tuple(want)}")


def check_cache(cache, kind):
    """Raise unless ``cache`` came from a forward pass of ``kind``: "activation", "score" or "attention"."""
    if not isinstance(cache, Mapping) or cache.get("kind") != kind:
        raise TypeError(f"cache: expected the {kind} cache that forward returned, got {type(cache).__name__}")


# --- Activations: phi, cache = act.forward(s, axis, mask);  ds = act.backward(dphi, cache) ---------
def activation_forward(forward):
    """Decorator: check ``s``, ``axis`` and ``mask``, then call ``forward`` with the axis normalised."""

    @functools.wraps(forward)
    def checked(self, s, axis=-1, mask=None):
        check_float_array(s, "s")
        axis = check_axis(axis, len(shape_of(s)))
        check_mask(mask, shape_of(s))
        return forward(self, s, axis, mask)

    return checked


def activation_backward(backward):
    """Decorator: check that ``cache`` came from this activation's forward and ``grad_phi`` fits it."""

    @functools.wraps(backward)
    def checked(self, grad_phi, cache):
        check_cache(cache, "activation")
        made_by = cache.get("made_by", (None, None))
        if made_by != (type(self), self.name):
            raise TypeError(f"cache: made by the forward of activation {made_by[1]!r}, not of {self.name!r}; give "
                            f"{self.name!r}'s backward the cache its own forward returned")
        check_grad(grad_phi, "grad_phi", shape_of(cache["s"]))
        return backward(self, grad_phi, cache)

    return checked


# --- Scores: s, cache = sc.forward(q, k, params);  dq, dk, dparams = sc.backward(ds, cache) --------
def check_params(sc, params, sizes):
    """``params`` as a dict, checked against ``sc.param_spec`` (shapes in symbols: ``d, n_q, n_k``
    from ``q`` and ``k``, any other from the first parameter that has it)."""
    params = {} if params is None else params
    if not isinstance(params, Mapping):
        raise TypeError(f"params: expected a dict of arrays, got {type(params).__name__}")
    spec = sc.param_spec(params)
    for p in spec:
        if p not in params:
            raise ValueError(f"params: missing {p!r}; score {sc.name!r} needs {tuple(spec)} (see init_params)")
    for p in params:
        if p not in spec:
            raise ValueError(f"params: unexpected {p!r}; score {sc.name!r} takes "
                             f"{tuple(spec) if spec else 'no parameters'}")
    origin, sizes = dict.fromkeys(sizes, "q and k"), dict(sizes)  # where each size was read
    for p, symbols in spec.items():
        check_float_array(params[p], f"params[{p!r}]", min_ndim=0)
        shape = shape_of(params[p])
        bad = [y for y, n in zip(symbols, shape) if sizes.setdefault(y, n) != n]
        if len(shape) != len(symbols) or bad:
            read = "; ".join(f"{y} = {sizes[y]} from {origin.get(y, 'an earlier parameter')}" for y in bad)
            raise ValueError(f"params[{p!r}]: expected shape ({', '.join(symbols)}{',' * (len(symbols) == 1)}) "
                             f"= {tuple(sizes.get(y, y) for y in symbols)}, got {shape}" + (f" ({read})" if read else ""))
    return dict(params)


def score_inputs(sc, q, k, params):
    """Check ``q (..., n_q, d)``, ``k (..., n_k, d)`` and ``params``; return the scores' shape and params."""
    check_float_array(k, "k", min_ndim=2)
    *batch, n_k, d = shape_of(k)
    n_q = n_k
    if sc.uses_q:
        check_float_array(q, "q", min_ndim=2)
        *qbatch, n_q, dq = shape_of(q)
        if dq != d:
            raise ValueError(f"k: its last dimension (the feature size d) is {d}, but q's is {dq}; "
                             f"q (..., n_q, d) and k (..., n_k, d) must share d")
        if not sc.pairwise and n_q != n_k:
            raise ValueError(f"k: has {n_k} tokens but q has {n_q}; the per-token score {sc.name!r} pairs q_i with k_i")
        try:
            batch = list(np.broadcast_shapes(tuple(qbatch), tuple(batch)))
        except ValueError:
            raise ValueError(f"k: batch dimensions {tuple(batch)} do not broadcast with q's {tuple(qbatch)}") from None
    params = check_params(sc, params, {"d": d, "n_q": n_q, "n_k": n_k})
    return tuple(batch) + ((n_q, n_k) if sc.pairwise else (n_k,)), params


def init_args(sc, d, rng, dtype, sizes):
    """Check the arguments of ``Score.init_params``."""
    check_int(d, "d", 1)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator (numpy.random.default_rng(seed)), "
                        f"got {type(rng).__name__}")
    if np.dtype(dtype).kind != "f":
        raise TypeError(f"dtype: expected a real floating dtype, got {np.dtype(dtype)}")
    for name in sizes:
        if name not in sc.size_names:
            raise TypeError(f"{name}: unknown size for score {sc.name!r}; expected one of {sc.size_names}")


def owned(x):
    """A copy of a caller's array, for a cache that backward reads: the caller may change the array in
    place after forward (an optimiser's step, a reused buffer), and backward must see what forward saw.
    A value autograd traces cannot be changed in place and is kept as it is; so is ``None``."""
    if x is None or is_traced(x):
        return x
    copy = getattr(x, "copy", None)
    return copy() if copy is not None else x.clone()


def score_forward(forward):
    """Decorator: check ``q``, ``k`` and ``params``; the cache records the scores' shape. The score's
    forward gets copies of them (:func:`owned`), so its cache keeps what backward needs whatever the
    caller does to its arrays between the two (about ``n d`` numbers, against the ``n^2`` scores)."""

    @functools.wraps(forward)
    def checked(self, q, k, params=None):
        shape, params = score_inputs(self, q, k, params)
        q, k, params = owned(q), owned(k), {name: owned(v) for name, v in params.items()}
        s, cache = forward(self, q, k, params)
        return s, {"kind": "score", "shape": shape, **cache}

    return checked


def score_backward(backward):
    """Decorator: check that ``cache`` came from a score's forward and ``grad_s`` fits it."""

    @functools.wraps(backward)
    def checked(self, grad_s, cache):
        check_cache(cache, "score")
        check_grad(grad_s, "grad_s", cache["shape"])
        return backward(self, grad_s, cache)

    return checked


# --- gradcheck -------------------------------------------------------------------------------------
def gradcheck_args(args, checks, max_fd_coords, eps, rtol, atol, rounding_safety):
    """Check :func:`refattn.core.gradcheck.gradcheck`'s arguments; return ``(checks, eps, rtol, atol, c)``."""
    if not isinstance(args, Mapping) or not args:
        raise TypeError(f"args: expected a non-empty mapping of name to float64 array, got {args!r:.80}")
    for k, v in args.items():
        if not isinstance(v, np.ndarray) or v.dtype != np.float64:
            raise TypeError(f"args[{k!r}]: gradcheck works in float64 NumPy arrays, "
                            f"got {type(v).__name__} {getattr(v, 'dtype', '')}")
        check_not_subclass(v, f"args[{k!r}]")
        if v.size == 0:
            raise ValueError(f"args[{k!r}]: an empty array (shape {v.shape}) has no gradient to check")
    checks = (checks,) if isinstance(checks, str) else tuple(checks)
    if not checks:
        raise ValueError("checks: expected at least one of ('autograd', 'central'); a check of nothing cannot fail")
    unknown = sorted(set(checks) - {"autograd", "central"})
    if unknown:
        raise ValueError(f"checks: unknown check(s) {unknown}; expected a subset of ('autograd', 'central')")
    if max_fd_coords is not None:
        check_int(max_fd_coords, "max_fd_coords", 1)
    return (checks, check_real(eps, "eps", positive=True), check_real(rtol, "rtol", nonnegative=True),
            check_real(atol, "atol", nonnegative=True), check_real(rounding_safety, "rounding_safety", nonnegative=True))


def check_cotangent(cotangent, shape, rng):
    """A standard normal cotangent of ``shape``, or the caller's after checking it (warned about if constant,
    refused if all zero: ``0^T J = 0`` for every ``J``, so a wrong VJP would pass). An empty output is
    refused: it has no VJP to check."""
    if 0 in tuple(shape):
        raise ValueError(f"fun: its output is empty (shape {tuple(shape)}); there is no VJP to check")
    if cotangent is None:
        return rng.standard_normal(shape)
    check_not_subclass(cotangent, "cotangent")
    u = np.asarray(cotangent, np.float64)
    if u.shape != shape:
        raise ValueError(f"cotangent: shape {u.shape} does not match the output's {shape}")
    if not np.all(np.isfinite(u)):
        raise ValueError("cotangent: has NaN or infinite entries")
    if not np.any(u):
        raise ValueError("cotangent: all entries are 0, against which every VJP, right or wrong, is 0; "
                         "use a random one (the default)")
    if u.size > 1 and np.all(u == u.reshape(-1)[0]):
        warnings.warn("cotangent: all entries are equal; a softmax-like Jacobian has columns that sum to "
                      "zero, so a constant cotangent hides a wrong VJP (use a random one)", UserWarning, stacklevel=3)
    return u


# --- Attention's domain: every kept score finite ----------------------------------------------------
def scores_in_domain(xp, s, mask, sc, Q, K, params):
    """Attention's domain: every kept score finite. A kept score that is not finite although ``Q``, ``K`` and
    the score's parameters are (their product overflowed; ``beta |q_i| |k_j|`` below the dtype's largest
    number rules that out for a dot score, by Cauchy-Schwarz) is one ``ValueError`` naming ``Q, K``; a
    NaN or an infinity in an input propagates instead (derivation 01, section 4.4). Under ``jax.jit`` and
    ``torch.compile`` the values are not known, and nothing is checked."""
    if backend.is_compiled_by_torch(s):
        return
    bad = ~xp.isfinite(stop_gradient(s))
    if mask is not None:
        bad = bad & mask  # a masked score is ignored, whatever it is
    try:
        if not bool(to_numpy(xp.any(bad))):  # one number to the host, said explicitly
            return
    except TypeError:  # a value JAX traces: not known now
        return
    inputs = [x for x in (Q, K, *params.values()) if x is not None]
    if not all(bool(to_numpy(xp.all(xp.isfinite(stop_gradient(x))))) for x in inputs):
        return  # NaN in, NaN out
    where = tuple(int(i) for i in np.argwhere(np.asarray(to_numpy(stop_gradient(bad))))[0])
    dtype = dtype_of(s)
    raise ValueError(f"Q, K: the score {sc.name!r} at index {where} is {float(to_numpy(stop_gradient(s))[where])} "
                     f"although every input is finite: the product overflows {dtype} (largest number "
                     f"{np.finfo(dtype).max:.3g}); attention is defined where every kept score is finite; scale "
                     f"Q or K down")
