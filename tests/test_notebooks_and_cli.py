"""The notebooks run (at a small size), the command line works, and the
README's set-up commands are the ones CI runs."""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from refattn import ACTIVATIONS, SCORES, activation
from refattn.cli import main

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_draws(path, tmp_path, monkeypatch):
    """Parse the jupytext percent file into cells and run every code cell in
    order in one namespace, as a kernel would; every figure is saved."""
    import jupytext

    nb = jupytext.read(path)
    kinds = {c.cell_type for c in nb.cells}
    assert {"markdown", "code"} <= kinds, f"{path.name}: needs markdown and code cells"
    monkeypatch.setenv("REFATTN_SMALL", "1")
    monkeypatch.setenv("REFATTN_FIGDIR", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": "__main__"}
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        exec(compile(cell.source, f"{path.name}[cell {i}]", "exec"), namespace)  # noqa: S102
    import matplotlib.pyplot as plt

    plt.close("all")
    assert list(tmp_path.glob("*.png")), f"{path.name}: drew no figure"


def test_check_json_covers_every_registered_function(capsys):
    assert main(["check", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    names = {r["name"] for r in result["rows"] if not r["singular"]}
    assert set(ACTIVATIONS) <= names and set(SCORES) <= names
    for r in result["rows"]:
        if not r["singular"]:
            assert r["ok"] and r["autograd_max_rel"] <= 1e-6 and r["central_max_rel"] <= 1e-6, r
    flagged = {r["name"] for r in result["rows"] if r["singular"]}
    assert "signexp @ s = 0" in flagged
    # the jump is what differences see at signexp's singular point
    assert next(r for r in result["rows"] if r["name"] == "signexp @ s = 0")["central_max_rel"] > 1e-2


def test_check_table(capsys):
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    for name in ACTIVATIONS + SCORES:
        assert re.search(rf"^\w+\s+{re.escape(name)}\s", out, re.M), name
    assert "all checks passed" in out


def test_check_fails_when_a_vjp_is_wrong(monkeypatch, capsys):
    act = activation("tanhmax")
    honest = type(act).backward
    monkeypatch.setattr(type(act), "backward", lambda self, u, cache: honest(self, u, cache) * 1.001)
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"activation\s+tanhmax\s.*FAIL", out)


def test_python_dash_m_entry_point():
    r = subprocess.run([sys.executable, "-m", "refattn", "check", "--json"], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ok"] is True


def test_benchmark_script_smoke():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_cpu_attention.py"), "--quick", "--json"],
                       cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert set(res["rows"]) == set(ACTIVATIONS)
    assert all(np.isfinite(v["refattn_total_s"]) for v in res["rows"].values())
    assert set(res["verdict"]) >= {"softmax_no_slower_than_torch", "all_within_1_5x_of_softmax",
                                   "analytic_backward_1_5x_faster_than_autograd"}


def test_benchmark_script_without_torch(monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_cpu_attention
    finally:
        sys.path.pop(0)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    res = bench_cpu_attention.main(["--quick", "--json"])
    assert res["torch"] is None and res["verdict"]["softmax_no_slower_than_torch"] is None
    assert res["verdict"]["all_within_1_5x_of_softmax"] in (True, False)


@pytest.mark.parametrize("script, args", [
    ("bench_loop.py", ["tanhmax", "--shape", "2", "2", "8", "4", "--steps", "2", "--warmup", "0", "--json"]),
    ("bench_loop.py", ["--unblocked", "--shape", "2", "2", "8", "4", "--steps", "1", "--json"]),
    ("bench_ops.py", ["--repeats", "1", "--json"]),
])
def test_other_benchmark_scripts_smoke(script, args):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    values = [res["median_ms"], res["page_faults_per_step"]] if script == "bench_loop.py" else \
        list(res["slice_us"].values()) + [res["matmul_slice_1_thread_us"]]
    assert all(np.isfinite(v) and v >= 0 for v in values)


def test_properties_cli_json(capsys):
    assert main(["properties", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["activations"]) == set(ACTIVATIONS)
    assert all(res["activations"]["tanhmax"][p]["holds"] for p in res["activations"]["tanhmax"])
    assert res["activations"]["expressive"]["monotonicity"]["holds"] is False
    assert main(["properties"]) == 0
    assert "Table 3" in capsys.readouterr().out


def test_nt_cycles_cli(capsys):
    assert main(["nt-cycles", "--N", "16", "--tau", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert {(c["length"], c["count"]) for c in res["cycles"]} == {(56, 64), (28, 16), (14, 4), (7, 1), (1, 1)}
    assert main(["nt-cycles", "--N", "16", "--tau", "2", "--variant", "NT-S"]) == 0
    assert "4096" in capsys.readouterr().out


def test_nt_cli_layout_flags(tmp_path, capsys):
    assert main(["nt", "--task", "N2T1", "--context", "4", "--seeds", "1", "--epochs", "2", "--eval-every", "2",
                 "--n-test", "3", "--layout", "b_2+b_r", "--init-scale", "0.5", "--bias-init", "uniform",
                 "--json", "--out", str(tmp_path)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["layout"] == "b_2+b_r"
    assert (tmp_path / "nt_N2T1_4_expressive_b_2+b_r.png").is_file()
    with pytest.raises(SystemExit):
        main(["nt", "--layout", "b_2"])


@pytest.mark.parametrize("argv,figure", [
    (["rank-collapse", "--depth", "3", "--seeds", "1", "--inputs", "1", "--activations", "softmax,tanhmax"],
     "rank_collapse.png"),
    (["neural-cost", "--ns", "32,48", "--d-primes", "2", "--budget-mib", "8", "--repeats", "1"], "neural_cost.png"),
    (["nt-figure", "fig4", "--seeds", "2", "--epochs", "4"], "nt_fig4.png"),
    (["lm", "--data", "toy", "--activations", "softmax,cog-hybrid", "--seeds", "1", "--steps", "2", "--layers", "3",
      "--width", "16"], "lm.png"),
])
def test_study_commands_draw_their_figures(argv, figure, tmp_path, capsys):
    """Each command prints one JSON object with --json and writes its figure with --out."""
    assert main(argv + ["--json", "--out", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert isinstance(result, dict) and result
    assert (tmp_path / figure).is_file()
    assert main(argv) == 0  # and the readable table
    assert capsys.readouterr().out.strip()


def test_rank_collapse_cli_gives_both_residual_forms(capsys):
    assert main(["rank-collapse", "--depth", "2", "--seeds", "1", "--inputs", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    text = json.dumps(r)
    assert "residual_code" in text and "residual_exact" in text
    for name in ACTIVATIONS:
        assert name in text, name


def test_bench_kernels_smoke():
    """benchmarks/bench_kernels.py runs, times every activation and finds the fast kernels equal to the reference."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_kernels.py"), "--quick", "--json"],
                       cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert set(res["rows"]) == set(ACTIVATIONS)
    for name, row in res["rows"].items():
        times = [row[k] for k in ("reference_forward_ms", "fast_forward_ms", "forward_ratio", "reference_vjp_ms", "fast_vjp_ms",
                                  "vjp_ratio")]
        assert all(np.isfinite(v) and v > 0 for v in times), name
        # norm-wise relative difference; tests/fast/test_fast.py holds the kernels to rtol 1e-13 entry by entry
        assert max(row["max_rel_diff"].values()) <= 1e-13, name


# --------------------------------------------------------------------------
# One error style, output safety, strict JSON
# --------------------------------------------------------------------------

TINY_POLARITY = ["polarity", "--activations", "softmax", "--seeds", "1", "--epochs", "1"]


@pytest.mark.parametrize("argv, names", [
    (["polarity", "--activations", "softmax", "--seeds", "1", "--epochs", "0"], "--epochs: expected an integer >= 1"),
    (["neural-cost", "--ns", "abc"], "--ns: expected comma-separated integers"),
    (["polarity", "--activations", "softmax,,tanhmax"], "--activations: expected a non-empty name, got ''"),
    (["polarity", "--activations", "softmax,softmax"], "--activations: 'softmax' is given twice"),
    (["nt", "--seeds", "1", "--epochs", "0"], "--epochs: expected an integer >= 1"),
    (["nt", "--seeds", "1", "--epochs", "2", "--checkpoint", "run.txt"], "checkpoint: a checkpoint is a .npz file"),
    (["nt", "--seeds", "1", "--epochs", "2", "--lr-drop", "1.5", "2"], "--lr-drop EPOCH: expected a whole number"),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, names, capsys):
    try:
        code = main(argv)
    except SystemExit as stop:  # text argparse cannot convert ('abc' for integers): its refusal, as for --seeds x
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and names in err, err
    if "argument " not in err:
        with pytest.raises((ValueError, TypeError)):
            main(["--debug"] + argv)  # --debug shows the exception itself


def test_an_output_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert main(TINY_POLARITY + ["--out", str(tmp_path / "afile" / "sub")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "afile" in captured.err and "Traceback" not in captured.err
    assert main(TINY_POLARITY + ["--out", ""]) == 2
    assert "--out: expected a folder name" in capsys.readouterr().err


def test_a_figure_that_cannot_be_written_is_a_warning_and_the_results_still_come(tmp_path, capsys):
    (tmp_path / "polarity_fig2.png").mkdir()  # the figure's path is taken by a folder
    assert main(TINY_POLARITY + ["--out", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert "figure_error" in result and result["activations"]["softmax"]["per_seed"]
    assert "warning: figure" in captured.err


def test_json_output_is_strict_even_with_non_finite_numbers():
    from refattn.cli import _dumps

    text = _dumps({"loss": [float("inf"), float("nan"), 1.0], "ok": np.float64(2.0)})

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    parsed = json.loads(text, parse_constant=refuse)
    assert parsed["loss"] == [None, None, 1.0] and parsed["ok"] == 2.0
    assert parsed["non_finite"] == ["$.loss[0] = inf", "$.loss[1] = nan"]


def test_a_closed_output_pipe_ends_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "refattn", "check", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=pathlib.Path(__file__).resolve().parents[1])
    proc.stdout.close()  # the reader is gone before the command writes (like `| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait() in (0, 1) and "Traceback" not in err and "BrokenPipe" not in err, err


def test_refattn_small_accepts_only_0_or_1(monkeypatch):
    from refattn.plots import small

    for value, want in (("", False), ("0", False), ("1", True)):
        monkeypatch.setenv("REFATTN_SMALL", value)
        assert small() is want
    monkeypatch.setenv("REFATTN_SMALL", "yes")
    with pytest.raises(ValueError, match="REFATTN_SMALL: expected 0 or 1, got 'yes'"):
        small()


@pytest.mark.parametrize("var, value", [("REFATTN_NUM_THREADS", "two"), ("REFATTN_NUM_THREADS", "0"),
                                        ("REFATTN_SMALL", "yes")])
def test_environment_variables_are_checked_before_any_work(var, value, monkeypatch, capsys):
    monkeypatch.setenv(var, value)
    assert main(["nt-cycles", "--N", "2", "--tau", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"{var}: expected" in captured.err


def test_bench_nt_smoke(tmp_path):
    """benchmarks/bench_nt.py --quick runs every program on each kernel asked for and writes the times,
    the speed-ups over the baseline commit and the verdict check."""
    out = tmp_path / "nt.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_nt.py"), "--quick", "--kernels", "Haswell",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert "--kernels Haswell" in res["command"]
    (run,) = res["kernels"]
    assert run["kernel_asked"] == "Haswell"
    for program in ("baseline", "float64", "float32"):
        assert run["times"][program]["median_ms"] > 0
    for dt in ("float64", "float32"):
        assert run["speedup_over_baseline"][dt]["ratio"] > 0
    (check,) = res["verdicts"]
    assert set(check["epochs_to_100_identical"]) == {"expressive", "softmax"}
    assert set(check["rows"]) == {f"{a}/{d}" for a in ("expressive", "softmax") for d in ("float64", "float32")}


def test_bench_nt_cost_smoke(tmp_path):
    """benchmarks/bench_nt_cost.py --quick times both attentions and writes the cost of a cell."""
    out = tmp_path / "cost.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_nt_cost.py"), "--quick", "--epochs", "2",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert [row["attention"] for row in res["rows"]] == ["expressive", "softmax"]
    for row in res["rows"]:
        assert row["n_con"] == 32 and row["n_params"] == 98832  # n (11 d^2 + d) + n d^2 + d at d = 16, n = 32
        assert row["train_seconds_per_epoch"] > 0 and row["peak_rss_gib"] > 0
        cell = row["minutes_per_attention_and_cell"] * 60
        assert cell == pytest.approx(2000 * row["train_seconds_per_epoch"] + 8 * row["eval_seconds"])
    assert res["command"].endswith("--quick --epochs 2 --out " + str(out))
