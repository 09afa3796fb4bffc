"""What tests in several folders share: tolerances, random scores, a child's Ctrl-C, a user's own activation,
and the optional extras.

An extra is a set of libraries beyond the ``test`` extra (pyproject.toml). A test module that needs one calls
:func:`needs` at its top: where the extra is installed the module runs and its tests are marked ``extra``
(so ``pytest -m extra`` selects them, as CI's second step does); where it is not, the module is skipped
with the reason and the pip command, or, under ``REFATTN_EXTRAS_REQUIRED=1`` (CI), fails.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from refattn.core.activations import Activation as _Activation
from refattn.exercises.pdf import find_chromium

ROOT = Path(__file__).resolve().parents[1]

#: Analytic vs autograd agree to rounding; analytic vs central differences (eps = 1e-6) to truncation plus
#: rounding, about 1e-9 in practice (derivation 22).
RTOL_AUTOGRAD = 1e-10
RTOL_CENTRAL = 1e-6

#: Each extra a test may need: the modules that tell whether it is installed.
EXTRAS = {
    "torch": ("array_api_compat", "torch"),
    "jax": ("array_api_compat", "jax"),
    "docs": ("mkdocs", "material", "markdown", "pymdownx", "mathjax"),
    "browser": ("playwright", "pypdf"),
    "cluster": ("distributed", "bokeh"),
}

#: The test modules that called :func:`needs` and got their extras (tests/conftest.py marks their tests).
NEEDING: set[str] = set()


def required() -> bool:
    """``REFATTN_EXTRAS_REQUIRED=1``: a missing extra (or Chromium) fails instead of skipping."""
    return os.environ.get("REFATTN_EXTRAS_REQUIRED") == "1"


def missing(*extras, chromium=False) -> str | None:
    """What of ``extras`` (and Chromium) is not installed, with how to install it; ``None`` if nothing."""
    for extra in extras:
        for name in EXTRAS[extra]:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                return f"needs the {extra} extra ({exc}): pip install -e '.[test,{extra}]'"
    if chromium and find_chromium() is None:
        return "needs Chromium: apt-get install chromium, or name one with REFATTN_CHROMIUM"
    return None


def needs(*extras, chromium=False):
    """At a test module's top: skip the module unless ``extras`` are installed (fail under
    ``REFATTN_EXTRAS_REQUIRED=1``); the module's tests are then marked ``extra``."""
    why = missing(*extras, chromium=chromium)
    if why is not None:
        if required():
            pytest.fail(f"REFATTN_EXTRAS_REQUIRED=1, but this test module {why}", pytrace=False)
        pytest.skip(why, allow_module_level=True)
    NEEDING.add(sys._getframe(1).f_globals["__name__"])


def skip_unless(*extras, chromium=False):
    """Inside a test or fixture: skip it unless ``extras`` (and Chromium) are here (fail under
    ``REFATTN_EXTRAS_REQUIRED=1``). Its module is marked ``extra`` with ``pytestmark = pytest.mark.extra``."""
    why = missing(*extras, chromium=chromium)
    if why is not None:
        if required():
            pytest.fail(f"REFATTN_EXTRAS_REQUIRED=1, but this test {why}", pytrace=False)
        pytest.skip(why)


#: Every command at a tiny size ("SST2" stands for the tiny SST-2 folder).
TINY = {
    "prop1": [],
    "properties": [],
    "prop2": ["--activations", "softmax,tanhmax", "--n", "6", "--d", "2", "--m", "20"],
    "signexp-at-zero": [],
    "dynamics": ["--activations", "softmax", "--steps", "3"],
    "polarity": ["--activations", "softmax", "--seeds", "1", "--epochs", "1"],
    "interpret": ["--activations", "softmax", "--seeds", "1", "--epochs", "1", "--n-instances", "6", "--draws", "2"],
    "sst2": ["--data", "SST2", "--activations", "softmax", "--seeds", "1"],
    "sst2-sweep": ["--data", "SST2", "--activations", "softmax", "--seeds", "1", "--embed-dims", "4",
                   "--trainings", "adam/phrases"],
    "rank-collapse": ["--activations", "softmax", "--architectures", "pure", "--depth", "2", "--seeds", "1",
                      "--inputs", "1"],
    "geometry": ["--cs", "1", "--n-keys", "36", "--dim", "8", "--n-random", "20"],
    "nt-cycles": ["--N", "2", "--tau", "1"],
    "nt": ["--task", "N2T1", "--context", "4", "--seeds", "1", "--epochs", "2", "--eval-every", "2", "--n-test", "2"],
    "nt-figure": ["fig4", "--seeds", "1", "--epochs", "2"],
    "nt-sensitivity": ["fig4", "--seeds", "2", "--epochs", "2", "--eval-every", "2", "--init-scales", "1",
                       "--lrs", "0.32", "--n-test", "2"],
    "curves": [str(ROOT / "derivations" / "data" / "15-sensitivity-fig7-128.json")],
    "neural-surface": ["--n-train", "10", "--n-test", "10", "--hidden-size", "3", "--steps", "2"],
    "neural-cost": ["--ns", "16", "--d-primes", "2", "--budget-mib", "8", "--repeats", "1"],
    "lm": ["--data", "toy", "--activations", "softmax", "--seeds", "1", "--steps", "2", "--layers", "1",
           "--width", "8"],
    "lm-study": ["--data", "toy", "--activations", "softmax", "--lrs", "0.01", "--seeds", "1", "--steps", "2",
                 "--long-steps", "2", "--long-evals", "1", "--phases", "tune,long"],
}


#: How long a test waits, at most, for another process to reach a state: generous, so that only a process that
#: never gets there fails, however loaded the machine; no test asserts how fast anything is.
PATIENCE_S = 900


def wait_for(condition, what, *, proc=None, patience=PATIENCE_S, poll=0.05):
    """Poll ``condition()`` until it returns something true, and return that. Fail, saying what was awaited,
    if the process ``proc`` ends first (a condition that can no longer come) or after ``patience`` seconds."""
    t0 = time.monotonic()
    while True:
        ended = proc is not None and proc.poll() is not None  # before the look: what it left is seen
        got = condition()
        if got:
            return got
        if ended:
            out = proc.stderr.read() if getattr(proc, "stderr", None) else ""
            pytest.fail(f"the process ended (exit {proc.returncode}) before {what}: {out[-2000:]}", pytrace=False)
        if time.monotonic() - t0 > patience:
            pytest.fail(f"waited {patience} s for {what}, and it did not happen", pytrace=False)
        time.sleep(poll)


def random_scores(name, shape, rng, scale=2.0):
    """Scores of ``shape`` for activation ``name``, away from its singular points."""
    from refattn import activation  # noqa: PLC0415
    from refattn.check import away_from_singular  # noqa: PLC0415

    return away_from_singular(activation(name), scale * rng.standard_normal(shape))


def default_sigint():
    """``preexec_fn`` for a child that a test interrupts with SIGINT: a shell that starts a job in the
    background (``cmd &``) makes it ignore SIGINT, the child inherits that, and Python then never
    raises KeyboardInterrupt; restore the default so that the test sees what a user's Ctrl-C does."""
    import signal  # noqa: PLC0415

    signal.signal(signal.SIGINT, signal.default_int_handler)


__all__ = ["RTOL_AUTOGRAD", "RTOL_CENTRAL", "EXTRAS", "needs", "skip_unless", "missing", "required",
           "TINY", "PATIENCE_S", "wait_for", "random_scores", "default_sigint", "SELF_EDITING"]


class SExp(_Activation):
    """An Activation subclass the library has never seen, with an unbounded rho and a non-zero ell:
    rho = s, ell = s (g = s e^s, h = e^s)."""

    name = "s_exp"

    def rho(self, s):
        return s

    def drho(self, s):
        return np.ones_like(s)

    def ell(self, s):
        return s

    dell = drho


#: A formula that rewrites its own file the first time a model evaluates it (scores of 3 or more axes, not
#: the check points of its definition): an edit in the middle of a run.
SELF_EDITING = '''
import autograd.numpy as anp

def g(s):
    if anp.ndim(s) >= 3 and not hasattr(g, "edited"):
        g.edited = True
        with open(__file__, "a") as fh:
            fh.write("\\na = {'g': lambda s: anp.exp(3 * s), 'h': lambda s: anp.exp(3 * s)}\\n")
    return anp.exp(s)

a = {"g": g, "h": g}
'''
