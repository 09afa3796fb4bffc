"""Exercise 07: Proposition 1 for TanhMax (Eq. 7, sign corrected).

Statement: 07-tanhmax-velocity.md. Fill in the body of the function, then check
it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check tanhmax-velocity 07-tanhmax-velocity.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# ds_i/dtau = -Delta_I,i Delta'_II,i c,  Delta'_II,i = w~_i o_i - w^_i sum_j w^_j o_j,
# w~ = cosh s / sum cosh s = softmax(log cosh s),  w^ = tanh(s) w~  (TanhMax Eqs. 7-9).
### END SOLUTION
import numpy as np


def velocity(s, o, c, delta_I):
    """``ds/dtau`` of every score: ``s, o, delta_I`` of shape (N, n), ``c`` of shape (N,); (N, n).

    Finite for scores beyond 710.5, where cosh overflows in float64.
    """
    ### BEGIN SOLUTION
    a = np.abs(s)
    l = a + np.log1p(np.exp(-2.0 * a)) - float(np.log(2.0))  # log cosh s, no overflow
    e = np.exp(l - np.max(l, axis=-1, keepdims=True))
    w_tilde = e / np.sum(e, axis=-1, keepdims=True)
    w_hat = np.tanh(s) * w_tilde
    d2 = w_tilde * o - w_hat * np.sum(w_hat * o, axis=-1, keepdims=True)
    return -delta_I * d2 * c[:, None]
    ### END SOLUTION
