r"""Score functions: how attention scores ``s`` are made from queries and keys.

TanhMax (Eq. 1) writes the score as ``s_i = f(Q_i, K_i)`` and leaves ``f``
open; the activation ``phi`` (:mod:`refattn.core.activations`) then turns scores
into weights. This module collects the ``f`` of every paper and baseline, each
with a hand-derived vector-Jacobian product (``derivations/02-scores.md``):

============ ======== ==================================================== ===================
name         pairwise s                                                    params
============ ======== ==================================================== ===================
dot          yes      s_ij = q_i . k_j                                     --
scaled_dot   yes      s_ij = beta q_i . k_j,  beta = 1/sqrt(d)             --
additive     yes      s_ij = v . tanh(W_q q_i + W_k k_j)                   W_q, W_k, v
self         no       s_i  = q_i . k_i / scale,  scale = sqrt(d)           --
global       no       s_i  = k_i . v / lam                                 v
neural       yes      s_ij = beta (wa . sigma(Whq q'_i + Whk k'_j + bh)    Wq, Wk, Whq, Whk,
                             + ba),  q' = Wq q, k' = Wk k                  bh, wa, ba
cosformer    yes      s_ij = relu(q_i) . relu(k_j) cos(pi (i - j) / 2M)    --
============ ======== ==================================================== ===================

Shapes. Every score takes ``q (..., n_q, d)`` and ``k (..., n_k, d)``; the
leading ``...`` are batch dimensions (batch, heads), broadcast between ``q``
and ``k``. A *pairwise* score returns ``s (..., n_q, n_k)``; a *per-token*
score (``pairwise = False``: ``self``, ``global``) pairs token ``i`` with
itself and returns ``s (..., n)``. Parameters have no batch dimensions: they
are broadcast over the batch in the forward pass, and their gradients are
summed over it in the VJP.

The seed axis. A model trained for ``S`` random seeds at once holds ``S``
independent copies of every parameter along a leading axis. A score with
``seed_axis = True`` (``global``) also takes its parameters with one extra
leading axis ``S`` (``v (S, d)`` instead of ``v (d,)``; every parameter has it,
or none does). That axis pairs with the *first* batch axis of ``q`` and ``k``:
``k (S, ..., n, d)`` gives ``s (S, ..., n)``, slice ``s`` computed with
``params[...][s]`` alone (a first batch axis of size 1, or no batch axis,
shares the inputs among the seeds). The VJP returns each parameter's gradient
with the same leading axis: summed over the other batch axes and the tokens,
never over the seeds. Without the extra axis nothing changes.

Interface. :func:`score` returns a configured :class:`Score` with

* ``init_params(d, rng, dtype=np.float64, **sizes) -> dict`` random parameters;
* ``forward(q, k, params) -> s``, written against
  :func:`refattn.core.backend.array_module`, so that NumPy, CuPy and autograd all
  run (and autograd differentiates) the same code;
* ``vjp(q, k, params, grad_s) -> (dq, dk, dparams)``, derived by hand and
  checked against autograd and central differences in ``tests/test_scores.py``.

Conventions:

* relu has slope 0 at 0 (cosformer's feature map, neural with
  ``hidden="relu"``), as autograd computes it with ``where``; each score lists
  its non-differentiable points in ``singular``.
* The additive and neural scores share one "pair MLP",
  ``t_ij = w . sigma(a_ij + b_ij + bias)``, and its VJP
  (:func:`_pair_mlp`, :func:`_pair_mlp_vjp`). Because
  ``W_h [q'; k'] = Whq q' + Whk k'``, NeuralAttn's ``n x n x 2d'``
  concatenation (its Eq. 7) is never formed; only the hidden pre-activation
  ``(..., n_q, n_k, h)``, which the method needs anyway, exists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .backend import array_module, check_float_array, check_int, check_real, dtype_of, stop_gradient, sum_to

__all__ = ["Score", "SCORES", "score", "register"]

_REGISTRY: dict = {}


def register(cls):
    """Class decorator: add a score class to the registry under ``cls.name``."""
    _REGISTRY[cls.name] = cls
    return cls


# --------------------------------------------------------------------------
# Small helpers: shapes, option checks, reductions
# --------------------------------------------------------------------------


def _shape(x):
    return tuple(np.shape(stop_gradient(x)))


def _flat(xp, x, batch, core):
    """Broadcast ``x`` to ``batch + x.shape[-core:]`` and merge the batch dims
    into one leading axis, so that one einsum both contracts and sums the batch."""
    x = xp.broadcast_to(x, tuple(batch) + tuple(x.shape[x.ndim - core:]))
    return x.reshape((-1,) + tuple(x.shape[x.ndim - core:]))


def _seed_shape(batch, core):
    """Where a seed-axis parameter ``(S, *core)`` goes to broadcast against ``batch + core``:
    ``(S, 1, ..., 1, *core)``, the seed axis on the first batch axis."""
    return tuple(batch[:1]) + (1,) * (len(batch) - 1) + tuple(core)


def _relu(xp, x):
    # where, not maximum: slope exactly 0 at 0 (autograd's maximum splits 1/2).
    return xp.where(x > 0, x, 0.0)


def _step(x):
    """relu'(x) with the convention relu'(0) = 0, in x's dtype (VJPs only)."""
    return (x > 0).astype(x.dtype)


# --------------------------------------------------------------------------
# The pair MLP shared by "additive" and "neural"
# --------------------------------------------------------------------------

#: hidden activations of the pair MLP: sigma, and sigma' given (z, sigma(z))
_HIDDEN = {
    "tanh": (lambda xp, z: xp.tanh(z), lambda z, hz: 1.0 - hz * hz),
    "relu": (_relu, lambda z, hz: _step(z)),
}


def _pair_mlp(xp, a, b, bias, w, hidden):
    """``t_ij = w_ij . sigma(a_ij + b_ij + bias_ij)``, the last axis contracted.

    ``a``, ``b``, ``bias`` and ``w`` broadcast to ``(..., n_q, n_k, h)``:
    with shared weights ``a`` is ``(..., n_q, 1, h)`` (one per query),
    ``b`` is ``(..., 1, n_k, h)`` (one per key), ``bias`` and ``w`` are
    ``(h,)``; with per-pair weights every one of them is ``(..., n_q, n_k, h)``
    or ``(n_q, n_k, h)``. ``bias`` may be ``None`` (additive has none).
    """
    z = _pre_activation(a, b, bias)  # (..., n_q, n_k, h)
    hz = _HIDDEN[hidden][0](xp, z)  # (..., n_q, n_k, h)
    if len(_shape(w)) == 1:  # shared w: a matrix-vector product, no (..., n_q, n_k, h) product array
        return hz @ w  # (..., n_q, n_k)
    return xp.sum(hz * w, axis=-1)  # (..., n_q, n_k)


def _pre_activation(a, b, bias):
    """``z = a + b + bias``. A shared bias ``(h,)`` is added to the per-query half first
    (``(..., n_q, 1, h)``, small), so only one pair-sized array is made."""
    if bias is None:
        return a + b
    if len(_shape(bias)) == 1:
        return (a + bias) + b
    return a + b + bias


def _pair_mlp_vjp(xp, a, b, bias, w, hidden, g):
    """VJP of :func:`_pair_mlp` for the upstream gradient ``g (..., n_q, n_k)``.

    Returns ``(gz, dw)``: ``gz = g w sigma'(z)``, the gradient with respect to
    the pre-activation ``z = a + b + bias`` (full shape ``(..., n_q, n_k, h)``;
    the caller sums it to ``a``, ``b`` and ``bias``), and ``dw`` summed to
    ``w``'s shape.
    """
    z = _pre_activation(a, b, bias)  # (..., n_q, n_k, h)
    sigma, dsigma = _HIDDEN[hidden]
    hz = sigma(xp, z)  # (..., n_q, n_k, h)
    gz = g[..., None] * w * dsigma(z, hz)  # (..., n_q, n_k, h)
    dw = sum_to(xp, g[..., None] * hz, w.shape)  # (h,) or (n_q, n_k, h)
    return gz, dw
    # dt/dz = w sigma'(z),  dt/dw = sigma(z);  z is linear in a, b, bias with slope 1


# --------------------------------------------------------------------------
# The interface
# --------------------------------------------------------------------------


class Score:
    """A score function ``s = f(q, k; params)`` with its hand-derived VJP.

    Attributes
    ----------
    name : str
        The registry name.
    pairwise : bool
        True: ``q (..., n_q, d)``, ``k (..., n_k, d)`` give ``s (..., n_q, n_k)``.
        False ("per-token"): ``q, k (..., n, d)`` give ``s (..., n)``.
    source : str
        Where the formula comes from.
    singular : tuple of (str, str)
        ``(where, why)`` for each point where ``s`` is not differentiable.
    options : dict
        The configured options (``score(name, **options)``).
    seed_axis : bool
        Whether the parameters may carry one extra leading seed axis ``S``
        (module docstring, "The seed axis").
    """

    name: str = ""
    pairwise: bool = True
    source: str = ""
    singular: tuple = ()
    #: options accepted by ``score(name, **options)``
    option_names: tuple = ()
    #: sizes accepted by :meth:`init_params`
    size_names: tuple = ()
    #: does the score read ``q``? (``global`` does not)
    uses_q: bool = True
    #: may the parameters carry a leading seed axis ``S``?
    seed_axis: bool = False

    @property
    def options(self) -> dict:
        return {n: getattr(self, n) for n in self.option_names}

    def __repr__(self):
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"score({self.name!r}{opts})"

    # --- parameters ----------------------------------------------------------
    def param_spec(self, params) -> dict:
        """Expected parameter shapes, in symbols: ``{name: ("d_a", "d"), ...}``.

        The symbols ``d``, ``n_q`` and ``n_k`` come from ``q`` and ``k``; any
        other symbol is read off the first parameter that has it.
        ``params`` is passed so a score can choose between layouts (neural:
        shared or per-pair).
        """
        return {}

    def init_params(self, d, rng, dtype=np.float64, **sizes) -> dict:
        """Random parameters for feature size ``d`` (``{}`` if the score has none).

        Parameters
        ----------
        d : int
            The feature size of ``q`` and ``k`` (their last dimension).
        rng : numpy.random.Generator
            The source of randomness.
        dtype : float dtype
            The parameters' dtype.
        **sizes
            Score-specific sizes, listed in ``size_names``.
        """
        d = check_int(d, "d", 1)
        if not isinstance(rng, np.random.Generator):
            raise TypeError(
                f"rng: expected a numpy.random.Generator (numpy.random.default_rng(seed)), "
                f"got {type(rng).__name__}"
            )
        if np.dtype(dtype).kind != "f":
            raise TypeError(f"dtype: expected a real floating dtype, got {np.dtype(dtype)}")
        unknown = sorted(set(sizes) - set(self.size_names))
        if unknown:
            raise TypeError(
                f"{unknown[0]}: unknown size for score {self.name!r}; "
                f"expected one of {self.size_names}"
            )
        return self._init(d, rng, np.dtype(dtype), **sizes)

    def _init(self, d, rng, dtype, **sizes) -> dict:
        return {}

    def n_seeds(self, params):
        """``S``, the length of the parameters' leading seed axis, or ``None`` without one.

        ``params`` must already have passed the checks of :meth:`forward`
        (every parameter has the seed axis, or none has).
        """
        for p, symbols in self.param_spec(params).items():
            shape = _shape(params[p])
            return shape[0] if len(shape) == len(symbols) + 1 else None
        return None  # no parameters

    # --- validation ----------------------------------------------------------
    def check_inputs(self, q, k, params):
        """Validate the inputs; return ``(batch, n_q, n_k, d, params)``."""
        if self.uses_q:
            check_float_array(q, "q", min_ndim=2)
        check_float_array(k, "k", min_ndim=2)
        ks = _shape(k)
        batch, n_k, d = ks[:-2], ks[-2], ks[-1]
        n_q = n_k
        if self.uses_q:
            qs = _shape(q)
            if qs[-1] != d:
                raise ValueError(
                    f"k: its last dimension (the feature size d) is {d}, but q's is "
                    f"{qs[-1]}; q (..., n_q, d) and k (..., n_k, d) must share d"
                )
            if not self.pairwise and qs[-2] != n_k:
                raise ValueError(
                    f"k: has {n_k} tokens but q has {qs[-2]}; the per-token score "
                    f"{self.name!r} pairs q_i with k_i"
                )
            try:
                batch = np.broadcast_shapes(qs[:-2], ks[:-2])
            except ValueError:
                raise ValueError(
                    f"k: batch dimensions {ks[:-2]} do not broadcast with q's {qs[:-2]}"
                ) from None
            n_q = qs[-2]
        params = self._check_params(params, {"d": d, "n_q": n_q, "n_k": n_k})
        S = self.n_seeds(params)
        if S is not None:  # the seed axis pairs with the first batch axis of q and k
            seeded = (S,) + (1,) * max(len(batch) - 1, 0)  # (S, 1, ..., 1)
            if batch and batch[0] not in (1, S):
                raise ValueError(
                    f"params: the parameters' seed axis has S = {S}, but the first batch axis of "
                    f"q and k has {batch[0]}; it must be S (one slice per seed) or 1 (shared by the seeds)"
                )
            batch = np.broadcast_shapes(tuple(batch), seeded)
        return tuple(batch), n_q, n_k, d, params

    def _check_params(self, params, known):
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            raise TypeError(f"params: expected a dict of arrays, got {type(params).__name__}")
        spec = self.param_spec(params)
        missing = [p for p in spec if p not in params]
        if missing:
            raise ValueError(
                f"params: missing {missing[0]!r}; score {self.name!r} needs "
                f"{tuple(spec)} (see init_params)"
            )
        extra = [p for p in params if p not in spec]
        if extra:
            raise ValueError(
                f"params: unexpected {extra[0]!r}; score {self.name!r} takes "
                f"{tuple(spec) if spec else 'no parameters'}"
            )
        sizes = dict(known)
        origin = dict.fromkeys(known, "q and k")  # where each size was read
        first = None  # (name, has a seed axis) of the first parameter
        for p, symbols in spec.items():
            check_float_array(params[p], f"params[{p!r}]", min_ndim=0)
            shape = _shape(params[p])
            if self.seed_axis and len(shape) == len(symbols) + 1:
                symbols = ("S",) + tuple(symbols)  # one extra leading axis: the seeds
            seeded = len(symbols) > len(spec[p])
            if first is None:
                first = (p, seeded)
            elif seeded != first[1]:
                with_, without = (p, first[0]) if seeded else (first[0], p)
                raise ValueError(
                    f"params[{p!r}]: params[{with_!r}] has a leading seed axis but "
                    f"params[{without!r}] has none; give every parameter the seed axis or none"
                )
            ok = len(shape) == len(symbols)
            bad = list(symbols) if not ok else []
            if ok:
                for sym, n in zip(symbols, shape):
                    if sizes.setdefault(sym, n) != n:
                        ok = False
                        bad.append(sym)
                    origin.setdefault(sym, f"params[{p!r}]")
            if not ok:
                want = tuple(sizes.get(sym, sym) for sym in symbols)
                read = "; ".join(f"{sym} = {sizes[sym]} from {origin[sym]}"
                                 for sym in dict.fromkeys(bad) if sym in sizes)
                also = (f" or (S, {', '.join(symbols)}) with a leading seed axis"
                        if self.seed_axis and not seeded else "")
                raise ValueError(
                    f"params[{p!r}]: expected shape ({', '.join(symbols)}"
                    f"{',' if len(symbols) == 1 else ''}) = {want}{also}, got {shape}"
                    + (f" ({read})" if read else "")
                )
        return params

    def _check_grad(self, grad_s, batch, n_q, n_k):
        check_float_array(grad_s, "grad_s", min_ndim=1)
        want = tuple(batch) + ((n_q, n_k) if self.pairwise else (n_k,))
        if _shape(grad_s) != want:
            raise ValueError(
                f"grad_s: shape {_shape(grad_s)} does not match the scores' shape {want}"
            )

    # --- the score -------------------------------------------------------------
    def forward(self, q, k, params=None):
        """The scores ``s``; see the class docstring for the formula and shapes."""
        raise NotImplementedError

    def vjp(self, q, k, params, grad_s):
        """``(dq, dk, dparams)``: ``grad_s^T ds/dq``, ``grad_s^T ds/dk`` and one
        gradient per parameter (same keys, same shapes as ``params``)."""
        raise NotImplementedError

    def __call__(self, q, k, params=None):
        return self.forward(q, k, params)


# --------------------------------------------------------------------------
# The registry. Each class: forward, then its VJP right under it.
# --------------------------------------------------------------------------


@register
class Dot(Score):
    """Dot-product score, ``s_ij = q_i . k_j``.

    In matrices ``S = Q K^T``; each score sums products of matching
    coordinates only (NeuralAttn, Eq. 2 and its discussion).

    Source: Luong et al. (2015), "dot"; Vaswani et al. (2017), Eq. 1 without
    the scale. Derivation: ``derivations/02-scores.md`` ("dot").

    VJP: ``dq = G K``, ``dk = G^T Q`` for the upstream gradient ``G``.
    """

    name = "dot"
    source = "Luong et al. (2015) 'dot'; Vaswani et al. (2017) Eq. 1 unscaled; NeuralAttn Eq. 2"

    def beta_for(self, d):
        """The scale ``beta`` in ``s = beta q . k`` for feature size ``d``: 1 for ``dot``."""
        return 1.0

    def forward(self, q, k, params=None):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        xp = array_module(q, k)
        return (self.beta_for(d) * q) @ xp.swapaxes(k, -1, -2)  # (..., n_q, n_k)  beta q k^T

    def vjp(self, q, k, params, grad_s):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        self._check_grad(grad_s, batch, n_q, n_k)
        xp = array_module(q, k, grad_s)
        beta = self.beta_for(d)
        dq = beta * (grad_s @ k)  # (..., n_q, d)
        dk = beta * (xp.swapaxes(grad_s, -1, -2) @ q)  # (..., n_k, d)
        return sum_to(xp, dq, q.shape), sum_to(xp, dk, k.shape), {}
        # ds_ij/dq_i = beta k_j,  ds_ij/dk_j = beta q_i


@register
class ScaledDot(Dot):
    """Scaled dot-product score, ``s_ij = beta q_i . k_j``, ``beta = 1/sqrt(d)`` by default.

    Parameters
    ----------
    beta : float, optional
        The inverse temperature; ``None`` (default) means ``1/sqrt(d)`` with
        ``d = q.shape[-1]``.

    Source: Vaswani et al. (2017), Eq. 1; NeuralAttn, Eq. 1.
    Derivation: ``derivations/02-scores.md`` ("scaled_dot").

    VJP: ``dq = beta G K``, ``dk = beta G^T Q`` (the ``dot`` VJP, scaled).
    """

    name = "scaled_dot"
    source = "Vaswani et al. (2017) Eq. 1; NeuralAttn Eq. 1"
    option_names = ("beta",)

    def __init__(self, beta=None):
        self.beta = check_real(beta, "beta", positive=True, allow_none=True)

    def beta_for(self, d):
        """The scale for feature size ``d``: the ``beta`` option, or ``1/sqrt(d)`` if it is None."""
        return 1.0 / math.sqrt(d) if self.beta is None else self.beta

    # forward and vjp: inherited from Dot, with beta = self.beta_for(d)


@register
class Additive(Score):
    """Additive (Bahdanau) score, ``s_ij = v . tanh(W_q q_i + W_k k_j)``.

    Parameters ``W_q (d_a, d)``, ``W_k (d_a, d)``, ``v (d_a,)``; init size
    ``d_a`` (default ``d``). Each query and key is projected once
    (``A = Q W_q^T``, ``B = K W_k^T``); only the hidden pre-activation
    ``A_i + B_j`` of shape ``(..., n_q, n_k, d_a)`` is pairwise. It is the
    pair MLP of the ``neural`` score with no biases and ``sigma = tanh``.

    Source: Bahdanau, Cho & Bengio (2015), Appendix A.1.2,
    ``e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)`` (the decoder state playing
    the query, the annotation the key); NeuralAttn, section 2.
    Derivation: ``derivations/02-scores.md`` ("additive").

    VJP, with ``Z_ij = A_i + B_j``, ``H = tanh Z`` and
    ``gz_ij = G_ij v * (1 - H_ij^2)``: ``dA_i = sum_j gz_ij``,
    ``dB_j = sum_i gz_ij``, ``dq = dA W_q``, ``dW_q = dA^T Q`` (and likewise
    for the keys), ``dv = sum_ij G_ij H_ij``.
    """

    name = "additive"
    source = "Bahdanau, Cho & Bengio (2015), Appendix A.1.2; NeuralAttn section 2"
    size_names = ("d_a",)

    def param_spec(self, params):
        return {"W_q": ("d_a", "d"), "W_k": ("d_a", "d"), "v": ("d_a",)}

    def _init(self, d, rng, dtype, d_a=None):
        d_a = d if d_a is None else check_int(d_a, "d_a", 1)
        return {
            "W_q": (rng.standard_normal((d_a, d)) / math.sqrt(d)).astype(dtype),
            "W_k": (rng.standard_normal((d_a, d)) / math.sqrt(d)).astype(dtype),
            "v": (rng.standard_normal(d_a) / math.sqrt(d_a)).astype(dtype),
        }

    def forward(self, q, k, params=None):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        W_q, W_k, v = params["W_q"], params["W_k"], params["v"]
        xp = array_module(q, k, W_q, W_k, v)
        a = q @ xp.swapaxes(W_q, 0, 1)  # (..., n_q, d_a)
        b = k @ xp.swapaxes(W_k, 0, 1)  # (..., n_k, d_a)
        a, b = a[..., :, None, :], b[..., None, :, :]  # (..., n_q, 1, d_a), (..., 1, n_k, d_a)
        return _pair_mlp(xp, a, b, None, v, "tanh")  # (..., n_q, n_k)

    def vjp(self, q, k, params, grad_s):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        self._check_grad(grad_s, batch, n_q, n_k)
        W_q, W_k, v = params["W_q"], params["W_k"], params["v"]
        xp = array_module(q, k, grad_s, W_q, W_k, v)
        a = q @ W_q.T  # (..., n_q, d_a)
        b = k @ W_k.T  # (..., n_k, d_a)
        gz, dv = _pair_mlp_vjp(xp, a[..., :, None, :], b[..., None, :, :], None, v, "tanh", grad_s)
        da = xp.sum(gz, axis=-2)  # (..., n_q, d_a)
        db = xp.sum(gz, axis=-3)  # (..., n_k, d_a)
        dW_q = xp.einsum("bia,bid->ad", _flat(xp, da, batch, 2), _flat(xp, q, batch, 2))  # (d_a, d)
        dW_k = xp.einsum("bja,bjd->ad", _flat(xp, db, batch, 2), _flat(xp, k, batch, 2))  # (d_a, d)
        dq = sum_to(xp, da @ W_q, q.shape)  # (..., n_q, d)
        dk = sum_to(xp, db @ W_k, k.shape)  # (..., n_k, d)
        return dq, dk, {"W_q": dW_q, "W_k": dW_k, "v": dv}
        # z_ij = A_i + B_j: dA_i = sum_j gz_ij, dB_j = sum_i gz_ij;
        # A = Q W_q^T: dQ = dA W_q, dW_q = dA^T Q (keys alike)


@register
class Self(Score):
    """Per-token self score, ``s_i = (Q_i . K_i) / scale``, ``scale = sqrt(d)`` by default.

    Query and key come from the same token: ``Q_i = W_q x_i`` and
    ``K_i = W_k x_i`` are projected outside (by the model), so ``q`` and ``k``
    are ``(..., n, d)`` and ``s`` is ``(..., n)``. This is the score of
    TanhMax's public code; TanhMax's Proposition 1 treats ``Q_i`` and ``K_i``
    as free per-token variables, which is exact here only when they are.

    Parameters
    ----------
    scale : float, optional
        The divisor; ``None`` (default) means ``sqrt(d)``.

    Source: TanhMax, Eq. 1 (``s_i = f(Q_i, K_i)``) with ``f`` the scaled dot
    product, as in its public code. Derivation: ``derivations/02-scores.md``
    ("self").

    VJP: ``dq_i = g_i K_i / scale``, ``dk_i = g_i Q_i / scale``.
    """

    name = "self"
    pairwise = False
    source = "TanhMax Eq. 1 with f(Q_i, K_i) = Q_i . K_i / sqrt(d), as in its public code"
    option_names = ("scale",)

    def __init__(self, scale=None):
        self.scale = check_real(scale, "scale", positive=True, allow_none=True)

    def _scale(self, d):
        return math.sqrt(d) if self.scale is None else self.scale

    def forward(self, q, k, params=None):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        xp = array_module(q, k)
        return xp.sum(q * k, axis=-1) / self._scale(d)  # (..., n)

    def vjp(self, q, k, params, grad_s):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        self._check_grad(grad_s, batch, n_q, n_k)
        xp = array_module(q, k, grad_s)
        g = grad_s[..., None] / self._scale(d)  # (..., n, 1)
        return sum_to(xp, g * k, q.shape), sum_to(xp, g * q, k.shape), {}
        # ds_i/dQ_i = K_i / scale,  ds_i/dK_i = Q_i / scale


@register
class Global(Score):
    """Per-token score with a learned global query, ``s_i = k_i . v / lam``.

    One query vector ``v (d,)`` is shared by every token and instance, as in
    Sun & Lu (2020), whose analysis TanhMax builds on. ``q`` is ignored and
    may be ``None``; ``k`` is ``(..., n, d)`` and ``s`` is ``(..., n)``.

    With a leading seed axis, ``v (S, d)`` and ``k (S, ..., n, d)``: seed
    ``j`` scores its keys with its own query, ``s[j, ..., i] = k[j, ..., i] .
    v[j] / lam``, and ``dv (S, d)`` sums over the tokens and the other batch
    axes of that seed only (module docstring, "The seed axis").

    Parameters
    ----------
    lam : float
        The divisor, 10.0 by default (Sun & Lu's setting).

    Source: Sun & Lu (2020), "Understanding Attention for Text
    Classification", the attention score ``h_i^T V / lambda``.
    Derivation: ``derivations/02-scores.md`` ("global").

    VJP: ``dq = None``, ``dk_i = g_i v / lam``, ``dv = sum_i g_i k_i / lam``.
    """

    name = "global"
    pairwise = False
    uses_q = False
    seed_axis = True
    source = "Sun & Lu (2020), attention score h_i^T V / lambda with a learned global V"
    option_names = ("lam",)

    def __init__(self, lam=10.0):
        self.lam = check_real(lam, "lam", positive=True)

    def param_spec(self, params):
        return {"v": ("d",)}

    def _init(self, d, rng, dtype):
        return {"v": (rng.standard_normal(d) / math.sqrt(d)).astype(dtype)}

    def forward(self, q, k, params=None):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        v = params["v"]
        if self.n_seeds(params) is None:
            return (k @ v) / self.lam  # (..., n)
        xp = array_module(k, v)
        vs = xp.reshape(v, _seed_shape(batch, (1, d)))  # (S, 1, ..., 1, 1, d)
        return xp.sum(k * vs, axis=-1) / self.lam  # (S, ..., n)

    def vjp(self, q, k, params, grad_s):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        self._check_grad(grad_s, batch, n_q, n_k)
        v = params["v"]
        xp = array_module(k, grad_s, v)
        g = grad_s / self.lam  # (..., n)
        if self.n_seeds(params) is None:
            dk = g[..., None] * v  # (..., n, d)
            dv = xp.einsum("bi,bid->d", _flat(xp, g, batch, 1), _flat(xp, k, batch, 2))  # (d,)
            return None, dk, {"v": dv}
        dk = sum_to(xp, g[..., None] * xp.reshape(v, _seed_shape(batch, (1, d))), k.shape)  # (S, ..., n, d)
        S = batch[0]
        ks = xp.reshape(xp.broadcast_to(k, batch + (n_k, d)), (S, -1, d))  # (S, rest n, d)
        dv = (xp.reshape(g, (S, 1, -1)) @ ks)[:, 0]  # (S, d): one sum per seed
        return None, dk, {"v": dv}
        # ds_i/dk_i = v / lam,  ds_i/dv = k_i / lam (summed per seed with a seed axis)


@register
class Neural(Score):
    """Neural Attention score (NeuralAttn): a small MLP of each (query, key) pair.

    ``s_ij = beta * (wa . sigma(W_h [q'_i; k'_j] + bh) + ba)`` with the
    down-projections ``q' = Wq q``, ``k' = Wk k`` (NeuralAttn, Eqs. 5-6; its
    ``Q W_q`` with ``W_q (d, d')`` is our ``Wq^T``), the concatenation of
    Eq. 7, the MLP of Eqs. 3-4 and 8, and the ``1/sqrt(d)`` of Eq. 9.

    The decomposition. Split ``W_h = [Whq Whk]`` by columns: then
    ``W_h [q'; k'] = Whq q' + Whk k'``. Each query and key is pushed through
    its half once, and the pair ``(i, j)`` only adds the two:
    ``z_ij = Whq q'_i + Whk k'_j + bh``. The ``(..., n, n, 2d')`` tensor ``C``
    of Eq. 7 and Algorithm 1 never exists; the hidden pre-activation
    ``(..., n_q, n_k, h)``, which the method needs anyway, is the largest
    tensor.

    Shared or per-pair weights. NeuralAttn's Eq. 8 gives every pair its own
    ``W_h[i, j]`` and ``W_a[i, j]`` (so ``n`` is fixed); its authors' code
    shares one MLP across pairs and heads (with two hidden layers; here one,
    as in the equations). Shared is the default; per-pair is chosen by the
    shape of the parameters (``init_params(..., per_pair=(n_q, n_k))``):

    ======== ============ =====================
    param    shared       per-pair
    ======== ============ =====================
    Wq, Wk   (d', d)      (d', d)
    Whq, Whk (h, d')      (n_q, n_k, h, d')
    bh       (h,)         (n_q, n_k, h)
    wa       (h,)         (n_q, n_k, h)
    ba       ()           (n_q, n_k)
    ======== ============ =====================

    The down-projection ``Wq, Wk`` is shared in both (Eqs. 5-6). NeuralAttn
    sometimes skips it (``d' = d``, no projection); pass identity matrices
    for that. With shared weights ``ba`` shifts every score by the same
    amount, so a shift-invariant activation (softmax) ignores it: its
    gradient through softmax is exactly 0 (per-pair ``ba`` is not redundant).

    Parameters
    ----------
    hidden : {"tanh", "relu"}
        The hidden activation ``sigma``. NeuralAttn leaves ``sigma``
        unspecified ("a nonlinear activation function", Eq. 3); tanh is the
        default here (smooth, and matches additive attention).
    beta : float, optional
        The scale; ``None`` (default) means ``1/sqrt(d)`` with
        ``d = q.shape[-1]``, the ``sqrt(d)`` of NeuralAttn Eq. 9.

    Init sizes: ``d_prime`` (default ``min(d, 8)``), ``hidden_size`` ``h``
    (default 16), ``per_pair`` ``(n_q, n_k)`` or ``None`` (default: shared).

    Source: NeuralAttn, Eqs. 3-9 and Algorithm 1.
    Derivation: ``derivations/02-scores.md`` ("neural").

    VJP, with ``G' = beta G`` and ``gz = G' wa sigma'(z)`` from the pair MLP:
    ``dba = sum G'``, ``dbh = sum gz``, ``dwa = sum G' sigma(z)``; shared:
    ``dQ' = (sum_j gz) Whq``, ``dWhq = (sum_j gz)^T Q'``; per-pair:
    ``dq'_i = sum_j Whq[i, j]^T gz_ij``, ``dWhq[i, j] = gz_ij q'_i^T``; then
    ``dQ = dQ' Wq``, ``dWq = dQ'^T Q`` (keys alike).
    """

    name = "neural"
    source = "Neural Attention (NeuralAttn), Eqs. 3-9 and Algorithm 1"
    option_names = ("hidden", "beta")
    size_names = ("d_prime", "hidden_size", "per_pair")

    def __init__(self, hidden="tanh", beta=None):
        if hidden not in _HIDDEN:
            raise ValueError(f"hidden: expected one of {tuple(_HIDDEN)}, got {hidden!r}")
        self.hidden = hidden
        self.beta = check_real(beta, "beta", positive=True, allow_none=True)
        self.singular = (
            (("hidden pre-activation z = 0", "relu kink: relu'(0) = 0 by convention; "
              "differences see 1/2"),)
            if hidden == "relu" else ()
        )

    def beta_for(self, d):
        """The scale for feature size ``d``: the ``beta`` option, or ``1/sqrt(d)`` if it is None."""
        return 1.0 / math.sqrt(d) if self.beta is None else self.beta

    @staticmethod
    def is_per_pair(params):
        """True when ``params`` hold per-pair weights (``Whq`` of shape ``(n_q, n_k, h, d')``)."""
        return len(_shape(params["Whq"])) == 4 if "Whq" in params else False

    def param_spec(self, params):
        if self.is_per_pair(params):
            pair = ("n_q", "n_k")
            return {"Wq": ("d'", "d"), "Wk": ("d'", "d"),
                    "Whq": pair + ("h", "d'"), "Whk": pair + ("h", "d'"),
                    "bh": pair + ("h",), "wa": pair + ("h",), "ba": pair}
        return {"Wq": ("d'", "d"), "Wk": ("d'", "d"), "Whq": ("h", "d'"), "Whk": ("h", "d'"),
                "bh": ("h",), "wa": ("h",), "ba": ()}

    def _init(self, d, rng, dtype, d_prime=None, hidden_size=16, per_pair=None):
        dp = min(d, 8) if d_prime is None else check_int(d_prime, "d_prime", 1)
        h = check_int(hidden_size, "hidden_size", 1)
        if per_pair is None:
            pair = ()
        else:
            if not (isinstance(per_pair, (tuple, list)) and len(per_pair) == 2):
                raise ValueError(f"per_pair: expected (n_q, n_k) or None, got {per_pair!r}")
            pair = (check_int(per_pair[0], "per_pair[0]", 1), check_int(per_pair[1], "per_pair[1]", 1))

        def normal(shape, fan_in):
            return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(dtype)

        # W_h = [Whq Whk] has fan-in 2d'; biases small but nonzero.
        return {"Wq": normal((dp, d), d), "Wk": normal((dp, d), d),
                "Whq": normal(pair + (h, dp), 2 * dp), "Whk": normal(pair + (h, dp), 2 * dp),
                "bh": normal(pair + (h,), 100.0), "wa": normal(pair + (h,), h),
                "ba": np.asarray(normal(pair, 100.0))}

    def _hidden_inputs(self, xp, qp, kp, Whq, Whk, per_pair):
        """The two halves of ``W_h [q'; k']``, broadcastable to ``(..., n_q, n_k, h)``."""
        if per_pair:
            a = xp.einsum("ijhe,...ie->...ijh", Whq, qp)  # (..., n_q, n_k, h)
            b = xp.einsum("ijhe,...je->...ijh", Whk, kp)  # (..., n_q, n_k, h)
            return a, b
        a = qp @ xp.swapaxes(Whq, 0, 1)  # (..., n_q, h)
        b = kp @ xp.swapaxes(Whk, 0, 1)  # (..., n_k, h)
        return a[..., :, None, :], b[..., None, :, :]  # (..., n_q, 1, h), (..., 1, n_k, h)

    def forward(self, q, k, params=None):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        P = params
        xp = array_module(q, k, *P.values())
        qp = q @ xp.swapaxes(P["Wq"], 0, 1)  # (..., n_q, d')   NeuralAttn Eq. 5
        kp = k @ xp.swapaxes(P["Wk"], 0, 1)  # (..., n_k, d')   NeuralAttn Eq. 6
        a, b = self._hidden_inputs(xp, qp, kp, P["Whq"], P["Whk"], self.is_per_pair(P))
        t = _pair_mlp(xp, a, b, P["bh"], P["wa"], self.hidden)  # (..., n_q, n_k)  Eqs. 4, 8
        return self.beta_for(d) * (t + P["ba"])  # (..., n_q, n_k)  Eq. 9's 1/sqrt(d)

    def vjp(self, q, k, params, grad_s):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        self._check_grad(grad_s, batch, n_q, n_k)
        P = params
        xp = array_module(q, k, grad_s, *P.values())
        per_pair = self.is_per_pair(P)
        Wq, Wk, Whq, Whk = P["Wq"], P["Wk"], P["Whq"], P["Whk"]
        qp = q @ Wq.T  # (..., n_q, d')
        kp = k @ Wk.T  # (..., n_k, d')
        a, b = self._hidden_inputs(xp, qp, kp, Whq, Whk, per_pair)
        g = self.beta_for(d) * grad_s  # (..., n_q, n_k)
        gz, dwa = _pair_mlp_vjp(xp, a, b, P["bh"], P["wa"], self.hidden, g)  # (..., n_q, n_k, h)
        dba = sum_to(xp, g, _shape(P["ba"]))  # () or (n_q, n_k)
        dbh = sum_to(xp, gz, _shape(P["bh"]))  # (h,) or (n_q, n_k, h)
        if per_pair:
            gzf = _flat(xp, gz, batch, 3)  # (B, n_q, n_k, h)
            dWhq = xp.einsum("bijh,bie->ijhe", gzf, _flat(xp, qp, batch, 2))  # (n_q, n_k, h, d')
            dWhk = xp.einsum("bijh,bje->ijhe", gzf, _flat(xp, kp, batch, 2))  # (n_q, n_k, h, d')
            dqp = xp.einsum("...ijh,ijhe->...ie", gz, Whq)  # (..., n_q, d')
            dkp = xp.einsum("...ijh,ijhe->...je", gz, Whk)  # (..., n_k, d')
        else:
            da = xp.sum(gz, axis=-2)  # (..., n_q, h)
            db = xp.sum(gz, axis=-3)  # (..., n_k, h)
            daf, dbf = _flat(xp, da, batch, 2), _flat(xp, db, batch, 2)  # (B, n_q, h), (B, n_k, h)
            dWhq = xp.einsum("bih,bie->he", daf, _flat(xp, qp, batch, 2))  # (h, d')
            dWhk = xp.einsum("bjh,bje->he", dbf, _flat(xp, kp, batch, 2))  # (h, d')
            dqp = da @ Whq  # (..., n_q, d')
            dkp = db @ Whk  # (..., n_k, d')
        dWq = xp.einsum("bie,bid->ed", _flat(xp, dqp, batch, 2), _flat(xp, q, batch, 2))  # (d', d)
        dWk = xp.einsum("bje,bjd->ed", _flat(xp, dkp, batch, 2), _flat(xp, k, batch, 2))  # (d', d)
        dq = sum_to(xp, dqp @ Wq, q.shape)  # (..., n_q, d)
        dk = sum_to(xp, dkp @ Wk, k.shape)  # (..., n_k, d)
        return dq, dk, {"Wq": dWq, "Wk": dWk, "Whq": dWhq, "Whk": dWhk,
                        "bh": dbh, "wa": dwa, "ba": dba}
        # z_ij = Whq q'_i + Whk k'_j + bh: dz/dq'_i = Whq, dz/dWhq = q'_i (summed over the
        # pairs that share the weight); q' = Wq q: dq = Wq^T dq', dWq = dq' q^T


@register
class CosFormer(Score):
    """cosFormer score, ``s_ij = relu(q_i) . relu(k_j) * cos(pi (i - j) / (2 M))``.

    A non-negative kernel (relu feature map) re-weighted by the distance
    ``i - j`` between positions ``i = 0..n_q-1`` and ``j = 0..n_k-1``
    (only differences matter, so 0- and 1-based positions agree). With
    ``M >= max(n_q, n_k)`` every weight lies in ``(0, 1]``; a smaller ``M``
    would make some negative and is an error. Via
    ``cos(x - y) = cos x cos y + sin x sin y`` the kernel splits into two
    linear-attention terms; this reference forms the ``n_q x n_k`` matrix.

    Parameters
    ----------
    M : float, optional
        The position scale; ``None`` (default) means ``max(n_q, n_k)``.

    Source: Qin et al. (2022; TanhMax cites it as 'Zhen et al.'), "cosFormer: Rethinking Softmax in Attention"
    (ICLR), section 3, the cos-based re-weighting.
    Derivation: ``derivations/02-scores.md`` ("cosformer").

    VJP, with ``C_ij`` the cosine weights and ``G~ = G * C``:
    ``dq = (G~ relu(K)) * [q > 0]``, ``dk = (G~^T relu(Q)) * [k > 0]``.
    """

    name = "cosformer"
    source = "Qin et al. (2022; TanhMax cites it as 'Zhen et al.'), cosFormer, relu kernel with cos-based re-weighting"
    option_names = ("M",)
    singular = (("q or k entry = 0", "relu kink: relu'(0) = 0 by convention; "
                 "differences see 1/2"),)

    def __init__(self, M=None):
        self.M = check_real(M, "M", positive=True, allow_none=True)

    def _weights(self, xp, n_q, n_k, dtype):
        """``C_ij = cos(pi (i - j) / (2 M))``, a constant ``(n_q, n_k)`` array."""
        M = float(max(n_q, n_k)) if self.M is None else self.M
        if M < max(n_q, n_k):
            raise ValueError(
                f"M: {M:g} is smaller than the sequence length {max(n_q, n_k)}; "
                f"cos(pi (i - j) / 2M) would turn negative (cosFormer needs M >= n)"
            )
        i, j = xp.arange(n_q)[:, None], xp.arange(n_k)[None, :]  # made where the scores live: no host copy
        return xp.cos((np.pi / (2.0 * M)) * (i - j)).astype(dtype)  # (n_q, n_k)

    def forward(self, q, k, params=None):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        xp = array_module(q, k)
        c = self._weights(xp, n_q, n_k, dtype_of(q))  # (n_q, n_k)
        s = _relu(xp, q) @ xp.swapaxes(_relu(xp, k), -1, -2)  # (..., n_q, n_k)
        return s * c  # (..., n_q, n_k)

    def vjp(self, q, k, params, grad_s):
        batch, n_q, n_k, d, params = self.check_inputs(q, k, params)
        self._check_grad(grad_s, batch, n_q, n_k)
        xp = array_module(q, k, grad_s)
        g = grad_s * self._weights(xp, n_q, n_k, dtype_of(q))  # (..., n_q, n_k)
        dq = (g @ _relu(xp, k)) * _step(q)  # (..., n_q, d)
        dk = (xp.swapaxes(g, -1, -2) @ _relu(xp, q)) * _step(k)  # (..., n_k, d)
        return sum_to(xp, dq, q.shape), sum_to(xp, dk, k.shape), {}
        # ds_ij/dq_i = C_ij relu(k_j) relu'(q_i),  ds_ij/dk_j = C_ij relu(q_i) relu'(k_j)


#: The names of every registered score, in registry order.
SCORES = tuple(_REGISTRY)


def score(name: str, **options) -> Score:
    """A configured score function.

    Parameters
    ----------
    name : str
        One of :data:`SCORES`.
    **options
        The score's options (its ``option_names``): ``scaled_dot``: beta;
        ``self``: scale; ``global``: lam; ``neural``: hidden, beta;
        ``cosformer``: M.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones) or an
        option with a bad value.
    TypeError
        For an option the score does not take.
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected a string, got {type(name).__name__}")
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"name: unknown score {name!r}; expected one of {SCORES}") from None
    unknown = sorted(set(options) - set(cls.option_names))
    if unknown:
        takes = f"one of {cls.option_names}" if cls.option_names else "no options"
        raise TypeError(f"{unknown[0]}: unknown option for score {name!r}; it takes {takes}")
    return cls(**options)
