"""The NT training runner (refattn.studies.nt_training) and `refattn nt`."""

import json

import numpy as np
import pytest

from refattn.cli import main
from refattn.studies import nt_training as ntt
from refattn.training.models.nt import CANDIDATE_LAYOUTS, DEFAULT_LAYOUT, NTModel, ea_symbol_dependence

pytestmark = pytest.mark.slow


def run_nt(task="N2T5", context=16, activation="expressive", *, progress=False, **settings):
    """:func:`refattn.studies.nt_training.run_nt` with its settings written inline."""
    return ntt.run_nt(ntt.Settings(task=task, context=context, activation=activation, **settings), progress=progress)


def test_batches_follow_the_task_and_depend_only_on_seed_and_epoch():
    b = ntt.make_batches("N2T1", 6, seeds=(0, 5))(3)[0]
    assert b["context"].shape == (2, 40, 6) and b["target"].shape == (2, 40)
    # XOR rule: target = (x[t-1] + x[t-2]) % 2, the last two symbols of each window (tau = 1)
    np.testing.assert_array_equal(b["target"], (b["context"][..., -1] + b["context"][..., -2]) % 2)
    alone = ntt.make_batches("N2T1", 6, seeds=(5,))(3)[0]
    np.testing.assert_array_equal(alone["context"][0], b["context"][1])


def test_small_run_learns_and_reports(tmp_path):
    r = run_nt("N2T1", 4, "softmax", seeds=3, epochs=60, eval_every=20, n_test=20)
    assert r["n_params"] == NTModel(2, 4).n_params
    assert len(r["epochs_to_100"]) == 3 and len(r["eval_epochs"]) == 3
    assert r["loss"][-1] < r["loss"][0]
    for e, acc in zip(r["epochs_to_100"], r["accuracy"]):
        assert (e is None) == (max(acc) < 1.0)
    json.dumps(r)


def test_resumed_nt_run_ends_where_an_uninterrupted_one_does(tmp_path):
    ck = tmp_path / "nt.npz"
    full = run_nt("N2T1", 4, "expressive", seeds=2, epochs=12, eval_every=4, n_test=5)
    run_nt("N2T1", 4, "expressive", seeds=2, epochs=12, eval_every=4, n_test=5, checkpoint=ck,
               stop_after=5)  # interrupted after epoch 5
    with pytest.raises(ValueError, match="another run"):  # another attention: refused, not mixed
        run_nt("N2T1", 4, "softmax", seeds=2, epochs=12, eval_every=4, n_test=5, checkpoint=ck)
    resumed = run_nt("N2T1", 4, "expressive", seeds=2, epochs=12, eval_every=4, n_test=5, checkpoint=ck)
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
        A = m.outputs(params, ctx)["attention"]
        spread = np.max(A.max(axis=1) - A.min(axis=1))  # over the 30 contexts
        blind = act == "expressive" and layout in blind_layouts
        assert (spread == 0.0) == blind, (act, layout, spread)
        if act == "expressive":
            assert blind == (not any(ea_symbol_dependence(layout).values()))


def test_run_nt_passes_the_layout_and_initialisation():
    r = run_nt("N2T1", 4, "expressive", seeds=2, epochs=2, eval_every=2, n_test=3, layout="b_Q+b_2",
                   init_scale=0.5, bias_init="uniform")
    assert (r["layout"], r["init_scale"], r["bias_init"]) == ("b_Q+b_2", 0.5, "uniform")
    assert r["n_params"] == NTModel(2, 4, layout="b_Q+b_2").n_params
    assert run_nt("N2T1", 4, "expressive", seeds=1, epochs=1, n_test=1)["layout"] == DEFAULT_LAYOUT
    # a different initialisation is a different run: it starts from other parameters
    a = run_nt("N2T1", 4, "softmax", seeds=1, epochs=3, n_test=1, layout="b_K+b_r")
    b = run_nt("N2T1", 4, "softmax", seeds=1, epochs=3, n_test=1, layout="b_K+b_r", init_scale=2.0)
    assert a["loss"] != b["loss"]


def test_compare_layouts_runs_each_layout_and_attention():
    small = ntt.Settings(task="N2T1", context=4, seeds=2, epochs=4, eval_every=2, n_test=3)
    rs = ntt.compare_layouts(small, layouts=("b_2+b_r", "b_Q+b_r"), progress=False)
    assert [(r["layout"], r["attention"]) for r in rs] == [
        ("b_2+b_r", "expressive"), ("b_2+b_r", "softmax"), ("b_Q+b_r", "expressive"), ("b_Q+b_r", "softmax")]
    single = run_nt("N2T1", 4, "softmax", layout="b_Q+b_r", seeds=2, epochs=4, eval_every=2, n_test=3)
    assert rs[3]["loss"] == single["loss"]  # the same call, deterministic
    table = ntt.format_layout_table(rs).splitlines()
    assert len(table) == 2 + 4
    assert "| b_2+b_r | EA | blind |" in table[2] and "| b_Q+b_r | EA | query |" in table[4]
    with pytest.raises(TypeError, match="layouts"):
        ntt.compare_layouts(small, layouts="b_Q+b_r")


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
        run_nt(seeds=0)
    with pytest.raises(ValueError, match="eval_every"):
        run_nt(eval_every=0)
    with pytest.raises(ValueError, match="layout"):
        run_nt(layout="b_2")


# --------------------------------------------------------------------------
# mixtures, NT-R, learning-rate drop, snapshots, devices (derivations/15-nt-experiments.md)
# --------------------------------------------------------------------------

from refattn.core.backend import cupy_available  # noqa: E402
from refattn.studies import nt_figures as ntf  # noqa: E402
from refattn.training.tasks.nt import generate, next_symbol, parse_task  # noqa: E402
from refattn.training.train import train  # noqa: E402


def test_parse_mixture_forms_and_canonical_names():
    assert ntt.parse_mixture("N16T2") == ("N16T2", ("N16T2",), (1.0,))
    assert ntt.parse_mixture("N16T2+N16T2-S") == ("N16T2+N16T2-S", ("N16T2", "N16T2-S"), (0.5, 0.5))
    for spec in (["N16T2", "N16T2-S"], [("N16T2", 2), ("N16T2-S", 2)], {"N16T2": 1, "N16T2-S": 1}):
        assert ntt.parse_mixture(spec)[0] == "N16T2+N16T2-S"
    name, tasks, w = ntt.parse_mixture("N4T2:3+N4T3:1")
    assert name == "N4T2:0.75+N4T3:0.25" and tasks == ("N4T2", "N4T3") and w == (0.75, 0.25)
    assert ntt.parse_mixture(name) == (name, tasks, w)  # the canonical name parses to itself


@pytest.mark.parametrize("bad, err, match", [
    ("N16T2+N4T2", ValueError, "same basis"),
    ("N4T2+N4T2", ValueError, "once"),
    ("N4T2:0+N4T3", ValueError, "weight"),
    ("N4T2:x+N4T3", ValueError, "WEIGHT"),
    ({"N4T2": float("nan")}, ValueError, "weight"),
    ("N4X2", ValueError, "name"),
    (3, TypeError, "task"),
    ([], TypeError, "task"),
])
def test_parse_mixture_rejects(bad, err, match):
    with pytest.raises(err, match=match):
        ntt.parse_mixture(bad)


def _rule_holds(task, context, target):
    _, _, tau = parse_task(task)
    return np.array_equal(next_symbol(task, context[..., -(tau + 1):]), target)


def test_mixture_batches_follow_each_rows_task_and_mix_both():
    seeds = (0, 1, 2)
    mk = ntt.make_batches("N4T2+N4T2-S", 6, seeds)
    seen = []
    for epoch in range(60):
        b = mk(epoch)[0]
        assert b["context"].shape == (3, 40, 6) and b["task_index"].shape == (3,)
        for s in range(3):
            task = ("N4T2", "N4T2-S")[b["task_index"][s]]
            assert _rule_holds(task, b["context"][s], b["target"][s])
            other = ("N4T2", "N4T2-S")[1 - b["task_index"][s]]
            assert not _rule_holds(other, b["context"][s], b["target"][s])  # the two rules differ here
        seen.extend(b["task_index"].tolist())
    assert 0.3 < np.mean(seen) < 0.7  # 180 fair draws
    alone = ntt.make_batches("N4T2+N4T2-S", 6, (2,))(7)[0]  # a seed's data do not depend on the others
    np.testing.assert_array_equal(alone["context"][0], mk(7)[0]["context"][2])


def test_ntr_batches_follow_eq9():
    b = ntt.make_batches("N4T2-R", 5, (0, 1))(3)[0]
    assert _rule_holds("N4T2-R", b["context"], b["target"])
    assert not _rule_holds("N4T2", b["context"], b["target"])  # the switch to NT-S happens in 40 steps


class _Oracle:
    """A stand-in model whose greedy continuation follows one task's rule exactly."""

    def __init__(self, task, n_con):
        self.task, self.n_con = task, n_con

    def generate(self, params, context, n_steps):
        _, N, tau = parse_task(self.task)
        S, B, n = context.shape
        x = context.reshape(S * B, n)
        out = generate(self.task, length=tau + 1 + n_steps, init=x[:, -(tau + 1):])[:, tau + 1:]
        return out.reshape(S, B, n_steps)


def test_evaluation_scores_each_task_of_a_mixture_separately():
    oracle = _Oracle("N4T2", 7)
    per = ntt.evaluate_tasks(oracle, None, "N4T2+N4T2-S", (0, 1), epoch=0, n_test=20, n_g=10)
    assert set(per) == {"N4T2", "N4T2-S"}
    np.testing.assert_array_equal(per["N4T2"], [1.0, 1.0])  # the oracle's own task: no error
    assert np.all(per["N4T2-S"] < 1.0)
    mixed = ntt.evaluate(oracle, None, "N4T2:3+N4T2-S:1", (0, 1), epoch=0, n_test=20, n_g=10)
    per3 = ntt.evaluate_tasks(oracle, None, "N4T2:3+N4T2-S:1", (0, 1), epoch=0, n_test=20, n_g=10)
    np.testing.assert_allclose(mixed, 0.75 * per3["N4T2"] + 0.25 * per3["N4T2-S"], rtol=0, atol=1e-15)
    single = ntt.evaluate(_Oracle("N4T2-R", 7), None, "N4T2-R", (0,), epoch=2, n_test=5, n_g=10)
    np.testing.assert_array_equal(single, [1.0])


def test_mixture_run_reports_each_task():
    r = run_nt("N3T1+N3T2-S", 5, "expressive", seeds=2, epochs=6, eval_every=3, n_test=4, n_g=5)
    assert r["tasks"] == ["N3T1", "N3T2-S"] and r["weights"] == [0.5, 0.5]
    acc = np.array(r["accuracy"])
    by = {t: np.array(v) for t, v in r["accuracy_by_task"].items()}
    assert acc.shape == (2, 2) and by["N3T1"].shape == (2, 2)
    np.testing.assert_allclose(acc, 0.5 * by["N3T1"] + 0.5 * by["N3T2-S"], atol=1e-15)
    assert r["final_accuracy_by_task"]["N3T1"] == pytest.approx(by["N3T1"][:, -1].mean())
    assert "N3T2-S" in ntt.report(r)
    json.dumps(r)
    rr = run_nt("N3T2-R", 5, "softmax", seeds=1, epochs=2, eval_every=2, n_test=3)
    assert rr["variant"] == "NT-R" and "accuracy_by_task" not in rr


def test_lr_drop_equals_two_training_phases():
    E, f, T = 3, 4.0, 5
    r = run_nt("N2T1", 4, "softmax", seeds=2, epochs=T, eval_every=100, n_test=1, n_g=1, lr_drop=(E, f))
    plain = run_nt("N2T1", 4, "softmax", seeds=2, epochs=T, eval_every=100, n_test=1, n_g=1)
    assert r["loss"][:E + 1] == plain["loss"][:E + 1] and r["loss"][E + 1:] != plain["loss"][E + 1:]
    # by hand: E epochs at lr, then the rest at lr / f (epoch E's loss is taken before its step)
    model = NTModel(2, 4, activation="softmax")
    params = model.init_params((0, 1))
    opt = ntt.SGD(params, lr=ntt.PAPER["lr"], momentum=ntt.PAPER["momentum"])
    mk = ntt.make_batches("N2T1", 4, (0, 1))
    first = train(model, params, opt, mk, epochs=E)["history"]
    opt.lr = ntt.PAPER["lr"] / f
    second = train(model, params, opt, lambda e: mk(e + E), epochs=T - E)["history"]
    assert [float(np.mean(h["loss"])) for h in first + second] == r["loss"]
    with pytest.raises(ValueError, match="lr_drop"):
        run_nt(lr_drop=(0, 4))
    with pytest.raises(TypeError, match="lr_drop"):
        run_nt(lr_drop=4)


def test_lr_drop_survives_a_resume(tmp_path):
    ck = tmp_path / "drop.npz"
    kw = dict(seeds=1, epochs=6, eval_every=3, n_test=2, n_g=2, lr_drop=(2, 4))
    full = run_nt("N2T1", 4, "expressive", **kw)
    run_nt("N2T1", 4, "expressive", checkpoint=ck, stop_after=3, **kw)  # stopped after the drop
    assert run_nt("N2T1", 4, "expressive", checkpoint=ck, **kw)["loss"] == full["loss"]


@pytest.mark.parametrize("activation", ["expressive", "softmax"])
def test_snapshots_are_the_models_attention_for_one_fixed_context(activation, tmp_path):
    n = 6
    r = run_nt("N2T2", n, activation, seeds=2, first_seed=3, epochs=4, eval_every=2, n_test=2, n_g=2,
               snapshot_epochs=(0, 2, 4))
    snap = r["snapshots"]
    assert snap["epochs"] == [0, 2, 4]
    ctx = ntt.snapshot_context("N2T2", n)
    assert snap["context"] == ctx.tolist()
    A = np.array(snap["attention"])  # (3 epochs, 2 seeds, n, n)
    assert A.shape == (3, 2, n, n)
    model = NTModel(2, n, activation=activation)
    init = model.outputs(model.init_params((3, 4)), np.broadcast_to(ctx, (2, 1, n)))["attention"][:, 0]
    np.testing.assert_array_equal(A[0], init)  # epoch 0 is the initial model
    assert np.all(A >= 0) and np.all(A[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0)
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, atol=1e-12)  # rows normalised (Eqs. 1, 2)
    assert not np.array_equal(A[0], A[2])  # training moved them
    ck = tmp_path / "snap.npz"  # an interrupted and resumed run records the same snapshots
    kw = dict(seeds=2, first_seed=3, epochs=4, eval_every=2, n_test=2, n_g=2, snapshot_epochs=(0, 2, 4))
    run_nt("N2T2", n, activation, checkpoint=ck, stop_after=2, **kw)
    assert run_nt("N2T2", n, activation, checkpoint=ck, **kw)["snapshots"] == snap
    with pytest.raises(ValueError, match="snapshot_epochs"):
        run_nt("N2T2", n, activation, epochs=4, snapshot_epochs=(5,))


def test_attention_snapshots_and_dynamic_range():
    s = ntf.attention_snapshots(ntt.Settings(task="N2T3", context=5, first_seed=1, n_test=2, n_g=2), epochs=(0, 3),
                                progress=False)
    assert s["epochs"] == [0, 3] and len(s["context"]) == 5
    assert set(s["attention"]) == {"expressive", "softmax"}
    assert np.array(s["attention"]["softmax"]).shape == (2, 5, 5)
    # dynamic range: row 1 left out, causal entries only, smallest floored
    A = np.array([[1.0, 0, 0], [0.9, 0.1, 0], [1e-3, 0.5, 0.499]])
    assert ntf.dynamic_range(A) == pytest.approx(np.log10(0.9 / 1e-3))
    A[2, 0] = 0.0
    assert ntf.dynamic_range(A, floor=1e-8) == pytest.approx(np.log10(0.9) + 8)
    with pytest.raises(ValueError, match="square"):
        ntf.dynamic_range(np.ones((2, 3)))


def test_figure_runners_format_and_plot():
    import matplotlib

    matplotlib.use("Agg")
    r = ntf.run_fig3(ntf.Settings("fig3", n_cons=(32,), seeds=1, epochs=2, eval_every=1, n_test=2),
                     progress=False)  # the paper's task, two epochs
    table = ntf.report(r)
    dpa = [line for line in table.splitlines() if line.startswith("| 32 | DPA |")]
    assert len(dpa) == 1 and "0.55: plateau" in dpa[0]
    assert ntf.plot(r).axes
    m = ntf.run_mixture(ntf.Settings("fig6", task="N3T1+N3T2-S", n_cons=(4,), seeds=1, epochs=4, eval_every=2,
                                     n_test=2, lr_drop=(2, 4)), progress=False)
    assert len(ntf.report(m).splitlines()) == 4 + 4  # header + 2 attentions x 2 tasks
    assert ntf.plot(m).axes
    f4 = ntf.run_nt_figure(ntf.Settings("fig4", task="N2T2", n_cons=(4,), seeds=2, epochs=2, eval_every=1, n_test=2,
                                        snapshot_epochs=(0, 2)), progress=False)
    assert set(f4["dynamic_range"]) == {"expressive", "softmax"} and len(f4["dynamic_range"]["softmax"]["2"]) == 2
    assert "decades" in ntf.report(f4)
    assert len(ntf.plot(f4).axes) >= 1 + 4
    json.dumps(f4)
    with pytest.raises(ValueError, match="figure"):
        ntf.run_nt_figure(ntf.Settings("fig5"))
    with pytest.raises(ValueError, match="figure"):  # a runner draws its own figure
        ntf.run_fig3(ntf.Settings("fig4"))
    with pytest.raises(ValueError, match="mixture"):
        ntf.run_mixture(ntf.Settings("fig6", task="N16T2"))
    with pytest.raises(ValueError, match="NT-R"):
        ntf.run_ntr(ntf.Settings("fig7", task="N16T2"))


def test_seed_scaling_and_speedup_report_their_parts():
    r = ntt.seed_scaling("N2T1", 4, sizes=(1, 2), epochs=2, repeats=1)
    assert [row["S"] for row in r["rows"]] == [1, 2]
    for row in r["rows"]:
        assert row["total_ms"] == pytest.approx(row["batches_ms"] + row["loss_and_grad_ms"] + row["step_ms"])
        assert row["ms_per_seed"] == pytest.approx(row["total_ms"] / row["S"])
    assert "best batched speed-up" in ntt.format_seed_scaling(r)
    with pytest.raises(ValueError, match="sizes"):
        ntt.seed_scaling(sizes=(0,))
    prof = ntt.profile_loss_and_grad("N2T1", 4, seeds=2, calls=3, top=4)
    assert len(prof["rows"]) == 4 and 0 < sum(r["share"] for r in prof["rows"]) <= 1 + 1e-12
    assert any("loss_and_grad" in r["function"] for r in ntt.profile_loss_and_grad("N2T1", 4, seeds=1, calls=2,
                                                                                   top=100)["rows"])


def test_device_argument():
    with pytest.raises(ValueError, match="device"):
        run_nt("N2T1", 4, seeds=1, epochs=1, device="tpu")
    assert ntt.array_module_for("cpu") is np
    if not cupy_available():
        with pytest.raises(ValueError, match="CuPy"):  # refused when the settings are made
            run_nt("N2T1", 4, seeds=1, epochs=1, device="gpu")


@pytest.mark.skipif(not cupy_available(), reason="CuPy with a CUDA device is needed")
def test_gpu_run_matches_the_cpu_run():
    kw = dict(seeds=2, epochs=5, eval_every=5, n_test=4, n_g=3, snapshot_epochs=(0, 5))
    cpu = run_nt("N3T2", 5, "expressive", **kw)
    gpu = run_nt("N3T2", 5, "expressive", device="gpu", **kw)
    np.testing.assert_allclose(gpu["loss"], cpu["loss"], rtol=1e-9)
    np.testing.assert_allclose(gpu["snapshots"]["attention"], cpu["snapshots"]["attention"], rtol=1e-8, atol=1e-12)
    json.dumps(gpu)
    with pytest.raises(ValueError, match="checkpoint"):
        run_nt("N3T2", 5, device="gpu", checkpoint="x.npz", **kw)


def test_a_run_on_a_fake_device_matches_the_cpu_run(monkeypatch):
    # tests/fake_device.py: NumPy behind an array type that refattn treats as CuPy and that
    # raises on any implicit host copy or NumPy call on its data, so device="gpu" runs the
    # GPU branch of every array_module() call here on the CPU.
    from tests import fake_device
    kw = dict(seeds=2, epochs=4, eval_every=2, n_test=3, n_g=3, snapshot_epochs=(0, 4))
    cpu = run_nt("N3T2+N3T1", 5, "expressive", **kw)
    xp = fake_device.install(monkeypatch)
    assert ntt.array_module_for("gpu") is xp
    dev = run_nt("N3T2+N3T1", 5, "expressive", device="gpu", **kw)
    assert dev["device"] == "gpu"
    np.testing.assert_allclose(dev["loss"], cpu["loss"], rtol=1e-12)
    np.testing.assert_allclose(dev["snapshots"]["attention"], cpu["snapshots"]["attention"], rtol=1e-12, atol=0)
    assert dev["accuracy_by_task"] == cpu["accuracy_by_task"]
    json.dumps(dev)  # everything came back to the host


@pytest.mark.parametrize("task", ["N2T5", "N16T2-S", "N3T2-R"])
def test_series_of_all_seeds_equal_one_generate_call_per_seed(task):
    # the batched series (one loop over time for all seeds) are, bit for bit, what a call of
    # tasks.nt.generate per seed with the documented stream default_rng([seed, epoch, salt]) gives
    seeds, epoch = (4, 0, 9), 7
    b = ntt.make_batches(task, 6, seeds)(epoch)[0]
    for i, s in enumerate(seeds):
        x = generate(task, length=46, batch=1, rng=np.random.default_rng([s, epoch, 0]))[0]
        np.testing.assert_array_equal(b["context"][i, 0], x[:6])
        np.testing.assert_array_equal(b["target"][i], x[6:46])
    test = ntt._series(task, 3, 10, seeds, epoch, salt=(1, 2))
    for i, s in enumerate(seeds):
        np.testing.assert_array_equal(test[i], generate(task, length=10, batch=3,
                                                        rng=np.random.default_rng([s, epoch, 1, 2])))


def test_float32_training_runs_in_float32_and_resumes_only_as_float32(tmp_path):
    """``dtype="float32"`` trains float32 parameters (the same initial values, rounded) and
    is part of the checkpoint's fingerprint: a float64 run does not resume a float32 one."""
    ck = tmp_path / "e.npz"
    r32 = run_nt("N2T5", 8, "expressive", seeds=2, epochs=2, eval_every=1, n_test=5, progress=False,
                 dtype="float32", checkpoint=ck)
    assert r32["dtype"] == "float32"
    from refattn.training.train import load_checkpoint

    assert all(v.dtype == np.float32 for v in load_checkpoint(ck)["params"].values())
    with pytest.raises(ValueError, match="belongs to another run"):
        run_nt("N2T5", 8, "expressive", seeds=2, epochs=3, eval_every=1, n_test=5, progress=False, checkpoint=ck)
    with pytest.raises(ValueError, match="dtype: expected one of float64, float32"):
        run_nt("N2T5", 8, "expressive", seeds=2, epochs=1, dtype="float16")


def test_the_report_names_diverged_seeds_and_quotes_no_accuracy_of_theirs():
    with np.errstate(all="ignore"):
        r = run_nt("N2T5", 16, "expressive", seeds=3, epochs=8, eval_every=4, n_test=8, lr=20.0, init_scale=4.0,
                   dtype="float32")
    assert r["diverged"] == [True, True, True]
    text = ntt.report(r)
    assert "DIVERGED: seeds [0, 1, 2] of 3" in text and "final accuracy: n/a (every seed diverged)" in text
    assert "mean 0." not in text
    # one seed of three diverged: the mean is over the two that trained, the third reads "diverged"
    part = dict(r, diverged=[False, True, False], final_accuracy=[0.5, 0.25, 1.0], loss=[1.0, 0.5])
    text = ntt.report(part)
    assert "DIVERGED: seeds [1] of 3" in text and "epoch" not in text.splitlines()[1].split(";")[-1]
    assert "final accuracy: mean 0.7500 of the seeds that trained, per seed [0.5, 'diverged', 1.0]" in text
    # a figure's table: the final accuracy over the seeds that trained, the diverged ones counted
    fig = {"figure": "fig4", "task": r["task"], "runs": [part], "paper": {"setting": "-", "claims": {}}}
    part["accuracy"] = [[0.5, 0.5], [0.25, 0.25], [0.5, 1.0]]
    row = ntf.report(fig).splitlines()[-1]
    assert "0.750 [0.500, 1.000] (1/3 seeds diverged)" in row, row
    fig["runs"] = [dict(r, train_seconds_per_epoch=0.0)]
    assert "| diverged (3/3 seeds diverged) |" in ntf.report(fig).splitlines()[-1]
