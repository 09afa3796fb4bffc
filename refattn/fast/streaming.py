r"""Streaming attention: every activation, block by block, in O(n) memory.

The online-softmax trick (a running maximum and a running sum, never the
``n x n`` scores) carries over to every activation of this library, because
every activation is a reweighted softmax (Eq. 01.R1 of
``derivations/01-reweighted-softmax.md``)::

    phi(s)_ij = rho(s_ij) e^(ell_ij - m_i) / sum_k e^(ell_ik - m_i),   ell = log h.

For one query row ``i`` the output is then

    y_i = sum_j rho(s_ij) e^(ell_ij - m_i) v_j  /  sum_j e^(ell_ij - m_i),

and both sums can be taken over the keys a block at a time, keeping only the
running maximum ``m_i`` of ``ell`` and the running normaliser ``z_i``; when a
later block raises the maximum, what was summed so far is multiplied by
``e^(m_old - m_new)`` (``rho`` is a factor of each term and is untouched).
The backward pass recomputes each block's scores and uses
``<u_i, phi_i> = dY_i . Y_i`` (``u_i = dY_i V^T``), as FlashAttention-2 does
for softmax. ``derivations/23-streaming.md`` derives every step and names the
line of code that carries it out.

:func:`streaming_attention` and :func:`streaming_attention_backward` take the
arguments of :func:`refattn.core.attention.attention` (plus ``block_size``) and
return its numbers (``tests/fast/test_streaming.py``: every activation and score,
masks, causal, to 1e-12 in float64), with one difference in the cache: it
holds per query row two numbers (``m`` and ``z``) and the output, never an
``n_q x n_k`` array.

This module is the *reading* loop (``streaming_attention(..., reading=True)``):
:func:`_stream_rows` and :func:`_backward_blocks`, one commented line per
step of the derivation, on one thread. Its mathematics per block is the
reference's: the score's ``forward`` and ``backward``
(:mod:`refattn.core.scores`) and the activation's ``ell`` (sigsoftmax:
``half_ell``, see :func:`_ell_over_c`), ``rho``, ``drho`` and ``dell``
(:mod:`refattn.core.activations`), so an activation a user writes as an
:class:`~refattn.core.activations.Activation` subclass streams too. NumPy and
CuPy run the same source (:func:`refattn.core.backend.array_module`); the
forward pass assigns nothing in place, so autograd can differentiate it.
Plain NumPy arrays with a pairwise score take the fast route by default,
:mod:`refattn.fast.streaming_fast`: the same loop in strips of query rows on
a thread pool, with the fast kernels, tested equal to the same reference.
"""

from __future__ import annotations

import contextlib
import hashlib

import numpy as np

from ..core.attention import attention_args, causal_mask, padding, rows
from ..core.backend import array_module, is_traced, quiet, stop_gradient, sum_to, to_numpy
from ..core.checks import check_grad, check_int, owned
from . import streaming_fast
from .blocks import Blocks, non_finite_as_reference
from .kernels import rho_is_one
from .threads import single_threaded_blas

__all__ = ["streaming_attention", "streaming_attention_backward"]


def _ell_over_c(act, s):
    """``(ell / c, c)``: ``c = 2`` for sigsoftmax, whose ``ell ~ 2s`` overflows for scores below half the
    most negative float while ``ell / 2`` does not (:class:`refattn.core.activations.SigSoftmax`); 1 otherwise."""
    half = getattr(act, "half_ell", None)
    return (half(s), 2.0) if half is not None else (act.ell(s), 1.0)


def _one_blas_thread(xp):
    """On the host, BLAS on one thread while the blocks run; nothing on a GPU.

    Each block's products are small (``block_size x d`` by ``d x
    block_size``): a second BLAS thread gains nothing on them, and between
    them it spins for about 0.1 s, taking a core from the elementwise work
    that follows (4x slower on a loaded 2-core machine;
    ``derivations/23-streaming.md``, section 8). A process-wide setting,
    restored on exit (:class:`refattn.fast.threads.single_threaded_blas`).
    """
    return single_threaded_blas() if xp is np else contextlib.nullcontext()


# --------------------------------------------------------------------------
# Forward: one block of query rows against every key block
# --------------------------------------------------------------------------


@quiet
def _stream_rows(xp, blocks, act, V, rows):
    """Steps 1-6 of ``derivations/23-streaming.md``: the output rows ``rows``.

    Returns ``(y, m, z)``: the output ``(..., bq, d_v)``, the row maximum
    ``m`` of ``ell / c`` (:func:`_ell_over_c`) and the normaliser
    ``z = sum_j e^(ell_ij - c m_i)``, each ``(..., bq, 1)``.
    """
    # nothing seen yet: max of no keys, sum of none, output 0 (m an array: CuPy's where takes no Python bool)
    m, z, y = xp.asarray(-np.inf, dtype=V.dtype), 0.0, 0.0
    for cols in blocks.key_blocks():
        if not blocks.visible(rows, cols):
            break  # causal: this and every later key block lie above the diagonal
        # Step 1: the block's scores, by the reference score function
        keep = blocks.keep(rows, cols)
        s = non_finite_as_reference(xp, blocks.scores(rows, cols)[0], keep)  # (..., bq, bk)
        # Step 2: ell = log h; a masked entry has h = 0, ell = -inf
        l, c = _ell_over_c(act, s)  # (..., bq, bk)  ell / c
        if keep is not None:
            l = xp.where(keep, l, -np.inf)  # (..., bq, bk)
        # Step 3: the running maximum; the shift carries no gradient
        m_new = xp.maximum(m, xp.max(stop_gradient(l), axis=-1, keepdims=True))  # (..., bq, 1)
        shift = xp.where(m_new == -np.inf, 0.0, m_new)  # (..., bq, 1)  a row that saw no h > 0: any finite shift
        # Step 4: rescale what was summed so far from shift m_old to m_new: e^(c (m_old - m_new)) in [0, 1]
        alpha = xp.exp(c * (xp.where(m == -np.inf, shift, m) - shift))  # (..., bq, 1)  1 while nothing was seen
        # Step 5: this block's terms e_ij = e^(ell_ij - c m_new) in [0, 1], and the new normaliser
        e = xp.exp(c * (l - shift))  # (..., bq, bk)  0 where masked
        z_new = alpha * z + xp.sum(e, axis=-1, keepdims=True)  # (..., bq, 1)  >= 1 once a key has h > 0
        inv = 1.0 / xp.where(z_new == 0, 1.0, z_new)  # (..., bq, 1)  no normaliser yet: y stays 0 (NaN stays NaN)
        # Step 6: y = output over the keys seen so far: old terms rescaled, new ones rho e v
        w = e if rho_is_one(act) else act.rho(s) * e  # (..., bq, bk)  rho_ij e_ij
        y = (alpha * z * inv) * y + (w * inv) @ V[..., cols, :]  # (..., bq, d_v)
        m, z = m_new, z_new
    return y, m, z


#: Queries and keys per block of the reading loop when ``block_size`` is not given.
READING_BLOCK = 256


def _promoted(Q, K, V, params):
    """Inputs of several float dtypes in the one dtype the reference computes in (NumPy's promotion),
    so that the output and every gradient come back in it, as the reference's do."""
    dtypes = {a.dtype for a in (Q, K, V, *params.values()) if a is not None}
    if len(dtypes) == 1:
        return Q, K, V, params
    return _in_dtype(np.result_type(*dtypes), Q, K, V, params)


def _in_dtype(dtype, Q, K, V, params):
    """``Q, K, V`` (``Q`` may be ``None``) and the score parameters, cast to ``dtype``."""
    Q, K, V = (None if a is None else a.astype(dtype) for a in (Q, K, V))
    return Q, K, V, {name: v.astype(dtype) for name, v in params.items()}


def streaming_attention(Q, K, V, *, score="scaled_dot", activation="softmax", params=None,
                        mask=None, causal=False, block_size=None, score_options=None, reading=False):
    """Attention's forward pass (TanhMax Eqs. 1-2, ``Y = phi(S) V``) in blocks, in O(n) memory.

    The online update of ``derivations/23-streaming.md`` (Steps 1-6): for each block of queries, a loop
    over the key blocks keeps per query row the running maximum ``m`` of ``ell`` and the normaliser
    ``z = sum_j e^(ell_ij - m_i)`` (Eq. 01.R1, ``phi = rho(s) softmax(ell(s))``); the ``n_q x n_k``
    scores never exist. Arguments and output are :func:`refattn.core.attention.attention`'s, and:

    Parameters
    ----------
    block_size : int, optional
        Queries and keys per block (need not divide ``n``): the largest temporaries are
        ``(..., block_size, block_size)``. By default the fast route chooses strips for the cache
        (:func:`refattn.fast.streaming_fast.strip_sizes`) and the reading loop takes :data:`READING_BLOCK`.
    reading : bool
        Run the loop the derivation walks line by line (:func:`_stream_rows`), on one thread. By
        default plain NumPy arrays with a pairwise score take the fast route
        (:mod:`refattn.fast.streaming_fast`) and the rest (CuPy, traced values, per-token scores) the
        reading loop; both return the reference's numbers.

    Returns
    -------
    out : ndarray (..., n_q, d_v), or (..., 1, d_v) for per-token scores
    cache : dict
        For :func:`streaming_attention_backward`, of size O(n d): the inputs, the output, ``m`` and
        ``z`` per query row and the route that ran (derivation 23, section 7).
    """
    sc, act, params, mask, _ = attention_args(Q, K, V, score, activation, params, mask, causal,
                                              score_options)  # causal: per block, in Blocks.keep
    if act.offset:  # the online normaliser has no term for the phantom key (derivation 25, section 1)
        raise ValueError(f"activation: {act.name!r} has a denominator offset, which streaming attention does not "
                         "take yet; use refattn.attention")
    block_size = None if block_size is None else check_int(block_size, "block_size", 1)
    if not isinstance(reading, (bool, np.bool_)):
        raise TypeError(f"reading: expected True or False, got {type(reading).__name__}")
    Q, K, V, params = _promoted(Q, K, V, params)
    xp = array_module(Q, K, V, mask, *params.values())
    seen = padding(xp, mask if not causal or mask is None else mask & causal_mask(np.shape(K)[-2], xp=xp),
                   sc.pairwise, np.shape(K)[:-2] + (np.shape(Q)[-2] if sc.pairwise else 1, np.shape(K)[-2]))
    Q, K, V = rows(xp, Q, seen[0]), rows(xp, K, seen[1]), rows(xp, V, seen[1])  # padding's rows are 0, as the
    # reference's (a causal mask combined with a mask of n_q x n_k booleans: that size again, once)
    cache = {**_owned_inputs(Q, K, V, params, mask), "causal": bool(causal), "block_size": block_size,
             "score": sc, "activation": act, "seen": seen}
    if not reading and streaming_fast.applies(sc, Q, K, V, mask, params):
        out, aux = streaming_fast.forward(sc, act, Q, K, V, params, mask, bool(causal), block_size)
        cache.update(route="fast", out=out, **aux)
        return out, cache
    block_size = READING_BLOCK if block_size is None else block_size
    blocks = Blocks(sc, Q, K, params, mask, bool(causal), block_size)
    with _one_blas_thread(xp):
        parts = [_stream_rows(xp, blocks, act, V, rows) for rows in blocks.query_blocks()]  # Steps 1-6
    out = xp.concatenate([y for y, _, _ in parts], axis=-2)  # (..., n_q, d_v)
    # a value that is not finite reaches its column of every row of the slice in the reference
    # (0 inf = NaN in W V), also the rows whose key blocks lie above the diagonal and were skipped here
    out = xp.where(xp.isfinite(V).all(axis=-2, keepdims=True), out, np.nan)
    m = xp.concatenate([mi[..., 0] for _, mi, _ in parts], axis=-1)  # (..., n_q)
    z = xp.concatenate([zi[..., 0] for _, _, zi in parts], axis=-1)  # (..., n_q)
    cache.update(route="reading", block_size=block_size, out=out, m=m, z=z)
    return out, cache


# --------------------------------------------------------------------------
# Backward: recompute each block's p from (m, z), then Eq. 01.R5 with D = dY . Y
# --------------------------------------------------------------------------


def streaming_attention_backward(grad_out, cache):
    """The gradients ``(dQ, dK, dV, dparams)`` of :func:`streaming_attention` for ``grad_out = dY``, as
    :func:`refattn.core.attention.attention_backward` returns them, block by block: Steps 7-10 of
    ``derivations/23-streaming.md``, ``D_i = dY_i . Y_i`` in place of ``<u_i, phi_i>`` in Eq. 01.R5 and each
    block's ``p`` recomputed from the cached ``m`` and ``z``. Mixed dtypes run, and return, in the promoted one."""
    check_grad(grad_out, "grad_out", np.shape(cache["out"]))
    if _digest(cache["mask"]) != cache.get("mask_digest", _digest(cache["mask"])):
        raise ValueError("mask: it was changed in place after streaming_attention; backward needs the mask "
                         "forward used (pass a copy to forward if you reuse the array)")
    cache, grad_out = _promoted_cache(cache, grad_out)
    if cache["route"] == "fast" and grad_out.dtype not in (np.float32, np.float64):
        # the fast route runs in float32 and float64 only: a wider dY (float128) takes the reading loop,
        # whose m and z are forward's in the promoted dtype
        cache = streaming_attention(cache["Q"], cache["K"], cache["V"], score=cache["score"],
                                    activation=cache["activation"], params=cache["params"], mask=cache["mask"],
                                    causal=cache["causal"], block_size=cache["block_size"], reading=True)[1]
    Q, K, V, out = cache["Q"], cache["K"], cache["V"], cache["out"]
    sc, act, params = cache["score"], cache["activation"], cache["params"]
    xp = array_module(grad_out, Q, K, V, *params.values())
    if cache["route"] == "fast" and xp is np:
        grads = streaming_fast.backward(grad_out, cache)
    else:
        blocks = Blocks(sc, Q, K, params, cache["mask"], cache["causal"], cache["block_size"])
        with _one_blas_thread(xp):
            grads = _backward_blocks(xp, blocks, act, grad_out, cache)
    dQ, dK, dV, dparams = _not_finite_slices(xp, grads, (Q, K, V, out, grad_out))
    seen_q, seen_k = cache.get("seen", (None, None))  # padding's rows were selected away: gradient 0
    return rows(xp, dQ, seen_q), rows(xp, dK, seen_k), rows(xp, dV, seen_k), dparams


def _owned_inputs(Q, K, V, params, mask):
    """The cache's inputs: copies of the caller's ``Q, K, V`` and ``params`` (O(n d)), and the mask (an
    ``n_q x n_k`` array this path never doubles) by reference, with a digest that backward compares."""
    return {"Q": owned(Q), "K": owned(K), "V": owned(V), "params": {k: owned(v) for k, v in params.items()},
            "mask": mask, "mask_digest": _digest(mask)}


def _digest(mask):
    """A digest of the mask's bytes (``None`` for no mask), to tell that it changed between forward and backward."""
    if mask is None or is_traced(mask):
        return None
    return hashlib.blake2b(np.ascontiguousarray(to_numpy(mask)), digest_size=16).digest()


def _promoted_cache(cache, grad_out):
    """The cache and ``grad_out`` in one dtype, the one the reference's products would give them
    (float64 ``dY`` for a float32 forward: float64 gradients, computed in float64)."""
    dtype = np.result_type(grad_out.dtype, cache["out"].dtype)
    if grad_out.dtype != dtype:
        grad_out = grad_out.astype(dtype)
    if cache["out"].dtype == dtype:
        return cache, grad_out
    Q, K, V, params = _in_dtype(dtype, cache["Q"], cache["K"], cache["V"], cache["params"])
    cast = {k: cache[k].astype(dtype) for k in ("out", "m", "z")}
    return {**cache, **cast, "Q": Q, "K": K, "V": V, "params": params}, grad_out


def _not_finite_slices(xp, grads, arrays):
    """Every gradient of a (batch, head) slice that met a value that is not finite, NaN.

    In the reference such a value spreads through the dense products (0 inf and 0 NaN are NaN, a
    NaN row of weights fills its masked entries too: derivation 01, section 4.4) into blocks that
    streaming never computes, so which gradients stay finite would depend on the block sizes.
    Streaming answers NaN for the whole slice instead: never finite where the reference is not
    (nor where a block of another size would not be), and the same for every block size. The
    slice's test is the inputs, the output and the upstream gradient (``arrays``); the score
    parameters, shared by every slice, become NaN where any slice is.
    """
    present = [a for a in arrays if a is not None]
    lead = np.broadcast_shapes(*(np.shape(a)[:-2] for a in present))
    bad = xp.zeros(lead, bool)
    for a in present:
        bad = bad | ~xp.isfinite(stop_gradient(a)).all(axis=(-2, -1))
    if not bool(to_numpy(bad).any()):
        return grads
    dQ, dK, dV, dparams = grads

    def spread(g):
        if g is None:
            return None
        b = bad
        extra = b.ndim - (g.ndim - 2)
        if extra > 0:
            b = b.any(axis=tuple(range(extra)))
        ones = tuple(i for i, (n_g, n_b) in enumerate(zip(np.shape(g)[:-2], b.shape)) if n_g == 1 and n_b != 1)
        b = b.any(axis=ones, keepdims=True) if ones else b
        return xp.where(b[..., None, None], np.nan, g)

    return spread(dQ), spread(dK), spread(dV), {name: xp.full_like(g, np.nan) for name, g in dparams.items()}


@quiet
def _backward_blocks(xp, blocks, act, grad_out, cache):
    """The loops of :func:`streaming_attention_backward` (Steps 7-10)."""
    Q, K, V, out, params = cache["Q"], cache["K"], cache["V"], cache["out"], cache["params"]
    # Step 7: D_i = dY_i . Y_i = sum_j u_ij phi_ij, one number per query row
    D = xp.sum(grad_out * out, axis=-1, keepdims=True)  # (..., n_q, 1)
    m, z = cache["m"][..., None], cache["z"][..., None]  # (..., n_q, 1)
    shift = xp.where(m == -np.inf, 0.0, m)  # (..., n_q, 1)  the forward's final shift
    inv = 1.0 / xp.where(z == 0, 1.0, z)  # (..., n_q, 1)  no normaliser: p = 0
    dQ = None if Q is None else xp.zeros_like(Q)  # (..., n_q, d)
    dK, dV = xp.zeros_like(K), xp.zeros_like(V)  # (..., n_k, d), (..., n_k, d_v)
    dparams = {p: xp.zeros_like(v) for p, v in params.items()}
    for cols in blocks.key_blocks():
        Vj = V[..., cols, :]  # (..., bk, d_v)
        for rows in blocks.query_blocks():
            if not blocks.visible(rows, cols):
                continue  # causal: a block above the diagonal has p = 0
            # Step 8: recompute the block's scores and its final p_ij = e^(ell_ij - c m_i) / z_i
            s, score_cache = blocks.scores(rows, cols)  # (..., bq, bk)
            keep = blocks.keep(rows, cols)
            s = non_finite_as_reference(xp, s, keep)
            l, c = _ell_over_c(act, s)  # (..., bq, bk)
            if keep is not None:
                l = xp.where(keep, l, -np.inf)
            p = xp.exp(c * (l - shift[..., rows, :])) * inv[..., rows, :]  # (..., bq, bk)
            rho = act.rho(s)  # (..., bq, bk)
            dY = grad_out[..., rows, :]  # (..., bq, d_v)
            # Step 9: Y = phi V  =>  dV_j = sum_i phi_ij dY_i, and u_ij = dY_i . v_j
            dV[..., cols, :] += sum_to(xp, xp.swapaxes(rho * p, -1, -2) @ dY, Vj.shape)  # (..., bk, d_v)
            u = dY @ xp.swapaxes(Vj, -1, -2)  # (..., bq, bk)
            # Step 10: Eq. 01.R5 with <u_i, phi_i> = D_i: ds = u (rho' + rho ell') p - ell' p D
            pl = p * act.dell(s)  # (..., bq, bk)  p_ij ell'_ij
            ds = u * (act.drho(s) * p + rho * pl) - pl * D[..., rows, :]  # (..., bq, bk)
            # ... and through the score function, derivations/02-scores.md
            q_slice, dq, dk, dpar = blocks.score_backward(rows, cols, ds, score_cache)
            if dQ is not None:
                dQ[..., q_slice, :] += dq  # (..., bq, d)
            dK[..., cols, :] += dk  # (..., bk, d)
            for name, g in dpar.items():
                if name in blocks.pair_params:
                    dparams[name][rows, cols] += g  # per-pair weights: this block's slice
                else:
                    dparams[name] += g  # shared weights: a sum over blocks
    return dQ, dK, dV, dparams
