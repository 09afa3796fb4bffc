"""Tests for refattn.fast.streaming: attention block by block, equal to the dense reference.

Every comparison is with :func:`refattn.core.attention.attention` and
:func:`refattn.core.attention.attention_backward` on the same inputs; float64
results must agree to 1e-12 of their scale (norm-wise: ``max |a - b| <=
1e-12 * max(1, max |b|)``), which is a few hundred ulps of the largest
entry: the streaming and dense paths add the same terms in another order
and rescale by ``e^(m_old - m_new)`` instead of subtracting the final
maximum once (``derivations/23-streaming.md``, section 4).

Both routes are checked: the reading loop the derivation walks
(``reading=True``) and the fast route (:mod:`refattn.fast.streaming_fast`),
which NumPy inputs take by default.
"""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
import hypothesis.extra.numpy as hnp

from refattn import ACTIVATIONS, SCORES, activation, score
from refattn.core.attention import attention, attention_backward
from refattn.core.backend import to_numpy
from refattn.core.gradcheck import gradcheck
from refattn.fast import streaming_fast, threads
from refattn.fast.blocks import Blocks
from refattn.fast.streaming import streaming_attention, streaming_attention_backward

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL, SExp

GRAD_NAMES = ("Q", "K", "V", "params")  # attention_backward returns (dQ, dK, dV, dparams)

B, H, D, DV = 2, 2, 3, 2
TOL = 1e-12
MASKINGS = ("none", "mask", "causal", "both")
ROUTES = ("fast", "reading")


def _assert_close(got, want, what, tol=TOL):
    got, want = to_numpy(got), to_numpy(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, reference {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, reference {want.dtype}"
    err = float(np.max(np.abs(got - want), initial=0.0))
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    assert err <= tol * scale, f"{what}: max |streaming - dense| = {err:.3e} > {tol:g} * {scale:.3e}"


def _mask(rng, n_q, n_k, lead=(B, 1)):
    """A random keep-mask broadcastable to (B, H, n_q, n_k), with one fully masked row."""
    mask = rng.random(lead + (n_q, n_k)) < 0.6
    mask[0, ..., 1, :] = False  # a row with no normaliser
    return mask


def _both(Q, K, V, G, route="fast", **kw):
    """Dense and streaming (on ``route``) forward + backward on the same inputs."""
    block_size = kw.pop("block_size")
    out0, c0 = attention(Q, K, V, **kw)
    out1, c1 = streaming_attention(Q, K, V, block_size=block_size, reading=route == "reading", **kw)
    assert c1["route"] == route, f"ran the {c1['route']} route, not the {route} one"
    return (out0, dict(zip(GRAD_NAMES, attention_backward(G, c0)))), (out1, dict(zip(GRAD_NAMES, streaming_attention_backward(G, c1))))


def _assert_same(dense, stream, what):
    (out0, g0), (out1, g1) = dense, stream
    _assert_close(out1, out0, f"{what}: out")
    for k in ("Q", "K", "V"):
        if g0[k] is None:
            assert g1[k] is None, f"{what}: d{k} should be None"
        else:
            _assert_close(g1[k], g0[k], f"{what}: d{k}")
    assert set(g1["params"]) == set(g0["params"]), what
    for k in g0["params"]:
        _assert_close(g1["params"][k], g0["params"][k], f"{what}: d{k}")


# --------------------------------------------------------------------------
# Equal to the dense reference
# --------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("masking", MASKINGS)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_every_activation_equals_the_dense_reference(act, masking, route, rng):
    """Output and dQ, dK, dV to 1e-12, at block sizes that divide n (4), do not (5, 7),
    are 1 (every key its own block) and exceed n (one block); n_q != n_k without causal."""
    causal = masking in ("causal", "both")
    shapes = [(12, 12)] if causal else [(12, 12), (9, 14)]
    for n_q, n_k in shapes:
        Q, K, V = (rng.standard_normal((B, H, n, d)) for n, d in ((n_q, D), (n_k, D), (n_k, DV)))
        G = rng.standard_normal((B, H, n_q, DV))
        mask = _mask(rng, n_q, n_k) if masking in ("mask", "both") else None
        for bs in (1, 4, 5, 7, 64):
            _assert_same(*_both(Q, K, V, G, route, activation=act, mask=mask, causal=causal, block_size=bs),
                         f"{act}, {masking}, n_q={n_q}, n_k={n_k}, block_size={bs}")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("sc", SCORES)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_every_score_equals_the_dense_reference(sc, act, route, rng):
    """Every score with every activation, a random mask and (pairwise scores) causal:
    Q, K, V and every score parameter's gradient to 1e-12."""
    s_obj = score(sc)
    params = s_obj.init_params(D, rng)
    n = 10
    Q, K, V = (rng.standard_normal((B, H, n, d)) for d in (D, D, DV))
    q = None if sc == "global" else Q
    if s_obj.pairwise:
        mask, G = _mask(rng, n, n), rng.standard_normal((B, H, n, DV))
    else:  # one query row pools every token
        mask, G = rng.random((B, 1, 1, n)) < 0.7, rng.standard_normal((B, H, 1, DV))
    route = route if s_obj.pairwise else "reading"  # a per-token score's one row is O(n) already
    for causal in (False, True) if s_obj.pairwise else (False,):
        _assert_same(*_both(q, K, V, G, route, score=s_obj, activation=act, params=params, mask=mask,
                            causal=causal, block_size=3), f"{sc}/{act}, causal={causal}")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("act", ["tanhmax", "expressive"])
def test_neural_per_pair_weights_stream_by_their_slices(act, route, rng):
    """Per-pair weights (n_q, n_k, ...): each block reads its slice and writes its gradient there."""
    n_q, n_k = 7, 11
    s_obj = score("neural")
    params = s_obj.init_params(D, rng, per_pair=(n_q, n_k))
    Q, K, V = rng.standard_normal((B, n_q, D)), rng.standard_normal((B, n_k, D)), rng.standard_normal((B, n_k, DV))
    G = rng.standard_normal((B, n_q, DV))
    mask = rng.random((n_q, n_k)) < 0.7
    _assert_same(*_both(Q, K, V, G, route, score=s_obj, activation=act, params=params, mask=mask, block_size=3),
                 f"neural per-pair/{act}")


@pytest.mark.parametrize("route", ROUTES)
def test_cosformer_positions_are_absolute_across_blocks(route, rng):
    """cosFormer's cos(pi (i - j) / 2M) uses the positions in the whole sequence, and its M option."""
    Q, K, V = (rng.standard_normal((1, 2, 9, d)) for d in (D, D, DV))
    G = rng.standard_normal((1, 2, 9, DV))
    for opts in ({}, {"M": 30.0}):
        _assert_same(*_both(Q, K, V, G, route, score=score("cosformer", **opts), activation="cosformer",
                            block_size=4), f"cosformer {opts}")
    with pytest.raises(ValueError, match="M: 5 is smaller than the sequence length 9"):
        streaming_attention(Q, K, V, score=score("cosformer", M=5.0))


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("act", ["softmax", "expressive", "cosformer", "relu"])
def test_rows_with_no_normaliser_give_zero_output_and_gradient(act, route, rng):
    """A fully masked row, an all-zero expressive row and a cosformer row with no positive
    score have no normaliser: output 0 and gradient 0, as the reference (derivation 01, 5.4)."""
    n = 6
    Q, K, V = (rng.standard_normal((1, n, d)) for d in (D, D, DV))
    Q[0, 2] = 0.0  # every score of row 2 is 0
    Q[0, 3] = -np.abs(Q[0, 3])
    K = np.abs(K)  # row 3: every score < 0
    mask = np.ones((n, n), bool)
    mask[4] = False  # row 4: fully masked
    G = rng.standard_normal((1, n, DV))
    dense, stream = _both(Q, K, V, G, route, score="dot", activation=act, mask=mask, block_size=4)
    _assert_same(dense, stream, act)
    out, g = stream
    assert np.all(out[0, 4] == 0) and np.all(g["Q"][0, 4] == 0)
    if act in ("expressive", "cosformer"):
        assert np.all(out[0, 2] == 0) and np.all(g["Q"][0, 2] == 0)
    if act == "cosformer":
        assert np.all(out[0, 3] == 0) and np.all(g["Q"][0, 3] == 0)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_property_streaming_equals_dense(data):
    """Any activation, any (n_q, n_k), block size, mask shape and causal: the dense numbers."""
    act = data.draw(st.sampled_from(ACTIVATIONS), label="activation")
    route = data.draw(st.sampled_from(ROUTES), label="route")
    causal = data.draw(st.booleans(), label="causal")
    n_q = data.draw(st.integers(1, 9), label="n_q")
    n_k = n_q if causal else data.draw(st.integers(1, 9), label="n_k")
    bs = data.draw(st.integers(1, 10), label="block_size")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    Q, K, V = (rng.standard_normal((2, n, d)) for n, d in ((n_q, D), (n_k, D), (n_k, DV)))
    G = rng.standard_normal((2, n_q, DV))
    mshape = data.draw(st.sampled_from([None, (n_q, n_k), (2, n_q, n_k), (n_k,), (2, 1, n_k), (n_q, 1), ()]),
                       label="mask shape")
    mask = None if mshape is None else np.asarray(rng.random(mshape) < 0.6)
    _assert_same(*_both(Q, K, V, G, route, activation=act, mask=mask, causal=causal, block_size=bs),
                 f"{act}, causal={causal}, mask {mshape}, block_size={bs}")


@pytest.mark.parametrize("route", ROUTES)
def test_a_users_own_activation_streams(route, rng):
    """An Activation subclass the library has never seen: rho = s, ell = s (g = s e^s, h = e^s)."""
    Q, K, V = (rng.standard_normal((B, 8, d)) for d in (D, D, DV))
    G = rng.standard_normal((B, 8, DV))
    for bs in (3, None):  # None: the fast route's own strips
        _assert_same(*_both(Q, K, V, G, route, activation=SExp(), causal=True, block_size=bs), f"s_exp {bs}")


# --------------------------------------------------------------------------
# The streaming backward, checked three ways
# --------------------------------------------------------------------------


def _gradcheck_streaming(rng, act, sc="scaled_dot", mask=None, causal=False, n=5, block_size=2, route="fast"):
    """Streaming's backward (on ``route``) against autograd through streaming's own forward (which
    autograd traces on the reading route) and against central differences of it, with a random
    cotangent (gradcheck draws it)."""
    s_obj = score(sc)
    params = s_obj.init_params(D, rng)
    Q, K, V = (rng.standard_normal((1, 2, n, d)) for d in (D, D, DV))
    names = list(params)
    args = {"Q": Q, "K": K, "V": V, **params}
    if sc == "global":
        args.pop("Q")

    def run(a):
        return streaming_attention(a.get("Q"), a["K"], a["V"], score=s_obj, activation=act,
                                   params={p: a[p] for p in names}, mask=mask, causal=causal,
                                   block_size=block_size, reading=route == "reading")

    def vjp(u, **a):
        g = dict(zip(GRAD_NAMES, streaming_attention_backward(u, run(a)[1])))
        out = {"K": g["K"], "V": g["V"], **g["params"]}
        if "Q" in a:
            out["Q"] = g["Q"]
        return out

    for check, rtol, atol in (("autograd", RTOL_AUTOGRAD, 1e-12), ("central", RTOL_CENTRAL, 1e-8)):
        gradcheck(lambda **a: run(a)[0], args, vjp, name=f"streaming {act}/{sc}", checks=(check,),
                  rtol=rtol, atol=atol, seed=int(rng.integers(1000))).assert_ok()


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_streaming_backward_gradcheck_every_activation(act, route, rng):
    mask = rng.random((1, 1, 5, 5)) < 0.7
    mask[..., 0] = True
    _gradcheck_streaming(rng, act, mask=mask, causal=True, route=route)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("sc", SCORES)
def test_streaming_backward_gradcheck_every_score(sc, route, rng):
    _gradcheck_streaming(rng, "tanhmax", sc=sc, route=route)


@pytest.mark.parametrize("route", ROUTES)
def test_a_wrong_backward_is_caught(route, rng, monkeypatch):
    """The checks can fail: drop the D_i term of Step 10 and gradcheck reports it."""
    import refattn.fast.streaming as streaming

    if route == "reading":
        real = streaming._backward_blocks

        def no_D(xp, blocks, act, grad_out, cache):
            return real(xp, blocks, act, grad_out, {**cache, "out": 0.0 * cache["out"]})

        monkeypatch.setattr(streaming, "_backward_blocks", no_D)
    else:
        real = streaming_fast.backward
        monkeypatch.setattr(streaming_fast, "backward",
                            lambda grad_out, cache: real(grad_out, {**cache, "out": 0.0 * cache["out"]}))
    with pytest.raises(AssertionError, match="analytic VJP vs autograd"):
        _gradcheck_streaming(rng, "softmax", route=route)


# --------------------------------------------------------------------------
# O(n) memory, skipped blocks, float32, devices, errors
# --------------------------------------------------------------------------


def _arrays(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from _arrays(v)
    elif hasattr(x, "shape") and hasattr(x, "dtype"):
        yield x


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("act", ["tanhmax", "expressive"])
def test_the_cache_holds_no_n_q_by_n_k_array(act, route, rng):
    """The cache keeps the inputs, the output and two numbers per query row, nothing pairwise."""
    n = 24
    reading = route == "reading"
    Q, K, V = (rng.standard_normal((B, H, n, d)) for d in (D, D, DV))
    out, cache = streaming_attention(Q, K, V, activation=act, causal=True, block_size=5, reading=reading)
    arrays = list(_arrays(cache))
    assert arrays, "no arrays in the cache?"
    for a in arrays:
        assert tuple(a.shape[-2:]) != (n, n) and a.size < B * H * n * n, f"an array of shape {a.shape}"
    assert cache["m"].shape == cache["z"].shape == (B, H, n)
    n_q, n_k = 20, 16  # and with n_q != n_k and a mask over keys only
    Q = rng.standard_normal((B, H, n_q, D))
    _, cache = streaming_attention(Q, K[..., :n_k, :], V[..., :n_k, :], activation=act,
                                   mask=rng.random((B, 1, 1, n_k)) < 0.7, block_size=6, reading=reading)
    for a in _arrays(cache):
        assert tuple(a.shape[-2:]) != (n_q, n_k) and a.size < B * H * n_q * n_k, f"an array of shape {a.shape}"


def _peak_bytes(n, route, block_size=16, d=8):
    """tracemalloc's peak during one streaming forward + backward at length ``n`` (one head,
    float64); the inputs are made before and not counted, the output and gradients are."""
    rng = np.random.default_rng(0)
    Q, K, V, G = (rng.standard_normal((1, 1, n, d)) for _ in range(4))
    tracemalloc.start()
    try:
        out, cache = streaming_attention(Q, K, V, activation="tanhmax", causal=True, block_size=block_size,
                                         reading=route == "reading")
        streaming_attention_backward(G, cache)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("route", ROUTES)
def test_peak_memory_grows_linearly(route, workers, monkeypatch):
    """With blocks of a fixed size, everything a call holds is a constant (its blocks) plus
    arrays of O(n) (inputs' gradients, the output, two numbers per row, one accumulator per
    thread): peak(n) = a + b n, so peak(4 n) <= 4 peak(n). An n x n array would add c n^2
    and break that as soon as c n^2 > a / 4; at 4 n = 512 one such float64 array (2 MiB)
    alone would exceed the second bound fourfold."""
    monkeypatch.setattr(threads, "_threads", workers)
    _peak_bytes(64, route)  # first-call allocations (the pool, kernels) out of the way
    small, large = _peak_bytes(128, route), _peak_bytes(512, route)
    assert large <= 4 * small, f"peak {small} B at n = 128, {large} B at n = 512: more than linear"
    assert large < 512 * 512 * 8 / 4, f"peak {large} B at n = 512: an n x n array?"


@pytest.mark.parametrize("route", ROUTES)
def test_causal_skips_the_blocks_above_the_diagonal(route, rng, monkeypatch):
    """n = 8 in blocks of 2: 4 x 4 blocks, of which 10 are on or below the diagonal."""
    calls = []
    if route == "reading":
        real = Blocks.scores

        def counted(self, rows, cols):
            calls.append((rows, cols))
            return real(self, rows, cols)

        monkeypatch.setattr(Blocks, "scores", counted)
    else:  # the fast route's loops take their blocks from the plan (and form dot scores themselves)
        real = streaming_fast._Plan.chunks

        def counted(self, rows):
            chunks = real(self, rows)
            calls.extend((rows, cols) for cols in chunks)
            return chunks

        monkeypatch.setattr(streaming_fast._Plan, "chunks", counted)
    Q, K, V = (rng.standard_normal((8, d)) for d in (D, D, DV))
    out, cache = streaming_attention(Q, K, V, causal=True, block_size=2, reading=route == "reading")
    assert len(calls) == 10 and all(c.start <= r.stop - 1 for r, c in calls)
    dict(zip(GRAD_NAMES, streaming_attention_backward(rng.standard_normal(out.shape), cache)))
    assert len(calls) == 20


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_float32_stays_float32_and_close(act, route, rng):
    Q, K, V = (rng.standard_normal((B, H, 10, d)).astype(np.float32) for d in (D, D, DV))
    G = rng.standard_normal((B, H, 10, DV)).astype(np.float32)
    mask = _mask(rng, 10, 10)
    (out0, g0), (out1, g1) = _both(Q, K, V, G, route, activation=act, mask=mask, causal=True, block_size=3)
    assert out1.dtype == np.float32 and all(g1[k].dtype == np.float32 for k in "QKV")
    _assert_close(out1, out0, "out", tol=1e-5)
    for k in "QKV":
        _assert_close(g1[k], g0[k], f"d{k}", tol=1e-5)


def _identity_keys(scores, dtype):
    """Q = the scores, K = I: with the dot score, s = Q K^T reproduces any score rows exactly."""
    n_k = scores.shape[-1]
    return scores.astype(dtype), np.eye(n_k, dtype=dtype)


def _vjp_term_scale(name, s, u, mask):
    """The largest |u| (|rho'| + |ell'|) over the kept, finite entries: the size of Eq. 01.R5's terms."""
    act = activation(name)
    with np.errstate(all="ignore"):
        d = np.abs(act.drho(s)) + np.abs(act.dell(s))
    keep = np.isfinite(d) & (True if mask is None else mask)
    return float(np.max(np.where(keep, d, 0.0), initial=0.0)) * float(np.max(np.abs(u), initial=0.0))


def _finite_where_the_reference_is(Q, K, V, G, tol, **kw):
    """Run both; wherever the dense reference's result is finite, streaming's must be finite
    and close to it (at these scores linear's rho = s can overflow the reference's sums: those
    entries are the ones the reference does not handle). Returns how many entries were compared."""
    with np.errstate(all="ignore"):
        dense, stream = _both(Q, K, V, G, score="dot", **kw)
    compared = 0
    pairs = [("out", stream[0], dense[0])] + [(f"d{k}", stream[1][k], dense[1][k]) for k in "QKV"]
    for name, got, want in pairs:
        assert got.dtype == want.dtype, name
        ok = np.isfinite(want)
        assert np.all(np.isfinite(got[ok])), f"{name}: streaming {got[ok]}, reference {want[ok]}"
        if name == "out":
            _assert_close(np.where(ok, got, 0), np.where(ok, want, 0), name, tol=tol)
        elif name == "dQ":  # dQ = ds exactly, since K = I
            # Eq. 01.R5's two terms, u rho' p and ell' p <u, phi>, cancel where a score is tiny (ell' = 1/s
            # for cosformer): the rounding of <u, phi> (streaming: dY . Y) is amplified by |ell'|, so the
            # error is bounded relative to the terms, not to their difference
            terms = _vjp_term_scale(kw["activation"], Q @ K.T, G @ V.T, kw.get("mask"))
            _assert_close(np.where(ok, got, 0), np.where(ok, want, 0), name, tol=tol * max(1.0, terms))
        compared += int(ok.sum())
    return compared


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_extreme_scores_stay_finite(act, dtype, route, rng):
    """Scores at the dtype's limits, rescaled across blocks of one key: finite wherever
    the reference is, and equal to it (every entry for all but linear)."""
    big = np.finfo(dtype).max
    s = np.array([[-big, -big, 1.0], [big, -big, 0.0], [big, big, big], [-big, 0.0, big],
                  [1e-30, -big / 3, big / 2]])
    Q, K = _identity_keys(s, dtype)
    V = rng.uniform(-1, 1, (3, 2)).astype(dtype)
    G = rng.uniform(-1, 1, (5, 2)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    n = _finite_where_the_reference_is(Q, K, V, G, tol, route=route, activation=act, block_size=1)
    if act != "linear":
        assert n == 5 * 2 + 5 * 3 + 3 * 3 + 3 * 2, "the reference is finite everywhere here"


@pytest.mark.parametrize("act", ACTIVATIONS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_any_float32_scores_stay_finite(act, data):
    """Every finite float32 score row (up to the largest float32), random masks and block
    sizes: wherever the reference is finite, streaming is finite and close to it."""
    n_q, n_k = data.draw(st.integers(1, 4), label="n_q"), data.draw(st.integers(1, 5), label="n_k")
    top = float(np.finfo(np.float32).max)
    elems = st.floats(-top, top, allow_nan=False, allow_infinity=False, width=32)
    s = data.draw(hnp.arrays(np.float32, (n_q, n_k), elements=elems), label="s")
    mask = data.draw(hnp.arrays(bool, (n_q, n_k)), label="mask") if data.draw(st.booleans()) else None
    unit = st.floats(-1, 1, width=32)
    V = data.draw(hnp.arrays(np.float32, (n_k, 2), elements=unit), label="V")
    G = data.draw(hnp.arrays(np.float32, (n_q, 2), elements=unit), label="G")
    bs = data.draw(st.integers(1, n_k), label="block_size")
    route = data.draw(st.sampled_from(ROUTES), label="route")
    Q, K = _identity_keys(s, np.float32)
    _finite_where_the_reference_is(Q, K, V, G, _float32_tol(n_k, bs), route=route, activation=act,
                                   mask=mask, block_size=bs)


def _float32_tol(n_k, block_size):
    """An error bound for streaming against the dense reference in float32 at any finite score.

    Streaming forms each weight as exp(c (l - shift)) with l = log rho(s) up to L = log(max float32)
    = 88.7, where the dense reference divides rho(s) by a rescaled sum: exp's condition number at an
    argument x is |x|, so each weight carries a relative error of up to (L + 1) u, and each of the
    (blocks - 1) rescalings alpha = exp(c (m_old - m_new)) one more such factor. The output is a
    convex-like mix of such weights; the gradient (Eq. 01.R4) a difference of two such sums: twice.
    """
    u = np.finfo(np.float32).eps / 2
    L = float(np.log(np.finfo(np.float32).max))
    blocks = -(-n_k // block_size)
    return 2 * (L + 1) * (blocks + 1) * u


def test_device_arrays_run_the_same_code(xp, rng):
    """NumPy, the fake device (the CuPy branch on the CPU) and CuPy where present: same numbers."""
    Q, K, V = (rng.standard_normal((B, 9, d)) for d in (D, D, DV))
    G = rng.standard_normal((B, 9, DV))
    mask = rng.random((B, 9, 9)) < 0.7
    sc = score("neural")
    params = sc.init_params(D, rng)
    kw = dict(score=sc, activation="tanhmax", causal=True, block_size=4)
    out0, c0 = streaming_attention(Q, K, V, params=params, mask=mask, **kw)
    g0 = dict(zip(GRAD_NAMES, streaming_attention_backward(G, c0)))
    dev = {k: xp.array(v) for k, v in params.items()}
    out1, c1 = streaming_attention(xp.array(Q), xp.array(K), xp.array(V), params=dev, mask=xp.array(mask), **kw)
    g1 = dict(zip(GRAD_NAMES, streaming_attention_backward(xp.array(G), c1)))
    assert isinstance(out1, xp.ndarray) and isinstance(g1["Q"], xp.ndarray)
    _assert_close(out1, out0, "out")
    for k in "QKV":
        _assert_close(g1[k], g0[k], f"d{k}")
    for k in params:
        _assert_close(g1["params"][k], g0["params"][k], f"d{k}")


def test_errors_name_the_argument(rng):
    Q, K, V = (rng.standard_normal((6, d)) for d in (D, D, DV))
    with pytest.raises(ValueError, match=r"block_size: expected an int >= 1, got 0"):
        streaming_attention(Q, K, V, block_size=0)
    for bad in (2.5, True, "8"):
        with pytest.raises(TypeError, match=r"block_size: expected an int >= 1"):
            streaming_attention(Q, K, V, block_size=bad)
    with pytest.raises(TypeError, match="reading: expected True or False"):
        streaming_attention(Q, K, V, reading="yes")
    with pytest.raises(TypeError, match="causal: expected True or False"):
        streaming_attention(Q, K, V, causal="yes")
    with pytest.raises(ValueError, match="causal: needs as many queries as keys"):
        streaming_attention(Q[:4], K, V, causal=True)
    with pytest.raises(ValueError, match="causal: a per-token score"):
        streaming_attention(Q, K, V, score="self", causal=True)
    with pytest.raises(ValueError, match="mask: shape"):
        streaming_attention(Q, K, V, mask=np.ones((5, 6), bool))
    with pytest.raises(ValueError, match="name: unknown activation"):
        streaming_attention(Q, K, V, activation="nope")
    with pytest.raises(TypeError, match="Q: expected a floating-point array"):
        streaming_attention(Q.tolist(), K, V)
    out, cache = streaming_attention(Q, K, V)
    with pytest.raises(ValueError, match=r"grad_out: shape \(6, 1\) does not match the output's shape \(6, 2\)"):
        dict(zip(GRAD_NAMES, streaming_attention_backward(out[:, :1], cache)))
    with pytest.raises(TypeError, match="grad_out: expected a real floating dtype"):
        dict(zip(GRAD_NAMES, streaming_attention_backward(out.astype(int), cache)))


@pytest.mark.parametrize("route", ROUTES)
def test_large_finite_values_and_upstream_gradients_stay_finite_where_the_reference_is(route, rng):
    """Values near 4e307 summed block after block (block size 1), and an upstream gradient of 1e306
    summed over 2048 keys before the row's 1 / z: the fast route's unnormalised sums are bounded
    first, so wherever the dense reference is finite streaming is, and equal to it."""
    reading = route == "reading"
    Q, K = (rng.standard_normal((1, 8, 4)) for _ in range(2))
    V = np.full((1, 8, 4), 4e307)
    out = streaming_attention(Q, K, V, block_size=1, reading=reading)[0]
    np.testing.assert_allclose(out, attention(Q, K, V)[0], rtol=1e-12)
    n = 2048
    x = np.where(rng.random((1, n, 1)) < 0.5, -1.0, 1.0)
    Q = np.zeros((1, n, 1))
    G = np.full((1, n, 1), 1e306)
    want = attention_backward(G, attention(Q, x, x.copy())[1])
    got = streaming_attention_backward(G, streaming_attention(Q, x, x.copy(), reading=reading)[1])
    for g, g0, name in zip(got[:3], want[:3], "QKV"):
        assert np.isfinite(g0).all(), name
        np.testing.assert_allclose(g, g0, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(g0))), err_msg=f"d{name}")
