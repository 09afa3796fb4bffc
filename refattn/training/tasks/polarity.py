r"""Synthetic polarity sentences, and the token polarity gamma_e of TanhMax.

The data (TanhMax, section 5.1 and its supplement; Sun & Lu, 2020)
---------------------------------------------------------------------

The vocabulary has three groups of tokens: positive, negative and neutral.
A sentence of class ``c`` holds ``polar_per_sentence`` tokens of group ``c``
and ``neutral_per_sentence`` neutral tokens, in random order. The label is
therefore decided by the polar tokens alone; the neutral ones are noise that a
model has to learn to ignore. Three presets:

=================  ======================  ============  ======================
preset             vocabulary pos/neg/neu  sentences     per sentence
=================  ======================  ============  ======================
``TANHMAX_LARGE``  500 / 500 / 9,000       50,000        2 polar + 10 neutral,
                                                         drawn with replacement
``TANHMAX_SMALL``  100 / 100 / 1,800       10,000        as above
``SUN_LU``         50 / 50 / 1,000         12,000        2 distinct polar +
                                                         10 distinct neutral
=================  ======================  ============  ======================

TanhMax's public code splits 70 % / 30 % into train and test; Sun & Lu's
split is not given by the issue, and ``SUN_LU`` uses the same 70 / 30.

Choices made here (each one a decision, stated so it can be changed):

* **Token ids.** No id is reserved: every sentence has the same length, so
  nothing needs padding, and the vocabulary sizes are exactly the papers'
  (10,000 = 500 + 500 + 9,000). Ids ``[0, n_pos)`` are positive,
  ``[n_pos, n_pos + n_neg)`` negative, ``[n_pos + n_neg, vocab_size)``
  neutral. A model that gives every id its own embedding cannot see this
  layout; it only makes plots and tests easy to read.
* **Labels.** 1 = positive, 0 = negative. Classes are balanced *exactly*:
  ``n_per_class`` sentences of each, in random order (not labels drawn with
  p = 1/2, whose counts would fluctuate by about sqrt(n)/2).
* **Split.** Stratified: ``round(test_fraction * n_per_class)`` sentences of
  each class go to the test set, so both sets are exactly balanced too.
* **Replacement.** ``replace=True`` (TanhMax) draws each token of a sentence
  independently, so a token may occur twice in one sentence;
  ``replace=False`` (Sun & Lu's "distinct") draws the polar tokens without
  replacement from their group and the neutral tokens without replacement from
  theirs (Floyd's algorithm, one vectorised pass per position).

Token polarity (TanhMax, Eq. 11, after Sun & Lu 2020)
-------------------------------------------------------

    gamma_e = (f_e^+ - f_e^-) / (f_e^+ + f_e^-)

with ``f_e^+`` (``f_e^-``) the frequency of token ``e`` in positive
(negative) instances; :func:`token_polarity` computes it and
:func:`polarity_groups` applies the thresholds printed after Eq. 11. No
derivation file goes with this module: Eq. 11 is a definition, and the two
readings it leaves open are settled in the docstrings below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ...core.checks import check_int

__all__ = [
    "NEUTRAL",
    "POSITIVE",
    "NEGATIVE",
    "UNASSIGNED",
    "GROUP_NAMES",
    "PolarityConfig",
    "TANHMAX_LARGE",
    "TANHMAX_SMALL",
    "SUN_LU",
    "PolarityData",
    "make_polarity",
    "TokenPolarity",
    "token_polarity",
    "polarity_groups",
]

#: Group codes, used for the ground truth (:attr:`PolarityData.group`) and for
#: the groups Eq. 11's thresholds assign (:func:`polarity_groups`).
#: ``GROUP_NAMES[code]`` is the name.
NEUTRAL, POSITIVE, NEGATIVE, UNASSIGNED = 0, 1, 2, 3
GROUP_NAMES = ("neutral", "positive", "negative", "unassigned")


# --------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------




def _int_array(x, name, ndim):
    """``x`` as a NumPy integer array with ``ndim`` dimensions (else an error)."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array, got shape {arr.shape}")
    return arr


# --------------------------------------------------------------------------
# configuration and presets
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PolarityConfig:
    """How to generate a synthetic polarity data set.

    Parameters
    ----------
    n_pos, n_neg, n_neutral : int
        Vocabulary sizes of the three groups (each >= 1). The vocabulary size
        is their sum; no id is reserved (see the module docstring).
    polar_per_sentence, neutral_per_sentence : int
        Tokens per sentence from the label's polar group and from the neutral
        group (each >= 0, sum >= 1). The sentence length is their sum.
    n_per_class : int
        Sentences of each class (>= 1); ``2 * n_per_class`` in all.
    replace : bool
        True: every token of a sentence is drawn independently (TanhMax's
        "with replacement"). False: the polar tokens of a sentence are
        distinct, and so are its neutral tokens (Sun & Lu's "distinct"); this
        needs ``polar_per_sentence <= min(n_pos, n_neg)`` and
        ``neutral_per_sentence <= n_neutral``.
    test_fraction : float
        Fraction of each class put in the test set, in [0, 1).
    seed : int
        Seed of the generator :func:`make_polarity` uses when it is given
        none.

    Notes
    -----
    The configuration is frozen; derive variants with
    ``dataclasses.replace(TANHMAX_SMALL, n_per_class=200)``.
    """

    n_pos: int
    n_neg: int
    n_neutral: int
    polar_per_sentence: int = 2
    neutral_per_sentence: int = 10
    n_per_class: int = 5_000
    replace: bool = True
    test_fraction: float = 0.3
    seed: int = 0

    def __post_init__(self):
        for name in ("n_pos", "n_neg", "n_neutral", "n_per_class"):
            check_int(getattr(self, name), name, 1)
        for name in ("polar_per_sentence", "neutral_per_sentence", "seed"):
            check_int(getattr(self, name), name, 0)
        if self.sentence_length < 1:
            raise ValueError("polar_per_sentence, neutral_per_sentence: expected a sentence of at least "
                             "one token, got 0 + 0")
        if not isinstance(self.replace, (bool, np.bool_)):
            raise TypeError(f"replace: expected a bool, got {type(self.replace).__name__}")
        tf = self.test_fraction
        if isinstance(tf, (bool, np.bool_)) or not isinstance(tf, (int, float, np.integer, np.floating)):
            raise TypeError(f"test_fraction: expected a number in [0, 1), got {type(tf).__name__}")
        if not 0.0 <= tf < 1.0:
            raise ValueError(f"test_fraction: expected a number in [0, 1), got {tf}")
        if not self.replace:
            if self.polar_per_sentence > min(self.n_pos, self.n_neg):
                raise ValueError(
                    f"polar_per_sentence: with replace=False expected at most min(n_pos, n_neg) = "
                    f"{min(self.n_pos, self.n_neg)} distinct polar tokens, got {self.polar_per_sentence}")
            if self.neutral_per_sentence > self.n_neutral:
                raise ValueError(
                    f"neutral_per_sentence: with replace=False expected at most n_neutral = "
                    f"{self.n_neutral} distinct neutral tokens, got {self.neutral_per_sentence}")

    @property
    def vocab_size(self) -> int:
        """``n_pos + n_neg + n_neutral``."""
        return self.n_pos + self.n_neg + self.n_neutral

    @property
    def sentence_length(self) -> int:
        """``polar_per_sentence + neutral_per_sentence``."""
        return self.polar_per_sentence + self.neutral_per_sentence

    @property
    def n_sentences(self) -> int:
        """``2 * n_per_class``."""
        return 2 * self.n_per_class


#: TanhMax, large configuration: 50,000 sentences, vocabulary 10,000.
TANHMAX_LARGE = PolarityConfig(n_pos=500, n_neg=500, n_neutral=9_000, n_per_class=25_000)
#: TanhMax, small configuration: 10,000 sentences, vocabulary 2,000.
TANHMAX_SMALL = PolarityConfig(n_pos=100, n_neg=100, n_neutral=1_800, n_per_class=5_000)
#: Sun & Lu (2020): vocabulary 1,100, 6,000 sentences per class, distinct tokens.
SUN_LU = PolarityConfig(n_pos=50, n_neg=50, n_neutral=1_000, n_per_class=6_000, replace=False)


# --------------------------------------------------------------------------
# generation
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PolarityData:
    """A generated polarity data set (made by :func:`make_polarity`).

    Attributes
    ----------
    tokens : numpy.ndarray of int32, shape (n, L)
        Token ids, ``n = 2 * n_per_class`` sentences of ``L`` tokens.
    labels : numpy.ndarray of int64, shape (n,)
        1 for a positive sentence, 0 for a negative one.
    train_idx, test_idx : numpy.ndarray of int64
        Sorted, disjoint row indices whose union is ``range(n)``.
    group : numpy.ndarray of int8, shape (vocab_size,)
        Ground-truth group of every token id: :data:`POSITIVE`,
        :data:`NEGATIVE` or :data:`NEUTRAL` (names in :data:`GROUP_NAMES`).
    config : PolarityConfig
        The configuration the data was generated from.
    """

    tokens: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    test_idx: np.ndarray
    group: np.ndarray
    config: PolarityConfig = field(repr=False)

    @property
    def vocab_size(self) -> int:
        """Number of token ids, ``len(group)``."""
        return len(self.group)

    @property
    def train(self):
        """``(tokens, labels)`` of the training sentences."""
        return self.tokens[self.train_idx], self.labels[self.train_idx]

    @property
    def test(self):
        """``(tokens, labels)`` of the test sentences."""
        return self.tokens[self.test_idx], self.labels[self.test_idx]


def _distinct_draws(rng, m, k):
    """``k`` distinct integers in ``[0, m_r)`` for every row ``r``, uniformly.

    Floyd's algorithm, one column at a time for all rows together: for
    ``j = m - k, ..., m - 1`` draw ``t`` uniform on ``[0, j]``; keep ``t`` if
    the row does not hold it yet, else keep ``j`` (which it cannot hold yet).
    Every k-subset comes out with probability ``1 / C(m, k)``; the order
    within a row is not uniform, which the caller's position shuffle fixes.
    """
    out = np.empty((len(m), k), dtype=np.int64)  # (n, k)
    for step in range(k):
        j = m - k + step  # (n,)
        t = rng.integers(0, j + 1)  # (n,), uniform on [0, j]
        seen = np.any(out[:, :step] == t[:, None], axis=1)  # (n,)
        out[:, step] = np.where(seen, j, t)
    return out


def _draw(rng, m, k, replace):
    """``k`` token offsets in ``[0, m_r)`` for every row ``r``, shape ``(n, k)``."""
    if replace:
        return rng.integers(0, m[:, None], size=(len(m), k))
    return _distinct_draws(rng, m, k)


def make_polarity(config: PolarityConfig = TANHMAX_SMALL, rng=None) -> PolarityData:
    """Generate synthetic polarity sentences (TanhMax section 5.1; Sun & Lu 2020).

    A sentence with label ``y`` (1 positive, 0 negative) is
    ``polar_per_sentence`` tokens of group ``y`` plus ``neutral_per_sentence``
    neutral tokens, each drawn uniformly from its group (with or without
    replacement, ``config.replace``), then put in a uniformly random order.
    Exactly ``n_per_class`` sentences of each class, in random order, split
    per class into train and test (see the module docstring for the id layout
    and why). Fully vectorised; deterministic given the seed.

    Parameters
    ----------
    config : PolarityConfig
        What to generate; default :data:`TANHMAX_SMALL`.
    rng : numpy.random.Generator or int or None
        The random generator, or a seed for one; None uses ``config.seed``.

    Returns
    -------
    PolarityData
        Tokens ``(n, L)`` int32, labels ``(n,)``, train/test indices, and the
        ground-truth group of every token id.
    """
    if not isinstance(config, PolarityConfig):
        raise TypeError(f"config: expected a PolarityConfig, got {type(config).__name__}")
    if rng is None:
        rng = np.random.default_rng(config.seed)
    elif isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)):
        rng = np.random.default_rng(check_int(rng, "rng", 0))
    elif not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, an int seed or None, "
                        f"got {type(rng).__name__}")
    c = config
    n = c.n_sentences

    labels = rng.permutation(np.repeat(np.array([0, 1], dtype=np.int64), c.n_per_class))  # (n,)
    # polar ids: positive group starts at 0, negative at n_pos
    size = np.where(labels == 1, c.n_pos, c.n_neg)  # (n,)
    start = np.where(labels == 1, 0, c.n_pos)  # (n,)
    polar = start[:, None] + _draw(rng, size, c.polar_per_sentence, c.replace)  # (n, P)
    neutral = c.n_pos + c.n_neg + _draw(rng, np.full(n, c.n_neutral), c.neutral_per_sentence,
                                        c.replace)  # (n, N)
    tokens = rng.permuted(np.concatenate([polar, neutral], axis=1), axis=1).astype(np.int32)  # (n, L)

    test = []
    for y in (0, 1):
        rows = rng.permutation(np.flatnonzero(labels == y))
        test.append(rows[:math.floor(c.test_fraction * len(rows) + 0.5)])
    is_test = np.zeros(n, dtype=bool)
    is_test[np.concatenate(test)] = True

    group = np.full(c.vocab_size, NEUTRAL, dtype=np.int8)  # (V,)
    group[:c.n_pos] = POSITIVE
    group[c.n_pos:c.n_pos + c.n_neg] = NEGATIVE
    return PolarityData(tokens=tokens, labels=labels, train_idx=np.flatnonzero(~is_test),
                        test_idx=np.flatnonzero(is_test), group=group, config=c)


# --------------------------------------------------------------------------
# token polarity, TanhMax Eq. 11
# --------------------------------------------------------------------------


class TokenPolarity(NamedTuple):
    """What :func:`token_polarity` returns; unpacks as ``gamma, f_pos, f_neg``."""

    gamma: np.ndarray
    f_pos: np.ndarray
    f_neg: np.ndarray


def token_polarity(tokens, labels, vocab_size, *, mask=None, count="occurrences") -> TokenPolarity:
    """Token polarity ``gamma_e = (f_e^+ - f_e^-) / (f_e^+ + f_e^-)`` of every token id (TanhMax, Eq. 11).

    ``f_e^+`` (``f_e^-``) counts token ``e`` in the positive (negative)
    instances, ``tokens (n, L)`` with ``labels (n,)`` of 0/1, where ``mask``
    (False: padding) allows; ``gamma`` is NaN for a token never seen (0 / 0).
    ``count="occurrences"`` counts a token twice in a sentence twice, as the
    model sees it (Proposition 1's velocity sums over occurrences);
    ``"instances"`` once per sentence. Returns ``(gamma, f_pos, f_neg)``, each
    of length ``vocab_size``.
    """
    tokens = _int_array(tokens, "tokens", 2)
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iub":
        raise TypeError(f"labels: expected an integer or bool array of 0/1, got dtype {labels.dtype}")
    if labels.shape != tokens.shape[:1]:
        raise ValueError(f"labels: expected shape ({tokens.shape[0]},) to match tokens {tokens.shape}, "
                         f"got {labels.shape}")
    if not np.all((labels == 0) | (labels == 1)):
        raise ValueError("labels: expected only 0 (negative) and 1 (positive)")
    V = check_int(vocab_size, "vocab_size", 1)
    if mask is None:
        mask = np.ones(tokens.shape, dtype=bool)
    else:
        mask = np.asarray(mask)
        if mask.dtype != bool or mask.shape != tokens.shape:
            raise ValueError(f"mask: expected a bool array of shape {tokens.shape}, "
                             f"got {mask.dtype} with shape {mask.shape}")
    counted = tokens[mask]
    if counted.size and (counted.min() < 0 or counted.max() >= V):
        raise ValueError(f"tokens: expected ids in [0, vocab_size={V}), got values in "
                         f"[{counted.min()}, {counted.max()}]")
    if count == "instances":
        # keep the first occurrence of each id in each row; -1 marks padding
        t = np.sort(np.where(mask, tokens, -1), axis=1)  # (n, L)
        first = np.ones(t.shape, dtype=bool)
        first[:, 1:] = t[:, 1:] != t[:, :-1]
        mask = first & (t >= 0)
        tokens = t
    elif count != "occurrences":
        raise ValueError(f"count: expected 'occurrences' or 'instances', got {count!r}")
    positive = np.broadcast_to(labels[:, None] == 1, tokens.shape)  # (n, L)
    f_pos = np.bincount(tokens[mask & positive], minlength=V).astype(np.int64)  # (V,)
    f_neg = np.bincount(tokens[mask & ~positive], minlength=V).astype(np.int64)  # (V,)
    total = f_pos + f_neg
    gamma = np.divide(f_pos - f_neg, total, out=np.full(V, np.nan), where=total > 0)  # (V,)
    return TokenPolarity(gamma, f_pos, f_neg)


def polarity_groups(gamma, f_pos, f_neg, *, closed_at_one=True):
    """The group of every token by the thresholds after TanhMax, Eq. 11 (``GROUP_NAMES[code]`` names it).

    positive: ``0.5 < gamma <= 1`` and ``f^+ > 5``; negative: ``-1 <= gamma <
    -0.5`` and ``f^- > 5``; neutral: ``-0.1 < gamma < 0.1`` and ``|f^+ - f^-| <
    5``; unassigned: the rest, unseen tokens (NaN) included. The paper prints
    open intervals at ``+-1``, which would leave out every token seen in one
    class only (which its Figure 2 colours as polar); ``closed_at_one=False``
    gives that literal reading.
    """
    gamma = np.asarray(gamma)
    if gamma.dtype.kind != "f" or gamma.ndim != 1:
        raise TypeError(f"gamma: expected a 1-D float array, got {gamma.dtype} with shape {gamma.shape}")
    seen = ~np.isnan(gamma)
    if np.any(np.abs(gamma[seen]) > 1):
        raise ValueError("gamma: expected values in [-1, 1] (or NaN for unseen tokens)")
    f_pos = _int_array(f_pos, "f_pos", 1)
    f_neg = _int_array(f_neg, "f_neg", 1)
    for name, f in (("f_pos", f_pos), ("f_neg", f_neg)):
        if f.shape != gamma.shape:
            raise ValueError(f"{name}: expected shape {gamma.shape} to match gamma, got {f.shape}")
        if np.any(f < 0):
            raise ValueError(f"{name}: expected non-negative counts")
    if not isinstance(closed_at_one, (bool, np.bool_)):
        raise TypeError(f"closed_at_one: expected a bool, got {type(closed_at_one).__name__}")
    g = np.where(seen, gamma, 0.0)  # NaN -> 0 so no comparison sees a NaN; unseen is masked below
    top = g <= 1.0 if closed_at_one else g < 1.0
    bottom = g >= -1.0 if closed_at_one else g > -1.0
    groups = np.full(gamma.shape, UNASSIGNED, dtype=np.int8)
    groups[seen & (np.abs(g) < 0.1) & (np.abs(f_pos - f_neg) < 5)] = NEUTRAL
    groups[seen & (g > 0.5) & top & (f_pos > 5)] = POSITIVE
    groups[seen & (g < -0.5) & bottom & (f_neg > 5)] = NEGATIVE
    return groups
