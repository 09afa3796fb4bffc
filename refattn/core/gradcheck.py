"""Check a hand-derived vector-Jacobian product three ways.

A VJP ``vjp(u, **args)`` claims to return ``u^T (d fun / d arg)`` for every
argument. :func:`gradcheck` compares it, in float64, with

1. **autograd** differentiating ``fun`` itself: because ``fun`` is written
   against :func:`refattn.core.backend.array_module`, autograd traces the very code
   that runs (``derivations/01-reweighted-softmax.md``, section 5);
2. **central differences** ``D_i = <u, fun(x + h e_i) - fun(x - h e_i)> / (2 h)``
   for every coordinate ``i`` (or a random subset of them, for large inputs).

The cotangent ``u`` is random (standard normal), never all ones: the Jacobian
of a softmax-like map has columns that sum to zero, so an all-ones ``u`` hides
a wrong backward pass (a constant ``u`` passed in gets a warning).

Errors are norm-wise: ``max_abs = max_i |a_i - r_i|`` and
``max_rel = max_abs / max_i |r_i|``, where ``r`` is the reference (autograd or
differences) and ``a`` the analytic VJP. A comparison passes when

    max_abs <= atol + rtol * max_i |r_i| + rounding

where ``rounding`` is 0 for autograd and, for central differences, a bound on
the rounding error of ``D`` (``derivations/22-central-differences.md``). The
error of ``D_i`` against the true ``<u, d fun / d x_i>`` has two parts:

* truncation, ``h^2 <u, f'''> / 6``: it scales with the derivatives, so
  ``rtol`` covers it (``h = 1e-6`` gives ``1.7e-13 |f'''|``); where a
  gradient vanishes because ``<u, fun>`` is constant along ``e_i`` (a shift
  invariance), the truncation is 0 too;
* rounding, about ``u_round * sum_j |u_j| |f_j| / h``: it scales with the
  *values* of ``fun``, not with its derivative, so where the true gradient is
  exactly 0 (softmax's shift invariance) ``D_i`` is pure rounding noise that
  no ``rtol`` covers. gradcheck bounds it by

      rounding = max_i c * u_round * sum_j' |u_j| max(|f_j(x + h e_i)|, |f_j(x - h e_i)|) / h_i

  with ``u_round = 2**-53``, ``c = rounding_safety`` (16) and ``sum_j'`` over
  the outputs that moved (``f_j(x + h e_i) != f_j(x - h e_i)``): an output
  that ``x_i`` does not reach is computed from the same numbers both times,
  comes out bit-identical and adds exactly 0. If ``fun`` returns each entry
  with a relative error of at most ``c u_round``, the two evaluations put at
  most ``2 c u_round |u_j| max|f_j|`` into the numerator, and the division by
  ``2 h`` gives the bound. Why ``c = 16`` covers the outputs checked here
  (activations, losses): each is a short chain of roundings on terms of one
  sign, ``k`` of them costing at most ``k u_round``; and ``exp(z)`` turns the
  rounding of its argument (at most ``u_round |z|``, about twice that once
  the row maximum is subtracted) into relative error, so softmax-like
  outputs with exponents ``|z| < 8`` stay within about ``16 u_round``
  (measured, derivation 22 appendix: at most 5.1 for ``|z| <= 6``, and 5.6
  on the polarity model's exactly-zero gradient). Larger exponents need
  ``c`` of about ``2 max|z| + 8``; an output with cancellation (a small
  result of large terms of both signs) needs the size of the terms over
  ``|f_j|``.

The report says which check failed, for which argument, at which index, and
by how much, with the rounding bound beside it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
from autograd import make_vjp

from .backend import check_real

__all__ = ["Comparison", "GradcheckResult", "gradcheck", "compare", "CHECKS",
           "UNIT_ROUNDOFF", "ROUNDING_SAFETY"]

#: The two independent references the analytic VJP is compared with.
CHECKS = ("autograd", "central")

#: Unit roundoff of float64: ``fl(a op b) = (a op b)(1 + d)`` with ``|d| <= 2**-53``.
UNIT_ROUNDOFF = 2.0 ** -53

#: ``c`` of the rounding bound: the relative error of each output of ``fun``
#: allowed for, in units of :data:`UNIT_ROUNDOFF` (module docstring).
ROUNDING_SAFETY = 16.0


@dataclass(frozen=True)
class Comparison:
    """One analytic-vs-reference comparison for one argument."""

    check: str  #: "autograd" or "central"
    arg: str  #: the argument's name
    max_abs: float  #: largest absolute error
    max_rel: float  #: ``max_abs / max|reference|``
    where: tuple  #: index of the largest absolute error
    scale: float  #: ``max|reference|``
    ok: bool  #: passed ``max_abs <= atol + rtol * scale + rounding``
    n_checked: int  #: number of coordinates compared
    rounding: float = 0.0  #: bound on the reference's rounding error (0 for autograd)
    truncation: float | None = None  #: Richardson estimate of the truncation error, if asked for


@dataclass
class GradcheckResult:
    """All comparisons of one :func:`gradcheck` call."""

    name: str
    rtol: float
    atol: float
    eps: float
    comparisons: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)

    def worst(self, check: str) -> Comparison | None:
        """The comparison with the largest relative error for one check."""
        cs = [c for c in self.comparisons if c.check == check]
        if not cs:
            return None
        return max(cs, key=lambda c: (np.nan_to_num(c.max_rel, nan=np.inf), c.max_abs))

    def max_rel(self, check: str) -> float:
        w = self.worst(check)
        return float("nan") if w is None else w.max_rel

    def failures(self) -> list:
        return [c for c in self.comparisons if not c.ok]

    def describe_failures(self) -> str:
        lines = []
        for c in self.failures():
            trunc = "" if c.truncation is None else f"; truncation estimate {c.truncation:.3e}"
            lines.append(
                f"{self.name}: analytic VJP vs {c.check}, argument {c.arg!r}: "
                f"max abs error {c.max_abs:.3e} at index {c.where} "
                f"(relative {c.max_rel:.3e}; tolerance atol={self.atol:g} + "
                f"rtol={self.rtol:g} * {c.scale:.3e} + rounding bound {c.rounding:.3e}"
                f" = {self.atol + self.rtol * c.scale + c.rounding:.3e}{trunc})"
            )
        return "\n".join(lines)

    def assert_ok(self):
        """Raise ``AssertionError`` naming each failing check, argument and index."""
        if not self.ok:
            raise AssertionError(self.describe_failures())

    def __str__(self):
        rows = [f"gradcheck {self.name} (rtol={self.rtol:g}, atol={self.atol:g}, eps={self.eps:g})"]
        for c in self.comparisons:
            extra = f" rounding<={c.rounding:.1e}" if c.check == "central" else ""
            if c.truncation is not None:
                extra += f" truncation~{c.truncation:.1e}"
            rows.append(
                f"  {c.check:9s} {c.arg:10s} max_abs={c.max_abs:.2e} max_rel={c.max_rel:.2e} "
                f"at {c.where}{extra} {'ok' if c.ok else 'FAIL'}"
            )
        return "\n".join(rows)


def compare(analytic, reference, *, check: str, arg: str, rtol: float, atol: float,
            mask=None, rounding: float = 0.0, truncation: float | None = None) -> Comparison:
    """Compare two arrays norm-wise (optionally only where ``mask`` is True).

    Passes when ``max|analytic - reference| <= atol + rtol * max|reference| +
    rounding``, the error finite; ``rounding`` is a bound on the reference's
    own rounding error (:func:`gradcheck` computes it for central
    differences), ``truncation`` an estimate reported alongside, not added.
    """
    a = np.asarray(analytic, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if a.shape != r.shape:
        raise ValueError(f"{arg}: analytic gradient has shape {a.shape}, reference {r.shape}")
    diff = np.abs(a - r)
    if mask is not None:
        diff = np.where(mask, diff, 0.0)
        r = np.where(mask, r, 0.0)
    diff = np.where(np.isnan(diff), np.inf, diff)  # a NaN is the worst error
    flat = int(np.argmax(diff)) if diff.size else 0
    max_abs = float(diff.reshape(-1)[flat]) if diff.size else 0.0
    scale = float(np.max(np.abs(r))) if r.size else 0.0
    if max_abs == 0.0:
        rel = 0.0
    else:
        rel = max_abs / scale if scale > 0 else float("inf")
    where = tuple(int(i) for i in np.unravel_index(flat, a.shape)) if a.size else ()
    n = int(np.sum(mask)) if mask is not None else int(a.size)
    ok = math.isfinite(max_abs) and max_abs <= atol + rtol * scale + rounding
    return Comparison(check, arg, max_abs, rel, where, scale, bool(ok), n,
                      float(rounding), None if truncation is None else float(truncation))


def _central_differences(fun, args, name, u, eps, coords, c):
    """``D_i = <u, fun(x + h e_i) - fun(x - h e_i)> / (2 h_i)`` at the given
    coordinates, and per coordinate the rounding bound
    ``c u_round sum_j' |u_j| max(|f_j(x + h e_i)|, |f_j(x - h e_i)|) / h_i``
    over the outputs ``j`` that moved.

    ``h_i = (fl(x_i + eps) - fl(x_i - eps)) / 2`` is the half step actually
    taken, so the rounding of ``x_i +- eps`` costs nothing."""
    x = args[name]
    grad = np.zeros(x.size)
    bound = np.zeros(x.size)
    for i in coords:
        xp = x.copy().reshape(-1)
        xm = x.copy().reshape(-1)
        xp[i] += eps
        xm[i] -= eps
        h = (xp[i] - xm[i]) / 2.0
        if not h > 0:
            raise ValueError(f"args[{name!r}]: no step at index {np.unravel_index(i, x.shape)} "
                             f"(value {x.reshape(-1)[i]:g}, eps={eps:g}): the value is not finite "
                             f"or eps is below its float64 spacing")
        fp = np.asarray(fun(**{**args, name: xp.reshape(x.shape)}), dtype=np.float64)
        fm = np.asarray(fun(**{**args, name: xm.reshape(x.shape)}), dtype=np.float64)
        grad[i] = np.sum(u * (fp - fm)) / (2.0 * h)
        moved = fp != fm  # an output x_i does not reach comes out bit-identical: exactly 0
        size = np.where(moved, np.abs(u) * np.maximum(np.abs(fp), np.abs(fm)), 0.0)
        bound[i] = c * UNIT_ROUNDOFF * np.sum(size) / h
    return grad.reshape(x.shape), bound.reshape(x.shape)


def _central(fun, args, name, analytic, u, rng, *, eps, rtol, atol, c, max_fd_coords, richardson):
    """The central-difference :class:`Comparison` for one argument (a random
    subset of ``max_fd_coords`` coordinates if it has more)."""
    n = args[name].size
    coords, sel = np.arange(n), None
    if max_fd_coords is not None and n > max_fd_coords:
        coords = np.sort(rng.choice(n, size=max_fd_coords, replace=False))
        sel = np.isin(np.arange(n), coords).reshape(args[name].shape)
    ref, bound = _central_differences(fun, args, name, u, eps, coords, c)
    trunc = None
    if richardson:  # D(2h) - D(h) = 3 h^2 <u, f'''> / 6 + O(h^4): a third of it estimates the error
        ref2, _ = _central_differences(fun, args, name, u, 2 * eps, coords, c)
        trunc = float(np.max(np.abs(ref2 - ref), initial=0.0)) / 3.0
    return compare(analytic, ref, check="central", arg=name, rtol=rtol, atol=atol, mask=sel,
                   rounding=float(np.max(bound, initial=0.0)), truncation=trunc)


def _check_inputs(args, checks, max_fd_coords):
    """One clear line naming the argument for anything gradcheck cannot use."""
    if not isinstance(args, Mapping) or not args:
        raise TypeError(f"args: expected a non-empty mapping of name to float64 array, got {args!r:.80}")
    for k, v in args.items():
        if not isinstance(v, np.ndarray) or v.dtype != np.float64:
            raise TypeError(f"args[{k!r}]: gradcheck works in float64 NumPy arrays, "
                            f"got {type(v).__name__} {getattr(v, 'dtype', '')}")
    checks = (checks,) if isinstance(checks, str) else tuple(checks)
    unknown = set(checks) - set(CHECKS)
    if unknown:
        raise ValueError(f"checks: unknown check(s) {sorted(unknown)}; expected a subset of {CHECKS}")
    if max_fd_coords is not None and (isinstance(max_fd_coords, bool) or not isinstance(
            max_fd_coords, (int, np.integer)) or max_fd_coords < 1):
        raise ValueError(f"max_fd_coords: expected a positive integer or None, got {max_fd_coords!r}")
    return checks


def _cotangent(cotangent, shape, rng):
    """Standard normal ``u``, or the caller's, checked (and warned about if constant)."""
    if cotangent is None:
        return rng.standard_normal(shape)
    u = np.asarray(cotangent, np.float64)
    if u.shape != shape:
        raise ValueError(f"cotangent: shape {u.shape} does not match the output's {shape}")
    if not np.all(np.isfinite(u)):
        raise ValueError("cotangent: has NaN or infinite entries")
    if u.size > 1 and np.all(u == u.reshape(-1)[0]):
        warnings.warn("cotangent: all entries are equal; a softmax-like Jacobian has columns that "
                      "sum to zero, so a constant cotangent hides a wrong VJP (use a random one)",
                      UserWarning, stacklevel=3)
    return u


def gradcheck(
    fun: Callable,
    args: Mapping[str, np.ndarray],
    vjp: Callable,
    *,
    name: str = "",
    cotangent: np.ndarray | None = None,
    seed: int = 0,
    eps: float = 1e-6,
    rtol: float = 1e-6,
    atol: float = 1e-12,
    checks=CHECKS,
    max_fd_coords: int | None = 2000,
    rounding_safety: float = ROUNDING_SAFETY,
    richardson: bool = False,
) -> GradcheckResult:
    """Compare a hand-derived VJP with autograd and with central differences.

    Parameters
    ----------
    fun : callable
        ``fun(**args) -> ndarray``, written against
        :func:`refattn.core.backend.array_module` so autograd can trace it.
    args : mapping of str to ndarray
        The float64 arguments to differentiate with respect to (anything
        fixed, a mask say, belongs in ``fun``'s closure).
    vjp : callable
        ``vjp(u, **args) -> dict`` mapping each name in ``args`` to
        ``u^T d fun / d arg``, the hand-derived gradient under test.
    name : str
        A label for reports.
    cotangent : ndarray, optional
        The upstream gradient ``u``; standard normal from ``seed`` if omitted
        (a constant one gets a ``UserWarning``).
    seed : int
        Seed of the random cotangent and of the coordinate subset.
    eps : float
        Central-difference step ``h``. Truncation error ~ ``h^2 |f'''| / 6``,
        rounding error ~ ``u_round |f| / h``: their sum is least near
        ``h ~ u_round^(1/3) ~ 5e-6``; 1e-6 is close to it.
    rtol, atol : float
        A comparison passes when ``max_abs <= atol + rtol * max|reference| +
        rounding``, ``rounding`` the central differences' rounding bound.
    checks : sequence of {"autograd", "central"}
        Which references to compare with.
    max_fd_coords : int or None
        At most this many coordinates per argument are differenced (chosen at
        random); ``None`` differences all of them.
    rounding_safety : float
        ``c`` of the rounding bound: the relative error of each output of
        ``fun`` in units of ``u_round`` (module docstring; derivation 22).
    richardson : bool
        Also difference with step ``2 eps`` and report ``max_i |D_i(2 eps) -
        D_i(eps)| / 3``, an estimate of the truncation error, in
        :attr:`Comparison.truncation` (not added to the tolerance: it is
        large where differences straddle a kink, which the check must show).

    Returns
    -------
    GradcheckResult
        One :class:`Comparison` per (check, argument).
    """
    checks = _check_inputs(args, checks, max_fd_coords)
    eps = check_real(eps, "eps", positive=True)
    rtol, atol = check_real(rtol, "rtol", nonnegative=True), check_real(atol, "atol", nonnegative=True)
    c = check_real(rounding_safety, "rounding_safety", nonnegative=True)
    rng = np.random.default_rng(seed)
    u = _cotangent(cotangent, np.shape(fun(**args)), rng)
    analytic = vjp(u, **args)
    if not isinstance(analytic, Mapping):
        raise TypeError(f"vjp: expected a dict of gradients keyed by argument name, got {type(analytic).__name__}")
    result = GradcheckResult(name=name, rtol=rtol, atol=atol, eps=eps)
    for arg_name, x in args.items():
        if arg_name not in analytic:
            raise KeyError(f"vjp: returned no gradient for argument {arg_name!r}")
        a = np.asarray(analytic[arg_name])
        if "autograd" in checks:
            vjp_fn, _ = make_vjp(lambda xv: fun(**{**args, arg_name: xv}))(x)
            result.comparisons.append(compare(a, vjp_fn(u), check="autograd", arg=arg_name, rtol=rtol, atol=atol))
        if "central" in checks:
            result.comparisons.append(_central(fun, args, arg_name, a, u, rng, eps=eps, rtol=rtol, atol=atol, c=c,
                                               max_fd_coords=max_fd_coords, richardson=richardson))
    return result
