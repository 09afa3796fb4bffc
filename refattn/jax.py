"""The verified activations and attention in JAX: core's forward and hand-derived backward as a
``jax.custom_vjp`` (the ``jax`` extra: ``pip install 'refattn[jax]'``).

    import jax, jax.numpy as jnp, refattn.jax as rj

    phi = rj.activation("tanhmax")                       # or an activation from refattn.define_activation
    w = phi(s, dim=-1, mask=None)                        # the weights, (..., n) like s
    y = rj.attention(q, k, v, score="scaled_dot", activation="signexp", causal=True)   # (..., n_q, d_v)
    jax.jit(jax.vmap(jax.grad(lambda s: phi(s).sum() ** 2)))(batch)                   # jit, vmap and grad

The forward is :meth:`refattn.core.activations.Activation.forward` (Eq. 01.R1)
or :func:`refattn.core.attention.attention`, traced on JAX's own arrays
through the array API standard (:mod:`refattn.core.backend`): the same lines
that run on NumPy, so every score stays stable for every finite input. The
reverse-mode gradient is core's hand-derived VJP
(:meth:`~refattn.core.activations.Activation.backward`, Eq. 01.R4, and
:func:`~refattn.core.attention.attention_backward`) through
``jax.custom_vjp``; forward mode (``jax.jvp``, ``jax.jacfwd``) is what
``custom_vjp`` refuses. float64 needs ``jax.config.update("jax_enable_x64",
True)``, as everywhere in JAX. Inputs are taken as JAX arrays
(``jax.numpy.asarray``, as every ``jax.numpy`` function takes them).

An activation from :func:`refattn.define_activation` runs its
``autograd.numpy`` functions on NumPy: through ``jax.pure_callback`` on the
host (under ``jit`` and ``vmap`` too), its gradient likewise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .core.backend import is_jax
from .frameworks import AttentionOp, check_score, join, resolve_activation, split, weights_function

__all__ = ["activation", "attention"]


class Static:
    """What a cache holds besides arrays (its skeleton), carried to the backward pass as a pytree without
    leaves."""

    def __init__(self, value):
        self.value = value


jax.tree_util.register_pytree_node(Static, lambda s: ((), s.value), lambda value, _: Static(value))


def custom(op):
    """``f(*inputs)``: ``op.forward``'s output, with ``op.backward`` (core's VJP) as its ``custom_vjp``."""
    if op.on_host:
        return _on_host(op)

    @jax.custom_vjp
    def f(*inputs):
        return op.forward(*inputs)[0]

    def forward(*inputs):
        out, cache = op.forward(*inputs)
        arrays, skeleton = split(cache, is_jax)
        return out, (arrays, Static(skeleton))

    def backward(residuals, grad_out):
        arrays, skeleton = residuals
        return tuple(op.backward(jnp.asarray(grad_out), join(skeleton.value, arrays)))  # a NumPy cotangent too

    f.defvjp(forward, backward)
    return f


def _on_host(op):
    """As :func:`custom`, for an activation whose functions run on NumPy only: both passes call back to the
    host (``jax.pure_callback``, one example at a time under ``vmap``)."""

    def host_forward(*inputs):
        return np.asarray(op.forward(*_numpy(inputs))[0])

    def host_backward(grad_out, *inputs):
        inputs = _numpy(inputs)
        grads = op.backward(np.asarray(grad_out), op.forward(*inputs)[1])
        return tuple(None if g is None else np.asarray(g, dtype=x.dtype) for g, x in zip(grads, inputs))

    @jax.custom_vjp
    def f(*inputs):
        like = next(x for x in inputs if x is not None and jnp.issubdtype(x.dtype, jnp.floating))
        shape = jax.ShapeDtypeStruct(op.out_shape(*inputs), like.dtype)
        return jax.pure_callback(host_forward, shape, *inputs, vmap_method="sequential")

    def forward(*inputs):
        return f(*inputs), inputs

    def backward(inputs, grad_out):
        shapes = tuple(None if i == op.mask_index or x is None else jax.ShapeDtypeStruct(x.shape, x.dtype)
                       for i, x in enumerate(inputs))  # a gradient for each input but the mask
        return jax.pure_callback(host_backward, shapes, grad_out, *inputs, vmap_method="sequential")

    f.defvjp(forward, backward)
    return f


def _numpy(arrays):
    """What a callback is given, as NumPy arrays on the host."""
    return tuple(None if x is None else np.asarray(x) for x in arrays)


def _array(x):
    return None if x is None else jnp.asarray(x)


def activation(name_or_activation):
    """``phi(s, dim=-1, mask=None)``: the weights of an activation, with core's VJP (Eq. 01.R4).

    Parameters
    ----------
    name_or_activation : str or Activation, as :func:`refattn.frameworks.resolve_activation` reads it

    Returns
    -------
    phi : function of ``s`` (float32, or float64 with x64 enabled), ``dim`` (the axis normalised over; a
        Python int) and ``mask`` (boolean, broadcastable to ``s``, True keeps); ``phi.activation`` is the
        activation object
    """
    return weights_function(name_or_activation, lambda op, s, mask: custom(op)(_array(s), _array(mask)))


def attention(q, k, v, *, score="scaled_dot", activation="softmax", mask=None, causal=False, params=None,
              score_options=None):
    """Attention ``phi(score(q, k)) v`` (TanhMax Eqs. 1-2) with core's forward and VJP.

    The arguments and shapes are those of :func:`refattn.core.attention.attention`, with JAX arrays for
    ``q`` (``None`` for the ``"global"`` score), ``k``, ``v``, ``mask`` and the score's ``params`` (whose
    gradients flow too); it returns the output alone, ``(..., n_q, d_v)``, or ``(..., 1, d_v)`` for a
    per-token score.
    """
    sc = check_score(score, score_options)
    act = resolve_activation(activation, "activation")
    params = {} if params is None else dict(params)
    op = AttentionOp(sc, act, causal, tuple(params))
    return custom(op)(_array(q), _array(k), _array(v), _array(mask), *(_array(p) for p in params.values()))
