"""Exercise 05: a wrong sigsoftmax VJP that an all-ones cotangent passes.

Statement: 05-all-ones-cotangent.md. Fill in the body of the function, then
check it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check all-ones-cotangent 05-all-ones-cotangent.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# Sigsoftmax has rho = 1, so its weights sum to 1 for every s, every column of
# its Jacobian sums to 0, and the true VJP of u = 1 is exactly 0. The plain
# softmax backward p (u - <u, p>), which forgets the factor ell' = 1 + sigmoid(-s),
# is also exactly 0 for u = 1 (sum_j p_j = 1): the all-ones cotangent cannot tell
# them apart. A random u can.
### END SOLUTION
import numpy as np


def wrong_vjp(s, u):
    """A plausible but wrong sigsoftmax backward pass, rows along the last axis, the shape of ``s``."""
    ### BEGIN SOLUTION
    a = s + np.minimum(s, 0.0) - np.log1p(np.exp(-np.abs(s)))  # ell = s + log sigmoid(s)
    e = np.exp(a - np.max(a, axis=-1, keepdims=True))
    p = e / np.sum(e, axis=-1, keepdims=True)  # sigsoftmax's weights
    return p * (u - np.sum(u * p, axis=-1, keepdims=True))  # the softmax backward: no ell'
    ### END SOLUTION
