r"""Expressive's one-bilayer NT transformer, batched over seeds, with a hand-derived backward.

Expressive (Gros, section 4, "Transformer details" and "Readout & Testing")
trains a decoder-only transformer on the NT tasks of
:mod:`refattn.training.tasks.nt`. For a context of ``n = N_con`` symbols
``x_1, ..., x_n`` in ``{0, ..., N-1}`` and embedding size ``d = N``, with
every position ``m`` owning its weights ("one attention head per token"),
the model computes (``derivations/11-nt-model.md``, Eqs. 11.M1-11.M10)::

    X_m  = e_{x_m}                                   one-hot embedding, (d,)        11.M1
    Z_m  = LN(X_m)                                   pre-LN, no gain/bias            11.M2
    Q_m  = W_Q[m] Z_m + b_Q,  K_m = W_K[m] Z_m + b_K,  V_m = W_V[m] Z_m + b_V        11.M3
    s_mk = beta Q_m . K_k                            beta = 1 (Expressive, Eq. 1)   11.M4
    A_m  = phi(s_m) over keys k <= m                 causal; softmax = Eq. 1,
                                                     expressive = Eq. 2              11.M5
    H_m  = X_m + sum_k A_mk V_k                      residual                        11.M6
    U_m  = W_1[m] LN(H_m),  T_m = tanh(U_m)          hidden width 4d                 11.M7
    G_m  = H_m + W_2[m] T_m + b_2                    residual                        11.M8
    y    = W_r [G_1; ...; G_n] + b_r                 readout, (d,)                   11.M9
    L    = mean over examples and the d outputs of (y - e_target)^2                 11.M10

and predicts ``argmax_j y_j`` (greedy inference). Of the five bias vectors
``b_Q, b_K, b_V, b_2, b_r`` a *layout* keeps exactly two: one held by every
position (``b[m]``) and one held once, shared; the others are absent (zero).
``layout="b_Q+b_r"`` (the default) means a query bias ``b_Q[m]`` per
position and a shared readout bias (:data:`LAYOUTS`; derivation 11, sections
6-7). Every layout has ``n (11 d^2 + d) + n d^2 + d`` parameters: 802 for
N2T5 at ``N_con = 16`` and 395,280 ("about 4e5") for N16T5 at
``N_con = 128``, as Expressive states
(section 5, Figs. 4-5); :func:`count_params` computes it and
:func:`search_parameterisations` shows which other layouts also give 802.
At ``N = 2`` expressive attention is blind to the symbols unless a query or
key bias exists (:func:`ea_symbol_dependence`, derivation 11, section 6).

The trainer's model protocol (:mod:`refattn.training.models`): a batch is
``{"context": (S, B, n) int, "target": (S, B) int}``; :meth:`NTModel.loss_and_grad`
is the backward pass of ``derivations/11-nt-model.md``, section 4, built from
:func:`refattn.core.attention.attention_backward` and
:func:`refattn.training.layers.layer_norm_backward`.
The parameters may be CuPy arrays; contexts and targets are host integer
arrays, copied to the parameters' device once per forward pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ...core.activations import Activation, activation as _activation
from ...custom import divergence_as_data
from ...fast import attention, attention_backward  # the fast path: same numbers as refattn.attention
from ..fast_layers import layer_norm, layer_norm_backward  # the reference's formulas, row sums as products
from ...fast.threads import num_threads, run_blocks
from ...core.backend import array_module, dtype_of, is_traced, stop_gradient, to_numpy
from ...core.checks import check_float_array, check_int, check_real
from ...core.scores import score as _score
from ..tasks.nt import check_symbols

__all__ = [
    "NTModel",
    "LAYOUTS",
    "CANDIDATE_LAYOUTS",
    "DEFAULT_LAYOUT",
    "MATRIX_NAMES",
    "PER_POSITION_VECTORS",
    "SHARED_VECTORS",
    "PARAM_NAMES",
    "PAPER_PARAM_COUNTS",
    "count_params",
    "ea_symbol_dependence",
    "one_vector_layouts",
    "ParamLayout",
    "search_parameterisations",
]

#: The matrices every layout has, in the order their entries are drawn at
#: initialisation (biases come after them, so a seed's matrices are the same in
#: every layout).
MATRIX_NAMES = ("W_Q", "W_K", "W_V", "W_1", "W_2", "W_r")

#: Bias vectors that a layout may give every position (``(S, n, d)``), and those
#: it may hold once (``(S, d)``); ``b_r`` (the readout's) exists only once.
PER_POSITION_VECTORS = ("b_Q", "b_K", "b_V", "b_2")
SHARED_VECTORS = ("b_Q", "b_K", "b_V", "b_2", "b_r")

#: Every layout :class:`NTModel` offers, named ``"<per-position vector>+<shared vector>"``:
#: all 16 members of the 99-layout group of derivation 11 (section 2, step 4)
#: built from these five biases. Each has exactly 802 parameters at N2T5, N_con = 16.
LAYOUTS = tuple(f"{p}+{s}" for p in PER_POSITION_VECTORS for s in SHARED_VECTORS if p != s)

#: The four layouts trained side by side in derivation 11, section 7 (one per
#: place of the per-position vector, shared readout bias).
CANDIDATE_LAYOUTS = ("b_2+b_r", "b_K+b_r", "b_Q+b_r", "b_V+b_r")

#: The layout :class:`NTModel` uses unless told otherwise: a query bias per
#: position and the readout bias, the candidate under which expressive attention
#: learns N2T5 faster than dot-product attention, as Expressive's Fig. 4 reports
#: (measurements in derivation 11, section 7).
DEFAULT_LAYOUT = "b_Q+b_r"

_ORDER = ("W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V", "W_1", "W_2", "b_2", "W_r", "b_r")


def _param_names(layout):
    """The parameter names of ``layout``, in :data:`_ORDER`."""
    per, shared = layout.split("+")
    return tuple(k for k in _ORDER if k in MATRIX_NAMES or k in (per, shared))


#: The parameters of :class:`NTModel` with the default layout (:data:`DEFAULT_LAYOUT`);
#: ``NTModel(...).param_names`` gives them for any layout.
PARAM_NAMES = _param_names(DEFAULT_LAYOUT)

#: Expressive's model sizes: ``(N, N_con) -> number of adjustable parameters``
#: (section 5: "N_model = 802" for N2T5 at N_con = 16, Fig. 4; "about 4 * 10^5
#: for N_con = 128" for N16T5, Fig. 5).
PAPER_PARAM_COUNTS = {(2, 16): 802, (16, 128): 4e5}

#: Hidden width of the token-wise feed-forward layer, in units of d
#: ("expanded by a factor four", Expressive section 4).
HIDDEN_FACTOR = 4


# --------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------


def _layout(layout):
    """``(per_position, shared)`` of a layout name after checking it is one of :data:`LAYOUTS`."""
    if not isinstance(layout, str):
        raise TypeError(f"layout: expected a str such as {DEFAULT_LAYOUT!r}, got {type(layout).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS} ('<per-position vector>+<shared vector>'), "
                         f"got {layout!r}")
    per, shared = layout.split("+")
    return per, shared


def _symbols(x, N, name, shape):
    """``x`` as an int64 array after checking its dtype, range 0..N-1 and ``shape``."""
    x = check_symbols(x, N, name)  # the NT tasks' own check: integer symbols in 0..N-1
    if x.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {x.shape}")
    return x


# --------------------------------------------------------------------------
# checks shared by the models batched over seeds
# --------------------------------------------------------------------------


def check_seeds_and_dtype(seeds, dtype):
    """``seeds`` as a list of ints >= 0 (non-empty), after checking ``dtype`` is a real float dtype."""
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__") or len(seeds) == 0:
        raise TypeError("seeds: expected a non-empty sequence of ints >= 0, e.g. [0, 1, 2]")
    seeds = [check_int(s, "seeds[]", 0) for s in seeds]
    if np.dtype(dtype).kind != "f":
        raise TypeError(f"dtype: expected a real floating dtype (float32 or float64), got {np.dtype(dtype)}")
    return seeds


def check_seed_params(params, shapes, model):
    """Check a model's parameter dict: the keys of ``shapes``, float arrays of
    shape ``(S,) + shapes[name]`` with one seed count ``S``; return ``S``.

    ``model`` (a description) goes into the error messages. Shared by every
    model batched over seeds (:class:`NTModel`,
    :class:`refattn.training.models.decoder.DecoderLM`).
    """
    names = list(shapes)
    if not (isinstance(params, Mapping) or is_traced(params)):  # autograd boxes a dict as DictBox
        raise TypeError(f"params: expected a dict with keys {names} ({model}), got {type(params).__name__}")
    missing = [k for k in names if k not in params]
    extra = sorted(set(params) - set(names))
    if missing or extra:
        raise ValueError(f"params: expected the keys {names} ({model}); missing {missing}, unexpected {extra}")
    S = None
    for name, shape in shapes.items():
        check_float_array(params[name], f"params[{name!r}]")
        got = np.shape(stop_gradient(params[name]))
        if S is None:
            S = got[0] if len(got) == len(shape) + 1 else -1
        if got != (S,) + shape:
            raise ValueError(f"params[{name!r}]: expected shape (S,) + {shape} with one S for every "
                             f"parameter, got {got} ({model})")
    return S


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
    """Eq. 11.B2 for ``y = _apply(W, x)``: ``dW[s, m] = sum_b dy[s, b, m] x[s, b, m]^T``, (S, n, o, i)."""
    return grad_y.transpose(0, 2, 3, 1) @ x.transpose(0, 2, 1, 3)  # (S, n, o, B) @ (S, n, B, i)


def _grad_x(W, grad_y):
    """Eq. 11.B2 for ``y = _apply(W, x)``: ``dx[s, b, m] = W[s, m]^T dy[s, b, m]``, (S, B, n, i)."""
    xp = array_module(W, grad_y)
    return xp.swapaxes(xp.swapaxes(grad_y, 1, 2) @ W, 1, 2)  # (S, n, B, o) @ (S, n, o, i)


def _seed_blocks(params, S):
    """Seeds per thread for :func:`refattn.fast.threads.run_blocks`, or ``None`` to run all in this thread.

    Seeds never meet in the model, so a block of seeds computes exactly what
    the whole batch computes for them. NumPy arrays only (autograd's traced
    values and CuPy arrays run whole), at least two seeds and two threads.
    """
    threads = num_threads()
    if threads < 2 or S < 2 or any(type(v) is not np.ndarray for v in params.values()):
        return None
    return math.ceil(S / threads)


def _rows(params, i, j):
    """Seeds ``i:j`` of every parameter (views)."""
    return {k: v[i:j] for k, v in params.items()}


# --------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------


class NTModel:
    """Expressive's decoder-only, one-bilayer transformer for NT tasks (Eqs. 11.M1-11.M10), batched over seeds.

    Parameters
    ----------
    N : int >= 2
        The basis of the NT task; the embedding size is ``d = N``.
    n_con : int >= 1
        The context length ``N_con``.
    activation : str or Activation
        ``"softmax"`` (Expressive's Eq. 1), ``"expressive"`` (Eq. 2), or any other.
    beta : float > 0
        Score scale ``s_mk = beta Q_m . K_k`` (Expressive: 1).
    ln_eps : float > 0
        The ``eps`` of both layer normalisations.
    layout : str
        Where the two bias vectors sit, ``"<per-position>+<shared>"``, one of
        :data:`LAYOUTS` (derivation 11, sections 2, 6 and 7); the default
        ``"b_Q+b_r"`` is the one under which EA learns N2T5 faster than DPA.
    init_scale : float > 0
        Multiplies the half-width ``1/sqrt(fan_in)`` of the uniform initialisation.
    bias_init : {"zeros", "uniform"}
        Biases at 0, or uniform like the matrix they belong to (``torch.nn.Linear``).

    Parameters are a dict (:attr:`param_names`) of arrays with a leading seed
    axis ``S``; the matrices are the same in every layout, the biases are two
    of the five listed:

    ======== =============== ===============================================
    name     shape           role
    ======== =============== ===============================================
    W_Q      (S, n, d, d)    query matrix of each position (Eq. 11.M3)
    W_K      (S, n, d, d)    key matrix of each position
    W_V      (S, n, d, d)    value matrix of each position
    W_1      (S, n, 4d, d)   feed-forward input matrix of each position (11.M7)
    W_2      (S, n, d, 4d)   feed-forward output matrix of each position (11.M8)
    W_r      (S, d, n d)     readout of the concatenated outputs (11.M9)
    b_Q      (S, n, d)       per position, or (S, d) shared: query bias (11.M3)
    b_K      (S, n, d)       per position, or (S, d) shared: key bias
    b_V      (S, n, d)       per position, or (S, d) shared: value bias
    b_2      (S, n, d)       per position, or (S, d) shared: feed-forward
                             output bias (11.M8)
    b_r      (S, d)          readout bias (11.M9), shared only
    ======== =============== ===============================================
    """

    def __init__(self, N, n_con, activation="softmax", beta=1.0, ln_eps=1e-5, layout=DEFAULT_LAYOUT,
                 init_scale=1.0, bias_init="zeros"):
        self.N = check_int(N, "N", 2)
        self.n_con = check_int(n_con, "n_con", 1)
        if isinstance(activation, Activation):
            self.activation = divergence_as_data(activation)  # a value that is not finite: a diverged seed
        else:
            self.activation = _activation(activation)
        self.beta = check_real(beta, "beta", positive=True)
        self.ln_eps = check_real(ln_eps, "ln_eps", positive=True)
        self.per_position, self.shared = _layout(layout)
        self.layout = layout
        self.init_scale = check_real(init_scale, "init_scale", positive=True)
        if bias_init not in ("zeros", "uniform"):
            raise ValueError(f"bias_init: expected 'zeros' or 'uniform', got {bias_init!r}")
        self.bias_init = bias_init
        self.d = self.N
        self._score = _score("scaled_dot", beta=self.beta)  # s_mk = beta Q_m . K_k (Expressive, Eq. 1)

    def __repr__(self):
        return (f"NTModel(N={self.N}, n_con={self.n_con}, activation={self.activation.name!r}, "
                f"beta={self.beta:g}, ln_eps={self.ln_eps:g}, layout={self.layout!r}, "
                f"init_scale={self.init_scale:g}, bias_init={self.bias_init!r})")

    # --- parameters ----------------------------------------------------------
    @property
    def param_names(self):
        """The names of the parameters, matrices and this layout's two biases."""
        return _param_names(self.layout)

    def param_shapes(self):
        """``{name: shape}`` of one seed's parameters (without the seed axis), in :attr:`param_names` order."""
        n, d, h = self.n_con, self.d, HIDDEN_FACTOR * self.d
        shapes = {"W_Q": (n, d, d), "W_K": (n, d, d), "W_V": (n, d, d),
                  "W_1": (n, h, d), "W_2": (n, d, h), "W_r": (d, n * d),
                  self.per_position: (n, d), self.shared: (d,)}
        return {k: shapes[k] for k in self.param_names}

    def _fan_in(self, name):
        """The fan-in of a matrix, or of the matrix a bias belongs to."""
        n, d = self.n_con, self.d
        return {"W_Q": d, "W_K": d, "W_V": d, "W_1": d, "W_2": HIDDEN_FACTOR * d, "W_r": n * d,
                "b_Q": d, "b_K": d, "b_V": d, "b_2": HIDDEN_FACTOR * d, "b_r": n * d}[name]

    def _add_bias(self, name, y, p):
        """``y + b`` for a bias of shape (S, n, d) or (S, d) onto y (S, B, n, d); ``y`` if absent."""
        if name == self.per_position:
            return y + p[name][:, None]  # (S, 1, n, d)
        if name == self.shared:
            return y + p[name][:, None, None]  # (S, 1, 1, d)
        return y

    def _bias_grad(self, name, grad_y, g):
        """Gradient of :meth:`_add_bias`: sum over the examples, and over the positions if shared."""
        if name == self.per_position:
            g[name] = grad_y.sum(axis=1)  # (S, n, d)
        elif name == self.shared:
            g[name] = grad_y.sum(axis=(1, 2))  # (S, d)

    @property
    def n_params(self):
        """The number of adjustable parameters of one seed's model (:func:`count_params`)."""
        return sum(math.prod(s) for s in self.param_shapes().values())

    def init_params(self, seeds, dtype=np.float64):
        """Initial parameters of one model per seed, shapes ``(S,) + param_shapes()[name]``.

        Slice ``i`` is drawn from ``numpy.random.default_rng(seeds[i])`` alone,
        the matrices first (the same in every layout): uniform in ``init_scale *
        (-1/sqrt(fan_in), 1/sqrt(fan_in))`` as ``torch.nn.Linear``; Expressive
        states no initialisation (``derivations/11-nt-model.md``, sections 1 and 7).
        """
        seeds = check_seeds_and_dtype(seeds, dtype)
        shapes = self.param_shapes()
        biases = [k for k in self.param_names if k not in MATRIX_NAMES]
        per_seed = []
        for seed in seeds:
            rng = np.random.default_rng(seed)
            one = {}
            for name in MATRIX_NAMES + tuple(biases):  # matrices first: the same in every layout
                bound = self.init_scale / math.sqrt(self._fan_in(name))
                if name in MATRIX_NAMES or self.bias_init == "uniform":
                    one[name] = rng.uniform(-bound, bound, size=shapes[name])
                else:
                    one[name] = np.zeros(shapes[name])
            per_seed.append(one)
        return {name: np.stack([p[name] for p in per_seed]).astype(dtype) for name in self.param_names}

    def _check_params(self, params):
        """Validate ``params``; return the number of seeds ``S``."""
        return check_seed_params(params, self.param_shapes(), f"{self!r}, layout {self.layout!r}")

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

    # --- forward (Eqs. 11.M1-11.M9), one source for NumPy and autograd ---------------
    def _forward(self, params, context):
        """Eqs. 11.M1-11.M9 with everything the backward pass needs; ``xp`` follows ``params``."""
        p = params
        xp = array_module(*(p[k] for k in self.param_names))
        S, B, n = context.shape
        ctx = xp.asarray(context)  # host symbols to the parameters' device: the one explicit copy (no-op on NumPy)
        eye = xp.eye(self.d, dtype=dtype_of(p["W_Q"]))  # (d, d)
        X = eye[ctx]  # (S, B, n, d) one-hot, 11.M1 (a constant)
        Z1 = layer_norm(eye, self.ln_eps)[0][ctx]  # (S, B, n, d) 11.M2: LN(e_x) is row x of LN(I), looked up
        W_QKV = xp.concatenate([p["W_Q"], p["W_K"], p["W_V"]], axis=-2)  # (S, n, 3d, d): one product, not three
        QKV = _apply(W_QKV, Z1)  # (S, B, n, 3d) = [W_Q Z1, W_K Z1, W_V Z1]
        d = self.d
        Q = self._add_bias("b_Q", QKV[..., :d], p)  # (S, B, n, d) 11.M3
        K = self._add_bias("b_K", QKV[..., d:2 * d], p)  # (S, B, n, d)
        V = self._add_bias("b_V", QKV[..., 2 * d:], p)  # (S, B, n, d)
        Y, att = attention(Q, K, V, score=self._score, activation=self.activation,
                           causal=True)  # (S, B, n, d) 11.M4-11.M5: s = beta Q K^T, A = phi(s), Y = A V
        H = X + Y  # (S, B, n, d) 11.M6
        Z2, ln2 = layer_norm(H, self.ln_eps)  # (S, B, n, d) 11.M7
        T = xp.tanh(_apply(p["W_1"], Z2))  # (S, B, n, 4d)
        G = self._add_bias("b_2", H + _apply(p["W_2"], T), p)  # (S, B, n, d) 11.M8
        y = xp.reshape(G, (S, B, n * self.d)) @ xp.swapaxes(p["W_r"], -1, -2)  # (S, B, d) 11.M9
        if self.shared == "b_r":
            y = y + p["b_r"][:, None]
        return y, dict(Z1=Z1, att=att, A=att["w"], s=att["s"], ln2=ln2, Z2=Z2, T=T, G=G)

    def _loss(self, y, target):
        """Eq. 11.M10: per seed, the mean over examples and outputs of ``(y - e_target)^2``."""
        xp = array_module(y)
        err = y - xp.eye(self.d, dtype=dtype_of(y))[xp.asarray(target)]  # (S, B, d)
        return xp.mean(err * err, axis=(1, 2)), err  # (S,)

    def outputs(self, params, context):
        """The model's outputs for a batch of contexts (Eqs. 11.M1-11.M9), for evaluation.

        Parameters
        ----------
        params : dict
            As from :meth:`init_params`.
        context : array_like of int, shape (S, B, n_con)
            Symbols ``0..N-1``, oldest first.

        Returns
        -------
        dict
            ``out`` (S, B, d): the prediction ``y`` (Eq. 11.M9); ``prediction``
            (S, B): ``argmax_j y_j``; ``attention`` (S, B, n, n): the weights
            ``A_mk`` (0 above the diagonal, Eq. 11.M5); ``scores`` (S, B, n, n):
            ``s_mk`` (Eq. 11.M4, also above the diagonal, where they are unused);
            ``hidden`` (S, B, n, d): the last layer ``G`` (Eq. 11.M8), whose row
            ``m`` depends on the symbols ``x_1..x_m`` only.
        """
        S = self._check_params(params)
        context = self._check_context(context, S)
        y, c = self._forward(params, context)
        return {"out": y, "prediction": array_module(y).argmax(y, axis=-1), "attention": c["A"],
                "scores": c["s"], "hidden": c["G"]}

    def predict(self, params, context):
        """Greedy inference: ``argmax_j y_j`` for each context, shape (S, B) (Expressive, section 4)."""
        return self.outputs(params, context)["prediction"]

    def generate(self, params, context, n_steps):
        """Greedy autoregressive continuation ``(S, B, n_steps)`` of each context ``(S, B, n_con)``
        (Expressive, "Readout & Testing"): each prediction is appended and the oldest symbol dropped."""
        S = self._check_params(params)
        window = self._check_context(context, S)
        n_steps = check_int(n_steps, "n_steps", 1)
        blocks = _seed_blocks(params, S)
        if blocks is not None:  # seeds are independent: a block of them per thread, the same numbers
            return np.concatenate(run_blocks(lambda i, j: self._generate(_rows(params, i, j), window[i:j], n_steps),
                                             S, blocks))
        return self._generate(params, window, n_steps)

    def _generate(self, params, window, n_steps):
        """:meth:`generate` in the calling thread."""
        out = np.empty(window.shape[:2] + (n_steps,), dtype=np.int64)  # (S, B, n_steps)
        for t in range(n_steps):
            y, _ = self._forward(params, window)
            out[..., t] = to_numpy(array_module(y).argmax(y, axis=-1))  # (S, B) explicit copy to the host
            window = np.concatenate([window[..., 1:], out[..., t:t + 1]], axis=-1)  # slide by one
        return out

    def forward(self, params, batch):
        """Per-seed loss (Eq. 11.M10) and the cache of :meth:`backward`, traceable by autograd.

        ``L_s = (1 / (B d)) sum_b sum_j (y_bj - [j = target_b])^2``: the mean
        squared difference between the readout and the one-hot next symbol
        (Expressive: "the basic squared difference"; averaged over the ``d``
        outputs as well, as ``torch.nn.MSELoss`` does).

        Parameters
        ----------
        params : dict
            NumPy arrays or values traced by autograd.
        batch : dict
            ``"context"`` (S, B, n_con) and ``"target"`` (S, B), int symbols.

        Returns
        -------
        loss : ndarray, shape (S,)
        cache : dict
        """
        context, target = self._check_batch(params, batch)
        y, c = self._forward(params, context)
        loss, err = self._loss(y, target)
        return loss, dict(c, params=params, context=context, target=target, y=y, err=err)

    def loss(self, params, batch):
        """The per-seed loss alone, ``forward(params, batch)[0]``."""
        return self.forward(params, batch)[0]

    def loss_and_grad(self, params, batch):
        """``(loss, grads, aux)``: :meth:`forward`, then :meth:`backward` of ``loss.sum()`` (the trainer's call).

        The backward pass of ``derivations/11-nt-model.md``, section 4 (Eqs.
        11.B1-11.B10): readout, residual, feed-forward layer with ``tanh``, the second
        layer normalisation (Eq. 11.B5), then
        :func:`refattn.core.attention.attention_backward` for the attention values,
        the activation's VJP with the causal mask
        (``derivations/01-reweighted-softmax.md``, Eq. 01.R4) and the bilinear
        score, and last the per-position query, key and value matrices (Eq.
        11.B10) and their biases where the layout has them (Eq. 11.B11: a bias's
        gradient is the sum of its output's gradient over the examples, and
        over the positions if it is shared). The first layer normalisation
        acts on the fixed one-hot embedding and needs no backward pass.

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
        blocks = _seed_blocks(params, context.shape[0])
        if blocks is None:
            return self._loss_and_grad(params, context, target)
        # seeds are independent: a block of them per thread (refattn.fast.threads.run_blocks), the same numbers
        parts = run_blocks(lambda i, j: self._loss_and_grad(_rows(params, i, j), context[i:j], target[i:j]),
                           context.shape[0], blocks)
        loss = np.concatenate([part[0] for part in parts])
        grads, aux = ({k: np.concatenate([part[m][k] for part in parts]) for k in parts[0][m]} for m in (1, 2))
        return loss, grads, aux

    def _loss_and_grad(self, p, context, target):
        """:meth:`loss_and_grad` on checked arguments, in the calling thread."""
        loss, c = self.forward(p, {"context": context, "target": target})
        grads = self.backward(array_module(loss).ones_like(loss), c)
        y = c["y"]
        pred = array_module(y).argmax(y, axis=-1)  # (S, B), on the parameters' device
        aux = {"out": y, "prediction": pred, "correct": pred == array_module(y).asarray(target),
               "scores": c["s"], "attention": c["A"]}
        return loss, grads, aux

    def backward(self, grad_loss, cache):
        """The hand-derived gradient of ``grad_loss . loss`` with respect to every parameter (section 4).

        Returns
        -------
        dict
            The keys and shapes of ``params``.
        """
        c, p, y = cache, cache["params"], cache["y"]
        S, B, n = cache["context"].shape
        d = self.d
        g = {}
        dy = (2.0 / (B * d)) * grad_loss[:, None, None] * c["err"]  # (S, B, d)   11.B1: dL/dy
        G_flat = c["G"].reshape(S, B, n * d)  # (S, B, n d)
        xp = array_module(y)
        g["W_r"] = xp.swapaxes(dy, -1, -2) @ G_flat  # (S, d, n d)   11.B3: y = W_r G + b_r
        if self.shared == "b_r":
            g["b_r"] = dy.sum(axis=1)  # (S, d)
        dG = (dy @ p["W_r"]).reshape(S, B, n, d)  # (S, B, n, d)
        self._bias_grad("b_2", dG, g)  # (S, n, d) or (S, d)          11.B4: G = H + W_2 T + b_2
        g["W_2"] = _grad_W(dG, c["T"])  # (S, n, d, 4d)                 11.B2 rule
        dT = _grad_x(p["W_2"], dG)  # (S, B, n, 4d)
        dU = dT * (1.0 - c["T"] * c["T"])  # (S, B, n, 4d)            tanh' = 1 - tanh^2
        g["W_1"] = _grad_W(dU, c["Z2"])  # (S, n, 4d, d)
        dZ2 = _grad_x(p["W_1"], dU)  # (S, B, n, d)
        dH = dG + layer_norm_backward(dZ2, c["ln2"])  # (S, B, n, d)   11.B5-11.B6: both paths into H
        dQKV = attention_backward(dH, c["att"])[:3]  # 11.B7-11.B9: Y = A V, A = phi(s) (Eq. 01.R4), s = beta Q K^T
        dW_QKV = _grad_W(xp.concatenate(dQKV, axis=-1), c["Z1"])  # (S, n, 3d, d)
        for i, key in enumerate(("Q", "K", "V")):  # 11.B10: Q = W_Q Z1 + b_Q, ...
            g["W_" + key] = dW_QKV[:, :, i * d:(i + 1) * d]  # (S, n, d, d)
            self._bias_grad("b_" + key, dQKV[i], g)  # (S, n, d) or (S, d)   11.B11
        return {name: g[name] for name in self.param_names}


def count_params(N, n_con, **options):
    """The number of adjustable parameters of one :class:`NTModel`, ``n_con (12 d^2 + d) + d`` with ``d = N``
    in every layout (Eq. 11.P1): 802 for N2T5 at ``N_con = 16``, 395,280 for N16T5 at 128 (Expressive,
    section 5: 802 and "about 4e5")."""
    return NTModel(N, n_con, **options).n_params


# --------------------------------------------------------------------------
# which layouts give Expressive's 802 parameters? (derivation 11, section 2)
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
        """``n_con (a d^2 + b d) + c d^2 + e d + n_con d^2`` at ``d = N`` (Eq. 11.P2)."""
        d = N
        return (n_con * (self.per_position_d2 * d * d + self.per_position_d * d)
                + self.shared_d2 * d * d + self.shared_d * d + n_con * d * d)


def search_parameterisations(n_params=802, N=2, n_con=16, about=(16, 128, 4e5)):
    """Every layout of the block catalogue whose parameter count is ``n_params`` at ``(N, n_con)`` (Expressive,
    section 5: 802 at ``(2, 16)``, about 4e5 at ``(16, 128)``).

    Each block of :data:`_BLOCKS` is absent, held once ("shared") or by every
    position ("one attention head per token"); a layout's count depends only on
    four numbers (Eq. 11.P2), so the 90,699,264 assignments are grouped by them
    (a convolution of counts) and the groups with that count are returned,
    those whose count at ``about = (N2, n_con2, target)`` rounds to ``target``
    at one significant figure. ``n_params=None`` returns every group
    (``derivations/11-nt-model.md``, section 2). A list of :class:`ParamLayout`,
    the most per-position ``d^2`` blocks first.
    """
    if n_params is not None:
        n_params = check_int(n_params, "n_params", 1)
    N, n_con = check_int(N, "N", 2), check_int(n_con, "n_con", 1)
    if about is not None:
        if not (isinstance(about, tuple) and len(about) == 3):
            raise TypeError("about: expected a tuple (N, n_con, target) or None")
        N2, n2 = check_int(about[0], "about[0]", 2), check_int(about[1], "about[1]", 1)
        target = check_real(about[2], "about[2]", positive=True)
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


# --------------------------------------------------------------------------
# which of the 99 one-vector layouts let expressive attention see the symbols
# at N = 2? (derivation 11, section 6)
# --------------------------------------------------------------------------


def one_vector_layouts():
    """The 99 layouts of the first group of :func:`search_parameterisations`, as pairs.

    All five matrices per position, plus one ``d``-vector held by every
    position and one other held once (group ``(11, 1, 0, 1)``, derivation 11,
    section 2, step 4). The vector per position is one of the catalogue's 9
    single ``d``-vectors that may sit at a position (``b_Q, b_K, b_V, b_O,
    b_2`` and the gains and biases of the two pre-LNs); the shared one is any
    other single ``d``-vector that may be held once (those 8 and ``b_r`` and
    the final LN's gain and bias): ``9 * 11 = 99`` pairs. Read from the block
    catalogue, not written out by hand.

    Returns
    -------
    list of (str, str)
        ``(per_position, shared)`` names, in catalogue order.
    """
    singles = [(name, where) for name, unit, size, where in _BLOCKS if unit == "d" and size == 1]
    per = [name for name, where in singles if "position" in where]
    shared = [name for name, where in singles if "shared" in where]
    return [(p, s) for p in per for s in shared if p != s]


def ea_symbol_dependence(layout):
    """Whether expressive attention's weights can depend on the symbols at ``N = 2``.

    At ``N = d = 2`` the first layer normalisation maps the two one-hot
    symbols to ``+u`` and ``-u`` (``u = (1, -1)/sqrt(1 + 4 eps)``): ``Z_m =
    sigma_m u`` with ``sigma_m = +-1``. With query and key biases ``c_m`` and
    ``b_k`` (zero where the layout has none),

        z_mk = Q_m . K_k = sigma_m sigma_k alpha_mk + sigma_m beta_mk + sigma_k gamma_mk + c_m . b_k

    with ``alpha_mk = (W_Q[m] u).(W_K[k] u)``, ``beta_mk = (W_Q[m] u) . b_k``,
    ``gamma_mk = c_m . (W_K[k] u)``. Expressive's Eq. 2 uses ``z_mk`` only
    through ``z_mk^2``, so (derivation 11, section 6, Eqs. 11.E1-11.E4):

    * no query and no key bias: ``z^2 = alpha^2``, the weights do not depend
      on the symbols at all (content-blind);
    * a key bias only: ``z^2 = (sigma_k alpha + beta)^2`` depends on the key's
      symbol (not on the query's);
    * a query bias only: ``z^2 = (sigma_m alpha + gamma)^2`` depends on the
      query's symbol (not on the key's);
    * a bias of the first LN acts as both (``Z_m = sigma_m u + b``).

    A gain of the first LN keeps ``Z_m`` odd in ``sigma_m``; every vector after
    the attention weights (``b_V``, ``b_O``, ``b_2``, the second LN, the
    readout and final LN) cannot change them. Softmax (Eq. 1) sees
    ``sigma_m sigma_k alpha`` itself and depends on the symbols in every layout.

    Parameters
    ----------
    layout : str or (str, str)
        A name of :data:`LAYOUTS` (``"b_K+b_r"``) or a pair ``(per_position,
        shared)`` of :func:`one_vector_layouts`.

    Returns
    -------
    dict
        ``{"query": bool, "key": bool}``: whether the weight ``A_mk`` can
        change with the query's symbol ``x_m`` / the key's symbol ``x_k``.
        Both False: content-blind.
    """
    if isinstance(layout, str):
        pair = _layout(layout)
    elif isinstance(layout, tuple) and len(layout) == 2 and all(isinstance(v, str) for v in layout):
        pair = layout
        if pair not in one_vector_layouts():
            raise ValueError(f"layout: {pair!r} is not a (per_position, shared) pair of one_vector_layouts()")
    else:
        raise TypeError(f"layout: expected a layout name or a (per_position, shared) pair, got {layout!r}")
    present = set(pair)
    return {"query": bool(present & {"b_Q", "LN1 bias"}), "key": bool(present & {"b_K", "LN1 bias"})}
