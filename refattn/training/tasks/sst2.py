r"""A reader for SST-2 in GLUE's TSV format, a vocabulary, and an encoder.

SST-2 (the Stanford Sentiment Treebank, binary, as packaged by GLUE) is one of
TanhMax's real data sets. refattn never downloads it and never ships it: the
user passes the folder holding ``train.tsv`` and ``dev.tsv``, or names it in
the environment variable ``REFATTN_SST2`` (:func:`find_sst2`).

The format
----------

UTF-8 text, one header line, then one example a line, fields separated by a
tab, no quoting (a ``"`` is an ordinary character). Columns are found by the
*header*, never by position: GLUE's original files have
``sentence<TAB>label``, while other copies have ``label<TAB>sentence``, and
some name the text column ``content`` or ``text`` (the copy this project was
checked against has ``label<TAB>sentence`` in ``train.tsv`` and
``label<TAB>content`` in ``dev.tsv``, and CRLF line ends in ``train.tsv``
only; both are handled). Labels are 0 (negative) and 1 (positive). GLUE's
``test.tsv`` has no labels and is not read here.

Tokens
------

GLUE's SST-2 is already lower-cased and tokenised (punctuation and clitics
such as ``'s`` and ``n't`` split off by spaces; checked: the copy above has no
upper-case letter and no leading, trailing or double space), so splitting on
white space *is* the tokeniser. ``lower=True`` in :meth:`Vocabulary.build`
lower-cases as well, for other copies; it changes nothing on GLUE's files.

Ids: :data:`PAD_ID` = 0 (``"<pad>"``) fills the positions after a sentence's
end, :data:`UNK_ID` = 1 (``"<unk>"``) stands for a token not in the
vocabulary; ordinary tokens get ids from 2 on, most frequent first. No
derivation file goes with this module: it reads data and does no maths.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from ...core.checks import check_int

__all__ = [
    "ENV_VAR",
    "SPLITS",
    "TEXT_COLUMNS",
    "PAD_ID",
    "UNK_ID",
    "RESERVED",
    "find_sst2",
    "load_sst2",
    "tokenize",
    "Vocabulary",
]

#: Environment variable :func:`find_sst2` reads when no path is given.
ENV_VAR = "REFATTN_SST2"
#: Splits :func:`load_sst2` reads, each from ``<split>.tsv``.
SPLITS = ("train", "dev")
#: Header names accepted for the text column, in the order they are tried.
TEXT_COLUMNS = ("sentence", "content", "text")
#: Reserved ids and their tokens.
PAD_ID, UNK_ID = 0, 1
RESERVED = ("<pad>", "<unk>")


def find_sst2(path=None):
    """The SST-2 folder (holding ``train.tsv`` and ``dev.tsv``): ``path`` if given, else ``$REFATTN_SST2``
    (empty counts as unset), else None; nothing is downloaded or guessed. A named folder that is not
    one is a ``FileNotFoundError``."""
    source = "path"
    if path is None:
        path = os.environ.get(ENV_VAR) or None
        source = f"${ENV_VAR}"
        if path is None:
            return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__}")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"{source}: {str(folder)!r} is not a folder (expected the folder "
                                f"holding SST-2's train.tsv and dev.tsv)")
    return folder


def _column(header, names, path, what):
    """Index of the one header field in ``names`` (case-insensitive)."""
    found = [i for i, h in enumerate(header) if h.strip().lower() in names]
    if len(found) != 1:
        raise ValueError(f"{path}: expected exactly one {what} column named one of {list(names)}, "
                         f"found {len(found)} in header {header}")
    return found[0]


def load_sst2(path=None, split="train"):
    """``(sentences, labels)`` of one split of SST-2, ``<path>/<split>.tsv`` in GLUE's format.

    A header naming a ``label`` column and a text column (:data:`TEXT_COLUMNS`),
    in either order, then one row a line with labels 0 or 1 (LF or CRLF; a
    byte-order mark and blank lines ignored). ``path=None`` is
    :func:`find_sst2`'s folder. A file that does not read so is refused in one
    line naming the file and the line.
    """
    folder = find_sst2(path)
    if folder is None:
        raise FileNotFoundError(f"path: no SST-2 folder given and ${ENV_VAR} is not set; pass the "
                                f"folder holding train.tsv and dev.tsv (it is never downloaded)")
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {list(SPLITS)}, got {split!r}")
    file = folder / f"{split}.tsv"
    if not file.is_file():
        raise FileNotFoundError(f"path: {str(file)!r} does not exist (split {split!r})")
    raw = file.read_bytes()
    try:  # utf-8-sig: a leading byte-order mark is dropped, not glued to the header
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(f"{file}, line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                         f"{column}); save the file as UTF-8") from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # CRLF and LF files read alike
    header = lines[0].split("\t")
    label_col = _column(header, ("label",), file, "label")
    text_col = _column(header, TEXT_COLUMNS, file, "text")
    sentences, labels = [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise ValueError(f"{file}, line {number}: expected {len(header)} tab-separated fields "
                             f"as in the header, got {len(fields)}")
        label = fields[label_col].strip()
        if label not in ("0", "1"):
            raise ValueError(f"{file}, line {number}: expected label 0 or 1 in column "
                             f"{header[label_col]!r}, got {label!r}")
        sentences.append(fields[text_col])
        labels.append(int(label))
    return sentences, np.array(labels, dtype=np.int64)


def tokenize(sentence, lower=False):
    """Split a sentence on white space (GLUE's SST-2 is already tokenised).

    Parameters
    ----------
    sentence : str
    lower : bool
        Lower-case first (a no-op on GLUE's SST-2, which is lower-cased).

    Returns
    -------
    list of str
    """
    if not isinstance(sentence, str):
        raise TypeError(f"sentence: expected a str, got {type(sentence).__name__}")
    return (sentence.lower() if lower else sentence).split()


def _int_or_none(value, name, minimum):
    """Raise unless ``value`` is None or an integer (not bool) >= minimum (:func:`refattn.core.checks.check_int`)."""
    if value is not None:
        check_int(value, name, minimum)


def _bool(value, name):
    """Raise ``TypeError`` unless ``value`` is a bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")


def _sentence_list(sentences):
    """``sentences`` as a list after checking it is a sequence of str."""
    if isinstance(sentences, str):
        raise TypeError("sentences: expected a sequence of sentences, got a single str")
    sentences = list(sentences)
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            raise TypeError(f"sentences: expected str items, got {type(s).__name__} at index {i}")
    return sentences


class Vocabulary:
    """Token <-> id map with reserved padding (0) and unknown (1) ids.

    Build one from the training sentences with :meth:`build`; then
    :meth:`encode` turns sentences into a padded id matrix and a mask.

    Parameters
    ----------
    tokens : sequence of str
        The ordinary tokens, in id order: ``tokens[i]`` gets id ``i + 2``.
        Must be distinct and must not be ``"<pad>"`` or ``"<unk>"``.
    lower : bool
        Whether :meth:`encode` lower-cases before splitting (set by
        :meth:`build` to the value it used, so both sides agree).

    Attributes
    ----------
    itos : list of str
        Token of every id, the two reserved ones first.
    stoi : dict
        Id of every ordinary token (reserved names are not in it: the text
        ``"<pad>"`` in a sentence is an unknown token, never padding).
    counts : dict or None
        Training counts of the ordinary tokens, when built by :meth:`build`.
    """

    def __init__(self, tokens, lower=False, counts=None):
        tokens = list(tokens)
        for i, t in enumerate(tokens):
            if not isinstance(t, str) or not t or t.split() != [t]:
                raise ValueError(f"tokens: expected non-empty str tokens without white space, "
                                 f"got {t!r} at index {i}")
        if len(set(tokens)) != len(tokens):
            raise ValueError("tokens: expected distinct tokens, got duplicates")
        clash = set(tokens) & set(RESERVED)
        if clash:
            raise ValueError(f"tokens: {sorted(clash)} are reserved names")
        _bool(lower, "lower")
        self.itos = list(RESERVED) + tokens
        self.stoi = {t: i + len(RESERVED) for i, t in enumerate(tokens)}
        self.lower = bool(lower)
        self.counts = counts

    @classmethod
    def build(cls, sentences, min_count=1, max_size=None, lower=False):
        """Vocabulary of the tokens of ``sentences`` (the training split) seen at least ``min_count`` times,
        at most ``max_size`` of them (the two reserved ids on top), most frequent first, ties by their
        text (ids independent of the sentences' order); ``lower`` lower-cases first."""
        sentences = _sentence_list(sentences)
        if min_count is None:
            raise ValueError("min_count: expected an integer >= 1, got None")
        _int_or_none(min_count, "min_count", 1)
        _int_or_none(max_size, "max_size", 0)
        _bool(lower, "lower")
        counter = Counter(t for s in sentences for t in tokenize(s, lower) if t not in RESERVED)
        kept = sorted((t for t, c in counter.items() if c >= min_count), key=lambda t: (-counter[t], t))
        if max_size is not None:
            kept = kept[:max_size]
        return cls(kept, lower=lower, counts={t: counter[t] for t in kept})

    def __len__(self):
        """Number of ids, the two reserved ones included."""
        return len(self.itos)

    def __repr__(self):
        return f"Vocabulary({len(self)} ids: 2 reserved + {len(self) - 2} tokens, lower={self.lower})"

    def id(self, token):
        """Id of ``token``; :data:`UNK_ID` if it is not in the vocabulary."""
        return self.stoi.get(token, UNK_ID)

    def encode(self, sentences, max_len=None):
        """``(ids (n, max_len) int32, mask (n, max_len) bool)``: each sentence's first ``max_len`` token ids
        (default: the longest sentence's length), then :data:`PAD_ID`; ``mask`` is False at padding (an
        empty sentence's row is all False: an attention row with nothing to attend to)."""
        sentences = _sentence_list(sentences)
        rows = [[self.id(t) for t in tokenize(s, self.lower)] for s in sentences]
        _int_or_none(max_len, "max_len", 1)
        if max_len is None:
            max_len = max([len(r) for r in rows] + [1])
        ids = np.full((len(rows), max_len), PAD_ID, dtype=np.int32)  # (n, L)
        lengths = np.array([min(len(r), max_len) for r in rows], dtype=np.int64)  # (n,)
        for i, r in enumerate(rows):
            ids[i, :lengths[i]] = r[:max_len]
        mask = np.arange(max_len)[None, :] < lengths[:, None]  # (n, L)
        return ids, mask

    def decode(self, ids, mask=None):
        """Sentences back from ``ids (n, L)``: the tokens where ``mask`` (default: not :data:`PAD_ID`) is
        True, joined by spaces (``"<unk>"`` for tokens not in the vocabulary)."""
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu" or ids.ndim != 2:
            raise ValueError(f"ids: expected a 2-D integer array, got {ids.dtype} with shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise ValueError(f"ids: expected ids in [0, {len(self)}), got values in "
                             f"[{ids.min()}, {ids.max()}]")
        mask = ids != PAD_ID if mask is None else np.asarray(mask)
        if mask.dtype != bool or mask.shape != ids.shape:
            raise ValueError(f"mask: expected a bool array of shape {ids.shape}, got {mask.dtype} "
                             f"with shape {mask.shape}")
        return [" ".join(self.itos[i] for i in row[keep]) for row, keep in zip(ids, mask)]
