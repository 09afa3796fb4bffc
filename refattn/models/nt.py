r"""Seed 004's one-bilayer NT transformer, batched over seeds, with a hand-derived backward.

Seed 004 (Gros, section 4, "Transformer details" and "Readout & Testing")
trains a decoder-only transformer on the NT tasks of
:mod:`refattn.tasks.nt`. For a context of ``n = N_con`` symbols
``x_1, ..., x_n`` in ``{0, ..., N-1}`` and embedding size ``d = N``, with
every position ``m`` owning its weights ("one attention head per token"),
the model computes (``derivations/11-nt-model.md``, Eqs. M1-M10)::

    X_m  = e_{x_m}                                   one-hot embedding, (d,)        M1
    Z_m  = LN(X_m)                                   pre-LN, no gain/bias            M2
    Q_m  = W_Q[m] Z_m,  K_m = W_K[m] Z_m,  V_m = W_V[m] Z_m                          M3
    s_mk = beta Q_m . K_k                            beta = 1 (seed 004, Eq. 1)      M4
    A_m  = phi(s_m) over keys k <= m                 causal; softmax = Eq. 1,
                                                     expressive = Eq. 2              M5
    H_m  = X_m + sum_k A_mk V_k                      residual                        M6
    U_m  = W_1[m] LN(H_m),  T_m = tanh(U_m)          hidden width 4d                 M7
    G_m  = H_m + W_2[m] T_m + b_2[m]                 residual                        M8
    y    = W_r [G_1; ...; G_n] + b_r                 readout, (d,)                   M9
    L    = mean over examples and the d outputs of (y - e_target)^2                 M10

and predicts ``argmax_j y_j`` (greedy inference). The parameter count,
``n (11 d^2 + d) + n d^2 + d``, is 802 for N2T5 at ``N_con = 16`` and
395,280 ("about 4e5") for N16T5 at ``N_con = 128``, as seed 004 states
(section 5, Figs. 4-5); :func:`count_params` computes it and
:func:`search_parameterisations` shows which other layouts also give 802.

Batched over seeds (the trainer's model protocol): every parameter has a
leading axis ``S``, one slice per seed, drawn from
``numpy.random.default_rng(seed)`` alone, and a batch is
``{"context": (S, B, n) int, "target": (S, B) int}``. :meth:`NTModel.loss` is
written against :func:`refattn.backend.array_module`, so autograd traces the
very code that runs; :meth:`NTModel.loss_and_grad` is the hand-derived
backward pass (``derivations/11-nt-model.md``, section 4), which reuses
:func:`refattn.attention.attention_backward` (the value product, the
activation's VJP with the causal mask, the dot-product score's VJP).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real

import numpy as np

from ..activations import Activation, activation as _activation
from ..attention import attention, attention_backward
from ..backend import array_module, check_float_array, dtype_of, is_traced, stop_gradient
from ..scores import score as _score
from ..tasks.nt import _int, _symbols as _task_symbols

__all__ = [
    "NTModel",
    "PARAM_NAMES",
    "PAPER_PARAM_COUNTS",
    "count_params",
    "layer_norm",
    "layer_norm_vjp",
    "ParamLayout",
    "search_parameterisations",
]

#: The parameters of :class:`NTModel`, in the order they are drawn at initialisation.
PARAM_NAMES = ("W_Q", "W_K", "W_V", "W_1", "W_2", "b_2", "W_r", "b_r")

#: Seed 004's model sizes: ``(N, N_con) -> number of adjustable parameters``
#: (section 5: "N_model = 802" for N2T5 at N_con = 16, Fig. 4; "about 4 * 10^5
#: for N_con = 128" for N16T5, Fig. 5).
PAPER_PARAM_COUNTS = {(2, 16): 802, (16, 128): 4e5}

#: Hidden width of the token-wise feed-forward layer, in units of d
#: ("expanded by a factor four", seed 004 section 4).
HIDDEN_FACTOR = 4


# --------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------


def _positive(value, name):
    """``value`` as a float after checking that it is a finite real number > 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise TypeError(f"{name}: expected a finite real number > 0, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a finite real number > 0, got {value!r}")
    return float(value)


def _symbols(x, N, name, shape):
    """``x`` as an int64 array after checking its dtype, range 0..N-1 and ``shape``."""
    x = _task_symbols(x, N, name)  # the NT tasks' own check: integer symbols in 0..N-1
    if x.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {x.shape}")
    return x


# --------------------------------------------------------------------------
# layer normalisation without learnable parameters (pre-LN, Eqs. M2 and M7)
# --------------------------------------------------------------------------


def _ln(x, eps):
    """``(z, r)``: ``z = (x - mean x) r`` with ``r = 1 / sqrt(var x + eps)``, over the last axis."""
    xp = array_module(x)
    c = x - xp.mean(x, axis=-1, keepdims=True)  # (..., d) centred
    r = 1.0 / xp.sqrt(xp.mean(c * c, axis=-1, keepdims=True) + eps)  # (..., 1)
    return c * r, r


def _ln_back(z, r, grad_z):
    """Eq. B5 of the derivation: ``r (u - mean u - z mean(u z))`` with ``u = grad_z``."""
    mean_u = np.mean(grad_z, axis=-1, keepdims=True)  # (..., 1)
    mean_uz = np.mean(grad_z * z, axis=-1, keepdims=True)  # (..., 1)
    return r * (grad_z - mean_u - z * mean_uz)


def layer_norm(x, eps=1e-5):
    """Layer normalisation without gain or bias over the last axis (seed 004, section 4).

    ``LN(x) = (x - mu) / sqrt(sigma^2 + eps)`` with ``mu = mean_j x_j`` and
    ``sigma^2 = mean_j (x_j - mu)^2`` (the biased variance, as
    ``torch.nn.LayerNorm`` uses). Seed 004 normalises "on entry" of both
    sublayers; the parameter count leaves no room for a learnable gain or bias
    (``derivations/11-nt-model.md``, Eq. M2 and section 2). For a one-hot
    ``e_x`` of length ``d``: ``LN(e_x) = (d e_x - 1) / sqrt(d - 1 + d^2 eps)``.

    Parameters
    ----------
    x : ndarray, float, shape (..., d)
        NumPy, CuPy or traced by autograd.
    eps : float > 0
        Added to the variance.

    Returns
    -------
    ndarray
        ``LN(x)``, the shape of ``x``.
    """
    check_float_array(x, "x")
    return _ln(x, _positive(eps, "eps"))[0]


def layer_norm_vjp(x, grad_z, eps=1e-5):
    """Hand-derived VJP of :func:`layer_norm` (``derivations/11-nt-model.md``, Eq. B5).

    With ``z = LN(x)``, ``r = 1 / sqrt(sigma^2 + eps)`` and upstream gradient
    ``u``, ``dx = r (u - mean_j u_j - z mean_j(u_j z_j))`` (means over the last
    axis).

    Parameters
    ----------
    x : ndarray, float, shape (..., d)
    grad_z : ndarray, shape of ``x``
        The upstream gradient ``u = dL/dz``.
    eps : float > 0

    Returns
    -------
    ndarray
        ``dL/dx``, the shape of ``x``.
    """
    check_float_array(x, "x")
    check_float_array(grad_z, "grad_z")
    if np.shape(grad_z) != np.shape(x):
        raise ValueError(f"grad_z: shape {np.shape(grad_z)} does not match x's shape {np.shape(x)}")
    z, r = _ln(x, _positive(eps, "eps"))
    return _ln_back(z, r, grad_z)


# --------------------------------------------------------------------------
# per-position linear maps ("one head per token"): W[s, m] acts on position m
# --------------------------------------------------------------------------


def _apply(W, x):
    """``y[s, b, m] = W[s, m] @ x[s, b, m]``: W (S, n, o, i), x (S, B, n, i) -> (S, B, n, o).

    One batched matrix product per (seed, position), over the examples:
    ``(S, n, B, i) @ (S, n, i, o)``; a third of the time of the equivalent einsum.
    """
    xp = array_module(W, x)
    return xp.swapaxes(xp.swapaxes(x, 1, 2) @ xp.swapaxes(W, -1, -2), 1, 2)


def _grad_W(grad_y, x):
    """Eq. B2 for ``y = _apply(W, x)``: ``dW[s, m] = sum_b dy[s, b, m] x[s, b, m]^T``, (S, n, o, i)."""
    return grad_y.transpose(0, 2, 3, 1) @ x.transpose(0, 2, 1, 3)  # (S, n, o, B) @ (S, n, B, i)


def _grad_x(W, grad_y):
    """Eq. B2 for ``y = _apply(W, x)``: ``dx[s, b, m] = W[s, m]^T dy[s, b, m]``, (S, B, n, i)."""
    return np.swapaxes(np.swapaxes(grad_y, 1, 2) @ W, 1, 2)  # (S, n, B, o) @ (S, n, o, i)


# --------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------


class NTModel:
    """Seed 004's decoder-only, one-bilayer transformer for NT tasks, batched over seeds.

    The forward pass is Eqs. M1-M10 of ``derivations/11-nt-model.md`` (the
    module docstring lists them): one-hot embedding with ``d = N`` and no
    positional encoding; pre-LN (no gain or bias) causal attention whose
    queries, keys and values at position ``m`` use position ``m``'s own
    ``d x d`` matrices; residual; pre-LN token-wise ``tanh`` feed-forward
    layer of width ``4 d``, again with position ``m``'s own ``W_1, W_2, b_2``;
    residual; a ``d x (d n)`` readout (plus bias) of all ``n`` output vectors;
    squared-difference loss against the one-hot next symbol; greedy
    (``argmax``) inference. Seed 004, section 4, "Transformer details",
    "Training" and "Readout & Testing"; the attention weights are Eq. 1
    (``activation="softmax"``, ``beta = 1``) or Eq. 2
    (``activation="expressive"``), or any activation of
    :data:`refattn.activations.ACTIVATIONS`.

    Parameters
    ----------
    N : int >= 2
        The basis of the NT task; the embedding size is ``d = N``.
    n_con : int >= 1
        The context length ``N_con``.
    activation : str or Activation
        The attention activation, ``"softmax"`` (dot-product attention, seed
        004 Eq. 1) by default, ``"expressive"`` for Eq. 2.
    beta : float > 0
        Score scale ``s_mk = beta Q_m . K_k``; seed 004 sets ``beta = 1``.
    ln_eps : float > 0
        The ``eps`` of both layer normalisations (PyTorch's default 1e-5).

    Parameters are a dict (:data:`PARAM_NAMES`) of arrays with a leading seed
    axis ``S``:

    ======== =============== ===============================================
    name     shape           role
    ======== =============== ===============================================
    W_Q      (S, n, d, d)    query matrix of each position (Eq. M3)
    W_K      (S, n, d, d)    key matrix of each position
    W_V      (S, n, d, d)    value matrix of each position
    W_1      (S, n, 4d, d)   feed-forward input matrix of each position (M7)
    W_2      (S, n, d, 4d)   feed-forward output matrix of each position (M8)
    b_2      (S, n, d)       feed-forward output bias of each position
    W_r      (S, d, n d)     readout of the concatenated outputs (M9)
    b_r      (S, d)          readout bias
    ======== =============== ===============================================
    """

    def __init__(self, N, n_con, activation="softmax", beta=1.0, ln_eps=1e-5):
        self.N = _int(N, "N", 2)
        self.n_con = _int(n_con, "n_con", 1)
        if isinstance(activation, Activation):
            self.activation = activation
        else:
            self.activation = _activation(activation)
        self.beta = _positive(beta, "beta")
        self.ln_eps = _positive(ln_eps, "ln_eps")
        self.d = self.N
        self._score = _score("scaled_dot", beta=self.beta)  # s_mk = beta Q_m . K_k (seed 004, Eq. 1)

    def __repr__(self):
        return (f"NTModel(N={self.N}, n_con={self.n_con}, activation={self.activation.name!r}, "
                f"beta={self.beta:g}, ln_eps={self.ln_eps:g})")

    # --- parameters ----------------------------------------------------------
    def param_shapes(self):
        """``{name: shape}`` of one seed's parameters (without the seed axis)."""
        n, d, h = self.n_con, self.d, HIDDEN_FACTOR * self.d
        return {"W_Q": (n, d, d), "W_K": (n, d, d), "W_V": (n, d, d),
                "W_1": (n, h, d), "W_2": (n, d, h), "b_2": (n, d),
                "W_r": (d, n * d), "b_r": (d,)}

    @property
    def n_params(self):
        """The number of adjustable parameters of one seed's model (:func:`count_params`)."""
        return sum(math.prod(s) for s in self.param_shapes().values())

    def init_params(self, seeds, dtype=np.float64):
        """Initial parameters of ``len(seeds)`` independent models, one per seed.

        Seed ``seeds[i]``'s slice ``[i]`` of every array is drawn from
        ``numpy.random.default_rng(seeds[i])`` alone, in the order of
        :data:`PARAM_NAMES`, so a seed gets the same initial model whether it
        is initialised alone or with others. Matrices are uniform in
        ``(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (``fan_in`` = their last axis, as
        ``torch.nn.Linear``); biases start at 0. Seed 004 does not state its
        initialisation; this is our choice (``derivations/11-nt-model.md``,
        section 1).

        Parameters
        ----------
        seeds : sequence of int >= 0
            One seed per model; ``S = len(seeds)``.
        dtype : float dtype
            float64 (default) or float32.

        Returns
        -------
        dict of str to ndarray
            Shapes ``(S,) + param_shapes()[name]``.
        """
        if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__") or len(seeds) == 0:
            raise TypeError("seeds: expected a non-empty sequence of ints >= 0, e.g. [0, 1, 2]")
        seeds = [_int(s, "seeds[]", 0) for s in seeds]
        if np.dtype(dtype).kind != "f":
            raise TypeError(f"dtype: expected a real floating dtype (float32 or float64), got {np.dtype(dtype)}")
        shapes = self.param_shapes()
        per_seed = []
        for seed in seeds:
            rng = np.random.default_rng(seed)
            one = {}
            for name in PARAM_NAMES:
                shape = shapes[name]
                if name.startswith("W"):
                    bound = 1.0 / math.sqrt(shape[-1])
                    one[name] = rng.uniform(-bound, bound, size=shape)
                else:
                    one[name] = np.zeros(shape)
            per_seed.append(one)
        return {name: np.stack([p[name] for p in per_seed]).astype(dtype) for name in PARAM_NAMES}

    def _check_params(self, params):
        """Validate ``params``; return the number of seeds ``S``."""
        if not (isinstance(params, Mapping) or is_traced(params)):  # autograd boxes a dict as DictBox
            raise TypeError(f"params: expected a dict with keys {PARAM_NAMES}, got {type(params).__name__}")
        missing = [k for k in PARAM_NAMES if k not in params]
        extra = sorted(set(params) - set(PARAM_NAMES))
        if missing or extra:
            raise ValueError(f"params: expected the keys {PARAM_NAMES}; missing {missing}, unexpected {extra}")
        S = None
        for name, shape in self.param_shapes().items():
            check_float_array(params[name], f"params[{name!r}]")
            got = np.shape(stop_gradient(params[name]))
            if S is None:
                S = got[0] if len(got) == len(shape) + 1 else -1
            if got != (S,) + shape:
                raise ValueError(f"params[{name!r}]: expected shape (S,) + {shape} with one S for every "
                                 f"parameter, got {got} ({self!r})")
        return S

    def _check_context(self, context, S):
        context = np.asarray(context)
        if context.ndim != 3 or context.shape[0] != S or context.shape[2] != self.n_con:
            raise ValueError(f"context: expected shape (S, B, n_con) = ({S}, B, {self.n_con}), got {context.shape}")
        return _symbols(context, self.N, "context", context.shape)

    def _check_batch(self, params, batch):
        S = self._check_params(params)
        if not isinstance(batch, dict) or "context" not in batch or "target" not in batch:
            raise TypeError("batch: expected a dict with 'context' (S, B, n_con) and 'target' (S, B) int arrays")
        context = self._check_context(batch["context"], S)
        target = _symbols(batch["target"], self.N, "target", context.shape[:2])
        return context, target

    # --- forward (Eqs. M1-M9), one source for NumPy and autograd ---------------
    def _forward(self, params, context):
        """Eqs. M1-M9 with everything the backward pass needs; ``xp`` follows ``params``."""
        p = params
        xp = array_module(*(p[k] for k in PARAM_NAMES))
        S, B, n = context.shape
        eye = np.eye(self.d, dtype=dtype_of(p["W_Q"]))
        X = eye[context]  # (S, B, n, d) one-hot, M1 (a constant)
        Z1, _ = _ln(X, self.ln_eps)  # (S, B, n, d) M2 (a constant: no gradient flows into X)
        Q = _apply(p["W_Q"], Z1)  # (S, B, n, d) M3
        K = _apply(p["W_K"], Z1)  # (S, B, n, d)
        V = _apply(p["W_V"], Z1)  # (S, B, n, d)
        Y, att = attention(Q, K, V, score=self._score, activation=self.activation,
                           causal=True)  # (S, B, n, d) M4-M5: s = beta Q K^T, A = phi(s), Y = A V
        H = X + Y  # (S, B, n, d) M6
        Z2, r2 = _ln(H, self.ln_eps)  # (S, B, n, d) M7
        T = xp.tanh(_apply(p["W_1"], Z2))  # (S, B, n, 4d)
        G = H + _apply(p["W_2"], T) + p["b_2"][:, None]  # (S, B, n, d) M8
        y = xp.reshape(G, (S, B, n * self.d)) @ xp.swapaxes(p["W_r"], -1, -2) + p["b_r"][:, None]  # (S, B, d) M9
        return y, dict(Z1=Z1, att=att, A=att["w"], s=att["s"], Z2=Z2, r2=r2, T=T, G=G)

    def _loss(self, y, target):
        """Eq. M10: per seed, the mean over examples and outputs of ``(y - e_target)^2``."""
        err = y - np.eye(self.d, dtype=dtype_of(y))[target]  # (S, B, d)
        return array_module(y).mean(err * err, axis=(1, 2)), err  # (S,)

    def forward(self, params, context):
        """The model's outputs for a batch of contexts (Eqs. M1-M9), for evaluation.

        Parameters
        ----------
        params : dict
            As from :meth:`init_params`.
        context : array_like of int, shape (S, B, n_con)
            Symbols ``0..N-1``, oldest first.

        Returns
        -------
        dict
            ``out`` (S, B, d): the prediction ``y`` (Eq. M9); ``prediction``
            (S, B): ``argmax_j y_j``; ``attention`` (S, B, n, n): the weights
            ``A_mk`` (0 above the diagonal, Eq. M5); ``scores`` (S, B, n, n):
            ``s_mk`` (Eq. M4, also above the diagonal, where they are unused);
            ``hidden`` (S, B, n, d): the last layer ``G`` (Eq. M8), whose row
            ``m`` depends on the symbols ``x_1..x_m`` only.
        """
        S = self._check_params(params)
        context = self._check_context(context, S)
        y, c = self._forward(params, context)
        return {"out": y, "prediction": np.argmax(y, axis=-1), "attention": c["A"],
                "scores": c["s"], "hidden": c["G"]}

    def predict(self, params, context):
        """Greedy inference: ``argmax_j y_j`` for each context, shape (S, B) (seed 004, section 4)."""
        return self.forward(params, context)["prediction"]

    def generate(self, params, context, n_steps):
        """Greedy autoregressive continuation of each context (seed 004, "Readout & Testing").

        Step ``t`` predicts the next symbol from the current window of
        ``n_con`` symbols, appends the prediction and drops the oldest symbol,
        so from the second step on the model reads its own predictions.
        Seed 004 evaluates on ``N_g = 50`` successive symbols.

        Parameters
        ----------
        params : dict
        context : array_like of int, shape (S, B, n_con)
        n_steps : int >= 1

        Returns
        -------
        numpy.ndarray of int64, shape (S, B, n_steps)
            The predicted continuation.
        """
        S = self._check_params(params)
        window = self._check_context(context, S)
        n_steps = _int(n_steps, "n_steps", 1)
        out = np.empty(window.shape[:2] + (n_steps,), dtype=np.int64)  # (S, B, n_steps)
        for t in range(n_steps):
            y, _ = self._forward(params, window)
            out[..., t] = np.argmax(y, axis=-1)
            window = np.concatenate([window[..., 1:], out[..., t:t + 1]], axis=-1)  # slide by one
        return out

    def loss(self, params, batch):
        """Per-seed loss (Eq. M10), written against ``xp`` so that autograd can trace it.

        ``L_s = (1 / (B d)) sum_b sum_j (y_bj - [j = target_b])^2``: the mean
        squared difference between the readout and the one-hot next symbol
        (seed 004: "the basic squared difference"; averaged over the ``d``
        outputs as well, as ``torch.nn.MSELoss`` does).

        Parameters
        ----------
        params : dict
            NumPy arrays or values traced by autograd.
        batch : dict
            ``"context"`` (S, B, n_con) and ``"target"`` (S, B), int symbols.

        Returns
        -------
        ndarray, shape (S,)
        """
        context, target = self._check_batch(params, batch)
        y, _ = self._forward(params, context)
        return self._loss(y, target)[0]

    def loss_and_grad(self, params, batch):
        """The loss and its hand-derived gradient ``d loss.sum() / d params``.

        The backward pass of ``derivations/11-nt-model.md``, section 4 (Eqs.
        B1-B10): readout, residual, feed-forward layer with ``tanh``, the second
        layer normalisation (Eq. B5), then
        :func:`refattn.attention.attention_backward` for the attention values,
        the activation's VJP with the causal mask
        (``derivations/01-reweighted-softmax.md``, Eq. R4) and the bilinear
        score, and last the per-position query, key and value matrices (Eq.
        B10). The first layer normalisation acts on the fixed one-hot
        embedding and needs no backward pass.

        Parameters
        ----------
        params : dict
            NumPy arrays, as from :meth:`init_params`.
        batch : dict
            ``"context"`` (S, B, n_con) and ``"target"`` (S, B).

        Returns
        -------
        loss : ndarray (S,)
            As :meth:`loss`.
        grads : dict
            The keys and shapes of ``params``.
        aux : dict
            Per-example arrays: ``out`` (S, B, d), ``prediction`` (S, B),
            ``correct`` (S, B) bool, ``scores`` and ``attention`` (S, B, n, n).
        """
        context, target = self._check_batch(params, batch)
        p = params
        y, c = self._forward(p, context)
        loss, err = self._loss(y, target)
        S, B, n = context.shape
        d = self.d
        g = {}
        dy = (2.0 / (B * d)) * err  # (S, B, d)                     B1: dL/dy
        G_flat = c["G"].reshape(S, B, n * d)  # (S, B, n d)
        g["W_r"] = np.swapaxes(dy, -1, -2) @ G_flat  # (S, d, n d)   B3: y = W_r G + b_r
        g["b_r"] = dy.sum(axis=1)  # (S, d)
        dG = (dy @ p["W_r"]).reshape(S, B, n, d)  # (S, B, n, d)
        g["b_2"] = dG.sum(axis=1)  # (S, n, d)                        B4: G = H + W_2 T + b_2
        g["W_2"] = _grad_W(dG, c["T"])  # (S, n, d, 4d)                 B2 rule
        dT = _grad_x(p["W_2"], dG)  # (S, B, n, 4d)
        dU = dT * (1.0 - c["T"] * c["T"])  # (S, B, n, 4d)            tanh' = 1 - tanh^2
        g["W_1"] = _grad_W(dU, c["Z2"])  # (S, n, 4d, d)
        dZ2 = _grad_x(p["W_1"], dU)  # (S, B, n, d)
        dH = dG + _ln_back(c["Z2"], c["r2"], dZ2)  # (S, B, n, d)      B5-B6: both paths into H
        d_att = attention_backward(dH, c["att"])  # B7-B9: Y = A V, A = phi(s) (Eq. R4), s = beta Q K^T
        for name, key in (("W_Q", "Q"), ("W_K", "K"), ("W_V", "V")):  # B10: Q = W_Q Z1, ...
            g[name] = _grad_W(d_att[key], c["Z1"])  # (S, n, d, d)
        grads = {name: g[name] for name in PARAM_NAMES}
        pred = np.argmax(y, axis=-1)
        aux = {"out": y, "prediction": pred, "correct": pred == target,
               "scores": c["s"], "attention": c["A"]}
        return loss, grads, aux


def count_params(N, n_con, **options):
    """The number of adjustable parameters of one :class:`NTModel`.

    ``n_con (3 d^2 + 4d d + d 4d + d) + d (d n_con) + d = n_con (12 d^2 + d) + d``
    with ``d = N``: per position ``m`` the matrices ``W_Q, W_K, W_V`` (d x d),
    ``W_1`` (4d x d), ``W_2`` (d x 4d) and the bias ``b_2`` (d), then the
    readout ``W_r`` (d x d n_con) and its bias (d). Seed 004 gives 802 for
    N2T5 at ``N_con = 16`` and "about 4e5" for N16T5 at ``N_con = 128``
    (section 5); this gives 802 and 395,280 (``derivations/11-nt-model.md``,
    section 2, Eq. P1).

    Parameters
    ----------
    N : int >= 2
        The basis (``d = N``).
    n_con : int >= 1
        The context length.
    **options
        Further :class:`NTModel` options (``activation``, ``beta``,
        ``ln_eps``; none changes the count).

    Returns
    -------
    int
    """
    return NTModel(N, n_con, **options).n_params


# --------------------------------------------------------------------------
# which layouts give seed 004's 802 parameters? (derivation 11, section 2)
# --------------------------------------------------------------------------

# Building blocks of a one-bilayer pre-LN transformer with d = N and hidden
# width 4d: (name, size in units of d^2 or of d, the placements allowed).
# "position": one copy per context position (n_con copies); "shared": one copy;
# None: absent. The projections and the two feed-forward matrices must exist.
_BLOCKS = (
    ("W_Q", "d^2", 1, ("position", "shared")),
    ("W_K", "d^2", 1, ("position", "shared")),
    ("W_V", "d^2", 1, ("position", "shared")),
    ("W_1", "d^2", 4, ("position", "shared")),
    ("W_2", "d^2", 4, ("position", "shared")),
    ("W_O", "d^2", 1, (None, "position", "shared")),  # attention output projection
    ("b_Q", "d", 1, (None, "position", "shared")),
    ("b_K", "d", 1, (None, "position", "shared")),
    ("b_V", "d", 1, (None, "position", "shared")),
    ("b_O", "d", 1, (None, "position", "shared")),
    ("b_1", "d", 4, (None, "position", "shared")),  # feed-forward hidden bias
    ("b_2", "d", 1, (None, "position", "shared")),  # feed-forward output bias
    ("LN1 gain", "d", 1, (None, "position", "shared")),
    ("LN1 bias", "d", 1, (None, "position", "shared")),
    ("LN2 gain", "d", 1, (None, "position", "shared")),
    ("LN2 bias", "d", 1, (None, "position", "shared")),
    ("b_r", "d", 1, (None, "shared")),  # readout bias
    ("final LN gain", "d", 1, (None, "shared")),
    ("final LN bias", "d", 1, (None, "shared")),
    ("embedding", "d^2", 1, (None, "shared")),  # a learned N x d embedding instead of a fixed one
)


@dataclass(frozen=True)
class ParamLayout:
    """A class of parameterisations with the same count (:func:`search_parameterisations`).

    ``per_position_d2, per_position_d`` count the blocks of size ``d^2`` and
    ``d`` that every position owns, ``shared_d2, shared_d`` the blocks held
    once; the readout ``W_r`` (``d x d n_con``) comes on top. ``n_layouts`` is
    how many assignments of the catalogue's blocks have these counts, and
    ``example`` one of them (the first the search meets, not a preferred one)
    as ``((block, placement), ...)``, absent blocks left out.
    """

    per_position_d2: int
    per_position_d: int
    shared_d2: int
    shared_d: int
    n_layouts: int
    example: tuple

    def count(self, N, n_con):
        """``n_con (a d^2 + b d) + c d^2 + e d + n_con d^2`` at ``d = N`` (Eq. P2)."""
        d = N
        return (n_con * (self.per_position_d2 * d * d + self.per_position_d * d)
                + self.shared_d2 * d * d + self.shared_d * d + n_con * d * d)


def search_parameterisations(n_params=802, N=2, n_con=16, about=(16, 128, 4e5)):
    """Every layout of the block catalogue whose count is ``n_params`` (seed 004, section 5).

    Each building block of a one-bilayer transformer (query, key, value,
    output projections and their biases; the two feed-forward matrices and
    biases; gains and biases of the two pre-LNs and of a final LN; a readout
    bias; a learned embedding) is absent, held once ("shared") or held by every
    position ("one attention head per token"); ``W_Q, W_K, W_V, W_1, W_2`` are
    always present and the readout ``W_r`` (``d x d n_con``) always is. The
    count of a layout depends only on four numbers (Eq. P2 of
    ``derivations/11-nt-model.md``), so the 90,699,264 assignments are
    grouped by those by dynamic programming (a convolution of counts) and
    every group whose count at ``(N, n_con)`` is ``n_params`` is returned; with
    ``about = (N2, n_con2, target)`` only groups whose count at
    ``(N2, n_con2)`` rounds to ``target`` at one significant figure (within
    ``[0.875, 1.125) target`` for 4e5) are kept. Seed 004: 802 at
    ``(2, 16)``, about 4e5 at ``(16, 128)``.

    Parameters
    ----------
    n_params : int or None
        The count to reproduce; None returns every group, ignoring ``about``
        (their ``n_layouts`` then add up to the size of the catalogue,
        2^5 3^11 2^4).
    N, n_con : int
        Where it is counted.
    about : tuple (N2, n_con2, target) or None
        The second, approximate count, or None to skip it.

    Returns
    -------
    list of ParamLayout
        Sorted by the number of per-position ``d^2`` blocks, most first.
    """
    if n_params is not None:
        n_params = _int(n_params, "n_params", 1)
    N, n_con = _int(N, "N", 2), _int(n_con, "n_con", 1)
    if about is not None:
        if not (isinstance(about, tuple) and len(about) == 3):
            raise TypeError("about: expected a tuple (N, n_con, target) or None")
        N2, n2 = _int(about[0], "about[0]", 2), _int(about[1], "about[1]", 1)
        target = _positive(about[2], "about[2]")
        half = 0.5 * 10.0 ** math.floor(math.log10(target))  # half a unit of the first digit
    groups = {(0, 0, 0, 0): [1, ()]}  # (pp d^2, pp d, shared d^2, shared d) -> [count, example]
    for name, unit, size, placements in _BLOCKS:
        new = {}
        for key, (count, example) in groups.items():
            for where in placements:
                k = list(key)
                if where is not None:
                    k[(0 if where == "position" else 2) + (0 if unit == "d^2" else 1)] += size
                entry = new.setdefault(tuple(k), [0, example + ((name, where),)])
                entry[0] += count
        groups = new
    out = []
    for key, (count, example) in groups.items():
        layout = ParamLayout(*key, count, tuple(e for e in example if e[1] is not None))
        if n_params is not None:
            if layout.count(N, n_con) != n_params:
                continue
            if about is not None and not target - half <= layout.count(N2, n2) < target + half:
                continue
        out.append(layout)
    return sorted(out, key=lambda x: (-x.per_position_d2, -x.per_position_d, x.shared_d2, x.shared_d))
