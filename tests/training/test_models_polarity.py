"""refattn.training.models.polarity: TanhMax's polarity classifier batched over seeds.

The forward pass against an independent loop over tokens written from the
paper's g/h form (TanhMax Eq. 5); the hand-derived gradient against
autograd (1e-10, float64, every activation x every score, with padding and
dropout) and central differences; seed independence; the sign symmetry;
closed forms (zero gradient where the math says so); numerical edge cases
(hypothesis); bad input."""

import numpy as np
import pytest
from autograd import grad
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn.core.activations import ACTIVATIONS, activation
from refattn.core.gradcheck import gradcheck
from refattn.training.models import SCORE_KINDS, PolarityClassifier, dropout_mask

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL

S, B, L, V, E, H = 2, 3, 5, 9, 4, 3
#: odd activations, phi(-s) = -phi(s): g odd, h even
ODD = ("tanhmax", "signexp", "linear")


def random_params(model, rng, scale=0.7):
    """Standard-normal parameters (not the tiny initial ones), so that scores,
    weights and logits are all O(1) and every term of the gradient matters."""
    return {k: scale * rng.standard_normal((S,) + shape) for k, shape in model.param_shapes().items()}


def ragged_batch(rng, *, dropout=True, seeds=S):
    """Sentences of lengths 5, 3, 1 (seed 0) and 4, 5, 2 (seed 1): padded with id 0."""
    lengths = np.array([[5, 3, 1], [4, 5, 2], [2, 2, 2]])[:seeds]
    mask = np.arange(L) < lengths[..., None]  # (S, B, L)
    tokens = np.where(mask, rng.integers(0, V, (seeds, B, L)), 0)
    batch = {"tokens": tokens, "labels": rng.integers(0, 2, (seeds, B)), "mask": mask}
    if dropout:
        batch["dropout"] = dropout_mask([np.random.default_rng(10 + i) for i in range(seeds)], B, H, 0.5)
    return batch


def model(act="tanhmax", score="self", **kw):
    return PolarityClassifier(V, act, score, embed_dim=E, hidden_dim=H, **kw)


# --- the forward pass, independently ---------------------------------------------


def reference_logits(m, P, batch):
    """TanhMax section 5.1 written out token by token, with the paper's
    w_i = g(s_i) / sum_k h(s_k) over the real tokens (TanhMax, Eq. 5)."""
    act = activation(m.activation)
    out = np.zeros(batch["tokens"].shape[:2])
    for s in range(out.shape[0]):
        for b in range(out.shape[1]):
            idx = [i for i in range(L) if batch["mask"][s, b, i]]
            xs = [P["emb"][s, batch["tokens"][s, b, i]] for i in idx]
            if m.score == "self":
                sc = [np.dot(P["W_q"][s] @ x + P["b_q"][s], P["W_k"][s] @ x + P["b_k"][s]) / m.scale for x in xs]
            elif m.score == "global":
                sc = [np.dot(P["W_k"][s] @ x + P["b_k"][s], P["v"][s]) / m.lam for x in xs]
            else:
                sc = [np.dot(P["u"][s], np.tanh(P["W_a"][s] @ x + P["b_a"][s])) for x in xs]
            sc = np.array(sc)
            C = np.sum(act.h(sc))
            w = act.g(sc) / C if C > 0 else np.zeros_like(sc)
            h = sum(wi * (P["W_v"][s] @ x + P["b_v"][s]) for wi, x in zip(w, xs))
            if "dropout" in batch:
                h = h * batch["dropout"][s, b] / (1 - m.dropout)
            out[s, b] = np.dot(P["w_o"][s], h) + P["b_o"][s]
    return out


@pytest.mark.parametrize("score", SCORE_KINDS)
@pytest.mark.parametrize("act", ["softmax", "tanhmax", "expressive", "relu"])
def test_forward_and_loss_match_a_loop_over_tokens(rng, act, score):
    m = model(act, score)
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    a_ref = reference_logits(m, P, batch)
    y = batch["labels"]
    p_ref = 1 / (1 + np.exp(-a_ref))
    loss_ref = np.mean(-y * np.log(p_ref) - (1 - y) * np.log(1 - p_ref), axis=1)
    loss, _, aux = m.loss_and_grad(P, batch)
    np.testing.assert_allclose(aux["logit"], a_ref, rtol=1e-12)
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-12)
    np.testing.assert_allclose(m.loss(P, batch), loss_ref, rtol=1e-12)
    no_drop = {k: v for k, v in batch.items() if k != "dropout"}
    f = m.outputs(P, batch)  # evaluation ignores the dropout mask
    np.testing.assert_allclose(f["logit"], reference_logits(m, P, no_drop), rtol=1e-12)
    np.testing.assert_allclose(f["prob"], 1 / (1 + np.exp(-f["logit"])), rtol=1e-14)
    assert np.all(f["w"][~batch["mask"]] == 0)  # padding gets no weight


@pytest.mark.parametrize("score", SCORE_KINDS)
def test_token_scores_and_polarity(rng, score):
    """s depends on the token alone, and without dropout the logit is
    a = sum_i w_i o_{t_i} + b_o (derivations/03-proposition-1.md, step P4)."""
    m = model("tanhmax", score)
    P = random_params(m, rng)
    batch = ragged_batch(rng, dropout=False)
    f = m.outputs(P, batch)
    seeds = np.arange(S)[:, None, None]
    ts, o = m.token_scores(P), m.token_polarity(P)
    assert ts.shape == o.shape == (S, V)
    np.testing.assert_allclose(f["s"], ts[seeds, batch["tokens"]], rtol=1e-13, atol=1e-15)
    o_ref = np.einsum("sh,she,sve->sv", P["w_o"], P["W_v"], P["emb"]) + (P["w_o"] * P["b_v"]).sum(-1)[:, None]
    np.testing.assert_allclose(o, o_ref, rtol=1e-12, atol=1e-14)  # o_e = w_o . (W_v E[e] + b_v)
    a = np.sum(f["w"] * o[seeds, batch["tokens"]], axis=-1) + P["b_o"][:, None]
    np.testing.assert_allclose(f["logit"], a, rtol=1e-12, atol=1e-14)


# --- the gradient: autograd, central differences, closed forms -------------------


def check_gradient(m, P, batch, checks, rtol, max_fd_coords=None, atol=1e-14):
    """gradcheck with a random cotangent u (S,): the seeds are independent, so
    d(sum_s u_s loss_s)/d params = u_s (d loss.sum() / d params)[s]."""
    def fun(**params):
        return m.loss(params, batch)

    def vjp(cotangent, **params):  # (not "u": the additive score has a parameter u)
        _, g, _ = m.loss_and_grad(params, batch)
        return {k: cotangent.reshape((S,) + (1,) * (v.ndim - 1)) * v for k, v in g.items()}

    return gradcheck(fun, P, vjp, name=f"{m.activation}/{m.score}", checks=checks, rtol=rtol,
                     atol=atol, max_fd_coords=max_fd_coords, seed=3)


@pytest.mark.parametrize("score", SCORE_KINDS)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_loss_and_grad_matches_autograd(rng, act, score):
    """Every parameter, with ragged padding and dropout, to 1e-10 relative
    (atol 1e-14 for gradients that vanish identically, e.g. softmax's b_k
    with the global score)."""
    m = model(act, score)
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    check_gradient(m, P, batch, ("autograd",), RTOL_AUTOGRAD).assert_ok()
    loss, g, aux = m.loss_and_grad(P, batch)
    np.testing.assert_array_equal(loss, m.loss(P, batch))  # the same forward code
    assert set(g) == set(P) and all(g[k].shape == P[k].shape for k in P)
    assert aux["s"].shape == aux["w"].shape == (S, B, L) and aux["logit"].shape == (S, B)


@pytest.mark.parametrize("act, score", [("tanhmax", "self"), ("softmax", "global"),
                                        ("expressive", "additive"), ("signexp", "self"),
                                        ("sigsoftmax", "additive"), ("linear", "global")])
def test_loss_and_grad_matches_central_differences(rng, act, score):
    """Spot check: 25 random coordinates of every parameter, eps = 1e-6."""
    m = model(act, score)
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    check_gradient(m, P, batch, ("central",), RTOL_CENTRAL, max_fd_coords=25, atol=1e-10).assert_ok()


def test_gradient_vanishes_where_the_math_says(rng):
    """(1) Softmax is shift invariant and b_k . v / lam shifts every global
    score alike: d loss / d b_k = 0. (2) Rows of the embedding of tokens that
    do not occur, or occur only as padding, get exactly 0."""
    m = model("softmax", "global")
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    _, g, _ = m.loss_and_grad(P, batch)
    assert np.max(np.abs(g["b_k"])) <= 1e-15 * np.max(np.abs(g["W_k"]))
    assert np.max(np.abs(g["W_k"])) > 1e-3  # while the weights do learn
    m = model("tanhmax", "self")
    P = random_params(m, rng)
    batch["tokens"] = np.where(batch["mask"], batch["tokens"] % 5 + 1, 8)  # ids 1..5 real, 8 padding
    _, g, _ = m.loss_and_grad(P, batch)
    assert np.all(g["emb"][:, [0, 6, 7, 8]] == 0)
    for s in range(S):
        used = np.unique(batch["tokens"][s][batch["mask"][s]])
        assert np.all(np.any(g["emb"][s, used] != 0, axis=-1))


def test_padding_is_invisible(rng):
    """Changing the ids under the padding changes neither the loss nor any
    gradient (the padded positions get weight 0 and gradient 0)."""
    m = model("signexp", "additive")
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    other = dict(batch, tokens=np.where(batch["mask"], batch["tokens"], 7))
    l1, g1, _ = m.loss_and_grad(P, batch)
    l2, g2, _ = m.loss_and_grad(P, other)
    np.testing.assert_array_equal(l1, l2)
    for k in P:
        np.testing.assert_allclose(g1[k], g2[k], rtol=1e-14, atol=1e-300)


# --- seeds -------------------------------------------------------------------------


@pytest.mark.parametrize("score", SCORE_KINDS)
def test_seed_independence(rng, score):
    """Seed 3's initial parameters, dropout masks and gradients are the same
    trained alone as beside seeds 5 and 8."""
    m = model("tanhmax", score)
    alone, together = m.init_params([3]), m.init_params([5, 3, 8])
    for k in alone:
        np.testing.assert_array_equal(alone[k][0], together[k][1])
        assert not np.array_equal(together[k][0], together[k][1])  # seeds do differ
    np.testing.assert_array_equal(
        dropout_mask([np.random.default_rng(3)], B, H, 0.5)[0],
        dropout_mask([np.random.default_rng(s) for s in (5, 3, 8)], B, H, 0.5)[1])
    P3 = {k: rng.standard_normal(v.shape) for k, v in together.items()}
    batch3 = ragged_batch(rng, seeds=3)
    l3, g3, a3 = m.loss_and_grad(P3, batch3)
    P1 = {k: v[1:2] for k, v in P3.items()}
    batch1 = {k: v[1:2] for k, v in batch3.items()}
    l1, g1, a1 = m.loss_and_grad(P1, batch1)
    np.testing.assert_allclose(l1, l3[1:2], rtol=1e-14)
    for k in P1:
        np.testing.assert_allclose(g1[k], g3[k][1:2], rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(a1["w"], a3["w"][1:2], rtol=1e-14, atol=1e-300)


def test_init_distributions():
    """emb ~ U(-0.1, 0.1) (TanhMax section 5.1); linear layers within
    +-1/sqrt(fan_in); dtype as asked."""
    m = PolarityClassifier(500, "tanhmax", "self")
    P = m.init_params([0, 1], dtype=np.float32)
    assert all(v.dtype == np.float32 for v in P.values())
    assert P["emb"].shape == (2, 500, 30) and P["W_q"].shape == (2, 10, 30) and P["b_o"].shape == (2,)
    assert np.abs(P["emb"]).max() <= 0.1 and np.abs(P["emb"]).max() > 0.099
    assert abs(float(P["emb"].std()) - 0.2 / np.sqrt(12)) < 2e-3  # U(-a, a) has std a / sqrt(3)
    assert np.abs(P["W_v"]).max() <= 1 / np.sqrt(30) and np.abs(P["w_o"]).max() <= 1 / np.sqrt(10)


# --- the sign symmetry -----------------------------------------------------------


@pytest.mark.parametrize("score", SCORE_KINDS)
@pytest.mark.parametrize("act", ODD)
def test_symmetric_twin_flips_weights_and_keeps_predictions(rng, act, score):
    m = model(act, score)
    P = random_params(m, rng)
    Q = m.symmetric(P)
    batch = ragged_batch(rng, dropout=False)
    np.testing.assert_array_equal(m.token_scores(Q), -m.token_scores(P))  # exact: negation is exact
    f, fq = m.outputs(P, batch), m.outputs(Q, batch)
    np.testing.assert_array_equal(fq["s"], -f["s"])
    np.testing.assert_allclose(fq["w"], -f["w"], rtol=1e-15, atol=1e-300)  # weights flip
    np.testing.assert_allclose(fq["logit"], f["logit"], rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(m.predict(Q, batch), m.predict(P, batch))
    np.testing.assert_allclose(m.token_polarity(Q), -m.token_polarity(P), rtol=1e-15)
    assert not np.array_equal(Q["w_o"], P["w_o"])  # and P itself is unchanged by symmetric()
    np.testing.assert_allclose(m.loss(Q, batch), m.loss(P, batch), rtol=1e-12)


@pytest.mark.parametrize("score", SCORE_KINDS)
def test_symmetry_fails_for_softmax_and_is_trivial_for_expressive(rng, score):
    """Softmax is neither odd nor even: the twin's weights stay positive and its
    logits differ. Expressive is even: flipping the scores alone changes nothing."""
    m = model("softmax", score)
    P = random_params(m, rng, scale=1.5)
    batch = ragged_batch(rng, dropout=False)
    f, fq = m.outputs(P, batch), m.outputs(m.symmetric(P), batch)
    assert np.all(fq["w"] >= 0) and not np.allclose(fq["logit"], f["logit"], rtol=1e-3)
    m = model("expressive", score)
    P = random_params(m, rng)
    Q = m.symmetric(P)
    Q["w_o"] = P["w_o"].copy()  # flip the scores only
    np.testing.assert_allclose(m.outputs(Q, batch)["logit"], m.outputs(P, batch)["logit"], rtol=1e-13)


# --- edge cases --------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(act=st.sampled_from(ACTIVATIONS), score=st.sampled_from(SCORE_KINDS),
       score_scale=st.floats(1e-4, 30.0), out_scale=st.floats(1e-3, 1e4), seed=st.integers(0, 2 ** 16))
def test_large_and_tiny_parameters_stay_finite(act, score, score_scale, out_scale, seed):
    """Scores from ~0 to ~1e4 and logits up to ~1e5: no warning (pytest turns
    them into errors), finite loss >= 0 and gradients, probabilities in [0, 1],
    and loss_and_grad's loss is loss()'s."""
    rng = np.random.default_rng(seed)
    m = model(act, score)
    P = random_params(m, rng)
    for k in ("W_q", "b_q", "W_k", "b_k", "v", "W_a", "b_a", "u"):
        if k in P:
            P[k] = P[k] * score_scale
    P["w_o"] = P["w_o"] * out_scale
    batch = ragged_batch(rng)
    loss, g, _ = m.loss_and_grad(P, batch)
    assert np.all(np.isfinite(loss)) and np.all(loss >= 0)
    assert all(np.all(np.isfinite(v)) for v in g.values())
    prob = m.outputs(P, batch)["prob"]
    assert np.all((prob >= 0) & (prob <= 1))
    np.testing.assert_array_equal(loss, m.loss(P, batch))


def test_the_issue_sizes_run(rng):
    """S = 10, B = 100, L = 12, V = 2000 (TanhMax's small synthetic set):
    shapes, and a non-zero gradient in exactly the embedding rows of tokens
    that occur in a sentence whose dropout keeps at least one of its H = 10
    units (when all are dropped, about 1 sentence in 1024, the sentence's
    logit is b_o and its tokens get no gradient)."""
    m = PolarityClassifier(2000, "tanhmax", "self")
    P = m.init_params(list(range(10)))
    tokens = rng.integers(0, 2000, (10, 100, 12))
    batch = {"tokens": tokens, "labels": rng.integers(0, 2, (10, 100)),
             "dropout": dropout_mask([np.random.default_rng(i) for i in range(10)], 100, 10, 0.5)}
    loss, g, aux = m.loss_and_grad(P, batch)
    assert loss.shape == (10,) and g["emb"].shape == (10, 2000, 30) and aux["w"].shape == (10, 100, 12)
    occurs = np.zeros((10, 2000), bool)
    live = np.any(batch["dropout"], axis=-1)  # (S, B)
    for s in range(10):
        occurs[s, tokens[s][live[s]].ravel()] = True
    assert not np.all(live)  # this draw does drop every unit of some sentence
    np.testing.assert_array_equal(np.any(g["emb"] != 0, axis=-1), occurs)
    np.testing.assert_allclose(loss, np.log(2), atol=0.05)  # tiny initial logits: BCE near log 2


def test_autograd_traces_loss(rng):
    """The protocol's reference: autograd differentiates loss() itself."""
    m = model("cosformer", "global")
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    ga = grad(lambda p: m.loss(p, batch).sum())(P)
    _, g, _ = m.loss_and_grad(P, batch)
    scale = max(np.abs(v).max() for v in ga.values())
    assert max(np.abs(g[k] - ga[k]).max() for k in P) <= RTOL_AUTOGRAD * scale


# --- bad input ---------------------------------------------------------------------


def test_bad_construction():
    with pytest.raises(ValueError, match="score: expected one of \\('self', 'global', 'additive'\\), got 'dot'"):
        PolarityClassifier(10, "tanhmax", "dot")
    with pytest.raises(ValueError, match="activation: expected one of"):
        PolarityClassifier(10, "tanh", "self")
    with pytest.raises(ValueError, match="vocab_size: expected an int >= 1"):
        PolarityClassifier(0)
    with pytest.raises(TypeError, match="vocab_size: expected an int"):
        PolarityClassifier(10.0)
    with pytest.raises(TypeError, match="embed_dim: expected an int"):
        PolarityClassifier(10, embed_dim=True)
    with pytest.raises(ValueError, match="scale: expected a positive finite real number"):
        PolarityClassifier(10, scale=-3)
    with pytest.raises(ValueError, match="lam: expected a positive finite real number"):
        PolarityClassifier(10, lam=np.inf)
    with pytest.raises(ValueError, match="dropout: expected a number in \\[0, 1\\)"):
        PolarityClassifier(10, dropout=1.0)
    m = model()
    with pytest.raises(ValueError, match="seeds: expected at least one seed"):
        m.init_params([])
    with pytest.raises(TypeError, match="seeds: expected a sequence of ints"):
        m.init_params(3)
    with pytest.raises(ValueError, match="seeds\\[1\\]: expected an int >= 0"):
        m.init_params([1, -2])
    with pytest.raises(TypeError, match="dtype: expected a real floating dtype"):
        m.init_params([1], dtype=np.int64)
    with pytest.raises(ValueError, match="rate: expected a number in \\[0, 1\\)"):
        dropout_mask([np.random.default_rng(0)], 2, 3, 1.5)
    with pytest.raises(TypeError, match="rngs: expected a non-empty sequence"):
        dropout_mask(np.random.default_rng(0), 2, 3, 0.5)


def test_bad_params(rng):
    m = model("tanhmax", "global")
    P = random_params(m, rng)
    batch = ragged_batch(rng)
    with pytest.raises(ValueError, match=r"params: expected the keys .* missing \['v'\], unexpected \[\]"):
        m.loss({k: v for k, v in P.items() if k != "v"}, batch)
    with pytest.raises(ValueError, match=r"unexpected \['W_q'\]"):
        m.loss_and_grad({**P, "W_q": P["W_k"]}, batch)
    with pytest.raises(ValueError, match=r"params\['W_v'\]: expected shape \(S,\) \+ \(3, 4\) = \(2, 3, 4\), got \(2, 4, 3\)"):
        m.loss({**P, "W_v": np.swapaxes(P["W_v"], 1, 2)}, batch)
    with pytest.raises(ValueError, match=r"params\['b_o'\]: expected shape .* \(2,\), got \(3,\)"):
        m.outputs({**P, "b_o": np.zeros(3)}, batch)  # the seed axis must agree
    with pytest.raises(TypeError, match=r"params\['emb'\]: expected a real floating dtype"):
        m.token_scores({**P, "emb": P["emb"].astype(int)})
    with pytest.raises(TypeError, match="params: expected a dict of arrays"):
        m.token_polarity([P["emb"]])


def test_bad_batch(rng):
    m = model()
    P = random_params(m, rng)
    batch = ragged_batch(rng)

    def with_id(i):  # one id out of range, under the padding: still an error
        tokens = batch["tokens"].copy()
        tokens[1, 2, 4] = i
        return tokens

    assert not batch["mask"][1, 2, 4]
    bad = [
        (TypeError, "batch: expected a dict", [batch["tokens"]]),
        (ValueError, r"batch: unexpected keys \['masks'\]", {**batch, "masks": batch["mask"]}),
        (ValueError, r"batch: missing 'tokens'", {k: v for k, v in batch.items() if k != "tokens"}),
        (ValueError, r"batch: missing 'labels'", {k: v for k, v in batch.items() if k != "labels"}),
        (TypeError, r"batch\['tokens'\]: expected an integer numpy array", {**batch, "tokens": batch["tokens"] * 1.0}),
        (ValueError, r"batch\['tokens'\]: expected shape \(S, B, L\) with S = 2", {**batch, "tokens": batch["tokens"][0]}),
        (ValueError, r"batch\['tokens'\]: expected shape \(S, B, L\) with S = 2 .* got \(1, 3, 5\)",
         {**batch, "tokens": batch["tokens"][:1]}),
        (ValueError, r"batch\['tokens'\]: ids must lie in \[0, 9\), got \[\d, 9\]", {**batch, "tokens": with_id(9)}),
        (ValueError, r"batch\['tokens'\]: ids must lie in \[0, 9\), got \[-1, \d\]", {**batch, "tokens": with_id(-1)}),
        (ValueError, r"batch\['labels'\]: expected shape \(2, 3\), got \(3,\)", {**batch, "labels": batch["labels"][0]}),
        (ValueError, r"batch\['labels'\]: binary cross-entropy needs labels in \[0, 1\]", {**batch, "labels": 2 * batch["labels"] + 1}),
        (TypeError, r"batch\['labels'\]: expected a numeric numpy array", {**batch, "labels": [[0, 1, 0], [1, 0, 1]]}),
        (TypeError, r"batch\['mask'\]: expected a bool numpy array", {**batch, "mask": batch["mask"].astype(int)}),
        (ValueError, r"batch\['mask'\]: expected shape \(2, 3, 5\), got \(2, 3, 4\)", {**batch, "mask": batch["mask"][..., :4]}),
        (ValueError, r"batch\['dropout'\]: expected shape \(2, 3, 3\), got \(2, 3, 2\)", {**batch, "dropout": batch["dropout"][..., :2]}),
    ]
    for err, msg, b in bad:
        with pytest.raises(err, match=msg):
            m.loss_and_grad(P, b)
    for err, msg, b in bad[:1] + bad[2:3] + bad[4:9]:  # the same checks guard loss() and forward()
        with pytest.raises(err, match=msg):
            m.loss(P, b)
        with pytest.raises(err, match=msg):
            m.outputs(P, b)
    m.outputs(P, {k: v for k, v in batch.items() if k != "labels"})  # no labels needed to evaluate
