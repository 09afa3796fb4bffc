"""The statistics the studies compare their runs with: a two-sided rank test and its direction, and the
mean and spread over seeds a run reports (:func:`mean_std`, ``derivations/19-toy-lm.md``).

Seeds of two settings (EA against DPA, tanhmax against softmax) give two small
samples of a measure; :func:`rank_test` asks whether one tends to be larger
(Mann-Whitney's rank-sum statistic, by permutation), :func:`rank_shift` says in
which direction (``derivations/15-nt-experiments.md``, section 11).
"""

from __future__ import annotations

import numpy as np

__all__ = ["rank_test", "rank_shift", "mean_std"]


def rank_shift(a, b):
    """The mean rank of ``a`` minus that of ``b`` in the pooled sample (ties: their mean rank): positive
    when ``a`` tends to be larger, the direction :func:`rank_test` tests."""
    from scipy.stats import rankdata  # noqa: PLC0415  (the 'studies' extra)

    ranks = rankdata(np.concatenate([np.ravel(a), np.ravel(b)]).astype(float))
    n = np.size(a)
    return float(ranks[:n].mean() - ranks[n:].mean())


def rank_test(a, b, *, permutations=20000, seed=0):
    """Two-sided permutation test of Mann-Whitney's rank-sum statistic (``scipy.stats.permutation_test``):
    the pooled ranks (ties: their mean rank) split at random ``permutations`` times (``default_rng(seed)``),
    or in every way where there are no more splits than that; the p-value is the fraction of splits whose
    rank sum of ``a`` is at least as far from its mean as the observed one (counting the observed split
    when they are drawn at random, so never 0; Monte Carlo standard error at most ``0.5 / sqrt(permutations)``,
    0.0035 here; ``derivations/15-nt-experiments.md``, section 11). 1.0 when every value is tied."""
    from scipy.stats import permutation_test, rankdata  # noqa: PLC0415  (the 'studies' extra)

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("rank_test: expected two non-empty samples")
    ranks = rankdata(np.concatenate([a, b]))
    if np.all(ranks == ranks[0]):
        return 1.0
    expected = a.size * (ranks.size + 1) / 2.0  # the mean rank sum of a

    def distance(x, y, axis=-1):  # how far a's rank sum lies from its mean
        return np.abs(x.sum(axis=axis) - expected)

    return float(permutation_test((ranks[:a.size], ranks[a.size:]), distance, permutation_type="independent",
                                  alternative="greater", n_resamples=permutations, vectorized=True,
                                  rng=np.random.default_rng(seed)).pvalue)


def mean_std(values):
    """The mean and the standard deviation (``ddof = 1``; None for one value) of a run's per-seed values."""
    v = np.asarray(values, dtype=float)
    return float(v.mean()), (float(v.std(ddof=1)) if v.size > 1 else None)
