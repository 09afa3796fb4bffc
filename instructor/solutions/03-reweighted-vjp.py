"""Exercise 03: the one VJP of phi = rho * softmax(ell) (Eqs. 01.R4/01.R5).

Statement: 03-reweighted-vjp.md. Fill in the body of the function, then check
it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check reweighted-vjp 03-reweighted-vjp.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# d phi_j / d s_k = [j = k] (rho'_j p_j + phi_j ell'_j) - phi_j p_k ell'_k, so
# ds_k = sum_j u_j d phi_j / d s_k = u_k (rho'_k + rho_k ell'_k) p_k - p_k ell'_k <u, phi>.
### END SOLUTION
import numpy as np


def reweighted_vjp(p, rho, drho, dell, u):
    """``ds`` of ``phi`` (``rho`` times ``p``) for the cotangent ``u``, rows along the last axis.

    Parameters
    ----------
    p, rho, drho, dell, u : ndarray of float64, one shape (..., n)
        ``p = softmax(ell(s))`` (0 at masked entries), ``rho(s)``, ``rho'(s)``,
        ``ell'(s)`` and the upstream gradient.

    Returns
    -------
    ndarray, the same shape.
    """
    ### BEGIN SOLUTION
    phi = rho * p
    c = np.sum(u * phi, axis=-1, keepdims=True)  # <u, phi>
    return u * (drho + rho * dell) * p - p * dell * c  # Eq. 01.R5
    ### END SOLUTION
