"""Check a hand-derived vector-Jacobian product three ways.

A VJP ``vjp(u, **args)`` claims to return ``u^T (d fun / d arg)`` for every
argument. :func:`gradcheck` compares it, in float64, with

1. **autograd** differentiating ``fun`` itself: because ``fun`` is written
   against :func:`refattn.backend.array_module`, autograd traces the very code
   that runs (``derivations/01-reweighted-softmax.md``, section 6);
2. **central differences** ``<u, fun(x + eps e_i) - fun(x - eps e_i)> / (2 eps)``
   for every coordinate ``i`` (or a random subset of them, for large inputs).

The cotangent ``u`` is random (standard normal), never all ones: the Jacobian
of a softmax-like map has columns that sum to zero, so an all-ones ``u`` hides
a wrong backward pass.

Errors are norm-wise: ``max_abs = max_i |a_i - r_i|`` and
``max_rel = max_abs / max_i |r_i|``, where ``r`` is the reference (autograd or
differences) and ``a`` the analytic VJP. A comparison passes when
``max_abs <= atol + rtol * max_i |r_i|``. The report says which check failed,
for which argument, at which index, and by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
from autograd import make_vjp

__all__ = ["Comparison", "GradcheckResult", "gradcheck", "compare", "CHECKS"]

#: The two independent references the analytic VJP is compared with.
CHECKS = ("autograd", "central")


@dataclass(frozen=True)
class Comparison:
    """One analytic-vs-reference comparison for one argument."""

    check: str  #: "autograd" or "central"
    arg: str  #: the argument's name
    max_abs: float  #: largest absolute error
    max_rel: float  #: ``max_abs / max|reference|``
    where: tuple  #: index of the largest absolute error
    scale: float  #: ``max|reference|``
    ok: bool  #: passed ``max_abs <= atol + rtol * scale``
    n_checked: int  #: number of coordinates compared


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
            lines.append(
                f"{self.name}: analytic VJP vs {c.check}, argument {c.arg!r}: "
                f"max abs error {c.max_abs:.3e} at index {c.where} "
                f"(relative {c.max_rel:.3e}; tolerance atol={self.atol:g} + "
                f"rtol={self.rtol:g} * {c.scale:.3e})"
            )
        return "\n".join(lines)

    def assert_ok(self):
        """Raise ``AssertionError`` naming each failing check, argument and index."""
        if not self.ok:
            raise AssertionError(self.describe_failures())

    def __str__(self):
        rows = [f"gradcheck {self.name} (rtol={self.rtol:g}, atol={self.atol:g}, eps={self.eps:g})"]
        for c in self.comparisons:
            rows.append(
                f"  {c.check:9s} {c.arg:10s} max_abs={c.max_abs:.2e} max_rel={c.max_rel:.2e} "
                f"at {c.where} {'ok' if c.ok else 'FAIL'}"
            )
        return "\n".join(rows)


def compare(analytic, reference, *, check: str, arg: str, rtol: float, atol: float,
            mask=None) -> Comparison:
    """Compare two arrays norm-wise (optionally only where ``mask`` is True)."""
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
    return Comparison(check, arg, max_abs, rel, where, scale,
                      bool(max_abs <= atol + rtol * scale), n)


def _central_differences(fun, args, name, u, eps, coords):
    """<u, d fun / d args[name]> by central differences at the given coordinates."""
    x = args[name]
    grad = np.zeros_like(x)
    flat_grad = grad.reshape(-1)
    for i in coords:
        xp = x.copy().reshape(-1)
        xm = x.copy().reshape(-1)
        xp[i] += eps
        xm[i] -= eps
        fp = np.asarray(fun(**{**args, name: xp.reshape(x.shape)}))
        fm = np.asarray(fun(**{**args, name: xm.reshape(x.shape)}))
        flat_grad[i] = np.sum(u * (fp - fm)) / (2.0 * eps)
    return grad


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
) -> GradcheckResult:
    """Compare a hand-derived VJP with autograd and with central differences.

    Parameters
    ----------
    fun : callable
        ``fun(**args) -> ndarray``, written against
        :func:`refattn.backend.array_module` so autograd can trace it.
    args : mapping of str to ndarray
        The float64 arguments to differentiate with respect to (anything
        fixed, a mask say, belongs in ``fun``'s closure).
    vjp : callable
        ``vjp(u, **args) -> dict`` mapping each name in ``args`` to
        ``u^T d fun / d arg``, the hand-derived gradient under test.
    name : str
        A label for reports.
    cotangent : ndarray, optional
        The upstream gradient ``u``; standard normal from ``seed`` if omitted.
    seed : int
        Seed of the random cotangent and of the coordinate subset.
    eps : float
        Central-difference step (absolute). Truncation error is O(eps^2),
        rounding error O(1e-16 / eps): 1e-6 balances them in float64.
    rtol, atol : float
        A comparison passes when ``max_abs <= atol + rtol * max|reference|``.
    checks : sequence of {"autograd", "central"}
        Which references to compare with.
    max_fd_coords : int or None
        At most this many coordinates per argument are differenced (chosen at
        random); ``None`` differences all of them.

    Returns
    -------
    GradcheckResult
        One :class:`Comparison` per (check, argument).
    """
    for k, v in args.items():
        if not isinstance(v, np.ndarray) or v.dtype != np.float64:
            raise TypeError(f"args[{k!r}]: gradcheck works in float64 NumPy arrays, "
                            f"got {type(v).__name__} {getattr(v, 'dtype', '')}")
    unknown = set(checks) - set(CHECKS)
    if unknown:
        raise ValueError(f"checks: unknown check(s) {sorted(unknown)}; expected a subset of {CHECKS}")
    rng = np.random.default_rng(seed)
    out = np.asarray(fun(**args))
    u = rng.standard_normal(out.shape) if cotangent is None else np.asarray(cotangent, np.float64)
    if u.shape != out.shape:
        raise ValueError(f"cotangent: shape {u.shape} does not match the output's {out.shape}")
    analytic = vjp(u, **args)
    result = GradcheckResult(name=name, rtol=rtol, atol=atol, eps=eps)
    for arg_name, x in args.items():
        if arg_name not in analytic:
            raise KeyError(f"vjp: returned no gradient for argument {arg_name!r}")
        a = np.asarray(analytic[arg_name])
        if "autograd" in checks:
            def f_of(xv, _n=arg_name):
                return fun(**{**args, _n: xv})
            vjp_fn, _ = make_vjp(f_of)(x)
            ref = vjp_fn(u)
            result.comparisons.append(
                compare(a, ref, check="autograd", arg=arg_name, rtol=rtol, atol=atol))
        if "central" in checks:
            n = x.size
            if max_fd_coords is None or n <= max_fd_coords:
                coords = np.arange(n)
                sel = None
            else:
                coords = np.sort(rng.choice(n, size=max_fd_coords, replace=False))
                sel = np.zeros(n, bool)
                sel[coords] = True
                sel = sel.reshape(x.shape)
            ref = _central_differences(fun, args, arg_name, u, eps, coords)
            result.comparisons.append(
                compare(a, ref, check="central", arg=arg_name, rtol=rtol, atol=atol, mask=sel))
    return result
