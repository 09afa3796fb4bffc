"""Layer normalisation, fast: :func:`refattn.training.layers.layer_norm` and its VJP with row sums as products.

The reference (``derivations/21-layers.md``, section 3) takes the means over
the last axis with ``mean(axis=-1)``. NumPy reduces a short last axis (the NT
model's ``d = 16``) one row at a time, about seven times slower than the same
sums as one matrix-vector product ``x @ 1``, which BLAS runs over all rows at
once. These functions are the reference's formulas with every row sum
written that way; they return the reference's numbers up to rounding
(``tests/test_fast.py::test_fast_layer_norm_matches_reference``). Values that
autograd traces go to the reference unchanged.
"""

from __future__ import annotations

from ..training import layers as reference
from ..core.backend import array_module, check_float_array, check_real, is_traced

__all__ = ["layer_norm", "layer_norm_vjp"]


def _rowmean(xp, x):
    """``mean(x, axis=-1, keepdims=True)`` as one matrix-vector product, ``(..., 1)``."""
    return (x @ xp.ones((x.shape[-1], 1), dtype=x.dtype)) / x.shape[-1]


def _moments(x, eps):
    """``(z, r)`` of :func:`refattn.training.layers._moments`: ``z = (x - mean x) r``, ``r = 1 / sqrt(var x + eps)``."""
    xp = array_module(x)
    c = x - _rowmean(xp, x)  # (..., d) centred
    r = 1.0 / xp.sqrt(_rowmean(xp, c * c) + eps)  # (..., 1)
    return c * r, r


def layer_norm(x, eps=1e-5):
    """:func:`refattn.training.layers.layer_norm`, fast: ``LN(x) = (x - mu) / sqrt(sigma^2 + eps)`` over the last axis."""
    if is_traced(x):
        return reference.layer_norm(x, eps)
    check_float_array(x, "x")
    return _moments(x, check_real(eps, "eps", positive=True))[0]


def layer_norm_vjp(x, grad_z, eps=1e-5):
    """:func:`refattn.training.layers.layer_norm_vjp`, fast: ``dx = r (u - mean u - z mean(u z))`` (Eqs. 21.N5-21.N6)."""
    if is_traced(x) or is_traced(grad_z):
        return reference.layer_norm_vjp(x, grad_z, eps)
    check_float_array(x, "x")
    reference._check_grad(grad_z, "grad_z", reference._shape(x))
    z, r = _moments(x, check_real(eps, "eps", positive=True))  # (..., d), (..., 1)
    xp = array_module(x, grad_z)
    return r * (grad_z - _rowmean(xp, grad_z) - z * _rowmean(xp, grad_z * z))  # (..., d)
