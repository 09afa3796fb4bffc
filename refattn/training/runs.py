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
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import threading
import warnings
from collections.abc import Mapping

import numpy as np
from threadpoolctl import threadpool_info

from ..core.backend import to_numpy

__all__ = ["jsonable", "dumps", "atomic_write", "ResultsFile", "CellStore", "machine_info", "available_memory",
           "check_memory", "format_bytes"]


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


def atomic_write(path, write):
    """Call ``write(fh)`` on a binary temporary file beside ``path``, then move it over ``path``.

    The temporary name is this process's and thread's, so two writers sharing a
    path never write into one temporary file; :func:`os.replace` makes the
    newest complete file the one at ``path``, and an interrupted write leaves
    the previous file intact (and no temporary behind)."""
    tmp = f"{path}.partial-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class ResultsFile:
    """A JSON file that holds a run's finished pieces as they finish.

    ``{"command": ..., "complete": false, "finished": {key: result, ...}}``
    while the run goes on; :meth:`complete` replaces it with
    ``{"command": ..., "complete": true, "result": ...}``. Every write goes to
    a temporary file first and is moved over ``path`` (:func:`os.replace`), so
    the file is always whole: the last finished piece, never half of one.

    Parameters
    ----------
    path : str or path
        The file (its folder must exist and be writable).
    command : list of str
        The command line, stored so the file says how it was made.
    """

    def __init__(self, path, command):
        self.path = os.fspath(path)
        self.command = list(command)
        self.finished: dict = {}
        self._lock = threading.Lock()
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
    """

    def __init__(self, path, settings, grow=(), what="this study", free=()):
        self.path = None if path is None else os.fspath(path)
        self.settings = settings
        self.cells: dict = {}
        self.previous: dict = {}  # the document found in the file, if any
        if self.path is None or not os.path.exists(self.path):
            return
        with open(self.path, encoding="utf-8") as fh:
            try:
                old = json.load(fh)
            except json.JSONDecodeError as exc:
                raise ValueError(f"results: {self.path} is not a results file of {what} ({exc})") from None
        if not isinstance(old, dict) or not isinstance(old.get("settings"), dict) or "cells" not in old:
            raise ValueError(f"results: {self.path} is not a results file of {what}")
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
