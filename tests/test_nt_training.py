"""The NT training runner (refattn.experiments.nt_training) and `refattn nt`."""

import json

import numpy as np
import pytest

from refattn.cli import main
from refattn.experiments import nt_training as ntt
from refattn.models.nt import CANDIDATE_LAYOUTS, DEFAULT_LAYOUT, NTModel, ea_symbol_dependence


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


@pytest.mark.parametrize("layout", CANDIDATE_LAYOUTS)
def test_expressive_attention_is_blind_to_symbols_at_N2_without_query_or_key_bias(layout):
    # d = 2: layer normalisation maps the two one-hot symbols to +u and -u. Without a
    # query or key bias (layouts b_2+b_r, b_V+b_r) z_mk = Q_m . K_k only changes sign
    # with the symbols and z^2 does not: EA's weights are the same for every context,
    # bit for bit (derivations/11-nt-model.md, section 6). A key bias (b_K+b_r) or a
    # query bias (b_Q+b_r) breaks the z -> -z symmetry; DPA's weights see the symbols
    # in every layout. The biases are made nonzero (they start at 0).
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, 2, (2, 30, 8))
    blind_layouts = {"b_2+b_r", "b_V+b_r"}
    for act in ("expressive", "softmax"):
        m = NTModel(2, 8, activation=act, layout=layout)
        params = m.init_params((0, 1))
        params = {k: v + (0.3 * rng.standard_normal(v.shape) if k.startswith("b") else 0.0)
                  for k, v in params.items()}
        A = m.forward(params, ctx)["attention"]
        spread = np.max(A.max(axis=1) - A.min(axis=1))  # over the 30 contexts
        blind = act == "expressive" and layout in blind_layouts
        assert (spread == 0.0) == blind, (act, layout, spread)
        if act == "expressive":
            assert blind == (not any(ea_symbol_dependence(layout).values()))


def test_run_nt_passes_the_layout_and_initialisation():
    r = ntt.run_nt("N2T1", 4, "expressive", seeds=2, epochs=2, eval_every=2, n_test=3, layout="b_Q+b_2",
                   init_scale=0.5, bias_init="uniform")
    assert (r["layout"], r["init_scale"], r["bias_init"]) == ("b_Q+b_2", 0.5, "uniform")
    assert r["n_params"] == NTModel(2, 4, layout="b_Q+b_2").n_params
    assert ntt.run_nt("N2T1", 4, "expressive", seeds=1, epochs=1, n_test=1)["layout"] == DEFAULT_LAYOUT
    # a different initialisation is a different run: it starts from other parameters
    a = ntt.run_nt("N2T1", 4, "softmax", seeds=1, epochs=3, n_test=1, layout="b_K+b_r")
    b = ntt.run_nt("N2T1", 4, "softmax", seeds=1, epochs=3, n_test=1, layout="b_K+b_r", init_scale=2.0)
    assert a["loss"] != b["loss"]


def test_compare_layouts_runs_each_layout_and_attention():
    rs = ntt.compare_layouts("N2T1", 4, layouts=("b_2+b_r", "b_Q+b_r"), seeds=2, epochs=4, eval_every=2, n_test=3)
    assert [(r["layout"], r["attention"]) for r in rs] == [
        ("b_2+b_r", "expressive"), ("b_2+b_r", "softmax"), ("b_Q+b_r", "expressive"), ("b_Q+b_r", "softmax")]
    single = ntt.run_nt("N2T1", 4, "softmax", layout="b_Q+b_r", seeds=2, epochs=4, eval_every=2, n_test=3)
    assert rs[3]["loss"] == single["loss"]  # the same call, deterministic
    table = ntt.format_layout_table(rs).splitlines()
    assert len(table) == 2 + 4
    assert "| b_2+b_r | EA | blind |" in table[2] and "| b_Q+b_r | EA | query |" in table[4]
    with pytest.raises(TypeError, match="layouts"):
        ntt.compare_layouts("N2T1", 4, layouts="b_Q+b_r")


def test_layout_table_counts_seeds_where_ea_is_earlier():
    # independent of training: hand-made results; None (never) counts as later than any epoch
    base = {"N": 2, "seeds": [0, 1, 2, 3], "mean_final_accuracy": 1.0}
    ea = {**base, "layout": "b_K+b_r", "attention": "expressive", "epochs_to_100": [100, None, 300, 40],
          "reached_100": 3, "median_epochs_to_100": 100.0}
    dpa = {**base, "layout": "b_K+b_r", "attention": "softmax", "epochs_to_100": [200, 200, 300, None],
           "reached_100": 3, "median_epochs_to_100": 200.0}
    rows = ntt.format_layout_table([ea, dpa]).splitlines()
    assert rows[2] == "| b_K+b_r | EA | key | 3/4 | 100 | 1.000 | 100 - 300 40 |  |"
    assert rows[3] == "| b_K+b_r | DPA |  | 3/4 | 200 | 1.000 | 200 200 300 - | 2/4 (ties 1) |"


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
    with pytest.raises(ValueError, match="layout"):
        ntt.run_nt(layout="b_2")
