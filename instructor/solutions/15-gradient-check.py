"""Exercise 15: build a gradient check (derivation 22; derivation 01, sections 4.1 and 5).

Statement: 15-gradient-check.md. Fill in the body of each function,
then check it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check gradient-check 15-gradient-check.py

Allowed: NumPy and Python's standard library.
"""

import numpy as np

U = 2.0 ** -53  # the unit roundoff of float64
KAPPA = 16.0  # the relative error of the weights, in units of U (derivation 22, section 6.2)
AGREES, BUG, SPIKE = 0, 1, 2  # the verdicts


def weights(name, s):
    """The weights ``phi`` of ``name`` ("softmax", "tanhmax" or "signexp") for one row of scores ``s``."""
    ### BEGIN SOLUTION
    if name == "softmax":
        e = np.exp(s - np.max(s))
        return e / np.sum(e)
    if name == "tanhmax":  # tanh(s) * softmax(log cosh s) = sinh(s) / sum cosh(s)
        return np.sinh(s) / np.sum(np.cosh(s))
    e = np.exp(np.abs(s) - np.max(np.abs(s)))  # signexp: sign(s) e^|s| / sum e^|s|
    return np.sign(s) * e / np.sum(e)
    ### END SOLUTION


def gradient_check(name, s, jac, seed):
    """Check the VJP ``u -> u @ jac`` of ``weights(name, .)`` at ``s``: AGREES, BUG or SPIKE."""
    ### BEGIN SOLUTION
    u = np.random.default_rng(seed).standard_normal(s.shape)  # a random cotangent, never all ones
    a = u @ jac  # the candidate VJP
    S = np.sum(np.abs(u) * np.abs(weights(name, s)))  # the size of the values, Eq. 22.C5
    M = np.max(np.abs(u))  # a bound on |F'''| here (the statement)
    h = (3.0 * KAPPA * U * S / M) ** (1.0 / 3.0)  # the best step, Eq. 22.C6

    def central(i, step):  # D(h) of Eq. 22.C1 along e_i, divided by the step actually taken
        sp, sm = s.copy(), s.copy()
        sp[i] += step
        sm[i] -= step
        fp, fm = weights(name, sp), weights(name, sm)
        taken = (sp[i] - sm[i]) / 2.0
        size = np.sum(np.abs(u) * np.maximum(np.abs(fp), np.abs(fm)))
        return np.sum(u * (fp - fm)) / (2.0 * taken), size, taken

    bug = spike = False
    for i in range(s.size):
        d, size, taken = central(i, h)
        tol = M * taken**2 / 6.0 + KAPPA * U * size / taken  # truncation + rounding, Eqs. 22.C3 + 22.C5
        if abs(d - a[i]) > tol:  # a disagreement: a bug, or the spike of a jump?
            d2, _, _ = central(i, 2.0 * h)
            # a jump: D(h) ~ J/2h, so D(2h) - D(h) is half the disagreement; a bug: D(2h) = D(h) + O(h^2)
            jump = abs(d2 - d) > abs(d - a[i]) / 4.0
            spike, bug = spike or jump, bug or not jump
    return BUG if bug else SPIKE if spike else AGREES
    ### END SOLUTION
