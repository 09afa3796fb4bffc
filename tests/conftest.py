"""The fixtures every test folder shares (``rng``, ``xp``, the built book ``site``, a tiny SST-2 folder) and the
hook that marks the tests of an extra; the helpers a test imports are in ``tests/support.py``."""

import os
import pathlib
import subprocess
import sys
import time

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

from tests import support  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects: ``-m extra`` must see these marks
def pytest_collection_modifyitems(items):
    """Mark ``extra`` every test of a module that :func:`support.needs` let run."""
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__ in support.NEEDING:
            item.add_marker(pytest.mark.extra)


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
        from tests import fake_device

        return fake_device.install(monkeypatch)
    from refattn.core.backend import cupy_available

    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    import cupy

    return cupy


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The book, built once per test run with ``mkdocs build --strict`` (or the site in
    ``REFATTN_BOOK_SITE``); skipped, saying why, without the docs and browser extras and Chromium."""
    support.skip_unless("docs", "browser", chromium=True)
    given = os.environ.get("REFATTN_BOOK_SITE")
    if given:
        return pathlib.Path(given).resolve()
    out = tmp_path_factory.mktemp("book") / "site"
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                       cwd=pathlib.Path(__file__).resolve().parents[1], capture_output=True, text=True,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)
    assert r.returncode == 0, "mkdocs build --strict failed:\n" + r.stderr[-6000:]
    print(f"\nbook: mkdocs build --strict took {time.perf_counter() - t0:.1f} s, site in {out}")
    return out


@pytest.fixture(scope="session")
def sst2_folder(tmp_path_factory):
    """A tiny SST-2 folder: sentences whose label one word decides."""
    folder = tmp_path_factory.mktemp("sst2")
    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        y = int(rng.integers(2))
        rows.append((y, f"{('good', 'bad')[1 - y]} film w{i % 5} the end"))
    (folder / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for y, s in rows))
    (folder / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for y, s in rows[:12]))
    return folder
