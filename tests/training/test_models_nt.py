"""Tests for refattn.training.models.nt: Expressive's one-bilayer NT transformer, batched over seeds.

What is checked, and against what (derivations/11-nt-model.md):
* the parameter count (Eq. 11.P1) against Expressive's 802 and "about 4e5" for every
  layout, and the layout search (Eq. 11.P2) against combinatorial counts worked out
  by hand;
* which layouts let expressive attention see the symbols at N = 2 (section 6):
  the prediction of ea_symbol_dependence against weights measured after
  flipping one symbol, for every layout, and the 99-layout census by hand;
* (layer normalisation, Eqs. 11.M2 and 11.B5, is refattn.training.layers.layer_norm: its
  closed form on one-hot vectors and its VJP are tested in tests/training/test_layers.py);
* the forward pass against an independent per-example loop written from the
  paper's equations (Eq. 1, Eq. 2, TanhMax) with the LN closed form, for every
  layout;
* loss_and_grad against autograd (1e-10 relative, float64, random parameters
  and random cotangents over the seeds) and central differences, for every
  registered activation and every layout;
* seeds are independent; attention is causal; greedy generation slides the
  window, checked on a hand-built "counter" model whose output is known exactly;
* numerical edge cases (hypothesis) and bad input.
"""

import math

import numpy as np
import pytest
from autograd import grad
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn.core.activations import ACTIVATIONS, activation
from refattn.core.gradcheck import gradcheck
from refattn.fast import threads
from refattn.studies.nt_training import make_batches
from refattn.training import layers as reference_layers
from refattn.training.models import nt
from refattn.training.models.nt import (
    DEFAULT_LAYOUT,
    LAYOUTS,
    PAPER_PARAM_COUNTS,
    PARAM_NAMES,
    NTModel,
    count_params,
    ea_symbol_dependence,
    one_vector_layouts,
    search_parameterisations,
)

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL


def random_params(model, seeds, rng, scale=0.5):
    """Initial parameters plus a random perturbation, so biases are nonzero too."""
    params = model.init_params(seeds)
    return {k: v + scale * rng.standard_normal(v.shape) for k, v in params.items()}


def random_batch(model, S, B, rng):
    return {"context": rng.integers(0, model.N, (S, B, model.n_con)),
            "target": rng.integers(0, model.N, (S, B))}


# --------------------------------------------------------------------------
# parameter count (derivation section 2)
# --------------------------------------------------------------------------


def test_count_params_reproduces_expressive():
    assert count_params(2, 16) == 802 == PAPER_PARAM_COUNTS[(2, 16)]  # N2T5 (section 5, Fig. 4)
    big = count_params(16, 128)  # N16T5, N_con = 128: "about 4 * 10^5" (Fig. 5)
    assert big == 395_280
    assert round(big, -5) == PAPER_PARAM_COUNTS[(16, 128)]
    assert count_params(2, 16, activation="expressive", beta=0.5) == 802  # options do not change it


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_has_802_parameters(layout):
    assert count_params(2, 16, layout=layout) == 802
    assert count_params(16, 128, layout=layout) == 395_280
    model = NTModel(2, 16, layout=layout)
    params = model.init_params([0])
    assert tuple(params) == model.param_names
    assert sum(v.size for v in params.values()) == 802
    per, shared = layout.split("+")
    assert params[per].shape == (1, 16, 2) and params[shared].shape == (1, 2)
    assert PARAM_NAMES == NTModel(2, 3).param_names == NTModel(2, 3, layout=DEFAULT_LAYOUT).param_names


@pytest.mark.parametrize("N, n_con", [(2, 16), (3, 5), (16, 128)])
def test_count_params_formula_and_shapes(N, n_con):
    d = N
    per_position = 3 * d * d + 4 * d * d + 4 * d * d + d  # W_Q, W_K, W_V, W_1, W_2, b_2
    assert count_params(N, n_con) == n_con * per_position + d * (d * n_con) + d
    if n_con < 100:
        params = NTModel(N, n_con).init_params([0])
        assert sum(v.size for v in params.values()) == count_params(N, n_con)


def test_search_finds_the_chosen_layout_first():
    layouts = search_parameterisations()  # 802 at (2, 16), about 4e5 at (16, 128)
    best = layouts[0]
    assert (best.per_position_d2, best.per_position_d, best.shared_d2, best.shared_d) == (11, 1, 0, 1)
    # Counted by hand: all five matrices per position, no W_O, no learned embedding;
    # one of the 9 single d-vectors that may sit at each position
    # (b_Q, b_K, b_V, b_O, b_2, two LN gains, two LN biases), and one shared d-vector
    # among the other 8 and the 3 that can only be shared (b_r, final LN gain, bias).
    assert best.n_layouts == 9 * 11
    # (11, 0, 1, 15): the d^2 part in 5 ways (W_O or the embedding shared; or
    # W_O per position with one of W_Q, W_K, W_V shared), the d part by leaving
    # out one of the 12 single shared d-vectors while b_1 (4 d) is shared: 5 * 12.
    by_key = {(x.per_position_d2, x.per_position_d, x.shared_d2, x.shared_d): x for x in layouts}
    assert by_key[(11, 0, 1, 15)].n_layouts == 5 * 12
    for x in layouts:
        assert x.count(2, 16) == 802
        assert 350_000 <= x.count(16, 128) < 450_000


# Sizes of the catalogue's blocks, in units of d^2 or d, written out independently.
_SIZES = {"W_Q": (1, 0), "W_K": (1, 0), "W_V": (1, 0), "W_O": (1, 0), "W_1": (4, 0), "W_2": (4, 0),
          "embedding": (1, 0), "b_1": (0, 4)}


def test_search_examples_recount_and_catalogue_size():
    for x in search_parameterisations(about=None):
        a2 = a1 = c2 = c1 = 0
        for name, where in x.example:
            u2, u1 = _SIZES.get(name, (0, 1))
            if where == "position":
                a2, a1 = a2 + u2, a1 + u1
            else:
                c2, c1 = c2 + u2, c1 + u1
        d, n = 2, 16
        assert n * (a2 * d * d + a1 * d) + c2 * d * d + c1 * d + n * d * d == 802
    everything = search_parameterisations(None)
    # 5 required matrices (per position or shared), 11 optional blocks (absent,
    # per position, shared), 4 blocks that are absent or shared.
    assert sum(x.n_layouts for x in everything) == 2 ** 5 * 3 ** 11 * 2 ** 4


# --------------------------------------------------------------------------
# which layouts let expressive attention see the symbols at N = 2 (section 6)
# --------------------------------------------------------------------------


def test_one_vector_layout_census():
    """Counted by hand (derivation 11, section 6): 9 vectors may sit at a position,
    11 others may be shared, 99 pairs. z^2 sees the key's symbol iff b_K or the LN-1
    bias is present (2 * 11 pairs with it per position + 7 * 2 with it shared = 36),
    the query's iff b_Q or the LN-1 bias (36); both: the LN-1 bias anywhere (11 + 8)
    or b_Q with b_K (2) = 21; blind: neither vector among b_Q, b_K, LN-1 bias:
    6 per-position choices * 8 shared = 48."""
    pairs = one_vector_layouts()
    assert len(pairs) == len(set(pairs)) == 99
    dep = [ea_symbol_dependence(p) for p in pairs]
    assert sum(d["key"] for d in dep) == 36
    assert sum(d["query"] for d in dep) == 36
    assert sum(d["key"] and d["query"] for d in dep) == 21
    assert sum(not (d["key"] or d["query"]) for d in dep) == 48
    assert {tuple(name.split("+")) for name in LAYOUTS} <= set(pairs)  # every offered layout is one of them


def _flip(ctx, pos):
    out = ctx.copy()
    out[..., pos] = 1 - out[..., pos]
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ea_symbol_dependence_predicts_the_weights(layout, rng):
    """Flip one symbol and look at row m of the expressive weights. A key's symbol x_k
    (k < m): row m is equal bit for bit where ea_symbol_dependence says it cannot see
    it (z_mk only changes sign, exactly), and changes where it says it can. The
    query's symbol x_m: flipping it also flips key m, so compare the weights of the
    keys k < m renormalised among themselves (equal to 1e-12, or changed by > 1e-6)
    and their z_mk^2 (bit for bit). Softmax always sees both symbols."""
    n = 6
    ctx = rng.integers(0, 2, (2, 20, n))
    m, k = n - 1, 2
    for name in ("expressive", "softmax"):
        model = NTModel(2, n, activation=name, layout=layout)
        params = random_params(model, [0, 1], rng)  # biases nonzero
        res = model.outputs(params, ctx)
        res_q = model.outputs(params, _flip(ctx, m))  # the query's symbol flipped
        res_k = model.outputs(params, _flip(ctx, k))  # a key's symbol flipped
        change_k = np.abs(res_k["attention"][..., m, :] - res["attention"][..., m, :]).max()

        def renorm(A):
            w = A[..., m, :m]
            return w / w.sum(axis=-1, keepdims=True)

        change_q = np.abs(renorm(res_q["attention"]) - renorm(res["attention"])).max()
        z2_same = np.array_equal(res_q["scores"][..., m, :m] ** 2, res["scores"][..., m, :m] ** 2)
        expect = ea_symbol_dependence(layout) if name == "expressive" else {"query": True, "key": True}
        if expect["key"]:
            assert change_k > 1e-6, (name, layout, change_k)
        else:
            assert change_k == 0.0, (name, layout, change_k)
        if expect["query"]:
            assert change_q > 1e-6, (name, layout, change_q)
        else:
            assert change_q < 1e-12, (name, layout, change_q)
        if name == "expressive":  # Eq. 2 reads z only through z^2
            assert z2_same == (not expect["query"]), layout


# --------------------------------------------------------------------------
# the forward pass against an independent loop (Eqs. 11.M1-11.M10)
# --------------------------------------------------------------------------


def _reference_weights(name, z):
    """Expressive Eq. 1 (beta = 1), Eq. 2 and TanhMax Eq. 6, written out for one row."""
    if name == "softmax":
        e = np.exp(z - z.max())
        return e / e.sum()
    if name == "expressive":
        h = z * z / (1.0 + z * z)
        return h / h.sum()
    assert name == "tanhmax"
    return np.sinh(z) / np.cosh(z).sum()


def _bias(p, name, s, m):
    """Bias ``name`` of seed s at position m: per position if it has a position axis, 0 if absent."""
    if name not in p:
        return 0.0
    b = p[name][s]
    return b[m] if b.ndim == 2 else b


def _reference_forward(model, params, context, target):
    """Per seed, example and position, with the LN closed form for one-hot inputs."""
    S, B, n = context.shape
    d, eps = model.d, model.ln_eps
    out = np.zeros((S, B, d))
    att = np.zeros((S, B, n, n))
    p = params
    for s in range(S):
        for b in range(B):
            X = np.eye(d)[context[s, b]]  # (n, d)
            Z = (d * X - 1.0) / math.sqrt(d - 1 + d * d * eps)
            Q = np.stack([p["W_Q"][s, m] @ Z[m] + _bias(p, "b_Q", s, m) for m in range(n)])
            K = np.stack([p["W_K"][s, m] @ Z[m] + _bias(p, "b_K", s, m) for m in range(n)])
            V = np.stack([p["W_V"][s, m] @ Z[m] + _bias(p, "b_V", s, m) for m in range(n)])
            G = np.zeros((n, d))
            for m in range(n):
                a = _reference_weights(model.activation.name, K[: m + 1] @ Q[m])  # keys k <= m
                att[s, b, m, : m + 1] = a
                H = X[m] + a @ V[: m + 1]
                Z2 = (H - H.mean()) / math.sqrt(H.var() + eps)
                G[m] = H + p["W_2"][s, m] @ np.tanh(p["W_1"][s, m] @ Z2) + _bias(p, "b_2", s, m)
            out[s, b] = p["W_r"][s] @ G.reshape(-1) + _bias(p, "b_r", s, None)
    loss = np.mean((out - np.eye(d)[target]) ** 2, axis=(1, 2))
    return out, att, loss


@pytest.mark.parametrize("name, N, n_con, layout", [("softmax", 2, 5, DEFAULT_LAYOUT),
                                                    ("expressive", 3, 4, DEFAULT_LAYOUT),
                                                    ("tanhmax", 4, 6, DEFAULT_LAYOUT)]
                         + [("expressive", 2, 4, layout) for layout in LAYOUTS])
def test_forward_matches_reference_loop(name, N, n_con, layout, rng):
    model = NTModel(N, n_con, activation=name, layout=layout)
    params = random_params(model, [0, 1], rng)
    batch = random_batch(model, 2, 3, rng)
    out, att, loss = _reference_forward(model, params, batch["context"], batch["target"])
    res = model.outputs(params, batch["context"])
    np.testing.assert_allclose(res["out"], out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res["attention"], att, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(model.loss(params, batch), loss, rtol=1e-12)
    np.testing.assert_array_equal(model.predict(params, batch["context"]), np.argmax(out, axis=-1))


# --------------------------------------------------------------------------
# the hand-derived gradient (section 4) against autograd and differences
# --------------------------------------------------------------------------


def _check_gradients(model, params, batch, checks, rtol, max_fd_coords=None):
    """gradcheck on ``loss`` (S,): the VJP with cotangent u is u[s] * grads[s] per seed."""
    S = params["W_Q"].shape[0]

    def fun(**p):
        return model.loss(p, batch)

    def vjp(u, **p):
        loss, grads, _ = model.loss_and_grad(p, batch)
        np.testing.assert_array_equal(loss, model.loss(p, batch))
        return {k: g * u.reshape((S,) + (1,) * (g.ndim - 1)) for k, g in grads.items()}

    return gradcheck(fun, params, vjp, name=f"NTModel {model.activation.name}", rtol=rtol,
                     checks=checks, max_fd_coords=max_fd_coords, seed=7)


@pytest.mark.parametrize("name", ["softmax", "expressive", "tanhmax"])
@pytest.mark.parametrize("N, n_con", [(2, 4), (3, 6), (4, 8)])
def test_loss_and_grad_vs_autograd(name, N, n_con, rng):
    model = NTModel(N, n_con, activation=name)
    params = random_params(model, [3, 4], rng)
    batch = random_batch(model, 2, 3, rng)
    _check_gradients(model, params, batch, ("autograd",), RTOL_AUTOGRAD).assert_ok()


@pytest.mark.parametrize("name", [a for a in ACTIVATIONS if a not in ("softmax", "expressive", "tanhmax")])
def test_loss_and_grad_vs_autograd_other_activations(name, rng):
    model = NTModel(3, 5, activation=name, beta=0.7)
    params = random_params(model, [0, 1], rng)
    batch = random_batch(model, 2, 3, rng)
    _check_gradients(model, params, batch, ("autograd",), RTOL_AUTOGRAD).assert_ok()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", ["softmax", "expressive"])
def test_loss_and_grad_vs_autograd_every_layout(name, layout, rng):
    model = NTModel(2, 4, activation=name, layout=layout)
    params = random_params(model, [3, 4], rng)
    batch = random_batch(model, 2, 3, rng)
    _check_gradients(model, params, batch, ("autograd",), RTOL_AUTOGRAD).assert_ok()


@pytest.mark.parametrize("layout", [x for x in LAYOUTS if x.endswith("+b_K")])
def test_softmax_cannot_use_a_shared_key_bias(layout, rng):
    """s_mk = Q_m . (K_k + b_K) = Q_m . K_k + Q_m . b_K: a shared key bias adds the same
    number to every score of row m, which softmax (Eq. 1) ignores, so its gradient is 0
    (up to rounding). Expressive attention (Eq. 2) is not shift invariant and does use it;
    a per-position key bias shifts each key differently and softmax uses it too."""
    batch = random_batch(NTModel(2, 5), 2, 6, rng)
    for name, zero in (("softmax", True), ("expressive", False)):
        model = NTModel(2, 5, activation=name, layout=layout)
        params = random_params(model, [0, 1], rng)
        _, grads, _ = model.loss_and_grad(params, batch)
        scale = max(np.abs(g).max() for g in grads.values())
        assert (np.abs(grads["b_K"]).max() < 1e-14 * scale) == zero, (name, layout)
    model = NTModel(2, 5, activation="softmax", layout="b_K+b_r")
    _, grads, _ = model.loss_and_grad(random_params(model, [0, 1], rng), batch)
    assert np.abs(grads["b_K"]).max() > 1e-6


@pytest.mark.parametrize("name, layout", [("softmax", DEFAULT_LAYOUT), ("expressive", DEFAULT_LAYOUT),
                                          ("expressive", "b_2+b_r"), ("expressive", "b_Q+b_K"),
                                          ("softmax", "b_V+b_2")])
def test_loss_and_grad_central_differences(name, layout, rng):
    model = NTModel(3, 5, activation=name, layout=layout)
    params = random_params(model, [0, 1], rng)
    batch = random_batch(model, 2, 3, rng)
    _check_gradients(model, params, batch, ("central",), RTOL_CENTRAL, max_fd_coords=12).assert_ok()


def test_a_wrong_gradient_is_caught(rng):
    """The check can fail: a gradient with one entry off is reported."""
    model = NTModel(2, 4, activation="expressive")
    params = random_params(model, [0], rng)
    batch = random_batch(model, 1, 3, rng)
    res = _check_gradients(model, params, batch, ("autograd",), RTOL_AUTOGRAD)
    assert res.ok
    loss, grads, _ = model.loss_and_grad(params, batch)
    auto = grad(lambda p: model.loss(p, batch).sum())(params)
    grads["W_K"][0, 2, 1, 0] *= 1.0 + 1e-6
    rel = np.abs(grads["W_K"] - auto["W_K"]).max() / np.abs(auto["W_K"]).max()
    assert rel > RTOL_AUTOGRAD


# --------------------------------------------------------------------------
# seeds, causality, generation
# --------------------------------------------------------------------------


def test_seeds_are_independent(rng):
    model = NTModel(3, 5, activation="expressive")
    together = model.init_params([1, 3, 5])
    alone = model.init_params([3])
    for k in model.param_names:
        np.testing.assert_array_equal(together[k][1], alone[k][0])
    assert not np.array_equal(together["W_Q"][0], together["W_Q"][1])
    params = random_params(model, [1, 3, 5], rng)
    batch = random_batch(model, 3, 4, rng)
    loss, grads, aux = model.loss_and_grad(params, batch)
    one = {k: v[1:2] for k, v in params.items()}
    loss1, grads1, aux1 = model.loss_and_grad(one, {k: v[1:2] for k, v in batch.items()})
    np.testing.assert_allclose(loss[1:2], loss1, rtol=1e-13)
    for k in model.param_names:
        np.testing.assert_allclose(grads[k][1:2], grads1[k], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(aux["attention"][1:2], aux1["attention"], rtol=1e-13, atol=1e-15)


def test_initialisation_options():
    """Matrices are drawn first, so a seed has the same matrices in every layout and with
    either bias initialisation; init_scale scales every draw; uniform biases lie in
    init_scale * (-1/sqrt(fan_in), 1/sqrt(fan_in)) with their matrix's fan-in."""
    d, n = 3, 5
    ref = NTModel(d, n, layout="b_2+b_r").init_params([7])
    for layout in LAYOUTS:
        for bias_init in ("zeros", "uniform"):
            p = NTModel(d, n, layout=layout, bias_init=bias_init).init_params([7])
            for k in ("W_Q", "W_K", "W_V", "W_1", "W_2", "W_r"):
                np.testing.assert_array_equal(p[k], ref[k])
            for k in set(p) - {"W_Q", "W_K", "W_V", "W_1", "W_2", "W_r"}:
                if bias_init == "zeros":
                    assert np.all(p[k] == 0.0)
                else:
                    fan_in = {"b_Q": d, "b_K": d, "b_V": d, "b_2": 4 * d, "b_r": n * d}[k]
                    assert np.all(np.abs(p[k]) < 1.0 / math.sqrt(fan_in)) and np.all(p[k] != 0.0)
    for k, v in ref.items():
        if k.startswith("W"):
            fan_in = v.shape[-1]
            assert np.all(np.abs(v) < 1.0 / math.sqrt(fan_in))
            assert np.abs(v).max() > 0.8 / math.sqrt(fan_in)  # the whole range is used
    half = NTModel(d, n, layout="b_2+b_r", init_scale=0.5).init_params([7])
    for k in ref:
        np.testing.assert_allclose(half[k], 0.5 * ref[k], rtol=1e-14, atol=0.0)


def test_float32_params_run():
    model = NTModel(2, 4)
    params = model.init_params([0, 1], dtype=np.float32)
    assert all(v.dtype == np.float32 for v in params.values())
    res = model.outputs(params, np.zeros((2, 3, 4), dtype=np.int64))
    assert res["out"].dtype == np.float32


@pytest.mark.parametrize("name", ["softmax", "expressive", "tanhmax"])
def test_attention_is_causal(name, rng):
    model = NTModel(3, 7, activation=name)
    params = random_params(model, [0, 1], rng)
    ctx = rng.integers(0, 3, (2, 4, 7))
    res = model.outputs(params, ctx)
    A = res["attention"]
    assert np.all(np.triu(A, 1) == 0.0)  # exactly 0 above the diagonal
    assert np.all(A[..., np.tri(7, dtype=bool)] != 0.0)  # every allowed key is used
    for m in range(7):
        changed = ctx.copy()
        changed[..., m + 1:] = (changed[..., m + 1:] + 1 + rng.integers(0, 2, changed[..., m + 1:].shape)) % 3
        other = model.outputs(params, changed)
        # row m of the last layer depends on x_1..x_m only (bit for bit)
        np.testing.assert_array_equal(other["hidden"][..., : m + 1, :], res["hidden"][..., : m + 1, :])
        np.testing.assert_array_equal(other["attention"][..., : m + 1, :], A[..., : m + 1, :])


def _counter_model(N, n_con, read):
    """All sublayers off (W = 0, b_2 = 0), the readout maps position ``read``'s
    one-hot e_x to e_{x+1}: the model predicts ``x_read + 1 (mod N)`` exactly."""
    model = NTModel(N, n_con)
    params = {k: np.zeros_like(v) for k, v in model.init_params([0, 1]).items()}
    for j in range(N):
        params["W_r"][:, j, read * N + (j - 1) % N] = 1.0
    return model, params


@pytest.mark.parametrize("read", [0, 3])
def test_counter_model_forward_loss_and_generate(read, rng):
    N, n_con = 3, 4
    model, params = _counter_model(N, n_con, read)
    ctx = rng.integers(0, N, (2, 5, n_con))
    res = model.outputs(params, ctx)
    np.testing.assert_array_equal(res["out"], np.eye(N)[(ctx[..., read] + 1) % N])  # exact
    # Eq. 11.M10: a wrong target costs two unit errors out of d outputs
    target = (ctx[..., read] + 1 + (np.arange(5) % 2)) % N  # every other example wrong
    wrong = (np.arange(5) % 2).sum()
    np.testing.assert_allclose(model.loss(params, {"context": ctx, "target": target}), 2.0 * wrong / (5 * N))
    # greedy generation: append the prediction, drop the oldest symbol
    steps = 9
    gen = model.generate(params, ctx, steps)
    seq = [list(row) for row in ctx.reshape(-1, n_con)]
    for row in seq:
        for t in range(steps):
            row.append((row[t + read] + 1) % N)  # window t is row[t : t + n_con]
    expected = np.array([row[n_con:] for row in seq]).reshape(2, 5, steps)
    np.testing.assert_array_equal(gen, expected)


def test_generate_first_steps_match_predict(rng):
    model = NTModel(2, 6, activation="expressive")
    params = random_params(model, [0, 1], rng, scale=1.0)
    ctx = rng.integers(0, 2, (2, 3, 6))
    gen = model.generate(params, ctx, 2)
    first = model.predict(params, ctx)
    np.testing.assert_array_equal(gen[..., 0], first)
    slid = np.concatenate([ctx[..., 1:], first[..., None]], axis=-1)
    np.testing.assert_array_equal(gen[..., 1], model.predict(params, slid))


# --------------------------------------------------------------------------
# numerical edge cases
# --------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(ACTIVATIONS), log_scale=st.floats(-6.0, 3.0), seed=st.integers(0, 2 ** 16),
       N=st.integers(2, 4), n_con=st.integers(1, 6), layout=st.sampled_from(LAYOUTS))
def test_finite_everywhere(name, log_scale, seed, N, n_con, layout):
    """Tiny to large parameters: no overflow warning (pytest turns them into errors),
    finite loss and gradients, causal weights; normalised rows sum to 1."""
    rng = np.random.default_rng(seed)
    model = NTModel(N, n_con, activation=name, layout=layout)
    params = random_params(model, [seed], rng, scale=0.0)
    params = {k: v + 10.0 ** log_scale * rng.standard_normal(v.shape) for k, v in params.items()}
    batch = random_batch(model, 1, 2, rng)
    loss, grads, aux = model.loss_and_grad(params, batch)
    assert np.all(np.isfinite(loss))
    assert all(np.all(np.isfinite(g)) for g in grads.values())
    A = aux["attention"]
    assert np.all(np.triu(A, 1) == 0.0)
    if activation(name).formula.rho == "1":  # rho = 1: phi = p
        rows = A.sum(axis=-1)
        assert np.all((np.abs(rows - 1.0) < 1e-12) | (rows == 0.0))  # 0: no normaliser


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(N=1, n_con=4), ValueError, "N: expected an int >= 2"),
    (dict(N=2.0, n_con=4), TypeError, "N: expected an int"),
    (dict(N=2, n_con=0), ValueError, "n_con"),
    (dict(N=2, n_con=4, activation="nope"), ValueError, "unknown activation"),
    (dict(N=2, n_con=4, beta=0.0), ValueError, "beta"),
    (dict(N=2, n_con=4, beta=float("nan")), ValueError, "beta"),
    (dict(N=2, n_con=4, ln_eps=-1e-5), ValueError, "ln_eps"),
    (dict(N=2, n_con=4, ln_eps="1e-5"), TypeError, "ln_eps"),
    (dict(N=2, n_con=4, layout="b_2"), ValueError, "layout: expected one of"),
    (dict(N=2, n_con=4, layout="b_r+b_2"), ValueError, "layout: expected one of"),  # b_r is shared only
    (dict(N=2, n_con=4, layout="b_K+b_K"), ValueError, "layout: expected one of"),
    (dict(N=2, n_con=4, layout=("b_K", "b_r")), TypeError, "layout: expected a str"),
    (dict(N=2, n_con=4, init_scale=0.0), ValueError, "init_scale"),
    (dict(N=2, n_con=4, bias_init="normal"), ValueError, "bias_init"),
])
def test_bad_model_options(kwargs, err, match):
    with pytest.raises(err, match=match):
        NTModel(**kwargs)
    with pytest.raises(err, match=match):
        count_params(**kwargs)


def test_bad_init():
    model = NTModel(2, 4)
    with pytest.raises(TypeError, match="seeds"):
        model.init_params([])
    with pytest.raises(TypeError, match="seeds"):
        model.init_params(3)
    with pytest.raises(ValueError, match=r"seeds\[\]"):
        model.init_params([0, -1])
    with pytest.raises(TypeError, match="dtype"):
        model.init_params([0], dtype=np.int64)


def test_bad_params_and_batch(rng):
    model = NTModel(2, 4, layout="b_K+b_r")
    params = model.init_params([0, 1])
    batch = random_batch(model, 2, 3, rng)
    with pytest.raises(TypeError, match="params"):
        model.loss([1, 2], batch)
    with pytest.raises(ValueError, match="missing \\['b_r'\\]"):
        model.loss({k: v for k, v in params.items() if k != "b_r"}, batch)
    with pytest.raises(ValueError, match="unexpected \\['W_O'\\]"):
        model.loss({**params, "W_O": params["W_Q"]}, batch)
    with pytest.raises(ValueError, match=r"params\['W_1'\]"):
        model.loss({**params, "W_1": params["W_1"][:1]}, batch)  # S differs
    with pytest.raises(ValueError, match=r"params\['W_2'\]"):
        model.loss({**params, "W_2": params["W_1"]}, batch)  # (n, 4d, d) instead of (n, d, 4d)
    with pytest.raises(TypeError, match=r"params\['b_K'\]"):
        model.loss({**params, "b_K": params["b_K"].astype(int)}, batch)
    with pytest.raises(ValueError, match=r"params\['b_K'\]"):  # per position in this layout, not shared
        model.loss({**params, "b_K": params["b_K"][:, 0]}, batch)
    with pytest.raises(ValueError, match="unexpected \\['b_2'\\]"):  # a bias of another layout
        model.loss({**params, "b_2": params["b_K"]}, batch)
    with pytest.raises(TypeError, match="batch"):
        model.loss(params, {"context": batch["context"]})
    with pytest.raises(ValueError, match="context: expected shape"):
        model.loss(params, {**batch, "context": batch["context"][:1]})
    with pytest.raises(ValueError, match="context: expected shape"):
        model.loss(params, {**batch, "context": batch["context"][..., :3]})
    with pytest.raises(TypeError, match="context: expected integer"):
        model.loss(params, {**batch, "context": batch["context"].astype(float)})
    with pytest.raises(ValueError, match="context: expected symbols in 0..1"):
        model.loss(params, {**batch, "context": batch["context"] + 1})
    with pytest.raises(ValueError, match="target: expected shape"):
        model.loss(params, {**batch, "target": batch["target"][:, :2]})
    with pytest.raises(ValueError, match="target: expected symbols"):
        model.loss_and_grad(params, {**batch, "target": batch["target"] - 1})
    with pytest.raises(ValueError, match="n_steps"):
        model.generate(params, batch["context"], 0)
    with pytest.raises(ValueError, match="context: expected shape"):
        model.predict(params, batch["context"][0])


def test_bad_symbol_dependence_input():
    with pytest.raises(ValueError, match="layout: expected one of"):
        ea_symbol_dependence("b_O+b_r")  # a valid pair, but not a name NTModel offers
    assert ea_symbol_dependence(("b_O", "b_r")) == {"query": False, "key": False}
    with pytest.raises(ValueError, match="not a \\(per_position, shared\\) pair"):
        ea_symbol_dependence(("b_r", "b_2"))  # b_r cannot sit at a position
    with pytest.raises(TypeError, match="layout"):
        ea_symbol_dependence(["b_K", "b_r"])


def test_bad_search_input():
    with pytest.raises(TypeError, match="about"):
        search_parameterisations(about=(16, 128))
    with pytest.raises(ValueError, match="n_params"):
        search_parameterisations(0)


# --------------------------------------------------------------------------
# the NT step: fused Q/K/V, LN(e_x) looked up, seeds split over threads
# --------------------------------------------------------------------------

def _model_and_batch(dtype="float64", S=4, activation="expressive"):
    model = nt.NTModel(16, 8, activation=activation)
    seeds = tuple(range(S))
    return model, model.init_params(seeds, dtype=dtype), make_batches("N16T2", 8, seeds)(0)[0]


def test_the_fused_forward_is_the_textbook_forward(rng):
    """Q = W_Q LN(e_x) + b_Q etc. computed position by position with the reference's layer norm."""
    model, p, batch = _model_and_batch()
    ctx = batch["context"]
    _, c = model._forward(p, ctx)
    S, B, n = ctx.shape
    X = np.eye(16)[ctx]
    Z1 = reference_layers.layer_norm(X)[0]
    np.testing.assert_allclose(c["Z1"], Z1, rtol=0, atol=1e-13)
    Q = np.einsum("smoi,sbmi->sbmo", p["W_Q"], Z1) + p["b_Q"][:, None]
    np.testing.assert_allclose(c["att"]["Q"], Q, rtol=0, atol=1e-12)
    V = np.einsum("smoi,sbmi->sbmo", p["W_V"], Z1)
    np.testing.assert_allclose(c["att"]["V"], V, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("activation", ["expressive", "softmax"])
def test_seed_blocks_on_threads_give_the_same_numbers_bit_for_bit(dtype, activation, monkeypatch):
    model, p, batch = _model_and_batch(dtype, S=5, activation=activation)
    monkeypatch.setattr(threads, "_threads", 1)
    assert nt._seed_blocks(p, 5) is None
    one = model.loss_and_grad(p, batch)
    gen_one = model.generate(p, batch["context"], 4)
    monkeypatch.setattr(threads, "_threads", 2)
    assert nt._seed_blocks(p, 5) == 3
    two = model.loss_and_grad(p, batch)
    gen_two = model.generate(p, batch["context"], 4)
    np.testing.assert_array_equal(one[0], two[0])
    for k in one[1]:
        assert one[1][k].shape == two[1][k].shape and one[1][k].dtype == two[1][k].dtype
        np.testing.assert_array_equal(one[1][k], two[1][k])
    for k in one[2]:
        np.testing.assert_array_equal(one[2][k], two[2][k])
    np.testing.assert_array_equal(gen_one, gen_two)


def test_seed_blocks_are_not_used_for_one_seed_or_traced_values(monkeypatch):
    monkeypatch.setattr(threads, "_threads", 2)
    model, p, _ = _model_and_batch(S=1)
    assert nt._seed_blocks(p, 1) is None
    model, p, _ = _model_and_batch(S=2)
    assert nt._seed_blocks({k: v.tolist() for k, v in p.items()}, 2) is None


def test_the_hand_gradient_still_matches_autograd_with_seed_blocks(monkeypatch):
    import autograd  # noqa: PLC0415

    monkeypatch.setattr(threads, "_threads", 2)
    model, p, batch = _model_and_batch(S=3)
    cot = np.random.default_rng(7).standard_normal(3)
    _, grads, _ = model.loss_and_grad(p, batch)
    auto = autograd.grad(lambda q: (model.loss(q, batch) * cot).sum())(p)
    for k in p:  # the hand gradient is of loss.sum(); scale each seed's slice by its cotangent
        hand = grads[k] * cot.reshape((3,) + (1,) * (grads[k].ndim - 1))
        scale = np.abs(auto[k]).max() + 1e-300
        assert np.abs(hand - auto[k]).max() <= 1e-9 * scale, k
