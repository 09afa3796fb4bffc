"""Which array module runs the code: NumPy, CuPy, or autograd's NumPy.

Every formula in ``refattn/core`` is written once against a namespace ``xp``
chosen from its inputs by :func:`array_module`: NumPy arrays run on NumPy,
CuPy arrays on the GPU (and stay there), and values autograd is tracing on
``autograd.numpy``, so that the autograd check differentiates exactly the code
that runs (``derivations/01-reweighted-softmax.md``, section 5).

So formulas assign nothing in place (autograd cannot trace it), and nothing
moves between host and GPU behind your back: mixing NumPy and CuPy arrays is
a ``TypeError``, and :func:`to_numpy` is the one way back to the host.
"""

from __future__ import annotations

import functools

import numpy as np
import autograd.numpy as anp
from autograd.tracer import Box, getval

__all__ = ["array_module", "cupy_available", "cupy_module", "is_cupy", "is_traced", "to_numpy",
           "stop_gradient", "shape_of", "dtype_of", "sum_to", "quiet"]

_cupy, _cupy_checked = None, False


def cupy_module():
    """CuPy, imported once, or ``None`` where it is absent or sees no CUDA device."""
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
    return cupy_module() is not None


def is_cupy(x) -> bool:
    """True for a CuPy array (read off the type's module: no CUDA context is started)."""
    return type(x).__module__.startswith("cupy")


def is_traced(x) -> bool:
    """True when ``x`` is a value autograd is tracing."""
    return isinstance(x, Box)


def array_module(*arrays):
    """The array namespace for a call with these arguments (``None`` entries ignored).

    ``autograd.numpy`` if any argument is traced by autograd, ``cupy`` for CuPy
    arrays, ``numpy`` otherwise; ``TypeError`` for CuPy mixed with host arrays.
    """
    traced = any(isinstance(a, Box) for a in arrays)
    gpu = any(is_cupy(a) for a in arrays)
    if gpu and (traced or any(isinstance(a, np.ndarray) for a in arrays)):
        raise TypeError("arrays: got CuPy (GPU) arrays mixed with NumPy or autograd (host) arrays; "
                        "move them to one device explicitly (cupy.asarray or refattn.core.backend.to_numpy)")
    if traced:
        return anp
    return (cupy_module() or __import__("cupy")) if gpu else np


def to_numpy(x):
    """A host ``numpy.ndarray`` of ``x`` (a copy from the GPU; no-op for NumPy)."""
    if is_cupy(x):
        return x.get()
    if isinstance(x, Box):
        raise TypeError("x: cannot copy a value autograd is tracing to the host")
    return np.asarray(x)


def stop_gradient(x):
    """The value of ``x`` without autograd's tracing: the log-sum-exp shift, which cancels, carries no gradient."""
    return getval(x)


def shape_of(x) -> tuple:
    """The shape of ``x``, looking through autograd's tracing."""
    return tuple(np.shape(getval(x)))


def dtype_of(x):
    """The dtype of ``x``, looking through autograd's tracing."""
    return np.dtype(getval(x).dtype)


def sum_to(xp, x, shape):
    """Sum ``x`` over the axes broadcasting added or stretched, leaving ``shape``.

    The adjoint of broadcasting ``shape`` up to ``x.shape``: where a forward
    pass broadcast a parameter over batch axes, its VJP sums over them.
    """
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    if lead > 0:
        x = xp.sum(x, axis=tuple(range(lead)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    if stretched:
        x = xp.sum(x, axis=stretched, keepdims=True)
    return xp.asarray(x).reshape(shape)  # asarray: a sum to shape () is a 0-d array, not a scalar


def quiet(f):
    """Run ``f`` with NumPy's overflow, underflow and divide-by-zero warnings off.

    Every overflow in ``refattn/core`` lands on +-inf where the next step maps
    it to the right limit (``exp(-inf) = 0`` for a masked entry). NaN is not
    silenced: it propagates (``derivations/01-reweighted-softmax.md``, section 2).
    """

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            return f(*args, **kwargs)

    return wrapped
