"""Tests for refattn.fast: the fast path equals the reference.

The fast path computes ``p`` by the split, the VJP by the factors of Eq. 01.R5,
and, on NumPy inputs large enough to be worth it, runs the same per-batch
code block by block on a thread pool. These tests check that both of its
routes (whole batch, and blocks forced on small shapes by ``force_blocks``)
compute what the reference :mod:`refattn.core.attention` computes, to 1e-13 in
float64, for every activation, score, mask and dtype; that the blocked route
really ran; and that the machinery under it (block sizes, BLAS thread
control, the pool, the gathered outputs, the lazily recomputed scores)
behaves as documented.
"""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from refattn import ACTIVATIONS, SCORES, activation, score
from refattn.core import attention as reference
from refattn.fast import AttentionCache, attention, attention_backward, set_blocking, threads
from refattn.fast.kernels import Generic, forward as kernel_forward, kernel, vjp_from

from tests.support import random_scores

GRAD_NAMES = ("Q", "K", "V", "params")  # attention_backward returns (dQ, dK, dV, dparams)

parallel = threads  # the module whose settings the tests below change (refattn.fast.threads)

B, H, N, D, DV = 2, 3, 5, 4, 3


@pytest.fixture
def force_blocks(monkeypatch):
    """Block every NumPy call with at least 2 slices, one slice per block; count the blocked calls."""
    monkeypatch.setattr(parallel, "MIN_BLOCKED_ENTRIES", 0)
    monkeypatch.setattr(parallel, "BLOCK_BYTES", 1)
    calls = []
    run = parallel.run_blocks

    def counting(fn, slices, size):
        calls.append((slices, size))
        return run(fn, slices, size)

    monkeypatch.setattr(parallel, "run_blocks", counting)
    return calls


def _inputs(rng, dtype=np.float64, n_q=N):
    Q = rng.standard_normal((B, H, n_q, D)).astype(dtype)
    K = rng.standard_normal((B, H, N, D)).astype(dtype)
    V = rng.standard_normal((B, H, N, DV)).astype(dtype)
    G = rng.standard_normal((B, H, n_q, DV)).astype(dtype)
    return Q, K, V, G


def _both_routes(Q, K, V, G, **kw):
    """(output, cache, gradients) from the reference, then from the fast path's
    whole-batch route, then from its blocked one."""
    out, cache = reference.attention(Q, K, V, **kw)
    res = [(out, cache, dict(zip(GRAD_NAMES, reference.attention_backward(G, cache))))]
    for blocking in (False, True):
        set_blocking(blocking)
        try:
            out, cache = attention(Q, K, V, **kw)
            res.append((out, cache, dict(zip(GRAD_NAMES, attention_backward(G, cache)))))
        finally:
            set_blocking(True)
    return res


def _assert_close(a, b, dtype, what):
    tol = 1e-13 if dtype == np.float64 else 1e-5
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} vs {b.dtype}"
    assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max()), err_msg=what)


MASKINGS = ["none", "causal", "per-slice", "shared", "empty-row"]


def _mask(masking, rng):
    if masking in ("none", "causal"):
        return None
    if masking == "shared":
        return rng.random((N, N)) < 0.7  # one (n_q, n_k) mask for every slice
    mask = rng.random((B, H, N, N)) < 0.7
    if masking == "empty-row":
        mask[1, 2, 3] = False  # a row with no normaliser
    return mask


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("masking", MASKINGS)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_fast_routes_match_the_reference(act, masking, dtype, rng, force_blocks):
    Q, K, V, G = _inputs(rng, dtype)
    kw = dict(activation=act, mask=_mask(masking, rng), causal=masking == "causal")
    (o0, c0, g0), (o1, c1, g1), (o2, c2, g2) = _both_routes(Q, K, V, G, **kw)
    associative = act == "linear" and masking == "none"  # its backward never forms n x n arrays
    assert len(force_blocks) == 2 - associative, "forward and backward should each have run blocked"
    assert all(size == 1 for _, size in force_blocks)
    _assert_routes_match(act, dtype, (o0, c0, g0), (o1, c1, g1), (o2, c2, g2))


def _assert_routes_match(act, dtype, want, *routes):
    """Each route's output, cached weights, scores and p, and gradients equal the reference's."""
    o0, c0, g0 = want
    p0 = activation(act).p(c0["s"], mask=c0["mask"])
    for route, (o, c, g) in zip(("whole-batch", "blocked"), routes):
        _assert_close(o, o0, dtype, f"{route} out")
        for k in ("w", "s"):
            _assert_close(c[k], c0[k], dtype, f"{route} cache[{k!r}]")
        _assert_close(c["p"], p0, dtype, f"{route} cache['p']")
        for k in ("Q", "K", "V"):
            _assert_close(g[k], g0[k], dtype, f"{route} d{k}")


@pytest.fixture
def strips(monkeypatch):
    """Strips of two query rows on the causal route (``CAUSAL_ROWS`` is 128: n = 5 would be one strip)."""
    from refattn.fast import strips as causal_strips

    monkeypatch.setattr(causal_strips, "CAUSAL_ROWS", 2)


CAUSAL_MASKINGS = ["causal", "causal+shared", "causal+per-slice"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("masking", CAUSAL_MASKINGS)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_causal_strips_match_the_reference(act, masking, dtype, rng, force_blocks, strips):
    """Under ``causal`` the fast path computes strips of query rows against the keys up to
    their last row only; both routes (whole batch, blocked) give the reference's output,
    weights, p, scores (recomputed) and gradients."""
    Q, K, V, G = _inputs(rng, dtype)
    mask = None if masking == "causal" else _mask("shared" if masking == "causal+shared" else "empty-row", rng)
    want, *fast = _both_routes(Q, K, V, G, activation=act, mask=mask, causal=True)
    assert all(c["strips"] for _, c, _ in fast), "the strips did not run"
    _assert_routes_match(act, dtype, want, *fast)


@pytest.mark.parametrize("sc", [s for s in SCORES if score(s).pairwise])
def test_causal_strips_every_score(sc, rng, force_blocks, strips):
    """Every pairwise score in strips: cosFormer's positions and neural's per-pair weights by
    their slices of the strip, every parameter's gradient."""
    Q, K, V, G = _inputs(rng)
    s_obj = score(sc)
    for params in (s_obj.init_params(D, rng),) + ((s_obj.init_params(D, rng, per_pair=(N, N)),)
                                                  if sc == "neural" else ()):
        (o0, c0, g0), *fast = _both_routes(Q, K, V, G, score=s_obj, activation="tanhmax", params=params,
                                           causal=True)
        for o1, c1, g1 in fast:
            assert c1["strips"]
            _assert_close(o1, o0, np.float64, f"{sc} out")
            for k in "QKV":
                _assert_close(g1[k], g0[k], np.float64, f"{sc} d{k}")
            for k in params:
                _assert_close(g1["params"][k], g0["params"][k], np.float64, f"{sc} d{k}")


def test_causal_strips_compute_no_key_past_their_last_row(rng, monkeypatch, strips):
    """n = 5 in strips of 2: rows 0-1 see keys 0-1, rows 2-3 keys 0-3, row 4 keys 0-4."""
    from refattn.fast.blocks import Blocks

    calls = []
    real = Blocks.scores
    monkeypatch.setattr(Blocks, "scores", lambda self, rows, cols: calls.append((rows, cols)) or real(self, rows, cols))
    Q, K, V, _ = _inputs(rng)
    set_blocking(False)
    try:
        attention(Q, K, V, causal=True)
    finally:
        set_blocking(True)
    assert [(r.start, r.stop, c.start, c.stop) for r, c in calls] == [(0, 2, 0, 2), (2, 4, 0, 4), (4, 5, 0, 5)]


@pytest.mark.parametrize("sc", SCORES)
def test_blocked_route_every_score(sc, rng, force_blocks):
    """Per-token scores, the query-less global score and every parameter gradient
    (a sum over blocks) agree with the whole-batch route."""
    Q, K, V, G = _inputs(rng)
    s_obj = score(sc)
    params = s_obj.init_params(D, rng)
    if not s_obj.pairwise:
        G = G[..., :1, :]
    q = None if sc == "global" else Q
    (o0, c0, g0), *fast = _both_routes(q, K, V, G, score=s_obj, activation="tanhmax", params=params)
    assert len(force_blocks) == 2
    for o1, c1, g1 in fast:
        _assert_close(o1, o0, np.float64, "out")
        for k in ("K", "V") + (("Q",) if q is not None else ()):
            _assert_close(g1[k], g0[k], np.float64, f"d{k}")
        assert g1["Q"] is None if q is None else True
        assert set(g1["params"]) == set(params)
        for k in params:
            _assert_close(g1["params"][k], g0["params"][k], np.float64, f"d{k}")


def test_neural_per_pair_parameters_sum_over_blocks(rng, force_blocks):
    Q, K, V, G = _inputs(rng)
    s_obj = score("neural")
    params = s_obj.init_params(D, rng, per_pair=(N, N))
    (_, _, g0), *fast = _both_routes(Q, K, V, G, score=s_obj, activation="signexp", params=params)
    for _, _, g1 in fast:
        for k in params:
            _assert_close(g1["params"][k], g0["params"][k], np.float64, f"d{k}")


def test_blocked_route_is_the_default_for_large_numpy_inputs(rng, monkeypatch):
    calls = []
    run = parallel.run_blocks
    monkeypatch.setattr(parallel, "run_blocks", lambda fn, n, size: calls.append(size) or run(fn, n, size))
    Q, K, V, G = (rng.standard_normal((2, 4, 128, 8)) for _ in range(4))  # 8 x 128^2 = 2^17 entries
    dict(zip(GRAD_NAMES, attention_backward(G, attention(Q, K, V)[1])))
    assert len(calls) == 2
    small = [x[..., :8, :] for x in (Q, K, V, G)]  # 8 x 8^2 entries: not worth threads
    dict(zip(GRAD_NAMES, attention_backward(small[3], attention(*small[:3])[1])))
    assert len(calls) == 2


def test_autograd_and_whole_batch_inputs_are_not_blocked(rng, force_blocks):
    from autograd import grad

    Q, K, V, G = _inputs(rng)
    grad(lambda q: (attention(q, K, V, activation="tanhmax")[0] * G).sum())(Q)
    assert force_blocks == []  # traced arrays always run the reference
    parallel.set_blocking(False)
    try:
        attention(Q, K, V)
    finally:
        parallel.set_blocking(True)
    assert force_blocks == []
    attention(Q[0, 0], K[0, 0], V[0, 0])  # one slice: nothing to split
    assert force_blocks == []


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_gradients_of_the_blocked_route_against_autograd(act, masked, rng, force_blocks):
    from refattn.core.gradcheck import gradcheck

    Q, K, V, _ = _inputs(rng)
    mask = rng.random((B, H, N, N)) < 0.8 if masked else None

    def fun(Q, K, V):
        return attention(Q, K, V, activation=act, mask=mask, causal=masked)[0]

    def vjp(u, Q, K, V):
        g = dict(zip(GRAD_NAMES, attention_backward(u, attention(Q, K, V, activation=act, mask=mask, causal=masked)[1])))
        return {k: g[k] for k in "QKV"}

    gradcheck(fun, {"Q": Q, "K": K, "V": V}, vjp, name=f"blocked {act}", checks=("autograd",),
              rtol=1e-10, atol=1e-12).assert_ok()
    assert force_blocks  # the analytic side ran blocked


# --------------------------------------------------------------------------
# The cache: scores kept or recomputed
# --------------------------------------------------------------------------


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_cache_keeps_scores_only_where_the_backward_needs_them(act, rng, force_blocks):
    Q, K, V, _ = _inputs(rng)
    _, cache = attention(Q, K, V, activation=act)
    assert isinstance(cache, AttentionCache)
    assert ("s" in cache) == kernel(activation(act)).needs_s
    s = score("scaled_dot")(Q, K)
    np.testing.assert_allclose(cache.get("s"), s, rtol=1e-14)  # recomputed on demand
    assert "s" in cache
    np.testing.assert_array_equal(cache["s"], cache.get("s"))
    with pytest.raises(KeyError):
        cache["nothing"]
    assert cache.get("nothing", 7) == 7


def test_cache_recomputes_per_token_scores_with_their_query_axis(rng, force_blocks):
    Q, K, V, _ = _inputs(rng)
    _, cache = attention(Q, K, V, score="self", activation="softmax")
    assert "s" not in cache
    assert cache["s"].shape == (B, H, 1, N)


# --------------------------------------------------------------------------
# The machinery
# --------------------------------------------------------------------------


def test_block_size_rules(monkeypatch):
    monkeypatch.setattr(parallel, "num_threads", lambda: 2)
    n2 = 256 * 256
    assert parallel.block_size(16, n2, 8) == 1  # 512 KiB per slice: one slice a block
    assert parallel.block_size(16, 64 * 64, 8) == 8  # small slices: as many as fit, but every thread gets work
    assert parallel.block_size(1, n2, 8) is None  # one slice
    assert parallel.block_size(4, 64, 8) is None  # too little work
    parallel.set_blocking(False)
    try:
        assert parallel.block_size(16, n2, 8) is None
    finally:
        parallel.set_blocking(True)


def test_settings_are_validated(monkeypatch):
    with pytest.raises(ValueError, match="n: expected an int >= 1"):
        parallel.set_num_threads(0)
    with pytest.raises(TypeError, match="n: expected an int"):
        parallel.set_num_threads(2.0)
    with pytest.raises(TypeError, match="enabled: expected a bool"):
        parallel.set_blocking("yes")
    monkeypatch.setenv("REFATTN_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="REFATTN_NUM_THREADS: expected a positive integer"):
        parallel._default_threads()
    monkeypatch.setenv("REFATTN_NUM_THREADS", "0")
    with pytest.raises(ValueError, match="REFATTN_NUM_THREADS"):
        parallel._default_threads()
    monkeypatch.setenv("REFATTN_NUM_THREADS", "3")
    assert parallel._default_threads() == 3


def test_set_num_threads_one_runs_blocks_in_the_calling_thread(monkeypatch):
    import threading

    monkeypatch.setattr(parallel, "_threads", None)
    parallel.set_num_threads(1)
    names = parallel.run_blocks(lambda i, j: threading.current_thread().name, 6, 2)
    assert names == [threading.current_thread().name] * 3


def test_run_blocks_order_errors_context_and_nesting(monkeypatch):
    if parallel.blas_control() is None:
        pytest.skip("BLAS thread control unavailable: blocks run sequentially anyway")
    monkeypatch.setattr(parallel, "_threads", 2)
    assert parallel.run_blocks(lambda i, j: (i, j), 7, 3) == [(0, 3), (3, 6), (6, 7)]

    def fail(i, j):
        if i == 2:
            raise RuntimeError("block 2 failed")
        return i

    with pytest.raises(RuntimeError, match="block 2 failed"):
        parallel.run_blocks(fail, 4, 1)
    with np.errstate(over="raise"):  # the caller's numpy error state reaches the workers
        seen = parallel.run_blocks(lambda i, j: np.geterr()["over"], 4, 1)
    assert seen == ["raise"] * 4
    # a block that itself runs blocks runs them in its own thread (no deadlock on a full pool)
    nested = parallel.run_blocks(lambda i, j: parallel.run_blocks(lambda a, b: a, 4, 1), 4, 1)
    assert nested == [[0, 1, 2, 3]] * 4


def test_single_threaded_blas_restores_the_thread_count():
    blas = parallel.blas_control()
    if blas is None:
        pytest.skip("no OpenBLAS thread control in this NumPy")
    before = blas.get()
    with parallel.single_threaded_blas():
        assert blas.get() == 1
        with parallel.single_threaded_blas():  # re-entrant
            assert blas.get() == 1
        assert blas.get() == 1
    assert blas.get() == before


def test_gather_groups_outputs_of_one_shape_into_one_allocation():
    g = parallel.Gather(4)
    parts = {"out": np.ones((2, 3, 2)), "p": np.full((2, 3, 3), 2.0), "w": np.full((2, 3, 3), 3.0),
             "x32": np.ones((2, 3, 3), np.float32)}
    g.put(0, 2, parts)
    g.put(2, 4, {k: v + 10 for k, v in parts.items()})
    p, w, out, x32 = (g.get(k, (2, 2)) for k in ("p", "w", "out", "x32"))
    assert p.shape == (2, 2, 3, 3) and out.shape == (2, 2, 3, 2)
    assert x32.dtype == np.float32 and p.dtype == np.float64
    assert p.base is w.base and p.base.shape == (2, 4, 3, 3)  # rows of one (2, slices, ...) array
    assert not np.shares_memory(p, w) and not np.shares_memory(p, out)
    np.testing.assert_array_equal(p[0], 2.0)
    np.testing.assert_array_equal(p[1], 12.0)
    np.testing.assert_array_equal(w[1], 13.0)
    assert g.get("missing", (2, 2)) is None
    alone = parallel.Gather(2, alone=("out",))
    alone.put(0, 2, {"out": np.ones((2, 3, 3)), "p": np.ones((2, 3, 3))})
    assert not np.shares_memory(alone.get("out", (2,)).base, alone.get("p", (2,)).base)


def test_attention_output_does_not_share_memory_with_the_cache(rng, force_blocks):
    Q, K, V = (rng.standard_normal((B, H, N, N)) for _ in range(3))  # out and p have one shape
    out, cache = attention(Q, K, V, activation="tanhmax")
    assert force_blocks
    assert cache["p"].base is cache["w"].base  # p and w: one allocation
    assert not np.shares_memory(out, cache["p"]) and out.base is not cache["p"].base


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_pool_of_its_own(monkeypatch):
    """A child process inherits the pool object but not its threads; blocked
    calls there must not wait forever on workers that do not exist."""
    import os

    if parallel.blas_control() is None:
        pytest.skip("BLAS thread control unavailable: no pool is used")
    monkeypatch.setattr(parallel, "_threads", 2)
    assert parallel.run_blocks(lambda i, j: i, 4, 1) == [0, 1, 2, 3]  # the parent's pool exists
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the blocks ran, whatever happens
        code = 1
        try:
            code = 0 if parallel.run_blocks(lambda i, j: i, 4, 1) == [0, 1, 2, 3] else 1
        except BaseException:
            pass
        os._exit(code)
    import signal
    import time

    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung in run_blocks (a pool without threads)")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


# --------------------------------------------------------------------------
# The kernels: p by the split and the VJP by its factors equal the reference
# --------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_kernels_match_the_reference(name, axis, rng):
    act = activation(name)
    s = random_scores(name, (5, 7), rng)
    mask = rng.random(s.shape) < 0.8
    mask[:, 0] = mask[0] = True
    if axis == -1:
        mask[3] = False  # a row with no normaliser
    u = rng.standard_normal(s.shape)
    p, phi, aux = kernel_forward(act, s, axis, mask)
    np.testing.assert_allclose(p, act.p(s, axis, mask), rtol=1e-14, atol=1e-300)
    want = act(s, axis, mask)
    np.testing.assert_allclose(phi, want, rtol=1e-13, atol=1e-16 * np.abs(want).max())
    assert (aux is s) == kernel(act).needs_s
    ds = vjp_from(act, np, aux, p, u.copy(), axis, phi)
    np.testing.assert_allclose(ds, act.backward(u, act.forward(s, axis, mask)[1]), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", ACTIVATIONS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_kernels_match_the_reference_at_extremes(name, data):
    """Every finite float64 row up to 1e300: the split and the factors stay equal to the reference."""
    act = activation(name)
    s = data.draw(hnp.arrays(np.float64, (3, 4), elements=st.floats(-1e300, 1e300)), label="s")
    mask = data.draw(hnp.arrays(bool, s.shape), label="mask")
    u = data.draw(hnp.arrays(np.float64, s.shape, elements=st.floats(-1, 1)), label="u")
    p, phi, aux = kernel_forward(act, s, -1, mask)
    np.testing.assert_allclose(p, act.p(s, -1, mask), rtol=1e-12, atol=1e-300)
    want = act(s, -1, mask)
    np.testing.assert_allclose(phi, want, rtol=1e-12, atol=1e-15 * max(1.0, float(np.abs(want).max())))
    ds = vjp_from(act, np, aux, p, u.copy(), -1, phi)
    want = act.backward(u, act.forward(s, -1, mask)[1])
    # Both evaluate ds = u A - B <u, phi> (Eq. 01.R5), the reference as two products and a difference,
    # the kernel sometimes as A (u - <u, phi>): where u_j is close to <u, phi> the two differ by the
    # rounding of the cancelling terms, at most a few u_r (|u_j A_j| + |B_j <u, phi>|), not of ds itself.
    with np.errstate(over="ignore", divide="ignore"):  # as vjp_from runs the factors
        A, B = kernel(act).factors(aux, p, phi)
        terms = np.abs(u * A) + (0.0 if B is None else np.abs(B * np.sum(u * phi, axis=-1, keepdims=True)))
    tol = 1e-12 * max(1.0, float(np.abs(want).max())) + 16 * np.finfo(float).eps * terms
    assert np.all(np.abs(ds - want) <= tol), np.max(np.abs(ds - want) - tol)


def test_an_activation_the_kernels_do_not_know_runs_through_the_reference(rng):
    """A user's own activation gets the Generic kernel (the reference's own functions)."""
    from refattn.core.activations import TanhMax

    class MyTanhMax(TanhMax):
        name = "my_tanhmax"

    mine = MyTanhMax()
    assert type(kernel(mine)) is Generic and kernel(mine).needs_s
    Q, K, V, G = _inputs(rng)
    out, cache = attention(Q, K, V, activation=mine, causal=True)
    want, ref_cache = reference.attention(Q, K, V, activation="tanhmax", causal=True)
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-15)
    g, g0 = dict(zip(GRAD_NAMES, attention_backward(G, cache))), dict(zip(GRAD_NAMES, reference.attention_backward(G, ref_cache)))
    for k in "QKV":
        np.testing.assert_allclose(g[k], g0[k], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("sc", ["dot", "scaled_dot"])
def test_linear_backward_by_associativity(sc, rng, monkeypatch):
    """Unmasked linear attention with a dot score is Y = (beta / n) Q (K^T V); its
    backward (fast._backward_linear_dot) never forms an n x n array and agrees
    with the reference."""
    import refattn.fast as fast

    Q, K, V, _ = _inputs(rng)
    Q = Q[..., :3, :]
    G = rng.standard_normal((B, H, 3, V.shape[-1]))
    want = dict(zip(GRAD_NAMES, reference.attention_backward(G, reference.attention(Q, K, V, score=sc, activation="linear")[1])))
    _, cache = attention(Q, K, V, score=sc, activation="linear")

    def no_general_route(*a, **k):
        raise AssertionError("the general route ran")

    monkeypatch.setattr(fast, "vjp_from", no_general_route)
    got = dict(zip(GRAD_NAMES, attention_backward(G, cache)))
    for k in "QKV":
        np.testing.assert_allclose(got[k], want[k], rtol=1e-13, atol=1e-15)
    assert got["params"] == {}


def test_the_reference_loads_no_speed_module():
    """``import refattn`` and ``import refattn.core.attention`` load neither refattn.fast nor a thread pool.

    (NumPy itself imports ctypes, so that is no sign of the speed layer.)"""
    code = ("import sys, refattn, refattn.core.attention, refattn.core.gradcheck, refattn.check; "
            "print(sorted(m for m in sys.modules if m.startswith('refattn.fast') "
            "or m.startswith('concurrent.futures')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("top", [3.0, -10.0, -16.0, -17.0, -30.0, -800.0])
@pytest.mark.parametrize("masked", [False, True])
def test_sigmoid_kernel_on_both_sides_of_its_unshifted_route(top, masked, rng):
    """The normalised sigmoid's kernel skips the shift where every row has sigmoid(max s)
    >= 2^-24 (max s above about -16.6) and shifts otherwise; either way p, the weights
    and the VJP equal the reference, entry by entry down to 1e-300, including entries
    whose sigmoid underflows (s near -745 and below)."""
    act = activation("sigmoid")
    s = top - rng.random((4, 9)) * np.array([1.0, 5.0, 30.0, 800.0])[:, None]
    s[:, 0] = top
    mask = rng.random(s.shape) < 0.7 if masked else None
    if masked:
        mask[:, 0] = True
    u = rng.standard_normal(s.shape)
    p, phi, aux = kernel_forward(act, s.copy(), -1, mask, overwrite_s=True)
    np.testing.assert_allclose(p, act.p(s, -1, mask), rtol=1e-13, atol=1e-300)
    np.testing.assert_array_equal(phi, p)
    ds = vjp_from(act, np, aux, p, u.copy(), -1, phi)
    np.testing.assert_allclose(ds, act.backward(u, act.forward(s, -1, mask)[1]), rtol=1e-12, atol=1e-15)


def test_threads_calling_attention_while_another_changes_the_thread_count(rng, force_blocks, monkeypatch):
    """Four threads run the blocked fast path while the main thread keeps changing
    the pool's size: no call fails (a replaced pool is never shut down under a
    user), and every result equals the reference."""
    import threading

    if threads.blas_control() is None:
        pytest.skip("no BLAS thread control: blocks run in the calling thread, no pool")
    monkeypatch.setattr(threads, "_threads", threads._threads)  # restored after the test
    Q, K, V, G = _inputs(rng)
    out0, c0 = reference.attention(Q, K, V, activation="tanhmax", causal=True)
    g0 = dict(zip(GRAD_NAMES, reference.attention_backward(G, c0)))
    errors, running = [], []

    def worker():
        try:
            for _ in range(25):
                out, cache = attention(Q, K, V, activation="tanhmax", causal=True)
                g = dict(zip(GRAD_NAMES, attention_backward(G, cache)))
                _assert_close(out, out0, np.float64, "out")
                for k in "QKV":
                    _assert_close(g[k], g0[k], np.float64, f"d{k}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=worker) for _ in range(4)]
    for w in workers:
        w.start()
    n = 0
    while any(w.is_alive() for w in workers):
        threads.set_num_threads(1 + n % 3)
        n += 1
    for w in workers:
        w.join()
    assert not errors, repr(errors[0])
    assert n > 0 and len(force_blocks) >= 4 * 25 * 2  # every call ran blocked


# --------------------------------------------------------------------------
# One kernel per activation, named for the class it speeds up
# --------------------------------------------------------------------------


def _kernel_classes():
    """Every class of refattn.fast.kernels that is a kernel of one activation (``speeds_up`` set)."""
    import inspect  # noqa: PLC0415

    from refattn.fast import kernels  # noqa: PLC0415

    return [k for _, k in inspect.getmembers(kernels, inspect.isclass)
            if issubclass(k, kernels.Kernel) and k.speeds_up is not None]


def test_every_activation_has_a_kernel_and_every_kernel_an_activation():
    from refattn.fast.kernels import KERNELS  # noqa: PLC0415

    classes = {type(activation(name)) for name in ACTIVATIONS}
    kernels = _kernel_classes()
    assert {k.speeds_up for k in kernels} == classes, "a registered activation without a kernel, or a kernel " \
                                                      "of no registered activation"
    assert set(KERNELS) == classes and all(KERNELS[k.speeds_up] is k for k in kernels)
    for k in kernels:  # the name says which class it speeds up
        assert k.__name__ == k.speeds_up.__name__ + "Kernel", k.__name__
    for name in ACTIVATIONS:  # and kernel() hands it out
        assert type(kernel(activation(name))) is KERNELS[type(activation(name))]


def test_retain_freed_memory_answers_the_same_each_time():
    from refattn.fast.memory import retain_freed_memory  # noqa: PLC0415

    first = retain_freed_memory()
    assert isinstance(first, bool)
    assert retain_freed_memory() is first
