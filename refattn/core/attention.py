"""Attention: a score function, an activation, and values (TanhMax Eqs. 1-2).

    S = score(Q, K)                    # (..., n_q, n_k)
    W = phi(S)  along the keys         # (..., n_q, n_k)
    Y = W V                            # (..., n_q, d_v)

and :func:`attention_backward`, the chain rule back through the three steps
(``derivations/01-reweighted-softmax.md`` section 2 for phi,
``derivations/02-scores.md`` for the scores). A per-token score (``"self"``,
``"global"``) pools the values into one row ``Y (..., 1, d_v)``, as TanhMax's
classifier does. This is the reference; :mod:`refattn.fast` computes the same
with blocks and threads and is tested equal to it. The checks of attention's
own arguments (:func:`attention_args`) close the file.
"""

from __future__ import annotations

import numpy as np

from . import checks
from .activations import Activation, activation as get_activation
from .backend import array_module, shape_of, sum_to
from .scores import Score, score as get_score

__all__ = ["attention", "attention_backward", "causal_mask", "padding", "rows", "attention_args"]


def causal_mask(n_q: int, n_k: int | None = None, xp=None):
    """Boolean ``(n_q, n_k)`` mask, True where key ``j`` may be seen by query ``i`` (``j <= i``)."""
    xp = array_module() if xp is None else xp
    return xp.tril(xp.ones((n_q, n_q if n_k is None else n_k), dtype=bool))


def attention(Q, K, V, *, score="scaled_dot", activation="softmax", params=None,
              mask=None, causal=False, score_options=None):
    """Attention forward pass for shapes ``(B, H, n, d)`` (any number of leading axes).

    Parameters
    ----------
    Q : ndarray (..., n_q, d), or None for the ``"global"`` score, whose query is a parameter
    K : ndarray (..., n_k, d)
    V : ndarray (..., n_k, d_v)
    score : str or Score, a name from ``refattn.SCORES`` (options in ``score_options``) or an instance
    activation : str or Activation, a name from ``refattn.ACTIVATIONS`` or an instance
    params : dict, optional, the score's parameters (``Score.init_params``)
    mask : ndarray of bool, optional, broadcastable to the scores' shape ``(..., n_q, n_k)``; True keeps
    causal : bool, also hide keys ``j > i`` from query ``i`` (``n_q == n_k``, a pairwise score)

    Returns
    -------
    out : ndarray (..., n_q, d_v), or (..., 1, d_v) for a per-token score
    cache : dict, for :func:`attention_backward`; it holds copies of ``Q``, ``K``, ``V`` and ``params``
        (the score's cache, and ``V``) and arrays forward made itself, so changing an input in place
        between forward and backward changes no gradient (``tests/core/test_attention.py``)
    """
    sc, act, params, mask, n_q = attention_args(Q, K, V, score, activation, params, mask, causal,
                                                score_options)
    xp = array_module(Q, K, V, mask, *params.values())
    if causal:
        tri = causal_mask(n_q, xp=xp)  # (n_q, n_k)
        mask = tri if mask is None else mask & tri
    seen_q, seen_k = padding(xp, mask, sc.pairwise, shape_of(K)[:-2] + (n_q, shape_of(K)[-2]))
    Q, K, V = rows(xp, Q, seen_q), rows(xp, K, seen_k), rows(xp, V, seen_k)  # padding's rows are 0 whatever
    # they held: selected, never multiplied by a zero weight (0 NaN = NaN), so nothing in them reaches Y
    with np.errstate(over="ignore", invalid="ignore"):  # a product that overflows is named just below
        s, score_cache = sc.forward(Q, K, params)  # (..., n_q, n_k), or (..., n) per token
    if not sc.pairwise:
        s = s[..., None, :]  # (..., 1, n): one query row
    checks.scores_in_domain(xp, s, mask, sc, Q, K, params)
    w, act_cache = act.forward(s, -1, mask)  # (..., n_q, n_k)   W = phi(S)
    out = w @ V  # (..., n_q, d_v)   Y = W V
    V = checks.owned(V)  # a copy: backward needs V as forward saw it, whatever the caller does to theirs
    return out, {"kind": "attention", "V": V, "s": s, "w": w, "mask": mask, "score": sc, "activation": act,
                 "score_cache": score_cache, "act_cache": act_cache, "seen_q": seen_q, "seen_k": seen_k}


def attention_backward(grad_out, cache):
    """Gradients of :func:`attention` for the upstream gradient ``grad_out = dY``: ``(dQ, dK, dV, dparams)``,
    ``dQ`` ``None`` where ``Q`` was, ``dparams`` one gradient per score parameter."""
    checks.check_cache(cache, "attention")
    V, w, sc, act = cache["V"], cache["w"], cache["score"], cache["activation"]
    checks.check_grad(grad_out, "grad_out", shape_of(w)[:-1] + shape_of(V)[-1:])
    xp = array_module(grad_out, V)
    dV = sum_to(xp, xp.swapaxes(w, -1, -2) @ grad_out, shape_of(V))  # (..., n_k, d_v)   Y = W V  =>  dV = W^T dY
    dW = grad_out @ xp.swapaxes(V, -1, -2)  # (..., n_q, n_k)   dW = dY V^T
    ds = act.backward(dW, cache["act_cache"])  # (..., n_q, n_k)   Eq. 01.R4
    if not sc.pairwise:
        ds = ds[..., 0, :]  # (..., n)
    dQ, dK, dparams = sc.backward(ds, cache["score_cache"])  # derivations/02-scores.md
    seen_q, seen_k = cache["seen_q"], cache["seen_k"]  # padding's rows were selected away: gradient 0
    return rows(xp, dQ, seen_q), rows(xp, dK, seen_k), rows(xp, dV, seen_k), dparams


def padding(xp, mask, pairwise, shape):
    """``(seen_q, seen_k)``: which query rows see some key and which key rows some query sees, each
    ``(..., n, 1)`` to select rows of ``Q``, ``K``, ``V`` (a per-token score's one row per token serves
    both); ``None`` without a mask. The others are padding: the mask promises that nothing in them counts."""
    if mask is None:
        return None, None
    full = xp.broadcast_to(mask, shape)  # (..., n_q, n_k)
    seen_k = xp.any(full, axis=-2)[..., None]  # (..., n_k, 1)
    return (xp.any(full, axis=-1)[..., None] if pairwise else seen_k), seen_k


def rows(xp, x, seen):
    """``x`` with the rows that ``seen`` leaves out set to 0, by selection (``None`` stays ``None``)."""
    return x if seen is None or x is None else xp.where(seen, x, 0.0)


# --- The checks of attention's own arguments (plumbing: the formulas are above) --------------------
def attention_args(Q, K, V, score, activation, params, mask, causal, score_options):
    """Check :func:`attention`'s arguments; return ``(score, activation, params, mask, n_q)``, the
    first two as instances and ``n_q`` the query rows (1 for a per-token score)."""
    if score_options and isinstance(score, Score):
        raise ValueError("score_options: give options only with a score name, not a Score instance")
    sc = score if isinstance(score, Score) else get_score(score, **(score_options or {}))
    act = activation if isinstance(activation, Activation) else get_activation(activation)
    checks.check_float_array(K, "K", min_ndim=2)
    checks.check_float_array(V, "V", min_ndim=2)
    kshape, vshape = shape_of(K), shape_of(V)
    if kshape[:-1] != vshape[:-1]:
        raise ValueError(f"V: shape {vshape} must match K's {kshape} in every axis but the last")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal: expected True or False, got {type(causal).__name__}")
    if Q is None and sc.uses_q:
        raise ValueError(f"Q: the score {sc.name!r} needs queries; only a score with no query input "
                         f"(such as 'global') takes Q=None")
    n_q = 1
    if Q is not None:
        checks.check_float_array(Q, "Q", min_ndim=2)
        qshape = shape_of(Q)
        if qshape[:-2] != kshape[:-2]:
            raise ValueError(f"Q: leading (batch, head) axes {qshape[:-2]} differ from K's {kshape[:-2]}")
        if qshape[-1] != kshape[-1]:
            raise ValueError(f"Q: last axis {qshape[-1]} differs from K's {kshape[-1]}")
        if not sc.pairwise and qshape[-2] != kshape[-2]:
            raise ValueError(f"Q: per-token scores need one query per key, "
                             f"got n_q={qshape[-2]}, n_k={kshape[-2]}")
        n_q = qshape[-2] if sc.pairwise else 1
    checks.check_mask(mask, kshape[:-2] + (n_q, kshape[-2]))
    if causal and not sc.pairwise:
        raise ValueError("causal: a per-token score has no query positions to be causal about")
    if causal and n_q != kshape[-2]:
        raise ValueError(f"causal: needs as many queries as keys, got n_q={n_q}, n_k={kshape[-2]}")
    sizes = {"d": kshape[-1], "n_q": n_q, "n_k": kshape[-2]}
    return sc, act, checks.check_params(sc, params, sizes), mask, n_q  # params checked before any work

