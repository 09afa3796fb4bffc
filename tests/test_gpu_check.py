"""benchmarks/gpu_check.sh and its steps (benchmarks/gpu_check.py), on a machine without a GPU.

The script is meant for a GPU machine with a few minutes to spare; what can
be checked here is that it reaches its end and writes its report whatever
happens (no device, a bad option, a signal, a missing result), that its GPU
code path runs on the fake device (tests/fake_device.py), and that the GPU
page quotes the committed run's JSON.
"""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import wait_for

from tests import fake_device
from refattn.core.backend import cupy_available

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
COMMITTED = ROOT / "benchmarks" / "results" / "gpu_check.json"


def _module(name):
    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


gpu_check = _module("gpu_check")


def _run(*args, timeout=300, **kw):
    return subprocess.run(["bash", str(SCRIPT), "--python", sys.executable, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw)


@pytest.mark.skipif(cupy_available(), reason="a GPU is here: the no-device path is not taken")
def test_runs_to_its_end_without_a_gpu(tmp_path):
    done = _run("--quick", "--out", tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    log = (tmp_path / "gpu_check.log").read_text()
    assert "gpu_check: wrote" in log and "GPU present: no" in log
    assert report["schema"] == gpu_check.SCHEMA and report["device"] == "no device"
    assert report["gpu_reason"].startswith("no device")
    assert {k: v["status"] for k, v in report["steps"].items()} == {k: "ok" for k in gpu_check.STEPS}
    # the parity tests ran on NumPy and the fake device, and every CuPy case was skipped, not passed
    per = report["steps"]["parity"]["result"]["per_backend"]
    assert per["fake_device"]["passed"] > 100 and per["fake_device"]["failed"] == 0
    assert per["cupy"]["passed"] == 0 and per["cupy"]["skipped"] == per["fake_device"]["passed"]
    assert report["parity_on_gpu"] == "no device"
    # every GPU column says it did not run; the CPU side ran at smoke size
    dense = report["steps"]["dense"]["result"]
    assert dense["complete"] and not dense["backends"]["cupy"]["ran"]
    assert all(r["cupy_ms"] is None and r["numpy_ms"] > 0 for r in dense["rows"])
    stream = report["steps"]["streaming"]["result"]
    assert stream["device"] == "cpu" and stream["size"] == "smoke"
    assert [(r["dtype"], r["n"]) for r in stream["rows"]] == [
        (d, n) for d in ("float32", "float64") for n in gpu_check.STREAM_LENGTHS["smoke"]]
    for r in stream["rows"]:
        assert r["streaming_ms"] > 0 and str(r["block_size"]) in r["streaming"]
        if r["sdpa_ms"] is not None:  # PyTorch here: the two agree to the dtype's rounding
            assert r["max_rel_vs_sdpa"] < (1e-5 if r["dtype"] == "float32" else 1e-12)
    runs = report["steps"]["nt"]["result"]["runs"]
    assert runs["gpu"]["reason"].startswith("no device") and runs["cpu"]["seconds"] > 0
    assert all(t["met"] is None for t in report["targets"].values())
    # the table of a saved run, printed from the JSON alone
    table = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "table",
                            str(tmp_path / "gpu_check.json")], capture_output=True, text=True, check=True)
    assert "GPU check on no device" in table.stdout and "| nt | ok |" in table.stdout
    # a second run does not replace the first one's files unasked
    again = _run("--quick", "--out", tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr
    assert json.loads((tmp_path / "gpu_check.json").read_text()) == report


@pytest.mark.parametrize("args, option", [
    (["--limit", "abc"], "--limit"),
    (["--limit", "30"], "--limit"),
    (["--limit"], "--limit"),
    (["--python", "no-such-python-here"], "--python"),
    (["--wheels", "/etc/hostname"], "--wheels"),
    (["--bogus"], "unknown option --bogus"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path, args, option):
    done = _run("--out", tmp_path / "o", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and option in done.stderr and done.stderr.startswith("gpu_check.sh: ")
    assert not (tmp_path / "o" / "gpu_check.log").exists()  # refused before any work


def test_out_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "results"
    f.write_text("mine")
    done = _run("--out", f)
    assert done.returncode == 2 and "--out" in done.stderr and f.read_text() == "mine"


@pytest.mark.skipif(cupy_available(), reason="a GPU is here")
def test_a_signal_stops_the_step_and_the_report_is_still_written(tmp_path):
    proc = subprocess.Popen(["bash", str(SCRIPT), "--python", sys.executable, "--quick", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True)
    log = tmp_path / "gpu_check.log"
    wait_for(lambda: log.exists() and "== parity" in log.read_text(), "the parity step to start", proc=proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    steps = {k: v["status"] for k, v in report["steps"].items()}
    assert steps["machine"] == "ok" and steps["parity"] == "interrupted by SIGTERM"
    assert all(steps[s].startswith("not run") for s in ("dense", "streaming", "nt"))
    assert "pytest tests/test_gpu_parity" not in subprocess.run(["ps", "-eo", "args"], capture_output=True,
                                                                 text=True).stdout.replace(str(tmp_path), "")


def test_streaming_step_runs_its_gpu_path_on_the_fake_device(monkeypatch):
    """The CuPy branch of the streaming step (device copies, synchronised timing, the block-size
    choice, the comparison with SDPA) on the fake device, which refuses any implicit host copy."""
    xp = fake_device.install(monkeypatch)
    torch = pytest.importorskip("torch")
    syncs = []
    rows = gpu_check.streaming_vs_sdpa(xp, lambda: syncs.append(1), torch, "cpu", (16, 32),
                                       ("float32", "float64"), (4, 8), (1, 2), say=lambda line: None)
    assert [(r["dtype"], r["n"]) for r in rows] == [(d, n) for d in ("float32", "float64") for n in (16, 32)]
    for r in rows:
        tried = (4, 8) if r["n"] == 16 else (r["block_size"],)
        assert sorted(int(b) for b in r["streaming"]) == sorted(tried)
        if r["n"] == 16:  # the fastest block size at the smallest n is kept
            assert r["streaming_ms"] == min(v["ms"] for v in r["streaming"].values())
        assert r["streaming_over_sdpa"] == r["streaming_ms"] / r["sdpa_ms"]
        assert r["max_rel_vs_sdpa"] < (1e-5 if r["dtype"] == "float32" else 1e-12)
    # each timed run is bracketed by two synchronisations: 2 dtypes x (2 + 1 block sizes) x 2 runs
    assert len(syncs) == 2 * 2 * 3 * 2


def test_the_report_of_an_empty_run_says_what_did_not_run(tmp_path):
    report = gpu_check.assemble(tmp_path, 60)
    assert all(e["status"].startswith("not run") for e in report["steps"].values())
    assert report["device"] == "no device" and all(t["met"] is None for t in report["targets"].values())
    gpu_check.format_report(report)  # renders without any result


def test_a_failed_cupy_case_is_a_failed_parity(tmp_path):
    (tmp_path / "parity.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="t" name="test_a[cupy-softmax-float64-fast]"><failure message="x"/></testcase>'
        '<testcase classname="t" name="test_a[fake_device-softmax-float64-fast]"/>'
        '<testcase classname="t" name="test_b[numpy]"><skipped message="s"/></testcase>'
        '<testcase classname="t" name="test_static"/>'
        '</testsuite></testsuites>')
    (tmp_path / "machine.json").write_text(json.dumps({"gpu_reason": None, "cupy": {"device": "G"}}))
    report = gpu_check.assemble(tmp_path, 60)
    parity = report["steps"]["parity"]["result"]
    assert parity["per_backend"] == {"cupy": {"passed": 0, "failed": 1, "skipped": 0},
                                     "fake_device": {"passed": 1, "failed": 0, "skipped": 0},
                                     "numpy": {"passed": 0, "failed": 0, "skipped": 1},
                                     "other": {"passed": 1, "failed": 0, "skipped": 0}}
    assert parity["failed"] == ["test_a[cupy-softmax-float64-fast]"]
    assert report["parity_on_gpu"] == "FAILED or incomplete" and report["device"] == "G"


def test_the_flex_steps_are_counted_and_their_targets_read(tmp_path):
    (tmp_path / "flex_tests.xml").write_text(
        '<testsuites><testsuite name="pytest"><testcase classname="t" name="test_cuda[softmax-float64]"/>'
        '<testcase classname="t" name="test_cuda[linear-float64]"><failure message="x"/></testcase>'
        '</testsuite></testsuites>')
    verdict = {"flex_over_sdpa_rho_one/softmax/float32/4096": {"ratio": 1.2, "target": 1.5, "met": True},
               "flex_over_sdpa_rho_one/sigmoid/float32/4096": {"ratio": 1.7, "target": 1.5, "met": False},
               "flex_over_sdpa_signed/tanhmax/float32/4096": {"ratio": 2.5, "target": 3.0, "met": True},
               "all_met": False}
    (tmp_path / "flex.json").write_text(json.dumps({"device": "cuda", "verdict": verdict}))
    report = gpu_check.assemble(tmp_path, 60)
    assert report["steps"]["flex_tests"]["result"]["failed"] == ["test_cuda[linear-float64]"]
    assert report["targets"]["flex_over_sdpa_rho_one"] == {"worst": 1.7, "where": "sigmoid/float32/4096",
                                                          "target": 1.5, "met": False}
    assert report["targets"]["flex_over_sdpa_signed"]["met"] is True


# --------------------------------------------------------------------------
# The committed run and the GPU page
# --------------------------------------------------------------------------


def _committed():
    return json.loads(COMMITTED.read_text())


def test_the_committed_run_was_on_a_cuda_device_and_its_parity_passed():
    report = _committed()
    assert report["device"].startswith("NVIDIA") and report["gpu_reason"] is None
    # the FlexAttention steps came after the committed run: the next run on a device records them
    assert {k: v["status"] for k, v in report["steps"].items()} == {
        k: "ok" for k in gpu_check.STEPS if k not in ("flex_tests", "flex")}
    cupy = report["steps"]["parity"]["result"]["per_backend"]["cupy"]
    assert cupy["failed"] == cupy["skipped"] == 0 and cupy["passed"] > 100
    dense = report["steps"]["dense"]["result"]
    assert dense["shape"] == {"B": 8, "H": 8, "n": 1024, "d": 64} and dense["complete"]
    assert all(r["cupy_ms"] > 0 and r["torch_softmax_ms"] > 0 and r["torch_sdpa_ms"] > 0 for r in dense["rows"])
    assert {r["n"] for r in report["steps"]["streaming"]["result"]["rows"]} == {16384, 65536}
    nt = report["steps"]["nt"]["result"]
    assert nt["epochs"] == 200 and nt["seeds"] == 16 and nt["runs"]["gpu"]["device"] == "gpu"


def test_the_gpu_page_quotes_the_committed_run():
    report = _committed()
    bench_gpu_attention = _module("bench_gpu_attention")
    page = (ROOT / "docs" / "gpu.md").read_text()
    for block in (bench_gpu_attention.format_attention_bench(report["steps"]["dense"]["result"]),
                  gpu_check.format_streaming(report["steps"]["streaming"]["result"]),
                  gpu_check.format_nt(report["steps"]["nt"]["result"])):
        assert block in page
    page = " ".join(page.split())  # the prose, its line breaks as spaces
    dense = report["steps"]["dense"]["result"]["rows"]
    speedups = [r["numpy_over_cupy"] for r in dense]
    assert f"{min(speedups):.0f}-{max(speedups):.0f} times faster than NumPy" in page
    worst = max(dense, key=lambda r: r["cupy_over_torch"])
    assert f"up to {worst['cupy_over_torch']:.2f} times ({worst['activation']}, {worst['dtype']})" in page
    soft = {r["dtype"]: r["cupy_over_torch"] for r in dense if r["activation"] == "softmax"}
    assert f"softmax takes {soft['float32']:.2f} (float32) and {soft['float64']:.2f} (float64)" in page
    met = sorted(f"{r['activation']} {r['dtype']}" for r in dense if r["cupy_over_torch"] <= 2)
    assert met == ["linear float32", "linear float64", "relu float64", "softmax float64"]
    stream = {(r["dtype"], r["n"]): r for r in report["steps"]["streaming"]["result"]["rows"]}
    assert f"{stream['float32', 65536]['streaming_over_sdpa']:.1f} times SDPA's time in float32" in page
    assert f"{stream['float64', 16384]['streaming_over_sdpa']:.1f} times in float64" in page
    assert f"finished in {stream['float64', 65536]['streaming_ms'] / 1e3:.1f} s" in page
    assert re.search(r"asked for (\d+) GiB", page).group(1) in stream["float64", 65536]["sdpa_reason"]
    runs = report["steps"]["nt"]["result"]["runs"]
    train = runs["cpu"]["train_seconds_per_epoch"] / runs["gpu"]["train_seconds_per_epoch"]
    evals = runs["cpu"]["eval_seconds"] / runs["gpu"]["eval_seconds"]
    assert f"({train:.1f} times)" in page and f"gain {evals:.1f} times" in page
    m = report["steps"]["machine"]["result"]
    for fact in (m["nvidia_smi"]["gpus"][0]["driver"], m["cupy"]["version"], m["torch"]["version"],
                 m["versions"]["numpy"], m["blas_kernel"]):
        assert fact in page


def test_the_wheels_folder_is_ignored():
    ignored = subprocess.run(["git", "check-ignore", "-q", "benchmarks/wheels/x.whl"], cwd=ROOT)
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert ignored.returncode == 0
