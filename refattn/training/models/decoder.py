r"""A multi-layer decoder-only transformer LM, batched over seeds, with a hand-derived backward.

One model for the language-model comparisons of TanhMax (section 5.3, Table
4: the attention activation swapped inside a multi-layer transformer), Cog
(signexp attention in the middle layers, softmax in the first and
the last) and NeuralAttn (section 4.1, Table 1: Neural Attention as the score
of the first layer only, dot products above). For a sequence of token ids
``x_1..x_n`` (``n <= n_ctx``), width ``D = H d_h`` (``H`` heads of size
``d_h``), and layers ``l = 0..L-1`` (``derivations/18-decoder-and-cog.md``,
Eqs. 18.D1-18.D11)::

    H^0_i = E[x_i] + P[i]                           token + learned position     18.D1
    for each layer l:
      Z_i  = LN(H_i)                                pre-LN, no gain/bias         18.D2
      Q = Z W_Q^T + b_Q,  K = ..., V = ...          then split into H heads      18.D3
      s^h_ij = beta q^h_i . k^h_j   (or neural)     per head, causal j <= i      18.D4
      A^h = phi_l(s^h) V^h                          phi_l: layer l's activation  18.D5
      O_i = W_O concat_h(A^h_i) + b_O                                             18.D6
      H_i <- H_i + O_i                              skip                         18.D7
      U_i = W_1 LN(H_i) + b_1,  T_i = relu(U_i)     feed-forward, width F        18.D8
      H_i <- H_i + W_2 T_i + b_2                    skip                         18.D9
    y_i = W_r LN(H_i) + b_r                         untied readout, (V,)         18.D10
    L = mean_i [logsumexp(y_i) - y_i[x_{i+1}]]      next-token cross-entropy     18.D11

``phi_l`` is any activation of :data:`refattn.core.activations.ACTIVATIONS`, one
per layer (``activations=[...]``), or ``"cog-hybrid"`` (:func:`cog_hybrid`:
softmax in the first and last layers, signexp between, as the paper that
Cog summarises runs it; Cog's own text does not give this layout). The
score of layer ``l`` is ``"dot"`` (``s = beta q . k``, with
``beta = 1/sqrt(d_h)`` unless given) or ``"neural"`` (NeuralAttn's MLP of the
pair, :func:`refattn.core.scores.score` ``"neural"``, shared over heads and pairs);
``scores="neural-first"`` (:func:`neural_first`) is NeuralAttn's
"first-layer-only" hybrid. The readout is *untied* from the embedding: with
a character vocabulary it costs ``V D`` parameters only, and it keeps the
backward pass of the embedding a pure scatter (derivation 18, section 1).

The trainer's model protocol (:mod:`refattn.training.models`): a batch is
``{"x": (S, B, n) int, "y": (S, B, n) int}`` (``y`` the next tokens);
``model.backward`` is derivation 18, section 2 (Eqs. 18.G1-18.G12), built from
:func:`refattn.core.attention.attention_backward` and the layers of
:mod:`refattn.training.layers`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ...core.activations import ACTIVATIONS, Activation, activation as _activation
from ...custom import divergence_as_data
from ...fast import attention, attention_backward  # the fast path: same numbers as refattn.attention
from ...core.backend import array_module, stop_gradient
from ...core.checks import check_float_array, check_int, check_real
from ..layers import (layer_norm, layer_norm_backward, linear, linear_backward, relu_layer, relu_layer_backward,
                      softmax_cross_entropy, softmax_cross_entropy_backward)
from ...core.scores import score as _score
from .nt import check_seed_params, check_seeds_and_dtype

__all__ = ["DecoderLM", "cog_hybrid", "neural_first", "SCORE_KINDS", "HYBRIDS", "LAYER_PARAMS"]

#: Score kinds a layer may use: ``beta q . k`` or NeuralAttn's neural score.
SCORE_KINDS = ("dot", "neural")

#: Named per-layer recipes accepted by ``activations=`` and ``scores=``.
HYBRIDS = ("cog-hybrid", "neural-first")

#: Parameters of every layer, in initialisation order (``h{l}.`` prefixed).
LAYER_PARAMS = ("W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V", "W_O", "b_O", "W_1", "b_1", "W_2", "b_2")

#: Parameters of the neural score (NeuralAttn), ``h{l}.neural.`` prefixed.
NEURAL_PARAMS = ("Wq", "Wk", "Whq", "Whk", "bh", "wa", "ba")


def cog_hybrid(n_layers):
    """The Cog hybrid: softmax in the first and last layers, signexp between.

    Cog's text (the blog post) does not give this layout; the paper it
    summarises ("More Expressive Attention with Negative Weights", arXiv
    2411.07176) keeps softmax in the first and last layers of its models and
    uses signexp (``sign(s) softmax(|s|)``) in the others
    (``derivations/18-decoder-and-cog.md``, section 4). With one or two layers
    there is no layer between, so the recipe is all softmax.

    Parameters
    ----------
    n_layers : int >= 1

    Returns
    -------
    list of str
        ``["softmax", "signexp", ..., "signexp", "softmax"]``.
    """
    n = check_int(n_layers, "n_layers", 1)
    return ["softmax" if l in (0, n - 1) else "signexp" for l in range(n)]


def neural_first(n_layers):
    """NeuralAttn's hybrid: the neural score in layer 0 only, dot products above.

    NeuralAttn (section 3.2) applies Neural Attention "only in the first layer
    of our transformer model, with all subsequent layers using Dot-Product
    Attention", to bound its memory (the pair MLP's hidden tensor is
    ``n x n x h`` per head).

    Parameters
    ----------
    n_layers : int >= 1

    Returns
    -------
    list of str
        ``["neural", "dot", ..., "dot"]``.
    """
    n = check_int(n_layers, "n_layers", 1)
    return ["neural"] + ["dot"] * (n - 1)


# --------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------


def _per_layer(spec, n_layers, name, known, hybrids):
    """A list of ``n_layers`` entries from a name, a recipe name or a sequence."""
    if isinstance(spec, (str, Activation)):
        if isinstance(spec, str) and spec in hybrids:
            return list(hybrids[spec](n_layers))
        return [spec] * n_layers
    if isinstance(spec, Sequence):
        spec = list(spec)
        if len(spec) != n_layers:
            raise ValueError(f"{name}: expected one entry per layer ({n_layers}), got {len(spec)}")
        return spec
    raise TypeError(f"{name}: expected a name, one of {tuple(hybrids)}, or a list with one entry per "
                    f"layer ({known}), got {type(spec).__name__}")


# --------------------------------------------------------------------------
# splitting and merging heads (the layers themselves are refattn.training.layers)
# --------------------------------------------------------------------------


def _split_heads(x, H):
    """(S, B, n, D) -> (S, B, H, n, D/H)."""
    xp = array_module(x)
    S, B, n, D = np.shape(stop_gradient(x))
    return xp.transpose(xp.reshape(x, (S, B, n, H, D // H)), (0, 1, 3, 2, 4))


def _merge_heads(x):
    """(S, B, H, n, d_h) -> (S, B, n, H d_h), the inverse of :func:`_split_heads`."""
    xp = array_module(x)
    S, B, H, n, dh = np.shape(stop_gradient(x))
    return xp.reshape(xp.transpose(x, (0, 1, 3, 2, 4)), (S, B, n, H * dh))


# --------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------


class DecoderLM:
    """Decoder-only transformer LM with per-layer attention (Eqs. 18.D1-18.D11), batched over seeds.

    Parameters
    ----------
    vocab_size : int >= 2
        ``V``, the number of token ids.
    n_ctx : int >= 1
        The longest sequence (the number of learned positions).
    width : int >= 1
        ``D``, a multiple of ``n_heads``.
    n_layers : int >= 1
    n_heads : int >= 1
    ffn_mult : int >= 1
        Feed-forward width ``F = ffn_mult * D``.
    activations : str, Activation, or sequence
        One activation for every layer (a name from
        :data:`refattn.core.activations.ACTIVATIONS` or an instance), a list with
        one per layer, or ``"cog-hybrid"`` (:func:`cog_hybrid`).
    scores : str or sequence
        ``"dot"`` (default), ``"neural"``, ``"neural-first"``
        (:func:`neural_first`, NeuralAttn's hybrid), or one of
        :data:`SCORE_KINDS` per layer.
    beta : float > 0, optional
        The score scale: ``s = beta q . k``, and the ``beta`` of the neural
        score. ``None`` (default) means ``1/sqrt(d_h)`` (Vaswani et al.;
        NeuralAttn's Eq. 9); Cog's JAX example uses ``beta = 1`` (derivation 18,
        section 3).
    neural_hidden, neural_d_prime : int
        The neural score's hidden width ``h`` and down-projection ``d'``
        (NeuralAttn finds ``d' = 2`` as good as ``d' = 16``, its Table 1).
    neural_sigma : {"tanh", "relu"}
        The neural score's hidden activation.
    ln_eps : float > 0
        The ``eps`` of every layer normalisation.
    init_scale : float > 0
        Multiplies every initial weight's standard deviation.

    Notes
    -----
    Parameters (one seed's shapes; every array has a leading ``S``):
    ``E (V, D)``, ``P (n_ctx, D)``; for each layer ``l``, ``h{l}.W_Q, W_K,
    W_V, W_O (D, D)`` with biases ``(D,)``, ``h{l}.W_1 (F, D)``, ``b_1 (F,)``,
    ``W_2 (D, F)``, ``b_2 (D,)``, and for a neural layer
    ``h{l}.neural.{Wq, Wk, Whq, Whk, bh, wa, ba}`` (the shared layout of
    :class:`refattn.core.scores.Neural`, one MLP for every head and pair);
    ``W_r (V, D)``, ``b_r (V,)``.
    """

    def __init__(self, vocab_size, n_ctx, *, width=64, n_layers=2, n_heads=4, ffn_mult=4,
                 activations="softmax", scores="dot", beta=None, neural_hidden=8, neural_d_prime=2,
                 neural_sigma="tanh", ln_eps=1e-5, init_scale=1.0):
        self.V = check_int(vocab_size, "vocab_size", 2)
        self.n_ctx = check_int(n_ctx, "n_ctx", 1)
        self.D = check_int(width, "width", 1)
        self.n_layers = check_int(n_layers, "n_layers", 1)
        self.n_heads = check_int(n_heads, "n_heads", 1)
        if self.D % self.n_heads:
            raise ValueError(f"width: {self.D} is not a multiple of n_heads = {self.n_heads}")
        self.d_head = self.D // self.n_heads
        self.F = check_int(ffn_mult, "ffn_mult", 1) * self.D
        self.beta = check_real(beta, "beta", positive=True, allow_none=True)
        self.neural_hidden = check_int(neural_hidden, "neural_hidden", 1)
        self.neural_d_prime = check_int(neural_d_prime, "neural_d_prime", 1)
        self.ln_eps = check_real(ln_eps, "ln_eps", positive=True)
        self.init_scale = check_real(init_scale, "init_scale", positive=True)
        acts = _per_layer(activations, self.n_layers, "activations", "activation names",
                          {"cog-hybrid": cog_hybrid})
        self.activations = []
        for a in acts:
            if isinstance(a, Activation):
                self.activations.append(divergence_as_data(a))  # a value that is not finite: a diverged seed
            elif isinstance(a, str):
                if a in HYBRIDS:
                    raise ValueError(f"activations: {a!r} names a whole recipe; give it alone, not in a list")
                self.activations.append(_activation(a))
            else:
                raise TypeError(f"activations: expected names from {ACTIVATIONS} or Activation instances, "
                                f"got {type(a).__name__}")
        kinds = _per_layer(scores, self.n_layers, "scores", f"one of {SCORE_KINDS}",
                           {"neural-first": neural_first})
        for k in kinds:
            if k not in SCORE_KINDS:
                raise ValueError(f"scores: expected entries from {SCORE_KINDS} (or 'neural-first' alone), got {k!r}")
        self.score_kinds = list(kinds)
        b = 1.0 / math.sqrt(self.d_head) if self.beta is None else self.beta
        self._scores = []
        for k in self.score_kinds:
            if k == "dot":
                self._scores.append(_score("scaled_dot", beta=b))  # s = beta q . k   (18.D4)
            else:
                self._scores.append(_score("neural", hidden=neural_sigma, beta=b))  # NeuralAttn Eqs. 3-9
        self.neural_sigma = neural_sigma

    def __repr__(self):
        acts = [a.name for a in self.activations]
        return (f"DecoderLM(vocab_size={self.V}, n_ctx={self.n_ctx}, width={self.D}, n_layers={self.n_layers}, "
                f"n_heads={self.n_heads}, ffn_mult={self.F // self.D}, activations={acts}, "
                f"scores={self.score_kinds}, beta={self.beta})")

    @property
    def label(self):
        """A short description of the layers, e.g. ``"softmax|signexp|softmax"`` (``"+neural0"``)."""
        acts = "|".join(a.name for a in self.activations)
        if len(set(a.name for a in self.activations)) == 1:
            acts = self.activations[0].name
        neural = [str(l) for l, k in enumerate(self.score_kinds) if k == "neural"]
        return acts + (f"+neural{''.join(neural)}" if neural else "")

    # --- parameters ------------------------------------------------------------
    def param_shapes(self):
        """``{name: shape}`` of one seed's parameters, in initialisation order."""
        D, F, V, dh = self.D, self.F, self.V, self.d_head
        shapes = {"E": (V, D), "P": (self.n_ctx, D)}
        for l in range(self.n_layers):
            one = {"W_Q": (D, D), "b_Q": (D,), "W_K": (D, D), "b_K": (D,), "W_V": (D, D), "b_V": (D,),
                   "W_O": (D, D), "b_O": (D,), "W_1": (F, D), "b_1": (F,), "W_2": (D, F), "b_2": (D,)}
            shapes.update({f"h{l}.{k}": one[k] for k in LAYER_PARAMS})
            if self.score_kinds[l] == "neural":
                dp, h = self.neural_d_prime, self.neural_hidden
                neural = {"Wq": (dp, dh), "Wk": (dp, dh), "Whq": (h, dp), "Whk": (h, dp), "bh": (h,),
                          "wa": (h,), "ba": ()}
                shapes.update({f"h{l}.neural.{k}": neural[k] for k in NEURAL_PARAMS})
        shapes.update({"W_r": (V, D), "b_r": (V,)})
        return shapes

    @property
    def param_names(self):
        return tuple(self.param_shapes())

    @property
    def n_params(self):
        """Adjustable parameters of one seed's model."""
        return sum(math.prod(s) for s in self.param_shapes().values())

    def _std(self, name):
        """Initial standard deviation of a matrix (biases start at 0)."""
        D, F, L = self.D, self.F, self.n_layers
        base = name.split(".")[-1]
        if base in ("E", "P"):
            return 1.0  # the residual stream starts at unit scale; pre-LN sees it normalised
        if base in ("W_O", "W_2"):
            fan = D if base == "W_O" else F  # residual branches: 1/sqrt(2 L) so the sum stays O(1)
            return 1.0 / math.sqrt(fan * 2 * L)
        return 1.0 / math.sqrt(F if base == "W_2" else D)

    def init_params(self, seeds, dtype=np.float64):
        """Initial parameters of ``len(seeds)`` independent models, one per seed.

        Seed ``seeds[i]``'s slice of every array comes from
        ``numpy.random.default_rng(seeds[i])`` alone, in the order of
        :meth:`param_shapes`, so a seed gets the same model alone or with
        others. Matrices are normal with standard deviation
        ``init_scale / sqrt(fan_in)``; the two matrices that end a residual
        branch (``W_O``, ``W_2``) are further divided by ``sqrt(2 L)`` (GPT-2's
        rule); embeddings are standard normal; biases start at 0. The neural
        score's parameters are drawn by :meth:`refattn.core.scores.Neural.init_params`.
        None of the seeds states an initialisation; this is our choice
        (``derivations/18-decoder-and-cog.md``, section 1).

        Parameters
        ----------
        seeds : sequence of int >= 0
        dtype : float dtype

        Returns
        -------
        dict of str to ndarray, shapes ``(S,) + param_shapes()[name]``
        """
        seeds = check_seeds_and_dtype(seeds, dtype)
        shapes = self.param_shapes()
        per_seed = []
        for seed in seeds:
            rng = np.random.default_rng(seed)
            one = {}
            for name, shape in shapes.items():
                if ".neural." in name:
                    continue
                if name.split(".")[-1].startswith("b_"):
                    one[name] = np.zeros(shape)
                else:
                    one[name] = self.init_scale * self._std(name) * rng.standard_normal(shape)
                if name.endswith(".b_2"):  # the layer's neural score, after its own matrices
                    l = int(name[1:].split(".")[0])
                    if self.score_kinds[l] == "neural":
                        sp = self._scores[l].init_params(self.d_head, rng, np.float64,
                                                         d_prime=self.neural_d_prime,
                                                         hidden_size=self.neural_hidden)
                        one.update({f"h{l}.neural.{k}": np.asarray(v) for k, v in sp.items()})
            per_seed.append(one)
        return {name: np.stack([p[name] for p in per_seed]).astype(dtype) for name in shapes}

    def _check_params(self, params):
        """Validate ``params``; return the number of seeds ``S``."""
        return check_seed_params(params, self.param_shapes(), repr(self))

    def _check_ids(self, x, S, name):
        x = np.asarray(x)
        if x.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected integer token ids, got dtype {x.dtype}")
        if x.ndim != 3 or x.shape[0] != S or x.shape[1] < 1 or x.shape[2] < 1:
            raise ValueError(f"{name}: expected shape (S, B, n) with S = {S}, got {x.shape}")
        if x.shape[2] > self.n_ctx:
            raise ValueError(f"{name}: sequences of length {x.shape[2]} exceed n_ctx = {self.n_ctx}")
        if x.min() < 0 or x.max() >= self.V:
            raise ValueError(f"{name}: token ids must lie in [0, {self.V}), got [{x.min()}, {x.max()}]")
        return x.astype(np.int64)

    def _check_batch(self, params, batch):
        S = self._check_params(params)
        if not isinstance(batch, Mapping) or "x" not in batch or "y" not in batch:
            raise TypeError("batch: expected a dict with 'x' (S, B, n) input ids and 'y' (S, B, n) next ids")
        x = self._check_ids(batch["x"], S, "batch['x']")
        y = self._check_ids(batch["y"], S, "batch['y']")
        if y.shape != x.shape:
            raise ValueError(f"batch['y']: expected the shape of batch['x'] {x.shape}, got {y.shape}")
        return x, y

    # --- forward (Eqs. 18.D1-18.D10), one source for NumPy and autograd ---------------
    def _layer_params(self, p, l):
        return {k: p[f"h{l}.{k}"] for k in LAYER_PARAMS}

    def _neural_params(self, p, l, s):
        return {k: p[f"h{l}.neural.{k}"][s] for k in NEURAL_PARAMS}

    def _attend(self, p, l, Q, K, V):
        """Eqs. 18.D4-18.D5 for layer ``l``: (S, B, H, n, d_h) each -> output and caches.

        Dot scores carry no parameters, so all seeds go through one call to
        :func:`refattn.core.attention.attention`. The neural score's parameters
        have no seed axis in :mod:`refattn.core.scores` (they broadcast over batch
        axes), so a neural layer calls attention once per seed.
        """
        xp = array_module(Q, K, V)
        sc, act = self._scores[l], self.activations[l]
        if self.score_kinds[l] == "dot":
            Y, cache = attention(Q, K, V, score=sc, activation=act, causal=True)  # (S, B, H, n, d_h)
            return Y, [cache]
        outs, caches = [], []
        for s in range(np.shape(stop_gradient(Q))[0]):
            Y, cache = attention(Q[s], K[s], V[s], score=sc, activation=act, causal=True,
                                 params=self._neural_params(p, l, s))  # (B, H, n, d_h)
            outs.append(Y)
            caches.append(cache)
        return xp.stack(outs), caches

    def attention_sublayer(self, params, l, Z):
        """The attention branch of layer ``l`` on already normalised inputs (Eqs. 18.D3-18.D6).

        ``O = W_O concat_h(phi_l(s^h) V^h) + b_O`` with ``Q = Z W_Q^T + b_Q``
        etc.: everything of a layer except its LN and skip connection.
        Cog's JAX example (``tr_forward``) is exactly this map for one head
        with ``beta = 1`` and the signexp activation
        (``tests/training/test_cog_oracle.py``, derivation 18, section 3).

        Parameters
        ----------
        params : dict
            As from :meth:`init_params`.
        l : int
            The layer.
        Z : ndarray (S, B, n, D)

        Returns
        -------
        ndarray (S, B, n, D)
        """
        S = self._check_params(params)
        l = check_int(l, "l", 0)
        if l >= self.n_layers:
            raise ValueError(f"l: expected a layer index < {self.n_layers}, got {l}")
        check_float_array(Z, "Z", ndim=4)
        if np.shape(Z)[0] != S or np.shape(Z)[-1] != self.D or np.shape(Z)[2] > self.n_ctx:
            raise ValueError(f"Z: expected shape (S, B, n, D) = ({S}, B, n <= {self.n_ctx}, {self.D}), "
                             f"got {np.shape(Z)}")
        return self._sublayer(params, l, Z)[0]

    def _sublayer(self, p, l, Z):
        w = self._layer_params(p, l)
        H = self.n_heads
        (Q, cq), (K, ck), (V, cv) = (linear(Z, w["W_" + k], w["b_" + k]) for k in "QKV")  # (S, B, n, D)  18.D3
        Y, caches = self._attend(p, l, _split_heads(Q, H), _split_heads(K, H), _split_heads(V, H))  # 18.D4-18.D5
        O, co = linear(_merge_heads(Y), w["W_O"], w["b_O"])  # (S, B, n, D)                                18.D6
        return O, dict(q=cq, k=ck, v=cv, att=caches, o=co)

    def _forward(self, params, x):
        """Eqs. 18.D1-18.D10: the logits and every layer's cache, for :meth:`backward`."""
        p = params
        S, B, n = x.shape
        seed_ix = np.arange(S)[:, None, None]
        Hs = p["E"][seed_ix, x] + p["P"][:, None, :n]  # (S, B, n, D)               18.D1
        layers = []
        for l in range(self.n_layers):
            w = self._layer_params(p, l)
            Z1, c_ln1 = layer_norm(Hs, self.ln_eps)  # (S, B, n, D)                  18.D2
            O, c = self._sublayer(p, l, Z1)  # (S, B, n, D)                         18.D3-18.D6
            Hs = Hs + O  # (S, B, n, D)                                            18.D7
            Z2, c_ln2 = layer_norm(Hs, self.ln_eps)  # (S, B, n, D)
            U, c_1 = linear(Z2, w["W_1"], w["b_1"])  # (S, B, n, F)                 18.D8
            T, c_relu = relu_layer(U)  # (S, B, n, F)
            F, c_2 = linear(T, w["W_2"], w["b_2"])  # (S, B, n, D)
            Hs = Hs + F  # (S, B, n, D)                                            18.D9
            layers.append(dict(c, ln1=c_ln1, ln2=c_ln2, ff1=c_1, relu=c_relu, ff2=c_2))
        Zf, c_lnf = layer_norm(Hs, self.ln_eps)  # (S, B, n, D)
        logits, c_r = linear(Zf, p["W_r"], p["b_r"])  # (S, B, n, V)               18.D10
        return logits, dict(layers=layers, lnf=c_lnf, readout=c_r)

    def outputs(self, params, x):
        """Logits and attention weights for a batch of id sequences (Eqs. 18.D1-18.D10).

        Parameters
        ----------
        params : dict
        x : int array (S, B, n), ``n <= n_ctx``

        Returns
        -------
        dict
            ``logits`` (S, B, n, V): ``y_i`` predicts token ``i + 1``;
            ``attention``: one (S, B, H, n, n) array per layer, the weights
            ``phi_l(s)`` (0 above the diagonal); ``scores``: the scores
            ``s`` per layer (also above the diagonal, where they are unused).
        """
        S = self._check_params(params)
        x = self._check_ids(x, S, "x")
        logits, c = self._forward(params, x)
        att, sco = [], []
        for l, layer in enumerate(c["layers"]):
            caches = layer["att"]
            if self.score_kinds[l] == "dot":
                att.append(caches[0]["w"])
                sco.append(caches[0]["s"])
            else:
                att.append(np.stack([k["w"] for k in caches]))
                sco.append(np.stack([k["s"] for k in caches]))
        return {"logits": logits, "attention": att, "scores": sco}

    def forward(self, params, batch):
        """Per-seed next-token cross-entropy (Eq. 18.D11) and the cache of :meth:`backward`.

        Written against ``xp`` so that autograd traces it (:meth:`loss`).

        Parameters
        ----------
        params : dict
            NumPy arrays or values traced by autograd.
        batch : dict
            ``"x"`` (S, B, n) input ids, ``"y"`` (S, B, n) the ids that follow.

        Returns
        -------
        loss : ndarray (S,)
        cache : dict
        """
        x, y = self._check_batch(params, batch)
        logits, c = self._forward(params, x)
        loss, c_loss = softmax_cross_entropy(logits, y, seed_axis=True)  # (S,)   18.D11
        return loss, dict(c, params=params, x=x, y=y, logits=logits, loss=c_loss)

    def loss(self, params, batch):
        """The per-seed loss alone, ``forward(params, batch)[0]``, traceable by autograd."""
        return self.forward(params, batch)[0]

    def backward(self, grad_loss, cache):
        """The hand-derived gradient of ``grad_loss . loss`` with respect to every parameter.

        The backward pass of ``derivations/18-decoder-and-cog.md``, section 2
        (Eqs. 18.G1-18.G12): the cross-entropy (18.G1), the readout and the final LN
        (18.G2-18.G3), then, from the last layer down, the feed-forward branch
        (18.G4-18.G6), the second LN (18.G7), the output projection (18.G8),
        :func:`refattn.core.attention.attention_backward` for the values, the
        activation's backward pass with the causal mask
        (``derivations/01-reweighted-softmax.md``, Eq. 01.R4) and the score's
        (18.G9), the projections (18.G10), the first LN (18.G11), and last the
        embeddings (18.G12).

        Returns
        -------
        dict
            The keys and shapes of ``params``.
        """
        p, x, c = cache["params"], cache["x"], cache
        S, B, n = x.shape
        g = {}
        dlog = softmax_cross_entropy_backward(grad_loss, c["loss"])  # 18.G1
        dZf, g["W_r"], g["b_r"] = linear_backward(dlog, c["readout"])  # 18.G2
        dH = layer_norm_backward(dZf, c["lnf"])  # (S, B, n, D)                    18.G3
        for l in reversed(range(self.n_layers)):
            cl, pre = c["layers"][l], f"h{l}."
            dT, g[pre + "W_2"], g[pre + "b_2"] = linear_backward(dH, cl["ff2"])  # 18.G4
            dU = relu_layer_backward(dT, cl["relu"])  # (S, B, n, F)               18.G5 relu'(0) = 0
            dZ2, g[pre + "W_1"], g[pre + "b_1"] = linear_backward(dU, cl["ff1"])  # 18.G6
            dH = dH + layer_norm_backward(dZ2, cl["ln2"])  # both paths into H      18.G7
            dYc, g[pre + "W_O"], g[pre + "b_O"] = linear_backward(dH, cl["o"])  # 18.G8
            dY = _split_heads(dYc, self.n_heads)  # (S, B, H, n, d_h)
            caches = cl["att"]
            if self.score_kinds[l] == "dot":
                dQ, dK, dV, _ = attention_backward(dY, caches[0])  # 18.G9: Y = A V, A = phi(s), s = beta Q K^T
            else:
                parts = [attention_backward(dY[s], caches[s]) for s in range(S)]  # 18.G9, neural score
                dQ, dK, dV = (np.stack([r[i] for r in parts]) for i in range(3))
                for k in NEURAL_PARAMS:
                    g[f"{pre}neural.{k}"] = np.stack([r[3][k] for r in parts])
            dZ1 = 0.0
            for key, dX in (("Q", dQ), ("K", dK), ("V", dV)):  # 18.G10
                dz, g[pre + "W_" + key], g[pre + "b_" + key] = linear_backward(_merge_heads(dX), cl[key.lower()])
                dZ1 = dZ1 + dz
            dH = dH + layer_norm_backward(dZ1, cl["ln1"])  # 18.G11
        dEx = dH.reshape(S, B * n, self.D)  # (S, B n, D)                          18.G12
        onehot = np.eye(self.V, dtype=dEx.dtype)[x.reshape(S, B * n)]  # (S, B n, V)
        g["E"] = np.swapaxes(onehot, -1, -2) @ dEx  # (S, V, D) sum of dH over the positions holding id v
        g["P"] = np.zeros_like(p["P"])
        g["P"][:, :n] = dH.sum(axis=1)  # (S, n, D)
        return {k: g[k] for k in self.param_names}

    def loss_and_grad(self, params, batch):
        """``(loss, grads, aux)``: :meth:`forward`, then :meth:`backward` of ``loss.sum()`` (the trainer's call).

        ``aux``: ``prediction`` (S, B, n) argmax ids, ``correct`` (S, B, n) bool.
        """
        loss, cache = self.forward(params, batch)
        grads = self.backward(np.ones_like(loss), cache)
        pred = np.argmax(cache["logits"], axis=-1)
        return loss, grads, {"prediction": pred, "correct": pred == cache["y"]}

    # --- evaluation and text ----------------------------------------------------
    def evaluate(self, params, x, y, batch_size=64):
        """Mean next-token cross-entropy and accuracy per seed over many sequences.

        Parameters
        ----------
        params : dict
        x, y : int arrays (S, N, n)
            Inputs and next ids (the same sequences for every seed may be
            broadcast: (1, N, n) is allowed).
        batch_size : int
            Sequences per forward pass.

        Returns
        -------
        dict
            ``loss`` (S,) mean cross-entropy in nats per token, ``accuracy``
            (S,) the fraction of positions where ``argmax y_i`` is the next id.
        """
        S = self._check_params(params)
        x, y = np.asarray(x), np.asarray(y)
        if x.ndim == 3 and x.shape[0] == 1 and S > 1:
            x, y = np.broadcast_to(x, (S,) + x.shape[1:]), np.broadcast_to(y, (S,) + y.shape[1:])
        x, y = self._check_ids(x, S, "x"), self._check_ids(y, S, "y")
        if y.shape != x.shape:
            raise ValueError(f"y: expected the shape of x {x.shape}, got {y.shape}")
        bs = check_int(batch_size, "batch_size", 1)
        total = np.zeros(S)
        correct = np.zeros(S)
        N = x.shape[1]
        for a in range(0, N, bs):
            xb, yb = x[:, a:a + bs], y[:, a:a + bs]
            logits, _ = self._forward(params, xb)
            loss, _ = softmax_cross_entropy(logits, yb, seed_axis=True)
            total += loss * xb.shape[1] * xb.shape[2]
            correct += (np.argmax(logits, axis=-1) == yb).sum(axis=(1, 2))
        count = N * x.shape[2]
        return {"loss": total / count, "accuracy": correct / count}

    def generate(self, params, prompt, n_new, *, rng=None, temperature=1.0):
        """Continue each seed's model from ``prompt`` for ``n_new`` tokens.

        Parameters
        ----------
        params : dict
        prompt : int array (S, n0) or (n0,), ``n0 >= 1``
            The same prompt for every seed when 1-D.
        n_new : int >= 1
        rng : numpy.random.Generator, optional
            Sample from ``softmax(y / temperature)``; ``None`` is greedy
            (``argmax``).
        temperature : float > 0

        Returns
        -------
        int ndarray (S, n0 + n_new)
            The prompt followed by the new ids; the model sees the last
            ``n_ctx`` ids at every step.
        """
        S = self._check_params(params)
        prompt = np.asarray(prompt)
        if prompt.ndim == 1:
            prompt = np.broadcast_to(prompt, (S,) + prompt.shape)
        if prompt.ndim != 2 or prompt.shape[0] != S or prompt.shape[1] < 1:
            raise ValueError(f"prompt: expected shape (n0,) or (S, n0) with S = {S}, got {prompt.shape}")
        if prompt.dtype.kind not in "iu" or prompt.min() < 0 or prompt.max() >= self.V:
            raise ValueError(f"prompt: expected integer ids in [0, {self.V})")
        seq = prompt.astype(np.int64)
        n_new = check_int(n_new, "n_new", 1)
        t = check_real(temperature, "temperature", positive=True)
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng: expected a numpy.random.Generator or None, got {type(rng).__name__}")
        for _ in range(n_new):
            window = seq[:, None, -self.n_ctx:]  # (S, 1, n)
            logits, _ = self._forward(params, window)
            last = logits[:, 0, -1] / t  # (S, V)
            if rng is None:
                nxt = np.argmax(last, axis=-1)
            else:
                e = np.exp(last - last.max(axis=-1, keepdims=True))
                pr = e / e.sum(axis=-1, keepdims=True)
                nxt = np.array([rng.choice(self.V, p=row) for row in pr])
            seq = np.concatenate([seq, nxt[:, None]], axis=1)
        return seq
