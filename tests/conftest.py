"""Shared fixtures and helpers for the refattn tests."""

import os

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

from hypothesis import settings  # noqa: E402

#: Under CI (the environment variable CI is set, as .ci/run's runner does) the
#: property-based tests draw the same examples on every run, so that a
#: submission's result does not depend on the luck of the draw; elsewhere they
#: draw afresh each run and keep exploring.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

from refattn import activation  # noqa: E402
from refattn.check import away_from_singular  # noqa: E402

#: Tolerances used throughout (stated once, used everywhere):
#: analytic vs autograd agree to rounding; analytic vs central differences
#: (eps = 1e-6) to truncation + rounding error, ~1e-9 in practice.
RTOL_AUTOGRAD = 1e-10
RTOL_CENTRAL = 1e-6


def random_scores(name, shape, rng, scale=2.0):
    return away_from_singular(activation(name), scale * rng.standard_normal(shape))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


#: The array backends the GPU parity tests run on (tests/test_gpu_parity.py).
#: "numpy" and "fake_device" run everywhere; "cupy" needs CuPy and a CUDA device.
XP_BACKENDS = ("numpy", "fake_device", "cupy")


@pytest.fixture(params=XP_BACKENDS)
def xp(request, monkeypatch):
    """The array namespace a parity test runs refattn on.

    * ``numpy``: NumPy itself (inputs are copies, so a test comparing with a
      NumPy reference is numpy-vs-numpy and checks the comparison machinery);
    * ``fake_device``: :mod:`fake_device`, NumPy behind an array type that
      refattn treats as a CuPy array and that raises on any implicit host copy
      or NumPy call on its data (runs on CPU, so CI exercises the GPU code paths);
    * ``cupy``: CuPy on a CUDA device; skipped where CuPy or a device is absent.

    Move inputs with ``xp.array(host)`` (a copy) and results back with
    ``refattn.core.backend.to_numpy``; results are instances of ``xp.ndarray``.
    """
    if request.param == "numpy":
        return np
    if request.param == "fake_device":
        import fake_device

        return fake_device.install(monkeypatch)
    from refattn.core.backend import cupy_available

    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    import cupy

    return cupy


def default_sigint():
    """``preexec_fn`` for a child that a test interrupts with SIGINT: a shell that starts a job in the
    background (``cmd &``) makes it ignore SIGINT, the child inherits that, and Python then never
    raises KeyboardInterrupt; restore the default so that the test sees what a user's Ctrl-C does."""
    import signal  # noqa: PLC0415

    signal.signal(signal.SIGINT, signal.default_int_handler)
