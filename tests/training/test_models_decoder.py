"""Tests for refattn.training.models.decoder: the multi-layer decoder LM, batched over seeds.

What is checked, and against what (derivations/18-decoder-and-cog.md):
* loss_and_grad against autograd of loss (float64, random parameters, random
  cotangents over the seeds, 1e-10 relative) for every registered activation,
  for the Cog hybrid, for Neural Attention in layer 0 (NeuralAttn's hybrid) and
  in a higher layer, for mixed per-layer lists and for sequences shorter than
  n_ctx; against central differences for two configurations;
* the forward pass against an independent per-seed, per-example, per-head loop
  written from Eqs. 18.D1-18.D11 with the activation's g/h form (TanhMax Eq. 5);
* causality, seed independence, the recipes cog_hybrid / neural_first;
* training with the hand-derived gradient follows the autograd trajectory;
* evaluation, generation, and bad input.
"""

import math

import numpy as np
import pytest
from autograd import grad

from refattn.core.activations import ACTIVATIONS
from refattn.training.models.decoder import DecoderLM, cog_hybrid, neural_first
from refattn.training.optim import Adam
from refattn.training.train import train

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL


def random_params(model, seeds, rng, scale=0.3):
    """Initial parameters plus a perturbation, so that biases are nonzero too."""
    params = model.init_params(seeds)
    return {k: v + scale * rng.standard_normal(v.shape) for k, v in params.items()}


def random_batch(model, S, B, n, rng):
    return {"x": rng.integers(0, model.V, (S, B, n)), "y": rng.integers(0, model.V, (S, B, n))}


def compare_with_autograd(model, params, batch, rng, rtol=RTOL_AUTOGRAD):
    """Max relative error of u . grads (hand-derived) against autograd of u . loss.

    Norm-wise per parameter: max |a - r| / max |r|. A parameter whose exact
    gradient vanishes (softmax ignores a key bias, and the neural score's shared
    output bias: both add the same number to a whole row of scores) has
    gradients of rounding size, 1e-12 of the model's largest or less; there both
    must be that small (an absolute check), as a relative error of two rounding
    errors means nothing.
    """
    S = next(iter(params.values())).shape[0]
    u = rng.standard_normal(S)  # a random cotangent over the seeds
    loss, grads, _ = model.loss_and_grad(params, batch)
    np.testing.assert_allclose(loss, model.loss(params, batch), rtol=1e-13)
    auto = grad(lambda p: (model.loss(p, batch) * u).sum())(params)
    top = max(np.abs(a).max() for a in auto.values())
    worst = 0.0
    for k, a in auto.items():
        ours = grads[k] * u.reshape((S,) + (1,) * (grads[k].ndim - 1))
        assert ours.shape == a.shape == params[k].shape, k
        if np.abs(a).max() <= 1e-12 * top:
            assert np.abs(ours).max() <= 1e-12 * top, f"{model!r}: d/d{k} should vanish, got {np.abs(ours).max()}"
            continue
        err = np.abs(ours - a).max() / np.abs(a).max()
        assert err <= rtol, f"{model!r}: d/d{k} differs from autograd by {err:.3g} (relative)"
        worst = max(worst, err)
    return worst


# --------------------------------------------------------------------------
# the hand-derived gradient against autograd and differences
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_loss_and_grad_vs_autograd_every_activation(name, rng):
    model = DecoderLM(7, 6, width=8, n_layers=2, n_heads=2, activations=name)
    params = random_params(model, [3, 4], rng)
    compare_with_autograd(model, params, random_batch(model, 2, 3, 5, rng), rng)


@pytest.mark.parametrize("options", [
    dict(n_layers=3, activations="cog-hybrid"),
    dict(n_layers=3, activations="cog-hybrid", beta=1.0),
    dict(n_layers=2, activations="softmax", scores="neural-first"),
    dict(n_layers=3, activations="cog-hybrid", scores="neural-first", neural_sigma="relu"),
    dict(n_layers=2, activations=["expressive", "tanhmax"], scores=["dot", "neural"]),
    dict(n_layers=1, n_heads=1, activations="signexp", scores="neural"),
], ids=["cog", "cog-beta1", "neural-first", "cog+neural-relu", "mixed", "one-layer-neural"])
def test_loss_and_grad_vs_autograd_hybrids(options, rng):
    opts = {"width": 8, "n_heads": 2} | options
    model = DecoderLM(7, 6, **opts)
    params = random_params(model, [0, 1], rng)
    compare_with_autograd(model, params, random_batch(model, 2, 3, 5, rng), rng)


def test_shorter_sequences_leave_later_positions_untouched(rng):
    model = DecoderLM(6, 9, width=8, n_layers=2, n_heads=2, activations="tanhmax")
    params = random_params(model, [0, 1], rng)
    batch = random_batch(model, 2, 3, 4, rng)  # n = 4 < n_ctx = 9
    compare_with_autograd(model, params, batch, rng)
    _, grads, _ = model.loss_and_grad(params, batch)
    assert np.all(grads["P"][:, 4:] == 0) and np.abs(grads["P"][:, :4]).max() > 0


@pytest.mark.parametrize("options", [dict(activations="signexp"),
                                     dict(activations="cog-hybrid", scores="neural-first", n_layers=3)])
def test_loss_and_grad_central_differences(options, rng):
    from refattn.core.gradcheck import gradcheck

    opts = {"n_layers": 2} | options
    model = DecoderLM(5, 5, width=4, n_heads=2, **opts)
    params = random_params(model, [0, 1], rng)
    batch = random_batch(model, 2, 2, 4, rng)

    def fun(**p):
        return model.loss(p, batch)

    def vjp(u, **p):
        _, grads, _ = model.loss_and_grad(p, batch)
        return {k: g * u.reshape((2,) + (1,) * (g.ndim - 1)) for k, g in grads.items()}

    gradcheck(fun, params, vjp, name=repr(model), rtol=RTOL_CENTRAL, checks=("central",), max_fd_coords=6,
              seed=3).assert_ok()


def test_a_wrong_gradient_is_caught(rng):
    """The comparison can fail: one entry off by 1e-6 relative is reported."""
    model = DecoderLM(5, 4, width=4, n_layers=2, n_heads=1, activations="tanhmax")
    params = random_params(model, [0], rng)
    batch = random_batch(model, 1, 2, 4, rng)
    _, grads, _ = model.loss_and_grad(params, batch)
    auto = grad(lambda p: model.loss(p, batch).sum())(params)
    for k in ("h0.W_K", "E", "h1.b_1"):
        g = grads[k].copy()
        i = np.unravel_index(np.argmax(np.abs(g)), g.shape)
        g[i] *= 1.0 + 1e-6
        assert np.abs(g - auto[k]).max() / np.abs(auto[k]).max() > RTOL_AUTOGRAD, k


def test_softmax_ignores_key_bias_but_tanhmax_does_not(rng):
    """s_ij = beta q_i . (k_j + b_K) adds beta q_i . b_K to a whole row: softmax is blind to it."""
    batch = None
    for name, zero in (("softmax", True), ("tanhmax", False)):
        model = DecoderLM(5, 4, width=4, n_layers=2, n_heads=2, activations=name)
        params = random_params(model, [0, 1], rng)
        batch = batch or random_batch(model, 2, 3, 4, rng)
        _, grads, _ = model.loss_and_grad(params, batch)
        top = max(np.abs(g).max() for g in grads.values())
        assert (np.abs(grads["h0.b_K"]).max() < 1e-14 * top) == zero, name


# --------------------------------------------------------------------------
# the forward pass against an independent loop (Eqs. 18.D1-18.D11)
# --------------------------------------------------------------------------


def _ln_ref(v, eps):
    mu = v.mean()
    return (v - mu) / math.sqrt(((v - mu) ** 2).mean() + eps)


def _reference_loss(model, params, x, y):
    """Loop over seeds, examples, heads and positions; weights phi = g(s) / sum h(s) over j <= i."""
    act = model.activations
    S, B, n = x.shape
    H, dh, eps = model.n_heads, model.d_head, model.ln_eps
    beta = 1.0 / math.sqrt(dh) if model.beta is None else model.beta
    losses = np.zeros(S)
    for s in range(S):
        P = {k: v[s] for k, v in params.items()}
        for b in range(B):
            h = [P["E"][x[s, b, i]] + P["P"][i] for i in range(n)]
            for l in range(model.n_layers):
                w = {k: P[f"h{l}.{k}"] for k in ("W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V", "W_O", "b_O",
                                                 "W_1", "b_1", "W_2", "b_2")}
                z = [_ln_ref(v, eps) for v in h]
                q = [w["W_Q"] @ v + w["b_Q"] for v in z]
                k = [w["W_K"] @ v + w["b_K"] for v in z]
                val = [w["W_V"] @ v + w["b_V"] for v in z]
                out = []
                for i in range(n):
                    heads = []
                    for a in range(H):
                        sl = slice(a * dh, (a + 1) * dh)
                        sc = np.array([beta * q[i][sl] @ k[j][sl] for j in range(i + 1)])
                        phi = act[l].g(sc) / act[l].h(sc).sum()  # TanhMax Eq. 5
                        heads.append(sum(phi[j] * val[j][sl] for j in range(i + 1)))
                    out.append(w["W_O"] @ np.concatenate(heads) + w["b_O"])
                h = [h[i] + out[i] for i in range(n)]
                f = [w["W_2"] @ np.maximum(w["W_1"] @ _ln_ref(v, eps) + w["b_1"], 0) + w["b_2"] for v in h]
                h = [h[i] + f[i] for i in range(n)]
            for i in range(n):
                logit = P["W_r"] @ _ln_ref(h[i], eps) + P["b_r"]
                m = logit.max()
                losses[s] += (m + math.log(np.exp(logit - m).sum()) - logit[y[s, b, i]]) / (B * n)
    return losses


@pytest.mark.parametrize("acts", [["softmax", "tanhmax"], ["signexp", "expressive"], ["linear", "sigsoftmax"],
                                  "cog-hybrid"])
def test_forward_matches_reference_loop(acts, rng):
    L = 3 if acts == "cog-hybrid" else 2
    model = DecoderLM(6, 5, width=6, n_layers=L, n_heads=2, activations=acts, beta=0.8)
    params = random_params(model, [0, 1], rng)
    batch = random_batch(model, 2, 2, 5, rng)
    np.testing.assert_allclose(model.loss(params, batch), _reference_loss(model, params, batch["x"], batch["y"]),
                               rtol=1e-12)


# --------------------------------------------------------------------------
# structure: causality, seeds, recipes
# --------------------------------------------------------------------------


@pytest.mark.parametrize("options", [dict(activations="signexp"), dict(activations="relu", scores="neural-first")])
def test_causal(options, rng):
    model = DecoderLM(6, 7, width=8, n_layers=2, n_heads=2, **options)
    params = random_params(model, [0], rng)
    x = rng.integers(0, 6, (1, 2, 7))
    x2 = x.copy()
    x2[:, :, 4] = (x2[:, :, 4] + 1) % 6
    a, b = model.outputs(params, x)["logits"], model.outputs(params, x2)["logits"]
    np.testing.assert_array_equal(a[:, :, :4], b[:, :, :4])
    assert np.abs(a[:, :, 4:] - b[:, :, 4:]).max() > 1e-6
    for w in model.outputs(params, x)["attention"]:
        assert np.all(np.triu(np.ones((7, 7), bool), 1)[None, None, None] <= (w == 0))


def test_seeds_are_independent(rng):
    model = DecoderLM(6, 5, width=8, n_layers=2, n_heads=2, scores="neural-first")
    both = model.init_params([1, 3])
    alone = model.init_params([3])
    for k in both:
        np.testing.assert_array_equal(both[k][1:], alone[k])
    batch = random_batch(model, 2, 2, 5, rng)
    loss = model.loss(both, batch)
    one = {k: v[1:] for k, v in both.items()}
    np.testing.assert_allclose(loss[1:], model.loss(one, {k: v[1:] for k, v in batch.items()}), rtol=1e-13)
    _, grads, _ = model.loss_and_grad(both, batch)
    _, g1, _ = model.loss_and_grad(one, {k: v[1:] for k, v in batch.items()})
    for k in grads:
        np.testing.assert_allclose(grads[k][1:], g1[k], rtol=1e-12, atol=1e-15)


def test_recipes():
    assert cog_hybrid(4) == ["softmax", "signexp", "signexp", "softmax"]
    assert cog_hybrid(2) == ["softmax", "softmax"] and cog_hybrid(1) == ["softmax"]
    assert neural_first(3) == ["neural", "dot", "dot"]
    m = DecoderLM(5, 4, width=4, n_layers=4, n_heads=1, activations="cog-hybrid", scores="neural-first")
    assert [a.name for a in m.activations] == cog_hybrid(4)
    assert m.score_kinds == neural_first(4)
    assert m.label == "softmax|signexp|signexp|softmax+neural0"
    shapes = m.param_shapes()
    assert shapes["h0.neural.Wq"] == (m.neural_d_prime, m.d_head) and "h1.neural.Wq" not in shapes
    assert m.n_params == sum(v[0].size for v in m.init_params([0]).values())


def test_training_follows_the_autograd_trajectory(rng):
    model = DecoderLM(5, 4, width=4, n_layers=2, n_heads=2, activations="signexp", scores="neural-first")
    batches = [random_batch(model, 2, 2, 4, np.random.default_rng(t)) for t in range(3)]
    out = {}
    for how in ("analytic", "autograd"):
        params = model.init_params([0, 1])
        opt = Adam(params, lr=1e-2)
        train(model, params, opt, lambda epoch: batches, epochs=1, grad=how, progress=False)
        out[how] = params
    for k in out["analytic"]:
        np.testing.assert_allclose(out["analytic"][k], out["autograd"][k], rtol=1e-10, atol=1e-12)


def test_evaluate_and_generate(rng):
    model = DecoderLM(6, 5, width=8, n_layers=2, n_heads=2)
    params = random_params(model, [0, 1], rng)
    batch = random_batch(model, 2, 7, 5, rng)
    ev = model.evaluate(params, batch["x"], batch["y"], batch_size=3)
    np.testing.assert_allclose(ev["loss"], model.loss(params, batch), rtol=1e-12)
    _, _, aux = model.loss_and_grad(params, batch)
    np.testing.assert_allclose(ev["accuracy"], aux["correct"].mean(axis=(1, 2)))
    shared = model.evaluate(params, batch["x"][:1], batch["y"][:1])  # one set of sequences for every seed
    full = model.evaluate(params, np.repeat(batch["x"][:1], 2, 0), np.repeat(batch["y"][:1], 2, 0))
    np.testing.assert_array_equal(shared["loss"], full["loss"])
    np.testing.assert_allclose(shared["loss"][0], ev["loss"][0], rtol=1e-12)
    seq = model.generate(params, np.array([1, 2, 3]), 8)
    assert seq.shape == (2, 11) and np.all(seq[:, :3] == [1, 2, 3])
    # greedy: each new id is the argmax of the logits of the window before it
    logits = model.outputs(params, seq[:, None, -6:-1])["logits"]
    np.testing.assert_array_equal(np.argmax(logits[:, 0, -1], -1), seq[:, -1])
    sampled = model.generate(params, np.array([1]), 4, rng=np.random.default_rng(0), temperature=0.5)
    assert sampled.shape == (2, 5) and sampled.max() < 6


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------


def test_bad_input(rng):
    with pytest.raises(ValueError, match="width"):
        DecoderLM(5, 4, width=6, n_heads=4)
    with pytest.raises(ValueError, match="activations"):
        DecoderLM(5, 4, width=4, n_layers=2, activations=["softmax"])
    with pytest.raises(ValueError, match="activations"):
        DecoderLM(5, 4, width=4, n_layers=2, activations=["cog-hybrid", "softmax"])
    with pytest.raises(ValueError, match="unknown activation"):
        DecoderLM(5, 4, width=4, activations="sofmax")
    with pytest.raises(ValueError, match="scores"):
        DecoderLM(5, 4, width=4, n_layers=2, scores=["dot", "additive"])
    with pytest.raises(TypeError, match="activations"):
        DecoderLM(5, 4, width=4, activations=3)
    with pytest.raises(ValueError, match="beta"):
        DecoderLM(5, 4, width=4, beta=0.0)
    with pytest.raises(ValueError, match="vocab_size"):
        DecoderLM(1, 4)
    model = DecoderLM(5, 4, width=4, n_layers=1, n_heads=2)
    params = model.init_params([0])
    x = rng.integers(0, 5, (1, 2, 4))
    with pytest.raises(ValueError, match="n_ctx"):
        model.loss(params, {"x": rng.integers(0, 5, (1, 2, 5)), "y": rng.integers(0, 5, (1, 2, 5))})
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        model.loss(params, {"x": x + 5, "y": x})
    with pytest.raises(TypeError, match="integer"):
        model.loss(params, {"x": x.astype(float), "y": x})
    with pytest.raises(TypeError, match="batch"):
        model.loss(params, {"x": x})
    with pytest.raises(ValueError, match="S = 1"):
        model.loss(params, {"x": np.concatenate([x, x]), "y": np.concatenate([x, x])})
    with pytest.raises(ValueError, match="missing"):
        model.loss({k: v for k, v in params.items() if k != "E"}, {"x": x, "y": x})
    with pytest.raises(ValueError, match="h0.W_Q"):
        model.loss(params | {"h0.W_Q": np.zeros((1, 4, 3))}, {"x": x, "y": x})
    with pytest.raises(TypeError, match="seeds"):
        model.init_params(3)
    with pytest.raises(ValueError, match="layer index"):
        model.attention_sublayer(params, 1, np.zeros((1, 2, 4, 4)))
