"""Exercise 04: the Jacobian of phi = rho * softmax(ell) (Eq. 01.R3).

Statement: 04-jacobian.md. Fill in the body of the function, then check it, in
the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check jacobian 04-jacobian.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# J = diag(rho' p + phi ell') - phi (p ell')^T.
### END SOLUTION
import numpy as np


def jacobian(act, s):
    """``J[j, k] = d phi_j / d s_k`` of one row ``s`` (1-D, length n); an (n, n) array.

    ``act`` offers ``g, h, dg, dh, rho, drho, ell, dell, p, forward``, each
    called with ``s`` (``act.p(s)`` is ``softmax(ell(s))``), and nothing else.
    """
    ### BEGIN SOLUTION
    p = act.p(s)
    rho, drho, dell = act.rho(s), act.drho(s), act.dell(s)
    phi = rho * p
    return np.diag(drho * p + phi * dell) - np.outer(phi, p * dell)
    ### END SOLUTION
