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
of the forward; a second derivative through it is refused
(``once_differentiable``), never silently wrong. Tensors stay on their
device; float32 and float64.

An activation from :func:`refattn.define_activation` runs its
``autograd.numpy`` functions on NumPy: CPU tensors are handed to it as NumPy
arrays sharing their memory; a GPU tensor is refused with one line.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from .core.backend import is_torch
from .frameworks import AttentionOp, check_score, join, resolve_activation, split, weights_function

__all__ = ["activation", "attention", "Activation", "Attention"]


class CoreFunction(torch.autograd.Function):
    """``forward(op, *inputs)`` is ``op.forward`` (core's forward), ``backward`` is ``op.backward`` (core's
    hand-derived VJP); ``op`` is a :class:`refattn.frameworks.ActivationOp` or ``AttentionOp``."""

    @staticmethod
    def forward(ctx, op, *inputs):
        ctx.op = op
        if op.on_host:  # define_activation's autograd.numpy functions: NumPy on the CPU
            out, ctx.host_cache = op.forward(*(_host(x) for x in inputs))
            return torch.from_numpy(out)
        out, cache = op.forward(*inputs)
        tensors, ctx.skeleton = split(cache, is_torch)
        ctx.save_for_backward(*tensors)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        op = ctx.op
        if op.on_host:
            grads = op.backward(_host(grad_out), ctx.host_cache)
            return (None,) + tuple(None if g is None else torch.from_numpy(np.asarray(g)) for g in grads)
        return (None,) + tuple(op.backward(grad_out, join(ctx.skeleton, ctx.saved_tensors)))


def _host(x):
    """A CPU tensor as a NumPy array sharing its memory (``None`` stays ``None``)."""
    if x is None:
        return None
    if x.device.type != "cpu":
        raise TypeError(f"inputs: an activation from define_activation runs its autograd.numpy functions on "
                        f"the CPU only, got a tensor on {x.device}; move it with .cpu()")
    return x.detach().numpy()


def _tensor(x, name):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__} (refattn.activation and "
                        f"refattn.attention take NumPy arrays)")
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
    name_or_activation : str or Activation, as :func:`refattn.frameworks.resolve_activation` reads it

    Returns
    -------
    phi : function of ``s`` (a float32 or float64 tensor), ``dim`` (the axis normalised over) and ``mask``
        (a boolean tensor broadcastable to ``s``, True keeps; a NumPy mask is copied to ``s``'s device);
        ``phi.activation`` is the activation object
    """
    def run(op, s, mask):
        s = _tensor(s, "s")
        return CoreFunction.apply(op, s, _mask(mask, s))

    return weights_function(name_or_activation, run)


def attention(q, k, v, *, score="scaled_dot", activation="softmax", mask=None, causal=False, params=None,
              score_options=None):
    """Attention ``phi(score(q, k)) v`` (TanhMax Eqs. 1-2) with core's forward and gradients.

    The arguments and shapes are those of :func:`refattn.core.attention.attention`, with tensors for
    ``q`` (``None`` for the ``"global"`` score), ``k``, ``v``, ``mask`` and the score's ``params`` (whose
    gradients flow too); it returns the output alone, ``(..., n_q, d_v)``, or ``(..., 1, d_v)`` for a
    per-token score.
    """
    k, v = _tensor(k, "k"), _tensor(v, "v")
    if q is not None:
        q = _tensor(q, "q")
    sc = check_score(score, score_options)
    act = resolve_activation(activation, "activation")
    params = {} if params is None else dict(params)
    op = AttentionOp(sc, act, causal, tuple(params))
    return CoreFunction.apply(op, q, k, v, _mask(mask, k), *params.values())


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
    See :func:`attention`.
    """

    def __init__(self, score="scaled_dot", activation="softmax", *, causal=False, d=None, sizes=None, seed=0,
                 dtype=None, score_options=None):
        super().__init__()
        self.score = check_score(score, score_options)
        self.activation = resolve_activation(activation, "activation")
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

    def forward(self, q, k, v, mask=None):
        return attention(q, k, v, score=self.score, activation=self.activation, mask=mask, causal=self.causal,
                         params=dict(self.params))

    def extra_repr(self):
        return f"score={self.score!r}, activation={self.activation.name!r}, causal={self.causal}"
