"""refattn.studies.interpret: TanhMax section 5.2's measures and its Table 1.

Kendall's tau-b and its p-value against brute force (every permutation,
n = 3..8, with and without ties) and hand examples; hypothesis properties;
the stable sigmoid difference against an independent evaluation; the
gradient importance against central differences of the model's own output;
occlusion against a direct re-evaluation with the token masked, and a closed
form for a token of zero weight; permutation and randomisation reproducible
by seed; the sign symmetry of signed activations; a tiny end-to-end run;
SST-2 where the data is present; bad input."""

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn.studies.interpret import (
    PAPER_TABLE1,
    _permuted,
    gradient_importance,
    interpret_measures,
    kendall_tau_b,
    leave_one_out,
    logit_from_weights,
    orient,
    orientation,
    permutation_change,
    randomisation_change,
    report,
    resolve_sst2,
    sigmoid_difference,
    sigmoid_slope,
    signed_activation,
    summarise,
)
from refattn.studies import helpers, interpret
from refattn.training.models import PolarityClassifier
from refattn.training.tasks.polarity import PolarityConfig

from tests.support import RTOL_CENTRAL

S, B, L, V, E, H = 2, 4, 6, 11, 4, 3


def run_interpret(activations=("softmax", "tanhmax"), data="synthetic", *, progress=False, **settings):
    """:func:`refattn.studies.interpret.run_interpret` with its settings written inline."""
    return interpret.run_interpret(interpret.Settings(activations=activations, data=data, **settings),
                                   progress=progress)


def tiny_model(act="tanhmax", score="self", vocab=V):
    return PolarityClassifier(vocab, act, score, embed_dim=E, hidden_dim=H)


def random_params(model, rng, scale=0.7):
    """O(1) parameters, so that every term of the gradient matters."""
    return {k: scale * rng.standard_normal((S,) + shape) for k, shape in model.param_shapes().items()}


def ragged_batch(rng):
    """Lengths 6, 4, 2, 1 (seed 0) and 3, 6, 5, 2 (seed 1); padding id 0; repeated tokens likely."""
    lengths = np.array([[6, 4, 2, 1], [3, 6, 5, 2]])
    mask = np.arange(L) < lengths[..., None]  # (S, B, L)
    tokens = np.where(mask, rng.integers(0, V, (S, B, L)), 0)
    return {"tokens": tokens, "mask": mask}


# --------------------------------------------------------------------------
# Kendall's tau-b
# --------------------------------------------------------------------------


def brute_S(x, y):
    """S = sum over pairs i < j of sign(x_i - x_j) sign(y_i - y_j), by a loop."""
    n = len(x)
    return sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i in range(n) for j in range(i + 1, n))


def brute_tau(x, y):
    n = len(x)
    n0 = n * (n - 1) / 2
    n1 = sum(x[i] == x[j] for i in range(n) for j in range(i + 1, n))
    n2 = sum(y[i] == y[j] for i in range(n) for j in range(i + 1, n))
    return brute_S(x, y) / math.sqrt((n0 - n1) * (n0 - n2))


def permutation_S(x, y):
    """S for every one of the n! pairings of the y values with x: the null distribution."""
    n = len(x)
    perms = np.array(list(itertools.permutations(range(n))))  # (n!, n)
    yp = np.asarray(y)[perms]  # (n!, n)
    iu, ju = np.triu_indices(n, 1)
    return np.sum(np.sign(x[iu] - x[ju]) * np.sign(yp[:, iu] - yp[:, ju]), axis=1)  # (n!,)


def test_kendall_hand_examples():
    tau, p = kendall_tau_b(np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0]))
    # pairs (1,2) and (1,3) concordant, (2,3) discordant: S = 1, tau = 1/3; S' in {3, 1, -1, -3}: p = 1
    assert tau == pytest.approx(1 / 3, abs=1e-15) and p == pytest.approx(1.0, abs=1e-15)
    tau, p = kendall_tau_b(np.arange(4.0), np.arange(4.0) * 2)
    assert tau == 1.0 and p == pytest.approx(2 / 24, abs=1e-15)  # only the identity and its reverse reach |S| = 6
    # a tie in x: pair (1,2) tied, (1,3) and (2,3) concordant: S = 2, tau-b = 2 / sqrt(2 * 3)
    tau, _ = kendall_tau_b(np.array([1.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]))
    assert tau == pytest.approx(2 / math.sqrt(6), abs=1e-15)


@pytest.mark.parametrize("n", range(3, 9))
def test_kendall_exact_pvalue_is_the_permutation_count(n):
    rng = np.random.default_rng(n)
    for _ in range(3):
        x, y = rng.permutation(n).astype(float), rng.standard_normal(n)
        tau, p = kendall_tau_b(x, y)
        assert tau == pytest.approx(brute_tau(x, y), abs=1e-14)
        null = permutation_S(x, y)
        assert p == pytest.approx(np.mean(np.abs(null) >= abs(brute_S(x, y))), abs=1e-14)


@pytest.mark.parametrize("n", range(3, 9))
def test_kendall_ties_tau_and_variance_against_brute_force(n):
    """With ties the p-value is the normal approximation with Kendall's
    tie-corrected variance, which is the exact permutation variance of S:
    p must equal erfc(|S| / sqrt(2 var)) with var from all n! pairings."""
    rng = np.random.default_rng(100 + n)
    for _ in range(3):
        x = rng.integers(0, 3, n).astype(float)
        y = rng.integers(0, 4, n).astype(float)
        if np.all(x == x[0]) or np.all(y == y[0]):
            continue
        tau, p = kendall_tau_b(x, y)
        assert tau == pytest.approx(brute_tau(x, y), abs=1e-14)
        null = permutation_S(x, y)
        assert abs(null.mean()) < 1e-12
        var = np.mean(null.astype(float) ** 2)
        assert p == pytest.approx(math.erfc(abs(brute_S(x, y)) / math.sqrt(2 * var)), rel=1e-12)


def test_kendall_mask_batch_and_undefined():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 7)), rng.standard_normal((3, 7))
    mask = np.arange(7) < np.array([[7], [4], [1]])
    tau, p = kendall_tau_b(x, y, mask)
    assert tau.shape == p.shape == (3,)
    for r in range(2):
        k = mask[r].sum()
        t1, p1 = kendall_tau_b(x[r, :k], y[r, :k])
        assert tau[r] == pytest.approx(t1, abs=1e-15) and p[r] == pytest.approx(p1, abs=1e-15)
    assert np.isnan(tau[2]) and np.isnan(p[2])  # one entry: no pair
    t, p = kendall_tau_b(np.ones(5), np.arange(5.0))  # x all tied
    assert np.isnan(t) and np.isnan(p)


def test_kendall_long_rows_use_the_normal_approximation():
    """n = 80 (beyond EXACT_MAX_N) without ties: p = erfc(|S| / sqrt(2 var)), var = n(n-1)(2n+5)/18."""
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(80), rng.standard_normal(80)
    tau, p = kendall_tau_b(x, y)
    n = 80
    S = tau * n * (n - 1) / 2
    assert p == pytest.approx(math.erfc(abs(S) / math.sqrt(2 * n * (n - 1) * (2 * n + 5) / 18)), rel=1e-10)


small_ints = st.lists(st.integers(-4, 4), min_size=2, max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_kendall_properties(data):
    xs = data.draw(small_ints)
    ys = data.draw(st.lists(st.integers(-4, 4), min_size=len(xs), max_size=len(xs)))
    x, y = np.array(xs, float), np.array(ys, float)
    tau, p = kendall_tau_b(x, y)
    if np.all(x == x[0]) or np.all(y == y[0]):
        assert np.isnan(tau)
        return
    assert -1.0 <= tau <= 1.0 and 0.0 < p <= 1.0
    t2, p2 = kendall_tau_b(y, x)
    assert t2 == tau and p2 == p  # symmetric
    t3, p3 = kendall_tau_b(x ** 3 + 5 * x, np.exp(y / 3))  # strictly increasing maps, exact on these ints
    assert t3 == tau and p3 == p
    t4, p4 = kendall_tau_b(x, -y)
    assert t4 == -tau and p4 == p


def test_kendall_bad_input():
    with pytest.raises(ValueError, match="y: expected the shape"):
        kendall_tau_b(np.zeros(3), np.zeros(4))
    with pytest.raises(TypeError, match="x: expected a real numeric"):
        kendall_tau_b(np.array(["a", "b"]), np.zeros(2))
    with pytest.raises(TypeError, match="mask"):
        kendall_tau_b(np.zeros(3), np.zeros(3), mask=np.ones(3))
    with pytest.raises(ValueError, match="mask: expected shape"):
        kendall_tau_b(np.zeros(3), np.zeros(3), mask=np.ones(4, bool))
    with pytest.raises(ValueError, match="y: expected finite"):
        kendall_tau_b(np.zeros(3), np.array([0.0, np.nan, 1.0]))
    with pytest.raises(ValueError, match="x: expected at least one dimension"):
        kendall_tau_b(1.0, 2.0)


# --------------------------------------------------------------------------
# sigmoid differences
# --------------------------------------------------------------------------


def test_sigmoid_difference_and_slope():
    rng = np.random.default_rng(1)
    a1, a2 = 4 * rng.standard_normal(50), 4 * rng.standard_normal(50)
    naive = 1 / (1 + np.exp(-a1)) - 1 / (1 + np.exp(-a2))
    assert np.allclose(sigmoid_difference(a1, a2), naive, rtol=1e-12, atol=1e-15)
    # near saturation: sigma(40) - sigma(39.9) rounds to 0 when subtracted, but equals
    # sigma(-39.9) - sigma(-40), a difference of two small, accurately represented numbers
    exact = math.exp(-39.9) / (1 + math.exp(-39.9)) - math.exp(-40) / (1 + math.exp(-40))
    assert 1 / (1 + math.exp(-40)) - 1 / (1 + math.exp(-39.9)) == 0.0
    assert sigmoid_difference(40.0, 39.9) == pytest.approx(exact, rel=1e-12)
    assert sigmoid_difference(3.0, 3.0) == 0.0
    s = 1 / (1 + np.exp(-a1))
    assert np.allclose(sigmoid_slope(a1), s * (1 - s), rtol=1e-12)
    assert sigmoid_slope(800.0) == 0.0 and sigmoid_slope(700.0) > 0  # no overflow warning


@settings(max_examples=60, deadline=None)
@given(st.floats(-800, 800), st.floats(-800, 800))
def test_sigmoid_difference_properties(a1, a2):
    d = sigmoid_difference(a1, a2)
    assert d == -sigmoid_difference(a2, a1)
    assert np.sign(d) in (np.sign(a1 - a2), 0.0)  # 0 only by underflow
    assert abs(d) <= 0.25 * abs(a1 - a2) * (1 + 1e-12) and abs(d) <= 1.0  # sigma' <= 1/4


# --------------------------------------------------------------------------
# the model's pieces and the importance measures
# --------------------------------------------------------------------------


@pytest.mark.parametrize("score", ["self", "global", "additive"])
def test_logit_from_weights_is_the_model_logit(rng, score):
    m = tiny_model("tanhmax", score)
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    fwd = m.outputs(P, batch)
    a = logit_from_weights(m, P, fwd["w"], tokens=batch["tokens"])
    assert np.allclose(a, fwd["logit"], rtol=1e-12, atol=1e-13)


def perturbed_output(m, P, batch, s, b, i, delta):
    """P(class 1) of instance (s, b) with the embedding of position i moved by delta,
    through a model with one extra vocabulary row (independent of the positional copy)."""
    big = tiny_model(m.activation, m.score, vocab=m.vocab_size + 1)
    Q = {k: v.copy() for k, v in P.items()}
    row = P["emb"][:, batch["tokens"][s, b, i]] + delta  # (S, E) (only seed s matters)
    Q["emb"] = np.concatenate([P["emb"], row[:, None, :]], axis=1)
    tokens = batch["tokens"].copy()
    tokens[s, b, i] = m.vocab_size
    return big.outputs(Q, {"tokens": tokens, "mask": batch["mask"]})["prob"][s, b]


@pytest.mark.parametrize("act,score", [("softmax", "self"), ("tanhmax", "self"), ("tanhmax", "additive"),
                                       ("expressive", "global"), ("signexp", "self")])
def test_gradient_importance_against_central_differences(rng, act, score):
    m = tiny_model(act, score)
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    gi = gradient_importance(m, P, batch)
    h = 1e-6
    for s, b, i in [(0, 0, 0), (0, 0, 5), (0, 1, 2), (1, 1, 3), (1, 2, 0), (1, 3, 1)]:
        u = rng.standard_normal(E)  # a random direction, never all ones
        fd = (perturbed_output(m, P, batch, s, b, i, h * u) - perturbed_output(m, P, batch, s, b, i, -h * u)) / (2 * h)
        assert gi["grad"][s, b, i] @ u == pytest.approx(fd, rel=RTOL_CENTRAL, abs=1e-10), (s, b, i)
    x = P["emb"][np.arange(S)[:, None, None], batch["tokens"]]  # (S, B, L, E)
    mask = batch["mask"]
    assert np.allclose(gi["signed"], np.where(mask, np.sum(gi["grad"] * x, -1), 0), rtol=1e-12, atol=1e-15)
    assert np.allclose(gi["norm"], np.linalg.norm(gi["grad"], axis=-1), rtol=1e-12)
    assert np.all(gi["grad"][~mask] == 0)


@pytest.mark.parametrize("act", ["softmax", "tanhmax", "expressive", "linear"])
def test_leave_one_out_is_a_direct_re_evaluation(rng, act):
    m = tiny_model(act)
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    loo = leave_one_out(m, P, batch)
    full = m.outputs(P, batch)["prob"]
    for s, b, i in zip(*np.nonzero(batch["mask"])):
        mask = batch["mask"].copy()
        mask[s, b, i] = False
        minus = m.outputs(P, {"tokens": batch["tokens"], "mask": mask})["prob"][s, b]
        assert loo[s, b, i] == pytest.approx(full[s, b] - minus, rel=1e-9, abs=1e-14)
    assert np.all(loo[~batch["mask"]] == 0)


def test_leave_one_out_of_a_zero_weight_token_is_not_zero():
    """TanhMax: a token with score 0 has weight tanh(0) p = 0 but h = cosh 0 = 1 in the
    normaliser C = sum_k cosh s_k; removing it scales the other weights by C / (C - 1),
    so a - b_o becomes (a - b_o) C / (C - 1) (derivation section 2.2)."""
    rng = np.random.default_rng(7)
    m = tiny_model("tanhmax", "self")
    P = random_params(m, rng)
    P["b_q"][:] = 0.0
    P["emb"][:, 0] = 0.0  # token 0: q = W_q 0 + 0 = 0, so s = q.k / scale = 0 exactly
    batch = {"tokens": np.array([[[0, 3, 5, 7]], [[2, 0, 9, 4]]]), "mask": np.ones((2, 1, 4), bool)}
    fwd = m.outputs(P, batch)
    assert fwd["w"][0, 0, 0] == 0.0 and fwd["w"][1, 0, 1] == 0.0
    loo = leave_one_out(m, P, batch)
    for s, i in ((0, 0), (1, 1)):
        C = np.sum(np.cosh(fwd["s"][s, 0]))
        a = fwd["logit"][s, 0]
        a_minus = P["b_o"][s] + (a - P["b_o"][s]) * C / (C - 1)
        expected = 1 / (1 + np.exp(-a)) - 1 / (1 + np.exp(-a_minus))
        assert abs(expected) > 1e-4
        assert loo[s, 0, i] == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("act", ["softmax", "tanhmax", "expressive"])
def test_leave_one_out_closed_form(rng, act):
    """Eq. 13.I8': removing token i changes the logit by a - a_{-i} = (g_i o_i - h_i (a - b_o)) / (C - h_i),
    C = sum_k h_k, written from the paper's g and h (TanhMax Eq. 5), not from the code's weights."""
    from refattn.core.activations import activation

    m = tiny_model(act)
    P = random_params(m, rng, scale=0.4)  # moderate scores: g, h evaluated directly do not overflow
    batch = {"tokens": rng.integers(0, V, (S, 2, 5)), "mask": np.ones((S, 2, 5), bool)}
    fwd = m.outputs(P, batch)
    o = m.token_polarity(P)[np.arange(S)[:, None, None], batch["tokens"]]  # (S, 2, 5)
    g, h = activation(act).g(fwd["s"]), activation(act).h(fwd["s"])
    C = h.sum(-1, keepdims=True)
    a = fwd["logit"][..., None]
    a_minus = a - (g * o - h * (a - P["b_o"][:, None, None])) / (C - h)
    expected = 1 / (1 + np.exp(-a)) - 1 / (1 + np.exp(-a_minus))
    assert np.allclose(leave_one_out(m, P, batch), expected, rtol=1e-9, atol=1e-14)


def test_permutation_keeps_each_rows_weights(rng):
    w = rng.standard_normal((2, 3, 5))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 1, 1]], bool)[None].repeat(2, 0)
    w = np.where(mask, w, 0.0)
    out = _permuted(np.random.default_rng(0), w, mask, 50)  # (2, 3, 50, 5)
    assert np.all(out[~np.broadcast_to(mask[:, :, None], out.shape)] == 0)
    assert np.array_equal(np.sort(out, -1), np.broadcast_to(np.sort(w, -1)[:, :, None], out.shape))
    assert len({tuple(r) for r in out[0, 1]}) > 10  # the orders do vary


def test_permutation_and_randomisation_reproducible_and_in_range(rng):
    m = tiny_model("tanhmax")
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    for f in (permutation_change, randomisation_change):
        a, b = f(m, P, batch, 40, 3), f(m, P, batch, 40, np.random.default_rng(3))
        assert np.array_equal(a, b) and a.shape == (S, B)
        assert not np.array_equal(a, f(m, P, batch, 40, 4))
        assert np.all((a >= 0) & (a <= 1))
    assert permutation_change(m, P, batch, 40, 3)[0, 3] == 0  # one token: the only permutation is itself
    assert signed_activation("tanhmax") and not signed_activation("softmax")
    assert not np.array_equal(randomisation_change(m, P, batch, 40, 3),
                              randomisation_change(m, P, batch, 40, 3, low=0))  # U(-1, 1) by default


def test_permutation_of_two_tokens_closed_form(rng):
    """Two real tokens: a permutation is the identity (change 0) or the swap (change d),
    so the median over draws is 0, d / 2 or d."""
    m = tiny_model("softmax")
    P = random_params(m, rng)
    batch = {"tokens": np.array([[[1, 2, 0]], [[3, 4, 0]]]), "mask": np.array([[[1, 1, 0]], [[1, 1, 0]]], bool)}
    fwd = m.outputs(P, batch)
    w = fwd["w"]
    d = np.abs(m.outputs(P, batch)["prob"] - 1 / (1 + np.exp(-logit_from_weights(
        m, P, w[..., [1, 0, 2]], tokens=batch["tokens"]))))
    got = permutation_change(m, P, batch, 31, 0)
    for s in range(2):
        assert min(abs(got[s, 0] - c) for c in (0.0, d[s, 0] / 2, d[s, 0])) < 1e-12


@pytest.mark.parametrize("act", ["tanhmax", "signexp"])
def test_sign_symmetry_negates_signed_taus_only(rng, act):
    m = tiny_model(act)
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    twin = m.symmetric(P)
    a, b = interpret_measures(m, P, batch, 20, 0), interpret_measures(m, twin, batch, 20, 0)
    assert np.allclose(a["w"], -b["w"], atol=1e-15) and np.allclose(a["prob"], b["prob"], rtol=1e-13)
    for k in ("grad_signed", "grad_norm", "loo"):
        assert np.allclose(a[k], b[k], rtol=1e-9, atol=1e-14), k
    for k in ("tau_g", "tau_loo"):
        assert np.allclose(a[k], -b[k], equal_nan=True), k  # (13.I10)
    for k in ("tau_g_norm", "tau_loo_abs", "p_g", "p_loo"):
        assert np.allclose(a[k], b[k], equal_nan=True), k
    assert np.allclose(a["permutation"], b["permutation"], rtol=1e-9, atol=1e-14)
    tokens = rng.integers(0, V, (40, 5))
    labels = rng.integers(0, 2, 40)
    flip = orientation(m, P, tokens, labels)
    assert np.array_equal(orientation(m, twin, tokens, labels), ~flip)
    oriented = orient(m, P, flip)
    assert not np.any(orientation(m, oriented, tokens, labels))
    assert not np.any(orientation(tiny_model("softmax"), random_params(tiny_model("softmax"), rng), tokens, labels))


def test_interpret_measures_ties_repeated_tokens(rng):
    m = tiny_model("tanhmax")
    P = random_params(m, rng)
    tokens = np.array([[[3, 5, 3, 8, 3, 5]]] * 2)
    batch = {"tokens": tokens, "mask": np.ones(tokens.shape, bool)}
    out = interpret_measures(m, P, batch, 10, 0)
    # three distinct tokens: tau-b sees 6 positions in 3 tie groups of sizes 3, 2, 1
    w = out["w"][0, 0]
    wt = w[[0, 1, 0, 3, 0, 1]]  # values of first occurrences
    lo = out["loo"][0, 0][[0, 1, 0, 3, 0, 1]]
    assert out["tau_loo"][0, 0] == pytest.approx(kendall_tau_b(wt, lo)[0], abs=1e-15)


def test_summarise_by_hand():
    meas = {k: np.full((1, 4), np.nan) for k in ("tau_g", "p_g", "tau_g_norm", "p_g_norm", "tau_loo", "p_loo",
                                                  "tau_loo_abs", "p_loo_abs")}
    meas["tau_g"][0] = [0.5, -0.1, np.nan, 0.3]
    meas["p_g"][0] = [0.001, 0.5, np.nan, 0.02]
    meas["permutation"] = np.array([[0.1, 0.3, 0.2, 0.6]])
    meas["randomisation"] = np.array([[0.0, 1.0, 0.5, 0.5]])
    out = summarise(meas, np.array([[0, 1, 1, 1]]))
    one = out["1"]
    assert one["n"] == 3 and one["tau_g"]["n_defined"] == 2
    assert one["tau_g"]["mean"] == pytest.approx(0.1) and one["tau_g"]["std"] == pytest.approx(0.2)
    assert one["tau_g"]["sig_frac"] == 0.0 and out["0"]["tau_g"]["sig_frac"] == 1.0
    assert one["permutation"]["mean"] == pytest.approx(11 / 30)
    assert one["tau_loo"]["mean"] is None
    json.dumps(out, allow_nan=False)


def test_measures_bad_input(rng):
    m = tiny_model()
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    with pytest.raises(TypeError, match="model"):
        leave_one_out("tanhmax", P, batch)
    with pytest.raises(ValueError, match="dropout"):
        gradient_importance(m, P, {**batch, "dropout": np.ones((S, B, H), bool)})
    with pytest.raises(ValueError, match="n_draws"):
        permutation_change(m, P, batch, 0)
    with pytest.raises(TypeError, match="rng"):
        randomisation_change(m, P, batch, 5, rng="x")
    with pytest.raises(ValueError, match="low"):
        randomisation_change(m, P, batch, 5, 0, low=0.5)
    with pytest.raises(ValueError, match="flip"):
        orient(m, P, np.array([True]))
    with pytest.raises(ValueError, match="weights"):
        logit_from_weights(m, P, np.zeros((S, B, L + 1)), tokens=batch["tokens"])
    with pytest.raises(ValueError, match="data"):
        run_interpret(data="imdb")
    with pytest.raises(TypeError, match="activations"):
        run_interpret("softmax")  # one name where a list of names goes


# --------------------------------------------------------------------------
# the experiment
# --------------------------------------------------------------------------

TINY = PolarityConfig(n_pos=5, n_neg=5, n_neutral=30, polar_per_sentence=2, neutral_per_sentence=4,
                      n_per_class=60)


def test_run_interpret_tiny_synthetic():
    r = run_interpret(("softmax", "tanhmax"), "synthetic", seeds=2, epochs=2, n_instances=20, config=TINY,
                      draws=10)
    json.dumps(r, allow_nan=False)
    assert r["settings"]["n_instances"] == 20
    for act in ("softmax", "tanhmax"):
        classes = r["activations"][act]["classes"]
        assert classes["0"]["n"] + classes["1"]["n"] == 2 * 20  # two seeds, pooled
        assert len(r["activations"][act]["per_seed"]) == 2
    assert r["paper"]["0"]["tanhmax"]["tau_loo"] == [0.86, 0.19]
    text = report(r)
    assert "paper" in text and "class 1" in text and "+0.86 ± 0.19" in text


def test_paper_table1_values():
    assert PAPER_TABLE1["1"]["softmax"]["randomisation"] == (0.31, 0.31)
    assert PAPER_TABLE1["0"]["tanhmax"]["tau_g_sig"] == 0.79


def test_resolve_sst2_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("REFATTN_SST2", raising=False)
    monkeypatch.setattr(helpers, "sibling_data_dir", lambda: tmp_path / "no-such-folder")
    with pytest.raises(FileNotFoundError, match="REFATTN_SST2"):
        resolve_sst2()
    with pytest.raises(FileNotFoundError, match="not a folder"):
        resolve_sst2(tmp_path / "missing")


@pytest.mark.slow
def test_run_interpret_on_sst2_when_present():
    try:
        folder = resolve_sst2()
    except FileNotFoundError as err:
        pytest.skip(f"SST-2 is absent: {err}")
    r = run_interpret(("tanhmax",), "sst2", sst2=str(folder), seeds=1, epochs=1, n_instances=12, draws=5)
    json.dumps(r, allow_nan=False)
    assert r["settings"]["data"]["test"] == 872 and r["settings"]["n_instances"] == 12


def test_interpret_cli(tmp_path, capsys):
    from refattn.cli import main

    assert main(["interpret", "--seeds", "1", "--epochs", "1", "--n-instances", "16", "--draws", "4", "--json",
                 "--out", str(tmp_path)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["activations"]) == {"softmax", "tanhmax"} and r["settings"]["n_instances"] == 16
    for a in r["activations"].values():
        for c in a["classes"].values():
            assert -1.0 <= c["tau_g"]["mean"] <= 1.0 and 0.0 <= c["tau_g"]["sig_frac"] <= 1.0
    assert (tmp_path / "interpret_synthetic.png").is_file()
    assert main(["interpret", "--seeds", "1", "--epochs", "1", "--n-instances", "8", "--draws", "2"]) == 0
    assert "paper" in capsys.readouterr().out
