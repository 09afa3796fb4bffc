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
``jax.custom_vjp``, written in JAX's operations, so JAX differentiates it in
turn: ``jax.hessian``, ``jacrev`` of ``jacrev`` and ``check_grads(...,
order=2, modes=("rev",))`` give the exact second derivative
(``docs/frameworks.md``, "Second derivatives"). Forward mode of the
function itself (``jax.jvp``, ``jax.jacfwd``) is refused in one line
(:data:`FORWARD_MODE`). float64 needs ``jax.config.update("jax_enable_x64",
True)``, as everywhere in JAX; float16 and bfloat16 are computed in float32.
Inputs are taken as JAX arrays (``jax.numpy.asarray``, as every
``jax.numpy`` function takes them). An activation from
:func:`refattn.define_activation` runs on JAX's arrays when its functions
take the array namespace (``g(s, xp)``), under ``jit`` and ``vmap`` too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .core.backend import is_jax
from .frameworks import AttentionOp, check_score, join, one_dtype, resolve_activation, split, weights_function

__all__ = ["activation", "attention", "FORWARD_MODE"]

#: What forward-mode differentiation of these functions meets, in one line.
FORWARD_MODE = ("refattn.jax: forward-mode differentiation (jax.jvp, jax.jacfwd, check_grads with mode 'fwd') of "
                "refattn's functions is not provided (they are jax.custom_vjp functions); use reverse mode: "
                "jax.grad, jax.vjp, jax.jacrev, check_grads(..., modes=('rev',)); jax.hessian, forward over "
                "reverse, works")

#: The dtypes computed in float32 and rounded back.
HALF = (jnp.float16, jnp.bfloat16)


class Static:
    """What a cache holds besides arrays (its skeleton), carried to the backward pass as a pytree without
    leaves."""

    def __init__(self, value):
        self.value = value


jax.tree_util.register_pytree_node(Static, lambda s: ((), s.value), lambda value, _: Static(value))


def custom(op):
    """``f(*inputs)``: ``op.forward``'s output, with ``op.backward`` (core's VJP) as its ``custom_vjp``."""

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


def run(op, *inputs):
    """``op``'s output from its inputs (JAX arrays or ``None``) through :func:`custom`; float16 and bfloat16
    are computed in float32 and the output rounded back (``astype`` carries the gradients back and forth);
    forward mode is refused with :data:`FORWARD_MODE`."""
    inputs = tuple(None if x is None else jnp.asarray(x) for x in inputs)
    dtype = next((x.dtype for x in inputs if x is not None and jnp.issubdtype(x.dtype, jnp.floating)), None)
    if dtype in HALF:
        inputs = tuple(x.astype(jnp.float32) if x is not None and x.dtype == dtype else x for x in inputs)
    try:
        out = custom(op)(*inputs)
    except TypeError as exc:
        if "forward-mode autodiff (jvp) to a custom_vjp" in str(exc):
            raise TypeError(FORWARD_MODE) from None
        raise
    return out.astype(dtype) if dtype in HALF else out


def activation(name_or_activation):
    """``phi(s, dim=-1, mask=None)``: the weights of an activation, with core's VJP (Eq. 01.R4).

    Parameters
    ----------
    name_or_activation : str or Activation, as :func:`refattn.frameworks.resolve_activation` reads it (one
        from ``define_activation`` written as ``g(s, xp)``)

    Returns
    -------
    phi : function of ``s`` (float32, or float64 with x64 enabled; float16 and bfloat16 computed in float32),
        ``dim`` (the axis normalised over; a Python int) and ``mask`` (boolean, broadcastable to ``s``, True
        keeps); ``phi.activation`` is the activation object
    """
    return weights_function(name_or_activation, run, "JAX")


def attention(q, k, v, *, score="scaled_dot", activation="softmax", mask=None, causal=False, params=None,
              score_options=None):
    """Attention ``phi(score(q, k)) v`` (TanhMax Eqs. 1-2) with core's forward and VJP.

    The arguments and shapes are those of :func:`refattn.core.attention.attention`, with JAX arrays for
    ``q`` (``None`` for the ``"global"`` score), ``k``, ``v``, ``mask`` and the score's ``params`` (whose
    gradients flow too), all of one floating dtype; it returns the output alone, ``(..., n_q, d_v)``, or
    ``(..., 1, d_v)`` for a per-token score.
    """
    sc = check_score(score, score_options)
    act = resolve_activation(activation, "activation", "JAX")
    params = {} if params is None else dict(params)
    q, k, v = (None if x is None else jnp.asarray(x) for x in (q, k, v))
    one_dtype({"q": q, "k": k, "v": v, **{f"params[{n!r}]": jnp.asarray(p) for n, p in params.items()}},
              ".astype(jax.numpy.{})")
    return run(AttentionOp(sc, act, causal, tuple(params)), q, k, v, mask, *params.values())
