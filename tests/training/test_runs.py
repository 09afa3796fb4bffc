"""Runs that never lose results: results written as they finish, checkpoints that hold their
whole history, checkpoints and memory checked before any work, one BLAS thread while training,
and clear one-line errors for bad data files."""

import json
import os
import tracemalloc

import numpy as np
import pytest

from refattn import cli
from refattn.training.optim import Adam
from refattn.training.runs import ResultsFile, check_memory, dumps
from refattn.training.train import check_checkpoint, load_checkpoint, save_checkpoint, train

from tests.training.toy import SEEDS, ToyModel, batches, run


# --------------------------------------------------------------------------
# Results files and strict JSON
# --------------------------------------------------------------------------


def test_results_file_holds_each_finished_piece_as_strict_json(tmp_path):
    path = tmp_path / "r.json"
    rf = ResultsFile(path, ["refattn", "x"])
    assert json.loads(path.read_text()) == {"command": ["refattn", "x"], "complete": False, "finished": {}}
    rf.add("softmax", {"loss": float("nan"), "acc": np.float64(0.5)})
    first = json.loads(path.read_text())  # the standard parser: NaN would be refused by strict readers
    assert first["finished"]["softmax"] == {"loss": None, "acc": 0.5}
    assert first["non_finite"] == ["$.finished.softmax.loss = nan"]
    rf.add("tanhmax", {"acc": 1.0})
    assert list(json.loads(path.read_text())["finished"]) == ["softmax", "tanhmax"]
    rf.complete({"all": [1, 2]})
    assert json.loads(path.read_text()) == {"command": ["refattn", "x"], "complete": True, "result": {"all": [1, 2]}}
    assert sorted(os.listdir(tmp_path)) == ["r.json"]  # no temporary left behind


def test_dumps_turns_every_non_finite_number_into_null_and_lists_it():
    text = dumps({"a": [1.0, float("inf"), np.float32("-inf")], "b": {"c": np.nan}})
    out = json.loads(text)
    assert out["a"] == [1.0, None, None] and out["b"] == {"c": None}
    assert out["non_finite"] == ["$.a[1] = inf", "$.a[2] = -inf", "$.b.c = nan"]


def test_a_failure_after_the_first_activation_keeps_its_results_on_disk(tmp_path, monkeypatch, capsys):
    """polarity trains softmax, then tanhmax fails: softmax's results are in DIR/polarity.json."""
    import refattn.studies.polarity as pol

    cli.build_parser()  # every study imported first: none may bind the failing function below
    real = pol.train_classifier

    def failing(tokens, labels, vocab, activation, **kw):
        if activation == "tanhmax":
            raise OSError("disk full (simulated)")
        return real(tokens, labels, vocab, activation, **kw)

    monkeypatch.setattr(pol, "train_classifier", failing)
    code = cli.main(["polarity", "--activations", "softmax,tanhmax", "--seeds", "1", "--epochs", "1",
                     "--out", str(tmp_path), "--json"])
    assert code == 2
    assert "disk full (simulated)" in capsys.readouterr().err
    saved = json.loads((tmp_path / "polarity.json").read_text())
    assert saved["complete"] is False and list(saved["finished"]) == ["softmax"]
    assert 0.0 <= saved["finished"]["softmax"]["mean"]["test_accuracy"] <= 1.0


def test_a_complete_run_with_out_leaves_its_whole_result_beside_the_figure(tmp_path, capsys):
    assert cli.main(["polarity", "--activations", "softmax", "--seeds", "1", "--epochs", "1",
                     "--out", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((tmp_path / "polarity.json").read_text())
    assert saved["complete"] is True
    assert saved["result"]["activations"] == printed["activations"]
    assert saved["result"]["figure"] == printed["figure"] == str(tmp_path / "polarity_fig2.png")


# --------------------------------------------------------------------------
# Memory: estimated and refused before any work
# --------------------------------------------------------------------------


def _peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_estimates_bound_the_measured_peaks():
    """Each estimate is at least the peak tracemalloc measures and at most 4 times it, at
    sizes other than those its constants were read from."""
    from refattn.studies import lm, nt_training, polarity

    cases = [
        (lambda: nt_training.run_nt(nt_training.Settings(task="N2T5", context=48, activation="expressive", seeds=3,
                                                         epochs=1, n_test=60), progress=False),
         nt_training.memory_estimate(48, 3, n_test=60)),
        (lambda: polarity.run_polarity(polarity.Settings(activations=("softmax",), seeds=2, epochs=1), progress=False),
         polarity.memory_estimate(2)),
        (lambda: lm.run_lm(lm.Settings(activations=("tanhmax",), data="toy", seeds=2, steps=1, layers=2, width=24,
                                       n_ctx=48), progress=False),
         None),
    ]
    for k, (fn, estimate) in enumerate(cases):
        if estimate is None:  # the LM's needs the vocabulary size, known after reading the corpus
            vocab = len(lm.load_corpus("toy")["vocab"])
            estimate = lm.memory_estimate(2, layers=2, width=24, heads=lm.DEFAULTS["heads"], n_ctx=48,
                                          batch_size=lm.DEFAULTS["batch_size"], vocab=vocab)
        peak = _peak(fn)
        assert peak <= estimate <= 4 * peak, (k, peak, estimate)


@pytest.mark.parametrize("argv", [
    ["nt", "--seeds", "1000000000", "--epochs", "1"],
    ["nt", "--context", "1000000000", "--epochs", "1"],
    ["polarity", "--seeds", "1000000000"],
    ["lm", "--data", "toy", "--seeds", "1000000000"],
])
def test_a_run_too_large_for_the_machine_is_refused_with_its_estimate(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "needs about" in err and "GiB of memory" in err and "--max-memory" in err


def test_max_memory_overrides_the_limit_both_ways(capsys):
    assert cli.main(["nt", "--seeds", "2", "--epochs", "1", "--max-memory", "0.001"]) == 2
    assert "allowed by --max-memory" in capsys.readouterr().err
    with pytest.raises(MemoryError, match="allowed by --max-memory"):
        check_memory(2 * 2**30, "this", limit=1.0)
    check_memory(2 * 2**30, "this", limit=3.0)  # under the limit: no error
    assert cli.main(["nt", "--seeds", "2", "--epochs", "1", "--max-memory", "nan"]) == 2  # the setting's own rule
    assert "--max-memory: " in capsys.readouterr().err


# --------------------------------------------------------------------------
# Checkpoints: one file with the whole history, checked before any work
# --------------------------------------------------------------------------


def test_a_checkpoint_is_one_file_that_holds_the_whole_history(tmp_path):
    """Three calls, each resuming the last, leave one .npz (and its lock file) whose history is an
    uninterrupted run's; save_checkpoint and load_checkpoint round-trip records and arrays."""
    ck = tmp_path / "run.npz"
    for epochs in (2, 4, 7):
        run(epochs=epochs, checkpoint=ck)
    assert sorted(os.listdir(tmp_path)) == ["run.npz", "run.npz.lock"]
    assert load_checkpoint(ck)["history"] == json.loads(json.dumps(run(epochs=7)[1]["history"]))
    model = ToyModel()
    params = model.init_params(SEEDS)
    opt = Adam(params, lr=0.05)
    history = [{"epoch": e, "loss": [0.1 * e]} for e in range(5)]
    save_checkpoint(tmp_path / "steps.npz", params, opt, history, epoch=4, fingerprint={"toy": 1})
    back = load_checkpoint(tmp_path / "steps.npz")
    assert back["history"] == history and back["epoch"] == 4 and back["fingerprint"] == {"toy": 1}
    assert all(np.array_equal(back["params"][k], params[k]) for k in params)
    assert back["optimizer"]["betas"] == [0.9, 0.999] and back["optimizer"]["type"] == "Adam"


def test_a_checkpoint_of_another_format_or_none_at_all_is_named(tmp_path):
    ck = tmp_path / "old.npz"
    meta = {"format": "refattn-checkpoint-1", "epoch": 0, "fingerprint": None,
            "history": [{"epoch": 0, "loss": [1.0]}], "optimizer": {"lr": 0.1, "step": 1}}
    np.savez(ck, **{"param/w": np.ones(2), "meta": np.array(json.dumps(meta))})
    with pytest.raises(ValueError, match=r"old\.npz': not a readable refattn checkpoint \(ValueError: format "
                                         r"'refattn-checkpoint-1', expected 'refattn-checkpoint-5'\)"):
        load_checkpoint(ck)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "absent.npz")


def test_checkpoints_are_checked_before_the_first_epoch(tmp_path, capsys):
    """A corrupt checkpoint of the *second* activation is refused before the first trains."""
    (tmp_path / "polarity_tanhmax.npz").write_bytes(b"not a zip")
    code = cli.main(["polarity", "--activations", "softmax,tanhmax", "--seeds", "1", "--epochs", "1",
                     "--checkpoint-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--checkpoint-dir: '" in err and "polarity_tanhmax.npz': not a readable" in err
    assert not (tmp_path / "polarity_softmax.npz").exists()  # nothing was trained
    assert (tmp_path / "polarity_tanhmax.npz").read_bytes() == b"not a zip"  # left alone
    with pytest.raises(ValueError, match="x: a checkpoint is a .npz file"):
        check_checkpoint(tmp_path / "a.txt", "x")
    check_checkpoint(tmp_path / "absent.npz")  # a new checkpoint is fine


def test_nt_checks_its_checkpoint_before_training(tmp_path, capsys):
    bad = tmp_path / "e.npz"
    bad.write_bytes(b"PK\x03\x04 truncated")
    assert cli.main(["nt", "--seeds", "1", "--epochs", "1", "--checkpoint", str(bad)]) == 2
    assert "not a readable refattn checkpoint" in capsys.readouterr().err


# --------------------------------------------------------------------------
# One BLAS thread while training
# --------------------------------------------------------------------------


def test_training_holds_blas_at_one_thread_and_restores_it():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        return [lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads()
    if not before:
        pytest.skip("no BLAS that threadpoolctl can control")
    seen = []
    model = ToyModel()
    params = model.init_params(SEEDS)
    train(model, params, Adam(params, lr=0.05), batches(SEEDS), epochs=2,
          callbacks=[lambda e, p: seen.append(blas_threads())])
    assert seen == [[1] * len(before)] * 2
    assert blas_threads() == before
    seen.clear()
    params = model.init_params(SEEDS)
    train(model, params, Adam(params, lr=0.05), batches(SEEDS), epochs=1, blas_threads=None,
          callbacks=[lambda e, p: seen.append(blas_threads())])
    assert seen == [before]
    with pytest.raises(ValueError, match="blas_threads"):
        train(model, params, Adam(params, lr=0.05), batches(SEEDS), epochs=1, blas_threads=0)


# --------------------------------------------------------------------------
# Data files
# --------------------------------------------------------------------------


def test_a_non_utf8_sst2_file_is_named_with_its_line(tmp_path, capsys):
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\ngood film\t1\nbad \xff film\t0\n")
    (tmp_path / "dev.tsv").write_bytes(b"sentence\tlabel\nfine\t1\n")
    for argv in (["sst2", "--data", str(tmp_path), "--seeds", "1"],
                 ["lm", "--data", str(tmp_path), "--seeds", "1", "--steps", "1"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith("train.tsv, line 3: not UTF-8 text (byte 0xff at column 5); save the file as UTF-8")


def test_a_header_only_training_file_is_named(tmp_path, capsys):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\nfine\t1\n")
    assert cli.main(["lm", "--data", str(tmp_path), "--seeds", "1", "--steps", "1"]) == 2
    assert "train.tsv' has no non-empty sentence" in capsys.readouterr().err
    assert cli.main(["sst2", "--data", str(tmp_path), "--seeds", "1"]) == 2
    assert "no non-empty sentence in train.tsv" in capsys.readouterr().err
