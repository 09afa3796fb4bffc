"""Layer normalisation, fast: :func:`refattn.training.layers.layer_norm` and its backward with row sums as
products.

The reference (``derivations/21-layers.md``, section 3) takes the means over
the last axis with ``mean(axis=-1)``. NumPy reduces a short last axis (the NT
model's ``d = 16``) one row at a time, about seven times slower than the same
sums as one matrix-vector product ``x @ 1``, which BLAS runs over all rows at
once. These functions are the reference's formulas with every row sum
written that way; they return the reference's numbers up to rounding and its
cache (``tests/training/test_layers.py::test_fast_layer_norm_matches_the_reference``).
Values that autograd traces go to the reference unchanged.
"""

from __future__ import annotations

from ..core.backend import array_module, is_traced
from ..core.checks import check_float_array, check_grad, check_real
from . import layers as reference

__all__ = ["layer_norm", "layer_norm_backward"]


def _rowmean(xp, x):
    """``mean(x, axis=-1, keepdims=True)`` as one matrix-vector product, ``(..., 1)``."""
    return (x @ xp.ones((x.shape[-1], 1), dtype=x.dtype)) / x.shape[-1]


def layer_norm(x, eps=1e-5):
    """:func:`refattn.training.layers.layer_norm`, fast: ``LN(x) = (x - mu) / sqrt(sigma^2 + eps)`` over the last axis."""
    if is_traced(x):
        return reference.layer_norm(x, eps)
    check_float_array(x, "x")
    eps = check_real(eps, "eps", positive=True)
    xp = array_module(x)
    c = x - _rowmean(xp, x)  # (..., d) centred
    r = 1.0 / xp.sqrt(_rowmean(xp, c * c) + eps)  # (..., 1)
    z = c * r
    return z, {"layer": "layer_norm", "z": z, "r": r}


def layer_norm_backward(grad_z, cache):
    """:func:`refattn.training.layers.layer_norm_backward`, fast: ``dx = r (u - mean u - z mean(u z))`` (21.N5-21.N6)."""
    if is_traced(grad_z) or is_traced(cache.get("z") if isinstance(cache, dict) else None):
        return reference.layer_norm_backward(grad_z, cache)
    z, r = reference.cached(cache, "layer_norm", "z", "r")
    check_grad(grad_z, "grad_z", z.shape)
    xp = array_module(z, grad_z)
    return r * (grad_z - _rowmean(xp, grad_z) - z * _rowmean(xp, grad_z * z))  # (..., d)
