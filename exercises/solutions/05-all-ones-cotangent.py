"""Model solution of exercise 05: a wrong sigsoftmax VJP that an all-ones cotangent passes.

Sigsoftmax has rho = 1, so its weights sum to 1 for every s, every column of
its Jacobian sums to 0, and the true VJP of u = 1 is exactly 0. The plain
softmax backward p (u - <u, p>), which forgets the factor ell' = 1 + sigmoid(-s),
is also exactly 0 for u = 1 (sum_j p_j = 1): the all-ones cotangent cannot tell
them apart. A random u can.
"""

import numpy as np


def wrong_vjp(s, u):
    a = s + np.minimum(s, 0.0) - np.log1p(np.exp(-np.abs(s)))  # ell = s + log sigmoid(s)
    e = np.exp(a - np.max(a, axis=-1, keepdims=True))
    p = e / np.sum(e, axis=-1, keepdims=True)  # sigsoftmax's weights
    return p * (u - np.sum(u * p, axis=-1, keepdims=True))  # the softmax backward: no ell'
