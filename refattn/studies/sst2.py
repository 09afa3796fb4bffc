r"""TanhMax on SST-2: dev accuracy (its Table 2) and the four sentences of its Figure 1.

What this module does
---------------------

1. **Data.** Reads GLUE's SST-2 ``train.tsv`` and ``dev.tsv``
   (:mod:`refattn.training.tasks.sst2`) from a folder found by :func:`resolve_data_dir`;
   never downloads, never copies. The vocabulary is built from the training
   split only, so a dev token never seen in training becomes ``<unk>``.
2. **Model and training.** TanhMax's one-attention classifier
   (:class:`refattn.training.models.polarity.PolarityClassifier`, score ``"self"``,
   E = 30, H = 10, dropout 0.5) for each activation, all seeds as one batched
   program through :func:`refattn.training.classifier.train_classifier`
   (so checkpoints and resume come from there). Training sentences longer
   than ``max_len`` tokens are truncated (0.34 % of GLUE's training phrases
   exceed 40) so that the padded batches stay small; dev sentences are never
   truncated.
3. **Table 2.** Dev accuracy per seed, its mean and standard deviation
   (``ddof = 1``), beside TanhMax's SST numbers (softmax 0.834, TanhMax
   0.872). ``derivations/14-sst2.md`` says why the two need not agree.
4. **Figure 1.** TanhMax shows four sentences coloured by attention weight.
   They are not in GLUE's dev or train split (checked; GLUE's labelled dev has
   872 sentences, and the paper calls them "test instances"). So for each one
   the closest dev sentence is chosen by an idf-weighted token overlap
   (:func:`match_sentences`), and the paper's own text is shown as well (the
   model can weigh any token sequence; tokens unseen in training are
   ``<unk>``). :func:`render_sentences` draws the weights: red for positive,
   blue for negative, darker for larger ``|w|``.

The sign of a TanhMax weight
----------------------------

Negating ``W_q, b_q`` (every ``self`` score flips) and ``w_o`` gives a model
that makes exactly the same predictions when the activation is odd
(``phi(-s) = -phi(s)``: tanhmax, signexp, linear), with every weight negated
(:meth:`refattn.training.models.polarity.PolarityClassifier.symmetric`;
``derivations/12-score-dynamics-experiment.md``, section 4). Red and blue
therefore mean nothing until one of the two twins is chosen. Here the twin is
the one in which weights go with the label on the dev split:

    c = sum_b (2 y_b - 1) * sum_i w_bi  >= 0                      (14.O1)

(:func:`orient_weights`); a seed with ``c < 0`` is shown through its twin,
whose weights are exactly ``-w``. For an activation that is not odd nothing
is flipped.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..core.activations import Activation
from ..core.activations import activation as _get_activation
from ..training.classifier import OPTIMISERS, classifier_memory, train_classifier
from ..training.models.polarity import SCORE_KINDS
from ..training.tasks.sst2 import UNK_ID, Vocabulary, load_sst2, tokenize
from ..core.checks import check_int
from ..training.runs import check_memory
from ..training.train import checkpoint_paths
from ..custom import activation_label, activation_record
from . import StudySettings, activation_option, max_memory, model_activation, option
from .helpers import DATA_HELP, nonempty, resolve_data_dir

__all__ = [
    "PAPER_TABLE2",
    "PAPER_FIG1",
    "DEFAULTS",
    "sst_tokenize",
    "idf_weights",
    "overlap_similarity",
    "match_sentences",
    "is_odd",
    "orient_weights",
    "weight_colour",
    "sentences_figure",
    "render_sentences",
    "render_figure1",
    "Settings",
    "run_sst2",
    "run",
    "report",
    "plot",
]

#: TanhMax, Table 2, column "SST" (test-set accuracy of its text classifier).
PAPER_TABLE2 = {"softmax": 0.834, "tanhmax": 0.872}

#: TanhMax, Figure 1, top to bottom. ``role`` follows the paper's body text
#: (the third row is the one "with semantic inflection", the fourth the
#: "narrative" one; the caption lists these two the other way round, and the
#: figure labels both "Neutral"). ``text`` is the sentence as printed in the
#: Softmax column (the TanhMax column prints "manely" for "inanely", an OCR slip).
PAPER_FIG1 = tuple({"role": role, "figure_label": label, "text": text} for role, label, text in (
    ("positive", "Positive",
     "A fine documentary extends a warm invitation into an unfamiliar world and allows "
     "implications of the journey to sink in unobtrusively."),
    ("negative", "Negative",
     "A dreary incoherent self indulgent mess of a movie in which a bunch of pompous "
     "windbags drone on inanely for two hours."),
    ("semantic inflection", "Neutral",
     "Those who love Cinema Paradiso will find the new scenes interesting, but others "
     "will find the movie disappointing."),
    ("neutral narrative", "Neutral",
     "A solid piece of journalistic work that draws a picture of a man for whom political "
     "expedience became a deadly foreign policy."),
))

#: The default run (``refattn sst2``): well under a minute of training on a
#: 2-core CPU. One epoch: GLUE's training phrases are overlapping pieces of
#: ~8.5k sentences, and dev accuracy falls after the first epoch (measured,
#: mean of 3 seeds, lr 1e-3: softmax 0.813 / 0.804 / 0.792 after epochs 1 / 2 / 3,
#: tanhmax 0.809 / 0.803 / 0.791; derivations/14-sst2.md, section 4).
DEFAULTS = {"activations": ("softmax", "tanhmax"), "seeds": 3, "score": "self", "epochs": 1,
            "batch_size": 100, "optimizer": "adam", "lr": 1e-3, "dropout": 0.5, "max_len": 40,
            "min_count": 1}

#: Figure 1's file, written by ``refattn sst2 --out DIR`` (and by :func:`run_sst2` with ``out``).
FIGURE = "sst2_fig1.png"

@dataclass
class Settings(StudySettings):
    """TanhMax's classifier on SST-2: dev accuracy over seeds beside its Table 2, and its Figure 1 (sentences
    coloured by signed attention weight)."""

    data: str | None = option(None, DATA_HELP)
    activations: tuple[str, ...] = activation_option(DEFAULTS["activations"], "comma-separated activations")
    seeds: int = option(DEFAULTS["seeds"], "number of seeds", low=1)
    first_seed: int = option(0, "the first seed: the runs use seeds FIRST_SEED, FIRST_SEED + 1, ...", low=0)
    epochs: int = option(DEFAULTS["epochs"], "epochs", low=1)
    score: str = option(DEFAULTS["score"], "score", choices=SCORE_KINDS)
    batch_size: int = option(DEFAULTS["batch_size"], "sentences per batch", low=1)
    optimizer: str = option(DEFAULTS["optimizer"], "optimiser", choices=tuple(OPTIMISERS))
    lr: float = option(DEFAULTS["lr"], "learning rate", positive=True)
    dropout: float = option(DEFAULTS["dropout"], "dropout rate, in [0, 1)", low=0, high=0.999)
    max_len: int | None = option(DEFAULTS["max_len"], "truncate training sentences to this many tokens", low=1)
    min_count: int = option(DEFAULTS["min_count"], "keep training tokens seen at least this often; rarer ones "
                                                   "become <unk>", low=1)
    train_limit: int | None = option(None, "train on a random subset of this many training sentences (numpy's "
                                           "default_rng(0), kept in file order), for quick runs", low=1)
    figure_seed: int | None = option(None, "the seed whose weights Figure 1 shows (default: the first)", low=0)
    checkpoint_dir: str | None = option(None, "folder for resumable checkpoints, one per activation",
                                        output="checkpoint_dir")
    max_memory: float | None = max_memory()
    out: str | None = option(None, "folder to write sst2_fig1.png into (render_figure1)", cli=False)

    def check(self):
        """Figure 1's seed is one of the run's."""
        last = self.first_seed + self.seeds - 1
        if self.figure_seed is not None and not self.first_seed <= self.figure_seed <= last:
            raise ValueError(f"figure_seed: expected one of the seeds {self.first_seed} .. {last}, "
                             f"got {self.figure_seed}")


# --------------------------------------------------------------------------
# Matching the paper's sentences to dev sentences
# --------------------------------------------------------------------------

# a word stem before "n't", "n't" itself, a clitic ('s, 've, ...), a word
# (hyphens inside kept), or one punctuation mark
_TOKEN = re.compile(r"\w+(?=n't\b)|n't\b|'\w+|\w+(?:-\w+)*|[^\w\s]")


def sst_tokenize(text):
    """Tokenise raw English text the way GLUE's SST-2 is tokenised.

    Lower-case; split off punctuation marks and clitics (``"don't"`` ->
    ``do n't``, ``"film's"`` -> ``film 's``); keep hyphenated words whole.
    Used for the paper's Figure 1 sentences, which are printed as ordinary
    text. No maths, no derivation.

    Parameters
    ----------
    text : str

    Returns
    -------
    list of str
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    return _TOKEN.findall(text.lower())


def idf_weights(sentences):
    """Inverse document frequency of every token: ``idf(t) = log((N + 1) / (df(t) + 1))``.

    ``N`` is the number of sentences, ``df(t)`` the number containing ``t``
    (smoothed by one, so an unseen token gets ``log(N + 1)``, the largest
    weight). Frequent words (``a``, ``the``, ``.``) get weights near 0, so
    they barely count in :func:`overlap_similarity`.

    Parameters
    ----------
    sentences : sequence of str
        Tokenised sentences (split on white space).

    Returns
    -------
    callable
        ``idf(token) -> float``.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences: expected a sequence of sentences, got a single str")
    sentences = list(sentences)
    df = Counter(t for s in sentences for t in set(tokenize(s)))
    n = len(sentences)

    def idf(token):
        return math.log((n + 1) / (df.get(token, 0) + 1))

    return idf


def overlap_similarity(a, b, weight):
    """Weighted Dice overlap of two token sets: ``2 w(A & B) / (w(A) + w(B))``.

    ``w(X) = sum of weight(t) over the distinct tokens t of X``. It lies in
    ``[0, 1]``; it is 1 when the two sets are equal (and not weightless) and
    0 when they share no weighted token; 0 when both are weightless.

    Parameters
    ----------
    a, b : sequence of str
        Tokens.
    weight : callable
        ``token -> float >= 0`` (e.g. :func:`idf_weights`).

    Returns
    -------
    float
    """
    A, B = set(a), set(b)
    # math.fsum is correctly rounded, so the sums do not depend on the sets' (hash) order
    wa, wb = math.fsum(weight(t) for t in A), math.fsum(weight(t) for t in B)
    if wa + wb <= 0.0:
        return 0.0
    return 2.0 * math.fsum(weight(t) for t in A & B) / (wa + wb)


def match_sentences(targets, candidates, weight):
    """For every target, the candidate with the largest :func:`overlap_similarity`.

    Ties go to the earliest candidate. A candidate equal to the target token
    for token is reported as ``exact``.

    Parameters
    ----------
    targets : sequence of list of str
        Tokenised targets (the paper's sentences).
    candidates : sequence of str
        The sentences to choose from (white-space tokenised).
    weight : callable
        Token weights, as for :func:`overlap_similarity`.

    Returns
    -------
    list of dict
        ``index`` (into ``candidates``), ``similarity``, ``exact``.
    """
    candidates = list(candidates)
    if not candidates:
        raise ValueError("candidates: expected at least one sentence to match against")
    sets = [tokenize(c) for c in candidates]
    out = []
    for target in targets:
        sims = [overlap_similarity(target, c, weight) for c in sets]
        best = int(np.argmax(sims))
        out.append({"index": best, "similarity": float(sims[best]), "exact": sets[best] == list(target)})
    return out


# --------------------------------------------------------------------------
# The sign of the weights
# --------------------------------------------------------------------------


def is_odd(name):
    """Whether activation ``name`` is odd, ``phi(-s) = -phi(s)``, tested on a fixed vector.

    True for tanhmax (sinh / cosh), signexp (sign e^|s| / e^|s|) and linear
    (s / n); only then does the sign symmetry (14.O1) of the module docstring
    hold.
    """
    s = np.array([-1.5, -0.3, 0.7, 2.1, 0.2])  # no zero, no symmetric pair
    act = name if isinstance(name, Activation) else _get_activation(name)  # an Activation of yours too
    return bool(np.allclose(act(-s), -act(s), rtol=1e-12, atol=1e-15))


def orient_weights(name, w, labels):
    """Choose the sign-symmetric twin in which weights go with the label, Eq. (14.O1).

    ``c_k = sum_b (2 y_b - 1) sum_i w_kbi`` for every seed ``k``; where the
    activation is odd and ``c_k < 0`` the seed's weights are replaced by
    ``-w`` (those of ``model.symmetric(params)``, which predicts the same).

    Parameters
    ----------
    name : str
        The activation.
    w : ndarray, shape (S, B, L)
        Attention weights (zero at padding).
    labels : ndarray, shape (B,)
        0 or 1.

    Returns
    -------
    sign : ndarray of float, shape (S,)
        +1 or -1: multiply seed ``k``'s weights by ``sign[k]``.
    c : ndarray, shape (S,)
        The statistic of (14.O1) before orientation.
    """
    w = np.asarray(w, dtype=float)
    y = 2.0 * np.asarray(labels, dtype=float) - 1.0  # (B,)
    if w.ndim != 3 or y.shape != (w.shape[1],):
        raise ValueError(f"w, labels: expected shapes (S, B, L) and (B,), got {w.shape} and {y.shape}")
    c = w.sum(axis=2) @ y  # (S,)
    sign = np.where((c < 0) & is_odd(name), -1.0, 1.0)
    return sign, c


# --------------------------------------------------------------------------
# Drawing coloured sentences
# --------------------------------------------------------------------------


def weight_colour(w, scale):
    """RGB background of a word with weight ``w``: white at 0, red for ``w > 0``, blue for ``w < 0``.

    With ``t = min(|w| / scale, 1)`` the colour is ``(1, 1 - t, 1 - t)`` for
    positive and ``(1 - t, 1 - t, 1)`` for negative weights: the depth of
    colour is proportional to ``|w|`` up to ``scale`` (TanhMax, Figure 1:
    "darkness proportional to the absolute value").

    Parameters
    ----------
    w : float
        Finite weight.
    scale : float
        Positive finite ``|w|`` that gets the full colour.

    Returns
    -------
    tuple of 3 floats in [0, 1]
    """
    if not (np.isfinite(w) and np.isfinite(scale) and scale > 0):
        raise ValueError(f"w, scale: expected a finite weight and a positive finite scale, got {w!r}, {scale!r}")
    t = min(abs(float(w)) / float(scale), 1.0)
    return (1.0, 1.0 - t, 1.0 - t) if w > 0 else (1.0 - t, 1.0 - t, 1.0)


def _check_rows(sentences, weights, row_labels):
    """Token lists and float weight arrays, checked against each other."""
    if isinstance(sentences, str):
        raise TypeError("sentences: expected a sequence of sentences, got a single str")
    rows = [s.split() if isinstance(s, str) else list(s) for s in sentences]
    weights = list(weights)
    if not rows:
        raise ValueError("sentences: expected at least one sentence")
    if len(weights) != len(rows):
        raise ValueError(f"weights: expected one array per sentence ({len(rows)}), got {len(weights)}")
    arrays = []
    for i, (toks, w) in enumerate(zip(rows, weights)):
        w = np.asarray(w, dtype=float)
        if w.shape != (len(toks),):
            raise ValueError(f"weights[{i}]: expected shape ({len(toks)},) to match sentence {i}'s tokens, "
                             f"got {w.shape}")
        if not np.all(np.isfinite(w)):
            raise ValueError(f"weights[{i}]: expected finite weights")
        arrays.append(w)
    if row_labels is not None and len(row_labels) != len(rows):
        raise ValueError(f"row_labels: expected one label per sentence ({len(rows)}), got {len(row_labels)}")
    return rows, arrays


def sentences_figure(sentences, weights, title=None, *, row_labels=None, scale=None, width=96, fontsize=10):
    """Sentences drawn word by word on boxes coloured by weight (:func:`weight_colour`), TanhMax's Figure 1
    format (``derivations/14-sst2.md``, section 5).

    One row per sentence (a str is split on white space) with one finite weight per token, its
    ``row_labels`` entry above it, wrapped at ``width`` characters (>= 20) of a monospaced font;
    ``scale`` is the ``|w|`` drawn at full colour, for all rows or one per row (None: the largest ``|w|``,
    so colours compare across rows). Returns a matplotlib Figure.
    """
    from matplotlib.figure import Figure  # noqa: PLC0415  (matplotlib only when drawing)

    rows, arrays = _check_rows(sentences, weights, row_labels)
    width = check_int(width, "width", 20)
    if scale is None:
        scale = max(float(np.max(np.abs(w), initial=0.0)) for w in arrays) or 1.0
    try:
        scales = np.asarray(scale, dtype=float)
    except (TypeError, ValueError):
        scales = np.full(1, np.nan)  # reported below
    if scales.shape not in ((), (len(rows),)) or not np.all(np.isfinite(scales) & (scales > 0)):
        raise ValueError(f"scale: expected None, a positive finite number or one per sentence ({len(rows)}), "
                         f"got {scale!r}")
    placed, line = _layout(rows, arrays, np.broadcast_to(scales, (len(rows),)), row_labels, title, width)
    char_pt = 0.6 * fontsize  # advance of one monospaced character, in points
    line_pt = 2.0 * fontsize
    fig = Figure(figsize=((width + 2) * char_pt / 72, (line + 0.5) * line_pt / 72))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-1, width + 1)
    ax.set_ylim(line + 0.5, -0.5)
    ax.axis("off")
    if title:
        ax.text(-0.5, -0.4, title, fontsize=fontsize + 1, fontweight="bold", va="top", family="monospace",
                linespacing=1.6)
    for ln, col, text, wt, sc in placed:
        if wt is None:
            ax.text(col, ln, text, fontsize=fontsize - 1, color="0.35", va="center", family="monospace")
            continue
        dark = min(abs(wt) / sc, 1.0) > 0.6
        ax.text(col, ln, text, fontsize=fontsize, va="center", family="monospace",
                color="white" if dark else "black",
                bbox={"boxstyle": "square,pad=0.15", "facecolor": weight_colour(wt, sc), "edgecolor": "none"})
    return fig


def _layout(rows, arrays, scales, row_labels, title, width):
    """``[(line, column, text, weight or None, scale)], lines``: the words in character cells, word j of a
    row where word j - 1 ended plus a space, a row wrapped at ``width``."""
    placed, line = [], 0
    if title:
        line += title.count("\n") + 1.5
    for r, (toks, w) in enumerate(zip(rows, arrays)):
        if row_labels is not None:
            placed.append((line, 0, row_labels[r], None, None))
            line += 1
        col = 0
        for tok, wt in zip(toks, w):
            if col and col + len(tok) > width:
                line, col = line + 1, 0
            placed.append((line, col, tok, wt, scales[r]))
            col += len(tok) + 1
        line += 1.6
    return placed, line


def _save_png(fig, path):
    """Save ``fig`` as the PNG ``path`` (its folder created); the path written."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a file path, got {type(path).__name__}")
    os.makedirs(os.path.dirname(os.path.abspath(os.fspath(path))), exist_ok=True)
    fig.savefig(path, dpi=110)
    return os.fspath(path)


def render_sentences(sentences, weights, path, title=None, **options):
    """:func:`sentences_figure` saved as the PNG ``path`` (its folder is created); returns the path.
    TanhMax's Figure 1 format (``derivations/14-sst2.md``, section 5)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a file path, got {type(path).__name__}")
    return _save_png(sentences_figure(sentences, weights, title, **options), path)


def render_figure1(result, path):
    """:func:`plot` of a :func:`run_sst2` result saved as the PNG ``path``; returns the path."""
    return _save_png(plot(result), path)


def plot(result):
    """The Figure 1 part of a :func:`run_sst2` result, drawn with :func:`sentences_figure`.

    Rows: for each of TanhMax's four sentences, the closest dev sentence and
    then the paper's own text, each under every activation (weights of
    ``result["figure1"]["seed"]``, oriented by (14.O1)). Each activation has its own colour scale,
    its largest ``|w|`` in the figure (softmax weights of a 20-token sentence
    are near 1/20, TanhMax's need not be).
    """
    fig1 = result["figure1"]
    acts = list(result["activations"])
    # one colour scale per activation (as the paper's two columns): its largest |w| in the figure
    top = {a: max((abs(w) for item in fig1["sentences"] for src in ("matched", "paper")
                   for w in item["activations"][a][src]["weights"]), default=0.0) or 1.0 for a in acts}
    sentences, weights, labels, scales = [], [], [], []
    for k, item in enumerate(fig1["sentences"]):
        for source, what in (("matched", f"closest dev sentence (label {item['match']['label']}, "
                                         f"similarity {item['match']['similarity']:.2f})"),
                             ("paper", "TanhMax's text")):
            for act in acts:
                per = item["activations"][act][source]
                sentences.append(item[source]["tokens"])
                weights.append(per["weights"])
                scales.append(top[act])
                labels.append(f"{k + 1}. {item['role']} - {what} - {act}: P(positive) = {per['prob']:.2f}")
    title = (f"SST-2, TanhMax Fig. 1: attention weights, red > 0, blue < 0 (seed {fig1['seed']})\n"
             "full colour at |w| = " + ", ".join(f"{a} {top[a]:.2g}" for a in acts))
    return sentences_figure(sentences, weights, title, row_labels=labels, scale=scales)


# --------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------


def _fingerprint(ids, labels):
    """A short hash of the encoded training data, so a checkpoint never resumes on other data."""
    h = hashlib.sha256(np.ascontiguousarray(ids).tobytes())
    h.update(np.ascontiguousarray(labels).tobytes())
    return h.hexdigest()[:16]


def _weigh(model, params, vocab, token_lists):
    """Weights ``(S, n, L)`` (zero at padding), P(positive) ``(S, n)`` and the mask ``(n, L)`` of tokenised sentences."""
    ids, mask = vocab.encode([" ".join(t) for t in token_lists])
    S = next(iter(params.values())).shape[0]
    f = model.outputs(params, {"tokens": np.broadcast_to(ids.astype(np.int64), (S,) + ids.shape),
                               "mask": np.broadcast_to(mask, (S,) + mask.shape)})
    return np.where(mask, f["w"], 0.0), f["prob"], mask


def _sst2_data(settings, n_seeds):
    """Both splits of SST-2 read, cleaned and encoded for the ``settings``: a dict of the arrays, the
    vocabulary and ``info`` (what the result records of the data); the memory estimate checked."""
    min_count, max_len, train_limit = settings.min_count, settings.max_len, settings.train_limit
    folder = resolve_data_dir(settings.data)
    tr_text, tr_y = load_sst2(folder, "train")
    dev_text, dev_y = load_sst2(folder, "dev")
    tr_text, tr_y, tr_empty = nonempty(tr_text, tr_y)
    dev_text, dev_y, dev_empty = nonempty(dev_text, dev_y)
    if train_limit is not None and train_limit < len(tr_text):
        pick = np.sort(np.random.default_rng(0).choice(len(tr_text), train_limit, replace=False))
        tr_text, tr_y = [tr_text[i] for i in pick], tr_y[pick]
    if not tr_text or not dev_text:
        raise ValueError(f"data: {str(folder)!r} has no non-empty sentence in "
                         f"{'train.tsv' if not tr_text else 'dev.tsv'}")

    vocab = Vocabulary.build(tr_text, min_count=min_count)
    tr_len = np.array([len(text.split()) for text in tr_text])
    tr_ids, tr_mask = vocab.encode(tr_text, max_len=max_len)  # (n, L) truncated
    dev_ids, dev_mask = vocab.encode(dev_text)  # (m, L_dev) full length
    check_memory(classifier_memory(n_seeds, tr_ids.size + dev_ids.size),
                 f"{n_seeds} seeds on {len(tr_text)} sentences", settings.max_memory)
    info = {
        "path": str(folder), "train": len(tr_text), "dev": len(dev_text),
        "train_positive_fraction": float(tr_y.mean()), "dev_positive_fraction": float(dev_y.mean()),
        "dropped_empty": {"train": tr_empty, "dev": dev_empty}, "vocab_size": len(vocab),
        "train_truncated": int(np.sum(tr_len > (max_len or tr_len.max()))),
        "train_padded_length": int(tr_ids.shape[1]), "dev_padded_length": int(dev_ids.shape[1]),
        "dev_unk_tokens": int(np.sum((dev_ids == UNK_ID) & dev_mask)),
        "dev_tokens": int(dev_mask.sum()),
    }
    return {"tr_text": tr_text, "tr_y": tr_y, "tr_ids": tr_ids, "tr_mask": tr_mask, "dev_text": dev_text,
            "dev_y": dev_y, "dev_ids": dev_ids, "dev_mask": dev_mask, "vocab": vocab, "info": info}


def _figure_items(tr_text, dev_text, dev_y, vocab):
    """Figure 1: the paper's sentences, and the closest dev sentence to each (idf from train)."""
    paper_tokens = [sst_tokenize(p["text"]) for p in PAPER_FIG1]
    matches = match_sentences(paper_tokens, dev_text, idf_weights(tr_text))
    fig_items = []
    for p, toks, m in zip(PAPER_FIG1, paper_tokens, matches):
        fig_items.append({
            "role": p["role"], "figure_label": p["figure_label"], "paper_text": p["text"],
            "paper": {"tokens": toks, "unknown": [t for t in toks if vocab.id(t) == UNK_ID]},
            "matched": {"tokens": dev_text[m["index"]].split()},
            "match": {"dev_index": m["index"], "text": dev_text[m["index"]], "label": int(dev_y[m["index"]]),
                      "similarity": m["similarity"], "exact": m["exact"]},
            "activations": {},
        })
    return fig_items


def run_sst2(settings, *, progress=None, on_result=None):
    """Train TanhMax's classifier on SST-2 per activation; dev accuracy and Figure 1's weights (:class:`Settings`).

    Both splits read (:func:`_sst2_data`), every activation's seeds trained in one batched program
    (:func:`refattn.training.classifier.train_classifier`; TanhMax section 5.1's model, Eqs. 1-3 with
    the BCE loss) and evaluated on dev (:func:`_evaluate`); TanhMax's Figure 1 sentences matched to dev
    (:func:`match_sentences`) and weighed by one seed (``figure_seed``), oriented by (14.O1)
    (``derivations/14-sst2.md``). ``on_result(activation, result)`` is called as each activation finishes.
    """
    t_start = time.perf_counter()
    given = {activation_label(a): model_activation(a) for a in settings.activations}  # a file's loaded once
    seeds = tuple(range(settings.first_seed, settings.first_seed + settings.seeds))
    figure_seed = seeds[0] if settings.figure_seed is None else settings.figure_seed
    checkpoints = checkpoint_paths(settings.checkpoint_dir, "sst2", given)  # checked before any work
    data = _sst2_data(settings, len(seeds))
    fig_items = _figure_items(data["tr_text"], data["dev_text"], data["dev_y"], data["vocab"])
    results = {}
    for act in given:
        model, params, trained = train_classifier(
            data["tr_ids"], data["tr_y"], len(data["vocab"]), given[act], seeds=seeds, mask=data["tr_mask"],
            score=settings.score, epochs=settings.epochs, batch_size=settings.batch_size,
            optimizer=settings.optimizer, lr=settings.lr, dropout=settings.dropout, checkpoint=checkpoints[act],
            progress=progress, fingerprint_extra={"task": "sst2", "data": _fingerprint(data["tr_ids"], data["tr_y"]),
                                                  "vocab": len(data["vocab"]), "max_len": settings.max_len})
        results[act], sign = _evaluate(model, params, given[act], data, seeds, trained)
        results[act]["paper_table2"] = PAPER_TABLE2.get(act)
        fk = seeds.index(figure_seed)
        for source in ("matched", "paper"):
            w, prob, mask = _weigh(model, params, data["vocab"], [item[source]["tokens"] for item in fig_items])
            for i, item in enumerate(fig_items):
                item["activations"].setdefault(act, {})[source] = {
                    "weights": (sign[fk] * w[fk, i, mask[i]]).tolist(), "prob": float(prob[fk, i])}
        if on_result is not None:
            on_result(act, results[act])
    result = {
        "settings": {"activations": list(map(activation_record, given.values())), "seeds": list(seeds),
                     **{k: getattr(settings, k) for k in ("score", "epochs", "batch_size", "optimizer", "lr",
                                                          "dropout", "max_len", "min_count", "train_limit")},
                     "model": "TanhMax section 5.1: E = 30, H = 10, self score / 3, dropout, sigmoid + BCE"},
        "data": data["info"],
        "activations": results,
        "figure1": {"seed": figure_seed, "match_by": "idf-weighted Dice overlap of token sets, idf from train",
                    "sentences": fig_items},
        "paper": {"table2": PAPER_TABLE2,
                  "note": "TanhMax Table 2 reports test accuracy on 'SST' with its own data split and "
                          "training setting; here: GLUE SST-2 dev accuracy (GLUE's test labels are not "
                          "public), this module's settings"},
    }
    if settings.out is not None:
        result["figure"] = render_figure1(result, os.path.join(os.fspath(settings.out), FIGURE))
    result["seconds"] = time.perf_counter() - t_start
    return result


def _evaluate(model, params, act, data, seeds, trained):
    """One trained activation on dev: per-seed accuracy (prediction ``logit > 0``) and final training loss,
    their mean and spread, the orientation (14.O1) and the fraction of dev tokens weighted negatively
    after it; returns ``(result, sign)``, ``sign`` the orientation per seed."""
    S, dev_mask = len(seeds), data["dev_mask"]
    dev_tok = np.broadcast_to(data["dev_ids"].astype(np.int64), (S,) + data["dev_ids"].shape)  # (S, m, L_dev)
    dev_msk = np.broadcast_to(dev_mask, (S,) + dev_mask.shape)
    fwd = model.outputs(params, {"tokens": dev_tok, "mask": dev_msk})
    acc = np.mean((fwd["logit"] > 0) == (data["dev_y"][None] == 1), axis=1)  # (S,)
    w_dev = np.where(dev_msk, fwd["w"], 0.0)  # (S, m, L_dev)
    sign, c = orient_weights(act, w_dev, data["dev_y"])
    negative = np.sum((sign[:, None, None] * w_dev < 0) & dev_msk, axis=(1, 2)) / dev_mask.sum()  # (S,)
    last = trained["history"][-1]["loss"] if trained["history"] else [None] * S
    return {
        "per_seed": [{"seed": seed, "dev_accuracy": float(acc[k]), "final_train_loss": last[k]}
                     for k, seed in enumerate(seeds)],
        "dev_accuracy_mean": float(acc.mean()),
        "dev_accuracy_std": float(np.std(acc, ddof=1)) if S > 1 else None,
        "orientation": {"odd": is_odd(act), "statistic": c.tolist(), "flipped": (sign < 0).tolist()},
        "dev_negative_weight_fraction": negative.tolist(),
        "train_seconds": trained["seconds"], "resumed_from": trained["resumed_from"],
    }, sign


#: ``refattn sst2`` (Figure 1 is drawn by :func:`plot`).
run = run_sst2


def report(result):
    """A :func:`run_sst2` result as text: accuracy beside Table 2, and the Figure 1 sentences used."""
    st, d = result["settings"], result["data"]
    lines = [f"SST-2 from {d['path']}: {d['train']} train / {d['dev']} dev sentences, vocabulary {d['vocab_size']} "
             f"(train only; {d['dev_unk_tokens']} of {d['dev_tokens']} dev tokens are <unk>), "
             f"{d['train_truncated']} train sentences truncated to {st['max_len']} tokens",
             f"model: {st['model']}; {st['optimizer']} lr {st['lr']}, batch {st['batch_size']}, "
             f"{st['epochs']} epoch(s), seeds {st['seeds']}; wall time {result['seconds']:.1f} s", "",
             f"{'activation':<12}{'dev accuracy (mean +- std)':<30}{'TanhMax Table 2 (SST)':<24}per seed"]
    for act, r in result["activations"].items():
        std = "" if r["dev_accuracy_std"] is None else f" +- {r['dev_accuracy_std']:.4f}"
        paper = "-" if r["paper_table2"] is None else f"{r['paper_table2']:.3f}"
        per = ", ".join(f"{row['dev_accuracy']:.4f}" for row in r["per_seed"])
        neg = ", ".join(f"{x:.3f}" for x in r["dev_negative_weight_fraction"])
        lines.append(f"{act:<12}{r['dev_accuracy_mean']:.4f}{std:<24}{paper:<24}{per}   "
                     f"({r['train_seconds']:.1f} s training; fraction of dev tokens with weight < 0: {neg})")
    lines += ["", "note: " + result["paper"]["note"], "",
              f"Figure 1 (weights of seed {result['figure1']['seed']}; matched by "
              f"{result['figure1']['match_by']}):"]
    for k, item in enumerate(result["figure1"]["sentences"]):
        m = item["match"]
        kind = "exact" if m["exact"] else "not in SST-2 dev; closest"
        lines.append(f"  {k + 1}. {item['role']}: {kind} dev sentence (label {m['label']}, similarity "
                     f"{m['similarity']:.2f}): {m['text']}")
        unknown = ", ".join(item["paper"]["unknown"]) or "none"
        lines.append(f"     paper's text: {item['paper_text']}  (tokens unseen in training: {unknown})")
        for act, per in item["activations"].items():
            top = sorted(zip(item["matched"]["tokens"], per["matched"]["weights"]), key=lambda tw: -abs(tw[1]))[:4]
            lines.append(f"     {act:<10} P(pos) dev match {per['matched']['prob']:.2f}, paper text "
                         f"{per['paper']['prob']:.2f}; largest |w| on match: "
                         + ", ".join(f"{t} {w:+.2f}" for t, w in top))
    if "figure" in result:
        lines.append(f"\nfigure: {result['figure']}")
    return "\n".join(lines)
