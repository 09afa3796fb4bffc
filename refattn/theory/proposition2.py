r"""The range of TanhMax, and Proposition 2 of TanhMax corrected.

TanhMax (Proposition 2, Eq. 10) claims that for a vector space ``S`` with
``1 in S``

    {softmax(z) : z in S}  is a subset of  {tanhmax(z) : z in S},

with ``tanhmax(z)_i = sinh z_i / sum_k cosh z_k`` (TanhMax, Eq. 6). As
printed the claim is false: ``sum_i |sinh z_i| < sum_k cosh z_k``, so every
TanhMax output has l1 norm below 1, while every softmax output sums to 1.
The two ranges are disjoint. What is true, and what this module computes
(``derivations/05-proposition-2.md``):

(a) tanhmax maps R^n one-to-one onto the open l1 unit ball
    ``B = {w : sum_i |w_i| < 1}`` (:func:`in_tanhmax_range`,
    :func:`tanhmax_preimage`, :func:`tanhmax_l1_margin`);
(b) ``tanhmax(s + c 1) -> softmax(s)`` as ``c -> inf``, with the exact l1 gap
    ``2 q / (1 + q)``, ``q = e^{-2c} sum_k e^{-s_k} / sum_k e^{s_k}``
    (:func:`closure_gap`, :func:`closure_gap_closed_form`), so softmax's range
    over ``S`` lies in the *closure* of tanhmax's range over ``S``;
(c) log|tanhmax(W h)| is not confined to a (d+1)-dimensional subspace, as
    log softmax(W h) is (:func:`log_rank`): this much of "breaking the softmax
    bottleneck" survives.

Everything here works in float64 NumPy and reuses the library's stable
forward passes (``refattn.core.activations``). ``refattn prop2`` (:mod:`refattn.studies.prop2`)
prints the numbers quoted in the derivation.
"""

from __future__ import annotations

import numpy as np

from ..core.activations import activation
from ..core.checks import check_axis, check_float_array, check_int, check_real
from . import as_activation

__all__ = [
    "tanhmax_l1_norm",
    "tanhmax_l1_margin",
    "in_tanhmax_range",
    "tanhmax_preimage",
    "closure_gap",
    "closure_gap_closed_form",
    "log_rank",
]

_EPS = float(np.finfo(np.float64).eps)  # float64's machine epsilon


# --------------------------------------------------------------------------
# input checks and a stable log-sum-exp
# --------------------------------------------------------------------------


def _finite_array(x, name):
    """``x`` as float64 after checking it is a finite floating-point NumPy array."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a floating-point numpy.ndarray, got {type(x).__name__}")
    check_float_array(x, name)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: expected finite values, got NaN or inf")
    return x.astype(np.float64, copy=False)


def _finite_shifts(c):
    """The shift(s) ``c`` as a finite float64 array (a scalar becomes 0-d)."""
    if isinstance(c, (bool, np.bool_)):
        raise TypeError("c: expected a real number or an array of real numbers, got bool")
    arr = np.asarray(c)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"c: expected a real number or an array of real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if arr.ndim > 1:
        raise ValueError(f"c: expected a scalar or a 1-D array of shifts, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("c: expected finite shifts, got NaN or inf")
    return arr


def _logsumexp(x, axis):
    """``log sum_k e^{x_k}`` along ``axis`` (shifted by the maximum: no overflow)."""
    m = np.max(x, axis=axis, keepdims=True)
    return np.squeeze(m, axis) + np.log(np.sum(np.exp(x - m), axis=axis))


# --------------------------------------------------------------------------
# (a) every TanhMax output lies in the open l1 unit ball
# --------------------------------------------------------------------------


def tanhmax_l1_norm(s, axis=-1):
    """``sum_i |tanhmax(s)_i|`` along ``axis``, from the stable forward pass (TanhMax Eq. 6): below 1
    (Eq. 05.P2 of ``derivations/05-proposition-2.md``), though it rounds to 1 once every ``|s_i|``
    exceeds about 19 (:func:`tanhmax_l1_margin` is the margin in closed form)."""
    s = _finite_array(s, "s")
    ax = check_axis(axis, s.ndim)
    return np.sum(np.abs(activation("tanhmax")(s, axis=ax)), axis=ax)


def tanhmax_l1_margin(s, axis=-1, *, log=False):
    """``1 - sum_i |tanhmax(s)_i| = sum_i e^{-|s_i|} / sum_k cosh s_k`` along ``axis`` (Eq. 05.P3 of
    ``derivations/05-proposition-2.md``, from ``cosh x - |sinh x| = e^{-|x|}``): positive for every finite
    ``s``, which is why TanhMax's range misses every softmax output (TanhMax Eq. 10 as printed is false).
    With ``log``, its logarithm, finite also where the margin underflows. Two shifted log-sum-exps:
    nothing overflows."""
    s = _finite_array(s, "s")
    ax = check_axis(axis, s.ndim)
    a = np.abs(s)  # (..., n)
    e = np.exp(-a)  # in (0, 1]; underflow to 0 is harmless here
    log_num = _logsumexp(-a, ax)  # log sum_i e^{-|s_i|}
    # cosh s = e^{|s|} (1 + e^{-2|s|}) / 2; e*e avoids forming -2|s| (overflow for |s| ~ 1e308)
    m = np.max(a, axis=ax, keepdims=True)
    log_den = np.squeeze(m, ax) + np.log(np.sum(np.exp(a - m) * (0.5 + 0.5 * e * e), axis=ax))
    out = log_num - log_den
    return out if log else np.exp(out)


def _slack(slack, n):
    """The rounding allowance of :func:`in_tanhmax_range` for rows of length ``n``."""
    if slack is None:
        return 4.0 * n * _EPS
    slack = check_real(slack, "slack", finite=False)
    if not 0.0 <= slack < 1.0:
        raise ValueError(f"slack: expected 0 <= slack < 1, got {slack}")
    return slack


def in_tanhmax_range(w, axis=-1, *, slack=None):
    """Whether each row of ``w`` along ``axis`` is a TanhMax output: ``sum_i |w_i| < 1 - slack``.

    TanhMax (Eq. 6) maps R^n onto the open l1 unit ball (``derivations/05-proposition-2.md``, statement
    (a)), so a softmax output, which sums to 1, is not in its range. ``slack`` (default ``4 n eps_mach``;
    ``0.0`` for the bare test) counts a row within rounding of the unit sphere as on it: its
    floating-point entries cannot certify that it lies inside. Returns ``w``'s shape without ``axis``.
    """
    w = _finite_array(w, "w")
    ax = check_axis(axis, w.ndim)
    return np.sum(np.abs(w), axis=ax) < 1.0 - _slack(slack, w.shape[ax])


def tanhmax_preimage(w, axis=-1, *, tol=None, maxiter=100, slack=None):
    """The unique scores ``s`` with ``tanhmax(s) = w`` along ``axis``, for ``w`` in the open l1 ball.

    With ``x = 1/C``, ``C = sum_k cosh s_k``, a preimage solves Eq. 05.P6, ``G(x) = sum_k sqrt(x^2 +
    w_k^2) - 1 = 0``, which has exactly one root in ``(0, 1/n]`` (``derivations/05-proposition-2.md``,
    Eqs. 05.P4-05.P6): Newton's method from ``x = 1/n``, safeguarded by bisection, finds it, and
    ``s_i = asinh(w_i / x)``. The round trip's relative error is ``|G(x)| / (1 + G(x))`` (Step 6).

    Parameters
    ----------
    w : ndarray of float
        Finite weights whose rows have ``sum_i |w_i| < 1 - slack`` (:func:`in_tanhmax_range`);
        another row (a softmax output, say) has no preimage and is refused, naming ``w``.
    tol : float or None
        Stop a row at ``|G(x)| <= tol``; ``None``: ``4 n eps_mach``, the rounding of ``G``'s sum.
    maxiter : int
        Newton steps allowed before a :class:`RuntimeError`.

    Returns
    -------
    ndarray of float64
        ``s``, with ``activation("tanhmax")(s, axis) == w`` to rounding.
    """
    w = _finite_array(w, "w")
    ax = check_axis(axis, w.ndim)
    n = w.shape[ax]
    tol = 4.0 * n * _EPS if tol is None else check_real(tol, "tol", finite=False)
    if not 0.0 < tol < 1.0:
        raise ValueError(f"tol: expected 0 < tol < 1, got {tol}")
    maxiter = check_int(maxiter, "maxiter")
    norms, slack = np.sum(np.abs(w), axis=ax), _slack(slack, n)
    outside = norms >= 1.0 - slack
    if np.any(outside):
        raise ValueError(f"w: {int(np.sum(outside))} row(s) are not in TanhMax's range, the open l1 unit ball "
                         f"sum|w_i| < 1 (largest l1 norm {float(np.max(norms)):.17g}, rounding slack {slack:.3g}); "
                         "such a row (a softmax output, which sums to 1, for one) has no preimage "
                         "(derivations/05-proposition-2.md)")
    rows = np.moveaxis(w, ax, -1)  # (..., n)
    flat = rows.reshape(-1, n)  # (R, n)
    x = np.full(flat.shape[0], 1.0 / n)  # (R,) start at the right end of the bracket
    lo, hi = np.zeros_like(x), x.copy()
    active = np.ones(x.shape, bool)
    for _ in range(maxiter):
        r = np.hypot(x[:, None], flat)  # (R, n) sqrt(x^2 + w_k^2) > 0 since x > 0
        G = np.sum(r, axis=1) - 1.0  # (R,)
        dG = np.sum(x[:, None] / r, axis=1)  # (R,) G'(x) > 0
        hi = np.where(G >= 0, x, hi)
        lo = np.where(G < 0, x, lo)
        x_new = x - G / dG  # Newton
        x_new = np.where((x_new >= lo) & (x_new <= hi), x_new, 0.5 * (lo + hi))  # safeguard
        done = (np.abs(G) <= tol) | (hi - lo <= 4.0 * _EPS * hi)
        active &= ~done  # a finished row keeps the x at which G was evaluated
        x = np.where(active, x_new, x)
        if not active.any():
            break
    else:
        raise RuntimeError(f"tanhmax_preimage: no convergence in maxiter={maxiter} iterations "
                           f"for {int(active.sum())} row(s); raise maxiter or tol")
    s = np.arcsinh(flat / x[:, None])  # (R, n) sinh s_i = w_i C, C = 1/x
    return np.moveaxis(s.reshape(rows.shape), -1, ax)


# --------------------------------------------------------------------------
# (b) softmax's range lies in the closure of TanhMax's: shift by c 1
# --------------------------------------------------------------------------


def _shifted_axis(s, axis, c):
    s = _finite_array(s, "s")
    ax = check_axis(axis, s.ndim)
    return s, ax, _finite_shifts(c)


def closure_gap(s, c, axis=-1):
    """``|| tanhmax(s + c 1) - softmax(s) ||_1`` along ``axis``, from the stable forward passes (TanhMax
    Eqs. 5 and 6), for each shift of ``c`` (a number or a 1-D array): shape ``np.shape(c) + s.shape``
    without ``axis``. Accurate to about 1e-16 absolute; :func:`closure_gap_closed_form` is Eq. 05.P10."""
    s, ax, c = _shifted_axis(s, axis, c)
    shifted = s + c.reshape(c.shape + (1,) * s.ndim)  # c.shape + s.shape
    t = activation("tanhmax")(shifted, axis=ax + c.ndim)
    p = activation("softmax")(s, axis=ax)  # s.shape, broadcasts against t
    return np.sum(np.abs(t - p), axis=ax + c.ndim)


def closure_gap_closed_form(s, c, axis=-1):
    """The exact l1 gap ``|| tanhmax(s + c 1) - softmax(s) ||_1 = 2 q / (1 + q)``,
    ``q = e^{-2c} sum_k e^{-s_k} / sum_k e^{s_k}`` (Eqs. 05.P8-05.P10 of ``derivations/05-proposition-2.md``):
    ``~ 2 (B/A) e^{-2c}`` for large ``c``, so softmax's range lies in the closure of TanhMax's. Valid for
    every real ``c``, evaluated from ``log q`` (nothing overflows); shapes as :func:`closure_gap`."""
    s, ax, c = _shifted_axis(s, axis, c)
    log_ratio = _logsumexp(-s, ax) - _logsumexp(s, ax)  # log(B / A)
    L = log_ratio - 2.0 * c.reshape(c.shape + (1,) * (s.ndim - 1))  # log q
    e = np.exp(-np.abs(L))  # in (0, 1]: 2q/(1+q) without overflow either way
    return np.where(L < 0, 2.0 * e / (1.0 + e), 2.0 / (1.0 + e))


# --------------------------------------------------------------------------
# (c) what survives: log|phi(W h)| is not confined to d + 1 dimensions
# --------------------------------------------------------------------------


def log_rank(activation, n, d, m, seed=0):
    """The numerical rank of ``L[t] = log|phi(W h_t)|`` over ``m`` random ``h_t``, against softmax's bound ``d + 1``.

    ``W (n, d)`` has entries N(0, 1/d) and ``h_t`` N(0, 1), so the scores have unit variance. For softmax
    ``log softmax(W h) = W h - lse(W h) 1``, so ``rank L <= d + 1`` (Yang et al. 2018's softmax
    bottleneck; TanhMax section 4, property 2); for TanhMax it is generally ``min(m, n)``
    (``derivations/05-proposition-2.md``, section 5). An activation with exact zero weights (relu,
    cosformer) is refused, naming ``activation``.

    Returns
    -------
    dict
        ``activation``, ``n``, ``d``, ``m``, ``seed``, ``singular_values`` (descending), ``tol`` (NumPy's
        rank tolerance ``s_max max(m, n) eps_mach``), ``rank`` and ``softmax_bound = d + 1``.
    """
    act = as_activation(activation)
    n, d, m = check_int(n, "n", 2), check_int(d, "d"), check_int(m, "m")
    seed = check_int(seed, "seed", 0)
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((n, d)) / np.sqrt(d)  # (n, d)
    H = rng.standard_normal((m, d))  # (m, d) one h_t per row
    phi = act(H @ W.T)  # (m, n) phi(W h_t)
    if np.any(phi == 0.0):
        raise ValueError(f"activation: {act.name!r} gave exact zeros, "
                         "where log|phi| is -inf; choose an activation with nonzero weights")
    L = np.log(np.abs(phi))  # (m, n)
    sv = np.linalg.svd(L, compute_uv=False)  # (min(m, n),) descending
    tol = float(sv[0] * max(m, n) * _EPS)
    return {"activation": act.name, "n": n, "d": d, "m": m, "seed": int(seed),
            "singular_values": sv, "tol": tol, "rank": int(np.sum(sv > tol)),
            "softmax_bound": d + 1}
