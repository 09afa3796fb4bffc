"""Attention: a score function, an activation, and values (TanhMax Eqs. 1-2).

    S = score(Q, K)                    # (..., n_q, n_k)
    W = phi(S)  along the keys         # (..., n_q, n_k)
    Y = W V                            # (..., n_q, d_v)

with ``phi`` from :mod:`refattn.core.activations` and the score from
:mod:`refattn.core.scores`. :func:`attention` returns the output and a cache;
:func:`attention_backward` returns the gradients for Q, K, V and every score
parameter from the cache, by the chain rule through the three steps
(``derivations/01-reweighted-softmax.md`` section 2 for phi,
``derivations/02-scores.md`` for the scores).

Per-token scores (``"self"``, ``"global"``) give one score per key,
``S: (..., n)``; they pool the values into one output row,
``Y: (..., 1, d_v)``, as TanhMax's classifier (section 5.1) does.

This is the reference: the formula and nothing else. :mod:`refattn.fast` has
the same two functions in blocks, on threads, and is tested equal to these.
"""

from __future__ import annotations

import numpy as np

from .activations import Activation, activation as get_activation
from .backend import array_module, check_float_array, check_mask, stop_gradient, sum_to
from .scores import Score, score as get_score

__all__ = ["attention", "attention_backward", "causal_mask", "prepare", "check_grad_out"]


def causal_mask(n_q: int, n_k: int | None = None, xp=np):
    """Boolean (n_q, n_k) mask, True where key j may be seen by query i (j <= i)."""
    n_k = n_q if n_k is None else n_k
    return xp.tril(xp.ones((n_q, n_k), dtype=bool))


def prepare(Q, K, V, score, activation, params, mask, causal, score_options, causal_in_mask=True):
    """Check the arguments of :func:`attention`; return ``(score, activation, params, keep)``.

    ``keep`` is the user's mask combined with the causal one (``None`` for no
    mask), broadcastable to the scores' shape ``(..., n_q, n_k)``. With
    ``causal_in_mask=False`` ``causal`` is checked but left out of ``keep``
    (streaming attention applies it block by block, never as an n x n array).
    """
    if score_options and isinstance(score, Score):
        raise ValueError("score_options: give options only with a score name, not a Score instance")
    sc = score if isinstance(score, Score) else get_score(score, **(score_options or {}))
    act = activation if isinstance(activation, Activation) else get_activation(activation)
    params = {} if params is None else dict(params)
    check_float_array(K, "K", min_ndim=2)
    check_float_array(V, "V", min_ndim=2)
    kshape, vshape = np.shape(stop_gradient(K)), np.shape(stop_gradient(V))
    if kshape[:-1] != vshape[:-1]:
        raise ValueError(f"V: shape {vshape} must match K's {kshape} in every axis but the last")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal: expected True or False, got {type(causal).__name__}")
    if Q is None and sc.uses_q:
        raise ValueError(f"Q: the score {sc.name!r} needs queries; only a score with no query "
                         f"input (such as 'global') takes Q=None")
    n_q = 1
    if Q is not None:
        check_float_array(Q, "Q", min_ndim=2)
        qshape = np.shape(stop_gradient(Q))
        if qshape[:-2] != kshape[:-2]:
            raise ValueError(f"Q: leading (batch, head) axes {qshape[:-2]} differ from K's {kshape[:-2]}")
        if qshape[-1] != kshape[-1]:
            raise ValueError(f"Q: last axis {qshape[-1]} differs from K's {kshape[-1]}")
        if not sc.pairwise and qshape[-2] != kshape[-2]:
            raise ValueError(f"Q: per-token scores need one query per key, got n_q={qshape[-2]}, n_k={kshape[-2]}")
        n_q = qshape[-2] if sc.pairwise else 1
    keep = check_mask(mask, kshape[:-2] + (n_q, kshape[-2]))
    if causal:
        if not sc.pairwise:
            raise ValueError("causal: a per-token score has no query positions to be causal about")
        if n_q != kshape[-2]:
            raise ValueError(f"causal: needs as many queries as keys, got n_q={n_q}, n_k={kshape[-2]}")
        if causal_in_mask:
            tri = causal_mask(n_q, xp=array_module(Q, K, V, mask, *params.values()))
            keep = tri if keep is None else (keep & tri)
    return sc, act, params, keep


def check_grad_out(grad_out, w, V):
    """Raise a clear error unless ``grad_out`` is a float array of the output's shape ``(..., n_q, d_v)``."""
    check_float_array(grad_out, "grad_out", min_ndim=2)
    want = np.shape(w)[:-1] + (np.shape(V)[-1],)
    if np.shape(grad_out) != want:
        raise ValueError(f"grad_out: shape {np.shape(grad_out)} does not match the output's {want}")


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
    score_options : dict, optional
        Options for a score given by name (``refattn.score(name, **options)``).

    Returns
    -------
    out : ndarray (..., n_q, d_v), or (..., 1, d_v) for per-token scores
    cache : dict
        What :func:`attention_backward` needs: ``Q, K, V, params``, the
        scores ``s``, the weights ``w = phi(s)``, the combined ``mask``
        (``None`` for none), the ``score`` and the ``activation``.
    """
    sc, act, params, keep = prepare(Q, K, V, score, activation, params, mask, causal, score_options)
    s = sc.forward(Q, K, params)  # (..., n_q, n_k), or (..., n) per token
    if not sc.pairwise:
        s = s[..., None, :]  # (..., 1, n): one query row
    w = act.forward(s, axis=-1, mask=keep)  # (..., n_q, n_k)  W = phi(S)
    out = w @ V  # (..., n_q, d_v)  Y = W V
    return out, {"Q": Q, "K": K, "V": V, "params": params, "s": s, "w": w, "mask": keep,
                 "score": sc, "activation": act}


def attention_backward(grad_out, cache):
    """Gradients of :func:`attention` from its cache.

    Parameters
    ----------
    grad_out : ndarray
        Upstream gradient ``dY``, the shape of the output.
    cache : dict
        The second return value of :func:`attention`.

    Returns
    -------
    dict
        ``{"Q": dQ, "K": dK, "V": dV, "params": {name: dparam}}`` (``dQ`` is
        ``None`` where ``Q`` was).
    """
    Q, K, V, s, w = (cache[k] for k in ("Q", "K", "V", "s", "w"))
    check_grad_out(grad_out, w, V)
    sc, act = cache["score"], cache["activation"]
    xp = array_module(grad_out, V)
    dV = sum_to(xp, xp.swapaxes(w, -1, -2) @ grad_out, np.shape(V))  # (..., n_k, d_v)  Y = W V  =>  dV = W^T dY
    dW = grad_out @ xp.swapaxes(V, -1, -2)  # (..., n_q, n_k)               dW = dY V^T
    ds = act.vjp(s, dW, axis=-1, mask=cache["mask"])  # (..., n_q, n_k)  Eq. 01.R4
    if not sc.pairwise:
        ds = ds[..., 0, :]  # (..., n)
    dQ, dK, dparams = sc.vjp(Q, K, cache["params"], ds)  # derivations/02-scores.md
    return {"Q": dQ, "K": dK, "V": dV, "params": dparams}
