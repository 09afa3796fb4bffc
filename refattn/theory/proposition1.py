r"""Score dynamics: Proposition 1 of TanhMax (Eq. 4) for every activation.

The model of the proposition is one attention operation feeding a linear read-out,

    s_i = f(Q_i, K_i),   w = phi(s),   V = sum_i w_i V_i,   y = sigma(V^T W),

trained by gradient flow ``d vartheta / d tau = -dR/d vartheta`` (``vartheta``: every
parameter) on the empirical risk ``R = (1/N) sum_k L(y*^(k), y(x^(k)))`` with label
``y*`` (TanhMax, Eq. 3, writes the label theta and the risk R-hat; the letters here are
those of ``derivations/03-proposition-1.md``, which keeps ``t`` for a vocabulary
token). Proposition 1 says
that, when ``Q_i`` and ``K_i`` are free parameters of token ``i`` (so that ``s_i``
depends on no other parameter),

    ds_i/dtau = - Delta_I,i * sum_j pi_ij o_j * sigma' dR/dy,                    (Eq. 4)

    Delta_I,i = |ds_i/dQ_i|^2 + |ds_i/dK_i|^2,
    pi_ij     = [j = i] g'(s_i) / C  -  w_j h'(s_i) / C,    C = sum_k h(s_k),
    o_j       = V_j^T W    (the token-level polarity score of Sun & Lu 2020).

``pi_ij`` is ``d w_j / d s_i``, so ``sum_j pi_ij o_j`` is the vector-Jacobian
product of the activation with cotangent ``o``: the same VJP that
:mod:`refattn.core.activations` derives by hand (``derivations/01-reweighted-softmax.md``,
Eq. 01.R4). Everything here is derived line by line in
``derivations/03-proposition-1.md``; the TanhMax specialisation (Eqs. 7-9, the
sign of Eq. 7 corrected) and the closed forms for the other activations in
``derivations/04-score-dynamics-closed-forms.md``. :func:`velocity_decomposition`
computes the exact velocity with autograd, for the proposition's model
(:class:`OneLayerModel`) and the two it does not cover exactly.

``refattn prop1`` (:mod:`refattn.studies.prop1`) checks Eq. 4 with these for every activation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import autograd.numpy as anp
from autograd import grad, jacobian
from autograd.misc import flatten

from ..core import activations as A
from ..core.activations import activation, sigmoid, sqrt_tiny
from ..core.backend import array_module
from ..core.checks import check_float_array
from . import as_activation

__all__ = [
    "OUTPUTS",
    "LOSSES",
    "MODEL_KINDS",
    "pi_matrix",
    "delta_II",
    "output_factor",
    "score_velocity",
    "tanhmax_weights",
    "tanhmax_velocity",
    "tanhmax_velocity_as_printed",
    "closed_form_delta_II",
    "CLOSED_FORMS",
    "OneLayerModel",
    "velocity_decomposition",
    "SETTINGS",
]

#: The output nonlinearities sigma of ``y = sigma(V^T W)``.
OUTPUTS = ("sigmoid", "identity")
#: The losses L(y*, y), label y*.
LOSSES = ("bce", "squared")
#: How the scores are parameterised (see :class:`OneLayerModel`).
MODEL_KINDS = ("free", "shared", "global")


def _same_shape(x, ref, name, ref_name):
    if np.shape(x) != np.shape(ref):
        raise ValueError(f"{name}: shape {np.shape(x)} does not match {ref_name}'s shape {np.shape(ref)}")


# --------------------------------------------------------------------------
# Eq. 4, piece by piece
# --------------------------------------------------------------------------


def pi_matrix(activation, s):
    r"""The paper's ``pi_ij = d w_j / d s_i = [j = i] g'(s_i) / C - w_j h'(s_i) / C`` (TanhMax Eq. 4), an
    ``(n, n)`` array for one row ``s (n,)``, from ``g, h, dg, dh`` as printed (``derivations/03-proposition-1.md``,
    step 03.P5): the transpose of :meth:`~refattn.core.activations.Activation.jacobian`. For teaching: large
    ``|s|`` overflows, :func:`delta_II` is the stable route."""
    activation = as_activation(activation)
    check_float_array(s, "s", ndim=1)
    xp = array_module(s)
    C = xp.sum(activation.h(s))
    if not C > 0:
        raise ValueError("s: the row has no normaliser (sum_k h(s_k) = 0); pi is undefined")
    w = activation.g(s) / C  # (n,)
    return xp.diag(activation.dg(s) / C) - (activation.dh(s) / C)[:, None] * w[None, :]  # (n, n)


def delta_II(activation, s, o, axis=-1, mask=None):
    r"""``Delta_II,i = sum_j pi_ij o_j``, the context-dependent factor of Eq. 4, for scores ``s`` and polarity
    scores ``o_j = V_j^T W`` (both ``(..., n)``; ``axis``, ``mask`` as in ``Activation.forward``).

    As ``pi_ij = d w_j / d s_i``, it is the activation's VJP with cotangent ``o`` (step 03.P6 of
    ``derivations/03-proposition-1.md``), ``p_i [(rho'_i + rho_i ell'_i) o_i - ell'_i sum_j w_j o_j]``,
    evaluated stably by ``activation.backward(o, activation.forward(s)[1])``; the arguments follow the
    proposition's ``Delta_II(s, o)``.
    """
    activation = as_activation(activation)
    check_float_array(o, "o")
    _same_shape(o, s, "o", "s")
    return activation.backward(o, activation.forward(s, axis, mask)[1])


def output_factor(a, target, *, output="sigmoid", loss="bce", n_instances=None):
    r"""``sigma'(a) dR/dy`` for every instance: the task-specific factor of Eq. 4.

    With ``y = sigma(a)``, ``a = V^T W`` and ``R = (1/N) sum_k L(y*_k, y_k)``, ``y*``
    the label (``target``) (TanhMax, Eq. 3):

    * ``loss="bce"`` (needs ``output="sigmoid"``): ``L = -y* log y - (1-y*) log(1-y)``,
      ``sigma' dL/dy = y (1-y) (y-y*) / (y (1-y)) = y - y*``;
    * ``loss="squared"``: ``L = (y - y*)^2 / 2``, ``sigma' dL/dy = sigma'(a) (y - y*)``
      with ``sigma' = y (1 - y)`` (sigmoid) or 1 (identity).

    Each is divided by ``N`` (``n_instances``, default ``len(a)``), the ``1/N`` of Eq. 3.
    ``derivations/03-proposition-1.md``, step 03.P3.
    """
    if output not in OUTPUTS:
        raise ValueError(f"output: expected one of {OUTPUTS}, got {output!r}")
    if loss not in LOSSES:
        raise ValueError(f"loss: expected one of {LOSSES}, got {loss!r}")
    if loss == "bce" and output != "sigmoid":
        raise ValueError("loss: 'bce' needs output='sigmoid' (y must lie in (0, 1))")
    check_float_array(a, "a")
    xp = array_module(a, target)
    N = len(a) if n_instances is None else n_instances
    y = 1.0 / (1.0 + xp.exp(-a)) if output == "sigmoid" else a
    if loss == "bce":
        return (y - target) / N
    dsig = y * (1.0 - y) if output == "sigmoid" else 1.0
    return dsig * (y - target) / N


def score_velocity(activation, s, o, c, delta_I, axis=-1, mask=None):
    r"""Proposition 1 (TanhMax Eq. 4; Eq. 03.P of ``derivations/03-proposition-1.md``):
    ``ds_i/dtau = -Delta_I,i Delta_II,i c``, ``(N, n)``, from the scores ``s``, polarity scores ``o`` and
    ``delta_I`` of every token of every instance (``(N, n)`` each) and ``c = sigma' dR/dy`` per instance
    (``(N,)``, :func:`output_factor`). Exact when every token's ``Q_i, K_i`` are its own free parameters
    and no token occurs twice (else sum over occurrences: :meth:`OneLayerModel.formula_velocity`)."""
    check_float_array(delta_I, "delta_I")
    _same_shape(delta_I, s, "delta_I", "s")
    c = np.asarray(c) if not hasattr(c, "shape") else c
    if np.shape(c) != np.shape(s)[:-1]:
        raise ValueError(f"c: expected shape {np.shape(s)[:-1]} (one factor per instance), got {np.shape(c)}")
    return -delta_I * delta_II(activation, s, o, axis=axis, mask=mask) * c[..., None]


# --------------------------------------------------------------------------
# TanhMax, TanhMax Eqs. 7-9
# --------------------------------------------------------------------------


def tanhmax_weights(s, axis=-1):
    r"""``(w_tilde, w_hat)`` of TanhMax Eqs. 8-9, stably.

    ``w_tilde_i = cosh s_i / sum_k cosh s_k`` (always positive) and
    ``w_hat_i = sinh s_i / sum_k cosh s_k`` (the TanhMax weights themselves).
    The paper prints both denominators as ``sum_k [exp(s_i) + exp(-s_i)]`` (index
    ``i`` inside a sum over ``k``); the sum is over ``s_k``
    (``derivations/04-score-dynamics-closed-forms.md``, section 2).
    ``w_tilde = softmax(log cosh s)`` is the ``p`` of the reweighted form and
    ``w_hat = tanh(s) w_tilde``.
    """
    act = activation("tanhmax")
    w_tilde = act.p(s, axis)  # softmax(log cosh s)
    return w_tilde, array_module(s).tanh(s) * w_tilde


def tanhmax_velocity(s, o, c, delta_I, axis=-1):
    r"""TanhMax Eq. 7 with its sign corrected: ``ds_i/dtau = -Delta_I,i Delta'_II,i c``.

    ``Delta'_II,i = w_tilde_i o_i - w_hat_i sum_j w_hat_j o_j`` (Eqs. 8-9). Eq. 7 as
    printed has no minus sign; substituting ``g = sinh, h = cosh`` into Eq. 4
    gives it (``derivations/04-score-dynamics-closed-forms.md``, section 2), and
    :func:`tanhmax_velocity_as_printed` has the opposite sign of the exact
    gradient-flow velocity (``tests/theory/test_proposition1.py``).
    """
    check_float_array(s, "s")
    _same_shape(o, s, "o", "s")
    _same_shape(delta_I, s, "delta_I", "s")
    xp = array_module(s, o)
    w_tilde, w_hat = tanhmax_weights(s, axis)
    context = xp.sum(w_hat * o, axis=axis, keepdims=True)  # sum_j w_hat_j o_j
    d2 = w_tilde * o - w_hat * context  # Delta'_II
    return -delta_I * d2 * xp.expand_dims(c, axis)


def tanhmax_velocity_as_printed(s, o, c, delta_I, axis=-1):
    """TanhMax Eq. 7 with its sign as printed (no minus sign): the negative of
    :func:`tanhmax_velocity`. Only the sign is as printed; the weights are those
    of :func:`tanhmax_weights`, whose denominators are corrected to
    ``sum_k cosh s_k`` (as printed, Eqs. 8-9 would make ``w_tilde`` the constant
    ``1/n``). Kept to show the sign discrepancy, not to be used."""
    return -tanhmax_velocity(s, o, c, delta_I, axis)


# --------------------------------------------------------------------------
# Closed forms of Delta_II (derivations/04-score-dynamics-closed-forms.md)
# --------------------------------------------------------------------------


def closed_form_delta_II(activation, s, o, axis=-1):
    r"""``Delta_II`` from the closed form of ``activation`` (a name or an Activation)
    (``derivations/04-score-dynamics-closed-forms.md``, section 3):

    ========== ====================================================
    softmax    w_i (o_i - o_bar)
    tanhmax    w_tilde_i o_i - w_i o_bar,  w_tilde = cosh s / C
    signexp    |w_i| o_i - w_i o_bar        (s_i != 0)
    expressive w_i 2/(s_i (1+s_i^2)) (o_i - o_bar)   (s_i != 0)
    sigsoftmax w_i (1 + sigmoid(-s_i)) (o_i - o_bar)
    sigmoid    w_i sigmoid(-s_i) (o_i - o_bar)
    cosformer  w_i / s_i (o_i - o_bar)      (s_i > 0; else 0)
    linear     o_i / n
    relu       [s_i > 0] o_i / n
    ========== ====================================================

    with ``o_bar = sum_j w_j o_j``, the attention-weighted context polarity.
    Each is one function of :data:`CLOSED_FORMS`; an activation without one
    (a user's own) gets the generic closed form
    ``p_i [(rho'_i + rho_i ell'_i) o_i - ell'_i o_bar]`` (step 03.P6). The arguments follow
    the proposition, ``Delta_II(s, o)``, as :func:`delta_II` says.
    """
    act = as_activation(activation)
    w = act(s, axis)  # checks s
    check_float_array(o, "o")
    _same_shape(o, s, "o", "s")
    xp = array_module(s, o)
    o_bar = xp.sum(w * o, axis=axis, keepdims=True)  # the attention-weighted context polarity
    form = CLOSED_FORMS.get(type(act), _generic_delta_II)
    return form(act, xp, s, o, w, o_bar, axis)


def _generic_delta_II(act, xp, s, o, w, o_bar, axis):
    p, dell = act.p(s, axis), act.dell(s)
    return p * ((act.drho(s) + act.rho(s) * dell) * o - dell * o_bar)  # Eq. 01.R4 with cotangent o, step 03.P6


def _safe(xp, s, ok):
    return xp.where(ok, s, 1.0)  # s where ok, 1 elsewhere (where the weight is 0 anyway)


#: ``Delta_II`` in closed form, one function per built-in activation class
#: (``derivations/04-score-dynamics-closed-forms.md``, section 3), each
#: ``f(act, xp, s, o, w, o_bar, axis)``; tested equal to the backward pass.
CLOSED_FORMS = {
    A.Softmax: lambda act, xp, s, o, w, ob, axis: w * (o - ob),  # w_i (o_i - o_bar)
    A.TanhMax: lambda act, xp, s, o, w, ob, axis: act.p(s, axis) * o - w * ob,  # w~_i o_i - w_i o_bar
    A.SignExp: lambda act, xp, s, o, w, ob, axis: act.p(s, axis) * o - w * ob,  # |w_i| o_i - w_i o_bar
    A.Expressive: lambda act, xp, s, o, w, ob, axis: (
        w * 2.0 / (_safe(xp, s, xp.abs(s) >= sqrt_tiny(s)) * (1.0 + s * s)) * (o - ob)),
    A.SigSoftmax: lambda act, xp, s, o, w, ob, axis: w * (1.0 + sigmoid(xp, -s)) * (o - ob),
    A.Sigmoid: lambda act, xp, s, o, w, ob, axis: w * sigmoid(xp, -s) * (o - ob),
    A.Linear: lambda act, xp, s, o, w, ob, axis: o / np.shape(s)[axis],  # g'(s_i) o_i / n
    A.ReLU: lambda act, xp, s, o, w, ob, axis: (s > 0) * o / np.shape(s)[axis],
    A.CosFormerNorm: lambda act, xp, s, o, w, ob, axis: w * (s > 0) / _safe(xp, s, s > 0) * (o - ob),
}


# --------------------------------------------------------------------------
# The proposition's model, and the exact velocity from autograd
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class OneLayerModel:
    r"""``y = sigma(V^T W)`` with one attention operation over a token sequence.

    A vocabulary of ``T`` tokens; an instance is a sequence of token ids
    ``x (n,)``; all scores are per token, ``s_i = s[x_i]``, so a token that occurs
    in several instances (or twice in one) has one score. Three
    parameterisations of the score (``derivations/03-proposition-1.md``, section 4):

    ``"free"`` -- Proposition 1's assumption: every token ``t`` has its own
        ``Q_t, K_t (d,)`` and value ``V_t (dv,)``; ``s_t = Q_t . K_t / scale``.
        Params ``Q (T, d), K (T, d), V (T, dv), W (dv,)``.
    ``"shared"`` -- TanhMax's public code: embeddings ``E (T, de)``, shared
        projections ``Q_t = Wq E_t``, ``K_t = Wk E_t``, ``V_t = Wv E_t``;
        ``s_t = Q_t . K_t / scale``. Params ``E, Wq (d, de), Wk (d, de),
        Wv (dv, de), W (dv,)``.
    ``"global"`` -- Sun & Lu (2020): one learned query ``q (de,)`` for every
        token, ``s_t = E_t . q / lam`` (lam = ``scale``), values are the
        embeddings, ``V_t = E_t``. Params ``E (T, de), q (de,), W (de,)``.

    Parameters
    ----------
    kind : {"free", "shared", "global"}
    activation : str or Activation
        A registered activation's name, or an Activation (one of your own, say).
    output : {"sigmoid", "identity"}
    loss : {"bce", "squared"}
    scale : float
        The score's divisor (``sqrt(d)`` is customary; ``lam = 10`` for Sun & Lu).
    """

    kind: str = "free"
    activation: str = "softmax"
    output: str = "sigmoid"
    loss: str = "bce"
    scale: float = 1.0

    def __post_init__(self):
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"kind: expected one of {MODEL_KINDS}, got {self.kind!r}")
        as_activation(self.activation)  # a name or an Activation
        output_factor(np.zeros(1), np.zeros(1), output=self.output, loss=self.loss)  # validates both
        if not (isinstance(self.scale, (int, float)) and math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale: expected a positive finite number, got {self.scale!r}")

    # --- parameters --------------------------------------------------------
    def init_params(self, T, d, dv, rng, score_std=1.0):
        """Random parameters; scores come out with standard deviation about ``score_std``."""
        for name, v in (("T", T), ("d", d), ("dv", dv)):
            if not (isinstance(v, (int, np.integer)) and v >= 1):
                raise ValueError(f"{name}: expected a positive integer, got {v!r}")
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
        r = math.sqrt(score_std * self.scale)
        if self.kind == "free":
            return {"Q": r * rng.standard_normal((T, d)) / d ** 0.25,
                    "K": r * rng.standard_normal((T, d)) / d ** 0.25,
                    "V": rng.standard_normal((T, dv)), "W": rng.standard_normal(dv) / math.sqrt(dv)}
        if self.kind == "shared":
            return {"E": rng.standard_normal((T, d)),
                    "Wq": r * rng.standard_normal((d, d)) / d ** 0.75,
                    "Wk": r * rng.standard_normal((d, d)) / d ** 0.75,
                    "Wv": rng.standard_normal((dv, d)) / math.sqrt(d),
                    "W": rng.standard_normal(dv) / math.sqrt(dv)}
        return {"E": rng.standard_normal((T, d)),
                "q": score_std * self.scale * rng.standard_normal(d) / math.sqrt(d),
                "W": rng.standard_normal(d) / math.sqrt(d)}

    # --- forward -----------------------------------------------------------
    def vocab_scores(self, params):
        """``s_t`` for every vocabulary token, ``(T,)``."""
        if self.kind == "free":
            return anp.sum(params["Q"] * params["K"], axis=-1) / self.scale
        E = params["E"]
        if self.kind == "shared":
            Q = anp.dot(E, params["Wq"].T)  # (T, d)
            K = anp.dot(E, params["Wk"].T)  # (T, d)
            return anp.sum(Q * K, axis=-1) / self.scale
        return anp.dot(E, params["q"]) / self.scale

    def vocab_values(self, params):
        """``V_t`` for every vocabulary token, ``(T, dv)``."""
        if self.kind == "free":
            return params["V"]
        if self.kind == "shared":
            return anp.dot(params["E"], params["Wv"].T)
        return params["E"]

    def polarity(self, params):
        """Token polarity scores ``o_t = V_t^T W`` (Sun & Lu 2020), ``(T,)``."""
        return anp.dot(self.vocab_values(params), params["W"])

    def logits(self, params, tokens, s_vocab=None):
        """``a = V^T W`` per instance, ``(N,)``; ``s_vocab`` overrides the scores
        (so that ``dR/ds`` can be taken with the parameters held fixed)."""
        s = (self.vocab_scores(params) if s_vocab is None else s_vocab)[tokens]  # (N, n)
        w = as_activation(self.activation)(s)  # (N, n)
        o = self.polarity(params)[tokens]  # (N, n)
        return anp.sum(w * o, axis=-1)  # (N,)  V^T W = sum_i w_i V_i^T W

    def risk(self, params, tokens, target, s_vocab=None):
        """The empirical risk ``R = (1/N) sum_k L`` (TanhMax, Eq. 3)."""
        a = self.logits(params, tokens, s_vocab)
        if self.output == "sigmoid":
            y = 1.0 / (1.0 + anp.exp(-a))
        else:
            y = a
        if self.loss == "bce":
            # -y* log y - (1-y*) log(1-y), y* = target, written with softplus for stability
            L = target * anp.logaddexp(0.0, -a) + (1.0 - target) * anp.logaddexp(0.0, a)
        else:
            L = 0.5 * (y - target) ** 2
        return anp.mean(L)

    # --- Proposition 1 -----------------------------------------------------
    def delta_I(self, params):
        r"""``Delta_I,t = |ds_t/dQ_t|^2 + |ds_t/dK_t|^2`` with ``Q_t, K_t`` taken as
        free variables (``(|K_t|^2 + |Q_t|^2) / scale^2``; Sun & Lu's global query:
        ``(|E_t|^2 + |q|^2) / lam^2``), ``(T,)``. Step 03.P2 of the derivation."""
        if self.kind == "free":
            Q, K = params["Q"], params["K"]
        elif self.kind == "shared":
            Q, K = params["E"] @ params["Wq"].T, params["E"] @ params["Wk"].T
        else:
            Q, K = np.broadcast_to(params["q"], params["E"].shape), params["E"]
        return (np.sum(Q * Q, axis=-1) + np.sum(K * K, axis=-1)) / self.scale ** 2

    def dR_ds(self, params, tokens, target):
        r"""``dR/ds_t`` through the attention weights, by the formula: the sum over
        every occurrence ``(k, i)`` of token ``t`` of ``c_k Delta_II,i^(k)``
        (steps 03.P3-03.P6 of the derivation), ``(T,)``."""
        s = self.vocab_scores(params)
        o = self.polarity(params)
        S, O = s[tokens], o[tokens]  # (N, n)
        a = self.logits(params, tokens)
        c = output_factor(a, target, output=self.output, loss=self.loss)  # (N,)
        per_occurrence = delta_II(self.activation, S, O) * c[:, None]  # (N, n)
        return np.bincount(tokens.ravel(), weights=per_occurrence.ravel(), minlength=len(s))

    def formula_velocity(self, params, tokens, target):
        """Proposition 1 (Eq. 4), summed over occurrences: ``-Delta_I,t dR/ds_t``, ``(T,)``."""
        return -self.delta_I(params) * self.dR_ds(params, tokens, target)


def _check_batch(model, params, tokens, target):
    if not isinstance(model, OneLayerModel):
        raise TypeError(f"model: expected a OneLayerModel, got {type(model).__name__}")
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens: expected a 2-D integer array (instances, positions), got "
                         f"{tokens.dtype} with shape {tokens.shape}")
    T = len(model.vocab_scores(params))
    if tokens.size and (tokens.min() < 0 or tokens.max() >= T):
        raise ValueError(f"tokens: ids must lie in [0, {T}), got [{tokens.min()}, {tokens.max()}]")
    target = np.asarray(target, dtype=float)
    if target.shape != tokens.shape[:1]:
        raise ValueError(f"target: expected shape {tokens.shape[:1]} (one per instance), got {target.shape}")
    if model.loss == "bce" and np.any((target < 0) | (target > 1)):
        raise ValueError("target: binary cross-entropy needs targets in [0, 1]")
    return tokens, target


def velocity_decomposition(model, params, tokens, target):
    r"""The exact score velocity under gradient flow, and what Proposition 1 keeps of it.

    With ``J = ds/dvartheta`` (``T x P``, ``vartheta`` every parameter of the model) and
    ``dvartheta/dtau = -dR/dvartheta``, the exact velocity of the vocabulary scores is

        ds/dtau = -J (dR/dvartheta)^T                                       (03.exact)
                = -diag(J J^T) dR/ds  -  offdiag(J J^T) dR/ds  -  J r       (03.P7)

    where ``dR/ds`` is the derivative through the attention weights (scores as
    independent inputs) and ``r = dR/dvartheta - J^T dR/ds`` is the part of the
    risk's gradient that does not pass through the scores (e.g. shared
    embeddings that also make the values). The first term is Proposition 1's
    form (with ``Delta_I = |ds_t/dvartheta|^2``); the other two are the cross terms
    it neglects. Under the ``"free"`` parameterisation both vanish and
    ``diag(J J^T) = Delta_I`` of Eq. 4. Everything here is computed with
    autograd, independently of the hand-derived formula
    (``derivations/03-proposition-1.md``, section 4).

    Returns
    -------
    dict of ndarray (T,)
        ``exact``, ``formula`` (:meth:`OneLayerModel.formula_velocity`, Eq. 4 with
        the paper's ``Delta_I``), ``diagonal`` (``-diag(JJ^T) dR/ds``), ``cross``
        (``-offdiag(JJ^T) dR/ds``), ``other`` (``-J r``), ``dR_ds`` (autograd),
        ``dR_ds_formula``, ``delta_I`` (paper), ``kernel_diag`` (``diag JJ^T``),
        and ``present`` (bool: the token occurs in the batch).
    """
    tokens, target = _check_batch(model, params, tokens, target)
    flat, unflatten = flatten(params)

    def s_of(theta):
        return model.vocab_scores(unflatten(theta))

    def R_of(theta):
        return model.risk(unflatten(theta), tokens, target)

    J = jacobian(s_of)(flat)  # (T, P)
    gR = grad(R_of)(flat)  # (P,)
    s0 = s_of(flat)
    dR_ds = grad(lambda s: model.risk(params, tokens, target, s_vocab=s))(s0)  # (T,)
    exact = -J @ gR
    K = J @ J.T  # (T, T): the scores' tangent kernel
    kdiag = np.diag(K).copy()
    diagonal = -kdiag * dR_ds
    cross = -(K @ dR_ds) - diagonal
    other = exact - diagonal - cross
    return {
        "exact": exact,
        "formula": model.formula_velocity(params, tokens, target),
        "diagonal": diagonal,
        "cross": cross,
        "other": other,
        "dR_ds": dR_ds,
        "dR_ds_formula": model.dR_ds(params, tokens, target),
        "delta_I": model.delta_I(params),
        "kernel_diag": kdiag,
        "present": np.bincount(tokens.ravel(), minlength=len(s0)) > 0,
    }


#: (output, loss) pairs that ``refattn prop1`` checks (:mod:`refattn.studies.prop1`).
SETTINGS = (("sigmoid", "bce"), ("sigmoid", "squared"), ("identity", "squared"))
