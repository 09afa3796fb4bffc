"""The benchmark scripts' bad input: one line naming the option, exit code 2, before anything is measured.

Each bad input runs the script in a fresh process, as a user would; none of
them gets as far as a measurement (a bad value is refused while the options
are read), so each case takes the start-up time only. Without PyTorch
(``--no-torch`` where a script has it). No assertion about time.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
MISSING = "/nonexistent-folder-for-refattn-tests/x.json"


def _run(script, *args, timeout=120):
    return subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=timeout, check=False)


def _refused(script, *args):
    """The one line on stderr of a run that must be refused with exit code 2 and no output."""
    r = _run(script, *args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr and r.stdout == "", r
    assert lines[0].startswith(f"{script}: "), lines
    return lines[0]


BAD = [
    ("bench_sdpa.py", ["--pause", "-1"], "--pause: expected a finite number >= 0, got -1"),
    ("bench_sdpa.py", ["--pause", "nan"], "--pause: expected a finite number >= 0, got nan"),
    ("bench_sdpa.py", ["--warmup", "inf"], "--warmup: expected a finite number >= 0, got inf"),
    ("bench_sdpa.py", ["--warmup", "-1"], "--warmup: expected a finite number >= 0, got -1"),
    ("bench_sdpa.py", ["--ns", "0"], "--ns: expected an integer >= 1, got 0"),
    ("bench_sdpa.py", ["--ns", "-5"], "--ns: expected an integer >= 1, got -5"),
    ("bench_sdpa.py", ["--quick", "--ns", "0"], "--ns: expected an integer >= 1, got 0"),
    ("bench_sdpa.py", ["--ns", "64", "x"], "--ns: expected an integer >= 1, got 'x'"),
    ("bench_sdpa.py", ["--memory-n", "-3"], "--memory-n: expected an integer >= 0, got -3"),
    ("bench_sdpa.py", ["--threads", "0"], "--threads: expected an integer >= 1, got 0"),
    ("bench_sdpa.py", ["--out", MISSING], "--out: expected a file path in an existing, writable folder"),
    ("bench_strips.py", ["--repeats", "0"], "--repeats: expected an integer >= 1, got 0"),
    ("bench_strips.py", ["--repeats", "-2"], "--repeats: expected an integer >= 1, got -2"),
    ("bench_strips.py", ["--n", "0"], "--n: expected an integer >= 1, got 0"),
    ("bench_strips.py", ["--quick", "--n", "0"], "--n: expected an integer >= 1, got 0"),
    ("bench_strips.py", ["--quick", "--sizes", "1,2"], "--sizes: expected three positive ints g,bq,bk, got '1,2'"),
    ("bench_strips.py", ["--out", MISSING], "--out: expected a file path in an existing, writable folder"),
    ("bench_streaming.py", ["--no-torch", "--repeats", "0", "--passes", "1"],
     "--repeats: expected an integer >= 1, got 0"),
    ("bench_streaming.py", ["--no-torch", "--quick", "--passes", "0"], "--passes: expected an integer >= 1, got 0"),
    ("bench_streaming.py", ["--no-torch", "--activation", "bogus"], "--activation: invalid choice: 'bogus'"),
    ("bench_streaming.py", ["--no-torch", "--long", "nan"], "--long: expected a finite number >= 0, got nan"),
    ("bench_streaming.py", ["--no-torch", "--long", "-1"], "--long: expected a finite number >= 0, got -1"),
    ("bench_streaming.py", ["--no-torch", "--torch-timeout", "0"], "--torch-timeout: expected a finite number > 0"),
    ("bench_streaming.py", ["--no-torch", "--quick", "--out", MISSING],
     "--out: expected a file path in an existing, writable folder"),
    ("bench_nt.py", ["--passes", "0"], "--passes: expected an integer >= 1, got 0"),
    ("bench_nt.py", ["--passes", "-1"], "--passes: expected an integer >= 1, got -1"),
    ("bench_nt.py", ["--skip", "-1"], "--skip: expected an integer >= 0, got -1"),
    ("bench_nt.py", ["--quick", "--out", MISSING], "--out: expected a file path in an existing, writable folder"),
    ("bench_cpu_attention.py", ["--quick", "--repeats", "0"], "--repeats: expected an integer >= 1, got 0"),
    ("bench_cpu_attention.py", ["--quick", "--out", MISSING], "--out: expected a file path in an existing, writable"),
    ("bench_kernels.py", ["--quick", "--shape", "0"], "--shape: expected an integer >= 1, got 0"),
    ("bench_loop.py", ["--warmup", "-1"], "--warmup: expected an integer >= 0, got -1"),
    ("bench_ops.py", ["--repeats", "0"], "--repeats: expected an integer >= 1, got 0"),
    ("bench_nt_cost.py", ["--quick", "--epochs", "0"], "--epochs: expected an integer >= 1, got 0"),
    ("bench_nt_torch.py", ["--passes", "0"], "--passes: expected an integer >= 1, got 0"),
    ("bench_nt_torch.py", ["--threads", "0"], "--threads: expected an integer >= 1, got 0"),
    ("bench_nt_torch.py", ["--quick", "--out", MISSING], "--out: expected a file path in an existing, writable folder"),
]


@pytest.mark.parametrize("script, args, says", BAD, ids=[f"{s}:{' '.join(a)}" for s, a, _ in BAD])
def test_bad_input_is_one_line_naming_the_option(script, args, says):
    line = _refused(script, *args)
    assert line.startswith(f"{script}: {says}"), line


@pytest.mark.parametrize("script, args", [("bench_sdpa.py", ["--no-torch", "--quick"]), ("bench_strips.py", ["--quick"]),
                                          ("bench_streaming.py", ["--no-torch", "--quick"]),
                                          ("bench_nt.py", ["--quick"])])
def test_an_out_that_is_a_folder_is_refused_before_measuring(script, args, tmp_path):
    line = _refused(script, *args, "--out", str(tmp_path))
    assert line == f"{script}: --out: expected a file path in an existing, writable folder, got {tmp_path} (a folder)"
    assert list(tmp_path.iterdir()) == []


def test_bench_nt_refuses_an_unknown_baseline_before_measuring():
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--git-dir"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    line = _refused("bench_nt.py", "--quick", "--baseline", "nosuchcommit")
    assert line == "bench_nt.py: --baseline: expected a commit of this repository, got nosuchcommit"


def test_bench_sdpa_table_of_a_missing_or_foreign_file_is_one_line(tmp_path):
    line = _refused("bench_sdpa.py", "--table", str(tmp_path / "none.json"))
    assert line.startswith("bench_sdpa.py: --table: expected a JSON file saved by --out, got ") and "No such file" in line
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    line = _refused("bench_sdpa.py", "--table", str(tmp_path / "other.json"))
    assert line.startswith("bench_sdpa.py: --table: expected a JSON file saved by --out") and "'machine'" in line
    (tmp_path / "text.json").write_text("not json")
    assert "JSONDecodeError" in _refused("bench_sdpa.py", "--table", str(tmp_path / "text.json"))


def test_quick_keeps_the_options_given(tmp_path):
    """``--quick`` sets only what the command line leaves unset: an explicit length is the one measured."""
    out = tmp_path / "strips.json"
    r = _run("bench_strips.py", "--quick", "--n", "32", "--dtypes", "float64", "--sizes", "auto", "--out", str(out))
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert [row["n"] for row in res["rows"]] == [32] and res["repeats"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["strips.json"]  # no temporary left beside it


def test_write_json_replaces_the_file_whole_or_not_at_all(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import machine  # noqa: PLC0415

    path = tmp_path / "r.json"
    machine.write_json(str(path), {"rows": [1.0, float("inf")]})
    first = path.read_text()
    assert json.loads(first) == {"rows": [1.0, None], "non_finite": ["$.rows[1] = inf"]}  # strict JSON

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)  # the disk fills while the new file is written: the old one stays
    with pytest.raises(OSError, match="No space left on device"):
        machine.write_json(str(path), {"rows": [2.0]})
    assert path.read_text() == first and [p.name for p in tmp_path.iterdir()] == ["r.json"]
