"""One grader per exercise, in the order of ``exercises/README.md``.

Each grader takes the student's module and a :class:`~refattn.exercises.core.Report`,
draws random inputs (and random cotangents, never all ones, but where the
exercise is about the all-ones cotangent) from a fixed seed, and compares the
student's answer with the library: the activations' own methods, autograd,
:func:`refattn.core.gradcheck.gradcheck`, or a closed form from the derivations.
Every failure says where (the worst input), what was expected and what came
back. The statements are ``exercises/NN-name.md``; the model solutions
``exercises/solutions/NN-name.py``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import autograd.numpy as anp
from autograd import make_vjp

from ..core.activations import activation
from ..core.gradcheck import UNIT_ROUNDOFF, gradcheck
from .core import Exercise, is_real_number

__all__ = ["EXERCISES"]


def _rng(number):
    return np.random.default_rng(1000 + number)


def _gradcheck_vjp(report, label, fun, args, vjp, seed):
    """Run :func:`gradcheck` on the student's VJP and record one check naming each failure."""
    res = gradcheck(fun, args, vjp, name=label, seed=seed, rtol=1e-6, atol=0.0)
    if res.ok:
        return report.check(True, f"{label}: gradcheck passes (autograd rel. error "
                                  f"{res.max_rel('autograd'):.1e}, central {res.max_rel('central'):.1e}; "
                                  f"random cotangent)")
    return report.check(False, res.describe_failures().replace("\n", "; "))


# ------------------------------------------------------------------------------
# 01 softmax's VJP
# ------------------------------------------------------------------------------


def grade_softmax_vjp(m, report):
    act, rng = activation("softmax"), _rng(1)
    for shape, shift in (((6,), 0.0), ((3, 5), 0.0), ((2, 3, 4), 0.0), ((2, 5), 800.0)):
        s = shift + 2.0 * rng.standard_normal(shape)  # shift 800: e^s overflows, softmax does not
        u = rng.standard_normal(shape)
        got = report.call(f"softmax_vjp(s, u) with s of shape {shape}", m.softmax_vjp, s, u)
        report.close(f"softmax_vjp(s, u), s = {shift:g} + 2 N(0, 1) of shape {shape}, random u",
                     got, act.backward(u, act.forward(s)[1]), rtol=1e-10, inputs={"s": s, "u": u})
    s = rng.standard_normal((3, 5))
    _gradcheck_vjp(report, "softmax_vjp against softmax's forward", act, {"s": s},
                   lambda u, s: {"s": np.asarray(m.softmax_vjp(s, u), dtype=np.float64)}, seed=1)


# ------------------------------------------------------------------------------
# 02 tanhmax: ell, rho', ell'
# ------------------------------------------------------------------------------


def grade_tanhmax_derivatives(m, report):
    act = activation("tanhmax")
    s = np.concatenate([np.linspace(-30.0, 30.0, 241), [0.0, 1e-300, -1e-8, 700.0, -710.5, 1e3,
                                                          -1e5, 1e300, -1e300]])
    for fname, ref, atol in (("ell", act.ell, 0.0), ("drho", act.drho, 1e-15), ("dell", act.dell, 0.0)):
        got = report.call(f"{fname}(s)", getattr(m, fname), s.copy())
        report.close(f"{fname}(s) on 250 scores in [-1e300, 1e300]", got, ref(s), rtol=1e-12,
                     atol=atol, inputs={"s": s}, elementwise=True)


# ------------------------------------------------------------------------------
# 03 the reweighted VJP, Eq. 01.R4/R5
# ------------------------------------------------------------------------------


def _softplus(s):
    return anp.logaddexp(0.0, s)


def _softplus_max():
    from ..custom import define_activation  # noqa: PLC0415

    return define_activation("softplus-max", _softplus, _softplus, source="exercise 03: g = h = softplus")


def grade_reweighted_vjp(m, report):
    rng = _rng(3)
    acts = [activation(n) for n in ("softmax", "tanhmax", "signexp", "expressive", "sigsoftmax", "linear")]
    for act in acts + [_softplus_max()]:
        s = 2.0 * rng.standard_normal((3, 6))
        u = rng.standard_normal((3, 6))
        mask = rng.random((3, 6)) < 0.75
        mask[0] = True
        p = act.p(s, mask=mask)
        got = report.call(f"reweighted_vjp(...) for {act.name}", m.reweighted_vjp,
                          p, act.rho(s), act.drho(s), act.dell(s), u)
        report.close(f"reweighted_vjp for {act.name} (random s, u and mask)", got,
                     act.backward(u, act.forward(s, mask=mask)[1]), rtol=1e-10, inputs={"s": s, "u": u, "p": p})
    act = activation("tanhmax")
    s = rng.standard_normal((2, 5))
    _gradcheck_vjp(report, "reweighted_vjp for tanhmax against its forward", act, {"s": s},
                   lambda u, s: {"s": np.asarray(m.reweighted_vjp(act.p(s), act.rho(s), act.drho(s),
                                                                  act.dell(s), u), dtype=np.float64)},
                   seed=3)


# ------------------------------------------------------------------------------
# 04 the Jacobian of phi
# ------------------------------------------------------------------------------


class _Elementwise:
    """An activation's elementwise functions and ``p``, ``forward``; no ``jacobian`` or ``vjp``."""

    _offered = ("g", "h", "dg", "dh", "rho", "drho", "ell", "dell", "p", "forward")

    def __init__(self, act):
        self.name = act.name
        for k in self._offered:
            setattr(self, k, getattr(act, k))

    def __getattr__(self, key):
        raise AttributeError(f"the act given to jacobian offers only {', '.join(self._offered)}; "
                             f"not {key!r}")


def _autograd_jacobian(fun, s):
    vjp_fn, out = make_vjp(fun)(s)
    return np.stack([vjp_fn(e) for e in np.eye(np.size(out))])  # row j = e_j^T J


def grade_jacobian(m, report):
    rng = _rng(4)
    for name in ("softmax", "tanhmax", "sigsoftmax", "expressive", "relu"):
        act = activation(name)
        s = 2.0 * rng.standard_normal(6)
        got = report.call(f"jacobian(act, s) for {name}", m.jacobian, _Elementwise(act), s)
        report.close(f"jacobian(act, s)[j, k] = d phi_j / d s_k for {name}", got,
                     _autograd_jacobian(act, s), rtol=1e-10, inputs={"s": s})


# ------------------------------------------------------------------------------
# 05 a wrong VJP that the all-ones cotangent passes
# ------------------------------------------------------------------------------


def grade_all_ones(m, report):
    act, rng = activation("sigsoftmax"), _rng(5)
    s = 2.0 * rng.standard_normal((4, 6))

    def vjp(u, s):
        return {"s": np.asarray(m.wrong_vjp(s, u), dtype=np.float64)}

    ones = np.ones_like(s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # gradcheck warns about a constant cotangent
        res = report.call("gradcheck with the all-ones cotangent", gradcheck, act, {"s": s}, vjp,
                          cotangent=ones, name="wrong_vjp, all-ones cotangent", rtol=1e-6, atol=1e-12)
    if res.ok:
        report.check(True, "wrong_vjp passes gradcheck with the all-ones cotangent")
    else:  # the true VJP at u = 1 is 0 (the weights sum to 1): say so, with the student's value
        got = np.asarray(m.wrong_vjp(s, ones), dtype=np.float64)
        k = np.unravel_index(np.argmax(np.abs(got)), got.shape)
        report.check(False, f"wrong_vjp should pass gradcheck with the all-ones cotangent, but at u = 1 it "
                            f"returns {got[k]:.4g} at index {tuple(int(i) for i in k)}, where the true VJP is 0 "
                            f"(sigsoftmax's weights sum to 1, so every column of its Jacobian sums to 0): "
                            f"a wrong VJP that passes must vanish at u = 1 too")
    res = report.call("gradcheck with a random cotangent", gradcheck, act, {"s": s}, vjp,
                      name="wrong_vjp, random cotangent", seed=5, rtol=1e-6, atol=1e-12)
    worst = res.worst("autograd")
    report.check(not res.ok, "wrong_vjp fails gradcheck with a random cotangent (relative error "
                             f"{worst.max_rel:.2e} vs autograd at index {worst.where})" if not res.ok else
                 "wrong_vjp passes gradcheck with a random cotangent too: it is not wrong")
    u = rng.standard_normal(s.shape)
    ds = np.asarray(report.call("wrong_vjp(s, u)", m.wrong_vjp, s, u), dtype=np.float64)
    report.check(np.max(np.abs(ds)) > 1e-3 * np.max(np.abs(act.backward(u, act.forward(s)[1]))),
                 "wrong_vjp is not 0 for a random cotangent (a plausible backward pass)"
                 if np.max(np.abs(ds)) > 1e-3 * np.max(np.abs(act.backward(u, act.forward(s)[1]))) else
                 "wrong_vjp returns (almost) 0 for a random cotangent; write a plausible backward pass "
                 "that forgets a factor, as the statement asks")


# ------------------------------------------------------------------------------
# 06 signexp at a score of 0
# ------------------------------------------------------------------------------


def grade_signexp_at_zero(m, report):
    act, rng = activation("signexp"), _rng(6)
    tiny = 1e-300
    for trial in range(3):
        n = 6
        s, u = rng.standard_normal(n), rng.standard_normal(n)
        j = int(rng.integers(n))
        s[j] = 0.0
        sp, sm = s.copy(), s.copy()
        sp[j], sm[j] = tiny, -tiny
        inputs = {"s": s, "u": u}
        jump = float(u @ act(sp) - u @ act(sm))
        got = report.call(f"jump(s, u, {j})", m.jump, s.copy(), u.copy(), j)
        report.close(f"jump(s, u, j={j}) (trial {trial})", got, jump, rtol=1e-12, inputs=inputs)
        want = np.array([act.backward(u, act.forward(sp)[1])[j], act.backward(u, act.forward(sm)[1])[j]])
        got = report.call(f"slopes(s, u, {j})", m.slopes, s.copy(), u.copy(), j)
        report.close(f"slopes(s, u, j={j}) = (L+, L-) (trial {trial})", np.asarray(got, dtype=np.float64),
                     want, rtol=1e-12, inputs=inputs)
        for eps in (1e-3, 1e-4):
            e = np.zeros(n)
            e[j] = eps
            fd = float(u @ act(s + e) - u @ act(s - e)) / (2.0 * eps)
            got = report.call(f"central_at_zero(s, u, {j}, {eps:g})", m.central_at_zero, s.copy(), u.copy(),
                              j, eps)
            report.close(f"central_at_zero(s, u, j={j}, eps={eps:g}) against the measured central "
                         f"difference (trial {trial})", got, fd, rtol=0.0,
                         atol=50.0 * eps * max(1.0, float(np.max(np.abs(u)))), inputs=inputs)


# ------------------------------------------------------------------------------
# 07 Proposition 1 for TanhMax (Eq. 7, with its sign)
# ------------------------------------------------------------------------------


def grade_tanhmax_velocity(m, report):
    from ..theory.proposition1 import score_velocity  # noqa: PLC0415

    rng = _rng(7)
    N, n = 4, 6
    s = 2.0 * rng.standard_normal((N, n))
    s[-1] = 400.0 * rng.standard_normal(n)  # one row of large scores: cosh overflows there
    o, delta_I = rng.standard_normal((N, n)), rng.standard_normal((N, n))
    c = rng.standard_normal(N)
    got = report.call("velocity(s, o, c, delta_I)", m.velocity, s, o, c, delta_I)
    report.close("velocity(s, o, c, delta_I) = ds/dtau (Proposition 1 for tanhmax; the last row has "
                 "scores of size 400)", got, score_velocity("tanhmax", s, o, c, delta_I), rtol=1e-10,
                 inputs={"s": s, "o": o})


# ------------------------------------------------------------------------------
# 08 Proposition 1 for a new activation: softplus-max
# ------------------------------------------------------------------------------


def _softplus_max_phi(s):
    h = _softplus(s)
    return h / anp.sum(h, axis=-1, keepdims=True)  # g = h = softplus, written directly


def grade_prop1_new(m, report):
    rng = _rng(8)
    for shape, scale in (((7,), 2.0), ((3, 5), 2.0), ((2, 6), 20.0)):
        s, o = scale * rng.standard_normal(shape), rng.standard_normal(shape)
        vjp_fn, _ = make_vjp(_softplus_max_phi)(s)
        got = report.call(f"delta_II(s, o) with s of shape {shape}", m.delta_II, s, o)
        report.close(f"delta_II(s, o) for softplus-max, s of shape {shape} and scale {scale:g} "
                     f"(against autograd)", got, vjp_fn(o), rtol=1e-10, inputs={"s": s, "o": o})


# ------------------------------------------------------------------------------
# 09 the closure gap of Proposition 2
# ------------------------------------------------------------------------------


def grade_closure_gap(m, report):
    from ..theory.proposition2 import closure_gap, closure_gap_closed_form  # noqa: PLC0415

    rng = _rng(9)
    for trial in range(3):
        s = rng.standard_normal(int(rng.integers(2, 7)))
        cs = np.array([-300.0, -5.0, -1.0, 0.0, 0.5, 2.0, 10.0, 30.0, 100.0, 300.0])
        got = np.array([float(report.call(f"gap(s, {c:g})", m.gap, s.copy(), float(c))) for c in cs])
        report.close(f"gap(s, c) for c in {cs.tolist()} (trial {trial}; relative accuracy, gaps down to "
                     f"1e-260)", got, closure_gap_closed_form(s, cs), rtol=1e-12, elementwise=True,
                     inputs={"c": cs})
        big = cs[closure_gap_closed_form(s, cs) > 1e-3]
        report.close(f"gap(s, c) against the forward passes, where the gap exceeds 1e-3 (trial {trial})",
                     got[np.isin(cs, big)], closure_gap(s, big), rtol=1e-9, elementwise=True)


# ------------------------------------------------------------------------------
# 10 the Neural Attention score's VJP
# ------------------------------------------------------------------------------


def grade_neural_vjp(m, report):
    from ..core.scores import score  # noqa: PLC0415

    sc, rng = score("neural"), _rng(10)
    n_q, n_k, d = 3, 4, 5
    q, k = rng.standard_normal((n_q, d)), rng.standard_normal((n_k, d))
    params = sc.init_params(d, rng, d_prime=3, hidden_size=6)
    params["ba"] = np.asarray(0.3)
    g = rng.standard_normal((n_q, n_k))
    out = report.call("neural_vjp(q, k, params, grad_s)", m.neural_vjp, q, k,
                      {n: v.copy() for n, v in params.items()}, g)
    if not (isinstance(out, tuple) and len(out) == 3 and isinstance(out[2], dict)):
        report.check(False, f"neural_vjp must return (dq, dk, dparams) with dparams a dict, got "
                            f"{type(out).__name__}")
        return
    dq, dk, dp = sc.backward(g, sc.forward(q, k, params)[1])
    report.close("dq", out[0], dq, rtol=1e-10, inputs={"q": q})
    report.close("dk", out[1], dk, rtol=1e-10, inputs={"k": k})
    for name in params:
        if name not in out[2]:
            report.check(False, f"dparams has no entry {name!r}")
            continue
        report.close(f"dparams[{name!r}]", out[2][name], dp[name], rtol=1e-10)
    names = list(params)

    def fun(q, k, **p):
        return sc(q, k, p)

    def vjp(u, q, k, **p):
        dq_, dk_, dp_ = m.neural_vjp(q, k, dict(p), u)
        return {"q": np.asarray(dq_, dtype=np.float64), "k": np.asarray(dk_, dtype=np.float64),
                **{n: np.asarray(dp_[n], dtype=np.float64) for n in names}}

    args = {"q": q, "k": k, **{n: np.asarray(v, dtype=np.float64) for n, v in params.items()}}
    _gradcheck_vjp(report, "neural_vjp against the neural score's forward", fun, args, vjp, seed=10)


# ------------------------------------------------------------------------------
# 11 expressive against dot-product on an angle
# ------------------------------------------------------------------------------


def grade_expressive_angle(m, report):
    from ..studies.geometry import weight_ratio  # noqa: PLC0415

    for deg in (5.0, 20.0, 45.0, 60.0, 75.0, 89.0):
        theta = math.radians(deg)
        c = report.call(f"crossover({theta!r})", m.crossover, theta)
        if not is_real_number(c) or not c > 0:
            report.check(False, f"crossover(theta) at {deg:g} degrees: expected a positive number, got {c!r}")
            continue
        c, ct = float(c), math.cos(theta)
        dpa = float(weight_ratio("softmax", 1.0, ct, c=c))
        ea = float(weight_ratio("expressive", 1.0, ct, c=c))
        ok = abs(dpa - ea) <= 1e-8 * ea
        report.check(ok, f"crossover at {deg:g} degrees: c = {c:.10g}, contrast a(0)/a(theta) "
                         f"DPA {dpa:.10g}, EA {ea:.10g}" + ("" if ok else
                         " -- they should be equal there (relative 1e-8); "
                         + ("EA is still the sharper one, so c is too small" if ea > dpa else
                            "DPA is already the sharper one, so c is too large")))


# ------------------------------------------------------------------------------
# 12 the no-normaliser convention
# ------------------------------------------------------------------------------


def grade_no_normaliser(m, report):
    act, rng = activation("expressive"), _rng(12)
    s = rng.standard_normal((8, 5))
    s[1, 2] = 0.0  # one exact zero
    s[2] = 0.0  # an all-zero row: no normaliser
    s[3] = [1e200, 1.0, 0.0, -3e180, 2.0]  # h by z^2/(1+z^2) overflows: inf/inf
    s[4] = [1e-200, -1e-170, 0.0, 0.0, 1e-180]  # h underflows to 0: no normaliser either
    s[5] = [1e-3, -2e-4, 5e-4, 1e-3, 3e-3]  # small scores: h ~ z^2, every digit counts
    mask = rng.random((8, 5)) < 0.7
    mask[6] = False  # a fully masked row
    for m_, label in ((None, "no mask"), (mask, "random mask with a fully masked row")):
        got = report.call(f"expressive_weights(s, mask) ({label})", m.expressive_weights, s.copy(),
                          None if m_ is None else m_.copy())
        g = np.asarray(got, dtype=np.float64)
        if report.check(np.all(np.isfinite(g)) if g.shape == s.shape else True,
                        f"expressive_weights ({label}): every weight finite" if
                        (g.shape != s.shape or np.all(np.isfinite(g))) else
                        f"expressive_weights ({label}): NaN or inf in rows "
                        f"{sorted(set(np.argwhere(~np.isfinite(g))[:, 0].tolist()))}"):
            report.close(f"expressive_weights(s, mask) ({label})", g, act(s, mask=m_),
                         rtol=1e-12, atol=1e-15, elementwise=True, inputs={"s": s})


# ------------------------------------------------------------------------------
# 13 the central-difference step
# ------------------------------------------------------------------------------


def _error_bound(h, S, M, kappa):
    return M * h * h / 6.0 + kappa * UNIT_ROUNDOFF * S / h  # derivation 22, section 4


def grade_central_step(m, report):
    rng = _rng(13)
    S, M, K = 10.0 ** rng.uniform(-3, 3, 6), 10.0 ** rng.uniform(-3, 3, 6), 10.0 ** rng.uniform(0, 2, 6)
    want = (3.0 * K * UNIT_ROUNDOFF * S / M) ** (1.0 / 3.0)
    got = np.array([float(report.call("best_step(S, M, kappa)", m.best_step, s_, m_, k_))
                    for s_, m_, k_ in zip(S, M, K)])
    report.close("best_step(S, M, kappa) for six random (S, M, kappa)", got, want, rtol=1e-12,
                 elementwise=True, inputs={"S": S, "M": M, "kappa": K})
    h = want * np.array([0.3, 1.0, 3.0, 0.5, 2.0, 1.7])
    got = np.array([float(report.call("error_bound(h, S, M, kappa)", m.error_bound, h_, s_, m_, k_))
                    for h_, s_, m_, k_ in zip(h, S, M, K)])
    report.close("error_bound(h, S, M, kappa)", got, _error_bound(h, S, M, K), rtol=1e-12,
                 elementwise=True, inputs={"h": h, "S": S, "M": M})
    # the bound in action: d/dx exp at 0 (F = exp, S = |f| = 1, M = max |F'''| ~ 1)
    hs = float(report.call("best_step(1.0, 1.0)", m.best_step, 1.0, 1.0))
    if is_real_number(hs) and hs > 0:
        D = (math.exp(hs) - math.exp(-hs)) / (2.0 * hs)
        bound = _error_bound(hs, 1.0, math.exp(hs), 4.0)  # kappa = 4: exp within 1 ulp, then - and /
        report.check(abs(D - 1.0) <= bound,
                     f"exp'(0) by central differences with h = best_step(1, 1) = {hs:.3g}: error "
                     f"{abs(D - 1.0):.2e}, bound {bound:.2e} (kappa = 4)"
                     + ("" if abs(D - 1.0) <= bound else ": the step is far from the best one"))


# ------------------------------------------------------------------------------
# 14 the smallest shift (a number)
# ------------------------------------------------------------------------------

#: The row and the target of exercise 14.
CLOSURE_ROW, CLOSURE_TOL = np.array([0.5, -1.0, 1.5, 0.2]), 1e-6


def closure_shift():
    """The smallest ``c`` with ``closure_gap_closed_form(CLOSURE_ROW, c) <= CLOSURE_TOL`` (Eq. 05.P10)."""
    s, t = CLOSURE_ROW, CLOSURE_TOL
    log_ratio = np.logaddexp.reduce(-s) - np.logaddexp.reduce(s)  # log(B / A)
    q = t / (2.0 - t)  # 2q / (1 + q) = t
    return 0.5 * (log_ratio - math.log(q))  # q = (B/A) e^{-2c}


def grade_closure_witness(m, report):
    from ..theory.proposition2 import closure_gap_closed_form  # noqa: PLC0415

    c = getattr(m, "ANSWER")
    if not report.check(is_real_number(c), "ANSWER is a finite real number" if is_real_number(c) else
                        f"ANSWER: expected a finite real number, got {c!r}"):
        return
    c, best = float(c), closure_shift()
    gap = float(closure_gap_closed_form(CLOSURE_ROW, c))
    report.check(gap <= CLOSURE_TOL * (1 + 1e-9),
                 f"the gap ||tanhmax(s + c) - softmax(s)||_1 at c = ANSWER = {c:.10g} is {gap:.4g}"
                 + (" <= 1e-6" if gap <= CLOSURE_TOL * (1 + 1e-9) else " > 1e-6: c is too small"))
    report.check(c <= best + 0.01 * abs(best),
                 "ANSWER is within 1% of the smallest such c" if c <= best + 0.01 * abs(best) else
                 f"ANSWER = {c:.6g} is more than 1% above the smallest c with gap <= 1e-6")


# ------------------------------------------------------------------------------
# The registry
# ------------------------------------------------------------------------------

EXERCISES = (
    Exercise(1, "softmax-vjp", "Derive softmax's vector-Jacobian product", "function",
             ("softmax_vjp(s, u)",), grade_softmax_vjp),
    Exercise(2, "tanhmax-derivatives", "TanhMax's ell, rho' and ell', stable for every finite score",
             "function", ("ell(s)", "drho(s)", "dell(s)"), grade_tanhmax_derivatives),
    Exercise(3, "reweighted-vjp", "One VJP for every activation (Eqs. 01.R4/01.R5)", "function",
             ("reweighted_vjp(p, rho, drho, dell, u)",), grade_reweighted_vjp),
    Exercise(4, "jacobian", "The Jacobian of phi = rho * softmax(ell) (Eq. 01.R3)", "function",
             ("jacobian(act, s)",), grade_jacobian),
    Exercise(5, "all-ones-cotangent", "A wrong sigsoftmax VJP that the all-ones cotangent passes",
             "function", ("wrong_vjp(s, u)",), grade_all_ones),
    Exercise(6, "signexp-at-zero", "SignExp at a score of 0: the jump, the slopes, the spike", "function",
             ("jump(s, u, j)", "slopes(s, u, j)", "central_at_zero(s, u, j, eps)"), grade_signexp_at_zero),
    Exercise(7, "tanhmax-velocity", "Proposition 1 for TanhMax, with the sign of Eq. 7 corrected",
             "function", ("velocity(s, o, c, delta_I)",), grade_tanhmax_velocity),
    Exercise(8, "prop1-new-activation", "Proposition 1's Delta_II for a new activation (softplus-max)",
             "function", ("delta_II(s, o)",), grade_prop1_new),
    Exercise(9, "closure-gap", "Proposition 2: the exact distance from softmax to TanhMax's range",
             "function", ("gap(s, c)",), grade_closure_gap),
    Exercise(10, "neural-score-vjp", "The VJP of the Neural Attention score", "function",
             ("neural_vjp(q, k, params, grad_s)",), grade_neural_vjp),
    Exercise(11, "expressive-angle", "When is expressive attention sharper than dot-product on an angle?",
             "function", ("crossover(theta)",), grade_expressive_angle),
    Exercise(12, "no-normaliser", "Expressive weights with zeros, masks and no normaliser", "function",
             ("expressive_weights(s, mask)",), grade_no_normaliser),
    Exercise(13, "central-difference-step", "The best step for central differences", "function",
             ("best_step(S, M, kappa=1.0)", "error_bound(h, S, M, kappa=1.0)"), grade_central_step),
    Exercise(14, "closure-witness", "A numeric witness for the closure: the smallest shift", "number",
             ("ANSWER",), grade_closure_witness),
)
