"""Shared fixtures and helpers for the refattn tests."""

import os

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

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
