"""Exercise 09: the closure gap of Proposition 2 (derivation 05, Eq. 05.P10).

Statement: 09-closure-gap.md. Fill in the body of the function, then check it,
in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check closure-gap 09-closure-gap.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# ||tanhmax(s + c) - softmax(s)||_1 = 2q / (1 + q),  q = e^{-2c} B / A,
# A = sum e^{s_k}, B = sum e^{-s_k}; evaluated from log q so that nothing overflows.
### END SOLUTION
import numpy as np


def gap(s, c):
    """``||tanhmax(s + c 1) - softmax(s)||_1`` from the closed form: ``s`` a 1-D row, ``c`` a float."""
    ### BEGIN SOLUTION
    log_q = np.logaddexp.reduce(-s) - np.logaddexp.reduce(s) - 2.0 * c
    if log_q < 0:
        e = np.exp(log_q)  # q < 1
        return 2.0 * e / (1.0 + e)
    return 2.0 / (1.0 + np.exp(-log_q))  # q >= 1: divide by q first
    ### END SOLUTION
