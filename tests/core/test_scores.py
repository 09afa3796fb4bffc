"""Tests for refattn.core.scores: every registered score, batch shapes (), (2,), (2, 3).

Gradients are checked three ways (analytic VJP vs autograd vs central
differences, float64, random cotangents) for q, k and every parameter; values
against closed forms written independently here (loops over i, j; for the
neural score, NeuralAttn's explicit n x n x 2d' concatenation); the per-pair
neural weights; that parameters carry no seed axis (models batched over
seeds handle it themselves); error messages; and that the checks catch a
wrong backward pass.
"""

import math

import numpy as np
import pytest

from refattn.core.backend import cupy_available
from refattn.core.gradcheck import gradcheck
from refattn.core.scores import SCORES, Score, score

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL

D, N_Q, N_K = 4, 3, 4  # per-token scores use n = N_K
BATCHES = [(), (2,), (2, 3)]

#: Configurations tested per score: (id, options, init sizes). A registered
#: score that is missing here is tested with its defaults.
NEURAL_SIZES = {"d_prime": 2, "hidden_size": 3}
VARIANTS = {
    "dot": [("default", {}, {})],
    "scaled_dot": [("default", {}, {}), ("beta=0.7", {"beta": 0.7}, {})],
    "additive": [("d_a=3", {}, {"d_a": 3})],
    "self": [("default", {}, {}), ("scale=1.5", {"scale": 1.5}, {})],
    "global": [("default", {}, {}), ("lam=2", {"lam": 2.0}, {})],
    "neural": [
        (f"{hidden}-{mode}", {"hidden": hidden},
         {**NEURAL_SIZES, **({"per_pair": (N_Q, N_K)} if mode == "per_pair" else {})})
        for hidden in ("tanh", "relu") for mode in ("shared", "per_pair")
    ] + [("tanh-shared-beta=0.5", {"beta": 0.5}, NEURAL_SIZES)],
    "cosformer": [("default", {}, {}), ("M=7", {"M": 7.0}, {})],
}
CASES = [
    pytest.param(name, opts, sizes, id=f"{name}-{vid}")
    for name in SCORES
    for vid, opts, sizes in VARIANTS.get(name, [("default", {}, {})])
]


def _away_from_zero(x, margin=0.05):
    """Keep entries out of (-margin, margin): relu's kink at 0 would make
    central differences straddle it."""
    return np.where(np.abs(x) < margin, np.where(x >= 0, margin, -margin), x)


def _make(name, opts, sizes, batch, seed=0, q_batch=None, k_batch=None):
    """A configured score, inputs and parameters (float64)."""
    rng = np.random.default_rng(seed)
    sc = score(name, **opts)
    n_q = N_Q if sc.pairwise else N_K
    q = rng.standard_normal((batch if q_batch is None else q_batch) + (n_q, D))
    k = rng.standard_normal((batch if k_batch is None else k_batch) + (N_K, D))
    if name == "cosformer":
        q, k = _away_from_zero(q), _away_from_zero(k)
    params = sc.init_params(D, rng, **sizes)
    return sc, q, k, params


def _problem(sc, q, k, params):
    """``(fun, args, vjp)`` in gradcheck's form; ``q`` only when the score reads it."""
    names = list(params)
    args = {"k": k, **params}
    if sc.uses_q:
        args = {"q": q, **args}

    def fun(k, q=None, **p):
        return sc(q, k, {n: p[n] for n in names})

    def vjp(u, k, q=None, **p):
        dq, dk, dp = sc.backward(u, sc.forward(q, k, {n: p[n] for n in names})[1])
        out = {"k": dk, **dp}
        if sc.uses_q:
            out["q"] = dq
        return out

    return fun, args, vjp


def _gradcheck_both(sc, q, k, params, label):
    fun, args, vjp = _problem(sc, q, k, params)
    res_ag = gradcheck(fun, args, vjp, name=label, checks=("autograd",),
                       rtol=RTOL_AUTOGRAD, atol=1e-14)
    res_fd = gradcheck(fun, args, vjp, name=label, checks=("central",),
                       rtol=RTOL_CENTRAL, atol=1e-10)
    return args, res_ag, res_fd


# --------------------------------------------------------------------------
# Gradients, three ways
# --------------------------------------------------------------------------


@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: f"batch{b}")
@pytest.mark.parametrize("name,opts,sizes", CASES)
def test_vjp_three_ways(name, opts, sizes, batch):
    sc, q, k, params = _make(name, opts, sizes, batch)
    args, res_ag, res_fd = _gradcheck_both(sc, q, k, params, f"{name} {opts} batch={batch}")
    res_ag.assert_ok()
    res_fd.assert_ok()
    # every argument was compared, by both references
    assert {c.arg for c in res_ag.comparisons} == set(args)
    assert {c.arg for c in res_fd.comparisons} == set(args)


@pytest.mark.parametrize("name,opts,sizes", CASES)
def test_vjp_returns_one_gradient_per_input(name, opts, sizes):
    sc, q, k, params = _make(name, opts, sizes, (2,))
    s = sc(q, k, params)
    dq, dk, dp = sc.backward(np.ones_like(s), sc.forward(q, k, params)[1])
    assert set(dp) == set(params)
    for p in params:
        assert dp[p].shape == params[p].shape, p
        assert isinstance(dp[p], np.ndarray), p
    assert dk.shape == k.shape
    assert (dq is None) if not sc.uses_q else (dq.shape == q.shape)


@pytest.mark.parametrize("name,opts,sizes", [
    pytest.param(n, {}, {**NEURAL_SIZES, "per_pair": (N_Q, N_K)} if n == "neural"
                 else VARIANTS.get(n, [(0, {}, {})])[0][2], id=n)
    for n in SCORES
])
def test_vjp_with_broadcast_batch(name, opts, sizes):
    """q and k batch dims broadcast (q (2, 1, ...), k (3, ...)): the VJP sums
    back to each input's own shape."""
    k_batch = (3,) if score(name).uses_q else (2, 3)  # "global" reads k only
    sc, q, k, params = _make(name, opts, sizes, (), q_batch=(2, 1), k_batch=k_batch)
    s = sc(q, k, params)
    assert s.shape[:2] == (2, 3)
    _, res_ag, res_fd = _gradcheck_both(sc, q, k, params, f"{name} broadcast batch")
    res_ag.assert_ok()
    res_fd.assert_ok()


@pytest.mark.parametrize("name", SCORES)
def test_checks_catch_a_perturbed_vjp(name, monkeypatch):
    """Scale dq (dk for scores that ignore q) by 1 + 1e-4: both references
    must flag it, on that argument."""
    sc, q, k, params = _make(name, {}, VARIANTS.get(name, [(0, {}, {})])[0][2], (2,))
    right = sc.backward

    def wrong(grad_s, cache):
        dq, dk, dp = right(grad_s, cache)
        if dq is not None:
            return dq * (1 + 1e-4), dk, dp
        return dq, dk * (1 + 1e-4), dp

    monkeypatch.setattr(sc, "backward", wrong)
    _, res_ag, res_fd = _gradcheck_both(sc, q, k, params, name)
    bad = "q" if sc.uses_q else "k"
    for res in (res_ag, res_fd):
        assert not res.ok
        assert [c.arg for c in res.failures()] == [bad]
        assert bad in res.describe_failures()


# --------------------------------------------------------------------------
# Values against closed forms written differently
# --------------------------------------------------------------------------


def _relu(x):
    return np.maximum(x, 0.0)


def _loop_pairwise(q, k, f):
    """out[b, i, j] = f(q[b, i], k[b, j], i, j), with plain loops."""
    batch = q.shape[:-2]
    out = np.empty(batch + (q.shape[-2], k.shape[-2]))
    for b in np.ndindex(*batch):
        for i in range(q.shape[-2]):
            for j in range(k.shape[-2]):
                out[b + (i, j)] = f(q[b + (i,)], k[b + (j,)], i, j)
    return out


def _loop_per_token(q, k, f):
    batch = k.shape[:-2]
    out = np.empty(batch + (k.shape[-2],))
    for b in np.ndindex(*batch):
        for i in range(k.shape[-2]):
            out[b + (i,)] = f(None if q is None else q[b + (i,)], k[b + (i,)])
    return out


def _dot(x, y):
    return math.fsum(a * b for a, b in zip(x, y))


def _ref_dot(sc, q, k, P):
    return _loop_pairwise(q, k, lambda qi, kj, i, j: _dot(qi, kj))


def _ref_scaled_dot(sc, q, k, P):
    beta = 1.0 / math.sqrt(q.shape[-1]) if sc.beta is None else sc.beta
    return _loop_pairwise(q, k, lambda qi, kj, i, j: beta * _dot(qi, kj))


def _ref_additive(sc, q, k, P):
    return _loop_pairwise(
        q, k, lambda qi, kj, i, j: _dot(P["v"], np.tanh(P["W_q"] @ qi + P["W_k"] @ kj)))


def _ref_self(sc, q, k, P):
    scale = math.sqrt(q.shape[-1]) if sc.scale is None else sc.scale
    return _loop_per_token(q, k, lambda qi, ki: _dot(qi, ki) / scale)


def _ref_global(sc, q, k, P):
    return _loop_per_token(q, k, lambda qi, ki: _dot(ki, P["v"]) / sc.lam)


def _ref_neural(sc, q, k, P):
    """NeuralAttn as written: Eqs. 5-6 down-projection, Eq. 7's explicit
    n x n x 2d' concatenation C, Eq. 8 per pair with W_h = [Whq Whk], Eq. 9's
    1/sqrt(d)."""
    sigma = np.tanh if sc.hidden == "tanh" else _relu
    beta = 1.0 / math.sqrt(q.shape[-1]) if sc.beta is None else sc.beta
    Qp = q @ P["Wq"].T  # Q W_q in the paper's layout
    Kp = k @ P["Wk"].T
    n_q, n_k, dp = Qp.shape[-2], Kp.shape[-2], Qp.shape[-1]
    batch = q.shape[:-2]
    Qb = np.broadcast_to(Qp[..., :, None, :], batch + (n_q, n_k, dp))  # reshape + broadcast
    Kb = np.broadcast_to(Kp[..., None, :, :], batch + (n_q, n_k, dp))
    C = np.concatenate([Qb, Kb], axis=-1)  # (..., n_q, n_k, 2d')  Eq. 7
    assert C.shape == batch + (n_q, n_k, 2 * dp)
    per_pair = P["Whq"].ndim == 4
    W_h = np.concatenate([P["Whq"], P["Whk"]], axis=-1)  # (h, 2d') or (n_q, n_k, h, 2d')
    out = np.empty(batch + (n_q, n_k))
    for b in np.ndindex(*batch):
        for i in range(n_q):
            for j in range(n_k):
                pick = (i, j) if per_pair else ()
                h = sigma(W_h[pick] @ C[b + (i, j)] + P["bh"][pick])
                out[b + (i, j)] = beta * (_dot(P["wa"][pick], h) + P["ba"][pick])
    return out


def _ref_cosformer(sc, q, k, P):
    M = max(q.shape[-2], k.shape[-2]) if sc.M is None else sc.M
    def f(qi, kj, i, j):
        return _dot(_relu(qi), _relu(kj)) * math.cos(math.pi * (i - j) / (2 * M))

    return _loop_pairwise(q, k, f)


REFERENCE = {
    "dot": _ref_dot,
    "scaled_dot": _ref_scaled_dot,
    "additive": _ref_additive,
    "self": _ref_self,
    "global": _ref_global,
    "neural": _ref_neural,
    "cosformer": _ref_cosformer,
}


@pytest.mark.parametrize("batch", [(), (2, 3)], ids=lambda b: f"batch{b}")
@pytest.mark.parametrize("name,opts,sizes", CASES)
def test_values_match_closed_form(name, opts, sizes, batch):
    sc, q, k, params = _make(name, opts, sizes, batch, seed=1)
    s = sc(q, k, params)
    ref = REFERENCE[name](sc, q, k, params)  # a new score needs a reference here
    assert s.shape == ref.shape
    np.testing.assert_allclose(s, ref, rtol=1e-12, atol=1e-12)


def test_scaled_dot_default_is_one_over_sqrt_d():
    _, q, k, _ = _make("dot", {}, {}, ())
    np.testing.assert_allclose(score("scaled_dot")(q, k), (q @ k.T) / 2.0, rtol=1e-14)


def test_beta_for_is_the_scale_the_forward_uses():
    assert score("dot").beta_for(16) == 1.0
    assert score("scaled_dot").beta_for(16) == 0.25
    assert score("scaled_dot", beta=0.7).beta_for(16) == 0.7
    assert score("neural").beta_for(4) == 0.5
    assert score("neural", beta=2.0).beta_for(4) == 2.0
    sc, q, k, _ = _make("scaled_dot", {"beta": 0.7}, {}, ())
    np.testing.assert_allclose(sc(q, k), sc.beta_for(D) * score("dot")(q, k), rtol=1e-14)


def test_additive_is_neural_with_identity_projection_and_no_biases():
    """Two algorithms for one thing: additive == neural with Wq = Wk = I,
    bh = 0, ba = 0, beta = 1 and tanh."""
    sc, q, k, P = _make("additive", {}, {"d_a": 3}, (2,), seed=2)
    neural = score("neural", hidden="tanh", beta=1.0)
    Pn = {"Wq": np.eye(D), "Wk": np.eye(D), "Whq": P["W_q"], "Whk": P["W_k"],
          "bh": np.zeros(3), "wa": P["v"], "ba": np.array(0.0)}
    np.testing.assert_allclose(neural(q, k, Pn), sc(q, k, P),
                               rtol=1e-13, atol=1e-14)


# --------------------------------------------------------------------------
# Neural: shared vs per-pair weights
# --------------------------------------------------------------------------


def _tile_per_pair(P, n_q, n_k):
    """Per-pair parameters in which every pair holds the shared weights."""
    out = dict(P)
    for p in ("Whq", "Whk", "bh", "wa", "ba"):
        out[p] = np.broadcast_to(P[p], (n_q, n_k) + P[p].shape).copy()
    return out


@pytest.mark.parametrize("hidden", ["tanh", "relu"])
def test_neural_per_pair_with_equal_weights_is_shared(hidden):
    sc, q, k, P = _make("neural", {"hidden": hidden}, NEURAL_SIZES, (2, 3), seed=3)
    Pp = _tile_per_pair(P, N_Q, N_K)
    np.testing.assert_allclose(sc(q, k, Pp), sc(q, k, P), rtol=1e-13, atol=1e-14)
    # and the per-pair gradients sum over the pairs to the shared ones
    u = np.random.default_rng(4).standard_normal((2, 3, N_Q, N_K))
    dq, dk, dP = sc.backward(u, sc.forward(q, k, P)[1])
    dqp, dkp, dPp = sc.backward(u, sc.forward(q, k, Pp)[1])
    np.testing.assert_allclose(dqp, dq, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dkp, dk, rtol=1e-12, atol=1e-14)
    for p in P:
        got = dPp[p] if p in ("Wq", "Wk") else dPp[p].sum(axis=(0, 1))
        np.testing.assert_allclose(got, dP[p], rtol=1e-12, atol=1e-14, err_msg=p)


@pytest.mark.parametrize("param", ["Whq", "Whk", "bh", "wa", "ba"])
def test_neural_per_pair_weights_act_on_their_pair_only(param):
    """Changing pair (0, 1)'s weights changes s[..., 0, 1] and nothing else."""
    sc, q, k, P = _make("neural", {}, {**NEURAL_SIZES, "per_pair": (N_Q, N_K)}, (2,), seed=5)
    s0 = sc(q, k, P)
    P2 = dict(P)
    P2[param] = P[param].copy()
    P2[param][0, 1] += 0.5
    changed = sc(q, k, P2) != s0
    assert changed[..., 0, 1].all()
    changed[..., 0, 1] = False
    assert not changed.any()


def test_neural_per_pair_init_shapes():
    P = score("neural").init_params(5, np.random.default_rng(0), d_prime=2, hidden_size=3,
                                    per_pair=(N_Q, N_K))
    assert {p: v.shape for p, v in P.items()} == {
        "Wq": (2, 5), "Wk": (2, 5), "Whq": (N_Q, N_K, 3, 2), "Whk": (N_Q, N_K, 3, 2),
        "bh": (N_Q, N_K, 3), "wa": (N_Q, N_K, 3), "ba": (N_Q, N_K)}
    P = score("neural").init_params(12, np.random.default_rng(0))
    assert {p: v.shape for p, v in P.items()} == {
        "Wq": (8, 12), "Wk": (8, 12), "Whq": (16, 8), "Whk": (16, 8),
        "bh": (16,), "wa": (16,), "ba": ()}


def test_neural_per_pair_needs_matching_lengths():
    sc, q, k, P = _make("neural", {}, {**NEURAL_SIZES, "per_pair": (N_Q, N_Q)}, ())
    with pytest.raises(ValueError, match=r"params\['Whq'\].*n_k = 4"):
        sc(q, k, P)


# --------------------------------------------------------------------------
# No seed axis in the scores
# --------------------------------------------------------------------------


def test_parameters_carry_no_seed_axis():
    """A model trained for S seeds at once keeps its seed axis in the training code
    (refattn/training/models); a score refuses parameters with an extra leading axis."""
    sc, q, k, P = _make("global", {}, {}, (3,))
    with pytest.raises(ValueError, match=r"^params\['v'\]: expected shape \(d,\) = \(4,\), got \(3, 4\)"):
        sc(None, k, {"v": np.stack([P["v"]] * 3)})
    add, qa, ka, Pa = _make("additive", {}, {"d_a": 3}, (3,))
    with pytest.raises(ValueError, match=r"^params\['W_q'\]: expected shape \(d_a, d\)"):
        add(qa, ka, {p: np.stack([v] * 3) for p, v in Pa.items()})


# --------------------------------------------------------------------------
# Conventions and the interface
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCORES)
def test_registered_scores_describe_themselves(name):
    sc = score(name)
    assert isinstance(sc, Score) and sc.name == name
    assert isinstance(sc.pairwise, bool)
    assert isinstance(sc.source, str) and sc.source
    singular = sc.singular  # the class holds its singular points
    assert isinstance(singular, tuple)
    assert all(len(pair) == 2 and all(isinstance(x, str) for x in pair) for pair in singular)
    assert "derivation 02, section" in type(sc).__doc__  # derivations/02-scores.md, as the module docstring says
    assert repr(sc).startswith(f"score({name!r}")


def test_relu_scores_list_their_kink():
    assert score("cosformer").singular
    assert score("neural", hidden="relu").singular
    assert score("neural", hidden="tanh").singular == ()


@pytest.mark.parametrize("name", SCORES)
def test_float32_in_float32_out(name):
    rng = np.random.default_rng(0)
    sc = score(name)
    sizes = VARIANTS.get(name, [(0, {}, {})])[0][2]
    P = sc.init_params(D, rng, dtype=np.float32, **sizes)
    assert all(v.dtype == np.float32 for v in P.values())
    q = rng.standard_normal((2, N_K, D)).astype(np.float32)
    k = rng.standard_normal((2, N_K, D)).astype(np.float32)
    s = sc(q, k, P)
    assert s.dtype == np.float32
    dq, dk, dP = sc.backward(np.ones_like(s), sc.forward(q, k, P)[1])
    assert dk.dtype == np.float32
    assert dq is None or dq.dtype == np.float32
    assert all(v.dtype == np.float32 for v in dP.values())


def test_global_ignores_q():
    sc, q, k, P = _make("global", {}, {}, (2,))
    s = sc(None, k, P)
    np.testing.assert_array_equal(sc(q, k, P), s)
    dq, dk, dP = sc.backward(np.ones_like(s), sc.forward(None, k, P)[1])
    assert dq is None


def test_cosformer_weights_are_in_zero_one():
    """With M >= n the re-weighting is positive: on all-positive features the
    cosformer score lies between 0 and the plain relu kernel."""
    rng = np.random.default_rng(0)
    q, k = np.abs(rng.standard_normal((5, D))), np.abs(rng.standard_normal((5, D)))
    s = score("cosformer")(q, k)
    assert np.all(s > 0) and np.all(s <= q @ k.T + 1e-15)
    np.testing.assert_allclose(np.diag(s), np.diag(q @ k.T), rtol=1e-15)  # cos(0) = 1


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCORES)
def test_integer_inputs_raise_type_error_naming_the_argument(name):
    sc, q, k, P = _make(name, {}, VARIANTS.get(name, [(0, {}, {})])[0][2], ())
    with pytest.raises(TypeError, match=r"^k:"):
        sc(q, k.astype(int), P)
    if sc.uses_q:
        with pytest.raises(TypeError, match=r"^q:"):
            sc(q.astype(int), k, P)
        with pytest.raises(TypeError, match=r"^q:"):
            sc.backward(np.ones(N_K if not sc.pairwise else (N_Q, N_K)), sc.forward(q.astype(int), k, P)[1])
    for p in P:
        with pytest.raises(TypeError, match=rf"^params\['{p}'\]"):
            sc(q, k, {**P, p: P[p].astype(int)})


@pytest.mark.parametrize("name", SCORES)
def test_mismatched_feature_size_raises(name):
    sc, q, k, P = _make(name, {}, VARIANTS.get(name, [(0, {}, {})])[0][2], ())
    k5 = np.random.default_rng(0).standard_normal((N_K, D + 1))
    match = r"^k:" if sc.uses_q else r"^params\['v'\]"
    with pytest.raises(ValueError, match=match):
        sc(q, k5, P)


def test_per_token_scores_need_equal_lengths():
    sc, q, k, _ = _make("self", {}, {}, ())
    with pytest.raises(ValueError, match=r"^k:.*tokens"):
        sc(q, k[:2])


def test_batch_dims_must_broadcast():
    sc, q, k, _ = _make("dot", {}, {}, (), q_batch=(2,), k_batch=(3,))
    with pytest.raises(ValueError, match=r"^k: batch"):
        sc(q, k)


@pytest.mark.parametrize("name", [n for n in SCORES if score(n).param_spec({})])
def test_missing_extra_and_ill_shaped_params_raise_naming_them(name):
    sizes = {**NEURAL_SIZES, "per_pair": (N_Q, N_K)} if name == "neural" else \
        VARIANTS.get(name, [(0, {}, {})])[0][2]
    sc, q, k, P = _make(name, {}, sizes, (2,))
    for p in P:
        missing = {n: v for n, v in P.items() if n != p}
        with pytest.raises(ValueError, match=rf"missing '{p}'"):
            sc(q, k, missing)
        with pytest.raises(ValueError, match=rf"^params\['{p}'\]: expected shape"):
            sc(q, k, {**P, p: np.zeros(P[p].shape + (2,))})
    with pytest.raises(ValueError, match="unexpected 'bogus'"):
        sc(q, k, {**P, "bogus": np.zeros(2)})
    with pytest.raises(ValueError, match="missing"):
        sc(q, k, None)
    with pytest.raises(TypeError, match="^params:"):
        sc(q, k, [1, 2])


def test_parameter_free_scores_reject_params():
    sc, q, k, _ = _make("dot", {}, {}, ())
    with pytest.raises(ValueError, match="unexpected 'W'"):
        sc(q, k, {"W": np.eye(D)})


@pytest.mark.parametrize("name", SCORES)
def test_grad_s_of_the_wrong_shape_raises(name):
    sc, q, k, P = _make(name, {}, VARIANTS.get(name, [(0, {}, {})])[0][2], (2,))
    s = sc(q, k, P)
    with pytest.raises(ValueError, match="^grad_s:"):
        sc.backward(np.ones(s.shape + (1,)), sc.forward(q, k, P)[1])


def test_unknown_score_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown score 'nope'.*scaled_dot"):
        score("nope")


@pytest.mark.parametrize("name", SCORES)
def test_unknown_option_raises_type_error_naming_it(name):
    with pytest.raises(TypeError, match=r"^gamma: unknown option"):
        score(name, gamma=1.0)


@pytest.mark.parametrize("name,option,value,error", [
    ("scaled_dot", "beta", -1.0, ValueError),
    ("scaled_dot", "beta", "big", TypeError),
    ("self", "scale", 0.0, ValueError),
    ("global", "lam", None, TypeError),
    ("global", "lam", float("inf"), ValueError),
    ("neural", "hidden", "gelu", ValueError),
    ("neural", "beta", True, TypeError),
    ("cosformer", "M", 0, ValueError),
])
def test_bad_option_values_raise_naming_the_option(name, option, value, error):
    with pytest.raises(error, match=rf"^{option}:"):
        score(name, **{option: value})


def test_cosformer_M_smaller_than_n_raises():
    sc, q, k, _ = _make("cosformer", {"M": 2.0}, {}, ())
    with pytest.raises(ValueError, match=r"^M:"):
        sc(q, k)


def test_init_params_checks_its_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match=r"^d_b: unknown size"):
        score("additive").init_params(D, rng, d_b=3)
    with pytest.raises(TypeError, match=r"^d_a: unknown size"):
        score("dot").init_params(D, rng, d_a=3)
    with pytest.raises(TypeError, match=r"^rng:"):
        score("additive").init_params(D, 0)
    with pytest.raises(ValueError, match=r"^d:"):
        score("additive").init_params(0, rng)
    with pytest.raises(ValueError, match=r"^hidden_size:"):
        score("neural").init_params(D, rng, hidden_size=0)
    with pytest.raises(ValueError, match=r"^per_pair:"):
        score("neural").init_params(D, rng, per_pair=3)
    with pytest.raises(TypeError, match=r"^dtype:"):
        score("global").init_params(D, rng, dtype=np.int64)
    assert score("dot").init_params(D, rng) == {}


# --------------------------------------------------------------------------
# CuPy (skips cleanly without a GPU)
# --------------------------------------------------------------------------


@pytest.mark.skipif(not cupy_available(), reason="CuPy with a CUDA device is not available")
@pytest.mark.parametrize("name,opts,sizes", CASES)
def test_cupy_matches_numpy(name, opts, sizes):
    import cupy

    sc, q, k, P = _make(name, opts, sizes, (2,))
    u = np.random.default_rng(9).standard_normal(sc(q, k, P).shape)
    Pc = {p: cupy.asarray(v) for p, v in P.items()}
    qc, kc, uc = cupy.asarray(q), cupy.asarray(k), cupy.asarray(u)
    s = sc(qc, kc, Pc)
    assert isinstance(s, cupy.ndarray)
    np.testing.assert_allclose(s.get(), sc(q, k, P), rtol=1e-12, atol=1e-13)
    dq, dk, dP = sc.backward(uc, sc.forward(qc, kc, Pc)[1])
    rq, rk, rP = sc.backward(u, sc.forward(q, k, P)[1])
    np.testing.assert_allclose(dk.get(), rk, rtol=1e-11, atol=1e-13)
    if rq is not None:
        np.testing.assert_allclose(dq.get(), rq, rtol=1e-11, atol=1e-13)
    for p in P:
        assert isinstance(dP[p], cupy.ndarray)
        np.testing.assert_allclose(dP[p].get(), rP[p], rtol=1e-11, atol=1e-13, err_msg=p)
