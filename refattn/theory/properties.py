r"""The four properties of TanhMax section 4, measured for every activation (``derivations/06-four-properties.md``).

TanhMax asks of ``phi(s)_i = g(s_i) / sum_k h(s_k)`` (its Eq. 5): (1) g is
monotonically increasing, (2) log g is not affine (Kanai et al. 2018's
softmax bottleneck), (3) g is odd, (4) the numerator is compared with the
context ``C(s) = sum_k h(s_k)``. Each measurement applies one criterion,
Eqs. 06.P1-06.P5, to ``Activation.g`` on a grid of scores, or, for (4), to
``Activation.jacobian``, with the two tolerances of derivation 06, section 1
(:func:`tolerances`). The paper's Table 3 is the one thing written here by
hand (:data:`PAPER_TABLE3`); ``refattn properties``
(:mod:`refattn.studies.four_properties`) compares every activation with it.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from ..core.checks import check_int
from . import as_activation

__all__ = [
    "PROPERTIES",
    "PROPERTY_TITLES",
    "PAPER_ROW_NAMES",
    "PAPER_TABLE3",
    "CRITERIA",
    "default_grid",
    "tolerances",
    "measure_monotonicity",
    "measure_log_nonlinearity",
    "bottleneck_rank",
    "measure_contextual_normalisation",
    "measure_origin_symmetry",
    "measure",
]

#: The four properties of TanhMax section 4, in the order of its Table 3 columns
#: (Monotonicity, Log-nonlinearity, Normalization, Origin-symmetry).
PROPERTIES = ("monotonicity", "log_nonlinearity", "contextual_normalisation", "origin_symmetry")

#: Short column titles for tables and plots.
PROPERTY_TITLES = MappingProxyType({
    "monotonicity": "monotone",
    "log_nonlinearity": "log-nonlinear",
    "contextual_normalisation": "normalised",
    "origin_symmetry": "origin-symmetric",
})

#: TanhMax Table 3's row labels, keyed by our registry names.
PAPER_ROW_NAMES = MappingProxyType({
    "softmax": "Softmax",
    "relu": "ReLU",
    "linear": "Dot product",
    "sigsoftmax": "Sigsoftmax",
    "cosformer": "Cosformer",
    "tanhmax": "TanhMax",
})


def _paper_row(mono, lognl, norm, sym):
    return MappingProxyType(dict(zip(PROPERTIES, (mono, lognl, norm, sym))))


#: TanhMax, Table 3, as printed: True = a check mark, False = a blank
#: ("not satisfied"). The paper's claims, to compare with; not computed.
PAPER_TABLE3 = MappingProxyType({
    #                        monotone  log-nonlin.  normalised  origin-sym.
    "softmax": _paper_row(True, False, True, False),
    "relu": _paper_row(True, True, False, False),
    "linear": _paper_row(True, True, False, True),
    "sigsoftmax": _paper_row(True, True, True, False),
    "cosformer": _paper_row(True, True, True, False),
    "tanhmax": _paper_row(True, True, True, True),
})

#: The rule each measurement applies, in words (also in the JSON output).
CRITERIA = MappingProxyType({
    "monotonicity": (
        "g is non-decreasing on the grid: every step g(s[j+1]) - g(s[j]) >= -4 eps "
        "max(|g(s[j])|, |g(s[j+1])|) (a decrease no larger than rounding); "
        "'strict' additionally reports whether every step is > 0"),
    "log_nonlinearity": (
        "log|g| is not affine on the grid points where g != 0: the RMS residual of the "
        "least-squares fit log|g(s)| ~ a s + b, divided by the standard deviation of log|g| "
        "(= sqrt(1 - R^2)), exceeds sqrt(eps); fewer than 3 such points count as affine. "
        "Second measurement (evidence only): the numerical rank of log|phi(W h)| over random "
        "h exceeds d + 1"),
    "contextual_normalisation": (
        "phi_i depends on another token's score: on random rows of scores, "
        "max_{j != k} |d phi_j / d s_k| / max_j |d phi_j / d s_j| (Activation.jacobian) "
        "exceeds sqrt(eps) on at least one row"),
    "origin_symmetry": (
        "g is odd on the grid: |g(s) + g(-s)| <= 4 eps max(|g(s)|, |g(-s)|) at every grid point"),
})

_DEFAULT_GRID = (-8.0, 8.0, 4001)  # step 0.004, includes s = 0; g stays below 3e3 (e^8)
_MIN_POINTS_PER_SIDE = 3


def default_grid() -> np.ndarray:
    """4001 scores from -8 to 8, step 0.004, with 0 (``derivations/06-four-properties.md``, section 1)."""
    lo, hi, n = _DEFAULT_GRID
    return np.linspace(lo, hi, n)  # (4001,)


def tolerances(dtype=np.float64) -> dict:
    """``{"eps", "roundoff": 4 eps, "signal": sqrt(eps)}`` for a floating dtype: zero up to rounding, and
    clearly non-zero (``derivations/06-four-properties.md``, section 1)."""
    eps = float(np.finfo(dtype).eps)
    return {"eps": eps, "roundoff": 4.0 * eps, "signal": math.sqrt(eps)}


# --------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------


def _check_grid(grid) -> np.ndarray:
    """``grid`` as a 1-D float array (float64 unless it is a float32 array)."""
    if grid is None:
        return default_grid()
    if isinstance(grid, (str, bytes)):
        raise TypeError(f"grid: expected a 1-D array of real numbers, got {type(grid).__name__}")
    try:
        arr = np.asarray(grid)
    except (TypeError, ValueError) as err:  # ragged nested sequences
        raise TypeError(f"grid: expected a 1-D array of real numbers ({err})") from None
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"grid: expected real numbers (int or float), got dtype {arr.dtype}")
    if arr.dtype.kind != "f" or arr.dtype == np.float16:
        arr = arr.astype(np.float64)
    if arr.ndim != 1:
        raise ValueError(f"grid: expected a 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("grid: expected finite numbers, got NaN or inf")
    if arr.size >= 2 and not np.all(np.diff(arr) > 0):
        raise ValueError("grid: expected strictly increasing values (sort it and drop repeats)")
    n_neg, n_pos = int(np.sum(arr < 0)), int(np.sum(arr > 0))
    if min(n_neg, n_pos) < _MIN_POINTS_PER_SIDE:
        raise ValueError(
            f"grid: expected at least {_MIN_POINTS_PER_SIDE} negative and "
            f"{_MIN_POINTS_PER_SIDE} positive scores (the properties compare both signs), "
            f"got {n_neg} negative and {n_pos} positive")
    return arr


def _g_on(act, s: np.ndarray) -> np.ndarray:
    """``g(s)``, or a ValueError naming ``grid`` where g is not finite there."""
    # sinh, exp and s^2 overflow to inf (and expressive's s^2/(1+s^2) to
    # inf/inf = NaN) for |s| beyond the dtype's range; that is reported below
    # as a bad grid, so the warning itself carries no information.
    with np.errstate(over="ignore", invalid="ignore"):
        g = np.asarray(act.g(s))
    bad = ~np.isfinite(g)
    if np.any(bad):
        where = float(s[np.argmax(bad)])
        raise ValueError(
            f"grid: g of {act.name!r} is not finite at s = {where:g} (overflow in "
            f"{s.dtype}); use a grid with smaller |s|")
    return g


def _rel_to_larger(diff, a, b):
    """``diff / max(|a|, |b|)`` elementwise, 0 where both are 0 (then diff = 0 too)."""
    scale = np.maximum(np.abs(a), np.abs(b))
    return np.divide(diff, scale, out=np.zeros_like(diff), where=scale > 0)


def _result(holds, evidence, criterion):
    return {"holds": bool(holds), "evidence": evidence, "criterion": criterion}


# --------------------------------------------------------------------------
# 1. Monotonicity
# --------------------------------------------------------------------------


def measure_monotonicity(activation, *, grid=None) -> dict:
    """Is g non-decreasing? TanhMax section 4, property 1: Eq. 06.P1, every step
    ``g(s[j+1]) - g(s[j]) >= -4 eps max(|g(s[j])|, |g(s[j+1])|)`` (``derivations/06-four-properties.md``,
    section 2; ReLU, flat for s < 0, counts as monotone, as in the paper).

    Parameters
    ----------
    activation : str or Activation
        A registered name, or an activation object.
    grid : array_like, optional
        Strictly increasing finite scores with at least 3 of each sign; default :func:`default_grid`.

    Returns
    -------
    dict
        ``{"holds", "evidence", "criterion"}``; the evidence has the most negative step (absolute and
        relative) and where it is, and ``strict`` (every step > 0).
    """
    act = as_activation(activation)
    s = _check_grid(grid)  # (m,)
    tol = tolerances(s.dtype)
    g = _g_on(act, s)  # (m,)
    step = np.diff(g)  # (m-1,) g(s[j+1]) - g(s[j])
    rel = _rel_to_larger(step, g[1:], g[:-1])  # (m-1,)
    j_abs, j_rel = int(np.argmin(step)), int(np.argmin(rel))
    evidence = {
        "min_step": float(step[j_abs]),
        "min_step_between": [float(s[j_abs]), float(s[j_abs + 1])],
        "min_relative_step": float(rel[j_rel]),
        "min_relative_step_between": [float(s[j_rel]), float(s[j_rel + 1])],
        "decreasing_steps": int(np.sum(rel < -tol["roundoff"])),
        "flat_steps": int(np.sum(step == 0)),
        "strict": bool(np.all(step > 0)),
        "grid_points": int(s.size),
        "tolerance": tol["roundoff"],
    }
    return _result(rel[j_rel] >= -tol["roundoff"], evidence, CRITERIA["monotonicity"])


# --------------------------------------------------------------------------
# 2. Log-nonlinearity
# --------------------------------------------------------------------------


def measure_log_nonlinearity(activation, *, grid=None, seed=0, rank=True) -> dict:
    """Is log|g| non-affine? TanhMax section 4, property 2: Eq. 06.P2, the least-squares fit
    ``log|g(s)| ~ a s + b`` over the grid points with ``g != 0`` leaves a relative residual
    ``sqrt(1 - R^2) > sqrt(eps)`` (``derivations/06-four-properties.md``, section 3.1).

    With ``rank``, :func:`bottleneck_rank` (Eq. 06.P3, seeded by ``seed``) is reported beside it
    as evidence; it does not decide. ``activation`` and ``grid`` as in :func:`measure_monotonicity`.

    Returns
    -------
    dict
        ``{"holds", "evidence", "criterion"}``; the evidence has the relative residual, the fitted
        slope and intercept, the largest second divided difference of log|g| (a curvature or a kink)
        and, with ``rank``, ``"bottleneck_rank"``.
    """
    act = as_activation(activation)
    s = _check_grid(grid)  # (m,)
    tol = tolerances(s.dtype)
    g = _g_on(act, s)  # (m,)
    keep = g != 0
    x = s[keep].astype(np.float64)  # (m',) where log|g| is finite
    y = np.log(np.abs(g[keep])).astype(np.float64)  # (m',)
    evidence = {"points_with_nonzero_g": int(x.size), "tolerance": tol["signal"]}
    if x.size < 3:
        evidence.update(relative_affine_residual=0.0, affine_slope=None, affine_intercept=None,
                        max_abs_second_divided_difference=0.0,
                        note="fewer than 3 points with g != 0: log|g| is trivially affine there")
        ratio = 0.0
    else:
        xc = x - x.mean()  # centred: the fit's two columns are orthogonal
        slope = float(np.dot(xc, y) / np.dot(xc, xc))
        intercept = float(y.mean())  # at s = mean(x)
        resid = y - (intercept + slope * xc)  # (m',)
        spread = float(np.std(y))
        ratio = float(np.sqrt(np.mean(resid ** 2)) / spread) if spread > 0 else 0.0
        d1 = np.diff(y) / np.diff(x)  # (m'-1,) first divided differences
        d2 = 2.0 * np.diff(d1) / (x[2:] - x[:-2])  # (m'-2,) 2 f[x0, x1, x2] ~ f''
        evidence.update(relative_affine_residual=ratio, affine_slope=slope,
                        affine_intercept=intercept - slope * float(x.mean()),
                        max_abs_second_divided_difference=float(np.max(np.abs(d2))))
    holds = ratio > tol["signal"]
    if rank:
        br = bottleneck_rank(act, seed=seed)
        br["agrees_with_affine_fit"] = bool(br["exceeds_bound"] == holds)
        evidence["bottleneck_rank"] = br
    return _result(holds, evidence, CRITERIA["log_nonlinearity"])


#: The two input regimes of :func:`bottleneck_rank`.
_RANK_REGIMES = ("mixed", "positive")


def bottleneck_rank(activation, *, n=12, d=3, samples=200, seed=0) -> dict:
    """The numerical rank of ``M = log|phi(W h_t)|`` over ``samples`` random ``h_t`` (Kanai et al. 2018).

    For softmax ``rank M <= d + 1`` (Eq. 06.P3, the softmax bottleneck); an activation whose log|g|
    is not affine exceeds it (``derivations/06-four-properties.md``, section 3.2). ``W (n, d)`` and
    ``h`` are N(0, 1) in the ``"mixed"`` regime and their absolute values in the ``"positive"`` one;
    rows with a zero weight are dropped, and a regime left with fewer than ``2n`` rows is not
    applicable. The rank is NumPy's (singular values above ``sigma_max max(M.shape) eps``).

    Returns
    -------
    dict
        ``{"n", "d", "bound": d + 1, "samples", "regimes", "exceeds_bound"}``; each regime has
        ``applicable``, ``rank``, ``rows_used``, ``singular_values_relative`` and ``first_beyond_bound``
        (``sigma_{d+2} / sigma_max``), or ``reason``.
    """
    act = as_activation(activation)
    n = check_int(n, "n", 3)
    d = check_int(d, "d", 1)
    if d > n - 2:
        raise ValueError(f"d: expected 1 <= d <= n - 2 = {n - 2} (so that d + 1 < n), got {d}")
    samples = check_int(samples, "samples", 2 * n)
    seed = check_int(seed, "seed", 0)
    rng = np.random.default_rng(seed)
    regimes = {}
    for regime in _RANK_REGIMES:
        W = rng.standard_normal((n, d))  # (n, d)
        H = rng.standard_normal((samples, d))  # (samples, d): one h per row
        if regime == "positive":
            W, H = np.abs(W), np.abs(H)
        phi = act(H @ W.T)  # (samples, n): row t is phi(W h_t)
        ok = np.all(phi != 0, axis=1)  # (samples,) rows where log|phi| is finite
        used = int(ok.sum())
        if used < 2 * n:
            regimes[regime] = {"applicable": False, "rank": None, "rows_used": used,
                               "reason": f"phi has a zero weight in {samples - used} of {samples} rows (g "
                                         f"vanishes there), so log|phi| = -inf; fewer than 2n = {2 * n} rows remain"}
            continue
        M = np.log(np.abs(phi[ok]))  # (rows, n)
        sv = np.linalg.svd(M, compute_uv=False)  # (n,) descending
        cut = sv[0] * max(M.shape) * np.finfo(M.dtype).eps
        regimes[regime] = {"applicable": True, "rank": int(np.sum(sv > cut)), "rows_used": used,
                           "singular_values_relative": [float(v) for v in sv / sv[0]],
                           "first_beyond_bound": float(sv[d + 1] / sv[0])}
    exceeds = any(r["applicable"] and r["rank"] > d + 1 for r in regimes.values())
    return {"n": n, "d": d, "bound": d + 1, "samples": samples, "regimes": regimes,
            "exceeds_bound": bool(exceeds)}


# --------------------------------------------------------------------------
# 3. Contextual normalisation
# --------------------------------------------------------------------------


def measure_contextual_normalisation(activation, *, seed=0, n=6, rows=8) -> dict:
    """Does phi_j depend on another token's score? TanhMax section 4, property 4.

    On ``rows`` random rows ``s ~ N(0, 4)`` of length ``n`` (>= 2), the Jacobian
    ``J = Activation.jacobian(s)`` (Eq. 01.R3) has an off-diagonal entry, Eq. 06.P4
    ``d phi_j / d s_k = -g(s_j) h'(s_k) / C^2``, above ``sqrt(eps) max_j |J[j, j]|``
    (``derivations/06-four-properties.md``, section 4); rows with ``J = 0`` (no normaliser) are skipped.

    Returns
    -------
    dict
        ``{"holds", "evidence", "criterion"}``; the evidence has the largest ratio, the largest
        off-diagonal and diagonal entries, and the rows skipped.
    """
    act = as_activation(activation)
    seed = check_int(seed, "seed", 0)
    n = check_int(n, "n", 2)
    rows = check_int(rows, "rows", 1)
    tol = tolerances(np.float64)
    rng = np.random.default_rng(seed)
    S = 2.0 * rng.standard_normal((rows, n))  # (rows, n)
    off_diag = ~np.eye(n, dtype=bool)  # (n, n)
    best, max_off, max_diag, skipped = 0.0, 0.0, 0.0, 0
    for s in S:
        J = act.jacobian(s)  # (n, n): J[j, k] = d phi_j / d s_k
        diag, off = float(np.max(np.abs(np.diag(J)))), float(np.max(np.abs(J[off_diag])))
        if diag == 0.0:  # J = 0 (no normaliser), or a degenerate row: no ratio
            skipped += 1
            continue
        max_off, max_diag = max(max_off, off), max(max_diag, diag)
        best = max(best, off / diag)
    evidence = {
        "max_offdiag_over_diag": best,
        "max_abs_offdiag": max_off,
        "max_abs_diag": max_diag,
        "rows": rows,
        "row_length": n,
        "rows_skipped_zero_diagonal": skipped,
        "tolerance": tol["signal"],
    }
    return _result(best > tol["signal"], evidence, CRITERIA["contextual_normalisation"])


# --------------------------------------------------------------------------
# 4. Origin symmetry
# --------------------------------------------------------------------------


def measure_origin_symmetry(activation, *, grid=None) -> dict:
    """Is g odd? TanhMax section 4, property 3: Eq. 06.P5, ``|g(s) + g(-s)| <= 4 eps max(|g(s)|, |g(-s)|)``
    at every grid point (``derivations/06-four-properties.md``, section 5; ``activation`` and ``grid`` as in
    :func:`measure_monotonicity`, the grid need not be symmetric).

    Returns
    -------
    dict
        ``{"holds", "evidence", "criterion"}``; the evidence has the largest relative odd and even
        defects, where the odd one is, and ``parity`` ("odd", "even", "odd and even" or "neither").
    """
    act = as_activation(activation)
    s = _check_grid(grid)  # (m,)
    tol = tolerances(s.dtype)
    g_pos, g_neg = _g_on(act, s), _g_on(act, -s)  # (m,), (m,)
    odd = _rel_to_larger(np.abs(g_pos + g_neg), g_pos, g_neg)  # (m,) 0 for odd g
    even = _rel_to_larger(np.abs(g_pos - g_neg), g_pos, g_neg)  # (m,) 0 for even g
    j = int(np.argmax(odd))
    is_odd, is_even = bool(odd[j] <= tol["roundoff"]), bool(np.max(even) <= tol["roundoff"])
    parity = {(True, True): "odd and even", (True, False): "odd",
              (False, True): "even", (False, False): "neither"}[(is_odd, is_even)]
    evidence = {
        "max_relative_odd_defect": float(odd[j]),
        "worst_at": float(s[j]),
        "max_relative_even_defect": float(np.max(even)),
        "parity": parity,
        "tolerance": tol["roundoff"],
    }
    return _result(is_odd, evidence, CRITERIA["origin_symmetry"])


# --------------------------------------------------------------------------
# All four, every activation, and the comparison with Table 3
# --------------------------------------------------------------------------


def measure(activation, *, grid=None, seed=0) -> dict:
    """The four properties of TanhMax section 4 for one activation (``derivations/06-four-properties.md``):
    ``{property: {"holds", "evidence", "criterion"}}`` for each of :data:`PROPERTIES`, each measured by its
    function on ``grid`` (:func:`default_grid` by default), with ``seed`` for the random rows and matrices."""
    act = as_activation(activation)
    return {
        "monotonicity": measure_monotonicity(act, grid=grid),
        "log_nonlinearity": measure_log_nonlinearity(act, grid=grid, seed=seed),
        "contextual_normalisation": measure_contextual_normalisation(act, seed=seed),
        "origin_symmetry": measure_origin_symmetry(act, grid=grid),
    }
