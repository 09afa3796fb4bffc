"""Tests for refattn.theory.signexp_at_zero: signexp's gradient as one score crosses 0.

The closed forms are derived in derivations/09-signexp-at-zero.md; each is
checked here against a computation that does not use it: the library's
forward and VJP, autograd, one-sided difference quotients taken entirely on
one side of 0, and the rate at which the prediction's error shrinks with the
step.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refattn import activation
from refattn.studies.signexp_zero import report
from refattn.theory.signexp_at_zero import DEFAULT_OFFSETS, signexp_near_zero

SIGNEXP = activation("signexp")
EPS_MACH = float(np.finfo(np.float64).eps)
TINY = float(np.finfo(np.float64).tiny)  # smallest normal float64, 2.2e-308


@pytest.fixture(scope="module")
def result():
    return signexp_near_zero()


def _row(res, x):
    s = res["s"].copy()
    s[res["j"]] = x
    return s


def _F(res, x):
    return float(res["u"] @ SIGNEXP(_row(res, x)))


def _fd_rounding_bound(res):
    """Rounding error of (F(x+) - F(x-)) / (2 eps): |F| <= max|u|, each F good to ~n eps_mach."""
    return 4 * res["n"] * EPS_MACH * np.max(np.abs(res["u"])) / res["eps"]


def test_default_offsets_cover_both_sides_and_zero():
    off = np.array(DEFAULT_OFFSETS)
    assert 0.0 in off and np.all(np.isin([1e-8, -1e-8, 1e-1, -1e-1], off))
    assert len(off) == 17


def test_analytic_and_autograd_agree_everywhere(result):
    np.testing.assert_allclose(result["analytic"], result["autograd"], rtol=1e-13, atol=0)


def test_differences_agree_when_the_window_misses_zero(result):
    one = np.array(result["regime"]) == "one side"
    assert one.sum() == 10  # +-1e-5 ... +-1e-1
    # truncation eps^2 |F'''| / 6 ~ 1e-12 is below the rounding bound (~1e-9 max|u|)
    np.testing.assert_allclose(result["central"][one], result["analytic"][one],
                               rtol=0, atol=_fd_rounding_bound(result))
    np.testing.assert_allclose(result["central"][one], result["analytic"][one], rtol=1e-8)
    # and the closed-form quotient (09.Z6) tracks the library's quotient to the same bound;
    # 09.Z6 itself has no cancellation, so it matches the derivative to truncation, eps^2 ~ 1e-12
    np.testing.assert_allclose(result["central_exact"][one], result["central"][one],
                               rtol=0, atol=_fd_rounding_bound(result))
    np.testing.assert_allclose(result["central_exact"][one], result["analytic"][one], rtol=1e-10)


def test_differences_spike_when_the_window_straddles_zero(result):
    st_ = np.array(result["regime"]) == "straddles"
    assert st_.sum() == 5  # 0, +-1e-8, +-1e-7 with eps = 1e-6
    central = result["central"][st_]
    # exact algebra (09.Z6) and first-order prediction (09.Z8), relative to a spike of ~5e4
    np.testing.assert_allclose(central, result["central_exact"][st_], rtol=1e-9)
    np.testing.assert_allclose(central, result["central_predicted"][st_], rtol=1e-9)
    spike = result["jump"] / (2 * result["eps"])
    assert np.all(np.sign(central) == np.sign(result["u"][result["j"]]))
    assert np.all(np.abs(central - spike) < 1.0)  # the O(1) regular part, not O(1/eps)
    assert np.all(np.abs(result["analytic"][st_]) < 1.0)  # analytic and autograd: no spike


def test_window_touching_zero_sees_half_the_jump(result):
    tch = np.array(result["regime"]) == "touches"
    assert sorted(result["offsets"][tch]) == [-1e-6, 1e-6]
    eps, J = result["eps"], result["jump"]
    for delta, c in zip(result["offsets"][tch], result["central"][tch]):
        L = result["limit_plus"] if delta > 0 else result["limit_minus"]
        assert c == pytest.approx(J / (4 * eps) + L, rel=1e-9)


def test_jump_is_the_step_of_u_dot_phi(result):
    tiny = 1e-300
    J = _F(result, tiny) - _F(result, -tiny)
    assert result["jump"] == pytest.approx(J, rel=1e-13)
    # F(0) with sign(0) = 0 is the midpoint of the jump
    mid = 0.5 * (_F(result, tiny) + _F(result, -tiny))
    assert _F(result, 0.0) == pytest.approx(mid, rel=1e-13)


def test_one_sided_limits(result):
    j, u = result["j"], result["u"]
    for x, L in ((1e-300, result["limit_plus"]), (-1e-300, result["limit_minus"])):
        assert SIGNEXP.backward(u, SIGNEXP.forward(_row(result, x))[1])[j] == pytest.approx(L, rel=1e-13)
    # independently: forward differences taken wholly on one side of 0, O(h) accurate
    h = 1e-6
    fd_plus = (_F(result, 2 * h) - _F(result, h)) / h
    fd_minus = (_F(result, -h) - _F(result, -2 * h)) / h
    assert fd_plus == pytest.approx(result["limit_plus"], rel=1e-4)
    assert fd_minus == pytest.approx(result["limit_minus"], rel=1e-4)
    assert result["limit_plus"] != pytest.approx(result["limit_minus"], rel=1e-3)


def test_value_at_exactly_zero_is_the_documented_convention(result):
    j, u = result["j"], result["u"]
    s = _row(result, 0.0)
    ds = SIGNEXP.backward(u, SIGNEXP.forward(s)[1])
    assert ds[j] == 0.0 == result["at_zero"]
    assert result["analytic"][list(result["offsets"]).index(0.0)] == 0.0
    # Eq. 01.R4 by hand with sign(0) = 0: ds_i = p_i sign(s_i) (u_i sign(s_i) - sum_k u_k phi_k)
    p = np.exp(np.abs(s)) / np.sum(np.exp(np.abs(s)))
    phi = np.sign(s) * p
    by_hand = p * np.sign(s) * (u * np.sign(s) - u @ phi)
    np.testing.assert_allclose(ds, by_hand, rtol=1e-13, atol=0)
    # the other entries are the average of their one-sided limits; entry j is NOT:
    plus, minus = SIGNEXP.backward(u, SIGNEXP.forward(_row(result, 1e-300))[1]), SIGNEXP.backward(u, SIGNEXP.forward(_row(result, -1e-300))[1])
    others = np.arange(result["n"]) != j
    np.testing.assert_allclose(ds[others], 0.5 * (plus + minus)[others], rtol=1e-13)
    R = result["R"]
    assert 0.5 * (plus[j] + minus[j]) == pytest.approx(u[j] * R / (R + 1) ** 2, rel=1e-13)
    assert abs(0.5 * (plus[j] + minus[j])) > 1e-3


def test_subnormal_scores_analytic_keeps_the_limit_autograd_loses_digits():
    """At a subnormal s_j the analytic VJP is still the one-sided limit. Autograd's
    rule for abs, g * x / |x|, forms the subnormal product g * x first and loses
    digits; at the smallest subnormal it underflows to the value at 0. (A
    property of autograd, recorded in derivations/09-signexp-at-zero.md.)"""
    r = signexp_near_zero([1e-300, 2.2e-313, 5e-324, -5e-324])
    L = [r["limit_plus"]] * 3 + [r["limit_minus"]]
    np.testing.assert_allclose(r["analytic"], L, rtol=1e-13)
    assert r["autograd"][0] == pytest.approx(L[0], rel=1e-13)  # 1e-300 is a normal float
    assert np.all(np.isfinite(r["autograd"]))  # the subnormal values are autograd's business


def test_a_row_of_exact_zeros_gets_no_gradient(rng):
    """A consequence of the convention (derivation section 7): if every score of a row
    is exactly 0 (zero queries, say), phi = 0 and the whole VJP is 0, so gradient
    descent cannot leave that point; the one-sided limits are not 0."""
    u = rng.standard_normal(6)
    s = np.zeros(6)
    assert np.all(SIGNEXP(s) == 0.0) and np.all(SIGNEXP.backward(u, SIGNEXP.forward(s)[1]) == 0.0)
    # moving one entry off 0 by a hair gives entry 0 the one-sided limit (u_0 R - V) / (R + 1)^2,
    # with R = 5 and V = 0 (the other entries still have sign 0)
    s[0] = 1e-300
    assert SIGNEXP.backward(u, SIGNEXP.forward(s)[1])[0] == pytest.approx(u[0] * 5 / 36, rel=1e-13)


def test_prediction_error_is_first_order_in_eps():
    """09.Z8 drops O(eps) terms: shrinking eps tenfold shrinks the error about tenfold."""
    errs = []
    for eps in (1e-2, 1e-3, 1e-4):
        r = signexp_near_zero([0.3 * eps, -0.6 * eps], eps=eps, seed=3)
        errs.append(np.abs(r["central_exact"] - r["central_predicted"]))
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all((ratios > 7) & (ratios < 13)), ratios


def test_other_entry_and_row_length():
    r = signexp_near_zero([0.0, 1e-3, -1e-3], n=3, eps=1e-6, seed=7, j=-1)
    assert r["j"] == 2
    np.testing.assert_allclose(r["analytic"], r["autograd"], rtol=1e-13)
    np.testing.assert_allclose(r["central"][0], r["central_predicted"][0], rtol=1e-9)
    # n = 1: phi = sign(s), so F jumps by 2 u_0 and the spike is u_0 / eps
    r1 = signexp_near_zero([0.0, 0.5], n=1, eps=1e-3)
    assert r1["jump"] == pytest.approx(2 * r1["u"][0], rel=1e-15)
    assert r1["central"][0] == pytest.approx(r1["u"][0] / 1e-3, rel=1e-12)
    assert r1["central"][1] == 0.0 == r1["analytic"][1]


def _vjp_rounding(r):
    """Rounding bound of ds_0 = u_0 |phi_0| - phi_0 <u, phi> (Eq. 01.R5 for signexp): two
    evaluations of a few roundings each on terms no larger than |u_0| and max|u|
    (|phi| <= 1, |<u, phi>| <= max|u|), so the analytic VJP and autograd, which
    evaluate it in different orders, differ by at most about 8 u (|u_0| + max|u|)
    however much the two terms cancel."""
    u = np.abs(np.asarray(r["u"], dtype=float))
    return 8 * np.finfo(float).eps / 2 * (u[0] + u.max())


def _prediction_bound(r):
    """What Eq. 09.Z8 drops: the second-order terms of F on each side of 0.

    On one side of 0, F(s_j) = sum_i u_i phi_i is smooth with
    phi_i = +-p_i, p = softmax(|s|). Its second derivative in s_j is
    u_j p_j (1 - p_j)(1 - 2 p_j) - sum_{i != j} u_i p_i p_j (1 - 2 p_j) up to
    signs, so |F''| <= max|u| (max_x |x (1 - x)(1 - 2x)| + sum_i p_i)
    <= 1.1 max|u|. The window [delta - eps, delta + eps] splits at 0 into
    pieces of lengths eps +- delta, and the Taylor remainders of the two
    pieces, divided by 2 eps, add at most
    ((eps + delta)^2 + (eps - delta)^2) / (4 eps) * 1.1 max|u| <= 1.1 eps max|u|
    to the quotient."""
    return 1.1 * r["eps"] * np.abs(np.asarray(r["u"], dtype=float)).max()


@settings(max_examples=60, deadline=None)
@given(st.floats(-0.999, 0.999), st.integers(0, 10_000))
def test_straddling_windows_property(t, seed):
    eps = 1e-5
    r = signexp_near_zero([t * eps], eps=eps, seed=seed)
    assert r["regime"] == ["straddles"]
    np.testing.assert_allclose(r["central"], r["central_exact"], rtol=1e-9,
                               atol=_fd_rounding_bound(r))
    np.testing.assert_allclose(r["central"], r["central_predicted"], rtol=0,
                               atol=_prediction_bound(r) + _fd_rounding_bound(r))
    if t * eps == 0.0 or abs(t * eps) >= TINY:  # autograd's abs loses digits at subnormals (below)
        assert r["analytic"][0] == pytest.approx(r["autograd"][0], rel=1e-13, abs=_vjp_rounding(r))


@settings(max_examples=60, deadline=None)
@given(st.floats(-1.0, 1.0, allow_subnormal=True), st.integers(0, 10_000))
def test_analytic_autograd_and_limits_property(delta, seed):
    r = signexp_near_zero([delta], eps=1e-6, seed=seed)
    a = r["analytic"][0]
    assert np.isfinite(a)
    if delta == 0.0 or abs(delta) >= TINY:
        assert a == pytest.approx(r["autograd"][0], rel=1e-13, abs=_vjp_rounding(r))
    if delta == 0.0:
        assert a == 0.0
    elif abs(delta) < 1e-12:  # the analytic VJP sits at its one-sided limit
        L = r["limit_plus"] if delta > 0 else r["limit_minus"]
        assert a == pytest.approx(L, rel=1e-10, abs=1e-15)


def test_table_lists_every_offset(result):
    table = report(result)
    assert table.count("\n| ") == len(result["offsets"]) + 1  # header + one line per offset
    assert "straddles" in table and "one side" in table and "touches" in table


def test_bad_input():
    with pytest.raises(ValueError, match="^offsets: "):
        signexp_near_zero([0.0, np.nan])
    with pytest.raises(ValueError, match="^offsets: "):
        signexp_near_zero([2.0])
    with pytest.raises(ValueError, match="^offsets: "):
        signexp_near_zero([])
    with pytest.raises(TypeError, match="^offsets: "):
        signexp_near_zero(["0"])
    with pytest.raises(ValueError, match="^eps: "):
        signexp_near_zero(eps=0.0)
    with pytest.raises(TypeError, match="^eps: "):
        signexp_near_zero(eps="1e-6")
    with pytest.raises(ValueError, match="^n: "):
        signexp_near_zero(n=0)
    with pytest.raises(TypeError, match="^n: "):
        signexp_near_zero(n=2.0)
    with pytest.raises(ValueError, match="^j: "):
        signexp_near_zero(n=3, j=3)
    with pytest.raises(TypeError, match="^seed: "):
        signexp_near_zero(seed=None)
