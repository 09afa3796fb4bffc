"""Model solution of exercise 04: the Jacobian of phi = rho * softmax(ell) (Eq. 01.R3).

J = diag(rho' p + phi ell') - phi (p ell')^T.
"""

import numpy as np


def jacobian(act, s):
    p = act.p(s)
    rho, drho, dell = act.rho(s), act.drho(s), act.dell(s)
    phi = rho * p
    return np.diag(drho * p + phi * dell) - np.outer(phi, p * dell)
