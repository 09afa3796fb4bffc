"""One grader per exercise, in the order of ``exercises/README.md`` (exercise 15's in
:mod:`refattn.exercises.gradient_check_cases`), and the registry with labels.

A grader is ``cases(hidden_seed) -> list of Case`` (:mod:`refattn.exercises.judge`):
public cases from a fixed seed, the inputs a student can reproduce; hidden
cases from ``hidden_seed`` (other seeds, shapes, and the edges each exercise
is about), reported by kind only. Inputs are drawn here; the student's
functions run in another process on them; each case's expectations
(:class:`~refattn.exercises.judge.Expect`) are computed only after that
process has ended, from the library (:mod:`refattn.exercises.reference` for
backward passes, forward values and the propositions' closed forms),
autograd, or a formula of the derivations, and judged by
:func:`refattn.exercises.judge.judge_case`. Cotangents are random, never all
ones, except where the exercise is about the all-ones cotangent.
"""

from __future__ import annotations

import math

import autograd.numpy as anp
import numpy as np
from autograd import make_vjp

from ..core.activations import activation
from ..core.gradcheck import UNIT_ROUNDOFF
from ..core.scores import score
from .gradient_check_cases import gradient_check_cases
from .judge import Case, Exercise, Expect, Table, call, value
from .reference import activation_vjp, score_vjp

__all__ = ["EXERCISES", "DEFAULT_HIDDEN_SEED", "closure_shift", "crossover_angle", "best_step", "error_bound"]

#: The hidden cases' seed when none is given (an exported autograder draws one per submission).
DEFAULT_HIDDEN_SEED = 20_240_611


def _rng(number, public_seed=None):
    """The public cases' generator: a fixed seed (the cases a student can run, in the handout), or, on an
    autograder, one drawn per submission (``public_seed``): cases of the same kinds on inputs no table
    of the handout's can answer."""
    return np.random.default_rng(1000 + number if public_seed is None else [1000 + number, int(public_seed)])


def _hidden_rng(number, seed):
    return np.random.default_rng([number, int(seed)])


def _compare(kind, c, expected, label, *, hidden=False, ndim=None, inputs=None, **tol):
    """A case of one call whose value must be close to ``expected()`` (computed when judged)."""
    return Case(kind, (c,), lambda: [Expect("close", label, (0,), expected(), inputs=None if hidden else inputs,
                                            **tol)], hidden, ndim)


def _require(cases, *kinds):
    """Mark the cases of ``kinds`` required: the statement says the answer *must* pass them."""
    for case in cases:
        if case.kind in kinds:
            case.required = True
    return cases


def _autograd_vjp(fun, s, u):
    """``u^T d fun / d s`` by autograd: an implementation independent of the library's backward passes."""
    vjp_fn, _ = make_vjp(fun)(s)
    return vjp_fn(u)


# ------------------------------------------------------------------------------
# 01 softmax's VJP
# ------------------------------------------------------------------------------


def _softmax_vjp_case(kind, s, u, hidden):
    return _compare(kind, call("softmax_vjp", s, u), lambda: activation_vjp("softmax", s, u), "softmax_vjp(s, u)",
                    hidden=hidden, ndim=s.ndim, inputs={"s": s, "u": u}, rtol=1e-10)


def _softmax_autograd_case(kind, s, u, hidden):
    act = activation("softmax")
    return _compare(kind, call("softmax_vjp", s, u), lambda: _autograd_vjp(lambda x: act(x), s, u),
                    "softmax_vjp(s, u) against autograd's VJP of softmax's forward pass", hidden=hidden,
                    ndim=s.ndim, inputs={"s": s, "u": u}, rtol=1e-10)


def softmax_vjp_cases(hidden_seed, public_seed=None):
    rng = _rng(1, public_seed)
    cases = []
    for kind, shape, shift in (("a 1-D row", (6,), 0.0), ("2-D scores", (3, 5), 0.0),
                               ("3-D scores", (2, 3, 4), 0.0), ("scores near 800 (e^s overflows)", (2, 5), 800.0)):
        s = shift + 2.0 * rng.standard_normal(shape)
        cases.append(_softmax_vjp_case(kind, s, rng.standard_normal(shape), False))
    s, u = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    cases.append(_softmax_autograd_case("against autograd, a random cotangent", s, u, False))
    h = _hidden_rng(1, hidden_seed)
    for kind, shape, shift, scale in (("another 1-D row", (int(h.integers(2, 9)),), 0.0, 2.0),
                                      ("4-D scores", (2, 2, 3, 5), 0.0, 2.0),
                                      ("widely spread scores near -900", (3, 7), -900.0, 30.0),
                                      ("rows of one entry", (4, 1), 0.0, 2.0)):
        s = shift + scale * h.standard_normal(shape)
        cases.append(_softmax_vjp_case(kind, s, h.standard_normal(shape), True))
    s, u = h.standard_normal((2, 4)), h.standard_normal((2, 4))
    cases.append(_softmax_autograd_case("against autograd at other scores", s, u, True))
    return _require(cases, "scores near 800 (e^s overflows)", "widely spread scores near -900")


# ------------------------------------------------------------------------------
# 02 tanhmax: ell, rho', ell'
# ------------------------------------------------------------------------------


def _tanhmax_cases(kind, s, hidden):
    act = activation("tanhmax")
    # absolute 1e-15 beside relative 1e-12: ell and rho' near 0 are rounded sums of terms of size 1
    # (|s| + log1p(e^{-2|s|}) - log 2, and 1 - tanh^2), accurate to a few units of 1e-16 absolutely
    return [_compare(f"{fname} on {kind}", call(fname, s), lambda ref=ref: ref(s), f"{fname}(s)", hidden=hidden,
                     ndim=s.ndim, inputs={"s": s}, rtol=1e-12, atol=1e-15, elementwise=True)
            for fname, ref in (("ell", act.ell), ("drho", act.drho), ("dell", act.dell))]


def tanhmax_derivatives_cases(hidden_seed, public_seed=None):
    s = np.concatenate([np.linspace(-30.0, 30.0, 241), [0.0, 1e-300, -1e-8, 700.0, -710.5, 1e3,
                                                          -1e5, 1e300, -1e300]])
    if public_seed is not None:  # the same kinds of scores, on other values
        s[:241] += _rng(2, public_seed).uniform(-0.1, 0.1, 241)
    cases = _tanhmax_cases("250 scores in [-1e300, 1e300]", s, False)
    h = _hidden_rng(2, hidden_seed)
    scales = np.array([1.0, 20.0, 700.0, 1e5])[:, None]
    cases += _tanhmax_cases("a 2-D array of scores at several scales", scales * h.standard_normal((4, 30)), True)
    edge = np.array([354.9, 355.1, -355.1, 709.7, 709.9, 710.4, 710.6, -710.6, 711.0, 5e-324, -5e-324,
                     1e-160, 3e-8, 19.0, 37.5, -37.5, 8e307, -8e307])
    cases += _tanhmax_cases("scores near the overflow thresholds of e^{2s} and cosh", edge * (1.0 + 1e-9 *
                            h.standard_normal(edge.size)), True)
    return _require(cases, "ell on 250 scores in [-1e300, 1e300]",
                    "ell on scores near the overflow thresholds of e^{2s} and cosh")


# ------------------------------------------------------------------------------
# 03 the reweighted VJP, Eq. 01.R4/R5
# ------------------------------------------------------------------------------


def _softplus(s):
    return anp.logaddexp(0.0, s)


def _softplus_max():
    from ..custom import define_activation  # noqa: PLC0415

    return define_activation("softplus-max", _softplus, _softplus, source="exercise 03: g = h = softplus")


def _rowwise_jacobian_times(act, s, u, mask=None):
    """``J u`` row by row (``J[j, k] = d phi_j / d s_k``): the VJP's transpose, a common wrong answer."""
    rows_s, rows_u = s.reshape(-1, s.shape[-1]), u.reshape(-1, s.shape[-1])
    rows_m = None if mask is None else np.broadcast_to(mask, s.shape).reshape(-1, s.shape[-1])
    out = np.zeros_like(rows_s)
    for i, (si, ui) in enumerate(zip(rows_s, rows_u)):
        m = None if rows_m is None else rows_m[i]
        if m is not None and not m.any():
            continue
        out[i] = _autograd_jacobian(lambda x, m=m: act(x, mask=m), si) @ ui
    return out.reshape(s.shape)


def _reweighted_case(kind, act, s, u, mask, hidden):
    with np.errstate(all="ignore"):
        p, rho, drho, dell = act.p(s, mask=mask), act.rho(s), act.drho(s), act.dell(s)

    def expect():
        with np.errstate(all="ignore"):
            # the mistake the statement warns about: <u, p> where Eq. 01.R4 has <u, phi> = sum_i u_i rho_i p_i
            with_p = u * (drho + rho * dell) * p - dell * p * np.sum(u * p, axis=-1, keepdims=True)
        hints = ((with_p, "your result is Eq. 01.R4 with <u, p> in place of <u, phi> = sum_i u_i rho_i p_i: the "
                          "two agree only where rho = 1, which is why softmax-like rows pass"),
                 (_rowwise_jacobian_times(act, s, u, mask), "your result is J u, the Jacobian times u: the VJP is "
                  "u^T J, ds_k = sum_j u_j dphi_j/ds_k (a sum over the output index j), its transpose"))
        return [Expect("close", "reweighted_vjp(p, rho, drho, dell, u)", (0,), activation_vjp(act, s, u, mask=mask),
                       inputs={"s": s, "u": u, "p": p, "rho": rho}, hints=hints, rtol=1e-10)]

    # the "right in 1-D, wrong in more axes" hint reads cases without a mask only: a masked case fails for
    # its mask as often as for its axis
    return Case(kind, (call("reweighted_vjp", p, rho, drho, dell, u),), expect, hidden, s.ndim if mask is None else None)


def _random_mask(rng, shape):
    mask = rng.random(shape) < 0.75
    mask[..., 0] = True
    return mask


def reweighted_vjp_cases(hidden_seed, public_seed=None):
    rng = _rng(3, public_seed)
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
    cases.append(_compare("tanhmax against autograd, a random cotangent", call("reweighted_vjp", *args),
                          lambda s=s, u=u: _autograd_vjp(lambda x: act(x), s, u),
                          "reweighted_vjp(p, rho, drho, dell, u) against autograd's VJP of tanhmax's forward pass",
                          ndim=2, inputs={"s": s, "u": u}, rtol=1e-10))
    s = 2.0 * rng.standard_normal(6)  # sigsoftmax's Jacobian is not symmetric (ell'/rho is not constant)
    cases.append(_reweighted_case("sigsoftmax on a 1-D row", activation("sigsoftmax"), s, rng.standard_normal(6),
                                  None, False))
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
    return _compare(kind, call("jacobian", table, s), lambda: _autograd_jacobian(lambda x: act(x), s),
                    "jacobian(act, s)[j, k] = d phi_j / d s_k", hidden=hidden, inputs={"s": s}, rtol=1e-10)


def jacobian_cases(hidden_seed, public_seed=None):
    rng = _rng(4, public_seed)
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

#: The coefficients of the linear combination the linearity check feeds ``wrong_vjp``.
LINEAR_COMBINATION = (0.7, -1.3)


def _all_ones_case(kind, s, u, v, hidden, other_s):
    act, ones = activation("sigsoftmax"), np.ones_like(s)
    a, b = LINEAR_COMBINATION
    calls = (call("wrong_vjp", s, ones), call("wrong_vjp", s, u), call("wrong_vjp", s, v),
             call("wrong_vjp", s, a * u + b * v), call("wrong_vjp", s, ones - u), call("wrong_vjp", other_s, u))

    def expect():
        true_u = activation_vjp(act, s, u)
        scale = float(np.max(np.abs(true_u)))
        return [
            Expect("close", "wrong_vjp(s, 1), the all-ones cotangent, where the true VJP is 0", (0,),
                   np.zeros_like(s), atol=1e-12 * max(scale, 1.0),
                   hint="a wrong VJP that the all-ones cotangent passes must vanish at u = 1, as the true one does "
                        "(sigsoftmax's weights sum to 1 in every row): check its value there"),
            Expect("far", "wrong_vjp(s, u), a random cotangent", (1,), true_u, rtol=1e-6,
                   message="wrong_vjp(s, u) equals the true VJP for a random cotangent: it is not wrong, so it "
                           "witnesses nothing",
                   passed="wrong_vjp(s, u) differs from the true VJP for a random cotangent, by more than 1e-06 "
                          "of the VJP's largest entry: a gradient check with a random cotangent fails it, where one "
                          "with the all-ones cotangent (the first check) passes it"),
            Expect("nonzero", "wrong_vjp(s, u)", (1,), true_u, rtol=1e-3,
                   message="wrong_vjp(s, u) is (almost) 0 for a random cotangent; write a plausible backward pass "
                           "that forgets a factor, as the statement asks",
                   passed="wrong_vjp(s, u) is not 0 for a random cotangent (a plausible backward pass)"),
            Expect("linear", f"wrong_vjp(s, {a:g} u + {b:g} v) against {a:g} wrong_vjp(s, u) + {b:g} wrong_vjp(s, v)"
                   " (a VJP is linear in the cotangent)", (3,), terms=((a, (1,)), (b, (2,))), rtol=1e-9),
            Expect("linear", "wrong_vjp(s, 1) against wrong_vjp(s, u) + wrong_vjp(s, 1 - u) (linear in the "
                   "cotangent, the all-ones one included)", (0,), terms=((1.0, (1,)), (1.0, (4,))), rtol=1e-9),
            Expect("differs", "wrong_vjp at other scores", (5,), terms=((1.0, (1,)),), rtol=1e-6,
                   message="wrong_vjp(s, u) does not depend on the scores s: a backward pass of sigsoftmax at s "
                           "uses its weights there",
                   passed="wrong_vjp depends on the scores s, as a backward pass does"),
        ]

    return Case(kind, calls, expect, hidden, s.ndim)


def all_ones_cases(hidden_seed, public_seed=None):
    rng = _rng(5, public_seed)
    s = 2.0 * rng.standard_normal((4, 6))
    cases = [_all_ones_case("2-D scores", s, rng.standard_normal(s.shape), rng.standard_normal(s.shape), False,
                            2.0 * rng.standard_normal(s.shape))]
    h = _hidden_rng(5, hidden_seed)
    for kind, shape in (("a 1-D row", (7,)), ("3-D scores", (2, 3, 5))):
        cases.append(_all_ones_case(kind, 3.0 * h.standard_normal(shape), h.standard_normal(shape),
                                    h.standard_normal(shape), True, 3.0 * h.standard_normal(shape)))
    return cases


# ------------------------------------------------------------------------------
# 06 signexp at a score of 0
# ------------------------------------------------------------------------------

#: The steps at which ``central_at_zero`` is compared with the first-order prediction.
CENTRAL_STEPS = (0.1, 1e-2, 1e-3)


def _signexp_case(kind, s, u, j, hidden):
    act, tiny = activation("signexp"), 1e-300
    at = "" if hidden else f", j={j}"  # a hidden case names no input
    calls = (call("jump", s, u, j), call("slopes", s, u, j)) + tuple(call("central_at_zero", s, u, j, e_)
                                                                       for e_ in CENTRAL_STEPS)

    def expect():
        sp, sm = s.copy(), s.copy()
        sp[j], sm[j] = tiny, -tiny
        jump = float(u @ act(sp) - u @ act(sm))
        slopes = np.array([activation_vjp(act, sp, u)[j], activation_vjp(act, sm, u)[j]])
        inputs = {"s": s, "u": u}
        out = [Expect("close", f"jump(s, u{at})", (0,), np.float64(jump), rtol=1e-12, inputs=inputs),
               Expect("close", f"slopes(s, u{at}) = (L+, L-)", (1,), slopes, shape=(2,), rtol=1e-12, inputs=inputs)]
        for k, e_ in enumerate(CENTRAL_STEPS):
            e = np.zeros_like(s)
            e[j] = e_
            measured = float(u @ act(s + e) - u @ act(s - e)) / (2.0 * e_)
            predicted = jump / (2.0 * e_) + 0.5 * (slopes[0] + slopes[1])
            out.append(Expect(
                "close", f"central_at_zero(s, u{at}, eps={e_:g}), the first-order prediction", (2 + k,),
                np.float64(predicted), rtol=1e-12, inputs=inputs,
                hints=((np.float64(measured), "your value is the measured central difference (F(eps) - F(-eps))/"
                        "(2 eps); the exercise asks for its first-order prediction from J and L+-, which differs "
                        "from it by O(eps)"),)))
        return out

    return Case(kind, calls, expect, hidden)


def signexp_at_zero_cases(hidden_seed, public_seed=None):
    rng = _rng(6, public_seed)
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

    return _compare(kind, call("velocity", s, o, c, delta_I), lambda: score_velocity("tanhmax", s, o, c, delta_I),
                    "velocity(s, o, c, delta_I)", hidden=hidden, inputs={"s": s, "o": o}, rtol=1e-10)


def tanhmax_velocity_cases(hidden_seed, public_seed=None):
    rng = _rng(7, public_seed)
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
    return _require(cases, "four instances, one with scores beyond 710 (cosh overflows)",
                    "scores between 711 and 740, of both signs")


# ------------------------------------------------------------------------------
# 08 Proposition 1 for a new activation: softplus-max
# ------------------------------------------------------------------------------


def _softplus_max_phi(s):
    h = _softplus(s)
    return h / anp.sum(h, axis=-1, keepdims=True)  # g = h = softplus, written directly


def _delta_II_case(kind, s, o, hidden):
    return _compare(kind, call("delta_II", s, o), lambda: _autograd_vjp(_softplus_max_phi, s, o),
                    "delta_II(s, o) (against autograd)", hidden=hidden, ndim=s.ndim, inputs={"s": s, "o": o},
                    rtol=1e-10)


def prop1_new_cases(hidden_seed, public_seed=None):
    rng = _rng(8, public_seed)
    cases = [_delta_II_case(kind, scale * rng.standard_normal(shape), rng.standard_normal(shape), False)
             for kind, shape, scale in (("a 1-D row", (7,), 2.0), ("2-D scores", (3, 5), 2.0),
                                        ("scores of size 20", (2, 6), 20.0))]
    s = np.array([[-60.0, -45.0, 0.5, 2.0, -50.0], [800.0, -800.0, 1.0, -900.0, 3.0]])
    cases.append(_delta_II_case("scores far below 0 (softplus underflows) and beyond 710", s,
                                rng.standard_normal(s.shape), False))
    h = _hidden_rng(8, hidden_seed)
    cases += [_delta_II_case(kind, scale * h.standard_normal(shape), h.standard_normal(shape), True)
              for kind, shape, scale in (("3-D scores", (2, 3, 4), 2.0), ("scores of size 30", (3, 5), 30.0),
                                         ("another 1-D row", (5,), 1.0), ("scores of size 400", (2, 6), 400.0))]
    return _require(cases, "scores far below 0 (softplus underflows) and beyond 710", "scores of size 400")


# ------------------------------------------------------------------------------
# 09 the closure gap of Proposition 2
# ------------------------------------------------------------------------------


def _gap_case(kind, s, cs, hidden, numeric=True):
    shifts = "the case's shifts" if hidden else f"c in {cs.tolist()}"  # a hidden case names no input

    def expect():
        from ..theory.proposition2 import closure_gap, closure_gap_closed_form  # noqa: PLC0415

        want = closure_gap_closed_form(s, cs)
        big = np.flatnonzero(want > 1e-3)  # where the difference of two forward passes is accurate
        out = [Expect("close", f"gap(s, c) for {shifts} (relative accuracy)", ("stack", *range(len(cs))), want,
                      rtol=1e-12, elementwise=True, inputs={"c": cs})]
        if numeric and big.size:
            out.append(Expect("close", "gap(s, c) against the forward passes, where the gap exceeds 1e-3",
                              ("stack", *big.tolist()), closure_gap(s, cs[big]), rtol=1e-9, elementwise=True))
        return out

    return Case(kind, tuple(call("gap", s, float(c)) for c in cs), expect, hidden)


def closure_gap_cases(hidden_seed, public_seed=None):
    rng = _rng(9, public_seed)
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
    return _require(cases, "scores beyond 710 (e^s overflows), shifts from -5 to 300", "scores beyond 710, of both signs")


# ------------------------------------------------------------------------------
# 10 the Neural Attention score's VJP
# ------------------------------------------------------------------------------


def _neural_inputs(rng, n_q, n_k, d, d_prime, hidden_size, scale=1.0):
    q, k = scale * rng.standard_normal((n_q, d)), scale * rng.standard_normal((n_k, d))
    params = score("neural").init_params(d, rng, d_prime=d_prime, hidden_size=hidden_size)
    params["ba"] = np.asarray(0.3)
    return q, k, params, rng.standard_normal((n_q, n_k))


def _neural_expects(want, q, k, params, suffix=""):
    """One expectation per gradient of ``neural_vjp``'s value ``(dq, dk, dparams)``."""
    out = [Expect("close", f"dq{suffix}", (0, 0), want["q"], shape=q.shape, rtol=1e-10),
           Expect("close", f"dk{suffix}", (0, 1), want["k"], shape=k.shape, rtol=1e-10)]
    return out + [Expect("close", f"dparams[{n!r}]{suffix}", (0, 2, n), want[n], shape=np.shape(v), rtol=1e-10)
                  for n, v in params.items()]


def _neural_case(kind, q, k, params, g, hidden):
    def expect():
        dq, dk, dp = score_vjp("neural", q, k, params, g)
        return _neural_expects({"q": dq, "k": dk, **dp}, q, k, params)

    return Case(kind, (call("neural_vjp", q, k, params, g),), expect, hidden)


def _neural_autograd_case(kind, q, k, params, g, hidden):
    def expect():
        sc = score("neural")
        names = ["q", "k", *params]
        args = [q, k, *(np.asarray(v, dtype=np.float64) for v in params.values())]

        def forward(*xs):
            return sc(xs[0], xs[1], dict(zip(names[2:], xs[2:])))

        want = {}
        for i, name in enumerate(names):
            vjp_fn, _ = make_vjp(lambda x, i=i: forward(*args[:i], x, *args[i + 1:]))(args[i])
            want[name] = vjp_fn(g)
        return _neural_expects(want, q, k, params, " (against autograd)")

    return Case(kind, (call("neural_vjp", q, k, params, g),), expect, hidden)


def neural_vjp_cases(hidden_seed, public_seed=None):
    rng = _rng(10, public_seed)
    cases = [_neural_case("3 queries, 4 keys, d = 5", *_neural_inputs(rng, 3, 4, 5, 3, 6), False),
             _neural_autograd_case("against autograd's VJP of the score's forward pass",
                                   *_neural_inputs(rng, 2, 3, 4, 3, 5), False)]
    h = _hidden_rng(10, hidden_seed)
    cases += [_neural_case(kind, *_neural_inputs(h, *sizes), True)
              for kind, sizes in (("one query", (1, 5, 2, 4, 3)), ("one key", (4, 1, 3, 2, 5)),
                                  ("large inputs (tanh saturates)", (3, 3, 4, 3, 4, 4.0)))]
    cases.append(_neural_autograd_case("against autograd at other sizes", *_neural_inputs(h, 3, 2, 3, 2, 3), True))
    return cases


# ------------------------------------------------------------------------------
# 11 expressive against dot-product on an angle
# ------------------------------------------------------------------------------

#: How closely the two contrasts must agree at the answer's c (relative).
CONTRAST_RTOL = 1e-8


def _log_contrast_gap(c, ct):
    """``log`` of the DPA contrast over the EA contrast at ``c`` (Eqs. 07.EG3, 07.EG4): increasing in ``c``."""
    from ..studies.geometry import weight_ratio  # noqa: PLC0415

    return math.log(float(weight_ratio("softmax", 1.0, ct, c=c))) - \
        math.log(float(weight_ratio("expressive", 1.0, ct, c=c)))


def crossover_angle(theta):
    """``(c*, slope)``: the ``c`` where the two contrasts are equal (bisection on ``log c``) and the
    derivative of the log contrast gap there, which turns a relative contrast tolerance into one on ``c``."""
    ct = math.cos(theta)
    lo, hi = 1e-12, 1.0
    while _log_contrast_gap(hi, ct) < 0:
        hi *= 2.0
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _log_contrast_gap(mid, ct) < 0 else (lo, mid)
    c = math.sqrt(lo * hi)
    dc = 1e-6 * c
    return c, (_log_contrast_gap(c + dc, ct) - _log_contrast_gap(c - dc, ct)) / (2.0 * dc)


def _angle_case(deg, hidden):
    def expect():
        c, slope = crossover_angle(math.radians(deg))
        return [Expect("close", f"crossover(theta) at {deg:.4g} degrees" if not hidden else "crossover(theta)", (0,),
                       np.float64(c), rtol=0.0, atol=CONTRAST_RTOL / slope,
                       low="at your c, EA is still the sharper one (its contrast is larger), so c is too small",
                       high="at your c, DPA is already the sharper one, so c is too large")]

    return Case(f"{deg:.4g} degrees" if not hidden else "an angle of the hidden set",
                (call("crossover", math.radians(deg)),), expect, hidden)


def expressive_angle_cases(hidden_seed, public_seed=None):
    degrees = np.array([5.0, 20.0, 45.0, 60.0, 75.0, 89.0])
    if public_seed is not None:  # the same spread of angles, other values
        degrees = degrees + _rng(11, public_seed).uniform(-0.9, 0.9, degrees.size)
    cases = [_angle_case(float(deg), False) for deg in degrees]
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

    def expect():
        return [Expect("finite", "expressive_weights(s, mask)", (0,), shape=s.shape,
                       hint="NaN or inf in the weights: 0/0 where a row has no normaliser (the convention gives it "
                            "weights 0), or inf/inf where z^2 overflows (write h = 1/(1 + 1/z^2))",
                       passed="every weight finite"),
                Expect("close", "expressive_weights(s, mask)", (0,), act(s, mask=mask), rtol=1e-12, atol=1e-15,
                       elementwise=True, inputs={"s": s})]

    return Case(kind, (call("expressive_weights", s, None if mask is None else mask),), expect, hidden,
                s.ndim if mask is None else None)  # (the axis hint reads unmasked cases only, as in exercise 03)


def no_normaliser_cases(hidden_seed, public_seed=None):
    rng = _rng(12, public_seed)
    rows = {
        "ordinary rows": rng.standard_normal((2, 5)),
        "a row with an exact zero": np.array([0.7, 0.0, -1.2, 2.0, 0.1]),
        "an all-zero row (no normaliser)": np.zeros(5),
        "scores of 1e200 (z^2 overflows)": np.array([1e200, 1.0, 0.0, -3e180, 2.0]),
        "scores of 1e-200 (h underflows: no normaliser)": np.array([1e-200, -1e-170, 0.0, 0.0, 1e-180]),
        "small scores (h ~ z^2)": np.array([1e-3, -2e-4, 5e-4, 1e-3, 3e-3]),
    }
    if public_seed is not None:  # the same kinds of rows, other values (zeros stay zeros)
        rows = {k: v * rng.uniform(0.5, 2.0, np.shape(v)) * rng.choice([-1.0, 1.0], np.shape(v))
                for k, v in rows.items()}
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
    return _require(cases, "an all-zero row (no normaliser)", "scores of 1e200 (z^2 overflows)",
                    "scores of 1e-200 (h underflows: no normaliser)", "a random mask with a fully masked row",
                    "huge and tiny scores in one row")


# ------------------------------------------------------------------------------
# 13 the central-difference step
# ------------------------------------------------------------------------------


def error_bound(h, S, M, kappa):
    """Truncation plus rounding error of a central difference with step ``h`` (derivation 22, section 4)."""
    return M * h * h / 6.0 + kappa * UNIT_ROUNDOFF * S / h


def best_step(S, M, kappa):
    """The step that minimises :func:`error_bound` (derivation 22, section 4)."""
    return (3.0 * kappa * UNIT_ROUNDOFF * S / M) ** (1.0 / 3.0)


def _step_cases(rng, decades, hidden, suffix=""):
    S, M = 10.0 ** rng.uniform(-decades, decades, 6), 10.0 ** rng.uniform(-decades, decades, 6)
    K = 10.0 ** rng.uniform(0, 2, 6)
    h = best_step(S, M, K) * np.array([0.3, 1.0, 3.0, 0.5, 2.0, 1.7])
    inputs = {"S": S, "M": M, "kappa": K}
    best = Case(f"best_step{suffix}", tuple(call("best_step", *a) for a in zip(S, M, K)),
                lambda: [Expect("close", "best_step(S, M, kappa)", ("stack", *range(6)), best_step(S, M, K),
                                rtol=1e-12, elementwise=True, inputs=inputs)], hidden)
    bound = Case(f"error_bound{suffix}", tuple(call("error_bound", *a) for a in zip(h, S, M, K)),
                 lambda: [Expect("close", "error_bound(h, S, M, kappa)", ("stack", *range(6)),
                                 error_bound(h, S, M, K), rtol=1e-12, elementwise=True, inputs=inputs)], hidden)
    return [best, bound]


def central_step_cases(hidden_seed, public_seed=None):
    cases = _step_cases(_rng(13, public_seed), 3, False, " for six random (S, M, kappa) over six decades")
    cases.append(Case("the step for exp'(0), with S = |f| = 1 and M = max |F'''| about 1",
                      (call("best_step", 1.0, 1.0),),
                      lambda: [Expect("close", "best_step(1.0, 1.0), kappa left at its default", (0,),
                                      np.float64(best_step(1.0, 1.0, 1.0)), rtol=1e-12)]))
    h = _hidden_rng(13, hidden_seed)
    cases += _step_cases(h, 8, True, " over sixteen decades")
    S, M = 10.0 ** h.uniform(-4, 4, 3), 10.0 ** h.uniform(-4, 4, 3)
    cases.append(Case("kappa left at its default", tuple(call("best_step", s_, m_) for s_, m_ in zip(S, M)),
                      lambda: [Expect("close", "best_step(S, M) with kappa left out", ("stack", 0, 1, 2),
                                      best_step(S, M, 1.0), rtol=1e-12, elementwise=True)], True))
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


def closure_witness_cases(hidden_seed, public_seed=None):
    def expect():
        best = closure_shift()
        # one message either way: a direction would let repeated submissions bisect to the answer
        wrong = "ANSWER is not the smallest shift c with gap <= 1e-6 (to within 1%)"
        return [Expect("range", "ANSWER", (0,), np.array([best - 1e-9 * abs(best), best + 0.01 * abs(best)]),
                       low=wrong, high=wrong, passed="ANSWER is the smallest shift with gap <= 1e-6, within 1%")]

    return [Case("the smallest shift for s = (0.5, -1, 1.5, 0.2)", (value("ANSWER"),), expect, secret=True)]


# ------------------------------------------------------------------------------
# The registry
# ------------------------------------------------------------------------------

_ACT = "refattn.core.activations"

EXERCISES = (
    Exercise(1, "softmax-vjp", "Derive softmax's vector-Jacobian product", "function",
             ("softmax_vjp(s, u)",), softmax_vjp_cases, part=1, difficulty=1, minutes=20,
             library=(f"{_ACT}:Softmax.backward",)),
    Exercise(2, "tanhmax-derivatives", "TanhMax's ell, rho' and ell', stable for every finite score",
             "function", ("ell(s)", "drho(s)", "dell(s)"), tanhmax_derivatives_cases, part=1, difficulty=1,
             minutes=20, library=(f"{_ACT}:TanhMax.ell", f"{_ACT}:TanhMax.drho", f"{_ACT}:TanhMax.dell")),
    Exercise(3, "reweighted-vjp", "One VJP for every activation (Eqs. 01.R4/01.R5)", "function",
             ("reweighted_vjp(p, rho, drho, dell, u)",), reweighted_vjp_cases, part=1, difficulty=2, minutes=30,
             library=(f"{_ACT}:Activation.backward",)),
    Exercise(4, "jacobian", "The Jacobian of phi = rho * softmax(ell) (Eq. 01.R3)", "function",
             ("jacobian(act, s)",), jacobian_cases, part=1, difficulty=2, minutes=25,
             library=(f"{_ACT}:Activation.jacobian",)),
    Exercise(5, "all-ones-cotangent", "A wrong sigsoftmax VJP that the all-ones cotangent passes",
             "function", ("wrong_vjp(s, u)",), all_ones_cases, part=1, difficulty=2, minutes=25,
             library=(f"{_ACT}:Softmax.backward", f"{_ACT}:SigSoftmax.ell")),
    Exercise(6, "signexp-at-zero", "SignExp at a score of 0: the jump, the slopes, the spike", "function",
             ("jump(s, u, j)", "slopes(s, u, j)", "central_at_zero(s, u, j, eps)"), signexp_at_zero_cases,
             part=2, difficulty=3, minutes=45,
             library=("refattn.theory.signexp_at_zero:signexp_near_zero",
                      "refattn.theory.signexp_at_zero:_quotient_closed_form")),
    Exercise(7, "tanhmax-velocity", "Proposition 1 for TanhMax, with the sign of Eq. 7 corrected",
             "function", ("velocity(s, o, c, delta_I)",), tanhmax_velocity_cases, part=2, difficulty=2,
             minutes=35, library=("refattn.theory.proposition1:tanhmax_velocity",
                                  "refattn.theory.proposition1:tanhmax_weights")),
    Exercise(8, "prop1-new-activation", "Proposition 1's Delta_II for a new activation (softplus-max)",
             "function", ("delta_II(s, o)",), prop1_new_cases, part=2, difficulty=2, minutes=35,
             library=("refattn.theory.proposition1:delta_II", "refattn.theory.proposition1:closed_form_delta_II")),
    Exercise(9, "closure-gap", "Proposition 2: the exact distance from softmax to TanhMax's range",
             "function", ("gap(s, c)",), closure_gap_cases, part=2, difficulty=3, minutes=40,
             library=("refattn.theory.proposition2:closure_gap_closed_form",)),
    Exercise(10, "neural-score-vjp", "The VJP of the Neural Attention score", "function",
             ("neural_vjp(q, k, params, grad_s)",), neural_vjp_cases, part=3, difficulty=3, minutes=60,
             library=("refattn.core.scores:Neural.backward",)),
    Exercise(11, "expressive-angle", "When is expressive attention sharper than dot-product on an angle?",
             "function", ("crossover(theta)",), expressive_angle_cases, part=2, difficulty=2, minutes=30,
             library=("refattn.exercises.graders:crossover_angle", "refattn.exercises.graders:_log_contrast_gap")),
    Exercise(12, "no-normaliser", "Expressive weights with zeros, masks and no normaliser", "function",
             ("expressive_weights(s, mask)",), no_normaliser_cases, part=3, difficulty=2, minutes=30,
             library=(f"{_ACT}:Expressive.ell", f"{_ACT}:Activation.forward")),
    Exercise(13, "central-difference-step", "The best step for central differences", "function",
             ("best_step(S, M, kappa=1.0)", "error_bound(h, S, M, kappa=1.0)"), central_step_cases, part=3,
             difficulty=1, minutes=20,
             library=("refattn.exercises.graders:best_step", "refattn.exercises.graders:error_bound")),
    Exercise(14, "closure-witness", "A numeric witness for the closure: the smallest shift", "number",
             ("ANSWER",), closure_witness_cases, part=2, difficulty=1, minutes=15,
             library=("refattn.exercises.graders:closure_shift",)),
    Exercise(15, "gradient-check", "Build a gradient check", "function",
             ("weights(name, s)", "gradient_check(name, s, jac, seed)"), gradient_check_cases, part=3,
             difficulty=3, minutes=45,
             library=("refattn.core.gradcheck:_central_differences", "refattn.core.gradcheck:gradcheck")),
)
