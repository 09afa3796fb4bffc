"""The sensitivity grid over initialisation scale x learning rate (refattn.studies.nt_sensitivity): its
statistics, its results files, and the score scale beta it varies."""

from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pytest

from refattn.cli import main
from refattn.fast import threads
from refattn.studies import helpers, statistics
from refattn.studies import nt_sensitivity as sens
from refattn.studies.nt_training import PAPER
from refattn.training.models import nt
from refattn.training.optim import SGD

pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------
# statistics of the sensitivity study
# --------------------------------------------------------------------------

def _exact_rank_p(a, b):
    """The exact two-sided permutation p-value of the rank sum, by enumerating every split."""
    pooled = np.concatenate([a, b]).astype(float)
    order = np.argsort(pooled, kind="stable")
    ranks = np.empty(pooled.size)
    ranks[order] = np.arange(1, pooled.size + 1)
    for v in np.unique(pooled):
        ranks[pooled == v] = ranks[pooled == v].mean()
    expected = len(a) * (pooled.size + 1) / 2
    observed = abs(ranks[:len(a)].sum() - expected)
    splits = list(itertools.combinations(range(pooled.size), len(a)))
    extreme = sum(abs(ranks[list(s)].sum() - expected) >= observed - 1e-9 for s in splits)
    return extreme / len(splits)


@pytest.mark.parametrize("a, b", [
    ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]),
    ([0.5, 0.55, 0.6, 1.0, 1.0], [0.54, 0.55, 0.56, 0.57, 0.55]),
    ([3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5]),
])
def test_rank_test_agrees_with_the_exact_permutation_p_value(a, b):
    exact = _exact_rank_p(np.array(a), np.array(b))
    p = statistics.rank_test(a, b, permutations=20000)
    # Monte Carlo standard error <= 0.5 / sqrt(20000) = 0.0035; 5 standard errors, plus the 1/(P+1) term
    assert abs(p - exact) <= 5 * math.sqrt(exact * (1 - exact) / 20000) + 2e-4
    assert statistics.rank_test(a, b, permutations=20000) == p  # reproducible


def test_rank_test_edge_cases():
    assert statistics.rank_test([1, 1, 1], [1, 1]) == 1.0
    # completely separated samples of 16: the exact p is 2 / C(32, 16), far below 1/(P+1)
    assert statistics.rank_test(np.arange(16), np.arange(16) + 100, permutations=1000) == pytest.approx(1 / 1001)
    # few enough splits (C(10, 5) = 252 <= P): every split is counted, so the p-value is exact, 2 / 252
    assert statistics.rank_test(np.arange(5), np.arange(5) + 100) == pytest.approx(2 / 252)
    with pytest.raises(ValueError, match="non-empty"):
        statistics.rank_test([], [1.0])


def test_late_change():
    acc = np.array([[0.1, 0.2, 0.5, 0.6, 0.7, 0.9, 1.0], [0.1, 0.2, 0.5, 0.6, 0.7, 0.7, 0.8]])
    # last third of 7 evaluations: from index round(2/3 * 6) = 4 to 6
    assert sens.late_change(acc) == pytest.approx(np.mean([1.0, 0.8]) - np.mean([0.7, 0.7]))
    assert sens.late_change(np.ones((3, 1))) is None


# --------------------------------------------------------------------------
# the results file: written per cell, resumed, refused with other settings
# --------------------------------------------------------------------------

SMALL = dict(seeds=2, epochs=20, eval_every=10, init_scales=(0.5,), lrs=(0.32,), n_test=4)


def run_sensitivity(figure, *, progress=None, command=None, **settings):
    """:func:`refattn.studies.nt_sensitivity.run_sensitivity` with its settings written inline."""
    return sens.run_sensitivity(sens.Settings(figure, **settings), progress=progress, command=command)


def test_sensitivity_cells_summary_and_resume(tmp_path, monkeypatch):
    path = tmp_path / "fig4.json"
    r = run_sensitivity("fig4", results=path, progress=False, **SMALL)
    saved = json.loads(path.read_text())
    assert sorted(saved["cells"]) == ["init=0.5 lr=0.32 expressive", "init=0.5 lr=0.32 softmax"]
    assert saved["settings"]["task"] == "N2T5" and saved["settings"]["epochs"] == 20
    assert saved["summary"] == json.loads(json.dumps(r["summary"]))
    row = r["summary"][0]
    assert row["measure"] == "epochs_to_100" and row["winner"] in ("EA", "DPA", "neither")
    cell = saved["cells"]["init=0.5 lr=0.32 expressive"]
    assert len(cell["final_accuracy"]) == 2 and cell["eval_epochs"] == [10, 20]
    assert "| x0.5 | 0.32 |" in sens.report(r)
    # resumed: the finished cells are not trained again, and a larger grid keeps them
    calls = []
    real = sens.run_nt
    monkeypatch.setattr(sens, "run_nt", lambda s, **k: calls.append(s.init_scale) or real(s, **k))
    again = run_sensitivity("fig4", results=path, progress=False, **SMALL)
    assert calls == [] and again["cells"] == saved["cells"]
    grown = run_sensitivity("fig4", results=path, progress=False, **{**SMALL, "init_scales": (2.0,)})
    assert calls == [2.0, 2.0] and grown["settings"]["init_scales"] == [0.5, 2.0]
    assert len(grown["summary"]) == 2
    with pytest.raises(ValueError, match="other settings.*epochs"):
        run_sensitivity("fig4", results=path, progress=False, **{**SMALL, "epochs": 30})


def test_sensitivity_mixture_measure_and_figure(tmp_path):
    r = run_sensitivity("fig6", progress=False, **{**SMALL, "epochs": 10, "eval_every": 5})
    cell = r["cells"]["init=0.5 lr=0.32 softmax"]
    assert set(cell["final_accuracy_by_task"]) == {"N16T2", "N16T2-S"}
    assert r["summary"][0]["measure"] == "final_accuracy_N16T2"
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    fig = sens.plot(r)
    assert len(fig.axes) == 2


def test_every_setting_has_a_measure_and_runs_its_own_context(tmp_path):
    assert set(sens.MEASURES) == set(sens.SETTINGS)
    for name, setting in sens.SETTINGS.items():
        measure, better = sens.MEASURES[name]
        assert measure in ("final_accuracy", "final_accuracy_N16T2", "epochs_to_100"), name
        assert better in ("higher", "lower"), name
        assert setting["epochs"] % setting["eval_every"] == 0, name
    # the text's N_con = 16 statement and Fig. 3's N_con = 52: the same task, another context
    for name, n_con in (("fig3-16", 16), ("fig3-52", 52)):
        r = run_sensitivity(name, results=tmp_path / f"{name}.json", **SMALL)
        assert r["settings"]["n_con"] == n_con and r["settings"]["task"] == "N16T2"


def test_sensitivity_bad_input(tmp_path):
    with pytest.raises(ValueError, match="figure"):
        run_sensitivity("fig9")
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a results file"):
        run_sensitivity("fig4", results=bad, **SMALL)
    bad.write_text("[]")
    with pytest.raises(ValueError, match="not a results file"):
        run_sensitivity("fig4", results=bad, **SMALL)


def test_sensitivity_cli(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(["nt-sensitivity", "fig4", "--seeds", "2", "--epochs", "10", "--eval-every", "5",
                 "--init-scales", "0.5", "--lrs", "0.32", "--n-test", "3", "--results", str(path)]) == 0
    saved = json.loads(path.read_text())
    assert saved["command"].startswith("refattn nt-sensitivity fig4 --seeds 2")
    assert "| x0.5 | 0.32 |" in capsys.readouterr().out
    # a second command grows the grid; the file lists both commands
    assert main(["nt-sensitivity", "fig4", "--seeds", "2", "--epochs", "10", "--eval-every", "5",
                 "--init-scales", "0.5", "--lrs", "0.04", "--n-test", "3", "--results", str(path)]) == 0
    saved = json.loads(path.read_text())
    assert [r["command"].split("--lrs ")[1].split()[0] for r in saved["runs"]] == ["0.32", "0.04"]
    assert saved["settings"]["lrs"] == [0.04, 0.32] and len(saved["cells"]) == 4
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:  # text that is not a number: argparse's refusal, as for --seeds x
        main(["nt-sensitivity", "fig4", "--lrs", "0.1,x"])
    assert stop.value.code == 2 and "--lrs: expected comma-separated numbers" in capsys.readouterr().err
    assert main(["nt-sensitivity", "fig4", "--init-scales", "-1"]) == 2
    assert "--init-scales: expected a number > 0, got -1.0" in capsys.readouterr().err


def test_a_cell_is_the_same_with_one_thread_or_two(monkeypatch):
    """Rerunning a committed command reproduces its cells whatever REFATTN_NUM_THREADS is."""
    kw = dict(seeds=3, epochs=30, eval_every=10, init_scales=(0.5,), lrs=(0.32,), n_test=4, progress=False)
    runs = []
    for n in (1, 2):
        monkeypatch.setattr(threads, "_threads", n)
        cells = run_sensitivity("fig3", **kw)["cells"]
        runs.append({k: {f: v for f, v in c.items() if f != "seconds"} for k, c in cells.items()})
    assert runs[0] == runs[1]


def test_thin_record_keeps_the_ends_and_every_summary(tmp_path):
    rng = np.random.default_rng(3)
    n = 101
    acc = np.cumsum(rng.uniform(0, 0.01, (4, n)), axis=1)
    rec = {"eval_epochs": list(range(20, 20 * n + 1, 20)), "accuracy": acc.round(4).tolist(),
           "epochs_to_100": [None] * 4, "final_accuracy": acc[:, -1].round(4).tolist(),
           "late_change": sens.late_change(acc), "diverged": [False] * 4,
           "accuracy_by_task": {"A": acc.tolist()}}
    thin = sens.thin_record(rec)
    assert len(thin["eval_epochs"]) <= sens.CURVE_POINTS
    assert thin["eval_epochs"][0] == 20 and thin["eval_epochs"][-1] == 20 * n
    assert [row[-1] for row in thin["accuracy"]] == rec["final_accuracy"]
    assert len(thin["accuracy_by_task"]["A"][0]) == len(thin["eval_epochs"])
    assert sens.thin_record(thin) == thin  # idempotent
    for key in ("epochs_to_100", "final_accuracy", "late_change", "diverged"):
        assert thin[key] == rec[key]
    # the study file: plain lists on one line, the same JSON when read back
    from refattn.training.runs import CellStore  # noqa: PLC0415

    doc = {"settings": {"a": [1, 2]}, "cells": {"x": thin}, "nested": [[1.5, None, True], {"k": [-2e-05, 3]}]}
    path = tmp_path / "f.json"
    CellStore(path, {"a": [1, 2]}).save(doc)
    text = path.read_text()
    assert json.loads(text) == json.loads(json.dumps(doc))
    assert "[1.5, null, true]" in text and "[-2e-05, 3]" in text


# --------------------------------------------------------------------------
# beta (Expressive, Eq. 1): the text says its value does not affect results
# --------------------------------------------------------------------------

@pytest.mark.parametrize("activation", ["softmax", "expressive"])
def test_beta_is_a_rescaled_query(activation, rng):
    """s = beta (W_Q z + b_Q) . K: beta = b equals beta = 1 with W_Q and b_Q multiplied by b."""
    b = 1 / math.sqrt(8)
    scaled = nt.NTModel(16, 8, activation=activation, beta=b)
    plain = nt.NTModel(16, 8, activation=activation)
    params = plain.init_params((0, 1))
    for name in ("W_K", "W_V"):  # away from the tiny initial scores, so a missing beta would show
        params[name] = params[name] * 4
    context = rng.integers(0, 16, size=(2, 3, 8))
    folded = dict(params, W_Q=b * params["W_Q"], b_Q=b * params["b_Q"] + rng.standard_normal(params["b_Q"].shape))
    with_beta = dict(params, b_Q=folded["b_Q"] / b)
    out_scaled = scaled.outputs(with_beta, context)
    out_plain = plain.outputs(folded, context)
    # the two differ only by where one product by b is rounded: relative error a few float64 ulps
    np.testing.assert_allclose(out_scaled["out"], out_plain["out"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out_scaled["attention"], out_plain["attention"], rtol=1e-12, atol=1e-12)
    assert not np.allclose(scaled.outputs(params, context)["attention"], plain.outputs(params, context)["attention"])


@pytest.mark.parametrize("activation", ["softmax", "expressive"])
def test_beta_changes_the_training_dynamics(activation, rng):
    """Derivation 15, section 11.6: the same function, not the same gradient descent.

    With W_Q, b_Q folded (times b), every gradient but the query's is the
    same, and the query's is b times the folded one's; so SGD with momentum
    at beta = b follows, folded, SGD at beta = 1 whose query learns at b^2
    times the rate of the other weights.
    """
    b = 1 / math.sqrt(8)
    scaled = nt.NTModel(16, 8, activation=activation, beta=b)
    plain = nt.NTModel(16, 8, activation=activation)
    params = plain.init_params((0, 1))
    params = dict(params, W_K=4 * params["W_K"], b_Q=rng.standard_normal(params["b_Q"].shape))
    folded = dict(params, W_Q=b * params["W_Q"], b_Q=b * params["b_Q"])
    batch = {"context": rng.integers(0, 16, size=(2, 5, 8)), "target": rng.integers(0, 16, size=(2, 5))}
    loss_b, g_b, _ = scaled.loss_and_grad(params, batch)
    loss_1, g_1, _ = plain.loss_and_grad(folded, batch)
    np.testing.assert_allclose(loss_b, loss_1, rtol=1e-12)
    for name in g_b:
        factor = b if name in ("W_Q", "b_Q") else 1.0
        # rounding only: both sides are float64 and differ in where one product by b happens
        np.testing.assert_allclose(g_b[name], factor * g_1[name], rtol=1e-9, atol=1e-13 * np.abs(g_b[name]).max(),
                                   err_msg=name)
    assert not np.allclose(g_b["W_Q"], g_1["W_Q"])  # so beta is not neutral at a fixed learning rate
    # the trajectory: the project's SGD with Expressive's momentum, a few steps on fresh batches; the folded
    # run updates its query with a second optimiser at b^2 times the rate (one optimiser cannot)
    lr, mu, query = 0.32, PAPER["momentum"], ("W_Q", "b_Q")
    run_b = {k: v.copy() for k, v in params.items()}
    run_1 = {k: v.copy() for k, v in folded.items()}
    opt_b = SGD(run_b, lr=lr, momentum=mu)
    opt_q = SGD({k: run_1[k] for k in query}, lr=b**2 * lr, momentum=mu)
    opt_rest = SGD({k: v for k, v in run_1.items() if k not in query}, lr=lr, momentum=mu)
    for _ in range(4):
        batch = {"context": rng.integers(0, 16, size=(2, 5, 8)), "target": rng.integers(0, 16, size=(2, 5))}
        opt_b.step(scaled.loss_and_grad(run_b, batch)[1])
        g = plain.loss_and_grad(run_1, batch)[1]
        opt_q.step({k: g[k] for k in query})
        opt_rest.step({k: v for k, v in g.items() if k not in query})
    for name in run_b:
        factor = b if name in query else 1.0
        # four steps of float64 rounding, amplified by at most the step's own sensitivity: far below 1e-9
        np.testing.assert_allclose(factor * run_b[name], run_1[name], rtol=1e-9,
                                   atol=1e-13 * np.abs(run_1[name]).max(), err_msg=name)
    assert not np.allclose(run_b["W_Q"], params["W_Q"])  # the query did move


def test_fig3_beta_runs_its_cells_at_its_beta(tmp_path, monkeypatch):
    seen = []
    real = sens.run_nt
    monkeypatch.setattr(sens, "run_nt", lambda s, **k: seen.append(s.beta) or real(s, **k))
    r = run_sensitivity("fig3-beta", results=tmp_path / "b.json", progress=False, **SMALL)
    assert seen == [pytest.approx(1 / math.sqrt(32))] * 2
    assert r["settings"]["beta"] == pytest.approx(1 / math.sqrt(32))
    assert "beta = 0.1768" in sens.report(r)
    run_sensitivity("fig3", progress=False, **SMALL)
    assert seen[-1] == 1.0  # a setting without beta runs Expressive's beta = 1


def test_results_file_records_the_machine_of_each_run(tmp_path):
    from refattn.training.runs import machine_info  # noqa: PLC0415

    info = machine_info()
    assert set(info) == {"cpu", "numpy", "blas"} and info["numpy"] == np.__version__
    assert isinstance(info["cpu"], str) and isinstance(info["blas"], list)
    path = tmp_path / "fig4.json"
    run_sensitivity("fig4", results=path, progress=False, command="first", **SMALL)
    run_sensitivity("fig4", results=path, progress=False, command="first", **SMALL)  # nothing new
    runs = json.loads(path.read_text())["runs"]
    assert runs == [{"command": "first", "commit": helpers.code_commit(), "machine": info}]


def test_resuming_a_file_made_with_another_blas_kernel_warns(tmp_path):
    path = tmp_path / "fig4.json"
    run_sensitivity("fig4", results=path, progress=False, command="here", **SMALL)
    doc = json.loads(path.read_text())
    doc["runs"][0]["machine"]["blas"] = ["openblas 0.0 (SomeOtherKernel)"]
    path.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match=r"SomeOtherKernel.*OPENBLAS_CORETYPE"):
        run_sensitivity("fig4", results=path, progress=False, command="here", **SMALL)
    import warnings  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_sensitivity("fig4", results=tmp_path / "new.json", progress=False, **SMALL)  # nothing to compare


def _fake_study(values, figure="fig3", epochs=100):
    """A results document with made-up per-seed values in one grid cell (x1, lr 0.02)."""
    cells = {}
    for att, (final, e100) in values.items():
        n = len(final)
        cells[sens.cell_key(1.0, 0.02, att)] = {
            "final_accuracy": final, "epochs_to_100": e100, "accuracy": [[0.5, f] for f in final],
            "eval_epochs": [50, 100], "late_change": 0.0, "diverged": [False] * n}
    return {"settings": {"figure": figure, "task": "N16T2", "n_con": 32, "epochs": epochs, "eval_every": 50,
                         "init_scales": [1.0], "lrs": [0.02], "seeds": list(range(n)), "dtype": "float32"},
            "cells": cells}


def test_summarise_with_another_measure_compares_speed():
    # both end at 100 %: the final accuracy ties, the epochs to 100 % do not (EA is faster on every seed)
    study = _fake_study({"expressive": ([1.0] * 6, [10, 20, 20, 30, 30, 40]),
                         "softmax": ([1.0] * 6, [60, 70, 70, 80, 90, None])})
    row = sens.summarise(study)[0]
    assert row["measure"] == "final_accuracy" and row["winner"] == "neither" and row["p"] == 1.0
    speed = sens.summarise(study, measure="epochs_to_100")[0]
    assert speed["measure"] == "epochs_to_100" and speed["better"] == "lower"
    assert speed["winner"] == "EA" and speed["p"] < 0.01
    # a seed that never reaches 100 % counts as epochs + eval_every = 150: DPA's values 60, 70, 70, 80, 90, 150
    # have median 75 and quartiles 70 and 87.5 (linear interpolation)
    assert speed["softmax"]["median"] == 75 and speed["difference"] == 25 - 75
    assert speed["softmax"]["q3"] == 87.5
    assert "| x1 | 0.02 | 25 [20, 30] | 75 [70, 88] |" in sens.report(study, measure="epochs_to_100")
    with pytest.raises(ValueError, match="measure"):
        sens.summarise(study, measure="loss")


def test_verdict_map_colours_only_significant_cells():
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    ahead = _fake_study({"expressive": ([0.9, 0.95, 1.0, 0.92, 0.97, 0.99], [None] * 6),
                         "softmax": ([0.5, 0.55, 0.52, 0.51, 0.54, 0.53], [None] * 6)})
    tie = _fake_study({"expressive": ([0.5, 0.6, 0.7, 0.5, 0.6, 0.7], [None] * 6),
                       "softmax": ([0.6, 0.5, 0.7, 0.6, 0.5, 0.7], [None] * 6)})
    fig = sens.plot_verdict_map([ahead, tie], titles=["EA ahead", "tie"])
    (image_a,), (image_t,) = fig.axes[0].get_images(), fig.axes[1].get_images()
    assert image_a.get_array()[0, 0] == pytest.approx(np.median([0.9, 0.95, 1.0, 0.92, 0.97, 0.99]) - 0.525)
    assert image_t.get_array()[0, 0] == 0.0  # neither: white, whatever the difference of medians
    # EA median 0.96, DPA 0.525: 43.5 points ahead
    assert fig.axes[0].texts[0].get_text().split("\n")[:2] in (["EA", "+43 pts"], ["EA", "+44 pts"])
    with pytest.raises(ValueError, match="titles"):
        sens.plot_verdict_map([ahead], titles=["a", "b"])
    with pytest.raises(ValueError, match="results"):
        sens.plot_verdict_map([])


def test_compare_results_finds_where_a_rerun_departs(tmp_path):
    first = run_sensitivity("fig4", progress=False, **SMALL)
    again = run_sensitivity("fig4", progress=False, **SMALL)  # the same program: the same numbers
    rows = sens.compare_results(again, first)
    assert [r["cell"] for r in rows] == sorted(first["cells"])
    assert all(r["identical"] and r["first_loss_difference"] is None and r["same_epochs_to_100"] == 2
               for r in rows)
    drifted = json.loads(json.dumps(again))
    cell = drifted["cells"]["init=0.5 lr=0.32 softmax"]
    i = len(cell["loss"]) // 2
    cell["loss"][i] = (cell["loss"][i] or 1.0) * (1 + 1e-6)
    cell["epochs_to_100"][1] = 999
    cell["final_accuracy"][0] = cell["final_accuracy"][0] - 0.25
    row = {r["cell"]: r for r in sens.compare_results(drifted, first)}["init=0.5 lr=0.32 softmax"]
    assert not row["identical"] and row["first_loss_difference"] == cell["loss_epochs"][i]
    assert row["same_epochs_to_100"] == 1 and row["largest_final_difference"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="fig4"):
        sens.compare_results(run_sensitivity("fig3", progress=False, **SMALL), first)


def test_code_commit_names_a_commit():
    commit = helpers.code_commit()
    # None outside a git checkout (an installed copy); else 40 hex digits, "-dirty" if refattn/ has changes
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit)


def test_the_winner_follows_the_ranks_not_a_mean_a_diverged_seed_can_drag():
    # DPA is ahead on 14 of 16 seeds; two of its seeds diverged to chance, which pulls its mean below EA's
    ea = [0.95] * 15 + [0.06]
    dpa = [0.985] * 14 + [0.06, 0.06]
    assert np.mean(dpa) < np.mean(ea)
    assert statistics.rank_shift(dpa, ea) > 0 and statistics.rank_shift(ea, dpa) == -statistics.rank_shift(dpa, ea)
    study = _fake_study({"expressive": (ea, [None] * 16), "softmax": (dpa, [None] * 16)})
    row = sens.summarise(study)[0]
    assert row["p"] < 0.05 and row["winner"] == "DPA"
    # for a measure where lower is better the direction flips: fewer epochs to 100 % wins
    fast, slow = [100, 120, 140, 160, 180, 200], [400, 420, 440, 460, 480, 500]
    speed = _fake_study({"expressive": ([1.0] * 6, fast), "softmax": ([1.0] * 6, slow)}, epochs=1000)
    assert sens.summarise(speed, measure="epochs_to_100")[0]["winner"] == "EA"


# --------------------------------------------------------------------------
# A results file edited by hand: refused, not reported as measured
# --------------------------------------------------------------------------

#: The command of a small grid (two cells) whose file the edits below change.
SMALL_CLI = ["nt-sensitivity", "fig4", "--seeds", "2", "--epochs", "20", "--eval-every", "10", "--init-scales", "0.5",
             "--lrs", "0.32", "--n-test", "4"]

EA = "init=0.5 lr=0.32 expressive"


def _set(doc, *keys, value=None, delete=False):
    """``doc`` with ``doc[keys[0]]...[keys[-1]]`` set to ``value`` (or deleted)."""
    target = doc
    for k in keys[:-1]:
        target = target[k]
    if delete:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return doc


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("small") / "r.json"
    assert main(SMALL_CLI + ["--results", str(path)]) == 0
    return path


@pytest.mark.parametrize("edit, said", [
    (lambda d: _set(d, "cells", EA, "epochs_to_100", value=[1, 1]), "epochs_to_100 1 of seed 0 contradicts"),
    (lambda d: _set(d, "cells", EA, "final_accuracy", value=[7.0, -3.0]), "not its curve's last value"),
    (lambda d: _set(d, "cells", EA, "final_accuracy", value=[None, d["cells"][EA]["final_accuracy"][1]]),
     "not its curve's last value"),
    (lambda d: _set(d, "cells", EA, "accuracy", value=[[1.5, 1.0], [0.5, 1.0]]), "not an accuracy"),
    (lambda d: _set(d, "cells", "init=9 lr=0.32 softmax", value=d["cells"][EA]), "not a cell of its grid"),
    (lambda d: _set(d, "ran_on", EA, delete=True), f"cell {EA!r} has no place in 'ran_on'"),
    (lambda d: _set(d, "ran_on", EA, value=None), "is not a record of where it ran"),
    (lambda d: _set(d, "ran_on", EA, "blas", value=None), "its 'blas' is missing"),
])
def test_a_hand_edited_results_file_is_one_line_naming_it(edit, said, small_file, tmp_path, capsys):
    path = tmp_path / "r.json"
    doc = edit(json.loads(small_file.read_text()))
    path.write_text(json.dumps(doc))
    before = path.read_text()
    capsys.readouterr()
    assert main(SMALL_CLI + ["--results", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and said in err and "left as it is" in err, err
    assert path.read_text() == before
    if not any(w in said for w in ("ran_on", "where it ran", "'blas'")):  # the curves' table too (it reads no place)
        assert main(["curves", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err, err


def test_every_committed_results_file_agrees_with_its_curves():
    from pathlib import Path  # noqa: PLC0415

    files = sorted((Path(__file__).resolve().parents[2] / "derivations" / "data").glob("15-sensitivity-*.json"))
    assert files
    for f in files:
        sens.check_cells(json.loads(f.read_text(encoding="utf-8")))


def test_a_complete_file_of_other_versions_is_reported_without_the_flag(small_file, tmp_path, capsys):
    """Only adding cells to a file made with other versions needs --allow-mixed-versions; reading it does not."""
    path = tmp_path / "r.json"
    doc = json.loads(small_file.read_text())
    for place in doc["ran_on"].values():
        place["numpy"] = "0.0.1"
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(SMALL_CLI + ["--results", str(path)]) == 0
    assert "| x0.5 | 0.32 |" in capsys.readouterr().out
    assert main(SMALL_CLI[:-4] + ["--lrs", "0.32,0.04", "--n-test", "4", "--results", str(path)]) == 2
    assert "--allow-mixed-versions" in capsys.readouterr().err
