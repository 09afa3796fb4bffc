"""Which array module runs the code: NumPy, CuPy, autograd's NumPy, PyTorch or JAX.

Every formula in ``refattn/core`` is written once against a namespace ``xp``
chosen from its inputs by :func:`array_module`: NumPy arrays run on NumPy,
CuPy arrays on the GPU (and stay there), values autograd is tracing on
``autograd.numpy``, so that the autograd check differentiates exactly the code
that runs (``derivations/01-reweighted-softmax.md``, section 5), and PyTorch
tensors and JAX arrays on their own library through the Python array API
standard (``array-api-compat``, which the ``torch`` and ``jax`` extras
install): the same lines compute the forward and the hand-derived backward
on all five, and :mod:`refattn.torch` and :mod:`refattn.jax` wrap them in each
framework's custom-gradient mechanism.

So formulas assign nothing in place (autograd cannot trace it), and nothing
moves between host and device behind your back: mixing NumPy arrays with
CuPy arrays, PyTorch tensors or JAX arrays is a ``TypeError``, and
:func:`to_numpy` is the one way back to the host. Where the standard lacks
what a formula uses, this module supplies it, once: PyTorch's namespace here
makes new arrays (a causal mask, cosFormer's positions) on the inputs'
device and reads NumPy dtypes (:func:`dtype_of` describes every array's dtype
as NumPy's).
"""

from __future__ import annotations

import functools
import sys

import numpy as np
import autograd.numpy as anp
from autograd.tracer import Box, getval

__all__ = ["array_module", "cupy_available", "cupy_module", "is_cupy", "is_torch", "is_jax", "is_array",
           "is_traced", "to_numpy", "stop_gradient", "shape_of", "dtype_of", "sum_to", "quiet"]

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


def is_torch(x) -> bool:
    """True for a PyTorch tensor (read off the type's module: PyTorch is not imported)."""
    return type(x).__module__.startswith("torch")


def is_compiled_by_torch(x) -> bool:
    """True for a tensor ``torch.compile`` is tracing (a fake tensor): its values are not known now."""
    torch = sys.modules.get("torch") if is_torch(x) else None
    return torch is not None and torch.compiler.is_compiling()


def is_jax(x) -> bool:
    """True for a JAX array, or a value JAX is tracing (``jit``, ``vmap``, ``grad``)."""
    return type(x).__module__.startswith(("jax", "jaxlib"))


def is_traced(x) -> bool:
    """True when ``x`` is a value autograd is tracing."""
    return isinstance(x, Box)


def is_array(x) -> bool:
    """True for an array refattn computes on: NumPy (or a NumPy scalar), CuPy, traced by autograd,
    PyTorch or JAX."""
    return isinstance(x, (np.ndarray, np.generic, Box)) or is_cupy(x) or is_torch(x) or is_jax(x)


def array_module(*arrays):
    """The array namespace for a call with these arguments (``None`` entries ignored).

    ``autograd.numpy`` if any argument is traced by autograd, ``cupy`` for CuPy
    arrays, PyTorch's or JAX's array API namespace for their arrays, ``numpy``
    otherwise; ``TypeError`` for arrays of two libraries (CuPy, PyTorch or JAX
    mixed with NumPy or autograd, or with one another).
    """
    kinds = set()
    for a in arrays:
        if a is None or isinstance(a, np.ndarray):
            kinds.add("numpy" if a is not None else None)
        elif isinstance(a, Box):
            kinds.add("autograd")
        elif is_cupy(a):
            kinds.add("cupy")
        elif is_torch(a):
            kinds.add("torch")
        elif is_jax(a):
            kinds.add("jax")
    kinds.discard(None)
    device = kinds & {"cupy", "torch", "jax"}
    if device and len(kinds) > 1:
        names = {"numpy": "NumPy", "autograd": "autograd (host)", "cupy": "CuPy (GPU)", "torch": "PyTorch",
                 "jax": "JAX"}
        raise TypeError(f"arrays: got {' and '.join(names[k] for k in sorted(kinds))} arrays in one call; "
                        f"convert them to one library explicitly (cupy.asarray, torch.as_tensor, jax.numpy.asarray "
                        f"or refattn.core.backend.to_numpy)")
    if "autograd" in kinds:
        return anp
    if "cupy" in kinds:
        return cupy_module() or __import__("cupy")
    if "torch" in kinds:
        return _torch_namespace(next(a.device for a in arrays if is_torch(a)))
    if "jax" in kinds:
        return _array_api_compat().array_namespace(next(a for a in arrays if is_jax(a)))
    return np


def _array_api_compat():
    try:
        import array_api_compat  # noqa: PLC0415  (the torch and jax extras)
    except ImportError:
        raise ImportError("array-api-compat: refattn runs on PyTorch tensors and JAX arrays through it; "
                          "install it with pip install 'refattn[torch]' or 'refattn[jax]'") from None
    return array_api_compat


@functools.lru_cache(maxsize=None)
def _torch_namespace(device):
    """``array_api_compat``'s PyTorch namespace, with the two things the formulas need that it lacks:
    new arrays (``ones``, ``zeros``, ``arange``, ``asarray``) made on ``device`` (a causal mask
    is made on the GPU for GPU tensors), and ``dtype=`` given as a NumPy dtype (from :func:`dtype_of`)."""
    import torch  # noqa: PLC0415  (only reached with a tensor in hand)

    xp = _array_api_compat().array_namespace(torch.empty(0))

    def made_here(f):
        @functools.wraps(f)
        def made(*args, dtype=None, device=device, **kwargs):
            return f(*args, dtype=_torch_dtype(torch, dtype), device=device, **kwargs)
        return made

    return _Namespace(xp, device, made_here)


class _Namespace:
    """A library's array namespace with some of its functions replaced (see :func:`_torch_namespace`)."""

    def __init__(self, xp, device, made_here):
        self.__name__ = xp.__name__
        self._xp = xp
        self.device = device
        for n in ("ones", "zeros", "full", "arange", "asarray"):
            setattr(self, n, made_here(getattr(xp, n)))

    def __getattr__(self, name):
        return getattr(self._xp, name)

    def __repr__(self):
        return f"<array namespace {self.__name__} on {self.device}>"


def _torch_dtype(torch, dtype):
    """PyTorch's dtype for ``dtype`` (a NumPy dtype or type, ``bool``, a PyTorch dtype, or ``None``)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype is bool:
        return torch.bool
    return getattr(torch, np.dtype(dtype).name)


def to_numpy(x):
    """A host ``numpy.ndarray`` of ``x`` (a copy from the GPU; no-op for NumPy)."""
    if is_cupy(x):
        return x.get()
    if isinstance(x, Box):
        raise TypeError("x: cannot copy a value autograd is tracing to the host")
    if is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def stop_gradient(x):
    """The value of ``x`` without its gradient (autograd's, PyTorch's or JAX's tracing): the log-sum-exp
    shift, which cancels, carries none."""
    if is_torch(x):
        return x.detach()
    if is_jax(x):
        import jax  # noqa: PLC0415  (only reached with a JAX array in hand)

        return jax.lax.stop_gradient(x)
    return getval(x)


def shape_of(x) -> tuple:
    """The shape of ``x``, looking through autograd's tracing."""
    return tuple(np.shape(getval(x)))


def dtype_of(x):
    """The dtype of ``x`` as NumPy's, looking through autograd's tracing (PyTorch's ``torch.float32`` is
    ``numpy.float32``)."""
    if is_torch(x):
        name = str(x.dtype).removeprefix("torch.")
        try:
            return np.dtype(name)
        except TypeError:
            raise TypeError(f"dtype: PyTorch's {x.dtype} has no NumPy equivalent; refattn computes in float32 "
                            f"or float64") from None
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
