r"""Strips of query rows: one block of a row under a shift, masked; and the dense path's causal strips.

What :mod:`refattn.fast.streaming_fast` and the causal route of
:func:`refattn.fast.attention` share (NumPy only; ``derivations/23-streaming.md``
section 8 and ``derivations/20-speed.md`` section 5):

* :func:`block_terms`: a block of scores to ``H = h(s) e^(-f m)`` and the
  unnormalised weights, by the activation kernel's streaming form
  (:meth:`refattn.fast.kernels.Generic.stream`), 0 where masked, the shift
  ``m`` taken from the block's kept entries (:func:`masked_top`) or given;
* :func:`causal_band`: which part of a block lies above the diagonal (only
  the columns past the strip's first row can);
* the dense fast path's causal strips (:func:`forward_causal`,
  :func:`backward_causal`): strip ``[r0, r1)`` of the query rows meets keys
  ``[0, r1)`` only, and writes its rows of the full-size ``p`` and ``w``.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.scores import Dot
from . import threads
from .kernels import kernel, vjp_from
from .blocks import Blocks, mask_block, non_finite_as_reference, slices


def plain_dot(sc):
    """True for the dot-product scores ``s = beta Q K^T`` (``dot``, ``scaled_dot``) with their own forward
    and backward: the route then forms the products itself, folding ``beta`` and ``1 / z`` into them."""
    return isinstance(sc, Dot) and type(sc).forward is Dot.forward and type(sc).backward is Dot.backward


def scores_are_finite(sc, Q, K):
    """True when no dot-product score can fail to be finite: finite inputs whose norms bound every
    ``beta q . k`` below a quarter of the dtype's largest value (Cauchy-Schwarz, with room for rounding)."""
    if not plain_dot(sc):
        return False
    with np.errstate(over="ignore", invalid="ignore"):
        q = np.sqrt(np.max(np.einsum("...i,...i->...", Q, Q, dtype=np.float64), initial=0.0))
        k = np.sqrt(np.max(np.einsum("...i,...i->...", K, K, dtype=np.float64), initial=0.0))
    bound = sc.beta_for(K.shape[-1]) * q * k
    return bool(np.isfinite(bound) and bound < float(np.finfo(K.dtype).max) / 4)


# --------------------------------------------------------------------------
# One block: h = e^(f a) b and rho, masked
# --------------------------------------------------------------------------


def causal_band(rows, cols):
    """For the block ``(rows, cols)``: ``None`` if no key of it lies after a query of it, else
    ``(lo, above)``, ``above (bq, c)`` True where key ``cols.start + lo + j`` lies after query ``rows[i]``
    (only the columns from ``lo`` on can: the rest of the block is below the diagonal)."""
    lo = max(cols.start, rows.start + 1)
    if lo >= cols.stop:
        return None
    above = np.arange(rows.start, rows.stop)[:, None] < np.arange(lo, cols.stop)[None, :]  # (bq, c)
    return lo - cols.start, above


def _checked(s, user, band):
    """The reference's rule for scores that are not finite, on a block (the rare case: one sum says)."""
    keep = user
    if band is not None:
        lo, above = band
        tri = np.ones(s.shape[-2:], bool)
        tri[:, lo:] = ~above
        keep = tri if keep is None else keep & tri
    return non_finite_as_reference(np, s, keep)


def masked_top(k, s, user, band):
    """The row maximum of the kernel's exponent (of ``b`` if unbounded) over the kept entries, ``(g, bq, 1)``;
    ``-inf`` (0 for ``b``) on a row that keeps none. Under ``causal`` alone only the band past the
    strip's first row is masked (a small copy); the rest takes the kernel's :meth:`row_top`."""
    fill = 0.0 if k.b_unbounded else -np.inf
    if user is None and band is None:
        return k.row_top(s)
    lo = band[0] if user is None else 0
    a = k.exponent(s[..., lo:])
    if np.may_share_memory(a, s):
        a = a.copy()
    if band is not None:
        np.copyto(a[..., band[0] - lo:], fill, where=band[1])
    if user is not None:
        np.copyto(a, fill, where=~user)
    top = np.max(a, axis=-1, keepdims=True, initial=fill)
    return np.maximum(top, k.row_top(s[..., :lo])) if lo > 0 else top


def block_terms(k, s, user, band, check, m_old=None, shift=None, backward=False):
    """One block of scores ``s`` (overwritten): ``(H, W, aux, m, shift)``.

    ``H = h(s) e^(-f shift)`` with 0 where masked, ``W = rho(s) H`` (``None`` where ``rho = 1``), the
    VJP's aux with ``backward``; ``m`` the running row maximum of the exponent after this block
    (given ``m_old``, the one before it) and the ``shift`` used, unless ``shift`` is given (the
    backward pass's final one). ``user`` is the user's mask of the block, ``band``
    :func:`causal_band`'s answer; with ``check`` the scores first follow the reference's rule for
    values that are not finite.
    """
    if check:
        s = _checked(s, user, band)
    m = None
    if shift is None:
        if k.has_exponent or k.b_unbounded:
            top = masked_top(k, s, user, band)  # Step 3: the running maximum
            m = top if m_old is None else np.maximum(m_old, top)
            if k.b_unbounded:  # cosformer: a shift by division
                shift = np.where(m == 0, 1.0, m)
            else:
                shift = np.where(m == -np.inf, 0.0, m)  # a row that kept nothing yet: any finite shift
        else:  # b in [0, 1]: no shift
            m = shift = np.zeros(s.shape[:-1] + (1,), s.dtype)
    with np.errstate(invalid="ignore"):  # inf - inf or 0 inf can only arise in masked entries, zeroed below
        H, W, aux = k.stream(s, shift, backward)  # Step 5: e^(f (a - m)) b
    for x in (H, W, aux):  # aux too: sigmoid's 1 - e^m H is -inf where a masked H overflowed
        if x is not None and (user is not None or band is not None):
            if band is not None:
                np.copyto(x[..., band[0]:], 0.0, where=band[1])
            if user is not None:
                np.copyto(x, 0.0, where=~user)
    return H, W, aux, m, shift


def normalised(k, s, user, band, check):
    """``(p, phi, aux)`` of one block that holds every key of its rows: the dense kernels' numbers."""
    H, W, aux, _, _ = block_terms(k, s, user, band, check, backward=True)
    z = np.sum(H, axis=-1, keepdims=True)
    inv = 1.0 / np.where(z == 0, 1.0, z)  # no normaliser: H = 0, so p = 0
    p = np.multiply(H, inv, out=H)
    return p, (p if W is None else np.multiply(W, inv, out=W)), aux


# --------------------------------------------------------------------------
# The dense fast path under causal: strips of query rows, no key past a strip's last row
# --------------------------------------------------------------------------

#: Query rows per strip of the causal route: a strip's keys end at its last row, so the blocks above
#: the diagonal are never computed; the masked part of a strip is a triangle of ``CAUSAL_ROWS`` rows.
CAUSAL_ROWS = 128


def forward_causal(sc, activation, Q, K, V, params, keep, into=None):
    """:func:`refattn.fast._forward` under ``causal``, in strips of :data:`CAUSAL_ROWS` query rows.

    A strip of rows ``[r0, r1)`` meets the keys ``[0, r1)`` only (the others are masked), and only
    its last ``r1 - r0`` columns hold masked entries (``derivations/20-speed.md`` section 5). The
    weights ``p`` and ``w`` (and the VJP's aux) are full ``(..., n, n)`` arrays, 0 above the
    diagonal, written strip by strip (into ``into``'s arrays where given); the scores are not kept
    (:class:`AttentionCache` recomputes them when asked).
    """
    k = kernel(activation)
    n, lead = np.shape(K)[-2], np.shape(K)[:-2]
    blocks = Blocks(sc, Q, K, params, keep, False, CAUSAL_ROWS)  # positions, per-pair weights
    check = not scores_are_finite(sc, Q, K)
    dtype = np.result_type(*(x for x in (Q, K, V, *params.values()) if x is not None))  # as the reference's
    out = np.empty(lead + (n, np.shape(V)[-1]), dtype)  # (..., n, d_v)
    p, w, aux = into if into is not None else (np.zeros(lead + (n, n), dtype), None, None)
    caches = []
    for rows in slices(n, CAUSAL_ROWS):
        cols = slice(0, rows.stop)
        s, score_cache = blocks.scores(rows, cols)  # (..., bq, r1)
        user = mask_block(keep, rows, cols)
        ps, ws, a = normalised(k, s, user, causal_band(rows, cols), check)  # (..., bq, r1)
        if into is None and ws is not ps and w is None:
            w = np.zeros_like(p)
        if into is None and a is not None and aux is None:
            aux = np.zeros_like(p)
        p[..., rows, cols] = ps
        if ws is not ps:
            w[..., rows, cols] = ws
        if a is not None:
            aux[..., rows, cols] = a
        out[..., rows, :] = ws @ V[..., cols, :]  # (..., bq, d_v)
        caches.append(score_cache)
    return out, None, p, (p if w is None else w), aux, (blocks, caches)


def backward_causal(activation, grad_out, V, aux, p, w, score_cache):
    """:func:`refattn.fast._backward` for :func:`forward_causal`, strip by strip: ``(dQ, dK, dV, dparams)``."""
    blocks, caches = score_cache
    n = np.shape(V)[-2]
    # the reference's dtypes: dV = W^T dY; dK = dS^T Q with dS from dY V^T, p and w
    d_s = np.result_type(grad_out, V, w)
    dK = np.zeros(np.shape(blocks.K), d_s if blocks.Q is None else np.result_type(d_s, blocks.Q))
    dQ, dV = None, np.zeros(np.shape(V), np.result_type(w, grad_out))
    dparams = {name: np.zeros_like(v) for name, v in blocks.params.items()}
    for rows, score_cache in zip(slices(n, CAUSAL_ROWS), caches):
        cols = slice(0, rows.stop)
        ws, ps = w[..., rows, cols], p[..., rows, cols]  # (..., bq, r1)
        G = grad_out[..., rows, :]  # (..., bq, d_v)
        dV[..., cols, :] += np.swapaxes(ws, -1, -2) @ G  # dV = W^T dY
        dW = G @ np.swapaxes(V[..., cols, :], -1, -2)  # (..., bq, r1)   dW = dY V^T
        ds = vjp_from(activation, np, None if aux is None else aux[..., rows, cols], ps, dW, -1, ws,
                      overwrite_u=dW.dtype == np.result_type(dW, ps, ws))  # dW's memory if it is precise enough
        _, dq, dk, dpar = blocks.score_backward(rows, cols, ds, score_cache)
        if dQ is None:
            dQ = np.empty(np.shape(blocks.Q), dq.dtype)
        dQ[..., rows, :] = dq
        dK[..., cols, :] += dk
        for name, g in dpar.items():
            if name in blocks.pair_params:
                dparams[name][rows, cols] += g  # per-pair weights: this strip's slice
            else:
                dparams[name] += g
    return dQ, dK, dV, dparams


def forward_blocked_causal(sc, activation, Qf, Kf, Vf, params, keep, per_slice, shape, size, score_caches):
    """The blocked route's forward under ``causal``: each block writes its strips straight into the
    full-size ``p``, ``w`` and aux (rows of one zeroed allocation, whose pages above the diagonal
    are never touched)."""
    k = kernel(activation)
    dtype = np.result_type(*(x for x in (Qf, Kf, *params.values()) if x is not None))
    _, rho, aux = k.stream(np.zeros((1, 1), dtype), np.ones((1, 1), dtype), True)  # which of w, aux it makes
    names = ["p"] + (["w"] if rho is not None else []) + (["aux"] if aux is not None else [])
    full = dict(zip(names, np.zeros((len(names), math.prod(shape[:-2])) + shape[-2:], dtype)))
    out = np.empty((Vf.shape[0], shape[-2], Vf.shape[-1]), np.result_type(dtype, Vf))

    def block(i, j):
        into = tuple(None if full.get(name) is None else full[name][i:j] for name in ("p", "w", "aux"))
        out[i:j], *_, score_caches[i] = forward_causal(sc, activation, None if Qf is None else Qf[i:j], Kf[i:j],
                                                       Vf[i:j], params, keep[i:j] if per_slice else keep, into)

    threads.run_blocks(block, Vf.shape[0], size)
    batch = shape[:-2]
    p, w, aux = (None if name not in full else full[name].reshape(shape) for name in ("p", "w", "aux"))
    return out.reshape(batch + out.shape[1:]), None, p, (p if w is None else w), aux, score_caches
