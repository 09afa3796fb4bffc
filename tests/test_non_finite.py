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
* a bad value in V reaches every row of its (batch, head) slice: the
  product W V multiplies it by every weight, and 0 inf is NaN.

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
from refattn.core.attention import attention
from refattn.fast.streaming import streaming_attention

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
    for path, out in outs.items():
        bad = ~np.isfinite(out).all(axis=-1)  # (B, N) rows with a non-finite entry
        assert np.array_equal(bad[0], want_bad), (path, bad[0], want_bad)
        assert not bad[1].any(), path  # the other slice never sees it
        np.testing.assert_allclose(out[np.isfinite(out)], outs["reference"][np.isfinite(out)], rtol=1e-12,
                                   atol=1e-14, err_msg=path)


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("dtype, scale", [(np.float64, 1e160), (np.float32, 1e30)])
def test_scores_that_overflow_are_never_a_finite_answer(name, dtype, scale, rng):
    """Queries and keys near the square root of the largest float: q . k overflows, and every
    path answers NaN in the rows whose scores overflowed, not a finite number."""
    Q, K, V = _inputs(rng, dtype)
    Q[0, 2] = scale * np.abs(Q[0, 2])
    K[0] = scale * np.abs(K[0])  # every score of query 2 (slice 0) overflows to +inf
    with np.errstate(over="ignore", invalid="ignore"):
        outs = {p: f(Q, K, V, activation=name)[0] for p, f in PATHS.items()}
    for path, out in outs.items():
        bad = ~np.isfinite(out).all(axis=-1)
        assert bad[0, 2], (path, out[0, 2])
        assert np.array_equal(bad, ~np.isfinite(outs["reference"]).all(axis=-1)), path


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
