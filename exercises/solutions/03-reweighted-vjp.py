"""Model solution of exercise 03: the one VJP of phi = rho * softmax(ell) (Eqs. 01.R4/01.R5).

d phi_j / d s_k = [j = k] (rho'_j p_j + phi_j ell'_j) - phi_j p_k ell'_k, so
ds_k = sum_j u_j d phi_j / d s_k = u_k (rho'_k + rho_k ell'_k) p_k - p_k ell'_k <u, phi>.
"""

import numpy as np


def reweighted_vjp(p, rho, drho, dell, u):
    phi = rho * p
    c = np.sum(u * phi, axis=-1, keepdims=True)  # <u, phi>
    return u * (drho + rho * dell) * p - p * dell * c  # Eq. 01.R5
