r"""TanhMax section 5.2 and its Table 1: do attention weights agree with feature importance?

TanhMax (section 5.2, after Jain & Wallace 2019) compares softmax and
TanhMax attention on four measures, per test instance of a trained
classifier (:class:`refattn.training.models.polarity.PolarityClassifier`, evaluated
without dropout):

1. ``tau_g``: Kendall's tau between the attention weights and a
   gradient-based importance of each token;
2. ``tau_loo``: Kendall's tau between the weights and the change of the
   output when the token is left out (occlusion);
3. the median over 100 random permutations of the weights (among the real
   tokens) of the change of the output;
4. the median over 100 random draws of new weights (``U(0, 1)``, or
   ``U(-1, 1)`` for signed activations) of the change of the output;

reported per true class as mean +- std over instances, with the fraction of
instances whose tau is significant at ``p < 0.01``. Every definition, and
the readings chosen where the paper is ambiguous or degenerate, is in
``derivations/13-interpretability.md``; the equations (13.I1)-(13.I9) cited below
are that file's.

What this module does differently from the authors' evaluation code
(derivation section 5): the gradient is a fresh gradient of the
trained model's output for each test instance, with the model in evaluation
mode, and the label never enters the model.

Everything is batched over the seed axis ``S`` of the classifier and over
the instances: the output is ``y_hat = P(class 1) = sigmoid(a)``, and the
classifier's logit without dropout is ``a = sum_i w_i o_i + b_o`` with the
token polarity score ``o_i = w_o . (W_v x_i + b_v)``
(:meth:`~refattn.training.models.polarity.PolarityClassifier.token_polarity`), so
occlusion, permutation and randomisation only need the scores, the mask and
``o`` (derivation, Eq. 13.I1).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np
from autograd import grad as _autograd_grad

from ..core.checks import check_int
from ..training.classifier import OPTIMISERS, classifier_memory, train_classifier
from ..training.models.polarity import SCORE_KINDS, PolarityClassifier
from ..training.runs import check_memory
from ..training.tasks.polarity import PolarityConfig, make_polarity, token_polarity
from ..training.tasks.sst2 import Vocabulary, load_sst2
from ..custom import activation_label, activation_record
from . import StudySettings, activation_option, max_memory, model_activation, option
from .helpers import DATA_HELP
from .helpers import resolve_data_dir as resolve_sst2

__all__ = [
    "PAPER_TABLE1",
    "SYNTHETIC_SMALL",
    "EXACT_MAX_N",
    "kendall_tau_b",
    "signed_activation",
    "logit_from_weights",
    "sigmoid_difference",
    "sigmoid_slope",
    "gradient_importance",
    "leave_one_out",
    "permutation_change",
    "randomisation_change",
    "orientation",
    "orient",
    "interpret_measures",
    "summarise",
    "resolve_sst2",
    "Settings",
    "run_interpret",
    "run",
    "report",
    "plot",
]

#: TanhMax Table 1, the SST rows: per class and activation, (mean, std) of
#: tau_g, tau_loo^sgn, the permutation and the randomisation change, and the
#: fraction of instances significant at alpha = 0.01 ("sig").
PAPER_TABLE1 = {
    "0": {
        "softmax": {"tau_g": (0.34, 0.26), "tau_g_sig": 0.42, "tau_loo": (-0.12, 0.28), "tau_loo_sig": 0.20,
                    "permutation": (0.19, 0.13), "randomisation": (0.25, 0.24)},
        "tanhmax": {"tau_g": (0.56, 0.23), "tau_g_sig": 0.79, "tau_loo": (0.86, 0.19), "tau_loo_sig": 0.92,
                    "permutation": (0.18, 0.22), "randomisation": (0.50, 0.46)},
    },
    "1": {
        "softmax": {"tau_g": (0.29, 0.25), "tau_g_sig": 0.31, "tau_loo": (0.24, 0.32), "tau_loo_sig": 0.32,
                    "permutation": (0.27, 0.21), "randomisation": (0.31, 0.31)},
        "tanhmax": {"tau_g": (0.60, 0.21), "tau_g_sig": 0.88, "tau_loo": (0.66, 0.28), "tau_loo_sig": 0.65,
                    "permutation": (0.28, 0.21), "randomisation": (0.52, 0.46)},
    },
}

#: The synthetic data :func:`run_interpret` uses by default: TanhMax's
#: sentences (2 polar + 10 neutral tokens) over a smaller vocabulary, so that
#: a few epochs train every seed to high accuracy in seconds.
SYNTHETIC_SMALL = PolarityConfig(n_pos=20, n_neg=20, n_neutral=200, n_per_class=1_000)

#: The figure ``refattn interpret --out DIR`` writes.
FIGURE = "interpret_{data}.png"


@dataclass
class Settings(StudySettings):
    """TanhMax Table 1: Kendall tau of attention weights against gradient and leave-one-out importance,
    permutation and random-weight tests."""

    data: str = option("synthetic", "data", choices=("synthetic", "sst2"))
    sst2: str | None = option(None, DATA_HELP)
    activations: tuple[str, ...] = activation_option(("softmax", "tanhmax"), "comma-separated activations")
    seeds: int | None = option(None, "number of seeds (default: 3 synthetic, 1 SST-2)", low=1)
    epochs: int | None = option(None, "epochs (default: 8 synthetic, 2 SST-2)", low=1)
    n_instances: int | None = option(None, "test instances measured (default: 300 synthetic, all 872 SST-2 dev)", low=1)
    draws: int = option(100, "random permutations / weights per instance", low=1)
    split: str = option("label", "group instances by true label or by predicted class",
                        choices=("label", "prediction"))
    seed: int = option(0, "seed of the data", low=0)
    first_seed: int = option(0, "the first model seed: the runs use seeds FIRST_SEED, FIRST_SEED + 1, ...", low=0)
    score: str = option("self", "score", choices=SCORE_KINDS)
    optimizer: str = option("adam", "optimiser", choices=tuple(OPTIMISERS))
    lr: float = option(1e-2, "learning rate", positive=True)
    batch_size: int = option(100, "sentences per batch", low=1)
    dropout: float = option(0.5, "dropout rate, in [0, 1)", low=0, high=0.999)
    max_memory: float | None = max_memory()
    config: PolarityConfig = option(SYNTHETIC_SMALL, "the synthetic data", cli=False)
    orient_signed: bool = option(True, "apply orientation() to signed activations (the raw per-seed taus are "
                                       "reported either way)", cli=False)

    def check(self):
        """``--sst2`` is read only with ``--data sst2``: given otherwise, it would be silently ignored."""
        if self.sst2 is not None and self.data != "sst2":
            raise ValueError(f"sst2: a folder for data='sst2', but data is {self.data!r}")


#: Kendall p-values are exact (the permutation distribution of the number of
#: inversions) for tie-free rows of at most this many entries; rows with ties
#: or longer rows use the normal approximation with the tie correction.
EXACT_MAX_N = 60

_SIG_LEVEL = 0.01
_PAIR_BUDGET = 4_000_000  # entries of an (rows, n, n) pair array per chunk
_DRAW_BUDGET = 4_000_000  # entries of an (S, B, R, L) draw array per chunk


# --------------------------------------------------------------------------
# Kendall's tau-b and its p-value (derivation section 3)
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _inversion_cdf(n):
    """``(cum, n!)``: ``cum[k]`` = number of permutations of ``n`` items with at most ``k`` inversions.

    The counts (Mahonian numbers) by the recursion ``N_m(k) = sum_{j=0}^{m-1} N_{m-1}(k - j)``:
    the m-th item inserted at any of m places adds 0 .. m-1 inversions
    (derivation, Eq. 13.I7). Exact integers.
    """
    counts = [1]
    for m in range(2, n + 1):
        prefix = [0]
        for c in counts:
            prefix.append(prefix[-1] + c)
        last = len(counts) - 1
        counts = [prefix[min(k, last) + 1] - prefix[max(0, k - m + 1)] for k in range(len(counts) + m - 1)]
    cum, total = [], 0
    for c in counts:
        total += c
        cum.append(total)
    return tuple(cum), math.factorial(n)


def _exact_pvalue(S, n):
    """Two-sided ``P(|S'| >= |S|)`` under independence, no ties (Eq. 13.I7)."""
    n0 = n * (n - 1) // 2
    S = abs(int(S))
    if S == 0:
        return 1.0
    cum, fact = _inversion_cdf(n)
    # S' >= S  <=>  inversions <= (n0 - S) / 2; the two tails are disjoint when S > 0
    return min(1.0, 2 * cum[(n0 - S) // 2] / fact)


def _real_array(v, name):
    arr = np.asarray(v)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name}: expected a real numeric array (int or float), got dtype {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{name}: expected at least one dimension (..., n), got a scalar")
    return arr.astype(float)


def _check_pair(x, y, mask):
    x, y = _real_array(x, "x"), _real_array(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"y: expected the shape of x {x.shape}, got {y.shape}")
    if mask is None:
        mask = np.ones(x.shape, dtype=bool)
    elif not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        raise TypeError(f"mask: expected a bool numpy array of shape {x.shape}, got "
                        f"{getattr(mask, 'dtype', type(mask).__name__)}")
    elif mask.shape != x.shape:
        raise ValueError(f"mask: expected shape {x.shape}, got {mask.shape}")
    for name, v in (("x", x), ("y", y)):
        if not np.all(np.isfinite(v[mask])):
            raise ValueError(f"{name}: expected finite values at the unmasked entries")
    return x, y, mask


def _kendall_rows(x, y, mask):
    """Tau-b, the statistic S, the tie-corrected variance and tie flags for rows ``(M, n)``."""
    dx = np.sign(x[:, :, None] - x[:, None, :])  # (M, n, n) sign(x_i - x_j)
    dy = np.sign(y[:, :, None] - y[:, None, :])
    both = mask[:, :, None] & mask[:, None, :]  # (M, n, n) pairs of real entries
    upper = np.triu(np.ones(x.shape[1:] * 2, dtype=bool), k=1)
    pairs = both & upper  # each unordered pair once
    S = np.sum(dx * dy * pairs, axis=(1, 2))  # (M,) concordant - discordant   (13.I4)
    n = mask.sum(axis=1).astype(float)  # (M,)
    n0 = n * (n - 1) / 2
    n1 = np.sum((dx == 0) & pairs, axis=(1, 2))  # pairs tied in x
    n2 = np.sum((dy == 0) & pairs, axis=(1, 2))
    denom = (n0 - n1) * (n0 - n2)
    tau = np.full(len(S), np.nan)
    ok = denom > 0
    tau[ok] = S[ok] / np.sqrt(denom[ok])  # (13.I5)
    # tie groups: c_i = size of the group of entry i; sum_i f(c_i) / c_i = sum_groups f(t)
    cx = np.sum((dx == 0) & both, axis=2)  # (M, n), 0 at masked rows
    cy = np.sum((dy == 0) & both, axis=2)

    def group_sums(c):
        c = c.astype(float)
        live = c > 0
        a = np.sum(np.where(live, c - 1, 0.0), axis=1)  # sum_groups t (t - 1): t entries, each t - 1
        b = np.sum(np.where(live, (c - 1) * (c - 2), 0.0), axis=1)  # sum_groups t (t - 1) (t - 2)
        d = np.sum(np.where(live, (c - 1) * (2 * c + 5), 0.0), axis=1)  # sum_groups t (t - 1) (2 t + 5)
        return a, b, d

    ax, bx, vx = group_sums(cx)
    ay, by, vy = group_sums(cy)
    with np.errstate(divide="ignore", invalid="ignore"):  # n < 3 rows: those terms are 0 / 0, set to 0 below
        t2 = np.where(n > 1, ax * ay / (2 * n * (n - 1)), 0.0)
        t3 = np.where(n > 2, bx * by / (9 * n * (n - 1) * (n - 2)), 0.0)
    var = (n * (n - 1) * (2 * n + 5) - vx - vy) / 18 + t2 + t3  # (13.I6)
    return tau, S, var, n.astype(int), (n1 > 0) | (n2 > 0)


def kendall_tau_b(x, y, mask=None):
    r"""Kendall's tau-b of ``x`` and ``y`` along the last axis, and its two-sided p-value.

    For the ``n`` unmasked entries of a row, over the ``n0 = n (n - 1) / 2``
    pairs ``i < j``:

        S   = sum_{i<j} sign(x_i - x_j) sign(y_i - y_j)   (concordant - discordant)
        tau = S / sqrt((n0 - n1) (n0 - n2))

    with ``n1`` (``n2``) the pairs tied in ``x`` (``y``); without ties tau-b
    is Kendall's tau-a, ``S / n0``. The p-value is ``P(|S'| >= |S|)`` for
    ``S'`` under independence (a uniformly random pairing of the ``y`` values
    with the ``x`` values): exact from the distribution of the number of
    inversions of a random permutation when the row has no ties and
    ``n <= EXACT_MAX_N``, else from the normal approximation with Kendall's
    tie-corrected variance of ``S``

        var S = [n(n-1)(2n+5) - sum_t t(t-1)(2t+5) - sum_u u(u-1)(2u+5)] / 18
                + sum_t t(t-1) sum_u u(u-1) / (2 n (n-1))
                + sum_t t(t-1)(t-2) sum_u u(u-1)(u-2) / (9 n (n-1)(n-2)),

    ``t`` (``u``) running over the sizes of the groups of tied ``x`` (``y``)
    values; this is the exact permutation variance of ``S``. Used by
    TanhMax section 5.2 (after Jain & Wallace 2019) for ``tau_g`` and
    ``tau_loo``; derivation: ``derivations/13-interpretability.md``,
    section 3, Eqs. 13.I4-13.I7.

    Parameters
    ----------
    x, y : array_like of int or float, same shape (..., n)
        Finite at the unmasked entries.
    mask : ndarray of bool, same shape, optional
        True marks the entries of a row that take part (default: all).

    Returns
    -------
    tau, pvalue : ndarray of float, shape (...)
        NaN where tau-b is undefined: fewer than two entries, or every
        unmasked entry of ``x`` (or of ``y``) tied.
    """
    x, y, mask = _check_pair(x, y, mask)
    lead, n = x.shape[:-1], x.shape[-1]
    xf = np.where(mask, x, 0.0).reshape(-1, n).astype(float)
    yf = np.where(mask, y, 0.0).reshape(-1, n).astype(float)
    mf = mask.reshape(-1, n)
    M = xf.shape[0]
    tau, pval = np.full(M, np.nan), np.full(M, np.nan)
    step = max(1, _PAIR_BUDGET // max(1, n * n))
    for a in range(0, M, step):
        t, S, var, nn, ties = _kendall_rows(xf[a:a + step], yf[a:a + step], mf[a:a + step])
        p = np.full(len(t), np.nan)
        for r in np.flatnonzero(np.isfinite(t)):
            if not ties[r] and nn[r] <= EXACT_MAX_N:
                p[r] = _exact_pvalue(S[r], nn[r])
            else:  # normal approximation, two-sided: erfc(|z| / sqrt 2) with z = S / sqrt(var S)
                p[r] = math.erfc(abs(S[r]) / math.sqrt(2.0 * var[r]))
        tau[a:a + step], pval[a:a + step] = t, p
    return tau.reshape(lead), pval.reshape(lead)


# --------------------------------------------------------------------------
# The model's pieces
# --------------------------------------------------------------------------


def signed_activation(name):
    """True when the activation can give negative weights (``g(s) < 0`` for some ``s < 0``).

    Among the registered activations these are tanhmax, signexp and linear,
    each odd: ``phi(-s) = -phi(s)`` (TanhMax section 4, property 3). They
    get signed randomised weights ``U(-1, 1)`` (TanhMax section 5.2) and
    are oriented by :func:`orientation`. Derivation:
    ``derivations/13-interpretability.md`` section 4.
    """
    from ..core.activations import Activation, activation as _get

    act = name if isinstance(name, Activation) else _get(name)  # an Activation of yours too
    return bool(act.g(np.array([-1.0]))[0] < 0)


def _check_model(model):
    if not isinstance(model, PolarityClassifier):
        raise TypeError(f"model: expected a refattn.training.models.polarity.PolarityClassifier, "
                        f"got {type(model).__name__}")


def _batch(model, params, batch):
    """Validate, evaluate without dropout; return ``(fwd, tokens, mask, o)``."""
    _check_model(model)
    if isinstance(batch, dict) and "dropout" in batch:
        raise ValueError("batch: the measures evaluate the model without dropout; drop the 'dropout' key")
    fwd = model.outputs(params, batch)
    tokens = batch["tokens"]
    mask = batch.get("mask")
    mask = np.ones(tokens.shape, dtype=bool) if mask is None else mask
    S = tokens.shape[0]
    o = np.take_along_axis(model.token_polarity(params), tokens.reshape(S, -1), axis=1).reshape(tokens.shape)
    return fwd, tokens, mask, o  # o: (S, B, L) polarity score of every position


def logit_from_weights(model, params, weights, o=None, tokens=None):
    r"""The classifier's logit ``a = sum_i w_i o_i + b_o`` for any weights ``w``, without dropout.

    The logit without dropout is ``a = w_o . sum_i w_i V_i + b_o = sum_i w_i
    o_i + b_o`` with ``o_i = w_o . (W_v x_i + b_v)`` (TanhMax section 3,
    ``o_i = V_i^T W``; derivation Eq. 13.I1), so replacing the attention
    weights by others (occlusion, permutation, randomisation) is this one sum;
    ``y_hat = sigmoid(a)``.

    Parameters
    ----------
    model : PolarityClassifier
    params : dict
        Its parameters, seed axis ``S``.
    weights : ndarray (S, B, ..., L)
        Weights on the positions of ``tokens``; extra axes between ``B`` and
        ``L`` (draws, left-out positions) broadcast.
    o : ndarray (S, B, L), optional
        The polarity score of each position; computed from ``tokens`` when
        omitted.
    tokens : ndarray of int (S, B, L), optional
        Needed when ``o`` is omitted.

    Returns
    -------
    ndarray (S, B, ...)
    """
    _check_model(model)
    if o is None:
        if tokens is None:
            raise ValueError("tokens: needed when o is not given")
        S = tokens.shape[0]
        o = np.take_along_axis(model.token_polarity(params), tokens.reshape(S, -1), axis=1).reshape(tokens.shape)
    weights = np.asarray(weights)
    extra = weights.ndim - o.ndim
    if extra < 0 or weights.shape[:2] != o.shape[:2] or weights.shape[-1] != o.shape[-1]:
        raise ValueError(f"weights: expected shape (S, B, ..., L) with (S, B) = {o.shape[:2]} and "
                         f"L = {o.shape[-1]}, got {weights.shape}")
    oo = o.reshape(o.shape[:2] + (1,) * extra + o.shape[2:])
    b_o = params["b_o"].reshape((-1,) + (1,) * (weights.ndim - 2))
    return np.sum(weights * oo, axis=-1) + b_o  # (S, B, ...)   (13.I1)


def _log_cosh(x):
    """``log cosh x = |x| + log1p(exp(-2|x|)) - log 2``, for any finite ``x`` without overflow."""
    ax = np.abs(x)
    return ax + np.log1p(np.exp(-2.0 * ax)) - math.log(2.0)


def sigmoid_difference(a1, a2):
    r"""``sigmoid(a1) - sigmoid(a2)`` without cancellation, for any finite logits.

    With ``sigmoid(a) = e^{a/2} / (2 cosh(a/2))``, ``d = a1 - a2`` and
    ``m = (a1 + a2) / 2``, and ``2 cosh x cosh y = cosh(x + y) + cosh(x - y)``,

        sigmoid(a1) - sigmoid(a2) = sinh(d/2) / (2 cosh(a1/2) cosh(a2/2))
                                  = sinh(d/2) / (cosh m + cosh(d/2))
                                  = tanh(d/2) / (1 + cosh m / cosh(d/2))            (13.I11)

    and the last factor is ``sigmoid(-x)`` with ``x = log cosh m - log cosh(d/2)``,
    evaluated as ``exp(-logaddexp(0, x))``: no overflow, ``|result| <= 1``,
    and two outputs that round to the same probability (both near 1, say)
    still differ by their true, tiny amount and keep their order.
    Subtracting the rounded probabilities would turn small occlusion effects
    of confidently classified instances into exact zeros and spurious ties
    (derivation section 3.3). Exactly antisymmetric in ``(a1, a2)``; relative
    error of order ``eps * max(|a1|, |a2|)`` however close the two outputs are.

    Parameters
    ----------
    a1, a2 : array_like of float, broadcastable

    Returns
    -------
    ndarray
    """
    a1, a2 = np.asarray(a1, dtype=float), np.asarray(a2, dtype=float)
    d = a1 - a2
    half = 0.5 * np.abs(d)
    x = _log_cosh(0.5 * a1 + 0.5 * a2) - _log_cosh(half)  # log(cosh m / cosh(d/2))
    return np.sign(d) * np.tanh(half) * np.exp(-np.logaddexp(0.0, x))  # (13.I11)


def sigmoid_slope(a):
    """``sigmoid'(a) = sigmoid(a) sigmoid(-a) = 1 / (4 cosh^2(a/2))``, without overflow (Eq. I2')."""
    a = np.asarray(a, dtype=float)
    return np.exp(-2.0 * _log_cosh(0.5 * a) - math.log(4.0))


def _tie_identical_tokens(values, tokens, mask):
    """Give every occurrence of a token in a row the value of its first occurrence.

    The classifier has no positions: a token occurring twice in a sentence
    gets the same weight, gradient and occlusion effect, mathematically;
    floating-point rounding may split those ties by ~1e-17, which would turn
    exact ties into arbitrary orderings for Kendall's tau (derivation
    section 3.2).
    """
    same = (tokens[..., :, None] == tokens[..., None, :]) & mask[..., None, :]  # (..., L, L)
    first = np.argmax(same, axis=-1)  # (..., L) first occurrence of each position's token
    return np.take_along_axis(values, first, axis=-1)


# --------------------------------------------------------------------------
# The importance measures
# --------------------------------------------------------------------------


def gradient_importance(model, params, batch):
    r"""The gradient of ``y_hat = P(class 1)`` w.r.t. each token's input embedding ``x_i``.

    A fresh gradient of the trained model's output for each instance, model
    without dropout, nothing label-dependent (TanhMax section 5.2: the
    partial derivative ``d y_hat / d x_i``, after Samek et al. 2019;
    derivation section 2.1, Eqs. 13.I2-13.I3). Two scalars per token:

        norm_i   = || d y_hat / d x_i ||_2                     (13.I2, magnitude)
        signed_i = < d y_hat / d x_i , x_i >                   (13.I3, gradient x input)

    Since ``y_hat = sigmoid(a)``, ``d y_hat / d x_i = sigmoid'(a) da / dx_i``
    with one positive factor per instance (Eq. I2'): the logit's gradient is
    computed, by autograd on :meth:`PolarityClassifier.forward` of a copy of
    the model whose vocabulary is the positions (``emb'[(b, i)] = x_{b,i}``,
    so the gradient of ``sum_b a_b`` w.r.t. ``emb'`` is every position's own
    gradient, all instances and seeds in one pass), then scaled by
    :func:`sigmoid_slope`. The ``*_logit`` entries have the same ranks within
    an instance and stay informative where ``sigmoid'(a)`` underflows.

    Parameters
    ----------
    model : PolarityClassifier
    params : dict
        Parameters with the seed axis ``S``.
    batch : dict
        ``tokens`` (S, B, L) and optionally ``mask`` (S, B, L); no ``dropout``.

    Returns
    -------
    dict
        ``grad`` (S, B, L, E); ``norm``, ``signed``, ``norm_logit``,
        ``signed_logit`` (S, B, L), all 0 at padding.
    """
    fwd, tokens, mask, _ = _batch(model, params, batch)
    S, B, L = tokens.shape
    twin = PolarityClassifier(B * L, model.activation, model.score, embed_dim=model.embed_dim,
                              hidden_dim=model.hidden_dim, scale=model.scale, lam=model.lam,
                              dropout=model.dropout)
    x = np.take_along_axis(params["emb"], tokens.reshape(S, -1)[..., None], axis=1)  # (S, B L, E)
    pos_batch = {"tokens": np.broadcast_to(np.arange(B * L).reshape(B, L), (S, B, L)), "mask": mask}

    def total_logit(emb):
        return twin.outputs({**params, "emb": emb}, pos_batch)["logit"].sum()

    g = _autograd_grad(total_logit)(x).reshape(S, B, L, -1)  # (S, B, L, E)   da / dx_i
    g = np.where(mask[..., None], g, 0.0)
    xs = x.reshape(S, B, L, -1)
    norm = np.sqrt(np.sum(g * g, axis=-1))  # (S, B, L)   (13.I2) for the logit
    signed = np.sum(g * xs, axis=-1)  # (S, B, L)   (13.I3) for the logit
    slope = sigmoid_slope(fwd["logit"])[..., None]  # (S, B, 1)   (I2')
    return {"grad": g * slope[..., None], "norm": norm * slope, "signed": signed * slope,
            "norm_logit": norm, "signed_logit": signed}


def leave_one_out(model, params, batch):
    r"""Signed occlusion ``y_hat(x) - y_hat(x_{-i})`` for every real token ``i``.

    ``x_{-i}`` removes token ``i``: it is masked, so its weight is zero and
    its ``h(s_i)`` leaves the normaliser, exactly as a shorter sentence
    (TanhMax section 5.2; derivation section 2.2, Eq. 13.I8):

        y_hat(x_{-i}) = sigmoid(sum_{j != i} phi(s; mask without i)_j o_j + b_o).

    The scores do not depend on the context, so the remaining tokens keep
    their scores and only the activation is re-evaluated; for a binary
    output ``TVD^abs = 2 |y_hat(x) - y_hat(x_{-i})|``. Removing the only
    real token leaves no normaliser: the weights are all 0 and
    ``y_hat = sigmoid(b_o)`` (the activations' convention).

    Returns
    -------
    ndarray (S, B, L)
        0 at padding.
    """
    fwd, tokens, mask, o = _batch(model, params, batch)
    L = tokens.shape[-1]
    keep = mask[..., None, :] & ~np.eye(L, dtype=bool)  # (S, B, L, L) row i: mask without i
    s = np.broadcast_to(fwd["s"][..., None, :], keep.shape).copy()  # (S, B, L, L)
    w_minus = model.act(s, mask=keep)  # (S, B, L, L)
    a_minus = logit_from_weights(model, params, w_minus, o)  # (S, B, L)
    a_full = logit_from_weights(model, params, fwd["w"], o)  # (S, B)
    return np.where(mask, sigmoid_difference(a_full[..., None], a_minus), 0.0)  # (13.I8) by (13.I11)


def _rng(rng, name="rng"):
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise TypeError(f"{name}: expected a numpy.random.Generator or a non-negative int seed, "
                    f"got {type(rng).__name__}")


def _median_change(model, params, batch, n_draws, rng, draw):
    """``median_r |y_hat(w^(r)) - y_hat(w)|`` per instance, with ``w^(r) = draw(rng, w, mask, R)``."""
    fwd, tokens, mask, o = _batch(model, params, batch)
    R = check_int(n_draws, "n_draws", 1)
    rng = _rng(rng)
    S, B, L = tokens.shape
    a = logit_from_weights(model, params, fwd["w"], o)  # (S, B)
    out = np.empty((S, B))
    step = max(1, _DRAW_BUDGET // (S * R * L))
    for start in range(0, B, step):
        sl = slice(start, start + step)
        w_new = draw(rng, fwd["w"][:, sl], mask[:, sl], R)  # (S, b, R, L)
        a_new = logit_from_weights(model, params, w_new, o[:, sl])  # (S, b, R)
        out[:, sl] = np.median(np.abs(sigmoid_difference(a_new, a[:, sl, None])), axis=-1)
    return out


def _permuted(rng, w, mask, R):
    """``R`` random permutations of each row's weights among its real positions: (S, b, R, L)."""
    keys = np.where(mask[:, :, None, :], rng.random(w.shape[:2] + (R, w.shape[-1])), np.inf)
    order = np.argsort(keys, axis=-1)  # real positions first, in random order
    real = np.argsort(~mask, axis=-1, kind="stable")[:, :, None, :]  # real positions first, in order
    src = np.take_along_axis(w[:, :, None, :], order, axis=-1)
    out = np.zeros_like(src)
    np.put_along_axis(out, np.broadcast_to(real, src.shape), src, axis=-1)
    return out


def permutation_change(model, params, batch, n_draws=100, rng=0):
    r"""Median over ``n_draws`` random permutations of the weights of ``|y_hat_perm - y_hat|``.

    The weights of each instance are permuted among its real tokens
    (padding keeps weight 0), and ``y_hat_perm = sigmoid(sum_i w_{pi(i)} o_i
    + b_o)`` (TanhMax section 5.2, measure 3, after Jain & Wallace 2019;
    derivation section 2.3, Eq. 13.I9). Deterministic given ``rng``.

    Returns
    -------
    ndarray (S, B)
    """
    return _median_change(model, params, batch, n_draws, rng, _permuted)


def randomisation_change(model, params, batch, n_draws=100, rng=0, low=None):
    r"""Median over ``n_draws`` draws of new weights of ``|y_hat_new - y_hat|``.

    New weights ``w'_i ~ U(low, 1)`` independently at the real tokens (0 at
    padding), not normalised, and ``y_hat_new = sigmoid(sum_i w'_i o_i +
    b_o)``; ``low`` is -1 for signed activations (tanhmax, signexp) and 0
    otherwise (TanhMax section 5.2, measure 4 and its discussion;
    derivation section 2.3). Deterministic given ``rng``.

    Parameters
    ----------
    low : {None, 0, -1}
        None: -1 when :func:`signed_activation` of the model's activation, else 0.

    Returns
    -------
    ndarray (S, B)
    """
    _check_model(model)
    if low is None:
        low = -1.0 if signed_activation(model.activation) else 0.0
    if isinstance(low, (bool, np.bool_)) or low not in (0, -1):
        raise ValueError(f"low: expected None, 0 or -1, got {low!r}")

    def draw(rng, w, mask, R):
        new = rng.uniform(float(low), 1.0, w.shape[:2] + (R, w.shape[-1]))  # (S, b, R, L)
        return np.where(mask[:, :, None, :], new, 0.0)

    return _median_change(model, params, batch, n_draws, rng, draw)


def orientation(model, params, tokens, labels, mask=None):
    r"""Which seeds to flip to the sign-symmetric twin so that positive tokens get positive weights.

    For an odd activation the classifier and its twin
    (:meth:`PolarityClassifier.symmetric`: every score and ``w_o`` negated)
    compute the same function of the input with negated weights, so the
    sign of a weight, and of every tau between signed weights and an
    importance measure, is not identified by training (derivation section 4;
    ``derivations/12-score-dynamics-experiment.md`` section 4). We fix it
    with the training data, never the measures: with ``rho = g / h`` (the
    sign-carrying factor of the weight, ``phi_i = rho(s_i) p_i``,
    ``derivations/01-reweighted-softmax.md`` Eq. 01.R1),

        c = sum_e (f_e^+ - f_e^-) rho(s_e),

    ``f_e^+`` (``f_e^-``) the occurrences of token ``e`` in positive
    (negative) training sentences (TanhMax Eq. 11's counts) and ``s_e``
    its score; the twin has ``-c``. A seed is flipped when ``c < 0``, so
    that tokens frequent in positive sentences get positive weights, the
    reading TanhMax gives its Fig. 2.

    Parameters
    ----------
    model : PolarityClassifier
    params : dict
    tokens : array_like of int (n, L)
        Training sentences.
    labels : array_like of int (n,)
        Their labels, 0 or 1.
    mask : ndarray of bool (n, L), optional

    Returns
    -------
    ndarray of bool (S,)
        All False for an activation that is not signed.
    """
    _check_model(model)
    S = model._check_params(params)
    if not signed_activation(model.activation):
        return np.zeros(S, dtype=bool)
    pol = token_polarity(tokens, labels, model.vocab_size, mask=mask)
    rho = model.act.rho(model.token_scores(params))  # (S, V)
    c = rho @ (pol.f_pos - pol.f_neg).astype(float)  # (S,)
    return c < 0


def orient(model, params, flip):
    """``params`` with the seeds marked in ``flip (S,)`` replaced by their sign-symmetric twin.

    :meth:`PolarityClassifier.symmetric` per seed (derivation section 4).
    Returns new arrays.
    """
    _check_model(model)
    S = model._check_params(params)
    flip = np.asarray(flip)
    if flip.dtype != np.bool_ or flip.shape != (S,):
        raise ValueError(f"flip: expected a bool array of shape ({S},), got {flip.dtype} {flip.shape}")
    twin = model.symmetric(params)
    return {k: np.where(flip.reshape((S,) + (1,) * (v.ndim - 1)), twin[k], v) for k, v in params.items()}


def interpret_measures(model, params, batch, n_draws=100, rng=0):
    r"""Every per-instance quantity of TanhMax section 5.2 for one batch of test instances.

    Kendall tau-b (:func:`kendall_tau_b`) per instance, over its real tokens,
    between (derivation section 2):

    * ``tau_g``: the weights ``w_i`` and the signed gradient x input
      ``<d y_hat / d x_i, x_i>`` (Eq. 13.I3; the Table 1 column);
    * ``tau_g_norm``: ``|w_i|`` and the gradient norm (Eq. 13.I2, Jain &
      Wallace's magnitude reading);
    * ``tau_loo``: ``w_i`` and the signed occlusion ``y_hat(x) -
      y_hat(x_{-i})`` (Eq. 13.I8; the Table 1 column ``tau_loo^sgn``);
    * ``tau_loo_abs``: ``|w_i|`` and ``TVD^abs = 2 |y_hat(x) - y_hat(x_{-i})|``;

    each with its p-value (``p_g``, ...); and the median changes under
    permutation and randomisation. Occurrences of one token in a sentence
    share their values exactly (:func:`_tie_identical_tokens`).

    Returns
    -------
    dict of ndarray
        ``w``, ``grad_norm``, ``grad_signed``, ``loo`` (S, B, L); ``prob``,
        the taus and p-values, ``permutation``, ``randomisation`` (S, B).
    """
    fwd, tokens, mask, _ = _batch(model, params, batch)
    rng = _rng(rng)
    gi = gradient_importance(model, params, batch)
    loo = leave_one_out(model, params, batch)

    def tie(v):
        return _tie_identical_tokens(v, tokens, mask)

    # ranks of d y_hat / dx_i are those of da / dx_i (one positive factor per instance, Eq. I2')
    w, gs, gn, lo = tie(fwd["w"]), tie(gi["signed_logit"]), tie(gi["norm_logit"]), tie(loo)
    out = {"w": fwd["w"], "prob": fwd["prob"], "grad_norm": gi["norm"], "grad_signed": gi["signed"], "loo": loo}
    for key, pkey, a, b in (("tau_g", "p_g", w, gs), ("tau_g_norm", "p_g_norm", np.abs(w), gn),
                            ("tau_loo", "p_loo", w, lo), ("tau_loo_abs", "p_loo_abs", np.abs(w), 2 * np.abs(lo))):
        out[key], out[pkey] = kendall_tau_b(a, b, mask)
    out["permutation"] = permutation_change(model, params, batch, n_draws, rng)
    out["randomisation"] = randomisation_change(model, params, batch, n_draws, rng)
    return out


# --------------------------------------------------------------------------
# Summaries and the experiment
# --------------------------------------------------------------------------

_TAUS = (("tau_g", "p_g"), ("tau_g_norm", "p_g_norm"), ("tau_loo", "p_loo"), ("tau_loo_abs", "p_loo_abs"))
_CHANGES = ("permutation", "randomisation")


def _float(x):
    x = float(x)
    return x if math.isfinite(x) else None


def summarise(measures, labels):
    """Per class: mean, std (ddof 0) and significant fraction (p < 0.01) of each tau; mean, std of each change.

    ``measures`` from :func:`interpret_measures`; ``labels`` (S, B) or (B,)
    the true classes. Pools seeds and instances; instances whose tau is
    undefined (NaN) are left out of the tau's statistics and counted in
    ``n_defined``. TanhMax Table 1's layout (derivation section 6).

    Returns
    -------
    dict
        ``{"0": {...}, "1": {...}}``, JSON-able (None for an empty class).
    """
    tau0 = measures["tau_g"]
    labels = np.broadcast_to(np.asarray(labels), tau0.shape)
    out = {}
    for c in (0, 1):
        sel = labels == c
        row = {"n": int(sel.sum())}
        for key, pkey in _TAUS:
            t, p = measures[key][sel], measures[pkey][sel]
            ok = np.isfinite(t)
            row[key] = {"mean": _float(t[ok].mean()) if ok.any() else None,
                        "std": _float(t[ok].std()) if ok.any() else None,
                        "sig_frac": _float(np.mean(p[ok] < _SIG_LEVEL)) if ok.any() else None,
                        "n_defined": int(ok.sum())}
        for key in _CHANGES:
            v = measures[key][sel]
            row[key] = {"mean": _float(v.mean()) if v.size else None, "std": _float(v.std()) if v.size else None}
        out[str(c)] = row
    return out


def _load(data, sst2_path, seed, config):
    """``(train tokens, labels, mask, test tokens, labels, mask, vocab size, description)``."""
    if data == "synthetic":
        if not isinstance(config, PolarityConfig):
            raise TypeError(f"config: expected a PolarityConfig, got {type(config).__name__}")
        d = make_polarity(config, rng=np.random.default_rng(seed))
        tr, te = d.train_idx, d.test_idx
        full = np.ones(d.tokens.shape, dtype=bool)
        desc = {"data": "synthetic", "n_pos": config.n_pos, "n_neg": config.n_neg, "n_neutral": config.n_neutral,
                "sentences": config.n_sentences, "train": int(len(tr)), "test": int(len(te))}
        return (d.tokens[tr].astype(np.int64), d.labels[tr], full[tr], d.tokens[te].astype(np.int64), d.labels[te],
                full[te], d.vocab_size, desc)
    if data == "sst2":
        folder = resolve_sst2(sst2_path, "--sst2")
        s_tr, y_tr = load_sst2(folder, "train")
        s_te, y_te = load_sst2(folder, "dev")
        vocab = Vocabulary.build(s_tr)
        L = max(len(s.split()) for s in s_tr + s_te)
        t_tr, m_tr = vocab.encode(s_tr, max_len=L)
        t_te, m_te = vocab.encode(s_te, max_len=L)
        desc = {"data": "sst2", "folder": str(folder), "vocabulary": len(vocab), "train": len(s_tr),
                "test": len(s_te), "test_split": "dev.tsv", "max_len": L}
        return (t_tr.astype(np.int64), y_tr, m_tr, t_te.astype(np.int64), y_te, m_te, len(vocab), desc)
    raise ValueError(f"data: expected 'synthetic' or 'sst2', got {data!r}")


def memory_estimate(seeds, tokens, n_instances, n_draws, length):
    """Bytes :func:`run_interpret` needs at its peak, before any work: training the classifier
    (:func:`refattn.training.classifier.classifier_memory` of the ``tokens`` of both splits) or the
    permutation and randomisation draws, about 34 bytes per seed, instance, draw and token as
    tracemalloc measures them (the estimate allows 48), whichever is larger."""
    draws = 48 * int(seeds) * int(n_instances) * int(n_draws) * int(length)
    return max(classifier_memory(seeds, tokens), draws + 8 * 2**20)


def _per_seed(m, seeds, flip, te_lab):
    """Per seed: test accuracy, whether it was flipped, and the per-class mean taus before orientation."""
    acc = np.mean((m["prob"] > 0.5) == (te_lab[None] == 1), axis=1)  # (S,)
    per_seed = []
    for j, sd in enumerate(seeds):
        sign = -1.0 if flip[j] else 1.0  # tau is odd in w: the unflipped model's tau is -tau (Eq. 13.I10)
        row = {"seed": sd, "test_accuracy": float(acc[j]), "flipped": bool(flip[j])}
        for c in (0, 1):
            sel = te_lab == c
            for key in ("tau_g", "tau_loo"):
                t = m[key][j, sel]
                t = t[np.isfinite(t)]
                row[f"{key}_raw_class{c}"] = _float(sign * t.mean()) if t.size else None
        per_seed.append(row)
    return per_seed


def run_interpret(settings, *, progress=None, on_result=None):
    r"""Train the classifier and measure TanhMax Table 1's quantities on test instances (:class:`Settings`;
    ``derivations/13-interpretability.md``): per activation the seeds trained at once
    (:func:`refattn.training.classifier.train_classifier`), signed activations oriented
    (:func:`orientation`), :func:`interpret_measures` on the first ``n_instances`` test instances,
    :func:`summarise`\ d per class (true label, or predicted class with ``split="prediction"``).
    ``on_result(activation, result)`` is called as each activation finishes."""
    t_start = time.perf_counter()
    given = {activation_label(a): model_activation(a) for a in settings.activations}  # every one loaded first
    synthetic = settings.data == "synthetic"
    n_seeds = settings.seeds or (3 if synthetic else 1)
    seeds = tuple(range(settings.first_seed, settings.first_seed + n_seeds))
    epochs = settings.epochs or (8 if synthetic else 2)
    tr_tok, tr_lab, tr_mask, te_tok, te_lab, te_mask, V, desc = _load(settings.data, settings.sst2, settings.seed,
                                                                      settings.config)
    n = min(settings.n_instances or (300 if synthetic else len(te_tok)), len(te_tok))
    check_memory(memory_estimate(n_seeds, tr_tok.size + te_tok.size, n, settings.draws, te_tok.shape[1]),
                 f"--seeds {n_seeds} --n-instances {n} --draws {settings.draws}", settings.max_memory)
    te_tok, te_lab, te_mask = te_tok[:n], te_lab[:n], te_mask[:n]
    batch = {"tokens": np.broadcast_to(te_tok, (n_seeds,) + te_tok.shape),
             "mask": np.broadcast_to(te_mask, (n_seeds,) + te_mask.shape)}
    results = {}
    for k, act in enumerate(given):
        t0 = time.perf_counter()
        model, params, _ = train_classifier(tr_tok, tr_lab.astype(float), V, given[act], seeds=seeds, mask=tr_mask,
                                            score=settings.score, epochs=epochs, batch_size=settings.batch_size,
                                            optimizer=settings.optimizer, lr=settings.lr, dropout=settings.dropout,
                                            progress=progress)
        t1 = time.perf_counter()
        flip = (orientation(model, params, tr_tok, tr_lab, tr_mask) if settings.orient_signed
                else np.zeros(n_seeds, bool))
        params = orient(model, params, flip)
        m = interpret_measures(model, params, batch, n_draws=settings.draws,
                               rng=np.random.default_rng([settings.seed, k]))
        classes = te_lab[None] if settings.split == "label" else (m["prob"] > 0.5).astype(np.int64)  # (1 or S, n)
        results[act] = {"signed": signed_activation(model.act), "classes": summarise(m, classes),
                        "per_seed": _per_seed(m, seeds, flip, te_lab), "train_seconds": t1 - t0,
                        "measure_seconds": time.perf_counter() - t1}
        if on_result is not None:  # the command line writes it to disk: a later failure loses nothing
            on_result(act, results[act])
    return {
        "settings": {"activations": [activation_record(a) for a in given.values()], "data": desc,
                     "seeds": list(seeds), "epochs": epochs, "n_instances": int(n), "n_draws": settings.draws,
                     **{k: getattr(settings, k) for k in ("seed", "score", "optimizer", "lr", "batch_size",
                                                          "dropout", "orient_signed")},
                     **MEASURES, "split": settings.split,
                     "classes": f"by {'true label' if settings.split == 'label' else 'predicted class'}; std with "
                                "ddof 0; sig_frac: p < 0.01 among defined taus"},
        "activations": results,
        "paper": {c: {a: {k: list(v) if isinstance(v, tuple) else v for k, v in r.items()}
                      for a, r in rows.items()} for c, rows in PAPER_TABLE1.items()},
        "seconds": time.perf_counter() - t_start,
    }


#: What the result's ``settings`` say of the model's output and of each measure.
MEASURES = {"output": "y_hat = P(class 1) = sigmoid(logit), model without dropout",
            "tau_g": "Kendall tau-b of w_i and <d y_hat/d x_i, x_i> (signed gradient x input)",
            "tau_g_norm": "Kendall tau-b of |w_i| and ||d y_hat/d x_i||_2",
            "tau_loo": "Kendall tau-b of w_i and y_hat(x) - y_hat(x_-i) (signed occlusion)",
            "tau_loo_abs": "Kendall tau-b of |w_i| and TVD^abs = 2 |y_hat(x) - y_hat(x_-i)|"}


def _ms(d):
    if d is None or d.get("mean") is None:
        return "      --     "
    return f"{d['mean']:+.2f} ± {d['std']:.2f}"


def _sig(x):
    return "  -- " if x is None else f"{x:5.2f}"


#: ``refattn interpret``.
run = run_interpret


def report(result):
    """``run_interpret``'s result as TanhMax's Table 1, the paper's SST values beside ours.

    Columns: ``tau_g`` (signed gradient x input) and its significant
    fraction, ``tau_loo^sgn`` and its fraction, permutation and
    randomisation (mean ± std), then the magnitude readings ``|tau_g|``
    (gradient norm) and ``tau_loo^abs``. A ``paper`` row (SST) follows each
    of ours.
    """
    st = result["settings"]
    lines = [f"{st['data']['data']}: {st['n_instances']} test instances, seeds {st['seeds']}, {st['epochs']} epochs, "
             f"{st['n_draws']} draws; {result['seconds']:.1f} s",
             "tau_g: w vs <dy/dx_i, x_i>;  tau_loo: w vs y(x) - y(x_-i);  norm: |w| vs ||dy/dx_i||;  "
             "loo_abs: |w| vs 2|y(x) - y(x_-i)|;  y = P(class 1)", ""]
    head = (f"{'':9}{'':7}{'tau_g':>14} {'sig':>5} {'tau_loo':>14} {'sig':>5} {'permutation':>14} "
            f"{'randomisation':>14} | {'tau_g norm':>14} {'sig':>5} {'tau_loo abs':>14} {'sig':>5}")
    for c in ("0", "1"):
        lines += [f"class {c}", head]
        for act, r in result["activations"].items():
            row = r["classes"][c]
            lines.append(f"{act:<9}{'ours':<7}{_ms(row['tau_g']):>14} {_sig(row['tau_g']['sig_frac'])} "
                         f"{_ms(row['tau_loo']):>14} {_sig(row['tau_loo']['sig_frac'])} "
                         f"{_ms(row['permutation']):>14} {_ms(row['randomisation']):>14} | "
                         f"{_ms(row['tau_g_norm']):>14} {_sig(row['tau_g_norm']['sig_frac'])} "
                         f"{_ms(row['tau_loo_abs']):>14} {_sig(row['tau_loo_abs']['sig_frac'])}   (n = {row['n']})")
            p = result["paper"].get(c, {}).get(act)
            if p:
                def pm(v):
                    return f"{v[0]:+.2f} ± {v[1]:.2f}"
                lines.append(f"{'':9}{'paper':<7}{pm(p['tau_g']):>14} {_sig(p['tau_g_sig'])} {pm(p['tau_loo']):>14} "
                             f"{_sig(p['tau_loo_sig'])} {pm(p['permutation']):>14} {pm(p['randomisation']):>14}")
        lines.append("")
    lines.append("per seed (tau means before orientation; 'flipped': the sign-symmetric twin was used):")
    for act, r in result["activations"].items():
        for row in r["per_seed"]:
            vals = "  ".join(f"{k.replace('_raw_class', ' c')} {row[k]:+.2f}" if row[k] is not None else f"{k} --"
                             for k in ("tau_g_raw_class0", "tau_g_raw_class1", "tau_loo_raw_class0",
                                       "tau_loo_raw_class1"))
            lines.append(f"  {act:<9} seed {row['seed']:>2}: accuracy {row['test_accuracy']:.3f}  "
                         f"flipped {str(row['flipped']):<5}  {vals}")
    return "\n".join(lines)


def plot(result, paper=None):
    """TanhMax Table 1 as bars: mean Kendall tau (signed gradient x input and signed leave-one-out) per
    activation and true class, ours with their std, the paper's SST values (``paper``, default
    :data:`PAPER_TABLE1`) as black markers; from :func:`run_interpret`."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    if paper is None:
        paper = PAPER_TABLE1
    acts = list(result["activations"])
    measures = (("tau_g", "tau_g: w vs gradient x input"), ("tau_loo", "tau_loo: w vs leave-one-out"))
    classes = sorted({c for a in acts for c in result["activations"][a]["classes"]})
    fig = Figure(figsize=(4.2 * len(measures), 3.2))
    axes = fig.subplots(1, len(measures), squeeze=False, sharey=True)
    width = 0.8 / max(len(classes), 1)
    for ax, (key, title) in zip(axes[0], measures):
        for j, c in enumerate(classes):
            x = np.arange(len(acts)) + (j - (len(classes) - 1) / 2) * width
            rows = [result["activations"][a]["classes"].get(c, {}).get(key, {}) for a in acts]
            mean = [r.get("mean", np.nan) if r.get("mean") is not None else np.nan for r in rows]
            std = [r.get("std", 0.0) or 0.0 for r in rows]
            ax.bar(x, mean, width, yerr=std, capsize=3, label=f"ours, class {c}", alpha=0.8)
            ref = [paper.get(c, {}).get(a, {}).get(key, (np.nan,))[0] for a in acts]
            ax.plot(x, ref, "k_", markersize=14, mew=2, label="TanhMax Table 1 (SST)" if j == 0 else None)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xticks(np.arange(len(acts)), acts)
        ax.set_title(title, fontsize=9)
    axes[0, 0].set_ylabel("mean Kendall tau")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{result['settings']['data']['data']}: {result['settings']['n_instances']} test instances",
                 fontsize=9)
    fig.tight_layout()
    return fig
