"""Blocks and threads for :mod:`refattn.fast`: cache-sized blocks, every core, few allocations.

Nothing here changes the mathematics. :func:`refattn.fast.attention` and
:func:`refattn.fast.attention_backward` run the same per-batch code either
once over the whole batch or once per *block* of (batch, head) slices; this
module supplies what the blocked run needs (``derivations/20-speed.md``
explains each choice with the measurements behind it):

* **Blocks that fit in cache.** One (n_q, n_k) float64 score slice at n = 256
  is 512 KiB; the elementwise passes of an activation over one slice run in
  the core's L2 cache instead of streaming every pass through main memory.
  :func:`block_size` picks how many slices make a block.
* **Threads.** NumPy runs each ufunc on one core, but releases the GIL inside
  ufuncs and matrix products, so blocks run concurrently on a thread pool of
  :func:`num_threads` workers. While they do, the BLAS that NumPy links is
  held at one thread (:func:`single_threaded_blas`, through threadpoolctl),
  so that workers do not compete with BLAS's own threads; where no BLAS
  thread control is found, blocks run one after another.
* **Few, large outputs.** Each call writes its full-size outputs once, and
  outputs of one shape (the cached ``p``, ``w`` and ``s``; the gradients
  ``dQ``, ``dK``, ``dV``) share one allocation (:class:`Gather`). A fresh
  page costs a page fault and zeroing, which on the virtual machine this
  project is developed on made up much of a call's time; fewer, larger
  allocations let ``malloc`` reuse the memory it already holds.

Only plain NumPy arrays are blocked: arrays traced by autograd (the
gradient checks) and CuPy arrays (the GPU, which has its own parallelism) run
the whole-batch code unchanged.

Settings: ``REFATTN_NUM_THREADS`` (environment) or :func:`set_num_threads`;
``set_num_threads(1)`` still blocks but runs the blocks in the calling
thread; :func:`set_blocking` turns the blocked path off altogether.
"""

from __future__ import annotations

import contextvars
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = [
    "num_threads",
    "set_num_threads",
    "blocking_enabled",
    "set_blocking",
    "blas_control",
    "single_threaded_blas",
    "block_size",
    "run_blocks",
    "Gather",
]

#: Target bytes of one block's score slice: a few such temporaries fit in a 1-2 MiB L2 cache.
BLOCK_BYTES = 1 << 19
#: Work below this many score entries runs unblocked (thread hand-off would dominate).
MIN_BLOCKED_ENTRIES = 1 << 16

_state = threading.local()  # .in_worker: True inside a pool thread (no nested pools)
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_pid = None
_threads: int | None = None
_blocking = True


# --------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------


def _default_threads() -> int:
    env = os.environ.get("REFATTN_NUM_THREADS")
    if env is not None:
        try:
            value = int(env)
        except ValueError:
            raise ValueError(f"REFATTN_NUM_THREADS: expected a positive integer, got {env!r}") from None
        if value < 1:
            raise ValueError(f"REFATTN_NUM_THREADS: expected a positive integer, got {env!r}")
        return value
    try:
        cores = len(os.sched_getaffinity(0))  # the cores this process may use
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def num_threads() -> int:
    """The number of threads blocked attention uses (1 where BLAS cannot be held at one thread)."""
    global _threads
    if _threads is None:
        _threads = _default_threads()
    return _threads if blas_control() is not None else 1


def set_num_threads(n: int) -> None:
    """Use ``n >= 1`` threads for blocked attention (default: the usable cores, at most 8,
    or ``REFATTN_NUM_THREADS``)."""
    global _threads
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n: expected an int >= 1, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n: expected an int >= 1, got {n}")
    _threads = int(n)


def blocking_enabled() -> bool:
    """Whether large NumPy attention calls run in blocks (see :func:`set_blocking`)."""
    return _blocking


def set_blocking(enabled: bool) -> None:
    """Turn the blocked path on (default) or off; off, every call runs the whole-batch code."""
    global _blocking
    if not isinstance(enabled, (bool, np.bool_)):
        raise TypeError(f"enabled: expected a bool, got {type(enabled).__name__}")
    _blocking = bool(enabled)


# --------------------------------------------------------------------------
# BLAS threads
# --------------------------------------------------------------------------


class _Blas:
    """``get()``/``set(n)`` for the BLAS libraries NumPy loaded, through threadpoolctl."""

    def __init__(self, controller):
        self._controller = controller  # threadpoolctl's controller, restricted to BLAS

    def get(self) -> int:
        return max(lib.num_threads for lib in self._controller.lib_controllers)

    def set(self, n: int) -> None:
        self._controller.limit(limits=int(n))

    def info(self) -> list:
        """threadpoolctl's description of each BLAS: its file, version, kernel ("architecture")."""
        return self._controller.info()


_blas = None
_blas_checked = False
_blas_users = 0
_blas_saved = None


def blas_control():
    """The BLAS thread control (threadpoolctl's, for the BLAS NumPy loaded), or ``None``
    where there is none to control (then blocks run in the calling thread)."""
    global _blas, _blas_checked
    if not _blas_checked:
        with _lock:
            if not _blas_checked:
                from threadpoolctl import ThreadpoolController  # noqa: PLC0415

                controller = ThreadpoolController().select(user_api="blas")
                _blas = _Blas(controller) if controller.lib_controllers else None
                _blas_checked = True
    return _blas


class single_threaded_blas:
    """Context manager: BLAS runs on one thread inside, as it did before outside.

    Re-entrant and safe to enter from several threads: the first to enter
    saves BLAS's thread count and sets 1, the last to leave restores it. It
    changes a process-wide setting, so BLAS calls made by *other* threads
    while a blocked attention call runs are single-threaded too.
    """

    def __enter__(self):
        global _blas_users, _blas_saved
        blas = blas_control()
        if blas is not None:
            with _lock:
                if _blas_users == 0:
                    _blas_saved = blas.get()
                    blas.set(1)
                _blas_users += 1
        return self

    def __exit__(self, *exc):
        global _blas_users
        blas = blas_control()
        if blas is not None:
            with _lock:
                _blas_users -= 1
                if _blas_users == 0:
                    blas.set(_blas_saved)
        return False


# --------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------


def block_size(slices: int, entries_per_slice: int, itemsize: int, threads: int | None = None) -> int | None:
    """How many of ``slices`` (batch, head) slices of ``entries_per_slice`` scores of ``itemsize`` bytes one
    block holds: about :data:`BLOCK_BYTES` of scores, few enough that each of ``threads`` workers (default
    :func:`num_threads`) gets a block. ``None`` (do not block) when blocking is off, for one slice, for work
    below :data:`MIN_BLOCKED_ENTRIES`, and inside a pool thread, where gathering the blocks would cost more
    than their cache saves (``derivations/20-speed.md``, section 8)."""
    if not _blocking or slices < 2 or slices * entries_per_slice < MIN_BLOCKED_ENTRIES:
        return None
    if getattr(_state, "in_worker", False):
        return None
    threads = num_threads() if threads is None else threads
    size = max(1, BLOCK_BYTES // max(1, entries_per_slice * itemsize))
    return max(1, min(size, math.ceil(slices / threads)))


def _get_pool(threads):
    """The shared pool of ``threads`` workers (made anew after a fork: a child
    process inherits the pool object but not its threads).

    A pool replaced because the thread count changed is not shut down: another
    thread may hold it and be about to submit work. It is dropped, and its
    idle workers exit when it is garbage-collected after its last user."""
    global _pool, _pool_size, _pool_pid
    with _lock:
        if _pool is None or _pool_size != threads or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(threads, thread_name_prefix="refattn", initializer=_mark_worker)
            _pool_size, _pool_pid = threads, os.getpid()
        return _pool


def _mark_worker():
    _state.in_worker = True


def run_blocks(fn, slices: int, size: int) -> list:
    """Call ``fn(start, stop)`` for the blocks ``[0, size), [size, 2 size), ...`` of ``slices``.

    The calls run on :func:`num_threads` threads with BLAS held at one thread
    (or, with one thread, inside a nested call, or where BLAS cannot be
    controlled, one after another in the calling thread). Each call sees the
    caller's context variables (``numpy.errstate`` among them). Returns the
    results in block order; the first exception raised by a block is
    re-raised here.
    """
    starts = range(0, slices, size)
    threads = num_threads()
    if threads == 1 or len(starts) == 1 or getattr(_state, "in_worker", False):
        return [fn(i, min(i + size, slices)) for i in starts]
    pool = _get_pool(threads)
    with single_threaded_blas():
        futures = [pool.submit(contextvars.copy_context().run, fn, i, min(i + size, slices))
                   for i in starts]
        return [f.result() for f in futures]


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------


class Gather:
    """The full-size outputs of a blocked call, which blocks fill in place.

    ``put(i, j, parts)`` writes a block's arrays (a dict ``name -> array``
    whose leading axis is the block's slices ``i:j``) into the full arrays of
    the same names. The first block to arrive allocates them, taking shapes
    and dtypes from its parts (so the blocked route returns exactly the
    dtypes of the whole-batch code), and allocates the outputs that share a
    trailing shape and dtype (``p``, ``w`` and ``s``; ``dQ``, ``dK`` and
    ``dV``) as the rows of *one* array: fewer, larger allocations, which
    ``malloc`` serves from memory it already holds instead of mapping fresh
    pages on every call (``derivations/20-speed.md``). Such outputs keep
    each other's memory alive until the last of them is garbage-collected.
    Outputs named in ``alone`` get an allocation of their own (attention's
    ``out``, which must not keep the cache's memory alive).
    ``get(name, batch)`` returns an output with its leading axis unfolded to
    the ``batch`` shape, or ``None`` if no block delivered ``name``.
    """

    def __init__(self, slices: int, alone=()):
        self.slices = slices
        self.alone = tuple(alone)
        self._arrays = None
        self._lock = threading.Lock()

    def _allocate(self, parts):
        groups = {}
        for name, part in parts.items():
            key = (name,) if name in self.alone else (part.shape[1:], part.dtype)
            groups.setdefault(key, []).append(name)
        arrays = {}
        for names in groups.values():
            first = parts[names[0]]
            rows = np.empty((len(names), self.slices) + first.shape[1:], first.dtype)
            arrays.update(zip(names, rows))
        return arrays

    def put(self, i, j, parts):
        if self._arrays is None:
            with self._lock:
                if self._arrays is None:
                    self._arrays = self._allocate(parts)
        for name, part in parts.items():
            self._arrays[name][i:j] = part

    def get(self, name, batch):
        array = (self._arrays or {}).get(name)
        return None if array is None else array.reshape(tuple(batch) + array.shape[1:])
