"""Running answers apart: one child process per answer and group of cases, a time limit each.

:func:`run_jobs` starts, for each job (one answer file and one group of its
calls, public or hidden), the answer's interpreter on the text of
:mod:`refattn.exercises._child` (``python -I -S -c TEXT``), in a fresh folder
holding a copy of the answer file alone, with the isolation of the run
(:mod:`refattn.exercises.isolation`: another user, limits and a folder tree of
its own where the grader is root; the Python guard everywhere). The inputs go
to the child on its standard input, never to disk; the child loads the answer
under the guard, calls its functions and sends back their values on a pipe:
arrays and plain containers, read here with ``allow_pickle=False``. Nothing is
checked there; everything is checked here, after the child has ended.

A child holds the calls of one group only: :func:`run_jobs` refuses jobs
that mix the public and the hidden cases, and the graders run the hidden
group after the public one is gone
(:func:`refattn.exercises.grading.grade_many`). So what an answer prints in
a public run, which a course's autograder shows to the student, cannot hold
a hidden input: none was in that process.

Each answer has ``timeout`` seconds from the moment the child is ready. An
answer that runs over, ends the process (``sys.exit`` is caught there;
``os._exit``, a crash or a signal end it) or sends anything malformed (a frame
too large or nested too deep, a report out of turn) is reported with what
happened and, if it was running one, which function. When a job ends, its
process group and, where the answers run as another user, every process of
that user are killed. Interrupting the grader kills the child.

This module imports NumPy and the standard library only: the handout's
checker carries it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import _child
from .judge import Drawn, GraderError, Table

__all__ = ["Job", "Run", "run_jobs", "run_groups", "RULE", "FORBIDDEN_MODULES", "DEFAULT_TIMEOUT_S",
           "guard_settings", "Stopped", "signals_as_interrupt", "read_answer", "MAX_ANSWER_BYTES"]

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

#: The largest JSON frame read from a child (its manifest); a larger one is a broken answer.
MAX_JSON_FRAME = 4 * 2 ** 20

#: The largest answer file graded (bytes), checked before it is read: a model solution is a few KiB.
MAX_ANSWER_BYTES = 2 ** 20

#: The child's program: its text, passed to ``python -c`` (no file of the grader's is read by the child).
CHILD_SOURCE = Path(_child.__file__).read_text(encoding="utf-8")


def read_answer(path) -> str:
    """The text of the answer file ``path``, refused by its size before a byte is read.

    Raises ``ValueError`` (one line naming the file) for no such file, a file over
    :data:`MAX_ANSWER_BYTES` and a file that is not UTF-8 text (a byte-order mark, as Notepad
    saves, is read as Python reads it).
    """
    shown = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        raise ValueError(f"FILE: no such file {shown!r}")
    size = os.path.getsize(path)
    if size > MAX_ANSWER_BYTES:
        raise ValueError(f"FILE: {shown!r} is {size} bytes; an answer file is at most {MAX_ANSWER_BYTES} bytes")
    with open(path, "rb") as f:
        data = f.read(MAX_ANSWER_BYTES + 1)
    if len(data) > MAX_ANSWER_BYTES:  # it grew since: still refused
        raise ValueError(f"FILE: {shown!r} is over {MAX_ANSWER_BYTES} bytes; an answer file is at most that")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"FILE: {shown!r} is not UTF-8 text ({exc.reason})") from None


def guard_settings(dirs=(), walk=(), files=()) -> dict:
    """The Python guard's settings: folders (by path) and files an answer may not open, folders to
    walk for their files' inodes, the modules it may not import, and the rule."""
    return {"dirs": list(dirs), "walk": list(walk), "files": list(files), "modules": list(FORBIDDEN_MODULES),
            "rule": RULE}


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


def _encode_arg(x, arrays):
    if isinstance(x, Drawn):
        return {"drawn": x.spec()}
    if isinstance(x, dict) and any(isinstance(v, Drawn) for v in x.values()):
        return {"d": {str(k): _encode_arg(v, arrays) for k, v in x.items()}}
    if isinstance(x, Table):
        key = f"i{len(arrays)}"
        arrays[key] = np.asarray(x.s)
        values = {}
        for k, v in x.values.items():
            values[k] = f"i{len(arrays)}"
            arrays[values[k]] = np.asarray(v)
        return {"table": {"name": x.name, "s": key, "values": values}}
    return _child.encode(x, arrays)


def _spec(job, guard, sys_path, seen_path):
    arrays, groups = {}, []
    for name, calls in job.groups:
        groups.append({"name": name, "calls": [
            {"fn": c.fn, "attr": c.attr, "args": [_encode_arg(a, arrays) for a in c.args],
             "kwargs": {k: _encode_arg(v, arrays) for k, v in c.kwargs.items()}} for c in calls]})
    jobs = [{"key": job.key, "path": seen_path, "source": job.source, "groups": groups}]
    return {"sys_path": sys_path, "guard": guard, "jobs": jobs}, arrays


def _frame(kind, payload) -> bytes:
    return struct.pack(">I", len(payload) + 1) + kind + payload


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
                if len(payload) > MAX_JSON_FRAME:
                    raise ValueError(f"a report of {len(payload)} bytes")
                frames.append(json.loads(payload.decode()))
            elif kind == _child.FRAME_BYTES:
                frames.append(payload)
            else:
                raise ValueError(f"a frame of unknown kind {kind!r}")
        return frames


#: What a manifest's ``fatal`` may say happened, and the keys it may have.
FATAL_WHAT = ("exit", "raised", "refused")
FATAL_KEYS = frozenset({"what", "where", "type", "message", "code"})


def _check_manifest(manifest, job):
    """``ValueError`` unless ``manifest`` is a report of ``job`` as the child writes one: its own
    groups, one result per call (fewer only after a fatal event), and a ``fatal`` of a known form."""
    for key in ("defined", "callable"):
        if not isinstance(manifest.get(key, []), list) or not all(isinstance(v, str) for v in manifest.get(key, [])):
            raise ValueError("a malformed manifest")
    fatal = manifest.get("fatal")
    if fatal is not None and (not isinstance(fatal, dict) or fatal.get("what") not in FATAL_WHAT
                              or not set(fatal) <= FATAL_KEYS or not all(isinstance(v, str) for v in fatal.values())):
        raise ValueError("a malformed manifest")
    groups = manifest.get("groups", {})
    calls = dict(job.groups)
    if not isinstance(groups, dict) or not set(groups) <= set(calls) or not all(isinstance(v, list)
                                                                                 for v in groups.values()):
        raise ValueError("a report of other groups of calls than the grader asked for")
    for name, made in calls.items():
        n = len(groups.get(name, []))
        if n > len(made) or (fatal is None and n != len(made)):
            raise ValueError(f"a report of {n} values for {len(made)} calls")
        if not all(isinstance(r, dict) and (("value" in r) != ("error" in r)) and
                   ("error" not in r or isinstance(r["error"], dict)) for r in groups.get(name, [])):
            raise ValueError("a malformed manifest")


def _decode_manifest(manifest, blob, job):
    """The outputs of a child's ``done`` report, checked against ``job`` first (:func:`_check_manifest`)
    and decoded within :data:`~refattn.exercises._child.MAX_DECODED_VALUES` numbers, each array
    counted wherever it is named: anything else (a forged or damaged report) raises ``ValueError``,
    a broken answer."""
    _check_manifest(manifest, job)
    arrays = _child.unpack_arrays(blob)
    budget = [_child.MAX_DECODED_VALUES]
    outputs = {}
    for group, results in manifest.get("groups", {}).items():
        outputs[group] = [("value", _child.decode(r["value"], arrays, budget=budget)) if "value" in r else
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


_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,80}\.py")


def _answer_copy(iso, job):
    """A fresh folder holding a copy of the answer file alone: ``(folder here, file as the answer sees it)``."""
    here, seen = iso.work_dir()
    name = os.path.basename(job.path)
    name = name if _SAFE_NAME.fullmatch(name) else "answer.py"
    path = os.path.join(here, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(job.source)
    os.chmod(path, 0o644)
    return here, os.path.join(seen, name)


def _feed(stream, data):
    """Write ``data`` to the child's standard input and close it (a thread: the child reads as it likes)."""
    try:
        stream.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass  # the child ended before reading its input: reported by what it did
    finally:
        try:
            stream.close()
        except OSError:
            pass


class _Watch:
    """What a child has reported so far: ready, the answer started, the function running, the result."""

    def __init__(self, job, timeout):
        self.job, self.timeout = job, timeout
        self.frames = _Frames()
        self.running = self.manifest = self.run = None
        self.ready = self.started = False
        self.deadline = time.monotonic() + START_TIMEOUT_S

    def feed(self, data):
        """Read the frames in ``data``; ``ValueError`` (and the like) for anything out of protocol."""
        for frame in self.frames.feed(data):
            if self.manifest is not None:  # the arrays that follow a "done"
                if not isinstance(frame, bytes):
                    raise ValueError("no arrays after the results")
                self.run = Run(self.job.key, "done", manifest=self.manifest,
                               outputs=_decode_manifest(self.manifest, frame, self.job),
                               printed=_printed(self.manifest))
                return
            if not isinstance(frame, dict):
                raise ValueError("arrays out of turn")
            if frame.get("ready") and not self.ready:
                self.ready = True
                self.deadline = time.monotonic() + self.timeout
            elif frame.get("start") == self.job.key and self.ready and not self.started:
                self.started = True
            elif "call" in frame and self.started:
                group, i = frame["call"]
                calls = dict(self.job.groups).get(group, [])
                self.running = calls[i].fn if isinstance(i, int) and 0 <= i < len(calls) else None
            elif "done" in frame and self.started and frame["done"] == self.job.key:
                self.manifest = frame
            else:
                raise ValueError(f"an unexpected report {str(frame)[:60]}")

    def failed_run(self, failure, rc, printed):
        """The :class:`Run` of a child that gave no result: timed out, broken, or ended."""
        if not self.ready:
            detail = (printed.strip().splitlines() or [failure or _ended(rc)])[-1]
            raise GraderError(f"the process that runs answers did not start ({detail[:200]})")
        during = f" while running {self.running}" if self.running else " while loading the file"
        timeout = self.timeout
        if failure == "timeout":
            return Run(self.job.key, "timeout",
                       message=f"timed out after {timeout:g} s{during}: an answer must return within {timeout:g} s")
        if failure is not None:
            return Run(self.job.key, "broken",
                       message=(f"the process running your answer sent the grader something it cannot read{during} "
                                f"({failure[len('broken: '):]}): an answer must only return its values"))
        return Run(self.job.key, "died",
                   message=(f"the process running your answer {_ended(rc)}{during}: an answer must return its "
                            f"values, not end the process (sys.exit, os._exit) or crash it"))


def _start(job, timeout, guard, iso, here, seen):
    """The child's process and the read end of its report pipe; its input fed by a thread."""
    spec, arrays = _spec(job, guard, iso.child_sys_path(), seen)
    data = _frame(_child.FRAME_JSON, json.dumps(spec).encode()) + _frame(_child.FRAME_BYTES,
                                                                       _child.pack_arrays(arrays))
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(iso.command(CHILD_SOURCE) + [str(w)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(w,), env=iso.environment(),
                                preexec_fn=iso.preexec(iso.limits.get("cpu_s", int(timeout) + 10), here),
                                start_new_session=True)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    feeder = threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True)
    feeder.start()
    return proc, r, feeder


def _run_child(job, timeout, guard, iso):
    """Run ``job`` in a child of its own under ``iso``; return its :class:`Run`."""
    here, seen = _answer_copy(iso, job)
    try:
        proc, r, feeder = _start(job, timeout, guard, iso, here, seen)
    except BaseException:
        shutil.rmtree(here, ignore_errors=True)
        raise
    watch, process_out, kept, failure = _Watch(job, timeout), [], 0, None
    sel = selectors.DefaultSelector()
    sel.register(r, selectors.EVENT_READ, "pipe")
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "out")
    open_streams = 3
    try:
        while open_streams and failure is None and watch.run is None:
            left = watch.deadline - time.monotonic()
            events = sel.select(timeout=max(left, 0.0)) if left > 0 else []
            if not events and time.monotonic() >= watch.deadline:
                failure = "timeout"
                break
            for key, _ in events:
                data = os.read(key.fd if key.data == "pipe" else key.fileobj.fileno(), 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                elif key.data == "out":  # what reached the real stdout/stderr (C code, os.write)
                    piece = data.decode(errors="replace")[:max(MAX_PROCESS_OUTPUT - kept, 0)]
                    process_out.append(piece)
                    kept += len(piece)
                else:
                    try:
                        watch.feed(data)
                    except Exception as exc:  # noqa: BLE001 - whatever a report makes go wrong is its answer's
                        failure = f"broken: {type(exc).__name__}: {str(exc)[:120]}"
                        break
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # pragma: no cover - already gone
                pass
        rc = proc.wait()
        iso.kill_all()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        os.close(r)
        sel.close()
        feeder.join(timeout=5)
        shutil.rmtree(here, ignore_errors=True)
    printed = "".join(process_out)
    run = watch.run if watch.run is not None else watch.failed_run(failure, rc, printed)
    if printed:
        run.printed["process"] = printed
    return run


def _printed(manifest) -> dict:
    printed = manifest.get("printed", {})
    if not isinstance(printed, dict):
        raise ValueError("a malformed manifest")
    return {str(k)[:20]: str(v)[:_child.MAX_PRINTED + 100] for k, v in printed.items()}


def run_jobs(jobs, *, iso, guard, timeout=DEFAULT_TIMEOUT_S):
    """Run every job, each in a child of its own; one :class:`Run` per job, in order.

    Parameters
    ----------
    jobs : list of Job
        Each with one group of calls, the same group for all: a child never
        holds the inputs of two groups.
    iso : refattn.exercises.isolation.Isolation
        How the children are started (another user, a jail, limits).
    guard : dict
        The Python guard's settings (:func:`guard_settings`).
    timeout : float
        Seconds each answer has, from being loaded to its last value.

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
    return [_run_child(job, timeout, guard, iso) for job in jobs]


def run_groups(prepared, *, iso, guard, timeout):
    """Run every answer's public cases, then the hidden cases of those whose public run went through;
    ``[{"public": Run, "hidden": Run}]`` per answer, in order.

    ``prepared``: ``(exercise, path, source, cases)`` per answer (the cases' inputs only).
    """
    from .judge import cannot_run  # noqa: PLC0415

    runs = [{} for _ in prepared]
    for group in ("public", "hidden"):
        jobs, whose = [], []
        for k, (ex, path, source, cases) in enumerate(prepared):
            calls = [c for case in cases if case.hidden == (group == "hidden") for c in case.calls]
            if not calls or (group == "hidden" and cannot_run(ex, path, runs[k]["public"])):
                continue  # an answer that could not run its public cases is not run again
            jobs.append(Job(f"{k}:{ex.stem}", os.path.abspath(path), source, [(group, calls)]))
            whose.append(k)
        done = run_jobs(jobs, iso=iso, guard=guard, timeout=timeout) if jobs else []
        for k, run in zip(whose, done):
            runs[k][group] = run
    return runs


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled as Ctrl-C: the running answer's process and folders are cleaned up."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_as_interrupt():
    """SIGTERM and SIGHUP raise :class:`Stopped` while a command runs (main thread only), so that the
    grader's ``finally`` blocks kill the answer's process and remove its folders, as for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Stopped(signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
