"""The verified activations and attention in PyTorch: core's forward and hand-derived backward in a
``torch.autograd.Function`` (the ``torch`` extra: ``pip install 'refattn[torch]'``).

    import torch, refattn.torch as rt

    phi = rt.activation("tanhmax")                       # or an activation from refattn.define_activation
    w = phi(s, dim=-1, mask=None)                        # the weights, (..., n) like s
    y = rt.attention(q, k, v, score="scaled_dot", activation="signexp", causal=True)   # (..., n_q, d_v)
    layer = rt.Attention(score="neural", activation="expressive", d=64)             # an nn.Module

The forward is :meth:`refattn.core.activations.Activation.forward` (Eq. 01.R1)
or :func:`refattn.core.attention.attention`, run on the tensors themselves
through the array API standard (:mod:`refattn.core.backend`): the same lines
that run on NumPy, so every score stays stable for every finite input (scores
of +-1000 give finite weights, where the papers' ``sinh / sum cosh``
overflows; notebook 15). The backward is core's hand-derived VJP
(:meth:`~refattn.core.activations.Activation.backward`, Eq. 01.R4, and
:func:`~refattn.core.attention.attention_backward`), not PyTorch's autograd
of the forward; it is itself written in PyTorch's operations, so second
derivatives (``create_graph=True``, Hessians, ``gradgradcheck``) are the
exact derivative of that VJP (``docs/frameworks.md``, "Second
derivatives"). ``torch.func``'s ``grad``, ``vjp``, ``jacrev`` and ``vmap`` work;
forward mode is refused in one line (:data:`FORWARD_MODE`). Tensors stay on
their device; float32 and float64, float16 and bfloat16 computed in float32.
An activation from :func:`refattn.define_activation` runs natively too when
its functions take the array namespace (``g(s, xp)``). What each of
PyTorch's tools does with these functions: ``docs/frameworks.md``.
"""

from __future__ import annotations

import numpy as np
import torch

from .core.backend import is_torch
from .frameworks import HALF_NOTE, AttentionOp, check_score, join, one_dtype, resolve_activation, split, \
    weights_function

__all__ = ["activation", "attention", "Activation", "Attention", "CoreFunction", "FORWARD_MODE"]

#: What forward-mode differentiation meets, in one line.
FORWARD_MODE = ("refattn.torch: forward-mode differentiation (torch.func.jvp, jacfwd, torch.func.hessian, "
                "torch.autograd.forward_ad) is not provided; use reverse mode: torch.autograd.grad, torch.func.grad, "
                "vjp or jacrev, and for a Hessian jacrev(jacrev(f)) or torch.autograd.functional.hessian")

#: The dtypes computed in float32 and rounded back.
HALF = (torch.float16, torch.bfloat16)


class CoreFunction(torch.autograd.Function):
    """Core's forward and VJP as a node of PyTorch's graph: the one place where an operation of
    :mod:`refattn.frameworks` becomes PyTorch's. ``apply(op, *inputs)`` returns ``(out, *arrays)``, the
    arrays of the cache that ``op.forward`` made, as outputs without gradient, so that ``setup_context``
    saves them (:func:`run` returns ``out`` alone).

    ``backward`` is ``op.backward``, core's VJP in PyTorch's operations. Where PyTorch records the
    backward to differentiate it again (``create_graph=True``, ``torch.autograd.functional.hessian``,
    ``gradgradcheck``, ``torch.func``), the cache is made again from the saved inputs, on the graph, so
    the second derivative is the exact derivative of the VJP (``docs/frameworks.md``), never a
    detached or zero one; otherwise the forward's cache is used. ``vmap`` is PyTorch's rule made by
    running these functions under it (``generate_vmap_rule``); forward mode raises :data:`FORWARD_MODE`.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(op, *inputs):
        out, cache = op.forward(*inputs)
        arrays, op.skeleton = split(cache, is_torch)
        return (out, *(a.view_as(a) if any(a is x for x in inputs) else a for a in arrays))  # an input (the mask)
        # returned as itself could not be saved: a view of it can

    @staticmethod
    def setup_context(ctx, inputs, output):
        op, *inputs = inputs
        ctx.mark_non_differentiable(*output[1:])
        ctx.set_materialize_grads(False)  # the cache's outputs get no gradient: not even zeros made for them
        ctx.op, ctx.skeleton, ctx.n_inputs = op, op.skeleton, len(inputs)
        ctx.save_for_backward(*inputs, *output[1:])

    @staticmethod
    def backward(ctx, grad_out, *_):
        if grad_out is None:  # the output was not used: no gradient reaches any input
            return (None,) * (1 + ctx.n_inputs)
        saved = ctx.saved_tensors
        if torch.is_grad_enabled():  # this backward is being recorded, to be differentiated in turn
            cache = ctx.op.forward(*saved[:ctx.n_inputs])[1]  # so its cache depends on the inputs on the graph
        else:
            cache = join(ctx.skeleton, saved[ctx.n_inputs:])
        return (None, *ctx.op.backward(grad_out, cache))

    @staticmethod
    def jvp(ctx, *tangents):
        raise RuntimeError(FORWARD_MODE)


def run(op, *inputs):
    """``op``'s output through :class:`CoreFunction`; float16 and bfloat16 inputs are computed in float32
    and the output rounded back to their dtype (``.to`` carries the gradients back and forth)."""
    dtype = next((x.dtype for x in inputs if x is not None and x.is_floating_point()), None)
    if dtype not in HALF:
        return CoreFunction.apply(op, *inputs)[0]
    wide = (x.float() if x is not None and x.is_floating_point() else x for x in inputs)
    return CoreFunction.apply(op, *wide)[0].to(dtype)


def _tensor(x, name):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__} (refattn.activation and "
                        f"refattn.attention take NumPy arrays)")
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor (float32 or float64; {HALF_NOTE}), got "
                        f"{x.dtype}; convert with {name}.to(torch.float32)")
    return x


def _mask(mask, like):
    """A boolean mask as a tensor on ``like``'s device: a NumPy mask is copied there, explicitly."""
    if isinstance(mask, np.ndarray):
        return torch.as_tensor(mask, device=like.device)
    return mask


def activation(name_or_activation):
    """``phi(s, dim=-1, mask=None)``: the weights of an activation, with core's backward (Eq. 01.R4).

    Parameters
    ----------
    name_or_activation : str or Activation, as :func:`refattn.frameworks.resolve_activation` reads it (one
        from ``define_activation`` written as ``g(s, xp)``)

    Returns
    -------
    phi : function of ``s`` (a floating-point tensor; float16 and bfloat16 computed in float32), ``dim`` (the
        axis normalised over) and ``mask`` (a boolean tensor broadcastable to ``s``, True keeps; a NumPy mask
        is copied to ``s``'s device); ``phi.activation`` is the activation object. ``torch.compile`` puts a
        call of ``phi`` into its graph whole (``torch.compiler.allow_in_graph``), so ``fullgraph=True`` works.
    """
    def apply(op, s, mask):
        s = _tensor(s, "s")
        return run(op, s, _mask(mask, s))

    return torch.compiler.allow_in_graph(weights_function(name_or_activation, apply, "PyTorch"))


def attention(q, k, v, *, score="scaled_dot", activation="softmax", mask=None, causal=False, params=None,
              score_options=None):
    """Attention ``phi(score(q, k)) v`` (TanhMax Eqs. 1-2) with core's forward and gradients.

    The arguments and shapes are those of :func:`refattn.core.attention.attention`, with tensors for
    ``q`` (``None`` for the ``"global"`` score), ``k``, ``v``, ``mask`` and the score's ``params`` (whose
    gradients flow too), all of one floating dtype; it returns the output alone, ``(..., n_q, d_v)``, or
    ``(..., 1, d_v)`` for a per-token score. Under ``torch.compile`` the :class:`Attention` module
    compiles with ``fullgraph=True``; this function, which reads its options each call, with a graph break.
    """
    sc = check_score(score, score_options)
    act = resolve_activation(activation, "activation", "PyTorch")
    params = {} if params is None else dict(params)
    return Attend(AttentionOp(sc, act, causal, tuple(params)))(q, k, v, mask, *params.values())


class Attend:
    """``attend(q, k, v, mask, *params)``: an :class:`~refattn.frameworks.AttentionOp`'s output from its tensors
    (checked, then :func:`run`), registered with Dynamo as one node of a compiled graph
    (``torch.compiler.allow_in_graph``: core's Python is not traced, so ``fullgraph=True`` works)."""

    __name__ = "attend"

    def __init__(self, op):
        self.op = op
        torch.compiler.allow_in_graph(self)

    def __setstate__(self, state):  # a copy (copy.deepcopy, pickle) is registered as well
        self.__dict__.update(state)
        torch.compiler.allow_in_graph(self)

    def __call__(self, q, k, v, mask, *params):
        k, v = _tensor(k, "k"), _tensor(v, "v")
        q = None if q is None else _tensor(q, "q")
        named = {"q": q, "k": k, "v": v, **{f"params[{n!r}]": p for n, p in zip(self.op.names, params)}}
        one_dtype(named, ".to({})")
        return run(self.op, q, k, v, _mask(mask, k), *params)


class Activation(torch.nn.Module):
    """An activation as a layer: ``Activation("tanhmax", dim=-1)(s, mask=None)``; see :func:`activation`."""

    def __init__(self, name_or_activation="softmax", dim=-1):
        super().__init__()
        self.phi, self.dim = activation(name_or_activation), dim

    def forward(self, s, mask=None):
        return self.phi(s, dim=self.dim, mask=mask)

    def extra_repr(self):
        return f"{self.phi.activation.name!r}, dim={self.dim}"


class Attention(torch.nn.Module):
    """Attention as a layer: ``Attention(score, activation, causal=...)(q, k, v, mask=None)``.

    A score with parameters (``additive``, ``neural``, ``global``) needs the
    feature size ``d``; its parameters are drawn by ``Score.init_params(d,
    numpy.random.default_rng(seed), **sizes)`` and become this module's
    ``torch.nn.Parameter`` s, in ``dtype`` (default: PyTorch's default dtype).
    See :func:`attention`; ``torch.compile(fullgraph=True)`` compiles a model through it (:class:`Attend`).
    """

    def __init__(self, score="scaled_dot", activation="softmax", *, causal=False, d=None, sizes=None, seed=0,
                 dtype=None, score_options=None):
        super().__init__()
        self.score = check_score(score, score_options)
        self.activation = resolve_activation(activation, "activation", "PyTorch")
        self.causal = causal
        self.params = torch.nn.ParameterDict()
        if self.score.param_spec({}) or sizes:
            if d is None:
                raise TypeError(f"d: the score {self.score.name!r} has parameters; give the feature size d")
            dtype = torch.get_default_dtype() if dtype is None else dtype
            init = self.score.init_params(d, np.random.default_rng(seed), dtype=str(dtype).removeprefix("torch."),
                                          **(sizes or {}))
            for name, value in init.items():
                self.params[name] = torch.nn.Parameter(torch.from_numpy(value))
        self.attend = Attend(AttentionOp(self.score, self.activation, causal, tuple(self.params)))

    def forward(self, q, k, v, mask=None):
        return self.attend(q, k, v, mask, *self.params.values())

    def extra_repr(self):
        return f"score={self.score!r}, activation={self.activation.name!r}, causal={self.causal}"
