"""The trainer: analytic vs autograd trajectories, bit-for-bit determinism,
atomic checkpoints and resume, progress, bad input. A small batched logistic
model (one per seed) stands in for the real ones, which test their own
backward passes."""

import json
import os

import numpy as np
import pytest

from refattn.training.optim import SGD, Adam
from refattn.training.train import batch_iterator, gradient, load_checkpoint, train
from tests.training.toy import SEEDS, ToyModel, batches, run


def test_toy_model_backward_matches_autograd():
    model = ToyModel()
    params = model.init_params(SEEDS)
    batch = batches(SEEDS)(0)[0]
    la, ga = gradient(model, params, batch, "analytic")
    lb, gb = gradient(model, params, batch, "autograd")
    np.testing.assert_allclose(la, lb, rtol=1e-14)
    for k in ga:
        np.testing.assert_allclose(ga[k], gb[k], rtol=1e-12, atol=1e-15)


def test_analytic_and_autograd_trajectories_agree():
    # 20 steps each way in float64 (the check): same trajectory to 1e-10
    pa, oa = run(epochs=5, grad="analytic")  # 4 batches per epoch: 20 steps
    pb, ob = run(epochs=5, grad="autograd")
    for k in pa:
        np.testing.assert_allclose(pa[k], pb[k], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(oa["history"][-1]["loss"], ob["history"][-1]["loss"], rtol=1e-10)


def test_same_seed_same_result_bit_for_bit():
    pa, oa = run()
    pb, ob = run()
    for k in pa:
        assert np.array_equal(pa[k], pb[k])
    assert oa["history"] == ob["history"]


def test_a_seed_trains_the_same_alone_or_batched():
    p_all, _ = run(seeds=SEEDS, opt=SGD)
    p_one, _ = run(seeds=(4,), opt=SGD)
    np.testing.assert_array_equal(p_all["w"][2], p_one["w"][0])


def test_history_records_loss_and_callbacks_per_epoch():
    _, out = run(epochs=4)
    h = out["history"]
    assert [r["epoch"] for r in h] == [0, 1, 2, 3]
    assert all(len(r["loss"]) == len(SEEDS) and len(r["w_norm"]) == len(SEEDS) for r in h)
    assert np.mean(h[-1]["loss"]) < np.mean(h[0]["loss"])  # it learns
    json.dumps(h)


def test_interrupted_run_resumes_to_the_same_final_numbers(tmp_path):
    ck = tmp_path / "run.npz"
    p_full, o_full = run(epochs=6)
    p_a, o_a = run(epochs=6, checkpoint=ck, stop_after=2)  # "interrupted" after epoch 2
    assert len(o_a["history"]) == 3 and load_checkpoint(ck)["epoch"] == 2
    p_b, o_b = run(epochs=6, checkpoint=ck)  # a fresh process would start exactly like this
    assert o_b["resumed_from"] == 2
    for k in p_full:
        assert np.array_equal(p_full[k], p_b[k])
    assert o_b["history"] == o_full["history"]


def test_resume_after_a_crash_inside_an_epoch(tmp_path):
    ck = tmp_path / "run.npz"

    def crash(epoch, params):
        if epoch == 3:
            raise KeyboardInterrupt
        return {}

    model = ToyModel()
    params = model.init_params(SEEDS)
    with pytest.raises(KeyboardInterrupt):
        train(model, params, Adam(params, lr=0.05), batches(SEEDS), epochs=6, callbacks=[crash],
              checkpoint=ck, fingerprint={"toy": 1})
    assert load_checkpoint(ck)["epoch"] == 2  # epoch 3's update was not saved
    assert not any(".partial" in p.name for p in tmp_path.iterdir())
    params2 = model.init_params(SEEDS)
    out = train(model, params2, Adam(params2, lr=0.05), batches(SEEDS), epochs=6, checkpoint=ck,
                fingerprint={"toy": 1})
    p_full, _ = run(epochs=6)
    assert out["resumed_from"] == 2
    for k in params2:
        assert np.array_equal(params2[k], p_full[k])


def test_checkpoint_of_another_run_is_refused(tmp_path):
    ck = tmp_path / "run.npz"
    run(epochs=2, checkpoint=ck, fingerprint={"lr": 0.05})
    with pytest.raises(ValueError, match="another run"):
        run(epochs=3, checkpoint=ck, fingerprint={"lr": 0.1})
    _, out = run(epochs=2, checkpoint=ck, fingerprint={"lr": 0.1}, resume=False)
    assert out["resumed_from"] is None


def test_progress_bar_on_stderr_when_asked_or_on_a_terminal(capsys):
    run(epochs=2, progress=True, label="toy")
    err = capsys.readouterr().err
    assert "toy" in err and "2/2" in err and "loss=" in err
    run(epochs=1)  # the default: only on a terminal, and pytest's stderr is not one
    run(epochs=1, progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("library", ["tqdm", "filelock"])
def test_a_missing_library_of_the_studies_extra_is_one_line_naming_it(library, monkeypatch, capsys, tmp_path):
    import sys

    from refattn import cli

    monkeypatch.setitem(sys.modules, library, None)  # ``import tqdm`` (or filelock) now fails
    with pytest.raises(ValueError, match=rf"{library} is not installed; .* pip install 'refattn\[studies\]'"):
        run(epochs=1, checkpoint=tmp_path / "run.npz")
    argv = ["nt", "--task", "N2T1", "--context", "4", "--seeds", "1", "--epochs", "1", "--n-test", "2",
            "--checkpoint", str(tmp_path / "nt.npz")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"refattn nt: error: {library} is not installed") and "refattn[studies]" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "run.npz").exists() and not (tmp_path / "nt.npz").exists()


def test_batch_iterator_covers_every_example_once_per_seed():
    bs = batch_iterator(50, 16, seeds=(0, 1), epoch=3)
    assert [b.shape for b in bs] == [(2, 16)] * 3 + [(2, 2)]
    allidx = np.concatenate(bs, axis=1)
    for row in allidx:
        assert sorted(row) == list(range(50))
    assert not np.array_equal(allidx[0], allidx[1])
    np.testing.assert_array_equal(batch_iterator(50, 16, seeds=(1,), epoch=3)[0][0], bs[0][1])
    assert len(batch_iterator(50, 16, seeds=(0,), epoch=0, drop_last=True)) == 3


def test_bad_input_is_named(tmp_path):
    model = ToyModel()
    params = model.init_params(SEEDS)
    opt = Adam(params, lr=0.1)
    with pytest.raises(TypeError, match="optimizer"):
        train(model, params, object(), batches(SEEDS), epochs=1)
    with pytest.raises(ValueError, match="params"):
        train(model, dict(params), opt, batches(SEEDS), epochs=1)
    with pytest.raises(ValueError, match="epochs"):
        train(model, params, opt, batches(SEEDS), epochs=-1)
    with pytest.raises(ValueError, match="grad"):
        train(model, params, opt, batches(SEEDS), epochs=1, grad="numeric")
    with pytest.raises(TypeError, match="make_batches"):
        train(model, params, opt, [], epochs=1)
    with pytest.raises(TypeError, match="callbacks"):
        train(model, params, opt, batches(SEEDS), epochs=1, callbacks=[3])
    with pytest.raises(ValueError, match="checkpoint: a checkpoint is a .npz file"):
        run(epochs=1, checkpoint=tmp_path / "x.pkl")
    with pytest.raises(ValueError, match="n_examples"):
        batch_iterator(0, 4, seeds=(0,), epoch=0)
    bogus = tmp_path / "bogus.npz"
    np.savez(bogus, a=np.zeros(2))
    with pytest.raises(ValueError, match="not a readable refattn checkpoint"):
        load_checkpoint(bogus)
    assert os.path.exists(bogus)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated", b"not a zip at all"])
def test_a_corrupt_checkpoint_is_named_and_left_alone(content, tmp_path):
    from refattn.training.train import load_checkpoint

    path = tmp_path / "run.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"checkpoint '.*run\.npz': not a readable refattn checkpoint"):
        load_checkpoint(path)
    assert path.read_bytes() == content  # never overwritten


def test_resuming_with_fewer_epochs_than_the_checkpoint_holds_is_refused(tmp_path):
    """A checkpoint of 6 epochs and a request for 4 would report 4 with 6 trained: refused,
    naming the option; asking for more extends the run."""
    ck = tmp_path / "run.npz"
    run(epochs=6, checkpoint=ck)
    with pytest.raises(ValueError, match="epochs: the checkpoint .* already holds 6 epochs, more than the 4"):
        run(epochs=4, checkpoint=ck)
    _, out = run(epochs=8, checkpoint=ck)
    assert out["resumed_from"] == 5 and len(out["history"]) == 8
