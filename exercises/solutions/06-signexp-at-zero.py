"""Model solution of exercise 06: SignExp across a score of 0 (derivation 09).

With R = sum_{i != j} e^{|s_i|} and V = sum_{i != j} u_i sign(s_i) e^{|s_i|},
F(x) = u . phi(s with s_j = x) = (u_j sign(x) e^{|x|} + V) / (R + e^{|x|}):

    jump  J  = F(0+) - F(0-) = 2 u_j / (R + 1)                       (Z3)
    slopes L+- = (u_j R -+ V) / (R + 1)^2                             (Z4)
    central difference at s_j = 0:  J / (2 eps) + (L+ + L-) / 2 + O(eps)   (Z7)
"""

import numpy as np


def _R_V(s, u, j):
    others = np.arange(len(s)) != j
    e = np.exp(np.abs(s[others]))
    return np.sum(e), np.sum(u[others] * np.sign(s[others]) * e)


def jump(s, u, j):
    R, _ = _R_V(s, u, j)
    return 2.0 * u[j] / (R + 1.0)


def slopes(s, u, j):
    R, V = _R_V(s, u, j)
    return (u[j] * R - V) / (R + 1.0) ** 2, (u[j] * R + V) / (R + 1.0) ** 2


def central_at_zero(s, u, j, eps):
    lp, lm = slopes(s, u, j)
    return jump(s, u, j) / (2.0 * eps) + 0.5 * (lp + lm)
