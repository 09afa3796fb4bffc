"""What a benchmark ran on (CPU, cores, NumPy and its BLAS, threads, load), and the scripts' shared options.

Imported by the benchmark scripts beside it; a timing means little without
these. ``OPENBLAS_CORETYPE`` picks OpenBLAS's kernel when the library loads
(before NumPy is imported), so it is recorded as set and as OpenBLAS reports
it (threadpoolctl's ``architecture``).

The scripts read their options with :func:`parser` and the ``type=`` checks
here (:func:`positive_int`, :func:`non_negative_int`, :func:`non_negative_float`,
:func:`positive_float`, :func:`output_file`): bad input is one line naming the
option and what was expected, exit code 2, before anything is measured; and
they save with :func:`write_json`, which replaces the file whole or not at all.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import tempfile

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


# --------------------------------------------------------------------------
# Options: one line and exit code 2 for bad input, before anything is measured
# --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``SCRIPT: --OPTION: what was expected, got X``."""

    def error(self, message):
        message = re.sub(r"^argument ([^:]+): ", r"\1: ", message)  # "--pause: ...", not "argument --pause: ..."
        self.exit(2, f"{self.prog}: {message}\n")


def parser(doc, whole=False):
    """The argument parser of a benchmark script, described by the first paragraph of its ``doc``
    (``whole``: all of it, as written)."""
    if whole:
        return _Parser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return _Parser(description=doc.split("\n\n")[0])


def fail(ap, option, expected, got):
    """Stop with the one line ``SCRIPT: OPTION: expected EXPECTED, got GOT`` (exit code 2)."""
    ap.error(f"{option}: expected {expected}, got {got}")


def _number(kind, text, expected, ok):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
    return value


def positive_int(text):
    """``type=`` for an integer >= 1."""
    return _number(int, text, "an integer >= 1", lambda v: v >= 1)


def non_negative_int(text):
    """``type=`` for an integer >= 0."""
    return _number(int, text, "an integer >= 0", lambda v: v >= 0)


def non_negative_float(text):
    """``type=`` for a finite number >= 0 (no ``nan``, no ``inf``)."""
    return _number(float, text, "a finite number >= 0", lambda v: math.isfinite(v) and v >= 0)


def positive_float(text):
    """``type=`` for a finite number > 0 (no ``nan``, no ``inf``)."""
    return _number(float, text, "a finite number > 0", lambda v: math.isfinite(v) and v > 0)


def output_file(text):
    """``type=`` for a file to write at the end: its folder exists and takes a new file, now, so that
    a run never measures for nothing and then fails to save."""
    expected = "a file path in an existing, writable folder"
    if not text:
        raise argparse.ArgumentTypeError(f"expected {expected}, got ''")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text} (a folder)")
    if os.path.exists(text) and not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text} (not a regular file: a device or pipe)")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text} (no folder {folder})")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text} ({folder}: {exc.strerror})") from None
    return text


def fill(args, values):
    """Give each option in ``values`` left unset (``None``) on the command line its value there."""
    for name, value in values.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def write_json(path, result):
    """Write ``result`` as strict JSON (a NaN or infinity as ``null``, listed under ``"non_finite"``) to a
    temporary file beside ``path`` and move it over ``path``: the file is the previous one or the new one,
    whole (:func:`refattn.training.runs.atomic_write`)."""
    from refattn.training.runs import atomic_write, dumps  # noqa: PLC0415

    text = (dumps(result, indent=1) + "\n").encode("utf-8")
    atomic_write(path, lambda fh: fh.write(text))
