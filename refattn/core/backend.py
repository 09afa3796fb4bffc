"""Which array module runs the code: NumPy, CuPy, or autograd's NumPy.

Every forward function in refattn is written once against a namespace ``xp``
chosen from its inputs by :func:`array_module`:

* plain ``numpy.ndarray`` inputs run on NumPy;
* ``cupy.ndarray`` inputs run on CuPy, on the GPU, and stay there;
* inputs that autograd is tracing (its ``ArrayBox``) run on
  ``autograd.numpy``, so that the autograd check differentiates exactly the
  code that runs, not a copy of it (``derivations/01-reweighted-softmax.md``,
  "How the gradients are checked").

Consequences for code written against ``xp``: no in-place assignment (autograd
cannot trace it), and no silent host/device copies: mixing NumPy and CuPy
arrays in one call is a ``TypeError``, and :func:`to_numpy` is the one explicit
way back to the host.
"""

from __future__ import annotations

import math

import numpy as np
import autograd.numpy as anp
from autograd.tracer import Box

__all__ = [
    "array_module",
    "cupy_available",
    "is_traced",
    "to_numpy",
    "check_float_array",
    "check_int",
    "check_real",
    "sum_to",
    "check_mask",
    "check_axis",
    "stop_gradient",
    "dtype_of",
    "sigmoid",
]

_cupy = None
_cupy_checked = False


def _get_cupy():
    """Import CuPy once, lazily; ``None`` where it is absent or has no GPU."""
    global _cupy, _cupy_checked
    if not _cupy_checked:
        _cupy_checked = True
        try:
            import cupy  # noqa: PLC0415  (optional dependency)

            cupy.cuda.runtime.getDeviceCount()
            _cupy = cupy
        except Exception:  # ImportError, or CUDA present but no device
            _cupy = None
    return _cupy


def cupy_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    return _get_cupy() is not None


def _is_cupy_array(x) -> bool:
    # Look at the type's module instead of importing CuPy: inspecting an
    # argument must never start a CUDA context.
    return type(x).__module__.startswith("cupy")


def is_traced(x) -> bool:
    """True when ``x`` is a value autograd is currently tracing."""
    return isinstance(x, Box)


def array_module(*arrays):
    """Return the array namespace for a call with these arguments.

    Parameters
    ----------
    *arrays : array_like or None
        The call's array arguments; ``None`` entries (an absent mask, say)
        are ignored.

    Returns
    -------
    module
        ``autograd.numpy`` if any argument is being traced by autograd,
        ``cupy`` if the arguments are CuPy arrays, ``numpy`` otherwise.

    Raises
    ------
    TypeError
        If CuPy arrays are mixed with NumPy arrays or traced values: refattn
        never copies between host and device behind your back.
    """
    traced = cupy = host = False
    for a in arrays:
        if a is None:
            continue
        if isinstance(a, Box):
            traced = True
        elif _is_cupy_array(a):
            cupy = True
        elif isinstance(a, np.ndarray):
            host = True
    if cupy and (host or traced):
        raise TypeError(
            "arrays: got CuPy (GPU) arrays mixed with NumPy or autograd "
            "(host) arrays; move them to one device explicitly "
            "(cupy.asarray or refattn.core.backend.to_numpy)"
        )
    if traced:
        return anp
    if cupy:
        return _get_cupy() or __import__("cupy")
    return np


def to_numpy(x):
    """Copy ``x`` to a host ``numpy.ndarray`` (explicitly; a no-op for NumPy)."""
    if _is_cupy_array(x):
        return x.get()
    if isinstance(x, Box):
        raise TypeError("x: cannot copy a value autograd is tracing to the host")
    return np.asarray(x)


def _dtype_of(x):
    return x._value.dtype if isinstance(x, Box) else getattr(x, "dtype", None)


def _shape_of(x):
    return np.shape(x._value) if isinstance(x, Box) else x.shape


def check_float_array(x, name: str, *, min_ndim: int = 1, ndim: int | None = None):
    """Raise a clear error unless ``x`` is a floating-point array.

    Parameters
    ----------
    x : object
        The argument to check.
    name : str
        The argument's name, used in the message.
    min_ndim, ndim : int
        The least number of dimensions, or the exact number.

    Raises
    ------
    TypeError
        ``x`` is not an array (NumPy, CuPy or traced; a NumPy scalar counts as
        a 0-d array, as the result of ``b - lr * db`` for a 0-d ``b`` is one) or its dtype is not a
        real floating type (float16/32/64).
    ValueError
        ``x`` has the wrong number of dimensions or is empty along one.
    """
    dtype = _dtype_of(x)
    if dtype is None or not (isinstance(x, (np.ndarray, np.generic, Box)) or _is_cupy_array(x)):
        raise TypeError(
            f"{name}: expected a floating-point array (numpy.ndarray, "
            f"cupy.ndarray), got {type(x).__name__}"
        )
    if np.dtype(dtype).kind != "f":
        raise TypeError(
            f"{name}: expected a real floating dtype (float32 or float64), "
            f"got {np.dtype(dtype)}; convert with .astype(numpy.float64)"
        )
    shape = _shape_of(x)
    if ndim is not None and len(shape) != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {shape}")
    if len(shape) < min_ndim:
        raise ValueError(
            f"{name}: expected at least {min_ndim} dimension(s), got shape {shape}"
        )
    if 0 in shape:
        raise ValueError(f"{name}: expected a non-empty array, got shape {shape}")


def check_int(value, name: str, least: int = 1) -> int:
    """``value`` as a Python int, after checking it is an integer (not a bool) ``>= least``.

    Raises ``TypeError`` for a non-integer and ``ValueError`` for one below
    ``least``, each naming the argument ``name``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int >= {least}, got {type(value).__name__}")
    if value < least:
        raise ValueError(f"{name}: expected an int >= {least}, got {value}")
    return int(value)


def check_real(value, name: str, *, positive: bool = False, nonnegative: bool = False,
               allow_none: bool = False, finite: bool = True) -> float | None:
    """``value`` as a Python float, after checking it is a real number (not a bool).

    Parameters
    ----------
    value : object
        The argument to check.
    name : str
        Its name, used in the message.
    positive : bool
        Also require ``value > 0``.
    nonnegative : bool
        Also require ``value >= 0``.
    allow_none : bool
        Let ``None`` through (returned as ``None``).
    finite : bool
        Also require a finite value (no inf, no NaN).

    Raises ``TypeError`` for a non-number and ``ValueError`` for a value out of
    range, each naming the argument ``name``; the one-line message says what
    was expected. The integer counterpart is :func:`check_int`.
    """
    if value is None and allow_none:
        return None
    want = ("a positive" if positive else "a non-negative" if nonnegative else "a")
    want += (" finite" if finite else "") + " real number"
    want += " or None" if allow_none else ""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"{name}: expected {want}, got {type(value).__name__}")
    v = float(value)
    if (finite and not math.isfinite(v)) or (positive and not v > 0) or (nonnegative and not v >= 0) \
            or math.isnan(v):
        raise ValueError(f"{name}: expected {want}, got {value!r}")
    return v


def check_axis(axis, ndim: int, name: str = "axis") -> int:
    """Normalise ``axis`` to ``0 <= axis < ndim`` or raise a clear error."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: {axis} is out of range for an array of {ndim} dimension(s)")
    return int(axis) % ndim


def check_mask(mask, shape, name: str = "mask"):
    """Raise a clear error unless ``mask`` is a boolean array broadcastable to ``shape``.

    ``True`` means *keep*. Returns the mask unchanged (or ``None``).
    """
    if mask is None:
        return None
    dtype = getattr(mask, "dtype", None)
    if dtype is None or not (isinstance(mask, np.ndarray) or _is_cupy_array(mask)):
        raise TypeError(
            f"{name}: expected a boolean array (True = keep), got {type(mask).__name__}"
        )
    if np.dtype(dtype) != np.bool_:
        raise TypeError(f"{name}: expected dtype bool (True = keep), got {np.dtype(dtype)}")
    try:
        out = np.broadcast_shapes(mask.shape, tuple(shape))
    except ValueError:
        out = None
    if out != tuple(shape):
        raise ValueError(
            f"{name}: shape {tuple(mask.shape)} does not broadcast to the scores' "
            f"shape {tuple(shape)}"
        )
    return mask


def sum_to(xp, x, shape):
    """Sum ``x`` over the axes that broadcasting added or stretched, leaving ``shape``.

    The adjoint of broadcasting ``shape`` up to ``x.shape``: where a forward
    pass broadcast a parameter (or a batch-broadcast query or key) over batch
    dimensions, its VJP sums the upstream gradient over them.
    """
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    if lead > 0:
        x = xp.sum(x, axis=tuple(range(lead)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    if stretched:
        x = xp.sum(x, axis=stretched, keepdims=True)
    return xp.asarray(x).reshape(shape)


def stop_gradient(x):
    """The value of ``x`` with autograd's tracing removed (identity otherwise).

    Used for the log-sum-exp shift ``max(ell)``: the shift cancels in the
    softmax, so it carries no gradient, and autograd need not trace it.
    """
    from autograd.tracer import getval  # noqa: PLC0415

    return getval(x)


def dtype_of(x):
    """The dtype of ``x``, looking through autograd's tracing box."""
    return np.dtype(_dtype_of(x))


def sigmoid(xp, x):
    """The logistic function ``1 / (1 + e^-x)`` on the array module ``xp``.

    Evaluated as ``1 / (1 + e^-x)`` for ``x >= 0`` and ``e^x / (1 + e^x)``
    for ``x < 0``, each at a safe argument, so it never overflows and keeps
    its relative precision in the tail ``x << 0`` (where the shorter
    ``0.5 (1 + tanh(x/2))`` rounds to 0 below about x = -37 in float64, and
    loses digits well before), and autograd differentiates it correctly at 0.
    """
    pos = x >= 0
    e = xp.exp(-xp.where(pos, x, -x))  # e^{-|x|} in (0, 1], no overflow
    return xp.where(pos, 1.0, e) / (1.0 + e)
