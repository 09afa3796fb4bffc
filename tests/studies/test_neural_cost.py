"""Neural Attention's cost (NeuralAttn, sections 3.2 and 4.3, Tables 6-8):
refattn/studies/neural_cost.py and derivations/17-neural-attention-cost.md.

The three evaluations of the score matrix (concatenation, decomposition,
chunked) are checked against each other, against the library's traceable
forward and against a pair-by-pair loop that builds each [q'_i; k'_j]; the
chunked VJP against the hand-derived library VJP, autograd and central
differences; the tracemalloc peaks against the analytical byte counts."""

import json
import math
import tracemalloc

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn import score
from refattn.studies import neural_cost as nc
from refattn.core.gradcheck import gradcheck

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL


def run_neural_cost(*, progress=None, **settings):
    """:func:`refattn.studies.neural_cost.run_neural_cost` with its settings written inline."""
    return nc.run_neural_cost(nc.Settings(**settings), progress=progress)

NEURAL = {"tanh": score("neural"), "relu": score("neural", hidden="relu")}
ATOL = 1e-12  # float64 agreement of the three evaluations (scores are O(1))


def _problem(rng, *, qb=(2, 3), kb=(2, 3), n_q=9, n_k=7, d=6, d_prime=3, h=5, per_pair=False):
    q = rng.standard_normal(qb + (n_q, d))  # (..., n_q, d)
    k = rng.standard_normal(kb + (n_k, d))  # (..., n_k, d)
    P = NEURAL["tanh"].init_params(d, rng, d_prime=d_prime, hidden_size=h,
                                   per_pair=(n_q, n_k) if per_pair else None)
    return q, k, P


def _pairwise_loop(q, k, P, hidden):
    """NeuralAttn Eqs. 5-9 pair by pair: concatenate [q'_i; k'_j], apply the MLP (independent of the module)."""
    beta = 1.0 / math.sqrt(q.shape[-1])
    sigma = np.tanh if hidden == "tanh" else (lambda x: np.where(x > 0, x, 0.0))
    qp, kp = q @ P["Wq"].T, k @ P["Wk"].T
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    qp, kp = np.broadcast_to(qp, batch + qp.shape[-2:]), np.broadcast_to(kp, batch + kp.shape[-2:])
    per_pair = P["Whq"].ndim == 4
    S = np.zeros(batch + (q.shape[-2], k.shape[-2]))
    for idx in np.ndindex(*batch):
        for i in range(q.shape[-2]):
            for j in range(k.shape[-2]):
                pick = (lambda x: x[i, j]) if per_pair else (lambda x: x)
                Wh = np.hstack([pick(P["Whq"]), pick(P["Whk"])])  # (h, 2d')
                c = np.concatenate([qp[idx + (i,)], kp[idx + (j,)]])  # (2d',)  C[i, j], Eq. 7
                S[idx + (i, j)] = beta * (pick(P["wa"]) @ sigma(Wh @ c + pick(P["bh"])) + pick(P["ba"]))
    return S


# --------------------------------------------------------------------------
# The three evaluations agree
# --------------------------------------------------------------------------


@pytest.mark.parametrize("hidden", ["tanh", "relu"])
@pytest.mark.parametrize("per_pair", [False, True], ids=["shared", "per_pair"])
def test_concat_is_eqs_5_to_9_pair_by_pair(hidden, per_pair, rng):
    q, k, P = _problem(rng, qb=(2,), kb=(2,), n_q=5, n_k=4, per_pair=per_pair)
    S = nc.neural_scores_concat(q, k, P, hidden=hidden)
    np.testing.assert_allclose(S, _pairwise_loop(q, k, P, hidden), rtol=0, atol=ATOL)


@pytest.mark.parametrize("hidden", ["tanh", "relu"])
@pytest.mark.parametrize("per_pair", [False, True], ids=["shared", "per_pair"])
@pytest.mark.parametrize("chunk", [1, 2, 4, 5, 9, 50])  # 2, 4, 5 do not divide n_q = 9
def test_three_evaluations_and_library_agree(hidden, per_pair, chunk, rng):
    q, k, P = _problem(rng, per_pair=per_pair)
    a = nc.neural_scores_concat(q, k, P, hidden=hidden)
    b = nc.neural_scores_decomposed(q, k, P, hidden=hidden)
    c = nc.neural_scores_chunked(q, k, P, hidden=hidden, chunk=chunk)
    lib = NEURAL[hidden](q, k, P)
    assert a.shape == b.shape == c.shape == lib.shape == (2, 3, 9, 7)
    for name, x in (("decomposed", b), ("chunked", c), ("library", lib),
                    ("decomposed, inplace=False", nc.neural_scores_decomposed(q, k, P, hidden=hidden,
                                                                             inplace=False))):
        err = np.max(np.abs(x - a))
        assert err <= ATOL, f"{name} vs concat: max abs diff {err:.2e}"


def test_agreement_with_broadcast_batch_and_beta(rng):
    q, k, P = _problem(rng, qb=(1, 3), kb=(4, 1), n_q=6, n_k=8)
    a = nc.neural_scores_concat(q, k, P, beta=0.7)
    assert a.shape == (4, 3, 6, 8)
    for x in (nc.neural_scores_decomposed(q, k, P, beta=0.7), nc.neural_scores_chunked(q, k, P, beta=0.7, chunk=4),
              score("neural", beta=0.7)(q, k, P)):
        assert np.max(np.abs(x - a)) <= ATOL


@settings(max_examples=25, deadline=None)
@given(n_q=st.integers(1, 12), n_k=st.integers(1, 12), chunk=st.integers(1, 14), d_prime=st.integers(1, 5),
       h=st.integers(1, 6), seed=st.integers(0, 2 ** 16))
def test_chunked_equals_concat_for_any_sizes(n_q, n_k, chunk, d_prime, h, seed):
    rng = np.random.default_rng(seed)
    q, k, P = _problem(rng, qb=(2,), kb=(2,), n_q=n_q, n_k=n_k, d=4, d_prime=d_prime, h=h)
    a = nc.neural_scores_concat(q, k, P)
    c = nc.neural_scores_chunked(q, k, P, chunk=chunk)
    assert np.max(np.abs(c - a)) <= ATOL


def test_dot_scores_are_qkt_over_sqrt_d(rng):
    q, k = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 4, 8))
    np.testing.assert_allclose(nc.dot_scores(q, k), q @ np.swapaxes(k, -1, -2) / math.sqrt(8), rtol=1e-14)


# --------------------------------------------------------------------------
# The chunked VJP
# --------------------------------------------------------------------------


def _vjp_problem(q, k, P, hidden, chunk):
    names = list(P)

    def fun(q, k, **p):
        return NEURAL[hidden](q, k, {n: p[n] for n in names})

    def vjp(u, q, k, **p):
        dq, dk, dp = nc.neural_vjp_chunked(u, q, k, {n: p[n] for n in names}, chunk=chunk, hidden=hidden)
        return {"q": dq, "k": dk, **dp}

    return fun, {"q": q, "k": k, **P}, vjp


@pytest.mark.parametrize("hidden", ["tanh", "relu"])
@pytest.mark.parametrize("chunk", [1, 3, 4, 20])  # 3, 4 do not divide n_q = 7
def test_chunked_vjp_matches_library_vjp_and_autograd(hidden, chunk, rng):
    q, k, P = _problem(rng, qb=(1, 2), kb=(3, 2), n_q=7, n_k=6)  # q's batch broadcast: dq is summed back
    G = rng.standard_normal((3, 2, 7, 6))  # random cotangent, never all ones
    dq, dk, dP = nc.neural_vjp_chunked(G, q, k, P, chunk=chunk, hidden=hidden)
    rq, rk, rP = NEURAL[hidden].backward(G, NEURAL[hidden].forward(q, k, P)[1])
    assert dq.shape == q.shape and dk.shape == k.shape
    np.testing.assert_allclose(dq, rq, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dk, rk, rtol=1e-12, atol=1e-14)
    for name in P:
        assert np.shape(dP[name]) == np.shape(P[name]), name
        np.testing.assert_allclose(dP[name], rP[name], rtol=1e-12, atol=1e-14, err_msg=name)
    fun, args, vjp = _vjp_problem(q, k, P, hidden, chunk)
    res = gradcheck(fun, args, vjp, name=f"chunked vjp {hidden} chunk={chunk}", cotangent=G,
                    checks=("autograd",), rtol=RTOL_AUTOGRAD, atol=1e-14)
    res.assert_ok()
    assert {c.arg for c in res.comparisons} == set(args)


def test_chunked_vjp_central_differences(rng):
    q, k, P = _problem(rng, qb=(2,), kb=(2,), n_q=5, n_k=4, d=4, d_prime=2, h=3)
    fun, args, vjp = _vjp_problem(q, k, P, "tanh", 2)
    gradcheck(fun, args, vjp, name="chunked vjp, central", checks=("central",),
              rtol=RTOL_CENTRAL, atol=1e-10).assert_ok()


def test_chunked_vjp_autograd_of_a_loss_on_scores(rng):
    """A loss on the scores (softmax rows against a target): the chunked VJP of its gradient matches
    autograd's gradient with respect to every parameter."""
    q, k, P = _problem(rng, qb=(2,), kb=(2,), n_q=6, n_k=5)
    target = rng.dirichlet(np.ones(5), size=(2, 6))

    names = list(P)

    def loss(values):
        s = NEURAL["tanh"](q, k, dict(zip(names, values)))
        logp = s - anp.log(anp.sum(anp.exp(s), axis=-1, keepdims=True))
        return -anp.sum(target * logp)

    s = NEURAL["tanh"](q, k, P)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    _, _, dP = nc.neural_vjp_chunked(p - target, q, k, P, chunk=4)  # dL/ds = softmax - target
    ref = dict(zip(names, grad(loss)(tuple(P.values()))))
    for name in P:
        np.testing.assert_allclose(dP[name], ref[name], rtol=1e-10, atol=1e-13, err_msg=name)


# --------------------------------------------------------------------------
# Peak memory against the analytical count
# --------------------------------------------------------------------------

#: measured peak within [LOW, HIGH] x analytic + SLACK bytes. tracemalloc sees every NumPy
#: buffer; the slack is a constant that does not grow with n: NumPy's iterator buffers for a
#: broadcast ufunc (np.getbufsize() = 8192 elements per operand, 2 x 64 KiB in float64) and
#: the small Python objects made during the call
LOW, HIGH, SLACK = 0.99, 1.02, 192 * 1024


def _peak(method, n, *, d=8, d_prime=4, h=4, chunk=8, batch=(1, 2), seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(batch + (n, d))
    k = rng.standard_normal(batch + (n, d))
    P = NEURAL["tanh"].init_params(d, rng, d_prime=d_prime, hidden_size=h)
    peak, _ = nc.measure_peak(nc._call, method, q, k, P, chunk)
    analytic = nc.peak_bytes(method, n_q=n, d=d, d_prime=d_prime, hidden=h, chunk=chunk,
                             batch=int(np.prod(batch)))
    return peak, analytic


@pytest.mark.parametrize("method", nc.METHODS)
@pytest.mark.parametrize("n, d_prime", [(96, 4), (160, 16)])
def test_measured_peak_matches_analytic_count(method, n, d_prime):
    peak, analytic = _peak(method, n, d_prime=d_prime)
    assert LOW * analytic <= peak <= HIGH * analytic + SLACK, (method, n, d_prime, peak, analytic, peak / analytic)


def test_concat_peak_grows_like_n_squared_times_2d_prime():
    """(a) holds C (n^2 2d') and the pre-activation (n^2 h): with h small, doubling n
    quadruples the peak, and the peak follows 2d' + h."""
    h = 2
    p1, _ = _peak("concat", 64, d_prime=16, h=h)
    p2, _ = _peak("concat", 128, d_prime=16, h=h)
    assert 3.9 <= p2 / p1 <= 4.05, p2 / p1
    p_small, _ = _peak("concat", 128, d_prime=4, h=h)
    p_big, _ = _peak("concat", 128, d_prime=32, h=h)
    want = (2 * 32 + h) / (2 * 4 + h)  # 6.6: the n^2 (2d' + h) term dominates
    assert abs(p_big / p_small / want - 1) < 0.03, (p_big / p_small, want)
    # and the measured peak is at least the bytes of C itself
    assert p_big >= 8 * 2 * 128 * 128 * 2 * 32


def test_chunked_peak_beyond_the_output_is_linear_in_n():
    """(c)'s only quadratic array is S: what it holds beyond S grows like n (chunk x n x h)
    for a fixed chunk, while (b)'s grows like n^2."""
    def excess(method, n):
        peak, _ = _peak(method, n, h=8, chunk=8)
        return peak - 8 * 2 * n * n  # minus S (batch 2, float64)

    c1, c2 = excess("chunked", 128), excess("chunked", 256)
    b1, b2 = excess("decomposed", 128), excess("decomposed", 256)
    assert c2 / c1 < 2.2, c2 / c1  # linear (2) up to small terms
    assert b2 / b1 > 3.8, b2 / b1  # quadratic (4)
    assert c2 < 0.1 * b2


def test_measure_peak_counts_what_the_call_allocates_and_keeps_outer_tracing():
    peak, out = nc.measure_peak(np.ones, 10 ** 6)
    assert out.shape == (10 ** 6,) and 8e6 <= peak < 8e6 + 64 * 1024
    tracemalloc.start()
    try:
        nc.measure_peak(np.ones, 1000)
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()
    assert nc.measure_time(np.ones, 1000, repeats=2) > 0


# --------------------------------------------------------------------------
# The longest n within a budget
# --------------------------------------------------------------------------


@pytest.mark.parametrize("method", nc.METHODS)
@pytest.mark.parametrize("budget_mib", [1, 256])
def test_max_length_is_the_exact_threshold(method, budget_mib):
    sizes = {"d": 64, "d_prime": 16, "hidden": 16, "chunk": 64, "batch": 8}
    budget = budget_mib * 2 ** 20
    n = nc.max_length(method, budget, **sizes)
    assert n >= 1
    assert nc.peak_bytes(method, n_q=n, **sizes) <= budget < nc.peak_bytes(method, n_q=n + 1, **sizes)


def test_max_length_closed_form_for_dot_and_ordering():
    budget, d, m = 256 * 2 ** 20, 64, 1
    # 8 m (n^2 + n d) <= budget  <=>  n <= (-d + sqrt(d^2 + budget / 2)) / 2
    n_closed = math.floor((-d + math.sqrt(d * d + 4 * budget / (8 * m))) / 2)
    assert nc.max_length("dot", budget, d=d, batch=m) == n_closed
    sizes = {"d": d, "d_prime": 64, "hidden": 16, "chunk": 64, "batch": m}
    reach = {meth: nc.max_length(meth, budget, **sizes) for meth in nc.METHODS}
    # pair entries: concat 2d' + h = 144, library 3h = 48, decomposed h + 1 = 17, chunked 1, dot 1
    assert reach["concat"] < reach["library"] < reach["decomposed"] < reach["chunked"] < reach["dot"]
    assert reach["chunked"] > 10 * reach["concat"]  # C is 2d' = 128 entries per pair
    assert nc.max_length("dot", 8, d=d) == 0  # not even n = 1 fits 8 bytes


def test_paper_concat_check_arithmetic():
    chk = nc.paper_concat_check()
    row = next(r for r in chk["rows"] if r["table"] == "table6" and r["d_prime"] == 16)
    assert row["concat_gb"] == pytest.approx(4 * 8 * 1024 ** 2 * 32 / 1e9)
    assert row["extra_gb"] == pytest.approx(4.9 - 1.0)
    fit = chk["table6_fit"]
    r2 = next(r for r in chk["rows"] if r["table"] == "table6" and r["d_prime"] == 2)
    assert fit["alpha"] * r2["concat_gb"] + fit["beta_gb"] == pytest.approx(r2["extra_gb"])
    assert fit["alpha"] * row["concat_gb"] + fit["beta_gb"] == pytest.approx(row["extra_gb"])


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------


def test_bad_inputs(rng):
    q, k, P = _problem(rng)
    for bad in (0, -3):
        with pytest.raises(ValueError, match="chunk"):
            nc.neural_scores_chunked(q, k, P, chunk=bad)
    for bad in (2.0, "4", True):
        with pytest.raises(TypeError, match="chunk"):
            nc.neural_scores_chunked(q, k, P, chunk=bad)
    with pytest.raises(TypeError, match="q"):
        nc.neural_scores_concat(q.tolist(), k, P)
    with pytest.raises(TypeError, match="NumPy only"):
        grad(lambda x: anp.sum(nc.neural_scores_decomposed(x, k, P)))(q)
    with pytest.raises(ValueError, match="hidden"):
        nc.neural_scores_decomposed(q, k, P, hidden="gelu")
    with pytest.raises(TypeError, match="inplace"):
        nc.neural_scores_decomposed(q, k, P, inplace="yes")
    with pytest.raises(ValueError, match="Whq"):
        nc.neural_scores_concat(q, k, {**P, "Whq": P["Whq"][:, :1]})
    with pytest.raises(ValueError, match="missing"):
        nc.neural_scores_chunked(q, k, {n: v for n, v in P.items() if n != "wa"})
    G = rng.standard_normal((2, 3, 9, 7))
    with pytest.raises(ValueError, match="grad_s"):
        nc.neural_vjp_chunked(G[..., :6], q, k, P)
    q2, k2, P2 = _problem(rng, per_pair=True)
    with pytest.raises(ValueError, match="shared weights only"):
        nc.neural_vjp_chunked(G, q2, k2, P2)
    with pytest.raises(ValueError, match="method"):
        nc.peak_bytes("flash", n_q=4)
    with pytest.raises(ValueError, match="n_q"):
        nc.peak_bytes("dot", n_q=0)
    with pytest.raises(TypeError, match="budget_bytes"):
        nc.max_length("dot", 1.5e6)


def test_run_bad_options():
    with pytest.raises(ValueError, match="ns"):
        run_neural_cost(ns=())
    with pytest.raises(ValueError, match=r"ns: expected an integer >= 1, got 0"):
        run_neural_cost(ns=(8, 0))
    with pytest.raises(ValueError, match="budget_mib"):
        run_neural_cost(ns=(8,), budget_mib=(-1,))
    with pytest.raises(ValueError, match="max_mib"):
        run_neural_cost(ns=(8,), max_mib=0)
    with pytest.raises(TypeError, match="d_primes"):
        run_neural_cost(ns=(8,), d_primes=None)


# --------------------------------------------------------------------------
# The experiment, reduced
# --------------------------------------------------------------------------


@pytest.mark.slow
def test_run_neural_cost_reduced():
    res = run_neural_cost(ns=(24, 48), d_primes=(2, 8), batch=1, heads=2, d=8, hidden=4, chunk=5,
                             budget_mib=(1, 2), repeats=1, seed=3)
    json.dumps(res)  # JSON-able
    ag = res["agreement"]
    for layout in ("shared", "per_pair"):
        assert max(ag[layout].values()) <= ATOL, ag
    rows = res["rows"]
    assert len(rows) == 2 * (1 + 2 * 4)  # per n: dot + d' x (concat, decomposed, chunked, library)
    for r in rows:
        assert not r["skipped"] and r["seconds"] > 0
        assert LOW <= r["measured_over_analytic"] <= HIGH + SLACK / r["analytic_bytes"], r
        if r["method"] == "dot":
            assert r["memory_ratio"] == 1.0 and r["time_ratio"] == 1.0
        elif r["method"] != "decomposed":
            assert r["max_abs_diff"] <= ATOL, r
    big = [r for r in rows if r["n"] == 48]
    conc = {r["d_prime"]: r for r in big if r["method"] == "concat"}
    assert conc[8]["peak_bytes"] > conc[2]["peak_bytes"]  # C grows with d'
    assert [b["verified"] is not None for b in res["budgets"]] == [False, True, False, False]
    b = res["budgets"][1]  # the smallest budget at the largest d'
    assert b["budget_mib"] == 1 and b["d_prime"] == 8 and set(b["verified"]) == set(nc.METHODS)
    for v in b["verified"].values():  # at the edge of a 1 MiB budget, a few KiB of Python objects show
        assert v["peak_bytes"] <= 2 ** 20 + SLACK, v
    assert b["max_n"]["chunked"] > b["max_n"]["concat"]
    text = nc.report(res)
    assert "longest n within a memory budget" in text and "extra/C" in text
    fig = nc.plot(res)
    assert len(fig.axes) == 4
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_run_skips_what_would_exceed_max_mib_and_formats_paper_sizes():
    # n = 785 (NeuralAttn Tables 7-8): dot (4.8 MiB) and chunked (5.9 MiB) fit 8 MiB, the others do not
    res = run_neural_cost(ns=(785,), d_primes=(2,), d=8, hidden=2, chunk=64, budget_mib=(1,), repeats=1,
                             max_mib=8, verify_budget=False)
    rows = {r["method"]: r for r in res["rows"]}
    assert {m for m, r in rows.items() if not r["skipped"]} == {"dot", "chunked"}
    for m in ("concat", "decomposed", "library"):
        r = rows[m]
        assert r["peak_bytes"] is None and r["seconds"] is None and r["memory_ratio"] is None
        assert r["memory_ratio_analytic"] == r["analytic_bytes"] / rows["dot"]["analytic_bytes"] > 1
    assert res["budgets"][0]["verified"] is None
    text = nc.report(res)
    assert "Tables 7-8 form: n = 785" in text and "skipped" in text
    assert "1.57, 1.22" in text  # NeuralAttn Table 7: 1.1/0.7 GB and 6.6/5.4 ms beside (a)
