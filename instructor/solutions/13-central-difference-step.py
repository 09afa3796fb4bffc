"""Exercise 13: the best central-difference step (derivation 22, C6).

Statement: 13-central-difference-step.md. Fill in the body of each function,
then check it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check central-difference-step 13-central-difference-step.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# E(h) = M h^2 / 6 + kappa u S / h, u = 2^-53;  E'(h) = M h / 3 - kappa u S / h^2 = 0
# gives h* = (3 kappa u S / M)^(1/3).
### END SOLUTION
U = 2.0 ** -53  # the unit roundoff of float64


def error_bound(h, S, M, kappa=1.0):
    """``E(h)``, the bound on the error of a central difference with step ``h`` (positive floats)."""
    ### BEGIN SOLUTION
    return M * h * h / 6.0 + kappa * U * S / h
    ### END SOLUTION


def best_step(S, M, kappa=1.0):
    """The step ``h > 0`` that minimises ``error_bound(h, S, M, kappa)``."""
    ### BEGIN SOLUTION
    return (3.0 * kappa * U * S / M) ** (1.0 / 3.0)
    ### END SOLUTION
