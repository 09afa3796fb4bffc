"""refattn.jax: core's forward and hand-derived backward as a jax.custom_vjp.

Every activation and score equals the NumPy reference (forward and VJP) to
1e-12 in float64, masked, causal and with scores near +-1000; the gradient
comes from the custom VJP (core's backward), ``jax.test_util.check_grads``
passes in float64, and it all works under ``jax.jit`` and ``jax.vmap``;
JAX's own differentiation of core's forward agrees with the hand-derived
VJP; second derivatives (``jax.hessian``, ``check_grads(order=2)``) equal
JAX's own of core's forward; float16 and bfloat16 are the float32 results
rounded once; an activation from ``define_activation`` written as
``g(s, xp)`` runs on JAX's arrays as the built-ins do.
Tolerances: ``framework_cases``.
"""

import importlib

import numpy as np
import pytest

from tests.core.framework_cases import (ACTIVATIONS, EXTREME, SCORES, assert_close, attention_inputs, mask_with_empty_row,
                             masked_score_case, reference_activation, reference_attention, scores)
from tests.support import needs

needs("jax")
import jax  # noqa: E402
jax.config.update("jax_enable_x64", True)  # float64, for this process (the other tests do not use JAX)
rj = importlib.import_module("refattn.jax")

import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

from refattn import activation, define_activation  # noqa: E402
from refattn.check import away_from_singular  # noqa: E402
from refattn.core.activations import Activation  # noqa: E402


def _vjp(f, *args):
    """``f(*args)`` and its VJP function."""
    return jax.vjp(f, *(jnp.asarray(a) for a in args))


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_equals_numpy_masked_and_extreme(name, rng):
    s = scores(name, (3, 4, 6), rng)
    u, mask = rng.standard_normal(s.shape), mask_with_empty_row(s.shape, rng)
    phi = rj.activation(name)
    for m in (None, mask):
        want_w, want_g = reference_activation(name, s, u, mask=m)
        w, vjp = _vjp(lambda x: phi(x, mask=m), s)
        (g,) = vjp(jnp.asarray(u))
        assert_close(np.asarray(w), want_w, f"{name} weights, mask={m is not None}")
        assert_close(np.asarray(g), want_g, f"{name} VJP, mask={m is not None}")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_scores_near_a_thousand_stay_finite_as_in_the_reference(name):
    s = np.array([list(EXTREME), [1000.0, 0.5, -0.25, 2.0]])
    u = np.array([[0.3, -1.2, 0.7, 0.1], [1.0, -0.5, 0.25, -2.0]])
    want_w, want_g = reference_activation(name, s, u)
    w, vjp = _vjp(rj.activation(name), s)
    (g,) = vjp(jnp.asarray(u))
    assert np.all(np.isfinite(want_w)) and np.all(np.isfinite(want_g))
    assert_close(np.asarray(w), want_w, f"{name} weights at +-1000")
    assert_close(np.asarray(g), want_g, f"{name} VJP at +-1000")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_float32_within_its_rounding(name, rng):
    s64 = scores(name, (3, 4, 6), rng, extreme=False)
    u64, mask = rng.standard_normal(s64.shape), mask_with_empty_row(s64.shape, rng)
    s, u = s64.astype(np.float32), u64.astype(np.float32)
    want_w, want_g = reference_activation(name, s, u, mask=mask)
    w64, g64 = reference_activation(name, s.astype(np.float64), u.astype(np.float64), mask=mask)
    w, vjp = _vjp(lambda x: rj.activation(name)(x, mask=mask), s)
    (g,) = vjp(jnp.asarray(u))
    assert w.dtype == jnp.float32 and g.dtype == jnp.float32
    assert_close(np.asarray(w), want_w, f"{name} weights float32", w64)
    assert_close(np.asarray(g), want_g, f"{name} VJP float32", g64)


# --- the gradient is the custom VJP, which is core's ----------------------------------------------------
def test_the_gradient_is_the_custom_vjp_which_is_cores(rng, monkeypatch):
    s = jnp.asarray(rng.standard_normal((2, 5)))
    phi = rj.activation("tanhmax")
    loss = lambda x: jnp.sum(phi(x) * jnp.arange(5.0))  # noqa: E731
    assert "custom_vjp_call" in str(jax.make_jaxpr(loss)(s))  # the weights are a custom_vjp function
    honest = jax.grad(loss)(s)
    core = Activation.backward
    monkeypatch.setattr(Activation, "backward", lambda self, g, cache: 2.0 * core(self, g, cache))
    np.testing.assert_array_equal(np.asarray(jax.grad(loss)(s)), 2.0 * np.asarray(honest))


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_jax_differentiating_cores_forward_agrees(name, rng):
    """JAX differentiates core's forward itself (a third check beside autograd and central differences):
    it equals the hand-derived VJP to rounding."""
    act = activation(name)
    s = jnp.asarray(scores(name, (3, 6), rng, extreme=False))
    u, mask = jnp.asarray(rng.standard_normal((3, 6))), jnp.asarray(mask_with_empty_row((3, 6), rng))
    w, traced = jax.vjp(lambda x: act.forward(x, -1, mask)[0], s)
    assert_close(np.asarray(act.backward(u, act.forward(s, -1, mask)[1])), np.asarray(traced(u)[0]),
                 f"{name}: hand-derived VJP against JAX's")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_check_grads_in_float64(name, rng):
    s = jnp.asarray(scores(name, (2, 5), rng, extreme=False))
    mask = jnp.asarray([[True, True, False, True, True], [True, False, True, True, True]])
    phi = rj.activation(name)
    check_grads(lambda x: phi(x, mask=mask), (s,), order=1, modes=("rev",), eps=1e-6, atol=1e-5, rtol=1e-3)


def test_forward_mode_is_refused_in_one_line_naming_reverse_mode(rng):
    s = jnp.asarray(rng.standard_normal(4))
    with pytest.raises(TypeError, match="^refattn.jax: forward-mode .*use reverse mode"):
        jax.jvp(rj.activation("tanhmax"), (s,), (s,))
    with pytest.raises(TypeError, match="^refattn.jax: forward-mode"):
        jax.jacfwd(rj.activation(RECTIFIED))(s)


# --- second derivatives: JAX differentiates core's VJP ----------------------------------------------------
@pytest.mark.parametrize("name", ("tanhmax", "rectified"))
def test_hessian_and_check_grads_of_order_two(name, rng):
    act = RECTIFIED if name == "rectified" else activation(name)
    s = jnp.asarray(away_from_singular(act, 2.0 * rng.standard_normal((2, 5))))
    u = jnp.asarray(rng.standard_normal((2, 5)))
    phi = rj.activation(act)
    want = jax.hessian(lambda x: jnp.sum(act.forward(x, -1, None)[0] * u))(s)  # JAX's, of core's forward
    assert float(jnp.max(jnp.abs(want))) > 0.01
    assert_close(np.asarray(jax.hessian(lambda x: jnp.sum(phi(x) * u))(s)), np.asarray(want), f"{name}: Hessian")
    check_grads(phi, (s,), order=2, modes=("rev",), eps=1e-6, atol=1e-5, rtol=1e-3)
    assert_close(np.asarray(jax.jacrev(phi)(s)), np.asarray(jax.jacrev(lambda x: act.forward(x, -1, None)[0])(s)),
                 f"{name}: jacrev")


@pytest.mark.parametrize("dtype", (jnp.float16, jnp.bfloat16))
def test_half_precisions_are_float32_rounded_once(dtype, rng):
    """As in PyTorch: the weights and VJP in ``dtype`` are the float32 ones rounded once."""
    s = jnp.asarray(away_from_singular(RECTIFIED, 2.0 * rng.standard_normal((3, 6))), dtype=dtype)
    u = jnp.asarray(rng.standard_normal((3, 6)), dtype=dtype)
    for act in ("softmax", RECTIFIED):
        phi = rj.activation(act)
        (w, vjp), (w32, vjp32) = jax.vjp(phi, s), jax.vjp(phi, s.astype(jnp.float32))
        assert w.dtype == dtype and vjp(u)[0].dtype == dtype
        for got, wide in ((w, w32), (vjp(u)[0], vjp32(u.astype(jnp.float32))[0])):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(wide.astype(dtype)))


# --- jit and vmap --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_jit_and_vmap(name, rng):
    s = jnp.asarray(scores(name, (4, 3, 6), rng))
    mask = jnp.asarray(mask_with_empty_row((3, 6), rng))
    phi = rj.activation(name)
    loss = lambda x, m: jnp.sum(phi(x, mask=m) * jnp.arange(6.0)) ** 2  # noqa: E731
    eager = [np.asarray(jax.grad(loss)(x, mask)) for x in s]
    batched = jax.jit(jax.vmap(jax.grad(loss), in_axes=(0, None)))(s, mask)
    for i, want in enumerate(eager):
        assert_close(np.asarray(batched[i]), want, f"{name} jit(vmap(grad)) example {i}")
    assert_close(np.asarray(jax.jit(phi)(s)), np.asarray(phi(s)), f"{name} jit forward")


# --- attention: causal for every activation, every score ------------------------------------------------
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_causal_attention_equals_numpy(name, rng):
    q, k, v, _ = attention_inputs("scaled_dot", rng)
    g = rng.standard_normal(q.shape[:-1] + v.shape[-1:])
    want, (dq, dk, dv, _) = reference_attention(q, k, v, {}, g, activation=name, causal=True)
    out, vjp = _vjp(lambda q, k, v: rj.attention(q, k, v, activation=name, causal=True), q, k, v)
    assert_close(np.asarray(out), want, f"{name} causal output")
    for got, ref, what in zip(vjp(jnp.asarray(g)), (dq, dk, dv), ("dq", "dk", "dv")):
        assert_close(np.asarray(got), ref, f"{name} causal {what}")


@pytest.mark.parametrize("score_name", SCORES)
def test_every_score_with_its_parameters_and_a_mask(score_name, rng):
    q, k, v, params, mask, g, want, (dq, dk, dv, dp) = masked_score_case(score_name, rng)
    f = lambda q, k, v, p: rj.attention(q, k, v, score=score_name, activation="tanhmax", mask=mask,  # noqa: E731
                                        params=p)
    out, vjp = jax.vjp(f, None if q is None else jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                       {n: jnp.asarray(p) for n, p in params.items()})
    got_q, got_k, got_v, got_p = vjp(jnp.asarray(g))
    assert_close(np.asarray(out), want, f"{score_name} output")
    assert (got_q is None) == (dq is None)
    for got, ref, what in ((got_q, dq, "dq"), (got_k, dk, "dk"), (got_v, dv, "dv")):
        if ref is not None:
            assert_close(np.asarray(got), ref, f"{score_name} {what}")
    for n in params:
        assert_close(np.asarray(got_p[n]), dp[n], f"{score_name} d{n}")


def test_attention_check_grads_with_neural_parameters(rng):
    q, k, v, params = attention_inputs("neural", rng, shape=(1, 4, 3))

    def f(q, k, v, p):
        return rj.attention(q, k, v, score="neural", activation="expressive", causal=True, params=p)

    args = (jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), {n: jnp.asarray(p) for n, p in params.items()})
    check_grads(f, args, order=1, modes=("rev",), eps=1e-6, atol=1e-5, rtol=1e-3)
    check_grads(jax.jit(f), args, order=1, modes=("rev",), eps=1e-6, atol=1e-5, rtol=1e-3)


# --- define_activation on JAX's arrays ------------------------------------------------------------------
#: a rectified softmax, g = relu(e^s - 1), h = |e^s - 1|, written against the array namespace
RECTIFIED = define_activation("rectified_jax", lambda s, xp: xp.maximum(xp.expm1(s), 0.0),
                              lambda s, xp: xp.abs(xp.expm1(s)), singular_scores=[0.0])


def test_an_activation_from_define_activation_works_under_jit_and_vmap(rng):
    sharp = define_activation("sharp_tanhmax_jax", lambda s, xp: xp.sinh(2 * s), lambda s, xp: xp.cosh(2 * s))
    s, u = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    mask = mask_with_empty_row((3, 5), rng)
    want_w, want_g = reference_activation(sharp, s, u, mask=mask)
    phi = rj.activation(sharp)
    w, vjp = _vjp(jax.jit(lambda x: phi(x, mask=mask)), s)
    assert "callback" not in str(jax.make_jaxpr(phi)(jnp.asarray(s)))  # JAX's own operations, no host trip
    assert_close(np.asarray(w), want_w, "define_activation weights")
    assert_close(np.asarray(vjp(jnp.asarray(u))[0]), want_g, "define_activation VJP")
    rows = jax.jit(jax.vmap(jax.grad(lambda x: jnp.sum(phi(x) * jnp.arange(5.0)) ** 2)))(jnp.asarray(s))
    for i in range(3):
        want = jax.grad(lambda x: jnp.sum(phi(x) * jnp.arange(5.0)) ** 2)(jnp.asarray(s[i]))
        assert_close(np.asarray(rows[i]), np.asarray(want), f"define_activation vmap row {i}")
    q, k, v, _ = attention_inputs("scaled_dot", rng)
    want, _ = reference_attention(q, k, v, {}, activation=sharp, causal=True)
    assert_close(np.asarray(rj.attention(q, k, v, activation=sharp, causal=True)), want, "its attention")


def test_an_autograd_numpy_activation_is_refused_in_one_line_with_the_new_spelling():
    import autograd.numpy as anp  # noqa: PLC0415

    old = define_activation("sharp_anp_jax", lambda s: anp.sinh(2 * s), lambda s: anp.cosh(2 * s))
    with pytest.raises(TypeError, match=r"^name_or_activation: .*autograd.numpy.*JAX's own arrays.*def g\(s, xp\)"):
        rj.activation(old)


def test_bad_input_names_the_argument(rng):
    with pytest.raises(ValueError, match="^name_or_activation: unknown activation 'nope'"):
        rj.activation("nope")
    with pytest.raises(TypeError, match="^mask: expected dtype bool"):
        rj.activation("softmax")(jnp.zeros((2, 3)), mask=jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="^axis: 5 is out of range"):
        rj.activation("softmax")(jnp.zeros((2, 3)), dim=5)
    with pytest.raises(TypeError, match="^activation: expected an activation's name"):
        rj.attention(jnp.zeros((2, 3)), jnp.zeros((2, 3)), jnp.zeros((2, 3)), activation=3)
