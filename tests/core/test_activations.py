"""Tests for refattn.core.activations: every registered activation, every shape and axis.

Gradients are checked three ways (analytic VJP vs autograd vs central
differences, float64, random cotangents); values against closed forms written
independently here; invariances; numerical edge cases with hypothesis;
conventions; error messages.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import refattn
from refattn import ACTIVATIONS, Activation, activation
from refattn.core.activations import NORMALISERS
from refattn.core.backend import cupy_available
from refattn.core.gradcheck import gradcheck

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL, random_scores

#: every built-in: the papers' activations and the newer normalisers (derivation 25)
BUILT_INS = ACTIVATIONS + NORMALISERS
SHAPES = [(6,), (3, 4), (2, 3, 4), (2, 2, 3, 3)]
SHAPE_AXES = [(shape, axis) for shape in SHAPES for axis in range(-len(shape), 0)]


def _check(name, s, axis, mask, **kw):
    act = activation(name)
    return gradcheck(
        lambda s: act(s, axis=axis, mask=mask),
        {"s": s},
        lambda u, s: {"s": act.backward(u, act.forward(s, axis=axis, mask=mask)[1])},
        name=f"{name} axis={axis}",
        **kw,
    )


# --------------------------------------------------------------------------
# Gradients, three ways
# --------------------------------------------------------------------------


@pytest.mark.parametrize("use_mask", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("shape,axis", SHAPE_AXES, ids=lambda v: str(v))
@pytest.mark.parametrize("name", BUILT_INS)
def test_vjp_three_ways(name, shape, axis, use_mask, rng):
    s = random_scores(name, shape, rng)
    mask = rng.random(shape) < 0.7 if use_mask else None
    res_ag = _check(name, s, axis, mask, checks=("autograd",), rtol=RTOL_AUTOGRAD, atol=1e-14)
    res_ag.assert_ok()
    res_fd = _check(name, s, axis, mask, checks=("central",), rtol=RTOL_CENTRAL, atol=1e-10)
    res_fd.assert_ok()


@pytest.mark.parametrize("name", BUILT_INS)
def test_vjp_with_broadcast_mask(name, rng):
    s = random_scores(name, (2, 3, 5), rng)
    mask = rng.random((1, 1, 5)) < 0.6
    mask[..., 0] = True
    _check(name, s, -1, mask, rtol=RTOL_CENTRAL).assert_ok()


@pytest.mark.parametrize("name", BUILT_INS)
def test_perturbed_vjp_is_caught(name, rng, monkeypatch):
    """A VJP off by 1e-4 in one entry must fail both checks."""
    act = activation(name)
    s = random_scores(name, (3, 5), rng)
    honest = type(act).backward

    def perturbed(self, grad_phi, cache):
        ds = honest(self, grad_phi, cache)
        bump = np.zeros_like(ds)
        bump[1, 2] = 1e-4 * (np.max(np.abs(ds)) + 1.0)
        return ds + bump

    monkeypatch.setattr(type(act), "backward", perturbed)
    res = _check(name, s, -1, None, rtol=RTOL_CENTRAL)
    assert not res.ok
    assert {c.check for c in res.failures()} == {"autograd", "central"}
    assert all(c.where == (1, 2) for c in res.failures())


@pytest.mark.parametrize("name", BUILT_INS)
def test_jacobian_matches_vjp_and_autograd(name, rng):
    from autograd import jacobian as ag_jacobian

    act = activation(name)
    s = random_scores(name, (7,), rng)
    J = act.jacobian(s)
    assert J.shape == (7, 7)
    u = rng.standard_normal(7)
    np.testing.assert_allclose(J.T @ u, act.backward(u, act.forward(s)[1]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(J, ag_jacobian(act)(s), rtol=1e-10, atol=1e-14)


@pytest.mark.filterwarnings("ignore:Output seems independent of input")
@pytest.mark.parametrize("name", BUILT_INS)
def test_g_h_derivatives_match_autograd(name, rng):
    """dg, dh (used by the score dynamics of Prop. 1) are the derivatives of g, h."""
    from autograd import elementwise_grad

    act = activation(name)
    s = random_scores(name, (9,), rng)
    np.testing.assert_allclose(act.dg(s), elementwise_grad(act.g)(s), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(act.dh(s), elementwise_grad(act.h)(s), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(act.drho(s), elementwise_grad(act.rho)(s), rtol=1e-12, atol=1e-14)
    sp = s[act.h(s) > 0]  # ell = log h is differentiable where h > 0
    np.testing.assert_allclose(act.dell(sp), elementwise_grad(act.ell)(sp), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", BUILT_INS)
def test_rho_ell_are_g_over_h_and_log_h(name, rng):
    act = activation(name)
    s = random_scores(name, (11,), rng, scale=3.0)
    h = act.h(s)
    pos = h > 0
    np.testing.assert_allclose(act.rho(s)[pos], (act.g(s) / np.where(pos, h, 1))[pos], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(act.ell(s)[pos], np.log(h[pos]), rtol=1e-12, atol=1e-13)
    assert np.all(act.ell(s)[~pos] == -np.inf)


# --------------------------------------------------------------------------
# Values against closed forms written independently
# --------------------------------------------------------------------------


def _closed_form(name, s):
    """phi(s) for a 1-D row, straight from each source's formula."""
    e = np.exp
    if name == "softmax":
        return e(s) / e(s).sum()
    if name == "tanhmax":  # TanhMax Eq. 6
        return (e(s) - e(-s)) / (e(s) + e(-s)).sum()
    if name == "signexp":  # Cog code: sign(p) * softmax(|p|)
        return np.sign(s) * e(np.abs(s)) / e(np.abs(s)).sum()
    if name == "expressive":  # Expressive Eq. 2
        h = s**2 / (1 + s**2)
        return h / h.sum()
    if name == "sigsoftmax":  # Kanai et al. 2018
        h = e(s) / (1 + e(-s))
        return h / h.sum()
    if name == "sigmoid":
        h = 1 / (1 + e(-s))
        return h / h.sum()
    if name == "linear":
        return s / len(s)
    if name == "relu":
        return np.maximum(s, 0) / len(s)
    if name == "cosformer":
        return np.maximum(s, 0) / np.maximum(s, 0).sum()
    if name == "softmax1":  # Miller (2023): exp(s) / (1 + sum exp(s))
        return e(s) / (1 + e(s).sum())
    if name == "softpick":  # Zuhri et al. (2025): relu(e^s - 1) / (sum |e^s - 1| + eps)
        return np.maximum(e(s) - 1, 0) / (np.abs(e(s) - 1).sum() + 1e-8)
    if name == "stablemax":  # Prieto et al. (2025): s(x) = x + 1 for x >= 0, 1 / (1 - x) below
        h = np.where(s >= 0, s + 1, 1 / (1 - np.minimum(s, 0)))
        return h / h.sum()
    if name == "taylor":  # Based (2024): phi(q) . phi(k) = 1 + s + s^2 / 2
        h = 1 + s + s**2 / 2
        return h / h.sum()
    raise AssertionError(f"no closed form written for {name}: add one")


@pytest.mark.parametrize("name", BUILT_INS)
def test_forward_matches_closed_form(name, rng):
    act = activation(name)
    for _ in range(5):
        s = 3 * rng.standard_normal(8)
        np.testing.assert_allclose(act(s), _closed_form(name, s), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(act(s), act.g(s) / (act.offset + act.h(s).sum()), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", BUILT_INS)
def test_mask_equals_dropping_the_entries(name, rng):
    act = activation(name)
    s = 2 * rng.standard_normal(9)
    keep = rng.random(9) < 0.6
    keep[0] = True
    out = act(s, mask=keep)
    np.testing.assert_allclose(out[keep], _closed_form(name, s[keep]), rtol=1e-12, atol=1e-15)
    assert np.all(out[~keep] == 0)


@pytest.mark.parametrize("shape,axis", SHAPE_AXES, ids=lambda v: str(v))
@pytest.mark.parametrize("name", BUILT_INS)
def test_any_axis_equals_moveaxis(name, shape, axis, rng):
    act = activation(name)
    s = 2 * rng.standard_normal(shape)
    expect = np.moveaxis(act(np.moveaxis(s, axis, -1)), -1, axis)
    np.testing.assert_allclose(act(s, axis=axis), expect, rtol=1e-14, atol=1e-16)


# --------------------------------------------------------------------------
# Invariances the mathematics implies
# --------------------------------------------------------------------------


def test_softmax_shift_invariance(rng):
    s = rng.standard_normal((4, 6))
    c = 100 * rng.standard_normal((4, 1))
    np.testing.assert_allclose(activation("softmax")(s + c), activation("softmax")(s), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["tanhmax", "signexp", "linear"])
def test_odd_activations(name, rng):
    act = activation(name)
    s = 2 * rng.standard_normal((4, 6))
    np.testing.assert_allclose(act(-s), -act(s), rtol=1e-14, atol=1e-16)


@pytest.mark.parametrize("name", ["softmax", "expressive", "sigsoftmax", "sigmoid", "cosformer"])
def test_nonnegative_and_sum_to_one(name, rng):
    act = activation(name)
    s = np.abs(rng.standard_normal((5, 7))) + 0.1 if name == "cosformer" else 3 * rng.standard_normal((5, 7))
    out = act(s)
    assert np.all(out >= 0)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-13)


def test_signexp_absolute_values_sum_to_one(rng):
    s = 3 * rng.standard_normal((5, 7))
    np.testing.assert_allclose(np.abs(activation("signexp")(s)).sum(-1), 1.0, rtol=1e-13)


def test_tanhmax_absolute_sum_below_one(rng):
    """sum|sinh s_i| < sum cosh s_k: TanhMax never reaches the softmax simplex
    (design.md, 'Known discrepancies'); the gap closes as all scores grow."""
    act = activation("tanhmax")
    s = rng.standard_normal((50, 6))
    assert np.all(np.abs(act(s)).sum(-1) < 1)
    gaps = [1 - np.abs(act(s + c)).sum(-1).max() for c in (2.0, 4.0, 8.0)]
    assert gaps[0] > gaps[1] > gaps[2] > 0


@pytest.mark.parametrize("name", ["linear", "relu"])
def test_unnormalised_divide_by_count_of_kept(name, rng):
    act = activation(name)
    s = rng.standard_normal(10)
    keep = np.arange(10) < 4
    np.testing.assert_allclose(act(s, mask=keep)[:4], act.g(s[:4]) / 4, rtol=1e-15)


# --------------------------------------------------------------------------
# Conventions: no normaliser, underflow, singular points
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILT_INS)
def test_fully_masked_row_is_zero_with_zero_gradient(name, rng):
    act = activation(name)
    s = random_scores(name, (3, 5), rng)
    mask = np.ones((3, 5), bool)
    mask[1] = False
    out = act(s, mask=mask)
    assert np.all(out[1] == 0) and np.all(np.isfinite(out))
    ds = act.backward(rng.standard_normal((3, 5)), act.forward(s, mask=mask)[1])
    assert np.all(ds[1] == 0) and np.all(np.isfinite(ds))
    np.testing.assert_allclose(out[[0, 2]], act(s[[0, 2]]), rtol=1e-15)


@pytest.mark.parametrize("name,row", [("expressive", [0.0, 0.0, 0.0]),
                                      ("expressive", [0.0, 1e-200, -1e-170]),
                                      ("cosformer", [0.0, -1.0, -3.0])])
def test_row_with_no_normaliser_is_zero(name, row, rng):
    act = activation(name)
    s = np.array(row)
    assert np.all(act(s) == 0)
    assert np.all(act.backward(rng.standard_normal(3), act.forward(s)[1]) == 0)


def test_expressive_isolated_zero_is_smooth(rng):
    """ell = -inf at z = 0, yet phi is differentiable there (h'(0) = 0):
    analytic, autograd and central differences all agree."""
    s = np.array([0.0, 0.7, -1.3, 2.0])
    res = _check("expressive", s, -1, None, rtol=RTOL_CENTRAL)
    res.assert_ok()
    assert activation("expressive")(s)[0] == 0


def test_expressive_underflow_threshold():
    act = activation("expressive")
    tiny = np.sqrt(np.finfo(np.float64).tiny)
    out = act(np.array([0.5 * tiny, 1.0]))
    assert out[0] == 0 and out[1] == 1
    # above the threshold, tiny scores still carry exact ratios
    np.testing.assert_allclose(act(np.array([1e-150, 2e-150])), [0.2, 0.8], rtol=1e-14)
    # float32 has its own threshold
    t32 = np.sqrt(np.finfo(np.float32).tiny)
    out32 = act(np.array([0.5 * t32, 2 * t32, 4 * t32], dtype=np.float32))
    # float32 log-space: ell ~ -88 carries an absolute error ~ 88 * 6e-8
    np.testing.assert_allclose(out32, [0, 0.2, 0.8], rtol=1e-5)


def test_signexp_at_zero_convention_and_dirac_spike():
    """At s_j = 0 the analytic VJP equals autograd (rho'(0) = 0), while central
    differences see the jump of rho = sign: about u_j * 2 p_j / (2 eps) with
    p_j = e^0 / sum e^|s| (derivations/01-reweighted-softmax.md section 4.1)."""
    act = activation("signexp")
    s = np.array([0.0, 0.5, -1.0, 2.0])
    u = np.array([1.0, 0.3, -0.2, 0.1])
    eps = 1e-6
    res = gradcheck(act, {"s": s}, lambda u, s: {"s": act.backward(u, act.forward(s)[1])},
                    cotangent=u, eps=eps, rtol=RTOL_AUTOGRAD)
    ag = [c for c in res.comparisons if c.check == "autograd"][0]
    fd = [c for c in res.comparisons if c.check == "central"][0]
    assert ag.ok
    assert not fd.ok and fd.where == (0,)
    p0 = 1.0 / np.exp(np.abs(s)).sum()
    # the spike: (phi_0(+eps) - phi_0(-eps)) / (2 eps) ~ 2 p0 / (2 eps) = p0 / eps
    assert abs(fd.max_abs - u[0] * p0 / eps) < 1e-3 * u[0] * p0 / eps
    assert act(s)[0] == 0


@pytest.mark.parametrize("name", ["relu", "cosformer"])
def test_kink_at_zero_convention(name):
    """rho'(0) = 0 (relu) / ell = -inf at 0 (cosformer): analytic equals autograd."""
    act = activation(name)
    s = np.array([0.0, 0.5, 1.5])
    res = gradcheck(act, {"s": s}, lambda u, s: {"s": act.backward(u, act.forward(s)[1])},
                    checks=("autograd",), rtol=RTOL_AUTOGRAD)
    res.assert_ok()


# --------------------------------------------------------------------------
# Numerical edge cases: no NaN or inf for any finite input
# --------------------------------------------------------------------------


def _finite_rows(dtype, max_magnitude):
    elems = st.floats(-max_magnitude, max_magnitude, allow_nan=False, allow_infinity=False,
                      width=np.dtype(dtype).itemsize * 8)
    return hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5), elements=elems)


def _assert_finite_everywhere(name, s, data):
    act = activation(name)
    axis = data.draw(st.integers(-s.ndim, s.ndim - 1), label="axis")
    mask = data.draw(hnp.arrays(bool, s.shape), label="mask") if data.draw(st.booleans()) else None
    out = act(s, axis=axis, mask=mask)
    assert out.dtype == s.dtype and out.shape == s.shape
    assert np.all(np.isfinite(out)), out
    u = data.draw(hnp.arrays(s.dtype, s.shape, elements=st.floats(-1, 1, width=s.dtype.itemsize * 8)),
                  label="u")
    ds = act.backward(u, act.forward(s, axis=axis, mask=mask)[1])
    assert ds.dtype == s.dtype
    assert np.all(np.isfinite(ds)), ds
    if act.formula.rho == "1" or name in ("tanhmax", "signexp", "softpick"):
        # bounded activations: |phi| <= 1 and rows sum (in absolute value) to at most 1
        assert np.all(np.abs(out) <= 1 + 1e-6)
        assert np.all(np.abs(out).sum(axis=axis) <= 1 + 1e-5)
    if mask is not None:
        assert np.all(out[~np.broadcast_to(mask, s.shape)] == 0)


@pytest.mark.parametrize("name", BUILT_INS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_finite_for_extreme_float64(name, data):
    s = data.draw(_finite_rows(np.float64, 1e300), label="s")
    _assert_finite_everywhere(name, s, data)


@pytest.mark.parametrize("name", BUILT_INS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_finite_for_any_float32(name, data):
    s = data.draw(_finite_rows(np.float32, float(np.finfo(np.float32).max)), label="s")
    _assert_finite_everywhere(name, s, data)


@pytest.mark.parametrize("name", BUILT_INS)
def test_float32_extremes_explicitly(name):
    act = activation(name)
    big = np.finfo(np.float32).max
    s = np.array([[-big, -big], [big, -big], [big, big], [-big, 0.0]], dtype=np.float32)
    out = act(s)
    assert out.dtype == np.float32 and np.all(np.isfinite(out))
    assert np.all(np.isfinite(act.backward(np.ones_like(s) * 0.5, act.forward(s)[1])))


@pytest.mark.parametrize("name", ["softmax", "sigsoftmax", "sigmoid", "tanhmax", "signexp"])
def test_normalised_rows_at_extremes_sum_to_one(name):
    """Rows at the float32 limit still have a normaliser: sum |phi| = 1
    (tanhmax: the gap e^{-2|s|} is below float32 resolution there)."""
    act = activation(name)
    big = np.finfo(np.float32).max
    s = np.array([[-big, -big / 2], [-big, -big], [big, big / 3]], dtype=np.float32)
    np.testing.assert_allclose(np.abs(act(s)).sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", BUILT_INS)
def test_dtype_preserved(name, dtype, rng):
    act = activation(name)
    s = rng.standard_normal((3, 4)).astype(dtype)
    assert act(s).dtype == dtype
    assert act.backward(s, act.forward(s)[1]).dtype == dtype
    np.testing.assert_allclose(act(s), act(s.astype(np.float64)), rtol=2e-5, atol=1e-6)


# --------------------------------------------------------------------------
# Errors name the argument
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILT_INS)
def test_clear_errors(name):
    act = activation(name)
    s = np.zeros((2, 3))
    with pytest.raises(TypeError, match="s: .*floating"):
        act(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(TypeError, match="s: "):
        act([[0.0, 1.0]])
    with pytest.raises(ValueError, match="s: .*non-empty"):
        act(np.zeros((2, 0)))
    with pytest.raises(ValueError, match="mask: shape"):
        act(s, mask=np.ones((3, 3), bool))
    with pytest.raises(TypeError, match="mask: expected dtype bool"):
        act(s, mask=np.ones((2, 3)))
    with pytest.raises(TypeError, match="mask: expected a boolean array"):
        act(s, mask=[[True, True, True]] * 2)
    with pytest.raises(ValueError, match="axis: 2 is out of range"):
        act(s, axis=2)
    with pytest.raises(TypeError, match="axis: expected an int"):
        act(s, axis=1.0)
    with pytest.raises(ValueError, match="grad_phi: shape"):
        act.backward(np.zeros((3, 2)), act.forward(s)[1])
    with pytest.raises(TypeError, match="grad_phi: "):
        act.backward(np.zeros((2, 3), dtype=int), act.forward(s)[1])
    with pytest.raises(ValueError, match="s: expected 1 dimensions"):
        act.jacobian(s)


def test_registry():
    assert refattn.ACTIVATIONS == ACTIVATIONS
    assert set(ACTIVATIONS) >= {"softmax", "tanhmax", "signexp", "expressive", "sigsoftmax",
                                "sigmoid", "linear", "relu", "cosformer"}
    assert not set(ACTIVATIONS) & set(NORMALISERS)
    for name in BUILT_INS:
        act = activation(name)
        assert act.name == name and act.source and act.__doc__
    with pytest.raises(ValueError, match="unknown activation 'nope'.*softmax"):
        activation("nope")
    with pytest.raises(TypeError, match="name: expected a string"):
        activation(3)


# --------------------------------------------------------------------------
# CuPy parity (skips without a GPU)
# --------------------------------------------------------------------------


@pytest.mark.skipif(not cupy_available(), reason="CuPy with a CUDA device is not available")
@pytest.mark.parametrize("name", BUILT_INS)
def test_cupy_parity(name, rng):
    import cupy as cp

    act = activation(name)
    s = random_scores(name, (3, 4, 6), rng)
    mask = rng.random((3, 4, 6)) < 0.7
    u = rng.standard_normal(s.shape)
    out = act(cp.asarray(s), axis=1, mask=cp.asarray(mask))
    assert isinstance(out, cp.ndarray)
    np.testing.assert_allclose(out.get(), act(s, axis=1, mask=mask), rtol=1e-12, atol=1e-15)
    ds = act.backward(cp.asarray(u), act.forward(cp.asarray(s), axis=1, mask=cp.asarray(mask))[1])
    assert isinstance(ds, cp.ndarray)
    np.testing.assert_allclose(ds.get(), act.backward(u, act.forward(s, axis=1, mask=mask)[1]), rtol=1e-12, atol=1e-15)
    with pytest.raises(TypeError, match="arrays: got CuPy"):
        act(cp.asarray(s), mask=mask)


def test_softmax_familiar_vjp_equals_the_generic_one(rng):
    """Softmax writes its backward pass as p (u - <u, p>); it must equal Eq. 01.R4 as the base
    class evaluates it, with and without a mask, along either axis. Both are a few roundings of
    terms no larger than max|u|, so they agree to a few ulps of that."""
    act = activation("softmax")
    assert type(act).backward is not Activation.backward  # softmax has its own
    s, u = 3.0 * rng.standard_normal((4, 7)), rng.standard_normal((4, 7))
    mask = rng.random((4, 7)) < 0.7
    mask[0] = mask[:, 0] = True
    for axis, m in ((-1, None), (0, mask), (-1, mask)):
        _, cache = act.forward(s, axis, m)
        familiar, generic = act.backward(u, cache), Activation.backward(act, u, cache)
        np.testing.assert_allclose(familiar, generic, rtol=0, atol=16 * np.finfo(float).eps * np.abs(u).max())
    assert np.abs(cache["p"] * u - generic).max() > 1e-2  # the comparison would catch a missing -<u, p> term
