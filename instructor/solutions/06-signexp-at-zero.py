"""Exercise 06: SignExp across a score of 0 (derivation 09).

Statement: 06-signexp-at-zero.md. Fill in the body of each function, then check
it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check signexp-at-zero 06-signexp-at-zero.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# With R = sum_{i != j} e^{|s_i|} and V = sum_{i != j} u_i sign(s_i) e^{|s_i|},
# F(x) = u . phi(s with s_j = x) = (u_j sign(x) e^{|x|} + V) / (R + e^{|x|}):
#
#     jump  J  = F(0+) - F(0-) = 2 u_j / (R + 1)                       (Z3)
#     slopes L+- = (u_j R -+ V) / (R + 1)^2                             (Z4)
#     central difference at s_j = 0:  J / (2 eps) + (L+ + L-) / 2 + O(eps)   (Z7)
#
# s_j = 0 adds e^0 = 1 to the full sum D = sum_i e^{|s_i|} and, with sign(0) = 0, nothing to
# the full V: so R = D - 1 and V are the same for every zero of the row, one pass for all of them.
### END SOLUTION
import numpy as np

### BEGIN SOLUTION


def _R_V(s, u):
    e = np.exp(np.abs(s))
    return np.sum(e) - 1.0, np.sum(u * np.sign(s) * e)
### END SOLUTION


def jump(s, u, j):
    """``J = F(0+) - F(0-)`` for the row ``s`` (1-D, ``s[j] == 0``) and cotangent ``u``; ``j`` an index
    of a zero, or an array of such indices (then one ``J`` per index, an array)."""
    ### BEGIN SOLUTION
    R, _ = _R_V(s, u)
    return 2.0 * u[j] / (R + 1.0)
    ### END SOLUTION


def slopes(s, u, j):
    """``(L+, L-)``, the one-sided slopes of ``F`` at 0: a tuple of two floats (of two arrays, one
    entry per index, when ``j`` is an array)."""
    ### BEGIN SOLUTION
    R, V = _R_V(s, u)
    return (u[j] * R - V) / (R + 1.0) ** 2, (u[j] * R + V) / (R + 1.0) ** 2
    ### END SOLUTION


def central_at_zero(s, u, j, eps):
    """Your first-order prediction of ``(F(eps) - F(-eps)) / (2 eps)`` (one per index of ``j``)."""
    ### BEGIN SOLUTION
    lp, lm = slopes(s, u, j)
    return jump(s, u, j) / (2.0 * eps) + 0.5 * (lp + lm)
    ### END SOLUTION
