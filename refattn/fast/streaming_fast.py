r"""Streaming attention, fast: the loop of :mod:`refattn.fast.streaming` in row strips, on threads.

:func:`refattn.fast.streaming.streaming_attention` runs this module on plain
NumPy arrays with a pairwise score (``reading=True`` runs the plain loop that
``derivations/23-streaming.md`` walks line by line instead). The
mathematics is that loop's, Eqs. 23.S2-23.S4: per query row a running shift
``m`` and normaliser ``z``, the output kept normalised between blocks, the
backward pass recomputing each block's ``p`` from the final ``m`` and ``z``
and using ``<u_i, phi_i> = dY_i . Y_i``. What changes is how the work is cut
and what each block costs (``derivations/23-streaming.md`` section 8
measures each choice):

* **Strips.** A unit of work is a strip of ``bq`` query rows (of ``g``
  (batch, head) slices at once) against blocks of ``bk`` keys, ``bq bk``
  entries in a core's L2 cache (:func:`strip_sizes`); where every key fits,
  a strip is one block and nothing is rescaled. Under ``causal`` a strip's
  keys stop at its last row, so nothing above the diagonal is computed, and
  only the band past the strip's first row is masked. Memory stays O(n).
* **The kernels' streaming forms** (:meth:`refattn.fast.kernels.Generic.stream`):
  ``H = h(s) e^(-f m)`` for a shift ``m`` given per row, by each built-in
  activation's cheapest stable formula (softmax one exponential; TanhMax
  ``e^(s - m) +- e^(-s - m)``, no ``abs`` or sign; the normalised sigmoid
  ``1 / (e^m + e^(m - s))``, one exponential; no ``where`` on random signs),
  and the VJP from the factors of Eq. 01.R5 (:func:`refattn.fast.kernels.vjp_from`)
  with ``<u, phi> = D`` given. An activation the kernels do not know streams
  through its own ``ell`` and ``rho``.
* **The dot products formed here.** For ``s = beta Q K^T`` the backward pass
  leaves each block unnormalised (Eq. 01.R5 is linear in ``p`` and ``phi``
  when ``D`` is given) and folds ``beta`` and ``1 / z`` into the
  ``(bq, d)`` factors of its products; the forward pass normalises the
  ``(bq, d_v)`` product where ``|rho| <= 1``. Each only where a bound shows
  nothing can overflow that the reference keeps finite.
* **Threads.** Units go to :func:`refattn.fast.threads.num_threads` groups of
  about equal work (the costliest first, each to the least loaded group),
  one group per thread of the pool, BLAS held at one thread. A group's
  backward pass accumulates ``dK``, ``dV`` (and shared parameters'
  gradients) in arrays of its own where groups share a slice, added in group
  order: the same numbers whichever thread finishes first.
* **No check per block where none is needed.** The reference's rule for
  scores that are not finite (``+-inf`` counts as NaN) needs a sum over each
  block; for the dot-product scores, finite ``Q`` and ``K`` with
  ``beta max|q_i| max|k_j| < max / 4`` bound every score (Cauchy-Schwarz), so
  the check runs only where the bound fails.

The cache is the reading loop's, except that ``m`` is the row maximum of the
kernel's exponent ``a`` (of ``b`` for cosformer, whose ``b`` is unbounded),
not of ``ell``, and ``z`` the normaliser under that shift: the same ``p``.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.backend import quiet
from . import threads
from .kernels import kernel, vjp_from
from .blocks import Blocks, mask_block, slices
from .strips import block_terms, causal_band, plain_dot, scores_are_finite

__all__ = ["applies", "forward", "backward", "strip_sizes"]

#: Bytes of one block of scores (``g bq bk`` entries): the block and the few temporaries of its
#: activation stay in a core's L2 cache (blocks of 1-4 MiB made the activations with more elementwise
#: passes up to 2.4 times slower in some settings; ``derivations/23-streaming.md`` section 8).
BLOCK_BYTES = 1 << 19
#: Query rows per strip: enough rows for the matrix products to run near BLAS's best speed.
ROWS = 128
#: Keys and queries per block for scores other than the dot products (their blocks hold hidden units too).
OTHER_SCORES_BLOCK = 256


def applies(sc, Q, K, V, mask, params) -> bool:
    """Whether this route runs: plain NumPy arrays of one dtype, float32 or float64, and a pairwise score."""
    arrays = [Q, K, V, *params.values()]
    if not sc.pairwise or any(type(a) is not np.ndarray for a in arrays):
        return False
    if mask is not None and type(mask) is not np.ndarray:
        return False
    dtypes = {a.dtype for a in arrays}
    return len(dtypes) == 1 and dtypes <= {np.dtype(np.float32), np.dtype(np.float64)}


def strip_sizes(slices, n_q, n_k, itemsize, dot=True, block_size=None, workers=None):
    """``(g, bq, bk)``: slices per unit, query rows per strip, keys per block.

    With ``block_size`` given, ``bq = bk = block_size`` and one slice per unit
    (the reading loop's blocks, as the tests use them). Otherwise a strip has
    :data:`ROWS` rows, a block as many keys as fit in :data:`BLOCK_BYTES`
    (all of them where they fit: then no rescaling is needed), and a unit as
    many slices as fit too, while there are at least four units per thread
    (``derivations/23-streaming.md`` section 8).
    """
    if block_size is not None:
        return 1, block_size, block_size
    if not dot:
        return 1, OTHER_SCORES_BLOCK, OTHER_SCORES_BLOCK
    workers = threads.num_threads() if workers is None else workers
    bq = min(n_q, ROWS)
    bk = max(1, min(n_k, BLOCK_BYTES // (bq * itemsize)))
    g = max(1, min(slices, BLOCK_BYTES // (bq * bk * itemsize)))
    while g > 1 and math.ceil(slices / g) * math.ceil(n_q / bq) < 4 * workers:
        g = (g + 1) // 2
    return g, bq, bk


# --------------------------------------------------------------------------
# The plan: units of work, and groups of units, one per thread
# --------------------------------------------------------------------------


def _unchecked(method):
    """A score method without its argument checks (``functools.wraps`` keeps the function it wraps)."""
    return getattr(method, "__wrapped__", method)


class _FastBlocks(Blocks):
    """:class:`refattn.fast.streaming.Blocks` calling the score's forward and backward without their
    argument checks: :func:`~refattn.fast.streaming.streaming_attention` checked the arguments once,
    and a check per block costs as much as the block's arithmetic at the smaller sizes."""

    def __init__(self, *args):
        super().__init__(*args)
        self._forward = _unchecked(type(self.sc).forward)
        self._backward = _unchecked(type(self.sc).backward)

    def scores(self, rows, cols):
        if self.cos:
            return super().scores(rows, cols)
        q, k, params = self._inputs(rows, cols)
        return self._forward(self.sc, q, k, params)  # (g, bq, bk)

    def score_backward(self, rows, cols, ds, cache):
        return (rows,) + tuple(self._backward(self.sc, ds, cache))


class _Plan:
    """Which units there are, which keys each sees, and which thread group runs each."""

    def __init__(self, sc, Q, K, params, mask, causal, lead, sizes):
        self.sc, self.params, self.causal = sc, params, causal
        self.lead = lead
        self.Qf = Q.reshape((-1,) + Q.shape[-2:])  # (S, n_q, d)
        self.Kf = K.reshape((-1,) + K.shape[-2:])  # (S, n_k, d)
        S, self.n_q, self.n_k = self.Kf.shape[0], Q.shape[-2], K.shape[-2]
        self.mask = mask
        per_slice = mask is not None and mask.ndim > 2 and any(x != 1 for x in mask.shape[:-2])
        g, self.bq, self.bk = sizes
        g = 1 if per_slice else g
        self.per_slice_mask = per_slice
        self.units = [(slice(g0, min(g0 + g, S)), rows) for g0 in range(0, S, g)
                      for rows in slices(self.n_q, self.bq)]
        self.groups = _groups(self.units, [self.cost(u) for u in self.units], threads.num_threads())
        self._blocks = {}
        self.beta = sc.beta_for(K.shape[-1]) if plain_dot(sc) else None

    def Qf_rows(self, blocks, rows):
        return blocks.Q[:, rows, :]

    def key_end(self, rows):
        return min(rows.stop, self.n_k) if self.causal else self.n_k

    def chunks(self, rows):
        """The key chunks a strip of ``rows`` sees: none past its last row under ``causal``."""
        return slices(self.key_end(rows), self.bk)

    def cost(self, unit):
        sl, rows = unit
        return (sl.stop - sl.start) * (rows.stop - rows.start) * self.key_end(rows)

    def blocks(self, sl):
        """The score function cut into blocks, for the slices ``sl`` (one :class:`Blocks` each)."""
        b = self._blocks.get(sl.start)
        if b is None:
            b = self._blocks[sl.start] = _FastBlocks(self.sc, self.Qf[sl], self.Kf[sl], self.params,
                                                     self._slice_mask(sl), False, self.bk)
        return b

    def _slice_mask(self, sl):
        mask = self.mask
        if mask is None or mask.ndim <= 2:
            return mask
        if not self.per_slice_mask:  # every leading axis has size 1: one mask for all slices
            return mask.reshape(mask.shape[-2:])
        lead_shape = (1,) * (len(self.lead) - (mask.ndim - 2)) + mask.shape[:-2]
        index = np.unravel_index(sl.start, self.lead)
        return mask[tuple(0 if n == 1 else i for i, n in zip(index, lead_shape))[-(mask.ndim - 2):]]

    def keep(self, blocks, rows, cols):
        """``(user, band)``: the user's mask of the block and, under ``causal``, :func:`causal_band`."""
        return mask_block(blocks.mask, rows, cols), (causal_band(rows, cols) if self.causal else None)

    def disjoint(self):
        """True when no two groups share a slice (then the backward needs no accumulators of its own)."""
        seen = {}
        for gi, group in enumerate(self.groups):
            for sl, _ in group:
                if seen.setdefault(sl.start, gi) != gi:
                    return False
        return True


def _groups(units, costs, workers):
    """Units in ``workers`` groups of about equal cost: the costliest first, each to the group with the
    least so far (ties to the lowest index), each group in the units' own order."""
    workers = max(1, min(workers, len(units)))
    load, members = [0] * workers, [[] for _ in range(workers)]
    for i in sorted(range(len(units)), key=lambda i: -costs[i]):
        w = load.index(min(load))
        load[w] += costs[i]
        members[w].append(i)
    return [[units[i] for i in sorted(m)] for m in members]


def _run_groups(plan, fn):
    """``fn(group_index, units)`` for every group, one group per pool thread (BLAS on one thread)."""
    groups = plan.groups
    with threads.single_threaded_blas():
        return threads.run_blocks(lambda i, j: fn(i, groups[i]), len(groups), 1)


# --------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------


def forward(sc, activation, Q, K, V, params, mask, causal, block_size):
    """Streaming attention's forward pass on NumPy arrays: ``(out, aux)``, ``out`` the output and ``aux``
    what :func:`backward` reads beside the inputs (``m, z (..., n_q)``, the strip ``sizes``)."""
    lead, n_q = Q.shape[:-2], Q.shape[-2]
    sizes = strip_sizes(math.prod(lead), n_q, K.shape[-2], Q.dtype.itemsize, plain_dot(sc), block_size)
    plan = _Plan(sc, Q, K, params, mask, causal, lead, sizes)
    Vf = V.reshape((-1,) + V.shape[-2:])  # (S, n_k, d_v)
    S = Vf.shape[0]
    out = np.empty((S, n_q, V.shape[-1]), V.dtype)  # (S, n_q, d_v)
    m = np.empty((S, n_q, 1), V.dtype)
    z = np.empty((S, n_q, 1), V.dtype)
    k = kernel(activation)
    check = not scores_are_finite(sc, Q, K)
    # |rho| <= 1 and values far from overflow: the sums W V are finite without normalising W first
    post = k.bounded_rho and _below(Vf, K.shape[-2])  # the sum runs over every key, block after block

    @quiet
    def group(_, units):
        for sl, rows in units:
            blocks = plan.blocks(sl)
            y, m_i, z_i = _forward_strip(k, blocks, plan, Vf[sl], rows, check, post)
            out[sl, rows], m[sl, rows], z[sl, rows] = y, m_i, z_i

    _run_groups(plan, group)
    if not np.isfinite(V).all():  # a value that is not finite reaches its column of every row (0 inf = NaN)
        out = np.where(np.isfinite(Vf).all(axis=-2, keepdims=True), out, np.nan)
    return out.reshape(lead + out.shape[-2:]), {"m": m.reshape(lead + (n_q,)), "z": z.reshape(lead + (n_q,)),
                                                "sizes": sizes}


def _below(x, factor):
    """True when ``factor`` times the largest ``|x|`` is below a quarter of the dtype's largest value."""
    with np.errstate(over="ignore", invalid="ignore"):
        top = float(np.max(np.abs(x), initial=0.0))
    return math.isfinite(top) and top * factor < float(np.finfo(x.dtype).max) / 4


def _forward_strip(k, blocks, plan, V, rows, check, post):
    """Eq. 23.S2 over the chunks of one strip: ``(y, m, z)``, ``(g, bq, d_v)`` and ``(g, bq, 1)`` twice."""
    m = z = y = None
    for cols in plan.chunks(rows):
        s, _ = blocks.scores(rows, cols)  # (g, bq, bk)  Step 1
        H, W, _, m_new, shift = block_terms(k, s, *plan.keep(blocks, rows, cols), check, m_old=m)
        zs = np.sum(H, axis=-1, keepdims=True)  # (g, bq, 1)
        if m is None:
            z_new = zs
        else:  # Step 4: rescale what was summed so far
            if k.b_unbounded:  # cosformer's running maximum of b
                alpha = m / shift
            elif k.has_exponent:
                alpha = np.exp(k.ell_factor * (np.where(m == -np.inf, shift, m) - shift))
            else:
                alpha = 1.0
            z_new = alpha * z + zs
        inv = 1.0 / np.where(z_new == 0, 1.0, z_new)  # (g, bq, 1)  no normaliser: y stays 0
        w = H if W is None else W  # rho e^(f (a - m)) b
        if post:  # |w| <= 1: normalise the (g, bq, d_v) product, not the block
            yc = w @ V[:, cols, :]  # (g, bq, d_v)  Step 6
            if y is not None:  # the old rows, rescaled
                yc += (alpha * z) * y
            yc *= inv
        else:  # rho = s may be large: normalise first, so that no sum overflows where the reference's does not
            yc = np.multiply(w, inv, out=w) @ V[:, cols, :]
            if y is not None:
                yc += (alpha * z * inv) * y
        m, z, y = m_new, z_new, yc
    return y, m, z


# --------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------


def backward(grad_out, cache):
    """Streaming attention's backward pass from a cache of :func:`forward`: ``(dQ, dK, dV, dparams)``."""
    Q, K, V, out, params = cache["Q"], cache["K"], cache["V"], cache["out"], cache["params"]
    sc, act, causal = cache["score"], cache["activation"], cache["causal"]
    lead = Q.shape[:-2]
    plan = _Plan(sc, Q, K, params, cache["mask"], causal, lead, cache["sizes"])
    flat = lambda x: x.reshape((-1,) + x.shape[len(lead):])  # noqa: E731
    Vf, Gf = flat(V), flat(grad_out)
    k = kernel(act)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        D = np.sum(Gf * flat(out), axis=-1, keepdims=True)  # (S, n_q, 1)   Step 7: D_i = dY_i . Y_i
        m, z = flat(cache["m"])[..., None], flat(cache["z"])[..., None]  # (S, n_q, 1)
        if k.b_unbounded:
            shift = np.where(m == 0, 1.0, m)
        else:
            shift = np.where(m == -np.inf, 0.0, m)  # the forward's final shift
        inv = 1.0 / np.where(z == 0, 1.0, z)  # (S, n_q, 1)  no normaliser: p = 0
    check = not scores_are_finite(sc, Q, K)
    if plan.beta is not None:  # how far the dot route may scale queries and upstream gradients by 1 / z
        with np.errstate(over="ignore", invalid="ignore"):
            plan.qmax, plan.gmax = float(np.max(np.abs(plan.Qf), initial=0.0)), float(np.max(np.abs(Gf), initial=0.0))
            # a bound on every unnormalised sum of the dot route: |u|, |D| <= d_v |dY| |V|, summed over
            # n_k keys (dQ) or a strip's rows (dK) against |k| or |beta q| in d coordinates
            vmax, kmax = float(np.max(np.abs(Vf), initial=0.0)), float(np.max(np.abs(plan.Kf), initial=0.0))
            n_k, d = plan.Kf.shape[-2], plan.Kf.shape[-1]
            plan.sums = 2 * Vf.shape[-1] * plan.gmax * vmax * (n_k + plan.bq) * d * max(kmax, plan.beta * plan.qmax)
    dQ = np.zeros_like(plan.Qf)
    shared = not plan.disjoint()
    acc = []

    @quiet
    def group(gi, units):
        if gi == 0 or not shared:
            dK, dV, dpar = dK0, dV0, dpar0
        else:  # another group may write the same slices: its own sums, added in group order below
            dK, dV = np.zeros_like(dK0), np.zeros_like(dV0)
            dpar = {p: np.zeros_like(v) for p, v in params.items()}
        for sl, rows in units:
            blocks = plan.blocks(sl)
            dQ[sl, rows] = _backward_strip(k, blocks, plan, Gf[sl, rows], Vf[sl], D[sl, rows],
                                           shift[sl, rows], inv[sl, rows], rows, dK[sl], dV[sl], dpar, check)
        if dK is not dK0:
            acc.append((gi, dK, dV, dpar))

    dK0, dV0 = np.zeros_like(plan.Kf), np.zeros_like(Vf)
    dpar0 = {p: np.zeros_like(v) for p, v in params.items()}
    _run_groups(plan, group)
    for _, dK, dV, dpar in sorted(acc, key=lambda a: a[0]):
        dK0 += dK
        dV0 += dV
        for name in dpar0:
            dpar0[name] += dpar[name]
    return dQ.reshape(Q.shape), dK0.reshape(K.shape), dV0.reshape(V.shape), dpar0


def _backward_strip(k, blocks, plan, dY, V, D, shift, inv, rows, dK, dV, dparams, check):
    """Steps 8-10 over the chunks of one strip; returns the strip's ``dQ`` rows ``(g, bq, d)``,
    adds into ``dK``, ``dV`` and ``dparams``."""
    if plan.beta is not None and k.bounded_factors and not check and _below(inv, plan.beta * plan.qmax) \
            and _below(inv, plan.gmax) and _below(inv, plan.sums):
        return _backward_strip_dot(k, blocks, plan, dY, V, D, shift, inv, rows, dK, dV)
    dq_rows = None
    for cols in plan.chunks(rows):
        s, s_cache = blocks.scores(rows, cols)  # (g, bq, bk)
        H, W, aux, _, _ = block_terms(k, s, *plan.keep(blocks, rows, cols), check, shift=shift, backward=True)
        p = np.multiply(H, inv, out=H)  # (g, bq, bk)  Step 8: the final p, recomputed
        phi = p if W is None else np.multiply(W, inv, out=W)
        dV[:, cols, :] += np.swapaxes(phi, -1, -2) @ dY  # Step 9: dV_j = sum_i phi_ij dY_i
        u = dY @ np.swapaxes(V[:, cols, :], -1, -2)  # (g, bq, bk)   u_ij = dY_i . v_j
        ds = vjp_from(k.act, np, aux, p, u, -1, phi, overwrite_u=True, c=D)  # Step 10, Eq. 01.R5
        _, dq, dk, dpar = blocks.score_backward(rows, cols, ds, s_cache)
        dq_rows = dq if dq_rows is None else dq_rows + dq
        dK[:, cols, :] += dk
        for name, g in dpar.items():
            if name in blocks.pair_params:
                dparams[name][rows, cols] += g  # per-pair weights: this block's slice
            else:
                dparams[name] += g
    return dq_rows


def _backward_strip_dot(k, blocks, plan, dY, V, D, shift, inv, rows, dK, dV):
    """:func:`_backward_strip` for ``s = beta Q K^T``, without normalising any block: Eq. 01.R5 is
    linear in ``p`` and ``phi`` (its ``<u, phi> = D`` given), so the block's ``H = p / inv`` gives
    ``ds / inv``, and the row factor ``inv`` (with ``beta``) goes into the (bq, d) arrays instead:
    ``dV += W^T (inv dY)``, ``dQ = beta inv (ds' K)``, ``dK += ds'^T (beta inv Q)``."""
    q = plan.Qf_rows(blocks, rows)  # (g, bq, d)
    qb, qi, dYi = q * plan.beta, q * (plan.beta * inv), dY * inv
    dq = None
    for cols in plan.chunks(rows):
        Kc = blocks.K[:, cols, :]  # (g, bk, d)
        s = qb @ np.swapaxes(Kc, -1, -2)  # (g, bq, bk)   Step 8: s = beta q k^T
        H, W, aux, _, _ = block_terms(k, s, *plan.keep(blocks, rows, cols), False, shift=shift, backward=True)
        dV[:, cols, :] += np.swapaxes(H if W is None else W, -1, -2) @ dYi  # Step 9: dV_j = sum_i phi_ij dY_i
        u = dY @ np.swapaxes(V[:, cols, :], -1, -2)  # (g, bq, bk)   u_ij = dY_i . v_j
        ds = vjp_from(k.act, np, aux, H, u, -1, W if W is not None else H, overwrite_u=True, c=D)  # ds / inv
        dK[:, cols, :] += np.swapaxes(ds, -1, -2) @ qi  # Step 10: dk_j = beta sum_i ds_ij q_i
        dq = ds @ Kc if dq is None else dq + ds @ Kc
    return dq * (plan.beta * inv)  # dq_i = beta sum_j ds_ij k_j
