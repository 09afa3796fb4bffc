"""Attention: a score function, an activation, and values.

    S = score(Q, K)                    # (B, H, n_q, n_k)
    W = phi(S)  along the keys         # (B, H, n_q, n_k)
    Y = W V                            # (B, H, n_q, d_v)

seed 001 Eqs. 1-2 with phi from :mod:`refattn.activations` and the score from
:mod:`refattn.scores`. :func:`attention` returns the output and a cache;
:func:`attention_backward` returns the gradients for Q, K, V and every score
parameter from the cache, by the chain rule through the three steps
(``derivations/01-reweighted-softmax.md`` section 4 for phi,
``derivations/02-scores.md`` for the scores).

Per-token scores (``"self"``, ``"global"``) give one score per key,
``S: (B, H, n)``; they pool the values into one output row,
``Y: (B, H, 1, d_v)``, as the classifier of seed 001 section 5.1 does.

The mathematics is in :func:`_forward_math` and :func:`_backward_math`, a few
lines each. On NumPy arrays large enough to be worth it they run once per
block of (batch, head) slices, on every core (:mod:`refattn.parallel`,
``derivations/20-speed.md``); arrays traced by autograd and CuPy arrays run
them once over the whole batch. Both routes compute the same numbers.
"""

from __future__ import annotations

import math

import numpy as np

from . import parallel
from .activations import Activation, activation as _activation
from .backend import array_module, check_float_array, check_mask, stop_gradient
from .scores import Dot, Score, score as _score

__all__ = ["attention", "attention_backward", "causal_mask", "AttentionCache"]


def causal_mask(n_q: int, n_k: int | None = None, xp=np):
    """Boolean (n_q, n_k) mask, True where key j may be seen by query i (j <= i)."""
    n_k = n_q if n_k is None else n_k
    return xp.tril(xp.ones((n_q, n_k), dtype=bool))


def _resolve(score, activation, score_options):
    sc = score if isinstance(score, Score) else _score(score, **(score_options or {}))
    if score_options and isinstance(score, Score):
        raise ValueError("score_options: give options only with a score name, not a Score instance")
    act = activation if isinstance(activation, Activation) else _activation(activation)
    return sc, act


def _check_qkv(Q, K, V, pairwise):
    for name, x in (("K", K), ("V", V)):
        check_float_array(x, name, min_ndim=2)
    if Q is not None:
        check_float_array(Q, "Q", min_ndim=2)
    kshape, vshape = np.shape(stop_gradient(K)), np.shape(stop_gradient(V))
    if kshape[:-1] != vshape[:-1]:
        raise ValueError(f"V: shape {vshape} must match K's {kshape} in every axis but the last")
    if Q is not None:
        qshape = np.shape(stop_gradient(Q))
        if qshape[:-2] != kshape[:-2]:
            raise ValueError(f"Q: leading (batch, head) axes {qshape[:-2]} differ from K's {kshape[:-2]}")
        if qshape[-1] != kshape[-1]:
            raise ValueError(f"Q: last axis {qshape[-1]} differs from K's {kshape[-1]}")
        if not pairwise and qshape[-2] != kshape[-2]:
            raise ValueError(f"Q: per-token scores need one query per key, got n_q={qshape[-2]}, n_k={kshape[-2]}")


def attention(Q, K, V, *, score="scaled_dot", activation="softmax", params=None,
              mask=None, causal=False, score_options=None):
    """Attention forward pass for shapes (B, H, n, d) (any number of leading axes).

    Parameters
    ----------
    Q : ndarray (..., n_q, d) or None
        Queries (``None`` only for the ``"global"`` score, whose query is a parameter).
    K : ndarray (..., n_k, d)
        Keys.
    V : ndarray (..., n_k, d_v)
        Values.
    score : str or Score
        A name from ``refattn.SCORES`` (with ``score_options``) or an instance.
    activation : str or Activation
        A name from ``refattn.ACTIVATIONS`` or an instance.
    params : dict, optional
        The score's parameters (see ``Score.init_params``).
    mask : ndarray of bool, optional
        Broadcastable to the scores' shape (..., n_q, n_k); True keeps a key.
    causal : bool
        Also hide keys j > i from query i (needs n_q == n_k, pairwise scores).

    Returns
    -------
    out : ndarray (..., n_q, d_v), or (..., 1, d_v) for per-token scores
    cache : AttentionCache
        A dict of everything :func:`attention_backward` needs, and the weights
        ``cache["w"]`` and scores ``cache["s"]`` for inspection.
    """
    sc, act = _resolve(score, activation, score_options)
    params = {} if params is None else dict(params)
    _check_qkv(Q, K, V, sc.pairwise)
    xp = array_module(Q, K, V, mask, *params.values())
    if not sc.pairwise and causal:
        raise ValueError("causal: a per-token score has no query positions to be causal about")
    kshape = np.shape(stop_gradient(K))
    n_q = np.shape(stop_gradient(Q))[-2] if sc.pairwise else 1
    shape = kshape[:-2] + (n_q, kshape[-2])  # the scores' shape, (..., n_q, n_k)
    keep = check_mask(mask, shape)
    if causal:
        if n_q != kshape[-2]:
            raise ValueError(f"causal: needs as many queries as keys, got n_q={n_q}, n_k={kshape[-2]}")
        tri = causal_mask(n_q, n_q, xp=xp)
        keep = tri if keep is None else (keep & tri)
    size = _block_size(xp, shape, Q, K, V)
    if size is None:
        out, s, p, w = _forward_math(sc, act, Q, K, V, params, keep)
    else:  # blocked; s is kept only if the backward pass needs it
        out, s, p, w = _forward_blocked(sc, act, Q, K, V, params, keep, shape, size)
    cache = AttentionCache(Q=Q, K=K, V=V, params=params, p=p, w=w, mask=keep, score=sc, activation=act)
    if s is not None:
        cache["s"] = s
    return out, cache


class AttentionCache(dict):
    """What :func:`attention` returns beside its output: a dict with the inputs
    ``Q, K, V, params``, the ``score`` and ``activation``, the combined
    boolean ``mask`` (the user's mask and the causal one; ``None`` for no
    mask), the softmax of ell ``p`` (the ``p`` of Eq. R1), the weights
    ``w = phi(s)``, and the scores ``s``.

    The backward pass of softmax, tanhmax, signexp, linear and relu needs
    only ``p`` and ``w`` (``Activation.vjp_needs_s``), so the blocked route
    does not keep ``s`` for them: ``cache["s"]`` (and ``cache.get("s")``)
    then recomputes the scores from ``Q`` and ``K`` on first access and keeps
    them. ``"s" in cache`` tells whether they are held now.
    """

    def __missing__(self, key):
        if key != "s":
            raise KeyError(key)
        s = self["score"].forward(self["Q"], self["K"], self["params"])
        self["s"] = s if self["score"].pairwise else s[..., None, :]
        return self["s"]

    def get(self, key, default=None):
        return self[key] if key in self or key == "s" else default


def _forward_math(sc, act, Q, K, V, params, keep):
    """seed 001 Eqs. 1-2 on a batch, or on one block of it: ``(out, s, p, w)``."""
    s = sc.forward(Q, K, params)  # (..., n_q, n_k) or (..., n)
    if not sc.pairwise:
        s = s[..., None, :]  # (..., 1, n)
    p = act.weights(s, axis=-1, mask=keep)  # (..., n_q, n_k) softmax(ell(s))
    w = p if act.rho_is_one else act.rho(s) * p  # (..., n_q, n_k) phi(s) = rho(s) p
    return w @ V, s, p, w  # out: (..., n_q, d_v)


def attention_backward(grad_out, cache):
    """Gradients of :func:`attention` from its cache.

    Parameters
    ----------
    grad_out : ndarray
        Upstream gradient, the shape of the output.
    cache : dict
        The second return value of :func:`attention`.

    Returns
    -------
    dict
        ``{"Q": dQ, "K": dK, "V": dV, "params": {name: dparam}}`` (``dQ`` is
        ``None`` where ``Q`` was).
    """
    check_float_array(grad_out, "grad_out", min_ndim=2)
    Q, K, V, p, w = (cache[k] for k in ("Q", "K", "V", "p", "w"))
    if np.shape(grad_out) != np.shape(w)[:-1] + (np.shape(V)[-1],):
        raise ValueError(
            f"grad_out: shape {np.shape(grad_out)} does not match the output's "
            f"{np.shape(w)[:-1] + (np.shape(V)[-1],)}"
        )
    sc, act = cache["score"], cache["activation"]
    xp = array_module(grad_out, V)
    if act.name == "linear" and isinstance(sc, Dot) and cache.get("mask") is None:
        return _backward_linear_dot(xp, sc, grad_out, Q, K, V)
    s = cache["s"] if act.vjp_needs_s else None  # (recomputed if the forward did not keep it)
    args = (Q, K, V, cache["params"], s, p, w)
    size = _block_size(xp, np.shape(w), grad_out, Q, K, V, s, p, w)
    if size is None:
        dQ, dK, dV, dparams = _backward_math(sc, act, xp, grad_out, *args)
    else:
        dQ, dK, dV, dparams = _backward_blocked(sc, act, grad_out, *args, size)
    return {"Q": dQ, "K": dK, "V": dV, "params": dparams}


def _backward_math(sc, act, xp, grad_out, Q, K, V, params, s, p, w):
    """The chain rule through the three steps, on a batch or one block: ``(dQ, dK, dV, dparams)``."""
    dV = xp.swapaxes(w, -1, -2) @ grad_out  # (..., n_k, d_v)   Y = W V  =>  dV = W^T dY
    dW = grad_out @ xp.swapaxes(V, -1, -2)  # (..., n_q, n_k)                dW = dY V^T
    ds = act._vjp_from(xp, s, p, dW, -1, phi=w, overwrite_u=True)  # Eqs. R4-R5
    if not sc.pairwise:
        ds = ds[..., 0, :]  # (..., n)
    dQ, dK, dparams = sc.vjp(Q, K, params, ds)
    return dQ, dK, dV, dparams


def _backward_linear_dot(xp, sc, grad_out, Q, K, V):
    """The backward pass of unmasked linear attention with a dot score, by associativity.

    With ``phi = s / n`` (every key kept) and ``s = beta Q K^T`` the output is
    ``Y = c Q K^T V = c Q M`` with ``c = beta / n`` and ``M = K^T V`` (d, d_v),
    so (``derivations/20-speed.md`` section 4)

        dQ = c dY M^T,   dK = c V (Q^T dY)^T,   dV = c K (Q^T dY),

    four products of n x d and d x d_v matrices instead of the n x n x d ones
    of the general route: the n x n weights are never needed. Exact, not an
    approximation; a mask (causal or not) breaks the associativity, and then
    the general route runs.
    """
    n_k, d = np.shape(K)[-2], np.shape(K)[-1]
    c = sc._beta(d) / n_k
    M = xp.swapaxes(K, -1, -2) @ V  # (..., d, d_v)       K^T V
    N = xp.swapaxes(Q, -1, -2) @ grad_out  # (..., d, d_v)   Q^T dY
    dQ = grad_out @ xp.swapaxes(M, -1, -2)  # (..., n_q, d)
    dK = V @ xp.swapaxes(N, -1, -2)  # (..., n_k, d)
    dV = K @ N  # (..., n_k, d_v)
    for g in (dQ, dK, dV):
        g *= c
    return {"Q": dQ, "K": dK, "V": dV, "params": {}}


# --------------------------------------------------------------------------
# The blocked route (NumPy only): the same two functions, block by block
# --------------------------------------------------------------------------


def _block_size(xp, shape, *arrays):
    """Slices per block for scores of ``shape``, or None to run the whole batch at once."""
    if xp is not np or any(a is not None and type(a) is not np.ndarray for a in arrays):
        return None
    itemsize = max(a.dtype.itemsize for a in arrays if a is not None)
    return parallel.block_size(math.prod(shape[:-2]), shape[-2] * shape[-1], itemsize)


def _flat(x, lead):
    """``x`` with its ``lead`` leading (batch, head) axes merged into one (None stays None)."""
    return None if x is None else x.reshape((-1,) + x.shape[lead:])


def _rows(x, i, j):
    return None if x is None else x[i:j]


def _forward_blocked(sc, act, Q, K, V, params, keep, shape, size):
    """:func:`_forward_math` per block of slices, into full-size outputs (s only if the VJP needs it)."""
    lead, slices = len(shape) - 2, math.prod(shape[:-2])
    Qf, Kf, Vf = _flat(Q, lead), _flat(K, lead), _flat(V, lead)
    per_slice = keep is not None and keep.ndim > 2  # an (n_q, n_k) mask is shared by every slice
    if per_slice:
        keep = _flat(np.broadcast_to(keep, shape), lead)
    parts = parallel.Gather(slices, alone=("out",))

    def block(i, j):
        out, s, p, w = _forward_math(sc, act, _rows(Qf, i, j), Kf[i:j], Vf[i:j], params,
                                     keep[i:j] if per_slice else keep)
        kept = {"out": out, "p": p}
        if w is not p:
            kept["w"] = w
        if act.vjp_needs_s:
            kept["s"] = s
        parts.put(i, j, kept)

    parallel.run_blocks(block, slices, size)
    out, s, p, w = (parts.get(k, shape[:-2]) for k in ("out", "s", "p", "w"))
    return out, s, p, (p if w is None else w)


def _backward_blocked(sc, act, grad_out, Q, K, V, params, s, p, w, size):
    """:func:`_backward_math` per block of slices; parameter gradients summed in block order."""
    lead = np.ndim(w) - 2
    Gf, Qf, Kf, Vf, sf, pf, wf = (_flat(x, lead) for x in (grad_out, Q, K, V, s, p, w))
    parts = parallel.Gather(Kf.shape[0])

    def block(i, j):
        dQ, dK, dV, dparams = _backward_math(sc, act, np, Gf[i:j], _rows(Qf, i, j), Kf[i:j], Vf[i:j],
                                             params, _rows(sf, i, j), pf[i:j], wf[i:j])
        parts.put(i, j, {"K": dK, "V": dV} if dQ is None else {"Q": dQ, "K": dK, "V": dV})
        return dparams

    per_block = parallel.run_blocks(block, Kf.shape[0], size)
    dparams = {k: sum((d[k] for d in per_block[1:]), per_block[0][k]) for k in per_block[0]}
    batch = np.shape(w)[:-2]
    return parts.get("Q", batch), parts.get("K", batch), parts.get("V", batch), dparams
