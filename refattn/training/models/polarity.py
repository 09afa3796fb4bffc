r"""TanhMax's polarity classifier, batched over seeds, with a hand-derived backward.

The model (TanhMax, section 5.1, and its public code)
-------------------------------------------------------

One attention operation over the tokens of a sentence, then a logistic
read-out (the model of TanhMax's Proposition 1, Eqs. 1-2 with the output
``y = sigma(V^T W)``). For a sentence of token ids ``t_1 .. t_L`` with the
real tokens marked by ``mask`` (padding has ``mask = False``), per seed:

    (M1)  x_i = E[t_i]                                   embedding, (E,)
    (M2)  s_i = score(x_i), one of
            "self"     q_i = W_q x_i + b_q,  k_i = W_k x_i + b_k,
                       s_i = q_i . k_i / scale           (TanhMax's code, scale = 3)
            "global"   k_i = W_k x_i + b_k,  s_i = k_i . v / lam
                                                         (Sun & Lu 2020, lam = 10)
            "additive" z_i = W_a x_i + b_a,  s_i = u . tanh(z_i)
    (M3)  w = phi(s) over the real tokens                any registered activation
    (M4)  V_i = W_v x_i + b_v                            value, (H,)
    (M5)  h = sum_i w_i V_i                              pooled, (H,)
    (M6)  h~ = h * m / (1 - p)                           inverted dropout, keep mask m
    (M7)  a = w_o . h~ + b_o                             logit
    (M8)  L = softplus(a) - y a                          binary cross-entropy of
                                                         y_hat = sigmoid(a), label y

and the loss of a seed is the mean of ``L`` over its ``B`` sentences. Every
score depends on its token alone, so a vocabulary token ``e`` has one score
(:meth:`PolarityClassifier.token_scores`) and one polarity score
``o_e = w_o . (W_v E[e] + b_v)`` (TanhMax section 3, after Sun & Lu;
:meth:`PolarityClassifier.token_polarity`); the logit is ``a = sum_i w_i o_{t_i}
+ b_o`` without dropout.

Where the pieces come from. Sizes ``E = 30``, ``H = 10``, the embedding
initialised ``U(-0.1, 0.1)``, dropout 0.5 before the read-out, the sigmoid
output and the BCE loss are TanhMax's (section 5.1 and its public code,
``Synthetic/TanhMax.ipynb``); the ``self`` score with ``scale = 3`` is that
code's ``(Q*K).sum(-1) / scale``. The code's ``additive`` score is
``v . tanh(W_q x + b_q + W_k x + b_k)``, i.e. (M2) with ``W_a = W_q + W_k``
and ``b_a = b_q + b_k``; here it has one projection. The ``global`` score is
Sun & Lu's learned query. The linear layers are initialised as PyTorch's
``nn.Linear`` (weights and biases ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``),
``v`` and ``u`` standard normal (the code's ``torch.randn`` for the additive
vector). That notebook minimises ``100 *`` the mean BCE of the sigmoid's
output with PyTorch's ``Adadelta(lr=0.05)`` (the paper's text says Adam);
here the loss is the plain mean BCE, from the logit, and the optimiser is
the trainer's choice (:class:`refattn.training.optim.Adadelta` is there for it).

The backward pass, step by step
-------------------------------

The gradient of ``sum over seeds of loss_s``; seeds share nothing, so each
seed's slice is the gradient of its own loss. Rules (02.S1) (a parameter used
by many rows collects the sum of their gradients) and (02.S2) (``y = W x + b``:
``dW = sum dy x^T``, ``db = sum dy``, ``dx = W^T dy``) are those of
``derivations/02-scores.md`` section 1.3.

    (B1)  da = (sigmoid(a) - y) / B          softplus' = sigmoid; 1/B from the mean
                                             (refattn.training.layers.sigmoid_cross_entropy_backward;
                                             derivations/03-proposition-1.md, step 03.P3)
    (B2)  dw_o = sum_b da h~,  db_o = sum_b da,  dh~ = da w_o
    (B3)  dh = dh~ * m / (1 - p)
    (B4)  dw_i = V_i . dh,  dV_i = w_i dh               (M5 is bilinear in w and V)
    (B5)  ds = act.backward(dw, cache), the cache from  w, cache = act.forward(s, mask=mask)
                                  (derivations/01-reweighted-softmax.md, Eq. 01.R4)
    (B6)  "self":     dq_i = ds_i k_i / scale,  dk_i = ds_i q_i / scale    (02.SE2)
          "global":   dk_i = ds_i v / lam,  dv = sum_i ds_i k_i / lam       (02.G2)
          "additive": du = sum_i ds_i tanh(z_i),
                      dz_i = ds_i u * (1 - tanh(z_i)^2)                     (02.P2)
          "self" by the score's own backward in refattn.core.scores; "global"
          written in the model, one v per seed (the seed axis lives in the
          training code); "additive" as "global" with lam = 1 on the keys
          tanh(z_i), then tanh' = 1 - tanh^2
    (B7)  every affine map of (M2) and (M4) by (02.S2), summed over sentences and
          tokens (02.S1); dx_i collects W^T dy_i from each of them. The code
          stacks the maps' weights into one (m H, E) matrix, so one
          refattn.training.layers.linear makes every projection and one
          refattn.training.layers.linear_backward gives all of (B7)
    (B8)  dE[e] = sum of dx_i over every occurrence (b, i) of token e; rows of
          tokens that do not occur get 0 (a dense (S, V, E) array)

Each step is a few lines of :meth:`PolarityClassifier.loss_and_grad`, in this
order; ``tests/training/test_models_polarity.py`` checks the result against autograd
differentiating :meth:`PolarityClassifier.loss` (1e-10 relative, float64,
every activation and score) and against central differences.

The sign symmetry
-----------------

Negating ``W_q`` and ``b_q`` negates every ``q_i`` and so every ``self``
score, exactly (negation is exact in floating point). For the ``global``
score negating ``v`` does the same; for ``additive`` negating ``u`` does
(equivalently ``W_a`` and ``b_a``, as tanh is odd). If the activation is odd,
``phi(-s) = -phi(s)`` (tanhmax: sinh/cosh, signexp: sign e^|s| / e^|s|,
linear: s/n), every weight flips, ``h`` flips, and negating ``w_o`` as well
leaves every logit, probability and prediction unchanged
(:meth:`PolarityClassifier.symmetric`). So the sign of a TanhMax score says
nothing by itself: only together with the sign of the read-out
``w_o . V_i`` is it meaningful. For an even activation (expressive,
``phi(-s) = phi(s)``) flipping the scores alone changes nothing; for softmax
neither holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ...core.activations import ACTIVATIONS
from ...core.activations import Activation, activation as _get_activation
from ...custom import divergence_as_data
from ...core import scores
from ...core.backend import array_module, dtype_of, stop_gradient
from ...core.checks import check_float_array, check_int, check_real
from ...core.activations import sigmoid
from ..layers import linear, linear_backward, sigmoid_cross_entropy, sigmoid_cross_entropy_backward

__all__ = ["SCORE_KINDS", "PolarityClassifier", "dropout_mask"]

#: The per-token scores the classifier offers (M2).
SCORE_KINDS = ("self", "global", "additive")

#: The score's own parameters, with their shapes in symbols (H hidden, E embedding).
_SCORE_PARAMS = {
    "self": {"W_q": ("H", "E"), "b_q": ("H",), "W_k": ("H", "E"), "b_k": ("H",)},
    "global": {"W_k": ("H", "E"), "b_k": ("H",), "v": ("H",)},
    "additive": {"W_a": ("H", "E"), "b_a": ("H",), "u": ("H",)},
}
#: What :meth:`PolarityClassifier.symmetric` negates to flip every score.
_SCORE_FLIP = {"self": ("W_q", "b_q"), "global": ("v",), "additive": ("u",)}
_COMMON_PARAMS = {"emb": ("V", "E"), "W_v": ("H", "E"), "b_v": ("H",), "w_o": ("H",), "b_o": ()}
_BATCH_KEYS = ("tokens", "labels", "mask", "dropout")


# --------------------------------------------------------------------------
# The linear maps of the embeddings, all in one matmul: (M2), (M4), rule (02.S2)
# --------------------------------------------------------------------------

#: The linear maps ``y = W x + b`` each score applies to a token's embedding
#: (M2), in order; the value map (M4) is appended after them.
_SCORE_MAPS = {"self": (("W_q", "b_q"), ("W_k", "b_k")),
               "global": (("W_k", "b_k"),),
               "additive": (("W_a", "b_a"),)}
_VALUE_MAP = ("W_v", "b_v")


def _project(xp, P, x, maps):
    """Apply the maps ``((W name, b name), ...)`` to every row of ``x (S, ..., E)``.

    The weights are stacked, ``W = [W_1; W_2; ...] (S, m H, E)``, so one
    :func:`refattn.training.layers.linear` does them all; returns ``(cache, [y_1, y_2, ...])``
    with the linear map's cache and each ``y_j = W_j x + b_j`` of shape ``(S, ..., H)``
    (a view of the one result).
    """
    W = xp.concatenate([P[w] for w, _ in maps], axis=1)  # (S, m H, E)
    b = xp.concatenate([P[c] for _, c in maps], axis=1)  # (S, m H)
    Y, cache = linear(x, W, b)  # (S, ..., m H)
    H = P[maps[0][0]].shape[1]
    return cache, [Y[..., j * H:(j + 1) * H] for j in range(len(maps))]


def _split_grads(maps, dW, db):
    """Undo the stacking of :func:`_project` for the gradients: ``{W_j: ..., b_j: ...}``."""
    H = dW.shape[1] // len(maps)
    out = {}
    for j, (w, c) in enumerate(maps):
        out[w], out[c] = dW[:, j * H:(j + 1) * H], db[:, j * H:(j + 1) * H]
    return out


# --------------------------------------------------------------------------
# The three per-token scores: forward (M2), backward (B6)
# --------------------------------------------------------------------------

#: The score's own vector (``v`` of "global", ``u`` of "additive"), one per seed: ``(S, H)``.
_VECTOR = {"global": "v", "additive": "u"}


def _score_forward(xp, kind, sc, P, parts, lam):
    """``(s, cache)`` from the projected embeddings ``parts`` (:func:`_project`); ``s (S, ...)``.

    "self" is :func:`refattn.core.scores.score` ``("self", scale=scale)``. The
    "global" score ``s_i = k_i . v / lam`` has one query vector per seed, so it
    is written here, where the seed axis lives: ``v (S, H)`` meets the keys
    of its own seed only. "additive" is the global score with ``lam = 1`` of
    the keys ``tanh(z_i)``: ``u . tanh(z_i)``.
    """
    if kind == "self":
        q, k = parts  # (S, ..., H) each
        return sc.forward(q, k)  # s_i = q_i . k_i / scale
    k = parts[0] if kind == "global" else xp.tanh(parts[0])  # (S, ..., H): k_i, or tanh(z_i)
    v = P[_VECTOR[kind]]  # (S, H)
    vs = xp.reshape(v, (v.shape[0],) + (1,) * (k.ndim - 2) + (v.shape[1],))  # (S, 1, .., 1, H)
    return xp.sum(k * vs, axis=-1) / lam, {"k": k, "vs": vs, "lam": lam}  # s_i = k_i . v / lam  (02.G1)


def _score_backward(kind, sc, ds, cache):
    """(B6): ``([dy_j], {vector: gradient})``, the gradients of the score's maps' outputs
    ``y_j`` (in :data:`_SCORE_MAPS` order) and of its own vector (``v``, ``u``)."""
    if kind == "self":
        dq, dk, _ = sc.backward(ds, cache)  # dq_i = ds_i k_i / scale, dk_i = ds_i q_i / scale  (02.SE2)
        return [dq, dk], {}
    k, vs, lam = cache["k"], cache["vs"], cache["lam"]
    S, H = k.shape[0], k.shape[-1]
    g = ds / lam  # (S, ...)
    dk = g[..., None] * vs  # (S, ..., H)   dk_i = ds_i v / lam  (02.G2)
    dv = (g.reshape(S, 1, -1) @ k.reshape(S, -1, H))[:, 0]  # (S, H)   dv = sum_i ds_i k_i / lam, per seed
    if kind == "additive":
        dk = dk * (1.0 - k * k)  # dz_i = ds_i u tanh'(z_i), tanh' = 1 - tanh^2  (02.P2)
    return [dk], {_VECTOR[kind]: dv}


def _scatter_rows(dx, tokens, V):
    """(B8): ``dE[s, e] = sum of dx[s, b, i]`` over ``tokens[s, b, i] = e``; ``(S, V, E)``.

    One ``bincount`` over the combined index ``((s V + e) E + c)``: every
    (seed, token, feature) triple is its own bin, so no two seeds mix.
    """
    S, E = dx.shape[0], dx.shape[-1]
    rows = tokens.reshape(S, -1) + V * np.arange(S)[:, None]  # (S, B L) row of (S V, E)
    bins = (rows.reshape(-1, 1) * E + np.arange(E)).reshape(-1)  # (S B L E,)
    out = np.bincount(bins, weights=dx.reshape(-1), minlength=S * V * E)
    return out.reshape(S, V, E).astype(dx.dtype, copy=False)


# --------------------------------------------------------------------------
# Dropout masks (drawn by whoever makes the batch)
# --------------------------------------------------------------------------


def dropout_mask(rngs, batch_size, hidden_dim, rate):
    """Keep masks ``(S, B, H)`` for inverted dropout (M6; Srivastava et al. 2014, as TanhMax section 5.1):
    each entry kept with probability ``1 - rate``, seed ``s``'s slice drawn from ``rngs[s]`` alone."""
    if not isinstance(rngs, Sequence) or not rngs or not all(
            isinstance(r, np.random.Generator) for r in rngs):
        raise TypeError("rngs: expected a non-empty sequence of numpy.random.Generator, one per seed")
    B, H = check_int(batch_size, "batch_size", 1), check_int(hidden_dim, "hidden_dim", 1)
    rate = _drop_rate(rate, "rate")
    return np.stack([r.random((B, H)) >= rate for r in rngs])  # (S, B, H)


def _drop_rate(value, name):
    """A dropout probability in ``[0, 1)``, else a clear error."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number in [0, 1), got {type(value).__name__}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name}: expected a number in [0, 1), got {value!r}")
    return float(value)


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------


class PolarityClassifier:
    r"""TanhMax's one-attention polarity classifier, ``S`` seeds at once.

    Implements the trainer's model protocol: :meth:`init_params`,
    :meth:`loss` (traceable by autograd) and :meth:`loss_and_grad` (the
    hand-derived backward (B1)-(B8) of the module docstring). Shapes: ``S``
    seeds, ``B`` sentences, ``L`` positions, ``V`` vocabulary, ``E``
    embedding, ``H`` hidden.

    Parameters
    ----------
    vocab_size : int
        ``V``; token ids lie in ``[0, V)``.
    activation : str
        Any registered activation (:data:`refattn.core.activations.ACTIVATIONS`).
    score : {"self", "global", "additive"}
        The per-token score (M2).
    embed_dim, hidden_dim : int
        ``E`` and ``H`` (TanhMax: 30 and 10).
    scale : float
        The divisor of the ``self`` score (TanhMax's code: 3, about
        ``sqrt(H)``).
    lam : float
        The divisor of the ``global`` score (Sun & Lu: 10).
    dropout : float
        The drop probability ``p`` in ``[0, 1)`` of (M6) (TanhMax: 0.5).
        It only scales the kept entries by ``1 / (1 - p)``; the keep mask
        itself comes in ``batch["dropout"]`` (:func:`dropout_mask`).

    Notes
    -----
    **The batch** is a dict with ``tokens`` ``(S, B, L)`` int, ``labels``
    ``(S, B)`` (0/1, or any number in ``[0, 1]``), optionally ``mask``
    ``(S, B, L)`` bool (True = real token; absent = every token is real) and
    ``dropout`` ``(S, B, H)`` bool (the keep mask; absent = no dropout).
    Other keys are an error (a misspelt ``"masks"`` must not pass unseen).
    Ids under the padding must still lie in ``[0, V)``; they get weight 0 and
    no gradient. Arrays are NumPy: the backward scatters the embedding's
    gradient with ``numpy.bincount``; :meth:`loss` is also traced by
    autograd.

    **The parameters** (every array has the leading seed axis):
    ``emb (S, V, E)``; the score's (``self``: ``W_q, W_k (S, H, E)``,
    ``b_q, b_k (S, H)``; ``global``: ``W_k, b_k, v (S, H)``; ``additive``:
    ``W_a, b_a, u (S, H)``); ``W_v (S, H, E)``, ``b_v (S, H)``,
    ``w_o (S, H)``, ``b_o (S,)``.
    """

    def __init__(self, vocab_size, activation="tanhmax", score="self", *, embed_dim=30,
                 hidden_dim=10, scale=3.0, lam=10.0, dropout=0.5):
        self.vocab_size = check_int(vocab_size, "vocab_size", 1)
        if not isinstance(activation, Activation) and activation not in ACTIVATIONS:
            raise ValueError(f"activation: expected one of {ACTIVATIONS} or an Activation, got {activation!r}")
        if score not in SCORE_KINDS:
            raise ValueError(f"score: expected one of {SCORE_KINDS}, got {score!r}")
        self.activation, self.score = activation, score
        # an Activation of yours trains on its copy for which a value that is not finite is a diverged seed
        self.act = (divergence_as_data(activation) if isinstance(activation, Activation)
                    else _get_activation(activation))
        self.embed_dim = check_int(embed_dim, "embed_dim", 1)
        self.hidden_dim = check_int(hidden_dim, "hidden_dim", 1)
        self.scale = check_real(scale, "scale", positive=True)
        self.lam = check_real(lam, "lam", positive=True)
        self.dropout = _drop_rate(dropout, "dropout")
        self._score_fn = scores.score("self", scale=self.scale) if score == "self" else None  # (M2)
        self._lam = self.lam if score == "global" else 1.0

    def __repr__(self):
        return (f"PolarityClassifier(vocab_size={self.vocab_size}, activation={self.activation!r}, "
                f"score={self.score!r}, embed_dim={self.embed_dim}, hidden_dim={self.hidden_dim}, "
                f"scale={self.scale:g}, lam={self.lam:g}, dropout={self.dropout:g})")

    # --- parameters ----------------------------------------------------------
    def param_shapes(self) -> dict:
        """The shape of each parameter without the seed axis: ``{name: shape}``."""
        sizes = {"V": self.vocab_size, "E": self.embed_dim, "H": self.hidden_dim}
        spec = {"emb": _COMMON_PARAMS["emb"], **_SCORE_PARAMS[self.score],
                **{k: v for k, v in _COMMON_PARAMS.items() if k != "emb"}}
        return {k: tuple(sizes[c] for c in sym) for k, sym in spec.items()}

    def init_params(self, seeds, dtype=np.float64) -> dict:
        """Random parameters for ``S = len(seeds)`` independent models.

        Seed ``s``'s slice is drawn from ``numpy.random.default_rng(s)`` alone,
        in the order of :meth:`param_shapes`, so it is the same whether the
        seed is trained alone or beside others. Distributions: ``emb``
        ``U(-0.1, 0.1)`` (TanhMax section 5.1); weights and biases of each
        linear layer ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (PyTorch's
        ``nn.Linear``, which TanhMax's code uses; fan_in = E, or H for the
        read-out ``w_o, b_o``); ``v`` and ``u`` standard normal.

        Parameters
        ----------
        seeds : sequence of int
            One non-negative integer per model.
        dtype : float dtype
            float64 (default) or float32.

        Returns
        -------
        dict of str to ndarray
            Every array ``(S, *param_shapes()[name])``.
        """
        if isinstance(seeds, (int, np.integer)) or not isinstance(seeds, (Sequence, np.ndarray)):
            raise TypeError(f"seeds: expected a sequence of ints (one per model), got {type(seeds).__name__}")
        if len(seeds) == 0:
            raise ValueError("seeds: expected at least one seed, got an empty sequence")
        seeds = [check_int(s, f"seeds[{i}]", 0) for i, s in enumerate(seeds)]
        if np.dtype(dtype).kind != "f":
            raise TypeError(f"dtype: expected a real floating dtype, got {np.dtype(dtype)}")
        shapes = self.param_shapes()
        fan_in = {"w_o": self.hidden_dim, "b_o": self.hidden_dim}
        per_seed = []
        for seed in seeds:
            rng = np.random.default_rng(seed)
            one = {}
            for name, shape in shapes.items():
                if name == "emb":
                    one[name] = rng.uniform(-0.1, 0.1, shape)
                elif name in ("v", "u"):
                    one[name] = rng.standard_normal(shape)
                else:
                    bound = 1.0 / math.sqrt(fan_in.get(name, self.embed_dim))
                    one[name] = rng.uniform(-bound, bound, shape)
            per_seed.append(one)
        return {k: np.stack([p[k] for p in per_seed]).astype(dtype) for k in shapes}

    def symmetric(self, params) -> dict:
        """The sign-flipped twin: every score negated, and ``w_o`` negated.

        ``self``: ``W_q, b_q -> -W_q, -b_q``; ``global``: ``v -> -v``;
        ``additive``: ``u -> -u`` (each flips every score exactly, M2), and
        ``w_o -> -w_o``. For an odd activation (tanhmax, signexp, linear)
        the weights flip with the scores and the twin makes the same
        predictions, with the same logits (module docstring, "The sign
        symmetry"). Returns new arrays; ``params`` is not changed.
        """
        self._check_params(params)
        flip = set(_SCORE_FLIP[self.score]) | {"w_o"}
        return {k: (-v if k in flip else v.copy()) for k, v in params.items()}

    # --- checks ------------------------------------------------------------------
    def _check_params(self, params) -> int:
        """Validate keys and shapes; return ``S``. (Under autograd ``params`` is a
        traced dict; its value is checked.)"""
        params = stop_gradient(params)
        if not isinstance(params, Mapping):
            raise TypeError(f"params: expected a dict of arrays, got {type(params).__name__}")
        shapes = self.param_shapes()
        missing = [k for k in shapes if k not in params]
        extra = [k for k in params if k not in shapes]
        if missing or extra:
            raise ValueError(f"params: expected the keys {tuple(shapes)} of score {self.score!r}; "
                             f"missing {missing}, unexpected {extra}")
        S = None
        for k, want in shapes.items():
            check_float_array(params[k], f"params[{k!r}]", min_ndim=1)
            got = tuple(np.shape(stop_gradient(params[k])))
            S = got[0] if S is None else S
            if got != (S,) + want:
                raise ValueError(f"params[{k!r}]: expected shape (S,) + {want} = {(S,) + want}, got {got}")
        return S

    def _check_batch(self, batch, S, need_labels):
        """Validate the batch against ``S``; return ``(tokens, labels, mask, keep)``."""
        if not isinstance(batch, Mapping):
            raise TypeError(f"batch: expected a dict of arrays, got {type(batch).__name__}")
        extra = [k for k in batch if k not in _BATCH_KEYS]
        if extra:
            raise ValueError(f"batch: unexpected keys {extra}; expected {_BATCH_KEYS[:2]} and "
                             f"optionally {_BATCH_KEYS[2:]}")
        if "tokens" not in batch:
            raise ValueError("batch: missing 'tokens' (S, B, L) int")
        tokens = batch["tokens"]
        if not isinstance(tokens, np.ndarray) or tokens.dtype.kind not in "iu":
            raise TypeError(f"batch['tokens']: expected an integer numpy array (S, B, L), got "
                            f"{getattr(tokens, 'dtype', type(tokens).__name__)}")
        if tokens.ndim != 3 or tokens.shape[0] != S or 0 in tokens.shape:
            raise ValueError(f"batch['tokens']: expected shape (S, B, L) with S = {S} (the "
                             f"parameters' seed axis), got {tokens.shape}")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(f"batch['tokens']: ids must lie in [0, {self.vocab_size}), got [{lo}, {hi}]")
        B, L = tokens.shape[1:]
        labels = batch.get("labels")
        if labels is None and need_labels:
            raise ValueError("batch: missing 'labels' (S, B)")
        if labels is not None:
            if not isinstance(labels, np.ndarray) or labels.dtype.kind not in "iufb":
                raise TypeError(f"batch['labels']: expected a numeric numpy array (S, B), got "
                                f"{type(labels).__name__}")
            if labels.shape != (S, B):
                raise ValueError(f"batch['labels']: expected shape {(S, B)}, got {labels.shape}")
            if not np.all((labels >= 0) & (labels <= 1)):
                raise ValueError("batch['labels']: binary cross-entropy needs labels in [0, 1]")
        mask = self._bool(batch, "mask", (S, B, L))
        keep = self._bool(batch, "dropout", (S, B, self.hidden_dim))
        return tokens, labels, mask, keep

    @staticmethod
    def _bool(batch, key, shape):
        x = batch.get(key)
        if x is None:
            return None
        if not isinstance(x, np.ndarray) or x.dtype != np.bool_:
            raise TypeError(f"batch[{key!r}]: expected a bool numpy array {shape}, got "
                            f"{getattr(x, 'dtype', type(x).__name__)}")
        if x.shape != shape:
            raise ValueError(f"batch[{key!r}]: expected shape {shape}, got {x.shape}")
        return x

    # --- forward (M1)-(M7), one source for loss, loss_and_grad and forward ---
    def _forward(self, params, tokens, mask, keep):
        xp = array_module(*params.values())
        S, V, E = np.shape(stop_gradient(params["emb"]))
        rows = tokens + V * np.arange(S)[:, None, None]  # (S, B, L) rows of emb as (S V, E)
        x = xp.reshape(params["emb"], (S * V, E))[rows]  # (S, B, L, E)   (M1)
        maps = _SCORE_MAPS[self.score] + (_VALUE_MAP,)
        lin, parts = _project(xp, params, x, maps)  # the score's maps and the value's, one matmul
        s, score_cache = _score_forward(xp, self.score, self._score_fn, params, parts[:-1], self._lam)  # (M2)
        w, act_cache = self.act.forward(s, mask=mask)  # (S, B, L)   (M3)
        Vv = parts[-1]  # (S, B, L, H)   (M4) V_i = W_v x_i + b_v
        h = (w[..., None, :] @ Vv)[..., 0, :]  # (S, B, H)   (M5) h = sum_i w_i V_i
        drop = None if keep is None else keep * dtype_of(x).type(1.0 / (1.0 - self.dropout))  # m / (1 - p)
        hd = h if drop is None else h * drop  # (S, B, H)   (M6)
        a = (hd @ params["w_o"][:, :, None])[..., 0] + params["b_o"][:, None]  # (S, B)   (M7)
        return {"linear": lin, "maps": maps, "score": score_cache, "act": act_cache, "s": s, "w": w, "V": Vv,
                "drop": drop, "h_drop": hd, "logit": a}

    def forward(self, params, batch):
        """Per-seed mean binary cross-entropy ``(S,)`` (M1)-(M8), and the cache of :meth:`backward`.

        ``L = softplus(a) - y a = -y log sigmoid(a) - (1 - y) log(1 - sigmoid(a))``,
        evaluated with ``logaddexp`` so that no logit overflows; dropout
        applies when ``batch["dropout"]`` is given. This is the reference that
        autograd differentiates (TanhMax Eq. 3 with the BCE loss of
        section 5.1; derivation: module docstring, and
        ``derivations/03-proposition-1.md`` step 03.P3).
        """
        S = self._check_params(params)
        tokens, labels, mask, keep = self._check_batch(batch, S, need_labels=True)
        f = self._forward(params, tokens, mask, keep)
        loss, f["loss"] = sigmoid_cross_entropy(f["logit"], labels, seed_axis=True)  # (S,)   (M8)
        return loss, dict(f, params=params, tokens=tokens)

    def loss(self, params, batch):
        """The per-seed loss alone, ``forward(params, batch)[0]``, traceable by autograd."""
        return self.forward(params, batch)[0]

    def backward(self, grad_loss, cache):
        """The hand-derived gradient of ``grad_loss . loss`` with respect to every parameter.

        Steps (B1)-(B8) of the module docstring, in order; the activation's
        backward pass is :meth:`refattn.core.activations.Activation.backward`
        (``derivations/01-reweighted-softmax.md``, Eq. 01.R4), the score's
        follows ``derivations/02-scores.md`` (02.SE2, 02.G2, 02.P2, 02.S1, 02.S2).

        Returns
        -------
        dict of str to ndarray
            The keys and shapes of ``params``; ``grads["emb"]`` is dense
            ``(S, V, E)``, zero in the rows of tokens absent from the batch.
        """
        f, P = cache, cache["params"]
        hd = f["h_drop"]
        da = sigmoid_cross_entropy_backward(grad_loss, f["loss"])  # (S, B)   (B1)
        grads = {"b_o": da.sum(axis=1)}  # (S,)   (B2)
        grads["w_o"] = (da[:, None, :] @ hd)[:, 0]  # (S, H)   sum_b da h~
        dh = da[..., None] * P["w_o"][:, None, :]  # (S, B, H)   dh~ = da w_o
        if f["drop"] is not None:
            dh = dh * f["drop"]  # (B3) dh = dh~ m / (1 - p)
        dw = (f["V"] @ dh[..., None])[..., 0]  # (S, B, L)   (B4) dw_i = V_i . dh
        dV = f["w"][..., None] * dh[:, :, None, :]  # (S, B, L, H)   dV_i = w_i dh
        ds = self.act.backward(dw, f["act"])  # (S, B, L)   (B5)
        dys, dvec = _score_backward(self.score, self._score_fn, ds, f["score"])  # (B6)
        grads.update(dvec)
        dY = np.concatenate(dys + [dV], axis=-1)  # (S, B, L, m H) the stacked maps' output gradient
        dx, dW, db = linear_backward(dY, f["linear"])  # (S, B, L, E)   (B7) all maps at once
        grads.update(_split_grads(f["maps"], dW, db))
        grads["emb"] = _scatter_rows(dx, f["tokens"], self.vocab_size)  # (S, V, E)   (B8)
        return {k: grads[k] for k in P}

    def loss_and_grad(self, params, batch):
        """``(loss, grads, aux)``: :meth:`forward`, then :meth:`backward` of ``loss.sum()`` (the trainer's call).

        ``aux``: ``s`` and ``w`` ``(S, B, L)`` (scores and weights of every
        token), ``logit`` ``(S, B)``.
        """
        loss, cache = self.forward(params, batch)
        grads = self.backward(np.ones_like(loss), cache)
        return loss, grads, {"s": cache["s"], "w": cache["w"], "logit": cache["logit"]}

    # --- evaluation ----------------------------------------------------------------
    def outputs(self, params, batch):
        """Evaluate without dropout (``batch["dropout"]`` is ignored).

        Returns
        -------
        dict
            ``s`` and ``w`` ``(S, B, L)``, ``logit`` and ``prob`` (``sigmoid(logit)``)
            ``(S, B)``. ``labels`` are optional here.
        """
        S = self._check_params(params)
        tokens, _, mask, _ = self._check_batch(batch, S, need_labels=False)
        f = self._forward(params, tokens, mask, None)
        xp = array_module(*params.values())
        return {"s": f["s"], "w": f["w"], "logit": f["logit"], "prob": sigmoid(xp, f["logit"])}

    def predict(self, params, batch):
        """Predicted labels ``(S, B)`` int64: 1 where ``sigmoid(a) > 1/2``, i.e. ``a > 0``."""
        return (self.outputs(params, batch)["logit"] > 0).astype(np.int64)

    def token_scores(self, params):
        """The score of every vocabulary token, ``(S, V)``: (M2) applied to each row of ``emb``.

        Scores depend on the token alone, so this is the score each token
        gets wherever it occurs (TanhMax's Figure 2 plots these).
        """
        self._check_params(params)
        xp = array_module(*params.values())
        parts = _project(xp, params, params["emb"], _SCORE_MAPS[self.score])[1]  # (S, V, H) each
        return _score_forward(xp, self.score, self._score_fn, params, parts, self._lam)[0]

    def token_polarity(self, params):
        """Token polarity scores ``o_e = w_o . (W_v E[e] + b_v)``, ``(S, V)``.

        TanhMax section 3 (``o_i = V_i^T W``, after Sun & Lu 2020): the
        logit without dropout is ``a = sum_i w_i o_{t_i} + b_o``
        (``derivations/03-proposition-1.md``, step 03.P4).
        """
        self._check_params(params)
        values = linear(params["emb"], params["W_v"], params["b_v"])[0]  # (S, V, H)
        return (values @ params["w_o"][:, :, None])[..., 0]  # (S, V)
