"""The process that runs a student's answer, apart from the grader.

The grader (:mod:`refattn.exercises.runner`) starts this file's text as
``python -I -S -c TEXT FD`` in a fresh folder that holds a copy of the answer
file alone; where the grader runs as root, as another user, under resource
limits and, where the system allows it, in a folder tree of its own
(:mod:`refattn.exercises.isolation`). It imports the standard library and
NumPy only -- never refattn -- and does one thing: it calls the answer's
functions on the inputs the grader chose and sends back what they returned.
It checks nothing. Every comparison happens in the grader's own process, after
this one has ended, so nothing an answer does here (monkeypatching NumPy, a
library, or this file) can change a verdict; at most it can change the numbers
it returns, which the grader then judges.

Protocol
--------
The input arrives on standard input, as two frames: a JSON one holding
``sys_path``, the guard's settings and the jobs (one per answer file: its
source, the names it must define, and its calls, all of one group: public
or hidden, never both), with every array replaced by ``{"a": key}``, and a
bytes one holding an ``.npz`` of those arrays (read with
``allow_pickle=False``). Nothing is written to disk, and the guard's folder
names are dropped once turned into (device, inode) pairs: an answer finds no
input on disk and no list of the forbidden folders. ``FD`` is the write end
of a pipe on which this process sends frames of the same form, each a 4-byte
big-endian length, one byte of kind (``J`` JSON, ``B`` bytes) and the payload:

* ``{"ready": true}`` once NumPy is imported and the guard is armed;
* ``{"start": key}`` before an answer is loaded, ``{"call": [group, i]}``
  before each call (so that a hang or an exit can be blamed on a function);
* ``{"done": key, "manifest": ...}`` followed by a ``B`` frame holding an
  ``.npz`` of the returned arrays.

An answer's ``print`` goes to a buffer per group of calls (``import``, and
the run's group, ``public`` or ``hidden``), returned in the manifest; what
reaches the real stdout and stderr (C code, ``os.write``) the grader reads
apart.

The guard
---------
Before the answer is loaded, :func:`arm` adds an audit hook
(:func:`sys.addaudithook`; it cannot be removed) that refuses, and records:

* importing a module named in the rule (refattn, autograd, jax, torch,
  tensorflow, sympy), by any route that imports by name;
* opening any file inside the forbidden folders (the refattn package with
  its model solutions, those libraries' folders, the repository's history),
  by any path: the check follows symbolic links and walks up the real
  directory chain with ``os.stat``, so ``..``, links and ``/proc/self/root``
  lead to the same verdict; ``os.open`` must use an absolute path (a
  directory descriptor would hide where the file is); the memory files of
  ``/proc`` (``mem``, ``maps``, ``pagemap``), of this process too;
* writing, renaming or deleting any file; starting a process (``os.fork``,
  ``subprocess``, ``os.system``, ``os.exec*``, ``posix_spawn``); sockets;
  ``ctypes``; signals to other processes; replacing the code or defaults
  of the guard's own functions (the hook keeps its settings in its own
  defaults, bound to the builtins it uses, so rebinding ``os.stat`` or
  ``builtins`` does not blind it). Other functions' defaults are left alone:
  the standard library and NumPy set some while they import.

This is a guard against delegation, written in Python: a convenience, not a
security boundary. Code that writes the interpreter's memory (NumPy striding
over memory it does not own) can remove the hook. Where the grader runs as
root, the boundary is the operating system's (another user, resource limits,
no access to the grader's files or memory); on a student's own machine the
guard is all there is, and what it guards is the student's own practice.
"""

import io
import json
import os
import struct
import sys

__all__ = ["encode", "decode", "pack_arrays", "unpack_arrays", "draw", "FRAME_JSON", "FRAME_BYTES", "MAX_FRAME",
           "ARRAY_DTYPES", "MAX_DECODED_VALUES"]

FRAME_JSON, FRAME_BYTES = b"J", b"B"
#: The largest frame the grader reads (a bigger one is a broken answer).
MAX_FRAME = 64 * 2 ** 20
#: The dtypes an array may have on the pipe (little-endian, plain numbers and booleans).
ARRAY_DTYPES = ("|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "<c8", "<c16")
#: What an answer may print per group before the rest is dropped (characters).
MAX_PRINTED = 20_000
#: How deep a returned value may nest (tuples of dicts of arrays...).
MAX_DEPTH = 6
#: The most numbers a report may decode to, an array counted once for every place that names it (a
#: report naming one array a thousand times is a thousand arrays to the judge, which reads each).
MAX_DECODED_VALUES = 16 * 2 ** 20
#: The Python number types a report may name, and how each is rebuilt from its 0-d array.
_PY_NUMBERS = {"int": int, "float": float, "complex": complex}


# ------------------------------------------------------------------------------
# Values <-> JSON trees plus arrays (no pickle on either side)
# ------------------------------------------------------------------------------


def encode(x, arrays, depth=0, max_text=200):
    """A JSON-able tree for ``x``, its arrays put in ``arrays`` (a dict key -> ndarray).

    Arrays, NumPy scalars and Python numbers become ``{"a": key}`` (with
    ``"py"`` naming a Python number's type); tuples ``{"t": [...]}``, lists
    ``{"l": [...]}``, dicts with string keys ``{"d": {...}}``, ``None``
    ``{"n": 0}``, strings ``{"s": ...}`` (cut at ``max_text`` characters; ``None``: whole), bools
    ``{"b": ...}``; anything else ``{"o": type name}``.
    """
    import numpy as np  # noqa: PLC0415  (the child imports NumPy after setting sys.path)

    if depth > MAX_DEPTH:
        return {"o": "a value nested too deep"}
    if x is None:
        return {"n": 0}
    if isinstance(x, bool):
        return {"b": bool(x)}
    if isinstance(x, str):
        return {"s": str(x)[:max_text]}
    if isinstance(x, (int, float, complex, np.ndarray, np.generic)):
        try:
            a = np.array(x)
        except Exception:  # noqa: BLE001  (an int too large for int64, a broken subclass)
            return {"o": type(x).__name__}
        if a.dtype.kind not in "biufc":
            return {"o": f"array of dtype {a.dtype}"}
        if a.dtype.newbyteorder("<").str not in ARRAY_DTYPES:  # long double and the like: as the grader reads
            a = a.astype({"f": np.float64, "c": np.complex128, "i": np.int64, "u": np.uint64}[a.dtype.kind])
        key = f"a{len(arrays)}"
        arrays[key] = a
        node = {"a": key}
        py = {int: "int", float: "float", complex: "complex"}.get(type(x))
        if py is not None:  # a subclass (named as it likes) travels as its array
            node["py"] = py
        return node
    if isinstance(x, (tuple, list)):
        return {"t" if isinstance(x, tuple) else "l": [encode(v, arrays, depth + 1, max_text) for v in x][:1000]}
    if isinstance(x, dict):
        if not all(isinstance(k, str) for k in x):
            return {"o": "dict with keys that are not strings"}
        return {"d": {k: encode(v, arrays, depth + 1, max_text) for k, v in list(x.items())[:1000]}}
    return {"o": type(x).__name__}


def pack_arrays(arrays, _len=len, _str=str, _list=list) -> bytes:  # builtins bound: an answer may rebind them
    """``arrays`` (a dict key -> ndarray) as one payload: a 4-byte length, a JSON list of
    ``[key, dtype, shape]`` and the arrays' raw bytes in that order (C order, little-endian).
    No compression and no pickle: the reader allocates exactly what it received."""
    import numpy as np  # noqa: PLC0415

    header, parts = [], []
    for key, a in arrays.items():
        a = np.asarray(a)
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into one of shape (1,))
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        header.append([_str(key), a.dtype.str, _list(a.shape)])
        parts.append(a.tobytes())
    head = json.dumps(header).encode()
    return struct.pack(">I", _len(head)) + head + b"".join(parts)


def unpack_arrays(payload) -> dict:
    """The arrays of :func:`pack_arrays`, checked before anything is allocated: every dtype one of
    :data:`ARRAY_DTYPES`, every shape a list of non-negative ints, and the sizes they declare adding
    up to exactly the bytes received. ``ValueError`` for anything else."""
    import numpy as np  # noqa: PLC0415

    if len(payload) < 4:
        raise ValueError("no array header")
    (n,) = struct.unpack(">I", payload[:4])
    if n > len(payload) - 4 or n > 4 * 2 ** 20:
        raise ValueError("an array header longer than the arrays")
    header = json.loads(payload[4:4 + n].decode())
    if not isinstance(header, list):
        raise ValueError("an array header that is not a list")
    out, at, data = {}, 4 + n, memoryview(payload)
    for item in header:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and item[1] in ARRAY_DTYPES
                and isinstance(item[2], list) and len(item[2]) <= 32
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in item[2])):
            raise ValueError("an array of another dtype or shape than plain numbers")
        dtype = np.dtype(item[1])
        size = dtype.itemsize
        for d in item[2]:
            size *= d
            if size > len(payload):
                raise ValueError("an array larger than what was sent")
        if at + size > len(payload):
            raise ValueError("an array larger than what was sent")
        out[item[0]] = np.frombuffer(data[at:at + size], dtype=dtype).reshape(tuple(item[2])).copy()
        at += size
    if at != len(payload):
        raise ValueError("bytes beyond the arrays")
    return out


class Opaque:
    """A returned value that is not numbers, containers of numbers, None, a bool or a str."""

    def __init__(self, what):
        self.what = what

    def __repr__(self):
        return f"<{self.what}>"


def decode(node, arrays, depth=0, budget=None):
    """The value :func:`encode` described; unknown or malformed nodes become :class:`Opaque`.

    Never raises on what a node holds (a number that is not one, ``int`` of an infinity: an
    :class:`Opaque`), except for ``budget``: a one-item list of how many numbers may still be
    decoded (each array counted at every reference to it), whose exhaustion raises ``ValueError``
    (a report too large to judge, however few bytes it took).
    """
    if depth > MAX_DEPTH + 1 or not isinstance(node, dict) or len(node) not in (1, 2):
        return Opaque("a malformed value")
    if "a" in node:
        a = arrays.get(node["a"]) if isinstance(node["a"], str) else None
        if a is None:
            return Opaque("a missing array")
        if budget is not None:
            budget[0] -= max(int(a.size), 1)
            if budget[0] < 0:
                raise ValueError(f"a report of more than {MAX_DECODED_VALUES} numbers, counting each "
                                 f"reference to an array")
        py = node.get("py")
        if py in _PY_NUMBERS and a.ndim == 0:
            try:
                return _PY_NUMBERS[py](a.item())
            except Exception:  # noqa: BLE001 - int(inf), float of a complex: the answer's value, not a number
                return Opaque(f"a {py} that is not one")
        return a
    if "t" in node or "l" in node:
        items = node.get("t", node.get("l"))
        if not isinstance(items, list):
            return Opaque("a malformed value")
        values = [decode(v, arrays, depth + 1, budget) for v in items]
        return tuple(values) if "t" in node else values
    if "d" in node:
        d = node["d"]
        return {str(k): decode(v, arrays, depth + 1, budget) for k, v in d.items()} if isinstance(d, dict) \
            else Opaque("a malformed value")
    if "n" in node:
        return None
    if "b" in node:
        return bool(node["b"])
    if "s" in node:
        return str(node["s"])
    if "o" in node:
        return Opaque(str(node["o"])[:80])
    return Opaque("a malformed value")


def draw(spec):
    """The array of a drawn input (:class:`refattn.exercises.judge.Drawn`): ``scale`` times standard
    normal numbers of ``shape`` from the seed, every ``zero_every``-th entry of the last axis 0."""
    import numpy as np  # noqa: PLC0415

    shape = tuple(int(n) for n in spec["shape"])
    a = float(spec["scale"]) * np.random.default_rng([int(v) for v in spec["seed"]]).standard_normal(shape)
    every = int(spec.get("zero_every", 0))
    if every > 0:
        a[..., ::every] = 0.0
    return a


# ------------------------------------------------------------------------------
# The guard
# ------------------------------------------------------------------------------


def _is_forbidden(p, _lstat=os.lstat, _stat=os.stat, _readlink=os.readlink, _files=frozenset(),
                  _dirs=frozenset(), _root=None, _rfind=str.rfind, _startswith=str.startswith,
                  _OSError=OSError, _range=range, _IFMT=0o170000, _IFLNK=0o120000, _IFDIR=0o040000):
    """True when the path ``p`` (a str) names a forbidden file or lies in a forbidden folder.

    The file's own symbolic links are followed one by one; then its folder
    and every folder above it (``d``, ``d/..``, ``d/../..``: the kernel
    resolves each, links included) is compared by (device, inode) with the
    forbidden folders. Settings are bound as defaults (see :func:`arm`).
    """
    for _ in _range(32):
        try:
            st = _lstat(p)
        except _OSError:
            break  # not there (yet): only its folder decides
        if (st.st_mode & _IFMT) != _IFLNK:
            key = (st.st_dev, st.st_ino)
            if key in _files or ((st.st_mode & _IFMT) == _IFDIR and key in _dirs):
                return True
            break
        target = _readlink(p)
        if not _startswith(target, "/"):
            i = _rfind(p, "/")
            target = (p[:i + 1] if i >= 0 else "") + target
        p = target
    else:
        return True  # a loop of links
    i = _rfind(p, "/")
    d = p[:i] if i > 0 else ("/" if i == 0 else ".")
    for _ in _range(512):
        try:
            st = _stat(d)
        except _OSError:
            return False  # no such folder: nothing to open there
        key = (st.st_dev, st.st_ino)
        if key in _dirs:
            return True
        if key == _root:
            return False
        d = d + "/.."
    return True


#: What the guard refuses besides opening files and importing, by audit event prefix, and what doing it is called.
REFUSED_EVENTS = (
    (("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty."),
     "starting a process"),
    (("ctypes.",), "calling C code through ctypes"),
    (("socket.", "webbrowser."), "using the network"),
    (("os.kill", "os.killpg", "signal.pthread_kill"), "signalling a process"),
    (("os.link", "os.symlink", "os.rename", "os.replace", "os.remove", "os.unlink", "os.rmdir", "os.mkdir",
      "os.chmod", "os.chown", "os.truncate", "os.utime", "os.mkfifo", "os.mknod", "os.setxattr",
      "os.removexattr", "os.chflags", "shutil.", "os.putenv", "os.unsetenv"), "changing files"),
)


def _open_refusal(args, _check=None, _writes=0, _proc=(), _memory=(), _type=type, _str=str, _bytes=bytes,
                  _int=int, _decode=bytes.decode, _startswith=str.startswith, _endswith=str.endswith, _any=any):
    """Why the guard refuses the ``open`` audit event with ``args``, or ``None`` (settings bound as
    defaults by :func:`arm`, as :func:`_is_forbidden`'s are)."""
    path, mode, flags = args
    t = _type(path)
    if t is _int:
        return None  # a descriptor already open
    if t is _bytes:
        path = _decode(path, "utf-8", "surrogateescape")
    elif t is not _str:
        return f"opening a file by a {t.__name__} path (use a str)"
    if flags is not None and flags & _writes:
        return f"writing the file {path!r}"
    if mode is None and not _startswith(path, "/"):
        return f"os.open with the relative path {path!r}"
    if _startswith(path, "/proc/") and not _startswith(path, _proc):
        return f"opening {path!r} (another process's files)"
    if _startswith(path, "/proc/") and _any(_endswith(path, m) for m in _memory):
        return f"opening {path!r} (a process's memory)"
    if _check(path):
        return f"reading {path!r}, a file of the library"
    return None


def _neuter_fork_exec(rule, log) -> tuple:
    """subprocess and multiprocessing reach ``fork_exec``, which is not audited: replace it with a
    refusal; return the code objects the guard must protect (its replacement's)."""
    try:
        import _posixsubprocess  # noqa: PLC0415
        import subprocess  # noqa: PLC0415
    except ImportError:  # pragma: no cover - a platform without it
        return ()

    def no_fork_exec(*args, **kwargs):
        message = f"refused: starting a process. {rule}"
        log.append(message)
        raise PermissionError(message)

    _posixsubprocess.fork_exec = no_fork_exec
    subprocess._fork_exec = no_fork_exec
    return (no_fork_exec.__code__,)


def arm(rule, modules, dirs, files, log):
    """Add the audit hook that enforces ``rule`` (the module docstring lists what it refuses).

    ``modules``: top-level module names refused; ``dirs``/``files``: (device,
    inode) pairs of forbidden folders and files; ``log``: a list that each
    refusal's message is appended to (the harness reads it after each call:
    a refusal the answer caught still counts). Returns nothing; the hook
    cannot be removed.
    """
    root = os.stat("/")
    check, opener = _is_forbidden, _open_refusal
    check.__defaults__ = (os.lstat, os.stat, os.readlink, frozenset(files), frozenset(dirs),
                          (root.st_dev, root.st_ino), str.rfind, str.startswith, OSError, range,
                          0o170000, 0o120000, 0o040000)
    opener.__defaults__ = (check, os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC,
                           ("/proc/self/", "/proc/thread-self/", f"/proc/{os.getpid()}/"),
                           ("/mem", "/maps", "/smaps", "/pagemap", "/syscall", "/environ"), type, str, bytes, int,
                           bytes.decode, str.startswith, str.endswith, any)
    prefixes = tuple(p for ps, _ in REFUSED_EVENTS for p in ps)
    # a second _posixsubprocess (deleted from sys.modules, imported again) would bring fork_exec back
    mods = frozenset(modules) | {"_posixsubprocess"}

    def guard(event, args, _open=opener, _mods=mods, _prefixes=prefixes, _refused=REFUSED_EVENTS, _rule=rule,
              _log=log, _append=list.append, _startswith=str.startswith, _partition=str.partition, _type=type,
              _str=str, _Refused=PermissionError, _code_attrs=frozenset(("__code__", "__defaults__", "__kwdefaults__")),
              _len=len, _getattr=getattr, _any=any, _codes=()):
        what = None
        if event == "open":
            what = _open(args)
        elif event == "import":
            name = args[0]
            if _type(name) is _str and _partition(name, ".")[0] in _mods:
                what = f"importing {name}"
        elif _startswith(event, _prefixes):
            for ps, name in _refused:
                if _startswith(event, ps):
                    what = f"{name} ({event})"
        elif event == "object.__setattr__" and _len(args) > 1 and args[1] in _code_attrs and \
                _any(_getattr(args[0], "__code__", None) is c for c in _codes):
            what = f"replacing the guard's {args[1]}"
        if what is not None:
            message = f"refused: {what}. {_rule}"
            _append(_log, message)
            raise _Refused(message)

    codes = _neuter_fork_exec(rule, log)
    # the code objects of the guard's own functions, in a tuple in its own defaults: nothing an answer
    # reaches (gc included) can change which functions are protected
    guard.__defaults__ = guard.__defaults__[:-1] + ((guard.__code__, check.__code__, opener.__code__, *codes),)
    sys.addaudithook(guard)


# ------------------------------------------------------------------------------
# Running the answers
# ------------------------------------------------------------------------------


class _Printed(io.TextIOBase):
    """A text stream that keeps the first :data:`MAX_PRINTED` characters and counts the rest."""

    def __init__(self):
        self.parts, self.kept, self.dropped = [], 0, 0

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        room = MAX_PRINTED - self.kept
        self.parts.append(text[:max(room, 0)])
        self.kept += min(len(text), max(room, 0))
        self.dropped += max(len(text) - max(room, 0), 0)
        return len(text)

    def value(self):
        text = "".join(self.parts)
        return text + (f"\n[... {self.dropped} more characters]" if self.dropped else "")


class _Table:
    """An activation offered as a table: its elementwise functions at the one ``s`` given.

    Exercise 04 hands the answer an ``act`` whose methods (``g``, ``h``,
    ``p``, ``rho``, ...) the grader evaluated in its own process; here each
    method returns that value when called with the same scores and refuses
    any other argument. Nothing in it computes.
    """

    def __init__(self, name, s, values):
        self.name, self._s, self._values = name, s, values

    def __getattr__(self, key):
        values = self.__dict__.get("_values", {})
        if key not in values:
            raise AttributeError(f"the act given to jacobian offers only {', '.join(values)}; not {key!r}")

        def method(s, *args, **kwargs):
            import numpy as np  # noqa: PLC0415

            if args or kwargs or np.shape(s) != self._s.shape or not np.array_equal(np.asarray(s), self._s):
                raise ValueError(f"act.{key} is a table of values at the scores given to jacobian; "
                                 f"call it with those scores only")
            return values[key].copy()

        return method


def _inputs(node, arrays):
    """A call's argument: :func:`decode`, a fresh copy of every array, tables as :class:`_Table` and
    drawn arrays (:func:`draw`) drawn here."""
    import numpy as np  # noqa: PLC0415

    if isinstance(node, dict) and "table" in node:
        t = node["table"]
        return _Table(t["name"], np.array(arrays[t["s"]]), {k: np.array(arrays[v]) for k, v in t["values"].items()})
    if isinstance(node, dict) and "drawn" in node:
        return draw(node["drawn"])
    if isinstance(node, dict) and isinstance(node.get("d"), dict):
        return {str(k): _inputs(v, arrays) for k, v in node["d"].items()}
    return _copy(decode(node, arrays))


def _copy(value):
    import numpy as np  # noqa: PLC0415

    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _error(exc):
    first = str(exc).splitlines()[0] if str(exc) else ""
    return {"type": type(exc).__name__, "message": first[:300]}


def _send(fd, kind, payload, _len=len):  # builtins bound: an answer may rebind them
    data = struct.pack(">I", _len(payload) + 1) + kind + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _send_json(fd, obj):
    _send(fd, FRAME_JSON, json.dumps(obj, allow_nan=False).encode())


def _capture(manifest):
    """``capture(group, fn)``: run ``fn`` with what it prints kept in ``manifest["printed"][group]``."""
    stdout, stderr = sys.stdout, sys.stderr

    def capture(group, fn):
        printed = _Printed()
        sys.stdout = sys.stderr = printed
        try:
            return fn()
        finally:
            sys.stdout, sys.stderr = stdout, stderr
            text = printed.value()
            if text:
                manifest["printed"][group] = text

    return capture


def _attempt(manifest, log, where, fn, _len=len, _repr=repr):  # builtins bound: an answer may rebind them
    """Run ``fn`` (the answer's code): the exception it raised, or ``None``. ``sys.exit`` and a
    refusal of the guard (caught or not) are fatal: recorded in ``manifest["fatal"]``."""
    seen, raised = _len(log), None
    try:
        fn()
    except SystemExit as exc:
        manifest["fatal"] = {"what": "exit", "where": where, **_error(exc), "code": _repr(exc.code)[:80]}
    except BaseException as exc:  # noqa: BLE001 - the answer's code: anything is a wrong answer
        raised = exc
    if _len(log) > seen:
        manifest["fatal"] = {"what": "refused", "where": where, "message": log[seen]}
    return raised


def _make_calls(group, module, arrays, fd, log, manifest, capture, out_arrays, _getattr=getattr):
    """Make the calls of one group on the loaded ``module``; their results, one per call made."""
    results = []
    for i, c in enumerate(group["calls"]):
        _send_json(fd, {"call": [group["name"], i]})
        holder = {}

        def one(c=c, holder=holder):
            if c.get("attr"):
                holder["value"] = _getattr(module, c["fn"])
                return
            args = [_inputs(a, arrays) for a in c["args"]]
            kwargs = {k: _inputs(v, arrays) for k, v in c["kwargs"].items()}
            holder["value"] = _getattr(module, c["fn"])(*args, **kwargs)

        raised = _attempt(manifest, log, c["fn"], lambda one=one: capture(group["name"], one))
        if "fatal" in manifest:
            break
        if raised is not None:
            results.append({"error": _error(raised)})
            continue
        try:
            results.append({"value": encode(holder["value"], out_arrays)})
        except BaseException as exc:  # noqa: BLE001 - a value whose methods raise
            results.append({"error": {"type": "a value the grader cannot read", "message": _error(exc)["message"]}})
    return results


def _run_job(job, arrays, fd, log, len=len, sorted=sorted, vars=vars, callable=callable):  # noqa: A002
    """Load one answer and make its calls; send the ``done`` frame and the arrays of its values."""
    import linecache  # noqa: PLC0415
    import types  # noqa: PLC0415

    key, path, source = job["key"], job["path"], job["source"]
    manifest = {"done": key, "printed": {}, "defined": [], "groups": {}}
    out_arrays, capture = {}, _capture(manifest)
    # the answer's source lines, for its own tracebacks and warnings: no file read needed
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    module = types.ModuleType("__answer__")
    module.__file__ = path
    sys.modules["__answer__"] = module

    def load():
        code = compile(source, path, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - running the answer is the point

    raised = _attempt(manifest, log, "import", lambda: capture("import", load))
    if raised is not None and "fatal" not in manifest:
        manifest["fatal"] = {"what": "raised", "where": "import", **_error(raised)}
    if "fatal" not in manifest:
        manifest["defined"] = sorted(k for k, v in vars(module).items() if not k.startswith("__"))
        manifest["callable"] = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("__"))
        for group in job["groups"]:
            manifest["groups"][group["name"]] = _make_calls(group, module, arrays, fd, log, manifest, capture,
                                                            out_arrays)
            if "fatal" in manifest:
                break
    sys.modules.pop("__answer__", None)
    _send_json(fd, manifest)
    _send(fd, FRAME_BYTES, pack_arrays(out_arrays))


def _inodes(paths) -> set:
    """The (device, inode) pairs of the ``paths`` that exist."""
    out = set()
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out


def _read_frames(fd, count):
    """``count`` frames from the descriptor ``fd`` (standard input): the grader's input."""
    frames, buf = [], b""
    while len(frames) < count:
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            data = os.read(fd, 1 << 20)
            if not data:
                raise EOFError("the grader's input ended early")
            buf += data
        n = struct.unpack(">I", buf[:4])[0]
        kind, payload, buf = buf[4:5], buf[5:4 + n], buf[4 + n:]
        frames.append(json.loads(payload.decode()) if kind == FRAME_JSON else payload)
    return frames


def _read_input(fd):
    """The jobs, their arrays and the guard's (device, inode) pairs, read from the grader's two
    frames on ``fd``: nothing of them is on disk, and the folder names are dropped once turned
    into inodes."""
    spec, blob = _read_frames(fd, 2)
    sys.path[:] = spec.pop("sys_path")
    arrays = unpack_arrays(blob)
    guard = spec.pop("guard")
    if guard.get("off"):  # the tests of the operating system's boundary alone
        return spec["jobs"], arrays, None
    walked = [os.path.join(base, n) for d in guard.pop("walk") for base, _, names in os.walk(d) for n in names]
    dirs = _inodes(guard.pop("dirs"))
    files = _inodes(walked + guard.pop("files"))  # the package's files by inode (hard links), and single files
    return spec["jobs"], arrays, (guard["rule"], guard["modules"], dirs, files)


def main(argv):
    """``python -I -S -c TEXT FD``: run every job of the input on standard input, report on ``FD``."""
    fd = int(argv[-1])
    jobs, arrays, settings = _read_input(0)
    del argv[1:]
    sys.dont_write_bytecode = True
    import warnings  # noqa: PLC0415

    def show(message, category, filename, lineno, file=None, line=None):  # no source lookup
        (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line=""))

    warnings.showwarning = show
    log = []
    if settings is not None:
        arm(*settings, log)
    _send_json(fd, {"ready": True})
    import signal  # noqa: PLC0415

    for job in jobs:
        signal.alarm(0)  # an alarm one answer set does not go off in the next
        _send_json(fd, {"start": job["key"]})
        _run_job(job, arrays, fd, log)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
