"""Exercise 08: Delta_II for softplus-max, g = h = softplus.

Statement: 08-prop1-new-activation.md. Fill in the body of the function, then
check it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check prop1-new-activation 08-prop1-new-activation.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# rho = 1, ell = log softplus(s), ell' = sigmoid(s) / softplus(s), w = softmax(ell), so
# Delta_II,i = w_i ell'_i (o_i - sum_j w_j o_j).
### END SOLUTION
import numpy as np


def delta_II(s, o):
    """``Delta_II,i = sum_j (d phi_j / d s_i) o_j`` for softplus-max, along the last axis; the shape of ``s``."""
    ### BEGIN SOLUTION
    sp = np.logaddexp(0.0, s)  # softplus, no overflow
    w = sp / np.sum(sp, axis=-1, keepdims=True)
    sig = np.exp(-np.logaddexp(0.0, -s))  # sigmoid, no overflow
    # ell' = sigmoid / softplus -> 1 as s -> -inf; where softplus underflows to 0, its limit
    dell = np.divide(sig, sp, out=np.ones_like(sp), where=sp > 0)
    return w * dell * (o - np.sum(w * o, axis=-1, keepdims=True))
    ### END SOLUTION
