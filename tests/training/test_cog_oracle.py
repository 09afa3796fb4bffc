"""Cog's Cog attention example, transcribed to NumPy, as an oracle for the library.

The oracle below (``oracle_*``) is a line-by-line transcription of the JAX code
printed in Cog ("Negative Weights Transformers", section "Code"): the same
function names, the same einsum strings, ``jnp`` -> ``np``, ``jax.nn.softmax``
-> a two-line softmax, ``random.normal(key, ...)`` -> ``rng.standard_normal``.
It does not import refattn. Against it (derivations/18-decoder-and-cog.md,
section 3):

* refattn.core.attention.attention(score="dot", activation="signexp", causal=True)
  gives the example's ``cog_attn`` to 1e-12 (b = 2, L = 4, d = 8, causal mask);
  with extra padding masks too (hypothesis);
* DecoderLM(..., activations="signexp", beta=1.0).attention_sublayer gives the
  example's ``tr_forward`` to 1e-12 with nonzero biases, once the example's
  projection is written as a matrix: its einsum "bld,dd->bld" repeats the index
  d, which takes the *diagonal* of W (NumPy and JAX agree on this), so the
  example's Q is x * diag(Wq) + bq. The full-matrix reading "bld,de->ble"
  (x @ Wq) is matched with W_Q = Wq^T;
* the displayed formula's signed denominator is not what the code computes;
* signexp weights take the sign of the score, can be negative, and each row's
  absolute weights sum to 1 (exactly 1 minus the share of exact-zero scores);
* attention_backward's gradient against central differences of the oracle.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

GRAD_NAMES = ("Q", "K", "V", "params")  # attention_backward returns (dQ, dK, dV, dparams)

# --------------------------------------------------------------------------
# The oracle: Cog's JAX example in NumPy (no refattn imports here)
# --------------------------------------------------------------------------


def oracle_softmax(x, axis=-1):
    """jax.nn.softmax: exp(x - max) / sum; a -inf entry gets exactly 0."""
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def oracle_init_tr(rng, d):
    return dict(
        Wq=rng.standard_normal((d, d)) / np.sqrt(d),
        Wk=rng.standard_normal((d, d)) / np.sqrt(d),
        Wv=rng.standard_normal((d, d)) / np.sqrt(d),
        Wo=rng.standard_normal((d, d)) / np.sqrt(d),
        bq=np.zeros(d),
        bk=np.zeros(d),
        bv=np.zeros(d),
        bo=np.zeros(d),
    )


def oracle_cog_attn(q, k, v, mask):
    p = np.einsum("bld,bmd->blm", q, k)
    abs_p = np.where(mask, np.abs(p), -np.inf)
    a = np.sign(p) * oracle_softmax(abs_p, -1)
    return np.einsum("blm,bmd->bld", a, v)


def oracle_tr_forward(p, x, mask):
    q = np.einsum("bld,dd->bld", x, p["Wq"]) + p["bq"]
    k = np.einsum("bld,dd->bld", x, p["Wk"]) + p["bk"]
    v = np.einsum("bld,dd->bld", x, p["Wv"]) + p["bv"]
    h = oracle_cog_attn(q, k, v, mask)
    return np.einsum("bld,dd->bld", h, p["Wo"]) + p["bo"]


def oracle_tr_forward_full(p, x, mask):
    """The same with full matrices, "bld,de->ble" (x @ W): what the example presumably meant."""
    q = np.einsum("bld,de->ble", x, p["Wq"]) + p["bq"]
    k = np.einsum("bld,de->ble", x, p["Wk"]) + p["bk"]
    v = np.einsum("bld,de->ble", x, p["Wv"]) + p["bv"]
    h = oracle_cog_attn(q, k, v, mask)
    return np.einsum("bld,de->ble", h, p["Wo"]) + p["bo"]


def oracle_weights(q, k, mask):
    """The example's attention matrix ``a`` (the line before the value product)."""
    p = np.einsum("bld,bmd->blm", q, k)
    abs_p = np.where(mask, np.abs(p), -np.inf)
    return np.sign(p) * oracle_softmax(abs_p, -1)


b, L, d = 2, 4, 8  # the example's shapes


def example(seed=0, biases=True):
    """The example's parameters, input and causal mask; NumPy draws in place of JAX's PRNG.

    The example initialises every bias to 0; ``biases=True`` replaces them with
    random values so that where each bias enters is tested too.
    """
    rng = np.random.default_rng(seed)
    params = oracle_init_tr(rng, d)
    if biases:
        params.update({k: rng.standard_normal(d) for k in ("bq", "bk", "bv", "bo")})
    x = rng.standard_normal((b, L, d))
    mask = np.broadcast_to(np.tril(np.ones((L, L))).astype(bool), (b, L, L))
    return params, x, mask


# --------------------------------------------------------------------------
# The library against the oracle
# --------------------------------------------------------------------------

from refattn.core.attention import attention, attention_backward  # noqa: E402
from refattn.training.models.decoder import DecoderLM  # noqa: E402


def _qkv(params, x):
    return (x * np.diag(params["Wq"]) + params["bq"], x * np.diag(params["Wk"]) + params["bk"],
            x * np.diag(params["Wv"]) + params["bv"])


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_attention_matches_cog_attn(seed):
    params, x, mask = example(seed)
    q, k, v = _qkv(params, x)
    assert (oracle_weights(q, k, mask) < 0).any()  # both signs occur, so sign conventions are tested
    want = oracle_cog_attn(q, k, v, mask)
    got, cache = attention(q, k, v, score="dot", activation="signexp", causal=True)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cache["w"], oracle_weights(q, k, mask), rtol=1e-12, atol=1e-13)
    # the same through an explicit mask instead of causal=True
    got2, _ = attention(q, k, v, score="dot", activation="signexp", mask=mask)
    np.testing.assert_allclose(got2, want, rtol=1e-12, atol=1e-12)


def test_scaled_scores_do_not_match():
    """The example does not divide by sqrt(d): the library's default scaled_dot differs."""
    params, x, mask = example(0)
    q, k, v = _qkv(params, x)
    want = oracle_cog_attn(q, k, v, mask)
    scaled, _ = attention(q, k, v, score="scaled_dot", activation="signexp", causal=True)
    assert np.abs(scaled - want).max() > 1e-3
    same, _ = attention(q, k, v, score="scaled_dot", activation="signexp", causal=True,
                        score_options={"beta": 1.0})
    np.testing.assert_allclose(same, want, rtol=1e-12, atol=1e-12)


def test_einsum_with_a_repeated_index_takes_the_diagonal():
    """ "bld,dd->bld" is x * diag(W), not x @ W (NumPy; JAX's einsum agrees, derivation 18)."""
    params, x, _ = example(0)
    W = params["Wq"]
    np.testing.assert_array_equal(np.einsum("bld,dd->bld", x, W), x * np.diag(W))
    assert np.abs(np.einsum("bld,dd->bld", x, W) - x @ W).max() > 0.1


def _sublayer_params(model, params, full):
    """The example's weights in the decoder's convention Q = Z W_Q^T + b_Q (one seed)."""
    def mat(W):
        return (W.T if full else np.diag(np.diag(W)))[None]  # (1, d, d)
    out = {k: np.zeros((1,) + s) for k, s in model.param_shapes().items()}
    for lib, ex in (("Q", "q"), ("K", "k"), ("V", "v"), ("O", "o")):
        out[f"h0.W_{lib}"] = mat(params["W" + ex])
        out[f"h0.b_{lib}"] = params["b" + ex][None]
    return out


@pytest.mark.parametrize("full", [False, True], ids=["as printed (diagonal)", "full matrices"])
@pytest.mark.parametrize("biases", [False, True], ids=["zero biases", "random biases"])
def test_decoder_sublayer_matches_tr_forward(full, biases):
    params, x, mask = example(3, biases=biases)
    want = (oracle_tr_forward_full if full else oracle_tr_forward)(params, x, mask)
    model = DecoderLM(5, L, width=d, n_layers=1, n_heads=1, activations="signexp", beta=1.0)
    got = model.attention_sublayer(_sublayer_params(model, params, full), 0, x[None])[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # the library's default scale 1/sqrt(d) is a different model
    scaled = DecoderLM(5, L, width=d, n_layers=1, n_heads=1, activations="signexp")
    other = scaled.attention_sublayer(_sublayer_params(scaled, params, full), 0, x[None])[0]
    assert np.abs(other - want).max() > 1e-4


def test_cog_hybrid_layer_is_the_example_layer():
    """In a cog-hybrid decoder the middle layer's attention branch is the example's tr_forward."""
    params, x, mask = example(0)  # 17 of its 20 causal scores are negative
    model = DecoderLM(5, L, width=d, n_layers=3, n_heads=1, activations="cog-hybrid", beta=1.0)
    full = {k: np.zeros((1,) + s) for k, s in model.param_shapes().items()}
    one = _sublayer_params(DecoderLM(5, L, width=d, n_layers=1, n_heads=1, beta=1.0), params, False)
    full.update({k.replace("h0.", "h1."): v for k, v in one.items() if k.startswith("h0.W_") or
                 k.startswith("h0.b_")})
    got = model.attention_sublayer(full, 1, x[None])[0]
    np.testing.assert_allclose(got, oracle_tr_forward(params, x, mask), rtol=1e-12, atol=1e-12)
    full.update({k: v for k, v in one.items() if k.startswith("h0.")})
    first = model.attention_sublayer(full, 0, x[None])[0]  # softmax layer: a different map
    assert np.abs(first - oracle_tr_forward(params, x, mask)).max() > 1e-3


# --------------------------------------------------------------------------
# The displayed formula vs the code
# --------------------------------------------------------------------------


def test_displayed_numerator_is_the_codes():
    """SignExp(p) = s exp(s p - m) with s = sign p, m = max |p|: sign(p) exp(|p| - m)."""
    rng = np.random.default_rng(5)
    p = rng.standard_normal((L, L)) * 3
    s = np.sign(p)
    m = np.max(np.abs(p), axis=-1, keepdims=True)
    shown = s * np.exp(s * p - m)
    np.testing.assert_allclose(shown, np.sign(p) * np.exp(np.abs(p) - m), rtol=1e-15)
    code = np.sign(p) * oracle_softmax(np.abs(p))
    np.testing.assert_allclose(shown / np.abs(shown).sum(axis=-1, keepdims=True), code, rtol=1e-13)


def test_displayed_signed_denominator_differs_and_can_vanish():
    """Cog displays A = SignExp / sum SignExp (a signed sum); its code divides by the
    sum of absolute values. The signed version differs and blows up when the positive and
    negative parts cancel."""
    p = np.array([[1.0, -1.0 + 1e-9, 0.5, -0.5]])  # exp|p| cancels in pairs up to 1e-9
    signexp = np.sign(p) * np.exp(np.abs(p))
    signed = signexp / signexp.sum(axis=-1, keepdims=True)
    code = np.sign(p) * oracle_softmax(np.abs(p))  # the line `a = ...` of cog_attn
    assert np.abs(signed).max() > 1e6  # the signed denominator is ~3e-9
    np.testing.assert_allclose(np.abs(code).sum(), 1.0, rtol=1e-15)
    np.testing.assert_allclose(np.abs(code).max(), np.exp(1.0) / (2 * np.exp(1.0) + 2 * np.exp(0.5)),
                               rtol=1e-8)


# --------------------------------------------------------------------------
# Properties of the weights
# --------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 7), scale=st.floats(0.1, 30.0))
def test_signexp_weights_signs_and_unit_absolute_rows(seed, n, scale):
    from refattn import activation

    rng = np.random.default_rng(seed)
    s = scale * rng.standard_normal((3, n, n))
    keep = rng.random((3, n, n)) < 0.7
    keep[..., 0] = True  # every row keeps at least one key (the oracle's softmax needs one)
    w = activation("signexp")(s, mask=keep)
    want = np.sign(s) * oracle_softmax(np.where(keep, np.abs(s), -np.inf))
    np.testing.assert_allclose(w, want, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(np.abs(w).sum(axis=-1), 1.0, rtol=1e-12)  # no exact zeros here
    assert np.all(np.sign(w[keep]) == np.sign(s[keep]))
    assert np.all(w[~keep] == 0)


def test_signexp_weights_are_negative_for_negative_scores():
    params, x, mask = example(0)
    q, k, v = _qkv(params, x)
    _, cache = attention(q, k, v, score="dot", activation="signexp", causal=True)
    w, s = cache["w"], cache["s"]
    assert (w[mask] < 0).any() and (w[mask] > 0).any()
    np.testing.assert_array_equal(np.sign(w[mask]), np.sign(s[mask]))
    np.testing.assert_allclose(np.abs(w).sum(axis=-1), 1.0, rtol=1e-13)


def test_exact_zero_score_gets_weight_zero_in_both():
    """sign(0) = 0 in the example (jnp.sign) and in the library: the row's absolute weights
    then sum to 1 minus the zero's share of the softmax of |p|."""
    from refattn import activation

    s = np.array([[0.0, 1.0, -2.0]])
    w = activation("signexp")(s)
    want = np.sign(s) * oracle_softmax(np.abs(s))
    np.testing.assert_allclose(w, want, rtol=1e-15)
    assert w[0, 0] == 0.0
    np.testing.assert_allclose(np.abs(w).sum(), 1.0 - oracle_softmax(np.abs(s))[0, 0], rtol=1e-14)


# --------------------------------------------------------------------------
# The gradient against differences of the oracle
# --------------------------------------------------------------------------


def test_attention_backward_against_oracle_differences():
    params, x, mask = example(3)  # 10 of its 20 causal scores are negative
    q, k, v = _qkv(params, x)
    assert (np.einsum("bld,bmd->blm", q, k)[mask] < 0).sum() == 10
    rng = np.random.default_rng(7)
    u = rng.standard_normal((b, L, d))  # a random cotangent, never all ones
    _, cache = attention(q, k, v, score="dot", activation="signexp", causal=True)
    grads = dict(zip(GRAD_NAMES, attention_backward(u, cache)))
    eps = 1e-6
    for name, arr in (("Q", q), ("K", k), ("V", v)):
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            args = {"Q": q, "K": k, "V": v}
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += eps
            minus[idx] -= eps
            fp = oracle_cog_attn(*(plus if n == name else args[n] for n in "QKV"), mask)
            fm = oracle_cog_attn(*(minus if n == name else args[n] for n in "QKV"), mask)
            num[idx] = np.sum(u * (fp - fm)) / (2 * eps)
        scale = np.abs(num).max()
        assert np.abs(grads[name] - num).max() <= 1e-6 * scale, name
