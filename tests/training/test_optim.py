"""refattn.training.optim: each update rule against the formula written out by hand (SGD, Adam, AdamW, then
Adadelta and Adagrad with the closed forms of their first step), minimisation of a quadratic, exact
resumption from a saved state, in-place updates, and clear errors for bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from refattn.core.backend import cupy_available
from refattn.training.optim import SGD, Adadelta, Adagrad, Adam, AdamW


def make_params(rng, dtype=np.float64):
    return {"W": rng.standard_normal((3, 2)).astype(dtype),
            "b": rng.standard_normal(4).astype(dtype),
            "c": np.asarray(rng.standard_normal(), dtype=dtype)}  # a 0-d parameter


def make_grads(rng, params):
    return {k: rng.standard_normal(np.shape(v)) for k, v in params.items()}


# --- the update rules, by hand ----------------------------------------------


def test_adam_two_steps_match_the_formula(rng):
    """Algorithm 1 of Kingma & Ba (2015), written out for t = 1 and t = 2."""
    params = make_params(rng)
    p0 = {k: v.copy() for k, v in params.items()}
    g1, g2 = make_grads(rng, params), make_grads(rng, params)
    lr, b1, b2, eps = 0.01, 0.8, 0.95, 1e-6
    opt = Adam(params, lr=lr, betas=(b1, b2), eps=eps)
    opt.step(g1)
    opt.step(g2)
    for k in params:
        m1 = (1 - b1) * g1[k]
        v1 = (1 - b2) * g1[k] ** 2
        p1 = p0[k] - lr * (m1 / (1 - b1)) / (np.sqrt(v1 / (1 - b2)) + eps)
        m2 = b1 * m1 + (1 - b1) * g2[k]
        v2 = b2 * v1 + (1 - b2) * g2[k] ** 2
        p2 = p1 - lr * (m2 / (1 - b1 ** 2)) / (np.sqrt(v2 / (1 - b2 ** 2)) + eps)
        np.testing.assert_allclose(params[k], p2, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(opt.state["m"][k], m2, rtol=1e-14)
        np.testing.assert_allclose(opt.state["v"][k], v2, rtol=1e-14)
    assert opt.t == 2


def test_adam_l2_and_adamw_decoupled_decay_by_hand(rng):
    params_l2, params_w = make_params(rng), make_params(rng)
    params_w = {k: v.copy() for k, v in params_l2.items()}
    p0 = {k: v.copy() for k, v in params_l2.items()}
    g = make_grads(rng, params_l2)
    lr, wd, eps = 0.1, 0.5, 1e-8
    Adam(params_l2, lr=lr, weight_decay=wd, eps=eps).step(g)
    AdamW(params_w, lr=lr, weight_decay=wd, eps=eps).step(g)
    for k in p0:
        gl2 = g[k] + wd * p0[k]  # L2: the decay is part of the gradient
        np.testing.assert_allclose(params_l2[k], p0[k] - lr * gl2 / (np.abs(gl2) + eps), rtol=1e-14)
        shrunk = p0[k] - lr * wd * p0[k]  # decoupled: shrink, then the plain Adam step
        np.testing.assert_allclose(params_w[k], shrunk - lr * g[k] / (np.abs(g[k]) + eps), rtol=1e-14)


def test_adamw_without_decay_is_adam(rng):
    a, b = make_params(rng), None
    b = {k: v.copy() for k, v in a.items()}
    oa, ob = Adam(a, lr=0.05), AdamW(b, lr=0.05)
    for _ in range(3):
        g = make_grads(rng, a)
        oa.step(g)
        ob.step(g)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_two_steps_match_the_formula(rng, momentum):
    params = make_params(rng)
    p0 = {k: v.copy() for k, v in params.items()}
    g1, g2 = make_grads(rng, params), make_grads(rng, params)
    lr = 0.1
    opt = SGD(params, lr=lr, momentum=momentum)
    opt.step(g1)
    opt.step(g2)
    for k in params:
        buf1 = g1[k]  # b <- mu * 0 + g
        buf2 = momentum * buf1 + g2[k]
        np.testing.assert_allclose(params[k], p0[k] - lr * buf1 - lr * buf2, rtol=1e-14)


@settings(max_examples=60, deadline=None)
@given(g=arrays(np.float64, (5,), elements=st.one_of(
    st.floats(-1e100, 1e100, allow_nan=False),
    st.floats(1e-300, 1e-200), st.floats(-1e-200, -1e-300))))
def test_first_adam_step_is_lr_g_over_abs_g_plus_eps(g):
    """On the first step m_hat = g and v_hat = g^2 exactly, so each coordinate
    moves by -lr g / (|g| + eps): never more than lr, whatever the scale of g
    (|g| up to 1e100; beyond ~1e154, g^2 overflows, as in every Adam)
    (tiny gradients underflow g^2 to 0, which is harmless)."""
    p = {"x": np.zeros(5)}
    lr, eps = 0.01, 1e-8
    Adam(p, lr=lr, eps=eps).step({"x": g})
    expected = -lr * g / (np.abs(g) + eps)
    np.testing.assert_allclose(p["x"], expected, rtol=1e-12, atol=1e-300)
    assert np.all(np.abs(p["x"]) <= lr * (1 + 1e-14))  # lr, up to rounding in m / (1 - beta1)
    moved = expected != 0  # a subnormal g gives a step that underflows to 0
    assert np.all(np.sign(p["x"][moved]) == -np.sign(g[moved]))


# --- they minimise ------------------------------------------------------------


@pytest.mark.parametrize("make_opt, steps", [
    (lambda P: SGD(P, lr=0.1), 300),
    (lambda P: SGD(P, lr=0.05, momentum=0.9), 300),
    (lambda P: Adam(P, lr=0.05), 1500),
    (lambda P: AdamW(P, lr=0.05, weight_decay=1e-4), 1500),
])
def test_minimises_an_ill_conditioned_quadratic(rng, make_opt, steps):
    """f = sum_k 0.5 (p_k - c_k)^T H_k (p_k - c_k), H_k diagonal with
    condition number 10: the minimiser is c (for AdamW, shifted by O(wd))."""
    params = {k: np.zeros_like(v) for k, v in make_params(rng).items()}
    target = make_params(rng)
    curv = {k: np.linspace(1.0, 10.0, np.size(v)).reshape(np.shape(v)) for k, v in params.items()}
    opt = make_opt(params)
    for _ in range(steps):
        opt.step({k: curv[k] * (params[k] - target[k]) for k in params})
    for k in params:
        np.testing.assert_allclose(params[k], target[k], atol=1e-2)


# --- in place, dtype, resume ---------------------------------------------------


def test_updates_in_place_and_keeps_dtype(rng):
    params = make_params(rng, np.float32)
    held = dict(params)  # another holder of the same arrays
    ids = {k: id(v) for k, v in params.items()}
    before = {k: v.copy() for k, v in params.items()}
    Adam(params, lr=0.1).step(make_grads(rng, params))  # float64 grads into float32 params
    for k, v in params.items():
        assert id(v) == ids[k] and held[k] is v
        assert v.dtype == np.float32
        assert not np.array_equal(v, before[k])


@pytest.mark.parametrize("make_opt", [
    lambda P: SGD(P, lr=0.1, momentum=0.5),
    lambda P: SGD(P, lr=0.1),
    lambda P: Adam(P, lr=0.02, betas=(0.7, 0.9)),
    lambda P: AdamW(P, lr=0.02, weight_decay=0.1),
    lambda P: Adadelta(P, lr=0.5, rho=0.9, eps=1e-4),
    lambda P: Adagrad(P, lr=0.1, initial_accumulator_value=0.3),
])
def test_state_round_trip_resumes_identically(rng, make_opt):
    params = make_params(rng)
    grads = [make_grads(rng, params) for _ in range(8)]
    opt = make_opt(params)
    for g in grads[:4]:
        opt.step(g)
    saved_state = opt.state_dict()
    frozen = {b: {k: v.copy() for k, v in bufs.items()} for b, bufs in saved_state["state"].items()}
    saved_params = {k: v.copy() for k, v in params.items()}
    for g in grads[4:]:  # the uninterrupted run
        opt.step(g)
    # the saved state is a snapshot: the later steps did not change it
    assert saved_state["t"] == 4
    for b, bufs in frozen.items():
        for k, v in bufs.items():
            np.testing.assert_array_equal(saved_state["state"][b][k], v)
    resumed_params = {k: v.copy() for k, v in saved_params.items()}
    resumed = make_opt(resumed_params)
    resumed.load_state_dict(saved_state)
    for g in grads[4:]:
        resumed.step(g)
    assert resumed.t == opt.t == 8
    for k in params:
        np.testing.assert_array_equal(resumed_params[k], params[k])
    if isinstance(opt, SGD) and opt.momentum == 0:
        return  # plain SGD: its momentum buffer stays unused
    # and without the state, the result differs (the test can fail)
    fresh_params = {k: v.copy() for k, v in saved_params.items()}
    fresh = make_opt(fresh_params)
    for g in grads[4:]:
        fresh.step(g)
    assert any(not np.array_equal(fresh_params[k], params[k]) for k in params)


# --- errors ------------------------------------------------------------------------


def test_bad_params_and_hyperparameters(rng):
    P = make_params(rng)
    with pytest.raises(TypeError, match="params: expected a dict"):
        Adam([np.zeros(2)])
    with pytest.raises(ValueError, match="params: expected at least one"):
        Adam({})
    with pytest.raises(TypeError, match=r"params\['x'\]: expected a real floating dtype"):
        SGD({"x": np.zeros(3, dtype=int)}, lr=0.1)
    with pytest.raises(TypeError, match=r"params\['x'\]: a NumPy scalar"):
        SGD({"x": np.float64(1.0)}, lr=0.1)
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"params\['x'\]: the array is read-only"):
        SGD({"x": ro}, lr=0.1)
    for bad in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="lr: expected a finite number"):
            SGD(P, lr=bad)
    with pytest.raises(TypeError, match="lr: expected a real number"):
        Adam(P, lr="0.1")
    with pytest.raises(ValueError, match="momentum"):
        SGD(P, lr=0.1, momentum=1.0)
    with pytest.raises(ValueError, match="beta2"):
        Adam(P, betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="betas: expected a pair"):
        Adam(P, betas=0.9)
    with pytest.raises(ValueError, match="eps"):
        Adam(P, eps=0.0)
    with pytest.raises(ValueError, match="weight_decay"):
        AdamW(P, weight_decay=-0.1)


def test_bad_grads(rng):
    P = make_params(rng)
    opt = Adam(P)
    g = make_grads(rng, P)
    with pytest.raises(TypeError, match="grads: expected a dict"):
        opt.step([g["W"]])
    with pytest.raises(ValueError, match=r"grads: keys .* missing \['c'\]"):
        opt.step({k: v for k, v in g.items() if k != "c"})
    with pytest.raises(ValueError, match=r"unexpected \['zzz'\]"):
        opt.step({**g, "zzz": np.zeros(1)})
    with pytest.raises(ValueError, match=r"grads\['W'\]: shape \(2, 3\) does not match .* \(3, 2\)"):
        opt.step({**g, "W": np.zeros((2, 3))})
    with pytest.raises(TypeError, match=r"grads\['b'\]: expected a real floating dtype"):
        opt.step({**g, "b": np.zeros(4, dtype=int)})
    assert opt.t == 0  # nothing was applied


def test_bad_state(rng):
    """A state of another optimiser or of another model is refused and changes nothing (its values
    were checked when the optimiser that saved it was made; a checkpoint carries a digest)."""
    P = make_params(rng)
    adam = Adam(P)
    adam.step(make_grads(rng, P))
    state = adam.state_dict()
    with pytest.raises(ValueError, match="saved by 'Adam', cannot load into 'AdamW'"):
        AdamW(P).load_state_dict(state)
    bad = adam.state_dict()
    bad["state"]["m"]["W"] = np.zeros((2, 3))
    fresh = Adam(P)
    with pytest.raises(ValueError, match=r"state\['state'\]\['m'\]: buffers of shapes .*'W': \(2, 3\)"):
        fresh.load_state_dict(bad)
    assert fresh.t == 0 and not any(np.any(v) for v in fresh.state["m"].values())  # a failed load changes nothing
    with pytest.raises(ValueError, match=r"state\['state'\]\['m'\]: buffers of shapes"):
        Adam({"W": P["W"]}).load_state_dict(state)  # a state of a model with more parameters


def test_sgd_state_carries_its_momentum(rng):
    """An SGD made with momentum 0 that loads the state of one with momentum
    0.9 continues exactly as that one would (the hyperparameters are state)."""
    P = make_params(rng)
    grads = [make_grads(rng, P) for _ in range(4)]
    a = SGD(P, lr=0.1, momentum=0.9)
    for g in grads[:2]:
        a.step(g)
    Q = {k: v.copy() for k, v in P.items()}
    b = SGD(Q, lr=0.5)
    b.load_state_dict(a.state_dict())
    assert b.momentum == 0.9 and b.lr == 0.1
    for g in grads[2:]:
        a.step(g)
        b.step(g)
    for k in P:
        np.testing.assert_array_equal(P[k], Q[k])


def cupy_steps_match_numpy(cls, rng):
    """Three steps of optimiser ``cls`` on CuPy parameters equal the same steps on NumPy's; returns the
    CuPy optimiser and the (NumPy) gradients, for what a test checks next."""
    import cupy as cp

    P = make_params(rng)
    Pc = {k: cp.asarray(v) for k, v in P.items()}
    grads = [make_grads(rng, P) for _ in range(3)]
    opt, optc = cls(P, lr=0.05), cls(Pc, lr=0.05)
    for g in grads:
        opt.step(g)
        optc.step({k: cp.asarray(v) for k, v in g.items()})
    for k in P:
        assert isinstance(Pc[k], cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(Pc[k]), P[k], rtol=1e-12, atol=1e-14)
    return optc, grads


@pytest.mark.skipif(not cupy_available(), reason="CuPy with a CUDA device is not available")
def test_cupy_matches_numpy(rng):
    optc, grads = cupy_steps_match_numpy(Adam, rng)
    with pytest.raises(TypeError, match="CuPy"):
        optc.step(grads[0])


# --- Adadelta and Adagrad ----------------------------------------------------


def copy(params):
    return {k: v.copy() for k, v in params.items()}


# --- the update rules, by hand ------------------------------------------------


def test_adadelta_two_steps_by_hand(rng):
    """Zeiler's Algorithm 1 with a learning rate, written out for two steps."""
    lr, rho, eps = 0.3, 0.8, 1e-3
    P = make_params(rng)
    P0 = copy(P)
    g1, g2 = make_grads(rng, P), make_grads(rng, P)
    opt = Adadelta(P, lr=lr, rho=rho, eps=eps)
    opt.step(g1)
    opt.step(g2)
    for k in P:
        a1 = (1 - rho) * g1[k] ** 2  # both averages start at 0
        delta1 = np.sqrt(0.0 + eps) / np.sqrt(a1 + eps) * g1[k]
        d1 = (1 - rho) * delta1 ** 2
        a2 = rho * a1 + (1 - rho) * g2[k] ** 2
        delta2 = np.sqrt(d1 + eps) / np.sqrt(a2 + eps) * g2[k]
        d2 = rho * d1 + (1 - rho) * delta2 ** 2
        np.testing.assert_allclose(P[k], P0[k] - lr * delta1 - lr * delta2, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(opt.state["square_avg"][k], a2, rtol=1e-13)
        np.testing.assert_allclose(opt.state["delta_avg"][k], d2, rtol=1e-13)
    assert opt.t == 2


def test_adagrad_two_steps_by_hand(rng):
    lr, a0, eps = 0.2, 0.1, 1e-7
    P = make_params(rng)
    P0 = copy(P)
    g1, g2 = make_grads(rng, P), make_grads(rng, P)
    opt = Adagrad(P, lr=lr, initial_accumulator_value=a0, eps=eps)
    for k in P:
        np.testing.assert_array_equal(opt.state["sum"][k], np.full(np.shape(P[k]), a0))
    opt.step(g1)
    opt.step(g2)
    for k in P:
        a1 = a0 + g1[k] ** 2
        a2 = a1 + g2[k] ** 2
        want = P0[k] - lr * g1[k] / (np.sqrt(a1) + eps) - lr * g2[k] / (np.sqrt(a2) + eps)
        np.testing.assert_allclose(P[k], want, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(opt.state["sum"][k], a2, rtol=1e-14)


def test_adadelta_first_step_is_bounded_by_sqrt_eps_over_one_minus_rho(rng):
    """First step: lr sqrt(eps) g / sqrt((1 - rho) g^2 + eps), which tends to
    lr sqrt(eps / (1 - rho)) sign(g) for large |g|, whatever the gradient's scale."""
    lr, rho, eps = 0.5, 0.95, 1e-7
    P = make_params(rng)
    P0 = copy(P)
    g = {k: 1e6 * v for k, v in make_grads(rng, P).items()}
    Adadelta(P, lr=lr, rho=rho, eps=eps).step(g)
    for k in P:
        np.testing.assert_allclose(P0[k] - P[k], lr * np.sqrt(eps / (1 - rho)) * np.sign(g[k]), rtol=1e-6)


def test_adagrad_zero_start_first_step_is_lr_sign_g(rng):
    """With a0 = 0 the first step is lr g / (|g| + eps): lr sign(g) up to eps;
    a zero gradient with a zero accumulator moves nothing (0 / eps, no NaN)."""
    P = make_params(rng)
    P0 = copy(P)
    g = make_grads(rng, P)
    g["b"][0] = 0.0
    Adagrad(P, lr=0.1, initial_accumulator_value=0.0).step(g)
    for k in P:
        np.testing.assert_allclose(P0[k] - P[k], 0.1 * g[k] / (np.abs(g[k]) + 1e-7), rtol=1e-14, atol=0)
        big = np.abs(g[k]) > 1e-3  # there |lr g / (|g| + eps)| is lr to within lr eps / |g|
        np.testing.assert_allclose((P0[k] - P[k])[big], 0.1 * np.sign(g[k][big]), rtol=1e-4)
    assert P["b"][0] == P0["b"][0]


@settings(max_examples=60, deadline=None)
@given(g=arrays(np.float64, (5,), elements=st.floats(-1e100, 1e100, allow_subnormal=True)),
       rho=st.floats(0.0, 0.999), lr=st.floats(1e-4, 10.0))
def test_first_steps_are_finite_and_bounded(g, rho, lr):
    """Over gradients from subnormal to 1e100: no warning (pytest turns them
    into errors), finite parameters, and the closed-form bounds of the first
    step, |dp| <= lr sqrt(eps / (1 - rho)) (Adadelta) and |dp| < lr (Adagrad), each
    up to one rounding (for huge |g| the Adagrad step rounds to lr itself)."""
    eps = 1e-7
    P = {"x": np.zeros(5)}
    Adadelta(P, lr=lr, rho=rho, eps=eps).step({"x": g})
    assert np.all(np.isfinite(P["x"]))
    assert np.all(np.abs(P["x"]) <= lr * np.sqrt(eps / (1 - rho)) * (1 + 1e-12))
    Q = {"x": np.zeros(5)}
    Adagrad(Q, lr=lr).step({"x": g})
    assert np.all(np.isfinite(Q["x"])) and np.all(np.abs(Q["x"]) <= lr * (1 + 1e-15))
    # the step has g's opposite sign wherever it does not underflow: lr |g| times a
    # factor of order 1 (Adadelta about 1, Adagrad about 3) is then well above tiny
    moves = lr * np.abs(g) > 1e-300
    assert np.all(np.sign(Q["x"][moves]) == -np.sign(g[moves]))
    assert np.all(np.sign(P["x"][moves]) == -np.sign(g[moves]))


# --- minimising a quadratic --------------------------------------------------------


@pytest.mark.parametrize("make_opt, steps", [
    (lambda P: Adadelta(P), 2000),  # the defaults: lr 1, rho 0.95, eps 1e-7
    (lambda P: Adadelta(P, lr=1.0, rho=0.9, eps=1e-6), 2000),  # PyTorch's rho and eps
    (lambda P: Adagrad(P, lr=0.5), 500),
])
def test_minimises_a_quadratic(rng, make_opt, steps):
    """f = sum_k 0.5 (p_k - c_k)^T H_k (p_k - c_k), H_k diagonal with
    condition number 10; the minimiser is c."""
    params = {k: np.zeros_like(v) for k, v in make_params(rng).items()}
    target = make_params(rng)
    curv = {k: np.linspace(1.0, 10.0, np.size(v)).reshape(np.shape(v)) for k, v in params.items()}
    opt = make_opt(params)
    for _ in range(steps):
        opt.step({k: curv[k] * (params[k] - target[k]) for k in params})
    for k in params:
        np.testing.assert_allclose(params[k], target[k], atol=1e-2)


# --- in place, dtype, resume ----------------------------------------------------


@pytest.mark.parametrize("cls", [Adadelta, Adagrad])
def test_adaptive_updates_in_place_and_keeps_dtype(rng, cls):
    params = make_params(rng, np.float32)
    ids = {k: id(v) for k, v in params.items()}
    before = copy(params)
    cls(params, lr=0.1).step(make_grads(rng, params))  # float64 grads into float32 params
    for k, v in params.items():
        assert id(v) == ids[k] and v.dtype == np.float32
        assert not np.array_equal(v, before[k])


def test_state_carries_the_hyperparameters(rng):
    """An Adadelta made with other hyperparameters that loads a state continues
    exactly as the saved one would; likewise Adagrad's accumulator."""
    P = make_params(rng)
    grads = [make_grads(rng, P) for _ in range(4)]
    for make_a, make_b, hyper in [
        (lambda X: Adadelta(X, lr=0.2, rho=0.7, eps=1e-3), lambda X: Adadelta(X), ("lr", "rho", "eps")),
        (lambda X: Adagrad(X, lr=0.2, initial_accumulator_value=1.0),
         lambda X: Adagrad(X), ("lr", "initial_accumulator_value", "eps")),
    ]:
        A = copy(P)
        a = make_a(A)
        for g in grads[:2]:
            a.step(g)
        B = copy(A)
        b = make_b(B)
        b.load_state_dict(a.state_dict())
        assert all(getattr(a, h) == getattr(b, h) for h in hyper)
        for g in grads[2:]:
            a.step(g)
            b.step(g)
        for k in P:
            np.testing.assert_array_equal(A[k], B[k])


# --- errors ------------------------------------------------------------------------


def test_bad_hyperparameters(rng):
    P = make_params(rng)
    for bad in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="lr: expected a finite number"):
            Adadelta(P, lr=bad)
        with pytest.raises(ValueError, match="lr: expected a finite number"):
            Adagrad(P, lr=bad)
    for bad in (1.0, -0.1, 2.0):
        with pytest.raises(ValueError, match="rho: expected a finite number with 0 <= rho < 1"):
            Adadelta(P, rho=bad)
    with pytest.raises(ValueError, match="eps"):
        Adadelta(P, eps=0.0)
    with pytest.raises(ValueError, match="eps"):
        Adagrad(P, eps=-1e-7)
    with pytest.raises(ValueError, match="initial_accumulator_value: expected a finite number with 0 <="):
        Adagrad(P, initial_accumulator_value=-0.1)
    with pytest.raises(TypeError, match="rho: expected a real number"):
        Adadelta(P, rho="0.9")
    with pytest.raises(TypeError, match="initial_accumulator_value: expected a real number"):
        Adagrad(P, initial_accumulator_value=None)
    with pytest.raises(TypeError, match="params: expected a dict"):
        Adagrad([np.zeros(2)])
    with pytest.raises(TypeError, match=r"params\['x'\]: expected a real floating dtype"):
        Adadelta({"x": np.zeros(3, dtype=int)})


def test_bad_grads_and_states(rng):
    P = make_params(rng)
    g = make_grads(rng, P)
    opt = Adadelta(P)
    with pytest.raises(ValueError, match=r"grads\['W'\]: shape \(2, 3\) does not match .* \(3, 2\)"):
        opt.step({**g, "W": np.zeros((2, 3))})
    with pytest.raises(ValueError, match=r"grads: keys .* missing \['c'\]"):
        opt.step({k: v for k, v in g.items() if k != "c"})
    assert opt.t == 0 and all(not np.any(b) for b in opt.state["square_avg"].values())
    adam = Adam(P)
    adam.step(g)
    with pytest.raises(ValueError, match="saved by 'Adam', cannot load into 'Adadelta'"):
        Adadelta(P).load_state_dict(adam.state_dict())
    state = Adadelta(P).state_dict()
    state["type"] = "Adagrad"
    with pytest.raises(ValueError, match="saved by 'Adagrad', cannot load into 'Adadelta'"):
        Adadelta(P).load_state_dict(state)
    bad = Adagrad(P).state_dict()
    bad["state"]["sum"]["b"] = np.zeros(5)
    with pytest.raises(ValueError, match=r"state\['state'\]\['sum'\]: buffers of shapes .*'b': \(5,\)"):
        Adagrad(P).load_state_dict(bad)


@pytest.mark.skipif(not cupy_available(), reason="CuPy with a CUDA device is not available")
def test_adaptive_cupy_matches_numpy(rng):
    for cls in (Adadelta, Adagrad):
        cupy_steps_match_numpy(cls, rng)


def test_adadelta_loss_scale_is_training_on_the_scaled_loss(rng):
    """loss_scale c: the same steps as plain Adadelta fed c g, and the first step's closed form."""
    lr, rho, eps, c = 0.05, 0.9, 1e-6, 100.0
    P, Q = make_params(rng), None
    Q = copy(P)
    P0 = copy(P)
    g1, g2 = make_grads(rng, P), make_grads(rng, P)
    scaled = Adadelta(P, lr=lr, rho=rho, eps=eps, loss_scale=c)
    plain = Adadelta(Q, lr=lr, rho=rho, eps=eps)
    scaled.step(g1)
    for k in P:  # first step: lr sqrt(eps) c g / sqrt((1 - rho) c^2 g^2 + eps)
        want = P0[k] - lr * np.sqrt(eps) * c * g1[k] / np.sqrt((1 - rho) * c * c * g1[k] ** 2 + eps)
        np.testing.assert_allclose(P[k], want, rtol=1e-13, atol=1e-15)
    scaled.step(g2)
    plain.step({k: c * v for k, v in g1.items()})
    plain.step({k: c * v for k, v in g2.items()})
    for k in P:
        np.testing.assert_allclose(P[k], Q[k], rtol=1e-13, atol=1e-15)
    state = scaled.state_dict()
    assert state["loss_scale"] == c
    other = Adadelta(copy(P), lr=lr)
    other.load_state_dict(state)
    assert other.loss_scale == c
    with pytest.raises(ValueError, match="loss_scale"):
        Adadelta(copy(P), loss_scale=0.0)
