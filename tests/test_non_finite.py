"""Non-finite input, one rule on every attention path (derivation 01, section 4.4).

The rule: a NaN or an infinity in Q, K, V or a score parameter, or a score
that overflows in its product, never turns into a finite answer. It makes
NaN (or infinite) exactly the output rows it reaches, and leaves every other
row as it would be:

* a score of +-inf counts as NaN, and a NaN score fills its row (it enters
  the normaliser); a masked entry is ignored whatever its score;
* so a bad row of Q spoils that query's row; a bad row of K spoils the rows
  of the queries that see that key (not those for which it is masked, or
  above the diagonal under ``causal``);
* a bad value in V reaches its column of every row of its (batch, head)
  slice: the product W V multiplies it by every weight, and 0 inf is NaN.

Gradients: the fast path gives the reference's non-finite entries (or
more); streaming, which never computes the blocks through which the
reference's dense products spread a NaN, answers NaN for every gradient of a
slice that met one, whatever its block sizes.

The reference (refattn.core.attention), the fast path (refattn.fast) and
streaming attention (refattn.fast.streaming) must agree on which entries are
finite and on the finite values.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn import ACTIVATIONS, activation
from refattn import fast
from refattn.core.attention import attention, attention_backward
from refattn.fast.streaming import streaming_attention, streaming_attention_backward

B, N, D = 2, 6, 3
PATHS = {
    "reference": lambda *a, **k: attention(*a, **k),
    "fast": lambda *a, **k: fast.attention(*a, **k),
    "streaming": lambda *a, **k: streaming_attention(*a, block_size=4, **k),
}


def _inputs(rng, dtype=np.float64):
    Q, K, V = (rng.standard_normal((B, N, D)).astype(dtype) for _ in range(3))
    return Q, K, V


def _expected_bad_rows(site, i, keep):
    """Which output rows (of slice 0) the bad entry at row ``i`` of ``site`` reaches."""
    rows = np.zeros(N, bool)
    if site == "Q":
        rows[i] = True
    elif site == "K":
        rows = keep[:, i].copy()  # the queries that see key i
    else:
        rows[:] = True  # V: every row of the slice (0 inf = NaN)
    return rows


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("site", ["Q", "K", "V"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf], ids=["nan", "+inf", "-inf"])
@pytest.mark.parametrize("masking", ["none", "causal", "mask"])
def test_a_bad_entry_spoils_exactly_the_rows_it_reaches_on_every_path(name, site, value, masking, rng):
    Q, K, V = _inputs(rng)
    i = 3
    {"Q": Q, "K": K, "V": V}[site][0, i, 1] = value  # slice 0, row i
    mask = None
    keep = np.ones((N, N), bool)
    if masking == "causal":
        keep = np.tril(keep)
    elif masking == "mask":
        mask = rng.random((N, N)) < 0.6
        mask[:, 0] = True
        mask[:, i] = [j % 2 == 0 for j in range(N)]  # key i seen by some queries only
        keep = mask
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, 0 inf: NumPy says so, and NaN results
        outs = {p: f(Q, K, V, activation=name, mask=mask, causal=masking == "causal")[0] for p, f in PATHS.items()}
    want_bad = _expected_bad_rows(site, i, keep)
    want_entries = want_bad[:, None] & (np.arange(D) == 1 if site == "V" else np.ones(D, bool))  # V: its column
    for path, out in outs.items():
        bad = ~np.isfinite(out).all(axis=-1)  # (B, N) rows with a non-finite entry
        assert np.array_equal(bad[0], want_bad), (path, bad[0], want_bad)
        assert np.array_equal(~np.isfinite(out[0]), want_entries), (path, out[0])
        assert not bad[1].any(), path  # the other slice never sees it
        np.testing.assert_allclose(out[np.isfinite(out)], outs["reference"][np.isfinite(out)], rtol=1e-12,
                                   atol=1e-14, err_msg=path)


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("dtype, scale", [(np.float64, 1e160), (np.float32, 1e30)])
def test_scores_that_overflow_are_never_a_finite_answer(name, dtype, scale, rng):
    """Queries and keys near the square root of the largest float: q . k overflows although every input is
    finite. The textbook refuses such inputs in one line naming Q and K (its domain: every kept score
    finite); the speed routes, which the models train with, answer NaN in the rows whose scores overflowed
    (a diverging model is recorded as diverged), never a finite number."""
    Q, K, V = _inputs(rng, dtype)
    Q[0, 2] = scale * np.abs(Q[0, 2])
    K[0] = scale * np.abs(K[0])  # every score of query 2 (slice 0) overflows to +inf
    with pytest.raises(ValueError, match=rf"^Q, K: .* at index \(0, 2, 0\) .*overflows {np.dtype(dtype)}"):
        attention(Q, K, V, activation=name)
    with np.errstate(over="ignore", invalid="ignore"):
        outs = {p: f(Q, K, V, activation=name)[0] for p, f in PATHS.items() if p != "reference"}
    for path, out in outs.items():
        bad = ~np.isfinite(out).all(axis=-1)
        assert bad[0, 2], (path, out[0, 2])
        assert np.array_equal(bad, ~np.isfinite(outs["fast"]).all(axis=-1)), path
        assert np.isfinite(out[1]).all() and np.isfinite(np.delete(out[0], 2, axis=0)).all(), path


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("site", ["Q", "K", "V"])
@pytest.mark.parametrize("value", [np.nan, np.inf], ids=["nan", "inf"])
@pytest.mark.parametrize("causal", [False, True], ids=["mask", "mask+causal"])
def test_garbage_behind_the_mask_is_padding_on_every_path(name, site, value, causal, rng):
    """The key that no query sees (and, for Q, the query that sees no key) may hold anything: every path
    gives the output and gradients it gives with zeros there (0 NaN never arises)."""
    Q, K, V = _inputs(rng)
    mask = np.ones((N, N), bool)
    mask[:, 1] = False  # key 1: padding
    mask[4] = False  # query 4: padding
    G = rng.standard_normal((B, N, D))
    clean = {p: f(Q, K, V, activation=name, mask=mask, causal=causal) for p, f in PATHS.items()}
    {"Q": Q, "K": K, "V": V}[site][:, 4 if site == "Q" else 1] = value
    backward = {"reference": attention_backward, "fast": fast.attention_backward,
                "streaming": streaming_attention_backward}
    for path, f in PATHS.items():
        out, cache = f(Q, K, V, activation=name, mask=mask, causal=causal)
        out0, cache0 = clean[path]
        np.testing.assert_allclose(out, out0, rtol=1e-12, atol=1e-14, err_msg=path)
        for g, g0 in zip(backward[path](G, cache)[:3], backward[path](G, cache0)[:3]):
            assert np.isfinite(g).all(), path
            np.testing.assert_allclose(g, g0, rtol=1e-12, atol=1e-14, err_msg=path)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_the_activation_alone_follows_the_rule(name):
    act = activation(name)
    s = np.array([[np.nan, 1.0, 2.0], [0.5, -1.0, 2.0], [np.inf, 0.0, 1.0], [-np.inf, 0.0, 1.0]])
    with np.errstate(invalid="ignore"):
        phi = act(s)
    if name in ("linear", "relu"):  # normalised by the count n, not by the scores: the entry alone
        assert np.isnan(phi[[0, 2, 3], 0]).all() and np.isfinite(phi[[0, 2, 3], 1:]).all()
    else:  # the bad score enters the normaliser: the whole row, never an unnormalised one
        assert np.isnan(phi[[0, 2, 3]]).all()
    assert np.isfinite(phi[1]).all()
    mask = np.ones_like(s, bool)
    mask[:, 0] = False  # the bad scores masked: ignored
    np.testing.assert_allclose(act(s, mask=mask), act(np.where(mask, s, 0.0), mask=mask), rtol=0, atol=0)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(ACTIVATIONS), site=st.sampled_from("QKV"), i=st.integers(0, N - 1),
       value=st.sampled_from([np.nan, np.inf, -np.inf, 1e200]), causal=st.booleans(), seed=st.integers(0, 99))
def test_the_three_paths_agree_entry_by_entry(name, site, i, value, causal, seed):
    Q, K, V = _inputs(np.random.default_rng(seed))
    {"Q": Q, "K": K, "V": V}[site][1, i] = value  # a whole row of slice 1
    with np.errstate(over="ignore", invalid="ignore"):
        outs = [f(Q, K, V, activation=name, causal=causal)[0] for f in PATHS.values()]
    for out in outs[1:]:
        assert np.array_equal(np.isfinite(out), np.isfinite(outs[0]))
        np.testing.assert_allclose(out[np.isfinite(out)], outs[0][np.isfinite(out)], rtol=1e-12, atol=1e-14)


LONG = 300  # more rows than one strip of the dense causal route and one block of streaming's routes
ROUTES = {
    "fast": (fast.attention, fast.attention_backward),
    "streaming": (streaming_attention, streaming_attention_backward),
    "reading": (lambda *a, **k: streaming_attention(*a, reading=True, **k), streaming_attention_backward),
}


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("site", ["Q", "K", "V"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_long_rows_every_route_never_finite_where_the_reference_is_not(name, site, causal):
    """At n = 300, on each route's own blocks and strips, a NaN late in K or V (early in Q): the
    output has the reference's non-finite entries exactly and its finite values; every gradient is
    non-finite wherever the reference's is; streaming's are NaN throughout the slice that met the NaN
    (whatever the blocks) and the reference's in the other slice; the fast path's equal the
    reference's wherever those are finite."""
    rng = np.random.default_rng(7)
    Q, K, V = (rng.standard_normal((2, LONG, D)) for _ in range(3))
    G = rng.standard_normal((2, LONG, D))
    {"Q": Q, "K": K, "V": V}[site][0, 5 if site == "Q" else 290, 1] = np.nan
    with np.errstate(invalid="ignore", over="ignore"):
        out0, cache0 = attention(Q, K, V, activation=name, causal=causal)
        grads0 = attention_backward(G, cache0)[:3]
        for route, (forward, backward) in ROUTES.items():
            out, cache = forward(Q, K, V, activation=name, causal=causal)
            grads = backward(G, cache)[:3]
            assert np.array_equal(np.isfinite(out), np.isfinite(out0)), route
            np.testing.assert_allclose(out[np.isfinite(out)], out0[np.isfinite(out)], rtol=1e-9, atol=1e-12)
            for what, g, g0 in zip("QKV", grads, grads0):
                assert not (np.isfinite(g) & ~np.isfinite(g0)).any(), f"{route} d{what}: finite where the reference is not"
                both = np.isfinite(g) & np.isfinite(g0)
                np.testing.assert_allclose(g[both], g0[both], rtol=1e-9, atol=1e-12, err_msg=f"{route} d{what}")
                if route != "fast":
                    assert np.isnan(g[0]).all(), f"{route} d{what}: the slice that met the NaN"
                    assert np.array_equal(g[1], g0[1]) or np.allclose(g[1], g0[1], rtol=1e-9, atol=1e-12)
                    assert np.isfinite(g[1]).all(), f"{route} d{what}: the other slice"


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_mixed_dtypes_compute_in_the_promoted_dtype_as_the_reference(route, causal):
    """float32 values with float64 queries and keys (and other mixes, the upstream gradient's dtype
    included): the output and every gradient come back in the dtypes the reference gives, with its
    numbers to the rounding of the float32 products."""
    rng = np.random.default_rng(3)
    forward, backward = ROUTES[route]
    for dtypes in [(np.float64, np.float64, np.float32, np.float64), (np.float32, np.float64, np.float32, np.float32),
                   (np.float32, np.float32, np.float64, np.float32), (np.float32, np.float32, np.float32, np.float64)]:
        Q, K, V, G = (rng.standard_normal((2, LONG, D)).astype(t) for t in dtypes)
        out0, cache0 = attention(Q, K, V, causal=causal)
        grads0 = attention_backward(G, cache0)[:3]
        out, cache = forward(Q, K, V, causal=causal)
        grads = backward(G, cache)[:3]
        # the reference forms float32 queries' and keys' scores in float32 (a relative error of D u32 per
        # score, carried through weights of size <= 1 at most a few times); a route may form them in float64
        u = np.finfo(np.float32 if np.float32 in dtypes[:2] else np.float64).eps / 2
        tol = 16 * D * u
        assert out.dtype == out0.dtype, (dtypes, out.dtype)
        np.testing.assert_allclose(out, out0, rtol=tol, atol=tol)
        # the fast path returns the reference's dtypes; streaming computes everything, the upstream gradient
        # included, in their common promoted dtype and returns that (the reference's dV = W^T dY takes the
        # dtype of W and dY, so a float64 V can get a float32 gradient there)
        promoted = np.result_type(*dtypes)
        for what, g, g0 in zip("QKV", grads, grads0):
            assert g.dtype == (g0.dtype if route == "fast" else promoted), (dtypes, what, g.dtype, g0.dtype)
            np.testing.assert_allclose(g, g0, rtol=tol, atol=tol * float(np.max(np.abs(g0))), err_msg=f"d{what} {dtypes}")


def test_streaming_of_an_extended_precision_runs_the_reading_loop():
    """longdouble inputs: the fast route (float32 and float64 only) gives way to the reading loop."""
    rng = np.random.default_rng(4)
    Q, K, V = (rng.standard_normal((1, 8, 4)).astype(np.longdouble) for _ in range(3))
    out, cache = streaming_attention(Q, K, V)
    assert cache["route"] == "reading" and out.dtype == np.longdouble
    np.testing.assert_allclose(out, attention(Q, K, V)[0], rtol=1e-15, atol=1e-18)
