"""Tests of refattn.core.gradcheck itself (derivations/22-central-differences.md).

What is checked, and against what:
* a correct VJP passes, for random smooth functions and points (hypothesis);
* a wrong one fails, and the report names the check, the argument, the index;
* one entry off by a relative 1e-6 is caught by central differences alone,
  for every registered activation, although the rounding bound is in the
  tolerance;
* an exactly-zero true gradient (softmax's shift invariance), where central
  differences return pure rounding noise, passes with atol = rtol = 0, and the
  noise stays below the bound;
* the rounding bound c u sum_j |u_j| |f_j| / h scales as stated: 1 / eps,
  linearly in the cotangent and in c; only outputs that move are summed;
* the Richardson truncation estimate equals the truncation error of a known
  function (sin), and is reported, not added;
* a constant cotangent warns; bad input gives one line naming the argument.
"""

import warnings

import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refattn import ACTIVATIONS, activation
from refattn.core.gradcheck import (ROUNDING_SAFETY, UNIT_ROUNDOFF, Comparison, GradcheckResult, compare,
                               gradcheck)

from tests.support import random_scores


# --- two small functions with hand-written VJPs --------------------------------------------


def scaled_sine(a, b):
    """f(a, b)_{rk} = a_k sin(b_rk): a (3,), b (2, 3) -> (2, 3)."""
    return a * anp.sin(b)


def scaled_sine_vjp(u, a, b):
    return {"a": np.sum(u * np.sin(b), axis=0),  # d f_rk / d a_k = sin b_rk
            "b": u * a * np.cos(b)}  # d f_rk / d b_rk = a_k cos b_rk


def shifted_softmax(s, t):
    """softmax(s + t) along the last axis: s (n,), t () -> (n,). Shift invariant,
    so d f / d t = 0 exactly, while differences in t see rounding noise."""
    z = s + t
    e = anp.exp(z - anp.max(z))
    return e / anp.sum(e)


def shifted_softmax_vjp(u, s, t):
    p = shifted_softmax(s, t)
    ds = p * (u - np.sum(u * p))  # the softmax VJP
    return {"s": ds, "t": np.zeros_like(t)}  # sum(ds) = 0: the shift has no effect


def ab(rng):
    return {"a": rng.standard_normal(3), "b": rng.standard_normal((2, 3))}


# --- a correct VJP passes, a wrong one fails and says where ---------------------------------


def test_a_correct_vjp_passes_both_checks(rng):
    res = gradcheck(scaled_sine, ab(rng), scaled_sine_vjp, name="a sin b")
    res.assert_ok()
    assert [(c.check, c.arg) for c in res.comparisons] == [
        ("autograd", "a"), ("central", "a"), ("autograd", "b"), ("central", "b")]
    for c in res.comparisons:
        assert c.n_checked == {"a": 3, "b": 6}[c.arg]
        assert (c.rounding > 0) == (c.check == "central")  # autograd has no rounding bound
        assert c.truncation is None  # not asked for


@settings(max_examples=40, deadline=None)
@given(a=hnp.arrays(np.float64, 3, elements=st.floats(-3, 3)),
       b=hnp.arrays(np.float64, (2, 3), elements=st.floats(-3, 3)),
       seed=st.integers(0, 2**31 - 1))
def test_a_correct_vjp_passes_at_any_point(a, b, seed):
    """Default tolerances (rtol 1e-6, atol 1e-12): truncation h^2 |f'''| / 6 <= 1.7e-13 |a|
    is within rtol; rounding within the bound, wherever the gradient entries vanish."""
    gradcheck(scaled_sine, {"a": a, "b": b}, scaled_sine_vjp, seed=seed).assert_ok()


def test_a_wrong_vjp_fails_and_the_report_says_where(rng):
    def wrong(u, a, b):
        g = scaled_sine_vjp(u, a, b)
        g["b"] = g["b"].copy()
        g["b"][1, 2] += 1e-3 * (np.abs(g["b"]).max() + 1.0)
        return g

    res = gradcheck(scaled_sine, ab(rng), wrong, name="a sin b, wrong")
    assert not res.ok
    assert {(c.check, c.arg, c.where) for c in res.failures()} == {("autograd", "b", (1, 2)),
                                                                 ("central", "b", (1, 2))}
    text = res.describe_failures()
    assert text.count("\n") == 1  # one line per failure
    for line, check in zip(text.split("\n"), ("autograd", "central")):
        assert line.startswith(f"a sin b, wrong: analytic VJP vs {check}, argument 'b': ")
        assert "at index (1, 2)" in line and "rounding bound" in line
    with pytest.raises(AssertionError, match=r"vs central, argument 'b'.*index \(1, 2\)"):
        res.assert_ok()
    assert "FAIL" in str(res) and "rounding<=" in str(res)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_one_entry_off_by_a_relative_1e6_is_caught_by_central_differences(name, rng):
    """A typical case: an activation on three rows of five scores; the largest
    entry of its VJP times 1 + 1e-6. At rtol 1e-7 the honest VJP passes (the
    truncation error is ~1e-10 relative) and the perturbed one fails: the
    rounding bound (~1e-9 here) is far below the error it must not hide."""
    act = activation(name)
    s = random_scores(name, (3, 5), rng)
    u = rng.standard_normal(s.shape)
    honest = act.backward(u, act.forward(s)[1])
    i = np.unravel_index(np.argmax(np.abs(honest)), s.shape)

    def perturbed(u_, s):
        g = act.backward(u_, act.forward(s)[1]).copy()
        g[i] *= 1 + 1e-6
        return {"s": g}

    kw = dict(cotangent=u, checks=("central",), rtol=1e-7, atol=0.0)
    ok = gradcheck(act, {"s": s}, lambda u_, s: {"s": act.backward(u_, act.forward(s)[1])}, **kw)
    ok.assert_ok()
    bad = gradcheck(act, {"s": s}, perturbed, **kw)
    (c,) = bad.comparisons
    assert not c.ok and c.where == i
    assert c.rounding < 0.1 * 1e-6 * np.abs(honest[i])


# --- an exactly-zero gradient: rounding noise, and the bound that covers it -----------------


@settings(max_examples=60, deadline=None)
@given(s=hnp.arrays(np.float64, st.integers(2, 8), elements=st.floats(-3, 3)),
       t=st.floats(-3, 3), seed=st.integers(0, 2**31 - 1))
def test_an_exactly_zero_gradient_passes_with_no_tolerance_but_the_bound(s, t, seed):
    """|s + t| <= 6: the exponents stay where c = 16 covers the rounding of
    softmax (derivation 22, section 6.2 and appendix: c = 5.1 would do)."""
    res = gradcheck(shifted_softmax, {"s": s, "t": np.array(t)}, shifted_softmax_vjp,
                    checks=("central",), rtol=0.0, atol=0.0, seed=seed)
    c = {c.arg: c for c in res.comparisons}["t"]
    assert c.ok and c.max_abs <= c.rounding, str(res)


def test_the_noise_is_real_and_below_the_bound():
    """Where d f / d t = 0 exactly, differences return rounding noise of order
    u |f| / h: here nonzero (so atol 1e-12 alone would fail it), and under the bound."""
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(50):
        s, t = rng.standard_normal(6), np.array(rng.standard_normal())
        res = gradcheck(shifted_softmax, {"s": s, "t": t}, shifted_softmax_vjp, checks=("central",),
                        seed=int(rng.integers(2**31)))
        c = res.comparisons[1]
        assert c.arg == "t" and c.ok and c.scale == c.max_abs  # the reference is the noise itself
        if c.rounding == 0:  # no output moved: the difference is exactly 0
            assert c.max_abs == 0
        else:
            worst = max(worst, c.max_abs / c.rounding)
    assert 0 < worst <= 1  # some draw shows noise; none exceeds the bound


# --- the bound scales as stated ---------------------------------------------------------------


def spread(x):
    """f(x) = exp(x) / (1 + |x|^2): every output moves with every x_i."""
    return anp.exp(x) / (1.0 + anp.sum(x ** 2))


def spread_vjp(u, x):
    f = spread(x)
    return {"x": u * f - 2.0 * x * np.sum(u * f) / (1.0 + np.sum(x ** 2))}


X0 = np.array([0.3, -1.2, 2.0, 0.1])


def _bound(eps=1e-6, scale_u=1.0, c=ROUNDING_SAFETY):
    u = scale_u * np.random.default_rng(3).standard_normal(4)
    res = gradcheck(spread, {"x": X0}, spread_vjp, checks=("central",), cotangent=u, eps=eps,
                    rounding_safety=c)
    res.assert_ok()
    return res.comparisons[0].rounding


def test_the_bound_is_c_u_sum_u_f_over_h():
    u = np.random.default_rng(3).standard_normal(4)
    want = ROUNDING_SAFETY * UNIT_ROUNDOFF * np.sum(np.abs(u) * spread(X0)) / 1e-6
    assert _bound() == pytest.approx(want, rel=1e-5)  # f(x +- h e_i) = f(x) to O(h)


def test_halving_eps_doubles_the_bound():
    b1, b2, b4 = _bound(1e-6), _bound(5e-7), _bound(2.5e-7)
    assert b2 / b1 == pytest.approx(2.0, rel=1e-5)
    assert b4 / b1 == pytest.approx(4.0, rel=1e-5)


def test_the_bound_is_linear_in_the_cotangent_and_in_c():
    b = _bound()
    assert _bound(scale_u=10.0) == pytest.approx(10 * b, rel=1e-12)
    assert _bound(c=2.0) == pytest.approx(2.0 / ROUNDING_SAFETY * b, rel=1e-12)
    assert _bound(c=0.0) == 0.0


def test_only_outputs_that_move_enter_the_bound(rng):
    """Rows of a softmax batch that x_i does not reach come out bit-identical:
    the bound of a (4, 5) batch is that of one row, not four."""
    act = activation("softmax")
    s = rng.standard_normal((4, 5))
    u = rng.standard_normal((4, 5))
    vjp = lambda u_, s: {"s": act.backward(u_, act.forward(s)[1])}  # noqa: E731
    whole = gradcheck(act, {"s": s}, vjp, cotangent=u, checks=("central",)).comparisons[0]
    rows = [gradcheck(act, {"s": s[r]}, vjp, cotangent=u[r], checks=("central",)).comparisons[0]
            for r in range(4)]
    assert whole.rounding == pytest.approx(max(c.rounding for c in rows), rel=1e-6)


def test_a_masked_subset_and_the_result_fields(rng):
    x = rng.standard_normal(50)
    res = gradcheck(lambda x: anp.sin(x), {"x": x}, lambda u, x: {"x": u * np.cos(x)}, max_fd_coords=7)
    (ag, fd) = res.comparisons
    assert ag.n_checked == 50 and fd.n_checked == 7 and fd.rounding > 0 and res.ok


# --- truncation, by Richardson extrapolation ------------------------------------------------


def test_richardson_estimates_the_truncation_error_of_sine(rng):
    """D(h) = u_i cos(x_i) sin(h) / h for f = sin: the error is u_i cos(x_i) (sin h / h - 1)
    ~ -u_i cos(x_i) h^2 / 6, and |D(2h) - D(h)| / 3 estimates it. At h = 1e-3 truncation
    (1.7e-7) dwarfs rounding (1e-13): the estimate must match the true error to 1e-4."""
    x, u, h = rng.standard_normal(5), rng.standard_normal(5), 1e-3
    res = gradcheck(lambda x: anp.sin(x), {"x": x}, lambda u_, x: {"x": u_ * np.cos(x)}, cotangent=u,
                    checks=("central",), eps=h, rtol=0.0, atol=0.0, richardson=True)
    (c,) = res.comparisons
    true_error = np.max(np.abs(u * np.cos(x) * (np.sin(h) / h - 1)))
    assert c.max_abs == pytest.approx(true_error, rel=1e-4)
    assert c.truncation == pytest.approx(true_error, rel=1e-4)
    assert not c.ok  # reported, not added: rtol = atol = 0 leaves only the rounding bound
    assert "truncation estimate" in res.describe_failures() and "truncation~" in str(res)


def test_richardson_does_not_change_the_verdict(rng):
    args = ab(rng)
    plain = gradcheck(scaled_sine, args, scaled_sine_vjp)
    rich = gradcheck(scaled_sine, args, scaled_sine_vjp, richardson=True)
    assert [c.ok for c in plain.comparisons] == [c.ok for c in rich.comparisons]
    assert [c.max_abs for c in plain.comparisons] == [c.max_abs for c in rich.comparisons]
    assert all((c.truncation is not None) == (c.check == "central") for c in rich.comparisons)


# --- compare and Comparison, as other modules use them -------------------------------------


def test_compare_adds_the_rounding_bound_and_fails_on_nan():
    a, r = np.array([1.0, 2.0]), np.array([1.0, 2.0 + 3e-9])
    assert not compare(a, r, check="x", arg="y", rtol=1e-9, atol=0.0).ok  # 3e-9 > 2e-9
    assert compare(a, r, check="x", arg="y", rtol=1e-9, atol=0.0, rounding=1e-9).ok
    nan = compare(np.array([np.nan, 2.0]), r, check="x", arg="y", rtol=1.0, atol=1.0, rounding=np.inf)
    assert not nan.ok and nan.where == (0,) and nan.max_abs == np.inf


def test_comparison_keeps_its_positional_form():
    c = Comparison("central", "x", 1e-9, 1e-3, (0,), 1e-6, True, 3)
    assert c.rounding == 0.0 and c.truncation is None
    r = GradcheckResult("f", 1e-6, 1e-12, 1e-6, [c])
    assert r.ok and r.describe_failures() == ""


# --- the cotangent and bad input ------------------------------------------------------------


def test_a_constant_cotangent_warns_and_does_hide_a_wrong_vjp(rng):
    """1^T J = 0 for softmax, so with u = 1 every VJP is 0, a VJP twice too large
    included; a random u exposes it."""
    act = activation("softmax")
    s = rng.standard_normal(5)
    twice = lambda u, s: {"s": 2 * act.backward(u, act.forward(s)[1])}  # noqa: E731
    with pytest.warns(UserWarning, match="cotangent: all entries are equal"):
        hidden = gradcheck(act, {"s": s}, twice, cotangent=np.ones(5))
    assert hidden.ok
    assert not gradcheck(act, {"s": s}, twice).ok


def test_a_scalar_output_does_not_warn(rng):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gradcheck(lambda x: anp.sum(anp.sin(x)), {"x": rng.standard_normal(4)},
                  lambda u, x: {"x": u * np.cos(x)}, cotangent=np.array(1.0)).assert_ok()


def _bad(**override):
    kw = dict(fun=scaled_sine, args={"a": np.ones(3), "b": np.ones((2, 3))}, vjp=scaled_sine_vjp)
    kw.update(override)
    return gradcheck(**kw)


@pytest.mark.parametrize("override, exc, first_words", [
    (dict(args={}), TypeError, "args:"),
    (dict(args=[np.ones(3)]), TypeError, "args:"),
    (dict(args={"a": np.ones(3, np.float32), "b": np.ones((2, 3))}), TypeError, "args['a']:"),
    (dict(args={"a": [1.0, 2.0, 3.0], "b": np.ones((2, 3))}), TypeError, "args['a']:"),
    (dict(args={"a": np.array([1.0, 1e20, 1.0]), "b": np.ones((2, 3))}), ValueError, "args['a']:"),
    (dict(args={"a": np.array([1.0, np.nan, 1.0]), "b": np.ones((2, 3))}), ValueError, "args['a']:"),
    (dict(eps=0.0), ValueError, "eps:"),
    (dict(eps=float("nan")), ValueError, "eps:"),
    (dict(eps="1e-6"), TypeError, "eps:"),
    (dict(rtol=-1e-6), ValueError, "rtol:"),
    (dict(atol=float("inf")), ValueError, "atol:"),
    (dict(rounding_safety=-1.0), ValueError, "rounding_safety:"),
    (dict(max_fd_coords=0), ValueError, "max_fd_coords:"),
    (dict(max_fd_coords=2.5), TypeError, "max_fd_coords:"),
    (dict(checks=("central", "forward")), ValueError, "checks:"),
    (dict(cotangent=np.ones(3)), ValueError, "cotangent:"),
    (dict(cotangent=np.full((2, 3), np.nan)), ValueError, "cotangent:"),
    (dict(vjp=lambda u, a, b: [u]), TypeError, "vjp:"),
    (dict(vjp=lambda u, a, b: {"a": np.zeros(3)}), KeyError, "vjp:"),
    (dict(vjp=lambda u, a, b: {"a": np.zeros(4), "b": np.zeros((2, 3))}), ValueError, "a:"),
])
def test_bad_input_gives_one_line_naming_the_argument(override, exc, first_words):
    with pytest.raises(exc) as info:
        _bad(**override)
    msg = info.value.args[0]
    assert msg.startswith(first_words) and "\n" not in msg, msg


def test_a_single_check_may_be_named_by_a_string(rng):
    res = gradcheck(scaled_sine, ab(rng), scaled_sine_vjp, checks="central")
    assert {c.check for c in res.comparisons} == {"central"} and res.ok


# --- a check that cannot fail is refused ----------------------------------------------------


def _wrong_vjp(u, a, b):
    """Twice the right VJP: every check that compares anything fails it."""
    return {k: 2 * g for k, g in scaled_sine_vjp(u, a, b).items()}


@pytest.mark.parametrize("override, exc, first_words", [
    (dict(checks=()), ValueError, "checks: expected at least one"),
    (dict(checks=[]), ValueError, "checks: expected at least one"),
    (dict(args={"a": np.ones(0), "b": np.ones((2, 3))}, fun=lambda a, b: b * anp.sum(a),
          vjp=lambda u, a, b: {"a": np.zeros(0), "b": 2 * u}), ValueError, "args['a']: an empty array"),
    (dict(cotangent=np.zeros((2, 3))), ValueError, "cotangent: all entries are 0"),
    (dict(args={"a": np.ones(3), "b": np.ones((0, 3))}), ValueError, "args['b']: an empty array"),
    (dict(fun=lambda a, b: (a * b)[:0]), ValueError, "fun: its output is empty"),
    (dict(args={"a": np.ma.masked_array(np.ones(3)), "b": np.ones((2, 3))}), TypeError, "args['a']: a masked array"),
    (dict(args={"a": np.ones(3), "b": np.asmatrix(np.ones((2, 3)))}), TypeError, "args['b']: numpy.matrix"),
])
def test_a_wrong_vjp_never_passes_vacuously(override, exc, first_words):
    """The reproductions: ``gradcheck(..., checks=())`` returned ok for a wrong VJP, and so did an
    empty argument and an all-zero cotangent."""
    with pytest.raises(exc) as info:
        _bad(**{"vjp": _wrong_vjp, **override})
    assert info.value.args[0].startswith(first_words), info.value.args[0]
    assert not _bad(vjp=_wrong_vjp).ok  # the same wrong VJP, checked for real, fails


def test_a_result_with_no_comparison_is_not_ok():
    empty = GradcheckResult(name="nothing", rtol=1e-6, atol=1e-12, eps=1e-6)
    assert not empty.ok and "no comparison was made" in empty.describe_failures()
    with pytest.raises(AssertionError, match="nothing was checked"):
        empty.assert_ok()
