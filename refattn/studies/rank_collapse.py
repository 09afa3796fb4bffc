r"""Rank collapse in deep attention stacks (TanhMax section 5.3, Fig. 4; Dong et al. 2021).

Dong, Cordonnier & Loukas (2021, "Attention is not all you need: pure
attention loses rank doubly exponentially with depth") measure how close a
token matrix ``X`` (n tokens in rows, d features in columns) is to the rank-1
matrices ``1 x^T`` (every token the same) by the *residual*

    res(X) = X - 1 x^T,   x = argmin_x || X - 1 x^T ||,

in the composite norm ``||A|| = sqrt(||A||_1 ||A||_inf)``, where ``||A||_1``
is the largest absolute column sum and ``||A||_inf`` the largest absolute row
sum. They show that for pure self-attention ``||res||`` shrinks doubly
exponentially with depth; TanhMax (Fig. 4) repeats the measurement for
softmax and TanhMax and reports that TanhMax slows the collapse.

This module measures the relative residual ``||res(X_l)|| / ||X_l||`` per layer
``l`` in two forms (``derivations/16-rank-collapse.md``):

* **code form** (:func:`code_residual_ratio`): ``x`` = the token mean, as
  Dong et al.'s public code computes it (Eq. 16.RC2);
* **exact form** (:func:`exact_residual`, :func:`exact_residual_ratio`): the
  true minimum over ``x`` (Eq. 16.RC1). The token mean is *not* the minimiser in
  this norm; the minimum is found exactly by tracing the lower-left boundary
  of the set of achievable pairs ``(||.||_1, ||.||_inf)`` with a small
  simplex method (Eqs. 16.RC4-16.RC7), because ``sqrt(a b)`` is minimised at one of
  that boundary's corners.

and runs three random-initialisation stacks (:func:`init_stack`) for every
registered activation: pure self-attention, attention with skip connections
and attention followed by a ReLU MLP. :func:`forward_stack` runs them on the
token matrix with :func:`refattn.fast.attention` (the reference's numbers); its ratios stop at a
rounding floor near 1e-16. :func:`forward_stack_split` carries ``X = 1 m^T + R``
and propagates the deviations ``R`` without cancellation, so that the doubly
exponential collapse can be followed down to float64 underflow (Eqs.
16.RC10-16.RC13).
:func:`run_rank_collapse`, :func:`report` and
:func:`plot` are what ``refattn rank-collapse`` runs (:class:`Settings`, :func:`run`).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np
from autograd import elementwise_grad

from ..core.activations import ACTIVATIONS, Activation, activation as _activation
from ..fast import attention  # the reference's numbers; a score that overflows gives NaN rows, not an error
from ..core.checks import check_float_array
from ..training.runs import check_memory
from ..custom import activation_label
from . import StudySettings, activation_option, max_memory, model_activation, option

__all__ = [
    "ARCHITECTURES",
    "composite_norm",
    "code_residual",
    "code_residual_ratio",
    "exact_residual",
    "exact_residual_ratio",
    "init_stack",
    "forward_stack",
    "forward_stack_split",
    "residual_curves",
    "Settings",
    "run_rank_collapse",
    "run",
    "report",
    "plot",
]

#: The three stacks of Dong et al. (2021): ``"pure"`` X <- SA(X);
#: ``"skip"`` X <- X + SA(X); ``"ffn"`` X <- MLP(SA(X)) with a ReLU MLP per token.
ARCHITECTURES = ("pure", "skip", "ffn")

#: log10 recorded for a ratio that is exactly 0 in float64 (the smallest
#: subnormal double is 4.9e-324, so every positive ratio lies above it).
LOG10_ZERO = -324.0

#: The figure ``refattn rank-collapse --out DIR`` writes.
FIGURE = "rank_collapse.png"


@dataclass
class Settings(StudySettings):
    """Residual ratio against depth for every activation, pure attention, with skips and with feed-forward
    layers (TanhMax Fig. 4).

    Weight draw ``s`` of architecture ``a`` uses ``default_rng([seed, s, index
    of a])``, its input ``k`` ``default_rng([seed, s, k, 1])``. ``rescale``
    rescales every layer's output to RMS entry 1 (:func:`forward_stack`);
    ``exact`` also computes the exact form (the slower part); ``precision``
    ``"split"`` runs :func:`forward_stack_split`, which resolves ratios down to
    float64 underflow, ``"plain"`` runs :func:`forward_stack`
    (:func:`refattn.fast.attention` on ``X``), whose ratios stop at a
    rounding floor near 1e-16.
    """

    needs = ("scipy",)  # the exact form's linear programmes

    activations: tuple[str, ...] | None = activation_option(None, "comma-separated activations (default: every "
                                                                  "registered activation)")
    architectures: tuple[str, ...] = option(ARCHITECTURES, "comma-separated architectures", one_of=ARCHITECTURES)
    depth: int = option(12, "layers", low=1)
    n: int = option(8, "tokens", low=2)
    d: int = option(16, "model width", low=1)
    heads: int = option(2, "heads", low=1)
    seeds: int = option(2, "weight draws", low=1)
    inputs: int = option(2, "inputs per weight draw", low=1)
    rescale: bool = option(False, "rescale the tokens to a fixed norm after every layer")
    seed: int = option(0, "seed", low=0)
    weight_std: float | None = option(None, "the attention weights' standard deviation (default 1/sqrt(d))",
                                      positive=True)
    precision: str = option("split", "split: ratios resolved down to float64 underflow; plain: the reference "
                                     "attention, ratios down to about 1e-16", choices=("split", "plain"))
    max_memory: float | None = max_memory()
    exact: bool = option(True, "also compute the exact form (the slower part)", cli=False)

    def check(self):
        """The heads split the width evenly."""
        if self.d % self.heads:
            raise ValueError(f"heads: expected a divisor of d = {self.d}, got {self.heads}")


# --------------------------------------------------------------------------
# The composite norm and the code-form residual (Eq. 16.RC2)
# --------------------------------------------------------------------------


def _matrix(X, name="X"):
    check_float_array(X, name, ndim=2)
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"{name}: expected a non-empty (n, d) matrix, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name}: expected finite entries")
    return X


def _norm_1(A):
    """``||A||_1``: the largest absolute column sum."""
    return float(np.max(np.sum(np.abs(A), axis=0)))


def _norm_inf(A):
    """``||A||_inf``: the largest absolute row sum."""
    return float(np.max(np.sum(np.abs(A), axis=1)))


def composite_norm(A):
    """``sqrt(||A||_1 ||A||_inf)``, Dong et al.'s norm (Eq. 16.RC0).

    Parameters
    ----------
    A : ndarray, shape (n, d)
        Tokens in rows. ``||A||_1`` is the largest absolute column sum,
        ``||A||_inf`` the largest absolute row sum.

    Returns
    -------
    float
        Computed as ``sqrt(a) sqrt(b)`` so that it does not overflow where
        ``a b`` would.
    """
    A = _matrix(A, "A")
    return math.sqrt(_norm_1(A)) * math.sqrt(_norm_inf(A))


def code_residual(X):
    """``X - 1 mean(X)^T``: the token matrix minus its mean row (Eq. 16.RC2).

    The residual Dong et al.'s public code measures: ``x`` is the mean over
    tokens (rows), not the minimiser of Eq. 16.RC1.

    Parameters
    ----------
    X : ndarray, shape (n, d)

    Returns
    -------
    ndarray, shape (n, d)
    """
    X = _matrix(X)
    return X - X.mean(axis=0, keepdims=True)  # (n, d)


def code_residual_ratio(X):
    """``||X - 1 mean(X)^T|| / ||X||`` in the composite norm (Eq. 16.RC2).

    Returns ``nan`` for ``X = 0`` (no direction to compare with). Invariant
    under ``X -> c X`` (``c != 0``); the numerator, not the ratio, is
    invariant under ``X -> X + 1 v^T``.
    """
    X = _matrix(X)
    den = composite_norm(X)
    return composite_norm(code_residual(X)) / den if den > 0 else float("nan")


# --------------------------------------------------------------------------
# The exact residual (Eqs. 16.RC1, 16.RC4-16.RC7): linear programmes solved by HiGHS
# --------------------------------------------------------------------------


class _FrontierLP:
    """The linear programme (16.RC6) behind ``min_x sqrt(f1(x) finf(x))``, solved by
    ``scipy.optimize.linprog`` (HiGHS): variables ``z`` (d), ``P``, ``N`` (n d each), ``a``, ``b``, all
    ``>= 0``, on ``D = (X - 1 lo^T) / scale`` (``lo`` the column minima; entries in ``[0, 1]``)."""

    def __init__(self, X, tol):
        from scipy import sparse  # noqa: PLC0415  (the 'studies' extra)

        n, d = X.shape
        self.X, self.n, self.d, self.tol = X, n, d, tol
        self.lo = X.min(axis=0)  # (d,)
        self.scale = float((X - self.lo).max())
        nd = n * d
        self.ia, self.ib = d + 2 * nd, d + 2 * nd + 1
        self.n_var = 2 * nd + d + 2
        eye = sparse.identity(nd, format="csr")
        row_sums = sparse.kron(sparse.identity(n), np.ones((1, d)), format="csr")  # (n, nd): row i's entries
        col_sums = sparse.kron(np.ones((1, n)), sparse.identity(d), format="csr")  # (d, nd): column j's entries
        tile = sparse.kron(np.ones((n, 1)), sparse.identity(d), format="csr")  # (nd, d): z_j in row (i, j)
        self.A_eq = sparse.hstack([tile, eye, -eye, sparse.csr_matrix((nd, 2))], format="csr")
        self.b_eq = ((X - self.lo) / self.scale).ravel()  # (nd,)
        a_col = sparse.csr_matrix(np.r_[-np.ones((d, 1)), np.zeros((n, 1))])
        b_col = sparse.csr_matrix(np.r_[np.zeros((d, 1)), -np.ones((n, 1))])
        sums = sparse.vstack([col_sums, row_sums])  # (d + n, nd): column sums, then row sums
        self.A_ub = sparse.hstack([sparse.csr_matrix((d + n, d)), sums, sums, a_col, b_col], format="csr")
        self.pivots = 0

    def _solve(self, cost, bound_a=None, bound_b=None):
        from scipy.optimize import linprog  # noqa: PLC0415

        bounds = [(0, None)] * self.n_var
        bounds[self.ia], bounds[self.ib] = (0, bound_a), (0, bound_b)
        r = linprog(cost, A_ub=self.A_ub, b_ub=np.zeros(self.A_ub.shape[0]), A_eq=self.A_eq, b_eq=self.b_eq,
                    bounds=bounds, method="highs-ds",
                    options={"primal_feasibility_tolerance": self.tol, "dual_feasibility_tolerance": self.tol})
        if r.status != 0:  # pragma: no cover - the programme is feasible and bounded below by 0
            raise RuntimeError(f"exact_residual: the linear programme failed ({r.message})")
        self.pivots += int(r.nit)
        x = self.lo + self.scale * np.clip(r.x[:self.d], 0.0, None)  # (d,)
        R = self.X - x  # (n, d): the pair is recomputed, so it is achieved by the returned x
        return x, _norm_1(R), _norm_inf(R)

    def lexicographic(self, first):
        """Minimise ``a`` then ``b`` over the optimal face of ``a`` (``first="a"``), or ``b`` then ``a``."""
        c1, c2 = np.zeros(self.n_var), np.zeros(self.n_var)
        c1[self.ia if first == "a" else self.ib] = c2[self.ib if first == "a" else self.ia] = 1.0
        _, a, b = self._solve(c1)
        best = (a if first == "a" else b) / self.scale  # achieved by a point, so the bound below is feasible
        return self._solve(c2, **{"bound_a" if first == "a" else "bound_b": best})

    def weighted(self, wa, wb):
        """Minimise ``wa a + wb b`` (both weights > 0)."""
        c = np.zeros(self.n_var)
        c[self.ia], c[self.ib] = wa, wb
        return self._solve(c)


def exact_residual(X, *, tol=1e-10, return_details=False):
    r"""``min_x || X - 1 x^T ||`` in the composite norm, exactly (Eq. 16.RC1).

    The minimum of ``sqrt(f1 finf)`` is at a corner of the lower-left boundary
    of the achievable pairs ``(f1(x), finf(x))`` (Eqs. 16.RC4-16.RC5); the
    corners are traced by the Eisner-Severance recursion (the two ends by
    lexicographic solves, then the weighted programme 16.RC7 between two known
    corners), each a linear programme (16.RC6) solved by HiGHS
    (``derivations/16-rank-collapse.md``, section 4).

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Finite; tokens in rows.
    tol : float
        HiGHS's feasibility tolerances on ``X`` rescaled to ``[0, 1]``; a corner within
        ``10 tol`` (relative) of a chord counts as on it (section 4.4).
    return_details : bool
        Also return the minimiser, the frontier corners and the simplex iterations.

    Returns
    -------
    float
        The minimum (``0.0`` when ``X`` has identical rows).
    dict, optional
        ``x`` (d,), ``frontier`` (``(f1, finf)`` pairs sorted by ``f1``), ``pivots``, ``lp_solves``.
    """
    X = _matrix(X)
    if not (isinstance(tol, float) and 1e-10 <= tol < 1e-3):
        raise ValueError(f"tol: expected a float in [1e-10, 1e-3), got {tol!r}")
    if np.all(X == X[:1]):
        out = 0.0, {"x": X[0].copy(), "frontier": [(0.0, 0.0)], "pivots": 0, "lp_solves": 0}
        return out if return_details else out[0]
    lp = _FrontierLP(X, tol)
    points = [lp.lexicographic("a"), lp.lexicographic("b")]
    solves = 4
    stack = [(points[0], points[1])]
    rel = 10.0 * tol  # a corner must lie this far (relative) below the chord to count
    while stack:
        (xp, ap, bp), (xq, aq, bq) = stack.pop()
        wa, wb = bp - bq, aq - ap  # normal of the chord P -> Q (P: small a, Q: small b), Eq. 16.RC7
        if wa <= rel * max(bp, bq) or wb <= rel * max(ap, aq):
            continue  # P and Q coincide (up to tol): nothing between them
        r = lp.weighted(wa / (wa + wb), wb / (wa + wb))
        solves += 1
        chord = wa * ap + wb * bp
        if wa * r[1] + wb * r[2] < chord - rel * chord:
            points.append(r)
            stack += [((xp, ap, bp), r), (r, (xq, aq, bq))]
    values = [math.sqrt(a) * math.sqrt(b) for _, a, b in points]
    k = int(np.argmin(values))
    if not return_details:
        return values[k]
    frontier = []  # the corners by f1, one of each pair that agree to the tolerance
    for a, b in sorted((a, b) for _, a, b in points):
        if not frontier or a - frontier[-1][0] > rel * a or abs(b - frontier[-1][1]) > rel * b:
            frontier.append((a, b))
    return values[k], {"x": points[k][0], "frontier": frontier, "pivots": lp.pivots, "lp_solves": solves}


def exact_residual_ratio(X, **options):
    """``min_x ||X - 1 x^T|| / ||X||`` in the composite norm (Eq. 16.RC1); ``nan`` for ``X = 0``."""
    X = _matrix(X)
    den = composite_norm(X)
    return exact_residual(X, **options) / den if den > 0 else float("nan")


# --------------------------------------------------------------------------
# The three stacks at random initialisation
# --------------------------------------------------------------------------


def _check_architecture(architecture):
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture: expected one of {ARCHITECTURES}, got {architecture!r}")
    return architecture


def init_stack(architecture, depth, d, heads, rng, *, weight_std=None, ffn_mult=2):
    r"""Random Gaussian weights for ``depth`` layers of one stack (``derivations/16-rank-collapse.md``, section 7).

    Per layer ``Wq, Wk, Wv`` (heads, d, d/heads) and ``Wo`` (d, d) with entries
    ``N(0, weight_std^2)``, ``weight_std = 1/sqrt(d)`` by default (``x W`` keeps
    the scale of ``x``); for ``"ffn"`` also ``W1`` (d, ffn_mult d) with entries
    ``N(0, 2/d)`` (He, for the ReLU) and ``W2`` (ffn_mult d, d) with entries
    ``N(0, 1/(ffn_mult d))``. No biases. ``heads`` divides ``d`` (:class:`Settings`).
    """
    std = 1.0 / math.sqrt(d) if weight_std is None else weight_std
    dh = d // heads
    layers = []
    for _ in range(depth):
        layer = {k: std * rng.standard_normal((heads, d, dh)) for k in ("Wq", "Wk", "Wv")}  # (H, d, d/H)
        layer["Wo"] = std * rng.standard_normal((d, d))  # (d, d)
        if architecture == "ffn":
            hidden = ffn_mult * d
            layer["W1"] = math.sqrt(2.0 / d) * rng.standard_normal((d, hidden))  # (d, m d)
            layer["W2"] = math.sqrt(1.0 / hidden) * rng.standard_normal((hidden, d))  # (m d, d)
        layers.append(layer)
    return layers


def _self_attention(X, layer, act):
    """Multi-head self-attention ``concat_h(phi(Q_h K_h^T / sqrt(d_h)) V_h) Wo``."""
    Q = np.einsum("nd,hde->hne", X, layer["Wq"])  # (H, n, d/H)
    K = np.einsum("nd,hde->hne", X, layer["Wk"])  # (H, n, d/H)
    V = np.einsum("nd,hde->hne", X, layer["Wv"])  # (H, n, d/H)
    out, _ = attention(Q, K, V, score="scaled_dot", activation=act)  # (H, n, d/H)
    heads = np.concatenate(list(out), axis=-1)  # (n, d): heads side by side
    return heads @ layer["Wo"]  # (n, d)


def _check_layers(X, layers, architecture):
    if not isinstance(layers, (list, tuple)) or not layers or not isinstance(layers[0], dict):
        raise ValueError("layers: expected a non-empty list of dicts from init_stack")
    if architecture == "ffn" and "W1" not in layers[0]:
        raise ValueError("layers: the 'ffn' architecture needs layers from init_stack('ffn', ...)")
    if layers[0]["Wo"].shape[0] != X.shape[1]:
        raise ValueError(f"X: expected {layers[0]['Wo'].shape[0]} features, got {X.shape[1]}")


def forward_stack(X, layers, activation, architecture, *, rescale=False):
    """Run a stack forward and return every layer's tokens.

    * ``"pure"``: ``X <- SA(X)``;
    * ``"skip"``: ``X <- X + SA(X)``;
    * ``"ffn"``:  ``X <- relu(SA(X) W1) W2`` (a ReLU MLP per token, no skip).

    ``SA`` is multi-head attention with the scaled dot-product score and the
    given activation (:func:`refattn.fast.attention`, the reference's numbers). Once a layer's
    output is not finite (overflow, e.g. the cubic growth of ``linear``
    attention), the remaining layers are ``nan``.

    Parameters
    ----------
    X : ndarray, shape (n, d)
    layers : list of dict
        From :func:`init_stack` with the same ``architecture``.
    activation : str
        A name in ``refattn.ACTIVATIONS``.
    architecture : {"pure", "skip", "ffn"}
    rescale : bool
        Multiply each layer's output by ``sqrt(n d) / ||X||_F`` (RMS entry 1).
        A scalar factor changes no residual ratio of that layer, but it keeps
        the *next* layer's scores at a fixed scale, which separates rank
        collapse from the norm of ``X`` vanishing or exploding (linear,
        relu and tanhmax attention are cubic in ``X`` for small scores).

    Returns
    -------
    list of ndarray
        ``[X_0, X_1, ..., X_depth]``, each (n, d).
    """
    X = _matrix(X)
    _check_architecture(architecture)
    act = _as_activation(activation)
    _check_layers(X, layers, architecture)
    out = [X]
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        for layer in layers:
            X = _plain_layer(X, layer, act, architecture) if np.all(np.isfinite(X)) else np.full_like(X, np.nan)
            if rescale:
                X = X * _rescale_factor(X, X)
            out.append(X)
    return out


def _rescale_factor(X, R):
    """``sqrt(n d) / ||X||_F`` (1 where ``X`` is 0 or not finite): the factor of ``rescale``."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        big = float(np.max(np.abs(X))) if X.size else 0.0
        if not (math.isfinite(big) and big > 0 and np.all(np.isfinite(R))):
            return 1.0
        fro = big * float(np.linalg.norm(X / big))  # no overflow or underflow in the squares
        return math.sqrt(X.size) / fro


def _as_activation(activation):
    """A registered activation's name as its Activation; an Activation (one of yours) as it is."""
    return activation if isinstance(activation, Activation) else _activation(activation)


def _plain_layer(X, layer, act, architecture):
    """One layer of :func:`forward_stack` on the token matrix ``X`` (n, d)."""
    Y = _self_attention(X, layer, act)  # (n, d)
    if architecture == "skip":
        return X + Y
    if architecture == "ffn":
        return np.maximum(Y @ layer["W1"], 0.0) @ layer["W2"]  # (n, d): relu(Y W1) W2
    return Y


#: Size of a score perturbation below which :func:`_split_attention` uses the
#: first-order expansion (relative error about ``SPLIT_TAU``) instead of the
#: direct difference (relative error about ``1e-16 / t^2`` for a perturbation
#: ``t`` of a nearly uniform row, whose first-order part cancels between rows);
#: the two errors balance near ``1e-16 ** (1/3)``.
SPLIT_TAU = 1e-5

def _split_radius(act, s_ref):
    """How close to the singular point 0 the expansion may go, by the activation's regularity
    (:attr:`refattn.core.activations.Activation.regularity`):
    ``"smooth"`` (no singular point: radius ``SPLIT_TAU``), ``"kink"`` (``rho`` or
    ``ell'`` jumps at 0 but is constant on each side: the expansion holds until a
    score changes sign, radius ``min(SPLIT_TAU, min|s| / 2)``) and ``"log"``
    (``ell = log`` of a power of ``s``, ``ell'' ~ 1/s^2``: radius
    ``SPLIT_TAU min(1, min|s|)``)."""
    kind = act.regularity
    if kind == "smooth":
        return SPLIT_TAU
    dist = float(np.min(np.abs(s_ref)))
    return min(SPLIT_TAU, 0.5 * dist) if kind == "kink" else SPLIT_TAU * min(1.0, dist)


def _ell_second(act, c0):
    """``ell''(c0)``, by autograd through the activation's own ``ell'``.

    ``Activation.dell`` is written against the array module of its input, so
    autograd differentiates exactly that code. Where autograd cannot trace it
    (an activation a user wrote with an operation autograd does not know),
    ``ell' = h'/h`` from ``dh`` and ``h`` is differentiated instead; a central
    difference is the last resort.
    """
    x = np.array([float(c0)])
    for f in (act.dell, lambda z: act.dh(z) / act.h(z)):
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")  # "output seems independent of input" for constant ell'
                val = float(elementwise_grad(f)(x)[0])
        except Exception:  # noqa: BLE001 - an operation autograd has no derivative for
            continue
        if math.isfinite(val):
            return val
    h = 1e-4 * min(1.0, abs(c0))  # pragma: no cover - every registered activation has one above
    return float((act.dell(x + h) - act.dell(x - h))[0]) / (2.0 * h)  # pragma: no cover


def _dell_differences(act, c0, v):
    """``ell'(c0 + v_j) - ell'(c0 + v_k)`` (n, n), accurate relative to its size.

    Where the ``v_j`` are too small to survive the sum ``c0 + v_j`` in float64
    (``|v| <= SPLIT_TAU min(1, |c0|)``) the difference is linearised,
    ``ell''(c0) (v_j - v_k)`` (relative error about ``|v| / min(1, |c0|)``,
    ``ell''`` from :func:`_ell_second`); otherwise it is taken directly
    (relative error about ``1e-16 |c0| / |v|``).
    """
    if c0 != 0.0 and float(np.max(np.abs(v))) <= SPLIT_TAU * min(1.0, abs(c0)):
        return _ell_second(act, c0) * (v[:, None] - v[None, :])
    e = act.dell(c0 + v)  # (n,)
    return e[:, None] - e[None, :]


def _row_deviations(act, c0, v, u, w, shift_invariant):
    r"""Rows of ``phi(s_ref + u_i 1 + w_i)`` minus ``phi(s_ref)``, and their row-sum changes.

    The reference row is ``s_ref = c0 + v`` (``v`` (n,); for softmax, which
    ignores a constant added to a row, ``c0`` and ``u`` are dropped); row
    ``i`` of the scores is ``s_ref + u_i + w_i`` with ``u`` (n,) and ``w``
    (n, n). Returns ``(phi_ref, dphi, dsum)``: ``phi(s_ref)`` (n,),
    ``dphi[i] = phi(s_i) - phi(s_ref)`` (n, n) and
    ``dsum[i] = sum_j dphi[i, j]`` (n,), each accurate relative to its own size
    however small (``derivations/16-rank-collapse.md``, Eqs. 16.RC11-16.RC13):

    * small perturbations (``|u|, |w|`` below :func:`_split_radius`): the
      first-order expansion
      ``dphi_j = rho'_j p_j t_j + rho_j p_j sum_k p_k (ell'_j t_j - ell'_k t_k)``
      (the Jacobian of Eq. 01.R3 applied to ``t_ij = u_i + w_ij``, written with
      pairwise differences, ``ell'_j t_j - ell'_k t_k = u (ell'_j - ell'_k) +
      (ell'_j w_j - ell'_k w_k)``, so that a constant ``t`` cancels exactly
      where ``ell'`` is constant; ``ell'_j - ell'_k`` from
      :func:`_dell_differences`), and
      ``dsum = sum_j rho'_j p_j t_j + 1/2 sum_jk p_j p_k (rho_j - rho_k)(ell'_j t_j - ell'_k t_k)``,
      exactly 0 where ``rho`` is constant along the row;
    * otherwise the direct difference, with
      ``dsum = sum_j (rho(s_ij) - c) p_ij - sum_j (rho_ref_j - c) p_ref_j`` for a
      constant ``c`` (the rows of ``p`` sum to 1), again exactly 0 for constant ``rho``.
    """
    s_ref = v if shift_invariant else c0 + v  # (n,)
    p_ref = act.p(s_ref)  # (n,)
    rho_ref = act.rho(s_ref)  # (n,)
    phi_ref = rho_ref * p_ref  # (n,)
    radius = _split_radius(act, s_ref)
    small = float(np.max(np.abs(w))) <= radius and (shift_invariant or float(np.max(np.abs(u))) <= radius)
    if small:
        e = act.dell(s_ref)  # (n,) ell'
        ew = e * w  # (n, n) ell'_j w_ij
        diff = ew[:, :, None] - ew[:, None, :]  # (n, j, k): ell'_j t_ij - ell'_k t_ik
        t = w
        if not shift_invariant:
            diff = diff + u[:, None, None] * _dell_differences(act, c0, v)[None]
            t = w + u[:, None]  # (n, n)
        drho = act.drho(s_ref)  # (n,)
        dp = p_ref * np.einsum("ijk,k->ij", diff, p_ref)  # (n, n) Jacobian of p times t
        dphi = drho * p_ref * t + rho_ref * dp  # (n, n)
        pair = (p_ref[:, None] * p_ref[None, :]) * (rho_ref[:, None] - rho_ref[None, :])  # (j, k)
        dsum = (drho * p_ref * t).sum(axis=1) + 0.5 * np.einsum("ijk,jk->i", diff, pair)  # (n,)
        return phi_ref, dphi, dsum
    s = s_ref[None, :] + (w if shift_invariant else u[:, None] + w)  # (n, n) every row's scores
    p = act.p(s, axis=-1)  # (n, n)
    rho = act.rho(s)  # (n, n)
    dphi = rho * p - phi_ref  # (n, n)
    c = rho_ref[0]
    mass = (p.sum(axis=1) > 0).astype(float) - float(p_ref.sum() > 0)  # 0 unless a row lost its normaliser
    dsum = ((rho - c) * p).sum(axis=1) - ((rho_ref - c) * p_ref).sum() + c * mass  # (n,)
    return phi_ref, dphi, dsum


def _split_attention(m, R, layer, act):
    r"""Multi-head self-attention of ``X = 1 m^T + R`` returned as ``(m', R')``.

    The same map as :func:`_self_attention`, rewritten so that the deviation
    ``R`` of the tokens from a common row ``m`` never has to be recovered from
    ``X`` by cancellation (``derivations/16-rank-collapse.md``, section 6).
    Per head, with ``q_m = W_q^T m``, ``R_q = R W_q`` (and likewise ``k``, ``v``)
    and ``beta = 1/sqrt(d_h)``, the scores split as

        s_ij = beta (q_m.k_m + q_m.R_k,j) + beta R_q,i.k_m + beta R_q,i.R_k,j
             =        s_ref,j             +      u_i       +      w_ij,

    and with ``Phi_i = phi_ref + dphi_i`` (:func:`_row_deviations`) the head's
    output rows ``Phi_i (1 v_m^T + R_v)`` split into a common row and

        R'_i = (dsum_i - mean dsum) v_m + (dphi_i - mean_k dphi_k) R_v.
    """
    shift_invariant = act.shift_invariant  # softmax
    H, _, dh = layer["Wq"].shape
    beta = 1.0 / math.sqrt(dh)
    means, devs = [], []
    for h in range(H):
        Wq, Wk, Wv = layer["Wq"][h], layer["Wk"][h], layer["Wv"][h]  # (d, dh)
        qm, km, vm = m @ Wq, m @ Wk, m @ Wv  # (dh,)
        Rq, Rk, Rv = R @ Wq, R @ Wk, R @ Wv  # (n, dh)
        c0 = beta * float(qm @ km)  # the mean token's query against the mean key
        v = beta * (Rk @ qm)  # (n,)
        u = beta * (Rq @ km)  # (n,)
        w = beta * (Rq @ Rk.T)  # (n, n)
        phi_ref, dphi, dsum = _row_deviations(act, c0, v, u, w, shift_invariant)
        dV = dphi @ Rv  # (n, dh)
        means.append((phi_ref.sum() + dsum.mean()) * vm + phi_ref @ Rv + dV.mean(axis=0))  # (dh,)
        devs.append((dsum - dsum.mean())[:, None] * vm[None, :] + (dV - dV.mean(axis=0)))  # (n, dh)
    Wo = layer["Wo"]
    return np.concatenate(means) @ Wo, np.concatenate(devs, axis=1) @ Wo  # (d,), (n, d)


def _relu_split(a, E):
    """``relu(a + E_i) - relu(a)`` for each row ``E_i``, without cancellation."""
    up = a + E  # (n, k)
    return np.where(a > 0, np.where(up > 0, E, -a), np.where(up > 0, up, 0.0))


def _split_layer(m, R, layer, act, architecture):
    """One layer of :func:`forward_stack_split` on ``X = 1 m^T + R``, returning ``(m', R')``."""
    m2, R2 = _split_attention(m, R, layer, act)
    if architecture == "skip":
        return m + m2, R + R2
    if architecture == "ffn":
        a, E = m2 @ layer["W1"], R2 @ layer["W1"]  # (k,), (n, k)
        delta = _relu_split(a, E)  # (n, k): relu(a + E_i) - relu(a)
        return ((np.maximum(a, 0.0) + delta.mean(axis=0)) @ layer["W2"],  # (d,)
                (delta - delta.mean(axis=0)) @ layer["W2"])  # (n, d)
    return m2, R2


#: :func:`forward_stack_split` keeps a layer's plain output (computed from the
#: matrix ``X``) when its code-form residual ratio is at least ``SPLIT_BELOW``
#: (resolved to about ``1e-16 / SPLIT_BELOW`` relative) and the layer's input
#: ratio is at least ``PLAIN_INPUT_MIN``; otherwise it uses the split form. The
#: plain output keeps exact zeros exact (a token that gets no attention
#: normaliser, or that the MLP maps to 0, is exactly 0 there, while ``m + R``
#: would leave rounding noise, which the scale-free normalisers of cosformer and
#: expressive attention blow up).
SPLIT_BELOW = 1e-3
PLAIN_INPUT_MIN = 1e-6


def _code_ratio_fast(X, R):
    den = composite_norm(X) if np.any(X) else 0.0
    return composite_norm(R - R.mean(axis=0)) / den if den > 0 else 1.0


def forward_stack_split(X, layers, activation, architecture, *, rescale=False):
    r"""Like :func:`forward_stack`, keeping every layer as ``X_l = 1 m_l^T + R_l``.

    A float64 forward pass cannot represent a token deviation smaller than
    about ``1e-16 ||X||``: below that the rows of ``X`` are equal up to
    rounding and every residual ratio stops at a floor near ``1e-16``. This
    version carries the common row ``m`` and the deviations ``R`` separately.
    Each layer first runs as in :func:`forward_stack` on the matrix ``X``; if
    that output is nearly rank 1 (code-form ratio below :data:`SPLIT_BELOW`)
    or the input was (below :data:`PLAIN_INPUT_MIN`), the layer runs in split
    form instead, propagating ``R`` without cancellation
    (:func:`_split_attention`; the ReLU MLP by :func:`_relu_split`), so that
    the ratio can be followed down to the float64 underflow limit
    (``derivations/16-rank-collapse.md``, section 6). Tested against a
    400-digit ``decimal`` computation.

    Returns
    -------
    list of (m, R)
        ``m`` (d,) and ``R`` (n, d) per layer ``0..depth``; ``X_l = m + R``
        (after a plain layer: ``m`` = the token mean of ``X_l``, ``R`` = the rest).
        ``rescale`` as in :func:`forward_stack`.
    """
    X = _matrix(X)
    _check_architecture(architecture)
    act = _as_activation(activation)
    _check_layers(X, layers, architecture)
    out = [(X.mean(axis=0), X - X.mean(axis=0))]
    split = None  # None: the state is the matrix X; else the pair (m, R)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        for layer in layers:
            if split is not None:
                m, R = split
                X = m[None, :] + R  # (n, d)
            else:
                m, R = X.mean(axis=0), X - X.mean(axis=0)
            if not (np.all(np.isfinite(X)) and np.all(np.isfinite(R))):
                split, X = None, np.full_like(X, np.nan)
            else:
                Y = None
                if split is None or _code_ratio_fast(X, R) >= PLAIN_INPUT_MIN:
                    Y = _plain_layer(X, layer, act, architecture)  # (n, d)
                    if np.all(np.isfinite(Y)) and _code_ratio_fast(Y, Y - Y.mean(axis=0)) < SPLIT_BELOW:
                        Y = None  # nearly rank 1: the plain output has lost the deviations
                if Y is not None:
                    split, X = None, Y
                else:
                    split = _split_layer(m, R, layer, act, architecture)
            if rescale:
                if split is not None:
                    c = _rescale_factor(split[0][None, :] + split[1], split[1])
                    split = (c * split[0], c * split[1])
                else:
                    X = X * _rescale_factor(X, X)
            out.append(split if split is not None else (X.mean(axis=0), X - X.mean(axis=0)))
    return out


def _log10_ratio(num, den):
    """log10(num/den) without forming the ratio; LOG10_ZERO for num = 0, nan if undefined."""
    if not (math.isfinite(num) and math.isfinite(den)) or den <= 0:
        return float("nan")
    if num == 0:
        return LOG10_ZERO
    return math.log10(num) - math.log10(den)


def residual_curves(layers_out, *, exact=True):
    """log10 of both residual ratios for each layer of one forward pass.

    Parameters
    ----------
    layers_out : list
        Matrices ``X_l`` (from :func:`forward_stack`) or pairs ``(m_l, R_l)``
        with ``X_l = 1 m_l^T + R_l`` (from :func:`forward_stack_split`). For a
        pair the residuals are computed from ``R_l`` alone (both are
        invariant under adding ``1 c^T``), so a deviation far below
        ``1e-16 ||X_l||`` is still measured.
    exact : bool
        Also compute the exact form (:func:`exact_residual`).

    Returns
    -------
    dict
        ``log10_code``, ``log10_exact`` (lists, one per layer; ``nan`` where
        ``X`` is not finite or is 0, :data:`LOG10_ZERO` where the residual is
        exactly 0), and ``log10_norm`` (log10 of ``||X_l||``).
    """
    code, ex, norms = [], [], []
    for item in layers_out:
        if isinstance(item, tuple):
            m, R = (np.asarray(v, dtype=np.float64) for v in item)
            X = m[None, :] + R  # (n, d)
        else:
            X = R = np.asarray(item, dtype=np.float64)
        finite = bool(np.all(np.isfinite(X)) and np.all(np.isfinite(R)))
        den = composite_norm(X) if finite else float("nan")
        norms.append(math.log10(den) if finite and den > 0 else float("nan"))
        if not (finite and den > 0):
            code.append(float("nan"))
            ex.append(float("nan"))
            continue
        code.append(_log10_ratio(composite_norm(code_residual(R)), den))
        ex.append(_log10_ratio(exact_residual(R), den) if exact else float("nan"))
    return {"log10_code": code, "log10_exact": ex, "log10_norm": norms}


# --------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------


def _mean_log10(rows):
    """Mean and spread over samples of log10 values, per depth.

    ``nan`` samples (no valid ``X``) are left out; a residual that underflowed
    to 0 counts as :data:`LOG10_ZERO`, the float64 limit, so the curves stay
    monotone where some samples reach it before others.
    """
    arr = np.asarray(rows, dtype=np.float64)  # (samples, depth + 1)
    ok = np.isfinite(arr)
    cnt = ok.sum(axis=0)
    tot = np.where(ok, arr, 0.0).sum(axis=0)
    mean = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)
    dev = np.where(ok, arr - np.where(cnt > 0, mean, 0.0), 0.0)
    std = np.where(cnt > 0, np.sqrt((dev ** 2).sum(axis=0) / np.maximum(cnt, 1)), np.nan)
    return mean, std, cnt, (arr == LOG10_ZERO).sum(axis=0)


def _clean(values):
    """Floats for JSON: nan becomes None."""
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(values, dtype=np.float64)]


def _summarise(code, exa, norm):
    """Per-depth summary of one (activation, architecture): see :func:`run_rank_collapse`."""
    code, exa = np.asarray(code, dtype=np.float64), np.asarray(exa, dtype=np.float64)  # (samples, depth+1)
    mc, sc, valid, zc = _mean_log10(code)
    me, se, _, ze = _mean_log10(exa)
    mn, _, _, _ = _mean_log10(norm)
    with np.errstate(invalid="ignore", over="ignore"):
        both = np.isfinite(code) & np.isfinite(exa) & (code > LOG10_ZERO) & (exa > LOG10_ZERO)
        gap = np.where(both, code - exa, np.nan)  # log10(code / exact) >= 0, where both resolved
        gm, _, _, _ = _mean_log10(gap)
        rel = np.where(both, 10.0 ** gap - 1.0, -np.inf).max(axis=0)
    return {
        "residual_code": _clean(np.where(mc > LOG10_ZERO, 10.0 ** mc, np.where(np.isnan(mc), np.nan, 0.0))),
        "residual_exact": _clean(np.where(me > LOG10_ZERO, 10.0 ** me, np.where(np.isnan(me), np.nan, 0.0))),
        "log10_code": _clean(mc), "log10_code_std": _clean(sc),
        "log10_exact": _clean(me), "log10_exact_std": _clean(se),
        "gap_log10": _clean(gm), "gap_rel_max": _clean(np.where(np.isfinite(rel), rel, np.nan)),
        "log10_norm": _clean(mn),
        "n_valid": [int(c) for c in valid],
        "n_zero": [int(z) for z in np.maximum(zc, ze)],
    }


def run_rank_collapse(settings, *, progress=None, on_result=None):
    r"""Residual ratio against depth for every activation and architecture (TanhMax Fig. 4; :class:`Settings`).

    Weight draw ``j`` of an architecture is one stack (:func:`init_stack`, the
    same for every activation), input ``k`` a token matrix with ``N(0, 1)``
    entries; both residual ratios are measured at every depth
    (:func:`residual_curves`) and averaged over the draws and inputs in log10
    (geometric means: the ratio spans hundreds of decades), as
    :func:`_summarise` says (``derivations/16-rank-collapse.md``, section 7).
    ``on_result(activation, curves)`` is called as each activation finishes.
    """
    s = settings
    check_memory(memory_estimate(s.n, s.d, s.depth, s.seeds, s.inputs, len(s.architectures), s.heads),
                 f"--n {s.n} --d {s.d} --depth {s.depth} --seeds {s.seeds} --inputs {s.inputs}", s.max_memory)
    t0 = time.perf_counter()
    given = ({a: a for a in ACTIVATIONS} if s.activations is None
             else {activation_label(a): model_activation(a) for a in s.activations})  # a file's loaded once
    forward = forward_stack_split if s.precision == "split" else forward_stack
    stacks = {(arch, j): init_stack(arch, s.depth, s.d, s.heads,
                                    np.random.default_rng([s.seed, j, ARCHITECTURES.index(arch)]),
                                    weight_std=s.weight_std)
              for arch in s.architectures for j in range(s.seeds)}
    X0 = {(j, k): np.random.default_rng([s.seed, j, k, 1]).standard_normal((s.n, s.d))  # (n, d)
          for j in range(s.seeds) for k in range(s.inputs)}
    curves = {}
    for a, act in given.items():
        curves[a] = {}
        for arch in s.architectures:
            rows = [residual_curves(forward(X0[j, k], stacks[arch, j], act, arch, rescale=s.rescale),
                                    exact=s.exact) for j in range(s.seeds) for k in range(s.inputs)]
            curves[a][arch] = _summarise(*([r[key] for r in rows] for key in ("log10_code", "log10_exact",
                                                                             "log10_norm")))
        if on_result is not None:  # the command line writes it to disk: a later failure loses nothing
            on_result(a, curves[a])
        if progress:
            print(f"rank collapse: {a} done ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    config = {k: getattr(s, k) for k in ("depth", "n", "d", "heads", "seeds", "inputs", "seed", "rescale",
                                         "exact", "precision")}
    return {"config": {"activations": list(given), "architectures": list(s.architectures), **config,
                       "weight_std": 1.0 / math.sqrt(s.d) if s.weight_std is None else float(s.weight_std),
                       "ffn": "relu MLP, hidden 2d, no skip", "score": "scaled_dot", "log10_zero": LOG10_ZERO},
            "curves": curves, "seconds": time.perf_counter() - t0}


def _cell(curve, form, depth, width=8):
    """One table cell: the mean log10, 'uflow' where every sample underflowed,
    a trailing '*' where some did (counted at LOG10_ZERO), '--' for none valid."""
    v = curve[f"log10_{form}"][depth]
    if v is None:
        return f"{'--':>{width}}"
    if v == LOG10_ZERO:
        return f"{'uflow':>{width}}"
    star = "*" if curve["n_zero"][depth] else " "
    return f"{v:{width - 1}.2f}{star}"


def memory_estimate(n, d, depth=12, seeds=2, inputs=2, architectures=3, heads=2):
    """Bytes ``refattn rank-collapse`` needs at its peak, before any work: the weights of every stack, kept
    for the whole run (``96 d^2 + 3000`` bytes a layer), the inputs and curves of every draw and input
    (``12 n d + 48 depth + 1000``), and one forward pass with its linear programmes (tracemalloc measures
    about 33 bytes per entry of the ``(heads, n, n)`` scores and 800 to 3200 per token entry ``n d``; the
    estimate allows 40 and 2000, and 256 KiB more) (``tests/test_run_safety.py``)."""
    n, d, depth, seeds, inputs, heads = (int(v) for v in (n, d, depth, seeds, inputs, heads))
    stacks = seeds * int(architectures) * depth * (96 * d * d + 3000)
    draws = seeds * inputs * (12 * n * d + 48 * depth + 1000)
    return 40 * heads * n * n + 2000 * n * d + stacks + draws + 2**18


#: ``refattn rank-collapse``.
run = run_rank_collapse


def report(result, depths=None):
    """A text table: log10 of both residual ratios at a few depths, per activation and architecture."""
    cfg = result["config"]
    if depths is None:
        depths = sorted({x for x in (1, 2, 3, 6, 12, 24, cfg["depth"]) if x <= cfg["depth"]})
    lines = [
        "Rank collapse (Dong et al. 2021; TanhMax Fig. 4): log10 of ||res(X_l)|| / ||X_l||,",
        "norm sqrt(||.||_1 ||.||_inf); code = minus the token mean, exact = min over x of ||X - 1x^T||.",
        f"Mean of log10 over {cfg['seeds']} weight draws x {cfg['inputs']} inputs; n={cfg['n']} tokens, "
        f"d={cfg['d']}, {cfg['heads']} heads, weight std {cfg['weight_std']:.3g}, ffn = {cfg['ffn']}, "
        f"rescale={cfg['rescale']}, precision={cfg['precision']}.",
        f"uflow = residual underflowed to 0 in float64 in every sample; * = in some (counted as "
        f"{LOG10_ZERO:g}); -- = X itself 0 or not finite in every sample.",
        "gap = largest mean log10(code/exact) over depths; |X| = log10 ||X_l|| at the last depth shown.",
        "",
    ]
    head = " ".join(f"{'l=' + str(x):>8}" for x in depths)
    for arch in cfg["architectures"]:
        lines.append(f"[{arch}]      form {head}     gap   |X|  valid")
        for a in cfg["activations"]:
            c = result["curves"][a][arch]
            gaps = [g for g in c["gap_log10"] if g is not None]
            for form in ("code", "exact"):
                vals = " ".join(_cell(c, form, x) for x in depths)
                extra = ""
                if form == "code":
                    nrm = c["log10_norm"][depths[-1]]
                    extra = (f" {format(max(gaps), '7.3f') if gaps else '     --'} "
                             f"{'--' if nrm is None else format(nrm, '.1f'):>5} {c['n_valid'][depths[-1]]:>4}")
                lines.append(f"{a:<11} {form:<5} {vals}{extra}")
        lines.append("")
    lines.append(f"({result['seconds']:.1f} s)")
    return "\n".join(lines)


def plot(result, form="both"):
    """log10 residual ratio against depth: one panel per architecture, one line per activation.

    ``form``: ``"code"``, ``"exact"`` or ``"both"`` (solid = exact, dashed =
    code). Underflowed samples count as :data:`LOG10_ZERO` (dotted line); a
    second row shows ``log10 ||X_l||``, where a curve that stops means the
    token matrix itself reached 0 or overflowed.
    """
    import matplotlib.pyplot as plt  # noqa: PLC0415

    if form not in ("code", "exact", "both"):
        raise ValueError(f"form: expected 'code', 'exact' or 'both', got {form!r}")
    cfg = result["config"]
    archs, acts = cfg["architectures"], cfg["activations"]
    fig, axes = plt.subplots(2, len(archs), figsize=(4.2 * len(archs), 6.4), squeeze=False,
                             sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    depth = np.arange(cfg["depth"] + 1)
    forms = ("exact", "code") if form == "both" else (form,)
    for col, arch in enumerate(archs):
        ax, bx = axes[0, col], axes[1, col]
        for i, a in enumerate(acts):
            c = result["curves"][a][arch]
            colour = f"C{i % 10}"
            for f in forms:
                y = np.array([np.nan if v is None else v for v in c[f"log10_{f}"]])
                ax.plot(depth, y, color=colour, ls="-" if f == "exact" else "--",
                        marker=".", label=a if f == forms[0] else None)
            nrm = np.array([np.nan if v is None else v for v in c["log10_norm"]])
            bx.plot(depth, nrm, color=colour, marker=".")
        if ax.get_ylim()[0] < -100:
            ax.axhline(LOG10_ZERO, color="0.5", ls=":", lw=0.8)
        ax.set_title(f"{arch}{' (rescaled)' if cfg['rescale'] else ''}", fontsize=10)
        bx.set_xlabel("depth (layers)")
    axes[0, 0].set_ylabel("log10 residual ratio")
    axes[1, 0].set_ylabel("log10 ||X||")
    note = "solid: exact, dashed: code\n" if form == "both" else ""
    axes[0, 0].legend(fontsize=7, title=note + "dotted: float64 underflow", title_fontsize=7)
    fig.tight_layout()
    return fig
