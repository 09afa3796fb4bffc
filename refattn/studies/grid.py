"""One runner for every grid study: its cells in this process, or as Dask tasks on a local or an existing cluster.

A grid study (``nt-sensitivity``, ``nt-figure``, ``sst2-sweep``, ``lm-study``)
is a list of independent *cells* (:class:`Cell`), each a pure function of
its settings and seeds: one (initialisation scale, learning rate, attention)
of a sensitivity grid, say, with all its seeds batched inside it. The study
lists its cells; :class:`Runner` runs them

* in this process, one after another, by default (Dask is not imported);
* as Dask tasks on a local cluster of ``workers`` processes, started and
  stopped by the runner (``--workers N``);
* or as Dask tasks on an existing cluster (``--scheduler ADDRESS``):
  ``dask scheduler`` and ``dask worker`` processes started by hand on other
  machines, or a Slurm or PBS cluster through ``dask-jobqueue``.

Wherever a cell runs, it runs the same code (:func:`execute`) with BLAS at
one thread, so its numbers are the same; only its times differ. Each
finished cell comes back to the client, which alone writes the study's
results file (its ``then`` callback saves it: atomically, under the lock the
study holds, after every cell) and records where the cell ran
(:func:`where`: host, worker, and the versions of refattn, NumPy and the
BLAS kernel), refusing a cell from a worker whose versions differ from its
own unless ``allow_mixed_versions`` is set. A worker that dies mid-cell costs
that cell, which the scheduler runs again elsewhere; a cell that fails
(raises, or kills every worker it is given) is counted and the others go on;
the first failure is raised once every other cell has finished. Ctrl-C
(``KeyboardInterrupt``) stops the grid at once, keeping every finished cell.

Before any cell starts, the runner checks what it can: ``workers`` and
``scheduler`` not both given; Dask installed where one of them is; the
scheduler reachable, with at least one worker; every worker able to import
this refattn, of the same versions; and the memory the cells need
(``memory``, bytes per cell) against what this machine has for ``workers``
cells at once, or against each worker's memory limit. Each refusal is one
line naming the option (``ValueError`` or ``MemoryError``).

``docs/cluster.md`` is the user's page: the options, a cluster by hand, Slurm,
and the speed-up measured on this project's machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..fast.memory import retain_freed_memory
from ..fast.threads import single_threaded_blas
from ..training.runs import check_memory, format_bytes, machine_info
from . import option

__all__ = ["Cell", "Shared", "Runner", "workers_option", "scheduler_option", "quiet_option",
           "mixed_versions_option", "versions", "where", "execute", "check_places", "reorder", "compare_versions",
           "VERSION_KEYS", "WORKER_WAIT_S", "WORKER_PROCESS_BYTES", "LOCAL_CLUSTER_BYTES"]

#: What must agree between the client and every worker: the package (version and a digest of its source),
#: NumPy, and the BLAS libraries with their kernels (:func:`refattn.training.runs.machine_info`).
VERSION_KEYS = ("refattn", "numpy", "blas")

#: How long ``--scheduler`` waits for a first worker before refusing.
WORKER_WAIT_S = 60

#: The memory of one worker process before a cell allocates anything (Python, NumPy, Dask's worker and
#: refattn's studies imported): 70 MiB resident measured on Linux x86-64 with NumPy 2 and Dask 2025, with a
#: margin. ``--workers N`` needs N of these beside the cells.
WORKER_PROCESS_BYTES = 128 * 2**20

#: What a local cluster needs besides its workers: the scheduler and the process that starts the workers
#: (80 and 75 MiB measured, with a margin).
LOCAL_CLUSTER_BYTES = 256 * 2**20

#: The install line a refusal names.
INSTALL = "pip install 'refattn[cluster]'"


# --------------------------------------------------------------------------
# The options every grid study takes (fields of its Settings)
# --------------------------------------------------------------------------


#: A scheduler's address as Dask takes one: ``tcp://HOST:PORT`` (or another of its protocols), or ``HOST:PORT``.
_ADDRESS = re.compile(r"(?:(?:tcp|tls|ucx|inproc|ws|wss)://)?[^\s/]+:\d+")

def workers_option():
    """``--workers N``: a local Dask cluster of N worker processes, started and stopped by the run."""
    return option(None, "run the cells as Dask tasks on a local cluster of N worker processes, started and "
                        "stopped by this command (needs the 'cluster' extra)", metavar="N", low=1)


def scheduler_option():
    """``--scheduler ADDRESS``: an existing Dask cluster."""
    return option(None, "run the cells as Dask tasks on an existing cluster: its scheduler's address "
                        "(tcp://HOST:PORT) or scheduler file (needs the 'cluster' extra)", metavar="ADDRESS")


def quiet_option():
    """``--quiet``: no progress bar."""
    return option(False, "no progress bar on stderr (it is shown only on a terminal anyway)")


def mixed_versions_option():
    """``--allow-mixed-versions``: keep cells from workers whose versions differ from this process's."""
    return option(False, "accept cells computed with another refattn, NumPy or BLAS kernel than this "
                         "process's (their numbers may then differ)")


# --------------------------------------------------------------------------
# Cells, and what runs on a worker
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One cell of a grid: ``fn(*args)`` gives its record, a pure function of ``args``.

    ``fn`` is a module-level function of refattn (a worker imports it by
    name); ``args`` are picklable; an argument wrapped in :class:`Shared` is
    sent to a cluster once for all the cells that take it.
    """

    key: str
    fn: object
    args: tuple = field(default=())


class Shared:
    """An argument that several cells share (a data set): sent to the cluster once, not once per cell."""

    def __init__(self, value):
        self.value = value


_VERSIONS = None


def _source_digest():
    """A digest of every ``.py`` file of the package (its path and bytes): two copies of refattn that
    agree here run the same code."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def versions():
    """The versions that decide a cell's numbers here: ``refattn`` (the version and a digest of its
    source), ``numpy`` and ``blas`` (library, version and kernel, :func:`refattn.training.runs.machine_info`),
    with ``cpu`` beside them. Computed once per process."""
    global _VERSIONS
    if _VERSIONS is None:
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

        try:
            release = version("refattn")
        except PackageNotFoundError:  # a checkout on sys.path, not installed
            release = "unknown"
        info = machine_info()
        _VERSIONS = {"refattn": f"{release} (source {_source_digest()})", "numpy": info["numpy"],
                     "blas": info["blas"], "cpu": info["cpu"]}
    return dict(_VERSIONS)


def where():
    """Where this process is: ``host``, ``worker`` (the Dask worker's address, or ``"in-process"``) and
    :func:`versions`."""
    worker = "in-process"
    if "distributed" in sys.modules:  # never imported by a run without a cluster
        from distributed import get_worker  # noqa: PLC0415

        with contextlib.suppress(ValueError):
            worker = get_worker().address
    return {"host": socket.gethostname(), "worker": worker, **versions()}


def execute(fn, *args):
    """Run one cell, here or on a worker: ``fn(*args)`` with BLAS at one thread; returns ``(record,
    where)``, ``where`` (:func:`where`) with the cell's ``seconds``."""
    place = where()
    if place["worker"] != "in-process":  # a worker is a process of its own, as a command is: keep freed memory
        retain_freed_memory()  # (Dask starts workers with malloc trimming on, which costs page faults here)
    t0 = time.perf_counter()
    with single_threaded_blas():
        record = fn(*args)
    return record, {**place, "seconds": round(time.perf_counter() - t0, 1)}


def compare_versions(mine, theirs):
    """The differences of :data:`VERSION_KEYS` between two :func:`versions`, as ``"numpy 2.1 here, 2.0
    there"`` phrases; empty where they agree."""
    out = []
    for key in VERSION_KEYS:
        a, b = mine.get(key), theirs.get(key)
        if a != b:
            show = (lambda v: ", ".join(v) or "none") if key == "blas" else str
            out.append(f"{key} {show(a)} here, {show(b)} there")
    return out


def check_places(cells, ran_on, placed=True):
    """Every cell of a results file has its place (:func:`where`: ``host``, ``worker`` and :data:`VERSION_KEYS`,
    as the cell's run recorded it), and every place is a cell's; ``placed=False`` (a file made before cells
    recorded their place: no ``ran_on`` at all) asks only the places there are. ValueError naming the cell
    otherwise: a version check must not be skipped by an edit."""
    if not isinstance(ran_on, dict):
        raise ValueError("its 'ran_on' is not an object of places")
    for key in ran_on:
        if key not in cells:
            raise ValueError(f"its 'ran_on' names {key!r}, which is not one of its cells")
    for key in cells:
        if key not in ran_on:
            if placed:
                raise ValueError(f"cell {key!r} has no place in 'ran_on' (where and with which versions it ran)")
            continue
        place = ran_on[key]
        kinds = {"host": str, "worker": str, "refattn": str, "numpy": str, "blas": list}
        wrong = [k for k, kind in kinds.items() if not isinstance(place, dict) or not isinstance(place.get(k), kind)]
        if wrong or not all(isinstance(b, str) for b in place["blas"]):
            raise ValueError(f"cell {key!r}: its place in 'ran_on' is not a record of where it ran (its "
                             f"{(wrong or ['blas'])[0]!r} is missing or of another kind)")


def reorder(mapping, keys):
    """Put the entries of ``keys`` (those present) last in ``mapping``, in that order: a results file's
    cells read in the grid's order however they finished."""
    for key in keys:
        if key in mapping:
            mapping[key] = mapping.pop(key)


# --------------------------------------------------------------------------
# The progress bar
# --------------------------------------------------------------------------


def _clock(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class _Bar:
    """One line on stderr, redrawn each second: cells done, running, queued and failed, and the time
    left estimated from the finished cells' times."""

    def __init__(self, label, total, slots, enabled, stream=None, clock=time.perf_counter):
        self.stream, self.clock = sys.stderr if stream is None else stream, clock
        self.label, self.total, self.slots, self.enabled = label, total, max(1, slots), enabled
        self.done = self.running = self.failed = 0
        self.seconds = []  # of the cells finished in this run
        self.t0 = self.last = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if enabled:
            threading.Thread(target=self._tick, daemon=True, name="refattn-grid-bar").start()

    def _tick(self):
        while not self._stop.wait(1.0):
            self.draw()

    def update(self, *, done=None, running=None, failed=None, seconds=None):
        with self._lock:
            self.done = self.done if done is None else done
            self.running = self.running if running is None else running
            self.failed = self.failed if failed is None else failed
            if seconds is not None:
                self.seconds.append(seconds)
                self.last = self.clock()
        self.draw()

    def line(self):
        left = self.total - self.done - self.failed
        running = min(self.running, left)
        queued = left - running
        fill = int(round(20 * (self.done + self.failed) / max(1, self.total)))
        text = (f"{self.label}: [{'#' * fill}{'.' * (20 - fill)}] {self.done}/{self.total} cells done, "
                f"{running} running, {queued} queued, {self.failed} failed; "
                f"{_clock(self.clock() - self.t0)}")
        if self.seconds and left:  # the cells left, a slot at a time, less the time since the last one finished
            mean = sum(self.seconds) / len(self.seconds)
            eta = mean * math.ceil(left / min(self.slots, left)) - (self.clock() - self.last)
            text += f", about {_clock(max(eta, mean / 10))} left"
        return text

    def draw(self):
        if not self.enabled:
            return
        with self._lock:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\r" + self.line()[:width] + "\033[K")
                self.stream.flush()

    def close(self):
        self._stop.set()
        if self.enabled:
            self.draw()
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\n")
                self.stream.flush()


# --------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------


def _say(line):
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(line, file=sys.stderr, flush=True)


class Runner:
    """Runs a grid's cells (:class:`Cell`) in this process or on Dask; a context manager.

    Parameters
    ----------
    settings : a study's Settings
        Its ``workers``, ``scheduler``, ``quiet``, ``allow_mixed_versions``
        and ``max_memory`` are read (absent ones count as unset).
    progress : bool or None
        ``False``: no progress bar; ``None``: a bar on stderr when it is a
        terminal (and ``quiet`` is not set); ``True``: a bar in any case.
    memory : int or callable, optional
        Bytes one cell needs at its peak, checked for ``workers`` cells at
        once (or against each worker's memory limit) before any cell starts;
        a function giving them is called only where a cluster is used.
    label : str
        The study's name on the progress bar.

    Within the ``with`` block, :meth:`run` runs a list of cells (as many
    times as the study has stages); leaving it stops a local cluster and
    disconnects from an existing one.
    """

    def __init__(self, settings, *, progress=None, memory=None, label="grid"):
        self.workers = getattr(settings, "workers", None)
        self.scheduler = getattr(settings, "scheduler", None)
        self.quiet = bool(getattr(settings, "quiet", False))
        self.allow_mixed = bool(getattr(settings, "allow_mixed_versions", False))
        self.max_memory = getattr(settings, "max_memory", None)
        self.memory, self.label = memory, label
        self.show = False if (progress is False or self.quiet) else progress
        self.client = self.local = None
        self.slots, self._levels = 1, ()
        if self.workers is not None and self.scheduler is not None:
            raise ValueError(f"--workers, --scheduler: give one of them, not both (--workers {self.workers} starts a "
                             f"cluster here; --scheduler {self.scheduler} uses one that runs)")
        option = "--workers" if self.workers is not None else "--scheduler" if self.scheduler is not None else None
        if option is not None and importlib.util.find_spec("distributed") is None:
            raise ValueError(f"{option}: needs Dask's distributed scheduler, which is not installed here; "
                             f"{INSTALL}")
        self.option = option

    # ---- starting and stopping -------------------------------------------

    def __enter__(self):
        if self.option is not None:  # Dask's log (a lost worker, a slow event loop, a lost scheduler) off: the
            import distributed  # noqa: F401, PLC0415  (its import sets its loggers' levels: silenced after it)

            self._levels = _silence()  # runner says what matters, in one line
        try:
            if callable(self.memory):  # an estimate that costs something (reading a corpus): made only now
                self.memory = self.memory() if self.option is not None else None
            if self.workers is not None:
                cell = self.memory or 0
                check_memory(self.workers * (cell + WORKER_PROCESS_BYTES) + LOCAL_CLUSTER_BYTES,
                             f"--workers {self.workers} (about {format_bytes(cell)} per cell, "
                             f"{format_bytes(WORKER_PROCESS_BYTES)} for each worker process and "
                             f"{format_bytes(LOCAL_CLUSTER_BYTES)} for the scheduler)", self.max_memory)
                self.local = _LocalCluster(self.workers)
                self._connect(self.local.start(), expect=self.workers)
                self.local.forget_files()  # every worker has joined: the files are read, the logs open
            elif self.scheduler is not None:
                self._connect(self.scheduler, expect=1)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Disconnect from the cluster, and stop a local one (its workers may be busy: they are ended)."""
        client, local, self.client, self.local = self.client, self.local, None, None
        with _quiet_dask():
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close(timeout=10)
        if local is not None:
            local.stop()
        _restore(getattr(self, "_levels", ()))
        self._levels = ()

    def _connect(self, address, expect):
        """Connect to the scheduler at ``address`` (or its scheduler file) and check its workers."""
        from distributed import Client  # noqa: PLC0415

        target = _scheduler_target(self.option, address)  # checked before a Client half-starts
        try:
            with _quiet_dask():
                self.client = Client(**target, timeout=10, set_as_default=False)
        except (OSError, TimeoutError, ValueError, TypeError) as exc:
            raise ValueError(f"{self.option}: cannot reach {address} ({_first_line(exc)}); is `dask scheduler` "
                             f"running there?") from None
        self._check_workers(expect)
        self._announce()

    def _wait_for_workers(self, expect):
        """Until ``expect`` workers have joined: a worker whose memory limit is below what its process needs
        (its nanny restarts it as soon as it starts) is refused as soon as it is seen, and a wait in vain
        says whether workers joined and left."""
        t0, seen = time.monotonic(), set()
        while True:
            info = self.client.scheduler_info()["workers"]
            for worker, w in sorted(info.items()):
                seen.add(worker)
                limit = w.get("memory_limit") or 0
                if 0 < limit < WORKER_PROCESS_BYTES + (self.memory or 0):
                    raise MemoryError(f"{self.option}: worker {worker} may use {format_bytes(limit)} (its "
                                      f"--memory-limit), less than its process and a cell need (about "
                                      f"{format_bytes(WORKER_PROCESS_BYTES + (self.memory or 0))}): it is "
                                      f"restarted as soon as it works; start it with a larger --memory-limit")
            if len(info) >= expect:
                return
            if time.monotonic() - t0 > WORKER_WAIT_S:
                break
            time.sleep(0.2)
        if self.local is not None:
            raise ValueError(f"--workers: the local workers did not start within {WORKER_WAIT_S} s "
                             f"({self.local.last_words()})")
        if seen:
            raise ValueError(f"--scheduler: {len(seen)} worker(s) joined {self.scheduler} and left again within "
                             f"{WORKER_WAIT_S} s (restarting? their logs say why); start workers that stay, with "
                             f"`dask worker {self.scheduler} --nthreads 1`")
        raise ValueError(f"--scheduler: no worker joined {self.scheduler} within {WORKER_WAIT_S} s; start "
                         f"some with `dask worker {self.scheduler} --nthreads 1`")

    def _check_workers(self, expect):
        """``expect`` workers at least; each able to import this refattn, of the same versions, with the
        memory a cell needs for each of its threads."""
        self._wait_for_workers(expect)
        found = self.client.run(_worker_versions, on_error="return")
        mine = versions()
        for worker, theirs in sorted(found.items()):
            if isinstance(theirs, OSError):  # it went away while it answered (a restart, a crash)
                raise ValueError(f"{self.option}: worker {worker} left the cluster while it was asked for its "
                                 f"versions ({_first_line(theirs)}); is it restarting? Its log says why")
            if isinstance(theirs, BaseException):
                raise ValueError(f"{self.option}: worker {worker} cannot run refattn ({type(theirs).__name__}: "
                                 f"{_first_line(theirs)}); install this refattn there ({INSTALL})")
            differ = compare_versions(mine, theirs)
            if differ and not self.allow_mixed:
                raise ValueError(f"{self.option}: worker {worker} differs from this process: {'; '.join(differ)}; "
                                 f"start the workers from the same installation, or pass --allow-mixed-versions")
        info = self.client.scheduler_info()["workers"]
        self.slots = sum(int(w.get("nthreads", 1)) for w in info.values()) or 1
        for worker, w in sorted(info.items()):
            limit, threads = w.get("memory_limit") or 0, int(w.get("nthreads", 1))
            if self.memory is not None and limit and self.memory * threads > limit:
                raise MemoryError(f"{self.option}: worker {worker} may use {format_bytes(limit)} for {threads} "
                                  f"thread(s), and a cell needs about {format_bytes(self.memory)}; start it with "
                                  f"--nthreads 1 or a larger --memory-limit")

    def _announce(self):
        """The dashboard's address, when the scheduler serves one."""
        if self.show is False:
            return
        with contextlib.suppress(Exception):
            if "dashboard" in self.client.scheduler_info().get("services", {}):
                link = self.client.dashboard_link
                if _dashboard_serves(link):
                    _say(f"{self.label}: Dask dashboard at {link}")

    # ---- running cells ----------------------------------------------------

    def run(self, cells, *, into, ran_on, then=None):
        """Run the cells of ``cells`` not yet in ``into``; each finished one goes into ``into`` (its record)
        and ``ran_on`` (:func:`where`), both kept in the grid's order, then ``then()`` saves the file.

        Raises the first failed cell's error (naming the cell) after every other cell has finished, and
        ``KeyboardInterrupt`` at once, with every finished cell kept.
        """
        keys = list(dict.fromkeys(c.key for c in cells))
        todo = list({c.key: c for c in cells if c.key not in into}.values())  # a key listed twice runs once
        if todo:  # a complete file is reported whatever made it; only adding to it asks
            self._check_file(ran_on)
        bar = _Bar(self.label, len(todo), self.slots, self.bar_wanted() and bool(todo))
        failures = []

        def finish(key, record, place):
            if key in into:  # a cell finished twice (a worker thought lost, then back): the first is kept
                return
            differ = compare_versions(versions(), place)
            if differ and not self.allow_mixed:
                raise ValueError(f"--allow-mixed-versions: cell {key} ran on {place['worker']} "
                                 f"({place['host']}), which differs from this process: {'; '.join(differ)}; the "
                                 f"finished cells are kept")
            into[key], ran_on[key] = record, place
            reorder(into, keys)
            reorder(ran_on, keys)
            if then is not None:
                then()

        try:
            if self.client is None:
                self._run_here(todo, bar, finish, failures)
            else:
                self._run_dask(todo, bar, finish, failures)
        finally:
            bar.close()
        if failures:
            raise _failure(failures)

    def _check_file(self, ran_on):
        """The cells already in the results file were made with this process's versions (or that is allowed)."""
        mine = versions()
        for key, place in ran_on.items():
            differ = compare_versions(mine, place or {})
            if differ and not self.allow_mixed:
                raise ValueError(f"--allow-mixed-versions: the results file holds cell {key} made on "
                                 f"{(place or {}).get('host')} with other versions ({'; '.join(differ)}); pass "
                                 f"--allow-mixed-versions to add cells to it anyway, or use another file")

    def _run_here(self, todo, bar, finish, failures):
        for done, cell in enumerate(todo):
            bar.update(running=1)
            try:
                record, place = execute(cell.fn, *(_unwrap(a) for a in cell.args))
            except Exception as exc:  # noqa: BLE001 - counted; the other cells go on, the first is raised
                failures.append((cell.key, exc))
                bar.update(failed=len(failures), running=0)
                continue
            finish(cell.key, record, place)
            bar.update(done=done + 1 - len(failures), running=0, seconds=place["seconds"])

    def _run_dask(self, todo, bar, finish, failures):
        client = self.client
        shared = {}
        futures = {}
        try:
            for cell in todo:
                args = []
                for a in cell.args:
                    if isinstance(a, Shared):
                        if id(a) not in shared:
                            shared[id(a)] = client.scatter([a.value], hash=False)[0]  # (a dict alone would be
                            # scattered value by value, under its own keys)
                        a = shared[id(a)]
                    args.append(a)
                future = client.submit(execute, cell.fn, *args, key=f"refattn-cell-{uuid.uuid4().hex}",
                                       pure=False)
                futures[future] = cell.key
            self._collect(futures, bar, finish, failures)
        finally:
            if futures and any(f.status == "pending" for f in futures):  # Ctrl-C or a refusal: stop the rest
                with _quiet_dask(), contextlib.suppress(Exception):
                    client.cancel([f for f in futures if f.status == "pending"], force=True)

    def _collect(self, futures, bar, finish, failures):
        pending, done, polled = set(futures), 0, 0.0
        while pending:
            finished = [f for f in pending if f.status != "pending"]
            for f in finished:
                pending.discard(f)
                key = futures.pop(f)  # its result is let go on the worker once read
                if f.status == "finished":
                    record, place = f.result()
                    finish(key, record, place)
                    done += 1
                    bar.update(done=done, seconds=place["seconds"])
                elif f.status != "error" and self.client.status != "running":
                    raise ConnectionError(f"{self.option}: lost the scheduler ({self.client.status}); the finished "
                                          f"cells are kept: run the same command again to go on")
                else:
                    failures.append((key, _remote_error(f)))
                    bar.update(failed=len(failures))
            if time.monotonic() - polled > 1.0:
                polled = time.monotonic()
                bar.update(running=self._running(pending))
            if not finished:
                time.sleep(0.1)

    def _running(self, pending):
        """How many of ``pending`` run now: those the scheduler has handed to a worker, at most one per thread."""
        if not pending or not self.bar_wanted():
            return 0
        ours = {f.key for f in pending}
        try:
            with _quiet_dask():
                processing = self.client.processing()
                info = self.client.scheduler_info()["workers"]
        except Exception:  # noqa: BLE001 - a bar is a courtesy
            return 0
        return sum(min(len(ours.intersection(keys)), int(info.get(w, {}).get("nthreads", 1)))
                   for w, keys in processing.items())

    def bar_wanted(self):
        """Whether to draw the progress bar: asked for, or not refused and stderr is a terminal."""
        if self.show is None:
            return sys.stderr is not None and sys.stderr.isatty()
        return bool(self.show)


class _LocalCluster:
    """``--workers N``: ``dask scheduler`` and ``dask worker --nworkers N`` on 127.0.0.1, started here and ended
    by :meth:`stop`.

    Each runs in a session of its own, so that Ctrl-C at the terminal reaches this process alone (which then
    stops them) and never a worker in the middle of a cell; on Linux each also ends when this process does
    (``PR_SET_PDEATHSIG``), so a killed run leaves no cluster behind. Their logs go to a temporary folder,
    removed by :meth:`stop`. Each worker has one thread, no memory limit of Dask's (the runner checked the
    memory the cells need) and ``REFATTN_NUM_THREADS`` = the cores shared among the workers.
    """

    def __init__(self, n):
        self.n, self.procs = n, []
        _remove_orphans()
        self.folder = tempfile.mkdtemp(prefix=f"{_FOLDER}{os.getpid()}-")

    def forget_files(self):
        """Remove the folder once every worker has joined: the scheduler file is read and the logs stay
        open, so that a command killed outright (SIGKILL) leaves nothing behind."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _spawn(self, module, args, log):
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # this refattn, also when it is not installed
        env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")] if p])
        env.setdefault("REFATTN_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.n)))
        with open(os.path.join(self.folder, log), "wb") as fh:
            self.procs.append(subprocess.Popen([sys.executable, "-m", module, *args], stdin=subprocess.DEVNULL,
                                               stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=self.folder,
                                               start_new_session=True, preexec_fn=_end_with_parent))

    def start(self):
        """Start the processes; the scheduler file's path once the scheduler has written it."""
        path = os.path.join(self.folder, "scheduler.json")
        dashboard = ["--dashboard-address", "127.0.0.1:0"] if importlib.util.find_spec("bokeh") else ["--no-dashboard"]
        self._spawn("distributed.cli.dask_scheduler", ["--host", "127.0.0.1", "--port", "0", "--scheduler-file",
                                                       path, *dashboard], "scheduler.log")
        t0 = time.monotonic()
        while not os.path.exists(path):
            if self.procs[0].poll() is not None or time.monotonic() - t0 > WORKER_WAIT_S:
                raise ValueError(f"--workers: the local scheduler did not start ({self.last_words()})")
            time.sleep(0.1)
        self._spawn("distributed.cli.dask_worker", ["--scheduler-file", path, "--nworkers", str(self.n),
                                                    "--nthreads", "1", "--memory-limit", "0", "--no-dashboard",
                                                    "--host", "127.0.0.1", "--death-timeout", "60"], "workers.log")
        return path

    def last_words(self):
        """The last line of the logs, for a refusal."""
        lines = []
        for name in ("workers.log", "scheduler.log"):
            with contextlib.suppress(OSError):
                with open(os.path.join(self.folder, name), encoding="utf-8", errors="replace") as fh:
                    lines += [ln.strip() for ln in fh if ln.strip()]
        return lines[-1] if lines else "no log"

    def stop(self):
        """End the workers, then the scheduler (SIGTERM, then SIGKILL after a few seconds), and remove the logs."""
        for proc in reversed(self.procs):
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs = []
        shutil.rmtree(self.folder, ignore_errors=True)


#: The prefix of a local cluster's folder, which its owner's process id follows.
_FOLDER = "refattn-cluster-"


def _remove_orphans():
    """Remove the folders of local clusters whose command has ended (killed before its workers joined)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_FOLDER}*-*"):
        pid = path.name[len(_FOLDER):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def _scheduler_target(option, address):
    """``Client``'s keyword for ``address``: a scheduler's address, or a scheduler file holding one; a file
    that is not one, an in-process address and anything else are one line naming ``option``."""
    if os.path.isfile(address):
        try:
            doc = json.loads(Path(address).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            doc = None
        found = doc.get("address") if isinstance(doc, dict) else None
        if not (isinstance(found, str) and _ADDRESS.fullmatch(found) and not found.startswith("inproc://")):
            raise ValueError(f"{option}: {address!r} is not a scheduler file this command can use (a JSON object "
                             f"whose 'address' is tcp://HOST:PORT, as `dask scheduler --scheduler-file FILE` writes "
                             f"it); give that file, or the scheduler's address")
        return {"scheduler_file": address}
    if not _ADDRESS.fullmatch(address):
        raise ValueError(f"{option}: expected a scheduler's address (tcp://HOST:PORT) or its scheduler "
                         f"file, got {address!r}" + ("" if "://" in address else " (no such file)"))
    if address.startswith("inproc://"):
        raise ValueError(f"{option}: {address} reaches a scheduler inside one process only; give the tcp:// "
                         f"address (or the scheduler file) of a `dask scheduler`")
    return {"address": address}


def _end_with_parent():
    """In a child before it runs: end it (SIGTERM) when this process ends, where Linux offers that."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def _unwrap(arg):
    return arg.value if isinstance(arg, Shared) else arg


def _worker_versions():
    """:func:`versions` on a worker (what :meth:`Runner._check_workers` asks each one)."""
    return versions()


def _dashboard_serves(link):
    """Whether the dashboard at ``link`` runs: a scheduler without bokeh lists a dashboard port, and serves
    there only a page asking for bokeh."""
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    try:
        with urllib.request.urlopen(link, timeout=3) as response:  # noqa: S310 - the scheduler's own address
            return response.status == 200 and b"needs bokeh" not in response.read(4096)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _first_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _remote_error(future):
    """The error of a failed cell's future; a worker that died with the cell every time it was tried
    (Dask's ``KilledWorker``) is a :class:`ChildProcessError`."""
    try:
        exc = future.exception()
    except Exception as err:  # noqa: BLE001 - a cancelled or lost future
        exc = err
    if type(exc).__name__ == "KilledWorker":
        return ChildProcessError(f"every worker that ran it died ({_first_line(exc)}); out of memory, or killed")
    if exc is None:
        return ChildProcessError(f"its task ended as {future.status!r}")
    return exc


def _failure(failures):
    """The error raised for failed cells: the first one's type, its message naming the cell and the count."""
    key, exc = failures[0]
    more = f" ({len(failures)} cells failed; the others are kept)" if len(failures) > 1 else \
        " (the other cells are kept)"
    message = f"cell {key}: {_first_line(exc)}{more}"
    try:
        new = type(exc)(message)
    except Exception:  # noqa: BLE001 - an exception type that takes other arguments: raise it as it is
        return exc
    new.__cause__ = exc
    return new


def _silence():
    """Every logger of Dask's (``distributed`` and those below it, each of which Dask gives its own level),
    tornado's and asyncio's at CRITICAL; returns their levels before, for :func:`_restore`."""
    names = ["distributed", "tornado", "asyncio"]
    names += [n for n in list(logging.root.manager.loggerDict) if n.startswith(("distributed.", "tornado."))]
    saved = [(lg, lg.level) for lg in map(logging.getLogger, names)]
    for lg, _ in saved:
        lg.setLevel(logging.CRITICAL)
    return saved


def _restore(saved):
    for lg, level in saved:
        lg.setLevel(level)


@contextlib.contextmanager
def _quiet_dask():
    """Dask's own log lines off (a cluster stopping with busy workers, a lost worker): the runner says what
    matters in its own words."""
    saved = _silence()
    try:
        yield
    finally:
        _restore(saved)
