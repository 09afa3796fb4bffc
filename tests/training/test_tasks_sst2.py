"""Tests for refattn.training.tasks.sst2: the GLUE TSV reader, Vocabulary and encoding.

Behaviour is tested on tiny TSV files written to tmp_path (both header orders,
the other text-column name, CRLF line ends, a byte-order mark, quotes);
the real data only where it is present (``$REFATTN_SST2``, or
``../shared/data/sst2`` beside the repository), else the test skips.
"""

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refattn.training.tasks.polarity import NEGATIVE, POSITIVE, polarity_groups, token_polarity
from refattn.training.tasks.sst2 import (
    ENV_VAR,
    PAD_ID,
    UNK_ID,
    Vocabulary,
    find_sst2,
    load_sst2,
    tokenize,
)

ROWS = [("0", "a dull , lifeless film ."), ("1", 'a "fresh" and funny ride'), ("1", "it 's great")]


def write_tsv(folder, split, header, rows, newline="\n", bom=False):
    """Write ``rows`` of (label, sentence) under ``header`` (field names in order)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(header)]
    for label, sentence in rows:
        fields = {"label": label}
        lines.append("\t".join(fields.get(h.lower(), sentence) for h in header))
    text = newline.join(lines) + newline
    (folder / f"{split}.tsv").write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return folder


# --------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------


@pytest.mark.parametrize("header", [("sentence", "label"), ("label", "sentence"), ("label", "content"),
                                    ("Sentence", "Label")])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_load_reads_columns_by_header(tmp_path, header, newline):
    folder = write_tsv(tmp_path / "sst2", "train", header, ROWS, newline=newline)
    sentences, labels = load_sst2(folder, "train")
    assert sentences == [s for _, s in ROWS]  # quotes kept verbatim, no CR left behind
    assert labels.dtype == np.int64 and labels.tolist() == [0, 1, 1]


def test_load_ignores_bom_and_blank_lines(tmp_path):
    folder = write_tsv(tmp_path, "dev", ("label", "sentence"), ROWS, bom=True)
    with open(folder / "dev.tsv", "a", encoding="utf-8") as f:
        f.write("\n\n")
    sentences, labels = load_sst2(str(folder), split="dev")
    assert len(sentences) == 3 and labels.tolist() == [0, 1, 1]


def test_find_sst2_argument_then_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert find_sst2() is None
    monkeypatch.setenv(ENV_VAR, "")
    assert find_sst2() is None  # empty counts as unset
    assert find_sst2(tmp_path) == tmp_path
    write_tsv(tmp_path / "env", "dev", ("label", "sentence"), ROWS)
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    assert find_sst2() == tmp_path / "env"
    assert find_sst2(tmp_path) == tmp_path  # the argument wins
    assert load_sst2(split="dev")[1].tolist() == [0, 1, 1]
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"\$REFATTN_SST2: .*nowhere"):
        find_sst2()


def test_load_errors_name_the_problem(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(FileNotFoundError, match="REFATTN_SST2 is not set"):
        load_sst2()
    with pytest.raises(FileNotFoundError, match="missing"):
        load_sst2(tmp_path / "missing")
    with pytest.raises(TypeError, match="path"):
        find_sst2(3)
    with pytest.raises(FileNotFoundError, match="train.tsv"):
        load_sst2(tmp_path)
    write_tsv(tmp_path, "train", ("label", "sentence"), ROWS)
    with pytest.raises(ValueError, match="split"):
        load_sst2(tmp_path, "test")
    write_tsv(tmp_path / "a", "train", ("polarity", "sentence"), ROWS)
    with pytest.raises(ValueError, match=r"train\.tsv: expected exactly one label column"):
        load_sst2(tmp_path / "a")
    write_tsv(tmp_path / "b", "train", ("label", "sentence", "text"), ROWS)
    with pytest.raises(ValueError, match="exactly one text column.*found 2"):
        load_sst2(tmp_path / "b")
    write_tsv(tmp_path / "c", "train", ("label", "sentence"), ROWS + [("2", "three classes ?")])
    with pytest.raises(ValueError, match=r"line 5: expected label 0 or 1 in column 'label', got '2'"):
        load_sst2(tmp_path / "c")
    write_tsv(tmp_path / "d", "train", ("label", "sentence"), [("1", "a\ttab")])
    with pytest.raises(ValueError, match="line 2: expected 2 tab-separated fields"):
        load_sst2(tmp_path / "d")


# --------------------------------------------------------------------------
# tokens, vocabulary, encoding
# --------------------------------------------------------------------------


def test_tokenize():
    assert tokenize("it 's  not\tbad .") == ["it", "'s", "not", "bad", "."]
    assert tokenize("Not BAD", lower=True) == ["not", "bad"]
    assert tokenize("") == []
    with pytest.raises(TypeError, match="sentence"):
        tokenize(["a"])


def test_vocabulary_build_orders_by_count_then_text():
    sents = ["b a c", "a b", "a d", "<pad> d"]
    v = Vocabulary.build(sents)
    # counts: a 3, b 2, d 2, c 1; ties by text; "<pad>" in text is not a token
    assert v.itos == ["<pad>", "<unk>", "a", "b", "d", "c"] and len(v) == 6
    assert v.counts == {"a": 3, "b": 2, "d": 2, "c": 1}
    assert Vocabulary.build(sents[::-1]).itos == v.itos  # independent of sentence order
    assert Vocabulary.build(sents, min_count=2).itos == ["<pad>", "<unk>", "a", "b", "d"]
    assert Vocabulary.build(sents, max_size=1).itos == ["<pad>", "<unk>", "a"]
    assert Vocabulary.build(sents, max_size=0).itos == ["<pad>", "<unk>"]
    assert (v.id("a"), v.id("zebra"), v.id("<pad>"), v.id("<unk>")) == (2, UNK_ID, UNK_ID, UNK_ID)
    assert Vocabulary.build(["A a"], lower=True).counts == {"a": 2}
    assert Vocabulary.build(["A a"]).counts == {"A": 1, "a": 1}


def test_encode_pads_truncates_and_masks():
    v = Vocabulary(["the", "film", "is", "good"])  # ids 2, 3, 4, 5
    ids, mask = v.encode(["the film is good", "good", "", "the bad film"], max_len=3)
    assert ids.dtype == np.int32 and ids.shape == (4, 3)
    assert ids.tolist() == [[2, 3, 4], [5, PAD_ID, PAD_ID], [PAD_ID] * 3, [2, UNK_ID, 3]]
    assert mask.tolist() == [[True] * 3, [True, False, False], [False] * 3, [True] * 3]
    ids, mask = v.encode(["the film is good", "good"])  # max_len: the longest
    assert ids.shape == (2, 4) and mask.sum(axis=1).tolist() == [4, 1]
    assert v.encode([])[0].shape == (0, 1)
    assert v.decode(*v.encode(["the bad film"])) == ["the <unk> film"]
    lv = Vocabulary.build(["good film"], lower=True)
    assert lv.encode(["GOOD Film"])[0].tolist() == [[lv.id("good"), lv.id("film")]] == [[3, 2]]


@settings(max_examples=60, deadline=None)
@given(sents=st.lists(st.lists(st.sampled_from(["a", "b", "c", "'s", ".", "n't", "é"]), max_size=8),
                      max_size=6),
       max_len=st.integers(1, 10))
def test_encode_decode_round_trip(sents, max_len):
    text = [" ".join(s) for s in sents]
    v = Vocabulary.build(text)
    ids, mask = v.encode(text, max_len=max_len)
    assert np.array_equal(mask.sum(axis=1), [min(len(s), max_len) for s in sents])
    assert np.all(ids[~mask] == PAD_ID) and np.all(ids[mask] >= 2)  # every token known: no <unk>
    assert v.decode(ids, mask) == [" ".join(s[:max_len]) for s in sents]
    # token_polarity counts exactly the unmasked tokens
    labels = np.arange(len(sents)) % 2
    _, fp, fn = token_polarity(ids, labels, len(v), mask=mask)
    assert fp.sum() + fn.sum() == mask.sum()


def test_vocabulary_rejects_bad_input():
    with pytest.raises(ValueError, match="duplicates"):
        Vocabulary(["a", "a"])
    with pytest.raises(ValueError, match="reserved"):
        Vocabulary(["<unk>"])
    with pytest.raises(ValueError, match="white space"):
        Vocabulary(["a b"])
    with pytest.raises(TypeError, match="lower"):
        Vocabulary(["a"], lower="no")
    with pytest.raises(TypeError, match="sentences: expected a sequence of sentences"):
        Vocabulary.build("a b c")
    with pytest.raises(TypeError, match="index 1"):
        Vocabulary.build(["a", 3])
    with pytest.raises(ValueError, match="min_count"):
        Vocabulary.build(["a"], min_count=0)
    with pytest.raises(ValueError, match="max_size"):
        Vocabulary.build(["a"], max_size=-1)
    v = Vocabulary(["a"])
    with pytest.raises(ValueError, match="max_len"):
        v.encode(["a"], max_len=0)
    with pytest.raises(ValueError, match="ids: expected ids in"):
        v.decode(np.array([[3]]))
    with pytest.raises(ValueError, match="mask"):
        v.decode(np.array([[2]]), mask=np.array([[1]]))


# --------------------------------------------------------------------------
# the real data, where present
# --------------------------------------------------------------------------


def _real_sst2():
    path = os.environ.get(ENV_VAR) or Path(__file__).resolve().parents[3] / "shared" / "data" / "sst2"
    path = Path(path)
    if not (path / "train.tsv").is_file() or not (path / "dev.tsv").is_file():
        pytest.skip(f"SST-2 not found at {path} (set ${ENV_VAR} to the folder with train.tsv and "
                    f"dev.tsv to run this test; it is never downloaded)")
    return path


def test_real_sst2_counts_and_balance():
    path = _real_sst2()
    train, y_train = load_sst2(path, "train")
    dev, y_dev = load_sst2(path, "dev")
    assert (len(train), len(y_train), len(dev), len(y_dev)) == (67_349, 67_349, 872, 872)
    for y in (y_train, y_dev):
        assert set(np.unique(y)) == {0, 1} and 0.4 < y.mean() < 0.65
    # GLUE's SST-2 is lower-cased and space-tokenised, as the module says
    assert not any(c.isupper() for s in train + dev for c in s)
    # Eq. 11 on the training split puts plainly polar words on the right side
    v = Vocabulary.build(train)
    ids, mask = v.encode(train)
    groups = polarity_groups(*token_polarity(ids, y_train, len(v), mask=mask))
    assert [groups[v.id(w)] for w in ("beautiful", "best")] == [POSITIVE, POSITIVE]
    assert [groups[v.id(w)] for w in ("worst", "dull")] == [NEGATIVE, NEGATIVE]
