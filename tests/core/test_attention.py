"""Tests for refattn.core.attention: score + activation + values, (B, H, n, d)."""

import numpy as np
import pytest

from refattn import ACTIVATIONS, SCORES, activation, score
from refattn.core.attention import attention, attention_backward, causal_mask
from refattn.core.backend import cupy_available
from refattn.core.gradcheck import gradcheck

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL

GRAD_NAMES = ("Q", "K", "V", "params")  # attention_backward returns (dQ, dK, dV, dparams)

B, H, N, D = 2, 2, 4, 3


def _qkv(rng, n_q=N, n_k=N, d=D, dv=2):
    return (rng.standard_normal((B, H, n_q, d)), rng.standard_normal((B, H, n_k, d)),
            rng.standard_normal((B, H, n_k, dv)))


def _gradcheck_attention(rng, act, sc="scaled_dot", mask=None, causal=False, score_options=None,
                         params=None, n_q=N, checks=("autograd", "central")):
    Q, K, V = _qkv(rng, n_q=n_q)
    s_obj = score(sc, **(score_options or {}))
    params = s_obj.init_params(D, rng) if params is None else params
    names = list(params)
    args = {"Q": Q, "K": K, "V": V, **params}
    if sc == "global":
        args.pop("Q")

    def fun(**a):
        return attention(a.get("Q"), a["K"], a["V"], score=s_obj, activation=act,
                         params={p: a[p] for p in names}, mask=mask, causal=causal)[0]

    def vjp(u, **a):
        _, cache = attention(a.get("Q"), a["K"], a["V"], score=s_obj, activation=act,
                             params={p: a[p] for p in names}, mask=mask, causal=causal)
        g = dict(zip(GRAD_NAMES, attention_backward(u, cache)))
        out = {"K": g["K"], "V": g["V"], **g["params"]}
        if "Q" in a:
            out["Q"] = g["Q"]
        return out

    res = []
    # atol: a gradient that is exactly 0 (neural's ba under softmax, which is
    # shift invariant) shows as ~1e-10 of rounding noise in the differences.
    for check, rtol, atol in (("autograd", RTOL_AUTOGRAD, 1e-12), ("central", RTOL_CENTRAL, 1e-8)):
        if check in checks:
            res.append(gradcheck(fun, args, vjp, name=f"attention {act}/{sc}", checks=(check,),
                                 rtol=rtol, atol=atol, seed=int(rng.integers(1000))))
    return res


@pytest.mark.parametrize("masking", ["none", "causal", "mask", "both"])
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_attention_gradients_every_activation(act, masking, rng):
    mask = None
    if masking in ("mask", "both"):
        mask = rng.random((B, 1, N, N)) < 0.7
        mask[..., 0] = True
    for r in _gradcheck_attention(rng, act, mask=mask, causal=masking in ("causal", "both")):
        r.assert_ok()


@pytest.mark.parametrize("sc", SCORES)
@pytest.mark.parametrize("act", ["softmax", "tanhmax"])
def test_attention_gradients_every_score(sc, act, rng):
    for r in _gradcheck_attention(rng, act, sc=sc):
        r.assert_ok()


def test_attention_matches_explicit_loops(rng):
    """out[b, h, i] = sum_j phi(s[b, h, i, :])_j V[b, h, j] with s = q_i . k_j / sqrt(d)."""
    Q, K, V = _qkv(rng)
    mask = rng.random((B, H, N, N)) < 0.8
    for act_name in ("softmax", "tanhmax", "signexp"):
        act = activation(act_name)
        out, _ = attention(Q, K, V, activation=act_name, mask=mask, causal=True)
        expect = np.zeros_like(out)
        for b in range(B):
            for h in range(H):
                for i in range(N):
                    keep = [j for j in range(N) if j <= i and mask[b, h, i, j]]
                    if not keep:
                        continue
                    s = np.array([Q[b, h, i] @ K[b, h, j] / np.sqrt(D) for j in keep])
                    w = act.g(s) / act.h(s).sum()
                    expect[b, h, i] = sum(w[t] * V[b, h, j] for t, j in enumerate(keep))
        np.testing.assert_allclose(out, expect, rtol=1e-12, atol=1e-14)


def test_causal_output_ignores_the_future(rng):
    Q, K, V = _qkv(rng)
    out, _ = attention(Q, K, V, activation="tanhmax", causal=True)
    K2, V2 = K.copy(), V.copy()
    K2[..., 2:, :] += 5.0
    V2[..., 2:, :] -= 3.0
    out2, _ = attention(Q, K2, V2, activation="tanhmax", causal=True)
    np.testing.assert_array_equal(out[..., :2, :], out2[..., :2, :])
    assert not np.allclose(out[..., 2:, :], out2[..., 2:, :])


def test_causal_mask_shape():
    m = causal_mask(3)
    assert m.dtype == bool and m.tolist() == [[True, False, False], [True, True, False], [True, True, True]]


@pytest.mark.parametrize("sc", [s for s in SCORES if not score(s).pairwise])
def test_per_token_scores_pool_to_one_row(sc, rng):
    Q, K, V = _qkv(rng)
    s_obj = score(sc)
    params = s_obj.init_params(D, rng)
    out, cache = attention(None if sc == "global" else Q, K, V, score=sc, params=params, activation="tanhmax")
    assert out.shape == (B, H, 1, V.shape[-1])
    s = s_obj(None if sc == "global" else Q, K, params)
    w = activation("tanhmax")(s)
    np.testing.assert_allclose(out[..., 0, :], np.einsum("bhn,bhnd->bhd", w, V), rtol=1e-12)
    with pytest.raises(ValueError, match="causal: "):
        attention(None if sc == "global" else Q, K, V, score=sc, params=params, causal=True)


def test_perturbed_backward_is_caught(rng, monkeypatch):
    import refattn.core.attention as att

    honest = att.attention_backward

    def perturbed(grad_out, cache):
        dQ, dK, dV, dparams = honest(grad_out, cache)
        return dQ, dK * (1 + 1e-4), dV, dparams

    monkeypatch.setattr(att, "attention_backward", perturbed)
    Q, K, V = _qkv(rng)
    args = {"Q": Q, "K": K, "V": V}

    def vjp(u, Q, K, V):
        g = dict(zip(GRAD_NAMES, att.attention_backward(u, attention(Q, K, V)[1])))
        return {"Q": g["Q"], "K": g["K"], "V": g["V"]}

    res = gradcheck(lambda Q, K, V: attention(Q, K, V)[0], args, vjp, rtol=RTOL_CENTRAL)
    assert not res.ok and {c.arg for c in res.failures()} == {"K"}


def test_attention_errors(rng):
    Q, K, V = _qkv(rng)
    with pytest.raises(ValueError, match="Q: last axis"):
        attention(Q[..., :2], K, V)
    with pytest.raises(ValueError, match="V: shape"):
        attention(Q, K, V[..., :3, :])
    with pytest.raises(ValueError, match="Q: leading"):
        attention(Q[:1], K, V)
    with pytest.raises(ValueError, match="causal: needs as many queries"):
        attention(Q[..., :3, :], K, V, causal=True)
    with pytest.raises(ValueError, match="mask: shape"):
        attention(Q, K, V, mask=np.ones((3, 3), bool))
    with pytest.raises(TypeError, match="K: .*floating"):
        attention(Q, K.astype(int), V)
    with pytest.raises(ValueError, match="unknown activation"):
        attention(Q, K, V, activation="nope")
    out, cache = attention(Q, K, V)
    with pytest.raises(ValueError, match="grad_out: shape"):
        dict(zip(GRAD_NAMES, attention_backward(out[..., :1], cache)))


def test_float32_stays_float32(rng):
    Q, K, V = (x.astype(np.float32) for x in _qkv(rng))
    out, cache = attention(Q, K, V, activation="tanhmax", causal=True)
    assert out.dtype == np.float32
    g = dict(zip(GRAD_NAMES, attention_backward(np.ones_like(out), cache)))
    assert all(g[k].dtype == np.float32 for k in ("Q", "K", "V"))


@pytest.mark.skipif(not cupy_available(), reason="CuPy with a CUDA device is not available")
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_cupy_parity_attention(act, rng):
    import cupy as cp

    Q, K, V = _qkv(rng)
    G = rng.standard_normal((B, H, N, V.shape[-1]))
    out, cache = attention(Q, K, V, activation=act, causal=True)
    g = dict(zip(GRAD_NAMES, attention_backward(G, cache)))
    out_c, cache_c = attention(cp.asarray(Q), cp.asarray(K), cp.asarray(V), activation=act, causal=True)
    assert isinstance(out_c, cp.ndarray)
    g_c = dict(zip(GRAD_NAMES, attention_backward(cp.asarray(G), cache_c)))
    np.testing.assert_allclose(out_c.get(), out, rtol=1e-12, atol=1e-14)
    for k in ("Q", "K", "V"):
        np.testing.assert_allclose(g_c[k].get(), g[k], rtol=1e-11, atol=1e-13)


def test_sgd_step_on_score_parameters_keeps_forward_working(rng):
    """b - lr * db of a 0-d parameter is a NumPy scalar; it must stay a valid parameter."""
    Q, K, V = _qkv(rng)
    sc = score("neural")
    params = sc.init_params(D, rng)
    out, cache = attention(Q, K, V, score=sc, params=params, activation="tanhmax")
    g = dict(zip(GRAD_NAMES, attention_backward(np.ones_like(out), cache)))["params"]
    stepped = {n: params[n] - 0.1 * g[n] for n in params}
    out2, _ = attention(Q, K, V, score=sc, params=stepped, activation="tanhmax")
    assert out2.shape == out.shape and np.all(np.isfinite(out2))


def test_missing_queries_and_a_non_bool_causal_are_named(rng):
    Q, K, V = _qkv(rng)
    with pytest.raises(ValueError, match="Q: the score 'scaled_dot' needs queries"):
        attention(None, K, V)
    with pytest.raises(TypeError, match="causal: expected True or False, got str"):
        attention(Q, K, V, causal="yes")


# --- A mask's promise holds for every array it covers --------------------------------------------------
PAD = 1  # the padded key (and query) of the tests below


def _padding_mask(n_q=N, n_k=N, pairwise=True):
    """Key PAD hidden from every query; query PAD (pairwise scores) sees no key."""
    mask = np.ones((n_q if pairwise else 1, n_k), bool)
    mask[:, PAD] = False
    if pairwise:
        mask[PAD] = False
    return mask


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("sc", SCORES)
@pytest.mark.parametrize("value", [np.nan, np.inf], ids=["nan", "inf"])
def test_garbage_behind_the_mask_reaches_no_output_and_no_gradient(act, sc, value, rng):
    """Padding with garbage is what masks are for: the rows of Q, K and V of a key no query sees, and of a
    query that sees no key, may hold NaN or inf, and the output and every gradient equal those of the same
    rows holding zeros (0 * NaN must not arise); their own gradients are 0."""
    s_obj = score(sc)
    Q, K, V = _qkv(rng)
    pairwise = s_obj.pairwise
    mask = _padding_mask(pairwise=pairwise)
    params = s_obj.init_params(D, rng)
    G = rng.standard_normal((B, H, N if pairwise else 1, V.shape[-1]))
    clean = [x.copy() for x in (Q, K, V)]
    for x in (Q, K, V):
        x[..., PAD, :] = value  # the padded rows: a query row (pairwise), the masked key's K and V rows
    q = None if not s_obj.uses_q else Q
    q0 = None if not s_obj.uses_q else clean[0]
    with np.errstate(all="raise"):  # no 0 * NaN, no inf - inf anywhere
        out, cache = attention(q, K, V, score=s_obj, activation=act, params=params, mask=mask)
        grads = attention_backward(G, cache)
    out0, cache0 = attention(q0, clean[1], clean[2], score=s_obj, activation=act, params=params, mask=mask)
    grads0 = attention_backward(G, cache0)
    keep = np.ones(out.shape[-2], bool)
    if pairwise:
        keep[PAD] = False  # the padded query's own output row is 0, the convention for a row that sees nothing
    np.testing.assert_array_equal(out[..., keep, :], out0[..., keep, :])
    for name, g, g0 in zip(GRAD_NAMES[:3], grads[:3], grads0[:3]):
        if g is None:
            continue
        assert np.isfinite(g).all(), name
        np.testing.assert_array_equal(g[..., PAD, :], 0.0, err_msg=name)
        np.testing.assert_allclose(g, g0, rtol=1e-12, atol=1e-15, err_msg=name)
    for p in grads[3]:
        np.testing.assert_allclose(grads[3][p], grads0[3][p], rtol=1e-12, atol=1e-15, err_msg=p)


def test_a_key_some_query_sees_is_data_not_padding(rng):
    """The promise covers what the mask hides from everyone: a NaN in the value row of a key that one query
    sees reaches that query's output (NaN propagates, never vanishes)."""
    Q, K, V = _qkv(rng)
    mask = np.ones((N, N), bool)
    mask[:, PAD] = False
    mask[0, PAD] = True  # query 0 sees key PAD
    V[..., PAD, :] = np.nan
    with np.errstate(invalid="ignore"):
        out, _ = attention(Q, K, V, mask=mask)
    assert np.isnan(out[..., 0, :]).all()


@pytest.mark.parametrize("sc", ["dot", "scaled_dot", "self", "cosformer"])
def test_finite_inputs_whose_scores_overflow_are_refused_in_one_line(sc, rng):
    """Attention's domain: every kept score finite. Finite queries and keys near 1e200 make q . k overflow;
    attention refuses them in one line naming Q and K, the index and the bound (never a NaN answer)."""
    Q, K, V = _qkv(rng)
    pairwise = score(sc).pairwise  # a per-token score pairs token 1 with itself: its one row of scores
    Q[0, 0, 1], K[0, 0, 0 if pairwise else 1] = 1e200, 1e200  # every entry 1e200: q . k = d 1e400
    where = r"\(0, 0, 1, 0\)" if pairwise else r"\(0, 0, 0, 1\)"
    with pytest.raises(ValueError, match=rf"^Q, K: .*index {where}.*overflows float64.*scale Q or K down") as e:
        attention(Q, K, V, score=sc, activation="softmax")
    assert "\n" not in str(e.value)


def test_an_overflow_behind_the_mask_is_ignored_and_a_nan_input_propagates(rng):
    Q, K, V = _qkv(rng)
    Q[0, 0, 1], K[0, 0, 0] = 1e200, 1e200
    mask = np.ones((N, N), bool)
    mask[1, 0] = False  # the overflowing score (query 1, key 0) is masked
    with np.errstate(over="ignore"):
        out, _ = attention(Q, K, V, score="dot", mask=mask)
    assert np.isfinite(out).all()
    Q[0, 0, 2, 0] = np.nan  # an input that is not finite: NaN propagates to its rows, no error
    with np.errstate(over="ignore", invalid="ignore"):
        out, _ = attention(Q, K, V, score="dot", mask=mask)
    assert np.isnan(out[0, 0, 2]).all() and np.isfinite(out[0, 0, 3]).all()


def test_backward_refuses_another_activations_cache(rng):
    """A cache from tanhmax's forward given to softmax's backward: refused in one line naming both, not a
    gradient that matches neither."""
    s = rng.standard_normal((3, 5))
    _, cache = activation("tanhmax").forward(s)
    with pytest.raises(TypeError, match=r"cache: .*'tanhmax'.*'softmax'"):
        activation("softmax").backward(rng.standard_normal((3, 5)), cache)
    ds = activation("tanhmax").backward(np.ones((3, 5)), cache)  # another instance of the same: fine
    assert ds.shape == (3, 5)
