"""Exercise 12: expressive weights, with the no-normaliser convention.

Statement: 12-no-normaliser.md. Fill in the body of the function, then check
it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check no-normaliser 12-no-normaliser.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# h(z) = z^2 / (1 + z^2) = 1 / (1 + 1/z^2): never inf/inf. A score whose h
# underflows (|z| < sqrt(tiny) = 1.5e-154) counts as 0, a masked entry has
# h = 0, and a row with no positive h (no normaliser) gets weights 0.
### END SOLUTION
import numpy as np


def expressive_weights(s, mask=None):
    """The weights ``h(s_i) / sum_k h(s_k)`` along the last axis, never NaN.

    ``s`` float64 (..., n); ``mask`` None or boolean of the same shape
    (True keeps an entry).
    """
    ### BEGIN SOLUTION
    zero = np.abs(s) < np.sqrt(np.finfo(np.float64).tiny)
    w = 1.0 / np.where(zero, 1.0, s)  # 1/z at a safe argument
    h = np.where(zero, 0.0, 1.0 / (1.0 + w * w))  # in [0, 1]: the sum cannot overflow
    if mask is not None:
        h = np.where(mask, h, 0.0)
    z = np.sum(h, axis=-1, keepdims=True)
    return h / np.where(z > 0, z, 1.0)  # no normaliser: h = 0, so the weights are 0
    ### END SOLUTION
