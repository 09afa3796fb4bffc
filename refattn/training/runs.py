"""What a long run needs around its numbers: strict JSON, durable writes, one writer per file,
results files that keep each finished piece, and a memory estimate checked before any work.

What these promise a user (a killed or failed write leaves the previous file whole, a second run
on a file is refused at once, a read-only file is never replaced) is written once, in
``docs/cli.md`` ("Durable writes", "One writer per file", "Results files").
"""

from __future__ import annotations

import contextlib
import errno
import glob
import importlib
import json
import math
import os
import platform
import re
import shutil
import threading
import warnings
from collections.abc import Mapping

import numpy as np
from threadpoolctl import threadpool_info

from ..core.backend import to_numpy

__all__ = ["jsonable", "dumps", "atomic_write", "read_only", "check_writable", "check_distinct", "locked", "claim",
           "session", "held_paths", "ResultsFile", "CellStore", "check_results_path", "same_file_key", "make_folder_for",
           "machine_info", "available_memory", "check_memory", "format_bytes", "studies_extra", "STUDIES_EXTRA"]

#: The install line of the libraries the study commands use (locks, progress bars).
STUDIES_EXTRA = "pip install 'refattn[studies]'"


def studies_extra(module):
    """``import module``, a library of the ``studies`` extra, or one line naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"{module} is not installed; the study commands need the 'studies' extra: "
                         f"{STUDIES_EXTRA}") from None


def jsonable(x):
    """Plain Python data: arrays (NumPy or CuPy) become lists, NumPy scalars numbers."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return to_numpy(x).tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def _json_safe(obj, path, bad):
    """``obj`` with every non-finite float replaced by ``None``; their paths appended to ``bad``."""
    if isinstance(obj, dict):
        return {k: _json_safe(v, f"{path}.{k}", bad) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v, f"{path}[{i}]", bad) for i, v in enumerate(obj)]
    if isinstance(obj, float) and not math.isfinite(obj):
        bad.append(f"{path} = {obj}")
        return None
    return obj


def dumps(result, indent=2) -> str:
    """``result`` as strict JSON: a NaN or infinity becomes ``null``, listed under
    ``"non_finite"`` (which value, where), so every JSON parser reads the output."""
    bad = []
    safe = _json_safe(jsonable(result), "$", bad)
    if bad and isinstance(safe, dict):
        safe["non_finite"] = bad
    return json.dumps(safe, indent=indent, allow_nan=False)


def read_only(path) -> bool:
    """True for an existing file without a write permission bit (``chmod a-w``; root too), or one this
    process may not write."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return not (st.st_mode & 0o222) or not os.access(path, os.W_OK)


def check_writable(path, option):
    """One line naming ``option`` and ``path`` when ``path`` exists and is read-only (:func:`read_only`)."""
    if read_only(path):
        raise ValueError(f"{option}: {os.fspath(path)!r} is read-only; it is left as it is (make it writable, "
                         f"or give another path)")


def atomic_write(path, write):
    """Call ``write(fh)`` on a binary temporary file beside ``path``, ``fsync`` it and rename it over ``path``.

    ``path`` is then the previous file or the whole new one, whatever happens; a
    replaced file keeps its permission bits. A read-only file or one that is not
    a regular file (a device, a pipe) is refused, and any ``OSError`` names
    ``path``.
    """
    path = os.path.realpath(os.fspath(path))
    if os.path.exists(path) and not os.path.isfile(path):
        raise OSError(errno.EINVAL, "not a regular file (a device, pipe or folder)", path)
    if read_only(path):
        raise PermissionError(errno.EACCES, "read-only file; it is left as it is", path)
    tmp = f"{path}.partial-{os.getpid()}-{threading.get_ident()}"  # removed by the next lock if a kill leaves it
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(path):
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise type(exc)(exc.errno, exc.strerror or str(exc), path) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


# --------------------------------------------------------------------------
# One writer per file
# --------------------------------------------------------------------------

_LOCKS: dict = {}  # lock file -> its filelock.FileLock: one per file in this process, re-entrant
_GUARD = threading.Lock()
_THREAD = threading.local()  # .claims: this thread's stack of sessions, each a list of (option, path, lock)


def _lock(path, option, folder=False):
    """Take the exclusive lock of ``path`` (``<path>.lock``, or ``<folder>/.refattn.lock``) and remove the
    temporaries a killed writer left; a lock another process holds is one line naming ``option``."""
    filelock = studies_extra("filelock")
    path = os.fspath(path)
    name = os.path.join(os.path.realpath(path), ".refattn.lock") if folder else os.path.realpath(path) + ".lock"
    with _GUARD:
        if name not in _LOCKS:
            _LOCKS[name] = filelock.FileLock(name, timeout=0, thread_local=False)
        lock = _LOCKS[name]
        try:
            lock.acquire()
        except filelock.Timeout:
            raise ValueError(f"{option}: {path!r} is in use by another run (lock file {name!r}); wait for that run "
                             f"to end, or use another path") from None
        except OSError as exc:
            raise ValueError(f"{option}: cannot write into {os.path.dirname(name)!r} ({exc.strerror or exc})") from None
    if lock.lock_counter == 1:  # nobody else writes here now: a temporary left by a killed writer is stale
        pattern = os.path.join(glob.escape(path), "*.partial-*") if folder else glob.escape(path) + ".partial-*"
        for stale in glob.glob(pattern):
            with contextlib.suppress(OSError):
                os.remove(stale)
    return lock


@contextlib.contextmanager
def locked(path, option="path", *, folder=False):
    """Hold the exclusive lock of ``path`` (a file, or a folder with ``folder=True``) in this block."""
    lock = _lock(path, option, folder)
    try:
        yield lock
    finally:
        lock.release()


def _sessions():
    if not hasattr(_THREAD, "claims"):
        _THREAD.claims = []
    return _THREAD.claims


@contextlib.contextmanager
def session():
    """Within this block (in this thread) :func:`claim` keeps its locks until the block ends; yields the
    list of what is claimed (:func:`held_paths` reads it). The command line runs each command in one."""
    claimed: list = []
    _sessions().append(claimed)
    try:
        yield claimed
    finally:
        _sessions().remove(claimed)
        for _, _, lock in reversed(claimed):
            lock.release()


def claim(path, option="path", *, folder=False):
    """Lock ``path`` before any work: held until the current :func:`session` ends, or, outside one,
    only checked (taken and released at once)."""
    lock = _lock(path, option, folder)
    if _sessions():
        _sessions()[-1].append((option, os.fspath(path), lock))
    else:
        lock.release()


def held_paths(claimed=None):
    """``[(option, path), ...]`` in ``claimed`` (default: the current session's), in order, each path once."""
    if claimed is None:
        claimed = _sessions()[-1] if _sessions() else []
    first: dict = {}
    for option, path, _ in claimed:
        first.setdefault(path, option)
    return [(option, path) for path, option in first.items()]


# --------------------------------------------------------------------------
# Results files
# --------------------------------------------------------------------------


class ResultsFile:
    """A JSON file that holds a run's finished pieces as they finish (``--out``'s ``<command>.json``).

    ``{"command", "complete": false, "finished": {key: result}}`` while the run
    goes on, ``{"command", "complete": true, "result"}`` once :meth:`complete`
    is called; every write is :func:`atomic_write`. A results file of an
    earlier run at ``path`` is kept until this run's first piece; anything else
    there, or a read-only file, is refused in one line naming ``option``. Whoever
    makes one locks the file or its folder first (:func:`claim`).
    """

    def __init__(self, path, command, option="path"):
        self.path = os.fspath(path)
        self.command = list(command)
        self.finished: dict = {}
        self._lock = threading.Lock()
        if os.path.lexists(self.path):
            _check_results_file(self.path, option)
        else:
            self._write({"command": self.command, "complete": False, "finished": {}})

    def _write(self, obj):
        text = (dumps(obj) + "\n").encode("utf-8")
        atomic_write(self.path, lambda fh: fh.write(text))

    def add(self, key, result):
        """Record the finished piece ``key`` (an activation's results, say) and write the file."""
        with self._lock:
            self.finished[str(key)] = result
            self._write({"command": self.command, "complete": False, "finished": self.finished})

    def complete(self, result):
        """The whole run's result: the file now holds it instead of the pieces."""
        with self._lock:
            self._write({"command": self.command, "complete": True, "result": result})


def _check_results_file(path, option):
    """An existing file a :class:`ResultsFile` may replace: a writable results file of refattn."""
    if not os.path.isfile(path):
        raise ValueError(f"{option}: {path!r} is not a regular file (a folder, device or pipe); it is left as it is")
    check_writable(path, option)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        doc = None
    shaped = (isinstance(doc, dict) and isinstance(doc.get("command"), list) and isinstance(doc.get("complete"), bool)
              and isinstance(doc.get("result") if doc.get("complete") else doc.get("finished"), dict))
    if not shaped:
        raise ValueError(f"{option}: {path!r} exists and is not a results file of refattn; it is left as it is "
                         f"(move it away, or write the results elsewhere)")


class CellStore:
    """A study's results file: named cells under fixed settings, resumed, never mixed.

    The file is ``{"settings", "cells": {name: record}, "runs"}``. An existing
    file with the same settings is resumed (:attr:`cells` holds what is
    finished); settings that differ are refused, naming the keys. The keys in
    ``grow`` (a grid's axes, lists) may differ: the stored lists become the
    sorted union, so a grid can be extended; the keys in ``free`` (settings only
    some cells use, recorded in their names) may differ too; a key in ``added``
    (recorded since a later version) may be missing from an older file, which
    then takes this run's value. An existing file is
    checked for its shape (``record_keys`` in every cell) before any work. The
    file is claimed (:func:`claim`) before it is read. ``path=None`` keeps
    everything in memory.
    """

    def __init__(self, path, settings, grow=(), what="this study", free=(), record_keys=(), added=()):
        self.path = None if path is None else os.fspath(path)
        self.settings, self.what = settings, what
        self.cells: dict = {}
        self.previous: dict = {}  # the document found in the file, if any
        if self.path is None:
            return
        check_results_path(self.path, "results")
        if not os.path.exists(self.path):
            return
        old = _cell_document(self.path, what, grow, record_keys)
        new = jsonable(settings)
        changed = sorted(k for k in set(old["settings"]) | set(new)
                         if k not in grow and k not in free and old["settings"].get(k) != new.get(k)
                         and not (k in added and k not in old["settings"]))
        if changed:
            raise ValueError(f"results: {self.path} holds a run with other settings ({', '.join(changed)} "
                             f"differ); use another file or the same settings")
        for key in grow:  # a grid may grow: the cells already run are kept
            settings[key] = sorted(set(settings[key]) | set(old["settings"][key]))
        self.cells = old["cells"]
        self.previous = old

    def read(self, use):
        """``use()`` (a function that reads the cells found in the file), called before any work: a file
        whose cells cannot be read is refused now, in one line naming it."""
        try:
            return use()
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            if not self.previous:  # nothing was read from a file: a bug, not the file's fault
                raise
            raise ValueError(f"results: {self.path} is not a results file of {self.what} (its cells cannot be "
                             f"read: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); it is "
                             f"left as it is") from None

    def runs(self, command, commit):
        """The list of ``{"command", "commit", "machine"}`` that made the file, this one appended if new.

        A float32 cell rerun on a machine whose BLAS rounds differently drifts
        from the stored one (``derivations/15-nt-experiments.md``, section 11): a
        warning says so when the file's cells were made with another BLAS.
        """
        done = list(self.previous.get("runs", []))
        this = {"command": command, "commit": commit, "machine": machine_info()}
        seen = {b for r in done for b in (r.get("machine") or {}).get("blas", [])}
        other = sorted(seen - set(this["machine"]["blas"]))
        if other and self.path is not None:
            warnings.warn(f"results: {self.path} has cells made with BLAS {', '.join(other)}; this run uses "
                          f"{', '.join(this['machine']['blas']) or 'none found'}, so new cells will not match "
                          f"them bit for bit (OPENBLAS_CORETYPE selects OpenBLAS's kernel)", stacklevel=3)
        return done if this in done else done + [this]

    def save(self, document):
        """Write ``document`` atomically (if there is a file), each list of plain values on one line."""
        if self.path is not None:
            text = (_flat_lists(dumps(document, indent=1)) + "\n").encode("utf-8")
            atomic_write(self.path, lambda fh: fh.write(text))


def _cell_document(path, what, grow, record_keys):
    """The document of an existing :class:`CellStore` file, checked for its shape; else one
    ``ValueError`` naming the file."""

    def refuse(why):
        return ValueError(f"results: {path} is not a results file of {what} ({why}); it is left as it is")

    def kind(value):
        return {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "a number",
                float: "a number", type(None): "null"}.get(type(value), type(value).__name__)

    with open(path, encoding="utf-8") as fh:
        try:
            old = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise refuse(exc) from None
    if not isinstance(old, dict):
        raise refuse(f"it holds {kind(old)}, not an object")
    if not isinstance(old.get("settings"), dict):
        raise refuse("no object 'settings'")
    if not isinstance(old.get("cells"), dict):
        raise refuse("no object 'cells'" if "cells" not in old else f"its cells are {kind(old['cells'])}")
    for key in grow:
        values = old["settings"].get(key)
        if not (isinstance(values, list) and all(isinstance(v, (int, float, str)) for v in values)):
            raise refuse(f"its setting {key!r} is not a list of values")
    for name, record in old["cells"].items():
        if not isinstance(record, dict):
            raise refuse(f"cell {name!r} is {kind(record)}, not a record")
        missing = [k for k in record_keys if k not in record]
        if missing:
            raise refuse(f"cell {name!r} has no {missing[0]!r}")
    runs = old.get("runs", [])
    if not (isinstance(runs, list) and all(isinstance(r, dict) for r in runs)):
        raise refuse("its 'runs' is not a list of records")
    return old


_PLAIN_LIST = re.compile(r"\[\s*((?:-?[\d.eE+-]+|null|true|false)(?:,\s*(?:-?[\d.eE+-]+|null|true|false))*)\s*\]")


def _flat_lists(text):
    """JSON text with every list of plain values on one line (the values themselves untouched)."""
    return _PLAIN_LIST.sub(lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text)


# --------------------------------------------------------------------------
# Output paths, checked before any work
# --------------------------------------------------------------------------


def make_folder_for(path, option):
    """Make the folder of the file ``path`` if missing, or one line naming ``option`` and ``path``."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        os.makedirs(folder, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"{option}: cannot write {os.fspath(path)!r}: a part of its folder is a file") from None
    except OSError as exc:
        raise ValueError(f"{option}: cannot write {os.fspath(path)!r} ({exc.strerror or exc})") from None


def check_results_path(path, option):
    """Check that ``path`` can be a results file (a file name, not a folder, in a folder that exists or
    can be made, readable and not read-only) and claim it (:func:`claim`); else one line naming ``option``."""
    name = os.fspath(path)
    if not name.strip():
        raise ValueError(f"{option}: expected a file name, got {name!r}")
    if os.path.isdir(name) or name.endswith(os.sep):
        raise ValueError(f"{option}: {name!r} is a folder; expected a file name such as "
                         f"{name.rstrip(os.sep)}/results.json")
    if os.path.exists(name) and not os.path.isfile(name):
        raise ValueError(f"{option}: {name!r} is not a regular file (a device or pipe); expected a file name")
    make_folder_for(name, option)
    if os.path.exists(name) and not os.access(name, os.R_OK):
        raise ValueError(f"{option}: cannot read {name!r} (permission denied)")
    check_writable(name, option)
    claim(name, option)


def same_file_key(path):
    """What two names of one file share (also of a file not made yet): its folder's real path, and its name."""
    name = os.fspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(name))), os.path.basename(name))


def check_distinct(named):
    """Refuse two options that name one file (``named`` is ``[(option, path), ...]`` of every file a command
    reads or writes; a hard link is the same file): one line naming both options and the file."""
    seen = {}
    for option, path in named:
        try:  # an existing file by its inode
            st = os.stat(path)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = same_file_key(path)
        if key in seen and seen[key][0] != option:
            first, where = seen[key]
            raise ValueError(f"{option}: names the same file as {first} ({where!r}); give the two different "
                             f"files, so that neither overwrites the other")
        seen.setdefault(key, (option, os.fspath(path)))


# --------------------------------------------------------------------------
# The machine: rounding and memory
# --------------------------------------------------------------------------


def machine_info():
    """What decides a float run's rounding: ``cpu`` (Linux's model name, else the processor or
    architecture), ``numpy`` (its version) and ``blas`` (``"library version (kernel)"`` per BLAS
    threadpoolctl sees)."""
    cpu = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None)
    except OSError:
        pass
    cpu = cpu or platform.processor() or platform.machine()
    blas = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')})"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return {"cpu": cpu, "numpy": np.__version__, "blas": blas}


def available_memory():
    """Bytes available to a new allocation now (Linux's ``MemAvailable``), else the physical memory,
    else ``None``."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def format_bytes(n) -> str:
    """``n`` bytes in MiB or GiB, for messages."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_memory(estimate, what, limit=None):
    """Refuse (``MemoryError``, with the estimate) a run whose estimated peak of ``estimate`` bytes exceeds
    ``limit`` GiB (the command line's ``--max-memory``; default: the memory available now). ``what``
    names the sizes that make it, for the message."""
    if limit is not None:
        cap, source, advice = limit * 2**30, "allowed by --max-memory", "raise --max-memory"
    else:
        cap, source, advice = available_memory(), "available now", "pass --max-memory GIB to run anyway"
        if cap is None:
            return
    if estimate > cap:
        raise MemoryError(f"{what} needs about {format_bytes(estimate)} of memory, more than the "
                          f"{format_bytes(cap)} {source}; ask for less, or {advice}")
