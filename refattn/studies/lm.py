r"""A toy language model on SST-2 sentences: one decoder, many attention activations.

TanhMax (section 5.3, Table 4) swaps the attention activation inside a
six-layer transformer trained as a language model and reports token accuracy
(TanhMax best or near best, softmax never best); NeuralAttn (section 4.1,
Table 1) puts Neural Attention in the first layer of a decoder-only LM and
reports about 5 % lower perplexity than dot-product attention; Cog
(Cog attention) runs signexp in the middle layers with softmax at both ends.
This module runs the same kind of comparison at toy scale, on a 2-core CPU,
with :class:`refattn.training.models.decoder.DecoderLM`, and reports the *direction*
and *size* of the differences beside the papers' (``derivations/19-toy-lm.md``).

What is run
-----------

1. **Data** (:func:`load_corpus`). GLUE's SST-2 (:mod:`refattn.training.tasks.sst2`,
   folder from ``data``, ``$REFATTN_SST2`` or the project's shared data
   folder; never downloaded). GLUE's 67,349 training "sentences" are the
   phrases of the treebank, most of them pieces of longer ones; the
   training text is the *maximal* phrases only (those that are not a
   substring of another, 6,886 of them, about 715k characters;
   :func:`maximal_phrases`), one a line. Validation is GLUE's dev split (872
   full sentences, ~92k characters), never trained on. ``data="toy"`` uses a
   small generated corpus instead (:func:`toy_sentences`), for the notebook
   and the tests.
2. **Level.** Characters by default (``level="char"``): a vocabulary of ~50
   symbols keeps the readout and the embedding small, so that the compute
   goes into the attention being compared, and 715k training characters are
   plenty for a model of ~150k parameters. Words (``level="word"``) match
   sentiment data better but give ~14k types for ~130k training tokens: most
   types are seen a handful of times, a capped vocabulary makes the
   perplexity depend on the cap, and the readout would dominate the cost.
   The derivation discusses the choice (section 1).
3. **Model and budget.** Every variant is the same decoder (``layers``,
   ``width``, ``heads``, feed-forward ``4 width``, context ``n_ctx``), with
   the same initial embeddings and feed-forward weights for a given seed,
   trained by Adam (:class:`refattn.training.optim.Adam`) for the same number of
   steps on the same random windows (``batch_size`` windows of ``n_ctx + 1``
   characters per step, drawn from ``(seed, step)``), all seeds as one
   batched program through :func:`refattn.training.train.train` (progress bar,
   checkpoints and resume).
4. **Metrics.** Next-token cross-entropy (nats per token), perplexity
   ``exp(loss)`` and accuracy (``argmax`` equals the next token) on dev
   windows of ``n_ctx`` tokens that tile the dev text: a fixed subset at every
   evaluation (the curves), all of them at the end (the table); per seed,
   then mean and standard deviation (``ddof = 1``) over seeds.

Variants (:data:`VARIANTS`): an activation name of
:data:`refattn.core.activations.ACTIVATIONS` in every layer, ``"cog-hybrid"``
(softmax first and last, signexp between: the layout of the paper Cog
summarises, which Cog's text does not state) and ``"neural-first"``
(the neural score in layer 0, scaled dot products above, softmax everywhere:
NeuralAttn).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np


from ..custom import is_spec
from ..training.models.decoder import DecoderLM
from ..training.optim import Adam
from ..training.tasks.sst2 import load_sst2
from ..core.checks import check_int
from ..fast.threads import single_threaded_blas
from ..training.runs import check_memory
from ..training.train import check_resumable, checkpoint_paths, train
from ..custom import activation_label, activation_record
from . import StudySettings, activation_option, max_memory, option, resolve_activation
from .helpers import DATA_HELP, maximal_phrases, resolve_data_dir
from .statistics import mean_std

__all__ = [
    "DEFAULTS",
    "VARIANTS",
    "PAPER_TABLE4",
    "PAPER_NEURAL_TABLE1",
    "variant_options",
    "toy_sentences",
    "load_corpus",
    "windows",
    "ngram_baseline",
    "Settings",
    "run_lm",
    "run",
    "report",
    "plot",
]

#: The variants that are not an activation of every layer (:func:`variant_options`).
SPECIAL = ("cog-hybrid", "neural-first")

#: The default comparison: the activations the brief names, in table order.
VARIANTS = ("softmax", "tanhmax", "signexp", "cog-hybrid", "expressive", "sigsoftmax", "relu", "linear",
            "neural-first")

#: The default run (``refattn lm``): about 1-2 minutes per variant on a quiet 2-core CPU
#: (the neural variant about twice that), the nine variants in about 15 minutes.
DEFAULTS = {"activations": VARIANTS, "seeds": 3, "steps": 600, "batch_size": 16, "n_ctx": 64, "layers": 3,
            "width": 64, "heads": 4, "lr": 3e-3, "eval_every": 100, "eval_windows": 128, "level": "char",
            "min_count": 10, "max_vocab": 2000, "neural_d_prime": 2, "neural_hidden": 8, "dtype": "float32"}

#: The figure ``refattn lm --out DIR`` writes.
FIGURE = "lm.png"


@dataclass
class Settings(StudySettings):
    """Toy character language model on SST-2 sentences: every activation, the Cog hybrid and Neural Attention
    in layer 0, same budget, seeds batched.

    The variants (``activations``) are any registered activation, ``"cog-hybrid"``
    and ``"neural-first"`` (:func:`variant_options`); ``data`` as
    :func:`load_corpus`. Every variant sees ``steps * batch_size * n_ctx``
    training tokens per seed; Adam (betas 0.9, 0.999; no schedule, no
    clipping); the feed-forward width is ``4 width``. ``eval_every`` steps make
    one "epoch" of the trainer, after which ``eval_windows`` fixed dev windows
    are evaluated; the final evaluation reads every dev window, or
    ``final_windows`` of them. ``ngram_orders``: the count-based yardsticks
    (:func:`ngram_baseline`, add-0.1). ``sample_chars > 0``: a greedy
    continuation of that many tokens from the first dev sentence's first 20,
    per seed.
    """

    data: str | None = option(None, DATA_HELP + "; or 'toy' for generated sentences")
    activations: tuple[str, ...] = activation_option(VARIANTS, "comma-separated variants: activations, "
                                                               "'cog-hybrid', 'neural-first'", also=SPECIAL)
    seeds: int = option(DEFAULTS["seeds"], "seeds", low=1)
    first_seed: int = option(0, "the first seed: the runs use seeds FIRST_SEED, FIRST_SEED + 1, ...", low=0)
    steps: int = option(DEFAULTS["steps"], "Adam steps", low=1)
    layers: int = option(DEFAULTS["layers"], "layers", low=1)
    width: int = option(DEFAULTS["width"], "model width", low=1)
    heads: int = option(DEFAULTS["heads"], "attention heads (they split the width)", low=1)
    level: str = option(DEFAULTS["level"], "tokens", choices=("char", "word"))
    lr: float = option(DEFAULTS["lr"], "Adam learning rate", positive=True)
    batch_size: int = option(DEFAULTS["batch_size"], "windows per step", low=1)
    n_ctx: int = option(DEFAULTS["n_ctx"], "tokens per window", low=1)
    eval_every: int = option(DEFAULTS["eval_every"], "steps between evaluations", low=1)
    eval_windows: int = option(DEFAULTS["eval_windows"], "dev windows evaluated during training", low=1)
    final_windows: int | None = option(None, "dev windows of the final evaluation (default: all)", low=1)
    min_count: int = option(DEFAULTS["min_count"], "keep tokens seen at least this often (load_corpus)", low=1)
    max_vocab: int = option(DEFAULTS["max_vocab"], "the most words of a word-level vocabulary", low=1)
    neural_d_prime: int = option(DEFAULTS["neural_d_prime"], "the neural score's down-projection", low=1)
    neural_hidden: int = option(DEFAULTS["neural_hidden"], "the neural score's hidden width", low=1)
    dtype: str = option(DEFAULTS["dtype"], "precision", choices=("float32", "float64"))
    ngram_orders: tuple[int, ...] | None = option((2, 3, 4), "comma-separated orders of the n-gram yardsticks",
                                                  low=1)
    sample_chars: int = option(0, "greedy continuation of this many tokens per seed (0: none)", low=0)
    checkpoint_dir: str | None = option(None, "folder for resumable checkpoints, one per variant",
                                        output="checkpoint_dir")
    max_memory: float | None = max_memory()
    corpus: dict | None = dataclasses.field(default=None, repr=False, metadata={
        "help": "the corpus as read_corpus reads it, where the caller read it already (a grid's cells)",
        "cli": False})

    def check(self):
        """The width splits into the model's heads; cog-hybrid has a signexp layer between softmax ones."""
        if self.width % self.heads:
            raise ValueError(f"width: expected a multiple of the model's {self.heads} heads, got {self.width}")
        if "cog-hybrid" in self.activations and self.layers < 3:
            raise ValueError(f"layers: 'cog-hybrid' keeps softmax in the first and last layers and needs 3 or "
                             f"more layers to hold a signexp one, got {self.layers}")

    def read_corpus(self):
        """``corpus`` if given, else :func:`load_corpus` of these settings' ``data``, ``level``, ``min_count``
        and ``max_vocab``."""
        if self.corpus is not None:
            return self.corpus
        return load_corpus(self.data, level=self.level, min_count=self.min_count, max_vocab=self.max_vocab)

    def memory_estimate(self):
        """Bytes :func:`run_lm` needs at its peak with these settings (:func:`memory_estimate`); the corpus
        (:meth:`read_corpus`) is read for the size of its vocabulary."""
        vocab = len(self.read_corpus()["vocab"])
        return memory_estimate(self.seeds, layers=self.layers, width=self.width, heads=self.heads, n_ctx=self.n_ctx,
                               batch_size=self.batch_size, vocab=vocab, itemsize=np.dtype(self.dtype).itemsize)


#: TanhMax, Table 4, row "SST": language-model accuracy (%) of six-layer BERT
#: models, mean +- std, validation and test ("Dot product" is our ``linear``).
#: Cosformer (75.7 / 74.8) is an architecture of its own and is not run here.
PAPER_TABLE4 = {
    "validation": {"softmax": (76.1, 0.10), "relu": (76.2, 0.29), "linear": (75.1, 0.20),
                   "sigsoftmax": (75.8, 0.17), "cosformer": (75.7, 0.18), "tanhmax": (76.2, 0.15)},
    "test": {"softmax": (73.6, 0.14), "relu": (73.4, 0.26), "linear": (73.5, 0.21),
             "sigsoftmax": (73.8, 0.15), "cosformer": (74.8, 0.23), "tanhmax": (76.1, 0.21)},
}

#: NeuralAttn, Table 1: lowest WikiText-103 perplexity after 1M iterations
#: (dot-product attention vs Neural Attention in the first layer, by down-projection d').
PAPER_NEURAL_TABLE1 = {"dot": 26.03, "neural_d2": 24.71, "neural_d16": 24.55, "neural_none": 24.77}

_TOY_WORDS = {
    "noun": ("film", "movie", "story", "cast", "plot", "script", "ending", "actor"),
    "good": ("good", "great", "warm", "funny", "smart", "moving", "fresh"),
    "bad": ("bad", "dull", "flat", "tired", "silly", "boring", "empty"),
    "adv": ("very", "quite", "so", "rather", "truly"),
}


# --------------------------------------------------------------------------
# Variants
# --------------------------------------------------------------------------


def variant_options(name):
    """The :class:`~refattn.training.models.decoder.DecoderLM` options of a variant: an activation in every
    layer, ``"cog-hybrid"`` (softmax in the first and last layers, signexp between; Cog) or
    ``"neural-first"`` (NeuralAttn's score in layer 0, softmax); ``derivations/19-toy-lm.md``."""
    if name == "neural-first":
        return {"activations": "softmax", "scores": "neural-first"}
    if name == "cog-hybrid" or (isinstance(name, str) and not is_spec(name)):
        return {"activations": name, "scores": "dot"}
    return {"activations": resolve_activation(name, "activations", training=True), "scores": "dot"}


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------


def toy_sentences(n, seed=0):
    """A small generated corpus of review-like sentences, for runs without SST-2.

    Each sentence is one of a few templates ("the film is very good .",
    "i loved this movie , the cast was warm .", ...) filled from short word
    lists with ``numpy.random.default_rng(seed)``; the sentiment of the
    adjectives agrees with the verb, so a model has long-range structure to
    learn. Used by the notebook when SST-2 is absent and by the tests.

    Parameters
    ----------
    n : int >= 1
        Number of sentences.
    seed : int >= 0

    Returns
    -------
    list of str
    """
    n, seed = check_int(n, "n", 1), check_int(seed, "seed", 0)
    rng = np.random.default_rng(seed)
    W = {k: list(v) for k, v in _TOY_WORDS.items()}

    def pick(kind):
        return W[kind][rng.integers(len(W[kind]))]

    out = []
    for _ in range(n):
        pol = "good" if rng.random() < 0.5 else "bad"
        verb = "loved" if pol == "good" else "hated"
        t = rng.integers(4)
        if t == 0:
            s = f"the {pick('noun')} is {pick('adv')} {pick(pol)} ."
        elif t == 1:
            s = f"i {verb} this {pick('noun')} , the {pick('noun')} was {pick(pol)} ."
        elif t == 2:
            s = f"a {pick(pol)} {pick('noun')} with a {pick(pol)} {pick('noun')} ."
        else:
            s = f"{pick('adv')} {pick(pol)} , and i {verb} it ."
        out.append(s)
    return out


def _char_vocab(text, min_count):
    counts = Counter(text)
    chars = sorted(c for c, k in counts.items() if k >= min_count)
    return ["<unk>"] + chars


def _word_vocab(sentences, min_count, max_vocab):
    counts = Counter(t for s in sentences for t in s.split())
    words = sorted((w for w, k in counts.items() if k >= min_count), key=lambda w: (-counts[w], w))
    return ["<unk>", "<eos>"] + words[:max_vocab]


def load_corpus(data=None, *, level="char", min_count=10, max_vocab=2000):
    """Training and validation token ids for the toy LM (``derivations/19-toy-lm.md``, section 2).

    ``data`` is the SST-2 folder (:func:`refattn.studies.helpers.resolve_data_dir`; the training
    sentences are its maximal phrases) or ``"toy"`` (:func:`toy_sentences`, 3,000 and 300). ``level``
    ``"char"`` joins sentences by ``"\n"``, ``"word"`` ends each by ``"<eos>"`` and keeps at most
    ``max_vocab`` words; a symbol seen fewer than ``min_count`` times in training is ``<unk>`` (id 0).
    Returns ``train`` and ``dev`` (int64 ids), ``vocab``, ``level``, ``source``, the sentence counts,
    the ``<unk>`` fractions and a ``fingerprint`` of text and vocabulary (for checkpoints).
    """
    if isinstance(data, str) and data == "toy":
        train_s, dev_s, source = toy_sentences(3000, seed=0), toy_sentences(300, seed=1), "toy"
    else:
        folder = resolve_data_dir(data)
        train_raw, _ = load_sst2(folder, "train")
        dev_raw, _ = load_sst2(folder, "dev")
        train_s = maximal_phrases(train_raw)
        dev_s = [" ".join(s.split()) for s in dev_raw if s.strip()]
        source = str(folder)
        for split, sents in (("train", train_s), ("dev", dev_s)):
            if not sents:
                raise ValueError(f"data: {str(folder / f'{split}.tsv')!r} has no non-empty sentence "
                                 f"(a header line only?)")
    if level == "char":
        train_text, dev_text = "\n".join(train_s) + "\n", "\n".join(dev_s) + "\n"
        vocab = _char_vocab(train_text, min_count)
        stoi = {c: i for i, c in enumerate(vocab)}
        train = np.array([stoi.get(c, 0) for c in train_text], dtype=np.int64)
        dev = np.array([stoi.get(c, 0) for c in dev_text], dtype=np.int64)
    else:
        vocab = _word_vocab(train_s, min_count, max_vocab)
        stoi = {w: i for i, w in enumerate(vocab)}

        def encode(sents):
            return np.array([stoi.get(t, 0) for s in sents for t in s.split() + ["<eos>"]], dtype=np.int64)

        train, dev = encode(train_s), encode(dev_s)
    h = hashlib.sha256()
    for s in train_s + ["\x00"] + dev_s + ["\x00"] + vocab:
        h.update(s.encode("utf-8") + b"\n")
    return {"train": train, "dev": dev, "vocab": vocab, "level": level, "source": source,
            "n_train_sentences": len(train_s), "n_dev_sentences": len(dev_s),
            "train_unk_fraction": float(np.mean(train == 0)), "dev_unk_fraction": float(np.mean(dev == 0)),
            "fingerprint": h.hexdigest()[:16]}


def windows(ids, n_ctx, *, starts):
    """Inputs and next-token targets of windows of ``n_ctx`` tokens.

    Parameters
    ----------
    ids : int array (N,)
    n_ctx : int
    starts : int array (..., B)
        Window offsets, each ``<= N - n_ctx - 1``.

    Returns
    -------
    x, y : int arrays (..., B, n_ctx)
        ``x = ids[o : o + n_ctx]``, ``y = ids[o + 1 : o + n_ctx + 1]``.
    """
    starts = np.asarray(starts)
    if starts.size and (starts.min() < 0 or starts.max() > len(ids) - n_ctx - 1):
        raise ValueError(f"starts: windows of {n_ctx} + 1 tokens must fit in {len(ids)} ids")
    offs = starts[..., None] + np.arange(n_ctx)  # (..., B, n_ctx)
    return ids[offs], ids[offs + 1]


def _dev_windows(dev, n_ctx, limit=None):
    """Offsets of the non-overlapping dev windows (all, or ``limit`` evenly spaced ones)."""
    starts = np.arange(0, len(dev) - n_ctx - 1 + 1, n_ctx)
    if len(starts) == 0:
        raise ValueError(f"n_ctx: the validation text ({len(dev)} tokens) is shorter than one window of "
                         f"{n_ctx} + 1 tokens")
    if limit is not None and limit < len(starts):
        starts = starts[np.linspace(0, len(starts) - 1, limit).round().astype(int)]
    return starts


def ngram_baseline(train, dev, vocab_size, order, alpha=0.1):
    """A count-based n-gram model with add-``alpha`` smoothing, as a yardstick for the LMs.

    ``P(v | c) = (count(c, v) + alpha) / (count(c) + alpha V)`` with ``c`` the
    ``order - 1`` previous tokens, counted on ``train`` and scored on every
    position of ``dev`` that has ``order - 1`` tokens before it. Accuracy:
    the most frequent continuation of the context (lowest id on ties; id 0
    for an unseen context). Contexts and continuations are counted as
    integer codes with :func:`numpy.unique`, so order 4 over 700k characters
    takes about a second. Not a neural model; it tells where the toy
    transformers stand (``derivations/19-toy-lm.md``, section 4).

    Parameters
    ----------
    train, dev : int arrays (N,)
    vocab_size : int
    order : int >= 1
    alpha : float > 0

    Returns
    -------
    dict
        ``loss`` (nats per token), ``perplexity``, ``accuracy``, ``order``, ``alpha``.
    """
    V, k = vocab_size, order - 1
    train, dev = np.asarray(train, dtype=np.int64), np.asarray(dev, dtype=np.int64)

    def codes(ids):
        c = np.zeros(len(ids) - k, dtype=np.int64)  # context code of every position i >= k
        for j in range(k):
            c = c * V + ids[j:len(ids) - k + j]
        return c, ids[k:]

    tc, tn = codes(train)
    dc, dn = codes(dev)
    pair, pair_n = np.unique(tc * V + tn, return_counts=True)  # (context, next) counts
    ctx, ctx_n = np.unique(tc, return_counts=True)  # context counts

    def lookup(keys, table, counts):
        i = np.clip(np.searchsorted(table, keys), 0, len(table) - 1)
        return np.where(table[i] == keys, counts[i], 0)

    num = lookup(dc * V + dn, pair, pair_n) + alpha
    den = lookup(dc, ctx, ctx_n) + alpha * V
    loss = float(np.mean(np.log(den) - np.log(num)))
    best = np.zeros(len(ctx), dtype=np.int64)  # most frequent continuation per context
    order_ = np.lexsort((pair % V, -pair_n, pair // V))  # by context, count desc, id asc
    first = np.unique(pair[order_] // V, return_index=True)[1]
    best[np.searchsorted(ctx, pair[order_][first] // V)] = pair[order_][first] % V
    i = np.clip(np.searchsorted(ctx, dc), 0, len(ctx) - 1)
    pred = np.where(ctx[i] == dc, best[i], 0)
    return {"order": order, "alpha": float(alpha), "loss": loss, "perplexity": float(math.exp(loss)),
            "accuracy": float(np.mean(pred == dn))}


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


def memory_estimate(seeds, *, layers, width, heads, n_ctx, batch_size, vocab, itemsize=4):
    """Bytes :func:`run_lm` needs at its peak, estimated before training.

    Per seed, for ``B = max(batch_size, 64)`` windows (a training batch or an
    evaluation batch): about three ``(B, H, n, n)`` attention arrays per
    layer, forty ``(B, n, width)`` activations per layer (the 4x feed-forward
    layer, layer norms and their caches) and six ``(B, n, V)`` logit arrays;
    16 MiB besides. It bounds what tracemalloc measures by a factor 1.2 to 3
    (``tests/training/test_runs.py::test_memory_estimates_bound_the_measured_peaks``).
    """
    B = max(int(batch_size), 64)
    per_seed = (3 * layers * B * heads * n_ctx**2 + 40 * layers * B * n_ctx * width + 6 * B * n_ctx * vocab)
    return int(seeds) * itemsize * per_seed + 16 * 2**20


def run_lm(settings, *, progress=None, on_result=None):
    """The toy LM trained once per variant (:func:`_train_variant`), all seeds batched, beside the n-gram
    yardsticks (:func:`ngram_baseline`): validation loss, perplexity and accuracy (:class:`Settings`;
    ``derivations/19-toy-lm.md``). ``on_result(variant, entry)`` is called as each variant finishes."""
    t_start = time.perf_counter()
    variants = {activation_label(a): a for a in settings.activations}  # a file's activation by its NAME
    corpus = settings.read_corpus()
    train_ids, dev_ids, V = corpus["train"], corpus["dev"], len(corpus["vocab"])
    n_ctx, steps, every = settings.n_ctx, settings.steps, _eval_every(settings)
    baselines = [ngram_baseline(train_ids, dev_ids, V, o) for o in settings.ngram_orders or ()]
    if len(train_ids) < n_ctx + 2:
        raise ValueError(f"n_ctx: the training text ({len(train_ids)} tokens) is shorter than one window")
    check_memory(memory_estimate(settings.seeds, layers=settings.layers, width=settings.width, heads=settings.heads,
                                 n_ctx=n_ctx, batch_size=settings.batch_size, vocab=V,
                                 itemsize=np.dtype(settings.dtype).itemsize),
                 f"{settings.seeds} seeds of a {settings.layers}-layer, width-{settings.width} model at context "
                 f"{n_ctx}", settings.max_memory)
    seeds = list(range(settings.first_seed, settings.first_seed + settings.seeds))
    checkpoints = checkpoint_paths(settings.checkpoint_dir, "lm", variants)  # checked before the first step
    for name, value in variants.items():  # and compared with their runs
        _, fingerprint, epochs = _variant(settings, name, value, corpus, seeds)
        check_resumable(checkpoints[name], fingerprint, epochs, "--checkpoint-dir")
    curve_starts = _dev_windows(dev_ids, n_ctx, settings.eval_windows)
    final_starts = _dev_windows(dev_ids, n_ctx, settings.final_windows)
    dev = {"curve": windows(dev_ids, n_ctx, starts=curve_starts[None]),  # (1, N, n_ctx) each
           "final": windows(dev_ids, n_ctx, starts=final_starts[None])}
    hi = len(train_ids) - n_ctx - 1

    def make_batches(epoch):
        out = []
        for t in range(epoch * every, min((epoch + 1) * every, steps)):
            starts = np.stack([np.random.default_rng([s, t, 19]).integers(0, hi + 1, settings.batch_size)
                               for s in seeds])  # (S, B): the same windows for every variant
            x, y = windows(train_ids, n_ctx, starts=starts)
            out.append({"x": x, "y": y})
        return out

    results = {}
    for name, value in variants.items():
        results[name] = _train_variant(settings, name, value, corpus, seeds, make_batches, dev, checkpoints[name],
                                       progress)
        if on_result is not None:
            on_result(name, results[name])
    return {
        "settings": {"seeds": seeds, **{k: getattr(settings, k) for k in ("steps", "batch_size", "n_ctx")},
                     "tokens_per_seed": steps * settings.batch_size * n_ctx,
                     **{k: getattr(settings, k) for k in ("layers", "width", "heads")}, "ffn": 4 * settings.width,
                     "lr": settings.lr, "optimizer": "adam", "eval_every": every,
                     "eval_windows": int(len(curve_starts)), "final_windows": int(len(final_starts)),
                     **{k: getattr(settings, k) for k in ("neural_d_prime", "neural_hidden", "dtype", "level")}},
        "data": {k: corpus[k] for k in ("source", "level", "n_train_sentences", "n_dev_sentences",
                                         "train_unk_fraction", "dev_unk_fraction", "fingerprint")}
        | {"vocab_size": V, "train_tokens": int(len(train_ids)), "dev_tokens": int(len(dev_ids))},
        "order": list(variants),
        "variants": results,
        "baselines": baselines,
        "paper": {"seed001_table4": PAPER_TABLE4, "seed003_table1": PAPER_NEURAL_TABLE1},
        "seconds": time.perf_counter() - t_start,
    }


def _eval_every(settings):
    """Steps per "epoch" of the trainer: ``eval_every``, at most the whole run."""
    return min(settings.eval_every, settings.steps)


def _variant(settings, name, value, corpus, seeds):
    """``(model, fingerprint, epochs)`` of one variant of :func:`run_lm`: what its checkpoint records, and
    a resumed run must match (compared for every variant before the first one trains)."""
    every = _eval_every(settings)
    model = DecoderLM(len(corpus["vocab"]), settings.n_ctx, width=settings.width, n_layers=settings.layers,
                      n_heads=settings.heads, ffn_mult=4, neural_d_prime=settings.neural_d_prime,
                      neural_hidden=settings.neural_hidden, **variant_options(value))
    fingerprint = {"variant": name, "model": repr(model), "seeds": seeds,
                   **{k: getattr(settings, k) for k in ("steps", "batch_size", "lr")}, "eval_every": every,
                   "dtype": settings.dtype, "data": corpus["fingerprint"], "eval_windows": settings.eval_windows}
    record = None if name in SPECIAL else activation_record(value)
    if isinstance(record, dict):  # an activation of yours: its file's content must not change
        fingerprint["activation"] = record
    return model, fingerprint, math.ceil(settings.steps / every)


def _train_variant(settings, name, value, corpus, seeds, make_batches, dev, checkpoint, progress):
    """One variant of :func:`run_lm` trained and evaluated: its entry of the result's ``variants``."""
    every = _eval_every(settings)
    model, fingerprint, epochs = _variant(settings, name, value, corpus, seeds)
    params = model.init_params(seeds, dtype=np.dtype(settings.dtype))
    (cx, cy), (fx, fy) = dev["curve"], dev["final"]

    def evaluate(epoch, params, model=model):
        ev = model.evaluate(params, cx, cy, batch_size=64)
        return {"step": min((epoch + 1) * every, settings.steps), "dev_loss": ev["loss"],
                "dev_accuracy": ev["accuracy"]}

    t0 = time.perf_counter()
    run = train(model, params, Adam(params, lr=settings.lr), make_batches, epochs=epochs, callbacks=[evaluate],
                checkpoint=checkpoint, fingerprint=fingerprint, progress=progress, label=f"lm {name}")
    with single_threaded_blas():  # as in training: the same numbers under any OPENBLAS_NUM_THREADS
        final = model.evaluate(params, fx, fy, batch_size=64)
    seconds = time.perf_counter() - t0
    hist = run["history"]
    curve = {"step": [h["step"] for h in hist],
             "dev_loss": np.array([h["dev_loss"] for h in hist]).T.tolist(),  # (S, evals)
             "dev_accuracy": np.array([h["dev_accuracy"] for h in hist]).T.tolist(),
             "train_loss": np.array([h["loss"] for h in hist]).T.tolist()}
    loss = [float(v) for v in final["loss"]]
    acc = [float(v) for v in final["accuracy"]]
    ppl = [float(np.exp(np.float64(v))) if np.isfinite(v) and v < 709.0 else float("inf") for v in loss]  # e^loss
    finite = bool(np.all(np.isfinite(loss)) and np.all(np.isfinite(ppl)))  # a loss past 709 nats diverged too
    entry = {"layers": [{"activation": a.name, "score": k}
                        for a, k in zip(model.activations, model.score_kinds)],
             "label": model.label, "n_params": model.n_params,
             "per_seed": [{"seed": sd, "dev_loss": lo, "dev_perplexity": pp, "dev_accuracy": ac}
                          for sd, lo, pp, ac in zip(seeds, loss, ppl, acc)],
             "finite": finite, "curve": curve, "train_seconds": seconds,
             "resumed_from": run["resumed_from"]}
    for key, vals in (("dev_loss", loss), ("dev_perplexity", ppl), ("dev_accuracy", acc)):
        entry[key + "_mean"], entry[key + "_std"] = mean_std(vals)
    if settings.sample_chars:
        with single_threaded_blas():
            entry["samples"] = _samples(model, params, corpus, settings.n_ctx, settings.sample_chars)
    return entry


def _samples(model, params, corpus, n_ctx, n_new):
    vocab = corpus["vocab"]
    dev = corpus["dev"]
    prompt = dev[:min(20, n_ctx, len(dev))]
    seq = model.generate(params, prompt, n_new)
    sep = "" if corpus["level"] == "char" else " "
    return [sep.join(vocab[i] for i in row) for row in seq]


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------


def _fmt(mean, std, scale=1.0, digits=2):
    if mean is None or not math.isfinite(mean):
        return "nan"
    s = f"{scale * mean:.{digits}f}"
    return s + (f" ± {scale * std:.{digits}f}" if std is not None else "")


def _diff(result, name, key, base="softmax"):
    """Mean difference to ``base`` and its standard error (unpaired, over seeds)."""
    v = result["variants"]
    a = np.array([r[key] for r in v[name]["per_seed"]])
    b = np.array([r[key] for r in v[base]["per_seed"]])
    d = float(a.mean() - b.mean())
    se = math.sqrt((a.var(ddof=1) / a.size if a.size > 1 else 0.0) + (b.var(ddof=1) / b.size if b.size > 1 else 0.0))
    return d, se


def _verdict(ours, se, paper, paper_noise=None):
    """Do our difference and the paper's point the same way?

    A paper difference no larger than ``paper_noise`` (the sum of the two
    reported standard deviations) has no direction to agree with; ours counts
    as noise when it is within two standard errors.
    """
    if not math.isfinite(ours):
        return "ours diverged"
    if paper_noise is not None and abs(paper) <= paper_noise:
        return f"paper's difference is within its own ± ({paper_noise:.2f}): no direction to compare"
    if abs(ours) <= 2 * se:
        return "ours within noise (|diff| <= 2 SE)"
    return "same direction" if (ours > 0) == (paper > 0) else "OPPOSITE direction"


#: ``refattn lm``.
run = run_lm


def report(result):
    """:func:`run_lm`'s result as a table (dev accuracy and perplexity, mean ± std over seeds, and their
    differences to softmax), then :func:`_beside_papers`."""
    s, d = result["settings"], result["data"]
    v = result["variants"]
    lines = [f"Toy LM on {'SST-2' if d['source'] != 'toy' else 'a generated corpus'} ({d['level']} level, "
             f"V = {d['vocab_size']}; {d['train_tokens']:,} training / {d['dev_tokens']:,} dev tokens)",
             f"budget per variant and seed: {s['steps']} Adam steps (lr {s['lr']:g}) x {s['batch_size']} windows x "
             f"{s['n_ctx']} tokens = {s['tokens_per_seed']:,} tokens; {s['layers']} layers, width {s['width']}, "
             f"{s['heads']} heads, FFN {s['ffn']}; seeds {s['seeds']}; dev: {s['final_windows']} windows",
             ""]
    has_base = "softmax" in v
    head = f"{'variant':<14}{'layers':<30}{'dev acc %':>15}{'dev ppl':>15}{'Δacc pp':>14}{'Δppl %':>9}" \
           f"{'params':>9}{'sec':>7}"
    lines += [head, "-" * len(head)]
    for name in result["order"]:
        r = v[name]
        layers = "|".join(x["activation"] + ("*" if x["score"] == "neural" else "") for x in r["layers"])
        dacc = dppl = ""
        if has_base and name != "softmax":
            da, se = _diff(result, name, "dev_accuracy")
            dacc = f"{100 * da:+.2f}±{100 * se:.2f}"
            base = v["softmax"]["dev_perplexity_mean"]
            dppl = f"{100 * (r['dev_perplexity_mean'] - base) / base:+.1f}"
        lines.append(f"{name:<14}{layers[:29]:<30}{_fmt(r['dev_accuracy_mean'], r['dev_accuracy_std'], 100):>15}"
                     f"{_fmt(r['dev_perplexity_mean'], r['dev_perplexity_std'], 1, 3):>15}{dacc:>14}{dppl:>9}"
                     f"{r['n_params']:>9,}{r['train_seconds']:>7.0f}")
    lines.append("(* = neural score in that layer; Δ = variant minus softmax, ± its standard error over seeds)")
    if result.get("baselines"):
        lines.append("count-based yardsticks on the same dev text (add-0.1 smoothing): " + "; ".join(
            f"{b['order']}-gram ppl {b['perplexity']:.2f}, acc {100 * b['accuracy']:.1f} %" for b in result["baselines"]))
    if not has_base:
        lines.append("(no softmax run: no differences and no comparison with the papers)")
    else:
        lines += ["", "Beside the papers (direction and size of the difference to softmax / dot-product attention):"]
        lines += _beside_papers(result)
    lines.append(f"wall time of the whole run: {result['seconds']:.0f} s")
    return "\n".join(lines)


def _beside_papers(result):
    """Lines of :func:`report`: each variant's difference to softmax beside TanhMax Table 4's and
    NeuralAttn Table 1's, and whether the directions agree (:func:`_verdict`)."""
    v, lines = result["variants"], []
    t4 = PAPER_TABLE4
    diverged = {n for n in result["order"] if not v[n]["finite"]}

    def no_verdict(name):  # a diverged run has no direction to compare: say so instead of a verdict
        gone = [n for n in (name, "softmax") if n in diverged]
        return f"no verdict: {' and '.join(gone)} diverged (non-finite dev loss or perplexity)" if gone else None

    for name in ("tanhmax", "relu", "linear", "sigsoftmax"):
        if name not in v:
            continue
        label = "dot product" if name == "linear" else name
        if no_verdict(name):
            lines.append(f"  TanhMax Table 4 (SST), {label} - softmax: {no_verdict(name)}")
            continue
        da, se = _diff(result, name, "dev_accuracy")
        parts = []
        for split in ("validation", "test"):
            (a, sa), (b, sb) = t4[split][name], t4[split]["softmax"]
            parts.append(f"{split} {a - b:+.1f} pp -> {_verdict(da, se, a - b, sa + sb)}")
        lines.append(f"  TanhMax Table 4 (SST), {label} - softmax: ours {100 * da:+.2f} ± {100 * se:.2f} pp; paper "
                     + "; ".join(parts))
    if "neural-first" in v and no_verdict("neural-first"):
        lines.append(f"  NeuralAttn Table 1 (WikiText-103), neural vs dot: {no_verdict('neural-first')}")
    elif "neural-first" in v:
        base = v["softmax"]["dev_perplexity_mean"]
        ours = (v["neural-first"]["dev_perplexity_mean"] - base) / base
        _, se_l = _diff(result, "neural-first", "dev_loss")
        dl, _ = _diff(result, "neural-first", "dev_loss")
        p = PAPER_NEURAL_TABLE1
        paper = (p["neural_d2"] - p["dot"]) / p["dot"]
        lines.append(f"  NeuralAttn Table 1 (WikiText-103), neural (d' = 2, layer 0) vs dot: perplexity "
                     f"{100 * paper:+.2f} %; ours {100 * ours:+.2f} % (loss {dl:+.4f} ± {se_l:.4f} nats) -> "
                     f"{_verdict(dl, se_l, paper)}")
    for name in ("cog-hybrid", "signexp", "expressive"):
        if name in v and no_verdict(name):
            lines.append(f"  {name} - softmax: {no_verdict(name)}")
        elif name in v:
            da, se = _diff(result, name, "dev_accuracy")
            lines.append(f"  {name} - softmax: ours {100 * da:+.2f} ± {100 * se:.2f} pp accuracy "
                         f"(no LM number in the papers to compare with)")
    if diverged:
        lines.append(f"  diverged (non-finite dev loss or perplexity for some seed): "
                     f"{', '.join(n for n in result['order'] if n in diverged)}")
    return lines


def plot(result):
    """Validation loss curves (mean over seeds, band = min..max) and final accuracy per variant.

    Parameters
    ----------
    result : dict
        From :func:`run_lm`.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [1.6, 1]})
    order = result["order"]
    cmap = plt.get_cmap("tab10")
    for i, name in enumerate(order):
        r = result["variants"][name]
        steps = np.asarray(r["curve"]["step"])
        loss = np.asarray(r["curve"]["dev_loss"], dtype=float)  # (S, evals)
        if loss.size == 0:
            continue
        c = cmap(i % 10)
        ax.plot(steps, loss.mean(axis=0), color=c, lw=1.6, label=name, ls="--" if i >= 10 else "-")
        ax.fill_between(steps, loss.min(axis=0), loss.max(axis=0), color=c, alpha=0.15, lw=0)
        acc = 100 * np.array([p["dev_accuracy"] for p in r["per_seed"]])
        bx.errorbar([i], [acc.mean()], yerr=[acc.std(ddof=1) if acc.size > 1 else 0.0], fmt="o", color=c,
                    capsize=3)
        bx.scatter(np.full(acc.size, i + 0.15), acc, s=8, color=c, alpha=0.6)
    ax.set_xlabel("Adam step")
    ax.set_ylabel("dev cross-entropy (nats / token)")
    ax.set_title(f"{result['data']['level']}-level LM, {result['settings']['layers']} layers, "
                 f"{len(result['settings']['seeds'])} seeds", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    bx.set_xticks(range(len(order)))
    bx.set_xticklabels(order, rotation=60, ha="right", fontsize=7)
    bx.set_ylabel("final dev next-token accuracy (%)")
    fig.tight_layout()
    return fig
