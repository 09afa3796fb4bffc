"""refattn.training.optim.Adadelta and Adagrad: each update rule against the formula
written out by hand, closed forms of the first step, minimisation of a
quadratic, exact resumption from a saved state, in-place updates, and clear
errors for bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from refattn.core.backend import cupy_available
from refattn.training.optim import Adadelta, Adagrad, Adam
from test_optim import cupy_steps_match_numpy, make_grads, make_params  # the other optimisers' parameters
from test_optim import test_state_round_trip_resumes_identically as round_trip  # not collected here


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
def test_updates_in_place_and_keeps_dtype(rng, cls):
    params = make_params(rng, np.float32)
    ids = {k: id(v) for k, v in params.items()}
    before = copy(params)
    cls(params, lr=0.1).step(make_grads(rng, params))  # float64 grads into float32 params
    for k, v in params.items():
        assert id(v) == ids[k] and v.dtype == np.float32
        assert not np.array_equal(v, before[k])


@pytest.mark.parametrize("make_opt", [
    lambda P: Adadelta(P, lr=0.5, rho=0.9, eps=1e-4),
    lambda P: Adagrad(P, lr=0.1, initial_accumulator_value=0.3),
])
def test_state_round_trip_resumes_identically(rng, make_opt):
    """The other optimisers' check, run on these two: four steps, save, four
    more; a fresh optimiser loaded with the state takes exactly the same four,
    and one without it does not."""
    round_trip(rng, make_opt)


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
def test_cupy_matches_numpy(rng):
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
