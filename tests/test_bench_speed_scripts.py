"""The speed benchmarks beside PyTorch and over strip sizes run, and say what they measured.

Smoke tests at tiny sizes, without PyTorch (a benchmark-only dependency: the
scripts must run, and report it missing, where it is not installed). They
assert nothing about time.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from refattn import ACTIVATIONS

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(script, *args):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_bench_sdpa_without_torch_writes_the_table_and_verdicts(tmp_path):
    out = tmp_path / "sdpa.json"
    _run("bench_sdpa.py", "--quick", "--no-torch", "--out", str(out))
    res = json.loads(out.read_text())
    assert res["complete"] and res["machine"]["blas"] is not None and res["threads"]["torch"] is None
    assert {(r["dtype"], r["causal"]) for r in res["rows"]} == {(d, c) for d in ("float32", "float64")
                                                                for c in (True, False)}
    for row in res["rows"]:
        assert "sdpa" not in row["times"] and "streaming_over_sdpa" not in row  # no PyTorch: no ratio to it
        assert all(np.isfinite(t["ms"]) and t["ms"] > 0 for t in row["times"].values())
        assert set(row["activation_over_softmax"]) == set(ACTIVATIONS) - {"softmax"}
    assert res["memory"]["peak_mib"] > 0
    assert isinstance(res["verdict"]["all_met"], bool)
    table = _run("bench_sdpa.py", "--table", str(out))
    assert "| dtype | causal | n | streaming ms | fast dense ms | SDPA ms |" in table


@pytest.mark.parametrize("size", ["auto", "1,16,32"])
def test_bench_strips_reports_each_activation_over_softmax(size, tmp_path):
    out = tmp_path / "strips.json"
    _run("bench_strips.py", "--n", "64", "--dtypes", "float64", "--sizes", size, "--repeats", "1", "--out", str(out))
    (row,) = json.loads(out.read_text())["rows"]
    assert set(row["over_softmax"]) == set(ACTIVATIONS) and row["over_softmax"]["softmax"] == 1.0
    assert all(np.isfinite(v) and v > 0 for v in row["cpu_ms"].values())


def test_bench_defined_activation_times_the_three_forms_and_says_the_verdict(tmp_path):
    out = tmp_path / "defined.json"
    _run("bench_defined_activation.py", "--quick", "--out", str(out))
    res = json.loads(out.read_text())
    assert set(res["ms"]) == {"softmax", "subclass", "defined", "defined_autograd"}
    assert all(np.isfinite(t) and t > 0 for t in res["ms"].values())
    assert all(d <= 1e-10 for d in res["max_relative_gradient_difference"].values())  # the same numbers first
    assert set(res["verdict"]) == {"defined_within_2x_of_subclass", "defined_within_3x_of_softmax"}
    assert res["machine"]["blas_kernel"] is None or isinstance(res["machine"]["blas_kernel"], str)


def test_bench_nt_torch_times_the_same_model_in_both(tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed (the bench extra)")
    out = tmp_path / "nt_torch.json"
    _run("bench_nt_torch.py", "--quick", "--kernels", "Haswell", "--out", str(out))
    res = json.loads(out.read_text())
    assert max(res["agreement_float64"].values()) <= 1e-10  # the two programs compute the same step
    (kernel,) = res["kernels"]
    assert set(kernel["dtypes"]) == {"float64", "float32"}
    for row in kernel["dtypes"].values():
        assert row["refattn"]["median_ms"] > 0 and row["torch"]["median_ms"] > 0
        assert np.isfinite(row["refattn_over_torch"]["ratio"]) and row["refattn_over_torch"]["target"] == 1.0
    assert res["machine"]["torch"]["version"]
