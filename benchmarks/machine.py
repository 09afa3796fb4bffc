"""What a benchmark ran on: CPU, cores, NumPy and its BLAS (library, version, kernel), threads, load.

Imported by the benchmark scripts beside it; a timing means little without
these. ``OPENBLAS_CORETYPE`` picks OpenBLAS's kernel when the library loads
(before NumPy is imported), so it is recorded as set and as OpenBLAS reports
it (threadpoolctl's ``architecture``).
"""

from __future__ import annotations

import os
import platform

import numpy as np
from threadpoolctl import threadpool_info

ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
       "REFATTN_NUM_THREADS")


def cpu_model():
    """The CPU's model name as Linux reports it (else what :mod:`platform` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags():
    """Whether the CPU reports AVX2 and AVX-512F (what decides which BLAS and exp kernels can run)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        return {}
    return {"avx2": "avx2" in flags, "avx512f": "avx512f" in flags}


def blas():
    """One dict per BLAS library loaded: its API, version, kernel (``architecture``) and threads."""
    return [{k: i.get(k) for k in ("internal_api", "version", "architecture", "num_threads", "prefix")}
            for i in threadpool_info() if i.get("user_api") == "blas"]


def blas_kernel():
    """The kernel of NumPy's OpenBLAS (``Haswell``, ``SkylakeX``, ...), or ``None``."""
    return next((b["architecture"] for b in blas() if b.get("internal_api") == "openblas"), None)


def describe(torch=None):
    """The machine as a JSON-able dict; with ``torch`` given, its version, threads and CPU capability."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    info = {"cpu": cpu_model(), "cpu_flags": cpu_flags(), "cores": cores, "python": platform.python_version(),
            "platform": platform.platform(), "numpy": np.__version__, "blas": blas(), "blas_kernel": blas_kernel(),
            "environment": {k: os.environ.get(k) for k in ENV}}
    try:
        info["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    if torch is not None:
        info["torch"] = {"version": torch.__version__, "threads": torch.get_num_threads(),
                         "interop_threads": torch.get_num_interop_threads(),
                         "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                         "blas": "mkl" if torch.backends.mkl.is_available() else "other"}
    return info
