r"""signexp at a score of 0: analytic VJP, autograd and central differences side by side.

SignExp / Cog attention is ``phi_i = sign(s_i) e^{|s_i|} / C``,
``C = sum_k e^{|s_k|}``. Its numerator ``g(s) = sign(s) e^{|s|}`` jumps from
-1 to +1 at ``s = 0``; as a distribution ``g' = e^{|s|} + 2 delta(s)``. The
library's VJP (``refattn.core.activations.SignExp``) and autograd both use the
pointwise convention ``rho'(0) = 0``, ``sign(0) = 0``; central differences
whose window ``[delta - eps, delta + eps]`` contains 0 see the jump instead,
as a spike of height ``~ jump / (2 eps)``.

:func:`signexp_near_zero` puts one entry of a random row at each of a list
of offsets ``delta`` and returns the three estimates of that entry's
gradient together with their closed-form predictions
(``derivations/09-signexp-at-zero.md``). ``refattn signexp-at-zero``
(:mod:`refattn.studies.signexp_zero`) prints the table quoted there.
"""

from __future__ import annotations

import numpy as np
from autograd import make_vjp

from ..core.activations import activation

__all__ = ["DEFAULT_OFFSETS", "signexp_near_zero"]

#: 0, then +-1e-8, ..., +-1e-1 (with the default eps = 1e-6, +-1e-6 lands exactly on the window's edge).
DEFAULT_OFFSETS = (0.0,) + tuple(sgn * 10.0 ** -k for k in range(8, 0, -1) for sgn in (1.0, -1.0))


def _check_inputs(offsets, n, eps, seed, j):
    for name, v in (("n", n), ("seed", seed), ("j", j)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name}: expected an int, got {type(v).__name__}")
    if n < 1:
        raise ValueError(f"n: expected a row length >= 1, got {n}")
    if not -n <= j < n:
        raise ValueError(f"j: expected an entry index in [-{n}, {n}), got {j}")
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (float, int, np.floating, np.integer)):
        raise TypeError(f"eps: expected a float, got {type(eps).__name__}")
    if not (np.isfinite(eps) and 0.0 < eps <= 0.5):
        raise ValueError(f"eps: expected a finite step 0 < eps <= 0.5, got {eps}")
    off = np.asarray(offsets)
    if off.dtype.kind not in "iuf":
        raise TypeError(f"offsets: expected real numbers, got dtype {off.dtype}")
    off = off.astype(np.float64).reshape(-1)
    if off.size == 0:
        raise ValueError("offsets: expected at least one offset, got none")
    if not np.all(np.isfinite(off)) or np.any(np.abs(off) > 1.0):
        raise ValueError("offsets: expected finite offsets with |delta| <= 1 (the study is about 0)")
    return off, int(j) % n


def signexp_near_zero(offsets=DEFAULT_OFFSETS, *, n=5, eps=1e-6, seed=0, j=0):
    """Three estimates of ``d(u . phi)/d s_j`` for signexp as ``s_j`` crosses 0 (derivation 09, signexp at zero).

    A row ``s`` and a cotangent ``u`` (length ``n``, N(0, 1) from ``seed``) are drawn once; entry ``j``
    is set to each offset ``delta`` (finite, ``|delta| <= 1``). With ``R = sum_{i != j} e^{|s_i|}`` and
    ``V = sum_{i != j} u_i sign(s_i) e^{|s_i|}``, ``u . phi`` at ``s_j = x`` is
    ``F(x) = (u_j sign(x) e^{|x|} + V) / (R + e^{|x|})`` (Eq. 09.Z2). For each ``delta``:

    * ``analytic``, the hand-derived VJP (Eq. 01.R4), and ``autograd``, autograd's VJP of the same forward;
    * ``central``, ``(F(delta + eps) - F(delta - eps)) / (2 eps)`` by the library's forward
      (``0 < eps <= 0.5``), and ``central_exact``, the same quotient in closed form (Eq. 09.Z6);
    * ``central_predicted``, the quotient's first-order prediction (Eqs. 09.Z7-09.Z8, :func:`_predicted`).

    Returns
    -------
    dict
        ``offsets``, ``eps``, ``n``, ``j``, ``seed``, the row ``s`` (``s[j]`` as drawn) and ``u``; per offset
        the arrays ``analytic``, ``autograd``, ``central``, ``central_exact``, ``central_predicted`` and the
        list ``regime`` (``"straddles"``, ``"touches"``, ``"one side"``); ``R``, ``V``, ``jump`` (Eq. 09.Z3),
        ``limit_plus``, ``limit_minus`` (Eq. 09.Z4) and ``at_zero``, the library's value at 0 (Eq. 09.Z5).
    """
    off, j = _check_inputs(offsets, n, eps, seed, j)
    eps = float(eps)
    act = activation("signexp")
    rng = np.random.default_rng(seed)
    s0 = rng.standard_normal(n)  # (n,)
    u = rng.standard_normal(n)  # (n,) random cotangent, never all ones
    others = np.arange(n) != j
    R = float(np.sum(np.exp(np.abs(s0[others]))))  # sum_{i != j} e^{|s_i|}
    V = float(np.sum(u[others] * np.sign(s0[others]) * np.exp(np.abs(s0[others]))))
    jump = 2.0 * u[j] / (R + 1.0)  # F(0+) - F(0-), Eq. 09.Z3
    lim_p = (u[j] * R - V) / (R + 1.0) ** 2  # Eq. 09.Z4
    lim_m = (u[j] * R + V) / (R + 1.0) ** 2

    def row(x):  # s with s_j = x
        return np.where(others, s0, x)

    def F(x):
        return float(u @ act(row(x)))

    res = {k: np.empty(off.size) for k in
           ("analytic", "autograd", "central", "central_exact", "central_predicted")}
    regime = []
    for i, delta in enumerate(off):
        s = row(delta)
        res["analytic"][i] = act.backward(u, act.forward(s)[1])[j]
        vjp_fn, _ = make_vjp(act)(s)
        res["autograd"][i] = vjp_fn(u)[j]
        xp, xm = delta + eps, delta - eps
        res["central"][i] = (F(xp) - F(xm)) / (2.0 * eps)
        res["central_exact"][i] = _quotient_closed_form(xp, xm, eps, u[j], R, V)
        where, res["central_predicted"][i] = _predicted(delta, eps, jump, lim_p, lim_m, res["analytic"][i])
        regime.append(where)
    return {"offsets": off, "eps": eps, "n": int(n), "j": j, "seed": int(seed), "s": s0, "u": u,
            **res, "regime": regime, "R": R, "V": V, "jump": float(jump),
            "limit_plus": float(lim_p), "limit_minus": float(lim_m), "at_zero": 0.0}


def _predicted(delta, eps, jump, lim_p, lim_m, analytic):
    """``(regime, prediction)`` of the central quotient at ``delta`` (Eqs. 09.Z7-09.Z8): a window that
    straddles 0 sees ``J / (2 eps)`` plus the mean of the one-sided slopes weighted by its two sides; one
    that touches 0 sees half the jump (``sign(0) = 0`` puts ``F(0)`` at its midpoint); any other the
    analytic value."""
    if abs(delta) < eps:
        return "straddles", jump / (2 * eps) + ((eps + delta) * lim_p + (eps - delta) * lim_m) / (2 * eps)
    if abs(delta) == eps:
        return "touches", jump / (4 * eps) + (lim_p if delta > 0 else lim_m)
    return "one side", analytic


def _quotient_closed_form(xp, xm, eps, uj, R, V):
    """``(F(xp) - F(xm)) / (2 eps)`` from Eq. 09.Z2, brought to one fraction (Eq. 09.Z6).

    With ``e+- = e^{|x+-|}``, ``C+- = R + e+-`` and ``sign+- = sign(x+-)``:

        F(xp) - F(xm) = [u_j (R (sign+ e+ - sign- e-) + e+ e- (sign+ - sign-)) - V (e+ - e-)] / (C+ C-),

    where ``e+ - e- = 2 e^{(|x+|+|x-|)/2} sinh((|x+| - |x-|)/2)`` avoids the
    cancellation of two nearly equal exponentials, and so does
    ``sign+ e+ - sign- e- = sign (e+ - e-)`` when both points are on one side.
    """
    ep, em = np.exp(abs(xp)), np.exp(abs(xm))
    sp, sm = np.sign(xp), np.sign(xm)
    diff = 2.0 * np.exp(0.5 * (abs(xp) + abs(xm))) * np.sinh(0.5 * (abs(xp) - abs(xm)))  # e+ - e-
    lin = sp * diff if sp == sm else sp * ep - sm * em  # sign+ e+ - sign- e-
    num = uj * (R * lin + ep * em * (sp - sm)) - V * diff
    return float(num / ((R + ep) * (R + em)) / (2.0 * eps))
