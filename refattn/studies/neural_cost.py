r"""What Neural Attention's scores cost in memory and time (NeuralAttn, sections 3.2 and 4.3, Tables 6-8).

NeuralAttn computes its score matrix by building, for every query-key pair, the
concatenation ``C[i, j] = [q'_i; k'_j]`` (its Eq. 7, Algorithm 1 step 6), a
tensor of shape ``(batch, heads, n, n, 2d')``, and applying an MLP to each of
its vectors (Eq. 8). Its section 3.2 blames ``C`` for Neural Attention's
"much worse memory requirement", and its Tables 6-8 report the memory and
time of whole training runs, for ``d' = 2, 16`` and no projection (``d = 64``).

This module evaluates the same score matrix ``S (..., n_q, n_k)`` three ways
and measures each:

* :func:`neural_scores_concat` (a): ``C`` built explicitly, as NeuralAttn does,
  then ``W_h C[i, j]``; the largest arrays are ``C`` and the hidden
  pre-activation, ``n_q n_k (2d' + h)`` entries per batch element.
* :func:`neural_scores_decomposed` (b): ``W_h [q'; k'] = W_hq q' + W_hk k'``,
  so each query and key goes through its half of ``W_h`` once and the pairs
  only add: the one pairwise array is the pre-activation, ``n_q n_k h``
  entries. With ``inplace=False`` it is :meth:`refattn.core.scores.Neural.forward`
  as it stands (autograd-traceable, so it holds three pair-sized arrays).
* :func:`neural_scores_chunked` (c): (b) for ``chunk`` queries at a time,
  written into a preallocated ``S``; the pairwise temporary is
  ``chunk * n_k * h``, and what remains quadratic is ``S`` itself.

and, as the reference, dot-product scores ``Q K^T / sqrt(d)``
(``refattn.score("scaled_dot")``). :func:`neural_vjp_chunked` is the matching
chunked backward pass (shared weights): it recomputes the pre-activation
chunk by chunk instead of storing it.

The evaluations (a)-(c) are NumPy only and use in-place operations on
temporaries they own, so that their peak memory is the method's, not NumPy's
expression evaluation; they are for measuring, and autograd cannot trace
them (:class:`refattn.core.scores.Neural` is the traceable one). All three agree
with it to rounding (``tests/studies/test_neural_cost.py``).

Measurement: :func:`measure_peak` (``tracemalloc``: NumPy reports its array
buffers to it) gives the peak bytes allocated during one call, output
included; :func:`measure_time` the best of several ``time.perf_counter``
runs. :func:`peak_bytes` is the analytical count of
``derivations/17-neural-attention-cost.md``, checked against the
measurement; :func:`max_length` solves it for the longest sequence that fits
a memory budget. :func:`run_neural_cost` runs the sweep,
:func:`report` prints it in the form of NeuralAttn's Tables 6-8,
:func:`plot` draws it; ``refattn neural-cost`` runs them (:class:`Settings`, :func:`run`).
"""

from __future__ import annotations

import gc
import math
import os
import platform
import sys
import time
import tracemalloc
from dataclasses import dataclass

import numpy as np

from ..core.backend import sum_to

from ..core.checks import check_float_array, score_inputs, check_int
from ..core.scores import score
from ..training.runs import check_memory
from . import StudySettings, max_memory, option

__all__ = [
    "METHODS",
    "LABELS",
    "PAPER_TABLES",
    "neural_scores_concat",
    "neural_scores_decomposed",
    "neural_scores_chunked",
    "neural_vjp_chunked",
    "dot_scores",
    "peak_bytes",
    "max_length",
    "measure_peak",
    "measure_time",
    "paper_concat_check",
    "Settings",
    "run_neural_cost",
    "run",
    "report",
    "plot",
]

#: The evaluations measured, in table order. ``library`` is
#: ``refattn.score("neural").forward`` as it stands (traceable by autograd).
METHODS = ("dot", "concat", "decomposed", "chunked", "library")

LABELS = {
    "dot": "dot-product QK^T/sqrt(d)",
    "concat": "(a) concat C, Eq. 7",
    "decomposed": "(b) Whq q' + Whk k'",
    "chunked": "(c) (b) in row chunks",
    "library": "scores.Neural.forward",
}

#: NeuralAttn, Tables 6-8: memory (GB/sample) and "inference speed" (ms/sample)
#: during *training* of the whole model (Neural Attention in the first layer
#: only), keyed by d' (64 = "None", no down-projection, d = 64).
PAPER_TABLES = {
    "table6": {"data": "WikiText-103", "n": 1024, "heads": 8, "batch": 16, "d": 64,
               "dot": {"memory_gb": 1.0, "time_ms": 5.7},
               "neural": {2: {"memory_gb": 1.4, "time_ms": 7.8},
                          16: {"memory_gb": 4.9, "time_ms": 15.8},
                          64: {"memory_gb": 8.7, "time_ms": 48.1}}},
    "table7": {"data": "CIFAR-10", "n": 785, "heads": 8, "batch": 32, "d": 64,
               "dot": {"memory_gb": 0.7, "time_ms": 5.4},
               "neural": {2: {"memory_gb": 1.1, "time_ms": 6.6}}},
    "table8": {"data": "CIFAR-100", "n": 785, "heads": 8, "batch": 32, "d": 64,
               "dot": {"memory_gb": 0.7, "time_ms": 5.4},
               "neural": {2: {"memory_gb": 1.1, "time_ms": 6.6}}},
}

_MIB = 2 ** 20

#: The figure ``refattn neural-cost --out DIR`` writes.
FIGURE = "neural_cost.png"


@dataclass
class Settings(StudySettings):
    """Neural Attention's score memory and time, concatenated vs decomposed vs chunked, as ratios to
    dot-product scores (NeuralAttn Tables 6-8).

    Defaults: NeuralAttn's ``n = 1024`` (Table 6) and ``785`` (Tables 7-8)
    among other lengths, its ``d' = 2, 16, 64`` (64 = ``d``, its "no
    down-projection", done here as a ``64 x 64`` projection; the per-token cost
    is negligible) and its per-head width ``d = 64``; the MLP's hidden width is
    not stated there (refattn's default is 16). Every count is proportional to
    ``batch * heads``, so the ratios do not depend on them. ``budget_mib``: the
    memory budgets for which the longest reachable ``n`` of each method is
    computed from :func:`peak_bytes`; ``max_mib``: no single measurement may
    allocate more (analytically); ``verify_budget``: also run each method once,
    memory only, at its longest ``n`` for the smallest budget and the largest
    ``d'``, and record the measured peak.
    """

    ns: tuple[int, ...] = option((128, 256, 512, 785, 1024), "comma-separated sequence lengths", low=1)
    d_primes: tuple[int, ...] = option((2, 16, 64), "comma-separated projected widths d'", low=1)
    batch: int = option(1, "batch", low=1)
    heads: int = option(1, "heads", low=1)
    d: int = option(64, "per-head width of the queries and keys", low=1)
    hidden: int = option(16, "hidden units of the score MLP", low=1)
    chunk: int = option(64, "query rows per chunk", low=1)
    budget_mib: tuple[int, ...] = option((256, 1024), "comma-separated memory budgets for the longest n", low=1)
    repeats: int = option(3, "timing repeats, best taken", low=1)
    max_mib: float = option(1536, "MiB one measurement may allocate at most (analytically); a larger one is "
                                  "skipped", positive=True)
    seed: int = option(0, "seed", low=0)
    max_memory: float | None = max_memory()
    verify_budget: bool = option(True, "measure each method once at its longest n for the smallest budget",
                                 cli=False)


# --------------------------------------------------------------------------
# Shared checks
# --------------------------------------------------------------------------


def _prepare(q, k, params, hidden, beta):
    """Check the inputs as :class:`refattn.core.scores.Neural` does; return what every
    evaluation needs: ``(batch, n_q, n_k, beta, per_pair, P, dtype)``."""
    sc = score("neural", hidden=hidden, beta=beta)
    for name, x in (("q", q), ("k", k)):
        if not isinstance(x, np.ndarray):
            check_float_array(x, name, min_ndim=2)  # the clear TypeError for non-arrays
            raise TypeError(f"{name}: expected a numpy.ndarray (these cost evaluations are NumPy only; "
                            f"use refattn.score('neural').forward for autograd or CuPy), got {type(x).__name__}")
    shape, P = score_inputs(sc, q, k, params)
    batch, (n_q, n_k), d = shape[:-2], shape[-2:], np.shape(k)[-1]
    for name, x in P.items():
        if not isinstance(x, (np.ndarray, np.generic)):
            raise TypeError(f"params[{name!r}]: expected a numpy.ndarray, got {type(x).__name__}")
    dtype = np.result_type(q, k, *P.values())
    return batch, n_q, n_k, sc.beta_for(d), sc.is_per_pair(P), P, dtype


def _sigma_(z, hidden):
    """Apply the hidden activation in place (``z`` is a temporary we own)."""
    if hidden == "tanh":
        np.tanh(z, out=z)
    else:
        np.maximum(z, 0.0, out=z)  # relu
    return z


def _chunk(chunk):
    return check_int(chunk, "chunk")


def _project(q, k, P):
    """NeuralAttn Eqs. 5-6: ``q' = Wq q``, ``k' = Wk k`` (per token)."""
    return q @ P["Wq"].T, k @ P["Wk"].T  # (..., n_q, d'), (..., n_k, d')


def _contract(z, wa):
    """``t_ij = wa . z_ij`` for shared ``wa (h,)``: one matrix-vector product over
    the contiguous pair array (no copy)."""
    return (z.reshape(-1, z.shape[-1]) @ wa).reshape(z.shape[:-1])  # (..., n_q, n_k)


# --------------------------------------------------------------------------
# The three evaluations of S
# --------------------------------------------------------------------------


def neural_scores_concat(q, k, params, *, hidden="tanh", beta=None):
    r"""Neural Attention scores with NeuralAttn's concatenation ``C`` built explicitly.

    NeuralAttn, Eqs. 5-9 and Algorithm 1, literally: project (Eqs. 5-6),
    broadcast ``Q'`` to ``(..., n_q, n_k, d')`` and ``K'`` likewise (step 5:
    views, no memory), concatenate into
    ``C (..., n_q, n_k, 2d')`` (Eq. 7, step 6: stored), then
    ``s_ij = beta (wa . sigma(W_h C[i, j] + bh) + ba)`` with
    ``W_h = [Whq Whk]`` (Eq. 8, steps 7-10; ``beta = 1/sqrt(d)`` of Eq. 9).
    ``derivations/17-neural-attention-cost.md``, section 2.1, Eq. 17.M1.

    Parameters
    ----------
    q : ndarray (..., n_q, d)
    k : ndarray (..., n_k, d)
        Queries and keys (NumPy, real floating point); batch dimensions
        broadcast.
    params : dict
        The parameters of ``refattn.score("neural")`` (shared or per-pair,
        see :class:`refattn.core.scores.Neural`).
    hidden : {"tanh", "relu"}
    beta : float, optional
        As in :class:`refattn.core.scores.Neural`.

    Returns
    -------
    S : ndarray (..., n_q, n_k)

    Peak memory (entries, per batch element, shared weights):
    ``n_q n_k (2d' + h) + (n_q + n_k) d'`` (:func:`peak_bytes`).
    """
    batch, n_q, n_k, beta, per_pair, P, dtype = _prepare(q, k, params, hidden, beta)
    qp, kp = _project(q, k, P)  # (..., n_q, d'), (..., n_k, d')   Eqs. 5-6
    dp = qp.shape[-1]
    Qb = np.broadcast_to(qp[..., :, None, :], batch + (n_q, n_k, dp))  # view  (Alg. 1 step 5)
    Kb = np.broadcast_to(kp[..., None, :, :], batch + (n_q, n_k, dp))  # view
    C = np.concatenate([Qb, Kb], axis=-1)  # (..., n_q, n_k, 2d')  Eq. 7, stored
    Wh = np.concatenate([P["Whq"], P["Whk"]], axis=-1)  # (h, 2d') or (n_q, n_k, h, 2d')
    if per_pair:
        z = np.einsum("...ijc,ijhc->...ijh", C, Wh)  # (..., n_q, n_k, h)  W_h[i, j] C[i, j]
    else:
        h = Wh.shape[0]
        z = (C.reshape(-1, 2 * dp) @ Wh.T).reshape(C.shape[:-1] + (h,))  # (..., n_q, n_k, h)
    del C
    z += P["bh"]
    _sigma_(z, hidden)  # (..., n_q, n_k, h)  sigma(W_h C + bh)
    t = np.einsum("...ijh,ijh->...ij", z, P["wa"]) if per_pair else _contract(z, P["wa"])  # Eq. 8
    del z
    t += P["ba"]
    t *= beta  # (..., n_q, n_k)  Eq. 9's 1/sqrt(d)
    return t


def neural_scores_decomposed(q, k, params, *, hidden="tanh", beta=None, inplace=True):
    r"""Neural Attention scores via ``W_h [q'; k'] = Whq q' + Whk k'``, never forming ``C``.

    Splitting ``W_h = [Whq Whk]`` by columns, the pre-activation of pair
    ``(i, j)`` is ``z_ij = (Whq q'_i + bh) + Whk k'_j``: a per-query vector
    plus a per-key vector (``derivations/02-scores.md``, Eq. 02.N2;
    ``derivations/17-neural-attention-cost.md``, Eq. 17.D2 and section 2.2). The bias is
    folded into the per-query half, so the pairs cost one addition each; the
    only pairwise array is ``z (..., n_q, n_k, h)``, updated in place.

    Parameters
    ----------
    q, k, params, hidden, beta
        As in :func:`neural_scores_concat`.
    inplace : bool
        True (default): the in-place evaluation above. False: call
        :meth:`refattn.core.scores.Neural.forward` unchanged (autograd-traceable:
        no in-place updates, so ``z``, ``sigma(z)`` and ``sigma(z) * wa``
        coexist, three pair-sized arrays).

    Returns
    -------
    S : ndarray (..., n_q, n_k)

    Peak memory (entries, per batch element, shared weights):
    ``n_q n_k (h + 1) + (n_q + n_k)(d' + h)``.
    """
    if not isinstance(inplace, (bool, np.bool_)):
        raise TypeError(f"inplace: expected a bool, got {type(inplace).__name__}")
    batch, n_q, n_k, beta_v, per_pair, P, dtype = _prepare(q, k, params, hidden, beta)
    if not inplace:
        return score("neural", hidden=hidden, beta=beta)(q, k, P)
    qp, kp = _project(q, k, P)  # (..., n_q, d'), (..., n_k, d')
    if per_pair:
        z = np.einsum("ijhe,...ie->...ijh", P["Whq"], qp)  # (..., n_q, n_k, h)
        z = z + np.einsum("ijhe,...je->...ijh", P["Whk"], kp)  # (..., n_q, n_k, h)
        z += P["bh"]
    else:
        a = qp @ P["Whq"].T  # (..., n_q, h)
        a += P["bh"]  # the bias, once per query instead of once per pair
        b = kp @ P["Whk"].T  # (..., n_k, h)
        z = a[..., :, None, :] + b[..., None, :, :]  # (..., n_q, n_k, h)  Eq. 02.N2, the one pair array
    _sigma_(z, hidden)
    t = np.einsum("...ijh,ijh->...ij", z, P["wa"]) if per_pair else _contract(z, P["wa"])
    del z
    t += P["ba"]
    t *= beta_v  # (..., n_q, n_k)
    return t


def neural_scores_chunked(q, k, params, *, chunk=64, hidden="tanh", beta=None):
    r"""Neural Attention scores, (b) evaluated ``chunk`` query rows at a time.

    ``S`` is allocated once; for each block of rows ``I`` (of at most
    ``chunk`` queries) the pre-activation ``z_Ij = a_I + b_j`` is formed in a
    reused buffer of shape ``(..., chunk, n_k, h)``, activated in place, and
    contracted with ``wa`` into ``S[..., I, :]``
    (``derivations/17-neural-attention-cost.md``, sections 2.4 and 3). Every entry
    of ``S`` is computed by the same operations as in (b), so the two agree
    to rounding for any ``chunk``, dividing ``n_q`` or not.

    Parameters
    ----------
    q, k, params, hidden, beta
        As in :func:`neural_scores_concat`.
    chunk : int
        Query rows per block (``>= 1``; values above ``n_q`` mean one block).

    Returns
    -------
    S : ndarray (..., n_q, n_k)

    Peak memory (entries, per batch element, shared weights, ``c = min(chunk, n_q)``):
    ``n_q n_k + c n_k (h + 1) + (n_q + n_k)(d' + h)``: the quadratic term is
    ``S`` alone.
    """
    chunk = _chunk(chunk)
    batch, n_q, n_k, beta_v, per_pair, P, dtype = _prepare(q, k, params, hidden, beta)
    c = min(chunk, n_q)
    qp, kp = _project(q, k, P)  # (..., n_q, d'), (..., n_k, d')
    h = P["wa"].shape[-1]
    S = np.empty(batch + (n_q, n_k), dtype=dtype)  # (..., n_q, n_k)  the output, the one n^2 array
    buf = np.empty(batch + (c, n_k, h), dtype=dtype)  # (..., c, n_k, h)  reused for every block
    if not per_pair:
        a = qp @ P["Whq"].T  # (..., n_q, h)
        a += P["bh"]
        b = kp @ P["Whk"].T  # (..., n_k, h)
    for i0 in range(0, n_q, c):
        i1 = min(i0 + c, n_q)
        z = buf[..., : i1 - i0, :, :]  # (..., r, n_k, h)  a view of the buffer
        if per_pair:
            np.add(np.einsum("ijhe,...ie->...ijh", P["Whq"][i0:i1], qp[..., i0:i1, :]),
                   np.einsum("ijhe,...je->...ijh", P["Whk"][i0:i1], kp), out=z)
            z += P["bh"][i0:i1]
            _sigma_(z, hidden)
            S[..., i0:i1, :] = np.einsum("...ijh,ijh->...ij", z, P["wa"][i0:i1])
        else:
            np.add(a[..., i0:i1, None, :], b[..., None, :, :], out=z)  # z_Ij = a_I + b_j
            _sigma_(z, hidden)
            S[..., i0:i1, :] = z @ P["wa"]  # (..., r, n_k)
    S += P["ba"]
    S *= beta_v
    return S


def neural_vjp_chunked(grad_s, q, k, params, *, chunk=64, hidden="tanh", beta=None):
    r"""The VJP of the Neural Attention score (shared weights), chunked like :func:`neural_scores_chunked`:
    ``(dq, dk, dparams)`` as :meth:`refattn.core.scores.Neural.backward` gives them, by its formulas
    (``derivations/02-scores.md``, section 5.6), without the whole ``(..., n_q, n_k, h)`` pre-activation
    (:func:`_blocks_backward`; ``derivations/17-neural-attention-cost.md``, section 4). The upstream
    gradient ``grad_s`` (..., n_q, n_k) comes first; the inputs take the cache's place."""
    chunk = _chunk(chunk)
    batch, n_q, n_k, beta_v, per_pair, P, dtype = _prepare(q, k, params, hidden, beta)
    if per_pair:
        raise ValueError("params: neural_vjp_chunked supports shared weights only; per-pair weights "
                         "are themselves (n_q, n_k, h, d'), so chunking the activations saves nothing "
                         "(use refattn.score('neural').backward)")
    check_float_array(grad_s, "grad_s", min_ndim=2)
    if tuple(grad_s.shape) != batch + (n_q, n_k):
        raise ValueError(f"grad_s: shape {tuple(grad_s.shape)} does not match the scores' shape "
                         f"{batch + (n_q, n_k)}")
    c = min(chunk, n_q)
    Wq, Wk, Whq, Whk, wa = P["Wq"], P["Wk"], P["Whq"], P["Whk"], P["wa"]
    M = math.prod(batch)  # the batch dimensions, merged into one axis b

    def flat(x):  # (..., n, e) -> (M, n, e), broadcasting the batch first
        return np.broadcast_to(x, batch + x.shape[-2:]).reshape((M,) + x.shape[-2:])

    qf, kf = flat(q), flat(k)  # (M, n_q, d), (M, n_k, d)
    qp, kp = qf @ Wq.T, kf @ Wk.T  # (M, n_q, d'), (M, n_k, d')
    a = qp @ Whq.T + P["bh"]  # (M, n_q, h)
    b = kp @ Whk.T  # (M, n_k, h)
    g = beta_v * grad_s.reshape(M, n_q, n_k)  # (M, n_q, n_k)  G' = beta G
    dA, dB, dwa = _blocks_backward(a, b, g, wa, hidden, c, dtype)
    dbh = dA.sum(axis=(0, 1))  # (h,)
    dba = g.sum()
    dWhq = np.einsum("bih,bie->he", dA, qp)  # (h, d')
    dWhk = np.einsum("bjh,bje->he", dB, kp)  # (h, d')
    dqp = dA @ Whq  # (M, n_q, d')
    dkp = dB @ Whk  # (M, n_k, d')
    dWq = np.einsum("bie,bid->ed", dqp, qf)  # (d', d)
    dWk = np.einsum("bje,bjd->ed", dkp, kf)  # (d', d)
    dq = sum_to(np, (dqp @ Wq).reshape(batch + (n_q, -1)), q.shape)  # (..., n_q, d)
    dk = sum_to(np, (dkp @ Wk).reshape(batch + (n_k, -1)), k.shape)  # (..., n_k, d)
    return dq, dk, {"Wq": dWq, "Wk": dWk, "Whq": dWhq, "Whk": dWhk,
                    "bh": dbh, "wa": dwa, "ba": np.asarray(dba).reshape(np.shape(P["ba"]))}


def _blocks_backward(a, b, g, wa, hidden, c, dtype):
    """``dA (M, n_q, h)``, ``dB (M, n_k, h)`` and ``dwa (h,)`` of :func:`neural_vjp_chunked`, ``c`` query rows
    at a time: per block ``z_Ij = a_I + b_j`` recomputed, turned in place into ``sigma(z)`` (for ``dwa``)
    and then into ``gz = G' wa sigma'(z)`` (Eq. 02.P2); ``dA_I = sum_j gz``, ``dB += sum_i gz``."""
    (M, n_q, h), n_k = a.shape, b.shape[1]
    dA = np.empty((M, n_q, h), dtype=dtype)  # (M, n_q, h)
    dB = np.zeros((M, n_k, h), dtype=dtype)  # (M, n_k, h)
    dwa = np.zeros(h, dtype=dtype)
    buf = np.empty((M, c, n_k, h), dtype=dtype)
    for i0 in range(0, n_q, c):
        i1 = min(i0 + c, n_q)
        z = buf[:, : i1 - i0]  # (M, r, n_k, h)
        np.add(a[:, i0:i1, None, :], b[:, None, :, :], out=z)  # recompute z_Ij
        _sigma_(z, hidden)  # z now holds sigma(z)
        gI = g[:, i0:i1, :]  # (M, r, n_k)
        dwa += np.einsum("bij,bijh->h", gI, z)  # dwa = sum G' sigma(z)
        if hidden == "tanh":
            np.multiply(z, z, out=z)
            np.subtract(1.0, z, out=z)  # tanh' = 1 - tanh^2
        else:
            np.sign(z, out=z)  # relu' = [z > 0] = sign(relu(z)), relu'(0) = 0
        z *= wa
        z *= gI[..., None]  # gz = G' wa sigma'(z)   (02.P2)
        dA[:, i0:i1, :] = z.sum(axis=2)  # sum over keys
        dB += z.sum(axis=1)  # sum over the block's queries
    return dA, dB, dwa

_SCALED_DOT = score("scaled_dot")


def dot_scores(q, k):
    """The reference: scaled dot-product scores ``Q K^T / sqrt(d)`` (NeuralAttn, Eq. 1),
    ``refattn.score("scaled_dot").forward``, which scales ``Q`` (``n d`` entries)
    rather than ``S``. Peak memory: ``n_q n_k + n_q d`` entries per batch element."""
    return _SCALED_DOT(q, k)


# --------------------------------------------------------------------------
# The analytical count, and the longest sequence a budget allows
# --------------------------------------------------------------------------


def peak_bytes(method, *, n_q, n_k=None, d=64, d_prime=16, hidden=16, chunk=64, batch=1, itemsize=8):
    r"""Analytical peak bytes allocated by one call of ``method`` (shared weights).

    Counts every array alive at the call's high-water mark
    (``derivations/17-neural-attention-cost.md``, section 2, Eqs. 17.M0-17.M4),
    with ``m = batch`` batch elements (batch x heads), ``c = min(chunk, n_q)``:

    ========== ===========================================================
    dot        m (n_q n_k + n_q d)
    concat     m (n_q n_k (2d' + h) + (n_q + n_k) d') + 2d' h
    decomposed m (n_q n_k (h + 1) + (n_q + n_k)(d' + h))
    chunked    m (n_q n_k + c n_k (h + 1) + (n_q + n_k)(d' + h))
    library    m ((2h + 1) n_q n_k + (n_q + n_k)(d' + h) + n_q h)
    ========== ===========================================================

    times ``itemsize``. The inputs ``Q``, ``K`` and the parameters exist
    before the call and are not counted; the output ``S`` is.
    """
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    n_q = check_int(n_q, "n_q")
    n_k = n_q if n_k is None else check_int(n_k, "n_k")
    d, dp, h = check_int(d, "d"), check_int(d_prime, "d_prime"), check_int(hidden, "hidden")
    m, s = check_int(batch, "batch"), check_int(itemsize, "itemsize")
    c = min(check_int(chunk, "chunk"), n_q)
    pairs, tokens = n_q * n_k, n_q + n_k
    entries = {
        "dot": m * (pairs + n_q * d),
        "concat": m * (pairs * (2 * dp + h) + tokens * dp) + 2 * dp * h,
        "decomposed": m * (pairs * (h + 1) + tokens * (dp + h)),
        "chunked": m * (pairs + c * n_k * (h + 1) + tokens * (dp + h)),
        "library": m * (pairs * (2 * h + 1) + tokens * (dp + h) + n_q * h),  # z, sigma(z), sigma(z) @ wa; a + bh
    }[method]
    return s * entries


def max_length(method, budget_bytes, **sizes):
    """The largest ``n`` (``n_q = n_k = n``) whose :func:`peak_bytes` fits ``budget_bytes``.

    ``sizes`` are the other arguments of :func:`peak_bytes` (``d``,
    ``d_prime``, ``hidden``, ``chunk``, ``batch``, ``itemsize``). The count
    increases with ``n``, so a doubling search and a bisection find the
    exact integer. Returns 0 when not even ``n = 1`` fits.
    """
    budget = check_int(budget_bytes, "budget_bytes")

    def fits(n):
        return peak_bytes(method, n_q=n, **sizes) <= budget

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


# --------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------


def measure_peak(fn, *args, **kwargs):
    """``(peak_bytes, result)``: the peak traced memory allocated during ``fn(*args, **kwargs)``.

    Uses :mod:`tracemalloc`, to which NumPy reports its array buffers. The
    peak is taken relative to the memory traced just before the call, so
    only what the call allocates counts (its result included). If
    ``tracemalloc`` is already tracing it is left running.
    """
    gc.collect()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return int(peak - base), out


def measure_time(fn, *args, repeats=3, **kwargs):
    """The best (smallest) wall time in seconds of ``repeats`` calls of ``fn``
    (``time.perf_counter``); the minimum is the least disturbed by other load."""
    repeats = check_int(repeats, "repeats")
    best = math.inf
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
        del out
    return best


# --------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------


def paper_concat_check():
    """NeuralAttn's extra memory over dot-product attention against the size of its ``C``.

    For each Neural Attention row of Tables 6-8: the extra memory per sample
    (Neural minus Dot-Product, GB read as 1e9 bytes), and the analytic size of
    the concatenation ``C`` of Eq. 7 for one sample at the table's sizes, in
    float32 (``heads * n^2 * 2d'`` entries of 4 bytes); their ratio says how
    many ``C``-sized arrays the extra memory could hold
    (``derivations/17-neural-attention-cost.md``, section 6).

    Returns a dict (JSON-able): ``rows`` (one per Neural Attention row) and
    ``table6_fit``: the line ``extra = alpha |C| + beta`` through Table 6's
    ``d' = 2`` and ``16`` rows, and what it predicts for its ``d' = 64`` row.
    """
    out = []
    for name, t in PAPER_TABLES.items():
        for dp, p in t["neural"].items():
            extra = (p["memory_gb"] - t["dot"]["memory_gb"]) * 1e9
            c_bytes = 4 * t["heads"] * t["n"] ** 2 * 2 * dp
            out.append({"table": name, "d_prime": dp, "n": t["n"], "heads": t["heads"],
                        "extra_gb": extra / 1e9, "concat_gb": c_bytes / 1e9,
                        "extra_over_concat": extra / c_bytes})
    r2, r16, r64 = (next(r for r in out if r["table"] == "table6" and r["d_prime"] == dp) for dp in (2, 16, 64))
    alpha = (r16["extra_gb"] - r2["extra_gb"]) / (r16["concat_gb"] - r2["concat_gb"])
    beta = r2["extra_gb"] - alpha * r2["concat_gb"]
    fit = {"alpha": alpha, "beta_gb": beta, "predicted_gb_d64": alpha * r64["concat_gb"] + beta,
           "reported_gb_d64": r64["extra_gb"]}
    return {"rows": out, "table6_fit": fit}



def _call(method, q, k, params, chunk):
    if method == "dot":
        return dot_scores(q, k)
    if method == "concat":
        return neural_scores_concat(q, k, params)
    if method == "decomposed":
        return neural_scores_decomposed(q, k, params)
    if method == "chunked":
        return neural_scores_chunked(q, k, params, chunk=chunk)
    return neural_scores_decomposed(q, k, params, inplace=False)  # library


def _agreement(d, d_prime, hidden, seed):
    """Max abs differences of (b), (c), library and per-pair forms against (a), float64."""
    rng = np.random.default_rng(seed)
    sc = score("neural")
    n_q, n_k = 13, 11
    q = rng.standard_normal((2, 3, n_q, d))  # (B, H, n_q, d)
    k = rng.standard_normal((2, 3, n_k, d))
    out = {"n_q": n_q, "n_k": n_k, "chunks": [1, 4, 5, n_q, 64]}
    for layout, pp in (("shared", None), ("per_pair", (n_q, n_k))):
        P = sc.init_params(d, rng, d_prime=d_prime, hidden_size=hidden, per_pair=pp)
        ref = neural_scores_concat(q, k, P)
        errs = {"decomposed": float(np.max(np.abs(neural_scores_decomposed(q, k, P) - ref))),
                "library": float(np.max(np.abs(sc(q, k, P) - ref)))}
        errs["chunked"] = max(float(np.max(np.abs(neural_scores_chunked(q, k, P, chunk=c) - ref)))
                              for c in out["chunks"])
        out[layout] = errs
    return out


def run_neural_cost(settings, *, progress=None):
    """Peak memory and time of the Neural Attention score matrix, (a)-(c) and the library's forward, against
    dot-product scores, for every ``n`` and ``d'`` (:class:`Settings`; ``derivations/17-neural-attention-cost.md``).

    Float64, standard normal queries and keys ``(batch, heads, n, d)``, shared weights; each method measured
    once under :func:`measure_peak` and timed by :func:`measure_time` (:func:`_rows_at`), unless its analytic
    peak exceeds ``max_mib``; the longest ``n`` per memory budget (:func:`_budget_rows`); ``agreement``, the
    largest differences of (b), (c) and the library against (a).
    """
    t_start = time.perf_counter()
    s = settings
    check_memory(memory_estimate(s.ns, s.d_primes, batch=s.batch, heads=s.heads, d=s.d, hidden=s.hidden,
                                 chunk=s.chunk, max_mib=s.max_mib),
                 f"--ns {max(s.ns)} --batch {s.batch} --heads {s.heads}", s.max_memory)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)
    agreement = _agreement(s.d, min(s.d_primes), s.hidden, s.seed)
    rows = [row for n in s.ns for row in _rows_at(s, n, say)]
    return {
        "settings": {"ns": list(s.ns), "d_primes": list(s.d_primes),
                     **{k: getattr(s, k) for k in ("batch", "heads", "d", "hidden", "chunk")},
                     "budget_mib": [float(b) for b in s.budget_mib], "repeats": s.repeats,
                     "max_mib": float(s.max_mib), "seed": s.seed, "dtype": "float64",
                     "hidden_activation": "tanh", "weights": "shared",
                     "machine": {"python": platform.python_version(), "numpy": np.__version__,
                                 "processor": platform.machine(), "cpus": os.cpu_count(),
                                 "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                                 "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")}},
        "agreement": agreement,
        "rows": rows,
        "budgets": _budget_rows(s, say),
        "paper": {name: {**t, "neural": {str(k): v for k, v in t["neural"].items()}}
                  for name, t in PAPER_TABLES.items()},
        "paper_concat_check": paper_concat_check(),
        "seconds": time.perf_counter() - t_start,
    }


def _rows_at(settings, n, say):
    """The measured rows of sequence length ``n``: dot-product scores, then every method at every ``d'``."""
    batch, heads, d, hidden, chunk, seed = (getattr(settings, k) for k in ("batch", "heads", "d", "hidden", "chunk",
                                                                           "seed"))
    cap, d_primes = settings.max_mib * _MIB, settings.d_primes
    sc = score("neural")
    rng = np.random.default_rng([seed, n])
    q = rng.standard_normal((batch, heads, n, d))  # (B, H, n, d)
    k = rng.standard_normal((batch, heads, n, d))  # (B, H, n, d)
    rows, dot_row = [], None
    for dp in d_primes:
        P = sc.init_params(d, np.random.default_rng([seed, n, dp]), d_prime=dp, hidden_size=hidden)
        ref = None
        # (b) first, so that every other neural output can be compared with it
        for method in ("dot", "decomposed", "concat", "chunked", "library"):
            if method == "dot" and dot_row is not None:
                continue
            analytic = peak_bytes(method, n_q=n, d=d, d_prime=dp, hidden=hidden, chunk=chunk, batch=batch * heads)
            row = {"n": n, "d_prime": None if method == "dot" else dp, "method": method,
                   "analytic_bytes": analytic, "peak_bytes": None, "measured_over_analytic": None,
                   "seconds": None, "max_abs_diff": None, "skipped": analytic > cap}
            if not row["skipped"]:
                peak, out = measure_peak(_call, method, q, k, P, chunk)
                row["peak_bytes"] = peak
                row["measured_over_analytic"] = peak / analytic
                if method == "decomposed":
                    ref = out
                elif method != "dot" and ref is not None:
                    row["max_abs_diff"] = float(np.max(np.abs(out - ref)))
                del out
                row["seconds"] = measure_time(_call, method, q, k, P, chunk, repeats=settings.repeats)
                say(f"n={n:5d} d'={dp:3d} {method:10s} peak {peak / _MIB:9.2f} MiB "
                    f"(x{row['measured_over_analytic']:.3f} analytic)  {1e3 * row['seconds']:9.2f} ms")
            else:
                say(f"n={n:5d} d'={dp:3d} {method:10s} skipped: {analytic / _MIB:.0f} MiB > max_mib")
            if method == "dot":
                dot_row = row
            rows.append(row)
    order = {m: i for i, m in enumerate(METHODS)}
    rows.sort(key=lambda r: (-1 if r["d_prime"] is None else d_primes.index(r["d_prime"]), order[r["method"]]))
    for row in rows:
        row["memory_ratio_analytic"] = row["analytic_bytes"] / dot_row["analytic_bytes"]
        row["memory_ratio"] = (row["peak_bytes"] / dot_row["peak_bytes"]
                               if row["peak_bytes"] is not None and dot_row["peak_bytes"] else None)
        row["time_ratio"] = (row["seconds"] / dot_row["seconds"]
                             if row["seconds"] is not None and dot_row["seconds"] else None)
    return rows


def _budget_rows(settings, say):
    """The longest ``n`` of every method within each memory budget, and its verification (the first budget,
    the largest ``d'``)."""
    batch, heads, d, hidden, seed = (getattr(settings, k) for k in ("batch", "heads", "d", "hidden", "seed"))
    cap, d_primes = settings.max_mib * _MIB, settings.d_primes
    sc = score("neural")
    budget_rows = []
    for i, b in enumerate(float(b) for b in settings.budget_mib):
        for dp in d_primes:
            sizes = {"d": d, "d_prime": dp, "hidden": hidden, "chunk": settings.chunk, "batch": batch * heads}
            reach = {meth: max_length(meth, int(b * _MIB), **sizes) for meth in METHODS}
            entry = {"budget_mib": b, "d_prime": dp, "max_n": reach, "verified": None}
            if settings.verify_budget and i == 0 and dp == max(d_primes):
                entry["verified"] = {}
                for meth in METHODS:
                    n = reach[meth]
                    if n < 1 or peak_bytes(meth, n_q=n, **sizes) > cap:
                        continue
                    rng = np.random.default_rng([seed, n])
                    q = rng.standard_normal((batch, heads, n, d))
                    k = rng.standard_normal((batch, heads, n, d))
                    P = sc.init_params(d, np.random.default_rng([seed, n, dp]), d_prime=dp, hidden_size=hidden)
                    peak, out = measure_peak(_call, meth, q, k, P, settings.chunk)
                    del out, q, k
                    entry["verified"][meth] = {"n": n, "peak_bytes": peak, "within_budget": peak <= b * _MIB,
                                               "measured_over_analytic": peak / peak_bytes(meth, n_q=n, **sizes)}
                    say(f"budget {b:g} MiB, d'={dp}: {meth} at n={n}: measured {peak / _MIB:.1f} MiB")
            budget_rows.append(entry)
    return budget_rows


# --------------------------------------------------------------------------
# Tables and figure
# --------------------------------------------------------------------------


def _fmt(x, spec, none="—"):
    return none if x is None else format(x, spec)


def _paper_ratio(table, dp):
    t = PAPER_TABLES[table]
    p = t["neural"].get(dp)
    if p is None:
        return None
    return p["memory_gb"] / t["dot"]["memory_gb"], p["time_ms"] / t["dot"]["time_ms"]


def _table(result, n, tables):
    """Rows of one NeuralAttn-style table at sequence length ``n``."""
    rows = [r for r in result["rows"] if r["n"] == n]
    s = result["settings"]
    head = (f"{'attention (score only)':26s} {'dp':>3s} {'peak MiB':>9s} {'mem x':>7s} {'time ms':>9s} "
            f"{'time x':>7s} | paper {'+'.join(tables)}: mem x, time x (whole model, training)")
    lines = [head, "-" * len(head)]
    for r in rows:
        dp = r["d_prime"]
        mem = _fmt(r["memory_ratio"], "7.2f")
        if r["memory_ratio"] is None:
            mem = f"{r['memory_ratio_analytic']:6.2f}*"
        paper = ""
        if r["method"] == "dot":
            paper = "1.00, 1.00"
        elif r["method"] == "concat":
            pr = _paper_ratio(tables[0], dp) if dp is not None else None
            paper = f"{pr[0]:.2f}, {pr[1]:.2f}" if pr else "—"
        peak = r["peak_bytes"] / _MIB if r["peak_bytes"] is not None else None
        lines.append(f"{LABELS[r['method']]:26s} {('-' if dp is None else str(dp)):>3s} "
                     f"{_fmt(peak, '9.2f')} {mem:>7s} {_fmt(None if r['seconds'] is None else 1e3 * r['seconds'], '9.2f')} "
                     f"{_fmt(r['time_ratio'], '7.2f')} | {paper}")
    lines.append(f"(B x H = {s['batch'] * s['heads']}, d = {s['d']}, h = {s['hidden']}, chunk = {s['chunk']}; "
                 "* = analytic ratio, the measurement was over max_mib)")
    return lines


def memory_estimate(ns, d_primes, *, batch=1, heads=1, d=64, hidden=16, chunk=64, max_mib=1536):
    """Bytes ``refattn neural-cost`` needs at its peak, before any work: the largest measured call
    (:func:`peak_bytes` of every method and ``d'`` at the longest ``n``, at most ``max_mib``, above
    which a method is skipped) plus the queries and keys it runs on, for the longest ``n`` measured
    or verified (a verified length has a score matrix within ``max_mib``), and 16 MiB besides."""
    m, n = int(batch) * int(heads), max(int(v) for v in ns)
    peaks = [peak_bytes(meth, n_q=n, d=d, d_prime=int(dp), hidden=hidden, chunk=chunk, batch=m)
             for meth in METHODS for dp in d_primes]
    n_verified = max(n, math.isqrt(int(max_mib * _MIB) // 8 // m) + 1)
    return min(max(peaks), max_mib * _MIB) + 2 * m * n_verified * d * 8 + 16 * _MIB


#: ``refattn neural-cost``.
run = run_neural_cost


def report(result):
    """:func:`run_neural_cost`'s result as tables in the form of NeuralAttn's Tables 6-8."""
    s = result["settings"]
    ag = result["agreement"]
    lines = [f"Neural Attention score cost against dot-product scores, float64, NumPy {s['machine']['numpy']}, "
             f"threads OMP={s['machine']['OMP_NUM_THREADS']} OPENBLAS={s['machine']['OPENBLAS_NUM_THREADS']}; "
             f"{result['seconds']:.1f} s",
             f"agreement with (a), n_q={ag['n_q']}, n_k={ag['n_k']}, chunks {ag['chunks']} (max abs diff): "
             + "; ".join(f"{lay}: " + ", ".join(f"{k} {v:.1e}" for k, v in ag[lay].items())
                         for lay in ("shared", "per_pair")),
             ""]
    seen = set()
    for table, label in (("table6", "Table 6 form"), ("table7", "Tables 7-8 form")):
        n = PAPER_TABLES[table]["n"]
        if n in s["ns"] and n not in seen:
            seen.add(n)
            data = PAPER_TABLES[table]["data"] + ("/CIFAR-100" if table == "table7" else "")
            lines.append(f"{label}: n = {n} ({data} in NeuralAttn)")
            lines += _table(result, n, [table] if table == "table6" else ["table7", "table8"])
            lines.append("")
    lines.append("all points: measured peak / analytic count, memory ratio and time ratio to dot-product")
    lines.append(f"{'n':>5s} {'dp':>3s} " + " ".join(f"{m:>26s}" for m in METHODS[1:]))
    for n in s["ns"]:
        for dp in s["d_primes"]:
            cells = []
            for meth in METHODS[1:]:
                r = next(r for r in result["rows"] if r["n"] == n and r["d_prime"] == dp and r["method"] == meth)
                if r["peak_bytes"] is None:
                    cells.append(f"{'skipped':>8s} mem {r['memory_ratio_analytic']:6.2f}*  {'—':>6s}")
                else:
                    cells.append(f"{r['measured_over_analytic']:8.4f} mem {r['memory_ratio']:6.2f} "
                                 f"t {r['time_ratio']:6.2f}")
            lines.append(f"{n:5d} {dp:3d} " + " ".join(f"{c:>26s}" for c in cells))
    dots = [r for r in result["rows"] if r["method"] == "dot" and r["peak_bytes"] is not None]
    if dots:
        lines.append("dot-product: " + ", ".join(f"n={r['n']} {r['peak_bytes'] / _MIB:.2f} MiB "
                                                  f"(x{r['measured_over_analytic']:.4f}) {1e3 * r['seconds']:.2f} ms"
                                                  for r in dots))
    return "\n".join(lines + [""] + _budgets_and_paper(result))


def _budgets_and_paper(result):
    """Lines of :func:`report`: the longest ``n`` within each memory budget, and NeuralAttn's extra memory
    against one concatenation per sample (Eq. 7; ``derivations/17-neural-attention-cost.md``, section 6)."""
    s, lines = result["settings"], []
    lines.append(f"longest n within a memory budget (from the analytic count; B x H = {s['batch'] * s['heads']})")
    lines.append(f"{'budget MiB':>10s} {'dp':>3s} " + " ".join(f"{m:>11s}" for m in METHODS))
    for b in result["budgets"]:
        lines.append(f"{b['budget_mib']:10g} {b['d_prime']:3d} "
                     + " ".join(f"{b['max_n'][m]:11d}" for m in METHODS))
        if b["verified"]:
            lines.append("    measured at those n: " + ", ".join(
                f"{m} n={v['n']} {v['peak_bytes'] / _MIB:.2f} MiB"
                + ("" if v["within_budget"] else f" (over by {(v['peak_bytes'] - b['budget_mib'] * _MIB) / 1024:.0f} KiB)")
                for m, v in b["verified"].items()))
    lines.append("")
    lines.append("NeuralAttn's extra memory per sample (Neural - Dot) against one float32 C (Eq. 7) per sample:")
    for c in result["paper_concat_check"]["rows"]:
        lines.append(f"    {c['table']}: d'={c['d_prime']:2d}, n={c['n']}, {c['heads']} heads: extra {c['extra_gb']:.2f} GB, "
                     f"C {c['concat_gb']:.3f} GB, extra/C = {c['extra_over_concat']:.2f}")
    fit = result["paper_concat_check"]["table6_fit"]
    lines.append(f"    Table 6, extra = alpha |C| + beta through d'=2, 16: alpha {fit['alpha']:.2f}, beta "
                 f"{fit['beta_gb']:+.2f} GB; predicts {fit['predicted_gb_d64']:.1f} GB extra at d'=64, "
                 f"reported {fit['reported_gb_d64']:.1f} GB")
    lines.append("")
    lines.append("paper (NeuralAttn Tables 6-8) is whole-model training memory (GB/sample) and time (ms/sample) "
                 "with Neural Attention in layer 1 of 8 or 12; ours is the score matrix alone, so the ratios "
                 "measure different things (derivations/17-neural-attention-cost.md, section 6).")
    return lines


def plot(result):
    """Peak memory (top) and time (bottom) against ``n``, log-log, one column per ``d'``;
    dashed lines are the analytic counts (:func:`peak_bytes`)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import NullFormatter  # noqa: PLC0415

    s = result["settings"]
    dps = s["d_primes"]
    fig, axes = plt.subplots(2, len(dps), figsize=(3.6 * len(dps), 6.0), squeeze=False, sharex=True)
    colours = {m: f"C{i}" for i, m in enumerate(METHODS)}
    for j, dp in enumerate(dps):
        for meth in METHODS:
            rows = [r for r in result["rows"] if r["method"] == meth and r["d_prime"] in (dp, None)]
            ns = np.array([r["n"] for r in rows])
            ana = np.array([r["analytic_bytes"] for r in rows]) / _MIB
            meas = [(r["n"], r["peak_bytes"] / _MIB, r["seconds"]) for r in rows if r["peak_bytes"] is not None]
            axes[0, j].loglog(ns, ana, ls="--", lw=0.8, color=colours[meth])
            if meas:
                x, mem, sec = (np.array(v) for v in zip(*meas))
                axes[0, j].loglog(x, mem, "o-", ms=3, color=colours[meth], label=LABELS[meth])
                axes[1, j].loglog(x, 1e3 * sec, "o-", ms=3, color=colours[meth], label=LABELS[meth])
        axes[0, j].set_title(f"d' = {dp}, h = {s['hidden']}, chunk = {s['chunk']}", fontsize=9)
        axes[1, j].set_xlabel("sequence length n")
        for ax in axes[:, j]:
            ax.set_xticks(s["ns"])
            ax.set_xticklabels([str(n) for n in s["ns"]], fontsize=7)
            ax.xaxis.set_minor_formatter(NullFormatter())
    axes[0, 0].set_ylabel("peak memory of the call (MiB)")
    axes[1, 0].set_ylabel("best time (ms)")
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    return fig
