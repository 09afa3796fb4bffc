"""Proposition 1 (TanhMax, Eq. 4), TanhMax's Eqs. 7-9 and the closed forms of
derivations/04: each checked against an independent computation (autograd's
exact gradient-flow velocity, autograd Jacobians, the generic formula)."""

import json
import math

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import elementwise_grad, jacobian
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from refattn import ACTIVATIONS, activation
from refattn.studies import prop1
from refattn.theory import proposition1 as dyn
from refattn.check import away_from_singular
from refattn.cli import main

from tests.support import RTOL_AUTOGRAD, random_scores

# Proposition 1 under its assumption is an identity: it must hold to rounding.
RTOL_PROP1 = 1e-10
# Two closed-form evaluations of the same float64 quantity.
RTOL_FORM = 1e-12


def rel_err(a, ref):
    return np.max(np.abs(a - ref)) / np.max(np.abs(ref))


# --- the pieces of Eq. 4 ----------------------------------------------------


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_pi_is_the_transposed_jacobian_from_autograd(name, rng):
    s = random_scores(name, 7, rng)
    pi = dyn.pi_matrix(name, s)
    J = jacobian(activation(name))(s)  # J[j, i] = d w_j / d s_i
    np.testing.assert_allclose(pi, J.T, rtol=0, atol=RTOL_AUTOGRAD * np.max(np.abs(J)))


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_delta_II_is_pi_times_o(name, rng):
    s = random_scores(name, (3, 6), rng)
    o = rng.standard_normal((3, 6))
    d2 = dyn.delta_II(name, s, o)
    ref = np.stack([dyn.pi_matrix(name, s[k]) @ o[k] for k in range(3)])
    assert rel_err(d2, ref) < RTOL_FORM


@pytest.mark.parametrize("output,loss", dyn.SETTINGS)
def test_output_factor_is_the_derivative_of_the_risk(output, loss, rng):
    a = rng.standard_normal(5)
    t = rng.integers(0, 2, 5).astype(float) if loss == "bce" else rng.standard_normal(5)
    model = dyn.OneLayerModel("free", "softmax", output, loss)

    def risk_of_logits(a):  # the same risk as OneLayerModel.risk, as a function of a = V^T W
        y = 1 / (1 + anp.exp(-a)) if output == "sigmoid" else a
        L = -t * anp.log(y) - (1 - t) * anp.log(1 - y) if loss == "bce" else 0.5 * (y - t) ** 2
        return anp.mean(L)

    ref = elementwise_grad(risk_of_logits)(a)
    got = dyn.output_factor(a, t, output=output, loss=loss)
    assert rel_err(got, ref) < RTOL_FORM
    assert model.output == output


# --- Proposition 1 under its assumption: exact -------------------------------


@pytest.mark.parametrize("output,loss", dyn.SETTINGS)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_prop1_equals_exact_velocity_with_shared_tokens(name, output, loss):
    rng = np.random.default_rng(7)
    model = dyn.OneLayerModel("free", name, output, loss, scale=2.0)
    params = model.init_params(T=10, d=3, dv=4, rng=rng)
    tokens = rng.integers(0, 10, size=(8, 6))  # 48 occurrences of 10 tokens: heavy sharing
    assert len(np.unique(tokens)) < tokens.size
    target = rng.integers(0, 2, 8).astype(float) if loss == "bce" else rng.standard_normal(8)
    r = dyn.velocity_decomposition(model, params, tokens, target)
    assert np.max(np.abs(r["exact"])) > 0
    assert rel_err(r["formula"], r["exact"]) < RTOL_PROP1
    # the independent pieces: dR/ds by formula vs autograd; Delta_I vs diag(J J^T)
    assert rel_err(r["dR_ds_formula"], r["dR_ds"]) < RTOL_PROP1
    assert rel_err(r["delta_I"], r["kernel_diag"]) < RTOL_FORM
    # no cross terms under the assumption
    assert np.max(np.abs(r["cross"])) == 0.0
    assert np.max(np.abs(r["other"])) <= 1e-13 * np.max(np.abs(r["exact"]))
    # tokens that do not occur do not move
    assert np.all(r["exact"][~r["present"]] == 0)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_score_velocity_per_instance_matches_exact_when_tokens_are_distinct(name, rng):
    N, n = 4, 5
    model = dyn.OneLayerModel("free", name, "sigmoid", "bce", scale=1.5)
    params = model.init_params(T=N * n, d=3, dv=2, rng=rng)
    tokens = rng.permutation(N * n).reshape(N, n)  # every token once
    target = rng.integers(0, 2, N).astype(float)
    s = model.vocab_scores(params)[tokens]
    o = model.polarity(params)[tokens]
    c = dyn.output_factor(model.logits(params, tokens), target)
    v = dyn.score_velocity(name, s, o, c, model.delta_I(params)[tokens])
    exact = dyn.velocity_decomposition(model, params, tokens, target)["exact"][tokens]
    assert rel_err(v, exact) < RTOL_PROP1


# --- TanhMax, Eqs. 7-9 -------------------------------------------------------


def _distinct_tanhmax_batch(rng, loss="bce"):
    N, n = 3, 6
    model = dyn.OneLayerModel("free", "tanhmax", "sigmoid", loss, scale=2.0)
    params = model.init_params(T=N * n, d=4, dv=3, rng=rng)
    tokens = rng.permutation(N * n).reshape(N, n)
    target = rng.integers(0, 2, N).astype(float)
    s = model.vocab_scores(params)[tokens]
    o = model.polarity(params)[tokens]
    c = dyn.output_factor(model.logits(params, tokens), target)
    dI = model.delta_I(params)[tokens]
    exact = dyn.velocity_decomposition(model, params, tokens, target)["exact"][tokens]
    return s, o, c, dI, exact


def test_tanhmax_eq7_equals_the_generic_formula_and_the_exact_velocity(rng):
    s, o, c, dI, exact = _distinct_tanhmax_batch(rng)
    v7 = dyn.tanhmax_velocity(s, o, c, dI)
    assert rel_err(v7, dyn.score_velocity("tanhmax", s, o, c, dI)) < RTOL_FORM
    assert rel_err(v7, exact) < RTOL_PROP1


def test_tanhmax_eq7_as_printed_has_the_wrong_sign(rng):
    s, o, c, dI, exact = _distinct_tanhmax_batch(rng)
    printed = dyn.tanhmax_velocity_as_printed(s, o, c, dI)
    moving = np.abs(exact) > 1e-8 * np.max(np.abs(exact))
    assert np.all(np.sign(printed[moving]) == -np.sign(exact[moving]))
    assert rel_err(printed, exact) > 1.9  # it is -exact: the error is 2x the velocity


def test_tanhmax_eq8_9_weights(rng):
    s = 3 * rng.standard_normal((4, 7))
    w_tilde, w_hat = dyn.tanhmax_weights(s)
    C = np.sum(np.cosh(s), axis=-1, keepdims=True)
    assert rel_err(w_tilde, np.cosh(s) / C) < RTOL_FORM
    assert rel_err(w_hat, np.sinh(s) / C) < RTOL_FORM
    assert np.all(w_tilde > 0) and np.allclose(w_tilde.sum(-1), 1.0, rtol=0, atol=1e-15)
    # Eqs. 8-9 as printed sum over k a term in s_i only: sum_k 2 cosh s_i = 2 n cosh s_i,
    # so the printed w_tilde would be the constant 1/n -- a typo, not the weights Eq. 7 needs.
    n = s.shape[-1]
    printed_w_tilde = (np.exp(s) + np.exp(-s)) / (n * (np.exp(s) + np.exp(-s)))
    assert np.allclose(printed_w_tilde, 1.0 / n)
    assert not np.allclose(printed_w_tilde, w_tilde, atol=1e-3)


def test_tanhmax_weights_are_stable_for_huge_scores():
    s = np.array([[800.0, -790.0, 0.0, 3.0]])
    w_tilde, w_hat = dyn.tanhmax_weights(s)
    assert np.all(np.isfinite(w_tilde)) and np.all(np.isfinite(w_hat))
    # cosh 800 / (cosh 800 + cosh 790 + ...) = 1 / (1 + e^-10) to double precision
    np.testing.assert_allclose(w_tilde[0, 0], 1.0 / (1.0 + np.exp(-10.0)), rtol=1e-12)
    np.testing.assert_allclose(w_hat[0, 1], -np.exp(-10.0) / (1.0 + np.exp(-10.0)), rtol=1e-12)


# --- closed forms (derivations/04) -----------------------------------------


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_every_activation_has_a_closed_form_equal_to_the_generic_one(name, rng):
    s = random_scores(name, (5, 8), rng)
    o = rng.standard_normal((5, 8))
    got = dyn.closed_form_delta_II(name, s, o)
    assert rel_err(got, dyn.delta_II(name, s, o)) < RTOL_FORM


@pytest.mark.parametrize("name", ["softmax", "tanhmax", "signexp", "expressive", "sigsoftmax"])
@settings(max_examples=60, deadline=None)
@given(s=arrays(np.float64, 6, elements=st.floats(-30, 30)), o=arrays(np.float64, 6, elements=st.floats(-5, 5)))
def test_closed_forms_hypothesis(name, s, o):
    s = away_from_singular(activation(name), s, margin=1e-3)
    ref = dyn.delta_II(name, s, o)
    got = dyn.closed_form_delta_II(name, s, o)
    # rounding is relative to the size of the terms (weights <= 1 times o, or the
    # Jacobian times o), not to the result, which can cancel to 0 (o constant under
    # softmax: Delta_II = 0 exactly)
    bound = max(1.0, len(s) * np.max(np.abs(activation(name).jacobian(s)))) * np.max(np.abs(o))
    assert np.all(np.isfinite(got))
    assert np.max(np.abs(got - ref)) <= 1e-12 * max(bound, 1e-300)


# --- what the closed forms say (derivations/04, section 4) ------------------


@settings(max_examples=50, deadline=None)
@given(s=arrays(np.float64, 5, elements=st.floats(-4, 4)), o=arrays(np.float64, 5, elements=st.floats(-3, 3)))
def test_softmax_raises_exactly_the_tokens_above_the_context_polarity(s, o):
    # positive instance under-predicted: c = y - 1 < 0, so -c > 0
    v = dyn.score_velocity("softmax", s[None], o[None], np.array([-0.3]), np.ones((1, 5)))[0]
    o_bar = np.sum(activation("softmax")(s) * o)
    gap = o - o_bar
    clear = np.abs(gap) > 1e-9
    assert np.all(np.sign(v[clear]) == np.sign(gap[clear]))


@settings(max_examples=50, deadline=None)
@given(s=arrays(np.float64, 5, elements=st.floats(-4, 4)), o=arrays(np.float64, 5, elements=st.floats(-3, 3)))
def test_expressive_moves_abs_score_like_softmax_moves_the_score(s, o):
    s = np.where(np.abs(s) < 1e-3, 1e-3, s)
    v = dyn.score_velocity("expressive", s[None], o[None], np.array([-0.3]), np.ones((1, 5)))[0]
    o_bar = np.sum(activation("expressive")(s) * o)
    gap = o - o_bar
    clear = np.abs(gap) > 1e-9
    # d|s_i|/dtau = sign(s_i) ds_i/dtau has the sign of o_i - o_bar
    assert np.all(np.sign(np.sign(s) * v)[clear] == np.sign(gap[clear]))


@pytest.mark.parametrize("name,threshold", [
    ("tanhmax", lambda s: np.tanh(s)),  # rises iff o_i > tanh(s_i) a
    ("signexp", lambda s: np.sign(s)),  # rises iff o_i > sign(s_i) a
    ("sigsoftmax", lambda s: np.ones_like(s)),  # rises iff o_i > a, as softmax
    ("sigmoid", lambda s: np.ones_like(s)),
])
@settings(max_examples=40, deadline=None)
@given(s=arrays(np.float64, 5, elements=st.floats(-4, 4)), o=arrays(np.float64, 5, elements=st.floats(-3, 3)),
       c=st.sampled_from([-0.3, 0.2]))
def test_which_scores_rise_threshold_form(name, threshold, s, o, c):
    """derivations/04 section 4: o_bar = sum_j w_j o_j is the logit a itself, and
    sign(ds_i/dtau) = sign(-c) sign(o_i - threshold(s_i) a)."""
    s = np.where(np.abs(s) < 1e-3, 1e-3, s)
    v = dyn.score_velocity(name, s[None], o[None], np.array([c]), np.ones((1, 5)))[0]
    a = np.sum(activation(name)(s) * o)  # the logit V^T W
    gap = o - threshold(s) * a
    clear = np.abs(gap) > 1e-9
    assert np.all(np.sign(v[clear]) == np.sign(-c) * np.sign(gap[clear]))


# --- shared projections: an approximation -----------------------------------


@pytest.mark.parametrize("kind", ["shared", "global"])
def test_decomposition_adds_up_and_cross_terms_are_not_negligible(kind):
    rng = np.random.default_rng(3)
    model = dyn.OneLayerModel(kind, "tanhmax", "sigmoid", "bce", scale=2.0)
    params = model.init_params(T=10, d=4, dv=4, rng=rng)
    tokens = rng.integers(0, 10, size=(6, 5))
    target = rng.integers(0, 2, 6).astype(float)
    r = dyn.velocity_decomposition(model, params, tokens, target)
    ex = r["exact"]
    assert rel_err(r["diagonal"] + r["cross"] + r["other"], ex) < 1e-12
    # dR/ds still matches the formula: only Delta_I and the cross terms differ
    assert rel_err(r["dR_ds_formula"], r["dR_ds"]) < RTOL_PROP1
    assert rel_err(ex - r["diagonal"], ex) > 1e-2
    assert rel_err(r["formula"], ex) > 1e-2


def test_global_query_kernel_is_the_gram_matrix_of_embeddings():
    # s_t = E_t . q / lam: ds_t/dE_t = q / lam, ds_t/dq = E_t / lam, so
    # (J J^T)_tt = (|q|^2 + |E_t|^2) / lam^2 -- the paper's Delta_I with Q_t = q, K_t = E_t
    rng = np.random.default_rng(1)
    model = dyn.OneLayerModel("global", "softmax", "sigmoid", "bce", scale=10.0)
    params = model.init_params(T=6, d=3, dv=3, rng=rng)
    tokens = rng.integers(0, 6, (4, 3))
    r = dyn.velocity_decomposition(model, params, tokens, np.array([0.0, 1.0, 1.0, 0.0]))
    E, q = params["E"], params["q"]
    assert rel_err(r["kernel_diag"], (q @ q + np.sum(E * E, -1)) / 100.0) < RTOL_FORM


def test_prop1_study_every_activation_within_tolerance():
    res = prop1.run(prop1.Settings(seed=1))
    json.dumps(res)
    assert [r["activation"] for r in res["rows"]] == list(ACTIVATIONS)
    for r in res["rows"]:
        assert r["free_max_rel_error"] <= prop1.TOLERANCE, r
        assert r["ok"]
        assert r["shared_cross_terms_rel"] > 1e-3 and r["global_cross_terms_rel"] > 1e-3
    assert res["ok"]
    table = prop1.report(res)
    for name in ACTIVATIONS:
        assert name in table


def test_prop1_cli_json(capsys):
    assert main(["prop1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert {r["activation"] for r in res["rows"]} == set(ACTIVATIONS)
    assert all(r["free_max_rel_error"] <= 1e-10 for r in res["rows"])


def test_prop1_cli_fails_when_the_formula_is_wrong(monkeypatch, capsys):
    honest = dyn.OneLayerModel.delta_I
    monkeypatch.setattr(dyn.OneLayerModel, "delta_I", lambda self, p: honest(self, p) * (1 + 1e-6))
    assert main(["prop1"]) == 1
    assert "FAIL" in capsys.readouterr().out


# --- bad input --------------------------------------------------------------


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="kind"):
        dyn.OneLayerModel("learned")
    with pytest.raises(ValueError, match="act"):
        dyn.OneLayerModel(activation="nope")
    with pytest.raises(ValueError, match="loss"):
        dyn.OneLayerModel(output="identity", loss="bce")
    with pytest.raises(ValueError, match="scale"):
        dyn.OneLayerModel(scale=-1.0)
    with pytest.raises(ValueError, match="output"):
        dyn.output_factor(np.zeros(2), np.zeros(2), output="tanh")
    model = dyn.OneLayerModel()
    params = model.init_params(5, 2, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="tokens"):
        dyn.velocity_decomposition(model, params, np.array([0, 1]), np.zeros(1))
    with pytest.raises(ValueError, match="tokens"):
        dyn.velocity_decomposition(model, params, np.array([[0, 7]]), np.zeros(1))
    with pytest.raises(ValueError, match="target"):
        dyn.velocity_decomposition(model, params, np.array([[0, 1]]), np.zeros(2))
    with pytest.raises(ValueError, match="target"):
        dyn.velocity_decomposition(model, params, np.array([[0, 1]]), np.array([2.0]))
    with pytest.raises(ValueError, match="c"):
        dyn.score_velocity("softmax", np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(3), np.ones((2, 3)))
    with pytest.raises(ValueError, match="o"):
        dyn.delta_II("softmax", np.zeros((2, 3)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="name"):
        dyn.closed_form_delta_II("nope", np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="normaliser"):
        dyn.pi_matrix("cosformer", np.array([-1.0, -2.0]))
    with pytest.raises(TypeError, match="rng"):
        model.init_params(5, 2, 2, 0)
    assert math.isfinite(model.scale)
