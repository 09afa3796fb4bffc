"""Model solution of exercise 08: Delta_II for softplus-max, g = h = softplus.

rho = 1, ell = log softplus(s), ell' = sigmoid(s) / softplus(s), w = softmax(ell), so
Delta_II,i = w_i ell'_i (o_i - sum_j w_j o_j).
"""

import numpy as np


def delta_II(s, o):
    sp = np.logaddexp(0.0, s)  # softplus, no overflow
    w = sp / np.sum(sp, axis=-1, keepdims=True)
    dell = 0.5 * (1.0 + np.tanh(0.5 * s)) / sp  # sigmoid(s) / softplus(s)
    return w * dell * (o - np.sum(w * o, axis=-1, keepdims=True))
