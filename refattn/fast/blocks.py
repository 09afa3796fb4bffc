"""Blocks of the scores: the pieces that streaming attention and the fast path's causal strips share.

:class:`Blocks` cuts the reference score function into ``(query block, key
block)`` pieces, each computed by the reference score (``derivations/23-streaming.md``,
step 1); :func:`slices` and :func:`mask_block` cut a range and a mask the same
way; :func:`non_finite_as_reference` applies the reference's rule for scores
that are not finite (``Activation.forward``). Used by :mod:`refattn.fast.streaming`,
:mod:`refattn.fast.streaming_fast` and :mod:`refattn.fast.strips`.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.backend import array_module, stop_gradient, to_numpy
from ..core.scores import CosFormer, relu

__all__ = ["Blocks", "slices", "mask_block", "non_finite_as_reference"]


def slices(n, size):
    """``[slice(0, size), slice(size, 2 size), ...]`` covering ``range(n)``."""
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def mask_block(mask, rows, cols):
    """The block ``(rows, cols)`` of a mask broadcastable to ``(..., n_q, n_k)``
    (an axis of size 1, or a missing one, is broadcast and not sliced)."""
    if mask is None:
        return None
    if mask.ndim >= 2 and mask.shape[-2] != 1:
        mask = mask[..., rows, :]
    if mask.ndim >= 1 and mask.shape[-1] != 1:
        mask = mask[..., cols]
    return mask


class Blocks:
    """The score function, cut into blocks.

    ``scores(rows, cols)`` is the block ``s[..., rows, cols]`` of the scores
    the reference computes, ``keep(rows, cols)`` the block of its mask (the
    user's mask and, on blocks that cross the diagonal, the causal one), and
    ``score_vjp(rows, cols, ds)`` the reference score's VJP on the block.
    Per-token scores (``self``, ``global``) have one query row that pools
    every token: their ``rows`` is ``slice(0, 1)`` and ``cols`` selects the
    tokens.
    """

    def __init__(self, sc, Q, K, params, mask, causal, block_size):
        self.sc, self.Q, self.K, self.params = sc, Q, K, params
        self.mask, self.causal, self.size = mask, causal, block_size
        self.n_k = np.shape(stop_gradient(K))[-2]
        self.n_q = np.shape(stop_gradient(Q))[-2] if sc.pairwise else 1
        # neural's per-pair weights carry (n_q, n_k) in front: a block takes its slice of them
        spec = sc.param_spec(params)
        self.pair_params = tuple(p for p, sym in spec.items() if tuple(sym[:2]) == ("n_q", "n_k"))
        self.cos = isinstance(sc, CosFormer)  # its weights depend on the absolute positions i - j
        if self.cos:
            sc.weights(np, range(0), range(0), max(self.n_q, self.n_k), np.float64)  # refuses M < n now

    # --- which blocks -------------------------------------------------------
    def query_blocks(self):
        return slices(self.n_q, self.size)

    def key_blocks(self):
        return slices(self.n_k, self.size)

    def visible(self, rows, cols):
        """False for a block wholly above the diagonal (every key after every query)."""
        return not self.causal or cols.start <= rows.stop - 1

    # --- a block's scores ----------------------------------------------------
    def _inputs(self, rows, cols):
        """``(q, k, params)`` of the block: the query and key rows it pairs, and its parameters."""
        if not self.sc.pairwise:  # token i with itself: the tokens are the columns
            q = None if self.Q is None else self.Q[..., cols, :]
            return q, self.K[..., cols, :], self.params
        params = {p: (v[rows, cols] if p in self.pair_params else v) for p, v in self.params.items()}
        return self.Q[..., rows, :], self.K[..., cols, :], params

    def scores(self, rows, cols):
        """``(s, cache)``: ``s[..., rows, cols]``, shape ``(..., bq, bk)`` (``(..., 1, bk)`` per token),
        and the score's cache for :meth:`score_backward`."""
        q, k, params = self._inputs(rows, cols)
        if self.cos:  # cosFormer's C_ij at the block's absolute positions, in the cache its backward reads
            xp = array_module(q, k)
            C = self.sc.weights(xp, rows, cols, max(self.n_q, self.n_k), q.dtype)  # (bq, bk)
            s = (relu(xp, q) @ xp.swapaxes(relu(xp, k), -1, -2)) * C  # (..., bq, bk)
            return s, {"kind": "score", "shape": np.shape(s), "q": q, "k": k, "C": C}
        s, cache = self.sc.forward(q, k, params)  # (..., bq, bk), or (..., bk) per token
        return (s if self.sc.pairwise else s[..., None, :]), cache

    def keep(self, rows, cols):
        """The mask of the block (True = keep), or ``None`` where every entry is kept."""
        xp = array_module(self.Q, self.K, self.mask)
        keep = mask_block(self.mask, rows, cols)
        if self.causal and cols.stop - 1 > rows.start:  # the block crosses the diagonal
            tri = xp.arange(rows.start, rows.stop)[:, None] >= xp.arange(cols.start, cols.stop)[None, :]
            keep = tri if keep is None else keep & tri  # (bq, bk) or (..., bq, bk)
        return keep

    def score_backward(self, rows, cols, ds, cache):
        """The score's backward pass on the block: ``(q_slice, dq, dk, dparams)``, ``dq`` for ``Q[..., q_slice, :]``."""
        if self.sc.pairwise:
            return (rows,) + tuple(self.sc.backward(ds, cache))
        return (cols,) + tuple(self.sc.backward(ds[..., 0, :], cache))  # per token: q_i pairs with k_i


def non_finite_as_reference(xp, s, keep):
    """The reference's rule (``Activation.forward``): a score of +-inf counts as NaN, which fills its
    row, and a masked entry is ignored whatever its score. One sum tells whether anything is to do."""
    if math.isfinite(float(to_numpy(xp.sum(stop_gradient(s))))):
        return s
    s = xp.where(xp.isinf(s), np.nan, s)
    return s if keep is None else xp.where(keep, s, 0.0)
