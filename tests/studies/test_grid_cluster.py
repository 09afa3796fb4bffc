"""Grids on Dask: a scheduler and workers as processes of their own on 127.0.0.1 (refattn/studies/grid.py).

One small nt-sensitivity grid, run serially once, then with ``--workers 2``,
with ``--scheduler`` against ``dask scheduler`` and three ``dask worker``
processes, and while one worker is killed in the middle of a cell: every run
finishes and holds the serial run's cells (times aside). Ctrl-C stops a
``--workers`` run with one line, keeps the finished cells and leaves no
process behind; so does a killed command, whose file a second run completes.
The checks before work: an unreachable scheduler, a worker that cannot import
refattn, a worker of other versions (and ``--allow-mixed-versions``),
``--workers`` beyond the memory the cells need. Every process is started with
a time limit and ended by the test. Skipped where Dask's distributed is not
installed (the ``cluster`` and ``test`` extras bring it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PATIENCE_S, SELF_EDITING, needs, wait_for

needs("cluster")
pytestmark = pytest.mark.slow

import distributed  # noqa: E402

from refattn.cli import main  # noqa: E402
from refattn.studies import grid, nt_training  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

#: The grid: four cells of two seeds, each a second or more of one core.
GRID = ["nt-sensitivity", "fig4", "--seeds", "2", "--epochs", "200", "--eval-every", "20", "--n-test", "8",
        "--init-scales", "0.5,1", "--lrs", "0.32"]

#: The longest a test waits for one run (generous: only a run that never ends fails).
LIMIT_S = PATIENCE_S


def _cells(path):
    """The cells of a results file without their times: what must be identical wherever they ran."""
    doc = json.loads(Path(path).read_text())
    return {k: {f: v for f, v in rec.items() if f not in ("seconds", "train_seconds")}
            for k, rec in doc["cells"].items()}, doc


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    path = tmp_path_factory.mktemp("serial") / "r.json"
    assert main(GRID + ["--results", str(path), "--json"]) == 0
    cells, doc = _cells(path)
    assert len(cells) == 4 and all(p["worker"] == "in-process" for p in doc["ran_on"].values())
    return cells


class Cluster:
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1, each in a session of its own."""

    def __init__(self, folder):
        self.folder, self.procs = Path(folder), []
        self.file = self.folder / "scheduler.json"
        self._start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--no-dashboard", "--scheduler-file", str(self.file)], "scheduler")
        wait_for(self.file.exists, f"the scheduler's file (its log: {self.folder / 'scheduler.log'})",
                 proc=self.procs[0][0])
        self.address = json.loads(self.file.read_text())["address"]

    def _start(self, argv, name):
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 - closed by stop()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=ENV,
                                cwd=self.folder, start_new_session=True)
        self.procs.append((proc, log))
        return proc

    def worker(self, nanny=True, code=None):
        """Start one worker (one thread); ``code`` runs first in it (then no nanny: the worker is this process)."""
        args = ["--scheduler-file", str(self.file), "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                "--memory-limit", "0", "--death-timeout", "60"] + ([] if nanny and code is None else ["--no-nanny"])
        if code is None:
            argv = [sys.executable, "-m", "distributed.cli.dask_worker", *args]
        else:
            argv = [sys.executable, "-c", f"{code}\nimport sys\nfrom distributed.cli.dask_worker import main\n"
                                          f"sys.argv = ['dask-worker'] + {args!r}\nmain()"]
        return self._start(argv, f"worker{len(self.procs)}")

    def wait_for_workers(self, n):
        with distributed.Client(self.address, timeout=30) as client:
            client.wait_for_workers(n, timeout=120)

    def stop(self):
        for proc, log in reversed(self.procs):
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            log.close()


@contextlib.contextmanager
def cluster(folder, workers=3, **kwargs):
    c = Cluster(folder)
    try:
        for _ in range(workers):
            c.worker(**kwargs)
        if workers:
            c.wait_for_workers(workers)
        yield c
    finally:
        c.stop()


def _refattn(args, cwd, env=(), timeout=LIMIT_S):
    """``refattn ARGS`` as a command of its own (a session of its own), with a time limit; ``env`` adds
    environment variables."""
    return subprocess.run([sys.executable, "-m", "refattn", *args], cwd=cwd, env={**ENV, "TMPDIR": str(cwd),
                                                                                   **dict(env)},
                          capture_output=True, text=True, timeout=timeout, start_new_session=True)


def _said(stderr):
    """The lines of ``stderr`` besides the dashboard's address (printed where bokeh is installed)."""
    return [ln for ln in stderr.strip().splitlines() if ": Dask dashboard at http" not in ln]


def _ours_left(folder):
    """Processes whose command line names ``folder`` (the local cluster's files are made inside it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if str(folder).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def _none_left(folder):
    """Wait until no process of ours that names ``folder`` is left (a cluster's scheduler and workers)."""
    return wait_for(lambda: _ours_left(folder) == [], f"the processes started in {folder} to end")


def _cells_so_far(path):
    with contextlib.suppress(OSError, ValueError, KeyError):
        return json.loads(path.read_text())["cells"]
    return None


def _has_workers(address, n):
    """Whether a scheduler answers at ``address`` with ``n`` workers joined."""
    with contextlib.suppress(OSError, TimeoutError), distributed.Client(address, timeout=5) as client:
        return len(client.scheduler_info()["workers"]) >= n
    return False


def _wait_for_a_cell(run, path):
    """Until the results file at ``path`` holds a cell; fails if the command ``run`` ends first."""
    wait_for(lambda: _cells_so_far(path), f"a finished cell in {path.name}", proc=run)


def test_local_workers_give_the_serial_cells(serial, tmp_path):
    r = _refattn(GRID + ["--workers", "2", "--results", "r.json"], tmp_path)
    assert r.returncode == 0, r.stderr
    cells, doc = _cells(tmp_path / "r.json")
    assert cells == serial
    workers = {p["worker"] for p in doc["ran_on"].values()}
    assert all(w.startswith("tcp://127.0.0.1:") for w in workers) and len(workers) <= 2
    assert _said(r.stderr) == []  # no bar off a terminal, no Dask log lines
    assert _none_left(tmp_path)  # the local cluster is gone with the command


def test_the_dashboards_address_is_printed_where_bokeh_serves_it(tmp_path):
    pytest.importorskip("bokeh")
    small = GRID[:GRID.index("--init-scales")] + ["--init-scales", "1"]
    r = _refattn(small + ["--workers", "2", "--results", "r.json"], tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nt-sensitivity fig4: Dask dashboard at http://127.0.0.1:"), lines
    r = _refattn(small + ["--workers", "2", "--results", "r2.json", "--quiet"], tmp_path)
    assert r.returncode == 0 and r.stderr == ""


def test_a_scheduler_and_three_worker_processes_give_the_serial_cells(serial, tmp_path):
    with cluster(tmp_path, workers=3) as c:
        r = _refattn(GRID + ["--scheduler", c.address, "--results", "r.json"], tmp_path)
        assert r.returncode == 0, r.stderr
        cells, doc = _cells(tmp_path / "r.json")
        assert cells == serial
        mine = grid.versions()
        for place in doc["ran_on"].values():
            assert place["worker"].startswith("tcp://127.0.0.1:")
            assert {k: place[k] for k in grid.VERSION_KEYS} == {k: mine[k] for k in grid.VERSION_KEYS}
        # the scheduler file names the same cluster
        r = _refattn(GRID + ["--scheduler", str(c.file), "--results", "again.json"], tmp_path)
        assert r.returncode == 0, r.stderr
        assert _cells(tmp_path / "again.json")[0] == serial


def test_a_worker_killed_mid_cell_costs_only_that_cell(serial, tmp_path):
    with cluster(tmp_path, workers=2, nanny=False) as c:
        run = subprocess.Popen([sys.executable, "-m", "refattn", *GRID, "--scheduler", c.address, "--results",
                                "r.json"], cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
        try:
            victim, pids = None, {}
            with distributed.Client(c.address, timeout=30) as client:
                pids = client.run(os.getpid)  # worker address -> its process
                busy = wait_for(lambda: [w for w, keys in client.processing().items() if keys],
                                "a cell running on a worker", proc=run)
                victim = busy[0]
            os.kill(pids[victim], signal.SIGKILL)  # in the middle of its cell
            _, err = run.communicate(timeout=LIMIT_S)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        assert run.returncode == 0, err
        cells, doc = _cells(tmp_path / "r.json")
        assert cells == serial
        survivor = next(w for w in pids if w != victim)
        assert any(p["worker"] == survivor for p in doc["ran_on"].values())


def test_a_lost_scheduler_is_one_line_and_the_finished_cells_are_kept(tmp_path):
    with cluster(tmp_path, workers=1) as c:
        run = subprocess.Popen([sys.executable, "-m", "refattn", *GRID, "--scheduler", c.address, "--results",
                                "r.json"], cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
        try:
            _wait_for_a_cell(run, tmp_path / "r.json")
            scheduler = c.procs[0][0]
            os.killpg(scheduler.pid, signal.SIGKILL)
            scheduler.wait(timeout=30)
            _, err = run.communicate(timeout=LIMIT_S)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
    assert run.returncode == 2
    lines = _said(err)
    assert len(lines) == 1 and "--scheduler: lost the scheduler" in lines[0], err
    assert 1 <= len(json.loads((tmp_path / "r.json").read_text())["cells"]) < 4


def test_the_benchmark_runs_at_a_small_size(tmp_path):
    out = tmp_path / "grid.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_grid.py"), "--quick", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, env=ENV, timeout=LIMIT_S)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["all_identical"] and [row["workers"] for row in res["rows"]] == [0, 2]
    assert all(row["cells"] == 4 and row["wall_seconds"] > 0 for row in res["rows"])
    ratio = res["median_serial_seconds"] / res["median_workers_seconds"]
    assert res["speedup"] == pytest.approx(ratio, abs=5e-4)  # kept to 3 decimals


def test_ctrl_c_stops_a_local_cluster_with_one_line_and_keeps_the_finished_cells(tmp_path):
    argv = GRID + ["--workers", "2", "--results", "r.json", "--init-scales", "0.5,1,2,4"]
    run = subprocess.Popen([sys.executable, "-m", "refattn", *argv], cwd=tmp_path, env={**ENV, "TMPDIR": str(tmp_path)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for_a_cell(run, tmp_path / "r.json")
        assert run.poll() is None, "the grid ended before it could be interrupted"
        os.killpg(run.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the command's whole process group
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 130
    lines = _said(err)
    assert len(lines) == 1 and "interrupted; kept r.json" in lines[0], err
    kept = json.loads((tmp_path / "r.json").read_text())["cells"]
    assert 1 <= len(kept) < 8
    assert _none_left(tmp_path)


def test_a_killed_command_leaves_no_cluster_and_its_file_resumes(serial, tmp_path):
    run = subprocess.Popen([sys.executable, "-m", "refattn", *GRID, "--workers", "2", "--results", "r.json"],
                           cwd=tmp_path, env={**ENV, "TMPDIR": str(tmp_path)}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for_a_cell(run, tmp_path / "r.json")
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    if sys.platform.startswith("linux"):  # the scheduler and workers end with the command that started them
        assert _none_left(tmp_path)
    assert not list(tmp_path.glob("refattn-cluster-*"))  # nor their folder in the temporary folder
    r = _refattn(GRID + ["--workers", "2", "--results", "r.json"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _cells(tmp_path / "r.json")[0] == serial


def test_an_unreachable_scheduler_is_one_line_before_any_work(tmp_path):
    import socket  # noqa: PLC0415

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _refattn(GRID + ["--scheduler", f"tcp://127.0.0.1:{port}", "--results", "r.json"], tmp_path)
    assert r.returncode == 2
    lines = _said(r.stderr)
    assert len(lines) == 1 and f"--scheduler: cannot reach tcp://127.0.0.1:{port}" in lines[0], r.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("address", ["nofile.json", "http://example", "tcp://host"])
def test_a_scheduler_that_is_neither_an_address_nor_a_file_is_one_line_at_once(address, tmp_path):
    """A missing scheduler file (or an address without a port) is refused before Dask starts a client,
    which would otherwise wait and print a traceback as it is collected."""
    r = _refattn(GRID + ["--scheduler", address, "--results", "r.json"], tmp_path)
    assert r.returncode == 2
    lines = _said(r.stderr)
    assert len(lines) == 1 and f"--scheduler: expected a scheduler's address (tcp://HOST:PORT) or its scheduler " \
        f"file, got {address!r}" in lines[0], r.stderr
    assert not (tmp_path / "r.json").exists()


#: A tiny lm-study grid on an SST-2 folder given by a relative path.
LM = ["lm-study", "--activations", "softmax", "--lrs", "0.01", "--seeds", "1", "--steps", "2", "--long-steps", "2",
      "--long-evals", "1", "--phases", "tune,long"]


@pytest.mark.parametrize("how", ["--data", "REFATTN_SST2"])
def test_a_relative_data_folder_reaches_the_workers_as_what_the_command_read(how, sst2_folder, tmp_path):
    """A worker runs in another folder: the data is read by the command (where the relative path means what
    the user meant), fingerprinted, and sent with the cells; the cells are the serial run's."""
    import shutil  # noqa: PLC0415

    shutil.copytree(sst2_folder, tmp_path / "sstrel")
    data = ["--data", "sstrel"] if how == "--data" else []
    env = {} if how == "--data" else {"REFATTN_SST2": "sstrel"}
    r = _refattn(LM + data + ["--results", "serial.json"], tmp_path, env)
    assert r.returncode == 0, r.stderr
    r = _refattn(LM + data + ["--workers", "1", "--results", "workers.json"], tmp_path, env)
    assert r.returncode == 0, r.stderr
    serial, doc = _cells(tmp_path / "serial.json")
    assert _cells(tmp_path / "workers.json")[0] == serial
    digests = doc["settings"]["data_sha256"]
    assert set(digests) == {"train.tsv", "dev.tsv"} and all(len(v) == 64 for v in digests.values())


def test_a_formula_edited_while_workers_run_changes_no_cell(tmp_path):
    """``--activations softmax,mine.py:a`` (relative) with ``--workers 1``: the command reads the formula once
    and sends it with the cells, so an edit mid-run changes no cell: they are those of a file never edited."""
    (tmp_path / "mine.py").write_text(SELF_EDITING)
    (tmp_path / "steady.py").write_text(SELF_EDITING.replace("if anp.ndim(s) >= 3", "if False"))
    args = LM + ["--data", "toy", "--lrs", "0.01,0.003"]
    r = _refattn(args + ["--activations", "softmax,mine.py:a", "--workers", "1", "--results", "w.json"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "mine.py").read_text() != SELF_EDITING  # it was edited while the grid ran
    r = _refattn(args + ["--activations", "softmax,steady.py:a", "--results", "s.json"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _cells(tmp_path / "w.json")[0] == _cells(tmp_path / "s.json")[0]


@pytest.mark.parametrize("text", ["{}", "not json at all", '{"address": "inproc://x:1"}', '["tcp://a:1"]'])
def test_a_file_that_is_not_a_scheduler_file_is_one_line_at_once(text, tmp_path):
    (tmp_path / "sched.json").write_text(text)
    r = _refattn(GRID + ["--scheduler", "sched.json", "--results", "r.json"], tmp_path, timeout=60)
    assert r.returncode == 2
    lines = _said(r.stderr)
    assert len(lines) == 1 and "--scheduler: 'sched.json' is not a scheduler file" in lines[0], r.stderr
    assert not (tmp_path / "r.json").exists()


def test_an_inproc_address_is_one_line_without_a_traceback(tmp_path):
    r = _refattn(GRID + ["--scheduler", "inproc://x:1", "--results", "r.json"], tmp_path, timeout=60)
    assert r.returncode == 2
    lines = _said(r.stderr)
    assert len(lines) == 1 and "--scheduler: inproc://x:1" in lines[0] and "tcp://" in lines[0], r.stderr


def test_more_workers_than_memory_for_their_processes_is_refused_before_any_start(tmp_path):
    r = _refattn(GRID + ["--workers", "1000", "--results", "r.json"], tmp_path, timeout=60)
    assert r.returncode == 2
    lines = _said(r.stderr)
    assert len(lines) == 1 and "--workers 1000" in lines[0] and "each worker process" in lines[0], r.stderr
    assert not list(tmp_path.glob("refattn-cluster-*"))


def test_a_worker_whose_memory_limit_python_itself_exceeds_is_named(tmp_path):
    """A worker with --memory-limit 5MiB is restarted by its nanny as soon as it starts: the refusal says so,
    naming the limit, instead of 'no worker joined'."""
    c = Cluster(tmp_path)
    try:
        c._start([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(c.file), "--nthreads",
                  "1", "--no-dashboard", "--host", "127.0.0.1", "--memory-limit", "5MiB"], "worker")
        r = _refattn(GRID + ["--scheduler", c.address, "--results", "r.json"], tmp_path)
    finally:
        c.stop()
    assert r.returncode == 2
    lines = _said(r.stderr)
    assert len(lines) == 1 and "--memory-limit" in lines[0] and "5.0 MiB" in lines[0], r.stderr
    assert "no worker joined" not in lines[0]


def test_a_worker_without_refattn_is_one_line_before_any_work(tmp_path):
    with cluster(tmp_path, workers=0) as c:
        c.worker(code="import sys\nsys.modules['refattn'] = None  # as if refattn were not installed here")
        c.wait_for_workers(1)
        r = _refattn(GRID + ["--scheduler", c.address, "--results", "r.json"], tmp_path)
    assert r.returncode == 2
    lines = _said(r.stderr)
    assert len(lines) == 1 and "cannot run refattn" in lines[0] and "refattn[cluster]" in lines[0], r.stderr
    assert not (tmp_path / "r.json").exists()


def test_a_worker_of_other_versions_is_refused_unless_allowed(serial, tmp_path):
    fake = "import refattn.studies.grid as g\ng.versions()\ng._VERSIONS['numpy'] = '0.0.1'"
    with cluster(tmp_path, workers=0) as c:
        c.worker(code=fake)
        c.wait_for_workers(1)
        r = _refattn(GRID + ["--scheduler", c.address, "--results", "r.json"], tmp_path)
        assert r.returncode == 2
        lines = _said(r.stderr)
        assert len(lines) == 1 and "differs from this process: numpy" in lines[0], r.stderr
        assert "--allow-mixed-versions" in lines[0] and not (tmp_path / "r.json").exists()
        r = _refattn(GRID + ["--scheduler", c.address, "--results", "r.json", "--allow-mixed-versions"], tmp_path)
    assert r.returncode == 0, r.stderr
    cells, doc = _cells(tmp_path / "r.json")
    assert cells == serial  # the same numbers: only the record was made to differ
    assert {p["numpy"] for p in doc["ran_on"].values()} == {"0.0.1"}


def test_more_workers_than_the_memory_holds_is_one_line_before_any_work(tmp_path, capsys):
    per_worker = nt_training.Settings(context=16, seeds=2, n_test=8, dtype="float32").memory_estimate() \
        + grid.WORKER_PROCESS_BYTES
    limit = f"{(1.5 * per_worker + grid.LOCAL_CLUSTER_BYTES) / 2**30:.6f}"  # one worker and its cell fit, two do not
    assert main(GRID + ["--workers", "2", "--max-memory", limit, "--results", str(tmp_path / "r.json")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--workers 2 (about" in lines[0] and "per cell, " in lines[0], lines
    assert "for each worker process" in lines[0] and "needs about" in lines[0], lines
    assert not (tmp_path / "r.json").exists()


def test_a_cell_that_fails_on_a_worker_names_itself_and_the_others_are_kept():
    class Settings:
        workers, scheduler, max_memory, quiet, allow_mixed_versions = 2, None, None, False, False

    cells = [grid.Cell("good", nt_training.memory_estimate, (16, 2)),
             grid.Cell("bad", nt_training.memory_estimate, ("sixteen", 2)),
             grid.Cell("also good", nt_training.memory_estimate, (32, 2))]
    into = {}
    with grid.Runner(Settings(), progress=False) as runner, pytest.raises(TypeError) as info:
        runner.run(cells, into=into, ran_on={})
    assert into == {"good": nt_training.memory_estimate(16, 2), "also good": nt_training.memory_estimate(32, 2)}
    assert str(info.value).startswith("cell bad: ") and str(info.value).endswith("(the other cells are kept)")


# --------------------------------------------------------------------------
# The book's page: its commands run here, its numbers are the benchmark's
# --------------------------------------------------------------------------

PAGE = ROOT / "docs" / "cluster.md"


def _blocks(kind):
    import re  # noqa: PLC0415

    return re.findall(rf"^```{kind}\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.S | re.M)


def _bash_lines():
    return [line.split("  # ")[0].strip() for block in _blocks("bash") for line in block.splitlines()
            if line.strip() and not line.startswith("#")]


def _as_written(line, cwd, **kwargs):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT),
           "TMPDIR": str(cwd)}
    return subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env, start_new_session=True, **kwargs)


def test_the_pages_commands_run_here(tmp_path):
    """The page's commands, in a folder whose ``.venv`` is this test's environment: the set-up line names
    extras that exist; the local run runs as written; the by-hand cluster runs on this machine, ``node1``
    read as 127.0.0.1 and the port 8786 as a free one (another run may hold 8786)."""
    import socket  # noqa: PLC0415
    import tomllib  # noqa: PLC0415

    install, local, scheduler, worker, remote = _bash_lines()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert install == '.venv/bin/pip install ".[cluster]"' and "cluster" in extras
    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    run = _as_written(local, tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = run.communicate(timeout=LIMIT_S)
    assert run.returncode == 0, err
    assert len(json.loads((tmp_path / "fig4-small.json").read_text())["cells"]) == 12
    (tmp_path / "fig4-small.json").unlink()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    here = [line.replace("node1", "127.0.0.1").replace("8786", str(port)) for line in (scheduler, worker, remote)]
    daemons = [_as_written(line, tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for line in here[:2]]
    try:
        wait_for(lambda: _has_workers(f"tcp://127.0.0.1:{port}", 2), "the page's scheduler and its two workers")
        run = _as_written(here[2], tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, err = run.communicate(timeout=LIMIT_S)
    finally:
        for d in daemons:
            with contextlib.suppress(OSError):
                os.killpg(d.pid, signal.SIGKILL)
            d.wait(timeout=30)
    assert run.returncode == 0, err
    doc = json.loads((tmp_path / "fig4-small.json").read_text())
    assert len(doc["cells"]) == 12 and all(p["worker"].startswith("tcp://") for p in doc["ran_on"].values())


def test_the_pages_slurm_example_gives_the_study_a_scheduler(monkeypatch, tmp_path):
    """The dask-jobqueue example, run with a stand-in for SLURMCluster (no Slurm here) and the study itself
    left out (the tests above run studies on a cluster): the settings it builds are valid and name the
    cluster's scheduler, and the cluster is scaled and closed."""
    import types  # noqa: PLC0415

    from refattn.studies import nt_sensitivity  # noqa: PLC0415

    (block,) = _blocks("python")
    seen = {}

    class SLURMCluster:
        scheduler_address = "tcp://10.0.0.1:8786"

        def __init__(self, **kwargs):
            seen["kwargs"] = kwargs

        def scale(self, jobs):
            seen["jobs"] = jobs

        def wait_for_workers(self, n):
            seen["waited"] = n

        def close(self):
            seen["closed"] = True

    monkeypatch.setitem(sys.modules, "dask_jobqueue", types.SimpleNamespace(SLURMCluster=SLURMCluster))
    monkeypatch.setattr(nt_sensitivity, "run", lambda settings: seen.setdefault("settings", settings) and {})
    monkeypatch.setattr(nt_sensitivity, "report", lambda result: "the report")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(PAGE), "exec"), {"__name__": "__main__"})  # noqa: S102 - the page's own example
    settings = seen["settings"]  # made, so checked (refattn.studies.StudySettings)
    assert isinstance(settings, nt_sensitivity.Settings)
    assert settings.scheduler == SLURMCluster.scheduler_address and settings.workers is None
    assert seen["kwargs"]["cores"] == 1 and seen["jobs"] >= 1 and seen["closed"]


def test_the_pages_speed_up_is_the_benchmarks():
    """Every number of the page's last section is read from benchmarks/results/grid.json."""
    import re  # noqa: PLC0415

    res = json.loads((ROOT / "benchmarks" / "results" / "grid.json").read_text())
    section = PAGE.read_text(encoding="utf-8").split("## How much faster", 1)[1]
    assert res["all_identical"] and res["workers"] == 2
    assert f"{res['speedup']:.2f}" in section and f"{res['efficiency']:.2f}" in section
    assert f"{res['median_serial_seconds']:.0f} s" in section and f"{res['median_workers_seconds']:.0f} s" in section
    assert res["machine"]["cpu"] in section and f"{res['machine']['cores']} cores" in section
    assert res["grid"] in section and res["command"] in section
    loads = sorted(r["load_before"] for r in res["rows"])
    assert f"{loads[0]:.2f}" in section and f"{loads[-1]:.2f}" in section
    assert not re.search(r"SPEEDUP-SECTION", section)
