"""The fast path: the reference's attention, in blocks, on threads, with fewer passes.

:func:`attention` and :func:`attention_backward` have the signatures of
:func:`refattn.core.attention.attention` and
:func:`refattn.core.attention.attention_backward` and return the same numbers
(``tests/fast/test_fast.py`` checks every activation, score, mask and causal case
to 1e-13 in float64). What they add, each measured in
``derivations/20-speed.md`` and ``benchmarks/bench_cpu_attention.py``:

* **Fewer passes** (:mod:`refattn.fast.kernels`): ``p`` by the split
  ``h = exp(f a) b`` (no logarithm), the VJP in the two factors of Eq. 01.R5,
  in-place buffers; the cache keeps ``p`` and ``w`` and, for most
  activations, not the scores (recomputed on first access of ``cache["s"]``).
* **Blocks and threads** (:mod:`refattn.fast.threads`): on plain NumPy
  arrays with at least :data:`~refattn.fast.threads.MIN_BLOCKED_ENTRIES`
  score entries, the same per-batch code runs once per cache-sized block of
  (batch, head) slices on a thread pool, with OpenBLAS held at one thread
  while the blocks run (a process-wide setting: see
  :class:`~refattn.fast.threads.single_threaded_blas`).
* **Linear attention by associativity**: unmasked linear attention with a
  dot score gets its gradients as ``Q (K^T V)`` products, with no n x n array.
* **Causal strips**: under ``causal``, on NumPy arrays with more than
  :data:`refattn.fast.strips.CAUSAL_ROWS` queries, strips of query rows meet only the keys up to
  their last row, so the blocks above the diagonal are never computed
  (``derivations/20-speed.md`` section 5); ``p`` and ``w`` in the cache are
  still full arrays, 0 above the diagonal.

Values autograd traces go to the reference unchanged (autograd must
differentiate the textbook code); CuPy arrays run the whole-batch code with
the kernels. Import it explicitly: ``from refattn import fast``;
``refattn.attention`` never imports this package.
"""

from __future__ import annotations

import math

import numpy as np

from ..core import attention as reference
from ..core.attention import attention_args
from ..core import checks
from ..core.activations import Linear
from ..core.backend import array_module, is_traced, shape_of, sum_to, to_numpy
from ..core.scores import Dot
from . import strips as causal_strips, threads
from .kernels import forward as kernel_forward, kernel, vjp_from
from .threads import blocking_enabled, num_threads, set_blocking, set_num_threads

__all__ = ["attention", "attention_backward", "AttentionCache", "num_threads",
           "set_num_threads", "set_blocking", "blocking_enabled"]


class AttentionCache(dict):
    """The fast path's cache: ``Q, K, V, params``, the weights ``w``, ``p = softmax(ell(s))``,
    the mask, the score and activation, the score's own cache(s) for its backward
    pass and, where the kernel hands its backward something else, ``aux``.

    For activations whose VJP factors do not need the scores
    (``kernel(act).needs_s`` false), and on the causal strips for every
    activation, the fast path does not keep them: ``cache["s"]`` (and
    ``cache.get("s")``) then recomputes them from ``Q`` and ``K`` on first
    access and keeps them. ``"s" in cache`` tells whether they are held now.

    ``Q, K, V``, ``params`` and the mask are copies of the caller's, so changing
    an input in place between forward and backward changes no gradient.
    """

    def __missing__(self, key):
        if key != "s":
            raise KeyError(key)
        s = self["score"](self["Q"], self["K"], self["params"])
        self["s"] = s if self["score"].pairwise else s[..., None, :]
        return self["s"]

    def get(self, key, default=None):
        return self[key] if key in self or key == "s" else default


def _traced(*arrays):
    return any(is_traced(a) for a in arrays)


def attention(Q, K, V, *, score="scaled_dot", activation="softmax", params=None,
              mask=None, causal=False, score_options=None):
    """:func:`refattn.core.attention.attention`, fast: same arguments, same numbers.

    Returns ``(out, cache)`` with ``cache`` an :class:`AttentionCache` (or, for
    values autograd traces, the reference's own cache).
    """
    if _traced(Q, K, V, *(params or {}).values()):
        return reference.attention(Q, K, V, score=score, activation=activation, params=params,
                                   mask=mask, causal=causal, score_options=score_options)
    sc, act, params, keep, n_q = attention_args(Q, K, V, score, activation, params, mask, causal,
                                                score_options)
    xp = array_module(Q, K, V, keep, *params.values())
    # skip the blocks above the diagonal, where there is more than one strip of rows
    strips = bool(causal) and n_q > causal_strips.CAUSAL_ROWS and _host(xp, Q, K, V, *params.values()) \
        and not act.offset  # the strips' running normaliser has no term for an offset (derivation 25)
    if causal and not strips:
        tri = reference.causal_mask(n_q, xp=xp)
        keep = tri if keep is None else keep & tri
    shape = np.shape(K)[:-2] + (n_q, np.shape(K)[-2])  # (..., n_q, n_k)
    seen = reference.padding(xp, keep if not strips or keep is None else _full_mask(keep, n_q), sc.pairwise, shape)
    Q, K, V = reference.rows(xp, Q, seen[0]), reference.rows(xp, K, seen[1]), reference.rows(xp, V, seen[1])  # as
    # the reference: padding's rows are 0, whatever they held
    size = _block_size(xp, shape, Q, K, V)
    if size is None:
        out, s, p, w, aux, score_cache = _forward(sc, act, Q, K, V, params, keep, strips)
    else:
        out, s, p, w, aux, score_cache = _forward_blocked(sc, act, Q, K, V, params, keep, shape, size, strips)
    if strips and not xp.isfinite(out).all():  # strips: NumPy only
        # something not finite (derivation 01, section 4.4): the reference spreads it over the blocks
        # the strips skipped (0 inf = NaN in W V; a NaN row of weights, masked entries included), so
        # compute every block as the reference does
        return attention(Q, K, V, score=sc, activation=act, params=params, mask=_full_mask(keep, n_q),
                         causal=False, score_options=None)
    # copies of the caller's arrays (O(n d), and the mask's n^2 booleans): backward sees what forward saw
    Q, K, V, keep = checks.owned(Q), checks.owned(K), checks.owned(V), checks.owned(keep)
    params = {k: checks.owned(v) for k, v in params.items()}
    cache = AttentionCache(Q=Q, K=K, V=V, params=params, p=p, w=w, mask=keep, score=sc, activation=act,
                           score_cache=score_cache, block_size=size, strips=strips, seen=seen)
    if s is not None:
        cache["s"] = s
    if aux is not None and aux is not s:
        cache["aux"] = aux
    return out, cache


def _finite_everywhere(xp, sc, Q, K, V, grad_out):
    """No score and no value can be anything but finite, so the linear-dot shortcut (which never forms
    the weights) gives the reference's numbers; else the weights' own rule applies (derivation 01,
    section 4.4)."""
    if xp is not np:  # no bound on the products here: the values only, one bool to the host
        return bool(to_numpy(xp.isfinite(Q).all() & xp.isfinite(K).all() & xp.isfinite(V).all()
                             & xp.isfinite(grad_out).all()))
    return causal_strips.scores_are_finite(sc, Q, K) and bool(xp.isfinite(V).all() and xp.isfinite(grad_out).all())


def _full_mask(keep, n_q):
    """The user's mask and the causal one together, as the reference forms them."""
    tri = reference.causal_mask(n_q, xp=np)
    return tri if keep is None else keep & tri


def _host(xp, *arrays):
    """True for plain NumPy arrays (the strips of the causal route use NumPy's in-place calls)."""
    return xp is np and all(a is None or type(a) is np.ndarray for a in arrays)


def _forward(sc, act, Q, K, V, params, keep, strips=False, into=None):
    """The reference's three steps with the activation's kernel: ``(out, s, p, w, aux, score_cache)``."""
    if strips:
        return causal_strips.forward_causal(sc, act, Q, K, V, params, keep, into)
    s, score_cache = sc.forward(Q, K, params)  # (..., n_q, n_k) or (..., n)
    if not sc.pairwise:
        s = s[..., None, :]  # (..., 1, n)
    kept = kernel(act).needs_s  # else s may become p's memory, and the cache recomputes it if asked
    p, w, aux = kernel_forward(act, s, -1, keep, overwrite_s=not kept)  # softmax(ell(s)), phi = rho p
    return w @ V, (s if kept else None), p, w, aux, score_cache  # out: (..., n_q, d_v)


def attention_backward(grad_out, cache):
    """:func:`refattn.core.attention.attention_backward`, fast: same arguments, same numbers."""
    if not isinstance(cache, AttentionCache):  # the reference's cache (traced values)
        return reference.attention_backward(grad_out, cache)
    Q, K, V, p, w = (cache[k] for k in ("Q", "K", "V", "p", "w"))
    checks.check_grad(grad_out, "grad_out", shape_of(w)[:-1] + shape_of(V)[-1:])
    sc, act = cache["score"], cache["activation"]
    xp = array_module(grad_out, V)
    if (isinstance(act, Linear) and isinstance(sc, Dot) and cache.get("mask") is None and not cache.get("strips")
            and _finite_everywhere(xp, sc, Q, K, V, grad_out)):
        return _backward_linear_dot(xp, sc, grad_out, Q, K, V)
    strips = cache.get("strips", False)
    if strips or not kernel(act).needs_s:
        aux = cache.get("aux")
    else:
        aux = cache["s"]  # recomputed if not kept
    args = (V, aux, p, w, cache["score_cache"])
    size = cache["block_size"]  # the forward's blocks: their score caches are kept
    if size is None:
        dQ, dK, dV, dparams = _backward(sc, act, xp, grad_out, *args, strips)
    else:
        dQ, dK, dV, dparams = _backward_blocked(sc, act, grad_out, *args, size, strips)
    seen_q, seen_k = cache["seen"]  # padding's rows were selected away: gradient 0, as the reference's
    return reference.rows(xp, dQ, seen_q), reference.rows(xp, dK, seen_k), reference.rows(xp, dV, seen_k), dparams


def _backward(sc, act, xp, grad_out, V, aux, p, w, score_cache, strips=False):
    """The chain rule through the three steps, on a batch or one block: ``(dQ, dK, dV, dparams)``."""
    if strips:
        return causal_strips.backward_causal(act, grad_out, V, aux, p, w, score_cache)
    dV = sum_to(xp, xp.swapaxes(w, -1, -2) @ grad_out, np.shape(V))  # (..., n_k, d_v)   dV = W^T dY
    dW = grad_out @ xp.swapaxes(V, -1, -2)  # (..., n_q, n_k)   dW = dY V^T
    # Eq. 01.R5, into dW's memory where it has the weights' precision (float32 dY and V beside float64
    # weights: a float64 ds, as the reference's)
    ds = vjp_from(act, xp, aux, p, dW, -1, w, overwrite_u=dW.dtype == xp.result_type(dW, p, w))
    if not sc.pairwise:
        ds = ds[..., 0, :]  # (..., n)
    dQ, dK, dparams = sc.backward(ds, score_cache)
    return dQ, dK, dV, dparams


def _backward_linear_dot(xp, sc, grad_out, Q, K, V):
    """The backward pass of unmasked linear attention with a dot score, by associativity.

    With ``phi = s / n`` (every key kept) and ``s = beta Q K^T`` the output is
    ``Y = c Q K^T V = c Q M`` with ``c = beta / n`` and ``M = K^T V`` (d, d_v),
    so (``derivations/20-speed.md`` section 4)

        dQ = c dY M^T,   dK = c V (Q^T dY)^T,   dV = c K (Q^T dY),

    four products of n x d and d x d_v matrices instead of the n x n x d ones
    of the general route. Exact, not an approximation; a mask (causal or not)
    breaks the associativity, and then the general route runs.
    """
    n_k, d = np.shape(K)[-2], np.shape(K)[-1]
    c = sc.beta_for(d) / n_k
    M = xp.swapaxes(K, -1, -2) @ V  # (..., d, d_v)       K^T V
    N = xp.swapaxes(Q, -1, -2) @ grad_out  # (..., d, d_v)   Q^T dY
    dQ = grad_out @ xp.swapaxes(M, -1, -2)  # (..., n_q, d)
    dK = V @ xp.swapaxes(N, -1, -2)  # (..., n_k, d)
    dV = K @ N  # (..., n_k, d_v)
    for g in (dQ, dK, dV):
        g *= c
    return dQ, dK, dV, {}


# --------------------------------------------------------------------------
# The blocked route (NumPy only): the same two functions, block by block
# --------------------------------------------------------------------------


def _block_size(xp, shape, *arrays):
    """Slices per block for scores of ``shape``, or None to run the whole batch at once."""
    if xp is not np or any(a is not None and type(a) is not np.ndarray for a in arrays):
        return None
    itemsize = max(a.dtype.itemsize for a in arrays if a is not None)
    return threads.block_size(math.prod(shape[:-2]), shape[-2] * shape[-1], itemsize)


def _merge_batch(x, lead):
    """``x`` with its ``lead`` leading (batch, head) axes merged into one (None stays None)."""
    return None if x is None else x.reshape((-1,) + x.shape[lead:])


def _rows(x, i, j):
    return None if x is None else x[i:j]


def _forward_blocked(sc, act, Q, K, V, params, keep, shape, size, strips=False):
    """:func:`_forward` per block of slices, into full-size outputs (s only if the VJP needs it)."""
    lead, slices = len(shape) - 2, math.prod(shape[:-2])
    Qf, Kf, Vf = _merge_batch(Q, lead), _merge_batch(K, lead), _merge_batch(V, lead)
    per_slice = keep is not None and keep.ndim > 2  # an (n_q, n_k) mask is shared by every slice
    if per_slice:
        keep = _merge_batch(np.broadcast_to(keep, shape), lead)
    score_caches = {}
    if strips:
        return causal_strips.forward_blocked_causal(sc, act, Qf, Kf, Vf, params, keep, per_slice, shape, size,
                                                    score_caches)
    needs_s = kernel(act).needs_s
    parts = threads.Gather(slices, alone=("out",))

    def block(i, j):
        out, s, p, w, aux, score_caches[i] = _forward(sc, act, _rows(Qf, i, j), Kf[i:j], Vf[i:j], params,
                                                      keep[i:j] if per_slice else keep)
        kept = {"out": out, "p": p}
        if w is not p:
            kept["w"] = w
        if needs_s:
            kept["s"] = s
        elif aux is not None:
            kept["aux"] = aux
        parts.put(i, j, kept)

    threads.run_blocks(block, slices, size)
    out, s, p, w, aux = (parts.get(k, shape[:-2]) for k in ("out", "s", "p", "w", "aux"))
    return out, s, p, (p if w is None else w), (s if needs_s else aux), score_caches


def _backward_blocked(sc, act, grad_out, V, aux, p, w, score_caches, size, strips=False):
    """:func:`_backward` per block of slices (the forward's blocks, whose score caches it kept);
    parameter gradients summed in block order."""
    lead = np.ndim(w) - 2
    Gf, Vf, sf, pf, wf = (_merge_batch(x, lead) for x in (grad_out, V, aux, p, w))
    parts = threads.Gather(Vf.shape[0])

    def block(i, j):
        dQ, dK, dV, dparams = _backward(sc, act, np, Gf[i:j], Vf[i:j], _rows(sf, i, j), pf[i:j], wf[i:j],
                                        score_caches[i], strips)
        parts.put(i, j, {"K": dK, "V": dV} if dQ is None else {"Q": dQ, "K": dK, "V": dV})
        return dparams

    per_block = threads.run_blocks(block, Vf.shape[0], size)
    dparams = {k: sum((d[k] for d in per_block[1:]), per_block[0][k]) for k in per_block[0]}
    batch = np.shape(w)[:-2]
    return parts.get("Q", batch), parts.get("K", batch), parts.get("V", batch), dparams
