"""SST-2 training and TanhMax's Figure 1 (refattn.studies.sst2).

A tiny synthetic SST-2 folder (both header orders) runs the whole pipeline in
about a second; the real data (../shared/data/sst2 or $REFATTN_SST2) is used
only for one short run, and skipped where absent.
"""

import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn.studies import helpers
from refattn.studies import sst2 as ex
from refattn.studies.helpers import resolve_data_dir
from refattn.studies.sst2 import (
    PAPER_FIG1,
    idf_weights,
    is_odd,
    match_sentences,
    orient_weights,
    overlap_similarity,
    render_sentences,
    report,
    sst_tokenize,
    weight_colour,
)
from refattn.training.models.polarity import PolarityClassifier
from refattn.training.tasks.sst2 import ENV_VAR

pytestmark = pytest.mark.slow

POS = [f"good{i}" for i in range(6)]
NEG = [f"bad{i}" for i in range(6)]
NEU = [f"w{i}" for i in range(20)]
# TanhMax's third Figure 1 sentence, tokenised as GLUE's SST-2 is
PAPER3 = "those who love cinema paradiso will find the new scenes interesting , but others will find the movie disappointing ."


def _sentences(n, rng, extra=()):
    """``n`` synthetic sentences: 2 polar tokens of the label's group + 4 neutral ones."""
    rows = []
    for _ in range(n):
        y = int(rng.integers(2))
        toks = list(rng.choice(POS if y else NEG, 2)) + list(rng.choice(NEU, 4)) + list(extra)
        rng.shuffle(toks)
        rows.append((y, " ".join(toks)))
    return rows


@pytest.fixture
def tiny_sst2(tmp_path):
    """train.tsv with ``label<TAB>sentence`` (CRLF, one empty sentence); dev.tsv with
    ``content<TAB>label``, holding an unseen token and an exact copy of PAPER3."""
    rng = np.random.default_rng(0)
    train = _sentences(300, rng) + [(0, "")]
    dev = _sentences(59, rng, extra=("zzz-unseen",)) + [(0, PAPER3)]
    (tmp_path / "train.tsv").write_text("label\tsentence\r\n" + "".join(f"{y}\t{s}\r\n" for y, s in train))
    (tmp_path / "dev.tsv").write_text("content\tlabel\n" + "".join(f"{s}\t{y}\n" for y, s in dev))
    return tmp_path


TINY = {"seeds": 2, "epochs": 6, "batch_size": 50, "lr": 0.05}


def run_sst2(data=None, *, progress=False, **settings):
    """:func:`refattn.studies.sst2.run_sst2` with its settings written inline."""
    return ex.run_sst2(ex.Settings(data=None if data is None else str(data), **settings), progress=progress)


def test_tiny_end_to_end(tiny_sst2, tmp_path):
    r = run_sst2(tiny_sst2, out=str(tmp_path / "figs"), **TINY)
    back = json.loads(json.dumps(r))  # JSON-able, and unchanged by the round trip
    assert back["activations"].keys() == r["activations"].keys()
    d = r["data"]
    assert d["dropped_empty"] == {"train": 1, "dev": 0}
    assert (d["train"], d["dev"]) == (300, 60)
    # vocabulary from train only: the 32 synthetic tokens + <pad>, <unk>
    assert d["vocab_size"] == len(POS) + len(NEG) + len(NEU) + 2
    # every dev token outside the synthetic vocabulary is <unk>: the 59 "zzz-unseen" and all of PAPER3
    assert d["dev_unk_tokens"] == 59 + len(PAPER3.split())
    for act, res in r["activations"].items():
        acc = np.array([row["dev_accuracy"] for row in res["per_seed"]])
        assert res["dev_accuracy_mean"] == pytest.approx(acc.mean(), abs=1e-15)
        assert res["dev_accuracy_std"] == pytest.approx(np.sqrt(np.sum((acc - acc.mean()) ** 2) / (len(acc) - 1)))
        # separable data: the polar tokens decide the label (PAPER3, label 0, is the one coin flip)
        assert acc.min() >= 0.9, (act, acc)
        assert res["paper_table2"] == {"softmax": 0.834, "tanhmax": 0.872}[act]
    # an exact copy of a paper sentence is found, with similarity 1
    m = r["figure1"]["sentences"][2]["match"]
    assert m["exact"] and m["similarity"] == pytest.approx(1.0) and m["dev_index"] == 59
    assert r["figure"].endswith("sst2_fig1.png") and os.path.getsize(r["figure"]) > 0
    text = report(r)
    assert "0.834" in text and "0.872" in text and "exact dev sentence" in text


def test_checkpoint_resume_gives_the_same_numbers(tiny_sst2, tmp_path):
    kw = dict(TINY, activations=("tanhmax",), epochs=3)
    a = run_sst2(tiny_sst2, checkpoint_dir=tmp_path / "ck", **kw)
    assert (tmp_path / "ck" / "sst2_tanhmax.npz").exists()
    b = run_sst2(tiny_sst2, checkpoint_dir=tmp_path / "ck", **kw)  # nothing left to train
    assert a["activations"]["tanhmax"]["resumed_from"] is None
    assert b["activations"]["tanhmax"]["resumed_from"] == 2
    assert a["activations"]["tanhmax"]["per_seed"] == b["activations"]["tanhmax"]["per_seed"]
    assert a["figure1"] == b["figure1"]


def test_figure_weights_are_the_models_weights(tiny_sst2):
    """Figure 1 weights: softmax's are positive and sum to 1 per sentence; an odd
    activation's sign follows Eq. (14.O1)."""
    r = run_sst2(tiny_sst2, **TINY)
    for item in r["figure1"]["sentences"]:
        for source in ("matched", "paper"):
            w = np.array(item["activations"]["softmax"][source]["weights"])
            assert len(w) == len(item[source]["tokens"])
            assert np.all(w > 0) and w.sum() == pytest.approx(1.0, abs=1e-12)
            wt = np.array(item["activations"]["tanhmax"][source]["weights"])
            assert np.all(np.abs(wt) < 1)  # |sinh| < cosh
    o = r["activations"]["tanhmax"]["orientation"]
    assert o["odd"] and o["flipped"] == [c < 0 for c in o["statistic"]]
    assert r["activations"]["softmax"]["orientation"]["flipped"] == [False, False]


def test_orientation_matches_the_symmetric_twin():
    """(14.O1): a flipped seed shows exactly the weights of model.symmetric(params)."""
    model = PolarityClassifier(12, activation="tanhmax")
    params = model.init_params([3, 4])
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 12, (2, 9, 5))
    labels = rng.integers(0, 2, 9)
    w = model.outputs(params, {"tokens": tokens})["w"]  # (2, 9, 5)
    w_twin = model.outputs(model.symmetric(params), {"tokens": tokens})["w"]
    np.testing.assert_array_equal(w_twin, -w)  # the twin's weights are exactly -w
    sign, c = orient_weights("tanhmax", w, labels)
    np.testing.assert_allclose(c, [np.sum(w[k].sum(axis=1) * (2 * labels - 1)) for k in range(2)], rtol=1e-12)
    oriented = sign[:, None, None] * w
    assert np.all(oriented.sum(axis=2) @ (2.0 * labels - 1) >= 0)
    sign_twin, c_twin = orient_weights("tanhmax", w_twin, labels)
    np.testing.assert_allclose(c_twin, -c)
    np.testing.assert_array_equal(sign_twin[:, None, None] * w_twin, oriented)  # same picture from either twin
    # softmax is not odd: never flipped, whatever the statistic
    assert np.all(orient_weights("softmax", -np.abs(w), labels)[0] == 1)


def test_is_odd():
    assert [is_odd(a) for a in ("softmax", "tanhmax", "signexp", "linear", "expressive", "relu")] == \
        [False, True, True, True, False, False]


def test_sst_tokenize():
    assert sst_tokenize("Those who love Cinema Paradiso will find the new scenes interesting, but others "
                        "will find the movie disappointing.") == PAPER3.split()
    assert sst_tokenize("It's a self-indulgent film; I don't like it!") == \
        ["it", "'s", "a", "self-indulgent", "film", ";", "i", "do", "n't", "like", "it", "!"]
    with pytest.raises(TypeError, match="text"):
        sst_tokenize(3)


def test_idf_and_overlap_closed_form():
    corpus = ["a b", "a c", "a b d"]
    idf = idf_weights(corpus)
    assert idf("a") == pytest.approx(math.log(4 / 4))  # in all 3: weight 0
    assert idf("b") == pytest.approx(math.log(4 / 3))
    assert idf("zz") == pytest.approx(math.log(4))  # unseen
    ib, ic, idd = math.log(4 / 3), math.log(4 / 2), math.log(4 / 2)
    # A = {a, b, c}, B = {a, b, d}: shared weight ib, totals ib + ic and ib + idd
    assert overlap_similarity("a b c".split(), "a b d".split(), idf) == pytest.approx(2 * ib / (2 * ib + ic + idd))
    assert overlap_similarity(["a"], ["a"], idf) == 0.0  # both weightless
    got = match_sentences([["b", "d"], ["c"]], corpus, idf)
    assert [g["index"] for g in got] == [2, 1] and not got[0]["exact"]
    assert match_sentences([["a", "c"]], corpus, idf)[0]["exact"]
    with pytest.raises(ValueError, match="candidates"):
        match_sentences([["a"]], [], idf)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=8),
       st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=8),
       st.dictionaries(st.sampled_from("abcdefg"), st.floats(0, 1e300, allow_subnormal=True)))
def test_overlap_properties(a, b, table):
    """Symmetric, in [0, 1], 1 for equal non-weightless sets, for any weights (even huge or tiny)."""
    w = lambda t: table.get(t, 1.0)  # noqa: E731
    s = overlap_similarity(a, b, w)
    assert 0.0 <= s <= 1.0 + 1e-12
    assert s == overlap_similarity(b, a, w)
    if sum(w(t) for t in set(a)) > 0:
        assert overlap_similarity(a, list(reversed(a)), w) == pytest.approx(1.0)


@settings(max_examples=100, deadline=None)
@given(st.floats(-1e308, 1e308), st.floats(1e-300, 1e308))
def test_weight_colour_properties(w, scale):
    """Colours in [0, 1]; white at 0; red channel full for w > 0, blue full for w < 0;
    the depth |w| / scale (capped at 1) shows in the other two channels."""
    r, g, b = weight_colour(w, scale)
    assert all(0.0 <= c <= 1.0 for c in (r, g, b))
    t = min(abs(w) / scale, 1.0)
    if w > 0:
        assert (r, g, b) == (1.0, 1.0 - t, 1.0 - t)
    elif w < 0:
        assert (r, g, b) == (1.0 - t, 1.0 - t, 1.0)
    else:
        assert (r, g, b) == (1.0, 1.0, 1.0)


def test_render_sentences_writes_png(tmp_path):
    path = render_sentences(["a warm film", ["dreary", ",", "dull", "and", "long"] * 8],
                            [[0.5, 0.9, -0.1], np.linspace(-1, 1, 40)], tmp_path / "sub" / "s.png",
                            "title", row_labels=["one", "two"])
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    render_sentences(["x y"], [[0.0, 0.0]], tmp_path / "zero.png")  # all-zero weights: no division by 0


def test_render_sentences_bad_input(tmp_path):
    p = tmp_path / "x.png"
    with pytest.raises(ValueError, match="weights"):
        render_sentences(["a b"], [[0.1]], p)
    with pytest.raises(ValueError, match="weights"):
        render_sentences(["a b"], [[0.1, 0.2], [0.3]], p)
    with pytest.raises(ValueError, match=r"weights\[0\]"):
        render_sentences(["a b"], [[0.1, np.nan]], p)
    with pytest.raises(ValueError, match="row_labels"):
        render_sentences(["a b"], [[0.1, 0.2]], p, row_labels=["x", "y"])
    with pytest.raises(ValueError, match="scale"):
        render_sentences(["a b"], [[0.1, 0.2]], p, scale=-1.0)
    with pytest.raises(ValueError, match="scale"):
        render_sentences(["a b"], [[0.1, 0.2]], p, scale=[1.0, 2.0])
    with pytest.raises(ValueError, match="scale"):
        render_sentences(["a b"], [[0.1, 0.2]], p, scale="big")
    with pytest.raises(TypeError, match="sentences"):
        render_sentences("a b", [[0.1, 0.2]], p)
    with pytest.raises(ValueError, match="w, scale"):
        weight_colour(0.1, 0.0)
    assert not p.exists()


def test_data_dir_resolution(tiny_sst2, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(helpers, "sibling_data_dir", lambda: tmp_path / "no-such-folder")
    with pytest.raises(FileNotFoundError, match=r"--data.*REFATTN_SST2"):
        resolve_data_dir()
    with pytest.raises(FileNotFoundError, match=r"--data.*REFATTN_SST2"):
        run_sst2()
    with pytest.raises(FileNotFoundError, match=r"^--data: .*is not a folder"):
        resolve_data_dir(tmp_path / "missing")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "train.tsv").write_text("label\tsentence\n1\ta\n")
    with pytest.raises(FileNotFoundError, match="no dev.tsv"):
        resolve_data_dir(tmp_path / "half")
    with pytest.raises(TypeError, match="data"):
        resolve_data_dir(3)
    assert resolve_data_dir(tiny_sst2) == tiny_sst2
    monkeypatch.setattr(helpers, "sibling_data_dir", lambda: tiny_sst2)  # the fallback
    assert resolve_data_dir() == tiny_sst2
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))  # the variable wins over the fallback
    with pytest.raises(FileNotFoundError, match=r"\$REFATTN_SST2"):
        resolve_data_dir()


@pytest.mark.parametrize("kw, match", [
    ({"activations": ("softmax", "nope")}, "activations"), ({"activations": ()}, "activations"),
    ({"seeds": 0}, "seeds"), ({"first_seed": -1}, "first_seed"), ({"score": "dot"}, "score"),
    ({"optimizer": "rmsprop"}, "optimizer"), ({"lr": -1.0}, "lr"), ({"dropout": 1.0}, "dropout"),
    ({"epochs": 0}, "epochs"), ({"max_len": 0}, "max_len"), ({"train_limit": 0}, "train_limit"),
    ({"seeds": 2, "figure_seed": 5}, "figure_seed"),
])
def test_bad_settings(tiny_sst2, kw, match):
    with pytest.raises(ValueError, match=match):
        run_sst2(tiny_sst2, **kw)


def test_paper_sentences_are_not_in_the_tiny_data_but_tokenise():
    assert len(PAPER_FIG1) == 4
    assert [p["role"] for p in PAPER_FIG1] == ["positive", "negative", "semantic inflection", "neutral narrative"]
    assert "warm" in sst_tokenize(PAPER_FIG1[0]["text"]) and "dreary" in sst_tokenize(PAPER_FIG1[1]["text"])


def _real_data():
    try:
        return resolve_data_dir()
    except FileNotFoundError:
        return None


@pytest.mark.skipif(_real_data() is None, reason="SST-2 not found (set $REFATTN_SST2 or put it in "
                                                  "../shared/data/sst2); never downloaded")
def test_real_sst2_short_run():
    """A short run on a 5,000-sentence subset of GLUE's train split (about 5 s): it must beat
    the majority class of dev (0.509) clearly."""
    r = run_sst2(activations=("softmax",), seeds=1, epochs=2, lr=1e-2, train_limit=5000)
    assert r["data"]["dev"] == 872 and r["data"]["train"] == 5000
    assert r["activations"]["softmax"]["dev_accuracy_mean"] > 0.6
    # TanhMax's sentences are not in GLUE's dev split
    assert not any(item["match"]["exact"] for item in r["figure1"]["sentences"])
    json.dumps(r)


def test_sst2_cli(tiny_sst2, tmp_path, capsys):
    from refattn.cli import main

    out = tmp_path / "figs"
    assert main(["sst2", "--data", str(tiny_sst2), "--seeds", "2", "--epochs", "1", "--json", "--out", str(out)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["activations"]) == {"softmax", "tanhmax"}
    for a in r["activations"].values():
        assert 0.0 <= a["dev_accuracy_mean"] <= 1.0 and len(a["per_seed"]) == 2
    assert (out / "sst2_fig1.png").is_file()
    assert main(["sst2", "--data", str(tiny_sst2), "--seeds", "1", "--activations", "tanhmax"]) == 0
    assert "Table 2" in capsys.readouterr().out


def test_overlap_similarity_does_not_depend_on_hash_order():
    """The sums run over sets of strings, whose order changes with PYTHONHASHSEED;
    math.fsum makes them exact, so every hash seed gives the same bits."""
    import os
    import subprocess
    import sys

    code = ("from refattn.studies.sst2 import overlap_similarity\n"
            "toks = [f't{i}' for i in range(200)]\n"
            "w = {t: 3.3 / (i + 1) ** 0.5 for i, t in enumerate(toks)}\n"
            "print(repr(overlap_similarity(toks[:150], toks[50:], w.__getitem__)))\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout for h in range(4)}
    assert len(outs) == 1, outs
