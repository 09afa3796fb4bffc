"""Tests for refattn.theory.proposition2: Proposition 2 of TanhMax, corrected.

The claim as printed (softmax's range is a subset of TanhMax's) must fail
here: softmax outputs are never in TanhMax's range, and the preimage solver
refuses them. What is true is checked against independent computations:
closed forms for n = 1 and n = 2, exact decimal arithmetic for the closure
gap, autograd for the potential log sum cosh, and the structure of
log softmax for the rank bound.
"""

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest
from autograd import grad
import autograd.numpy as anp
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from refattn import activation
from refattn.theory.proposition2 import (
    closure_gap,
    closure_gap_closed_form,
    in_tanhmax_range,
    log_rank,
    tanhmax_l1_margin,
    tanhmax_l1_norm,
    tanhmax_preimage,
)

EPS_MACH = float(np.finfo(np.float64).eps)
TANHMAX, SOFTMAX = activation("tanhmax"), activation("softmax")

finite_rows = hnp.arrays(np.float64, st.integers(1, 12),
                         elements=st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False))
moderate_rows = hnp.arrays(np.float64, st.integers(1, 8),
                           elements=st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False))


def random_ball_point(rng, n, radius, p_zero=0.2):
    """A point of l1 norm ``radius`` with mixed signs and some exact zeros."""
    w = rng.standard_normal(n)
    w[rng.random(n) < p_zero] = 0.0
    if not np.any(w):
        w[0] = 1.0
    return w / np.sum(np.abs(w)) * radius


# --------------------------------------------------------------------------
# The claim as printed is false: softmax outputs are not TanhMax outputs
# --------------------------------------------------------------------------


def test_softmax_outputs_are_not_in_tanhmax_range(rng):
    s = 3.0 * rng.standard_normal((50, 7))  # (50, 7)
    p = SOFTMAX(s)
    assert not np.any(in_tanhmax_range(p))
    with pytest.raises(ValueError, match=r"^w: 50 row\(s\) are not in TanhMax's range"):
        tanhmax_preimage(p)
    # one softmax row among TanhMax rows is enough to refuse the batch
    w = TANHMAX(s)
    w[3] = p[3]
    assert in_tanhmax_range(w).tolist() == [i != 3 for i in range(50)]
    with pytest.raises(ValueError, match="softmax output"):
        tanhmax_preimage(w)


@settings(max_examples=150, deadline=None)
@given(finite_rows)
def test_softmax_outputs_never_in_range_property(s):
    p = SOFTMAX(s)
    assert not in_tanhmax_range(p)
    with pytest.raises(ValueError, match="^w: "):
        tanhmax_preimage(p)


def test_points_on_or_outside_the_sphere_are_refused():
    for w in ([0.5, -0.5], [1.0], [0.0, 1.0, 0.0], [0.7, 0.7], [-2.0, 0.1]):
        w = np.array(w)
        assert not in_tanhmax_range(w, slack=0.0)
        with pytest.raises(ValueError, match=r"^w: 1 row\(s\)"):
            tanhmax_preimage(w, slack=0.0)


def test_slack_is_the_rounding_allowance():
    n = 4
    default = 4 * n * EPS_MACH
    w = np.array([0.25, 0.25, 0.25, -(0.25 - 2 * default)])  # l1 norm 1 - 2 slack
    assert in_tanhmax_range(w)
    w2 = np.array([0.25, 0.25, 0.25, -(0.25 - default / 2)])  # within the slack of the sphere
    assert not in_tanhmax_range(w2)
    assert in_tanhmax_range(w2, slack=0.0)  # the bare strict test accepts it
    z = tanhmax_preimage(w2, slack=0.0)  # and its preimage exists (huge scores)
    np.testing.assert_allclose(TANHMAX(z), w2, rtol=1e-12, atol=1e-15)


# --------------------------------------------------------------------------
# (a) every TanhMax output is inside the open ball, with the margin of Eq. 05.P3
# --------------------------------------------------------------------------


def test_margin_identity(rng):
    s = 4.0 * rng.standard_normal((40, 6))  # (40, 6)
    l1 = tanhmax_l1_norm(s)
    margin = tanhmax_l1_margin(s)
    # independent: sum e^{-|s|} / sum cosh s, straight from the definitions
    direct = np.sum(np.exp(-np.abs(s)), axis=1) / np.sum(np.cosh(s), axis=1)
    np.testing.assert_allclose(margin, direct, rtol=1e-13)
    # 1 - l1 suffers cancellation: compare absolutely, at the rounding of an n-term sum
    np.testing.assert_allclose(1.0 - l1, margin, rtol=0, atol=8 * 6 * EPS_MACH)
    assert np.all(l1 < 1.0) and np.all(in_tanhmax_range(TANHMAX(s)))


def test_margin_along_other_axes_and_in_log_form(rng):
    s = rng.standard_normal((3, 5, 4))
    for axis in (0, 1, -1):
        expect = np.sum(np.exp(-np.abs(s)), axis=axis) / np.sum(np.cosh(s), axis=axis)
        np.testing.assert_allclose(tanhmax_l1_margin(s, axis), expect, rtol=1e-13)
        np.testing.assert_allclose(tanhmax_l1_margin(s, axis, log=True), np.log(expect), rtol=1e-13)
        np.testing.assert_allclose(tanhmax_l1_norm(s, axis), 1.0 - expect, rtol=1e-13)
    # huge scores: the margin underflows, its logarithm does not.
    # log(2 e^{-1000}) - log(2 cosh 1000) = log 2 - 2000 (1 + e^{-2000} rounds to 1)
    big = np.array([1000.0, -1000.0])
    assert tanhmax_l1_margin(big, log=True) == pytest.approx(np.log(2.0) - 2000.0, rel=1e-15)
    assert tanhmax_l1_margin(big) == 0.0
    assert tanhmax_l1_margin(np.zeros(5)) == 1.0  # s = 0: tanhmax(0) = 0


@settings(max_examples=150, deadline=None)
@given(finite_rows)
def test_every_tanhmax_output_is_in_the_closed_ball_huge_scores_included(s):
    w = TANHMAX(s)  # the library's stable forward: no overflow for any finite s
    assert np.all(np.isfinite(w))
    l1 = tanhmax_l1_norm(s)
    assert l1 <= 1.0 + 4 * s.size * EPS_MACH  # rounding may reach the sphere, never cross it
    log_margin = tanhmax_l1_margin(s, log=True)
    assert np.isfinite(log_margin) and log_margin <= 1e-15  # margin in (0, 1]: strictly inside


@settings(max_examples=150, deadline=None)
@given(moderate_rows)
def test_moderate_tanhmax_outputs_are_strictly_inside_in_floating_point(s):
    # margin >= e^{-10} / (n cosh 10) > 1e-9 for |s| <= 10, n <= 8: far above rounding
    w = TANHMAX(s)
    assert tanhmax_l1_norm(s) < 1.0
    assert in_tanhmax_range(w)
    np.testing.assert_allclose(TANHMAX(tanhmax_preimage(w)), w, rtol=1e-11, atol=1e-16)


# --------------------------------------------------------------------------
# (a) the preimage: onto the whole ball, and one-to-one
# --------------------------------------------------------------------------


@pytest.mark.parametrize("radius", [0.0, 0.3, 0.9, 1 - 1e-6, 1 - 1e-9, 1 - 1e-12])
@pytest.mark.parametrize("n", [1, 2, 3, 8, 40])
def test_preimage_round_trip(n, radius, rng):
    for _ in range(5):
        w = random_ball_point(rng, n, radius)
        s = tanhmax_preimage(w)
        assert s.dtype == np.float64 and np.all(np.isfinite(s))
        back = TANHMAX(s)
        # entrywise, relative to each |w_i| (small entries included), plus rounding of the sum
        np.testing.assert_allclose(back, w, rtol=1e-12, atol=2 * EPS_MACH)
        assert np.all(s[w == 0.0] == 0.0) and np.all(np.sign(s) == np.sign(w))


def test_preimage_n1_is_atanh(rng):
    w = rng.uniform(-0.999, 0.999, size=(20, 1))
    np.testing.assert_allclose(tanhmax_preimage(w), np.arctanh(w), rtol=1e-13, atol=1e-16)


def test_preimage_n2_closed_form(rng):
    # sqrt(x^2 + a^2) + sqrt(x^2 + b^2) = 1 squares to sqrt(x^2 + b^2) = (1 + b^2 - a^2) / 2
    for _ in range(20):
        w = random_ball_point(rng, 2, rng.uniform(0.05, 0.99), p_zero=0.0)
        a, b = w
        x = math.sqrt(((1 + b * b - a * a) / 2) ** 2 - b * b)
        np.testing.assert_allclose(tanhmax_preimage(w), np.arcsinh(w / x), rtol=1e-12)


def test_preimage_inverts_tanhmax(rng):
    s = 2.0 * rng.standard_normal((30, 5))  # (30, 5)
    np.testing.assert_allclose(tanhmax_preimage(TANHMAX(s)), s, rtol=1e-9, atol=1e-11)


def test_preimage_batches_and_axes(rng):
    w = np.stack([random_ball_point(rng, 4, r) for r in rng.uniform(0, 0.99, 6)])  # (6, 4)
    w = w.reshape(2, 3, 4).transpose(2, 0, 1)  # (4, 2, 3): rows along axis 0
    s = tanhmax_preimage(w, axis=0)
    assert s.shape == w.shape
    np.testing.assert_allclose(TANHMAX(s, axis=0), w, rtol=1e-12, atol=2 * EPS_MACH)


def test_tanhmax_is_the_gradient_of_a_strictly_convex_potential(rng):
    """tanhmax = grad log sum cosh, and its Jacobian diag(p) - phi phi^T is
    positive definite: the map is one-to-one and its image is n-dimensional,
    while softmax's Jacobian has 1 in its null space."""
    s = 1.5 * rng.standard_normal(6)
    potential = grad(lambda z: anp.log(anp.sum(anp.cosh(z))))
    np.testing.assert_allclose(potential(s), TANHMAX(s), rtol=1e-13)
    p = np.cosh(s) / np.sum(np.cosh(s))
    phi = TANHMAX(s)
    J = TANHMAX.jacobian(s)
    np.testing.assert_allclose(J, np.diag(p) - np.outer(phi, phi), atol=1e-15)
    assert np.min(np.linalg.eigvalsh(J)) > 0
    assert np.allclose(SOFTMAX.jacobian(s) @ np.ones(6), 0.0, atol=1e-15)


# --------------------------------------------------------------------------
# (b) the closure: tanhmax(s + c 1) -> softmax(s), with the exact gap
# --------------------------------------------------------------------------


def _gap_decimal(s, c, digits=60):
    """The l1 gap in decimal arithmetic with ``digits`` significant digits."""
    getcontext().prec = digits
    z = [Decimal(float(v)) for v in s]
    cd = Decimal(float(c))
    ep = [(v + cd).exp() for v in z]
    em = [(-(v + cd)).exp() for v in z]
    den_t = sum(a + b for a, b in zip(ep, em))
    es = [v.exp() for v in z]
    den_s = sum(es)
    return float(sum(abs((a - b) / den_t - e / den_s) for a, b, e in zip(ep, em, es)))


def test_closed_form_matches_exact_arithmetic(rng):
    cs = np.concatenate([np.linspace(0.0, 15.0, 16), [-3.0, -0.5, 20.0]])
    for _ in range(3):
        s = rng.standard_normal(5)
        cf = closure_gap_closed_form(s, cs)
        ref = np.array([_gap_decimal(s, c) for c in cs])
        np.testing.assert_allclose(cf, ref, rtol=1e-13)


def test_numerical_gap_matches_closed_form(rng):
    cs = np.linspace(0.0, 15.0, 31)
    for _ in range(4):
        s = 1.5 * rng.standard_normal(6)
        num, cf = closure_gap(s, cs), closure_gap_closed_form(s, cs)
        assert num.shape == cf.shape == (31,)
        # relative 1e-12 where the gap is not tiny; absolutely, the float64 difference of two
        # weight vectors is good to the rounding of its n entries (~ n eps_mach / n each)
        np.testing.assert_allclose(num, cf, rtol=1e-12, atol=8 * EPS_MACH)
        big = cf > 1e-3
        np.testing.assert_allclose(num[big], cf[big], rtol=1e-12)


def test_gap_decays_like_exp_minus_2c(rng):
    s = rng.standard_normal(4)
    B_over_A = np.sum(np.exp(-s)) / np.sum(np.exp(s))
    cs = np.arange(0.0, 16.0)
    cf = closure_gap_closed_form(s, cs)
    assert np.all(np.diff(cf) < 0)
    # gap e^{2c} = 2 (B/A) / (1 + q) -> 2 B / A
    np.testing.assert_allclose(cf[-1] * np.exp(2 * cs[-1]), 2 * B_over_A, rtol=1e-12)
    # numerically: gap(c + 1) / gap(c) = e^{-2} (1 + q_c) / (1 + q_{c+1}), q_c = e^{-2c} B / A;
    # rtol 1e-6 is the float64 rounding of gaps down to ~1e-10 (c <= 11)
    num = closure_gap(s, cs)
    q = np.exp(-2 * cs) * B_over_A
    np.testing.assert_allclose(num[1:12] / num[:11], np.exp(-2.0) * (1 + q[:11]) / (1 + q[1:12]),
                               rtol=1e-6)
    # far out, the exact gap is below 1e-18 and the float64 one sits at its rounding floor
    assert closure_gap_closed_form(s, 25.0) < 1e-18
    assert closure_gap(s, 25.0) <= 8 * EPS_MACH


def test_every_entry_of_the_difference_is_negative(rng):
    s = rng.standard_normal((5, 6))
    for c in (-2.0, 0.0, 1.0, 5.0, 9.0):
        d = TANHMAX(s + c) - SOFTMAX(s)
        assert np.all(d < 0)


def test_closure_path_is_a_straight_segment(rng):
    # Eq. 05.P9: tanhmax(s + c 1) = (1 - lam) softmax(s) - lam softmax(-s), lam = q / (1 + q)
    s = rng.standard_normal(5)
    B_over_A = np.sum(np.exp(-s)) / np.sum(np.exp(s))
    for c in (-4.0, -1.0, 0.0, 0.7, 3.0):
        q = np.exp(-2 * c) * B_over_A
        lam = q / (1 + q)
        expect = (1 - lam) * SOFTMAX(s) - lam * SOFTMAX(-s)
        np.testing.assert_allclose(TANHMAX(s + c), expect, rtol=1e-13, atol=1e-16)
        assert closure_gap_closed_form(s, c) == pytest.approx(2 * lam, rel=1e-13)


def test_gap_shapes_and_axis(rng):
    s = rng.standard_normal((3, 4, 5))
    for axis in (0, 1, 2):
        cf = closure_gap_closed_form(s, [0.0, 1.0], axis=axis)
        assert cf.shape == (2,) + tuple(np.delete(s.shape, axis))
        np.testing.assert_allclose(closure_gap(s, [0.0, 1.0], axis=axis), cf, rtol=1e-12, atol=1e-15)
    assert closure_gap(s, 2.0).shape == (3, 4)


@settings(max_examples=100, deadline=None)
@given(finite_rows, st.floats(-50.0, 50.0))
def test_closed_form_is_finite_and_in_range_property(s, c):
    g = closure_gap_closed_form(s, c)
    assert np.isfinite(g) and 0.0 <= g <= 2.0


# --------------------------------------------------------------------------
# (c) what survives: the log-rank is not capped at d + 1
# --------------------------------------------------------------------------


def test_log_rank_softmax_capped_tanhmax_full():
    n, d, m = 12, 3, 100
    sm = log_rank("softmax", n, d, m, seed=1)
    th = log_rank("tanhmax", n, d, m, seed=1)
    assert sm["rank"] == d + 1 == sm["softmax_bound"]
    assert sm["singular_values"][d + 1] < 1e-12 * sm["singular_values"][0]
    assert th["rank"] == n
    assert th["singular_values"][-1] > 1e-3 * th["singular_values"][0]
    assert th["singular_values"].shape == (n,)


def test_log_softmax_lies_in_the_span_of_W_and_ones():
    # independent reconstruction of log_rank's matrix for softmax: L = H W^T - lse 1^T
    n, d, m, seed = 9, 2, 40, 3
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((n, d)) / np.sqrt(d)
    H = rng.standard_normal((m, d))
    L = np.log(SOFTMAX(H @ W.T))
    basis = np.hstack([W, np.ones((n, 1))])  # (n, d + 1): rows of L lie in its column span
    coef, *_ = np.linalg.lstsq(basis, L.T, rcond=None)
    np.testing.assert_allclose(basis @ coef, L.T, atol=1e-12)
    sv = np.linalg.svd(L, compute_uv=False)
    np.testing.assert_allclose(log_rank("softmax", n, d, m, seed)["singular_values"], sv, rtol=1e-12)


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------


def test_bad_input():
    w = np.array([0.2, -0.3])
    with pytest.raises(TypeError, match="^w: "):
        in_tanhmax_range([0.2, 0.3])
    with pytest.raises(TypeError, match="^w: "):
        tanhmax_preimage(np.array([0, 1]))
    with pytest.raises(ValueError, match="^w: expected finite"):
        tanhmax_preimage(np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="^axis: "):
        tanhmax_preimage(w, axis=2)
    with pytest.raises(ValueError, match="^tol: "):
        tanhmax_preimage(w, tol=0.0)
    with pytest.raises(TypeError, match="^tol: "):
        tanhmax_preimage(w, tol="small")
    with pytest.raises(ValueError, match="^maxiter: "):
        tanhmax_preimage(w, maxiter=0)
    with pytest.raises(TypeError, match="^maxiter: "):
        tanhmax_preimage(w, maxiter=2.5)
    with pytest.raises(ValueError, match="^slack: "):
        in_tanhmax_range(w, slack=-1e-3)
    with pytest.raises(RuntimeError, match="maxiter=1"):
        tanhmax_preimage(np.array([0.5, -0.4]), maxiter=1)
    with pytest.raises(ValueError, match="^s: expected finite"):
        tanhmax_l1_margin(np.array([np.inf, 0.0]))
    with pytest.raises(TypeError, match="^s: "):
        closure_gap(np.array([1, 2]), 1.0)
    with pytest.raises(ValueError, match="^c: "):
        closure_gap(w, np.ones((2, 2)))
    with pytest.raises(ValueError, match="^c: "):
        closure_gap_closed_form(w, np.inf)
    with pytest.raises(TypeError, match="^c: "):
        closure_gap_closed_form(w, "1")
    with pytest.raises(ValueError, match="^activation: unknown"):
        log_rank("softmaxx", 5, 2, 10)
    with pytest.raises(ValueError, match="^activation: 'relu' gave exact zeros"):
        log_rank("relu", 5, 2, 10)
    with pytest.raises(ValueError, match="^n: "):
        log_rank("tanhmax", 1, 2, 10)
    with pytest.raises(TypeError, match="^seed: "):
        log_rank("tanhmax", 5, 2, 10, seed=0.5)
