r"""The small layers the models share, each forward with its backward right under it.

An affine map, a relu, layer normalisation without gain or bias, and two
losses, each a forward written against :func:`refattn.core.backend.array_module`
(NumPy, CuPy, or autograd's NumPy while autograd traces it), then its
hand-derived backward with one comment naming the derivative above the line
that applies it (micrograd's layout). ``y, cache = layer(x, ...)``,
``grads = layer_backward(grad_y, cache)``: the upstream gradient first, the
gradients in the order of the inputs. ``derivations/21-layers.md`` derives
every VJP; ``tests/training/test_layers.py`` checks each one three ways.

========================= ============================================= ============= =============
layer                     forward                                       forward       VJP
========================= ============================================= ============= =============
linear                    y = x W^T + b                                 21.L0         21.L1-21.L3
relu_layer                y = max(x, 0)                                 21.R0         21.R1
layer_norm                z = (x - mean x) / sqrt(var x + eps)          21.N1-21.N4   21.N5-21.N6
softmax_cross_entropy     L = mean_t [logsumexp(y_t) - y_t[target_t]]   21.C0         21.C1
sigmoid_cross_entropy     L = mean_t [softplus(a_t) - l_t a_t]          21.C2         21.C3
========================= ============================================= ============= =============

The seed axis: every parameter has a leading axis ``S`` (one model per seed),
and slice ``s`` of the data meets slice ``s`` of the parameters only.
:func:`linear` reads it off ``W (S, o, i)``; :func:`relu_layer` and
:func:`layer_norm` act entry by entry and row by row; the losses take the mean
per seed with ``seed_axis=True``.

The cache holds the inputs by reference, not copies (the models own every
array they pass): changing an input in place between a layer's
forward and its backward is undefined.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.backend import array_module, dtype_of, shape_of, stop_gradient

from ..core.checks import check_float_array, check_grad, check_real

from ..core.activations import sigmoid

__all__ = [
    "linear",
    "linear_backward",
    "relu_layer",
    "relu_layer_backward",
    "layer_norm",
    "layer_norm_backward",
    "softmax_cross_entropy",
    "softmax_cross_entropy_backward",
    "sigmoid_cross_entropy",
    "sigmoid_cross_entropy_backward",
    "cached",
]


def cached(cache, layer, *names):
    """The entries ``names`` of a cache from the forward of ``layer``, or a clear error."""
    if not isinstance(cache, dict) or cache.get("layer") != layer:
        raise TypeError(f"cache: expected the cache returned by {layer}, got {type(cache).__name__}")
    return tuple(cache[n] for n in names)


# --------------------------------------------------------------------------
# linear: y = x W^T + b
# --------------------------------------------------------------------------


def _check_linear(x, W, b):
    """Validate ``linear``'s arguments; return ``(lead, o, i)`` with ``lead = (S,)`` or ``()``."""
    check_float_array(W, "W", min_ndim=2)
    Ws = shape_of(W)
    if len(Ws) > 3:
        raise ValueError(f"W: expected shape (o, i) or (S, o, i) with a leading seed axis, got {Ws}")
    lead, (o, i) = Ws[:-2], Ws[-2:]
    check_float_array(x, "x", min_ndim=1 + len(lead))
    xs = shape_of(x)
    if xs[-1] != i:
        raise ValueError(f"x: its last axis has {xs[-1]} features, but W {Ws} takes i = {i} (y = x W^T + b)")
    if xs[:len(lead)] != lead:
        raise ValueError(f"x: expected a leading seed axis of size S = {lead[0]} (W has shape {Ws}), "
                         f"got shape {xs}")
    if b is not None:
        check_float_array(b, "b", min_ndim=1)
        if shape_of(b) != lead + (o,):
            raise ValueError(f"b: expected shape {lead + (o,)} to match W {Ws}, got {shape_of(b)}")
    return lead, o, i


def linear(x, W, b=None):
    """Affine map over the last axis, ``y = x W^T + b`` (21.L0; PyTorch's ``nn.Linear`` layout), and its cache.

    ``x (..., i)``, ``W (o, i)``, ``b (o,)`` or ``None``; with a seed axis ``W (S, o, i)``,
    ``b (S, o)`` act on ``x (S, ..., i)`` slice by slice (``derivations/21-layers.md``, section 1).
    """
    lead, o, i = _check_linear(x, W, b)
    xp = array_module(x, W, b)
    y = xp.reshape(x, lead + (-1, i)) @ xp.swapaxes(W, -1, -2)  # (S, rows, o) or (rows, o): every row at once
    if b is not None:
        y = y + b[..., None, :]  # (S, 1, o) or (1, o) broadcast over the rows
    return xp.reshape(y, shape_of(x)[:-1] + (o,)), {"layer": "linear", "x": x, "W": W, "b": b}  # (S, ..., o)


def linear_backward(grad_y, cache):
    """Backward pass of :func:`linear`: ``(dx, dW, db)`` = ``(dy W, sum_n dy_n x_n^T, sum_n dy_n)``
    over the rows of each seed (21.L1-21.L3); ``db`` is ``None`` when ``b`` is."""
    x, W, b = cached(cache, "linear", "x", "W", "b")
    lead, (o, i) = shape_of(W)[:-2], shape_of(W)[-2:]
    check_grad(grad_y, "grad_y", shape_of(x)[:-1] + (o,))
    xp = array_module(x, W, grad_y)
    xf = xp.reshape(x, lead + (-1, i))  # (S, rows, i)
    gf = xp.reshape(grad_y, lead + (-1, o))  # (S, rows, o)
    # y_n = W x_n + b:  dy_nk/dW_kj = x_nj,  dy_n/db = I,  dy_n/dx_n = W   (21.L1-21.L3)
    dW = xp.swapaxes(gf, -1, -2) @ xf  # (S, o, i)   sum over rows of dy x^T
    db = None if b is None else xp.sum(gf, axis=-2)  # (S, o)
    dx = xp.reshape(gf @ W, shape_of(x))  # (S, ..., i)
    return dx, dW, db


# --------------------------------------------------------------------------
# relu: y = max(x, 0)
# --------------------------------------------------------------------------


def relu_layer(x):
    """The rectifier as a layer, ``y = max(x, 0)`` entry by entry, and its cache (21.R0).

    Written with ``where``, so that autograd sees slope 0 at ``x = 0`` as
    :func:`relu_layer_backward` does (``derivations/21-layers.md``, section 2).
    """
    check_float_array(x, "x", min_ndim=0)
    return array_module(x).where(x <= 0, 0.0, x), {"layer": "relu_layer", "x": x}  # NaN stays NaN


def relu_layer_backward(grad_y, cache):
    """Backward pass of :func:`relu_layer`: ``dx = grad_y [x > 0]`` (21.R1)."""
    (x,) = cached(cache, "relu_layer", "x")
    check_grad(grad_y, "grad_y", shape_of(x))
    # relu'(x) = 1 for x > 0, 0 for x < 0; at the kink x = 0 we take 0   (21.R1)
    return grad_y * (x > 0)


# --------------------------------------------------------------------------
# layer normalisation without gain or bias
# --------------------------------------------------------------------------


def _moments(x, eps):
    """``(z, r)``: ``z = (x - mean x) r`` and ``r = 1 / sqrt(var x + eps)``, over the last axis."""
    xp = array_module(x)
    c = x - xp.mean(x, axis=-1, keepdims=True)  # (..., d) centred
    r = 1.0 / xp.sqrt(xp.mean(c * c, axis=-1, keepdims=True) + eps)  # (..., 1)
    return c * r, r  # (..., d), (..., 1)


def layer_norm(x, eps=1e-5):
    """Layer normalisation without gain or bias over the last axis, ``z = (x - mu) / sqrt(sigma^2 + eps)``,
    and its cache (21.N1-21.N4; ``derivations/21-layers.md``, section 3).

    ``mu`` and the biased ``sigma^2`` are the row's mean and variance (as
    ``torch.nn.LayerNorm``); a row of ``z`` has mean 0 and mean square ``sigma^2 /
    (sigma^2 + eps)``, and a one-hot ``e_x`` of length ``d`` maps to ``(d e_x - 1) /
    sqrt(d - 1 + d^2 eps)`` (Eq. 11.M2).
    """
    check_float_array(x, "x")
    z, r = _moments(x, check_real(eps, "eps", positive=True))  # (..., d), (..., 1)
    return z, {"layer": "layer_norm", "z": z, "r": r}


def layer_norm_backward(grad_z, cache):
    """Backward pass of :func:`layer_norm`: ``dx = r (u - mean u - z mean(u z))`` with ``u = grad_z`` and
    ``r = 1 / sqrt(sigma^2 + eps)``, means over the last axis (21.N5-21.N6)."""
    z, r = cached(cache, "layer_norm", "z", "r")
    check_grad(grad_z, "grad_z", shape_of(z))
    xp = array_module(z, grad_z)
    mean_u = xp.mean(grad_z, axis=-1, keepdims=True)  # (..., 1)
    mean_uz = xp.mean(grad_z * z, axis=-1, keepdims=True)  # (..., 1)
    # dz_i/dx_k = r (delta_ik - 1/d - z_i z_k / d), contracted with u   (21.N5, 21.N6)
    return r * (grad_z - mean_u - z * mean_uz)  # (..., d)


# --------------------------------------------------------------------------
# losses: the mean over tokens, per seed with seed_axis=True
# --------------------------------------------------------------------------


def _mean_axes(ndim, seed_axis):
    """The axes a per-token loss is averaged over: all, or all but the seed axis."""
    return tuple(range(1 if seed_axis else 0, ndim))


def _tokens(shape, seed_axis):
    """How many tokens each mean averages over."""
    return math.prod(shape[1:] if seed_axis else shape)


def _check_loss_grad(grad_loss, shape, seed_axis):
    want = shape[:1] if seed_axis else ()
    check_float_array(grad_loss, "grad_loss", min_ndim=0)
    if shape_of(grad_loss) != want:
        raise ValueError(f"grad_loss: expected shape {want} (one per {'seed' if seed_axis else 'loss'}), "
                         f"got {shape_of(grad_loss)}")


def _check_targets(logits, target):
    """Validate ``softmax_cross_entropy``'s arguments; return ``(shape of target, V)``."""
    check_float_array(logits, "logits", min_ndim=1)
    ls = shape_of(logits)
    dtype = getattr(target, "dtype", None)
    if dtype is None or np.dtype(dtype).kind not in "iu":
        raise TypeError(f"target: expected an integer array of class ids, got "
                        f"{type(target).__name__ if dtype is None else np.dtype(dtype)}")
    if tuple(target.shape) != ls[:-1]:
        raise ValueError(f"target: expected shape {ls[:-1]} (logits' shape without its last axis), "
                         f"got {tuple(target.shape)}")
    V = ls[-1]
    if isinstance(target, np.ndarray):  # host ids; ids on a device are not copied back to be checked
        lo, hi = int(target.min()), int(target.max())
        if lo < 0 or hi >= V:
            raise ValueError(f"target: expected class ids in [0, {V}), got values in [{lo}, {hi}]")
    return ls[:-1], V


def _check_seed_axis(seed_axis, shape):
    if not isinstance(seed_axis, (bool, np.bool_)):
        raise TypeError(f"seed_axis: expected True or False, got {type(seed_axis).__name__}")
    if seed_axis and len(shape) < 1:
        raise ValueError("seed_axis: True needs at least one token axis (S, ...) to hold the seeds")
    return bool(seed_axis)


def softmax_cross_entropy(logits, target, *, seed_axis=False):
    """Mean cross-entropy of ``softmax(logits)`` against integer targets, and its cache (21.C0).

    ``L = mean_t [log sum_v exp(y_tv) - y_t,target_t]`` over the tokens ``t`` (every
    position of ``target``, ids in ``[0, V)``), shifted by ``max_v y_tv``; with
    ``seed_axis=True`` one mean per seed ``(S,)``, else one number
    (``derivations/21-layers.md``, section 4).
    """
    shape, V = _check_targets(logits, target)
    seed_axis = _check_seed_axis(seed_axis, shape)
    xp = array_module(logits)
    onehot = xp.eye(V, dtype=dtype_of(logits))[xp.asarray(target)]  # (..., V) a constant
    m = xp.max(stop_gradient(logits), axis=-1, keepdims=True)  # (..., 1) the shift
    lse = m[..., 0] + xp.log(xp.sum(xp.exp(logits - m), axis=-1))  # (...,) log sum_v e^y_v
    nll = lse - xp.sum(onehot * logits, axis=-1)  # (...,) one loss per token
    loss = xp.mean(nll, axis=_mean_axes(len(shape), seed_axis))  # (S,) or ()
    return loss, {"layer": "softmax_cross_entropy", "logits": logits, "target": target, "seed_axis": seed_axis}


def softmax_cross_entropy_backward(grad_loss, cache):
    """Backward pass of :func:`softmax_cross_entropy`: ``dy_t = g (softmax(y_t) - e_target_t) / T``, ``g``
    the upstream gradient of the (seed's) loss and ``T`` the tokens in its mean (21.C1)."""
    logits, target, seed_axis = cached(cache, "softmax_cross_entropy", "logits", "target", "seed_axis")
    shape, V = shape_of(logits)[:-1], shape_of(logits)[-1]
    _check_loss_grad(grad_loss, shape, seed_axis)
    xp = array_module(logits, grad_loss)
    e = xp.exp(logits - xp.max(logits, axis=-1, keepdims=True))  # (..., V) shifted
    p = e / xp.sum(e, axis=-1, keepdims=True)  # (..., V) softmax
    onehot = xp.eye(V, dtype=dtype_of(logits))[xp.asarray(target)]  # (..., V)
    g = xp.reshape(grad_loss, shape_of(grad_loss) + (1,) * (len(shape) + 1 - len(shape_of(grad_loss))))  # (S, 1, .., 1)
    # d logsumexp(y)/dy = softmax(y),  d y_target/dy = e_target,  d mean/d term = 1/T   (21.C1)
    return (p - onehot) * g / _tokens(shape, seed_axis)  # (..., V)


def sigmoid_cross_entropy(logits, labels, *, seed_axis=False):
    """Mean binary cross-entropy of ``sigmoid(logits)`` against labels in ``[0, 1]``, and its cache (21.C2).

    ``L = mean_t [softplus(a_t) - l_t a_t]``, ``softplus`` as ``logaddexp(0, a)``
    so that no logit overflows; labels may be soft, of any real or bool dtype;
    ``seed_axis`` as in :func:`softmax_cross_entropy` (``derivations/21-layers.md``,
    section 5).
    """
    y = _labels(logits, labels)
    shape = shape_of(logits)
    seed_axis = _check_seed_axis(seed_axis, shape)
    xp = array_module(logits)
    loss = xp.mean(xp.logaddexp(0.0, logits) - y * logits, axis=_mean_axes(len(shape), seed_axis))  # (S,) or ()
    return loss, {"layer": "sigmoid_cross_entropy", "logits": logits, "labels": y, "seed_axis": seed_axis}


def _labels(logits, labels):
    """``labels`` in the logits' dtype and namespace, after checking shape and range."""
    check_float_array(logits, "logits", min_ndim=0)
    dtype = getattr(labels, "dtype", None)
    if dtype is None or np.dtype(dtype).kind not in "iufb":
        raise TypeError(f"labels: expected a numeric array of numbers in [0, 1], got "
                        f"{type(labels).__name__ if dtype is None else np.dtype(dtype)}")
    if tuple(labels.shape) != shape_of(logits):
        raise ValueError(f"labels: expected the logits' shape {shape_of(logits)}, got {tuple(labels.shape)}")
    if isinstance(labels, np.ndarray) and not ((labels >= 0).all() and (labels <= 1).all()):
        raise ValueError("labels: binary cross-entropy needs labels in [0, 1]")  # host labels only, as above
    return array_module(logits).asarray(labels).astype(dtype_of(logits))


def sigmoid_cross_entropy_backward(grad_loss, cache):
    """Backward pass of :func:`sigmoid_cross_entropy`: ``da_t = g (sigmoid(a_t) - l_t) / T`` (21.C3)."""
    logits, y, seed_axis = cached(cache, "sigmoid_cross_entropy", "logits", "labels", "seed_axis")
    shape = shape_of(logits)
    _check_loss_grad(grad_loss, shape, seed_axis)
    xp = array_module(logits, grad_loss)
    g = xp.reshape(grad_loss, shape_of(grad_loss) + (1,) * (len(shape) - len(shape_of(grad_loss))))  # (S, 1, .., 1)
    # d softplus(a)/da = sigmoid(a),  d (l a)/da = l,  d mean/d term = 1/T   (21.C3)
    return (sigmoid(xp, logits) - y) * g / _tokens(shape, seed_axis)  # (...)
