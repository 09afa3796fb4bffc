"""One grader per exercise, in the order of ``exercises/README.md``, and the registry with labels.

A grader is ``cases(hidden_seed) -> list of Case`` (:mod:`refattn.exercises.core`):
public cases from a fixed seed, the inputs a student can reproduce; hidden
cases from ``hidden_seed`` (other seeds, shapes, and the edges each exercise
is about), reported by kind only. Inputs are drawn here, the student's
functions run in another process on them, and each case's ``check`` compares
what came back with the library (:mod:`refattn.exercises.reference` for
backward passes, forward values and the propositions' closed forms),
autograd, :func:`refattn.core.gradcheck.gradcheck`, or a formula of the
derivations. Cotangents are random, never all ones, except where the
exercise is about the all-ones cotangent.
"""

from __future__ import annotations

import math
import warnings

import autograd.numpy as anp
import numpy as np
from autograd import make_vjp

from ..core.activations import activation
from ..core.gradcheck import UNIT_ROUNDOFF, gradcheck
from ..core.scores import score
from .core import Case, Exercise, Table, call, is_real_number, value
from .reference import activation_vjp, score_vjp

__all__ = ["EXERCISES", "DEFAULT_HIDDEN_SEED", "closure_shift"]

#: The hidden cases' seed when none is given (an exported autograder draws its own).
DEFAULT_HIDDEN_SEED = 20_240_611


def _rng(number):
    return np.random.default_rng(1000 + number)


def _hidden_rng(number, seed):
    return np.random.default_rng([number, int(seed)])


def _compare(kind, c, expected, *, hidden=False, ndim=None, inputs=None, label=None, **tol):
    """A case of one call whose value must be close to ``expected`` (:meth:`Report.close`)."""

    def check(r, report):
        got = r.array(0, np.shape(expected))
        report.close(label or r.label(0), got, expected, inputs=None if hidden else inputs, **tol)

    return Case(kind, (c,), check, hidden, ndim)


def _gradcheck_line(report, res, what):
    """One line for a :func:`gradcheck` result: the arguments that fail, against what, the worst."""
    if res.ok:
        return report.check(True, f"{what}: gradcheck passes (autograd rel. error {res.max_rel('autograd'):.1e}, "
                                  f"central {res.max_rel('central'):.1e}; random cotangent)")
    bad = res.failures()
    args = list(dict.fromkeys(c.arg for c in bad))
    against = " and ".join(sorted({"autograd" if c.check == "autograd" else "central differences" for c in bad}))
    worst = max(bad, key=lambda c: (np.nan_to_num(c.max_rel, nan=np.inf), c.max_abs))
    named = ", ".join(repr(a) for a in args[:5]) + (f" and {len(args) - 5} more" if len(args) > 5 else "")
    return report.check(False, f"{what}: gradcheck fails for {named} against {against}; worst {worst.arg!r}, "
                               f"relative error {worst.max_rel:.2e} at index {worst.where}",
                        brief=f"{what}: gradcheck fails for {named} (relative error {worst.max_rel:.1e})")


def _gradcheck_case(kind, c, fun, args, u, grads=None, *, hidden=False):
    """A case that runs :func:`gradcheck` on the student's VJP, evaluated by call ``c`` at cotangent ``u``.

    ``grads(results)`` turns the call's value into ``{arg: gradient}``, checked; by default the
    value is the gradient of the one argument ``s``.
    """

    def check(r, report):
        g = grads(r) if grads is not None else {"s": r.array(0, args["s"].shape)}
        res = gradcheck(fun, args, lambda _u, **_a: g, cotangent=u, name=kind, rtol=1e-6, atol=0.0)
        _gradcheck_line(report, res, r.label(0))

    return Case(kind, (c,), check, hidden)


# ------------------------------------------------------------------------------
# 01 softmax's VJP
# ------------------------------------------------------------------------------


def _softmax_vjp_case(kind, s, u, hidden):
    return _compare(kind, call("softmax_vjp", s, u), activation_vjp("softmax", s, u), hidden=hidden,
                    ndim=s.ndim, inputs={"s": s, "u": u}, rtol=1e-10)


def softmax_vjp_cases(hidden_seed):
    act, rng = activation("softmax"), _rng(1)
    cases = []
    for kind, shape, shift in (("a 1-D row", (6,), 0.0), ("2-D scores", (3, 5), 0.0),
                               ("3-D scores", (2, 3, 4), 0.0), ("scores near 800 (e^s overflows)", (2, 5), 800.0)):
        s = shift + 2.0 * rng.standard_normal(shape)
        cases.append(_softmax_vjp_case(kind, s, rng.standard_normal(shape), False))
    s, u = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    cases.append(_gradcheck_case("gradcheck against softmax's forward pass", call("softmax_vjp", s, u),
                                 lambda s: act(s), {"s": s}, u))
    h = _hidden_rng(1, hidden_seed)
    for kind, shape, shift, scale in (("another 1-D row", (int(h.integers(2, 9)),), 0.0, 2.0),
                                      ("4-D scores", (2, 2, 3, 5), 0.0, 2.0),
                                      ("widely spread scores near -900", (3, 7), -900.0, 30.0),
                                      ("rows of one entry", (4, 1), 0.0, 2.0)):
        s = shift + scale * h.standard_normal(shape)
        cases.append(_softmax_vjp_case(kind, s, h.standard_normal(shape), True))
    s, u = h.standard_normal((2, 4)), h.standard_normal((2, 4))
    cases.append(_gradcheck_case("gradcheck at other scores", call("softmax_vjp", s, u), lambda s: act(s),
                                 {"s": s}, u, hidden=True))
    return cases


# ------------------------------------------------------------------------------
# 02 tanhmax: ell, rho', ell'
# ------------------------------------------------------------------------------


def _tanhmax_cases(kind, s, hidden):
    act = activation("tanhmax")
    # absolute 1e-15 beside relative 1e-12: ell and rho' near 0 are rounded sums of terms of size 1
    # (|s| + log1p(e^{-2|s|}) - log 2, and 1 - tanh^2), accurate to a few units of 1e-16 absolutely
    return [_compare(f"{fname} on {kind}", call(fname, s), ref(s), hidden=hidden, ndim=s.ndim, inputs={"s": s},
                     rtol=1e-12, atol=1e-15, elementwise=True)
            for fname, ref in (("ell", act.ell), ("drho", act.drho), ("dell", act.dell))]


def tanhmax_derivatives_cases(hidden_seed):
    s = np.concatenate([np.linspace(-30.0, 30.0, 241), [0.0, 1e-300, -1e-8, 700.0, -710.5, 1e3,
                                                          -1e5, 1e300, -1e300]])
    cases = _tanhmax_cases("250 scores in [-1e300, 1e300]", s, False)
    h = _hidden_rng(2, hidden_seed)
    scales = np.array([1.0, 20.0, 700.0, 1e5])[:, None]
    cases += _tanhmax_cases("a 2-D array of scores at several scales", scales * h.standard_normal((4, 30)), True)
    edge = np.array([354.9, 355.1, -355.1, 709.7, 709.9, 710.4, 710.6, -710.6, 711.0, 5e-324, -5e-324,
                     1e-160, 3e-8, 19.0, 37.5, -37.5, 8e307, -8e307])
    cases += _tanhmax_cases("scores near the overflow thresholds of e^{2s} and cosh", edge * (1.0 + 1e-9 *
                            h.standard_normal(edge.size)), True)
    return cases


# ------------------------------------------------------------------------------
# 03 the reweighted VJP, Eq. 01.R4/R5
# ------------------------------------------------------------------------------


def _softplus(s):
    return anp.logaddexp(0.0, s)


def _softplus_max():
    from ..custom import define_activation  # noqa: PLC0415

    return define_activation("softplus-max", _softplus, _softplus, source="exercise 03: g = h = softplus")


def _reweighted_case(kind, act, s, u, mask, hidden):
    with np.errstate(all="ignore"):
        p, rho, drho, dell = act.p(s, mask=mask), act.rho(s), act.drho(s), act.dell(s)
        # the mistake the statement warns about: <u, p> where Eq. 01.R4 has <u, phi> = sum_i u_i rho_i p_i
        with_p = u * (drho + rho * dell) * p - dell * p * np.sum(u * p, axis=-1, keepdims=True)
    expected = activation_vjp(act, s, u, mask=mask)

    def check(r, report):
        got = r.array(0, np.shape(expected))
        if not report.close(r.label(0), got, expected, inputs=None if hidden else {"s": s, "u": u, "p": p, "rho": rho},
                            rtol=1e-10) and np.allclose(got, with_p, rtol=1e-10, atol=1e-300) \
                and not np.allclose(with_p, expected, rtol=1e-10):
            report.hint("your result is Eq. 01.R4 with <u, p> in place of <u, phi> = sum_i u_i rho_i p_i: "
                        "the two agree only where rho = 1, which is why softmax-like rows pass")

    return Case(kind, (call("reweighted_vjp", p, rho, drho, dell, u),), check, hidden, s.ndim)


def _random_mask(rng, shape):
    mask = rng.random(shape) < 0.75
    mask[..., 0] = True
    return mask


def reweighted_vjp_cases(hidden_seed):
    rng = _rng(3)
    cases = []
    s = 2.0 * rng.standard_normal(6)
    cases.append(_reweighted_case("tanhmax on a 1-D row", activation("tanhmax"), s, rng.standard_normal(6),
                                  None, False))
    acts = [activation(n) for n in ("softmax", "tanhmax", "signexp", "expressive", "sigsoftmax", "linear")]
    for act in acts + [_softplus_max()]:
        s, u = 2.0 * rng.standard_normal((3, 6)), rng.standard_normal((3, 6))
        cases.append(_reweighted_case(f"{act.name}, 2-D with a random mask", act, s, u,
                                      _random_mask(rng, (3, 6)), False))
    act = activation("tanhmax")
    s, u = rng.standard_normal((2, 5)), rng.standard_normal((2, 5))
    with np.errstate(all="ignore"):
        args = (act.p(s), act.rho(s), act.drho(s), act.dell(s), u)
    cases.append(_gradcheck_case("gradcheck for tanhmax", call("reweighted_vjp", *args), lambda s: act(s),
                                 {"s": s}, u))
    h = _hidden_rng(3, hidden_seed)
    for name in ("signexp", "sigmoid", "relu", "tanhmax"):
        s, u = 3.0 * h.standard_normal((2, 3, 5)), h.standard_normal((2, 3, 5))
        cases.append(_reweighted_case(f"{name}, 3-D with a random mask", activation(name), s, u,
                                      _random_mask(h, (2, 3, 5)), True))
    s, u = 2.0 * h.standard_normal((3, 4)), h.standard_normal((3, 4))
    mask = _random_mask(h, (3, 4))
    mask[1] = False
    cases.append(_reweighted_case("a fully masked row", activation("expressive"), s, u, mask, True))
    return cases


# ------------------------------------------------------------------------------
# 04 the Jacobian of phi
# ------------------------------------------------------------------------------

#: What the ``act`` handed to ``jacobian`` offers (its ``jacobian`` and ``vjp`` are not among them).
OFFERED = ("g", "h", "dg", "dh", "rho", "drho", "ell", "dell", "p", "forward")


def _autograd_jacobian(fun, s):
    vjp_fn, out = make_vjp(fun)(s)
    return np.stack([vjp_fn(e) for e in np.eye(np.size(out))])  # row j = e_j^T J


def _jacobian_case(kind, act, s, hidden):
    with np.errstate(all="ignore"):
        values = {k: np.asarray(act(s) if k == "forward" else getattr(act, k)(s), dtype=np.float64)
                  for k in OFFERED}
    table = Table(act.name, s, values)
    return _compare(kind, call("jacobian", table, s), _autograd_jacobian(lambda x: act(x), s), hidden=hidden,
                    inputs={"s": s}, label="jacobian(act, s)[j, k] = d phi_j / d s_k", rtol=1e-10)


def jacobian_cases(hidden_seed):
    rng = _rng(4)
    cases = [_jacobian_case(name, activation(name), 2.0 * rng.standard_normal(6), False)
             for name in ("softmax", "tanhmax", "sigsoftmax", "expressive", "relu")]
    h = _hidden_rng(4, hidden_seed)
    for name, s in (("signexp", 2.0 * h.standard_normal(7)), ("sigmoid", 3.0 * h.standard_normal(5)),
                    ("cosformer on positive scores", 0.2 + np.abs(h.standard_normal(6))),
                    ("linear", h.standard_normal(4)), ("tanhmax on a row of one", h.standard_normal(1)),
                    ("expressive on a longer row", 5.0 * h.standard_normal(11))):
        cases.append(_jacobian_case(name, activation(name.split()[0]), s, True))
    return cases


# ------------------------------------------------------------------------------
# 05 a wrong VJP that the all-ones cotangent passes
# ------------------------------------------------------------------------------


def _all_ones_case(kind, s, u, hidden):
    act = activation("sigsoftmax")
    ones = np.ones_like(s)

    def check(r, report):
        at_ones, at_u = r.array(0, s.shape), r.array(1, s.shape)
        fun = lambda s: act(s)  # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # gradcheck warns about a constant cotangent
            res = gradcheck(fun, {"s": s}, lambda _u, **_a: {"s": at_ones}, cotangent=ones,
                            name="all-ones", rtol=1e-6, atol=1e-12)
        if res.ok:
            report.check(True, "wrong_vjp passes gradcheck with the all-ones cotangent")
        else:  # the true VJP at u = 1 is 0 (the weights sum to 1): say so, with the student's value
            k = np.unravel_index(np.argmax(np.abs(at_ones)), s.shape)
            report.check(False, f"wrong_vjp should pass gradcheck with the all-ones cotangent, but at u = 1 it "
                                f"returns {at_ones[k]:.4g} at index {tuple(int(i) for i in k)}, where the true VJP "
                                f"is 0 (sigsoftmax's weights sum to 1): a wrong VJP that passes must vanish at u = 1"
                                + (" in every row (is a sum taken over the whole array instead of along the last "
                                   "axis?)" if s.ndim > 1 else ""),
                         brief="wrong_vjp is not 0 at the all-ones cotangent, where the true VJP is")
        res = gradcheck(fun, {"s": s}, lambda _u, **_a: {"s": at_u}, cotangent=u, name="random",
                        rtol=1e-6, atol=1e-12)
        worst = res.worst("autograd")
        report.check(not res.ok, f"wrong_vjp fails gradcheck with a random cotangent (relative error "
                                 f"{worst.max_rel:.2e} against autograd)" if not res.ok else
                     "wrong_vjp passes gradcheck with a random cotangent too: it is not wrong",
                     brief="wrong_vjp passes gradcheck with a random cotangent: it is not wrong")
        true = np.max(np.abs(activation_vjp(act, s, u)))
        report.check(np.max(np.abs(at_u)) > 1e-3 * true,
                     "wrong_vjp is not 0 for a random cotangent (a plausible backward pass)"
                     if np.max(np.abs(at_u)) > 1e-3 * true else
                     "wrong_vjp returns (almost) 0 for a random cotangent; write a plausible backward pass "
                     "that forgets a factor, as the statement asks")

    return Case(kind, (call("wrong_vjp", s, ones), call("wrong_vjp", s, u)), check, hidden, s.ndim)


def all_ones_cases(hidden_seed):
    rng = _rng(5)
    s = 2.0 * rng.standard_normal((4, 6))
    cases = [_all_ones_case("2-D scores", s, rng.standard_normal(s.shape), False)]
    h = _hidden_rng(5, hidden_seed)
    for kind, shape in (("a 1-D row", (7,)), ("3-D scores", (2, 3, 5))):
        cases.append(_all_ones_case(kind, 3.0 * h.standard_normal(shape), h.standard_normal(shape), True))
    return cases


# ------------------------------------------------------------------------------
# 06 signexp at a score of 0
# ------------------------------------------------------------------------------


def _signexp_case(kind, s, u, j, hidden):
    act, tiny, n = activation("signexp"), 1e-300, len(s)
    sp, sm = s.copy(), s.copy()
    sp[j], sm[j] = tiny, -tiny
    jump = float(u @ act(sp) - u @ act(sm))
    slopes = np.array([activation_vjp(act, sp, u)[j], activation_vjp(act, sm, u)[j]])
    eps = (1e-3, 1e-4)
    central = []
    for e_ in eps:
        e = np.zeros(n)
        e[j] = e_
        central.append(float(u @ act(s + e) - u @ act(s - e)) / (2.0 * e_))
    inputs = None if hidden else {"s": s, "u": u}

    at = "" if hidden else f", j={j}"  # a hidden case names no input

    def check(r, report):
        report.close(f"jump(s, u{at})", r.number(0), jump, rtol=1e-12, inputs=inputs)
        report.close(f"slopes(s, u{at}) = (L+, L-)", np.array(r.pair(1)), slopes, rtol=1e-12, inputs=inputs)
        for k, e_ in enumerate(eps):
            report.close(f"central_at_zero(s, u{at}, eps={e_:g}) against the measured central difference",
                         r.number(2 + k), central[k], rtol=0.0, atol=50.0 * e_ * max(1.0, float(np.max(np.abs(u)))),
                         inputs=inputs)  # 50 eps max|u|: the size of the neglected O(eps) term

    calls = (call("jump", s, u, j), call("slopes", s, u, j)) + tuple(call("central_at_zero", s, u, j, e_)
                                                                       for e_ in eps)
    return Case(kind, calls, check, hidden)


def signexp_at_zero_cases(hidden_seed):
    rng = _rng(6)
    cases = []
    for trial in range(3):
        s, u = rng.standard_normal(6), rng.standard_normal(6)
        j = int(rng.integers(6))
        s[j] = 0.0
        cases.append(_signexp_case(f"row {trial + 1} of six scores", s, u, j, False))
    h = _hidden_rng(6, hidden_seed)
    for kind, n, first in (("a row of two", 2, True), ("a row of three, the zero last", 3, False),
                           ("a row of nine, the zero first", 9, True)):
        s, u = h.standard_normal(n), h.standard_normal(n)
        j = 0 if first else n - 1
        s[j] = 0.0
        cases.append(_signexp_case(kind, s, u, j, True))
    return cases


# ------------------------------------------------------------------------------
# 07 Proposition 1 for TanhMax (Eq. 7, with its sign)
# ------------------------------------------------------------------------------


def _velocity_case(kind, s, o, c, delta_I, hidden):
    from ..theory.proposition1 import score_velocity  # noqa: PLC0415

    return _compare(kind, call("velocity", s, o, c, delta_I), score_velocity("tanhmax", s, o, c, delta_I),
                    hidden=hidden, inputs={"s": s, "o": o}, rtol=1e-10)


def tanhmax_velocity_cases(hidden_seed):
    rng = _rng(7)
    N, n = 4, 6
    s = 2.0 * rng.standard_normal((N, n))
    # one row of large scores of both signs: cosh overflows there (cosh x > 1.8e308 for |x| > 710.5)
    s[-1] = np.where(rng.standard_normal(n) < 0, -1.0, 1.0) * rng.uniform(715.0, 790.0, n)
    o, delta_I = rng.standard_normal((N, n)), rng.standard_normal((N, n))
    cases = [_velocity_case("four instances, one with scores beyond 710 (cosh overflows)", s, o,
                            rng.standard_normal(N), delta_I, False)]
    h = _hidden_rng(7, hidden_seed)
    for kind, N, n, scale in (("one instance of three tokens", 1, 3, 2.0),
                              ("scores between 711 and 740, of both signs", 3, 5, None),
                              ("many instances", 9, 7, 1.0)):
        s = scale * h.standard_normal((N, n)) if scale else np.sign(h.standard_normal((N, n))) * \
            h.uniform(711.0, 740.0, (N, n))
        cases.append(_velocity_case(kind, s, h.standard_normal((N, n)), h.standard_normal(N),
                                    h.standard_normal((N, n)), True))
    return cases


# ------------------------------------------------------------------------------
# 08 Proposition 1 for a new activation: softplus-max
# ------------------------------------------------------------------------------


def _softplus_max_phi(s):
    h = _softplus(s)
    return h / anp.sum(h, axis=-1, keepdims=True)  # g = h = softplus, written directly


def _delta_II_case(kind, s, o, hidden):
    vjp_fn, _ = make_vjp(_softplus_max_phi)(s)
    return _compare(kind, call("delta_II", s, o), vjp_fn(o), hidden=hidden, ndim=s.ndim, inputs={"s": s, "o": o},
                    label="delta_II(s, o) (against autograd)", rtol=1e-10)


def prop1_new_cases(hidden_seed):
    rng = _rng(8)
    cases = [_delta_II_case(kind, scale * rng.standard_normal(shape), rng.standard_normal(shape), False)
             for kind, shape, scale in (("a 1-D row", (7,), 2.0), ("2-D scores", (3, 5), 2.0),
                                        ("scores of size 20", (2, 6), 20.0))]
    h = _hidden_rng(8, hidden_seed)
    cases += [_delta_II_case(kind, scale * h.standard_normal(shape), h.standard_normal(shape), True)
              for kind, shape, scale in (("3-D scores", (2, 3, 4), 2.0), ("scores of size 30", (3, 5), 30.0),
                                         ("another 1-D row", (5,), 1.0))]
    return cases


# ------------------------------------------------------------------------------
# 09 the closure gap of Proposition 2
# ------------------------------------------------------------------------------


def _gap_case(kind, s, cs, hidden, numeric=True):
    from ..theory.proposition2 import closure_gap, closure_gap_closed_form  # noqa: PLC0415

    want = closure_gap_closed_form(s, cs)
    big = want > 1e-3  # where the difference of two forward passes is accurate

    def check(r, report):
        got = np.array([r.number(i) for i in range(len(cs))])
        shifts = "the case's shifts" if hidden else f"c in {cs.tolist()}"  # a hidden case names no input
        report.close(f"gap(s, c) for {shifts} (relative accuracy)", got, want, rtol=1e-12,
                     elementwise=True, inputs=None if hidden else {"c": cs})
        if numeric and np.any(big):
            report.close("gap(s, c) against the forward passes, where the gap exceeds 1e-3", got[big],
                         closure_gap(s, cs[big]), rtol=1e-9, elementwise=True)

    return Case(kind, tuple(call("gap", s, float(c)) for c in cs), check, hidden)


def closure_gap_cases(hidden_seed):
    rng = _rng(9)
    # e^{-2c} overflows float64 for c < -354.9, e^{s} for s > 709.8: a direct A, B, e^{-2c} fails here
    cs = np.array([-400.0, -300.0, -5.0, -1.0, 0.0, 0.5, 2.0, 10.0, 30.0, 100.0, 300.0])
    cases = [_gap_case(f"row {trial + 1}, shifts from -400 to 300", rng.standard_normal(int(rng.integers(2, 7))),
                       cs, False) for trial in range(3)]
    big = np.array([1.0, -1.0, 1.0, -1.0]) * rng.uniform(720.0, 800.0, 4)
    cases.append(_gap_case("scores beyond 710 (e^s overflows), shifts from -5 to 300", np.append(big, 0.3),
                           cs[2:], False, False))
    h = _hidden_rng(9, hidden_seed)
    cases.append(_gap_case("a row of one score", h.standard_normal(1), np.sort(h.uniform(-300, 300, 6)), True))
    cases.append(_gap_case("scores beyond 710, of both signs", np.where(h.standard_normal(4) < 0, -1.0, 1.0)
                           * h.uniform(711.0, 900.0, 4), np.array([-290.0, -3.0, 0.0, 7.0, 250.0]), True, False))
    cases.append(_gap_case("other shifts", h.standard_normal(5), np.sort(h.uniform(-20.0, 40.0, 8)), True))
    return cases


# ------------------------------------------------------------------------------
# 10 the Neural Attention score's VJP
# ------------------------------------------------------------------------------


def _neural_inputs(rng, n_q, n_k, d, d_prime, hidden_size, scale=1.0):
    q, k = scale * rng.standard_normal((n_q, d)), scale * rng.standard_normal((n_k, d))
    params = score("neural").init_params(d, rng, d_prime=d_prime, hidden_size=hidden_size)
    params["ba"] = np.asarray(0.3)
    return q, k, params, rng.standard_normal((n_q, n_k))


def _neural_grads(r, i, q, k, params):
    """The value of ``neural_vjp`` as ``{"q": dq, "k": dk, **dparams}``, every shape checked."""
    out = r[i]
    if not (isinstance(out, tuple) and len(out) == 3):
        r.fail(i, f"expected the tuple (dq, dk, dparams), got {type(out).__name__}"
                  + (f" of {len(out)}" if isinstance(out, (tuple, list)) else ""))
    shapes = {n: np.shape(v) for n, v in params.items()}
    return {"q": r.array(i, q.shape, x=out[0], label="dq"), "k": r.array(i, k.shape, x=out[1], label="dk"),
            **r.grads(i, shapes, nested=out[2])}


def _neural_case(kind, q, k, params, g, hidden):
    dq, dk, dp = score_vjp("neural", q, k, params, g)
    want = {"q": dq, "k": dk, **dp}

    def check(r, report):
        got = _neural_grads(r, 0, q, k, params)
        report.close_all([({"q": "dq", "k": "dk"}.get(n, f"dparams[{n!r}]"), got[n], w) for n, w in want.items()],
                         rtol=1e-10)

    return Case(kind, (call("neural_vjp", q, k, params, g),), check, hidden)


def _neural_gradcheck_case(kind, q, k, params, g, hidden):
    sc = score("neural")
    args = {"q": q, "k": k, **{n: np.asarray(v, dtype=np.float64) for n, v in params.items()}}
    return _gradcheck_case(kind, call("neural_vjp", q, k, params, g), lambda q, k, **p: sc(q, k, p), args, g,
                           lambda r: _neural_grads(r, 0, q, k, params), hidden=hidden)


def neural_vjp_cases(hidden_seed):
    rng = _rng(10)
    cases = [_neural_case("3 queries, 4 keys, d = 5", *_neural_inputs(rng, 3, 4, 5, 3, 6), False),
             _neural_gradcheck_case("gradcheck against the score's forward pass", *_neural_inputs(rng, 2, 3, 4, 3, 5),
                                    False)]
    h = _hidden_rng(10, hidden_seed)
    cases += [_neural_case(kind, *_neural_inputs(h, *sizes), True)
              for kind, sizes in (("one query", (1, 5, 2, 4, 3)), ("one key", (4, 1, 3, 2, 5)),
                                  ("large inputs (tanh saturates)", (3, 3, 4, 3, 4, 4.0)))]
    cases.append(_neural_gradcheck_case("gradcheck at other sizes", *_neural_inputs(h, 3, 2, 3, 2, 3), True))
    return cases


# ------------------------------------------------------------------------------
# 11 expressive against dot-product on an angle
# ------------------------------------------------------------------------------


def _angle_case(deg, hidden):
    from ..studies.geometry import weight_ratio  # noqa: PLC0415

    theta = math.radians(deg)

    def check(r, report):
        c = r[0]
        if not is_real_number(c) and not (isinstance(c, np.ndarray) and c.size == 1):
            r.fail(0, f"expected a positive number, got {c!r}"[:200])
        c = r.number(0)
        if not c > 0 or not math.isfinite(c):
            report.check(False, f"crossover(theta) at {deg:.4g} degrees: expected a positive number, got {c!r}",
                         brief="expected a positive number")
            return
        ct = math.cos(theta)
        dpa = float(weight_ratio("softmax", 1.0, ct, c=c))
        ea = float(weight_ratio("expressive", 1.0, ct, c=c))
        ok = abs(dpa - ea) <= 1e-8 * ea
        which = ("EA is still the sharper one, so c is too small" if ea > dpa else
                 "DPA is already the sharper one, so c is too large")
        report.check(ok, f"at {deg:.4g} degrees: c = {c:.10g}, contrast a(0)/a(theta) DPA {dpa:.10g}, EA {ea:.10g}"
                         + ("" if ok else f" -- they should be equal there (relative 1e-8); {which}"),
                     brief=f"the two contrasts differ at c: {which}")

    return Case(f"{deg:.4g} degrees" if not hidden else "an angle of the hidden set", (call("crossover", theta),),
                check, hidden)


def expressive_angle_cases(hidden_seed):
    cases = [_angle_case(deg, False) for deg in (5.0, 20.0, 45.0, 60.0, 75.0, 89.0)]
    h = _hidden_rng(11, hidden_seed)
    cases += [_angle_case(float(deg), True) for deg in h.uniform(1.0, 89.0, 3)]
    cases += [_angle_case(deg, True) for deg in (0.5, 89.9)]
    cases[-2].kind, cases[-1].kind = "an angle near 0", "an angle near 90 degrees"
    return cases


# ------------------------------------------------------------------------------
# 12 the no-normaliser convention
# ------------------------------------------------------------------------------


def _weights_case(kind, s, mask, hidden):
    act = activation("expressive")

    def check(r, report):
        g = r.array(0, s.shape)
        finite = np.isfinite(g)
        where = sorted(set(np.argwhere(~finite)[:, 0].tolist()))
        if not report.check(np.all(finite), "every weight finite" if np.all(finite) else
                            f"NaN or inf in {'rows' if g.ndim > 1 else 'entries'} {where}",
                            brief="NaN or inf in the weights"):
            report.hint("NaN or inf in the weights: 0/0 where a row has no normaliser (the convention gives it "
                        "weights 0), or inf/inf where z^2 overflows (write h = 1/(1 + 1/z^2))")
            return
        report.close("expressive_weights(s, mask)", g, act(s, mask=mask), rtol=1e-12, atol=1e-15,
                     elementwise=True, inputs=None if hidden else {"s": s})

    args = (s, None if mask is None else mask)
    return Case(kind, (call("expressive_weights", *args),), check, hidden, s.ndim)


def no_normaliser_cases(hidden_seed):
    rng = _rng(12)
    rows = {
        "ordinary rows": rng.standard_normal((2, 5)),
        "a row with an exact zero": np.array([0.7, 0.0, -1.2, 2.0, 0.1]),
        "an all-zero row (no normaliser)": np.zeros(5),
        "scores of 1e200 (z^2 overflows)": np.array([1e200, 1.0, 0.0, -3e180, 2.0]),
        "scores of 1e-200 (h underflows: no normaliser)": np.array([1e-200, -1e-170, 0.0, 0.0, 1e-180]),
        "small scores (h ~ z^2)": np.array([1e-3, -2e-4, 5e-4, 1e-3, 3e-3]),
    }
    cases = [_weights_case(kind, s, None, False) for kind, s in rows.items()]
    s = rng.standard_normal((4, 5))
    s[1, 2] = 0.0
    mask = rng.random((4, 5)) < 0.7
    mask[2] = False
    cases.append(_weights_case("a random mask with a fully masked row", s, mask, False))
    h = _hidden_rng(12, hidden_seed)
    tiny = math.sqrt(np.finfo(np.float64).tiny)  # 1.49e-154
    below, above = tiny * h.uniform(0.5, 0.95, 3), tiny * h.uniform(1e3, 1e5, 3)
    hidden = {
        "scores just below sqrt(tiny), about 1e-154 (count as 0)": below * np.array([1.0, -1.0, 1.0]),
        "scores above sqrt(tiny), about 1e-150 (h ~ z^2 is tiny but counts)": above * np.array([1.0, -1.0, 1.0]),
        "both sides of sqrt(tiny) in one row": np.array([below[0], above[0], 0.0, -below[1]]),
        "huge and tiny scores in one row": np.array([1e300, -1e300, 1e-300, 5.0 * h.random()]),
    }
    cases += [_weights_case(kind, s, None, True) for kind, s in hidden.items()]
    s = 2.0 * h.standard_normal((2, 3, 4))
    s[0, 1] = 0.0
    mask = h.random((2, 3, 4)) < 0.6
    mask[1, 2] = False
    cases.append(_weights_case("3-D scores with a mask, a zero row and a masked row", s, mask, True))
    return cases


# ------------------------------------------------------------------------------
# 13 the central-difference step
# ------------------------------------------------------------------------------


def _error_bound(h, S, M, kappa):
    return M * h * h / 6.0 + kappa * UNIT_ROUNDOFF * S / h  # derivation 22, section 4


def _best_step(S, M, kappa):
    return (3.0 * kappa * UNIT_ROUNDOFF * S / M) ** (1.0 / 3.0)


def _step_cases(rng, decades, hidden, suffix=""):
    S, M = 10.0 ** rng.uniform(-decades, decades, 6), 10.0 ** rng.uniform(-decades, decades, 6)
    K = 10.0 ** rng.uniform(0, 2, 6)
    h = _best_step(S, M, K) * np.array([0.3, 1.0, 3.0, 0.5, 2.0, 1.7])
    inputs = None if hidden else {"S": S, "M": M, "kappa": K}

    def best(r, report):
        got = np.array([r.number(i) for i in range(6)])
        report.close("best_step(S, M, kappa)", got, _best_step(S, M, K), rtol=1e-12, elementwise=True,
                     inputs=inputs)

    def bound(r, report):
        got = np.array([r.number(i) for i in range(6)])
        report.close("error_bound(h, S, M, kappa)", got, _error_bound(h, S, M, K), rtol=1e-12, elementwise=True,
                     inputs=inputs)

    return [Case(f"best_step{suffix}", tuple(call("best_step", *a) for a in zip(S, M, K)), best, hidden),
            Case(f"error_bound{suffix}", tuple(call("error_bound", *a) for a in zip(h, S, M, K)), bound, hidden)]


def central_step_cases(hidden_seed):
    cases = _step_cases(_rng(13), 3, False, " for six random (S, M, kappa) over six decades")

    def exp_check(r, report):  # the bound in action: d/dx exp at 0 (S = |f| = 1, M = max |F'''| ~ 1)
        hs = r.number(0)
        if not (math.isfinite(hs) and hs > 0):
            report.check(False, f"best_step(1.0, 1.0) = {hs!r}: expected a positive step")
            return
        D = (math.exp(hs) - math.exp(-hs)) / (2.0 * hs)
        bound = _error_bound(hs, 1.0, math.exp(hs), 4.0)  # kappa = 4: exp within 1 ulp, then - and /
        report.check(abs(D - 1.0) <= bound, f"exp'(0) by central differences with h = best_step(1, 1) = {hs:.3g}: "
                                            f"error {abs(D - 1.0):.2e}, bound {bound:.2e} (kappa = 4)"
                     + ("" if abs(D - 1.0) <= bound else ": the step is far from the best one"))

    cases.append(Case("exp'(0) with your step", (call("best_step", 1.0, 1.0),), exp_check))
    h = _hidden_rng(13, hidden_seed)
    cases += _step_cases(h, 8, True, " over sixteen decades")
    S, M = 10.0 ** h.uniform(-4, 4, 3), 10.0 ** h.uniform(-4, 4, 3)

    def default_kappa(r, report):
        got = np.array([r.number(i) for i in range(3)])
        report.close("best_step(S, M) with kappa left out", got, _best_step(S, M, 1.0), rtol=1e-12,
                     elementwise=True)

    cases.append(Case("kappa left at its default", tuple(call("best_step", s_, m_) for s_, m_ in zip(S, M)),
                      default_kappa, True))
    return cases


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


def closure_witness_cases(hidden_seed):
    from ..theory.proposition2 import closure_gap_closed_form  # noqa: PLC0415

    def check(r, report):
        c = r[0]
        if not (is_real_number(c) or (isinstance(c, np.ndarray) and c.size == 1 and c.dtype.kind in "iuf")):
            report.check(False, f"ANSWER: expected a finite real number, got {c!r}"[:200])
            return
        c, best = r.number(0), closure_shift()
        if not math.isfinite(c):
            report.check(False, f"ANSWER: expected a finite real number, got {c!r}")
            return
        gap = float(closure_gap_closed_form(CLOSURE_ROW, c))
        report.check(gap <= CLOSURE_TOL * (1 + 1e-9),
                     f"the gap ||tanhmax(s + c) - softmax(s)||_1 at c = ANSWER = {c:.10g} is {gap:.4g}"
                     + (" <= 1e-6" if gap <= CLOSURE_TOL * (1 + 1e-9) else " > 1e-6: c is too small"))
        report.check(c <= best + 0.01 * abs(best),
                     "ANSWER is within 1% of the smallest such c" if c <= best + 0.01 * abs(best) else
                     f"ANSWER = {c:.6g} is more than 1% above the smallest c with gap <= 1e-6")

    return [Case("the smallest shift for s = (0.5, -1, 1.5, 0.2)", (value("ANSWER"),), check)]


# ------------------------------------------------------------------------------
# The registry
# ------------------------------------------------------------------------------

EXERCISES = (
    Exercise(1, "softmax-vjp", "Derive softmax's vector-Jacobian product", "function",
             ("softmax_vjp(s, u)",), softmax_vjp_cases, part=1, difficulty=1, minutes=20),
    Exercise(2, "tanhmax-derivatives", "TanhMax's ell, rho' and ell', stable for every finite score",
             "function", ("ell(s)", "drho(s)", "dell(s)"), tanhmax_derivatives_cases, part=1, difficulty=1,
             minutes=20),
    Exercise(3, "reweighted-vjp", "One VJP for every activation (Eqs. 01.R4/01.R5)", "function",
             ("reweighted_vjp(p, rho, drho, dell, u)",), reweighted_vjp_cases, part=1, difficulty=2, minutes=30),
    Exercise(4, "jacobian", "The Jacobian of phi = rho * softmax(ell) (Eq. 01.R3)", "function",
             ("jacobian(act, s)",), jacobian_cases, part=1, difficulty=2, minutes=25),
    Exercise(5, "all-ones-cotangent", "A wrong sigsoftmax VJP that the all-ones cotangent passes",
             "function", ("wrong_vjp(s, u)",), all_ones_cases, part=1, difficulty=2, minutes=25),
    Exercise(6, "signexp-at-zero", "SignExp at a score of 0: the jump, the slopes, the spike", "function",
             ("jump(s, u, j)", "slopes(s, u, j)", "central_at_zero(s, u, j, eps)"), signexp_at_zero_cases,
             part=2, difficulty=3, minutes=45),
    Exercise(7, "tanhmax-velocity", "Proposition 1 for TanhMax, with the sign of Eq. 7 corrected",
             "function", ("velocity(s, o, c, delta_I)",), tanhmax_velocity_cases, part=2, difficulty=2,
             minutes=35),
    Exercise(8, "prop1-new-activation", "Proposition 1's Delta_II for a new activation (softplus-max)",
             "function", ("delta_II(s, o)",), prop1_new_cases, part=2, difficulty=2, minutes=35),
    Exercise(9, "closure-gap", "Proposition 2: the exact distance from softmax to TanhMax's range",
             "function", ("gap(s, c)",), closure_gap_cases, part=2, difficulty=3, minutes=40),
    Exercise(10, "neural-score-vjp", "The VJP of the Neural Attention score", "function",
             ("neural_vjp(q, k, params, grad_s)",), neural_vjp_cases, part=3, difficulty=3, minutes=60),
    Exercise(11, "expressive-angle", "When is expressive attention sharper than dot-product on an angle?",
             "function", ("crossover(theta)",), expressive_angle_cases, part=2, difficulty=2, minutes=30),
    Exercise(12, "no-normaliser", "Expressive weights with zeros, masks and no normaliser", "function",
             ("expressive_weights(s, mask)",), no_normaliser_cases, part=3, difficulty=2, minutes=30),
    Exercise(13, "central-difference-step", "The best step for central differences", "function",
             ("best_step(S, M, kappa=1.0)", "error_bound(h, S, M, kappa=1.0)"), central_step_cases, part=3,
             difficulty=1, minutes=20),
    Exercise(14, "closure-witness", "A numeric witness for the closure: the smallest shift", "number",
             ("ANSWER",), closure_witness_cases, part=2, difficulty=1, minutes=15),
)
