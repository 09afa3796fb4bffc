"""Running answers apart: a child process per batch of answers, a time limit per answer.

:func:`run_jobs` writes the inputs of every call (an ``.npz`` of arrays and
a JSON of everything else) into a fresh temporary folder, starts ``python
-I`` on a copy of :mod:`refattn.exercises._child` there, in a session of its
own, and reads its reports through a pipe while it runs. The child reads its
inputs, deletes them from disk, and loads each answer under an audit hook
that enforces the exercises' rule (``_child.py`` says what it refuses and
where that stops), calls its functions and sends back their values: arrays
and plain containers, read here with ``allow_pickle=False``. Nothing is
checked there; everything is checked here.

A child holds the calls of one group only: :func:`run_jobs` refuses jobs
that mix the public and the hidden cases, and the graders run the hidden
group in a child of its own after the public one is gone
(:func:`refattn.exercises.grading.grade_many`). So what an answer prints in
a public run, which a course's autograder shows to the student, cannot hold
a hidden input: none was in that process, on its disk or in its folder.

Each answer has ``timeout`` seconds from the moment the child starts loading
it. An answer that runs over, ends the process (``sys.exit`` is caught
there; ``os._exit``, a crash or a signal end it) or garbles the pipe is
reported with what happened and, if it was running one, which function; the
answers after it run in a new child, in a new folder. Interrupting the
grader kills the child.
"""

from __future__ import annotations

import importlib.util
import json
import os
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import _child
from .core import GraderError, Table

__all__ = ["Job", "Run", "run_jobs", "RULE", "FORBIDDEN_MODULES", "DEFAULT_TIMEOUT_S"]

#: Modules an answer may not import: the library and every automatic or symbolic differentiator.
FORBIDDEN_MODULES = ("refattn", "autograd", "jax", "jaxlib", "torch", "tensorflow", "sympy")

#: The rule, as the statements and every refusal state it.
RULE = ("The rule: NumPy and Python's standard library only (no refattn, autograd, jax, torch, tensorflow, "
        "sympy); no reading the library's files, writing files or starting processes.")

#: Seconds an answer has from being loaded to returning its last value.
DEFAULT_TIMEOUT_S = 10.0

#: Seconds the child has to start (Python and NumPy on a busy machine).
START_TIMEOUT_S = 120.0

#: Characters kept of what the child writes to its real stdout or stderr.
MAX_PROCESS_OUTPUT = 20_000


@dataclass
class Job:
    """One answer to run: its key (the exercise's stem), its file and source, and its calls, as
    one group ``[(name, [Call])]`` (``"public"`` or ``"hidden"``)."""

    key: str
    path: str
    source: str
    groups: list  # of (name, [Call]): one group per job


@dataclass
class Run:
    """What became of one :class:`Job` in the child.

    ``status``: ``"done"`` (``manifest`` and ``outputs`` hold the results),
    ``"timeout"``, ``"died"`` or ``"broken"`` (then ``message`` says what
    happened, one line). ``outputs[group]`` is a list of ``("value", v)`` or
    ``("error", {"type", "message"})`` per call made. ``printed[group]`` is
    what the answer printed; ``"process"`` what reached the real stdout or
    stderr while it ran.
    """

    key: str
    status: str
    message: str = ""
    manifest: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    printed: dict = field(default_factory=dict)


def _forbidden_places(extra_dirs=()):
    """The guard's settings: folders (by path) whose files an answer may not open, and folders
    to walk for their files' inodes (the package, small)."""
    import refattn  # noqa: PLC0415

    package = [os.path.realpath(p) for p in refattn.__path__]
    dirs, files = list(package), []
    for name in FORBIDDEN_MODULES[1:]:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # pragma: no cover - a broken installation
            spec = None
        if spec is None:
            continue
        if spec.submodule_search_locations:
            dirs += [os.path.realpath(p) for p in spec.submodule_search_locations]
        elif spec.origin and os.path.isfile(spec.origin):
            files.append(os.path.realpath(spec.origin))
    for p in package:  # a clone's model solutions, and its history, which holds every version of them
        for name in (".git", os.path.join("instructor", "solutions")):
            folder = os.path.join(os.path.dirname(p), name)
            if os.path.exists(folder):
                dirs.append(os.path.realpath(folder))
    from .export import solutions_dir  # noqa: PLC0415 - export imports this module

    if solutions_dir() is not None:  # also a clone in the current folder, its package installed apart
        dirs.append(os.path.realpath(solutions_dir()))
    dirs += [os.path.realpath(d) for d in extra_dirs]
    return {"dirs": dirs, "walk": package, "files": files, "modules": list(FORBIDDEN_MODULES), "rule": RULE}


def _child_sys_path(answer_dirs, extra_dirs=()):
    """The child's ``sys.path``: this one's absolute entries and the answers' folders, less the
    folders that hold refattn (and an autograder's source), which an answer may not read and
    does not need (NumPy comes from its own folder, kept)."""
    import refattn  # noqa: PLC0415

    numpy_home = os.path.realpath(os.path.dirname(os.path.dirname(np.__file__)))
    drop = {os.path.realpath(os.path.dirname(p)) for p in refattn.__path__}
    drop |= {os.path.realpath(d) for d in extra_dirs}
    drop.discard(numpy_home)
    kept = [p for p in sys.path if p and os.path.isabs(p) and os.path.realpath(p) not in drop]
    return list(dict.fromkeys(kept + list(answer_dirs)))


def _encode_arg(x, arrays):
    if isinstance(x, Table):
        key = f"i{len(arrays)}"
        arrays[key] = np.asarray(x.s)
        values = {}
        for k, v in x.values.items():
            values[k] = f"i{len(arrays)}"
            arrays[values[k]] = np.asarray(v)
        return {"table": {"name": x.name, "s": key, "values": values}}
    return _child.encode(x, arrays)


def _spec(jobs, guard, extra_dirs=()):
    arrays, out = {}, []
    for job in jobs:
        groups = []
        for name, calls in job.groups:
            groups.append({"name": name, "calls": [
                {"fn": c.fn, "attr": c.attr, "args": [_encode_arg(a, arrays) for a in c.args],
                 "kwargs": {k: _encode_arg(v, arrays) for k, v in c.kwargs.items()}} for c in calls]})
        out.append({"key": job.key, "path": job.path, "source": job.source, "groups": groups})
    answer_dirs = list(dict.fromkeys(os.path.dirname(os.path.abspath(j.path)) for j in jobs))
    return {"sys_path": _child_sys_path(answer_dirs, extra_dirs), "guard": guard, "jobs": out}, arrays


class _Frames:
    """Frames read from the child's pipe: 4-byte length, one byte of kind, the payload."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data
        frames = []
        while len(self.buf) >= 4:
            (n,) = struct.unpack(">I", self.buf[:4])
            if n < 1 or n > _child.MAX_FRAME:
                raise ValueError(f"a frame of {n} bytes")
            if len(self.buf) < 4 + n:
                break
            kind, payload = bytes(self.buf[4:5]), bytes(self.buf[5:4 + n])
            del self.buf[:4 + n]
            if kind == _child.FRAME_JSON:
                frames.append(json.loads(payload.decode()))
            elif kind == _child.FRAME_BYTES:
                frames.append(payload)
            else:
                raise ValueError(f"a frame of unknown kind {kind!r}")
        return frames


def _decode_manifest(manifest, blob):
    import io  # noqa: PLC0415

    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    outputs = {}
    for group, results in manifest.get("groups", {}).items():
        outputs[group] = [("value", _child.decode(r["value"], arrays)) if "value" in r else
                          ("error", {"type": str(r["error"].get("type", "?"))[:80],
                                     "message": str(r["error"].get("message", ""))[:300]})
                          for r in results]
    return outputs


def _ended(rc) -> str:
    if rc is None:
        return "stopped"
    if rc < 0:
        try:
            return f"was killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"ended the process with exit status {rc}"


def _run_child(jobs, timeout, guard, tmp, extra_dirs=()):
    """Run ``jobs`` in one child, in the fresh folder ``tmp``, until all are done or one fails;
    return the runs so far."""
    spec, arrays = _spec(jobs, guard, extra_dirs)
    stem = tmp / "input"
    (tmp / "input.json").write_text(json.dumps(spec), encoding="utf-8")
    np.savez(tmp / "input.npz", **arrays)
    script = tmp / "child.py"
    shutil.copyfile(_child.__file__, script)
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r, w = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-I", str(script), str(stem), str(w)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(w,), cwd=work,
                                env=env, start_new_session=True)
    finally:
        os.close(w)
    runs, frames = [], _Frames()
    current, running, manifest, ready = None, None, None, False
    deadline = time.monotonic() + START_TIMEOUT_S
    process_out = {}  # key (or "") -> text the child wrote to its real stdout/stderr
    sel = selectors.DefaultSelector()
    sel.register(r, selectors.EVENT_READ, "pipe")
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "out")
    open_streams = 3
    failure = None
    try:
        while open_streams and failure is None:
            left = deadline - time.monotonic()
            events = sel.select(timeout=max(left, 0.0)) if left > 0 else []
            if not events and time.monotonic() >= deadline:
                failure = "timeout"
                break
            for key, _ in events:
                fd = key.fd if key.data == "pipe" else key.fileobj.fileno()
                data = os.read(fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                if key.data == "out":
                    slot = current.key if current is not None else ""
                    text = process_out.get(slot, "")
                    if len(text) < MAX_PROCESS_OUTPUT:
                        process_out[slot] = text + data.decode(errors="replace")[:MAX_PROCESS_OUTPUT - len(text)]
                    continue
                try:
                    for frame in frames.feed(data):
                        if manifest is not None:  # the arrays that follow a "done"
                            if not isinstance(frame, bytes):
                                raise ValueError("no arrays after the results")
                            run = Run(current.key, "done", manifest=manifest,
                                      outputs=_decode_manifest(manifest, frame),
                                      printed=dict(manifest.get("printed", {})))
                            runs.append(run)
                            current, running, manifest = None, None, None
                            deadline = time.monotonic() + timeout
                        elif not isinstance(frame, dict):
                            raise ValueError("arrays out of turn")
                        elif frame.get("ready") and not ready:
                            ready = True
                            deadline = time.monotonic() + timeout
                        elif "start" in frame and current is None:
                            expected = jobs[len(runs)]
                            if frame["start"] != expected.key:
                                raise ValueError(f"started {frame['start']!r} out of turn")
                            current, running = expected, None
                            deadline = time.monotonic() + timeout
                        elif "call" in frame and current is not None:
                            group, i = frame["call"]
                            calls = dict(current.groups).get(group, [])
                            running = calls[i].fn if isinstance(i, int) and 0 <= i < len(calls) else None
                        elif "done" in frame and current is not None and frame["done"] == current.key:
                            manifest = frame
                        else:
                            raise ValueError(f"an unexpected report {str(frame)[:60]}")
                except (ValueError, KeyError, TypeError, IndexError, OSError) as exc:
                    failure = f"broken: {exc}"
                    break
            if len(runs) == len(jobs):
                break
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # pragma: no cover - already gone
                pass
        rc = proc.wait()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        os.close(r)
        sel.close()
    for run in runs:
        if process_out.get(run.key):
            run.printed["process"] = process_out[run.key]
    if len(runs) == len(jobs):
        return runs
    if not ready:
        detail = (process_out.get("", "").strip().splitlines() or [failure or _ended(rc)])[-1]
        raise GraderError(f"the process that runs answers did not start ({detail[:200]})")
    job = current if current is not None else jobs[len(runs)]
    during = f" while running {running}" if running else " while loading the file"
    if failure == "timeout":
        message = f"timed out after {timeout:g} s{during}: an answer must return within {timeout:g} s"
        status = "timeout"
    elif failure is not None:
        message = (f"the process running your answer sent the grader something it cannot read{during} "
                   f"({failure[len('broken: '):]}): an answer must only return its values")
        status = "broken"
    else:
        message = f"the process running your answer {_ended(rc)}{during}: an answer must return its values, " \
                  f"not end the process (sys.exit, os._exit) or crash it"
        status = "died"
    run = Run(job.key, status, message=message)
    if process_out.get(job.key):
        run.printed["process"] = process_out[job.key]
    runs.append(run)
    return runs


def run_jobs(jobs, *, timeout=DEFAULT_TIMEOUT_S, extra_forbidden_dirs=()):
    """Run every job, in as few children as possible; one :class:`Run` per job, in order.

    Parameters
    ----------
    jobs : list of Job
        Each with one group of calls, the same group for all: a child never
        holds the inputs of two groups.
    timeout : float
        Seconds each answer has, from being loaded to its last value.
    extra_forbidden_dirs : sequence of str
        Further folders an answer may not read (an autograder's source).

    Raises
    ------
    GraderError
        The child could not start at all (a broken installation), or the
        jobs mix groups (a bug of the caller), never for anything an answer
        does.
    """
    groups = {name for job in jobs for name, _ in job.groups}
    if len(groups) > 1 or any(len(job.groups) != 1 for job in jobs):
        raise GraderError(f"one child runs one group of calls; these jobs hold {sorted(groups)}")
    guard = _forbidden_places(extra_forbidden_dirs)
    runs, pending = [], list(jobs)
    while pending:
        tmp = Path(tempfile.mkdtemp(prefix="refattn-grade-"))  # a fresh folder per child
        try:
            done = _run_child(pending, timeout, guard, tmp, extra_forbidden_dirs)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        runs += done
        pending = pending[len(done):]
    return runs
