"""The NT training runner (refattn.experiments.nt_training) and `refattn nt`."""

import json

import numpy as np
import pytest

from refattn.cli import main
from refattn.experiments import nt_training as ntt
from refattn.models.nt import NTModel


def test_batches_follow_the_task_and_depend_only_on_seed_and_epoch():
    b = ntt.make_batches("N2T1", 6, seeds=(0, 5))(3)[0]
    assert b["context"].shape == (2, 40, 6) and b["target"].shape == (2, 40)
    # XOR rule: target = (x[t-1] + x[t-2]) % 2, the last two symbols of each window (tau = 1)
    np.testing.assert_array_equal(b["target"], (b["context"][..., -1] + b["context"][..., -2]) % 2)
    alone = ntt.make_batches("N2T1", 6, seeds=(5,))(3)[0]
    np.testing.assert_array_equal(alone["context"][0], b["context"][1])


def test_small_run_learns_and_reports(tmp_path):
    r = ntt.run_nt("N2T1", 4, "softmax", seeds=3, epochs=60, eval_every=20, n_test=20)
    assert r["n_params"] == NTModel(2, 4).n_params
    assert len(r["epochs_to_100"]) == 3 and len(r["eval_epochs"]) == 3
    assert r["loss"][-1] < r["loss"][0]
    for e, acc in zip(r["epochs_to_100"], r["accuracy"]):
        assert (e is None) == (max(acc) < 1.0)
    json.dumps(r)


def test_resumed_nt_run_ends_where_an_uninterrupted_one_does(tmp_path):
    ck = tmp_path / "nt.npz"
    full = ntt.run_nt("N2T1", 4, "expressive", seeds=2, epochs=12, eval_every=4, n_test=5)
    ntt.run_nt("N2T1", 4, "expressive", seeds=2, epochs=12, eval_every=4, n_test=5, checkpoint=ck,
               stop_after=5)  # interrupted after epoch 5
    with pytest.raises(ValueError, match="another run"):  # another attention: refused, not mixed
        ntt.run_nt("N2T1", 4, "softmax", seeds=2, epochs=12, eval_every=4, n_test=5, checkpoint=ck)
    resumed = ntt.run_nt("N2T1", 4, "expressive", seeds=2, epochs=12, eval_every=4, n_test=5, checkpoint=ck)
    assert resumed["resumed_from"] == 5
    assert resumed["loss"] == full["loss"] and resumed["accuracy"] == full["accuracy"]


def test_expressive_attention_is_blind_to_symbols_at_N2_with_this_layout():
    # d = 2: layer normalisation maps the two one-hot symbols to +u and -u, so
    # z_mk = Q_m . K_k only changes sign with the symbols and z^2 does not: EA's
    # weights cannot depend on the content (derivations/11-nt-model.md). DPA's do.
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, 2, (2, 30, 8))
    for act, blind in (("expressive", True), ("softmax", False)):
        m = NTModel(2, 8, activation=act)
        A = m.forward(m.init_params((0, 1)), ctx)["attention"]
        spread = np.max(A.max(axis=1) - A.min(axis=1))
        assert (spread == 0.0) == blind, (act, spread)


def test_nt_cli(tmp_path, capsys):
    assert main(["nt", "--count-params"]) == 0
    assert capsys.readouterr().out.strip() == "802"
    assert main(["nt", "--task", "N2T1", "--context", "4", "--seeds", "2", "--epochs", "4", "--eval-every", "2",
                 "--n-test", "5", "--json", "--out", str(tmp_path)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["task"] == "N2T1" and len(res["seeds"]) == 2
    assert list(tmp_path.glob("*.png"))


def test_bad_input():
    with pytest.raises(ValueError, match="seeds"):
        ntt.run_nt(seeds=())
    with pytest.raises(ValueError, match="eval_every"):
        ntt.run_nt(eval_every=0)
