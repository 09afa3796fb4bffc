"""Tests for refattn.training.tasks.polarity: synthetic polarity data and TanhMax Eq. 11.

The generator is checked against what its description implies and can be
computed independently: exact class and split counts, the polar/neutral make-up
of every sentence (read off the ground-truth groups), the probability that a
sentence drawn with replacement repeats a token (a closed form), and the
uniformity of distinct draws over all k-subsets. gamma_e is checked against a
hand example and a pure-Python count; the thresholds at their boundaries; the
neutral group's size against its hypergeometric expectation.
"""

import dataclasses
import math
from collections import Counter
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refattn.training.tasks.polarity import (
    GROUP_NAMES,
    NEGATIVE,
    NEUTRAL,
    POSITIVE,
    TANHMAX_LARGE,
    TANHMAX_SMALL,
    SUN_LU,
    UNASSIGNED,
    PolarityConfig,
    make_polarity,
    polarity_groups,
    token_polarity,
)

PRESETS = {"seed001_large": TANHMAX_LARGE, "seed001_small": TANHMAX_SMALL, "sun_lu": SUN_LU}


def test_group_names_match_codes():
    assert [GROUP_NAMES[c] for c in (NEUTRAL, POSITIVE, NEGATIVE, UNASSIGNED)] == \
        ["neutral", "positive", "negative", "unassigned"]


def test_presets_are_the_papers_numbers():
    # TanhMax's public code and Sun & Lu (2020), as given by the issue
    assert (TANHMAX_LARGE.n_pos, TANHMAX_LARGE.n_neg, TANHMAX_LARGE.n_neutral) == (500, 500, 9_000)
    assert TANHMAX_LARGE.vocab_size == 10_000 and TANHMAX_LARGE.n_sentences == 50_000
    assert (TANHMAX_SMALL.n_pos, TANHMAX_SMALL.n_neg, TANHMAX_SMALL.n_neutral) == (100, 100, 1_800)
    assert TANHMAX_SMALL.vocab_size == 2_000 and TANHMAX_SMALL.n_sentences == 10_000
    assert (SUN_LU.n_pos, SUN_LU.n_neg, SUN_LU.n_neutral) == (50, 50, 1_000)
    assert SUN_LU.vocab_size == 1_100 and SUN_LU.n_per_class == 6_000
    for c in PRESETS.values():
        assert (c.polar_per_sentence, c.neutral_per_sentence, c.sentence_length) == (2, 10, 12)
        assert c.test_fraction == 0.3
    assert TANHMAX_LARGE.replace and TANHMAX_SMALL.replace and not SUN_LU.replace


# --------------------------------------------------------------------------
# generation
# --------------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
def test_make_polarity_structure(preset):
    c = PRESETS[preset]
    d = make_polarity(c)  # (its speed is a benchmark's business, not a test's)
    n, L = c.n_sentences, c.sentence_length
    assert d.tokens.shape == (n, L) and d.tokens.dtype == np.int32
    assert d.labels.shape == (n,) and set(np.unique(d.labels)) == {0, 1}
    assert np.sum(d.labels == 1) == np.sum(d.labels == 0) == c.n_per_class  # exactly balanced
    assert d.vocab_size == c.vocab_size and d.group.shape == (c.vocab_size,)
    assert np.array_equal(np.bincount(d.group, minlength=3)[[NEUTRAL, POSITIVE, NEGATIVE]],
                          [c.n_neutral, c.n_pos, c.n_neg])
    # split: disjoint, covering, sorted, 30 % of each class
    assert np.array_equal(np.sort(np.concatenate([d.train_idx, d.test_idx])), np.arange(n))
    assert np.all(np.diff(d.train_idx) > 0) and np.all(np.diff(d.test_idx) > 0)
    n_test = round(c.test_fraction * c.n_per_class)
    assert np.sum(d.labels[d.test_idx] == 1) == np.sum(d.labels[d.test_idx] == 0) == n_test
    x, y = d.test
    assert np.array_equal(x, d.tokens[d.test_idx]) and np.array_equal(y, d.labels[d.test_idx])
    assert len(d.train[0]) == n - 2 * n_test
    # every sentence: polar tokens of its own class only, the rest neutral
    groups = d.group[d.tokens]  # (n, L)
    own = np.where(d.labels == 1, POSITIVE, NEGATIVE)[:, None]
    assert np.all(np.sum(groups == own, axis=1) == c.polar_per_sentence)
    assert np.all(np.sum(groups == NEUTRAL, axis=1) == c.neutral_per_sentence)
    if not c.replace:
        srt = np.sort(d.tokens, axis=1)
        assert not np.any(srt[:, 1:] == srt[:, :-1])  # distinct tokens in every sentence


def test_make_polarity_deterministic_and_seeded():
    a, b = make_polarity(TANHMAX_SMALL), make_polarity(TANHMAX_SMALL)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.test_idx, b.test_idx)
    c = make_polarity(TANHMAX_SMALL, rng=np.random.default_rng(TANHMAX_SMALL.seed))
    assert np.array_equal(a.tokens, c.tokens)
    assert np.array_equal(make_polarity(TANHMAX_SMALL, 7).tokens,
                          make_polarity(dataclasses.replace(TANHMAX_SMALL, seed=7)).tokens)
    assert not np.array_equal(a.tokens, make_polarity(TANHMAX_SMALL, 1).tokens)


def test_repeat_probability_with_replacement():
    # Closed form: a sentence repeats a token unless its 2 polar draws (from
    # 100) and its 10 neutral draws (from 1,800) are each all different.
    c = TANHMAX_SMALL
    p_distinct = math.prod(1 - i / c.n_pos for i in range(c.polar_per_sentence)) * \
        math.prod(1 - i / c.n_neutral for i in range(c.neutral_per_sentence))
    p = 1 - p_distinct  # ~0.035
    d = make_polarity(dataclasses.replace(c, n_per_class=20_000))
    srt = np.sort(d.tokens, axis=1)
    observed = np.mean(np.any(srt[:, 1:] == srt[:, :-1], axis=1))
    sd = math.sqrt(p * (1 - p) / len(srt))
    assert abs(observed - p) < 5 * sd, (observed, p)


def test_distinct_draws_are_uniform_over_subsets():
    # 3 distinct polar tokens out of 5 and no neutral ones: each of the
    # C(5, 3) = 10 subsets should come up with probability 1/10.
    c = PolarityConfig(n_pos=5, n_neg=5, n_neutral=1, polar_per_sentence=3, neutral_per_sentence=0,
                       n_per_class=10_000, replace=False, seed=3)
    d = make_polarity(c)
    x = d.tokens[d.labels == 0] - c.n_pos  # negative ids start at n_pos
    counts = Counter(tuple(sorted(r)) for r in x.tolist())
    assert set(counts) == set(combinations(range(5), 3))
    n, p = len(x), 0.1
    for subset, k in counts.items():
        assert abs(k - n * p) < 5 * math.sqrt(n * p * (1 - p)), (subset, k)
    # and the polar tokens sit at uniformly random positions
    c2 = PolarityConfig(n_pos=3, n_neg=3, n_neutral=50, polar_per_sentence=1, neutral_per_sentence=3,
                        n_per_class=8_000)
    d2 = make_polarity(c2)
    where = np.argmax(d2.group[d2.tokens] != NEUTRAL, axis=1)
    n = len(where)
    for k in np.bincount(where, minlength=4):
        assert abs(k - n / 4) < 5 * math.sqrt(n * 3 / 16)


# --------------------------------------------------------------------------
# token polarity, Eq. 11
# --------------------------------------------------------------------------


def test_token_polarity_hand_example():
    tokens = np.array([[0, 0, 1], [1, 2, 2]])
    labels = np.array([1, 0])
    g, fp, fn = token_polarity(tokens, labels, 4)
    assert fp.tolist() == [2, 1, 0, 0] and fn.tolist() == [0, 1, 2, 0]
    assert g[:3].tolist() == [1.0, 0.0, -1.0] and np.isnan(g[3])
    g, fp, fn = token_polarity(tokens, labels, 4, count="instances")
    assert fp.tolist() == [1, 1, 0, 0] and fn.tolist() == [0, 1, 1, 0]
    # a masked position is not counted
    mask = np.array([[True, False, True], [True, True, True]])
    assert token_polarity(tokens, labels, 4, mask=mask).f_pos.tolist() == [1, 1, 0, 0]


@pytest.mark.parametrize("count", ["occurrences", "instances"])
def test_token_polarity_matches_python_count(rng, count):
    n, L, V = 40, 7, 12
    tokens = rng.integers(0, V, size=(n, L))
    labels = rng.integers(0, 2, size=n)
    mask = rng.random((n, L)) < 0.8
    f = {1: Counter(), 0: Counter()}
    for row, keep, y in zip(tokens.tolist(), mask.tolist(), labels.tolist()):
        seen = [t for t, k in zip(row, keep) if k]
        f[y].update(set(seen) if count == "instances" else seen)
    gamma, fp, fn = token_polarity(tokens, labels, V, mask=mask, count=count)
    for e in range(V):
        assert (fp[e], fn[e]) == (f[1][e], f[0][e])
        tot = f[1][e] + f[0][e]
        if tot:
            assert gamma[e] == pytest.approx((f[1][e] - f[0][e]) / tot, rel=1e-15)
        else:
            assert np.isnan(gamma[e])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_token_polarity_properties(data):
    n = data.draw(st.integers(1, 8))
    L = data.draw(st.integers(1, 6))
    V = data.draw(st.integers(1, 10))
    tokens = np.array(data.draw(st.lists(st.lists(st.integers(0, V - 1), min_size=L, max_size=L),
                                         min_size=n, max_size=n)))
    labels = np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    gamma, fp, fn = token_polarity(tokens, labels, V)
    unseen = (fp + fn) == 0
    assert np.array_equal(np.isnan(gamma), unseen)  # NaN exactly for unseen tokens, no warning
    assert np.all(np.abs(gamma[~unseen]) <= 1)
    assert np.array_equal(fp + fn, np.bincount(tokens.ravel(), minlength=V))
    g2, fp2, fn2 = token_polarity(tokens, 1 - labels, V)  # swapping classes negates gamma
    assert np.array_equal(fp2, fn) and np.array_equal(fn2, fp)
    assert np.array_equal(g2[~unseen], -gamma[~unseen])
    _, ip, inn = token_polarity(tokens, labels, V, count="instances")
    assert np.all(ip <= fp) and np.all(inn <= fn)
    groups = polarity_groups(gamma, fp, fn)
    assert np.all(groups[unseen] == UNASSIGNED)
    assert np.all(fp[groups == POSITIVE] > 5) and np.all(gamma[groups == POSITIVE] > 0.5)
    assert np.all(fn[groups == NEGATIVE] > 5) and np.all(gamma[groups == NEGATIVE] < -0.5)
    assert np.all(np.abs(fp - fn)[groups == NEUTRAL] < 5)


def test_polarity_groups_at_the_thresholds():
    # (f+, f-) -> expected group; gamma from Eq. 11
    cases = [
        ((6, 0), POSITIVE),     # gamma = 1, f+ > 5
        ((5, 0), UNASSIGNED),   # gamma = 1 but f+ = 5 is not > 5
        ((7, 2), POSITIVE),     # gamma = 5/9 > 0.5
        ((6, 2), UNASSIGNED),   # gamma = 0.5 exactly: open interval
        ((0, 6), NEGATIVE),
        ((0, 5), UNASSIGNED),
        ((2, 6), UNASSIGNED),   # gamma = -0.5 exactly
        ((1, 1), NEUTRAL),      # gamma = 0, |f+ - f-| = 0
        ((25, 21), NEUTRAL),    # gamma = 4/46 < 0.1, difference 4
        ((26, 21), UNASSIGNED),  # difference 5 is not < 5 (and gamma = 5/47 > 0.1)
        ((28, 23), UNASSIGNED),  # difference 5 is not < 5, though gamma = 5/51 < 0.1
        ((27, 23), NEUTRAL),    # difference 4, gamma = 4/50 < 0.1
        ((11, 9), UNASSIGNED),  # gamma = 0.1 exactly: open interval
        ((0, 0), UNASSIGNED),   # unseen, gamma NaN
        ((2, 1), UNASSIGNED),   # gamma = 1/3: between the bands
    ]
    fp = np.array([c[0][0] for c in cases])
    fn = np.array([c[0][1] for c in cases])
    tot = fp + fn
    gamma = np.divide(fp - fn, tot, out=np.full(len(cases), np.nan), where=tot > 0)
    expected = [c[1] for c in cases]
    assert polarity_groups(gamma, fp, fn).tolist() == expected
    # the literal reading of "(0.5, 1)" drops every token seen in one class only
    literal = polarity_groups(gamma, fp, fn, closed_at_one=False).tolist()
    assert literal == [UNASSIGNED if abs(g) == 1 else e for g, e in zip(gamma, expected)]


@pytest.mark.parametrize("preset", ["seed001_small", "sun_lu"])
def test_groups_recover_ground_truth(preset):
    d = make_polarity(PRESETS[preset])
    x, y = d.train
    gamma, fp, fn = token_polarity(x, y, d.vocab_size)
    groups = polarity_groups(gamma, fp, fn)
    pos, neg = d.group == POSITIVE, d.group == NEGATIVE
    # polar tokens occur in their class only, so gamma = +-1 exactly
    assert np.all(gamma[pos] == 1.0) and np.all(gamma[neg] == -1.0)
    assert np.all(groups[pos & (fp > 5)] == POSITIVE) and np.any(pos & (fp > 5))
    assert np.all(groups[neg & (fn > 5)] == NEGATIVE) and np.any(neg & (fn > 5))
    # a polar token is never put in the other polar group, nor in the neutral one
    assert not np.any(np.isin(groups[pos], [NEGATIVE, NEUTRAL]))
    assert not np.any(np.isin(groups[neg], [POSITIVE, NEUTRAL]))
    # the literal open interval leaves every polar token unassigned
    literal = polarity_groups(gamma, fp, fn, closed_at_one=False)
    assert np.all(literal[pos | neg] == UNASSIGNED)


def _hypergeometric_pmf(total, good, draws, k):
    return math.comb(good, k) * math.comb(total - good, draws - k) / math.comb(total, draws)


@pytest.mark.parametrize("split", ["all", "train"])
def test_neutral_tokens_groups_match_hypergeometric_expectation(split):
    # A neutral token seen f times in all has its f occurrences spread over
    # the 2M neutral slots (M per class, classes exactly balanced) as a
    # uniformly random subset, so f+ ~ Hypergeometric(2M, M, f), and
    # f+ - f- = 2 f+ - f. Given f, Eq. 11's thresholds call it neutral iff
    # |2f+ - f| < 5 and < 0.1 f, and -- by chance -- positive iff
    # 2f+ - f > 0.5 f and f+ > 5 (negative likewise). Observed group sizes
    # must match the expectations, to within 4 standard deviations (+1 for
    # the near-empty chance groups). Chance "polar" neutral tokens do occur:
    # about one of each in TANHMAX_SMALL's training split.
    c = TANHMAX_SMALL
    d = make_polarity(c)
    x, y = (d.tokens, d.labels) if split == "all" else d.train
    gamma, fp, fn = token_polarity(x, y, d.vocab_size)
    groups = polarity_groups(gamma, fp, fn)
    M = int(np.sum(y == 1)) * c.neutral_per_sentence
    neutral = d.group == NEUTRAL
    rules = {
        NEUTRAL: lambda k, f: abs(2 * k - f) < 5 and abs(2 * k - f) < 0.1 * f,
        POSITIVE: lambda k, f: 2 * k - f > 0.5 * f and k > 5,
        NEGATIVE: lambda k, f: f - 2 * k > 0.5 * f and f - k > 5,
    }
    for code, rule in rules.items():
        probs = np.array([sum(_hypergeometric_pmf(2 * M, M, f, k) for k in range(f + 1) if rule(k, f))
                          for f in (fp + fn)[neutral].tolist()])
        expected, sd = probs.sum(), math.sqrt(np.sum(probs * (1 - probs)))
        observed = np.sum(groups[neutral] == code)
        assert abs(observed - expected) < 4 * sd + 1, (GROUP_NAMES[code], observed, expected, sd)


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------


@pytest.mark.parametrize("changes, err, match", [
    ({"n_pos": 0}, ValueError, "n_pos"),
    ({"n_neg": 2.0}, TypeError, "n_neg"),
    ({"n_neutral": True}, TypeError, "n_neutral"),
    ({"n_per_class": -1}, ValueError, "n_per_class"),
    ({"polar_per_sentence": -1}, ValueError, "polar_per_sentence"),
    ({"polar_per_sentence": 0, "neutral_per_sentence": 0}, ValueError, "sentence of at least one"),
    ({"replace": 1}, TypeError, "replace"),
    ({"test_fraction": 1.0}, ValueError, "test_fraction"),
    ({"test_fraction": "0.3"}, TypeError, "test_fraction"),
    ({"replace": False, "polar_per_sentence": 101}, ValueError, "polar_per_sentence"),
    ({"replace": False, "neutral_per_sentence": 1_801}, ValueError, "neutral_per_sentence"),
    ({"seed": -3}, ValueError, "seed"),
])
def test_config_rejects_bad_fields(changes, err, match):
    with pytest.raises(err, match=match):
        dataclasses.replace(TANHMAX_SMALL, **changes)


def test_make_polarity_rejects_bad_arguments():
    with pytest.raises(TypeError, match="config"):
        make_polarity({"n_pos": 5})
    with pytest.raises(TypeError, match="rng"):
        make_polarity(TANHMAX_SMALL, rng=1.5)
    with pytest.raises(ValueError, match="rng"):
        make_polarity(TANHMAX_SMALL, rng=-1)


def test_token_polarity_rejects_bad_input():
    t, y = np.array([[0, 1], [1, 2]]), np.array([1, 0])
    with pytest.raises(TypeError, match="tokens"):
        token_polarity(t.astype(float), y, 3)
    with pytest.raises(ValueError, match="tokens"):
        token_polarity(t[0], y, 3)
    with pytest.raises(ValueError, match="tokens: expected ids in"):
        token_polarity(t, y, 2)
    with pytest.raises(ValueError, match="labels: expected shape"):
        token_polarity(t, y[:1], 3)
    with pytest.raises(ValueError, match="labels: expected only 0"):
        token_polarity(t, np.array([1, 2]), 3)
    with pytest.raises(TypeError, match="labels"):
        token_polarity(t, np.array([1.0, 0.0]), 3)
    with pytest.raises(ValueError, match="vocab_size"):
        token_polarity(t, y, 0)
    with pytest.raises(ValueError, match="mask"):
        token_polarity(t, y, 3, mask=np.ones((2, 3), dtype=bool))
    with pytest.raises(ValueError, match="count"):
        token_polarity(t, y, 3, count="tokens")
    # ids outside the range are fine where the mask hides them (padding)
    assert token_polarity(np.array([[0, -1]]), np.array([1]), 1,
                          mask=np.array([[True, False]])).f_pos.tolist() == [1]


def test_polarity_groups_rejects_bad_input():
    g, fp, fn = np.array([1.0, 0.0]), np.array([6, 1]), np.array([0, 1])
    with pytest.raises(TypeError, match="gamma"):
        polarity_groups(np.array([1, 0]), fp, fn)
    with pytest.raises(ValueError, match="gamma: expected values in"):
        polarity_groups(np.array([1.5, 0.0]), fp, fn)
    with pytest.raises(ValueError, match="f_pos: expected shape"):
        polarity_groups(g, fp[:1], fn)
    with pytest.raises(ValueError, match="f_neg: expected non-negative"):
        polarity_groups(g, fp, np.array([0, -1]))
    with pytest.raises(TypeError, match="f_pos"):
        polarity_groups(g, fp.astype(float), fn)
    with pytest.raises(TypeError, match="closed_at_one"):
        polarity_groups(g, fp, fn, closed_at_one="yes")
