"""Exercise 01: softmax's vector-Jacobian product.

Statement: 01-softmax-vjp.md. Fill in the body of the function, then check it,
in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check softmax-vjp 01-softmax-vjp.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# phi = softmax(s), J[i, j] = d phi_i / d s_j = phi_i ([i = j] - phi_j), so
# ds_j = sum_i u_i J[i, j] = phi_j (u_j - sum_i u_i phi_i).
### END SOLUTION
import numpy as np


def softmax_vjp(s, u):
    """``ds = u^T d softmax(s) / ds``, softmax along the last axis.

    Parameters
    ----------
    s, u : ndarray of float64, shape (..., n)
        Scores and the upstream gradient (cotangent).

    Returns
    -------
    ndarray, the shape of ``s``; finite for scores around 800.
    """
    ### BEGIN SOLUTION
    e = np.exp(s - np.max(s, axis=-1, keepdims=True))  # shift: no overflow
    phi = e / np.sum(e, axis=-1, keepdims=True)
    return phi * (u - np.sum(u * phi, axis=-1, keepdims=True))  # phi (u - <u, phi>)
    ### END SOLUTION
