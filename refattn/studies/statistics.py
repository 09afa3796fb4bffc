"""The statistics the studies compare their runs with: a two-sided rank test and its direction.

Seeds of two settings (EA against DPA, tanhmax against softmax) give two small
samples of a measure; :func:`rank_test` asks whether one tends to be larger
(Mann-Whitney's rank-sum statistic, by permutation), :func:`rank_shift` says in
which direction (``derivations/15-nt-experiments.md``, section 11).
"""

from __future__ import annotations

import numpy as np

__all__ = ["rank_test", "rank_shift"]


def rank_shift(a, b):
    """The mean rank of ``a`` minus that of ``b`` in the pooled sample (ties: their mean rank): positive
    when ``a`` tends to be larger, the direction :func:`rank_test` tests."""
    from scipy.stats import rankdata  # noqa: PLC0415  (the 'studies' extra)

    ranks = rankdata(np.concatenate([np.ravel(a), np.ravel(b)]).astype(float))
    n = np.size(a)
    return float(ranks[:n].mean() - ranks[n:].mean())


def rank_test(a, b, *, permutations=20000, seed=0):
    """Two-sided permutation test of Mann-Whitney's U (``scipy.stats.mannwhitneyu``): exact over every
    split of the pooled sample where there are at most ``permutations`` of them, otherwise over that
    many random splits drawn from ``default_rng(seed)`` (Monte Carlo standard error at most
    ``0.5 / sqrt(permutations)``, 0.0035). 1.0 when every value is tied."""
    from scipy.stats import PermutationMethod, mannwhitneyu  # noqa: PLC0415  (the 'studies' extra)

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("rank_test: expected two non-empty samples")
    if np.all(a == a[0]) and np.all(b == a[0]):
        return 1.0
    method = PermutationMethod(n_resamples=permutations, rng=np.random.default_rng(seed))
    return float(mannwhitneyu(a, b, method=method).pvalue)
