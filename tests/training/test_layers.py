"""Tests for refattn.training.layers: linear, relu, layer norm and the two losses.

What is checked, and against what (derivations/21-layers.md):
* every VJP three ways with refattn.core.gradcheck (hand-derived vs autograd vs
  central differences, float64, random cotangents), with and without a
  leading seed axis;
* values against closed forms written independently here: linear against a
  loop over seeds and rows, layer norm's row moments and its one-hot and
  two-entry closed forms, both losses against a direct log of a probability;
* properties of the VJPs a student can check by hand (layer norm's and the
  softmax cross-entropy's gradient rows sum to zero);
* numerical edge cases with hypothesis: huge logits keep both losses and
  their VJPs finite, a constant row keeps layer norm finite;
* float32 in, float32 out; the fake device (no host copies); bad input, with
  one-line errors naming the argument.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refattn.core.backend import to_numpy
from refattn.training import fast_layers
from refattn.training import layers as reference_layers
from refattn.core.gradcheck import gradcheck
from refattn.training.layers import (
    layer_norm,
    layer_norm_backward,
    linear,
    linear_backward,
    relu_layer,
    relu_layer_backward,
    sigmoid_cross_entropy,
    sigmoid_cross_entropy_backward,
    softmax_cross_entropy,
    softmax_cross_entropy_backward,
)

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL

S = 3  # seeds


def three_ways(fun, args, vjp, name):
    """Analytic VJP vs autograd (to rounding) and vs central differences."""
    gradcheck(fun, args, vjp, name=name, rtol=RTOL_AUTOGRAD, atol=1e-14, checks=("autograd",)).assert_ok()
    gradcheck(fun, args, vjp, name=name, rtol=RTOL_CENTRAL, atol=1e-10, checks=("central",)).assert_ok()


# --------------------------------------------------------------------------
# linear
# --------------------------------------------------------------------------

#: (id, x shape, W shape, with a bias): without and with a leading seed axis
LINEAR_CASES = [
    ("one-row", (4,), (5, 4), True),
    ("rows", (2, 3, 4), (5, 4), True),
    ("no-bias", (2, 3, 4), (5, 4), False),
    ("seeds-one-row", (S, 4), (S, 5, 4), True),
    ("seeds", (S, 2, 3, 4), (S, 5, 4), True),
    ("seeds-no-bias", (S, 2, 4), (S, 5, 4), False),
]


def _linear_args(rng, xs, ws, bias):
    args = {"x": rng.standard_normal(xs), "W": rng.standard_normal(ws)}
    if bias:
        args["b"] = rng.standard_normal(ws[:-1])
    return args


@pytest.mark.parametrize("xs,ws,bias", [c[1:] for c in LINEAR_CASES], ids=[c[0] for c in LINEAR_CASES])
def test_linear_vjp_three_ways(xs, ws, bias, rng):
    args = _linear_args(rng, xs, ws, bias)

    def fun(x, W, b=None):
        return linear(x, W, b)[0]

    def vjp(u, x, W, b=None):
        dx, dW, db = linear_backward(u, linear(x, W, b)[1])
        assert (db is None) == (b is None)
        return {"x": dx, "W": dW, **({"b": db} if b is not None else {})}

    three_ways(fun, args, vjp, f"linear x{xs} W{ws}")


@pytest.mark.parametrize("xs,ws,bias", [c[1:] for c in LINEAR_CASES], ids=[c[0] for c in LINEAR_CASES])
def test_linear_matches_a_loop_over_seeds_and_rows(xs, ws, bias, rng):
    """y_n = W x_n + b, row by row; with a seed axis each seed uses its own W[s], b[s]."""
    args = _linear_args(rng, xs, ws, bias)
    x, W, b = args["x"], args["W"], args.get("b")
    y = linear(x, W, b)[0]
    seeded = W.ndim == 3
    xs_, Ws_, bs_ = (x, W, b) if seeded else (x[None], W[None], None if b is None else b[None])
    ref = np.empty(xs_.shape[:-1] + (W.shape[-2],))
    for s in range(xs_.shape[0]):
        for n in np.ndindex(*xs_.shape[1:-1]):
            row = [math.fsum(Ws_[s][o, j] * xs_[s][n][j] for j in range(W.shape[-1])) for o in range(W.shape[-2])]
            ref[(s,) + n] = np.array(row) + (0.0 if bs_ is None else bs_[s])
    np.testing.assert_allclose(y, ref if seeded else ref[0], rtol=1e-13, atol=1e-14)


def test_linear_seed_gradients_are_per_seed(rng):
    """dW and db keep the seed axis: seed s's slice is the gradient of seed s's rows alone."""
    x, W, b = rng.standard_normal((S, 2, 4)), rng.standard_normal((S, 5, 4)), rng.standard_normal((S, 5))
    u = rng.standard_normal((S, 2, 5))
    dx, dW, db = linear_backward(u, linear(x, W, b)[1])
    for s in range(S):
        dxs, dWs, dbs = linear_backward(u[s], linear(x[s], W[s], b[s])[1])
        np.testing.assert_allclose(dW[s], dWs, rtol=1e-14)
        np.testing.assert_allclose(db[s], dbs, rtol=1e-14)
        np.testing.assert_allclose(dx[s], dxs, rtol=1e-14)


# --------------------------------------------------------------------------
# relu
# --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), (S, 2, 3, 4)], ids=["1d", "3d", "seeds"])
def test_relu_vjp_three_ways(shape, rng):
    x = rng.standard_normal(shape)
    x = np.where(np.abs(x) < 0.05, 0.05 * np.sign(x + 1e-300), x)  # keep differences off the kink
    three_ways(lambda x: relu_layer(x)[0], {"x": x}, lambda u, x: {"x": relu_layer_backward(u, relu_layer(x)[1])},
               f"relu {shape}")


def test_relu_values_and_kink_convention():
    x = np.array([-2.0, -0.0, 0.0, 1e-300, 3.0])
    np.testing.assert_array_equal(relu_layer(x)[0], np.maximum(x, 0.0))
    np.testing.assert_array_equal(relu_layer_backward(np.full(5, 2.0), relu_layer(x)[1]),
                                  [0.0, 0.0, 0.0, 2.0, 2.0])  # relu'(0) = 0


# --------------------------------------------------------------------------
# layer norm
# --------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [1e-5, 1e-3])
@pytest.mark.parametrize("shape", [(5,), (3, 4, 5), (S, 2, 3, 4)], ids=["1d", "3d", "seeds"])
def test_layer_norm_vjp_gradcheck(shape, eps, rng):
    x = rng.standard_normal(shape)
    three_ways(lambda x: layer_norm(x, eps)[0], {"x": x}, lambda u, x: {"x": layer_norm_backward(u, layer_norm(x, eps)[1])},
               f"layer_norm {shape} eps={eps}")


def test_layer_norm_moments(rng):
    """Each output row has mean 0 and mean square var / (var + eps): variance 1 up to eps."""
    x = 3.0 * rng.standard_normal((S, 4, 5, 7)) + 2.0
    eps = 1e-5
    z = layer_norm(x, eps)[0]
    var = x.var(axis=-1, keepdims=True)
    np.testing.assert_allclose(z.mean(axis=-1), 0.0, atol=1e-14)
    np.testing.assert_allclose(np.mean(z * z, axis=-1, keepdims=True), var / (var + eps), rtol=1e-13)


@pytest.mark.parametrize("d", [2, 3, 16])
def test_layer_norm_of_one_hot_closed_form(d):
    """derivations/11-nt-model.md (11.M2'): LN(e_x) = (d e_x - 1) / sqrt(d - 1 + d^2 eps)."""
    eps = 1e-3
    eye = np.eye(d)
    expected = (d * eye - 1.0) / math.sqrt(d - 1 + d * d * eps)
    np.testing.assert_allclose(layer_norm(eye, eps)[0], expected, rtol=1e-14, atol=1e-15)


def test_layer_norm_of_two_vectors_is_a_soft_sign(rng):
    """d = 2 (derivation 11, step 11.E8): LN(h) = (1, -1) Delta / sqrt(Delta^2 + 4 eps), Delta = h_1 - h_2."""
    h = rng.standard_normal((50, 2)) * np.logspace(-4, 1, 50)[:, None]
    eps = 1e-5
    delta = h[:, 0] - h[:, 1]
    expected = np.array([1.0, -1.0]) * (delta / np.sqrt(delta ** 2 + 4 * eps))[:, None]
    np.testing.assert_allclose(layer_norm(h, eps)[0], expected, rtol=1e-12, atol=1e-15)


def test_layer_norm_vjp_rows_sum_to_zero(rng):
    """Shifting a row by a constant does not change its LN, so dx sums to 0 per row (21.N5)."""
    x, u = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    np.testing.assert_allclose(layer_norm_backward(u, layer_norm(x)[1]).sum(axis=-1), 0.0, atol=1e-14)


@settings(max_examples=60, deadline=None)
@given(c=st.floats(-1e12, 1e12, allow_nan=False), d=st.integers(1, 9),
       eps=st.sampled_from([1e-12, 1e-5, 1.0]))
def test_layer_norm_of_a_constant_row_is_finite(c, d, eps):
    x = np.full((2, d), c)
    u = np.linspace(-1.0, 1.0, 2 * d).reshape(2, d)
    z = layer_norm(x, eps)[0]
    assert np.all(np.isfinite(z)) and np.all(np.abs(z) <= math.sqrt(d))  # mean(z^2) < 1
    assert np.all(np.isfinite(layer_norm_backward(u, layer_norm(x, eps)[1])))


# --------------------------------------------------------------------------
# softmax cross-entropy
# --------------------------------------------------------------------------


@pytest.mark.parametrize("seed_axis", [False, True], ids=["mean", "per-seed"])
@pytest.mark.parametrize("shape", [(4,), (3, 4), (S, 2, 3)], ids=["1-token", "2d", "3d"])
def test_softmax_cross_entropy_vjp_three_ways(shape, seed_axis, rng):
    V = 5
    logits = 2.0 * rng.standard_normal(shape + (V,))
    target = rng.integers(0, V, shape)
    three_ways(lambda y: softmax_cross_entropy(y, target, seed_axis=seed_axis)[0], {"y": logits},
               lambda u, y: {"y": softmax_cross_entropy_backward(u, softmax_cross_entropy(y, target, seed_axis=seed_axis)[1])},
               f"softmax_cross_entropy {shape} seed_axis={seed_axis}")


def _direct_nll(logits, target):
    """-log softmax(y)[target], written directly (fine for moderate logits)."""
    p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    return -np.log(np.take_along_axis(p, target[..., None], axis=-1)[..., 0])


def test_softmax_cross_entropy_closed_form(rng):
    logits = 3.0 * rng.standard_normal((S, 3, 4, 5))
    y = rng.integers(0, 5, (S, 3, 4))
    nll = _direct_nll(logits, y)
    per_seed = softmax_cross_entropy(logits, y, seed_axis=True)[0]
    assert per_seed.shape == (S,)
    np.testing.assert_allclose(per_seed, nll.mean(axis=(1, 2)), rtol=1e-13)
    np.testing.assert_allclose(softmax_cross_entropy(logits, y)[0], nll.mean(), rtol=1e-13)
    np.testing.assert_allclose(softmax_cross_entropy(logits + 800.0, y, seed_axis=True)[0], per_seed,
                               rtol=1e-12)  # the shift keeps exp finite
    # the VJP: (softmax - onehot) / T, each token's row summing to zero
    g = rng.standard_normal(S)
    d = softmax_cross_entropy_backward(g, softmax_cross_entropy(logits, y, seed_axis=True)[1])
    p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    expected = (p - np.eye(5)[y]) * g[:, None, None, None] / 12
    np.testing.assert_allclose(d, expected, rtol=1e-12, atol=1e-16)
    np.testing.assert_allclose(d.sum(axis=-1), 0.0, atol=1e-16)


@settings(max_examples=80, deadline=None)
@given(scale=st.floats(1.0, 1e6), shift=st.floats(-1e8, 1e8), seed=st.integers(0, 2**16))
def test_softmax_cross_entropy_large_logits_stay_finite(scale, shift, seed):
    rng = np.random.default_rng(seed)
    logits = scale * rng.standard_normal((2, 3, 6)) + shift
    y = rng.integers(0, 6, (2, 3))
    loss = softmax_cross_entropy(logits, y, seed_axis=True)[0]
    d = softmax_cross_entropy_backward(np.ones(2), softmax_cross_entropy(logits, y, seed_axis=True)[1])
    assert np.all(np.isfinite(loss)) and np.all(loss >= 0)
    assert np.all(np.isfinite(d)) and np.all(np.abs(d) <= 1.0 / 3)
    # the loss is m - y_t + log sum exp(y - m); for a dominant logit it is the gap
    m = logits.max(axis=-1)
    gap = m - np.take_along_axis(logits, y[..., None], -1)[..., 0]
    assert np.all(loss >= gap.mean(axis=1) * (1 - 1e-12))
    assert np.all(loss <= (gap + math.log(6)).mean(axis=1) * (1 + 1e-12) + 1e-12)


# --------------------------------------------------------------------------
# sigmoid (binary) cross-entropy
# --------------------------------------------------------------------------


@pytest.mark.parametrize("seed_axis", [False, True], ids=["mean", "per-seed"])
@pytest.mark.parametrize("shape", [(5,), (S, 4)], ids=["1d", "2d"])
def test_sigmoid_cross_entropy_vjp_three_ways(shape, seed_axis, rng):
    a = 2.0 * rng.standard_normal(shape)
    labels = rng.uniform(0.0, 1.0, shape)  # soft labels
    three_ways(lambda a: sigmoid_cross_entropy(a, labels, seed_axis=seed_axis)[0], {"a": a},
               lambda u, a: {"a": sigmoid_cross_entropy_backward(u, sigmoid_cross_entropy(a, labels, seed_axis=seed_axis)[1])},
               f"sigmoid_cross_entropy {shape} seed_axis={seed_axis}")


def test_sigmoid_cross_entropy_closed_form(rng):
    a = 3.0 * rng.standard_normal((S, 6))
    labels = rng.integers(0, 2, (S, 6))
    sig = 1.0 / (1.0 + np.exp(-a))
    direct = -(labels * np.log(sig) + (1 - labels) * np.log(1.0 - sig))
    np.testing.assert_allclose(sigmoid_cross_entropy(a, labels, seed_axis=True)[0], direct.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(sigmoid_cross_entropy(a, labels)[0], direct.mean(), rtol=1e-12)
    np.testing.assert_allclose(sigmoid_cross_entropy_backward(np.ones(S), sigmoid_cross_entropy(a, labels, seed_axis=True)[1]),
                               (sig - labels) / 6, rtol=1e-12, atol=1e-17)


def test_sigmoid_is_softmax_cross_entropy_of_two_logits(rng):
    """Two algorithms for one thing: with 0/1 labels, (21.C2) is (21.C0) on the logits (0, a)."""
    a = 4.0 * rng.standard_normal((S, 5))
    labels = rng.integers(0, 2, (S, 5))
    two = np.stack([np.zeros_like(a), a], axis=-1)  # (S, 5, 2)
    np.testing.assert_allclose(sigmoid_cross_entropy(a, labels, seed_axis=True)[0],
                               softmax_cross_entropy(two, labels, seed_axis=True)[0], rtol=1e-13)
    g = rng.standard_normal(S)
    np.testing.assert_allclose(sigmoid_cross_entropy_backward(g, sigmoid_cross_entropy(a, labels, seed_axis=True)[1]),
                               softmax_cross_entropy_backward(g, softmax_cross_entropy(two, labels, seed_axis=True)[1])[..., 1],
                               rtol=1e-12, atol=1e-16)


@settings(max_examples=60, deadline=None)
@given(a=st.lists(st.floats(-1e300, 1e300, allow_nan=False), min_size=1, max_size=6),
       label=st.sampled_from([0.0, 0.5, 1.0]))
def test_sigmoid_cross_entropy_large_logits_stay_finite(a, label):
    a = np.array(a)
    labels = np.full(a.shape, label)
    loss = sigmoid_cross_entropy(a, labels)[0]
    d = sigmoid_cross_entropy_backward(np.array(1.0), sigmoid_cross_entropy(a, labels)[1])
    assert np.isfinite(loss) and loss >= 0  # softplus(a) >= max(a, 0) >= l a for l in [0, 1]
    assert np.all(np.isfinite(d)) and np.all(np.abs(d) <= 1.0 / a.size)


# --------------------------------------------------------------------------
# dtypes and devices
# --------------------------------------------------------------------------


def _all_layers(xp, rng, dtype):
    """Every layer's forward and VJP on ``xp`` arrays: a dict of host results."""
    def put(a):
        return xp.asarray(np.asarray(a, dtype=dtype))

    x, W, b = rng.standard_normal((S, 2, 4)), rng.standard_normal((S, 5, 4)), rng.standard_normal((S, 5))
    u = rng.standard_normal((S, 2, 5))
    logits, target = rng.standard_normal((S, 2, 5)), rng.integers(0, 5, (S, 2))
    labels = rng.integers(0, 2, (S, 2))
    X, Wd, bd, ud, L = put(x), put(W), put(b), put(u), put(logits)
    out = {"linear": linear(X, Wd, bd)[0], "linear_backward": linear_backward(ud, linear(X, Wd, bd)[1]),
           "relu": relu_layer(L)[0], "relu_backward": relu_layer_backward(put(u), relu_layer(L)[1]),
           "layer_norm": layer_norm(L)[0],
           "layer_norm_backward": layer_norm_backward(put(u), layer_norm(L)[1]),
           "softmax_ce": softmax_cross_entropy(L, target, seed_axis=True)[0],
           "softmax_ce_vjp": softmax_cross_entropy_backward(put(np.ones(S)), softmax_cross_entropy(L, target, seed_axis=True)[1]),
           "sigmoid_ce": sigmoid_cross_entropy(L[..., 0], labels, seed_axis=True)[0],
           "sigmoid_ce_vjp": sigmoid_cross_entropy_backward(put(np.ones(S)), sigmoid_cross_entropy(L[..., 0], labels, seed_axis=True)[1])}
    flat = {}
    for k, v in out.items():
        for i, a in enumerate(v if isinstance(v, tuple) else (v,)):
            flat[f"{k}[{i}]"] = a
    return flat


def test_float32_in_float32_out(rng):
    for name, a in _all_layers(np, rng, np.float32).items():
        assert a.dtype == np.float32, name


def test_device_arrays_match_numpy(xp, rng):
    """On the fake device (and CuPy where present) every layer runs without a host copy."""
    ref = _all_layers(np, np.random.default_rng(1), np.float64)
    got = _all_layers(xp, np.random.default_rng(1), np.float64)
    for name, a in got.items():
        assert isinstance(a, xp.ndarray), name
        np.testing.assert_allclose(to_numpy(a), ref[name], rtol=1e-12, atol=1e-15, err_msg=name)


# --------------------------------------------------------------------------
# bad input: one line, naming the argument
# --------------------------------------------------------------------------


def test_linear_errors(rng):
    x, W, b = rng.standard_normal((2, 4)), rng.standard_normal((5, 4)), rng.standard_normal(5)
    with pytest.raises(TypeError, match=r"^x: expected a real floating dtype"):
        linear(x.astype(int), W, b)[0]
    with pytest.raises(TypeError, match=r"^W: expected a floating-point array"):
        linear(x, W.tolist(), b)[0]
    with pytest.raises(ValueError, match=r"^x: its last axis has 3 features, but W \(5, 4\) takes i = 4"):
        linear(x[:, :3], W, b)[0]
    with pytest.raises(ValueError, match=r"^b: expected shape \(5,\)"):
        linear(x, W, b[:4])[0]
    with pytest.raises(ValueError, match=r"^W: expected shape \(o, i\) or \(S, o, i\)"):
        linear(x, W[None, None], b)[0]
    with pytest.raises(ValueError, match=r"^x: expected a leading seed axis of size S = 3"):
        linear(rng.standard_normal((2, 2, 4)), rng.standard_normal((3, 5, 4)), rng.standard_normal((3, 5)))[0]
    with pytest.raises(ValueError, match=r"^b: expected shape \(3, 5\)"):
        linear(rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 5, 4)), b)[0]
    with pytest.raises(ValueError, match=r"^grad_y: shape \(2, 4\) does not match the output's shape \(2, 5\)"):
        linear_backward(x, linear(x, W, b)[1])


def test_relu_and_layer_norm_errors(rng):
    x = rng.standard_normal((2, 3))
    with pytest.raises(TypeError, match=r"^x: expected a real floating dtype"):
        relu_layer(np.ones((2, 3), dtype=int))[0]
    with pytest.raises(ValueError, match=r"^grad_y: shape"):
        relu_layer_backward(x[:, :2], relu_layer(x)[1])
    with pytest.raises(ValueError, match=r"^eps: expected a positive finite real number"):
        layer_norm(x, 0.0)[0]
    with pytest.raises(TypeError, match=r"^eps: expected a positive finite real number"):
        layer_norm(x, "small")[0]
    with pytest.raises(TypeError, match=r"^x: expected a real floating dtype"):
        layer_norm(np.ones((2, 3), dtype=int))[0]
    with pytest.raises(ValueError, match=r"^grad_z: shape"):
        layer_norm_backward(x[:, :2], layer_norm(x)[1])


def test_loss_errors(rng):
    y, t = rng.standard_normal((2, 3, 4)), rng.integers(0, 4, (2, 3))
    with pytest.raises(TypeError, match=r"^target: expected an integer array"):
        softmax_cross_entropy(y, t.astype(float))[0]
    with pytest.raises(ValueError, match=r"^target: expected shape \(2, 3\)"):
        softmax_cross_entropy(y, t[:, :2])[0]
    with pytest.raises(ValueError, match=r"^target: expected class ids in \[0, 4\), got values in \[4, 4\]"):
        softmax_cross_entropy(y, np.full((2, 3), 4))[0]
    with pytest.raises(TypeError, match=r"^seed_axis: expected True or False"):
        softmax_cross_entropy(y, t, seed_axis=1)[0]
    with pytest.raises(ValueError, match=r"^grad_loss: expected shape \(2,\) \(one per seed\)"):
        softmax_cross_entropy_backward(np.ones(3), softmax_cross_entropy(y, t, seed_axis=True)[1])
    with pytest.raises(ValueError, match=r"^grad_loss: expected shape \(\)"):
        softmax_cross_entropy_backward(np.ones(2), softmax_cross_entropy(y, t)[1])
    a, labels = rng.standard_normal((2, 3)), rng.integers(0, 2, (2, 3))
    with pytest.raises(ValueError, match=r"^labels: binary cross-entropy needs labels in \[0, 1\]"):
        sigmoid_cross_entropy(a, labels + 1)[0]
    with pytest.raises(ValueError, match=r"^labels: expected the logits' shape \(2, 3\)"):
        sigmoid_cross_entropy(a, labels[:, :2])[0]
    with pytest.raises(TypeError, match=r"^labels: expected a numeric array"):
        sigmoid_cross_entropy(a, [[0, 1, 0], [1, 0, 1]])[0]
    with pytest.raises(TypeError, match=r"^logits: expected a real floating dtype"):
        sigmoid_cross_entropy(labels, labels)[0]


# --------------------------------------------------------------------------
# refattn.training.fast_layers: the reference's layer norm, row sums as products
# --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 4, 7), (1, 1)])
def test_fast_layer_norm_matches_the_reference(shape, dtype, rng):
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    u = rng.standard_normal(shape).astype(dtype)
    d = shape[-1]
    # the two differ only in the order of d additions per row: |error| <= d u |terms|, terms O(1) after LN
    tol = 8 * d * np.finfo(dtype).eps * (1 + np.abs(u).max())
    z_ref, z = reference_layers.layer_norm(x)[0], fast_layers.layer_norm(x)[0]
    assert z.dtype == z_ref.dtype and z.shape == z_ref.shape
    np.testing.assert_allclose(z, z_ref, rtol=0, atol=tol)
    np.testing.assert_allclose(fast_layers.layer_norm_backward(u, fast_layers.layer_norm(x)[1]),
                               reference_layers.layer_norm_backward(u, reference_layers.layer_norm(x)[1]),
                               rtol=0, atol=tol * (1 + 1 / np.sqrt(np.var(x, axis=-1).min() + 1e-5)))


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(2, 20)),
                  elements=st.floats(-1e6, 1e6, allow_nan=False)))
def test_fast_layer_norm_rows_have_mean_zero(x):
    z = fast_layers.layer_norm(x)[0]
    assert np.all(np.isfinite(z))
    # mean(z) = r (mean x - computed mean) + rounding: |.| <= d u (|x| r + |z|), r <= 1 / sqrt(eps); the same
    # bound holds for the reference (a constant row of 2e5 gives z = 9e-9 in both)
    d, u = x.shape[-1], 2.0 ** -53
    bound = 4 * d * u * (np.abs(x).max(axis=-1) / np.sqrt(1e-5) + np.abs(z).max(axis=-1) + 1)
    assert np.all(np.abs(z.mean(axis=-1)) <= bound)


def test_fast_layer_norm_refuses_bad_input_and_traced_values_use_the_reference():
    with pytest.raises(ValueError, match="eps"):
        fast_layers.layer_norm(np.ones((2, 3)), eps=0.0)[0]
    with pytest.raises(ValueError, match="grad_z"):
        fast_layers.layer_norm_backward(np.ones((2, 4)), fast_layers.layer_norm(np.ones((2, 3)))[1])
    import autograd  # noqa: PLC0415
    import autograd.numpy as anp  # noqa: PLC0415

    x = np.random.default_rng(0).standard_normal((3, 5))
    u = np.random.default_rng(1).standard_normal((3, 5))
    g = autograd.grad(lambda v: anp.sum(fast_layers.layer_norm(v)[0] * u))(x)
    np.testing.assert_allclose(g, reference_layers.layer_norm_backward(u, reference_layers.layer_norm(x)[1]),
                               rtol=1e-12, atol=1e-12)


def test_layer_caches_keep_their_inputs_by_reference_as_documented(rng):
    """The decision for the training layers (the models own every array they pass, and run the layers
    on every batch): inputs are kept by reference, not copied, and the module says plainly that
    changing one between forward and backward is undefined."""
    from refattn.training import layers

    x, W = rng.standard_normal((4, 3)), rng.standard_normal((2, 3))
    _, cache = layers.linear(x, W)
    assert cache["x"] is x and cache["W"] is W
    _, cache = layers.relu_layer(x)
    assert cache["x"] is x
    assert "changing an input in place between a layer's\nforward and its backward is undefined" in layers.__doc__
