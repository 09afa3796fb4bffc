"""The grid runner in this process (refattn/studies/grid.py): what needs no Dask.

A grid study runs its cells here by default, without importing Dask; each
finished cell goes into the results file with where it ran and the versions
that made it; a file made with other versions is refused unless allowed; a
cell listed twice runs once; a failing cell is counted, the others go on and
the first failure names its cell; Ctrl-C keeps every finished cell; the
progress bar counts cells and is off with --quiet or off a terminal; the
options are checked before any work; every grid study offers them. The tests
with a scheduler and workers as processes are in test_grid_cluster.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from refattn.cli import build_parser, main
from refattn.studies import grid, nt_sensitivity

ROOT = Path(__file__).resolve().parents[2]

#: The grid studies, each with the options of the runner.
GRID_STUDIES = ("nt-sensitivity", "nt-figure", "sst2-sweep", "lm-study")

#: A small nt-sensitivity grid: four cells of two seeds.
TINY = ["nt-sensitivity", "fig4", "--seeds", "2", "--epochs", "6", "--eval-every", "2", "--n-test", "4",
        "--init-scales", "0.5,1", "--lrs", "0.32"]


def test_a_serial_grid_does_not_import_dask(tmp_path):
    code = ("import sys; from refattn.cli import main; code = main(sys.argv[1:]); "
            "loaded = sorted(m for m in ('dask', 'distributed') if m in sys.modules); "
            "assert not loaded, loaded; sys.exit(code)")
    r = subprocess.run([sys.executable, "-c", code, *TINY, "--results", str(tmp_path / "r.json"), "--json"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert len(doc["cells"]) == 4
    assert list(doc["ran_on"]) == list(doc["cells"])  # where each cell ran, in the grid's order
    mine = grid.versions()
    for place in doc["ran_on"].values():
        assert place["worker"] == "in-process" and place["seconds"] >= 0
        assert {k: place[k] for k in grid.VERSION_KEYS} == {k: mine[k] for k in grid.VERSION_KEYS}


def test_the_cells_are_in_the_grids_order(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(TINY + ["--results", str(path), "--json"]) == 0
    keys = [nt_sensitivity.cell_key(i, 0.32, a) for i in (0.5, 1.0) for a in ("expressive", "softmax")]
    assert list(json.loads(path.read_text())["cells"]) == keys


def test_a_file_made_with_other_versions_is_refused_unless_allowed(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(TINY[:-4] + ["--init-scales", "0.5", "--lrs", "0.32", "--results", str(path), "--json"]) == 0
    doc = json.loads(path.read_text())
    first = next(iter(doc["ran_on"]))
    doc["ran_on"][first]["numpy"] = "0.0.1"
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    grown = TINY + ["--results", str(path), "--json"]  # the grid grows by init 1: new cells beside old ones
    assert main(grown) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--allow-mixed-versions" in err[0] and "numpy" in err[0] and first in err[0], err
    assert len(json.loads(path.read_text())["cells"]) == 2  # nothing run, nothing lost
    assert main(grown + ["--allow-mixed-versions"]) == 0
    doc = json.loads(path.read_text())
    assert len(doc["cells"]) == 4 and doc["ran_on"][first]["numpy"] == "0.0.1"  # the old record is kept


class _Settings:
    """What the runner reads of a study's settings."""

    workers = scheduler = max_memory = None
    quiet = allow_mixed_versions = False


def _cells(calls, fail=(), interrupt=()):
    def fn(key):
        calls.append(key)
        if key in fail:
            raise ValueError(f"no good: {key}")
        if key in interrupt:
            raise KeyboardInterrupt
        return {"value": key.upper()}

    return [grid.Cell(k, fn, (k,)) for k in ("a", "b", "c", "d")]


def test_a_cell_listed_twice_runs_once_and_a_kept_one_not_again():
    calls, into, ran_on, saved = [], {"b": {"value": "kept"}}, {}, []
    cells = _cells(calls)
    with grid.Runner(_Settings(), progress=False) as runner:
        runner.run(cells + cells[:1], into=into, ran_on=ran_on, then=lambda: saved.append(dict(into)))
    assert calls == ["a", "c", "d"]
    assert into == {"a": {"value": "A"}, "b": {"value": "kept"}, "c": {"value": "C"}, "d": {"value": "D"}}
    assert list(into) == ["a", "b", "c", "d"] and list(ran_on) == ["a", "c", "d"]
    assert len(saved) == 3 and saved[0] == {"a": {"value": "A"}, "b": {"value": "kept"}}  # saved after each cell


def test_a_failing_cell_is_counted_the_others_go_on_and_the_error_names_it():
    calls, into = [], {}
    with grid.Runner(_Settings(), progress=False) as runner, pytest.raises(ValueError) as info:
        runner.run(_cells(calls, fail=("b",)), into=into, ran_on={})
    assert calls == ["a", "b", "c", "d"] and set(into) == {"a", "c", "d"}
    assert str(info.value) == "cell b: no good: b (the other cells are kept)"


def test_ctrl_c_stops_at_once_and_keeps_the_finished_cells():
    calls, into, saved = [], {}, []
    with grid.Runner(_Settings(), progress=False) as runner, pytest.raises(KeyboardInterrupt):
        runner.run(_cells(calls, interrupt=("c",)), into=into, ran_on={}, then=lambda: saved.append(len(into)))
    assert calls == ["a", "b", "c"] and list(into) == ["a", "b"] and saved == [1, 2]


def test_the_progress_bar_counts_cells_and_estimates_the_time_left():
    stream, now = io.StringIO(), [100.0]
    bar = grid._Bar("fig4", total=10, slots=2, enabled=True, stream=stream, clock=lambda: now[0])
    now[0] = 160.0
    bar.update(done=4, running=2, failed=1, seconds=30.0)
    assert bar.line().endswith("4/10 cells done, 2 running, 3 queued, 1 failed; 1m00s, about 1m30s left")
    now[0] = 180.0  # 5 cells left at 30 s each, two at a time: 3 rounds, the first begun 20 s ago
    assert bar.line().endswith("; 1m20s, about 1m10s left")
    bar.close()
    assert stream.getvalue().endswith("\n") and "4/10 cells done" in stream.getvalue()


@pytest.mark.parametrize("progress, quiet, shown", [(True, False, True), (True, True, False), (None, False, False),
                                                    (False, False, False)])
def test_the_bar_is_on_stderr_only_where_wanted(progress, quiet, shown, capsys):
    settings = _Settings()
    settings.quiet = quiet
    with grid.Runner(settings, progress=progress, label="tiny") as runner:
        runner.run(_cells([]), into={}, ran_on={})
    err = capsys.readouterr().err  # capsys's stderr is not a terminal: None shows nothing
    assert ("tiny: [" in err and "4/4 cells done" in err) == shown, err


def test_workers_and_scheduler_together_are_refused_before_any_work(tmp_path, capsys):
    both = ["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"]
    assert main(TINY + both + ["--results", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workers, --scheduler: give one of them" in err[0], err
    assert not (tmp_path / "r.json").exists()


def test_a_cluster_without_dask_installed_is_one_line(monkeypatch, capsys, tmp_path):
    real = grid.importlib.util.find_spec
    monkeypatch.setattr(grid.importlib.util, "find_spec", lambda name, *a: None if name == "distributed" else
                        real(name, *a))
    assert main(TINY + ["--workers", "2", "--results", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workers: needs Dask" in err[0] and "refattn[cluster]" in err[0], err


@pytest.mark.parametrize("command", GRID_STUDIES)
def test_every_grid_study_offers_the_runners_options(command):
    text = build_parser()._subparsers._group_actions[0].choices[command].format_help()
    for option in ("--workers N", "--scheduler ADDRESS", "--quiet", "--allow-mixed-versions"):
        assert option in text, (command, option)


def test_versions_name_the_source_and_their_differences():
    mine = grid.versions()
    assert mine["refattn"].endswith(")") and "(source " in mine["refattn"]
    assert grid._source_digest() == grid._source_digest() and len(grid._source_digest()) == 12
    other = dict(mine, numpy="1.0", blas=["openblas 0.3 (Haswell)"])
    assert grid.compare_versions(mine, mine) == []
    assert grid.compare_versions(mine, other) == [f"numpy {mine['numpy']} here, 1.0 there",
                                                  f"blas {', '.join(mine['blas']) or 'none'} here, "
                                                  f"openblas 0.3 (Haswell) there"]
    assert grid.compare_versions(mine, dict(mine, cpu="another CPU")) == []  # the CPU is recorded, not compared
