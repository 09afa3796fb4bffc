"""Where an answer runs: as another user, alone, under limits, where the grader runs as root.

The threat is a student who reads all of this code and has root on their own
machine. A guard written in Python (the audit hook of
:mod:`refattn.exercises._child`) is a convenience: code that writes the
interpreter's memory can switch it off. The boundary is the operating
system's, and it exists where the grader runs as root (Gradescope always does;
``refattn exercises check`` and ``try-gradescope`` when started as root):

* **Another user.** Each answer runs as :data:`ANSWER_USER` (created with
  ``useradd`` when missing; ``setup.sh`` creates it on Gradescope), with no
  supplementary groups, ``no_new_privs`` set, in a session of its own.
* **Alone.** Its folder tree is a *jail* made for the run: a copy (hard links
  where the file system allows) of the interpreter, the shared libraries it
  and NumPy load, the standard library (without its tests, IDLE and Tk) and
  NumPy, plus a folder ``/work`` holding a copy of the answer file alone.
  Where ``chroot`` is allowed (root in an ordinary container) the answer's
  ``/`` is the jail: the grader's files, the library, autograd, the model
  solutions, ``/proc`` and every other file of the machine are out of reach,
  whatever their permissions. Where it is not, the jail's interpreter runs in
  place, and what every user of the machine may read stays readable; the
  grader's own folders (an autograder's ``source``, ``submission``,
  ``results`` and its environment) are made readable by root alone.
* **Limits.** Address space (:data:`MEMORY_LIMIT`), CPU seconds (the time
  limit plus :data:`CPU_MARGIN_S`), one process (no ``fork``), files of size 0
  (nothing written), few open files, no core dumps; the process is killed
  when the grader dies (``PR_SET_PDEATHSIG``).
* **Nothing left behind.** When a case ends, every process of the answer user
  is killed (a process of that user signals ``kill(-1, SIGKILL)``), so nothing
  outlives the grader.
* **Memory.** The grader is another user's (root's) and not dumpable: the
  answer's user cannot read its memory. Expected values are computed only
  after the answer's process has ended, so none is in memory while it runs.

A network namespace (no network for the answer) is added where the kernel
allows it; an ordinary container may not, and then an answer whose Python
guard was switched off could use the network. :func:`prepare` records what the
run had (:meth:`Isolation.describe`), which ``results.json`` reports.

Where the grader is not root (a student's own machine), none of this is
possible: the answer runs as the same user, under the same limits and the
Python guard, and the run's description says so.

This module imports the standard library only: the handout's checker carries
it, and uses the part that needs no root.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

__all__ = ["ANSWER_USER", "MEMORY_LIMIT", "CPU_MARGIN_S", "Isolation", "prepare", "answer_user"]

#: The unprivileged user answers run as where the grader is root (a fixed name: ``setup.sh`` creates it).
ANSWER_USER = "refattn-answer"
#: Bytes of address space an answer's process may map (Python, NumPy and its inputs need about 0.5 GiB).
MEMORY_LIMIT = 2 * 2 ** 30
#: CPU seconds an answer's process has beyond its time limit (starting Python and NumPy).
CPU_MARGIN_S = 10
#: Files an answer's process may hold open.
OPEN_FILES = 64
#: The lock that lets one grading run at a time use the answer user (each run kills every process of
#: that user when a case ends, so two runs at once would kill each other's answers).
LOCK_NAME = "refattn-answer.lock"
#: Folders every user may write into: what the answer user leaves there is removed (without a jail).
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
#: The jail's folder of the answers' own folders (a name no system uses).
WORK = "/refattn-answer-work"
#: Folders of the standard library left out of the jail: tests, IDLE, Tk, installers.
STDLIB_SKIP = frozenset({"site-packages", "dist-packages", "test", "tests", "idlesupport", "idlelib", "tkinter",
                         "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "__phello__"})

_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS, _PR_SET_DUMPABLE, _PR_SET_SECCOMP = 1, 38, 4, 22
_SECCOMP_MODE_FILTER = 2
_CLONE_NEWNET = 0x40000000

#: System calls refused (EPERM) by the answer's seccomp filter, by architecture (``AUDIT_ARCH_*``): sockets
#: (the network, and talking to any process), tracing and reading other processes' memory, namespaces and
#: mounts, BPF, io_uring (which can open sockets), perf events, userfaultfd, the kernel's keyrings.
SECCOMP_DENIED = {
    0xC000003E: {"socket": 41, "socketpair": 53, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
                 "unshare": 272, "setns": 308, "mount": 165, "bpf": 321, "io_uring_setup": 425,
                 "io_uring_enter": 426, "io_uring_register": 427, "perf_event_open": 298, "userfaultfd": 323,
                 "keyctl": 250, "add_key": 248, "request_key": 249, "personality": 135},  # x86_64
    0xC00000B7: {"socket": 198, "socketpair": 199, "ptrace": 117, "process_vm_readv": 270,
                 "process_vm_writev": 271, "unshare": 97, "setns": 268, "mount": 40, "bpf": 280,
                 "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "perf_event_open": 241,
                 "userfaultfd": 282, "keyctl": 219, "add_key": 217, "request_key": 218, "personality": 92},  # aarch64
}
_MACHINE_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program():
    """The answer's seccomp filter (classic BPF), or ``None`` on an architecture it does not know: the
    system calls of :data:`SECCOMP_DENIED` return EPERM, as does any x32 system call on x86_64; the rest
    are allowed. ``(program, its filters)``: keep both alive while the program is used."""
    import platform  # noqa: PLC0415

    arch = _MACHINE_ARCH.get(platform.machine())
    if arch is None:
        return None
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    numbers = sorted(SECCOMP_DENIED[arch].values())
    n = len(numbers)
    code = [(ld_w_abs, 0, 0, 4),  # A = seccomp_data.arch
            (jeq_k, 0, n + 3, arch),  # a call under another architecture's numbers (int 0x80): to "deny"
            (ld_w_abs, 0, 0, 0),  # A = seccomp_data.nr
            (jge_k, n + 1, 0, 0x40000000)]  # the x32 calls of x86_64: to "deny"
    for i, nr in enumerate(numbers):
        code.append((jeq_k, n - i, 0, nr))  # to "deny"
    code += [(ret_k, 0, 0, allow), (ret_k, 0, 0, deny)]
    filters = (_SockFilter * len(code))(*[_SockFilter(*c) for c in code])
    return _SockFprog(len(code), ctypes.cast(filters, ctypes.POINTER(_SockFilter))), filters


def _install_seccomp(program) -> bool:
    return _LIBC is not None and _LIBC.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) == 0


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:  # pragma: no cover - no C library to call
        return None


_LIBC = _libc()


def _prctl(option, value) -> bool:
    return _LIBC is not None and _LIBC.prctl(option, value, 0, 0, 0) == 0


def answer_user(create=True):
    """``(uid, gid)`` of :data:`ANSWER_USER`, created with ``useradd`` (as root) when missing;
    ``None`` when it neither exists nor can be made."""
    import pwd  # noqa: PLC0415

    try:
        pw = pwd.getpwnam(ANSWER_USER)
    except KeyError:
        if not create or os.geteuid() != 0 or shutil.which("useradd") is None:
            return None
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        "--user-group", ANSWER_USER], capture_output=True, check=False)
        try:
            pw = pwd.getpwnam(ANSWER_USER)
        except KeyError:
            return None
    if pw.pw_uid == 0 or pw.pw_gid == 0:
        return None  # never "isolate" as root
    return pw.pw_uid, pw.pw_gid


# ------------------------------------------------------------------------------
# The jail: a folder tree with what an answer's Python needs, and nothing else
# ------------------------------------------------------------------------------


def _place(src, dst):
    """``dst`` the same file as ``src``: a hard link where allowed, else a copy."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.lexists(dst):
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _replicate(jail, path, depth=0):
    """Make ``path`` (absolute) resolve inside ``jail`` as it does here: every symbolic link on
    the way recreated, the file itself linked or copied."""
    if depth > 16:
        return
    parts = os.path.abspath(path).strip("/").split("/")
    cur = ""
    for i, part in enumerate(parts):
        cur += "/" + part
        dst = jail + cur
        if os.path.islink(cur):
            if not os.path.lexists(dst):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.symlink(os.readlink(cur), dst)
            target = os.path.normpath(os.path.join(os.path.dirname(cur), os.readlink(cur)))
            rest = parts[i + 1:]
            _replicate(jail, os.path.join(target, *rest) if rest else target, depth + 1)
            return
        if i == len(parts) - 1 and os.path.isfile(cur):
            _place(cur, dst)


def _tree(src, dst, skip=frozenset()):
    """Copy the folder ``src`` to ``dst`` by hard links (copies where links fail), without ``skip``."""
    for base, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in skip]
        out = os.path.join(dst, os.path.relpath(base, src))
        os.makedirs(out, exist_ok=True)
        for name in files:
            s = os.path.join(base, name)
            if os.path.islink(s):
                if not os.path.lexists(os.path.join(out, name)):
                    os.symlink(os.readlink(s), os.path.join(out, name))
            elif os.path.isfile(s):
                _place(s, os.path.join(out, name))


def _elf_interpreter(path):
    """The program interpreter (``PT_INTERP``) named in the ELF file ``path``, or ``None``."""
    import struct  # noqa: PLC0415

    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
                return None
            end = "<" if head[5] == 1 else ">"
            phoff, = struct.unpack(end + "Q", head[32:40])
            phentsize, phnum = struct.unpack(end + "HH", head[54:58])
            for k in range(phnum):
                f.seek(phoff + k * phentsize)
                p_type, _, p_offset = struct.unpack(end + "IIQ", f.read(16))
                if p_type == 3:  # PT_INTERP
                    f.seek(p_offset)
                    return f.read(4096).split(b"\0", 1)[0].decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def _mapped_libraries():
    """The shared libraries this process has loaded (the interpreter's and NumPy's), by path."""
    out = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and fields[5].startswith("/") and ".so" in os.path.basename(fields[5]):
                    out.append(fields[5])
    except OSError:  # pragma: no cover - no /proc
        pass
    return list(dict.fromkeys(out))


def build_jail(base):
    """A jail under ``base``: ``(root, python, sys_path)`` for the answer's interpreter, the paths
    as the answer sees them from inside (``chroot`` to ``root``).

    The interpreter is this one's base interpreter (not a virtual environment's), the standard
    library this one's, NumPy the one imported here.
    """
    import numpy  # noqa: PLC0415

    jail = os.path.join(base, "jail")
    os.makedirs(jail)
    os.chmod(jail, 0o755)
    python = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    _replicate(jail, python)
    interp = _elf_interpreter(python)
    if interp:
        _replicate(jail, interp)
    for top in ("/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"):
        if os.path.islink(top) and not os.path.lexists(jail + top):
            os.symlink(os.readlink(top), jail + top)
    numpy_dir = os.path.dirname(numpy.__file__)
    site = os.path.dirname(numpy_dir)
    links = {}
    for lib in _mapped_libraries():
        if lib.startswith(site + os.sep) or "site-packages" in lib or "dist-packages" in lib:
            continue  # NumPy's own come with its folder; other packages' are not the answer's
        _replicate(jail, lib)
        folder = os.path.dirname(lib)
        if folder not in links:  # the names the loader asks for (libstdc++.so.6 -> libstdc++.so.6.0.30)
            try:
                links[folder] = [os.path.join(folder, e) for e in os.listdir(folder)
                                 if os.path.islink(os.path.join(folder, e))]
            except OSError:
                links[folder] = []
        for link in links[folder]:
            if os.path.realpath(link) == lib:
                _replicate(jail, link)
    stdlib = {os.path.dirname(os.__file__)}  # the base interpreter's, also under a virtual environment
    dynload = [p for p in sys.path if p.endswith("lib-dynload") and os.path.isdir(p)]
    for folder in sorted(p for p in stdlib | set(dynload) if p and os.path.isdir(p)):
        _tree(folder, jail + folder, STDLIB_SKIP)
    answer_site = "/refattn-answer-site"
    _tree(numpy_dir, jail + answer_site + "/numpy", frozenset({"tests", "__pycache__"}))
    if os.path.isdir(numpy_dir + ".libs"):
        _tree(numpy_dir + ".libs", jail + answer_site + "/numpy.libs")
    os.makedirs(jail + WORK)
    for base_dir, dirs, _ in os.walk(jail):  # folders the answer's user may enter, never write
        for d in dirs:
            os.chmod(os.path.join(base_dir, d), 0o755)
    paths = [p for p in sys.path if p and (p in stdlib or p in dynload)]
    return jail, python, list(dict.fromkeys(paths + [answer_site]))


# ------------------------------------------------------------------------------
# The isolation of one grading run
# ------------------------------------------------------------------------------


@dataclass
class Isolation:
    """How the answers of one grading run are started, and what isolates them.

    ``level``: ``"os"`` (another user; see the module docstring) or ``"python"`` (the Python
    guard only: the grader is not root). ``jail``: the jail's folder, with ``chroot`` true where
    the answer's ``/`` is the jail. ``python``/``sys_path``: the answer's interpreter and
    ``sys.path``, as the answer sees them. ``base``: this run's folder (removed by
    :meth:`close`).
    """

    level: str
    python: str
    sys_path: list
    base: str
    uid: int | None = None
    gid: int | None = None
    jail: str | None = None
    chroot: bool = False
    network: bool = True
    limits: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    lock: int | None = None
    seccomp: object = None

    def work_dir(self):
        """A fresh folder for one answer: ``(path here, path as the answer sees it)``."""
        if self.jail is not None:
            here = tempfile.mkdtemp(prefix="a", dir=self.jail + WORK)
            os.chmod(here, 0o755)
            seen = here[len(self.jail):] if self.chroot else here
            return here, seen
        here = tempfile.mkdtemp(prefix="a", dir=self.base)
        return here, here

    def command(self, script):
        """The argument list that starts the answer's interpreter on ``script`` (its text)."""
        python = self.python if self.chroot or self.jail is None else self.jail + self.python
        return [python, "-I", "-S", "-c", script]

    def environment(self):
        env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LC_ALL": "C.UTF-8",
               "PATH": "/usr/bin:/bin"}
        if self.jail is not None and not self.chroot:  # the jail's interpreter, run in place
            env["LD_LIBRARY_PATH"] = ":".join(sorted({self.jail + os.path.dirname(p)
                                                      for p in _mapped_libraries()}))
        return env

    def child_sys_path(self):
        if self.jail is not None and not self.chroot:
            return [self.jail + p for p in self.sys_path]
        return list(self.sys_path)

    def preexec(self, cpu_seconds, work):
        """The function run in the child between ``fork`` and ``exec`` (``work``: its folder here)."""
        level, uid, gid, jail, chroot = self.level, self.uid, self.gid, self.jail, self.chroot
        unshare_net, seccomp = self.network is False, self.seccomp

        def run():
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
            if level == "os":
                resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
                resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
                if unshare_net and _LIBC is not None:
                    _LIBC.unshare(_CLONE_NEWNET)
                if chroot:
                    os.chroot(jail)
                    os.chdir(work[len(jail):])
                else:
                    os.chdir(work)
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
            else:
                os.chdir(work)
            _prctl(_PR_SET_NO_NEW_PRIVS, 1)
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if seccomp is not None and not _install_seccomp(seccomp[0]):
                os._exit(97)  # a filter that was promised and is not there: the answer does not run

        return run

    def kill_all(self):
        """Kill every process of the answer user (``level == "os"``): a process of that user sends
        ``kill(-1, SIGKILL)``, which reaches every process it may signal, its own user's."""
        if self.level != "os":
            return
        for _ in range(3):  # a process forked while the first kill ran is caught by the next
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                try:
                    os.setgroups([])
                    os.setgid(self.gid)
                    os.setuid(self.uid)
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
                os._exit(0)
            os.waitpid(pid, 0)

    def describe(self) -> dict:
        """What isolated the answers, for ``results.json`` and the verdict."""
        if self.level == "python":
            return {"level": "python guard only", "user": "the grader's own (not root)",
                    "what": "the exercises' rule, enforced by an audit hook in the answer's process, time and "
                            "memory limits; no boundary of the operating system", "notes": list(self.notes)}
        network = ("none (a network namespace)" if self.network is False else
                   "none (sockets refused by seccomp)" if self.seccomp is not None else "not isolated")
        return {"level": "operating system", "user": ANSWER_USER, "uid": self.uid, "chroot": self.chroot,
                "seccomp": sorted(SECCOMP_DENIED.get(_MACHINE_ARCH.get(__import__("platform").machine()), {}))
                if self.seccomp is not None else None,
                "sees": "the jail: the standard library, NumPy and its own file" if self.chroot else
                        "every file of the machine that every user may read; none of the grader's",
                "network": network,
                "limits": dict(self.limits), "no_new_privs": True, "notes": list(self.notes)}

    def remove_leftovers(self):
        """Remove what the answer user made where every user may write (``/tmp``, ``/var/tmp``,
        ``/dev/shm``): empty files and folders (its files may not grow), possible only without a jail."""
        if self.level != "os" or self.chroot:
            return
        for shared in SHARED_WRITABLE:
            try:
                entries = list(os.scandir(shared))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.stat(follow_symlinks=False).st_uid != self.uid:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)
                except OSError:
                    pass

    def close(self):
        """Kill what is left of the answers, remove what they left, remove the run's folder, and let
        the next grading run have the answer user."""
        try:
            self.kill_all()
            self.remove_leftovers()
            shutil.rmtree(self.base, ignore_errors=True)
        finally:
            if self.lock is not None:
                os.close(self.lock)  # releases the flock
                self.lock = None


def _probe(iso) -> str | None:
    """Start the answer's interpreter under ``iso`` and import NumPy: ``None`` when it works, else why."""
    here, _ = iso.work_dir()
    script = "import sys; sys.path[:] = %r; import numpy; print(numpy.__version__)" % (iso.child_sys_path(),)
    try:
        proc = subprocess.run(iso.command(script), preexec_fn=iso.preexec(CPU_MARGIN_S + 20, here),
                              env=iso.environment(), capture_output=True, text=True, timeout=60,
                              start_new_session=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        iso.kill_all()
        shutil.rmtree(here, ignore_errors=True)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1][:200]
    return None


def _seccomp_that_works():
    """:func:`seccomp_program` where a child can install it and a socket is then refused, else ``None``."""
    program = seccomp_program()
    if program is None or _LIBC is None:
        return None
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        import socket  # noqa: PLC0415

        ok = _prctl(_PR_SET_NO_NEW_PRIVS, 1) and _install_seccomp(program[0])
        try:
            socket.socket().close()
            refused = False
        except OSError:
            refused = True
        os._exit(0 if ok and refused else 1)
    _, status = os.waitpid(pid, 0)
    return program if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else None


def _network_namespace_works() -> bool:
    """Whether this process may give a child a network namespace of its own (``unshare``)."""
    if _LIBC is None or os.geteuid() != 0:
        return False
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if _LIBC.unshare(_CLONE_NEWNET) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def prepare(timeout_s, *, level="auto", chroot=True) -> Isolation:
    """The isolation for one grading run: OS-level where this process is root, else the Python guard.

    Parameters
    ----------
    timeout_s : float
        Seconds an answer has: its CPU limit is this plus :data:`CPU_MARGIN_S`.
    level : {"auto", "os", "python"}
        ``"auto"``: ``"os"`` when root. ``"os"`` where root is not available, or where the answer
        user cannot be made, raises ``RuntimeError``; ``"python"`` is for tests and for a
        student's own machine.
    chroot : bool
        Use ``chroot`` where it works (tests turn it off to check the run without it).

    Raises
    ------
    RuntimeError
        ``level="os"`` cannot be had, or the jail's interpreter does not start (one line why).
    """
    root = os.geteuid() == 0
    if level == "auto":
        level = "os" if root else "python"
    base = tempfile.mkdtemp(prefix="refattn-grade-")
    try:
        return _prepare(timeout_s, level, chroot, root, base)
    except BaseException:  # an error, or a signal while the jail is built: nothing left behind
        shutil.rmtree(base, ignore_errors=True)
        raise


def _take_the_answer_user():
    """A descriptor holding the exclusive lock on the answer user (waits for a run that holds it).

    The lock file is root's, in ``/run/lock`` (else the temporary folder), opened without following
    links; one another user made there is refused in one line.
    """
    import fcntl  # noqa: PLC0415

    folder = "/run/lock" if os.path.isdir("/run/lock") else tempfile.gettempdir()
    path = os.path.join(folder, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    if os.fstat(fd).st_uid != 0:
        os.close(fd)
        raise RuntimeError(f"isolation: {path} belongs to another user than root; remove it")
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _prepare(timeout_s, level, chroot, root, base):
    limits = {"cpu_s": int(timeout_s) + CPU_MARGIN_S, "address_space_bytes": MEMORY_LIMIT,
              "open_files": OPEN_FILES}
    if level == "python":
        python = sys.executable
        paths = [p for p in sys.path if p and os.path.isabs(p)]
        return Isolation("python", python, paths, base, limits=limits,
                         notes=["the grader is not root: answers run as its own user"] if not root else [])
    if level != "os" or not root:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError("isolation: running answers as another user needs root")
    ids = answer_user()
    if ids is None:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"isolation: the user {ANSWER_USER} does not exist and could not be created "
                           f"(useradd); create it, or run the grader as a user other than root")
    lock = _take_the_answer_user()
    try:
        return _prepare_os(timeout_s, chroot, base, ids, limits, lock)
    except BaseException:
        os.close(lock)
        raise


def _prepare_os(timeout_s, chroot, base, ids, limits, lock):
    os.chmod(base, 0o711)  # the answer's user may pass through to its folder, never list or write it
    _prctl(_PR_SET_DUMPABLE, 0)  # the grader's memory: root's, and not even readable by root's tools
    try:
        jail, python, sys_path = build_jail(base)
    except OSError as exc:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"isolation: could not build the answers' folder tree: {exc}") from None
    limits.update(processes=1, file_size_bytes=0)
    iso = Isolation("os", python, sys_path, base, uid=ids[0], gid=ids[1], jail=jail, chroot=chroot,
                    network=not _network_namespace_works(), limits=limits, seccomp=_seccomp_that_works())
    iso.kill_all()  # nothing of another run's (killed grader) survives into this one
    # the strongest set-up that starts the answers' interpreter: without the network, then with it, then
    # without chroot (a container that refuses it)
    for network, use_chroot in ((iso.network, chroot), (True, chroot), (True, False)):
        if use_chroot is False and chroot:
            iso.notes.append("chroot did not work here: the answer sees the machine's files that every user may "
                             "read (none of the grader's)")
        iso.network, iso.chroot = network, use_chroot
        why = _probe(iso)
        if why is None:
            break
    else:
        iso.close()
        raise RuntimeError(f"isolation: the answers' interpreter does not start as {ANSWER_USER}: {why}")
    iso.lock = lock
    return iso
