"""What a long run needs around its numbers: strict JSON, results that reach disk as
they are produced, and a memory estimate checked before any work.

* :func:`dumps` writes a result as JSON that every parser reads: a NaN or an
  infinity becomes ``null`` and is listed under ``"non_finite"``.
* :class:`ResultsFile` keeps a run's finished pieces (one per activation, or
  per variant) in one JSON file, rewritten atomically after each piece, so a
  failure later in the run (a figure, a crash, Ctrl-C) never takes the
  finished pieces with it.
* :class:`CellStore` is the file of a study made of many runs ("cells"),
  each saved as it finishes and kept when the study is run again with the
  same settings, so an interrupted study resumes where it stopped.
* :func:`check_memory` refuses a run whose estimated peak memory exceeds what
  the machine has, before the first array is allocated, with the estimate in
  the message (``--max-memory`` on the command line overrides).
* :func:`locked`, :func:`claim` and :func:`session`: one writer per file. A
  run takes an exclusive lock on every file it writes (a checkpoint, a
  results file, an ``--out`` folder) before any work, so a second run on the
  same path is refused at once with one line naming the path and the process
  that holds it.

Every write is durable before it is visible (:func:`atomic_write`): the new
bytes go to a temporary file beside the target, are flushed to disk
(``fsync``), then renamed over the target, and the folder's entry is flushed
too; a failed or killed write leaves the previous file whole. A temporary
left by a killed process (``<file>.partial-<pid>-<thread>``) is never read,
and is removed by the next run that locks the file. A file the user made
read-only is never replaced (a rename would replace it regardless of its
permissions): it is refused before any work (:func:`check_writable`), and
:func:`atomic_write` refuses it too; a replaced file keeps its permissions.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import math
import os
import platform
import re
import stat
import threading
import warnings
from collections.abc import Mapping

try:
    import fcntl
except ImportError:  # pragma: no cover - not a POSIX system: runs are not locked there
    fcntl = None

import numpy as np
from threadpoolctl import threadpool_info

from ..core.backend import to_numpy

__all__ = ["jsonable", "dumps", "atomic_write", "read_only", "check_writable", "check_distinct", "locked", "claim",
           "session", "held_paths", "ResultsFile", "CellStore", "check_results_path", "same_file_key", "make_folder_for", "machine_info",
           "available_memory", "check_memory", "format_bytes"]


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


def _fsync_folder(path):
    """Flush the folder entry of ``path`` (a rename is durable only once its folder is)."""
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform whose folders cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def _partial(path):
    return f"{path}.partial-{os.getpid()}-{threading.get_ident()}"


def read_only(path) -> bool:
    """True for an existing file its owner made read-only (no write permission bit: ``chmod a-w``), or
    one this process may not write. The permission bits count for root too, who may write anyway: a
    file made read-only says "do not replace me"."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return not (st.st_mode & 0o222) or not os.access(path, os.W_OK)


def check_writable(path, option):
    """One line naming ``option`` and ``path`` when ``path`` exists and is read-only (:func:`read_only`):
    checked before any work, so that a run never finds out after its first piece that it cannot save it."""
    if read_only(path):
        raise ValueError(f"{option}: {os.fspath(path)!r} is read-only; it is left as it is (make it writable, "
                         f"or give another path)")


def atomic_write(path, write):
    """Call ``write(fh)`` on a binary temporary file beside ``path``, then move it over ``path``.

    The temporary is flushed to disk (``fsync``) before :func:`os.replace` moves
    it over ``path``, and the folder's entry after, so ``path`` is always either
    the previous file or the whole new one, also after a power cut. The
    temporary's name is this process's and thread's (``<path>.partial-<pid>-<tid>``);
    a failed write removes it, a killed one leaves it for the next run that locks
    ``path`` to remove (:func:`locked`). An ``OSError`` (a full disk, say) names
    ``path``. A symbolic link is followed (its target is written); a path that is
    not a regular file (a device such as ``/dev/null``, a pipe) is refused with
    an ``OSError`` naming it, before anything is written: moving a file over it
    would replace the device itself. So is a read-only file (:func:`read_only`),
    which a rename would replace although its owner protected it; a file that is
    replaced keeps its permission bits."""
    path = os.path.realpath(os.fspath(path))
    if os.path.exists(path) and not os.path.isfile(path):
        raise OSError(errno.EINVAL, "not a regular file (a device, pipe or folder)", path)
    if read_only(path):
        raise PermissionError(errno.EACCES, "read-only file; it is left as it is", path)
    mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else None
    tmp = _partial(path)
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)  # the user's permissions survive the replacement
        os.replace(tmp, path)
        _fsync_folder(path)
    except OSError as exc:
        raise _naming(exc, path) from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _naming(exc, path):
    """``exc`` (an ``OSError``) with ``path`` as its file name: ``[Errno 28]`` alone names nothing."""
    if exc.filename is not None and not os.fspath(exc.filename).startswith(os.fspath(path) + ".partial-"):
        return exc
    return type(exc)(exc.errno, exc.strerror or str(exc), os.fspath(path))


# --------------------------------------------------------------------------
# One writer per file
# --------------------------------------------------------------------------


class _Lock:
    """An exclusive ``flock`` on ``lockfile``, which holds the holder's process id."""

    def __init__(self, path, lockfile, fd):
        self.path, self.lockfile, self.fd, self.count = path, lockfile, fd, 1


_HELD: dict = {}  # realpath of a lock file -> its _Lock (a lock is re-entrant within a process)
_HELD_GUARD = threading.Lock()
_THREAD = threading.local()  # .sessions: this thread's stack of lists of (option, path, _Lock) claimed


def _sessions():
    if not hasattr(_THREAD, "sessions"):
        _THREAD.sessions = []
    return _THREAD.sessions


def _lockfile(path, folder):
    """The lock file of ``path``, beside the file it stands for: two names of one file (a symbolic
    link) share one lock."""
    real = os.path.realpath(path)
    return os.path.join(real, ".refattn.lock") if folder else f"{real}.lock"


def _holder(fd):
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:  # pragma: no cover
        text = ""
    return f"process {text}" if text.isdigit() else "another process"


def _flock(path, lockfile, option):
    """Open and lock ``lockfile`` (creating it), or raise the one-line refusal."""
    where = os.path.dirname(os.path.abspath(lockfile))
    while True:
        try:
            fd = os.open(lockfile, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise ValueError(f"{option}: cannot write into {where!r} ({exc.strerror or exc})") from None
        if fcntl is None:  # pragma: no cover
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd)
            os.close(fd)
            raise ValueError(f"{option}: {path!r} is in use by {holder} (lock file {lockfile!r}); wait for that "
                             f"run to end, or use another path") from None
        try:  # the holder before us may have removed the file between our open and our lock: retry then
            same = os.path.samestat(os.fstat(fd), os.stat(lockfile))
        except FileNotFoundError:
            same = False
        if same:
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError as exc:  # a full disk: the run could not save anything either
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.remove(lockfile)
                raise ValueError(f"{option}: cannot write into {where!r} ({exc.strerror or exc})") from None
            return fd
        os.close(fd)


def _acquire(path, option, folder=False, clean=()):
    path = os.fspath(path)
    lockfile = _lockfile(path, folder)
    key = os.path.realpath(lockfile)
    with _HELD_GUARD:
        lock = _HELD.get(key)
        if lock is not None:
            lock.count += 1
            return lock
        lock = _HELD[key] = _Lock(path, lockfile, _flock(path, lockfile, option))
    # nobody else writes these files now: a temporary left by a killed run is stale
    patterns = [os.path.join(glob.escape(path), "*.partial-*") if folder else glob.escape(path) + ".partial-*"]
    patterns += [glob.escape(os.fspath(c)) + ".partial-*" for c in clean]
    for stale in (name for pattern in patterns for name in glob.glob(pattern)):
        with contextlib.suppress(OSError):
            os.remove(stale)
    return lock


def _release(lock):
    with _HELD_GUARD:
        lock.count -= 1
        if lock.count:
            return
        _HELD.pop(os.path.realpath(lock.lockfile), None)
        try:  # remove the lock file while still holding the lock (a waiter then retries on a fresh one)
            if os.path.samestat(os.fstat(lock.fd), os.stat(lock.lockfile)):
                os.remove(lock.lockfile)
        except OSError:
            pass
        os.close(lock.fd)


@contextlib.contextmanager
def locked(path, option="path", *, folder=False, clean=()):
    """Hold an exclusive lock on ``path`` (a file, or a folder with ``folder=True``) in this block.

    The lock is ``fcntl.flock`` on ``<path>.lock`` (``<folder>/.refattn.lock``),
    a file that holds the process id of the holder and is removed on release;
    the kernel releases the lock when the process ends, however it ends, so a
    killed run never leaves a stale lock. Within one process the lock is
    re-entrant. Taking it removes the stale temporaries of ``path`` and of the
    files in ``clean`` (those :func:`atomic_write` left when a run was killed).

    Raises
    ------
    ValueError
        One line naming ``option``, ``path`` and the process holding it, when
        another process holds the lock; or naming the folder, when the lock
        file cannot be created there (the run could not write there either).
    """
    lock = _acquire(path, option, folder, clean)
    try:
        yield lock
    finally:
        _release(lock)


@contextlib.contextmanager
def session():
    """Within this block (in this thread), :func:`claim` keeps its locks until the block ends; the
    command line runs each command in one, and the studies' ``run_*`` functions that keep a results
    file run in one. Yields the list of what is claimed (:func:`held_paths` reads it)."""
    claimed: list = []
    _sessions().append(claimed)
    try:
        yield claimed
    finally:
        _sessions().remove(claimed)
        for _, _, lock in reversed(claimed):
            _release(lock)


def claim(path, option="path", *, folder=False, clean=()):
    """Lock ``path`` (as :func:`locked`) before any work: held until the current :func:`session`
    ends, or, outside a session, only checked (taken and released at once)."""
    lock = _acquire(path, option, folder, clean)
    if _sessions():
        _sessions()[-1].append((option, os.fspath(path), lock))
    else:
        _release(lock)


def held_paths(claimed=None):
    """``[(option, path), ...]`` in ``claimed`` (what a :func:`session` yielded; default: the current
    session's), in order, each path once."""
    if claimed is None:
        claimed = _sessions()[-1] if _sessions() else []
    seen, out = set(), []
    for option, path, _ in claimed:
        if path not in seen:
            seen.add(path)
            out.append((option, path))
    return out


class ResultsFile:
    """A JSON file that holds a run's finished pieces as they finish.

    ``{"command": ..., "complete": false, "finished": {key: result, ...}}``
    while the run goes on; :meth:`complete` replaces it with
    ``{"command": ..., "complete": true, "result": ...}``. Every write goes to
    a temporary file first and is moved over ``path`` (:func:`os.replace`), so
    the file is always whole: the last finished piece, never half of one.

    A file already at ``path`` (an earlier run's results) is left whole until
    this run has finished its first piece, and then replaced atomically: a
    rerun interrupted before that keeps the earlier results. A file there that
    is not a results file of refattn, or that is read-only, is refused at once
    (``ValueError`` naming ``option``), never replaced; where there is none, an
    empty results file is written at once, so an output that cannot be
    written is found before any work.

    Whoever makes one locks the file or its folder first (:func:`locked`,
    :func:`claim`); the command line locks its ``--out`` folder.

    Parameters
    ----------
    path : str or path
        The file (its folder must exist and be writable).
    command : list of str
        The command line, stored so the file says how it was made.
    option : str
        The option that named the file, for messages.
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
    """An existing file that a :class:`ResultsFile` may replace once its first piece is finished: a
    writable results file of refattn (``command``, ``complete`` and its pieces or result) in a folder
    this process can write; else one line naming ``option`` and the file."""
    import tempfile  # noqa: PLC0415

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
    try:
        with tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(path))):
            pass
    except OSError as exc:
        raise ValueError(f"{option}: cannot write beside {path!r} ({exc.strerror or exc})") from None


class CellStore:
    """A study's results file: named cells under fixed settings, resumed, never mixed.

    The file is ``{"settings": ..., "cells": {name: record}, ...}``. Opening
    an existing file with the same settings resumes it (:attr:`cells` holds
    what is finished); settings that differ are refused with the keys that
    differ, so cells of two setups never share a file. Keys listed in
    ``grow`` (a grid's axes, lists of values) may differ: the stored lists
    become the sorted union, so a grid can be extended.

    Parameters
    ----------
    path : str or path, optional
        The file; None keeps everything in memory.
    settings : dict
        JSON-able; ``settings`` itself is updated for the ``grow`` keys.
    grow : sequence of str
    what : str
        The study's name, for messages.
    free : sequence of str
        Keys that may differ without a refusal (settings that only some
        cells use and that those cells' names record, such as a run's length).
    record_keys : sequence of str
        The keys every cell's record has: an existing file is checked for its
        shape before use (its settings an object, its cells an object of
        records with these keys, a ``grow`` key a list), and refused in one
        line naming it otherwise.

    The file is claimed (:func:`claim`) before it is read, so that in a
    :func:`session` (the command line, or a study's ``run_*`` function) a
    second process is refused at once, and a folder that cannot be written is
    refused before the first cell runs, not after it.
    """

    def __init__(self, path, settings, grow=(), what="this study", free=(), record_keys=()):
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
                         if k not in grow and k not in free and old["settings"].get(k) != new.get(k))
        if changed:
            raise ValueError(f"results: {self.path} holds a run with other settings ({', '.join(changed)} "
                             f"differ); use another file or the same settings")
        for key in grow:  # a grid may grow: the cells already run are kept
            settings[key] = sorted(set(settings[key]) | set(old["settings"][key]))
        self.cells = old["cells"]
        self.previous = old

    def read(self, use):
        """Return ``use()``, a function that reads the cells found in the file (the study's summary and
        report of them), called before any work: a file whose cells have the right keys but not the
        right values (a list where a number belongs) is refused now, in one line naming it, instead of
        failing after the first new cell has trained."""
        try:
            return use()
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            if not self.previous:  # nothing was read from a file: a bug, not the file's fault
                raise
            raise ValueError(f"results: {self.path} is not a results file of {self.what} (its cells cannot be "
                             f"read: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); it is "
                             f"left as it is") from None

    def runs(self, command, commit):
        """The list of ``{"command", "commit", "machine"}`` that made the file, this one appended if it is new.

        ``machine`` is :func:`machine_info`: float32 training is chaotic, so a
        cell rerun on a machine whose BLAS kernel or vectorised ``exp`` rounds
        differently follows the same curve for a while and then drifts
        (derivation 15, section 11); the record says where each run was made.
        """
        done = list(self.previous.get("runs", []))
        if not done and "command" in self.previous:
            done = [{"command": self.previous["command"], "commit": self.previous.get("commit")}]
        this = {"command": command, "commit": commit, "machine": machine_info()}
        seen = {b for r in done for b in (r.get("machine") or {}).get("blas", [])}
        other = sorted(seen - set(this["machine"]["blas"]))
        if other and self.path is not None:
            warnings.warn(f"results: {self.path} has cells made with BLAS {', '.join(other)}; this run uses "
                          f"{', '.join(this['machine']['blas']) or 'none found'}, so new cells will not match "
                          f"them bit for bit (OPENBLAS_CORETYPE selects OpenBLAS's kernel)", stacklevel=3)
        return done if this in done else done + [this]

    def save(self, document):
        """Write ``document`` (which holds ``settings`` and ``cells``) atomically, if there is a file.

        Lists of plain values (numbers, booleans, nulls) go on one line each,
        so that a file of curves stays small and still reads and diffs by line.
        """
        if self.path is not None:
            text = (_flat_lists(dumps(document, indent=1)) + "\n").encode("utf-8")
            atomic_write(self.path, lambda fh: fh.write(text))


def _cell_document(path, what, grow, record_keys):
    """The document of an existing :class:`CellStore` file, checked for its shape before any use; else one
    ``ValueError`` naming the file (never a Python message about a list, a string or a missing key)."""

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


def make_folder_for(path, option):
    """Make the folder of the file ``path`` (and those above it) if missing, or one line naming
    ``option`` and ``path``: a part of the folder is a file, or it cannot be made."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        os.makedirs(folder, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"{option}: cannot write {os.fspath(path)!r}: a part of its folder is a file") from None
    except OSError as exc:
        raise ValueError(f"{option}: cannot write {os.fspath(path)!r} ({exc.strerror or exc})") from None


def check_results_path(path, option):
    """Check, before any work, that ``path`` can be a results file, and claim it (:func:`claim`):
    a non-empty name of a file (not a folder) in a folder that exists or can be made, and that
    no other run is writing; else one line naming ``option`` and the path."""
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
    """What two names of one file share (also of a file not made yet): the real path of its folder, and its name."""
    name = os.fspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(name))), os.path.basename(name))


def check_distinct(named):
    """Refuse, before any work, two options that name one file: ``named`` is ``[(option, path), ...]`` of
    every file a command reads or writes (the outputs' own files and the inputs). A results file given
    both as ``--results`` and inside ``--out`` would be overwritten by the other before the run began.

    Raises
    ------
    ValueError
        One line naming both options and the file.
    """
    seen = {}
    for option, path in named:
        try:  # an existing file by its inode: a hard link is the same file under another name
            st = os.stat(path)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = same_file_key(path)
        if key in seen and seen[key][0] != option:
            first, where = seen[key]
            raise ValueError(f"{option}: names the same file as {first} ({where!r}); give the two different "
                             f"files, so that neither overwrites the other")
        seen.setdefault(key, (option, os.fspath(path)))


def machine_info():
    """What decides a float run's rounding: CPU, NumPy version and the BLAS NumPy loaded.

    Returns
    -------
    dict
        ``cpu`` (the model name Linux reports, else :func:`platform.processor`
        or the architecture), ``numpy``, and ``blas``: one
        ``"library version (kernel)"`` string per BLAS that threadpoolctl sees.
    """
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


_PLAIN_LIST = re.compile(r"\[\s*((?:-?[\d.eE+-]+|null|true|false)(?:,\s*(?:-?[\d.eE+-]+|null|true|false))*)\s*\]")


def _flat_lists(text):
    """JSON text with every list of plain values on one line (the values themselves untouched)."""
    return _PLAIN_LIST.sub(lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text)


def available_memory():
    """Bytes of memory available to a new allocation now (Linux's ``MemAvailable``), else
    the machine's physical memory, else ``None`` where neither can be read."""
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
    """Refuse, before any work, a run whose estimated peak memory exceeds the limit.

    Parameters
    ----------
    estimate : int
        The run's estimated peak, in bytes.
    what : str
        The sizes that make it, for the message (``"--seeds 1000 --context 4096"``).
    limit : float, optional
        The limit in GiB (the command line's ``--max-memory``); default: the
        memory available now (:func:`available_memory`).

    Raises
    ------
    MemoryError
        With the estimate, the limit and how to override it.
    """
    if limit is not None:
        if not (isinstance(limit, (int, float)) and math.isfinite(limit) and limit > 0):
            raise ValueError(f"--max-memory: expected a positive number of GiB, got {limit!r}")
        cap, source, advice = limit * 2**30, "allowed by --max-memory", "raise --max-memory"
    else:
        cap, source, advice = available_memory(), "available now", "pass --max-memory GIB to run anyway"
        if cap is None:
            return
    if estimate > cap:
        raise MemoryError(f"{what} needs about {format_bytes(estimate)} of memory, more than the "
                          f"{format_bytes(cap)} {source}; ask for less, or {advice}")
