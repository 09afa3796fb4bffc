"""Check a hand-derived vector-Jacobian product three ways (``derivations/22-central-differences.md``).

A VJP ``vjp(u, **args)`` claims to return ``u^T d fun / d arg`` for every
argument. :func:`gradcheck` compares it, in float64, with **autograd**
differentiating ``fun`` itself (the very code that runs, written against
``array_module``) and with **central differences**
``D_i = <u, fun(x + h e_i) - fun(x - h e_i)> / 2h``. The cotangent ``u`` is
random, never all ones: a softmax-like Jacobian has columns that sum to zero,
so an all-ones ``u`` hides a wrong backward pass.

A comparison passes when ``max_i |a_i - r_i| <= atol + rtol max_i |r_i| +
rounding``, ``a`` the analytic VJP and ``r`` the reference. ``rounding`` is 0
for autograd. For differences it bounds the rounding error of ``D``, which
scales with the *values* of ``fun`` over ``h``, so no ``rtol`` covers it where
the true gradient is 0 (softmax's shift invariance). Derivation 22 derives

    rounding = max_i c u_r sum_j' |u_j| max(|f_j(x + h e_i)|, |f_j(x - h e_i)|) / h,

``u_r = 2^-53`` the unit roundoff of float64, ``c = 16``, ``sum_j'`` over the
outputs that moved (the others are computed from the same numbers twice and
add exactly 0). Truncation, ``h^2 <u, f'''> / 6``, scales with the
derivatives, so ``rtol`` covers it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
from autograd import make_vjp

from .checks import check_cotangent, gradcheck_args

__all__ = ["Comparison", "GradcheckResult", "gradcheck", "compare", "CHECKS", "UNIT_ROUNDOFF",
           "ROUNDING_SAFETY"]

CHECKS = ("autograd", "central")  #: the two references the analytic VJP is compared with
UNIT_ROUNDOFF = 2.0 ** -53  #: u_r of float64: fl(a op b) = (a op b)(1 + d), |d| <= u_r
ROUNDING_SAFETY = 16.0  #: c of the rounding bound, in units of u_r (derivation 22)


@dataclass(frozen=True)
class Comparison:
    """One analytic-against-reference comparison for one argument."""

    check: str  #: "autograd" or "central"
    arg: str  #: the argument's name
    max_abs: float  #: largest absolute error
    max_rel: float  #: ``max_abs / max|reference|``
    where: tuple  #: index of the largest absolute error
    scale: float  #: ``max|reference|``
    ok: bool  #: passed ``max_abs <= atol + rtol * scale + rounding``
    n_checked: int  #: coordinates compared
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
        return bool(self.comparisons) and all(c.ok for c in self.comparisons)  # nothing compared proves nothing

    def worst(self, check: str) -> Comparison | None:
        """The comparison with the largest relative error for one check."""
        cs = [c for c in self.comparisons if c.check == check]
        return max(cs, key=lambda c: (np.nan_to_num(c.max_rel, nan=np.inf), c.max_abs)) if cs else None

    def max_rel(self, check: str) -> float:
        return float("nan") if self.worst(check) is None else self.worst(check).max_rel

    def failures(self) -> list:
        return [c for c in self.comparisons if not c.ok]

    def describe_failures(self) -> str:
        """One line per failing comparison: which check, argument, index, error and tolerance."""
        if not self.comparisons:
            return f"{self.name}: no comparison was made, so nothing was checked"
        return "\n".join(
            f"{self.name}: analytic VJP vs {c.check}, argument {c.arg!r}: max abs error {c.max_abs:.3e} at "
            f"index {c.where} (relative {c.max_rel:.3e}; tolerance atol={self.atol:g} + rtol={self.rtol:g} * "
            f"{c.scale:.3e} + rounding bound {c.rounding:.3e} = {self.atol + self.rtol * c.scale + c.rounding:.3e}"
            + ("" if c.truncation is None else f"; truncation estimate {c.truncation:.3e}") + ")"
            for c in self.failures())

    def assert_ok(self):
        """Raise ``AssertionError`` naming each failing check, argument and index."""
        if not self.ok:
            raise AssertionError(self.describe_failures())

    def __str__(self):
        rows = [f"gradcheck {self.name} (rtol={self.rtol:g}, atol={self.atol:g}, eps={self.eps:g})"]
        for c in self.comparisons:
            extra = f" rounding<={c.rounding:.1e}" if c.check == "central" else ""
            extra += "" if c.truncation is None else f" truncation~{c.truncation:.1e}"
            rows.append(f"  {c.check:9s} {c.arg:10s} max_abs={c.max_abs:.2e} max_rel={c.max_rel:.2e} "
                        f"at {c.where}{extra} {'ok' if c.ok else 'FAIL'}")
        return "\n".join(rows)


def compare(analytic, reference, *, check: str, arg: str, rtol: float, atol: float,
            mask=None, rounding: float = 0.0, truncation: float | None = None) -> Comparison:
    """Compare two arrays norm-wise (only where ``mask`` is True, if given).

    Passes when ``max|analytic - reference| <= atol + rtol max|reference| +
    rounding`` and the error is finite (a NaN is the worst error).
    """
    a, r = np.asarray(analytic, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if a.shape != r.shape:
        raise ValueError(f"{arg}: analytic gradient has shape {a.shape}, reference {r.shape}")
    diff = np.abs(a - r)
    if mask is not None:
        diff, r = np.where(mask, diff, 0.0), np.where(mask, r, 0.0)
    diff = np.where(np.isnan(diff), np.inf, diff)
    flat = int(np.argmax(diff)) if diff.size else 0
    max_abs = float(diff.reshape(-1)[flat]) if diff.size else 0.0
    scale = float(np.max(np.abs(r))) if r.size else 0.0
    rel = 0.0 if max_abs == 0.0 else (max_abs / scale if scale > 0 else math.inf)
    where = tuple(int(i) for i in np.unravel_index(flat, a.shape)) if a.size else ()
    ok = math.isfinite(max_abs) and max_abs <= atol + rtol * scale + rounding
    return Comparison(check, arg, max_abs, rel, where, scale, bool(ok),
                      int(np.sum(mask)) if mask is not None else int(a.size), float(rounding),
                      None if truncation is None else float(truncation))


def _central_differences(fun, args, name, u, eps, coords, c):
    """``D_i = <u, fun(x + h e_i) - fun(x - h e_i)> / 2 h_i`` at ``coords``, and each one's rounding bound.

    ``h_i = (fl(x_i + eps) - fl(x_i - eps)) / 2`` is the half step actually
    taken, so the rounding of ``x_i +- eps`` costs nothing.
    """
    x = args[name]
    grad, bound = np.zeros(x.size), np.zeros(x.size)
    for i in coords:
        xp, xm = x.copy().reshape(-1), x.copy().reshape(-1)
        xp[i] += eps
        xm[i] -= eps
        h = (xp[i] - xm[i]) / 2.0
        if not h > 0:
            raise ValueError(f"args[{name!r}]: no step at index {np.unravel_index(i, x.shape)} (value "
                             f"{x.reshape(-1)[i]:g}, eps={eps:g}): the value is not finite or eps is below "
                             f"its float64 spacing")
        fp = np.asarray(fun(**{**args, name: xp.reshape(x.shape)}), dtype=np.float64)
        fm = np.asarray(fun(**{**args, name: xm.reshape(x.shape)}), dtype=np.float64)
        grad[i] = np.sum(u * (fp - fm)) / (2.0 * h)
        moved = fp != fm  # an output x_i does not reach comes out bit-identical: exactly 0
        bound[i] = c * UNIT_ROUNDOFF * np.sum(np.where(moved, np.abs(u) * np.maximum(abs(fp), abs(fm)), 0.0)) / h
    return grad.reshape(x.shape), bound.reshape(x.shape)


def gradcheck(fun: Callable, args: Mapping[str, np.ndarray], vjp: Callable, *, name: str = "",
              cotangent=None, seed: int = 0, eps: float = 1e-6, rtol: float = 1e-6, atol: float = 1e-12,
              checks=CHECKS, max_fd_coords: int | None = 2000, rounding_safety: float = ROUNDING_SAFETY,
              richardson: bool = False) -> GradcheckResult:
    """Compare a hand-derived VJP with autograd and with central differences.

    Parameters
    ----------
    fun : callable, ``fun(**args) -> ndarray``, written against ``array_module`` so autograd can trace it
    args : mapping of str to float64 ndarray, the arguments to differentiate (a mask belongs in ``fun``)
    vjp : callable, ``vjp(u, **args) -> dict`` of ``u^T d fun / d arg`` per argument: the gradient under test
    name : str, a label for reports
    cotangent : ndarray, optional; standard normal from ``seed`` if omitted (a constant one draws a warning,
        an all-zero one is refused: every VJP, right or wrong, is 0 against it)
    seed : int, seed of the random cotangent and of the coordinate subset
    eps, rtol, atol, rounding_safety : float
        The step ``h`` (truncation and rounding are least in sum near ``u_r^(1/3)``, about 5e-6),
        the tolerances, and ``c`` of the rounding bound (module docstring).
    checks : non-empty sequence of {"autograd", "central"} (none is refused: a check of nothing cannot fail)
    max_fd_coords : int or None, at most this many coordinates per argument differenced (at random)
    richardson : bool, also report ``max |D(2 eps) - D(eps)| / 3``, an estimate of the truncation error

    Returns
    -------
    GradcheckResult, one :class:`Comparison` per (check, argument); ``ok`` only if every one passed and
    there was at least one

    Raises
    ------
    TypeError, ValueError
        Before any comparison, for arguments that would make the check pass vacuously (no checks, an
        empty argument or output, an all-zero cotangent) and for malformed ones.
    """
    which, eps, rtol, atol, c = gradcheck_args(args, checks, max_fd_coords, eps, rtol, atol, rounding_safety)
    rng = np.random.default_rng(seed)
    u = check_cotangent(cotangent, np.shape(fun(**args)), rng)
    analytic = vjp(u, **args)
    if not isinstance(analytic, Mapping):
        raise TypeError(f"vjp: expected a dict of gradients keyed by argument name, got {type(analytic).__name__}")
    result = GradcheckResult(name=name, rtol=rtol, atol=atol, eps=eps)
    for arg, x in args.items():
        if arg not in analytic:
            raise KeyError(f"vjp: returned no gradient for argument {arg!r}")
        a = np.asarray(analytic[arg])
        if "autograd" in which:
            reference = make_vjp(lambda xv: fun(**{**args, arg: xv}))(x)[0](u)
            result.comparisons.append(compare(a, reference, check="autograd", arg=arg, rtol=rtol, atol=atol))
        if "central" in which:
            coords, sel = np.arange(x.size), None
            if max_fd_coords is not None and x.size > max_fd_coords:
                coords = np.sort(rng.choice(x.size, size=max_fd_coords, replace=False))
                sel = np.isin(np.arange(x.size), coords).reshape(x.shape)
            ref, bound = _central_differences(fun, args, arg, u, eps, coords, c)
            trunc = None
            if richardson:  # D(2h) - D(h) = 3 h^2 <u, f'''> / 6 + O(h^4): a third of it estimates the error
                trunc = float(np.max(np.abs(_central_differences(fun, args, arg, u, 2 * eps, coords, c)[0] - ref),
                                     initial=0.0)) / 3.0
            result.comparisons.append(compare(a, ref, check="central", arg=arg, rtol=rtol, atol=atol, mask=sel,
                                              rounding=float(np.max(bound, initial=0.0)), truncation=trunc))
    return result
