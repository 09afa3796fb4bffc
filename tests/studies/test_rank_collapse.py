"""Tests for refattn.studies.rank_collapse (TanhMax Fig. 4; Dong et al. 2021).

The exact residual is checked against brute force (a closed-form candidate
list in one dimension, a dense grid with local refinement in two and three),
against independent closed-form bounds, and on a case whose minimum sits at
an interior corner of the frontier, so that an algorithm returning only the
frontier's end points would fail. The split-precision forward pass is
checked against the plain one where both resolve the ratio and against a
400-digit ``decimal`` computation where only it does.
"""

import json
import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refattn import ACTIVATIONS, activation
from refattn.core.attention import attention
from refattn.studies import rank_collapse as rc


def run_rank_collapse(*, progress=None, **settings):
    """:func:`refattn.studies.rank_collapse.run_rank_collapse` with its settings written inline."""
    return rc.run_rank_collapse(rc.Settings(**settings), progress=progress)


def _F(X, xs):
    """sqrt(||X - 1 x^T||_1 ||X - 1 x^T||_inf) for each row x of xs (m, d), written anew here."""
    A = np.abs(X[None, :, :] - xs[:, None, :])  # (m, n, d)
    return np.sqrt(A.sum(axis=1).max(axis=1) * A.sum(axis=2).max(axis=1))  # (m,)


def _brute(X, grid=201, keep=12, rounds=40):
    """Dense grid over the box [min X, max X] per column (plus the column's own values, where
    the kinks are), then shrinking local grids around the best points."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    d = X.shape[1]
    axes = [np.union1d(np.linspace(lo[j], hi[j], grid), X[:, j]) for j in range(d)]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, d)
    vals = _F(X, pts)
    best = float(vals.min())
    local = 11 if d <= 2 else 7
    for c in pts[np.argsort(vals)[:keep]]:
        h = (hi - lo) / (grid - 1)
        for _ in range(rounds):
            loc = np.stack(np.meshgrid(*[np.union1d(np.linspace(c[j] - h[j], c[j] + h[j], local), X[:, j])
                                         for j in range(d)], indexing="ij"), axis=-1).reshape(-1, d)
            v = _F(X, loc)
            c = loc[np.argmin(v)]
            best = min(best, float(v.min()))
            h = h / 2.0
    return best


# --------------------------------------------------------------------------
# The norm and the code form, by hand
# --------------------------------------------------------------------------


def test_composite_norm_by_hand():
    A = np.array([[1.0, -2.0, 0.0], [3.0, 4.0, -1.0]])
    # column sums 4, 6, 1 -> ||A||_1 = 6; row sums 3, 8 -> ||A||_inf = 8
    assert rc.composite_norm(A) == pytest.approx(math.sqrt(48.0), rel=1e-15)


def test_code_ratio_by_hand():
    X = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 1.0]])
    # mean row (3, 3): res = [[-2, -1], [0, 3], [2, -2]]; column sums 4, 6; row sums 3, 3, 4
    np.testing.assert_allclose(rc.code_residual(X), [[-2, -1], [0, 3], [2, -2]], atol=1e-15)
    # ||X||_1 = max(9, 9) = 9, ||X||_inf = max(3, 9, 6) = 9
    assert rc.code_residual_ratio(X) == pytest.approx(math.sqrt(6.0 * 4.0) / 9.0, rel=1e-14)


def test_mean_is_not_the_exact_minimiser_by_hand():
    """d = 1, X = (0, 0, 0, 10): f1(x) = sum |X_i - x|, finf(x) = max |X_i - x|.
    Mean 2.5: f1 = 15, finf = 7.5, sqrt(112.5). Median 0 (or midrange 5): f1 finf = 100,
    and (10 + 2x)(10 - x) >= 100 on [0, 5], so the minimum is exactly 10."""
    X = np.array([[0.0], [0.0], [0.0], [10.0]])
    assert rc.composite_norm(rc.code_residual(X)) == pytest.approx(math.sqrt(112.5), rel=1e-14)
    value, info = rc.exact_residual(X, return_details=True)
    assert value == pytest.approx(10.0, rel=1e-12)
    assert _F(X, info["x"][None, :])[0] == pytest.approx(value, rel=1e-14)


# --------------------------------------------------------------------------
# The exact minimum against brute force and independent bounds
# --------------------------------------------------------------------------


def _one_dim_minimum(col):
    """Exact 1-D minimum: on each piece between the points X_i and the midrange both f1 and
    finf are affine, and a product of two positive affine functions has no interior
    minimum (derivations/16-rank-collapse.md, section 3), so a candidate list suffices."""
    cands = np.concatenate([col, [(col.min() + col.max()) / 2.0]])
    return float(_F(col[:, None], cands[:, None]).min())


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=9))
def test_exact_equals_the_one_dimensional_candidate_minimum(values):
    col = np.array(values)
    X = col[:, None]
    ref = _one_dim_minimum(col)
    got = rc.exact_residual(X)
    assert got == pytest.approx(ref, rel=1e-8, abs=1e-9 * (np.abs(col).max() + 1.0))


@pytest.mark.parametrize("case", range(12))
def test_exact_matches_brute_force_in_two_dimensions(case):
    rng = np.random.default_rng(100 + case)
    n = 2 + case % 5
    X = rng.standard_normal((n, 2)) * rng.uniform(0.2, 3.0, 2)
    if case % 3 == 0:
        X = np.round(2 * X) / 2  # ties: several tokens share a coordinate
    value, info = rc.exact_residual(X, return_details=True)
    brute = _brute(X)
    assert _F(X, info["x"][None, :])[0] == pytest.approx(value, rel=1e-12)  # achieved by its x
    assert value <= brute * (1 + 1e-9)  # no point beats the exact minimum
    assert brute <= value * (1 + 1e-5)  # and the refined search reaches it


def _interior_case():
    """A 6 x 3 matrix whose minimum is at an interior corner of the frontier (first found)."""
    rng = np.random.default_rng(7)
    for _ in range(400):
        X = rng.standard_normal((6, 3))
        value, info = rc.exact_residual(X, return_details=True)
        ends = min(math.sqrt(a * b) for a, b in (info["frontier"][0], info["frontier"][-1]))
        if ends > value * (1 + 1e-3):
            return X, value, ends
    raise AssertionError("no interior-corner case found")  # pragma: no cover


def test_exact_finds_an_interior_frontier_corner_brute_force_agrees():
    X, value, ends = _interior_case()
    brute = _brute(X, grid=41, keep=10, rounds=25)
    assert value <= brute * (1 + 1e-9)
    assert brute <= value * (1 + 1e-5)
    assert ends > brute * (1 + 1e-3)  # the end points alone would fail the two lines above


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 7), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_exact_lies_between_independent_bounds(n, d, seed):
    """mean-based >= exact >= sqrt(a* b_low) with a* = max_j sum_i |X_ij - median_j| (the minimum of
    f1, columns decoupled) and b_low = (1/n) sum_j sum_i |X_ij - median_j| <= finf (a row maximum
    is at least the row mean); also exact <= F at random points."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.1, 5.0, d)
    value, info = rc.exact_residual(X, return_details=True)
    dev = np.abs(X - np.median(X, axis=0)).sum(axis=0)  # (d,) column minima of sum_i |X_ij - x_j|
    a_star, b_low = dev.max(), dev.sum() / n
    assert value >= math.sqrt(a_star * b_low) * (1 - 1e-12)
    assert info["frontier"][0][0] == pytest.approx(a_star, rel=1e-9, abs=1e-12)  # the a-end of the frontier
    assert value <= rc.composite_norm(rc.code_residual(X)) * (1 + 1e-12)
    xs = X[rng.integers(0, n, (50, d)), np.arange(d)] + 0.1 * rng.standard_normal((50, d))
    assert value <= _F(X, xs).min() * (1 + 1e-12)


def test_invariances():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((7, 5))
    c = rng.standard_normal(5)
    shifted = X + c[None, :]
    np.testing.assert_allclose(rc.code_residual(shifted), rc.code_residual(X), atol=1e-14)
    assert rc.exact_residual(shifted) == pytest.approx(rc.exact_residual(X), rel=1e-10)
    for k in (3.0, -0.25, 1e-30, 1e30):
        assert rc.code_residual_ratio(k * X) == pytest.approx(rc.code_residual_ratio(X), rel=1e-13)
        assert rc.exact_residual(k * X) == pytest.approx(abs(k) * rc.exact_residual(X), rel=1e-10)
        assert rc.exact_residual_ratio(k * X) == pytest.approx(rc.exact_residual_ratio(X), rel=1e-10)
    perm_rows, perm_cols = rng.permutation(7), rng.permutation(5)
    assert rc.exact_residual(X[perm_rows][:, perm_cols]) == pytest.approx(rc.exact_residual(X), rel=1e-10)
    assert rc.exact_residual(np.tile(X[:1], (4, 1))) == 0.0  # identical rows: rank 1


# --------------------------------------------------------------------------
# Attention with row-stochastic weights cannot widen the residual
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["softmax", "sigmoid", "sigsoftmax", "expressive"])
def test_row_stochastic_attention_contracts_the_residual(name):
    """Y = P V with P >= 0 and P 1 = 1 (derivations/16-rank-collapse.md, Eq. 16.RC9):
    each column of Y lies in the range of that column of V; for any x,
    ||Y - 1x^T||_inf <= ||V - 1x^T||_inf and ||Y - 1x^T||_1 <= ||P||_1 ||V - 1x^T||_1, so
    res(Y) <= sqrt(||P||_1) res(V) <= sqrt(n) res(V) in the composite norm."""
    rng = np.random.default_rng(11)
    for _ in range(5):
        Q, K, V = (rng.standard_normal((6, 4)) * 2.0 for _ in range(3))
        Y, cache = attention(Q, K, V, activation=name)
        P = cache["w"]  # (6, 6)
        np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
        assert np.all(Y.max(axis=0) - Y.min(axis=0) <= (V.max(axis=0) - V.min(axis=0)) * (1 + 1e-12))
        _, iv = rc.exact_residual(V, return_details=True)
        _, iy = rc.exact_residual(Y, return_details=True)
        assert iy["frontier"][-1][1] <= iv["frontier"][-1][1] * (1 + 1e-10)  # min finf shrinks
        p1 = P.sum(axis=0).max()
        assert rc.exact_residual(Y) <= math.sqrt(p1) * rc.exact_residual(V) * (1 + 1e-10)


def test_tanhmax_weights_are_not_convex_and_leave_the_range():
    """The statement above needs P >= 0 with unit row sums: tanhmax's signed weights
    (sum |phi| < 1) can put an output outside the values' range."""
    s = np.array([[-3.0, 0.1]])
    V = np.array([[1.0], [2.0]])
    Y = activation("tanhmax")(s) @ V  # (1, 1)
    assert Y[0, 0] < V.min() - 0.5


@pytest.mark.parametrize("architecture", rc.ARCHITECTURES)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_rank_one_input_stays_rank_one(name, architecture):
    """Equal tokens stay equal, layer after layer. Up to rounding only: a BLAS may
    compute equal rows of a matrix product in different register blocks, with
    different summation orders (OpenBLAS's Haswell kernel does, for Y @ W1)."""
    x = np.random.default_rng(0).standard_normal(6)
    X = np.tile(x, (5, 1))  # (5, 6) = 1 x^T
    layers = rc.init_stack(architecture, 3, 6, 2, np.random.default_rng(1))
    for Y in rc.forward_stack(X, layers, name, architecture):
        assert rc.exact_residual(Y) <= 1e-14 * np.abs(Y).max()


def test_plain_stack_matches_a_hand_written_softmax_layer():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((5, 6))
    layers = rc.init_stack("ffn", 1, 6, 2, rng)
    L = layers[0]
    heads = []
    for h in range(2):
        Q, K, V = X @ L["Wq"][h], X @ L["Wk"][h], X @ L["Wv"][h]  # (5, 3)
        S = Q @ K.T / math.sqrt(3)
        W = np.exp(S - S.max(axis=1, keepdims=True))
        heads.append((W / W.sum(axis=1, keepdims=True)) @ V)
    ref = np.maximum(np.concatenate(heads, axis=1) @ L["Wo"] @ L["W1"], 0) @ L["W2"]
    np.testing.assert_allclose(rc.forward_stack(X, layers, "softmax", "ffn")[1], ref, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------
# The split-precision forward pass
# --------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", rc.ARCHITECTURES)
def test_split_forward_agrees_with_plain_where_both_resolve(architecture):
    rng = np.random.default_rng(2)
    layers = rc.init_stack(architecture, 5, 8, 2, rng)
    X = rng.standard_normal((6, 8))
    for name in ACTIVATIONS:
        plain = rc.residual_curves(rc.forward_stack(X, layers, name, architecture), exact=False)
        split = rc.residual_curves(rc.forward_stack_split(X, layers, name, architecture), exact=False)
        for a, b in zip(plain["log10_code"], split["log10_code"]):
            if math.isfinite(a) and a > -8:
                assert b == pytest.approx(a, abs=1e-6), (name, plain["log10_code"], split["log10_code"])


def _decimal_stack(X0, layers, name, architecture, prec=400):
    """The same stack in 400-digit decimal arithmetic, written out term by term."""
    def D(a):
        return [[Decimal(float(v)) for v in row] for row in np.atleast_2d(a)]

    def mm(A, B):
        return [[sum(A[i][k] * B[k][j] for k in range(len(B))) for j in range(len(B[0]))]
                for i in range(len(A))]

    one = Decimal(1)
    h = {"softmax": lambda s: s.exp(), "sigmoid": lambda s: one / (one + (-s).exp()),
         "expressive": lambda s: s * s / (one + s * s)}[name]
    out = []
    with localcontext() as ctx:
        ctx.prec = prec
        X = D(X0)
        for L in [None] + list(layers):
            if L is not None:
                H, _, dh = L["Wq"].shape
                beta = one / Decimal(dh).sqrt()
                cat = [[] for _ in X]
                for k in range(H):
                    Q, K, V = mm(X, D(L["Wq"][k])), mm(X, D(L["Wk"][k])), mm(X, D(L["Wv"][k]))
                    for i in range(len(X)):
                        w = [h(beta * sum(a * b for a, b in zip(Q[i], K[j]))) for j in range(len(X))]
                        z = sum(w)
                        cat[i] += [sum(w[j] * V[j][c] for j in range(len(X))) / z for c in range(dh)]
                X = mm(cat, D(L["Wo"]))
                if architecture == "ffn":
                    X = mm([[max(v, Decimal(0)) for v in r] for r in mm(X, D(L["W1"]))], D(L["W2"]))
            n, d = len(X), len(X[0])
            mean = [sum(X[i][j] for i in range(n)) / n for j in range(d)]
            R = [[X[i][j] - mean[j] for j in range(d)] for i in range(n)]

            def cn(A):
                a = max(sum(abs(A[i][j]) for i in range(n)) for j in range(d))
                b = max(sum(abs(A[i][j]) for j in range(d)) for i in range(n))
                return (a * b).sqrt()

            out.append(float((cn(R) / cn(X)).log10()))
    return out


@pytest.mark.parametrize("name,architecture,seed", [("softmax", "pure", 0), ("sigmoid", "pure", 1),
                                                    ("expressive", "ffn", 4), ("softmax", "ffn", 3)])
def test_split_forward_matches_400_digit_arithmetic(name, architecture, seed):
    layers = rc.init_stack(architecture, 5, 4, 2, np.random.default_rng(10 + seed))
    X = np.random.default_rng(20 + seed).standard_normal((4, 4))
    ref = _decimal_stack(X, layers, name, architecture)
    got = rc.residual_curves(rc.forward_stack_split(X, layers, name, architecture), exact=False)["log10_code"]
    plain = rc.residual_curves(rc.forward_stack(X, layers, name, architecture), exact=False)["log10_code"]
    assert min(ref) < -40  # deep enough that the plain float64 pass has lost it:
    assert max(abs(p - r) for p, r in zip(plain, ref)) > 10  # it stops near -16 or hits exact 0
    for r, g in zip(ref, got):
        assert g == pytest.approx(r, abs=1e-4 + 1e-7 * abs(r))


def test_pure_softmax_collapses_doubly_exponentially():
    """Dong et al.: res(SA(X)) <= C res(X)^3 for pure softmax attention, so once the
    ratio is small, log10 of it at least doubles (in magnitude) per layer."""
    layers = rc.init_stack("pure", 6, 8, 2, np.random.default_rng(0))
    X = np.random.default_rng(1).standard_normal((6, 8))
    logs = rc.residual_curves(rc.forward_stack_split(X, layers, "softmax", "pure"), exact=False)["log10_code"]
    deep = [v for v in logs if -300 < v < -3]
    assert len(deep) >= 2
    for a, b in zip(deep, deep[1:]):
        assert b < 2.0 * a


# --------------------------------------------------------------------------
# The experiment, reduced
# --------------------------------------------------------------------------


def test_run_rank_collapse_reduced():
    r = run_rank_collapse(activations=("softmax", "tanhmax"), depth=3, n=4, d=4, heads=2,
                             seeds=1, inputs=2, architectures=("pure", "skip"), seed=3)
    json.dumps(r, allow_nan=False)
    assert r["config"]["depth"] == 3 and r["config"]["activations"] == ["softmax", "tanhmax"]
    for a in ("softmax", "tanhmax"):
        for arch in ("pure", "skip"):
            c = r["curves"][a][arch]
            assert len(c["log10_code"]) == 4 and len(c["residual_exact"]) == 4
            for code, exact in zip(c["log10_code"], c["log10_exact"]):
                assert exact <= code + 1e-12
            # recompute the two samples by hand: same seeds as documented
            layers = rc.init_stack(arch, 3, 4, 2, np.random.default_rng([3, 0, rc.ARCHITECTURES.index(arch)]))
            samples = [rc.residual_curves(rc.forward_stack_split(
                np.random.default_rng([3, 0, k, 1]).standard_normal((4, 4)), layers, a, arch))
                for k in range(2)]
            mean = np.mean([s["log10_exact"] for s in samples], axis=0)
            np.testing.assert_allclose(c["log10_exact"], mean, rtol=1e-12)
            np.testing.assert_allclose(c["residual_exact"], 10 ** mean, rtol=1e-11)
    text = rc.report(r)
    assert "softmax" in text and "tanhmax" in text and "[skip]" in text
    fig = rc.plot(r)
    assert len(fig.axes) == 4
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_underflow_and_dead_stacks_are_reported():
    """Pure softmax attention reaches float64 underflow: reported as LOG10_ZERO / 'uflow'."""
    r = run_rank_collapse(activations=("softmax",), depth=8, n=6, d=8, heads=2, seeds=1, inputs=1,
                             architectures=("pure",), exact=False)
    c = r["curves"]["softmax"]["pure"]
    assert c["log10_code"][-1] == rc.LOG10_ZERO and c["n_zero"][-1] == 1
    assert c["residual_code"][-1] == 0.0
    assert "uflow" in rc.report(r)


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------


def test_bad_input():
    with pytest.raises(ValueError, match="X"):
        rc.exact_residual(np.ones(3))
    with pytest.raises(ValueError, match="finite"):
        rc.composite_norm(np.array([[1.0, np.nan]]))
    with pytest.raises(TypeError):
        rc.code_residual([[1, 2], [3, 4]])
    with pytest.raises(ValueError, match="tol"):
        rc.exact_residual(np.eye(2), tol=0.5)
    with pytest.raises(ValueError, match="architectures"):  # the settings' rules: init_stack trusts them
        rc.Settings(architectures=("deep",))
    with pytest.raises(ValueError, match="heads: expected a divisor of d = 5"):
        rc.Settings(d=5, heads=2)
    with pytest.raises(ValueError, match="weight_std"):
        rc.Settings(weight_std=-1.0)
    layers = rc.init_stack("pure", 2, 4, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="layers"):
        rc.forward_stack(np.ones((3, 4)), layers, "softmax", "ffn")
    with pytest.raises(ValueError, match="features"):
        rc.forward_stack(np.ones((3, 5)), layers, "softmax", "pure")
    with pytest.raises(ValueError, match="'softmin' is not one of"):
        run_rank_collapse(activations=("softmin",), depth=1, n=2, d=2, heads=1, seeds=1, inputs=1)
    with pytest.raises(ValueError, match="precision"):
        run_rank_collapse(depth=1, n=2, d=2, heads=1, seeds=1, inputs=1, precision="quad")
    with pytest.raises(ValueError, match="depth"):
        run_rank_collapse(depth=0)
    with pytest.raises(TypeError, match="seeds"):
        run_rank_collapse(seeds=1.5)
    with pytest.raises(ValueError, match="form"):
        rc.plot({"config": {}}, form="both ways")


def test_a_stack_whose_scores_overflow_continues_as_nan():
    """Linear attention grows cubically: once a layer's scores overflow float64 the stack's remaining
    layers are NaN, as forward_stack promises, not an error from the textbook's domain check."""
    rng = np.random.default_rng(0)
    X = 1e60 * rng.standard_normal((6, 4))
    layers = rc.init_stack("pure", 4, 4, 2, rng)
    out = rc.forward_stack(X, layers, "linear", "pure")
    assert np.isfinite(out[1]).all() and not np.isfinite(out[-1]).any()
