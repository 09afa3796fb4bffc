r"""The four properties of TanhMax section 4, measured for every activation.

TanhMax (section 4) asks four things of an activation
``phi(s)_i = g(s_i) / sum_k h(s_k)`` (its Eq. 5):

1. **monotonicity**: g is monotonically increasing;
2. **log-nonlinearity**: log g is not a linear (affine) function
   (Kanai et al. 2018's softmax-bottleneck argument);
3. **origin symmetry**: g is symmetric about the origin, g(-s) = -g(s);
4. **contextual normalisation**: the numerator is compared with the context,
   C(s) = sum_k h(s_k).

Its Table 3 marks six activations against them. This module *computes* the
four properties for every registered activation (it iterates over
:data:`refattn.core.activations.ACTIVATIONS`, so a newly registered activation is
covered without being listed anywhere) and compares the result with the
paper's table, which is the one thing written down here by hand
(:data:`PAPER_TABLE3`). Each criterion, its tolerance and a proof for each
activation class are in ``derivations/06-four-properties.md``.

The measurements use the paper's ``g`` (``Activation.g``) on a grid of scores,
except contextual normalisation, which is a property of the whole map and is
read off its Jacobian (``Activation.jacobian``). Two tolerances, both relative
to the machine epsilon ``eps`` of the grid's dtype:

* ``4 eps``, for "zero up to rounding" (a decrease of g, an odd-symmetry
  defect): g is evaluated to within about 2 ulp, so the difference of two
  values that are equal (or ordered) in exact arithmetic is off by at most
  ``4 eps`` times the larger of them;
* ``sqrt(eps)``, for "clearly not zero" (the residual of an affine fit, an
  off-diagonal Jacobian entry): a quantity that is zero in exact arithmetic
  comes out as a small multiple of ``eps`` (measured: about ``eps`` for
  softmax), so ``sqrt(eps)`` sits about seven decades (float64) above it and
  as far below every honest signal measured here.

``refattn properties`` (:mod:`refattn.studies.four_properties`) measures every activation with
:func:`measure` and compares the result with :data:`PAPER_TABLE3`.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from ..core.activations import ACTIVATIONS, Activation, activation
from ..core.checks import check_int

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
    """The default grid of scores: 4001 points from -8 to 8 (step 0.004, with 0).

    Wide enough that sigmoid is flat to 3e-4 and sinh, exp stay below 3e3,
    dense enough that a decrease or a kink cannot fall between two points
    unnoticed for the registered activations (``derivations/06-four-properties.md``,
    section 1).
    """
    lo, hi, n = _DEFAULT_GRID
    return np.linspace(lo, hi, n)  # (4001,)


def tolerances(dtype=np.float64) -> dict:
    """The two tolerances used by the criteria, for a floating dtype.

    Returns
    -------
    dict
        ``{"eps": eps, "roundoff": 4 eps, "signal": sqrt(eps)}``: ``roundoff``
        bounds what counts as zero (a decrease of g, an odd-symmetry defect),
        ``signal`` what counts as clearly non-zero (an affine-fit residual, an
        off-diagonal Jacobian entry). Reasons in the module docstring and
        ``derivations/06-four-properties.md``, section 1.
    """
    eps = float(np.finfo(dtype).eps)
    return {"eps": eps, "roundoff": 4.0 * eps, "signal": math.sqrt(eps)}


# --------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------


def _as_activation(given) -> Activation:
    """``given``, an :class:`Activation` or a registered activation's name, as an Activation."""
    if isinstance(given, Activation):
        return given
    if isinstance(given, str):
        return activation(given)  # ValueError for an unknown name
    raise TypeError(
        "activation: expected a registered activation's name (one of "
        f"{ACTIVATIONS}) or an Activation, got {type(given).__name__}")


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


def _g_on(act: Activation, s: np.ndarray) -> np.ndarray:
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
    """Is g non-decreasing? (TanhMax section 4, property 1)

    Criterion: on the strictly increasing grid s, every step
    ``g(s[j+1]) - g(s[j])`` is at least ``-4 eps max(|g(s[j])|, |g(s[j+1])|)``,
    i.e. no decrease beyond rounding. Non-decreasing counts as monotone (the
    paper marks ReLU, which is flat for s < 0, as monotone); ``strict`` in the
    evidence says whether every step is positive.
    Derivation: ``derivations/06-four-properties.md``, section 2.

    Parameters
    ----------
    activation : str or Activation
        A registered name, or an activation object.
    grid : array_like, optional
        Strictly increasing finite scores with at least 3 of each sign;
        default :func:`default_grid`.

    Returns
    -------
    dict
        ``{"holds": bool, "evidence": {...}, "criterion": str}``; the evidence
        has the most negative step (absolute and relative to the larger of its
        two values) and where it is, and ``strict``.
    """
    act = _as_activation(activation)
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
    """Is log|g| non-affine? (TanhMax section 4, property 2)

    Criterion: on the grid points where g(s) != 0, fit ``log|g(s)| ~ a s + b``
    by least squares; the property holds when the RMS residual divided by
    the standard deviation of ``log|g|`` (that is ``sqrt(1 - R^2)``) exceeds
    ``sqrt(eps)``. The absolute value covers odd g (signexp: log|g| = |s|,
    a kink; softmax: log g = s, affine). With fewer than 3 such points log|g|
    is trivially affine and the property does not hold.

    Second, independent measurement (``rank=True``): :func:`bottleneck_rank`,
    the numerical rank of ``log|phi(W h)|`` over random h (Kanai et al. 2018,
    cited by TanhMax); it is reported, and compared, but does not decide.
    Derivation: ``derivations/06-four-properties.md``, section 3.

    Parameters
    ----------
    activation : str or Activation
    grid : array_like, optional
        As in :func:`measure_monotonicity`.
    seed : int
        Seed of the random W and h of the rank measurement.
    rank : bool
        Whether to run the rank measurement.

    Returns
    -------
    dict
        ``{"holds", "evidence", "criterion"}``; the evidence has the relative
        residual, the fitted slope and intercept, the largest second divided
        difference ``2 f[s0, s1, s2]`` of log|g| over consecutive points with
        g != 0 (an estimate of the second derivative, or of a kink), and,
        with ``rank``, the rank measurement under ``"bottleneck_rank"``.
    """
    act = _as_activation(activation)
    s = _check_grid(grid)  # (m,)
    seed = check_int(seed, "seed", 0)
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
    """The numerical rank of ``log|phi(W h)|`` over random h (Kanai et al. 2018).

    For a fixed random ``W`` of shape (n, d), d < n - 1, stack the rows
    ``log|phi(W h_t)|`` for ``samples`` random vectors ``h_t`` into a matrix
    M of shape (samples, n). For softmax, ``log phi(z) = z - lse(z) 1``, so
    every row lies in span(columns of W, 1) and ``rank M <= d + 1``: the
    softmax bottleneck. An activation whose log|g| is not affine is not
    confined to that subspace and its rank exceeds d + 1.

    Two regimes: ``"mixed"`` draws W and h from N(0, 1), so scores of both
    signs occur; ``"positive"`` takes absolute values of both, so every score
    is positive (where relu and cosformer have no zero weights). Rows with a
    zero weight (log 0 = -inf) are dropped; a regime with fewer than 2n rows
    left is reported as not applicable, with the reason. The rank is
    NumPy's: singular values above ``sigma_max * max(M.shape) * eps``.
    Derivation: ``derivations/06-four-properties.md``, section 3.2.

    Parameters
    ----------
    activation : str or Activation
    n, d : int
        Output and input dimension; ``1 <= d <= n - 2``.
    samples : int
        Number of random h per regime, at least 2n.
    seed : int
        Seed of W and h.

    Returns
    -------
    dict
        ``{"n", "d", "bound": d + 1, "samples", "regimes": {regime: {...}},
        "exceeds_bound": bool}``; each regime has ``applicable``, ``rank``,
        ``rows_used``, ``singular_values_relative`` (sigma / sigma_max) and
        ``first_beyond_bound`` (sigma_{d+2} / sigma_max), or ``reason``.
        ``exceeds_bound`` is True when some applicable regime's rank exceeds
        d + 1.
    """
    act = _as_activation(activation)
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
        if int(ok.sum()) < 2 * n:
            regimes[regime] = {
                "applicable": False, "rank": None, "rows_used": int(ok.sum()),
                "reason": (f"phi has a zero weight in {samples - int(ok.sum())} of {samples} "
                           f"rows (g vanishes there), so log|phi| = -inf; fewer than "
                           f"2n = {2 * n} rows remain"),
            }
            continue
        M = np.log(np.abs(phi[ok]))  # (rows, n)
        sv = np.linalg.svd(M, compute_uv=False)  # (n,) descending
        cut = sv[0] * max(M.shape) * np.finfo(M.dtype).eps
        regimes[regime] = {
            "applicable": True,
            "rank": int(np.sum(sv > cut)),
            "rows_used": int(ok.sum()),
            "singular_values_relative": [float(v) for v in sv / sv[0]],
            "first_beyond_bound": float(sv[d + 1] / sv[0]),
        }
    exceeds = any(r["applicable"] and r["rank"] > d + 1 for r in regimes.values())
    return {"n": n, "d": d, "bound": d + 1, "samples": samples, "regimes": regimes,
            "exceeds_bound": bool(exceeds)}


# --------------------------------------------------------------------------
# 3. Contextual normalisation
# --------------------------------------------------------------------------


def measure_contextual_normalisation(activation, *, seed=0, n=6, rows=8) -> dict:
    """Does phi_i depend on the other scores? (TanhMax section 4, property 4)

    Criterion: for phi_i = g(s_i) / C(s), C(s) = sum_k h(s_k), the weight of
    token j responds to another token's score, d phi_j / d s_k != 0 for some
    k != j. On ``rows`` random rows s ~ N(0, 4) of length n, the Jacobian
    ``J = Activation.jacobian(s)`` (derivation 01, Eq. 01.R3) gives the ratio
    ``max_{j != k} |J[j, k]| / max_j |J[j, j]|``; the property holds when the
    largest ratio over the rows exceeds sqrt(eps). Where h is constant
    (linear, relu: C = n) the off-diagonal part is exactly 0:
    ``d phi_j / d s_k = -g(s_j) h'(s_k) / C^2`` (TanhMax, Eq. 4's pi_j).
    Rows whose Jacobian has a zero diagonal (no normaliser: J = 0) are skipped.
    Derivation: ``derivations/06-four-properties.md``, section 4.

    Parameters
    ----------
    activation : str or Activation
    seed : int
        Seed of the random rows.
    n, rows : int
        Row length (>= 2) and number of rows (>= 1).

    Returns
    -------
    dict
        ``{"holds", "evidence", "criterion"}``; the evidence has the largest
        ratio, the largest off-diagonal and diagonal entries, and how many
        rows were skipped.
    """
    act = _as_activation(activation)
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
    """Is g odd, g(-s) = -g(s)? (TanhMax section 4, property 3)

    Criterion: at every grid point, ``|g(s) + g(-s)| <= 4 eps max(|g(s)|, |g(-s)|)``.
    The evidence also gives the even defect ``|g(s) - g(-s)|`` (relative in
    the same way), so an even g (expressive) shows up as such, and a
    ``parity`` label: "odd", "even", "odd and even" (g = 0) or "neither".
    Derivation: ``derivations/06-four-properties.md``, section 5.

    Parameters
    ----------
    activation : str or Activation
    grid : array_like, optional
        As in :func:`measure_monotonicity` (it need not be symmetric; g is
        evaluated at s and at -s).

    Returns
    -------
    dict
        ``{"holds", "evidence", "criterion"}``; the evidence has the largest
        relative odd and even defects (each between 0 and 2) and where the
        odd one is largest.
    """
    act = _as_activation(activation)
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
    """The four properties of TanhMax section 4 for one activation.

    Parameters
    ----------
    activation : str or Activation
        A registered name, or an activation object.
    grid : array_like, optional
        Scores on which g is examined (:func:`default_grid` by default).
    seed : int
        Seed of the random rows and matrices (normalisation, rank).

    Returns
    -------
    dict
        ``{property: {"holds": bool, "evidence": {...}, "criterion": str}}``
        for each of :data:`PROPERTIES`, from :func:`measure_monotonicity`,
        :func:`measure_log_nonlinearity`, :func:`measure_contextual_normalisation`
        and :func:`measure_origin_symmetry`.
        Derivation: ``derivations/06-four-properties.md``.
    """
    act = _as_activation(activation)
    grid = _check_grid(grid)
    seed = check_int(seed, "seed", 0)
    return {
        "monotonicity": measure_monotonicity(act, grid=grid),
        "log_nonlinearity": measure_log_nonlinearity(act, grid=grid, seed=seed),
        "contextual_normalisation": measure_contextual_normalisation(act, seed=seed),
        "origin_symmetry": measure_origin_symmetry(act, grid=grid),
    }
