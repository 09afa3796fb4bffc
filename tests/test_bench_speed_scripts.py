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

pytestmark = pytest.mark.slow

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


# --------------------------------------------------------------------------
# The pages' speed figures are the committed benchmarks' numbers
# --------------------------------------------------------------------------


def _results(name):
    return json.loads((ROOT / "benchmarks" / "results" / name).read_text(encoding="utf-8"))


def _section(page, start, end=None):
    """The text of ``page`` from the line holding ``start`` to the one holding ``end`` (one paragraph's
    figures, as the reader sees them: line breaks as spaces)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    assert start in text, f"{page}: no {start!r}"
    text = text.split(start, 1)[1]
    return " ".join((text.split(end, 1)[0] if end else text).split())


def test_the_verify_pages_speed_figures_are_the_benchmarks():
    """Each ratio the Verify page gives for an activation of one's own is its JSON's, on each kernel, and
    the page's word for each target is the JSON's verdict."""
    text = _section("docs/verify.md", "benchmarks/bench_defined_activation.py` times it", "**Values that are not")
    for name in ("defined_activation.json", "defined_activation-haswell.json"):
        res = _results(name)
        assert f"`{res['machine']['blas_kernel']}`" not in text  # the kernel by its name in prose
        assert res["machine"]["blas_kernel"] in text and res["machine"]["numpy"] in text
        r = res["ratios"]
        for key in ("defined_over_subclass", "defined_over_softmax", "defined_autograd_over_subclass",
                    "defined_autograd_over_softmax"):
            assert f"{r[key]:.2f}" in text, (name, key)
        assert res["verdict"] == {"defined_within_2x_of_subclass": True, "defined_within_3x_of_softmax": True}
        assert r["defined_autograd_over_softmax"] > 3  # "autograd's derivatives ... miss the second"
        assert max(res["max_relative_gradient_difference"].values()) <= 1e-10
    assert "hold with hand-given derivatives on both kernels" in text


def _nt_torch_rows(name, cpu):
    """The performance page's rows for one ``bench_nt_torch.py`` JSON, as the page writes them."""
    rows = []
    for kernel in _results(name)["kernels"]:
        for dtype, row in kernel["dtypes"].items():
            r, c = row["refattn_over_torch"], row["refattn_over_torch_cpu"]
            line = (f"| {', '.join(row['reported_kernels'])} | {dtype} | {row['refattn']['median_ms']:.1f} | "
                    f"{row['torch']['median_ms']:.1f} | {r['ratio']:.2f} ({r['spread'][0]:.2f}–{r['spread'][1]:.2f}) |")
            if cpu:
                line += (f" {row['refattn']['cpu_median_ms']:.1f} / {row['torch']['cpu_median_ms']:.1f} | "
                         f"{c['ratio']:.2f} ({c['spread'][0]:.2f}–{c['spread'][1]:.2f}) |")
            rows.append(line)
    return rows


def test_the_performance_pages_pytorch_figures_are_the_benchmarks():
    """The NT comparison's two tables and the streaming profile's table and block figures on the
    performance page are the committed JSON files' numbers, and the page's words about the target
    follow them."""
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    for name, cpu in (("nt_torch-1thread.json", False), ("nt_torch-default.json", True)):
        res = _results(name)
        assert res["command"].split("--out ")[0].replace("python ", ".venv/bin/python ", 1) in page
        assert max(res["agreement_float64"].values()) <= 1e-10
        assert res["machine"]["torch"]["version"].split("+")[0] in page
        for line in _nt_torch_rows(name, cpu):
            assert line in page, line
    one = [row["refattn_over_torch"]["ratio"] for k in _results("nt_torch-1thread.json")["kernels"]
           for row in k["dtypes"].values()]
    assert any(r > 1 for r in one) and any(r <= 1 for r in one)  # "holds ... and misses ..."
    text = _section("docs/performance.md", "## Streaming in float32: what bounds it", "## Neural Attention")
    prof = _results("streaming_profile-skylakex.json")
    for w in prof["whole"]:
        assert (f"| {w['dtype']} | {'yes' if w['causal'] else 'no'} | {w['n']} | {w['streaming_ms']:.1f} | "
                f"{w['sdpa_ms']:.1f} | {w['ratio']:.2f} |") in text, w
        assert w["ratio"] > 1.25  # the targets are missed on this machine, as the page says
    us = prof["parts"]["float32"]["us"]
    for part in ("exp", "row sum", "product"):
        assert f"{us[part]['numpy']:.0f} / {us[part]['torch']:.0f}" in text, part
    worst = max(us[p]["numpy"] / us[p]["torch"] for p in ("q K^T", "W V", "W^T dY"))
    assert f"up to {worst:.2f} times" in text


def test_bench_bridge_times_refattn_torch_beside_plain_pytorch(tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed (the torch extra)")
    out = tmp_path / "bridge.json"
    _run("bench_bridge.py", "--quick", "--out", str(out))
    res = json.loads(out.read_text())
    assert {(r["case"], r["dtype"]) for r in res["rows"]} == {(c, d) for c in ("softmax", "rectified")
                                                            for d in ("float32", "float64")}
    for row in res["rows"]:
        assert row["relative_difference"] <= (1e-10 if row["dtype"] == "float64" else 1e-4)  # the same numbers first
        assert np.isfinite(row["ratio"]) and row["ratio"] > 0 and isinstance(row["met"], bool)
