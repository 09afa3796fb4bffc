"""A fake GPU for the CPU test run: an array type that lives "on a device".

CuPy is not installed where the tests usually run (CI has no GPU), so the
CuPy paths of :mod:`refattn` would go untested there. This module stands in
for CuPy with NumPy doing the arithmetic, and is strict exactly where code
written against NumPy tends to break on a GPU:

* **No implicit host copies.** ``numpy.asarray(x)`` / ``numpy.array(x)`` on a
  device array raise :class:`DeviceHazard` (CuPy raises ``TypeError`` there);
  ``float(x)``, ``int(x)``, ``bool(x)``, ``x.item()`` and ``x.tolist()``
  raise too (CuPy allows them, but each one is a silent device-to-host copy
  and a synchronisation).
* **No NumPy functions on device arrays.** ``numpy.exp(x)``,
  ``numpy.where(x, ...)``, ``numpy.sum(x)`` and the like raise
  :class:`DeviceHazard`. CuPy would often dispatch these to itself, but
  refattn's rule is that array code goes through ``xp``, the namespace
  :func:`refattn.core.backend.array_module` picks, so that autograd can trace the
  same code; a NumPy call on an array argument breaks that rule on every
  backend. Metadata calls (``numpy.shape``, ``numpy.ndim``) are allowed: they
  touch no data. So are the arithmetic operators between a device array and
  a NumPy *scalar* (``numpy.float64(2) * x``), as in CuPy.
* **Conditions on the device.** ``xp.where(cond, a, b)`` needs ``cond`` to be
  a device array, as CuPy's does (it calls ``cond.astype``): a Python bool
  such as ``-inf == -inf`` raises ``TypeError``.
* **No mixing.** An operation or an ``xp`` function given both a device
  array and a NumPy array raises ``TypeError``, as CuPy does; ``xp.asarray``
  and ``xp.array`` are the explicit host-to-device copies and
  :meth:`FakeDeviceArray.get` (what :func:`refattn.core.backend.to_numpy` calls)
  the explicit way back.

:func:`install` makes :mod:`refattn.core.backend` treat :class:`FakeDeviceArray`
as a CuPy array and hand out :data:`xp` as the namespace for it, so that
every ``array_module(...)`` call in the package takes its GPU branch. Results
are computed by NumPy, so they should match NumPy's to rounding; what this
catches is code that would fail or silently copy to the host on a GPU.
"""

from __future__ import annotations

import types

import numpy as np

__all__ = ["DeviceHazard", "FakeDeviceArray", "xp", "install"]


class DeviceHazard(RuntimeError):
    """Code did something with a device array that would pull it to the host
    (or that bypasses ``xp``)."""


def _hazard(what):
    return DeviceHazard(
        f"{what} on a device array: on a GPU this fails or silently copies to the host; "
        f"write it against xp = refattn.core.backend.array_module(...) (or call "
        f"refattn.core.backend.to_numpy explicitly)"
    )


def _mixing():
    return TypeError(
        "a NumPy (host) array was mixed with a device array; CuPy raises TypeError here "
        "(move it explicitly with xp.asarray)"
    )


#: metadata-only NumPy functions: they read shape, never data
_METADATA = {np.shape: lambda a: a.shape, np.ndim: lambda a: a.ndim}

#: ufuncs that Python's operators call; reached through ``__array_ufunc__``
#: only when the other operand is a NumPy scalar (``np.float64(2) * x``)
_OPERATOR_UFUNCS = {
    np.add, np.subtract, np.multiply, np.true_divide, np.floor_divide, np.power,
    np.matmul, np.less, np.less_equal, np.greater, np.greater_equal, np.equal,
    np.not_equal, np.bitwise_and, np.bitwise_or, np.bitwise_xor,
}

#: ndarray methods that return host data
_HOST_METHODS = {"item", "tolist", "tobytes", "tofile", "dump", "dumps", "__array__"}


def _operand(x):
    """The NumPy payload of one operand of an operation with a device array."""
    if isinstance(x, FakeDeviceArray):
        return x._a
    if isinstance(x, np.ndarray):
        raise _mixing()
    if isinstance(x, (bool, int, float, complex, np.generic)):
        return x
    return NotImplemented


def _unwrap(x):
    """Recursively replace device arrays by their payload; refuse host arrays."""
    if isinstance(x, FakeDeviceArray):
        return x._a
    if isinstance(x, np.ndarray):
        raise _mixing()
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    return x


def _has_device(x):
    """Does ``x`` (an argument list, possibly nested) hold a device array?"""
    if isinstance(x, FakeDeviceArray):
        return True
    if isinstance(x, dict):
        return any(_has_device(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(_has_device(v) for v in x)
    return False


def _wrap(x, force_scalar=True):
    """Device arrays for NumPy results (CuPy returns 0-d arrays, not scalars)."""
    if isinstance(x, np.ndarray):
        return FakeDeviceArray(x)
    if isinstance(x, np.generic) and force_scalar:
        return FakeDeviceArray(np.asarray(x))
    if isinstance(x, tuple):
        return tuple(_wrap(v, force_scalar) for v in x)
    if isinstance(x, list):
        return [_wrap(v, force_scalar) for v in x]
    return x


def _binary(ufunc, reflected=False):
    def op(self, other):
        o = _operand(other)
        if o is NotImplemented:
            return NotImplemented
        return _wrap(ufunc(o, self._a) if reflected else ufunc(self._a, o))

    return op


def _inplace(ufunc):
    def op(self, other):
        o = _operand(other)
        if o is NotImplemented:
            return NotImplemented
        ufunc(self._a, o, out=self._a)
        return self

    return op


def _unary(ufunc):
    def op(self):
        return _wrap(ufunc(self._a))

    return op


def _to_scalar(kind):
    def op(self, *args):
        raise _hazard(f"{kind}()")

    return op


class FakeDeviceArray:
    """A NumPy array pretending to live on a GPU (see the module docstring)."""

    __slots__ = ("_a",)

    def __init__(self, a):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"a: expected a numpy.ndarray payload, got {type(a).__name__}")
        self._a = a

    # --- metadata -------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    T = property(lambda self: FakeDeviceArray(self._a.T))

    def __len__(self):
        return len(self._a)

    def __repr__(self):
        return f"FakeDeviceArray({self._a!r})"

    # --- the explicit way back, as cupy.ndarray.get ---------------------------
    def get(self):
        return self._a.copy()

    # --- what CuPy (or refattn's rules) forbid --------------------------------
    def __array__(self, *args, **kwargs):
        raise _hazard("numpy.asarray / numpy.array (an implicit host copy)")

    def __array_function__(self, func, types_, args, kwargs):
        if func in _METADATA:
            return _METADATA[func](*args, **kwargs)
        raise _hazard(f"numpy.{func.__name__}(...) (use xp.{func.__name__})")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        scalar_operator = (
            method == "__call__" and not kwargs and ufunc in _OPERATOR_UFUNCS
            and any(isinstance(x, np.generic) for x in inputs)
            and not any(isinstance(x, np.ndarray) for x in inputs)
        )
        if scalar_operator:  # np.float64(2) * x: Python's operator protocol lands here
            return _wrap(getattr(ufunc, method)(*(_operand(x) for x in inputs)))
        if any(isinstance(x, np.ndarray) for x in inputs):
            raise _mixing()
        raise _hazard(f"numpy.{ufunc.__name__}(...) (use xp.{ufunc.__name__})")

    __float__ = _to_scalar("float")
    __int__ = _to_scalar("int")
    __index__ = _to_scalar("operator.index")
    __complex__ = _to_scalar("complex")
    __bool__ = _to_scalar("bool")

    # --- indexing ----------------------------------------------------------------
    def __getitem__(self, key):
        return _wrap(self._a[_unwrap(key)])

    def __setitem__(self, key, value):
        v = _operand(value)
        if v is NotImplemented:
            raise TypeError(f"value: cannot store a {type(value).__name__} in a device array")
        self._a[_unwrap(key)] = v

    # --- methods: forwarded to NumPy, results stay on the device -------------------
    def __getattr__(self, name):
        # Never forward dunders: numpy.asarray looks for __array_interface__ and
        # would copy to the host through it without calling __array__.
        if name.startswith("__") or name in _HOST_METHODS:
            if name in ("item", "tolist"):
                raise _hazard(f".{name}()")
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if not callable(attr):
            return _wrap(attr, force_scalar=False)

        def method(*args, **kwargs):
            return _wrap(attr(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))

        method.__name__ = name
        return method

    # --- operators -------------------------------------------------------------------
    __add__, __radd__ = _binary(np.add), _binary(np.add, True)
    __sub__, __rsub__ = _binary(np.subtract), _binary(np.subtract, True)
    __mul__, __rmul__ = _binary(np.multiply), _binary(np.multiply, True)
    __truediv__, __rtruediv__ = _binary(np.true_divide), _binary(np.true_divide, True)
    __floordiv__, __rfloordiv__ = _binary(np.floor_divide), _binary(np.floor_divide, True)
    __pow__, __rpow__ = _binary(np.power), _binary(np.power, True)
    __matmul__, __rmatmul__ = _binary(np.matmul), _binary(np.matmul, True)
    __and__, __rand__ = _binary(np.bitwise_and), _binary(np.bitwise_and, True)
    __or__, __ror__ = _binary(np.bitwise_or), _binary(np.bitwise_or, True)
    __xor__, __rxor__ = _binary(np.bitwise_xor), _binary(np.bitwise_xor, True)
    __lt__, __le__ = _binary(np.less), _binary(np.less_equal)
    __gt__, __ge__ = _binary(np.greater), _binary(np.greater_equal)
    __eq__, __ne__ = _binary(np.equal), _binary(np.not_equal)
    __hash__ = None
    __iadd__, __isub__ = _inplace(np.add), _inplace(np.subtract)
    __imul__, __itruediv__ = _inplace(np.multiply), _inplace(np.true_divide)
    __ipow__, __iand__, __ior__ = _inplace(np.power), _inplace(np.bitwise_and), _inplace(np.bitwise_or)
    __neg__, __pos__ = _unary(np.negative), _unary(np.positive)
    __abs__, __invert__ = _unary(np.absolute), _unary(np.invert)


class _Namespace(types.ModuleType):
    """``xp`` for device arrays: NumPy's functions, taking and returning device arrays."""

    def __init__(self, name, module):
        super().__init__(name)
        self._module = module

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        attr = getattr(self._module, name)
        if isinstance(attr, types.ModuleType):
            return _Namespace(f"{self.__name__}.{name}", attr)
        if not callable(attr) or isinstance(attr, type):
            return attr  # constants (inf, pi, newaxis); scalar types (float32), usable as dtypes

        def function(*args, **kwargs):
            if name == "where" and args and not isinstance(args[0], FakeDeviceArray):
                raise TypeError(f"where: the condition must be a device array, got {type(args[0]).__name__} "
                                f"(cupy.where calls condition.astype)")
            out = kwargs.get("out")
            res = attr(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()})
            if isinstance(out, FakeDeviceArray) and res is out._a:
                return out
            return _wrap(res, force_scalar=_has_device((args, kwargs)))

        function.__name__ = name
        return function

    ndarray = FakeDeviceArray

    @staticmethod
    def asarray(a, dtype=None):
        """The explicit host-to-device copy (a no-op for a device array of that dtype)."""
        if isinstance(a, FakeDeviceArray):
            return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
        return FakeDeviceArray(np.array(a, dtype=dtype))

    @staticmethod
    def array(a, dtype=None, copy=True):
        """A copy on the device, from the host or from the device."""
        payload = a._a if isinstance(a, FakeDeviceArray) else a
        return FakeDeviceArray(np.array(payload, dtype=dtype, copy=copy))

    @staticmethod
    def asnumpy(a):
        """The explicit device-to-host copy, as ``cupy.asnumpy``."""
        return a.get() if isinstance(a, FakeDeviceArray) else np.asarray(a)


#: the namespace refattn sees for :class:`FakeDeviceArray` inputs once installed
xp = _Namespace("fake_device", np)


def install(monkeypatch):
    """Make :mod:`refattn.core.backend` treat :class:`FakeDeviceArray` as CuPy's ndarray.

    Patches the two hooks ``array_module`` consults (``is_cupy`` and
    ``cupy_module``) for the duration of one test; every entry point of the
    backend and the checks (``array_module``, ``check_float_array``,
    ``check_mask``, ``to_numpy``) goes through them.
    """
    from refattn.core import backend

    is_cupy = backend.is_cupy
    monkeypatch.setattr(backend, "is_cupy", lambda x: isinstance(x, FakeDeviceArray) or is_cupy(x))
    monkeypatch.setattr(backend, "cupy_module", lambda: xp)
    return xp
