"""Model solution of exercise 01: softmax's VJP.

phi = softmax(s), J[i, j] = d phi_i / d s_j = phi_i ([i = j] - phi_j), so
ds_j = sum_i u_i J[i, j] = phi_j (u_j - sum_i u_i phi_i).
"""

import numpy as np


def softmax_vjp(s, u):
    e = np.exp(s - np.max(s, axis=-1, keepdims=True))  # shift: no overflow
    phi = e / np.sum(e, axis=-1, keepdims=True)
    return phi * (u - np.sum(u * phi, axis=-1, keepdims=True))  # phi (u - <u, phi>)
