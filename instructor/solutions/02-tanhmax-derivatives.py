"""Exercise 02: TanhMax's ell = log cosh s, rho' and ell', stable for every finite score.

Statement: 02-tanhmax-derivatives.md. Fill in the body of each function, then
check it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check tanhmax-derivatives 02-tanhmax-derivatives.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# log cosh s = |s| + log(1 + e^{-2|s|}) - log 2  (no overflow, since e^{-2|s|} <= 1);
# rho = tanh s, rho' = sech^2 s = 1 - tanh^2 s;  ell' = sinh s / cosh s = tanh s.
### END SOLUTION
import math

import numpy as np


def ell(s):
    """``log cosh s``, elementwise, finite for every finite ``s`` (any shape)."""
    ### BEGIN SOLUTION
    a = np.abs(s)
    return a + np.log1p(np.exp(-2.0 * a)) - math.log(2.0)
    ### END SOLUTION


def drho(s):
    """``rho'(s)`` for ``rho = tanh``, elementwise."""
    ### BEGIN SOLUTION
    t = np.tanh(s)
    return 1.0 - t * t
    ### END SOLUTION


def dell(s):
    """``ell'(s)`` for ``ell = log cosh``, elementwise."""
    ### BEGIN SOLUTION
    return np.tanh(s)
    ### END SOLUTION
