"""Tests for refattn.studies.lm: the toy language model comparison (derivations/19-toy-lm.md).

* maximal_phrases against a brute-force definition (hand-made and random phrase sets);
* the corpus: ids, <unk>, windows, both levels, the generated corpus;
* run_lm on the generated corpus: every variant gets the same budget and the same
  batches (a variant's result does not depend on which others run beside it),
  the result is JSON-able, checkpoints resume, report and plot work;
* on SST-2 when it is present (skipped with a reason otherwise): the maximal
  phrases cover GLUE's phrases and none contains another, and a two-step run.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn.studies import lm
from refattn.studies.helpers import maximal_phrases
from refattn.studies.lm import (
    DEFAULTS,
    PAPER_TABLE4,
    VARIANTS,
    load_corpus,
    ngram_baseline,
    plot,
    report,
    toy_sentences,
    variant_options,
    windows,
)

pytestmark = pytest.mark.slow

SST2 = Path(os.environ.get("REFATTN_SST2") or Path(__file__).resolve().parents[3] / "shared" / "data" / "sst2")
HAVE_SST2 = (SST2 / "train.tsv").is_file() and (SST2 / "dev.tsv").is_file()
needs_sst2 = pytest.mark.skipif(not HAVE_SST2, reason=f"SST-2 not found at {SST2} (set REFATTN_SST2)")

TINY = dict(seeds=2, steps=4, layers=3, width=8, heads=2, n_ctx=8, batch_size=3, eval_every=2,
            eval_windows=4, final_windows=6)


def run_lm(activations, *, progress=False, **settings):
    """:func:`refattn.studies.lm.run_lm` with its settings written inline."""
    return lm.run_lm(lm.Settings(activations=tuple(activations), **settings), progress=progress)


def brute_maximal(phrases):
    """The definition: a phrase is kept unless it sits, between spaces, inside another one."""
    ps = list(dict.fromkeys(" ".join(p.split()) for p in phrases if p.split()))
    return [p for p in ps if not any(q != p and f" {p} " in f" {q} " for q in ps)]


def test_maximal_phrases_by_hand():
    phrases = ["a b c d", "b c", "c d", "x y", "b c", "  a  b ", "cd", "a b c d e", "d e f", "y"]
    # "a b c d" is inside "a b c d e"; "b c", "c d", "a b" too; "y" is inside "x y";
    # "cd" is one token, not inside "c d"; "d e f" overlaps "a b c d e" but is not inside it
    assert maximal_phrases(phrases) == ["x y", "cd", "a b c d e", "d e f"]
    assert maximal_phrases(phrases) == brute_maximal(phrases)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcde"), min_size=1, max_size=6).map(" ".join), max_size=25))
def test_maximal_phrases_matches_the_definition(phrases):
    assert maximal_phrases(phrases) == brute_maximal(phrases)


def brute_ngram(train, dev, V, order, alpha):
    """The definition, with dictionaries: add-alpha n-gram loss and most-frequent-continuation accuracy."""
    from collections import Counter, defaultdict

    k = order - 1
    table = defaultdict(Counter)
    for i in range(k, len(train)):
        table[tuple(train[i - k:i])][train[i]] += 1
    nll, hit = [], []
    for i in range(k, len(dev)):
        c = table.get(tuple(dev[i - k:i]), Counter())
        nll.append(-np.log((c[dev[i]] + alpha) / (sum(c.values()) + alpha * V)))
        best = min(c, key=lambda v: (-c[v], v)) if c else 0
        hit.append(best == dev[i])
    return float(np.mean(nll)), float(np.mean(hit))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), V=st.integers(1, 5), order=st.integers(1, 4), alpha=st.floats(0.01, 2.0))
def test_ngram_baseline_matches_counting(seed, V, order, alpha):
    rng = np.random.default_rng(seed)
    train, dev = rng.integers(0, V, 60), rng.integers(0, V, 25)
    res = ngram_baseline(train, dev, V, order, alpha)
    loss, acc = brute_ngram(train, dev, V, order, alpha)
    assert np.isclose(res["loss"], loss, rtol=1e-12) and res["accuracy"] == acc
    assert np.isclose(res["perplexity"], np.exp(loss))


def test_toy_corpus_and_windows():
    a, b = toy_sentences(50, seed=3), toy_sentences(50, seed=3)
    assert a == b and len(a) == 50 and all(s.endswith(" .") for s in a)
    assert toy_sentences(50, seed=4) != a
    c = load_corpus("toy")
    V = len(c["vocab"])
    assert c["vocab"][0] == "<unk>" and "\n" in c["vocab"] and " " in c["vocab"]
    assert c["train"].min() >= 0 and c["train"].max() < V and c["dev"].max() < V
    text = "".join(c["vocab"][i] for i in c["train"][:200])
    assert text.startswith(toy_sentences(1, seed=0)[0] + "\n")
    ids = np.arange(20)
    x, y = windows(ids, 5, starts=np.array([[0, 3], [14, 2]]))
    assert x.shape == (2, 2, 5)
    np.testing.assert_array_equal(x[1, 0], np.arange(14, 19))
    np.testing.assert_array_equal(y, x + 1)
    with pytest.raises(ValueError, match="fit"):
        windows(ids, 5, starts=np.array([15]))


def test_word_level_and_unknown_symbols():
    w = load_corpus("toy", level="word", min_count=1)
    assert w["vocab"][:2] == ["<unk>", "<eos>"]
    assert w["train_unk_fraction"] == 0.0
    eos = w["vocab"].index("<eos>")
    assert (w["train"] == eos).sum() == w["n_train_sentences"]
    capped = load_corpus("toy", level="word", max_vocab=5)
    assert len(capped["vocab"]) == 7 and capped["train_unk_fraction"] > 0.2
    rare = load_corpus("toy", min_count=10**6)  # every character is rare
    assert rare["vocab"] == ["<unk>"] and np.all(rare["train"] == 0)


def test_variant_options():
    assert variant_options("tanhmax") == {"activations": "tanhmax", "scores": "dot"}
    assert variant_options("cog-hybrid")["activations"] == "cog-hybrid"
    assert variant_options("neural-first") == {"activations": "softmax", "scores": "neural-first"}
    with pytest.raises(ValueError, match="layers: 'cog-hybrid' keeps softmax"):  # the settings' rules
        lm.Settings(activations=("cog-hybrid",), layers=2)
    with pytest.raises(ValueError, match="'tanh' is not one of"):
        lm.Settings(activations=("tanh",))
    assert set(VARIANTS) >= {"softmax", "tanhmax", "signexp", "cog-hybrid", "expressive", "sigsoftmax", "relu",
                             "linear", "neural-first"}
    assert DEFAULTS["layers"] >= 3  # the Cog hybrid needs a middle layer


def test_run_lm_on_the_generated_corpus(tmp_path):
    res = run_lm(["softmax", "tanhmax", "cog-hybrid", "neural-first"], data="toy", **TINY)
    json.dumps(res)  # JSON-able
    s = res["settings"]
    assert s["tokens_per_seed"] == TINY["steps"] * TINY["batch_size"] * TINY["n_ctx"]
    for name, r in res["variants"].items():
        assert r["finite"] and len(r["per_seed"]) == 2
        assert r["curve"]["step"] == [2, 4] and np.shape(r["curve"]["dev_loss"]) == (2, 2)
        assert np.isclose(r["dev_perplexity_mean"], np.mean([np.exp(p["dev_loss"]) for p in r["per_seed"]]))
        assert 0 <= r["dev_accuracy_mean"] <= 1 and r["train_seconds"] > 0
    assert [x["activation"] for x in res["variants"]["cog-hybrid"]["layers"]] == ["softmax", "signexp", "softmax"]
    assert [x["score"] for x in res["variants"]["neural-first"]["layers"]] == ["neural", "dot", "dot"]
    assert res["variants"]["neural-first"]["n_params"] > res["variants"]["softmax"]["n_params"]
    # a variant's result does not depend on the others run beside it: same batches, same init
    alone = run_lm(["tanhmax"], data="toy", **TINY)
    assert alone["variants"]["tanhmax"]["per_seed"] == res["variants"]["tanhmax"]["per_seed"]
    text = report(res)
    for name in res["order"]:
        assert name in text
    assert "TanhMax Table 4" in text and "NeuralAttn Table 1" in text and "3-gram ppl" in text
    assert [b["order"] for b in res["baselines"]] == [2, 3, 4]
    assert f"{PAPER_TABLE4['validation']['tanhmax'][0] - PAPER_TABLE4['validation']['softmax'][0]:+.1f} pp" in text
    fig = plot(res)
    assert len(fig.axes) == 2
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_run_lm_resumes_from_checkpoints(tmp_path):
    first = run_lm(["signexp"], data="toy", checkpoint_dir=str(tmp_path), **TINY)
    assert first["variants"]["signexp"]["resumed_from"] is None
    assert (tmp_path / "lm_signexp.npz").is_file()
    again = run_lm(["signexp"], data="toy", checkpoint_dir=str(tmp_path), **TINY)
    assert again["variants"]["signexp"]["resumed_from"] == 1  # the last trainer epoch, nothing left to do
    assert again["variants"]["signexp"]["per_seed"] == first["variants"]["signexp"]["per_seed"]
    with pytest.raises(ValueError, match="another run"):
        run_lm(["signexp"], data="toy", checkpoint_dir=str(tmp_path), **(TINY | {"lr": 1e-2}))


def test_run_lm_bad_input():
    with pytest.raises(ValueError, match="'softmax' is given twice"):
        run_lm(["softmax", "softmax"], data="toy", **TINY)
    with pytest.raises(ValueError, match="'softmaxx' is not one of"):
        run_lm(["softmaxx"], data="toy", **TINY)
    with pytest.raises(ValueError, match="level"):
        run_lm(["softmax"], data="toy", level="byte", **{k: v for k, v in TINY.items()})
    with pytest.raises(ValueError, match="dtype"):
        run_lm(["softmax"], data="toy", dtype="float16", **TINY)
    with pytest.raises(FileNotFoundError):
        run_lm(["softmax"], data="/nonexistent/sst2", **TINY)
    with pytest.raises(TypeError, match="seeds"):
        run_lm(["softmax"], data="toy", **(TINY | {"seeds": "3"}))
    with pytest.raises(ValueError, match="first_seed"):
        run_lm(["softmax"], data="toy", **(TINY | {"first_seed": -1}))


@needs_sst2
def test_sst2_maximal_phrases_cover_glue_and_none_contains_another():
    from refattn.training.tasks.sst2 import load_sst2

    phrases, _ = load_sst2(SST2, "train")
    kept = maximal_phrases(phrases)
    assert 0 < len(kept) < len(phrases)
    joined = "\n".join(f" {k} " for k in kept)
    rng = np.random.default_rng(0)
    for i in rng.choice(len(phrases), 200, replace=False):  # every phrase lies inside a kept one
        p = " ".join(phrases[i].split())
        assert not p or f" {p} " in joined, p
    for i in rng.choice(len(kept), 100, replace=False):  # and no kept phrase inside another
        others = "\n".join(f" {k} " for j, k in enumerate(kept) if j != i)
        assert f" {kept[i]} " not in others, kept[i]


@needs_sst2
def test_sst2_corpus_and_a_short_run():
    c = load_corpus(SST2)
    assert c["level"] == "char" and 30 < len(c["vocab"]) < 100
    assert c["dev_unk_fraction"] < 1e-3 and c["n_dev_sentences"] == 872
    res = run_lm(["softmax"], data=str(SST2), **(TINY | {"steps": 2, "eval_every": 2}))
    assert res["data"]["source"] == str(SST2) and res["variants"]["softmax"]["finite"]
    assert "SST-2" in report(res)


def test_a_diverged_lm_run_is_reported_not_a_crash():
    """Adam at lr 1e9 sends the dev loss to NaN or a huge value: the run finishes, marks
    the variant not finite, and its perplexity is inf or NaN instead of an OverflowError."""
    from refattn.cli import _dumps

    with np.errstate(all="ignore"):
        result = run_lm(("softmax",), data="toy", seeds=1, steps=20, layers=1, width=8, lr=1e9)
    entry = result["variants"]["softmax"]
    ppl = entry["per_seed"][0]["dev_perplexity"]
    assert not entry["finite"] or not np.isfinite(ppl)
    json.loads(_dumps(result), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
