"""Keep freed memory for reuse: fewer page faults in loops of large NumPy temporaries.

A training step allocates and frees the same large arrays every epoch (the
NT model's ``(S, B, n, 4d)`` activations are 5 MiB in float32). glibc's
``malloc`` serves such sizes with fresh ``mmap`` pages or gives the top of
its heap back to the system when they are freed (``M_MMAP_THRESHOLD``,
``M_TRIM_THRESHOLD``; ``man mallopt``), so the next epoch touches new
pages: each costs a page fault and zeroing. On the 2-core virtual machine
this project is developed on, that was about a quarter of an NT training
step (``benchmarks/bench_nt.py``; ``derivations/20-speed.md``, section 7).

:func:`retain_freed_memory` asks glibc to serve large blocks from its heap
and to keep freed memory, so every epoch after the first reuses the pages the
first one faulted in. The process's resident memory then stays at its peak
instead of shrinking between epochs. The setting is process-wide and cannot
be undone, so the library never makes it on import: the command line does,
for its training commands, and a program may call it itself.

Nothing here changes a number: only where ``malloc`` finds memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

__all__ = ["retain_freed_memory"]

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_done = None


def retain_freed_memory(mmap_threshold=1 << 25, trim_threshold=1 << 31) -> bool:
    """Ask glibc's ``malloc`` to reuse freed memory instead of returning it (``mallopt``).

    Blocks below ``mmap_threshold`` bytes come from the heap, and the heap
    keeps up to ``trim_threshold`` free bytes at its top instead of giving
    them back to the system. Called once per process; later calls return the
    first call's answer and change nothing.

    Parameters
    ----------
    mmap_threshold, trim_threshold : int
        Bytes (defaults 32 MiB, the most every glibc accepts, which covers
        the arrays of the project's training steps, and 2 GiB).

    Returns
    -------
    bool
        True where the C library is glibc and accepted both settings; False
        elsewhere (macOS, musl, Windows), where nothing is changed.
    """
    global _done
    if _done is None:
        _done = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                mallopt = libc.mallopt
            except (OSError, AttributeError):
                return _done
            mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
            _done = bool(mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold))
                         and mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)))
    return _done
