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
"""

from __future__ import annotations

import numpy as np

from .activations import Activation, activation as _activation
from .backend import array_module, check_float_array, check_mask, stop_gradient
from .scores import Score, score as _score

__all__ = ["attention", "attention_backward", "causal_mask"]


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
    cache : dict
        Everything :func:`attention_backward` needs.
    """
    sc, act = _resolve(score, activation, score_options)
    params = {} if params is None else dict(params)
    _check_qkv(Q, K, V, sc.pairwise)
    xp = array_module(Q, K, V, mask, *params.values())
    s = sc.forward(Q, K, params)  # (..., n_q, n_k) or (..., n)
    if not sc.pairwise:
        if causal:
            raise ValueError("causal: a per-token score has no query positions to be causal about")
        s = s[..., None, :]  # (..., 1, n)
    shape = np.shape(stop_gradient(s))
    keep = check_mask(mask, shape)
    if causal:
        n_q, n_k = shape[-2:]
        if n_q != n_k:
            raise ValueError(f"causal: needs as many queries as keys, got n_q={n_q}, n_k={n_k}")
        tri = causal_mask(n_q, n_k, xp=xp)
        keep = tri if keep is None else (keep & tri)
    p = act.weights(s, axis=-1, mask=keep)  # (..., n_q, n_k) softmax(ell(s))
    rho = None if act.rho_is_one else act.rho(s)  # (..., n_q, n_k) g/h
    w = p if rho is None else rho * p  # (..., n_q, n_k) phi(s)
    out = w @ V  # (..., n_q, d_v)
    cache = dict(Q=Q, K=K, V=V, params=params, s=s, p=p, rho=rho, w=w, score=sc, activation=act)
    return out, cache


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
    Q, K, V, s, p, w = (cache[k] for k in ("Q", "K", "V", "s", "p", "w"))
    if np.shape(grad_out) != np.shape(w)[:-1] + (np.shape(V)[-1],):
        raise ValueError(
            f"grad_out: shape {np.shape(grad_out)} does not match the output's "
            f"{np.shape(w)[:-1] + (np.shape(V)[-1],)}"
        )
    sc, act = cache["score"], cache["activation"]
    xp = array_module(grad_out, V)
    dV = xp.swapaxes(w, -1, -2) @ grad_out  # (..., n_k, d_v)   Y = W V  =>  dV = W^T dY
    dW = grad_out @ xp.swapaxes(V, -1, -2)  # (..., n_q, n_k)                dW = dY V^T
    ds = act._vjp_from(xp, s, p, dW, -1, rho=cache["rho"], overwrite_u=True)  # Eq. R4
    if not sc.pairwise:
        ds = ds[..., 0, :]  # (..., n)
    dQ, dK, dparams = sc.vjp(Q, K, cache["params"], ds)
    return {"Q": dQ, "K": dK, "V": dV, "params": dparams}
